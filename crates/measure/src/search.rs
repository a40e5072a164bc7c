//! `lanefold search`: a finite layout search with an explicit objective.
//!
//! Per problem (operator x dtype x shape) the W x V x U product is
//! enumerated over a base request (0 = automatic). Refused candidates are
//! recorded with their reason; legal ones are scored by the cost policy and
//! keyed by the SHA-256 of their generated kernel source, so candidates that
//! realize the same kernel (an automatic choice equal to an explicit one)
//! are measured once. With more distinct realizations than the budget, the
//! top K by predicted cost plus the automatic mapping are measured; the
//! rest are recorded as over budget. Every measured output is validated; a
//! candidate without its objective's phase is rejected, never filled in
//! from another phase. The winner is regenerated from its recorded request,
//! its source hash compared, and measured afresh: the fresh figure is the
//! result, the search score a diagnostic, their ratio the optimism.

use crate::audit::{audit_side, close, close_opt, is_sha, per_op_us, quantile};
use crate::bench::{capture_source, input_sets, measure_native, Device};
use crate::phases::PhaseConfig;
use crate::results::{Environment, KernelRecord, PlanRecord, Side, SideSummary};
use anyhow::{bail, Context, Result};
use lanefold_codegen::{generate, CodegenOptions};
use lanefold_cpu::npy;
use lanefold_cpu::reference::reference;
use lanefold_cuda::CudaBackend;
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{
    enumerate, plan, CostPolicy, Features, LayoutRequest, Plan, Problem, ResidencyRequest,
    RooflinePolicy, Shape, Target,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub const SEARCH_SCHEMA: &str = "lanefold-search/1";

pub const REASON_PHASE_ABSENT: &str = "objective phase absent";
pub const REASON_INVALID: &str = "invalid output";
pub const REASON_OVER_BUDGET: &str = "over budget";

/// What the search minimizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// p50 of the gpu phase (device events around a graph-replayed batch).
    Gpu,
    /// p50 of the e2e phase (host wall clock around a batch): the default.
    #[default]
    HostWall,
    /// p50 of synchronized single calls' host time (launch to completion
    /// seen by the host, one call alone): what a decode step waits for,
    /// which ramp and drain set rather than throughput.
    Single,
}

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::Gpu => "gpu",
            Objective::HostWall => "host-wall",
            Objective::Single => "single",
        }
    }

    /// The phase whose p50 is the objective.
    pub fn phase(self) -> &'static str {
        match self {
            Objective::Gpu => "gpu",
            Objective::HostWall => "e2e",
            Objective::Single => "single",
        }
    }

    /// The objective's p50, or None when its phase is absent. Never taken
    /// from another phase.
    pub fn p50(self, s: &SideSummary) -> Option<f64> {
        match self {
            Objective::Gpu => s.gpu.map(|x| x.p50),
            Objective::HostWall => s.e2e.map(|x| x.p50),
            Objective::Single => s.single_host.map(|x| x.p50),
        }
    }
}

impl std::str::FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gpu" => Ok(Objective::Gpu),
            "host-wall" | "host_wall" | "e2e" => Ok(Objective::HostWall),
            "single" => Ok(Objective::Single),
            _ => Err(format!("'{s}': expected gpu, host-wall or single")),
        }
    }
}

impl std::fmt::Display for Objective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug)]
pub struct SearchSpec {
    pub ops: Vec<Operator>,
    pub shapes: Vec<Shape>,
    pub dtypes: Vec<DType>,
    /// The request the lists vary (and the automatic mapping, as is).
    pub base: LayoutRequest,
    /// W, V, U lists (0 = automatic).
    pub workers: Vec<u32>,
    pub packs: Vec<u32>,
    pub unrolls: Vec<u32>,
    /// Residencies each W x V x U is tried with (empty: the base's alone).
    pub residencies: Vec<ResidencyRequest>,
    pub objective: Objective,
    /// Distinct legal realizations measured at most (plus the automatic).
    pub max_candidates: usize,
    /// Seconds of compiling and measuring for the whole search: past them
    /// no further candidate is measured (the automatic mapping always is,
    /// and each winner afresh). None: no time budget.
    pub time_budget_s: Option<f64>,
    pub device: Device,
    pub config: PhaseConfig,
    pub capture_sources: bool,
    pub output: PathBuf,
    pub seed: u64,
    pub command_line: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The mapper (or code generation) refused the request: `reason`.
    Refused,
    /// Realizes the same kernel as `duplicate_of`: measured there.
    Duplicate,
    /// Legal and distinct, but outside the budget: not measured.
    OverBudget,
    /// Measured and rejected: `reason` (invalid output, objective phase
    /// absent, measurement failed).
    Rejected,
    /// Measured, valid, with its objective's phase.
    Accepted,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchCandidate {
    pub index: usize,
    pub request: LayoutRequest,
    /// The request in its schedule text form (absent from older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Realizes the automatic mapping (the base request as given).
    pub automatic: bool,
    /// Not part of the W x V x U product: the automatic mapping added
    /// because no candidate of the product realizes it.
    pub added: bool,
    pub status: Status,
    pub reason: Option<String>,
    pub plan: Option<PlanRecord>,
    /// SHA-256 of the generated kernel source: the realization key.
    pub source_sha256: Option<String>,
    /// `sources/SHA.cu`, relative to the results directory, when captured.
    pub source_file: Option<String>,
    pub predicted_us: Option<f64>,
    /// 1-based rank by predicted cost among the distinct realizations.
    pub predicted_rank: Option<usize>,
    pub duplicate_of: Option<usize>,
    /// The measurement (raw samples, validation), when measured.
    pub side: Option<Side>,
    /// The compiled kernel (CUDA).
    pub kernel: Option<KernelRecord>,
    /// The objective's p50, µs per op (accepted candidates).
    pub objective_p50: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Winner {
    pub candidate: usize,
    /// The recorded parameters the winner was regenerated from.
    pub request: LayoutRequest,
    /// The request in its schedule text form (absent from older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    pub describe: String,
    /// Source hash of the regenerated kernel (equal to the recorded one).
    pub source_sha256: String,
    pub source_file: Option<String>,
    /// The search's score: diagnostic only.
    pub search_p50: f64,
    /// The fresh measurement: the result.
    pub fresh: Side,
    pub fresh_kernel: Option<KernelRecord>,
    /// The objective's p50 of the fresh measurement (None: invalid output
    /// or phase absent).
    pub fresh_p50: Option<f64>,
    /// fresh p50 / search p50.
    pub optimism: Option<f64>,
}

/// The cost model judged against the measurements of one problem.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelEval {
    pub policy: String,
    /// Lowest predicted cost among the accepted candidates.
    pub pick: Option<usize>,
    /// objective(pick) / best objective - 1.
    pub regret: Option<f64>,
    /// Spearman rank correlation of predicted and measured over the
    /// accepted candidates (None below 3 or without variation).
    pub rank_correlation: Option<f64>,
    pub accepted: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchProblem {
    /// `op/dtype/shape`.
    pub id: String,
    pub op: String,
    pub dtype: String,
    pub shape: String,
    pub base: LayoutRequest,
    pub bytes_moved: u64,
    pub automatic: Option<usize>,
    pub distinct_legal: usize,
    pub measured: usize,
    pub candidates: Vec<SearchCandidate>,
    pub winner: Option<Winner>,
    /// Why there is no winner.
    pub no_winner: Option<String>,
    pub model: ModelEval,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchFile {
    pub schema: String,
    pub environment: Environment,
    pub config: PhaseConfig,
    pub objective: Objective,
    pub workers: Vec<u32>,
    pub packs: Vec<u32>,
    pub unrolls: Vec<u32>,
    /// Residencies tried (empty in files written before the list existed:
    /// the base request's alone).
    #[serde(default)]
    pub residencies: Vec<ResidencyRequest>,
    pub max_candidates: usize,
    /// The search's time budget in seconds, where it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_budget_s: Option<f64>,
    pub target: String,
    pub problems: Vec<SearchProblem>,
}

impl SearchFile {
    pub fn read(path: &Path) -> Result<SearchFile> {
        let text = crate::results::read_text(path)?;
        serde_json::from_str(&text)
            .with_context(|| format!("{}: not a lanefold search file", path.display()))
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        crate::results::write_json(&dir.join("results.json"), self)?;
        npy::write_atomically(&dir.join("results.md"), markdown(self).as_bytes())?;
        Ok(())
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The realization key of a plan: SHA-256 of its generated kernel source
/// (code generation is pure, so this holds on the CPU backend as well).
pub fn realization(plan: &Plan) -> Result<(String, String)> {
    let kernel = generate(plan, &CodegenOptions::default())?;
    Ok((sha256_hex(kernel.source.as_bytes()), kernel.source))
}

/// Regenerate a plan from recorded parameters and check it realizes the
/// recorded kernel; a different source hash is an error.
pub fn regenerate(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
    recorded_sha256: &str,
) -> Result<Plan> {
    let p = plan(problem, target, request)
        .with_context(|| format!("regenerating the winner from {request:?}"))?;
    let (sha, _) = realization(&p)?;
    if sha != recorded_sha256 {
        bail!(
            "winner regenerated from its recorded parameters realizes a different kernel: \
             recorded source SHA-256 {recorded_sha256}, regenerated {sha} ({})",
            p.describe()
        );
    }
    Ok(p)
}

/// A measured side against an objective: its p50, or why it is rejected.
pub fn judge(side: &Side, objective: Objective) -> Result<f64, &'static str> {
    if !side.validation.pass || side.voided {
        return Err(REASON_INVALID);
    }
    objective.p50(&side.summary).ok_or(REASON_PHASE_ABSENT)
}

/// Which distinct realizations to measure: all when they fit the budget,
/// otherwise the `k` lowest predicted (ties by position) plus the
/// automatic one. `distinct` holds (candidate index, predicted µs).
pub fn select_for_measurement(
    distinct: &[(usize, f64)],
    automatic: Option<usize>,
    k: usize,
) -> Vec<usize> {
    let mut ranked: Vec<(usize, f64)> = distinct.to_vec();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut out: Vec<usize> = ranked.iter().take(k).map(|c| c.0).collect();
    if let Some(a) = automatic {
        if distinct.iter().any(|c| c.0 == a) && !out.contains(&a) {
            out.push(a);
        }
    }
    out.sort_unstable();
    out
}

/// Average ranks (1-based), ties sharing their mean rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let n = v.len();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = mean;
        }
        i = j + 1;
    }
    r
}

/// Spearman rank correlation (Pearson over average ranks). None with
/// fewer than 3 pairs or when either side does not vary.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    if saa == 0.0 || sbb == 0.0 {
        return None;
    }
    Some(sab / (saa * sbb).sqrt())
}

