//! The mapper's types and its one entry point: a layout request for a
//! problem on a target becomes a checked plan, or a refusal with a reason.
//! [`plan`] runs the automatic choice ([`crate::choice`]) and then the
//! legality check ([`crate::legality`]); nothing is scored before it is
//! legal.

use crate::layout::{Layout, TreeLevels};
use crate::legality::{folds_by_default, plan_rows, with_cluster_group_threads};
use crate::shape::Shape;
use crate::target::Target;
use lanefold_ir::{Analysis, DType, NormForm, Operator, OperatorOptions, Program};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

pub use crate::legality::{groups_per_multiprocessor, register_budget};

/// A program applied to a shape in a storage dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub program: Program,
    pub dtype: DType,
    pub shape: Shape,
}

impl Problem {
    /// Are the program's moments summed in one pass, about the row's
    /// first element (see [`LayoutRequest::one_pass_moments`])?
    pub fn one_pass_moments(&self) -> bool {
        self.program
            .body
            .iter()
            .any(|i| matches!(i, lanefold_ir::Instr::RowFirst { .. }))
    }

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
    /// where the request asks (one-pass moments, the online normalizer;
    /// the norms' cold path unless it opts out), else as it is.
    pub fn as_requested(&self, request: &LayoutRequest) -> Cow<'_, Problem> {
        // The fused output's per-row rounding is only hidden by 16-bit
        // outputs' (see `NormForm::fused_output`).
        let fused_output = request.fused_output && self.dtype.size_bytes() == 2;
        // A norm's program is always rebuilt, so that a plan's own problem
        // (cold path in or out) plans again to the form the request asks.
        let norm = self.operator_kind().is_some_and(|op| op.has_cold_path());
        let cold_path = norm && !request.no_cold_path;
        let norm_form = request.one_pass_moments || fused_output || norm;
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
                cold_path,
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
                // The rebuilt form keeps the caller's epsilon.
                if let Some(eps) = self.program.norm_eps() {
                    program.set_norm_eps(eps);
                }
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
    /// A row of more workers than its cluster group size spans a cluster
    /// even within the group limit (`W=512 split-groups group-threads=256`: two groups
    /// of 256), so a few rows' work spreads over more multiprocessors.
    #[serde(default)]
    pub split_groups: bool,
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
    /// Register plans: keep a computed tile that later phases read again
    /// (rmsnorm's gradient: `g = w * dy`) resident instead of its loads,
    /// wherever that holds fewer tiles (two instead of three there). The
    /// kept value is the one a recomputation gives: same bits. Dropped
    /// under packed 16-bit tiles, whose slots hold loaded words; no
    /// effect on streamed plans or on programs without such a tile.
    #[serde(default)]
    pub computed_resident: bool,
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
    /// rmsnorm, layernorm and residual_layernorm: leave out the rare cold
    /// path that rows the fast statistics get wrong (a sum of squares that
    /// overflows, infinities, NaN, a mean far beyond the spread) take by
    /// default, computing the row again in scaled form
    /// ([`NormForm::cold_path`]). Same results on every other row. The
    /// CUDA runtime opts out by itself where the cold kernel would not
    /// keep the plain kernel's occupancy. No effect on other operators.
    #[serde(default)]
    pub no_cold_path: bool,
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
    /// One row a group, no cluster: a group past the last row returns at
    /// once, so no store carries the row guard. The compiler sinks a
    /// chunk's load into its store's guard and so issues the chunks one
    /// after another; without the guard it may load ahead. A scheduling
    /// choice only: same bits.
    #[serde(default)]
    pub unguarded_stores: bool,
    /// Register plans: each phase reads the scalars an earlier phase's
    /// tiles also used through a copy the compiler cannot see through, so
    /// it recomputes what it derived from a resident tile (layernorm's
    /// `x - mean`) instead of keeping it as a second tile. Only where the
    /// phase's tile work is arithmetic (no special function). A register
    /// choice only: same bits.
    #[serde(default)]
    pub recompute_derived: bool,
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
    /// Write the program's row output over its first row input (cross
    /// entropy's dlogits over the logits): no second row-sized buffer.
    /// Legal only where no thread can read an element after another has
    /// written it ([`crate::legality`]); the kernel then drops
    /// `__restrict__` and `.nc` on the pair. Same bits.
    #[serde(default)]
    pub in_place: bool,
    /// Rows whose length is not a multiple of V: shift each row's packs
    /// so that they start on V-element boundaries of memory, as vector
    /// accesses need. Row `r` is read as if `s = (r * N) mod V` masked
    /// elements preceded it ([`Plan::row_shift`]), so its first and last
    /// packs are guarded and every other pack is one vector access; scalar
    /// accesses otherwise. Moves elements between workers: changes
    /// rounding, not the value, and the bits of a row with its position,
    /// so refused with batch invariance. No effect on rows that are
    /// already aligned, packs of under 4 bytes or rows spanning a cluster.
    /// Columns (weight, bias) are read element by element, never hoisted.
    #[serde(default)]
    pub aligned_packs: bool,
}

