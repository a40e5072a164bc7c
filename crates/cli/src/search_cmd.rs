//! `lanefold search` and `lanefold tune`: the finite layout search with an
//! explicit objective, and the tuning cache it fills.

use crate::args::{parse_dtype, parse_ops, parse_residency, parse_shape, BackendArg, L2Arg};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use lanefold_ir::{DType, Operator};
use lanefold_measure::bench::Device;
use lanefold_measure::env::utc_now;
use lanefold_measure::phases::L2Mode;
use lanefold_measure::phases::PhaseConfig;
use lanefold_measure::search::{
    device_of, search, Objective, SearchCandidate, SearchFile, SearchProblem, SearchSpec, Status,
    Winner,
};
use lanefold_measure::tuning::{TuningCache, TuningEntry, TuningKey};
use lanefold_plan::{LayoutRequest, ResidencyRequest, Shape};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TuningMetric {
    /// p50 of the gpu phase (device events around a graph-replayed batch).
    Gpu,
    /// p50 of the e2e phase (host wall clock around a batch).
    HostWall,
    /// p50 of synchronized single calls (host clock, one call alone).
    Single,
}

/// What `search` and `tune` share: the problems, the search space, the
/// objective, the budget and the measurement settings.
#[derive(Args, Clone, Debug)]
pub struct SearchOptions {
    /// Operators, comma separated, or `all` (the six).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub ops: Vec<String>,
    /// ROWSxN, comma separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_shape, required = true)]
    pub shapes: Vec<Shape>,
    #[arg(long, value_delimiter = ',', value_parser = parse_dtype, default_value = "f32")]
    pub dtypes: Vec<DType>,
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// W candidates (0 = automatic).
    #[arg(long, value_delimiter = ',', default_value = "0,32,128,256")]
    pub tune_workers: Vec<u32>,
    /// V candidates (0 = automatic).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub tune_pack: Vec<u32>,
    /// U candidates (0 = automatic).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub tune_unroll: Vec<u32>,
    /// Residencies each W x V x U is tried with: auto (registers where
    /// they fit), registers, stream. Streamed candidates re-read tiles, so
    /// the cost model ranks them low: raise --max-candidates to measure
    /// them (with the schedule token reread-hints they keep re-reads in L2).
    #[arg(long, value_delimiter = ',', value_parser = parse_residency, default_value = "auto")]
    pub tune_residency: Vec<ResidencyRequest>,
    /// The objective: host-wall (e2e p50, the default), gpu (gpu-phase
    /// p50) or single (synchronized single calls' host p50). A candidate
    /// without its objective's phase is rejected.
    #[arg(long, value_enum, default_value_t = TuningMetric::HostWall)]
    pub tuning_metric: TuningMetric,
    /// Distinct realizations measured per problem, ranked by the cost
    /// model; the automatic mapping is measured in addition.
    #[arg(long, default_value_t = 12)]
    pub max_candidates: usize,
    /// Seconds of compiling and measuring for the whole search: past them
    /// no further candidate is measured, the cost model's lowest-ranked
    /// going first (each problem's automatic mapping always is, and its
    /// winner afresh).
    #[arg(long, value_name = "SECONDS", value_parser = crate::args::parse_seconds)]
    pub time_budget: Option<f64>,
    #[arg(long, default_value_t = 7)]
    pub samples: usize,
    #[arg(long, default_value_t = 20.0)]
    pub sample_ms: f64,
    #[arg(long, default_value_t = 100.0)]
    pub warmup_ms: f64,
    #[arg(long, value_enum, default_value_t = L2Arg::Warm)]
    pub l2: L2Arg,
    /// Store each measured kernel's source beside results.json
    /// (sources/SHA.cu).
    #[arg(long)]
    pub capture_sources: bool,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args, Clone, Debug)]