/// The model's pick (lowest predicted, ties by position) and its regret
/// `measured[pick] / min(measured) - 1`.
pub fn model_regret(predicted: &[f64], measured: &[f64]) -> Option<(usize, f64)> {
    if predicted.is_empty() || predicted.len() != measured.len() {
        return None;
    }
    let pick = (0..predicted.len()).min_by(|&a, &b| predicted[a].total_cmp(&predicted[b]))?;
    let best = measured.iter().cloned().fold(f64::INFINITY, f64::min);
    Some((pick, measured[pick] / best - 1.0))
}

/// The cost model's regret and rank correlation over accepted candidates.
pub fn evaluate_model(candidates: &[SearchCandidate]) -> ModelEval {
    let acc: Vec<&SearchCandidate> = candidates
        .iter()
        .filter(|c| c.status == Status::Accepted)
        .collect();
    let pred: Vec<f64> = acc
        .iter()
        .map(|c| c.predicted_us.unwrap_or(f64::NAN))
        .collect();
    let meas: Vec<f64> = acc
        .iter()
        .map(|c| c.objective_p50.unwrap_or(f64::NAN))
        .collect();
    let r = model_regret(&pred, &meas);
    ModelEval {
        policy: RooflinePolicy.name().to_string(),
        pick: r.map(|(i, _)| acc[i].index),
        regret: r.map(|(_, x)| x),
        rank_correlation: spearman(&pred, &meas),
        accepted: acc.len(),
    }
}

/// Is every field of the request explicit (no automatic W, V or U)?
fn explicit(r: &LayoutRequest) -> bool {
    r.workers != 0 && r.pack != 0 && r.unroll != 0
}

fn request_label(r: &LayoutRequest) -> String {
    let f = |x: u32| {
        if x == 0 {
            "auto".to_string()
        } else {
            x.to_string()
        }
    };
    format!("W={} V={} U={}", f(r.workers), f(r.pack), f(r.unroll))
}

fn plan_record(p: &Plan, target: &Target) -> (PlanRecord, Features) {
    let f = Features::of(p, target);
    (PlanRecord::of(p, &f, target), f)
}

fn environment(spec: &SearchSpec, cuda: Option<&CudaBackend>) -> Environment {
    crate::env::capture(cuda, None, spec.command_line.clone()).env
}