impl LayoutRequest {
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
            computed_resident: self.computed_resident,
            relaxed_cluster_exit: self.relaxed_cluster_exit,
            push_cluster_reduce: self.push_cluster_reduce,
            persistent_clusters: self.persistent_clusters,
            online_normalizer: self.online_normalizer,
            one_pass_moments: self.one_pass_moments,
            fused_output: self.fused_output,
            no_cold_path: self.no_cold_path,
            prefetch_rows: self.prefetch_rows,
            l1_columns: self.l1_columns,
            unfold_pack_addresses: self.unfold_pack_addresses,
            ordered_columns: self.ordered_columns,
            ordered_hinted_loads: self.ordered_hinted_loads,
            occupancy_cap: self.occupancy_cap,
            batch_loads: self.batch_loads,
            unguarded_stores: self.unguarded_stores,
            recompute_derived: self.recompute_derived,
            early_columns: self.early_columns,
            shared_chunks: self.shared_chunks,
            in_place: self.in_place,
            aligned_packs: self.aligned_packs,
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
    #[error("cannot write in place: {0}")]
    InPlace(String),
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
    pub aligned_packs: bool,
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
    /// See [`LayoutRequest::unguarded_stores`]; false where it does not
    /// apply (rows per group above 1, clusters, persistent groups).
    pub unguarded_stores: bool,
    /// See [`LayoutRequest::recompute_derived`]; false in streamed plans
    /// and under one-pass moments.
    pub recompute_derived: bool,
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
    /// Computed tiles kept resident instead of their loads (see
    /// [`LayoutRequest::computed_resident`]); false where that does not
    /// apply.
    pub computed_resident: bool,
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
    /// The row output is written over the first row input (see
    /// [`LayoutRequest::in_place`]).
    pub in_place: bool,
    /// Each row's packs start on V-element boundaries of memory (see
    /// [`LayoutRequest::aligned_packs`]); false where that does not apply.
    pub aligned_packs: bool,
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
    /// Masked elements before row `row` in its layout: `(row * N) mod V`
    /// where packs are aligned ([`LayoutRequest::aligned_packs`]), else 0.
    /// Element `i` of the row is the layout's logical element `i + shift`.
    pub fn row_shift(&self, row: usize) -> usize {
        if self.aligned_packs {
            row * self.problem.shape.n % self.layout.pack as usize
        } else {
            0
        }
    }

    /// Does this plan leave its pack addresses to the compiler where the
    /// default would fold them ([`LayoutRequest::unfold_pack_addresses`])?
    pub fn unfolded_pack_addresses(&self) -> bool {
        !self.folded_pack_addresses && folds_by_default(self.residency, self.occupancy_cap)
    }