pub struct SearchArgs {
    #[command(flatten)]
    pub search: SearchOptions,
    /// Directory for results.json (raw samples) and results.md.
    #[arg(long)]
    pub output: PathBuf,
    /// The schedule tokens every candidate takes besides its layout (load,
    /// launch and arithmetic variants; the automatic candidate may pick its
    /// own cluster group size where none is given).
    #[command(flatten)]
    pub schedule: crate::args::ScheduleArgs,
}

#[derive(Args, Clone, Debug)]
pub struct TuneArgs {
    #[command(flatten)]
    pub search: SearchOptions,
    /// Directory for the search's results.json and results.md (default: a
    /// new directory under the system's temporary directory).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// The tuning cache file (default: $LANEFOLD_TUNING_CACHE, else
    /// $XDG_CACHE_HOME/lanefold/tuning.json, else ~/.cache/lanefold/tuning.json).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Record winners for every row count (the key's rows part is `*`).
    #[arg(long)]
    pub batch_invariant: bool,
}

impl SearchOptions {
    /// The search specification, with `base` as the request the lists vary.
    pub fn spec(&self, base: LayoutRequest, output: PathBuf) -> Result<SearchSpec> {
        if self.max_candidates == 0 {
            bail!("--max-candidates must be at least 1");
        }
        Ok(SearchSpec {
            ops: parse_ops(&self.ops)?,
            shapes: self.shapes.clone(),
            dtypes: self.dtypes.clone(),
            base,
            workers: self.tune_workers.clone(),
            packs: self.tune_pack.clone(),
            unrolls: self.tune_unroll.clone(),
            residencies: self.tune_residency.clone(),
            objective: match self.tuning_metric {
                TuningMetric::Gpu => Objective::Gpu,
                TuningMetric::HostWall => Objective::HostWall,
                TuningMetric::Single => Objective::Single,
            },
            max_candidates: self.max_candidates,
            time_budget_s: self.time_budget,
            device: self.backend.into(),
            config: PhaseConfig {
                samples: self.samples,
                sample_ms: self.sample_ms,
                warmup_ms: self.warmup_ms,
                l2: self.l2.into(),
            },
            capture_sources: self.capture_sources,
            output,
            seed: self.seed,
            command_line: std::env::args().collect(),
        })
    }
}

fn summarize(file: &SearchFile, dir: &std::path::Path) {
    let winners = file.problems.iter().filter(|p| p.winner.is_some()).count();
    println!(
        "wrote {} ({} problems, {} with a winner; objective {})",
        dir.join("results.json").display(),
        file.problems.len(),
        winners,
        file.objective
    );
}

/// `lanefold search`: every problem searched, results.json + results.md.
/// A problem without a winner is recorded, not an error.
pub fn search_cmd(args: SearchArgs) -> Result<()> {
    let base = args.schedule.request()?;
    let spec = args.search.spec(base, args.output.clone())?;
    let file = search(&spec)?;
    summarize(&file, &args.output);
    Ok(())
}

/// A new directory under the system's temporary directory for a search
/// nobody asked to keep.
fn scratch_dir(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "lanefold-{what}-{}-{}",
        utc_now().replace(':', ""),
        std::process::id()
    ))
}

/// A searched winner less than this much faster than the automatic
/// mapping (search p50s) is within a bench's noise.
const WINNER_MARGIN: f64 = 0.02;

/// The automatic mapping of `p` where its winner is not [`WINNER_MARGIN`]
/// faster: then the cache records the automatic request, so that later
/// choices of the mapper reach the problem instead of a layout pinned by
/// noise. Its candidate and search p50.
fn tie_with_automatic<'a>(p: &'a SearchProblem, w: &Winner) -> Option<(&'a SearchCandidate, f64)> {
    let auto = p.candidates.get(p.automatic?)?;
    let auto_p50 = auto
        .objective_p50
        .filter(|_| auto.status == Status::Accepted)?;
    (w.candidate != auto.index && w.search_p50 > auto_p50 * (1.0 - WINNER_MARGIN))
        .then_some((auto, auto_p50))
}

