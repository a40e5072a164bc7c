//! The mapper: resolves a layout request for a problem on a target into a
//! checked plan, or refuses it with a reason. Nothing is scored before it
//! is legal.

use crate::layout::{vector_access, Layout, TreeLevels, VALID_PACKS};
use crate::shape::Shape;
use crate::target::Target;
use lanefold_ir::{Analysis, DType, NormForm, Operator, OperatorOptions, Program};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Registers a worker needs besides its private slots and load staging
/// (addresses, loop state, reduction scratch): an allowance.
const BASE_REGISTERS: u32 = 32;

/// Registers besides private slots: the base plus one 32-bit register per
/// word of a pack being loaded.
fn overhead_registers(pack: u32, dtype: DType) -> u32 {
    BASE_REGISTERS + (pack * dtype.size_bytes() as u32).div_ceil(4)
}
/// Elements per worker the automatic mapping aims for.
const AUTO_ELEMENTS_PER_WORKER: usize = 8;
/// Threads per group the automatic mapping aims for when packing rows.
const AUTO_GROUP_THREADS: u32 = 256;

/// A program applied to a shape in a storage dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub program: Program,
    pub dtype: DType,
    pub shape: Shape,
}

impl Problem {
    pub fn operator(op: Operator, options: OperatorOptions, dtype: DType, shape: Shape) -> Self {
        Problem {
            program: op.program(options),
            dtype,
            shape,
        }
    }

    /// The named operator, when the program is one of ours.
    pub fn operator_kind(&self) -> Option<Operator> {
        self.program.name.parse().ok()
    }

    /// The problem whose program the plans of `request` run: rewritten
    /// where the request asks (one-pass moments, the online normalizer),
    /// else as it is.
    pub fn as_requested(&self, request: &LayoutRequest) -> Cow<'_, Problem> {
        // The fused output's per-row rounding is only hidden by 16-bit
        // outputs' (see `NormForm::fused_output`).
        let fused_output = request.fused_output && self.dtype.size_bytes() == 2;
        let norm_form = request.one_pass_moments || fused_output || request.cold_path;
        if !norm_form && !request.online_normalizer {
            return Cow::Borrowed(self);
        }
        let mut program = self.program.clone();
        if norm_form {
            let options = OperatorOptions {
                weight: program.input("weight").is_some(),
                bias: program.input("bias").is_some(),
            };
            let form = NormForm {
                one_pass_moments: request.one_pass_moments,
                fused_output,
                cold_path: request.cold_path,
            };
            let one_pass = self
                .operator_kind()
                .and_then(|op| op.program_norm_form(options, form));
            if let Some(p) = one_pass {
                program = if self.program.reassociation {
                    p
                } else {
                    p.exact()
                };
            }
        }
        if request.online_normalizer {
            if let Some(p) = program.with_online_normalizer() {
                program = p;
            }
        }
        Cow::Owned(Problem {
            program,
            ..self.clone()
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReductionOrder {
    /// Per-worker recurrences, then the butterfly tree: needs permission.
    Tree,
    /// Sequential element order (W = 1): always allowed.
    Sequential,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResidencyRequest {
    #[default]
    Auto,
    Registers,
    Stream,
}

/// Where tiles needed in several phases live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Residency {
    /// In each worker's private slots (registers): memory is read once.
    Registers,
    /// Re-read from memory in each phase that needs them.
    Stream,
}

/// What the user asks for; 0 means automatic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayoutRequest {
    pub workers: u32,
    pub pack: u32,
    pub unroll: u32,
    pub rows_per_group: u32,
    /// None: the program's own permission decides (tree when permitted).
    pub order: Option<ReductionOrder>,
    pub residency: ResidencyRequest,
    /// Only plans whose per-row arithmetic depends on the row length and
    /// dtype alone, never on how many rows run together.
    #[serde(default)]
    pub batch_invariant: bool,
    /// How automatic W and V are chosen. Files written before the model
    /// mapping existed meant the seed's.
    #[serde(default = "MapperPolicy::seed")]
    pub mapper: MapperPolicy,
    /// Mark read-once row tiles and row outputs evict-first in the caches
    /// (`ld/st.global.cs`). A cache policy only: results are the same bits.
    #[serde(default)]
    pub streaming_hints: bool,
    /// Load per-column inputs (weight, bias) in the first tile phase, with
    /// the row tile, and keep them in private slots, instead of after the
    /// reduction that precedes their use: the load leaves the critical path
    /// at the cost of registers. Applied only where they fit; same bits.
    #[serde(default)]
    pub hoist_columns: bool,
    /// Threads of each group when a row spans a cluster (0: the target's).
    /// Smaller groups let two of a long row's groups share a multiprocessor
    /// and overlap one's loads with the other's reduction and stores.
    #[serde(default)]
    pub cluster_group_threads: u32,
    /// Groups per multiprocessor the kernel promises to allow, declared as
    /// `__launch_bounds__(threads, groups)` so the compiler must fit that
    /// many (capping registers, spilling if it cannot) instead of taking
    /// a few registers more and one group per multiprocessor fewer (0: no
    /// promise). Arithmetic unchanged: same bits.
    #[serde(default)]
    pub occupancy: u32,
    /// In a streamed plan, load a row tile that a later phase reads again
    /// with L2 evict-last priority, and its last re-read with evict-first,
    /// so re-reads stay L2 hits under the output stream; columns (weight,
    /// bias) are loaded evict-last too. Torch.compile's looped reductions
    /// do the same. A cache policy only: same bits; no effect on plans
    /// that re-read nothing.
    #[serde(default)]
    pub reread_hints: bool,
    /// Load per-column inputs (weight, bias), which every row reads again,
    /// with L2 evict-last priority in any plan, register plans included,
    /// so the stream of rows does not push them out of L2 between one row
    /// and the next. A cache policy only: same bits; no effect on programs
    /// without columns.
    #[serde(default)]
    pub keep_columns: bool,
    /// A row spanning a cluster: each group starts an asynchronous copy
    /// of its slice of the per-column inputs (weight, bias) into shared
    /// memory before it loads the row, so the normalize phase reads them
    /// from shared memory instead of waiting on L2 after the reduction.
    /// Applied only to cluster register plans with vector packs and no
    /// partial pack, where the slices fit; same bits.
    #[serde(default)]
    pub stage_columns: bool,
    /// 16-bit inputs held in registers: keep each resident tile as the
    /// loaded words, two values per 32-bit register, widening at each use,
    /// instead of one f32 per register. Halves the registers a resident
    /// tile takes; widening is exact, so results are the same bits.
    /// Applied only to register plans with vector packs and no partial
    /// pack; no effect on f32.
    #[serde(default)]
    pub pack_resident: bool,
    /// Register plans of residual_layernorm: keep `h = round(x + residual)`
    /// resident (it is exactly a storage value) instead of x and the
    /// residual, so later phases read h from one tile of slots instead of
    /// two and add nothing again. With packed tiles, h's 16-bit words are
    /// the slots. The same values in the same order: same bits. No effect
    /// on streamed plans or on programs without such a tile.
    #[serde(default)]
    pub rounded_resident: bool,
    /// Rows spanning a cluster: the barrier before exit arrives relaxed
    /// (no release): it only has to keep each group's shared memory alive
    /// until the others' remote reads are done, and those values are in
    /// registers before they arrive. The default release arrive makes each
    /// group wait for its row's stores to be acknowledged (`MEMBAR.ALL.GPU`
    /// in the SASS) before it may leave. Same bits.
    #[serde(default)]
    pub relaxed_cluster_exit: bool,
    /// Rows spanning a cluster: each group pushes its partial of every
    /// reduction into every group's shared memory with `st.async`, which
    /// completes a transaction on the receiver's `mbarrier`, instead of
    /// writing its own slot and meeting the others at a cluster barrier
    /// (whose release arrive is a GPU-scope `MEMBAR` in the SASS). One
    /// relaxed cluster barrier, started before the row loads, publishes
    /// the `mbarrier`s; the barrier before exit arrives relaxed. Each group
    /// combines the partials in rank order, as before: same bits.
    #[serde(default)]
    pub push_cluster_reduce: bool,
    /// Rows spanning a cluster, pushed: a persistent grid of as many
    /// clusters as fit at once, each looping over rows `c, c + clusters,
    /// ...`, so staged columns (`stage_columns`) are copied into shared
    /// memory once per group instead of once per row. The pushed partials
    /// alternate between two sets of slots and `mbarrier`s, row by row.
    /// Same bits.
    #[serde(default)]
    pub persistent_clusters: bool,
    /// Accumulate `sum(exp(x - max))` with its maximum in one pass (an
    /// online normalizer: softmax and cross-entropy need one reduction tree
    /// fewer, and streamed plans one re-read fewer). Changes rounding, not
    /// the value; no effect on programs without that sum.
    #[serde(default)]
    pub online_normalizer: bool,
    /// layernorm and residual_layernorm: both moments summed in one pass
    /// about the row's first element ([`Operator::program_one_pass_moments`]):
    /// two phases instead of three. Changes rounding, not the value; no
    /// effect on other operators.
    #[serde(default)]
    pub one_pass_moments: bool,
    /// layernorm and residual_layernorm on 16-bit rows: the output as
    /// `h * rstd + (-(mean * rstd))`, one fused multiply-add per element
    /// instead of a subtraction and a multiply ([`NormForm::fused_output`]).
    /// Changes rounding, not the value; f32 rows, whose tolerance would
    /// see the per-row rounding of `mean * rstd` on offset rows, and other
    /// operators are unaffected.
    #[serde(default)]
    pub fused_output: bool,
    /// rmsnorm, layernorm and residual_layernorm: rows the fast statistics
    /// get wrong (a sum of squares that overflows, infinities, NaN, a mean
    /// far beyond the spread) take a rare cold path that computes the row
    /// again in scaled form ([`NormForm::cold_path`]). Same results on
    /// every other row; off by default until measured neutral on the
    /// device (it moves some kernels' register counts).
    #[serde(default)]
    pub cold_path: bool,
    /// Register plans of one group per row: a persistent grid, each group
    /// copying its next row into shared memory (`cp.async.bulk`,
    /// completing an `mbarrier`) while it reduces and writes the current
    /// one, so a row's loads are in flight during the previous row's
    /// reduction and stores. Applied where the program reads one row input
    /// and the whole row fits in shared memory; with `persistent_clusters`
    /// each group of the cluster copies its own share of the next row (one
    /// copy per chunk). The same arithmetic, so the same bits.
    #[serde(default)]
    pub prefetch_rows: bool,
    /// Load row tiles with `L1::no_allocate` and ask the driver for the
    /// largest L1 carve-out, so L1 keeps the per-column inputs (weight,
    /// bias) that every row reads again instead of the rows streaming
    /// through it. A cache policy only: same bits; no effect on programs
    /// without columns.
    #[serde(default)]
    pub l1_columns: bool,
    /// Leave each pack's address to the compiler: no opaque worker index
    /// (see [`Plan::folded_pack_addresses`]). Same arithmetic, same bits.
    #[serde(default)]
    pub unfold_pack_addresses: bool,
    /// Load each chunk's columns (weight, bias) after the chunk before it
    /// has stored its outputs, by loads the compiler may not move above
    /// those stores. The compiler otherwise issues every column load of a
    /// register plan's last phase at once, holding all of them in
    /// registers (layernorm bf16 W=512: 128 registers, one group per
    /// multiprocessor). A scheduling choice only: same bits; vector packs
    /// only; no effect on programs without columns.
    #[serde(default)]
    pub ordered_columns: bool,
    /// Issue hinted loads (streaming, re-read, kept or L1-bypassing) without
    /// `.nc`, so ptxas keeps each below the stores before it, as lanefold's
    /// older kernels did: fewer loads in flight in a re-read
    /// phase, and fewer registers. A scheduling choice only: same bits.
    /// Not part of the plan's description or the kernel's name (the
    /// source, whose hash every result records, tells the two apart).
    #[serde(default)]
    pub ordered_hinted_loads: bool,
    /// At most this many groups per multiprocessor (0: no cap): each group
    /// takes a share of shared memory that leaves no room for one more,
    /// and the kernel asks the driver for the smallest carve-out holding
    /// that many, so the rest of the 256 KiB stays L1. For streamed plans
    /// whose re-reads hit L1 only while few rows share it. A launch policy
    /// only: same bits.
    #[serde(default)]
    pub occupancy_cap: u32,
    /// In a streamed plan whose row is one unrolled loop of at most 8
    /// packs a worker, issue every pack's loads of a phase before
    /// computing on any, as Triton's block loads do, so a phase's loads
    /// are all in flight at once whatever registers the compiler would
    /// otherwise save. A scheduling choice only: same bits.
    #[serde(default)]
    pub batch_loads: bool,
    /// Register plans with column inputs: load the weight and bias of the
    /// first this many chunks of the output phase before the reduction
    /// that precedes it, so their L2 round trip overlaps the reduction's
    /// exchange (a cluster's wait for its slowest group) instead of
    /// following it. Costs registers for those chunks' columns. A
    /// scheduling choice only: same bits (0: off).
    #[serde(default)]
    pub early_columns: u32,
    /// Register plans of one row input: hold the row's last this many
    /// chunks in shared memory instead of registers, copied there by each
    /// worker's own `cp.async` as the kernel starts (no registers while in
    /// flight) and read back by that worker in every phase, so a group
    /// needs fewer registers and more groups fit on a multiprocessor. A
    /// placement choice only: same bits (0: off).
    #[serde(default)]
    pub shared_chunks: u32,
    /// Register plans of one row per group: as a group starts its row, it
    /// asks L2 to fetch its share of the row this many rows ahead
    /// (`cp.async.bulk.prefetch.L2`, one instruction per chunk, no
    /// registers held and no shared memory), so that row's DRAM reads are
    /// in flight before its group starts, during other rows' exchanges and
    /// outputs, and the group that takes it finds it in L2. About the rows
    /// resident at once is the distance that prefetches the next rows to
    /// start. A cache hint only: same bits (0: off).
    #[serde(default)]
    pub l2_prefetch_rows: u32,
}

impl LayoutRequest {
    /// An automatic request with the arithmetic variants that paired H200
    /// measurements showed faster for this operator and row length; every
    /// other request as given, so an explicit layout (a search candidate,
    /// a frozen replay) keeps its recorded arithmetic. The measurements
    /// below are paired benches whose directories are in git history at
    /// 2d680226 unless named.
    ///
    /// - cross_entropy on rows over 32768: the online normalizer. The row
    ///   is then read once with nothing held resident, so one streaming
    ///   group replaces a cluster of register groups: 4096x131072 f32
    ///   556 -> 473 µs, bf16 357 -> 244; 1024x262144 f32 366 -> 248, bf16
    ///   257 -> 133. On rows of 32768 and less the register plan already
    ///   reads once and bf16 became 10-13% slower (the extra exp work).
    /// - layernorm on rows of 131072 and more: one-pass moments (bf16
    ///   4096x131072 882 -> 703 µs; f32 and the shorter rows within 4%
    ///   either way then, residual_layernorm included). f32 on the pushed
    ///   cluster: 4096x131072 1149 -> 1132 µs, 1024x262144 635 -> 633 (A/A
    ///   1128 and 629). Rows of 32768 (paired with all three peers, 2
    ///   rounds): f32 283.7 -> 278.0 µs, bf16 149.9 -> 143.5.
    /// - rmsnorm bf16 on rows of 262144 and more: the weight staged in
    ///   shared memory by `cp.async` (1024x262144 370 -> 349; 4096x131072
    ///   588 -> 828, so not there). f32 pushes unstaged (below).
    /// - 16-bit rows of 131072 and more: resident tiles packed two values
    ///   per register (every operator holding a tile, both long
    ///   shapes: 1.01-1.25x; softmax 4096x131072 691 -> 645 µs), and
    ///   softmax rows of 32768 and more: its one-group register plan on
    ///   4096x32768 drops from 124 to 64 registers and beats the streamed
    ///   plan that replaced it (150.4 -> 131.7 µs, 4.08 TB/s). Not on
    ///   shorter rows, where it was not measured wide enough and raised
    ///   residual_layernorm 32768x4096 from 66 to 79 registers; not for
    ///   rmsnorm and layernorm on 4096x32768, where the one-group plan
    ///   keeps 110-123 registers (136.4 and 149.1 µs against 128.5 streamed
    ///   and 149.6).
    /// - rows of 131072 and more, which span a cluster: every operator's
    ///   groups push their partials with `st.async` (softmax and the bf16
    ///   norms 1.10-1.34x against the fenced exit; softmax f32 4096x131072
    ///   1134 -> 1034 µs, bf16 1024x262144 347 -> 260). Layernorm f32
    ///   pushes without a promise of three groups (104 registers, no
    ///   spill; with it, 104 bytes spilled): 4096x131072 1223 -> 1152 µs,
    ///   1024x262144 681 -> 633. rmsnorm f32 pushes without the staged
    ///   weight: 1024x262144 576 -> 561, 4096x131072 1094 -> 1050.
    ///   residual_layernorm pushes on every cluster plan from rows of
    ///   32768 (f32 4096x32768 651 -> 522 µs; the long rows 1.22-1.37x),
    ///   cross_entropy 1024x262144 too (1.02-1.04x; on 4096x131072 it
    ///   runs in one group, no cluster).
    /// - layernorm on rows of 4096-8192 larger than the L2: one-pass
    ///   moments, for the two-pass streamed plan of
    ///   [`whole_row_stream_instead`].
    /// - fewer rows than multiprocessors, layernorm and residual_layernorm:
    ///   one-pass moments, one reduction phase instead of two on a
    ///   latency-bound row (1.02-1.13x on all 24 cases of 1x127, 17x257
    ///   and 1-64 x 4096 in both dtypes, paired in 3 rounds).
    /// - layernorm f32 on rows of 131072 and more: the first chunk's
    ///   weight and bias loaded before the cluster's exchange (paired in 3
    ///   rounds: 4096x131072 1.009-1.016x, 1024x262144 1.019-1.021x; not
    ///   bf16, where the second group on each SM already covers the wait,
    ///   nor rmsnorm f32, whose registers went 80 -> 106).
    pub fn with_measured_variants(&self, problem: &Problem, target: &Target) -> LayoutRequest {
        if target.name != "h200" || !self.model_chooses_layout() || !problem.program.reassociation {
            return *self;
        }
        let n = problem.shape.n;
        let mut request = *self;
        let packs_from = match problem.operator_kind() {
            Some(Operator::Softmax) => PACKED_SOFTMAX_MIN_N,
            Some(Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm) => {
                PACK_RESIDENT_MIN_N
            }
            _ => usize::MAX,
        };
        if problem.dtype.size_bytes() == 2 && n >= packs_from {
            request.pack_resident = true;
        }
        if problem.dtype.size_bytes() == 2
            && problem.operator_kind() == Some(Operator::Layernorm)
            && PACKED_LAYERNORM_N.contains(&n)
        {
            request.pack_resident = true;
            request.ordered_columns = true;
        }
        match problem.operator_kind() {
            Some(Operator::CrossEntropy) if n > ONLINE_NORMALIZER_MIN_N => {
                request.online_normalizer = true;
            }
            Some(Operator::Layernorm) if n >= ONE_PASS_MOMENTS_MIN_N => {
                request.one_pass_moments = true;
                if problem.dtype == DType::F32 && n >= EARLY_COLUMNS_MIN_N {
                    request.early_columns = 1;
                }
            }
            // Streamed in two passes, as Inductor's Welford loop (see
            // [`whole_row_stream_instead`]).
            // The two rules below depend on the row count, so a
            // batch-invariant request skips them: one-pass moments changes
            // the bits (regression test
            // `regression_batch_invariant_norms_take_one_arithmetic_at_every_row_count`).
            Some(Operator::Layernorm) if !self.batch_invariant && streams_whole_row(problem) => {
                request.one_pass_moments = true;
            }
            // Few rows: each row's time is its latency, and one reduction
            // phase fewer shows (paired).
            Some(Operator::Layernorm | Operator::ResidualLayernorm)
                if !self.batch_invariant
                    && problem.shape.rows < target.multiprocessors as usize =>
            {
                request.one_pass_moments = true;
            }
            Some(Operator::Rmsnorm) if stages_rmsnorm_weight(problem.dtype, n) => {
                request.stage_columns = true;
            }
            _ => {}
        }
        let pushes_from = match problem.operator_kind() {
            Some(Operator::ResidualLayernorm) => RESIDUAL_PUSH_MIN_N,
            Some(
                Operator::Softmax
                | Operator::CrossEntropy
                | Operator::Layernorm
                | Operator::Rmsnorm,
            ) => PUSH_MIN_N,
            _ => usize::MAX,
        };
        if n >= pushes_from {
            request.push_cluster_reduce = true;
        }
        // The rules that replace the model's pick skip batch-invariant
        // requests, and these variants may change the arithmetic.
        if let Some(entry) =
            crate::tuned::lookup(&target.name, problem).filter(|_| !self.batch_invariant)
        {
            entry.add_variants(&mut request);
        }
        request
    }

    /// Does the cost model choose W and V (the automatic mapping), so that
    /// rules beside it may apply?
    pub fn model_chooses_layout(&self) -> bool {
        self.mapper == MapperPolicy::Model && self.workers == 0 && self.pack == 0
    }

    /// Today's default request with this one's load and launch policies
    /// (hints, hoisting, occupancy) and nothing of its layout: what a user
    /// asking for the same policies gets from the automatic mapping.
    pub fn automatic_with_policies(&self) -> LayoutRequest {
        LayoutRequest {
            streaming_hints: self.streaming_hints,
            hoist_columns: self.hoist_columns,
            occupancy: self.occupancy,
            reread_hints: self.reread_hints,
            keep_columns: self.keep_columns,
            stage_columns: self.stage_columns,
            pack_resident: self.pack_resident,
            rounded_resident: self.rounded_resident,
            relaxed_cluster_exit: self.relaxed_cluster_exit,
            push_cluster_reduce: self.push_cluster_reduce,
            persistent_clusters: self.persistent_clusters,
            online_normalizer: self.online_normalizer,
            one_pass_moments: self.one_pass_moments,
            fused_output: self.fused_output,
            cold_path: self.cold_path,
            prefetch_rows: self.prefetch_rows,
            l1_columns: self.l1_columns,
            unfold_pack_addresses: self.unfold_pack_addresses,
            ordered_columns: self.ordered_columns,
            ordered_hinted_loads: self.ordered_hinted_loads,
            occupancy_cap: self.occupancy_cap,
            batch_loads: self.batch_loads,
            early_columns: self.early_columns,
            shared_chunks: self.shared_chunks,
            ..Default::default()
        }
    }
}

/// How the mapper fills in an automatic W and V.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MapperPolicy {
    /// The seed's reference: V = 1 and about 8 elements per worker.
    Seed,
    /// The legal (W, V) with the lowest cost-model prediction, over W a
    /// power of two from 8 to the target's widest row and V in 1, 2, 4, 8.
    /// The default: on the H200 it reached 0.945-1.05x of the searched
    /// winners, where the seed's V=1 lost up to 2x.
    #[default]
    Model,
}

impl MapperPolicy {
    fn seed() -> Self {
        MapperPolicy::Seed
    }
}

/// Rows the model mapping assumes when asked for batch invariance, so its
/// choice depends on N and dtype alone.
const CANONICAL_ROWS: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("invalid width: {0}")]
    InvalidWidth(String),
    #[error("missing reassociation permission: {0}")]
    MissingPermission(String),
    #[error("resource overflow: {resource} needs {needed}, limit {limit} ({detail})")]
    ResourceOverflow {
        resource: &'static str,
        needed: u64,
        limit: u64,
        detail: String,
    },
    #[error("reduction layout asked of an element-only program: {0}")]
    ElementOnly(String),
    #[error("program does not verify: {0}")]
    Unverified(String),
    #[error("not batch invariant: {0}")]
    BatchVariant(String),
}