/// Run the search; results.json and results.md are rewritten after every
/// problem.
pub fn search(spec: &SearchSpec) -> Result<SearchFile> {
    anyhow::ensure!(
        !spec.workers.is_empty() && !spec.packs.is_empty() && !spec.unrolls.is_empty(),
        "the W, V and U lists must each have at least one entry"
    );
    let (cuda, target) = crate::bench::open_device(spec.device, spec.config.l2)?;
    std::fs::create_dir_all(&spec.output)?;
    let mut file = SearchFile {
        schema: SEARCH_SCHEMA.to_string(),
        environment: environment(spec, cuda.as_ref()),
        config: spec.config,
        objective: spec.objective,
        workers: spec.workers.clone(),
        packs: spec.packs.clone(),
        unrolls: spec.unrolls.clone(),
        residencies: spec.residencies.clone(),
        max_candidates: spec.max_candidates,
        time_budget_s: spec.time_budget_s,
        target: target.name.clone(),
        problems: vec![],
    };
    let mut deadline = crate::deadline::Deadline::new(spec.time_budget_s);
    let mut k = 0u64;
    let pb = crate::progress::bar(
        (spec.shapes.len() * spec.ops.len() * spec.dtypes.len()) as u64,
        "search",
    );
    for &shape in &spec.shapes {
        for &op in &spec.ops {
            for &dtype in &spec.dtypes {
                pb.set_message(format!("{op} {dtype} {shape}"));
                let problem = Problem::operator(op, OperatorOptions::default(), dtype, shape);
                let result = search_problem(
                    spec,
                    cuda.as_ref(),
                    &target,
                    &problem,
                    spec.seed + k,
                    &mut deadline,
                )?;
                pb.suspend(|| print_problem(&result, spec.objective));
                file.problems.push(result);
                // An interrupted search keeps every problem already done.
                file.write(&spec.output)?;
                k += 1;
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    file.write(&spec.output)?;
    Ok(file)
}

fn print_problem(p: &SearchProblem, objective: Objective) {
    let line = match &p.winner {
        Some(w) => format!(
            "winner #{} {} {} p50 {} µs fresh (search {:.3} µs, optimism {}), regret {}",
            w.candidate,
            w.describe,
            objective,
            w.fresh_p50.map_or("—".into(), |x| format!("{x:.3}")),
            w.search_p50,
            w.optimism.map_or("—".into(), |x| format!("{x:.3}")),
            p.model
                .regret
                .map_or("—".into(), |r| format!("{:.1}%", 100.0 * r)),
        ),
        None => format!(
            "no winner: {}",
            p.no_winner.clone().unwrap_or_else(|| "—".into())
        ),
    };
    println!(
        "{:<32} {} candidates, {} distinct legal, {} measured; {line}",
        p.id,
        p.candidates.len(),
        p.distinct_legal,
        p.measured
    );
}

fn search_problem(
    spec: &SearchSpec,
    cuda: Option<&CudaBackend>,
    target: &Target,
    problem: &Problem,
    seed: u64,
    deadline: &mut crate::deadline::Deadline,
) -> Result<SearchProblem> {
    let id = format!(
        "{}/{}/{}",
        problem.program.name, problem.dtype, problem.shape
    );
    let capture = spec.capture_sources.then_some(spec.output.as_path());
    let bases: Vec<LayoutRequest> = if spec.residencies.is_empty() {
        vec![spec.base]
    } else {
        spec.residencies
            .iter()
            .map(|&residency| LayoutRequest {
                residency,
                ..spec.base
            })
            .collect()
    };
    let mut enumerated: Vec<_> = bases
        .iter()
        .flat_map(|base| {
            enumerate(
                problem,
                target,
                base,
                &spec.workers,
                &spec.packs,
                &spec.unrolls,
            )
        })
        .collect();
    // The automatic mapping: the base request as given.
    // On CUDA, plans as the device runs them (the norms' cold path
    // resolved), recorded with the request that plans to each.
    let on_device =
        |p: Plan, request: &LayoutRequest| crate::bench::resolved_for_device(cuda, p, request);
    // Resolved once, with the request that plans to it: a plan resolved
    // twice was recorded with the automatic request, which regenerates a
    // different kernel.
    let auto_plan = match plan(problem, target, &spec.base) {
        Ok(p) => Some(on_device(p, &spec.base)?),
        Err(_) => None,
    };
    let auto_sha = match &auto_plan {
        Some((p, _)) => Some(realization(p)?.0),
        None => None,
    };
    let mut all: Vec<(lanefold_plan::Candidate, bool)> =
        enumerated.drain(..).map(|c| (c, false)).collect();
    let mut candidates = vec![];
    let mut plans: Vec<Option<Plan>> = vec![];
    let mut sources: Vec<Option<String>> = vec![];
    let mut bytes_moved = 0;
    let mut i = 0;
    while i < all.len() {
        let (c, added) = (all[i].0.clone(), all[i].1);
        let mut rec = SearchCandidate {
            index: i,
            request: c.request,
            schedule: Some(c.request.to_string()),
            automatic: false,
            added,
            status: Status::Refused,
            reason: None,
            plan: None,
            source_sha256: None,
            source_file: None,
            predicted_us: None,
            predicted_rank: None,
            duplicate_of: None,
            side: None,
            kernel: None,
            objective_p50: None,
        };
        let mut kept = None;
        let mut source = None;
        match c.outcome {
            Err(e) => rec.reason = Some(e.to_string()),
            Ok(p) => match if added {
                // The automatic mapping, resolved above.
                Ok((p, c.request))
            } else {
                on_device(p, &c.request)
            }
            .and_then(|(p, request)| {
                rec.request = request;
                rec.schedule = Some(request.to_string());
                let (sha, src) = realization(&p)?;
                Ok((p, sha, src))
            }) {
                Err(e) => rec.reason = Some(format!("code generation: {e:#}")),
                Ok((p, sha, src)) => {
                    let (record, f) = plan_record(&p, target);
                    bytes_moved = f.bytes_moved;
                    rec.predicted_us = Some(record.predicted_us);
                    rec.plan = Some(record);
                    rec.automatic = auto_sha.as_deref() == Some(sha.as_str());
                    rec.source_sha256 = Some(sha);
                    rec.status = Status::OverBudget;
                    kept = Some(p);
                    source = Some(src);
                }
            },
        }
        candidates.push(rec);
        plans.push(kept);
        sources.push(source);
        i += 1;
        // After the product: the automatic mapping, when none realizes it.
        if i == all.len() && !candidates.iter().any(|c: &SearchCandidate| c.automatic) {
            if let Some((p, request)) = &auto_plan {
                all.push((
                    lanefold_plan::Candidate {
                        request: *request,
                        outcome: Ok(p.clone()),
                    },
                    true,
                ));
            }
        }
    }

    // Group by realization; the primary is the first fully explicit
    // request of its group, else its first member.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for c in &candidates {
        if let Some(sha) = &c.source_sha256 {
            groups.entry(sha.clone()).or_default().push(c.index);
        }
    }
    let mut distinct = vec![];
    let mut automatic = None;
    for members in groups.values() {
        let primary = members
            .iter()
            .copied()
            .find(|&i| explicit(&candidates[i].request))
            .unwrap_or(members[0]);
        for &i in members {
            if i != primary {
                candidates[i].status = Status::Duplicate;
                candidates[i].duplicate_of = Some(primary);
            }
        }
        if members.iter().any(|&i| candidates[i].automatic) {
            candidates[primary].automatic = true;
            automatic = Some(primary);
        }
        distinct.push((
            primary,
            candidates[primary].predicted_us.unwrap_or(f64::NAN),
        ));
    }
    let mut ranked = distinct.clone();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    for (r, (i, _)) in ranked.iter().enumerate() {
        candidates[*i].predicted_rank = Some(r + 1);
    }
    let selected = select_for_measurement(&distinct, automatic, spec.max_candidates);
    for &(i, _) in &distinct {
        if !selected.contains(&i) {
            let rank = candidates[i].predicted_rank.unwrap_or(0);
            candidates[i].reason = Some(format!(
                "{REASON_OVER_BUDGET}: predicted rank {rank} of {}, budget {}",
                distinct.len(),
                spec.max_candidates
            ));
        }
    }

    if let Some(c) = cuda {
        // Every selected candidate's kernel compiled at once, on every core.
        let jobs: Vec<_> = selected
            .iter()
            .filter_map(|&i| plans[i].clone())
            .map(|p| (p, CodegenOptions::default()))
            .collect();
        eprintln!("{}", c.precompile(&jobs));
    }
    let sets = input_sets(problem, spec.config.l2, cuda.map(|c| c.l2_bytes()), seed);
    let want = reference(problem, &sets[0]).context("no float64 reference")?;
    // The automatic mapping first, then by predicted rank: a time budget
    // cuts the ones the model ranks last, and leaves room for the
    // winner's fresh measurement.
    let mut order = selected.clone();
    order.sort_by_key(|&i| (Some(i) != automatic, candidates[i].predicted_rank));
    let mut measured = 0;
    for i in order {
        if Some(i) != automatic && !deadline.allows_with_reserve(1) {
            candidates[i].reason = Some(format!(
                "{REASON_OVER_BUDGET}: the time budget of {} s ran out",
                spec.time_budget_s.unwrap_or_default()
            ));
            continue;
        }
        deadline.start_unit();
        measured += 1;
        let p = plans[i].as_ref().expect("a selected candidate is legal");
        let sha = candidates[i].source_sha256.clone().unwrap_or_default();
        if let (Some(dir), None) = (capture, cuda) {
            let src = sources[i].as_deref().unwrap_or_default();
            candidates[i].source_file = Some(capture_source(dir, &sha, src)?);
        }
        match measure_native(cuda, p, &sets, &want, &spec.config, capture, bytes_moved) {
            Err(e) => {
                candidates[i].status = Status::Rejected;
                candidates[i].reason = Some(format!("measurement failed: {e:#}"));
            }
            Ok((side, kernel)) => {
                if let Some(k) = &kernel {
                    if k.source_sha256 != sha {
                        bail!(
                            "{id} candidate #{i}: the compiled kernel's source hash {} differs from its realization key {sha}",
                            k.source_sha256
                        );
                    }
                    candidates[i].source_file = k.source_file.clone();
                }
                match judge(&side, spec.objective) {
                    Ok(p50) => {
                        candidates[i].status = Status::Accepted;
                        candidates[i].objective_p50 = Some(p50);
                    }
                    Err(why) => {
                        candidates[i].status = Status::Rejected;
                        candidates[i].reason = Some(why.to_string());
                    }
                }
                candidates[i].side = Some(side);
                candidates[i].kernel = kernel;
            }
        }
        deadline.end_unit();
    }

    let best = candidates
        .iter()
        .filter(|c| c.status == Status::Accepted)
        .min_by(|a, b| {
            a.objective_p50
                .unwrap_or(f64::INFINITY)
                .total_cmp(&b.objective_p50.unwrap_or(f64::INFINITY))
                .then(a.index.cmp(&b.index))
        })
        .map(|c| c.index);
    let mut no_winner = None;
    let winner = match best {
        None => {
            no_winner = Some(if selected.is_empty() {
                "no legal candidate".to_string()
            } else {
                let mut reasons: Vec<String> = selected
                    .iter()
                    .filter_map(|&i| candidates[i].reason.clone())
                    .collect();
                reasons.dedup();
                format!(
                    "every measured candidate was rejected ({})",
                    reasons.join("; ")
                )
            });
            None
        }
        Some(i) => {
            let c = &candidates[i];
            let recorded = c.source_sha256.clone().unwrap_or_default();
            let p = regenerate(problem, target, &c.request, &recorded)
                .with_context(|| format!("{id}: winner #{i}"))?;
            let (side, kernel) =
                measure_native(cuda, &p, &sets, &want, &spec.config, capture, bytes_moved)
                    .with_context(|| format!("{id}: fresh measurement of winner #{i}"))?;
            if let Some(k) = &kernel {
                if k.source_sha256 != recorded {
                    bail!(
                        "{id}: the winner's fresh kernel hashes to {}, recorded {recorded}",
                        k.source_sha256
                    );
                }
            }
            let search_p50 = c.objective_p50.unwrap_or(f64::NAN);
            let fresh_p50 = judge(&side, spec.objective).ok();
            Some(Winner {
                candidate: i,
                request: c.request,
                schedule: Some(c.request.to_string()),
                describe: p.describe(),
                source_sha256: recorded,
                source_file: c.source_file.clone(),
                search_p50,
                fresh_p50,
                optimism: fresh_p50.map(|f| f / search_p50),
                fresh: side,
                fresh_kernel: kernel,
            })
        }
    };
    let model = evaluate_model(&candidates);
    Ok(SearchProblem {
        id,
        op: problem.program.name.clone(),
        dtype: problem.dtype.name().to_string(),
        shape: problem.shape.to_string(),
        base: spec.base,
        bytes_moved,
        automatic,
        distinct_legal: distinct.len(),
        measured,
        candidates,
        winner,
        no_winner,
        model,
    })
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("—".into(), |v| format!("{v:.digits$}"))
}

/// results.md: one table per problem.
pub fn markdown(file: &SearchFile) -> String {
    let e = &file.environment;
    let c = &file.config;
    let mut md = crate::render::header("search", e);
    let _ = writeln!(md, "Target {}.\n", file.target);
    let _ = writeln!(
        md,
        "**Objective: {}** (p50 of the {} phase, µs per op; a candidate without that phase is rejected, never filled in from another). Search space W ∈ {:?} × V ∈ {:?} × U ∈ {:?} (0 = automatic); budget {} distinct realizations, ranked by the cost model, plus the automatic mapping. {} samples per phase, batches of about {} ms, {} ms warm-up, L2 {:?}. Every measured output was validated against float64. The winner was regenerated from its recorded parameters, its source hash checked, and measured afresh: **the fresh figure is the result**; the search score is a diagnostic and optimism = fresh / search. One run: a measurement, not a frozen replay.\n",
        file.objective,
        file.objective.phase(),
        file.workers,
        file.packs,
        file.unrolls,
        file.max_candidates,
        c.samples,
        c.sample_ms,
        c.warmup_ms,
        c.l2
    );
    for p in &file.problems {
        let _ = writeln!(md, "## {}\n", p.id);
        let _ = writeln!(
            md,
            "| # | request | layout | status | predicted µs | rank | {} p50 µs | duplicate of | source | |\n|---|---|---|---|---|---|---|---|---|---|",
            file.objective
        );
        let win = p.winner.as_ref().map(|w| w.candidate);
        for cand in &p.candidates {
            let status = match cand.status {
                Status::Accepted => "accepted".to_string(),
                Status::Duplicate => "duplicate".to_string(),
                s => format!(
                    "{}: {}",
                    match s {
                        Status::Refused => "refused",
                        Status::OverBudget => "not measured",
                        _ => "rejected",
                    },
                    cand.reason.clone().unwrap_or_default()
                ),
            };
            let mut marks = vec![];
            if win == Some(cand.index) {
                marks.push("**winner**");
            }
            if cand.automatic {
                marks.push("automatic");
            }
            if cand.added {
                marks.push("added");
            }
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                cand.index,
                request_label(&cand.request),
                cand.plan
                    .as_ref()
                    .map_or("—".into(), |p| p.describe.clone()),
                status.replace('|', "/"),
                opt(cand.predicted_us, 2),
                cand.predicted_rank.map_or("—".into(), |r| r.to_string()),
                opt(cand.objective_p50, 3),
                cand.duplicate_of.map_or("".into(), |d| format!("#{d}")),
                cand.source_sha256
                    .as_ref()
                    .map_or("—".into(), |s| format!("`{}`", &s[..12.min(s.len())])),
                marks.join(", ")
            );
        }
        let _ = writeln!(md);
        match &p.winner {
            Some(w) => {
                let _ = writeln!(
                    md,
                    "Winner #{} ({}, source `{}`): fresh {} p50 **{} µs**{}; search p50 {:.3} µs (diagnostic); optimism {}.",
                    w.candidate,
                    w.describe,
                    w.source_sha256,
                    file.objective,
                    opt(w.fresh_p50, 3),
                    if w.fresh.validation.pass { "" } else { " (fresh output INVALID)" },
                    w.search_p50,
                    opt(w.optimism, 3)
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "No winner: {}.",
                    p.no_winner.clone().unwrap_or_default()
                );
            }
        }
        let _ = writeln!(
            md,
            "\nCost model {}: pick {}, regret {}, Spearman rank correlation {} over {} accepted candidates.\n",
            p.model.policy,
            p.model.pick.map_or("—".into(), |i| format!("#{i}")),
            p.model
                .regret
                .map_or("—".into(), |r| format!("{:.1}%", 100.0 * r)),
            opt(p.model.rank_correlation, 3),
            p.model.accepted
        );
    }
    md
}

// ---------------------------------------------------------------------
// Audit: independent recomputation with its own arithmetic.

fn median_of(values: &[f64]) -> Option<f64> {
    quantile(values, 0.5)
}

/// The objective's p50 recomputed from a side's raw samples.
fn raw_objective(side: &Side, objective: &str) -> Option<f64> {
    match objective {
        "gpu" => side
            .phases
            .gpu
            .as_deref()
            .and_then(|g| median_of(&per_op_us(g))),
        "single" => median_of(
            &side
                .phases
                .single
                .iter()
                .map(|s| s.host_us)
                .collect::<Vec<_>>(),
        ),
        _ => median_of(&per_op_us(&side.phases.e2e)),
    }
}

/// Spearman by rank counting: rank = 1 + #smaller + (#equal - 1) / 2.
fn audit_spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len();
    if n < 3 {
        return None;
    }
    let rank = |v: &[f64], x: f64| {
        let less = v.iter().filter(|&&y| y < x).count() as f64;
        let eq = v.iter().filter(|&&y| y == x).count() as f64;
        1.0 + less + (eq - 1.0) / 2.0
    };
    let ra: Vec<f64> = a.iter().map(|&x| rank(a, x)).collect();
    let rb: Vec<f64> = b.iter().map(|&x| rank(b, x)).collect();
    let nf = n as f64;
    let (sa, sb) = (ra.iter().sum::<f64>(), rb.iter().sum::<f64>());
    let sab: f64 = ra.iter().zip(&rb).map(|(x, y)| x * y).sum();
    let saa: f64 = ra.iter().map(|x| x * x).sum();
    let sbb: f64 = rb.iter().map(|y| y * y).sum();
    let cov = nf * sab - sa * sb;
    let (va, vb) = (nf * saa - sa * sa, nf * sbb - sb * sb);
    if va.abs() < 1e-9 || vb.abs() < 1e-9 {
        return None;
    }
    Some(cov / (va * vb).sqrt())
}