/// Record in `cache` each problem's winner of `file` (a search written to
/// `output`) whose fresh measurement is valid and has its objective, or
/// its automatic mapping where the winner ties with it; returns how many
/// were recorded.
fn record_winners(
    file: &SearchFile,
    output: &Path,
    cache: &mut TuningCache,
    batch_invariant: bool,
) -> Result<usize> {
    let device = device_of(&file.environment);
    let mut recorded = 0;
    for p in &file.problems {
        let Some(w) = &p.winner else {
            println!(
                "{}: no winner ({}); nothing recorded",
                p.id,
                p.no_winner.clone().unwrap_or_default()
            );
            continue;
        };
        let Some(fresh) = w.fresh_p50 else {
            println!(
                "{}: the winner's fresh measurement is invalid or lacks its objective; nothing recorded",
                p.id
            );
            continue;
        };
        let op: Operator =
            p.op.parse()
                .map_err(|e: lanefold_ir::ParseOperatorError| anyhow::anyhow!("{e}"))?;
        let dtype: DType = p
            .dtype
            .parse()
            .map_err(|e: lanefold_ir::DTypeError| anyhow::anyhow!("{e}"))?;
        let shape: Shape = p.shape.parse()?;
        let key = TuningKey::new(&device, op, dtype, shape, batch_invariant);
        let (request, describe, p50_us, source_sha256) = match tie_with_automatic(p, w) {
            Some((auto, auto_p50)) => {
                println!(
                    "{}: the winner {} ({:.3} µs in the search) is within {:.0}% of the \
                     automatic mapping ({auto_p50:.3} µs): the automatic mapping is recorded",
                    p.id,
                    w.describe,
                    w.search_p50,
                    WINNER_MARGIN * 100.0
                );
                let describe = auto.plan.as_ref().map_or("automatic", |r| &r.describe);
                let sha = auto.source_sha256.clone().unwrap_or_default();
                (p.base, format!("automatic: {describe}"), auto_p50, sha)
            }
            None => (
                w.request,
                w.describe.clone(),
                fresh,
                w.source_sha256.clone(),
            ),
        };
        cache.record(
            &key,
            TuningEntry {
                key: key.clone(),
                request,
                describe: describe.clone(),
                objective: file.objective,
                p50_us,
                source_sha256,
                shape: p.shape.clone(),
                batch_invariant,
                recorded_utc: utc_now(),
                results: Some(output.display().to_string()),
            },
        )?;
        println!("{}: recorded {describe} as {}", p.id, key.text());
        recorded += 1;
    }
    Ok(recorded)
}

/// `run --autotune SECONDS`: search the layouts of a problem the tuning
/// cache does not cover, within `seconds` of compiling and measuring (the
/// automatic mapping always, then the cost model's best-ranked first), and
/// record the winner in the tuning cache, where the call then finds it.
pub fn autotune(
    device: Device,
    op: Operator,
    dtype: DType,
    shape: Shape,
    seconds: f64,
) -> Result<()> {
    let mut cache = TuningCache::open(
        &TuningCache::default_path()
            .context("no cache directory for --autotune: set XDG_CACHE_HOME or HOME")?,
    );
    let output = scratch_dir("autotune");
    let problem = lanefold_plan::Problem::operator(op, Default::default(), dtype, shape);
    let spec = SearchSpec {
        ops: vec![op],
        shapes: vec![shape],
        dtypes: vec![dtype],
        base: LayoutRequest::default(),
        workers: vec![0, 32, 64, 128, 256, 512, 1024],
        packs: vec![0, 2, 4, 8],
        unrolls: vec![0, 1, 2, 4],
        residencies: vec![],
        objective: match device {
            Device::Cpu => Objective::HostWall,
            _ => Objective::Gpu,
        },
        max_candidates: 16,
        time_budget_s: Some(seconds),
        device,
        config: PhaseConfig {
            samples: 3,
            sample_ms: 5.0,
            warmup_ms: 20.0,
            l2: if lanefold_plan::past_l2(&problem) {
                L2Mode::Cold
            } else {
                L2Mode::Warm
            },
        },
        capture_sources: false,
        output: output.clone(),
        seed: 1,
        command_line: std::env::args().collect(),
    };
    let started = std::time::Instant::now();
    let file = search(&spec)?;
    if let Some(p) = file.problems.first() {
        let automatic = p
            .automatic
            .and_then(|a| p.candidates[a].objective_p50)
            .map_or("—".to_string(), |us| format!("{us:.3}"));
        println!(
            "autotune: {} of {} layouts measured in {:.1} s (budget {seconds} s; the \
             automatic mapping {automatic} µs, {})",
            p.measured,
            p.distinct_legal,
            started.elapsed().as_secs_f64(),
            file.objective,
        );
    }
    record_winners(&file, &output, &mut cache, false)?;
    Ok(())
}