/// What decides a row's floating-point results ([`Plan::arithmetic_key`]):
/// two plans with equal keys give the same bits for every row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArithmeticKey {
    pub workers: u32,
    pub pack: u32,
    pub tree: TreeLevels,
    pub order: ReductionOrder,
    pub one_pass_moments: bool,
    pub online_normalizer: bool,
    pub fused_output: bool,
    pub cold_path: bool,
}

/// Groups per multiprocessor held to `groups` through shared memory
/// ([`LayoutRequest::occupancy_cap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OccupancyCap {
    pub groups: u32,
    /// The carve-out preference, percent of the largest, that the kernel
    /// asks the driver for.
    pub carveout_percent: u32,
}

/// A legal, fully resolved plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub problem: Problem,
    pub analysis: Analysis,
    pub layout: Layout,
    pub residency: Residency,
    pub order: ReductionOrder,
    pub tree: TreeLevels,
    pub threads_per_group: u32,
    pub groups_per_row: u32,
    /// Groups launched in total (clusters count each of their groups).
    pub groups: u64,
    pub slot_bound: usize,
    pub resident_slots: usize,
    pub registers: u32,
    pub shared_bytes: u32,
    pub target: String,
    pub batch_invariant: bool,
    /// See [`LayoutRequest::streaming_hints`].
    pub streaming_hints: bool,
    /// Column loads moved into the first tile phase (see
    /// [`LayoutRequest::hoist_columns`]); false where they did not fit.
    pub hoisted_columns: bool,
    /// Groups per multiprocessor the kernel must allow (see
    /// [`LayoutRequest::occupancy`]); None: no such promise.
    pub min_groups_per_multiprocessor: Option<u32>,
    /// See [`LayoutRequest::reread_hints`]; false where nothing is re-read.
    pub reread_hints: bool,
    /// See [`LayoutRequest::keep_columns`]; false without column inputs.
    pub keep_columns: bool,
    /// See [`LayoutRequest::l1_columns`]; false without column inputs.
    pub l1_columns: bool,
    /// The worker index is opaque to the compiler, so that each pack's
    /// address is one per-thread base plus an immediate. Known
    /// to be below the group size, `w` has bits disjoint from every pack's
    /// offset, and the compiler otherwise merges the two by OR and builds
    /// a 64-bit address per pack. Register plans fold (layernorm
    /// 4096x32768 f32 280.1 -> 269.9 µs); streamed plans only under an
    /// occupancy cap (their re-reads miss L1 when more groups share an SM,
    /// rmsnorm f32 4096x32768 265.1 -> 298.8 µs). Not on a row of one
    /// scalar pack per worker, where there is nothing to fold and the
    /// opaque index only costs (the twelve 1x127 defaults ran
    /// 1.015-1.095x faster unfolded; one vector pack per worker, bf16 rows
    /// of 4096 at W=512, ran alike, 0.996-1.002x, and stays folded).
    pub folded_pack_addresses: bool,
    /// See [`LayoutRequest::ordered_columns`]; false without column
    /// inputs or vector packs.
    pub ordered_columns: bool,
    /// See [`LayoutRequest::ordered_hinted_loads`].
    pub ordered_hinted_loads: bool,
    /// See [`LayoutRequest::occupancy_cap`]; None where there is no cap or
    /// the threads alone allow no more groups.
    pub occupancy_cap: Option<OccupancyCap>,
    /// See [`LayoutRequest::batch_loads`]; false where it does not apply.
    pub batched_loads: bool,
    /// See [`LayoutRequest::early_columns`]: chunks whose columns load
    /// before the preceding reduction, at most the row's full chunks; 0
    /// where it does not apply (no columns, no vector packs, not a
    /// register plan, or the columns staged, hoisted or ordered).
    pub early_columns: u32,
    /// Where the row's last chunks sit in shared memory (see
    /// [`LayoutRequest::shared_chunks`]); None where that does not apply.
    pub shared_chunks: Option<SharedChunks>,
    /// Where column slices are staged in shared memory (see
    /// [`LayoutRequest::stage_columns`]); None where that does not apply.
    pub column_stage: Option<ColumnStage>,
    /// Resident tiles kept as packed 16-bit words (see
    /// [`LayoutRequest::pack_resident`]); false where that does not apply.
    pub packed_resident: bool,
    /// The rounded tile h kept resident instead of its operands (see
    /// [`LayoutRequest::rounded_resident`]); false where that does not
    /// apply.
    pub rounded_resident: bool,
    /// See [`LayoutRequest::relaxed_cluster_exit`]; false without a cluster.
    pub relaxed_cluster_exit: bool,
    /// See [`LayoutRequest::push_cluster_reduce`]; false without a cluster.
    pub pushed_cluster_reduce: bool,
    /// See [`LayoutRequest::persistent_clusters`]; false where it does not
    /// apply (one row per cluster, registers, pushed).
    pub persistent_clusters: bool,
    /// Rows prefetched into shared memory by a persistent grid (see
    /// [`LayoutRequest::prefetch_rows`]); None where that does not apply.
    pub row_prefetch: Option<RowPrefetch>,
    /// How many rows ahead each group asks L2 to fetch its share (see
    /// [`LayoutRequest::l2_prefetch_rows`]); 0 where that does not apply.
    pub l2_prefetch_rows: u32,
    /// `registers` counts packed resident tiles two values a register, as
    /// an explicit register request budgets them; false where the
    /// estimate is of unpacked tiles (an automatic residency, so that
    /// packing never moves a layout) or nothing is packed.
    pub packed_register_estimate: bool,
}

/// A persistent grid whose groups each copy their next row into shared
/// memory while they work on the current one
/// ([`LayoutRequest::prefetch_rows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowPrefetch {
    /// Groups launched; group `b` takes rows `b`, `b + launched`, ...
    /// (persistent clusters: whole clusters, an estimate the runtime
    /// replaces by the driver's count of resident clusters).
    pub launched_groups: u32,
    /// Byte offset of the row buffer in shared memory (16-byte aligned,
    /// after the reduction slots).
    pub buffer_offset: u32,
    /// Bytes of the group's share of one row in storage format (a multiple
    /// of 16): the whole row, or a cluster group's chunks of `threads x V`.
    pub row_bytes: u32,
}

impl RowPrefetch {
    /// Byte offset of the buffer's `mbarrier`, after the row.
    pub fn barrier_offset(&self) -> u32 {
        self.buffer_offset + self.row_bytes
    }

    /// Shared memory the group needs: slots, row buffer, `mbarrier`.
    pub fn total_bytes(&self) -> u32 {
        self.barrier_offset() + 16
    }
}

impl Plan {
    /// Does this plan leave its pack addresses to the compiler where the
    /// default would fold them ([`LayoutRequest::unfold_pack_addresses`])?
    pub fn unfolded_pack_addresses(&self) -> bool {
        !self.folded_pack_addresses && folds_by_default(self.residency, self.occupancy_cap)
    }

    /// Are layernorm's moments summed in one pass (see
    /// [`LayoutRequest::one_pass_moments`])?
    pub fn one_pass_moments(&self) -> bool {
        self.problem
            .program
            .body
            .iter()
            .any(|i| matches!(i, lanefold_ir::Instr::RowFirst { .. }))
    }

    /// Is a `sum(exp(x - max))` accumulated with its maximum (see
    /// [`LayoutRequest::online_normalizer`])?
    pub fn online_normalizer(&self) -> bool {
        self.problem
            .program
            .body
            .iter()
            .any(|i| matches!(i, lanefold_ir::Instr::ReduceSumExp { .. }))
    }

    /// Is layernorm's output in the fused form (see
    /// [`LayoutRequest::fused_output`])? Its negation of `mean * rstd` is
    /// the only one in any operator program.
    pub fn fused_output(&self) -> bool {
        self.problem.program.body.iter().any(|i| {
            matches!(
                i,
                lanefold_ir::Instr::Unary {
                    op: lanefold_ir::UnaryOp::Neg,
                    ..
                }
            )
        })
    }

    /// Do rows the fast statistics get wrong take a cold path (see
    /// [`LayoutRequest::cold_path`])?
    pub fn cold_path(&self) -> bool {
        self.problem
            .program
            .body
            .iter()
            .any(|i| matches!(i, lanefold_ir::Instr::Rescaled { .. }))
    }

    /// Does a phase re-read resident tiles from memory (rather than keep
    /// them in registers)?
    pub fn rereads_tiles(&self) -> bool {
        self.residency == Residency::Stream && !self.analysis.resident.is_empty()
    }

    pub fn shape(&self) -> Shape {
        self.problem.shape
    }

    pub fn dtype(&self) -> DType {
        self.problem.dtype
    }

    /// Everything that decides a row's floating-point results: the worker
    /// recurrences (W, V; U keeps their order), the reduction tree, and
    /// the program's form (one-pass moments, the online normalizer).
    pub fn arithmetic_key(&self) -> ArithmeticKey {
        ArithmeticKey {
            workers: self.layout.workers,
            pack: self.layout.pack,
            tree: self.tree,
            order: self.order,
            one_pass_moments: self.one_pass_moments(),
            online_normalizer: self.online_normalizer(),
            fused_output: self.fused_output(),
            cold_path: self.cold_path(),
        }
    }

    /// One-line description: the schedule of the request this plan
    /// realises ([`Plan::schedule`], in its text form) with what the plan
    /// derives beside it: `cluster=N` after the residency where a row
    /// spans N groups, and `staged-columns=N` where fewer column inputs
    /// than the program's are staged. The schedule's tokens after
    /// `group-threads` (the hinted loads' order, the reduction order, the
    /// mapper, batch invariance) are left out: `W=256 V=4 U=1 G=1
    /// registers`.
    pub fn describe(&self) -> String {
        let mut words = vec![];
        for (name, text) in crate::schedule::described_tokens(&self.schedule()) {
            match name {
                "staged-columns" => match self.column_stage {
                    Some(stage) if stage.columns < self.problem.program.column_inputs().count() => {
                        words.push(format!("{text}={}", stage.columns));
                    }
                    _ => words.push(text),
                },
                // The residency realised, which the schedule may leave to
                // the mapper (see `Plan::schedule`), after G.
                "residency" => {}
                "G" => {
                    words.push(text);
                    words.push(
                        match self.residency {
                            Residency::Registers => "registers",
                            Residency::Stream => "stream",
                        }
                        .to_string(),
                    );
                    if self.groups_per_row > 1 {
                        words.push(format!("cluster={}", self.groups_per_row));
                    }
                }
                _ => words.push(text),
            }
        }
        words.join(" ")
    }

    /// The request that plans to exactly this plan, every choice pinned,
    /// each token in its canonical form (no cluster group size where it is
    /// the target's or no row spans a cluster, no order where the program
    /// decides it): what [`Plan::describe`] prints. Packed resident tiles
    /// that an automatic residency put in registers keep it automatic: an
    /// explicit `registers` budgets them in packed words
    /// ([`Plan::packed_register_estimate`]), another register estimate.
    pub fn schedule(&self) -> LayoutRequest {
        let program = &self.problem.program;
        let program_orders_sequentially = program.has_sum() && !program.reassociation;
        let base = LayoutRequest {
            order: (self.order == ReductionOrder::Sequential && !program_orders_sequentially)
                .then_some(ReductionOrder::Sequential),
            batch_invariant: self.batch_invariant,
            ..Default::default()
        };
        let mut request =
            self.pinned_request(&base, self.min_groups_per_multiprocessor.unwrap_or(0));
        let default_group_threads = Target::by_name(&self.target).map(|t| t.cluster_group_threads);
        if default_group_threads == Some(request.cluster_group_threads) {
            request.cluster_group_threads = 0;
        }
        if self.packed_resident && !self.packed_register_estimate {
            request.residency = ResidencyRequest::Auto;
        }
        request
    }
}

impl Plan {
    /// Threads of one group that serve one row: the cluster group size a
    /// request names (`cluster_group_threads`), G of which make a group of
    /// a G-row cluster.
    pub fn row_threads_per_group(&self) -> u32 {
        self.threads_per_group / self.layout.rows_per_group.max(1)
    }

    /// A request that plans to exactly this plan's layout and policies
    /// (W, V, U, G, residency, cluster group size, hints, hoisting) with the
    /// occupancy promise `groups` (0: none); `base` supplies the rest
    /// (mapper, order, batch invariance). For a promise decided after
    /// planning, recorded so that replays re-plan it without a compiler.
    pub fn pinned_request(&self, base: &LayoutRequest, groups: u32) -> LayoutRequest {
        LayoutRequest {
            workers: self.layout.workers,
            pack: self.layout.pack,
            unroll: self.layout.unroll,
            rows_per_group: self.layout.rows_per_group,
            residency: match self.residency {
                Residency::Registers => ResidencyRequest::Registers,
                Residency::Stream => ResidencyRequest::Stream,
            },
            cluster_group_threads: if self.groups_per_row > 1 {
                self.row_threads_per_group()
            } else {
                0
            },
            streaming_hints: self.streaming_hints,
            hoist_columns: self.hoisted_columns,
            reread_hints: self.reread_hints,
            keep_columns: self.keep_columns,
            l1_columns: self.l1_columns,
            unfold_pack_addresses: self.unfolded_pack_addresses(),
            ordered_columns: self.ordered_columns,
            ordered_hinted_loads: self.ordered_hinted_loads,
            occupancy_cap: self.occupancy_cap.map_or(0, |cap| cap.groups),
            batch_loads: self.batched_loads,
            early_columns: self.early_columns,
            shared_chunks: self.shared_chunks.map_or(0, |shared| shared.chunks),
            l2_prefetch_rows: self.l2_prefetch_rows,
            stage_columns: self.staged_columns(),
            pack_resident: self.packed_resident,
            rounded_resident: self.rounded_resident,
            relaxed_cluster_exit: self.relaxed_cluster_exit,
            push_cluster_reduce: self.pushed_cluster_reduce,
            persistent_clusters: self.persistent_clusters,
            online_normalizer: self.online_normalizer(),
            one_pass_moments: self.one_pass_moments(),
            fused_output: self.fused_output(),
            cold_path: self.cold_path(),
            prefetch_rows: self.row_prefetch.is_some(),
            occupancy: groups,
            ..*base
        }
    }
}

/// One enumerated candidate: its request and what the mapper made of it.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub request: LayoutRequest,
    pub outcome: Result<Plan, Refusal>,
}

fn width(msg: String) -> Refusal {
    Refusal::InvalidWidth(msg)
}

/// Resolve `request` for `problem` on `target`, failing closed.
pub fn plan(problem: &Problem, target: &Target, request: &LayoutRequest) -> Result<Plan, Refusal> {
    let request = &request.with_measured_variants(problem, target);
    let problem = &*problem.as_requested(request);
    // Validate the user's cluster group size before the model may choose one.
    with_cluster_group_threads(target, request.cluster_group_threads)?;
    let chosen;
    let request = if request.model_chooses_layout() {
        chosen = choose_by_model(problem, target, request)?;
        &chosen
    } else {
        request
    };
    let target = &with_cluster_group_threads(target, request.cluster_group_threads)?;
    let mut p = plan_rows(problem, target, request)?;
    if request.batch_invariant {
        // The same request for one row must give the same arithmetic.
        let alone = Problem {
            shape: Shape {
                rows: 1,
                ..problem.shape
            },
            ..problem.clone()
        };
        let single = plan_rows(&alone, target, request)?;
        if single.arithmetic_key() != p.arithmetic_key() {
            return Err(Refusal::BatchVariant(format!(
                "{} rows give {} but one row gives {}",
                problem.shape.rows,
                p.describe(),
                single.describe()
            )));
        }
        p.batch_invariant = true;
    }
    Ok(p)
}

/// `target` with each cluster group `threads` wide (0: the target's own).
fn with_cluster_group_threads(target: &Target, threads: u32) -> Result<Target, Refusal> {
    match threads {
        0 => Ok(target.clone()),
        t if t.is_power_of_two() && t >= target.warp_size && t <= target.max_threads_per_group => {
            Ok(Target {
                cluster_group_threads: t,
                ..target.clone()
            })
        }
        t => Err(width(format!(
            "cluster group threads {t}: must be a power of two from {} to {}",
            target.warp_size, target.max_threads_per_group
        ))),
    }
}

/// What the model mapping ranks a legal candidate by (see [`model_pick`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelScore {
    /// The plan re-reads resident tiles from memory (streamed).
    pub rereads_tiles: bool,
    pub predicted_us: f64,
    pub groups_per_row: u32,
    /// The plan's register estimate per thread.
    pub registers: u32,
    pub threads_per_group: u32,
}