/// Audit a `lanefold-search/1` file: recompute every measured candidate's
/// summaries and objective from raw samples, the statuses, the winner
/// (lowest recomputed objective, its search and fresh p50 and optimism),
/// the budget, duplicates, source hashes and the cost model's regret and
/// rank correlation. Each discrepancy starts with `case <id>: `.
pub fn audit_search(dir: &Path, value: &serde_json::Value) -> Vec<String> {
    let file: SearchFile = match serde_json::from_value(value.clone()) {
        Ok(f) => f,
        Err(e) => return vec![format!("case -: not a lanefold search file: {e}")],
    };
    let mut out = vec![];
    if file.schema != SEARCH_SCHEMA {
        out.push(format!("case -: schema {:?}", file.schema));
    }
    if !is_sha(&file.environment.binary_sha256) {
        out.push("case -: environment binary_sha256 is not a SHA-256".into());
    }
    let objective = file.objective.phase();
    for p in &file.problems {
        let id = &p.id;
        let mut bad = |m: String| out.push(format!("case {id}: {m}"));
        let mut accepted: Vec<(usize, f64, f64)> = vec![];
        let mut measured = 0usize;
        for c in &p.candidates {
            let i = c.index;
            if p.candidates.get(i).map(|x| x.index) != Some(i) {
                bad(format!("candidate index {i} out of place"));
            }
            if let Some(s) = &c.source_sha256 {
                if !is_sha(s) {
                    bad(format!("#{i}: source_sha256 is not a SHA-256"));
                }
                if let Some(f) = &c.source_file {
                    if let Some(m) = crate::audit::captured_source_problem(dir, f, s) {
                        bad(format!("#{i}: {m}"));
                    }
                }
            }
            if let Some(d) = c.duplicate_of {
                let ok = c.status == Status::Duplicate
                    && p.candidates.get(d).is_some_and(|o| {
                        o.duplicate_of.is_none() && o.source_sha256 == c.source_sha256
                    });
                if !ok {
                    bad(format!(
                        "#{i}: duplicate_of #{d} does not realize the same kernel"
                    ));
                }
            }
            match c.status {
                Status::Refused | Status::OverBudget | Status::Duplicate => {
                    if c.side.is_some() || c.objective_p50.is_some() {
                        bad(format!("#{i}: {:?} but carries a measurement", c.status));
                    }
                    if c.status == Status::Duplicate && c.duplicate_of.is_none() {
                        bad(format!("#{i}: duplicate without duplicate_of"));
                    }
                    if c.status != Status::Refused && c.source_sha256.is_none() {
                        bad(format!("#{i}: legal candidate without a source hash"));
                    }
                }
                Status::Accepted | Status::Rejected => {
                    measured += 1;
                    let Some(side) = &c.side else {
                        if c.status == Status::Accepted {
                            bad(format!("#{i}: accepted without a measurement"));
                        }
                        continue;
                    };
                    bad_side(&mut bad, &format!("#{i}"), side);
                    let raw = raw_objective(side, objective);
                    let valid = side.validation.pass
                        && side.validation.outputs.iter().all(|o| o.pass)
                        && !side.validation.outputs.is_empty();
                    if c.status == Status::Accepted {
                        if !valid {
                            bad(format!("#{i}: accepted with an invalid output"));
                        }
                        match (raw, c.objective_p50) {
                            (Some(r), Some(rec)) if close(r, rec) => {
                                accepted.push((i, c.predicted_us.unwrap_or(f64::NAN), r))
                            }
                            (r, rec) => bad(format!(
                                "#{i}: objective p50 {rec:?} does not follow from its raw samples ({r:?})"
                            )),
                        }
                    } else {
                        let why = c.reason.as_deref().unwrap_or("");
                        let consistent = match why {
                            REASON_INVALID => !valid,
                            REASON_PHASE_ABSENT => valid && raw.is_none(),
                            w => w.starts_with("measurement failed"),
                        };
                        if !consistent {
                            bad(format!(
                                "#{i}: rejected as '{why}' but its record says otherwise"
                            ));
                        }
                        if c.objective_p50.is_some() {
                            bad(format!("#{i}: rejected but has an objective p50"));
                        }
                    }
                }
            }
        }
        if measured != p.measured {
            bad(format!(
                "measured {} but {measured} candidates carry a measurement",
                p.measured
            ));
        }
        let automatic_measured = p
            .automatic
            .is_some_and(|a| p.candidates.get(a).is_some_and(|c| c.side.is_some()));
        if measured > file.max_candidates + usize::from(automatic_measured) {
            bad(format!(
                "{measured} measured exceeds the budget {} (+ automatic)",
                file.max_candidates
            ));
        }
        if let Some(a) = p.automatic {
            let c = p.candidates.get(a);
            if !c.is_some_and(|c| c.automatic && c.duplicate_of.is_none()) {
                bad(format!("automatic #{a} is not a distinct realization"));
            }
            if !automatic_measured && p.candidates.iter().any(|c| c.side.is_some()) {
                bad("the automatic mapping was not measured".into());
            }
        }
        // Winner.
        let best = accepted
            .iter()
            .min_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)))
            .copied();
        match (&p.winner, best) {
            (None, None) => {}
            (None, Some((i, _, _))) => bad(format!("no winner recorded but #{i} was accepted")),
            (Some(w), None) => bad(format!("winner #{} but no accepted candidate", w.candidate)),
            (Some(w), Some((i, _, r))) => {
                if w.candidate != i {
                    bad(format!(
                        "winner #{} but #{i} has the lowest recomputed {objective} p50 ({r})",
                        w.candidate
                    ));
                }
                let c = p.candidates.get(w.candidate);
                let search_raw = c
                    .and_then(|c| c.side.as_ref())
                    .and_then(|s| raw_objective(s, objective));
                if !close_opt(Some(w.search_p50), search_raw) {
                    bad(format!(
                        "winner search p50 {} does not follow from its samples ({search_raw:?})",
                        w.search_p50
                    ));
                }
                if c.is_some_and(|c| {
                    c.request != w.request
                        || c.source_sha256.as_deref() != Some(w.source_sha256.as_str())
                }) {
                    bad("winner's request or source hash differs from its candidate's".into());
                }
                bad_side(&mut bad, "winner fresh", &w.fresh);
                let fresh_raw = if w.fresh.validation.pass {
                    raw_objective(&w.fresh, objective)
                } else {
                    None
                };
                if !close_opt(w.fresh_p50, fresh_raw) {
                    bad(format!(
                        "winner fresh p50 {:?} does not follow from its samples ({fresh_raw:?})",
                        w.fresh_p50
                    ));
                }
                let opt = fresh_raw.zip(search_raw).map(|(f, s)| f / s);
                if !close_opt(w.optimism, opt) {
                    bad(format!(
                        "optimism {:?} does not follow from fresh / search ({opt:?})",
                        w.optimism
                    ));
                }
                if let Some(k) = &w.fresh_kernel {
                    if k.source_sha256 != w.source_sha256 {
                        bad("winner's fresh kernel hash differs from the recorded".into());
                    }
                }
            }
        }
        // Cost model.
        let pred: Vec<f64> = accepted.iter().map(|a| a.1).collect();
        let meas: Vec<f64> = accepted.iter().map(|a| a.2).collect();
        let pick = accepted
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .copied();
        let best_m = meas.iter().cloned().fold(f64::INFINITY, f64::min);
        let regret = pick.map(|(_, _, m)| m / best_m - 1.0);
        if p.model.pick != pick.map(|x| x.0) || !close_opt(p.model.regret, regret) {
            bad(format!(
                "model pick {:?} regret {:?} do not follow from the measurements ({:?}, {regret:?})",
                p.model.pick,
                p.model.regret,
                pick.map(|x| x.0)
            ));
        }
        let rho = audit_spearman(&pred, &meas);
        if !close_opt(p.model.rank_correlation, rho) {
            bad(format!(
                "rank correlation {:?} does not follow from the measurements ({rho:?})",
                p.model.rank_correlation
            ));
        }
    }
    out
}

