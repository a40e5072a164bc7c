//! Command-line argument types and parsers shared by every subcommand.

use anyhow::Result;
use clap::{Args, ValueEnum};
use lanefold_ir::{DType, Operator};
use lanefold_measure::bench::Device;
use lanefold_measure::phases::L2Mode;
use lanefold_plan::{LayoutRequest, Shape};

/// Where to run or measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// CUDA when a GPU is present, the CPU executor otherwise.
    Auto,
    Cpu,
    Cuda,
}

impl From<BackendArg> for Device {
    fn from(b: BackendArg) -> Device {
        match b {
            BackendArg::Auto => Device::Auto,
            BackendArg::Cpu => Device::Cpu,
            BackendArg::Cuda => Device::Cuda,
        }
    }
}

/// L2 state of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum L2Arg {
    /// The same buffers every launch.
    Warm,
    /// Launches rotate among input sets totalling at least 3x the L2.
    Cold,
}

impl From<L2Arg> for L2Mode {
    fn from(l: L2Arg) -> L2Mode {
        match l {
            L2Arg::Warm => L2Mode::Warm,
            L2Arg::Cold => L2Mode::Cold,
        }
    }
}

pub fn parse_operator(s: &str) -> Result<Operator, String> {
    s.parse()
        .map_err(|e: lanefold_ir::ParseOperatorError| e.to_string())
}

pub fn parse_shape(s: &str) -> Result<Shape, String> {
    s.parse()
        .map_err(|e: lanefold_plan::ShapeError| e.to_string())
}

/// A time budget in seconds: a finite number above zero.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!(
            "{x}: a budget must be a positive number of seconds"
        )),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// `auto`, `registers` or `stream`.
pub fn parse_residency(s: &str) -> Result<lanefold_plan::ResidencyRequest, String> {
    use lanefold_plan::ResidencyRequest as R;
    match s.trim() {
        "auto" => Ok(R::Auto),
        "registers" => Ok(R::Registers),
        "stream" => Ok(R::Stream),
        other => Err(format!(
            "unknown residency '{other}' (expected auto, registers or stream)"
        )),
    }
}

pub fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse()
        .map_err(|e: lanefold_ir::DTypeError| e.to_string())
}