impl ModelScore {
    /// The roofline policy's score of `plan` on `target`.
    pub fn of(plan: &Plan, target: &Target) -> ModelScore {
        use crate::cost::{CostPolicy, Features, RooflinePolicy};
        ModelScore {
            rereads_tiles: plan.rereads_tiles(),
            predicted_us: RooflinePolicy.predict_us(&Features::of(plan, target), plan, target),
            groups_per_row: plan.groups_per_row,
            registers: plan.registers,
            threads_per_group: plan.threads_per_group,
        }
    }
}

/// The model mapping's choice among scored candidates (an index), shared
/// by the mapper and the test that holds it against the H200 searches.
/// Ranked by (re-reads resident tiles, predicted µs): on the H200 every
/// streamed pick the model made ran 3-7x slower than register plans of the
/// same problem (the 2026-11-29 large-shape searches), so a streamed
/// plan is chosen only when no register plan is legal. Predictions within
/// 2% are a tie the model cannot resolve; the tie goes to the plan with
/// the fewest groups per row (a cluster costs barriers the model prices
/// only roughly), then the lowest prediction.
pub fn model_pick(scored: &[ModelScore]) -> Option<usize> {
    let streamed_only = scored.iter().all(|c| c.rereads_tiles);
    let pool = || {
        scored
            .iter()
            .enumerate()
            .filter(move |(_, c)| streamed_only || !c.rereads_tiles)
    };
    let fastest = pool()
        .map(|(_, c)| c.predicted_us)
        .fold(f64::INFINITY, f64::min);
    let tied = || pool().filter(move |(_, c)| c.predicted_us <= fastest * 1.02);
    let (_, choice) = tied().min_by(|(_, a), (_, b)| {
        a.groups_per_row
            .cmp(&b.groups_per_row)
            .then(a.predicted_us.total_cmp(&b.predicted_us))
    })?;
    // Among the tied plans of the same group size and row split, the one
    // with the fewest registers: rmsnorm bf16 1024x4096 ran 4.10 µs as
    // W=128 V=8 G=2 against 4.68 as W=64 V=8 G=4, both 256 threads, which
    // the model priced 0.2% apart (2026-11-30-rmsnorm-1024-search-h200).
    tied()
        .filter(|(_, c)| {
            c.threads_per_group == choice.threads_per_group
                && c.groups_per_row == choice.groups_per_row
        })
        .min_by(|(_, a), (_, b)| {
            a.registers
                .cmp(&b.registers)
                .then(a.predicted_us.total_cmp(&b.predicted_us))
        })
        .map(|(i, _)| i)
}

/// Cluster group size the model mapping also tries for rows that span a
/// cluster when the request leaves it automatic: on the H200, 256-thread
/// groups let two or more of a long row's groups share a multiprocessor,
/// and softmax f32 4096x131072 ran 1133 µs in 8 such groups against 1410
/// in 4 groups of 512 (2026-11-29-long-rows-search-g256-h200).
const AUTO_CLUSTER_GROUP_THREADS: u32 = 256;