    /// Are layernorm's moments summed in one pass (see
    /// [`LayoutRequest::one_pass_moments`])?
    pub fn one_pass_moments(&self) -> bool {
        self.problem.one_pass_moments()
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
    /// [`LayoutRequest::no_cold_path`])?
    pub fn cold_path(&self) -> bool {
        self.problem
            .program
            .body
            .iter()
            .any(|i| matches!(i, lanefold_ir::Instr::Rescaled { .. }))
    }

    /// The (input, output) row buffers an in-place plan aliases (see
    /// [`LayoutRequest::in_place`]): its first row input and its row output.
    pub fn in_place_pair(&self) -> Option<(&str, &str)> {
        if !self.in_place {
            return None;
        }
        let program = &self.problem.program;
        let input = program.row_inputs().next()?;
        let output = program
            .outputs
            .iter()
            .find(|d| d.kind == lanefold_ir::BufferKind::Row)?;
        Some((input.name.as_str(), output.name.as_str()))
    }

    /// Is this a norm whose program left out the cold path it carries by
    /// default ([`LayoutRequest::no_cold_path`])?
    pub fn declines_cold_path(&self) -> bool {
        !self.cold_path()
            && self
                .problem
                .operator_kind()
                .is_some_and(|op| op.has_cold_path())
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
            aligned_packs: self.aligned_packs,
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
            split_groups: self.groups_per_row > 1
                && Target::by_name(&self.target)
                    .is_some_and(|t| t.needs_split_groups(self.layout.workers)),
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
            unguarded_stores: self.unguarded_stores,
            recompute_derived: self.recompute_derived,
            early_columns: self.early_columns,
            shared_chunks: self.shared_chunks.map_or(0, |shared| shared.chunks),
            l2_prefetch_rows: self.l2_prefetch_rows,
            stage_columns: self.staged_columns(),
            pack_resident: self.packed_resident,
            rounded_resident: self.rounded_resident,
            computed_resident: self.computed_resident,
            relaxed_cluster_exit: self.relaxed_cluster_exit,
            push_cluster_reduce: self.pushed_cluster_reduce,
            persistent_clusters: self.persistent_clusters,
            online_normalizer: self.online_normalizer(),
            one_pass_moments: self.one_pass_moments(),
            fused_output: self.fused_output(),
            no_cold_path: self.declines_cold_path(),
            prefetch_rows: self.row_prefetch.is_some(),
            in_place: self.in_place,
            aligned_packs: self.aligned_packs,
            occupancy: groups,
            ..*base
        }
    }
}

/// Resolve `request` for `problem` on `target`, failing closed: the
/// automatic choice ([`crate::choice`]: variants, then the layout) for an
/// automatic request, then the legality check of the request planned.
pub fn plan(problem: &Problem, target: &Target, request: &LayoutRequest) -> Result<Plan, Refusal> {
    let asked = *request;
    let request = &request.with_measured_variants(problem, target);
    let problem = &*problem.as_requested(request);
    // Validate the user's cluster group size before the model may choose one.
    with_cluster_group_threads(target, request.cluster_group_threads)?;
    let mut request = crate::choice::choose_layout(problem, target, request)?;
    if request.in_place && !asked.push_cluster_reduce {
        // A pushed reduction orders no group's reads before another's
        // writes (see `legality::in_place`): an automatic in-place choice
        // meets its cluster at a barrier instead.
        request.push_cluster_reduce = false;
    }
    let request = &request;
    let target = &with_cluster_group_threads(target, request.cluster_group_threads)?;
    let mut p = plan_rows(problem, target, request)?;
    if request.batch_invariant && p.aligned_packs {
        return Err(Refusal::BatchVariant(format!(
            "{}: aligned packs shift each row's layout by its position, so a row's bits depend on where it sits in the batch",
            p.describe()
        )));
    }
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
    pub(crate) fn new(
        slot_bytes: u32,
        columns: usize,
        slice_elements: usize,
        dtype: DType,
    ) -> ColumnStage {
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
    /// per thread (counted as sm_90 allocates them): what threads,
    /// registers and shared memory allow, held to the occupancy cap (whose
    /// carve-out the driver is asked for).
    pub fn groups_per_multiprocessor(&self, target: &Target, registers: u32) -> u32 {
        let groups =
            groups_per_multiprocessor(target, self.threads_per_group, registers, self.shared_bytes);
        self.occupancy_cap
            .map_or(groups, |cap| groups.min(cap.groups))
    }
}

#[cfg(test)]
mod tests;
