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

/// Operator names, where `all` stands for the six and `backward` for
/// their input gradients.
pub fn parse_ops(ops: &[String]) -> Result<Vec<Operator>> {
    let mut out = vec![];
    for o in ops {
        if o == "all" {
            out.extend(Operator::SIX);
        } else if o == "backward" {
            out.extend(Operator::BACKWARD);
        } else {
            out.push(parse_operator(o).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(out)
}

/// The help heading of the flags that stand for schedule tokens.
pub const SHORTHANDS: &str = "Schedule shorthands";

/// The schedule a request asks for, in its one text form (`--schedule`),
/// and the flags that stand for single tokens of it: shared by every
/// command that plans (`plan`, `run`, `bench`, `compile-check`, `speed`)
/// and by `search`, where every candidate takes them. The flags are
/// shorthands: each adds its token to the schedule text, which is then
/// parsed once ([`PolicyArgs::request_with`]).
#[derive(Args, Clone, Debug, Default)]
pub struct PolicyArgs {
    /// The schedule, in the text form `lanefold plan` prints, e.g.
    /// `W=1024 V=4 U=8 G=1 stream reread-hints occupancy=1`: the one form
    /// of a request (tokens the defaults leave out; `auto` for none).
    /// The flags under "Schedule shorthands" each add one token to it; a
    /// token given twice, or contradicting another, is refused.
    #[arg(long, value_name = "TEXT", help_heading = "Schedule")]
    pub schedule: Option<String>,
    /// Evict-first cache hints on read-once row tiles and row outputs
    /// (`ld/st.global.cs`; vector accesses only). Same results, bit for bit.
    /// Shorthand for the schedule token `streaming-hints`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub streaming_hints: bool,
    /// Load weight and bias with the row tile and keep them in registers
    /// (where they fit), instead of after the reduction. Same results.
    /// Shorthand for the schedule token `hoisted-columns`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub hoist_columns: bool,
    /// Threads per group when a row spans a cluster, a power of two
    /// (0: automatic; the model mapping picks 512 or 256 on the H200,
    /// explicit layouts and the seed mapping take the target's 512).
    /// Shorthand for the schedule token `group-threads=N`.
    #[arg(long, help_heading = SHORTHANDS, default_value_t = 0)]
    pub cluster_group_threads: u32,
    /// Groups per multiprocessor the kernel promises to allow
    /// (`__launch_bounds__(threads, groups)`): the compiler must fit that
    /// many, capping registers and spilling if it must (0: no promise).
    /// Same results.
    /// Shorthand for the schedule token `occupancy=N`.
    #[arg(long, help_heading = SHORTHANDS, default_value_t = 0)]
    pub occupancy: u32,
    /// Streamed plans: a re-read row tile's first load asks L2 to keep it
    /// (evict-last), its last re-read lets it go (evict-first). Same results.
    /// Shorthand for the schedule token `reread-hints`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub reread_hints: bool,
    /// Load weight and bias (read again by every row) with L2 evict-last
    /// priority, in register plans too. Same results.
    /// Shorthand for the schedule token `keep-columns`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub keep_columns: bool,
    /// Rows spanning a cluster: each group copies its slice of weight and
    /// bias into shared memory asynchronously while it loads and reduces
    /// the row. Cluster register plans only. Same results.
    /// Shorthand for the schedule token `staged-columns`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub stage_columns: bool,
    /// bf16 and f16 register plans: keep each resident tile as its loaded
    /// words, two values per register, widening at each use (half the
    /// registers). Vector packs without a partial pack only. Same results.
    /// Shorthand for the schedule token `packed-resident`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub pack_resident: bool,
    /// residual_layernorm register plans: keep h = round(x + residual)
    /// resident (one tile) instead of x and the residual (two); later
    /// phases read h instead of adding again. Same results.
    /// Shorthand for the schedule token `rounded-resident`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub rounded_resident: bool,
    /// Rows spanning a cluster: arrive at the barrier before exit without
    /// a release, so a group need not wait for its stores to be
    /// acknowledged before it leaves. Same results.
    /// Shorthand for the schedule token `relaxed-exit`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub relaxed_cluster_exit: bool,
    /// Rows spanning a cluster: each group pushes its partials into every
    /// group's shared memory by `st.async` and waits on its own `mbarrier`,
    /// instead of a cluster barrier per reduction. Same results.
    /// Shorthand for the schedule token `push-reduce`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub push_cluster_reduce: bool,
    /// Rows spanning a cluster, pushed: a persistent grid of the clusters
    /// that fit at once, each looping over rows, so staged columns
    /// (`--stage-columns`) are copied once per group, not once per row.
    /// Same results.
    /// Shorthand for the schedule token `persistent-clusters`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub persistent_clusters: bool,
    /// softmax and cross_entropy: accumulate the sum of exponentials with
    /// its maximum in one pass (one reduction tree fewer, one re-read fewer
    /// when streamed). Same values up to rounding.
    /// Shorthand for the schedule token `online-normalizer`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub online_normalizer: bool,
    /// layernorm and residual_layernorm: both moments summed in one pass
    /// about the row's first element (two phases instead of three). Same
    /// values up to rounding.
    /// Shorthand for the schedule token `one-pass-moments`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub one_pass_moments: bool,
    /// layernorm and residual_layernorm on 16-bit rows: the output as
    /// `h * rstd - mean * rstd`, one fused multiply-add per element (f32
    /// rows keep `(h - mean) * rstd`). Same values up to rounding.
    /// Shorthand for the schedule token `fused-output`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub fused_output: bool,
    /// Register plans of one group per row: a persistent grid whose groups
    /// copy their next row into shared memory (`cp.async.bulk`) while they
    /// reduce and write the current one. Programs with one row input whose
    /// row fits in shared memory. Same results.
    /// Shorthand for the schedule token `prefetch-rows`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub prefetch_rows: bool,
    /// Load row tiles with `L1::no_allocate` and prefer the largest L1
    /// carve-out, so weight and bias, which every row reads again, stay in
    /// L1. Vector accesses only. Same results.
    /// Shorthand for the schedule token `l1-columns`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub l1_columns: bool,
    /// Leave each pack's address to the compiler (no opaque worker index,
    /// which register plans use by default). Same results.
    /// Shorthand for the schedule token `unfolded-addresses`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub unfold_pack_addresses: bool,
    /// Load each chunk's weight and bias only after the chunk before has
    /// stored its outputs, so the compiler holds one chunk's columns in
    /// registers instead of all of them. Vector packs only. Same results.
    /// Shorthand for the schedule token `ordered-columns`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub ordered_columns: bool,
    /// Issue hinted loads without `.nc`, so the compiler keeps each below
    /// the stores before it (as lanefold's older kernels did; fewer
    /// registers, fewer loads in flight). Same results.
    /// Shorthand for the schedule token `ordered-hinted-loads`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub ordered_hinted_loads: bool,
    /// At most N groups per multiprocessor: each group takes a share of
    /// shared memory that leaves no room for one more, and the kernel asks
    /// for the smallest carve-out holding N, the rest staying L1 (0: no
    /// cap). Same results.
    /// Shorthand for the schedule token `occupancy-cap=N`.
    #[arg(long, help_heading = SHORTHANDS, default_value_t = 0, value_name = "N")]
    pub occupancy_cap: u32,
    /// Streamed plans whose row is one unrolled loop of at most 8 packs a
    /// worker: issue every load of a phase before computing on any. Same
    /// results.
    /// Shorthand for the schedule token `batched-loads`.
    #[arg(long, help_heading = SHORTHANDS)]
    pub batch_loads: bool,
    /// Register plans with weight or bias: load the columns of the output
    /// phase's first N chunks before the reduction before it, so their L2
    /// round trip overlaps the reduction's exchange (0: off). Vector packs
    /// only. Same results.
    /// Shorthand for the schedule token `early-columns=N`.
    #[arg(long, help_heading = SHORTHANDS, default_value_t = 0, value_name = "N")]
    pub early_columns: u32,
    /// Register plans of one row input: hold the row's last N chunks in
    /// shared memory instead of registers (copied by `cp.async`, read back
    /// by the worker that copied them), so more groups fit on an SM
    /// (0: off). Vector packs only. Same results.
    /// Shorthand for the schedule token `shared-chunks=N`.
    #[arg(long, help_heading = SHORTHANDS, default_value_t = 0, value_name = "N")]
    pub shared_chunks: u32,
    /// Register plans of one row per group: as a row starts, ask L2 to
    /// fetch the group's share of the row N ahead (one bulk prefetch per
    /// chunk), so its DRAM reads are in flight before its group starts
    /// (0: off; about the rows resident at once). Same results.
    /// Shorthand for the schedule token `l2-prefetch=N`.
    #[arg(long, help_heading = SHORTHANDS, default_value_t = 0, value_name = "N")]
    pub l2_prefetch_rows: u32,
}

impl PolicyArgs {
    /// The schedule tokens the shorthand flags stand for.
    fn shorthand_tokens(&self) -> Vec<String> {
        let flags = [
            (self.streaming_hints, "streaming-hints"),
            (self.hoist_columns, "hoisted-columns"),
            (self.reread_hints, "reread-hints"),
            (self.keep_columns, "keep-columns"),
            (self.stage_columns, "staged-columns"),
            (self.pack_resident, "packed-resident"),
            (self.rounded_resident, "rounded-resident"),
            (self.relaxed_cluster_exit, "relaxed-exit"),
            (self.push_cluster_reduce, "push-reduce"),
            (self.persistent_clusters, "persistent-clusters"),
            (self.online_normalizer, "online-normalizer"),
            (self.one_pass_moments, "one-pass-moments"),
            (self.fused_output, "fused-output"),
            (self.prefetch_rows, "prefetch-rows"),
            (self.l1_columns, "l1-columns"),
            (self.unfold_pack_addresses, "unfolded-addresses"),
            (self.ordered_columns, "ordered-columns"),
            (self.ordered_hinted_loads, "ordered-hinted-loads"),
            (self.batch_loads, "batched-loads"),
        ];
        let counts = [
            (self.cluster_group_threads, "group-threads"),
            (self.occupancy, "occupancy"),
            (self.occupancy_cap, "occupancy-cap"),
            (self.early_columns, "early-columns"),
            (self.shared_chunks, "shared-chunks"),
            (self.l2_prefetch_rows, "l2-prefetch"),
        ];
        let flags = flags
            .iter()
            .filter(|(set, _)| *set)
            .map(|(_, token)| token.to_string());
        let counts = counts
            .iter()
            .filter(|(n, _)| *n != 0)
            .map(|(n, token)| format!("{token}={n}"));
        flags.chain(counts).collect()
    }

    /// The request of `--schedule` with these shorthands' tokens and
    /// `more` (the layout flags' tokens) added: one parse of one text.
    pub fn request_with(&self, more: &[String]) -> Result<LayoutRequest> {
        let given = self.schedule.as_deref().map(str::trim).unwrap_or("");
        let mut words: Vec<String> = if given == "auto" {
            vec![]
        } else {
            vec![given.to_string()]
        };
        words.extend(self.shorthand_tokens());
        words.extend(more.iter().cloned());
        let text = words.join(" ");
        text.parse().map_err(|e| match &self.schedule {
            Some(s) => anyhow::anyhow!("--schedule '{s}' with the flags given: {e}"),
            None => anyhow::anyhow!("the flags given: {e}"),
        })
    }

    /// The request of `--schedule` and these shorthands.
    pub fn request(&self) -> Result<LayoutRequest> {
        self.request_with(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_flags_are_shorthands_for_schedule_tokens() {
        let flags = PolicyArgs {
            reread_hints: true,
            occupancy: 2,
            l2_prefetch_rows: 8,
            ..Default::default()
        };
        let r = flags.request().unwrap();
        assert_eq!(r.to_string(), "reread-hints l2-prefetch=8 occupancy=2");
        let text = PolicyArgs {
            schedule: Some(r.to_string()),
            ..Default::default()
        };
        assert_eq!(text.request().unwrap(), r);
        let both = PolicyArgs {
            schedule: Some("W=256 keep-columns".into()),
            ..flags.clone()
        };
        assert_eq!(
            both.request().unwrap().to_string(),
            "W=256 reread-hints keep-columns l2-prefetch=8 occupancy=2"
        );
        let twice = PolicyArgs {
            schedule: Some("occupancy=1".into()),
            ..flags
        };
        let e = twice.request().unwrap_err().to_string();
        assert!(
            e.contains("'occupancy=2': contradicts 'occupancy=1'"),
            "{e}"
        );
        let auto = PolicyArgs {
            schedule: Some("auto".into()),
            keep_columns: true,
            ..Default::default()
        };
        assert_eq!(auto.request().unwrap().to_string(), "keep-columns");
        let bad = PolicyArgs {
            schedule: Some("W=256 wide".into()),
            ..Default::default()
        };
        let e = bad.request().unwrap_err().to_string();
        assert!(e.contains("'wide': unknown token"), "{e}");
    }

    #[test]
    fn a_budget_is_a_positive_finite_number_of_seconds() {
        assert_eq!(parse_seconds("300"), Ok(300.0));
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        for bad in ["0", "-3", "inf", "NaN", "five"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