/// The request with W and V filled in by the cost model (see
/// [`MapperPolicy::Model`]). An exact-order or element-only request keeps
/// the seed mapping's answer, since the model has nothing to choose there.
fn choose_by_model(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<LayoutRequest, Refusal> {
    match model_choice(problem, target, request)? {
        ModelChoice::Seed(seed) => Ok(seed),
        ModelChoice::Pick(pick) => {
            Ok(rule_beside_model(problem, target, request, &pick)?
                .map_or(pick, |rule| rule.request))
        }
    }
}

/// The cost model's own answer, before any rule beside it.
enum ModelChoice {
    /// Nothing for the model to choose: the seed mapping's request.
    Seed(LayoutRequest),
    /// The candidate with the lowest prediction (see [`model_pick`]).
    Pick(LayoutRequest),
}

fn model_choice(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<ModelChoice, Refusal> {
    let seed = LayoutRequest {
        mapper: MapperPolicy::Seed,
        ..*request
    };
    let baseline = plan_rows(problem, target, &seed)?;
    if baseline.order == ReductionOrder::Sequential {
        return Ok(ModelChoice::Seed(seed));
    }
    let scored = if request.batch_invariant {
        Problem {
            shape: Shape {
                rows: CANONICAL_ROWS,
                ..problem.shape
            },
            ..problem.clone()
        }
    } else {
        problem.clone()
    };
    // Rows that span a cluster may also use smaller groups when the user
    // left the group size automatic.
    let mut group_sizes = vec![request.cluster_group_threads];
    if request.cluster_group_threads == 0
        && target.max_cluster_groups > 1
        && target.cluster_group_threads != AUTO_CLUSTER_GROUP_THREADS
    {
        group_sizes.push(AUTO_CLUSTER_GROUP_THREADS);
    }
    let mut requests = vec![];
    let mut scores = vec![];
    for &group_threads in &group_sizes {
        let target = with_cluster_group_threads(target, group_threads)?;
        let mut w = 8;
        while w <= target.max_workers() {
            for v in VALID_PACKS {
                if scalar_pack_too_wide(problem, &target, v) {
                    continue;
                }
                let candidate = LayoutRequest {
                    workers: w,
                    pack: v,
                    cluster_group_threads: group_threads,
                    ..*request
                };
                let Ok(p) = plan_rows(&scored, &target, &candidate) else {
                    continue;
                };
                // Smaller groups change only plans whose rows span clusters.
                if group_threads != request.cluster_group_threads && p.groups_per_row == 1 {
                    continue;
                }
                scores.push(ModelScore::of(&p, &target));
                requests.push(candidate);
            }
            w *= 2;
        }
    }
    Ok(match model_pick(&scores) {
        Some(i) => ModelChoice::Pick(requests[i]),
        None => ModelChoice::Seed(seed),
    })
}

/// A rule beside the cost model: the request it puts in place of the
/// model's pick, the model's own plan, and why.
struct RuleBesideModel {
    request: LayoutRequest,
    model_plan: Plan,
    why: String,
}

/// The request a rule beside the cost model puts in place of the model's
/// `pick` (see [`tuned_layout_instead`], [`hinted_stream_instead`]).
fn rule_beside_model(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
    pick: &LayoutRequest,
) -> Result<Option<RuleBesideModel>, Refusal> {
    Ok(
        layout_rule_beside_model(problem, target, request, pick)?.map(|rule| RuleBesideModel {
            request: one_row_per_multiprocessor(problem, target, rule.request),
            ..rule
        }),
    )
}

/// A whole-row stream of the norms whose row inputs take 128 KiB or more
/// a row, in one 1024-thread group of at most 8 packs a worker: one
/// group per multiprocessor (occupancy cap 1, so L1 holds the row for its
/// re-reads), promised to the compiler (`__launch_bounds__(1024, 1)`:
/// 62-64 registers instead of 32, so a phase's eight loads are in flight
/// at once, as in Inductor's kernel), with batched loads. A/A with all
/// three peers: rmsnorm f32 4096x32768 252.6 µs against 263.8
/// (`2026-12-01-cpb-rms-aa-h200`), layernorm f32 258.1 against 268.4
/// (`-cpb-ln-aa-`), residual_layernorm bf16 269.5 against 284.7. Rows of 64 KiB (rmsnorm, layernorm, softmax
/// bf16) and softmax f32 ran slower so.
fn one_row_per_multiprocessor(
    problem: &Problem,
    target: &Target,
    request: LayoutRequest,
) -> LayoutRequest {
    let norm = matches!(
        problem.operator_kind(),
        Some(Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm)
    );
    let n = problem.shape.n as u64;
    let row_input_bytes =
        problem.program.row_inputs().count() as u64 * n * problem.dtype.size_bytes() as u64;
    let per_chunk = request.workers as u64 * request.pack as u64;
    let whole_row_group = request.workers == target.max_threads_per_group
        && per_chunk > 0
        && n.is_multiple_of(per_chunk)
        && n / per_chunk <= 8;
    if target.name == "h200"
        && norm
        && request.residency == ResidencyRequest::Stream
        && row_input_bytes >= 128 * 1024
        && whole_row_group
    {
        LayoutRequest {
            occupancy_cap: 1,
            occupancy: 1,
            batch_loads: true,
            ..request
        }
    } else {
        request
    }
}

fn layout_rule_beside_model(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
    pick: &LayoutRequest,
) -> Result<Option<RuleBesideModel>, Refusal> {
    if request.residency != ResidencyRequest::Auto || request.batch_invariant {
        return Ok(None);
    }
    let model_plan = plan_rows(problem, target, pick)?;
    if let Some((tuned, evidence)) = tuned_layout_instead(problem, target, pick) {
        return Ok(Some(RuleBesideModel {
            request: tuned,
            model_plan,
            why: format!("the tuning database's schedule for this problem ({evidence})"),
        }));
    }
    if let Some(narrower) = few_rows_narrower_instead(problem, target, &model_plan, pick) {
        return Ok(Some(RuleBesideModel {
            request: narrower,
            model_plan,
            why: format!(
                "fewer rows than multiprocessors: at most {} workers per row, every pack \
                 in flight (one block reduction over fewer warps; 1.05-1.22x on \
                 1-64 x 4096 in the H200 grid searches of 2026-11-30)",
                narrower.workers
            ),
        }));
    }
    if let Some(streamed) = whole_row_stream_instead(problem, target, &model_plan, pick) {
        return Ok(Some(RuleBesideModel {
            request: streamed,
            model_plan,
            why: "rows of 4096-8192 larger than the L2: streamed with re-read hints, the \
                  whole row in one chunk per pass (1.02-1.05x over the model's picks in \
                  2026-11-30-t1s-*-h200)"
                .to_string(),
        }));
    }
    Ok(
        hinted_stream_instead(problem, target, &model_plan, pick).map(|streamed| RuleBesideModel {
            request: streamed,
            model_plan,
            why: "a streamed plan with re-read hints (64 private slots per thread compile \
                  to 108-128 registers on sm_90; the streamed plans measured 1.02-1.11x \
                  faster)"
                .to_string(),
        }),
    )
}

/// The shipped tuning database's schedule for this problem in place of
/// the model's `pick` ([`crate::tuned`]: `tuning/h200.json`), with the
/// entry's evidence and results directory; None where no entry covers the
/// problem or the mapper refuses the entry's layout.
fn tuned_layout_instead(
    problem: &Problem,
    target: &Target,
    pick: &LayoutRequest,
) -> Option<(LayoutRequest, String)> {
    let entry = crate::tuned::lookup(&target.name, problem)?;
    let request = entry.with_layout(pick);
    let target = with_cluster_group_threads(target, request.cluster_group_threads).ok()?;
    plan_rows(problem, &target, &request)
        .ok()
        .map(|_| (request, format!("{}; {}", entry.evidence, entry.results)))
}

/// Why the automatic mapping of `request` is not the cost model's own
/// pick, when a rule beside the model replaced it (for `lanefold plan`).
pub fn automatic_note(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Option<String> {
    if !request.model_chooses_layout() {
        return None;
    }
    let measured = request.with_measured_variants(problem, target);
    let mut notes = vec![];
    // The cluster variants change nothing on a row that one group holds.
    let spans_cluster = || plan(problem, target, request).is_ok_and(|p| p.groups_per_row > 1);
    if measured != *request {
        let variants = [
            (
                measured.online_normalizer && !request.online_normalizer,
                "the online normalizer (one read of each row, nothing resident)",
            ),
            (
                measured.one_pass_moments && !request.one_pass_moments,
                "one-pass moments (two phases instead of three)",
            ),
            (
                measured.stage_columns && !request.stage_columns,
                "the weight staged in shared memory while the row is reduced",
            ),
            (
                measured.pack_resident && !request.pack_resident,
                "resident 16-bit tiles packed two values per register",
            ),
            (
                measured.ordered_columns && !request.ordered_columns,
                "weight and bias loaded a chunk at a time below the stores before them",
            ),
            (
                measured.early_columns > request.early_columns,
                "the first chunk's weight and bias loaded before the cluster's exchange",
            ),
            (
                measured.rounded_resident && !request.rounded_resident,
                "h kept resident instead of x and the residual",
            ),
            (
                measured.keep_columns && !request.keep_columns,
                "weight and bias loaded evict-last, so the rows' stream leaves them in L2",
            ),
            (
                measured.l2_prefetch_rows > request.l2_prefetch_rows,
                "each group's share of a row ahead prefetched into L2 as it starts",
            ),
            (
                measured.push_cluster_reduce && !request.push_cluster_reduce && spans_cluster(),
                "the cluster's partials pushed by st.async (no release barrier)",
            ),
        ];
        let chosen: Vec<&str> = variants
            .iter()
            .filter(|(taken, _)| *taken)
            .map(|(_, what)| *what)
            .collect();
        // A variant that changes nothing here (pushing on a row one group
        // holds) is not worth a note.
        if !chosen.is_empty() {
            notes.push(format!(
                "automatic on the H200 for this operator and row length: {}; \
                 each measured faster in paired benches",
                chosen.join("; ")
            ));
        }
    }
    if let Some(rule) = model_rule_note(problem, target, &measured) {
        notes.push(rule);
    }
    (!notes.is_empty()).then(|| notes.join("\n"))
}

/// The rule beside the cost model that replaced its pick, if one did.
fn model_rule_note(problem: &Problem, target: &Target, request: &LayoutRequest) -> Option<String> {
    let problem = &*problem.as_requested(request);
    let target = with_cluster_group_threads(target, request.cluster_group_threads).ok()?;
    let model = LayoutRequest {
        residency: ResidencyRequest::Registers,
        ..*request
    };
    let pick = choose_by_model(problem, &target, &model).ok()?;
    let rule = rule_beside_model(problem, &target, request, &pick).ok()??;
    Some(format!(
        "{} replaces the cost model's pick {}",
        rule.why,
        rule.model_plan.describe()
    ))
}

/// Rows longer than this take cross_entropy's online normalizer by default
/// on the H200 ([`LayoutRequest::with_measured_variants`]).
const ONLINE_NORMALIZER_MIN_N: usize = 32768;

/// Rows at least this long take layernorm's one-pass moments by
/// default on the H200 ([`LayoutRequest::with_measured_variants`]).
const ONE_PASS_MOMENTS_MIN_N: usize = 32768;

/// layernorm f32 rows at least this long load their first chunk's columns
/// early (see [`LayoutRequest::with_measured_variants`]); measured on
/// 131072 and 262144 only.
const EARLY_COLUMNS_MIN_N: usize = 131072;

/// Rows at least this long, which span a cluster on the H200, push their
/// partials by default ([`LayoutRequest::with_measured_variants`]).
const PUSH_MIN_N: usize = 131072;
/// residual_layernorm's f32 default on 4096x32768 is already a cluster of
/// eight groups, and pushing was 1.25x there.
const RESIDUAL_PUSH_MIN_N: usize = 32768;

/// 16-bit rows at least this long keep resident tiles packed by default
/// on the H200 ([`LayoutRequest::with_measured_variants`]).
const PACK_RESIDENT_MIN_N: usize = 131072;
/// 16-bit layernorm rows of these lengths, which one group holds, keep
/// their tiles packed and load their columns in order: the W=512 register
/// plan then takes 62 registers instead of 128, two groups per SM
/// (4096x32768: 134.0 µs against 141.7, paired). Longer rows
/// span clusters, where ordered columns are unmeasured.
const PACKED_LAYERNORM_N: std::ops::Range<usize> = 32768..65536;
/// The same for softmax, whose 64-slot one-group plan packs to 64 registers.
const PACKED_SOFTMAX_MIN_N: usize = 32768;

/// Does rmsnorm stage its weight in shared memory by default on the H200
/// ([`LayoutRequest::with_measured_variants`])? 16-bit rows from 262144;
/// f32 rows push their partials with the weight left in global memory
/// instead.
fn stages_rmsnorm_weight(dtype: DType, n: usize) -> bool {
    dtype.size_bytes() == 2 && n >= 262144
}

/// Register plans keeping this many private slots per thread compile to
/// 108-128 registers on sm_90 (the estimate says 100), one or two groups
/// per multiprocessor (`lanefold compile-check`).
const WIDE_SLOT_PLAN: usize = 64;

/// Problems at least this large (the H200's L2 is 50 MB) are where the
/// streamed alternative below was measured.
const HINTED_STREAM_MIN_BYTES: u64 = 64 << 20;

/// Packs wider than four elements on rows that cannot be read as vectors
/// (16-bit rows of odd length: every access a scalar one) are left out of
/// the model's choice on the H200. V=8 ran 1.10-1.19x slower than V=4 on
/// bf16 1x127 and 17x257 for every operator with a column or a second
/// reduction (a 2026-11-30 search, in git history at 2d680226); the model prices the pack
/// as one vector access. A sum, with nothing but its loads to schedule,
/// ran V=8 at par and keeps it.
fn scalar_pack_too_wide(problem: &Problem, target: &Target, pack: u32) -> bool {
    target.name == "h200"
        && problem.operator_kind() != Some(Operator::Sum)
        && pack > 4
        && vector_access(problem.dtype, pack as usize, problem.shape.n).is_none()
}

/// At most this many workers per row when there are fewer rows than
/// multiprocessors (see [`few_rows_narrower_instead`]).
fn few_rows_max_workers(op: Operator) -> u32 {
    match op {
        // Two reductions (softmax) or a gather besides one (cross_entropy):
        // W=256 was best on every such f32 problem of the decode search.
        Operator::Softmax | Operator::CrossEntropy => 256,
        _ => 512,
    }
}

/// With fewer rows than multiprocessors each row is alone on its SM, and a
/// row's time is its latency: one block reduction across W/32 warps. The
/// model prices that level flat, so it spreads a 4096-wide f32 row over
/// 1024 workers; 512 (256 for softmax and cross_entropy) with every pack
/// loaded at once ran 1.05-1.22x faster on every operator at 1, 8, 32 and
/// 64 rows (2026-11-30 searches, in git history at 2d680226). One-group register plans only,
/// with at most eight packs per worker; measured on the H200 only.
fn few_rows_narrower_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    if target.name != "h200" || problem.shape.rows >= target.multiprocessors as usize {
        return None;
    }
    let workers = few_rows_max_workers(problem.operator_kind()?);
    let pack = picked.layout.pack;
    let chunks = problem.shape.n.div_ceil((workers * pack) as usize);
    if picked.layout.workers <= workers
        || picked.groups_per_row != 1
        || picked.rereads_tiles()
        || chunks > 8
    {
        return None;
    }
    // A resident tile loads every pack at once whatever U says (U=1, 2
    // and 4 measured alike); a sum holds nothing, so U=chunks puts every
    // load in flight (U=1 ran 1.12-1.16x slower on sum f32 at W=512).
    let unroll = if picked.resident_slots > 0 {
        1
    } else {
        chunks as u32
    };
    let narrower = LayoutRequest {
        workers,
        pack,
        unroll,
        rows_per_group: 0,
        ..*pick
    };
    let plan = plan_rows(problem, target, &narrower).ok()?;
    (plan.groups_per_row == 1 && !plan.rereads_tiles()).then_some(narrower)
}

/// The model's register pick replaced by a streamed plan with re-read hints
/// (see [`LayoutRequest::reread_hints`]), where the H200 measured that faster
/// in paired replays with all three peers:
/// rmsnorm in f32 and bf16 and softmax in bf16, one group per row and a
/// 64-slot register plan, on problems larger than the L2. There the
/// streamed plan holds 32-46 registers instead of 108-128 and its re-reads
/// stay in L2: rmsnorm bf16 1.024-1.055x on 32768x4096, 16384x8192 and
/// 4096x32768, rmsnorm f32 4096x32768 1.106x, softmax bf16 1.040-1.068x.
/// Left out, as measured slower: layernorm (0.78-1.04x, slower on two of
/// three bf16 shapes and on f32 4096x32768); softmax f32 was not measured
/// with the automatic unroll. The cost model prices re-reads as DRAM
/// traffic and cannot see this, so it is a rule beside the model, not in it.
fn hinted_stream_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    // Measured on the H200 only; other targets keep the model's pick.
    if target.name != "h200" {
        return None;
    }
    let op = problem.operator_kind()?;
    let measured_faster = match op {
        Operator::Rmsnorm => true,
        // A packed softmax tile needs 64 registers, not 124: it stays.
        Operator::Softmax => problem.dtype == DType::Bf16 && !pick.pack_resident,
        _ => false,
    };
    let shape = problem.shape;
    if !measured_faster
        || picked.residency != Residency::Registers
        || picked.groups_per_row != 1
        || picked.resident_slots < WIDE_SLOT_PLAN
        || row_tile_bytes(problem) < HINTED_STREAM_MIN_BYTES
    {
        return None;
    }
    // Two 16-byte packs per worker and stripe, as measured: W=256 on rows of
    // 4096 bf16, 512 on 8192, at most one full group on longer rows.
    let pack = picked.layout.pack;
    let workers = two_packs_per_worker(shape.n, pack, target);
    let streamed = LayoutRequest {
        workers,
        pack,
        rows_per_group: 0,
        residency: ResidencyRequest::Stream,
        reread_hints: true,
        ..*pick
    };
    plan_rows(problem, target, &streamed).ok().map(|_| streamed)
}

/// The power-of-two W giving each worker two packs of `pack` per stripe of
/// a row of `n`, within one warp and one full group.
fn two_packs_per_worker(n: usize, pack: u32, target: &Target) -> u32 {
    let per_two_packs = (n as u32 / (2 * pack)).max(target.warp_size);
    (1u32 << per_two_packs.ilog2()).min(target.max_threads_per_group)
}

/// Rows this long (and no longer) stream whole on the H200 when the
/// problem is larger than the L2 ([`whole_row_stream_instead`]).
const WHOLE_ROW_STREAM_N: std::ops::RangeInclusive<usize> = 4096..=8192;

/// Does this problem take the streamed plan of [`whole_row_stream_instead`]
/// (on the H200)? The operators and dtypes searched for it: rmsnorm
/// f32 (bf16 streams by [`hinted_stream_instead`]), layernorm and softmax
/// f32 and bf16.
fn streams_whole_row(problem: &Problem) -> bool {
    let searched = match problem.operator_kind() {
        Some(Operator::Rmsnorm) => problem.dtype == DType::F32,
        Some(Operator::Layernorm | Operator::Softmax) => {
            matches!(problem.dtype, DType::F32 | DType::Bf16)
        }
        _ => false,
    };
    searched
        && WHOLE_ROW_STREAM_N.contains(&problem.shape.n)
        && row_tile_bytes(problem) >= HINTED_STREAM_MIN_BYTES
}

/// Bytes of one rows x N tile in the problem's storage dtype.
fn row_tile_bytes(problem: &Problem) -> u64 {
    problem.shape.rows as u64 * problem.shape.n as u64 * problem.dtype.size_bytes() as u64
}

/// The model's pick on rows of 4096-8192 larger than the L2 replaced by a
/// streamed plan with re-read hints that loads the whole row in one chunk
/// per pass (16-byte packs, U=4: at most four packs a worker), as
/// Inductor's looped kernels do: rmsnorm on W = N/(2V) (two packs a
/// worker), layernorm and softmax on stripes of at most 2048 elements
/// (W = min(N/(2V), 2048/V)), layernorm with one-pass moments (two passes,
/// like Inductor's Welford loop). The searches
/// (2026-11-30-t1s-*-h200, 18-19 candidates each, in registers and
/// streamed) put these first or within 0.3% of first (U=2 and U=4 alike
/// where fewer stripes exist), against the model's picks:
/// - rmsnorm f32: 249.3 µs against 260.3 (32768x4096), 251.3 against
///   254.5 (16384x8192);
/// - layernorm f32: 249.2 against 258.1-260.6, 251.7 against 255.4;
///   bf16: 127.2 against 132.7, 128.7 against 132.3;
/// - softmax f32: 249.3 against 261.1, 252.5 against 260.3; bf16
///   16384x8192 127.8 against the 64-slot rule's 129.9.
///
/// The same plans in registers were 3-5% slower: streaming, not the
/// width, is the gain. On 4096x32768 streamed W=512 re-reads past the L2
/// (four groups a multiprocessor, 67 MB in flight; 377 against 274-278 µs),
/// so the rule stops at 8192. The model prices re-reads as DRAM traffic
/// and cannot see this.
fn whole_row_stream_instead(
    problem: &Problem,
    target: &Target,
    picked: &Plan,
    pick: &LayoutRequest,
) -> Option<LayoutRequest> {
    if target.name != "h200" || !streams_whole_row(problem) || picked.groups_per_row != 1 {
        return None;
    }
    const STRIPE_ELEMENTS: u32 = 2048;
    let pack = 16 / problem.dtype.size_bytes() as u32;
    let two_packs = two_packs_per_worker(problem.shape.n, pack, target);
    let workers = match problem.operator_kind()? {
        Operator::Rmsnorm => two_packs,
        _ => two_packs.min(STRIPE_ELEMENTS / pack),
    };
    let streamed = LayoutRequest {
        workers,
        pack,
        unroll: 4,
        rows_per_group: 0,
        residency: ResidencyRequest::Stream,
        reread_hints: true,
        ..*pick
    };
    plan_rows(problem, target, &streamed).ok()?;
    // Two packs a worker (rows of 4096): layernorm keeps its hinted loads
    // ordered, the kernels it won these searches with. Read-only loads let
    // ptxas hoist the re-read phase's loads for 3-4 registers more, a group
    // fewer per SM: 264.8 against 250.3 µs in f32, 131.7 against 126.9 in
    // bf16; promising the old occupancy instead spilled
    // in f32 (253.4) and only tied in bf16 (126.5). softmax and
    // rmsnorm stay at 28-32 registers either way (within 0.2%).
    let two_packs_a_worker = problem.shape.n == 2 * (workers * pack) as usize;
    let ordered = two_packs_a_worker && problem.operator_kind() == Some(Operator::Layernorm);
    Some(LayoutRequest {
        ordered_hinted_loads: ordered || pick.ordered_hinted_loads,
        ..streamed
    })
}

fn plan_rows(problem: &Problem, target: &Target, request: &LayoutRequest) -> Result<Plan, Refusal> {
    let mut analysis = problem
        .program
        .verify()
        .map_err(|e| Refusal::Unverified(e.to_string()))?;
    let n = problem.shape.n;
    let rows = problem.shape.rows;

    if let (Some(order), false) = (request.order, analysis.has_reduction()) {
        return Err(Refusal::ElementOnly(format!(
            "'{}' has no reduction, so a reduction order ({order:?}) cannot apply",
            problem.program.name
        )));
    }
    let pack = if request.pack == 0 { 1 } else { request.pack };
    if !VALID_PACKS.contains(&pack) {
        return Err(width(format!("V={pack}: V must be one of 1, 2, 4, 8")));
    }
    if request.unroll > 8 {
        return Err(width(format!(
            "U={}: U must be from 1 to 8",
            request.unroll
        )));
    }
    let max_w = target.max_workers();
    if request.workers != 0 && (!request.workers.is_power_of_two() || request.workers > max_w) {
        return Err(width(format!(
            "W={}: W must be a power of two from 1 to {max_w} on {}",
            request.workers, target.name
        )));
    }

    // Sequential order is W = 1; any wider tree reorders the FP32 sums.
    let sums_reorderable =
        problem.program.reassociation && request.order != Some(ReductionOrder::Sequential);
    let order = if problem.program.has_sum() && !sums_reorderable {
        ReductionOrder::Sequential
    } else {
        request.order.unwrap_or(ReductionOrder::Tree)
    };
    if order == ReductionOrder::Sequential && request.workers > 1 {
        let why = if problem.program.reassociation {
            "an exact (sequential) order was requested"
        } else {
            "the program grants no reassociation"
        };
        return Err(Refusal::MissingPermission(format!(
            "W={} splits each FP32 sum over {} workers, but {why}; only W=1 keeps sequential order",
            request.workers, request.workers
        )));
    }

    let resident_tiles = analysis.resident.len();
    let budget = |threads: u32| -> usize {
        let per_thread = target
            .max_registers_per_thread
            .min(target.registers_per_group / threads.max(1));
        per_thread.saturating_sub(overhead_registers(pack, problem.dtype)) as usize
    };
    let workers = if request.workers != 0 {
        request.workers
    } else if order == ReductionOrder::Sequential {
        1
    } else {
        auto_workers(n, pack, resident_tiles, target, &budget)
    };
    // U is settled below, once the residency is known.
    let layout_for = |g: u32| Layout {
        workers,
        pack,
        unroll: 1,
        rows_per_group: g,
    };
    let rows_per_group = if request.rows_per_group != 0 {
        request.rows_per_group
    } else {
        auto_rows_per_group(workers, rows, target)
    };
    let mut layout = layout_for(rows_per_group);
    let groups_per_row = layout.groups_per_row(target);
    let threads = layout.threads_per_group(target);
    // A cluster of G rows: each group holds the same slice of G rows, so
    // a column's slice is read by one group for all of them.
    if groups_per_row > 1 && threads > target.max_threads_per_group {
        return Err(width(format!(
            "G={rows_per_group}: {rows_per_group} rows x {} threads of a cluster group exceed the group limit {}",
            layout.workers_per_group(target),
            target.max_threads_per_group
        )));
    }
    if groups_per_row == 1
        && (workers as u64 * rows_per_group as u64) > target.max_threads_per_group as u64
    {
        return Err(width(format!(
            "G x W = {rows_per_group} x {workers} threads exceeds the group limit {}",
            target.max_threads_per_group
        )));
    }

    if request.occupancy_cap > 0 && request.occupancy > request.occupancy_cap {
        return Err(width(format!(
            "occupancy {} promised above the cap of {} per multiprocessor",
            request.occupancy, request.occupancy_cap
        )));
    }
    if request.occupancy > 0
        && (request.occupancy > 32
            || request.occupancy as u64 * threads as u64
                > target.max_threads_per_multiprocessor as u64)
    {
        return Err(width(format!(
            "occupancy {}: groups of {threads} threads allow 1 to {} per multiprocessor",
            request.occupancy,
            (target.max_threads_per_multiprocessor / threads.max(1)).min(32)
        )));
    }

    let slot_bound = layout.slot_bound(n);
    // Packed tiles and staged columns move whole vector packs only.
    let whole_vector_packs =
        !layout.has_partial_pack(n) && vector_access(problem.dtype, pack as usize, n).is_some();
    // An explicit register request with packed 16-bit tiles is budgeted
    // in packed words (two slots a register): the whole 32768-element row
    // of a 1024-thread group, as Inductor holds rows, fits only so. The
    // automatic mapping keeps the unpacked estimate (packing never changes
    // an automatic layout).
    let packs_explicitly = request.residency == ResidencyRequest::Registers
        && request.pack_resident
        && problem.dtype.size_bytes() == 2
        && whole_vector_packs;
    // Registers for `slots` slots: two a register where packed explicitly.
    let in_words = |slots: usize| {
        if packs_explicitly {
            slots.div_ceil(2)
        } else {
            slots
        }
    };
    let budgeted = |tiles: usize| tiles * in_words(slot_bound);
    let mut rounded_resident = false;
    if request.rounded_resident && request.residency != ResidencyRequest::Stream {
        if let Some(kept) = analysis.keeping_rounded_tiles(&problem.program) {
            // An automatic residency keeps h only where it fits: a
            // streamed plan re-reads loads, never a computed tile.
            if request.residency == ResidencyRequest::Registers
                || budgeted(kept.resident.len()) <= budget(threads)
            {
                analysis = kept;
                rounded_resident = true;
            }
        }
    }
    let mut hoisted_columns = false;
    if request.hoist_columns && request.residency != ResidencyRequest::Stream {
        let hoisted = hoist_column_loads(&problem.program, &analysis);
        let extra = hoisted.resident.len() - analysis.resident.len();
        // Only when the hoisted columns fit beside the row tiles: hoisting
        // must never turn a register plan into a streamed one.
        if extra > 0 && hoisted.resident.len() * slot_bound <= budget(threads) {
            analysis = hoisted;
            hoisted_columns = true;
        }
    }
    let resident_tiles = analysis.resident.len();
    let needed_slots = resident_tiles * slot_bound;
    // Chunks of the row held in shared memory (`--shared-chunks`) need no
    // registers, so they count before the fit: a 1024-thread group holds
    // an f32 row slice of 64 slots only so. Nothing else may claim that
    // shared memory (staged columns, prefetched rows, persistent loops).
    let shared_chunk_count = (request.shared_chunks > 0
        && rows_per_group == 1
        && whole_vector_packs
        && !request.stage_columns
        && !request.prefetch_rows
        && !request.persistent_clusters
        && analysis.resident_row_load(&problem.program).is_some())
    .then(|| request.shared_chunks.min(layout.complete_packs(n) as u32));
    let shared_slots = shared_chunk_count.map_or(0, |chunks| (chunks * pack) as usize);
    let budgeted_slots = budgeted(resident_tiles) - in_words(shared_slots);
    let fits = budgeted_slots <= budget(threads);
    let residency = match request.residency {
        ResidencyRequest::Stream => Residency::Stream,
        ResidencyRequest::Registers if resident_tiles > 0 && !fits => {
            return Err(Refusal::ResourceOverflow {
                resource: "private slots",
                needed: budgeted_slots as u64,
                limit: budget(threads) as u64,
                detail: format!(
                    "{resident_tiles} resident tile(s) x {slot_bound} slots per worker at {threads} threads per group"
                ),
            });
        }
        ResidencyRequest::Registers => Residency::Registers,
        ResidencyRequest::Auto if resident_tiles > 0 && !fits => Residency::Stream,
        ResidencyRequest::Auto => Residency::Registers,
    };
    layout.unroll = match (request.unroll, request.mapper) {
        (0, MapperPolicy::Seed) => 1,
        (0, MapperPolicy::Model) => {
            let rereads = residency == Residency::Stream && resident_tiles > 0;
            auto_unroll(n, workers, pack, problem.dtype, rereads)
        }
        (u, _) => u,
    };
    let resident_slots = if residency == Residency::Registers {
        needed_slots
    } else {
        0
    };
    let packed_resident = request.pack_resident
        && problem.dtype.size_bytes() == 2
        && resident_slots > 0
        && whole_vector_packs;
    // The estimate stays that of the unpacked tile, so packing never
    // changes a layout: ptxas keeps the loaded words of some unpacked
    // plans by itself, and packing saved 0-16 of 64-80 registers on 64
    // slots (`lanefold compile-check`).
    let estimated_slots = if resident_slots == 0 {
        0
    } else if packs_explicitly && packed_resident {
        budgeted_slots
    } else {
        resident_slots - shared_slots
    };
    let registers = overhead_registers(pack, problem.dtype) + estimated_slots as u32;
    let register_file = registers as u64 * threads as u64;
    if registers > target.max_registers_per_thread
        || register_file > target.registers_per_group as u64
    {
        return Err(Refusal::ResourceOverflow {
            resource: "registers",
            needed: register_file,
            limit: target.registers_per_group as u64,
            detail: format!("{registers} per thread x {threads} threads"),
        });
    }
    let tree = layout.tree(target);
    let pushed = request.push_cluster_reduce && groups_per_row > 1;
    let persistent_clusters = request.persistent_clusters
        && pushed
        && rows_per_group == 1
        && residency == Residency::Registers;
    let shared_bytes = reduction_slot_bytes(
        analysis.reductions.len(),
        rows_per_group,
        tree.warps,
        groups_per_row,
        pushed,
        if persistent_clusters { 2 } else { 1 },
    );
    let columns = problem.program.column_inputs().count();
    // An occupancy promise bounds each group's shared memory too: stage
    // the leading columns that fit beside that many groups (layernorm f32
    // at three groups per SM: the weight, not the bias), none if none fits.
    let stage_limit = match request.occupancy {
        0 => target.shared_bytes_per_group,
        groups => (target.shared_bytes_per_multiprocessor / groups)
            .saturating_sub(crate::target::SHARED_RESERVED_PER_GROUP)
            .min(target.shared_bytes_per_group),
    } as u64;
    let stage = (1..=columns)
        .rev()
        .map(|staged| {
            ColumnStage::new(
                shared_bytes,
                staged,
                n / groups_per_row as usize,
                problem.dtype,
            )
        })
        .find(|stage| stage.total_bytes() <= stage_limit);
    let column_stage = stage.filter(|_| {
        request.stage_columns
            && groups_per_row > 1
            && rows_per_group == 1
            && residency == Residency::Registers
            && whole_vector_packs
    });
    let shared_bytes = column_stage.map_or(shared_bytes, |stage| stage.total_bytes() as u32);
    // A persistent cluster prefetches too: each group its own share of the
    // row, one copy per chunk of W x V elements (so whole chunks only).
    let row_prefetch = if request.prefetch_rows
        && residency == Residency::Registers
        && (groups_per_row == 1 || (persistent_clusters && n.is_multiple_of(layout.chunk_span())))
        && rows_per_group == 1
        && column_stage.is_none()
        && whole_vector_packs
        && problem.program.row_inputs().count() == 1
    {
        let row_bytes = (n / groups_per_row as usize) as u64 * problem.dtype.size_bytes() as u64;
        let prefetch = RowPrefetch {
            launched_groups: 0,
            buffer_offset: shared_bytes.next_multiple_of(16),
            row_bytes: row_bytes as u32,
        };
        // One copy completes one `mbarrier` phase: at most 2^20 - 1 bytes.
        (row_bytes.is_multiple_of(16)
            && row_bytes < 1 << 20
            && prefetch.total_bytes() <= target.shared_bytes_per_group)
            .then(|| {
                let per_multiprocessor =
                    groups_per_multiprocessor(target, threads, registers, prefetch.total_bytes());
                // Whole clusters; the runtime asks the driver for the count.
                let clusters = target.multiprocessors as u64 / groups_per_row as u64
                    * per_multiprocessor as u64;
                let launched = clusters.clamp(1, rows as u64) * groups_per_row as u64;
                RowPrefetch {
                    launched_groups: launched as u32,
                    ..prefetch
                }
            })
    } else {
        None
    };
    let shared_bytes = row_prefetch.map_or(shared_bytes, |prefetch| prefetch.total_bytes());
    let shared_chunks = shared_chunk_count
        .filter(|_| residency == Residency::Registers)
        .map(|chunks| SharedChunks {
            chunks,
            offset_bytes: shared_bytes.next_multiple_of(16),
            // One row per group: each thread holds `pack` elements a chunk.
            bytes: chunks * threads * pack * problem.dtype.size_bytes() as u32,
        });
    let shared_bytes = shared_chunks.map_or(shared_bytes, |shared| shared.total_bytes());
    let by_threads = target.max_threads_per_multiprocessor / threads.max(1);
    let (shared_bytes, occupancy_cap) = match request.occupancy_cap {
        0 => (shared_bytes, None),
        cap if cap >= by_threads => (shared_bytes, None),
        cap => {
            let (padded, carveout_percent) = crate::target::occupancy_cap_shared(shared_bytes, cap)
                .ok_or_else(|| {
                    width(format!(
                        "occupancy cap {cap}: {cap} groups of {shared_bytes} bytes of shared memory fit no carve-out"
                    ))
                })?;
            let cap = OccupancyCap {
                groups: cap,
                carveout_percent,
            };
            (padded, Some(cap))
        }
    };
    if shared_bytes > target.shared_bytes_per_group {
        return Err(Refusal::ResourceOverflow {
            resource: "shared memory",
            needed: shared_bytes as u64,
            limit: target.shared_bytes_per_group as u64,
            detail: format!("{} reductions", analysis.reductions.len()),
        });
    }
    let groups = rows.div_ceil(rows_per_group as usize) as u64 * groups_per_row as u64;
    Ok(Plan {
        packed_register_estimate: packs_explicitly && packed_resident,
        problem: problem.clone(),
        analysis,
        layout,
        residency,
        order,
        tree,
        threads_per_group: threads,
        groups_per_row,
        groups,
        slot_bound,
        resident_slots,
        registers,
        shared_bytes,
        target: target.name.clone(),
        batch_invariant: false,
        streaming_hints: request.streaming_hints,
        hoisted_columns,
        min_groups_per_multiprocessor: (request.occupancy > 0).then_some(request.occupancy),
        reread_hints: request.reread_hints && residency == Residency::Stream && resident_tiles > 0,
        keep_columns: request.keep_columns && columns > 0,
        l1_columns: request.l1_columns && columns > 0,
        folded_pack_addresses: folds_by_default(residency, occupancy_cap)
            && !request.unfold_pack_addresses
            && (n > layout.chunk_span() || whole_vector_packs),
        ordered_columns: request.ordered_columns
            && columns > 0
            && vector_access(problem.dtype, pack as usize, n).is_some(),
        ordered_hinted_loads: request.ordered_hinted_loads,
        occupancy_cap,
        batched_loads: request.batch_loads
            && residency == Residency::Stream
            && whole_vector_packs
            && layout.complete_packs(n) <= 8
            && column_stage.is_none(),
        early_columns: if residency == Residency::Registers
            && columns > 0
            && whole_vector_packs
            && !request.ordered_columns
            && !hoisted_columns
            && column_stage.is_none()
            && row_prefetch.is_none()
        {
            request.early_columns.min(layout.complete_packs(n) as u32)
        } else {
            0
        },
        shared_chunks,
        column_stage,
        packed_resident,
        rounded_resident,
        relaxed_cluster_exit: request.relaxed_cluster_exit && groups_per_row > 1,
        pushed_cluster_reduce: pushed,
        persistent_clusters,
        l2_prefetch_rows: if residency == Residency::Registers
            && layout.rows_per_group == 1
            && row_prefetch.is_none()
            && n >= layout.chunk_span()
            && l2_prefetch_aligned(problem.dtype, &layout, groups_per_row, n)
        {
            request.l2_prefetch_rows
        } else {
            0
        },
        row_prefetch,
    })
}

/// Can a group's share of a chunk ([`Layout::group_chunk_span`]) be
/// prefetched by one bulk instruction: its bytes and every row's start
/// multiples of 16?
fn l2_prefetch_aligned(dtype: DType, layout: &Layout, groups_per_row: u32, n: usize) -> bool {
    let share = layout.group_chunk_span(groups_per_row);
    let bytes = dtype.size_bytes();
    (share * bytes).is_multiple_of(16) && (n * bytes).is_multiple_of(16)
}

/// Shared memory for the reduction tree: one f32 per warp per reduction,
/// per row of the group; clusters add one slot per group of the cluster,
/// per row.
fn reduction_slot_bytes(
    reductions: usize,
    rows_per_group: u32,
    warps: u32,
    groups_per_row: u32,
    pushed: bool,
    pushed_sets: u32,
) -> u32 {
    let cluster = if groups_per_row > 1 {
        groups_per_row * pushed_sets
    } else {
        0
    };
    // A pushed reduction adds one 8-byte `mbarrier` per reduction and set
    // of slots, from an 8-byte boundary.
    let barriers = if pushed {
        8 * reductions as u32 * pushed_sets + 4
    } else {
        0
    };
    4 * reductions as u32 * rows_per_group * (warps + cluster) + barriers
}

/// Where a plan's shared chunks (see [`LayoutRequest::shared_chunks`])
/// sit in a group's dynamic shared memory: after everything else, from a
/// 16-byte boundary, as `[chunk][access][thread]` so a warp's accesses
/// are consecutive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedChunks {
    /// The row's last `chunks` chunks of each worker are held here.
    pub chunks: u32,
    pub offset_bytes: u32,
    pub bytes: u32,
}