/// Operator names, where `all` stands for the six.
pub fn parse_ops(ops: &[String]) -> Result<Vec<Operator>> {
    let mut out = vec![];
    for o in ops {
        if o == "all" {
            out.extend(Operator::SIX);
        } else {
            out.push(parse_operator(o).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(out)
}

/// Load, launch and arithmetic policies a request may ask for beside its
/// layout: shared by every command that plans (`plan`, `run`, `bench`,
/// `compile-check`) and by `search`, where every candidate takes them.
#[derive(Args, Clone, Debug, Default)]
pub struct PolicyArgs {
    /// Evict-first cache hints on read-once row tiles and row outputs
    /// (`ld/st.global.cs`; vector accesses only). Same results, bit for bit.
    #[arg(long)]
    pub streaming_hints: bool,
    /// Load weight and bias with the row tile and keep them in registers
    /// (where they fit), instead of after the reduction. Same results.
    #[arg(long)]
    pub hoist_columns: bool,
    /// Threads per group when a row spans a cluster, a power of two
    /// (0: automatic; the model mapping picks 512 or 256 on the H200,
    /// explicit layouts and the seed mapping take the target's 512).
    #[arg(long, default_value_t = 0)]
    pub cluster_group_threads: u32,
    /// Groups per multiprocessor the kernel promises to allow
    /// (`__launch_bounds__(threads, groups)`): the compiler must fit that
    /// many, capping registers and spilling if it must (0: no promise).
    /// Same results.
    #[arg(long, default_value_t = 0)]
    pub occupancy: u32,
    /// Streamed plans: a re-read row tile's first load asks L2 to keep it
    /// (evict-last), its last re-read lets it go (evict-first). Same results.
    #[arg(long)]
    pub reread_hints: bool,
    /// Load weight and bias (read again by every row) with L2 evict-last
    /// priority, in register plans too. Same results.
    #[arg(long)]
    pub keep_columns: bool,
    /// Rows spanning a cluster: each group copies its slice of weight and
    /// bias into shared memory asynchronously while it loads and reduces
    /// the row. Cluster register plans only. Same results.
    #[arg(long)]
    pub stage_columns: bool,
    /// bf16 and f16 register plans: keep each resident tile as its loaded
    /// words, two values per register, widening at each use (half the
    /// registers). Vector packs without a partial pack only. Same results.
    #[arg(long)]
    pub pack_resident: bool,
    /// residual_layernorm register plans: keep h = round(x + residual)
    /// resident (one tile) instead of x and the residual (two); later
    /// phases read h instead of adding again. Same results.
    #[arg(long)]
    pub rounded_resident: bool,
    /// Rows spanning a cluster: arrive at the barrier before exit without
    /// a release, so a group need not wait for its stores to be
    /// acknowledged before it leaves. Same results.
    #[arg(long)]
    pub relaxed_cluster_exit: bool,
    /// Rows spanning a cluster: each group pushes its partials into every
    /// group's shared memory by `st.async` and waits on its own `mbarrier`,
    /// instead of a cluster barrier per reduction. Same results.
    #[arg(long)]
    pub push_cluster_reduce: bool,
    /// Rows spanning a cluster, pushed: a persistent grid of the clusters
    /// that fit at once, each looping over rows, so staged columns
    /// (`--stage-columns`) are copied once per group, not once per row.
    /// Same results.
    #[arg(long)]
    pub persistent_clusters: bool,
    /// softmax and cross_entropy: accumulate the sum of exponentials with
    /// its maximum in one pass (one reduction tree fewer, one re-read fewer
    /// when streamed). Same values up to rounding.
    #[arg(long)]
    pub online_normalizer: bool,
    /// layernorm and residual_layernorm: both moments summed in one pass
    /// about the row's first element (two phases instead of three). Same
    /// values up to rounding.
    #[arg(long)]
    pub one_pass_moments: bool,
    /// layernorm and residual_layernorm on 16-bit rows: the output as
    /// `h * rstd - mean * rstd`, one fused multiply-add per element (f32
    /// rows keep `(h - mean) * rstd`). Same values up to rounding.
    #[arg(long)]
    pub fused_output: bool,
    /// Register plans of one group per row: a persistent grid whose groups
    /// copy their next row into shared memory (`cp.async.bulk`) while they
    /// reduce and write the current one. Programs with one row input whose
    /// row fits in shared memory. Same results.
    #[arg(long)]
    pub prefetch_rows: bool,
    /// Load row tiles with `L1::no_allocate` and prefer the largest L1
    /// carve-out, so weight and bias, which every row reads again, stay in
    /// L1. Vector accesses only. Same results.
    #[arg(long)]
    pub l1_columns: bool,
    /// Leave each pack's address to the compiler (no opaque worker index,
    /// which register plans use by default). Same results.
    #[arg(long)]
    pub unfold_pack_addresses: bool,
    /// Load each chunk's weight and bias only after the chunk before has
    /// stored its outputs, so the compiler holds one chunk's columns in
    /// registers instead of all of them. Vector packs only. Same results.
    #[arg(long)]
    pub ordered_columns: bool,
    /// Issue hinted loads without `.nc`, so the compiler keeps each below
    /// the stores before it (as lanefold's older kernels did; fewer
    /// registers, fewer loads in flight). Same results.
    #[arg(long)]
    pub ordered_hinted_loads: bool,
    /// At most N groups per multiprocessor: each group takes a share of
    /// shared memory that leaves no room for one more, and the kernel asks
    /// for the smallest carve-out holding N, the rest staying L1 (0: no
    /// cap). Same results.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub occupancy_cap: u32,
    /// Streamed plans whose row is one unrolled loop of at most 8 packs a
    /// worker: issue every load of a phase before computing on any. Same
    /// results.
    #[arg(long)]
    pub batch_loads: bool,
    /// Register plans with weight or bias: load the columns of the output
    /// phase's first N chunks before the reduction before it, so their L2
    /// round trip overlaps the reduction's exchange (0: off). Vector packs
    /// only. Same results.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub early_columns: u32,
    /// Register plans of one row input: hold the row's last N chunks in
    /// shared memory instead of registers (copied by `cp.async`, read back
    /// by the worker that copied them), so more groups fit on an SM
    /// (0: off). Vector packs only. Same results.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub shared_chunks: u32,
    /// Register plans of one row per group: as a row starts, ask L2 to
    /// fetch the group's share of the row N ahead (one bulk prefetch per
    /// chunk), so its DRAM reads are in flight before its group starts
    /// (0: off; about the rows resident at once). Same results.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub l2_prefetch_rows: u32,
}

impl PolicyArgs {
    /// The default request with these policies.
    pub fn request(&self) -> LayoutRequest {
        LayoutRequest {
            streaming_hints: self.streaming_hints,
            hoist_columns: self.hoist_columns,
            cluster_group_threads: self.cluster_group_threads,
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
            prefetch_rows: self.prefetch_rows,
            l1_columns: self.l1_columns,
            unfold_pack_addresses: self.unfold_pack_addresses,
            ordered_columns: self.ordered_columns,
            ordered_hinted_loads: self.ordered_hinted_loads,
            occupancy_cap: self.occupancy_cap,
            batch_loads: self.batch_loads,
            early_columns: self.early_columns,
            shared_chunks: self.shared_chunks,
            l2_prefetch_rows: self.l2_prefetch_rows,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_a_positive_finite_number_of_seconds() {
        assert_eq!(parse_seconds("300"), Ok(300.0));
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        for bad in ["0", "-3", "inf", "NaN", "five"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