/// A side checked by the shared side audit.
fn bad_side(bad: &mut dyn FnMut(String), who: &str, side: &Side) {
    audit_side(who, side, None, bad);
}

/// The environment's device as the tuning cache keys it.
pub fn device_of(env: &Environment) -> String {
    match (&env.gpu_name, &env.compute_capability) {
        (Some(n), Some(cc)) if env.backend != "cpu" => format!("{n} cc{cc}"),
        _ => "cpu".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phases::BatchSample;
    use crate::phases::L2Mode;

    fn spec(name: &str, shape: &str, workers: &[u32], packs: &[u32], k: usize) -> SearchSpec {
        let output = std::env::temp_dir().join(format!(
            "lanefold-search-unit-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&output);
        SearchSpec {
            ops: vec![Operator::Rmsnorm],
            shapes: vec![shape.parse().unwrap()],
            dtypes: vec![DType::F32],
            // The seed's automatic mapping: these tests pin search mechanics
            // on a known automatic choice (W=8, V=1 for rmsnorm 4x64).
            base: LayoutRequest {
                mapper: lanefold_plan::MapperPolicy::Seed,
                ..Default::default()
            },
            workers: workers.to_vec(),
            packs: packs.to_vec(),
            unrolls: vec![1],
            residencies: vec![],
            objective: Objective::HostWall,
            max_candidates: k,
            time_budget_s: None,
            device: Device::Cpu,
            config: PhaseConfig {
                samples: 3,
                sample_ms: 1.0,
                warmup_ms: 1.0,
                l2: L2Mode::Warm,
            },
            capture_sources: false,
            output,
            seed: 7,
            command_line: vec!["test".into()],
        }
    }

    fn measured(p: &SearchProblem) -> Vec<usize> {
        p.candidates
            .iter()
            .filter(|c| c.side.is_some())
            .map(|c| c.index)
            .collect()
    }

    fn one(s: &SearchSpec) -> SearchProblem {
        let file = search(s).unwrap();
        assert_eq!(file.problems.len(), 1);
        file.problems.into_iter().next().unwrap()
    }

    #[test]
    fn budget_measures_the_top_k_by_prediction_plus_the_automatic_mapping() {
        let s = spec("budget", "4x64", &[0, 32, 128, 256], &[1, 2, 4], 4);
        let p = one(&s);
        assert_eq!(p.candidates.len(), 12, "the 4 x 3 product, nothing added");
        assert_eq!(p.distinct_legal, 12);
        // Expected: the 4 lowest predictions (ties by position) + automatic.
        let mut by_pred: Vec<(usize, f64)> = p
            .candidates
            .iter()
            .map(|c| (c.index, c.predicted_us.unwrap()))
            .collect();
        by_pred.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let top: Vec<usize> = by_pred[..4].iter().map(|c| c.0).collect();
        let auto = p.automatic.expect("automatic mapping identified");
        assert_eq!(p.candidates[auto].request.workers, 0);
        assert!(
            !top.contains(&auto),
            "the automatic mapping should rank outside the budget here"
        );
        let mut want = top.clone();
        want.push(auto);
        want.sort_unstable();
        assert_eq!(measured(&p), want);
        assert_eq!(p.measured, 5);
        for c in &p.candidates {
            if !want.contains(&c.index) {
                assert_eq!(c.status, Status::OverBudget);
                assert!(
                    c.reason.as_deref().unwrap().starts_with(REASON_OVER_BUDGET),
                    "{:?}",
                    c.reason
                );
            } else {
                assert_eq!(c.status, Status::Accepted, "{:?}", c.reason);
            }
        }
        // A spent time budget measures the automatic mapping alone (and the
        // winner afresh); the rest are over budget, and the file audits.
        let timed = SearchSpec {
            time_budget_s: Some(1e-9),
            ..spec("time-budget", "4x64", &[0, 32, 128, 256], &[1, 2, 4], 4)
        };
        let file = search(&timed).unwrap();
        let t = &file.problems[0];
        assert_eq!(measured(t), vec![auto]);
        assert_eq!(t.measured, 1);
        assert_eq!(t.winner.as_ref().map(|w| w.candidate), Some(auto));
        assert!(t.candidates.iter().any(|c| c
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("time budget"))));
        assert_eq!(file.time_budget_s, Some(1e-9));
        let problems = audit_search(&timed.output, &load(&timed.output));
        assert!(problems.is_empty(), "{problems:?}");
        // The same selection, from constructed data.
        let d = [(0, 9.0), (1, 1.0), (2, 3.0), (3, 2.0), (4, 3.0)];
        assert_eq!(select_for_measurement(&d, Some(0), 2), vec![0, 1, 3]);
        assert_eq!(select_for_measurement(&d, Some(3), 2), vec![1, 3]);
        assert_eq!(select_for_measurement(&d, Some(0), 3), vec![0, 1, 2, 3]);
        assert_eq!(select_for_measurement(&d, None, 9), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn residencies_multiply_the_space_and_streamed_candidates_are_measured() {
        let mut s = spec("residency", "4x256", &[32, 64], &[4], 12);
        s.residencies = vec![ResidencyRequest::Auto, ResidencyRequest::Stream];
        let file = search(&s).unwrap();
        assert_eq!(file.residencies, s.residencies);
        let p = &file.problems[0];
        let enumerated = p.candidates.iter().filter(|c| !c.added).count();
        assert_eq!(enumerated, 4, "2 W x 1 V x 2 residencies");
        let measured_residency = |r: &str| {
            p.candidates.iter().any(|c| {
                c.side.is_some() && c.plan.as_ref().is_some_and(|plan| plan.residency == r)
            })
        };
        assert!(measured_residency("stream"), "{:#?}", p.candidates);
        assert!(measured_residency("registers"));
        // The list is recorded and read back; older files read as empty.
        let again = SearchFile::read(&s.output.join("results.json")).unwrap();
        assert_eq!(again.residencies, s.residencies);
        let _ = std::fs::remove_dir_all(&s.output);
    }

    #[test]
    fn host_wall_objective_picks_by_e2e_p50() {
        let s = spec("hostwall", "3x257", &[32, 128], &[1, 2], 12);
        let p = one(&s);
        assert_eq!(
            p.measured,
            4 + usize::from(p.candidates.iter().any(|c| c.added))
        );
        let accepted: Vec<&SearchCandidate> = p
            .candidates
            .iter()
            .filter(|c| c.status == Status::Accepted)
            .collect();
        assert_eq!(accepted.len(), p.measured);
        for c in &accepted {
            let e2e = c.side.as_ref().unwrap().summary.e2e.unwrap().p50;
            assert_eq!(c.objective_p50, Some(e2e));
            assert!(c.side.as_ref().unwrap().summary.gpu.is_none());
        }
        let best = accepted
            .iter()
            .min_by(|a, b| {
                a.objective_p50
                    .unwrap()
                    .total_cmp(&b.objective_p50.unwrap())
            })
            .unwrap();
        let w = p.winner.as_ref().expect("a winner");
        assert_eq!(w.candidate, best.index);
        assert_eq!(
            w.fresh_p50,
            Some(w.fresh.summary.e2e.unwrap().p50),
            "the fresh figure is the fresh e2e p50"
        );
    }

    #[test]
    fn single_objective_picks_by_single_call_host_p50_and_audits() {
        let mut s = spec("singleobj", "3x257", &[32, 128], &[1, 2], 12);
        s.objective = Objective::Single;
        let p = one(&s);
        let accepted: Vec<&SearchCandidate> = p
            .candidates
            .iter()
            .filter(|c| c.status == Status::Accepted)
            .collect();
        assert!(accepted.len() >= 4);
        for c in &accepted {
            let single = c.side.as_ref().unwrap().summary.single_host.unwrap().p50;
            assert_eq!(c.objective_p50, Some(single), "never the e2e p50");
        }
        let w = p.winner.as_ref().expect("a winner");
        assert_eq!(w.fresh_p50, Some(w.fresh.summary.single_host.unwrap().p50));
        let clean = load(&s.output);
        assert!(audit_search(&s.output, &clean).is_empty());
        // The audit recomputes the single calls' p50 from their samples.
        let other = accepted
            .iter()
            .find(|c| c.index != w.candidate)
            .unwrap()
            .index;
        let mut v = clean.clone();
        let calls = v["problems"][0]["candidates"][other]["side"]["phases"]["single"]
            .as_array_mut()
            .unwrap();
        assert!(!calls.is_empty());
        for call in calls {
            let h = call["host_us"].as_f64().unwrap();
            call["host_us"] = serde_json::json!(h * 2.0 + 1000.0);
        }
        let f = audit_search(&s.output, &v);
        assert!(f.iter().any(|m| m.contains(&format!("#{other}"))), "{f:?}");
    }

    #[test]
    fn gpu_objective_on_the_cpu_rejects_every_candidate() {
        let mut s = spec("gpuobj", "4x64", &[0, 32], &[1, 2], 12);
        s.objective = Objective::Gpu;
        let p = one(&s);
        assert!(p.measured >= 3);
        for c in p.candidates.iter().filter(|c| c.side.is_some()) {
            assert_eq!(c.status, Status::Rejected);
            assert_eq!(c.reason.as_deref(), Some(REASON_PHASE_ABSENT));
            assert_eq!(c.objective_p50, None, "never filled in from e2e");
            let side = c.side.as_ref().unwrap();
            assert!(side.validation.pass);
            assert!(side.phases.gpu.is_none() && !side.phases.e2e.is_empty());
        }
        assert!(p.winner.is_none());
        assert!(p
            .no_winner
            .as_deref()
            .unwrap()
            .contains(REASON_PHASE_ABSENT));
        assert_eq!(p.model.regret, None);
        assert!(audit_search(&s.output, &load(&s.output)).is_empty());
    }

    #[test]
    fn judge_rejects_invalid_and_absent() {
        use crate::phases::PhaseRecord;
        use lanefold_cpu::Validation;
        let phases = PhaseRecord {
            e2e: vec![BatchSample {
                batch: 2,
                total_us: 4.0,
            }],
            ..Default::default()
        };
        let ok = Validation {
            outputs: vec![],
            pass: true,
        };
        let good = Side::new("lanefold", ok.clone(), phases.clone(), 8);
        assert_eq!(judge(&good, Objective::HostWall), Ok(2.0));
        assert_eq!(judge(&good, Objective::Gpu), Err(REASON_PHASE_ABSENT));
        assert_eq!(judge(&good, Objective::Single), Err(REASON_PHASE_ABSENT));
        let invalid = Side::new("lanefold", Validation { pass: false, ..ok }, phases, 8);
        assert_eq!(judge(&invalid, Objective::HostWall), Err(REASON_INVALID));
    }

    #[test]
    fn automatic_equal_to_an_explicit_choice_is_measured_once() {
        // rmsnorm 4x64: automatic W is 8 at V = 1.
        let s = spec("dup", "4x64", &[0, 8, 16], &[1], 12);
        let p = one(&s);
        assert_eq!(p.candidates.len(), 3);
        let (auto, eight) = (&p.candidates[0], &p.candidates[1]);
        assert_eq!(auto.source_sha256, eight.source_sha256);
        assert_eq!(auto.status, Status::Duplicate);
        assert_eq!(auto.duplicate_of, Some(1));
        assert!(auto.side.is_none());
        assert!(eight.side.is_some() && eight.automatic && eight.duplicate_of.is_none());
        assert_eq!(p.automatic, Some(1));
        assert_eq!(p.distinct_legal, 2);
        assert_eq!(measured(&p), vec![1, 2]);
    }

    #[test]
    fn the_automatic_mapping_is_added_when_no_candidate_realizes_it() {
        let s = spec("added", "4x64", &[32], &[2], 1);
        let p = one(&s);
        assert_eq!(p.candidates.len(), 2);
        assert!(p.candidates[1].added && p.candidates[1].automatic);
        assert_eq!(p.candidates[1].request, s.base);
        assert_eq!(measured(&p), vec![0, 1], "budget 1 plus the automatic");
    }

    #[test]
    fn winners_are_regenerated_and_measured_afresh() {
        let mut s = spec("fresh", "4x64", &[0, 32], &[1, 2], 12);
        s.capture_sources = true;
        let p = one(&s);
        let w = p.winner.as_ref().unwrap();
        let c = &p.candidates[w.candidate];
        assert_eq!(w.request, c.request);
        assert_eq!(Some(&w.source_sha256), c.source_sha256.as_ref());
        assert_eq!(w.search_p50, c.objective_p50.unwrap());
        // A separate measurement: its own samples.
        assert_ne!(w.fresh.phases, c.side.as_ref().unwrap().phases);
        let fresh = w.fresh_p50.unwrap();
        assert_eq!(w.optimism, Some(fresh / w.search_p50));
        // Captured source hashes to the recorded key.
        let src =
            crate::results::read_bytes(&s.output.join(w.source_file.as_ref().unwrap())).unwrap();
        assert_eq!(sha256_hex(&src), w.source_sha256);
        // Tamper: regenerating from different parameters is an error.
        let problem = Problem::operator(
            Operator::Rmsnorm,
            OperatorOptions::default(),
            DType::F32,
            s.shapes[0],
        );
        let t = Target::cpu();
        assert!(regenerate(&problem, &t, &w.request, &w.source_sha256).is_ok());
        let other = LayoutRequest {
            workers: if w.request.workers == 32 { 64 } else { 32 },
            ..w.request
        };
        let err = regenerate(&problem, &t, &other, &w.source_sha256).unwrap_err();
        assert!(format!("{err:#}").contains("different kernel"), "{err:#}");
        // results.md names the winner and the fresh figure.
        let md = std::fs::read_to_string(s.output.join("results.md")).unwrap();
        assert!(md.contains(&format!("Winner #{}", w.candidate)), "{md}");
        assert!(md.contains("optimism"));
    }

    #[test]
    fn regret_and_rank_correlation_arithmetic() {
        // Model picks #0 (predicted 1.0), measured 2.0; best is 1.0.
        let pred = [1.0, 2.0, 3.0, 4.0];
        let meas = [2.0, 1.0, 4.0, 3.0];
        let (pick, regret) = model_regret(&pred, &meas).unwrap();
        assert_eq!(pick, 0);
        assert!((regret - 1.0).abs() < 1e-12);
        // Rank differences all 1: rho = 1 - 6*4 / (4*15) = 0.6.
        assert!((spearman(&pred, &meas).unwrap() - 0.6).abs() < 1e-12);
        assert!((spearman(&pred, &pred).unwrap() - 1.0).abs() < 1e-12);
        let rev = [4.0, 3.0, 2.0, 1.0];
        assert!((spearman(&pred, &rev).unwrap() + 1.0).abs() < 1e-12);
        // Ties share their mean rank: [1.5, 1.5, 3] vs [1, 2, 3].
        let r = spearman(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!((r - 1.5 / 3f64.sqrt()).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&[1.0, 2.0], &[2.0, 1.0]), None);
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        // A perfect model has zero regret.
        assert_eq!(
            model_regret(&[3.0, 1.0, 2.0], &[30.0, 10.0, 20.0]),
            Some((1, 0.0))
        );
        // The audit's own arithmetic agrees.
        let a = [5.0, 1.0, 4.0, 4.0, 2.0, 9.0];
        let b = [2.0, 3.0, 1.0, 7.0, 7.0, 8.0];
        let (x, y) = (spearman(&a, &b).unwrap(), audit_spearman(&a, &b).unwrap());
        assert!((x - y).abs() < 1e-12, "{x} vs {y}");
    }

    #[test]
    fn device_keys_agree_with_the_tuning_cache() {
        let env = Environment {
            backend: "cuda".into(),
            gpu_name: Some("NVIDIA H200".into()),
            compute_capability: Some("9.0".into()),
            ..Default::default()
        };
        assert_eq!(
            device_of(&env),
            crate::tuning::cuda_device_key("NVIDIA H200", 9, 0)
        );
        let cpu = Environment {
            backend: "cpu".into(),
            ..Default::default()
        };
        assert_eq!(device_of(&cpu), crate::tuning::CPU_DEVICE);
    }

    fn load(dir: &Path) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
    }

    #[test]
    fn audit_catches_a_changed_sample_and_an_unfounded_winner_p50() {
        let mut s = spec("audit", "4x64", &[0, 32, 128], &[1, 2], 12);
        s.capture_sources = true;
        let p = one(&s);
        let clean = load(&s.output);
        let findings = audit_search(&s.output, &clean);
        assert!(findings.is_empty(), "{findings:?}");
        let prefix = format!("case {}: ", p.id);

        // A changed raw sample of a measured (non-winning) candidate.
        let w = p.winner.as_ref().unwrap().candidate;
        let other = measured(&p).into_iter().find(|&i| i != w).unwrap();
        let mut v = clean.clone();
        let t = &mut v["problems"][0]["candidates"][other]["side"]["phases"]["e2e"][0]["total_us"];
        *t = serde_json::json!(t.as_f64().unwrap() * 3.0 + 1000.0);
        let f = audit_search(&s.output, &v);
        assert!(!f.is_empty());
        assert!(f.iter().all(|m| m.starts_with(&prefix)), "{f:?}");
        assert!(f.iter().any(|m| m.contains(&format!("#{other}"))), "{f:?}");

        // A winner whose recorded fresh p50 does not follow from its samples.
        let mut v = clean.clone();
        let fp = &mut v["problems"][0]["winner"]["fresh_p50"];
        *fp = serde_json::json!(fp.as_f64().unwrap() * 0.5);
        let f = audit_search(&s.output, &v);
        assert!(
            f.iter()
                .any(|m| m.starts_with(&prefix) && m.contains("fresh p50")),
            "{f:?}"
        );

        // ... or whose search score does not.
        let mut v = clean.clone();
        let sp = &mut v["problems"][0]["winner"]["search_p50"];
        *sp = serde_json::json!(sp.as_f64().unwrap() * 0.5);
        let f = audit_search(&s.output, &v);
        assert!(f.iter().any(|m| m.contains("search p50")), "{f:?}");

        // A winner that is not the lowest measured.
        let mut v = clean.clone();
        v["problems"][0]["winner"]["candidate"] = serde_json::json!(other);
        assert!(!audit_search(&s.output, &v).is_empty());

        // A forged regret.
        let mut v = clean.clone();
        v["problems"][0]["model"]["regret"] = serde_json::json!(0.123);
        let f = audit_search(&s.output, &v);
        assert!(f.iter().any(|m| m.contains("regret")), "{f:?}");

        // A changed captured source.
        let file = s
            .output
            .join(p.winner.as_ref().unwrap().source_file.as_ref().unwrap());
        let original = std::fs::read(&file).unwrap();
        std::fs::write(&file, b"// tampered\n").unwrap();
        let f = audit_search(&s.output, &clean);
        std::fs::write(&file, original).unwrap();
        assert!(f.iter().any(|m| m.contains("captured source")), "{f:?}");
    }
}