impl SharedChunks {
    /// Shared memory of a group with the chunks.
    pub fn total_bytes(&self) -> u32 {
        self.offset_bytes + self.bytes
    }
}

/// Where a plan's staged column slices sit in a group's dynamic shared
/// memory: after the reduction slots, from a 16-byte boundary, one slice
/// of `slice_elements` storage elements per staged column input: the
/// first `columns` of the program's column inputs, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnStage {
    /// Floats of reduction slots before the stage, rounded up to 4.
    pub offset_floats: u32,
    pub columns: usize,
    /// Bytes of one column's slice.
    pub slice_bytes: u64,
}

impl ColumnStage {
    fn new(slot_bytes: u32, columns: usize, slice_elements: usize, dtype: DType) -> ColumnStage {
        ColumnStage {
            offset_floats: (slot_bytes / 4).next_multiple_of(4),
            columns,
            slice_bytes: (slice_elements * dtype.size_bytes()) as u64,
        }
    }

    /// Shared memory of a group: slots, alignment and every slice.
    pub fn total_bytes(&self) -> u64 {
        4 * self.offset_floats as u64 + self.columns as u64 * self.slice_bytes
    }
}

impl Plan {
    /// Are column slices staged in shared memory (see
    /// [`LayoutRequest::stage_columns`])?
    pub fn staged_columns(&self) -> bool {
        self.column_stage.is_some()
    }

    /// Groups of this plan that share one multiprocessor at `registers`
    /// per thread: what threads, registers and shared memory allow, held
    /// to the occupancy cap (whose carve-out the driver is asked for).
    pub fn groups_per_multiprocessor(&self, target: &Target, registers: u32) -> u32 {
        let groups =
            groups_per_multiprocessor(target, self.threads_per_group, registers, self.shared_bytes);
        self.occupancy_cap
            .map_or(groups, |cap| groups.min(cap.groups))
    }
}

/// Plans whose pack addresses fold unless a row rule or the request says
/// otherwise ([`Plan::folded_pack_addresses`]): register plans, and
/// streamed plans under an occupancy cap.
fn folds_by_default(residency: Residency, occupancy_cap: Option<OccupancyCap>) -> bool {
    residency == Residency::Registers || occupancy_cap.is_some()
}

/// Groups of `threads` threads at `registers` per thread, each with
/// `shared_bytes` of shared memory, that fit on one multiprocessor at once
/// (at least 1): the occupancy the cost model assumes for a plan.
pub fn groups_per_multiprocessor(
    target: &Target,
    threads: u32,
    registers: u32,
    shared_bytes: u32,
) -> u32 {
    let by_threads = target.max_threads_per_multiprocessor / threads.max(1);
    let by_registers = target.registers_per_group / (registers.max(1) * threads.max(1));
    by_threads
        .min(by_registers)
        .min(groups_by_shared_memory(target, shared_bytes))
        .clamp(1, 32)
}

/// Groups whose `shared_bytes` (and the hardware's reserve) fit in one
/// multiprocessor's shared memory.
fn groups_by_shared_memory(target: &Target, shared_bytes: u32) -> u32 {
    target.shared_bytes_per_multiprocessor
        / (shared_bytes + crate::target::SHARED_RESERVED_PER_GROUP)
}

/// Registers per thread a group may use for `groups` of `threads` threads
/// to share one multiprocessor (whole multiples of 8, as sm_90 allocates).
fn register_budget(target: &Target, threads: u32, groups: u32) -> u32 {
    (target.registers_per_group / (threads.max(1) * groups.max(1))) / 8 * 8
}

/// How far over the next occupancy step's budget the compiler's count may
/// be for the promise to be worth a compile: rmsnorm bf16 4096x131072 went
/// from 71 to the budget of 64 registers (1.11x) without spilling and ran
/// 659 -> 599 µs; softmax (80, 1.25x) and layernorm (117) spilled under the
/// same promise and slowed 27-38%.
const OCCUPANCY_STEP_SLACK: f64 = 1.15;

/// The occupancy promise worth trying once the compiler's register count
/// for a plan is known: one more group per multiprocessor than `registers`
/// allows, when the count is within [`OCCUPANCY_STEP_SLACK`] of that step's
/// budget and the thread and shared-memory limits permit it. The caller compiles the promise
/// and keeps it only if nothing spills.
pub fn occupancy_step_to_try(
    target: &Target,
    threads: u32,
    registers: u32,
    shared_bytes: u32,
) -> Option<u32> {
    let now = groups_per_multiprocessor(target, threads, registers, shared_bytes);
    let next = now + 1;
    let budget = register_budget(target, threads, next);
    let fits = next * threads <= target.max_threads_per_multiprocessor
        && groups_by_shared_memory(target, shared_bytes) >= next;
    let close = f64::from(registers) <= f64::from(budget) * OCCUPANCY_STEP_SLACK;
    (fits && budget >= BASE_REGISTERS && registers > budget && close).then_some(next)
}

/// Aim for a few elements per worker; widen into a cluster while resident
/// tiles would not fit in registers.
fn auto_workers(
    n: usize,
    pack: u32,
    resident_tiles: usize,
    target: &Target,
    budget: &dyn Fn(u32) -> usize,
) -> u32 {
    let want = n.div_ceil(pack as usize * AUTO_ELEMENTS_PER_WORKER);
    let mut w = (want.next_power_of_two() as u32).clamp(1, target.max_threads_per_group);
    let layout = |w: u32| Layout {
        workers: w,
        pack,
        unroll: 1,
        rows_per_group: 1,
    };
    while resident_tiles > 0
        && w < target.max_workers()
        && resident_tiles * layout(w).slot_bound(n) > budget(layout(w).threads_per_group(target))
    {
        w *= 2;
    }
    w
}

/// The analysis with every column load (weight, bias) that is first needed
/// after the first tile phase also demanded in that phase and resident, so
/// the emitter loads it there and keeps it in private slots.
fn hoist_column_loads(program: &Program, analysis: &Analysis) -> Analysis {
    use lanefold_ir::{BufferKind, Instr, Kind, Value};
    let kind_of = |buffer: &str| program.input(buffer).map(|d| d.kind);
    let loads = || {
        program
            .body
            .iter()
            .enumerate()
            .filter_map(|(at, i)| match i {
                Instr::Load { buffer } if analysis.kinds[at] == Kind::Tile => {
                    Some((at, kind_of(buffer)))
                }
                _ => None,
            })
    };
    let first_row_phase = loads()
        .filter(|(_, k)| *k == Some(BufferKind::Row))
        .filter_map(|(at, _)| analysis.demanded[at].first().copied())
        .min();
    let mut out = analysis.clone();
    let Some(first) = first_row_phase else {
        return out;
    };
    for (at, kind) in loads() {
        if kind == Some(BufferKind::Column)
            && analysis.demanded[at].first().is_some_and(|&p| p > first)
        {
            out.demanded[at].insert(first);
            let v = Value(at as u32);
            if !out.resident.contains(&v) {
                out.resident.push(v);
            }
        }
    }
    out.resident.sort_by_key(|v| v.index());
    out
}

/// Bytes of independent loads each worker should have in flight in a
/// streamed loop: on the H200 sum search (2026-11-29-sum-unroll-search-h200)
/// 8 bytes ran at 0.84x of the best, 16 at 0.94x, 32-64 at 0.98-1.0x.
const AUTO_BYTES_IN_FLIGHT: u32 = 64;
/// The same for a streamed plan that re-reads its tiles: the best plan of
/// rmsnorm f32 4096x32768 (2026-11-29-wide-rows-search-h200 and
/// norms-search-h200: W=1024 V=4, 270.6 µs) had all 8 of its 16-byte chunks
/// in flight per phase (its loops were then always fully unrolled).
const AUTO_BYTES_IN_FLIGHT_REREAD: u32 = 128;

/// Stripe unroll for the model mapping: enough chunks per loop step for
/// [`AUTO_BYTES_IN_FLIGHT`] (or, re-reading tiles,
/// [`AUTO_BYTES_IN_FLIGHT_REREAD`]), never more than the worker's full
/// chunks. U changes only how the loop is unrolled, never the arithmetic
/// order.
fn auto_unroll(n: usize, workers: u32, pack: u32, dtype: DType, rereads: bool) -> u32 {
    let access = pack * dtype.size_bytes() as u32;
    let full = (n / (workers as usize * pack as usize)).max(1) as u32;
    let bytes = if rereads {
        AUTO_BYTES_IN_FLIGHT_REREAD
    } else {
        AUTO_BYTES_IN_FLIGHT
    };
    (bytes / access).clamp(1, 8).min(full)
}

/// Pack short rows so groups have about 256 threads, but keep at least one
/// group per multiprocessor when there are enough rows for that.
fn auto_rows_per_group(workers: u32, rows: usize, target: &Target) -> u32 {
    if workers >= target.max_threads_per_group {
        return 1;
    }
    let mut g = (AUTO_GROUP_THREADS / workers).max(1);
    g = g.min((rows as u32).next_power_of_two());
    while g > 1 && rows.div_ceil(g as usize) < target.multiprocessors as usize {
        g /= 2;
    }
    g
}