/// `lanefold tune`: search each shape and record every winner whose fresh
/// measurement is valid and has its objective in the tuning cache.
pub fn tune_cmd(args: TuneArgs) -> Result<()> {
    let cache_path = match &args.cache {
        Some(p) => p.clone(),
        None => TuningCache::default_path()
            .context("no cache directory: set XDG_CACHE_HOME or HOME, or pass --cache")?,
    };
    let output = args.output.clone().unwrap_or_else(|| scratch_dir("tune"));
    let base = LayoutRequest {
        batch_invariant: args.batch_invariant,
        ..Default::default()
    };
    let spec = args.search.spec(base, output.clone())?;
    let file = search(&spec)?;
    summarize(&file, &output);
    let mut cache = TuningCache::open(&cache_path);
    let recorded = record_winners(&file, &output, &mut cache, args.batch_invariant)?;
    println!(
        "tuning cache {}: {recorded} entries recorded, {} in all",
        cache.path().display(),
        cache.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(dir: &str) -> SearchFile {
        let path = format!(
            "{}/../../bench/results/{dir}/results.json",
            env!("CARGO_MANIFEST_DIR")
        );
        SearchFile::read(Path::new(&path)).unwrap()
    }

    fn problem<'a>(file: &'a SearchFile, id: &str) -> &'a SearchProblem {
        file.problems.iter().find(|p| p.id == id).unwrap()
    }

    /// Committed H200 searches: a winner 0.05% ahead of the automatic
    /// mapping is noise and records the automatic mapping; one 4.8x ahead
    /// is recorded itself.
    #[test]
    fn a_winner_within_the_margin_of_the_automatic_mapping_records_the_automatic_one() {
        let grid = committed("2026-11-30-grid-1024x4096-search-h200");
        let p = problem(&grid, "sum/bf16/1024x4096");
        let w = p.winner.as_ref().unwrap();
        assert_ne!(Some(w.candidate), p.automatic);
        let (auto, auto_p50) = tie_with_automatic(p, w).expect("a tie");
        assert_eq!(Some(auto.index), p.automatic);
        assert!(w.search_p50 < auto_p50 && w.search_p50 > auto_p50 * (1.0 - WINNER_MARGIN));

        let short = committed("2026-12-03-search-short-rows-bf16-h200");
        let p = problem(&short, "sum/bf16/262144x4");
        assert!(tie_with_automatic(p, p.winner.as_ref().unwrap()).is_none());
        // The automatic mapping as the winner is recorded as such.
        let won = p
            .candidates
            .iter()
            .find(|c| c.automatic && c.status == Status::Accepted);
        if let Some(c) = won {
            let w = Winner {
                candidate: c.index,
                ..p.winner.clone().unwrap()
            };
            assert!(tie_with_automatic(p, &w).is_none());
        }
    }
}