/// The Cartesian product of W, V and U lists (0 = automatic) over `base`.
pub fn enumerate(
    problem: &Problem,
    target: &Target,
    base: &LayoutRequest,
    workers: &[u32],
    packs: &[u32],
    unrolls: &[u32],
) -> Vec<Candidate> {
    let mut out = vec![];
    for &w in workers {
        for &v in packs {
            for &u in unrolls {
                let request = LayoutRequest {
                    workers: w,
                    pack: v,
                    unroll: u,
                    ..*base
                };
                out.push(Candidate {
                    request,
                    outcome: plan(problem, target, &request),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanefold_ir::{BufferKind, Builder};

    fn problem(op: Operator, shape: &str) -> Problem {
        typed(op, DType::F32, shape)
    }

    /// `op` with default options in `dtype` on `shape`.
    fn typed(op: Operator, dtype: DType, shape: &str) -> Problem {
        Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            shape.parse().unwrap(),
        )
    }

    /// The automatic request of a user who asks for nothing.
    fn automatic() -> LayoutRequest {
        LayoutRequest {
            mapper: MapperPolicy::Model,
            ..Default::default()
        }
    }

    fn req(w: u32, v: u32) -> LayoutRequest {
        LayoutRequest {
            workers: w,
            pack: v,
            ..Default::default()
        }
    }

    /// The long-row W search on the H200 (8 groups of 256 threads: 1133 µs
    /// on softmax f32 4096x131072 against 1410 in 4 groups of 512): the
    /// model mapping sizes cluster groups itself unless the user did.
    #[test]
    fn the_model_mapping_chooses_256_thread_cluster_groups_for_long_rows() {
        let p = problem(Operator::Softmax, "4096x131072");
        let t = Target::h200();
        let auto = automatic();
        let chosen = plan(&p, &t, &auto).unwrap();
        assert_eq!(
            (chosen.threads_per_group, chosen.groups_per_row),
            (256, 8),
            "{}",
            chosen.describe()
        );
        let asked = LayoutRequest {
            cluster_group_threads: 512,
            ..auto
        };
        let kept = plan(&p, &t, &asked).unwrap();
        assert_eq!(kept.threads_per_group, 512, "{}", kept.describe());
        // Rows inside one group never change with the cluster group size.
        let short = plan(&problem(Operator::Softmax, "4096x4096"), &t, &auto).unwrap();
        assert_eq!(short.groups_per_row, 1);
        assert!(short.threads_per_group <= 1024);
    }

    /// Streamed loops that re-read tiles keep 128 bytes in flight per worker
    /// (the measured best rmsnorm f32 4096x32768 plan), read-once loops 64.
    #[test]
    fn automatic_unroll_keeps_more_in_flight_when_a_streamed_plan_rereads() {
        let t = Target::h200();
        let stream = LayoutRequest {
            workers: 1024,
            pack: 4,
            residency: ResidencyRequest::Stream,
            mapper: MapperPolicy::Model,
            ..Default::default()
        };
        let rereads = plan(&problem(Operator::Rmsnorm, "4096x32768"), &t, &stream).unwrap();
        assert!(rereads.rereads_tiles());
        assert_eq!(rereads.layout.unroll, 8);
        let once = plan(&problem(Operator::Sum, "4096x32768"), &t, &stream).unwrap();
        assert!(!once.rereads_tiles());
        assert_eq!(once.layout.unroll, 4);
        // Never more than the worker's full chunks: 2 on 1024x8192 at W=1024.
        let short = plan(&problem(Operator::Rmsnorm, "64x8192"), &t, &stream).unwrap();
        assert_eq!(short.layout.unroll, 2);
    }

    #[test]
    fn invalid_widths_are_refused() {
        let p = problem(Operator::Rmsnorm, "4x4096");
        let t = Target::h200();
        for r in [req(48, 1), req(32, 3), req(16384, 1)] {
            assert!(
                matches!(plan(&p, &t, &r), Err(Refusal::InvalidWidth(_))),
                "{r:?}"
            );
        }
        let too_many = LayoutRequest {
            rows_per_group: 8,
            ..req(256, 1)
        };
        assert!(matches!(
            plan(&p, &t, &too_many),
            Err(Refusal::InvalidWidth(_))
        ));
    }

    #[test]
    fn missing_permission_is_refused_and_auto_falls_back_to_one_worker() {
        let exact = Problem {
            program: Operator::Sum.program(OperatorOptions::default()).exact(),
            ..problem(Operator::Sum, "4x4096")
        };
        let t = Target::h200();
        let err = plan(&exact, &t, &req(32, 1)).unwrap_err();
        assert!(matches!(err, Refusal::MissingPermission(_)), "{err}");
        let auto = plan(&exact, &t, &LayoutRequest::default()).unwrap();
        assert_eq!(auto.layout.workers, 1);
        assert_eq!(auto.order, ReductionOrder::Sequential);
        // An explicit exact request on a permitting program is honoured too.
        let seq = LayoutRequest {
            order: Some(ReductionOrder::Sequential),
            ..req(64, 1)
        };
        assert!(matches!(
            plan(&problem(Operator::Sum, "4x4096"), &t, &seq),
            Err(Refusal::MissingPermission(_))
        ));
    }

    #[test]
    fn max_only_programs_need_no_permission() {
        let mut b = Builder::new("rowmax");
        let x = b.input("x", BufferKind::Row);
        let m = b.reduce(lanefold_ir::ReduceOp::Max, x);
        b.output("m", BufferKind::RowScalar, m);
        let p = Problem {
            program: b.finish().exact(),
            dtype: DType::F32,
            shape: "2x100".parse().unwrap(),
        };
        assert!(plan(&p, &Target::h200(), &req(32, 1)).is_ok());
    }

    #[test]
    fn resource_overflow_is_refused() {
        let t = Target::h200();
        let p = problem(Operator::Layernorm, "2x262144");
        let forced = LayoutRequest {
            residency: ResidencyRequest::Registers,
            ..req(32, 4)
        };
        let err = plan(&p, &t, &forced).unwrap_err();
        assert!(
            matches!(
                err,
                Refusal::ResourceOverflow {
                    resource: "private slots",
                    ..
                }
            ),
            "{err}"
        );
        // Automatic residency streams instead of refusing.
        let auto = plan(&p, &t, &req(32, 4)).unwrap();
        assert_eq!(auto.residency, Residency::Stream);

        let tiny = Target {
            shared_bytes_per_group: 8,
            ..Target::h200()
        };
        let err = plan(&problem(Operator::Softmax, "4x4096"), &tiny, &req(1024, 1)).unwrap_err();
        assert!(matches!(
            err,
            Refusal::ResourceOverflow {
                resource: "shared memory",
                ..
            }
        ));

        let few_registers = Target {
            registers_per_group: 16 * 1024,
            ..Target::h200()
        };
        let err = plan(
            &problem(Operator::Sum, "4x4096"),
            &few_registers,
            &req(1024, 8),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            Refusal::ResourceOverflow {
                resource: "registers",
                ..
            }
        ));
    }

    #[test]
    fn element_only_program_refuses_a_reduction_layout() {
        let p = problem(Operator::Add, "4x4096");
        let r = LayoutRequest {
            order: Some(ReductionOrder::Sequential),
            ..Default::default()
        };
        assert!(matches!(
            plan(&p, &Target::h200(), &r),
            Err(Refusal::ElementOnly(_))
        ));
        assert!(plan(&p, &Target::h200(), &LayoutRequest::default()).is_ok());
    }

    #[test]
    fn seed_mapping_packs_short_rows_and_spans_clusters_for_long_ones() {
        let t = Target::h200();
        let seed = LayoutRequest {
            mapper: MapperPolicy::Seed,
            ..Default::default()
        };
        let short = plan(&problem(Operator::Rmsnorm, "32768x127"), &t, &seed).unwrap();
        assert!(short.layout.rows_per_group > 1, "{}", short.describe());
        assert_eq!(short.layout.pack, 1);
        let few = plan(&problem(Operator::Rmsnorm, "17x257"), &t, &seed).unwrap();
        assert_eq!(few.layout.rows_per_group, 1);
        let long = plan(&problem(Operator::Softmax, "64x262144"), &t, &seed).unwrap();
        assert!(long.groups_per_row > 1, "{}", long.describe());
        assert_eq!(long.residency, Residency::Registers);
        assert_eq!(
            long.tree.lanes * long.tree.warps * long.tree.groups,
            long.layout.workers
        );
    }

    #[test]
    fn requests_recorded_before_the_model_mapping_mean_the_seed_mapping() {
        assert_eq!(LayoutRequest::default().mapper, MapperPolicy::Model);
        let mut old = serde_json::to_value(LayoutRequest::default()).unwrap();
        old.as_object_mut().unwrap().remove("mapper");
        let read: LayoutRequest = serde_json::from_value(old).unwrap();
        assert_eq!(read.mapper, MapperPolicy::Seed);
    }

    /// Regression: the model mapping picked W=8 V=8 G=32 with streamed
    /// re-reads for bf16 cross_entropy (350-646 µs on the H200 where a
    /// register plan ran 118 µs) and W=32 V=8 G=8 streamed for bf16
    /// residual_layernorm 4096x32768 (1793 µs vs torch's 424 µs).
    #[test]
    fn model_mapping_keeps_resident_tiles_in_registers_when_it_can() {
        for (op, shape) in [
            (Operator::CrossEntropy, "32768x4096"),
            (Operator::CrossEntropy, "16384x8192"),
            (Operator::CrossEntropy, "4096x32768"),
            (Operator::ResidualLayernorm, "4096x32768"),
        ] {
            let mut pr = problem(op, shape);
            pr.dtype = DType::Bf16;
            let p = plan(&pr, &Target::h200(), &LayoutRequest::default()).unwrap();
            // residual_layernorm bf16 4096x32768 now takes the search's
            // streamed winner, one 1024-thread group per row (312 µs), not
            // the narrow W=32 stream this test pins out.
            let searched_stream = op == Operator::ResidualLayernorm && p.layout.workers == 1024;
            assert!(
                p.residency == Residency::Registers || searched_stream,
                "{op} {shape}: {}",
                p.describe()
            );
        }
    }

    /// Regression: roofline-v2 predicted every sum layout alike and the
    /// model mapping took the first, W=8 U=1 (128-byte row spans, 16 bytes
    /// in flight per worker): 0.71-0.86x of the searched winner on the
    /// H200 (`2026-11-29-sum-unroll-search-h200`). The seed keeps U=1.
    #[test]
    fn sum_model_mapping_reads_wide_spans_with_loads_in_flight() {
        for (dtype, shape) in [
            (DType::F32, "32768x4096"),
            (DType::F32, "16384x8192"),
            (DType::Bf16, "4096x32768"),
        ] {
            let mut pr = problem(Operator::Sum, shape);
            pr.dtype = dtype;
            let p = plan(&pr, &Target::h200(), &LayoutRequest::default()).unwrap();
            let l = p.layout;
            let span = l.workers * l.pack * dtype.size_bytes() as u32;
            let in_flight = l.unroll * l.pack * dtype.size_bytes() as u32;
            assert!(span >= 256, "{shape}: {}", p.describe());
            assert!(in_flight >= 32, "{shape}: {}", p.describe());
            let seed = LayoutRequest {
                mapper: MapperPolicy::Seed,
                ..Default::default()
            };
            assert_eq!(plan(&pr, &Target::h200(), &seed).unwrap().layout.unroll, 1);
        }
    }

    /// Smaller cluster groups: W=2048 over 8 groups of 256 threads (the
    /// tree's levels follow), named in `describe`; sizes that are not a
    /// power of two from a warp to a group are refused.
    #[test]
    fn cluster_group_threads_resize_a_rows_groups() {
        let p = problem(Operator::Softmax, "2x131072");
        let t = Target::h200();
        let req = |threads| LayoutRequest {
            workers: 2048,
            pack: 4,
            cluster_group_threads: threads,
            ..Default::default()
        };
        let small = plan(&p, &t, &req(256)).unwrap();
        assert_eq!((small.groups_per_row, small.threads_per_group), (8, 256));
        assert_eq!(
            (small.tree.lanes, small.tree.warps, small.tree.groups),
            (32, 8, 8)
        );
        assert!(small.describe().contains("cluster=8 group-threads=256"));
        let default = plan(&p, &t, &req(0)).unwrap();
        assert_eq!(
            (default.groups_per_row, default.threads_per_group),
            (4, 512)
        );
        assert!(!default.describe().contains("group-threads"));
        for bad in [16, 384, 2048] {
            assert!(
                matches!(plan(&p, &t, &req(bad)), Err(Refusal::InvalidWidth(_))),
                "{bad}"
            );
        }
        // The widest row shrinks with the groups: 16 groups of 256.
        let too_wide = LayoutRequest {
            workers: 8192,
            ..req(256)
        };
        assert!(plan(&p, &t, &too_wide).is_err());
    }

    #[test]
    fn a_cluster_of_two_rows_holds_the_same_slice_of_each() {
        // G=2 on a row spanning a cluster: every group takes the same
        // slice of two rows (so it reads each column slice once for both),
        // the per-row tree unchanged.
        let p = problem(Operator::Layernorm, "17x131072");
        let t = Target::h200();
        let req = |rows_per_group, threads| LayoutRequest {
            workers: 2048,
            pack: 4,
            rows_per_group,
            cluster_group_threads: threads,
            push_cluster_reduce: true,
            stage_columns: true,
            ..Default::default()
        };
        let one = plan(&p, &t, &req(1, 128)).unwrap();
        let two = plan(&p, &t, &req(2, 128)).unwrap();
        assert_eq!((one.groups_per_row, one.threads_per_group), (16, 128));
        assert_eq!((two.groups_per_row, two.threads_per_group), (16, 256));
        assert_eq!(two.tree, one.tree);
        assert_eq!(two.slot_bound, one.slot_bound);
        // 17 rows: 9 clusters of 16 groups, the last one's second row idle.
        assert_eq!(two.groups, 9 * 16);
        assert!(two.pushed_cluster_reduce);
        // The stage is per row's slice: not with two rows (refused quietly).
        assert!(one.staged_columns() && !two.staged_columns());
        // Each row has its warps' and its cluster's slots, then one
        // mbarrier per reduction (8-byte aligned).
        let r = two.analysis.reductions.len() as u32;
        assert_eq!(two.shared_bytes, 4 * r * 2 * (4 + 16) + 8 * r + 4);
        // At most 1024 threads a group: 8 rows of 256 do not fit.
        assert!(matches!(
            plan(&p, &t, &req(8, 256)),
            Err(Refusal::InvalidWidth(m)) if m.contains("group limit")
        ));
        // Its description and pinned request name the per-row group size,
        // so a replay plans the same kernel again.
        assert!(two.describe().contains("G=2") && two.describe().contains("group-threads=128"));
        let again = plan(&p, &t, &two.pinned_request(&LayoutRequest::default(), 0)).unwrap();
        assert_eq!(again.describe(), two.describe());
        assert_eq!(again.threads_per_group, 256);
        // The automatic mapping never asks for it.
        let auto = plan(&p, &t, &LayoutRequest::default()).unwrap();
        assert_eq!(auto.layout.rows_per_group, 1);
    }

    #[test]
    fn model_mapping_picks_the_lowest_prediction_of_its_family() {
        use crate::cost::{CostPolicy, Features, RooflinePolicy};
        let t = Target::h200();
        for shape in ["1x127", "17x257", "64x4096", "1024x4096", "8x131072"] {
            let p = problem(Operator::Rmsnorm, shape);
            // The model's own pick: rules beside it replace some (tested
            // with each rule).
            let chosen = match model_choice(&p, &t, &automatic()).unwrap() {
                ModelChoice::Pick(pick) => plan(&p, &t, &pick).unwrap(),
                ModelChoice::Seed(_) => panic!("{shape}: the model chose nothing"),
            };
            let predict = |pl: &Plan| RooflinePolicy.predict_us(&Features::of(pl, &t), pl, &t);
            let best = predict(&chosen);
            let mut w = 8;
            while w <= t.max_workers() {
                for v in VALID_PACKS {
                    if let Ok(other) = plan(&p, &t, &req(w, v)) {
                        // Streamed plans compete only where no register
                        // plan is legal (see `model_pick`).
                        if other.rereads_tiles() && !chosen.rereads_tiles() {
                            continue;
                        }
                        assert!(
                            predict(&other) * 1.02 >= best,
                            "{shape}: W={w} V={v} predicts more than 2% lower than {}",
                            chosen.describe()
                        );
                    }
                }
                w *= 2;
            }
        }
    }

    #[test]
    fn model_mapping_with_batch_invariance_ignores_the_row_count() {
        let t = Target::h200();
        let r = LayoutRequest {
            mapper: MapperPolicy::Model,
            batch_invariant: true,
            ..Default::default()
        };
        let keys: Vec<_> = ["1x4096", "7x4096", "4096x4096", "100000x4096"]
            .iter()
            .map(|s| {
                plan(&problem(Operator::Softmax, s), &t, &r)
                    .unwrap()
                    .arithmetic_key()
            })
            .collect();
        assert!(keys.windows(2).all(|k| k[0] == k[1]), "{keys:?}");
    }

    /// Found by the CUDA selftest: on the H200,
    /// layernorm and residual_layernorm took one-pass moments for fewer
    /// rows than multiprocessors (and layernorm for tiles larger than the
    /// L2) but not otherwise, so a batch-invariant row's bits depended on
    /// how many rows ran with it.
    #[test]
    fn regression_batch_invariant_norms_take_one_arithmetic_at_every_row_count() {
        let t = Target::h200();
        let r = LayoutRequest {
            batch_invariant: true,
            ..Default::default()
        };
        for op in Operator::SIX {
            for dtype in [DType::F32, DType::Bf16] {
                for n in [127, 257, 4096, 8192, 32768] {
                    let keys: Vec<_> = [1, 7, 4096, 16384]
                        .iter()
                        .map(|rows| {
                            let p =
                                plan(&typed(op, dtype, &format!("{rows}x{n}")), &t, &r).unwrap();
                            p.arithmetic_key()
                        })
                        .collect();
                    assert!(
                        keys.windows(2).all(|k| k[0] == k[1]),
                        "{op} {dtype} N={n}: {keys:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_occupancy_cap_holds_the_groups_and_refuses_what_it_cannot_hold() {
        let t = Target::h200();
        let req = |occupancy, occupancy_cap| LayoutRequest {
            workers: 256,
            pack: 4,
            occupancy,
            occupancy_cap,
            ..Default::default()
        };
        let p = problem(Operator::Rmsnorm, "4096x4096");
        let capped = plan(&p, &t, &req(0, 3)).unwrap();
        assert_eq!(capped.occupancy_cap.map(|c| c.groups), Some(3));
        assert_eq!(capped.groups_per_multiprocessor(&t, 32), 3);
        let free = plan(&p, &t, &req(0, 0)).unwrap();
        assert_eq!(free.groups_per_multiprocessor(&t, 32), 8);
        // The pinned request keeps the cap.
        let again = plan(&p, &t, &capped.pinned_request(&LayoutRequest::default(), 0)).unwrap();
        assert_eq!(again, capped);
        let refused = plan(&p, &t, &req(4, 3)).unwrap_err().to_string();
        assert!(refused.contains("above the cap"), "{refused}");
    }

    #[test]
    fn norm_rows_of_128_kib_stream_one_row_per_multiprocessor() {
        let t = Target::h200();
        let auto = LayoutRequest::default();
        for (op, dtype) in [
            (Operator::Rmsnorm, DType::F32),
            (Operator::Layernorm, DType::F32),
        ] {
            let p = plan(&typed(op, dtype, "4096x32768"), &t, &auto).unwrap();
            let what = format!("{op} {dtype}: {}", p.describe());
            assert_eq!(p.residency, Residency::Stream, "{what}");
            assert_eq!(p.layout.workers, 1024, "{what}");
            assert_eq!(p.occupancy_cap.map(|c| c.groups), Some(1), "{what}");
            assert_eq!(p.min_groups_per_multiprocessor, Some(1), "{what}");
            assert!(p.batched_loads, "{what}");
        }
        // Rows of 64 KiB, softmax, rows a cluster spans, and
        // residual_layernorm bf16, whose h fits in registers since session
        // 17, stay as they were.
        for (op, dtype, shape) in [
            (Operator::ResidualLayernorm, DType::Bf16, "4096x32768"),
            (Operator::Rmsnorm, DType::Bf16, "4096x32768"),
            (Operator::Layernorm, DType::Bf16, "4096x32768"),
            (Operator::Softmax, DType::F32, "4096x32768"),
            (Operator::ResidualLayernorm, DType::F32, "4096x32768"),
            (Operator::Rmsnorm, DType::F32, "16384x8192"),
        ] {
            let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
            let what = format!("{op} {dtype} {shape}: {}", p.describe());
            assert_eq!(p.occupancy_cap, None, "{what}");
            assert!(!p.batched_loads, "{what}");
        }
        let cpu = plan(
            &typed(Operator::Rmsnorm, DType::F32, "4096x32768"),
            &Target::cpu(),
            &auto,
        )
        .unwrap();
        assert_eq!(cpu.occupancy_cap, None);
    }

    #[test]
    fn explicit_packed_register_requests_are_budgeted_in_packed_words() {
        let t = Target::h200();
        let p = typed(Operator::Layernorm, DType::Bf16, "4096x32768");
        let req = |pack_resident| LayoutRequest {
            workers: 1024,
            pack: 8,
            unroll: 4,
            residency: ResidencyRequest::Registers,
            pack_resident,
            one_pass_moments: true,
            ..Default::default()
        };
        let packed = plan(&p, &t, &req(true)).unwrap();
        assert!(packed.packed_resident && packed.residency == Residency::Registers);
        assert!(packed.registers <= 64, "{}", packed.registers);
        let refused = plan(&p, &t, &req(false)).unwrap_err().to_string();
        assert!(
            refused.contains("private slots needs 32, limit 28"),
            "{refused}"
        );
        // The automatic mapping keeps the unpacked estimate.
        let auto = LayoutRequest {
            pack_resident: true,
            ..Default::default()
        };
        assert_ne!(plan(&p, &t, &auto).unwrap().layout.workers, 1024);
        // f32 has no packed words.
        let f32 = typed(Operator::Layernorm, DType::F32, "4096x32768");
        let f32_req = LayoutRequest {
            pack: 4,
            unroll: 8,
            ..req(true)
        };
        assert!(plan(&f32, &t, &f32_req).is_err());
    }

    #[test]
    fn enumerate_is_the_cartesian_product() {
        let p = problem(Operator::Rmsnorm, "64x4096");
        let c = enumerate(
            &p,
            &Target::h200(),
            &LayoutRequest::default(),
            &[0, 32, 128, 256],
            &[1, 2, 4],
            &[1],
        );
        assert_eq!(c.len(), 12);
        assert!(c.iter().all(|c| c.outcome.is_ok()));
    }

    #[test]
    fn tied_plans_of_one_group_size_go_to_the_fewest_registers() {
        let score = |predicted_us, registers, threads_per_group| ModelScore {
            rereads_tiles: false,
            predicted_us,
            groups_per_row: 1,
            registers,
            threads_per_group,
        };
        // Same group size, 0.2% apart: the lighter plan wins.
        assert_eq!(
            model_pick(&[score(5.40, 110, 256), score(5.41, 64, 256)]),
            Some(1)
        );
        // Another group size is no candidate for the register tie-break.
        assert_eq!(
            model_pick(&[score(5.40, 110, 256), score(5.41, 64, 512)]),
            Some(0)
        );
        // Outside the 2% tie the prediction decides.
        assert_eq!(
            model_pick(&[score(5.00, 110, 256), score(5.41, 64, 256)]),
            Some(0)
        );
    }

    #[test]
    fn regression_rmsnorm_bf16_1024x4096_takes_the_lighter_of_two_tied_layouts() {
        // W=64 V=8 G=4 (110 registers) ran 4.68 us, W=128 V=8 G=2 (64
        // registers) 4.10 (2026-11-30-rmsnorm-1024-search-h200).
        let p = typed(Operator::Rmsnorm, DType::Bf16, "1024x4096");
        let r = automatic();
        let chosen = plan(&p, &Target::h200(), &r).unwrap();
        assert_eq!(
            (
                chosen.layout.workers,
                chosen.layout.pack,
                chosen.layout.rows_per_group
            ),
            (128, 8, 2),
            "{}",
            chosen.describe()
        );
    }

    #[test]
    fn regression_bf16_1024x4096_softmax_and_norms_take_8_byte_packs() {
        // The grid on today's kernels (2026-12-01-t4-grid-1024x4096-s20-h200):
        // the 16-byte-pack layouts adopted earlier had fallen to 91-97% of
        // 8-byte-pack winners.
        for (op, want) in [
            (Operator::Softmax, (256, 4, 2, 1)),
            (Operator::Layernorm, (128, 4, 2, 2)),
            (Operator::ResidualLayernorm, (256, 4, 4, 1)),
        ] {
            let p = typed(op, DType::Bf16, "1024x4096");
            let chosen = plan(&p, &Target::h200(), &automatic()).unwrap();
            let l = chosen.layout;
            assert_eq!(
                (l.workers, l.pack, l.unroll, l.rows_per_group),
                want,
                "{op:?}: {}",
                chosen.describe()
            );
        }
    }

    #[test]
    fn regression_few_rows_take_at_most_512_workers_256_for_softmax_and_cross_entropy() {
        // A decode-shape search: the model spread 1-64 rows of 4096 f32
        // over 1024 workers, 1.05-1.22x slower than 512 (256 for softmax and
        // cross_entropy).
        let h200 = Target::h200();
        for op in Operator::SIX {
            let cap = few_rows_max_workers(op);
            for rows in [1, 8, 32, 64, 131] {
                let p = typed(op, DType::F32, &format!("{rows}x4096"));
                let got = plan(&p, &h200, &automatic()).unwrap();
                assert!(
                    got.layout.workers <= cap,
                    "{op:?} {rows}: {}",
                    got.describe()
                );
                assert_eq!(got.groups_per_row, 1, "{}", got.describe());
                if rows > 64 {
                    continue; // the model's own W may be narrower there
                }
                assert_eq!(got.layout.workers, cap, "{op:?} {rows}: {}", got.describe());
                // Every pack in flight: resident tiles load them all at
                // U=1; a sum unrolls over all of them.
                let chunks = 4096 / (cap * got.layout.pack);
                let unroll = if op == Operator::Sum { chunks } else { 1 };
                assert_eq!(got.layout.unroll, unroll, "{}", got.describe());
                let note = automatic_note(&p, &h200, &automatic()).unwrap();
                assert!(note.contains("fewer rows than multiprocessors"), "{note}");
            }
            // As many rows as multiprocessors, a row that spans a cluster,
            // and the CPU keep the model's pick.
            for shape in ["132x4096", "1024x4096", "1x262144"] {
                let p = typed(op, DType::F32, shape);
                let note = automatic_note(&p, &h200, &automatic());
                assert!(
                    !note.is_some_and(|n| n.contains("fewer rows")),
                    "{op:?} {shape}"
                );
            }
            let p = typed(op, DType::F32, "8x4096");
            assert!(!automatic_note(&p, &Target::cpu(), &automatic())
                .is_some_and(|n| n.contains("fewer rows")));
        }
    }

    /// Early columns apply to register plans of programs with columns and
    /// vector packs, at most the row's full chunks, and never together
    /// with ordered or hoisted columns, or on streamed plans.
    #[test]
    fn early_columns_are_clamped_to_the_chunks_and_marked_where_they_apply() {
        let target = Target::h200();
        let make = |op, shape: &str, edit: &dyn Fn(&mut LayoutRequest)| {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                DType::F32,
                shape.parse().unwrap(),
            );
            let mut request = LayoutRequest {
                workers: 256,
                pack: 4,
                unroll: 1,
                residency: ResidencyRequest::Registers,
                early_columns: 8,
                ..Default::default()
            };
            edit(&mut request);
            plan(&problem, &target, &request).unwrap()
        };
        // 4096 / (256 * 4) = 4 chunks: 8 asked, 4 given.
        let p = make(Operator::Layernorm, "4x4096", &|_| {});
        assert_eq!(p.early_columns, 4, "{}", p.describe());
        assert!(p.describe().contains("early-columns=4"));
        let p = make(Operator::Rmsnorm, "4x4096", &|r| r.early_columns = 1);
        assert_eq!(p.early_columns, 1);
        // No columns, streamed, ordered, hoisted, scalar packs: none.
        for p in [
            make(Operator::Softmax, "4x4096", &|_| {}),
            make(Operator::Layernorm, "4x4096", &|r| {
                r.residency = ResidencyRequest::Stream
            }),
            make(Operator::Layernorm, "4x4096", &|r| r.ordered_columns = true),
            make(Operator::Layernorm, "4x4096", &|r| r.hoist_columns = true),
            make(Operator::Layernorm, "4x4096", &|r| r.pack = 1),
        ] {
            assert_eq!(p.early_columns, 0, "{}", p.describe());
        }
        // The request a plan records asks for what the plan does.
        let p = make(Operator::Layernorm, "4x4096", &|r| r.early_columns = 2);
        assert_eq!(
            p.pinned_request(&LayoutRequest::default(), 0).early_columns,
            2
        );
    }

    /// Paired in 3 rounds: layernorm f32 long rows
    /// gain 1.009-1.021x with one chunk of early columns; bf16 and rmsnorm
    /// f32 did not, and shorter rows were not measured.
    #[test]
    fn regression_layernorm_long_rows_load_chunks_of_columns_early() {
        let target = Target::h200();
        for (op, dtype, shape, early) in [
            (Operator::Layernorm, DType::F32, "4096x131072", 2),
            // Two beside 10 shared chunks.
            (Operator::Layernorm, DType::F32, "1024x262144", 2),
            // Two: 1.007-1.009x paired.
            (Operator::Layernorm, DType::Bf16, "1024x262144", 2),
            (Operator::Layernorm, DType::F32, "4096x32768", 0),
            (Operator::Rmsnorm, DType::F32, "1024x262144", 0),
            (Operator::ResidualLayernorm, DType::F32, "1024x262144", 0),
        ] {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                dtype,
                shape.parse().unwrap(),
            );
            let p = plan(&problem, &target, &LayoutRequest::default()).unwrap();
            assert_eq!(
                p.early_columns,
                early,
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
        }
    }

    /// Regression: the register fit ignored `--shared-chunks`, so a
    /// 1024-thread group in a cluster of four was refused an f32 row slice
    /// of 64 slots even with 12 of its 16 chunks in shared memory.
    #[test]
    fn regression_shared_chunks_count_before_the_register_fit() {
        let target = Target::h200();
        let problem = typed(Operator::Layernorm, DType::F32, "1024x262144");
        let request = |shared_chunks| LayoutRequest {
            workers: 4096,
            pack: 4,
            unroll: 4,
            residency: ResidencyRequest::Registers,
            cluster_group_threads: 1024,
            shared_chunks,
            ..LayoutRequest::default()
        };
        let refused = plan(&problem, &target, &request(0))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("private slots needs 64"), "{refused}");
        let p = plan(&problem, &target, &request(12)).unwrap();
        assert_eq!(p.residency, Residency::Registers, "{}", p.describe());
        assert_eq!(p.groups_per_row, 4, "{}", p.describe());
        assert_eq!(p.shared_chunks.map(|s| s.chunks), Some(12));
        // Four chunks of four slots stay in registers.
        assert_eq!(p.registers, overhead_registers(4, DType::F32) + 16);
    }

    /// Layernorm f32 1024x262144 holding 12 of its 16 chunks in shared
    /// memory under an occupancy cap of two groups ran 1.049x paired; 10
    /// chunks and two chunks of early columns 558.3 against 570.5 µs
    /// paired; 4096x131072 the same chunks in four 256-thread groups per
    /// SM 1.055x paired. No other long row takes shared chunks; bf16
    /// 1024x262144 takes the cap.
    #[test]
    fn regression_layernorm_f32_64_slot_rows_hold_ten_chunks_in_shared_memory_from_512_rows() {
        let target = Target::h200();
        // The form ran 1.06-1.12x ahead at every row
        // count measured (512-8192), so it covers row counts, not shapes.
        for (op, dtype, shape, shared, cap) in [
            (
                Operator::Layernorm,
                DType::F32,
                "512x262144",
                Some(10),
                Some(2),
            ),
            (
                Operator::Layernorm,
                DType::F32,
                "2048x262144",
                Some(10),
                Some(2),
            ),
            (
                Operator::Layernorm,
                DType::F32,
                "8192x131072",
                Some(10),
                Some(4),
            ),
            (Operator::Layernorm, DType::F32, "256x262144", None, None),
            (
                Operator::Layernorm,
                DType::F32,
                "1024x262144",
                Some(10),
                Some(2),
            ),
            // The cap's carve-out, without shared chunks.
            (
                Operator::Layernorm,
                DType::Bf16,
                "1024x262144",
                None,
                Some(2),
            ),
            (
                Operator::Layernorm,
                DType::F32,
                "4096x131072",
                Some(10),
                Some(4),
            ),
            (Operator::Rmsnorm, DType::F32, "1024x262144", None, None),
        ] {
            let p = plan(&typed(op, dtype, shape), &target, &LayoutRequest::default()).unwrap();
            let what = format!("{op} {dtype} {shape}: {}", p.describe());
            assert_eq!(p.shared_chunks.map(|s| s.chunks), shared, "{what}");
            assert_eq!(p.occupancy_cap.map(|cap| cap.groups), cap, "{what}");
            if shared.is_some() {
                // 10 chunks x the group's threads x 16 bytes beside the
                // reduction slots, padded by the cap to its share.
                let threads = p.layout.workers / p.groups_per_row;
                assert!(p.shared_bytes >= 10 * threads * 16, "{what}");
                assert_eq!(p.early_columns, 2, "{what}");
            }
            // Evict-last columns and the L2 prefetch: bf16 only (f32 lost
            // 8% with the one and 2-5% with the other).
            assert_eq!(p.keep_columns, dtype == DType::Bf16, "{what}");
            let ahead = if dtype == DType::Bf16 { 8 } else { 0 };
            assert_eq!(p.l2_prefetch_rows, ahead, "{what}");
        }
    }

    #[test]
    fn regression_few_row_norms_take_one_pass_moments() {
        // Paired against two passes, one-pass moments
        // ran 1.02-1.13x faster on every few-row layernorm and
        // residual_layernorm case.
        let h200 = Target::h200();
        for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
            for dtype in [DType::F32, DType::Bf16] {
                for (shape, one_pass) in [
                    ("1x127", true),
                    ("17x257", true),
                    ("64x4096", true),
                    ("131x4096", true),
                    ("132x4096", false),
                    ("1024x4096", false),
                ] {
                    let p = typed(op, dtype, shape);
                    let measured = automatic().with_measured_variants(&p, &h200);
                    assert_eq!(
                        measured.one_pass_moments, one_pass,
                        "{op:?} {dtype:?} {shape}"
                    );
                    let cpu = automatic().with_measured_variants(&p, &Target::cpu());
                    assert!(!cpu.one_pass_moments);
                }
            }
        }
        // An rmsnorm has one moment only.
        let p = typed(Operator::Rmsnorm, DType::F32, "8x4096");
        assert!(
            !automatic()
                .with_measured_variants(&p, &h200)
                .one_pass_moments
        );
    }

    #[test]
    fn regression_unaligned_16_bit_rows_take_packs_of_at_most_four_except_sum() {
        // A tiny-row search: on bf16 rows of 127 and 257 every
        // access is scalar, and V=8 ran 1.10-1.19x slower than V=4.
        let h200 = Target::h200();
        for shape in ["1x127", "17x257", "3x1001"] {
            for op in [Operator::Rmsnorm, Operator::Layernorm, Operator::Softmax] {
                let p = typed(op, DType::Bf16, shape);
                let got = plan(&p, &h200, &automatic()).unwrap();
                assert!(got.layout.pack <= 4, "{op:?} {shape}: {}", got.describe());
            }
        }
        // Vector rows keep V=8, and so does a sum on scalar rows.
        let aligned = plan(
            &typed(Operator::Rmsnorm, DType::Bf16, "64x4096"),
            &h200,
            &automatic(),
        );
        assert_eq!(aligned.unwrap().layout.pack, 8);
        assert!(!scalar_pack_too_wide(
            &typed(Operator::Sum, DType::Bf16, "17x257"),
            &h200,
            8
        ));
        assert!(scalar_pack_too_wide(
            &typed(Operator::Rmsnorm, DType::Bf16, "17x257"),
            &h200,
            8
        ));
        assert!(!scalar_pack_too_wide(
            &typed(Operator::Rmsnorm, DType::Bf16, "17x257"),
            &Target::cpu(),
            8
        ));
    }

    #[test]
    fn residual_layernorm_bf16_4096x32768_keeps_h_resident_by_default_at_that_shape_only() {
        // `2026-12-01-rt-aa-h200`: 265.0 µs against the streamed plan's
        // 269.3, which had replaced the model's cluster: whole rows per pass with re-read hints, 284.8
        // µs against U=2 without hints, 310.2.
        let auto = automatic();
        let problem = typed(Operator::ResidualLayernorm, DType::Bf16, "4096x32768");
        let got = plan(&problem, &Target::h200(), &auto).unwrap();
        assert_eq!(
            got.describe(),
            "W=512 V=8 U=4 G=1 registers ordered-columns packed-resident rounded-resident \
             one-pass-moments occupancy=2"
        );
        assert_eq!(got.analysis.resident.len(), 1, "h alone");
        let note = automatic_note(&problem, &Target::h200(), &auto).unwrap();
        assert!(note.contains("h kept resident"), "{note}");
        // The variants belong to the measured shape: twice the rows, f16
        // and a batch-invariant request keep x and the residual.
        let invariant = LayoutRequest {
            batch_invariant: true,
            ..auto
        };
        for (p, request) in [
            (
                typed(Operator::ResidualLayernorm, DType::Bf16, "8192x32768"),
                auto,
            ),
            (
                typed(Operator::ResidualLayernorm, DType::F16, "4096x32768"),
                auto,
            ),
            (problem.clone(), invariant),
        ] {
            let other = plan(&p, &Target::h200(), &request).unwrap();
            assert!(
                !other.rounded_resident && !other.one_pass_moments(),
                "{}",
                other.describe()
            );
        }
        assert!(
            !plan(&problem, &Target::cpu(), &auto)
                .unwrap()
                .rounded_resident
        );
    }

    #[test]
    fn regression_a_searched_winner_keeps_the_occupancy_promise_asked_for() {
        // Regression: the winner's own promise (residual_layernorm bf16
        // 4096x32768, two groups) once replaced the request's, so a search
        // run with `--occupancy 2` no longer found today's pick of
        // layernorm bf16 1024x262144 among its candidates.
        let asked = LayoutRequest {
            occupancy: 2,
            ..automatic()
        };
        let p = typed(Operator::Layernorm, DType::Bf16, "1024x262144");
        let got = plan(&p, &Target::h200(), &asked).unwrap();
        assert_eq!(
            got.min_groups_per_multiprocessor,
            Some(2),
            "{}",
            got.describe()
        );
        assert_eq!(got.layout.workers, 4096, "{}", got.describe());
    }

    #[test]
    fn regression_rows_of_one_scalar_pack_per_worker_leave_addresses_unfolded() {
        // An opaque worker index cost 0.1 µs on 1x127 (residual_layernorm
        // bf16 1.34 -> 1.46 µs, behind torch.compile's
        // 1.35), where each worker has one scalar pack and nothing folds.
        let h200 = Target::h200();
        for op in Operator::SIX {
            for dtype in [DType::F32, DType::Bf16] {
                let tiny = plan(&typed(op, dtype, "1x127"), &h200, &automatic()).unwrap();
                assert!(!tiny.folded_pack_addresses, "{}", tiny.describe());
                assert!(tiny.describe().contains("unfolded-addresses"));
                // Several packs per worker, or one vector pack: folded.
                for shape in ["17x257", "1x4096", "32768x4096"] {
                    let p = plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
                    assert_eq!(
                        p.folded_pack_addresses,
                        p.residency == Residency::Registers || p.occupancy_cap.is_some(),
                        "{shape}: {}",
                        p.describe()
                    );
                    assert!(!p.describe().contains("unfolded-addresses"));
                }
            }
        }
        // Asked for explicitly, a register plan leaves them unfolded too.
        let asked = LayoutRequest {
            unfold_pack_addresses: true,
            ..automatic()
        };
        let p = plan(
            &typed(Operator::Rmsnorm, DType::F32, "64x4096"),
            &h200,
            &asked,
        )
        .unwrap();
        assert!(p.unfolded_pack_addresses(), "{}", p.describe());
        assert!(p.pinned_request(&automatic(), 0).unfold_pack_addresses);
    }

    #[test]
    fn regression_automatic_note_lists_no_empty_set_of_variants() {
        // residual_layernorm's measured variants include pushing, which
        // changes nothing on a row one group holds: with every other
        // variant already asked for, the note once read "automatic on the
        // H200 for this operator and row length: ;" (as it did for the
        // streamed default of residual_layernorm bf16 4096x32768).
        let asked = LayoutRequest {
            pack_resident: true,
            rounded_resident: true,
            ordered_columns: true,
            one_pass_moments: true,
            ..automatic()
        };
        let p = typed(Operator::ResidualLayernorm, DType::Bf16, "4096x32768");
        assert_eq!(plan(&p, &Target::h200(), &asked).unwrap().groups_per_row, 1);
        let note = automatic_note(&p, &Target::h200(), &asked).unwrap_or_default();
        assert!(!note.contains("row length: ;"), "{note}");
        assert!(note.contains("tuning database's schedule"), "{note}");
    }

    #[test]
    fn regression_target4_misses_take_the_searched_winner_on_the_h200_only() {
        // The automatic mapping once reached 86-89%
        // of the searched winner on these three shapes.
        let auto = automatic();
        for w in crate::tuned::shipped() {
            let (rows, rows_outside) = match w.rows.max {
                Some(r) => (r, r * 2),
                None => (w.rows.min * 4, w.rows.min / 2),
            };
            let shape = Shape { rows, n: w.n.min };
            let p = Problem::operator(w.op, OperatorOptions::default(), w.dtype, shape);
            let got = plan(&p, &Target::h200(), &auto).unwrap();
            assert_eq!(
                (
                    got.layout.workers,
                    got.layout.pack,
                    got.layout.unroll,
                    got.layout.rows_per_group
                ),
                (
                    w.schedule.workers,
                    w.schedule.pack,
                    w.schedule.unroll,
                    w.schedule.rows_per_group
                ),
                "{}",
                got.describe()
            );
            if w.schedule.residency == ResidencyRequest::Stream {
                assert_eq!(got.residency, Residency::Stream, "{}", got.describe());
            }
            if w.schedule.occupancy > 0 {
                assert_eq!(
                    got.min_groups_per_multiprocessor,
                    Some(w.schedule.occupancy)
                );
            }
            let note = automatic_note(&p, &Target::h200(), &auto).unwrap();
            assert!(note.contains(&w.evidence), "{note}");
            // Another shape of the same operator and dtype keeps the model.
            let other = Problem::operator(
                w.op,
                OperatorOptions::default(),
                w.dtype,
                Shape {
                    rows: rows_outside,
                    n: w.n.min,
                },
            );
            let note = automatic_note(&other, &Target::h200(), &auto);
            assert!(!note.is_some_and(|n| n.contains("tuning database's schedule")));
            // The CPU target keeps the model's pick.
            let cpu = plan(&p, &Target::cpu(), &auto).unwrap();
            assert!(
                automatic_note(&p, &Target::cpu(), &auto).is_none(),
                "{}",
                cpu.describe()
            );
        }
    }

    #[test]
    fn regression_cross_entropy_long_rows_take_the_online_normalizer_and_layernorm_one_pass_moments(
    ) {
        // Paired H200 benches: cross_entropy on rows over 32768 read once
        // with the online normalizer ran 1.18-1.94x faster; layernorm bf16
        // 4096x131072 with one-pass moments 1.26x; f32 1.00-1.02x on the
        // pushed cluster; rows of 32768 too.
        let t = Target::h200();
        let auto = automatic();
        let (ce, ln, sm) = (
            Operator::CrossEntropy,
            Operator::Layernorm,
            Operator::Softmax,
        );
        for (op, dtype, shape, online, moments) in [
            (ce, DType::F32, "4096x131072", true, false),
            (ce, DType::Bf16, "4096x131072", true, false),
            (ce, DType::Bf16, "1024x262144", true, false),
            (ce, DType::Bf16, "4096x65536", true, false),
            (ln, DType::Bf16, "4096x131072", false, true),
            (ln, DType::Bf16, "1024x262144", false, true),
            (ln, DType::F32, "4096x131072", false, true),
            (ln, DType::F32, "1024x262144", false, true),
            // Paired with all three peers: 1.020x f32, 1.045x bf16.
            (ln, DType::F32, "4096x32768", false, true),
            (ln, DType::Bf16, "4096x32768", false, true),
            // Measured slower or no faster, or unmeasured: unchanged.
            (ce, DType::Bf16, "4096x32768", false, false),
            (ce, DType::Bf16, "16384x8192", false, false),
            (ln, DType::Bf16, "8192x16384", false, false),
            (sm, DType::Bf16, "4096x131072", false, false),
        ] {
            let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
            assert_eq!(
                (p.online_normalizer(), p.one_pass_moments()),
                (online, moments),
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
        }
        // The streaming plan: one group per row, nothing resident.
        let p = plan(&typed(ce, DType::Bf16, "4096x131072"), &t, &auto).unwrap();
        assert_eq!(
            (p.groups_per_row, p.resident_slots),
            (1, 0),
            "{}",
            p.describe()
        );
        // Explicit layouts (search candidates, frozen replays), other
        // targets and exact programs keep the arithmetic they ask for.
        let explicit = LayoutRequest {
            workers: 2048,
            pack: 8,
            ..auto
        };
        let long_ce = typed(ce, DType::Bf16, "4096x131072");
        assert!(!plan(&long_ce, &t, &explicit).unwrap().online_normalizer());
        assert!(!plan(&long_ce, &Target::cpu(), &auto)
            .unwrap()
            .online_normalizer());
        let exact = Problem {
            program: long_ce.program.clone().exact(),
            ..long_ce
        };
        assert!(!plan(&exact, &t, &auto).unwrap().online_normalizer());
    }

    #[test]
    fn regression_long_16_bit_rows_pack_their_resident_tiles() {
        // Paired H200 benches of one binary: softmax 1.07x and 1.12x, rmsnorm 1.01x and 1.11x,
        // layernorm 1.05x and 1.09x, residual_layernorm 1.04x and 1.25x.
        let t = Target::h200();
        let auto = automatic();
        for (op, dtype, shape, packed) in [
            (Operator::Softmax, DType::Bf16, "4096x131072", true),
            (Operator::Rmsnorm, DType::Bf16, "1024x262144", true),
            (Operator::Layernorm, DType::F16, "4096x131072", true),
            (
                Operator::ResidualLayernorm,
                DType::Bf16,
                "1024x262144",
                true,
            ),
            (Operator::Softmax, DType::F32, "4096x131072", false),
            (Operator::Softmax, DType::Bf16, "4096x32768", true),
            (Operator::Softmax, DType::Bf16, "16384x8192", false),
            (Operator::Rmsnorm, DType::Bf16, "4096x32768", false),
            (
                Operator::ResidualLayernorm,
                DType::Bf16,
                "32768x4096",
                false,
            ),
            (Operator::CrossEntropy, DType::Bf16, "4096x131072", false),
        ] {
            let problem = typed(op, dtype, shape);
            let p = plan(&problem, &t, &auto).unwrap();
            assert_eq!(
                p.packed_resident,
                packed,
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
            assert_eq!(
                automatic_note(&problem, &t, &auto).is_some_and(|n| n.contains("packed")),
                packed
            );
            // Packing never changes the layout the model picks.
            let unpacked = LayoutRequest {
                pack_resident: false,
                ..auto
            };
            let explicit = LayoutRequest {
                workers: p.layout.workers,
                pack: p.layout.pack,
                unroll: p.layout.unroll,
                rows_per_group: p.layout.rows_per_group,
                cluster_group_threads: p.threads_per_group,
                ..unpacked
            };
            let q = plan(&problem, &t, &explicit).unwrap();
            assert!(!q.packed_resident);
            assert_eq!(q.layout, p.layout);
        }
    }

    #[test]
    fn regression_long_f32_layernorm_rows_push_without_an_occupancy_promise() {
        // A promise of three groups per multiprocessor ran 1.10x on the
        // fenced form. Paired, one binary: pushed with no promise (104
        // registers, no spill) 1.06x on 4096x131072 and 1.08x on
        // 1024x262144 against the promise with the relaxed exit; and
        // rmsnorm f32 pushed without the staged weight 1.03-1.04x. The
        // defaults are those plans.
        let t = Target::h200();
        let auto = automatic();
        // (op, shape, workers, cluster, group threads, pushed, staged
        // weight). Layernorm 1024x262144 in eight 512-thread groups: 1.03x.
        for (op, shape, workers, cluster, threads, pushed, staged) in [
            (
                Operator::Layernorm,
                "4096x131072",
                2048,
                8,
                256,
                true,
                false,
            ),
            (
                Operator::Layernorm,
                "1024x262144",
                4096,
                8,
                512,
                true,
                false,
            ),
            (Operator::Rmsnorm, "1024x262144", 4096, 16, 256, true, false),
            (Operator::Rmsnorm, "4096x131072", 2048, 8, 256, true, false),
        ] {
            let problem = typed(op, DType::F32, shape);
            let p = plan(&problem, &t, &auto).unwrap();
            let what = format!("{op} {shape}: {}", p.describe());
            assert_eq!(p.min_groups_per_multiprocessor, None, "{what}");
            assert_eq!(
                (p.layout.workers, p.layout.pack, p.threads_per_group),
                (workers, 4, threads),
                "{what}"
            );
            assert_eq!(p.groups_per_row, cluster, "{what}");
            assert_eq!(p.pushed_cluster_reduce, pushed, "{what}");
            assert_eq!(p.staged_columns(), staged, "{what}");
            // One-pass moments 1.00-1.02x on these layernorm plans.
            assert_eq!(p.one_pass_moments(), op == Operator::Layernorm, "{what}");
            // No promise; the cap on layernorm 1024x262144 is a
            // carve-out for its shared chunks, named as such.
            let note = automatic_note(&problem, &t, &auto).unwrap_or_default();
            assert!(
                !note
                    .replace("occupancy cap", "")
                    .replace("occupancy-cap", "")
                    .contains("occupancy"),
                "{note}"
            );
        }
    }

    #[test]
    fn regression_long_cluster_rows_push_their_partials_or_exit_relaxed_as_measured() {
        // Paired H200 benches of one binary: pushed 1.10-1.34x for softmax
        // and the bf16 norms; for the f32 norms pushed was 0.95-1.01x and
        // the relaxed exit 1.02-1.07x. Another pair: residual_layernorm
        // 1.22-1.37x, and
        // cross_entropy 1024x262144 1.02-1.04x.
        let t = Target::h200();
        let auto = automatic();
        // (op, dtype, shape, pushed, relaxed exit)
        for (op, dtype, shape, pushed, relaxed) in [
            (Operator::Softmax, DType::F32, "4096x131072", true, true),
            (Operator::Softmax, DType::Bf16, "1024x262144", true, true),
            (Operator::Rmsnorm, DType::Bf16, "4096x131072", true, true),
            (Operator::Layernorm, DType::Bf16, "1024x262144", true, true),
            (Operator::Rmsnorm, DType::F32, "4096x131072", true, true),
            (Operator::Rmsnorm, DType::F32, "1024x262144", true, true),
            (Operator::Layernorm, DType::F32, "1024x262144", true, true),
            (
                Operator::ResidualLayernorm,
                DType::Bf16,
                "4096x131072",
                true,
                true,
            ),
            (
                Operator::ResidualLayernorm,
                DType::F32,
                "4096x32768",
                true,
                true,
            ),
            (
                Operator::CrossEntropy,
                DType::Bf16,
                "1024x262144",
                true,
                true,
            ),
            // One group per row: nothing to push (the flag stays off).
            (
                Operator::CrossEntropy,
                DType::F32,
                "4096x131072",
                false,
                false,
            ),
            (Operator::Softmax, DType::F32, "4096x32768", false, false),
        ] {
            let problem = typed(op, dtype, shape);
            let p = plan(&problem, &t, &auto).unwrap();
            let what = format!("{op} {dtype} {shape}: {}", p.describe());
            assert_eq!(p.pushed_cluster_reduce, pushed, "{what}");
            assert_eq!(
                p.relaxed_cluster_exit || p.pushed_cluster_reduce,
                relaxed,
                "{what}"
            );
            let note = automatic_note(&problem, &t, &auto).unwrap_or_default();
            if pushed || relaxed {
                assert!(p.groups_per_row > 1, "{what}");
                assert!(note.contains("pushed by st.async"), "{note}");
            } else {
                assert!(!note.contains("pushed by st.async"), "{what}: {note}");
            }
            // An explicit layout keeps its recorded barriers (frozen replays).
            let explicit = LayoutRequest {
                workers: p.layout.workers,
                pack: p.layout.pack,
                ..auto
            };
            let q = plan(&problem, &t, &explicit).unwrap();
            assert!(
                !q.pushed_cluster_reduce && !q.relaxed_cluster_exit,
                "{what}"
            );
        }
    }

    #[test]
    fn regression_long_rmsnorm_rows_stage_their_weight_where_it_measured_faster() {
        // Paired H200 benches: f32 4096x131072 1.10x, 1024x262144 1.13x,
        // bf16 1024x262144 1.07x; bf16 4096x131072 0.71x, layernorm f32
        // 0.63-0.74x (a 128 KB stage leaves one group per multiprocessor).
        // f32 pushes unstaged instead, 1.03-1.04x.
        let t = Target::h200();
        let auto = automatic();
        for (op, dtype, shape, staged) in [
            (Operator::Rmsnorm, DType::F32, "4096x131072", false),
            (Operator::Rmsnorm, DType::F32, "1024x262144", false),
            (Operator::Rmsnorm, DType::Bf16, "1024x262144", true),
            (Operator::Rmsnorm, DType::Bf16, "4096x131072", false),
            (Operator::Rmsnorm, DType::F32, "4096x32768", false),
            (Operator::Layernorm, DType::F32, "4096x131072", false),
            (Operator::Layernorm, DType::Bf16, "1024x262144", false),
        ] {
            let problem = typed(op, dtype, shape);
            let p = plan(&problem, &t, &auto).unwrap();
            assert_eq!(
                p.staged_columns(),
                staged,
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
            assert_eq!(
                automatic_note(&problem, &t, &auto).is_some_and(|n| n.contains("staged")),
                staged
            );
            // An explicit layout keeps what it asks for.
            let explicit = LayoutRequest {
                workers: p.layout.workers,
                pack: p.layout.pack,
                ..auto
            };
            assert!(!plan(&problem, &t, &explicit).unwrap().staged_columns());
        }
    }

    #[test]
    fn regression_64_slot_register_plans_of_rmsnorm_and_bf16_softmax_stream_with_reread_hints() {
        // Paired H200 replays with all three peers: these streamed plans beat the register defaults by 2-11%. Softmax
        // bf16 4096x32768 streamed too until its register plan was packed
        // (150.4 -> 131.7 µs).
        let t = Target::h200();
        let auto = automatic();
        let pick = |op, dtype, shape: &str, r: &LayoutRequest| {
            let p = typed(op, dtype, shape);
            plan(&p, &t, r).unwrap()
        };
        let (rms, sm, ln) = (Operator::Rmsnorm, Operator::Softmax, Operator::Layernorm);
        // (softmax bf16 on rows of 4096-8192 streams whole rows since session
        // 13: regression_rows_of_4096_to_8192_stream_whole_rows_per_pass.)
        for (op, dtype, shape, w, v, u) in [
            (rms, DType::Bf16, "32768x4096", 256, 8, 2),
            (rms, DType::Bf16, "16384x8192", 512, 8, 2),
            (rms, DType::Bf16, "4096x32768", 1024, 8, 4),
            (rms, DType::F32, "4096x32768", 1024, 4, 8),
        ] {
            let p = pick(op, dtype, shape, &auto);
            assert_eq!(
                (
                    p.layout.workers,
                    p.layout.pack,
                    p.layout.unroll,
                    p.residency,
                    p.reread_hints
                ),
                (w, v, u, Residency::Stream, true),
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
        }
        // Measured slower, unmeasured, or not the 64-slot plan: unchanged.
        // (layernorm f32 4096x32768 streams, as the
        // search's winner: norm_rows_of_128_kib_stream_one_row_per_multiprocessor.)
        for (op, dtype, shape) in [
            (ln, DType::Bf16, "4096x32768"),
            (sm, DType::F32, "4096x32768"),
            (sm, DType::Bf16, "1024x4096"),
            (rms, DType::Bf16, "4096x131072"),
        ] {
            let p = pick(op, dtype, shape, &auto);
            assert_eq!(
                p.residency,
                Residency::Registers,
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
        }
        // Another target (the CPU executor's) keeps the model's pick.
        let p = typed(rms, DType::Bf16, "32768x4096");
        assert_eq!(
            plan(&p, &Target::cpu(), &auto).unwrap().residency,
            Residency::Registers
        );
        // A user's residency or batch invariance is never overridden.
        for r in [
            LayoutRequest {
                residency: ResidencyRequest::Registers,
                ..auto
            },
            LayoutRequest {
                batch_invariant: true,
                ..auto
            },
        ] {
            let p = pick(rms, DType::Bf16, "32768x4096", &r);
            assert_eq!(p.residency, Residency::Registers, "{}", p.describe());
        }
    }

    #[test]
    fn regression_rows_of_4096_to_8192_stream_whole_rows_per_pass() {
        // In 2026-11-30-t1s-*-h200 (the f32 norms also replayed A/A):
        // torch.compile and Liger were
        // 1-4% ahead of the model's picks here.
        let t = Target::h200();
        let auto = automatic();
        let (rms, ln, sm) = (Operator::Rmsnorm, Operator::Layernorm, Operator::Softmax);
        let (f32, bf16) = (DType::F32, DType::Bf16);
        for (op, dtype, shape, w, v) in [
            (rms, f32, "32768x4096", 512, 4),
            (rms, f32, "16384x8192", 1024, 4),
            (ln, f32, "32768x4096", 512, 4),
            (ln, f32, "16384x8192", 512, 4),
            (ln, bf16, "32768x4096", 256, 8),
            (ln, bf16, "16384x8192", 256, 8),
            (sm, f32, "32768x4096", 512, 4),
            (sm, f32, "16384x8192", 512, 4),
            (sm, bf16, "32768x4096", 256, 8),
            (sm, bf16, "16384x8192", 256, 8),
        ] {
            let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
            assert_eq!(
                (
                    p.layout.workers,
                    p.layout.pack,
                    p.layout.unroll,
                    p.residency,
                    p.reread_hints,
                    p.one_pass_moments()
                ),
                (w, v, 4, Residency::Stream, true, op == ln),
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
            // Rows of 4096 (two packs a worker): layernorm keeps its hinted
            // loads ordered; nothing promises an occupancy.
            let ordered = shape.ends_with("x4096") && op == ln;
            assert_eq!(
                (p.min_groups_per_multiprocessor, p.ordered_hinted_loads),
                (None, ordered),
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
            // The CPU keeps the model's pick, and layernorm its two passes.
            let cpu = plan(&typed(op, dtype, shape), &Target::cpu(), &auto).unwrap();
            assert!(
                !(cpu.residency == Residency::Stream && cpu.reread_hints),
                "{}",
                cpu.describe()
            );
            assert!(!cpu.one_pass_moments(), "{}", cpu.describe());
        }
        // Rows of 32768 (measured slower at W=512), bf16 rmsnorm (its own
        // rule), data inside the L2, unsearched operators, and a user's
        // residency: not this rule's plan.
        for (op, dtype, shape, r) in [
            (ln, f32, "4096x32768", auto),
            (rms, bf16, "32768x4096", auto),
            (rms, f32, "2048x4096", auto),
            (Operator::ResidualLayernorm, f32, "32768x4096", auto),
            (Operator::CrossEntropy, bf16, "32768x4096", auto),
            (
                rms,
                f32,
                "32768x4096",
                LayoutRequest {
                    residency: ResidencyRequest::Registers,
                    ..auto
                },
            ),
        ] {
            let p = plan(&typed(op, dtype, shape), &t, &r).unwrap();
            assert!(
                !(p.residency == Residency::Stream && p.layout.unroll == 4),
                "{op} {dtype} {shape}: {}",
                p.describe()
            );
        }
    }

    #[test]
    fn shared_memory_caps_the_groups_per_multiprocessor_of_a_staged_plan() {
        // layernorm f32 4096x131072 on 8 groups of 256 threads stages two
        // 64 KB slices: one group per SM, whatever the registers (measured
        // 1910 against 1404 µs unstaged).
        let t = Target::h200();
        let request = LayoutRequest {
            workers: 2048,
            pack: 4,
            cluster_group_threads: 256,
            stage_columns: true,
            ..Default::default()
        };
        let problem = |op| typed(op, DType::F32, "4096x131072");
        let ln = plan(&problem(Operator::Layernorm), &t, &request).unwrap();
        assert!(ln.staged_columns() && ln.shared_bytes > 128 * 1024);
        assert_eq!(groups_per_multiprocessor(&t, 256, 80, ln.shared_bytes), 1);
        assert_eq!(groups_per_multiprocessor(&t, 256, 80, 0), 3);
        // No occupancy promise can add a group that shared memory forbids.
        assert_eq!(occupancy_step_to_try(&t, 256, 104, ln.shared_bytes), None);
        assert_eq!(occupancy_step_to_try(&t, 256, 86, 0), Some(3));
        // rmsnorm's one 64 KB slice leaves room for three.
        let rms = plan(&problem(Operator::Rmsnorm), &t, &request).unwrap();
        assert_eq!(groups_per_multiprocessor(&t, 256, 80, rms.shared_bytes), 3);
        // With the promise of three groups, layernorm stages its first
        // column (the weight) only, so the three fit.
        let promised = LayoutRequest {
            occupancy: 3,
            ..request
        };
        let ln3 = plan(&problem(Operator::Layernorm), &t, &promised).unwrap();
        assert_eq!(ln3.column_stage.map(|s| s.columns), Some(1));
        assert!(
            ln3.describe().contains(" staged-columns=1"),
            "{}",
            ln3.describe()
        );
        assert_eq!(groups_per_multiprocessor(&t, 256, 80, ln3.shared_bytes), 3);
        // A promise no column fits beside stages nothing.
        let crowded = LayoutRequest {
            occupancy: 4,
            ..request
        };
        assert!(!plan(&problem(Operator::Layernorm), &t, &crowded)
            .unwrap()
            .staged_columns());
    }

    #[test]
    fn an_occupancy_step_is_tried_only_a_few_registers_over_its_budget() {
        let t = Target::h200();
        // Measured: 71 -> 64 fit (no spill), 80 and 117 spilled.
        assert_eq!(occupancy_step_to_try(&t, 256, 71, 0), Some(4));
        assert_eq!(occupancy_step_to_try(&t, 256, 80, 0), None);
        assert_eq!(occupancy_step_to_try(&t, 256, 117, 0), None);
        // Already at the step, or at the thread limit.
        assert_eq!(occupancy_step_to_try(&t, 256, 64, 0), None);
        assert_eq!(occupancy_step_to_try(&t, 1024, 20, 0), None);
        // 86 registers: 2 groups of 256; 3 need 80 or fewer.
        assert_eq!(occupancy_step_to_try(&t, 256, 86, 0), Some(3));
        assert_eq!(occupancy_step_to_try(&t, 512, 110, 0), None);
    }

    #[test]
    fn a_pinned_request_plans_to_the_same_plan_with_only_the_promise_added() {
        let t = Target::h200();
        let auto = automatic();
        for (op, dtype, shape) in [
            (Operator::Rmsnorm, DType::Bf16, "4096x131072"),
            (Operator::Rmsnorm, DType::Bf16, "32768x4096"),
            (Operator::Softmax, DType::F32, "1024x262144"),
            (Operator::Layernorm, DType::Bf16, "1024x4096"),
            (Operator::Sum, DType::F32, "17x257"),
            (Operator::CrossEntropy, DType::Bf16, "4096x32768"),
        ] {
            let p = typed(op, dtype, shape);
            let chosen = plan(&p, &t, &auto).unwrap();
            let same = plan(&p, &t, &chosen.pinned_request(&auto, 0)).unwrap();
            assert_eq!(same.describe(), chosen.describe(), "{op} {dtype} {shape}");
            let threads = chosen.threads_per_group;
            let groups = (t.max_threads_per_multiprocessor / threads).min(2);
            let promised = plan(&p, &t, &chosen.pinned_request(&auto, groups)).unwrap();
            assert_eq!(promised.layout, chosen.layout, "{op} {dtype} {shape}");
            assert_eq!(promised.min_groups_per_multiprocessor, Some(groups));
            assert_eq!(
                promised
                    .describe()
                    .replace(&format!(" occupancy={groups}"), ""),
                chosen.describe(),
                "{op} {dtype} {shape}"
            );
        }
    }

    #[test]
    fn the_automatic_note_names_the_model_pick_a_rule_replaced() {
        let t = Target::h200();
        let auto = automatic();
        let problem = |op, dtype| typed(op, dtype, "32768x4096");
        let note = automatic_note(&problem(Operator::Rmsnorm, DType::Bf16), &t, &auto).unwrap();
        assert!(note.contains("W=64 V=8 U=4 G=4 registers"), "{note}");
        assert_eq!(
            automatic_note(
                &problem(Operator::ResidualLayernorm, DType::Bf16),
                &t,
                &auto
            ),
            None
        );
        let explicit = LayoutRequest {
            workers: 64,
            pack: 8,
            ..auto
        };
        assert_eq!(
            automatic_note(&problem(Operator::Rmsnorm, DType::Bf16), &t, &explicit),
            None
        );
    }

    /// The defaults: 16-bit layernorm rows that one group holds
    /// keep packed tiles and load their columns in order; rows spanning a
    /// cluster never order their columns (slower there), and
    /// layernorm 1024x262144 runs in clusters of eight 512-thread groups
    /// in both dtypes.
    #[test]
    fn layernorm_defaults_of_session_16_pack_order_columns_and_pick_512_thread_groups() {
        let t = Target::h200();
        let auto = automatic();
        let default = |dtype, shape: &str| {
            plan(&typed(Operator::Layernorm, dtype, shape), &t, &auto).unwrap()
        };
        let wide = default(DType::Bf16, "4096x32768");
        assert!(
            wide.packed_resident && wide.ordered_columns,
            "{}",
            wide.describe()
        );
        assert_eq!(wide.groups_per_row, 1);
        let f32_wide = default(DType::F32, "4096x32768");
        assert!(!f32_wide.ordered_columns, "{}", f32_wide.describe());
        for shape in ["4096x65536", "4096x131072"] {
            let long = default(DType::Bf16, shape);
            assert!(
                long.groups_per_row > 1 && !long.ordered_columns,
                "{}",
                long.describe()
            );
        }
        for dtype in [DType::F32, DType::Bf16] {
            let p = default(dtype, "1024x262144");
            assert_eq!(
                (p.groups_per_row, p.row_threads_per_group()),
                (8, 512),
                "{}",
                p.describe()
            );
        }
        // Other operators keep sixteen 256-thread groups there.
        let rms = plan(
            &typed(Operator::Rmsnorm, DType::Bf16, "1024x262144"),
            &t,
            &auto,
        )
        .unwrap();
        assert_eq!(rms.row_threads_per_group(), 256, "{}", rms.describe());
    }
}
