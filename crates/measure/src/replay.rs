//! `lanefold replay`: a performance claim comes only from a
//! frozen, position-balanced replay.
//!
//! - Frozen parameters: the reference and candidate layouts are read from
//!   earlier files (`lanefold-results/1` cases or `lanefold-search/1`
//!   winners), re-planned from their recorded requests and refused unless
//!   the plan reproduces the recorded layout; the regenerated kernel
//!   source's SHA-256 must equal the recorded one where a file has it.
//! - Rounds: every case measures reference, candidate (and each enabled
//!   PyTorch peer side: eager, torch.compile, Liger-Kernel, Quack) on the same
//!   freshly seeded inputs; A/B positions and the peers' block position
//!   (before / after the native sides) are balanced across rounds; a peer
//!   that refuses a case is recorded missing with its reason; every output
//!   is validated every round, and an invalid side is voided for its round
//!   (its paired ratio is missing).
//! - Statistics: headline = median over rounds of per-round p50s; gain =
//!   median of paired per-round ratios with the observed [min, max], the
//!   coverage that range carries (1 − 2^(1−n)) and a two-sided sign test.
//! - [`audit_replay`] recomputes all of it from the raw samples with its
//!   own arithmetic and re-checks the frozen layouts against the sources.

use crate::bench::{input_sets, measure_native, measure_peer, Device, PeerInputs};
use crate::peer::{PeerMode, PeerProcess};
use crate::phases::{BatchSample, L2Mode, PhaseConfig};
use crate::results::{
    Environment, ResultsFile, Side, Summary, SCHEMA as RESULTS_SCHEMA, SCOPE_E2E, SCOPE_GPU,
    SCOPE_SINGLE,
};
use anyhow::{anyhow, bail, Context, Result};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::npy;
use lanefold_cpu::reference::reference;
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, Features, Layout, LayoutRequest, Plan, Problem, Shape, Target};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

pub const SCHEMA: &str = "lanefold-replay/1";
/// The search helper's file (read generically, as JSON).
pub const SEARCH_SCHEMA: &str = "lanefold-search/1";

pub const REFERENCE: &str = "reference";
pub const CANDIDATE: &str = "candidate";
/// The eager peer: the side older files know as `torch` / `torch_gain`.
pub const TORCH: &str = PeerMode::Eager.side();

/// Phases with per-round statistics, in report order.
pub const PHASES: [&str; 4] = ["gpu", "e2e", "single_gpu", "single_host"];

/// A frozen plan as the CUDA backend runs it ([`CudaBackend::resolve`])
/// with its kernel's source hash: a recorded promise or `no-cold-path`
/// resolves to itself, so a kernel recorded on the device stays the same.
fn on_device(
    cuda: Option<&lanefold_cuda::CudaBackend>,
    (p, hash): (Plan, Option<String>),
) -> Result<(Plan, Option<String>)> {
    let Some(c) = cuda else {
        return Ok((p, hash));
    };
    let (q, _) = c.resolve(&p, &CodegenOptions::default())?;
    if q == p {
        return Ok((p, hash));
    }
    let hash = Some(lanefold_cuda::kernel_source_sha256(
        &q,
        &CodegenOptions::default(),
    )?);
    Ok((q, hash))
}

// ---------------------------------------------------------------------------
// Frozen parameters
// ---------------------------------------------------------------------------

/// One case's frozen parameters as a source file records them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenCase {
    pub op: String,
    pub dtype: String,
    pub shape: String,
    pub request: LayoutRequest,
    pub layout: Layout,
    /// The kernel source's SHA-256, where the file recorded one (CUDA).
    pub source_sha256: Option<String>,
}

impl FrozenCase {
    /// `op/dtype/shape`: the key cases are matched by, and their id.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.op, self.dtype, self.shape)
    }
}

/// The frozen cases of a source file and what it says about its binary.
#[derive(Clone, Debug, PartialEq)]
pub struct Frozen {
    pub schema: String,
    /// `environment.binary_sha256` of the file, where present.
    pub binary_sha256: Option<String>,
    /// SHA-256 of the file's bytes.
    pub file_sha256: String,
    pub cases: Vec<FrozenCase>,
    /// Problems of a search file without a winner (not replayable).
    pub skipped: Vec<String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Read a `lanefold-results/1` file (one frozen case per case: `request`,
/// `plan.layout`, `kernel.source_sha256`) or a `lanefold-search/1` file
/// (`problems[i].{op,dtype,shape}` and `problems[i].winner.{request,
/// plan.layout,source_sha256}`).
pub fn load_frozen(path: &Path) -> Result<Frozen> {
    let bytes = crate::results::read_bytes(path)?;
    let file_sha256 = sha256_hex(&bytes);
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{}: not JSON", path.display()))?;
    let schema = value
        .get("schema")
        .and_then(|s| s.as_str())
        .unwrap_or("")
        .to_string();
    let binary_sha256 = value
        .pointer("/environment/binary_sha256")
        .and_then(|s| s.as_str())
        .map(String::from);
    let mut cases = vec![];
    let mut skipped = vec![];
    match schema.as_str() {
        RESULTS_SCHEMA => {
            let file: ResultsFile = serde_json::from_value(value)
                .with_context(|| format!("{}: not a lanefold results file", path.display()))?;
            for c in file.cases {
                if c.options != OperatorOptions::default() {
                    bail!(
                        "{}: case {} leaves out per-column inputs (bench --no-weight/--no-bias); \
                         replays compare PyTorch's default modules only",
                        path.display(),
                        c.id
                    );
                }
                cases.push(FrozenCase {
                    op: c.op,
                    dtype: c.dtype,
                    shape: c.shape,
                    request: c.request,
                    layout: c.plan.layout,
                    source_sha256: c.kernel.map(|k| k.source_sha256),
                });
            }
        }
        SEARCH_SCHEMA => {
            let problems = value
                .get("problems")
                .and_then(|p| p.as_array())
                .with_context(|| format!("{}: search file without problems[]", path.display()))?;
            for (i, p) in problems.iter().enumerate() {
                let text = |k: &str| {
                    p.get(k)
                        .and_then(|v| v.as_str())
                        .map(String::from)
                        .with_context(|| format!("{}: problems[{i}].{k} missing", path.display()))
                };
                let (op, dtype, shape) = (text("op")?, text("dtype")?, text("shape")?);
                let winner = match p.get("winner") {
                    Some(w) if !w.is_null() => w,
                    _ => {
                        skipped.push(format!("{op}/{dtype}/{shape}"));
                        continue;
                    }
                };
                let field = |ptr: &str| {
                    winner.pointer(ptr).cloned().with_context(|| {
                        format!("{}: problems[{i}].winner{ptr} missing", path.display())
                    })
                };
                let request: LayoutRequest = serde_json::from_value(field("/request")?)
                    .with_context(|| format!("{}: problems[{i}].winner.request", path.display()))?;
                let layout = winner_layout(p).with_context(|| {
                    format!(
                        "{}: problems[{i}]: no winner.plan.layout, nor a layout for candidate winner.candidate",
                        path.display()
                    )
                })?;
                let layout: Layout = serde_json::from_value(layout)
                    .with_context(|| format!("{}: problems[{i}]: winner layout", path.display()))?;
                let source_sha256 = winner
                    .get("source_sha256")
                    .and_then(|s| s.as_str())
                    .filter(|s| !s.is_empty())
                    .map(String::from);
                cases.push(FrozenCase {
                    op,
                    dtype,
                    shape,
                    request,
                    layout,
                    source_sha256,
                });
            }
        }
        other => bail!(
            "{}: schema {other:?} is neither {RESULTS_SCHEMA} nor {SEARCH_SCHEMA}",
            path.display()
        ),
    }
    let mut seen = BTreeSet::new();
    for c in &cases {
        if !seen.insert(c.key()) {
            bail!(
                "{}: case {} appears twice; a frozen replay needs one layout per case",
                path.display(),
                c.key()
            );
        }
    }
    Ok(Frozen {
        schema,
        binary_sha256,
        file_sha256,
        cases,
        skipped,
    })
}

/// A search problem's winning layout: `winner.plan.layout` where the
/// winner records its plan, else `candidates[j].plan.layout` of the
/// candidate whose `index` is `winner.candidate`.
fn winner_layout(problem: &serde_json::Value) -> Option<serde_json::Value> {
    let winner = problem.get("winner")?;
    if let Some(l) = winner.pointer("/plan/layout") {
        return Some(l.clone());
    }
    let k = winner.get("candidate")?.as_u64()?;
    problem
        .get("candidates")?
        .as_array()?
        .iter()
        .find(|c| c.get("index").and_then(|i| i.as_u64()) == Some(k))?
        .pointer("/plan/layout")
        .cloned()
}

/// The problem a frozen case names (operator defaults, as `bench` runs it).
pub fn problem_of(case: &FrozenCase) -> Result<Problem> {
    problem_named(&case.op, &case.dtype, &case.shape)
        .map_err(|e| anyhow!("case {}: {e}", case.key()))
}

/// The operator problem that recorded `op`, `dtype` and `shape` strings
/// name (PyTorch's default module: weight and bias).
pub fn problem_named(op: &str, dtype: &str, shape: &str) -> Result<Problem> {
    let op: Operator = op.parse().map_err(|e| anyhow!("operator: {e}"))?;
    let dtype: DType = dtype.parse().map_err(|e| anyhow!("dtype: {e}"))?;
    let shape: Shape = shape.parse().map_err(|e| anyhow!("shape: {e}"))?;
    Ok(Problem::operator(
        op,
        OperatorOptions::default(),
        dtype,
        shape,
    ))
}

fn layout_text(l: &Layout) -> String {
    format!(
        "W={} V={} U={} G={}",
        l.workers, l.pack, l.unroll, l.rows_per_group
    )
}

/// Re-plan a frozen case from its recorded request for `target`; refuse
/// unless the plan has the recorded layout and (where recorded) the
/// regenerated kernel source has the recorded SHA-256. Returns the plan
/// and the regenerated source hash (None where no CUDA source exists for
/// the plan).
pub fn freeze(case: &FrozenCase, role: &str, target: &Target) -> Result<(Plan, Option<String>)> {
    let id = case.key();
    let problem = problem_of(case)?;
    let mut p = plan(&problem, target, &case.request)
        .map_err(|e| anyhow!("case {id}: the {role}'s recorded request is refused: {e}"))?;
    let source_hash = |p: &Plan| {
        lanefold_codegen::generate(p, &CodegenOptions::default())
            .ok()
            .map(|k| sha256_hex(k.source.as_bytes()))
    };
    let mut regenerated = source_hash(&p);
    let automatic = case.request.workers == 0 && case.request.pack == 0;
    if let (true, Some(recorded)) = (automatic, &case.source_sha256) {
        if p.layout != case.layout || regenerated.as_ref() != Some(recorded) {
            // An automatic request recorded before a mapper change resolves
            // differently today (another layout, or the same layout in other
            // cluster groups); what is frozen is the layout and the source
            // hash, so plan that layout explicitly, in whichever cluster
            // group size regenerates the recorded source. Without a recorded
            // hash nothing would prove the kernel is the same one.
            // A norm recorded before it carried its cold path by default
            // ran today's `no-cold-path` kernel.
            let group_sizes = std::iter::once(case.request.cluster_group_threads)
                .chain((5..=10).map(|k| 1u32 << k))
                .flat_map(|g| [(g, false), (g, true)]);
            for (cluster_group_threads, no_cold_path) in group_sizes {
                let explicit = LayoutRequest {
                    workers: case.layout.workers,
                    pack: case.layout.pack,
                    unroll: case.layout.unroll,
                    rows_per_group: case.layout.rows_per_group,
                    cluster_group_threads,
                    no_cold_path: no_cold_path || case.request.no_cold_path,
                    ..case.request
                };
                let Ok(q) = plan(&problem, target, &explicit) else {
                    continue;
                };
                let hash = source_hash(&q);
                if q.layout == case.layout && hash.as_ref() == Some(recorded) {
                    eprintln!(
                        "note: case {id}: the {role}'s automatic request now maps to {}; replaying its recorded {}",
                        p.describe(),
                        q.describe()
                    );
                    p = q;
                    regenerated = hash;
                    break;
                }
            }
        }
    }
    if let (true, Some(recorded)) = (p.cold_path(), &case.source_sha256) {
        if regenerated.as_ref() != Some(recorded) {
            // Recorded before the norms carried their cold path by default:
            // that kernel is today's `no-cold-path`.
            let plain = LayoutRequest {
                no_cold_path: true,
                ..p.schedule()
            };
            if let Ok(q) = plan(&problem, target, &plain) {
                let hash = source_hash(&q);
                if hash.as_ref() == Some(recorded) {
                    p = q;
                    regenerated = hash;
                }
            }
        }
    }
    if p.layout != case.layout {
        bail!(
            "case {id}: the {role}'s recorded layout {} is not what its recorded request re-plans to ({}) on target {}; refusing to replay a layout that cannot be reproduced",
            layout_text(&case.layout),
            layout_text(&p.layout),
            target.name
        );
    }
    if let Some(recorded) = &case.source_sha256 {
        match &regenerated {
            Some(r) if r == recorded => {}
            Some(r) => bail!(
                "case {id}: the {role}'s regenerated kernel source hashes to {r}, the file recorded {recorded}"
            ),
            None => bail!(
                "case {id}: the {role} recorded kernel source {recorded}, but no source can be generated for the re-planned layout"
            ),
        }
    }
    Ok((p, regenerated))
}

// ---------------------------------------------------------------------------
// Results file
// ---------------------------------------------------------------------------

/// A source file of the replay, with a copy of its frozen cases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// `reference` or `candidate`.
    pub role: String,
    /// The path as given on the command line.
    pub path: String,
    /// The same file relative to the replay's output directory.
    pub relative_path: Option<String>,
    pub schema: String,
    pub file_sha256: String,
    /// The binary that wrote the source file.
    pub binary_sha256: Option<String>,
    /// Is it this replay's binary?
    pub binary_equal: bool,
    pub cases: Vec<FrozenCase>,
    #[serde(default)]
    pub skipped: Vec<String>,
}

/// One side's frozen parameters in a case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrozenSide {
    pub request: LayoutRequest,
    pub layout: Layout,
    pub describe: String,
    pub recorded_source_sha256: Option<String>,
    pub regenerated_source_sha256: Option<String>,
}

/// One round of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayRound {
    pub round: usize,
    pub seed: u64,
    /// Order the sides ran in.
    pub order: Vec<String>,
    /// Sides measured (named `reference`, `candidate` and peer sides).
    pub sides: Vec<Side>,
    /// Kernel source SHA-256 of each native side as it was measured (CUDA).
    pub kernel_sha256: BTreeMap<String, String>,
    /// Why a side or a paired ratio is missing this round.
    pub missing: Vec<String>,
}

/// The observed distribution of paired per-round ratios.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GainSummary {
    /// Rounds with a ratio.
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// 1 − 2^(1−n): probability that [min, max] of n continuous i.i.d.
    /// ratios contains their population median.
    pub coverage: f64,
    pub above: usize,
    pub below: usize,
    pub ties: usize,
    /// Two-sided sign test of the ratios against 1, ties dropped.
    pub sign_test_p: f64,
    pub range_contains_one: bool,
}

/// Paired per-round ratios `numerator p50 / denominator p50`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    pub numerator: String,
    pub denominator: String,
    /// One per round; None where either side is missing that round.
    pub ratios: Vec<Option<f64>>,
    pub summary: Option<GainSummary>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    /// Per-round p50 of each side (None: voided, absent or not run).
    pub p50s: BTreeMap<String, Vec<Option<f64>>>,
    /// Median over rounds of the per-round p50s.
    pub headline: BTreeMap<String, Option<f64>>,
    /// reference / candidate: above 1, the candidate is faster.
    pub gain: Paired,
    /// torch-eager / candidate (with `--torch`): above 1, the candidate is faster.
    pub torch_gain: Option<Paired>,
    /// Every other peer side / candidate, keyed by side; eager stays in
    /// `torch_gain` so older files read unchanged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub peer_gains: BTreeMap<String, Paired>,
}

impl PhaseStats {
    /// The paired gain of a peer side over the candidate.
    pub fn peer_gain(&self, peer: &str) -> Option<&Paired> {
        if peer == TORCH {
            self.torch_gain.as_ref()
        } else {
            self.peer_gains.get(peer)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseStats {
    /// `gpu` when the native sides measured it, else `e2e`.
    pub objective: String,
    /// Keyed by phase (`gpu` only where measured, `e2e`, `single_gpu`,
    /// `single_host`).
    pub phases: BTreeMap<String, PhaseStats>,
    pub outputs_valid: usize,
    pub outputs_invalid: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayCase {
    /// `op/dtype/shape`.
    pub id: String,
    pub op: String,
    pub dtype: String,
    pub shape: String,
    pub bytes_moved: u64,
    pub reference: FrozenSide,
    pub candidate: FrozenSide,
    pub rounds: Vec<ReplayRound>,
    pub stats: CaseStats,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayFile {
    pub schema: String,
    pub environment: Environment,
    pub config: PhaseConfig,
    pub rounds: usize,
    pub rounds_done: usize,
    /// A/A control: the candidate is the reference.
    pub aa: bool,
    /// Was the eager peer measured? (Kept beside `peers` for older readers.)
    pub torch: bool,
    /// The peer sides measured, in block order; absent in files written
    /// before it (see [`ReplayFile::peer_sides`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<Vec<String>>,
    pub seed: u64,
    pub sources: Vec<SourceRecord>,
    /// Cases of one source without a match in the other.
    pub unmatched: Vec<String>,
    pub cases: Vec<ReplayCase>,
    /// The environments of later sessions that continued the replay
    /// (`--resume`), in order; `environment` is the first session's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<Environment>,
}

impl ReplayFile {
    pub fn read(path: &Path) -> Result<ReplayFile> {
        let text = crate::results::read_text(path)?;
        serde_json::from_str(&text)
            .map_err(|e| anyhow!("{}: not a lanefold replay file: {e}", path.display()))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        crate::results::write_json(path, self)
    }

    pub fn source(&self, role: &str) -> Option<&SourceRecord> {
        self.sources.iter().find(|s| s.role == role)
    }

    /// The peer sides measured: `peers`, or for older files eager iff `torch`.
    pub fn peer_sides(&self) -> Vec<String> {
        self.peers
            .clone()
            .unwrap_or_else(|| self.torch.then(|| TORCH.to_string()).into_iter().collect())
    }
}

// ---------------------------------------------------------------------------
// Positions and statistics
// ---------------------------------------------------------------------------

/// Are the PyTorch peer sides (as a block) first in round `r`? Rounds 1,
/// 2, 5, 6, ...: over any two consecutive rounds they are first once and
/// last once, and over four rounds every A/B × peers-first/last
/// combination occurs once.
pub fn torch_first(round: usize) -> bool {
    round.div_ceil(2) % 2 == 1
}

/// The order of the sides in round `r`: the reference first when r is
/// even, the candidate first when odd; the `peers`, as one block in their
/// given order, first or last per [`torch_first`].
pub fn round_order(round: usize, peers: &[String]) -> Vec<String> {
    let native: [String; 2] = if round.is_multiple_of(2) {
        [REFERENCE.into(), CANDIDATE.into()]
    } else {
        [CANDIDATE.into(), REFERENCE.into()]
    };
    if torch_first(round) {
        peers.iter().cloned().chain(native).collect()
    } else {
        native.into_iter().chain(peers.iter().cloned()).collect()
    }
}

/// The median (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    Summary::of(values).map(|s| s.p50)
}

/// 1 − 2^(1−n): the coverage of the observed range of n ratios.
pub fn coverage(n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        1.0 - 0.5f64.powi(n as i32 - 1)
    }
}

/// Two-sided sign-test p-value for `above` ratios above 1 and `below`
/// below (ties dropped beforehand): 2 · P(X ≤ min) for X ~ Bin(m, 1/2),
/// capped at 1.
pub fn sign_test_p(above: usize, below: usize) -> f64 {
    let m = above + below;
    if m == 0 {
        return 1.0;
    }
    let k = above.min(below);
    let mut term = 0.5f64.powi(m as i32); // C(m, 0) / 2^m
    let mut tail = 0.0;
    for i in 0..=k {
        tail += term;
        term = term * (m - i) as f64 / (i + 1) as f64;
    }
    (2.0 * tail).min(1.0)
}

/// Median, range, coverage and sign test of the ratios present.
pub fn gain_summary(ratios: &[Option<f64>]) -> Option<GainSummary> {
    let r: Vec<f64> = ratios.iter().flatten().copied().collect();
    let s = Summary::of(&r)?;
    let above = r.iter().filter(|&&x| x > 1.0).count();
    let below = r.iter().filter(|&&x| x < 1.0).count();
    Some(GainSummary {
        n: r.len(),
        median: s.p50,
        min: s.min,
        max: s.max,
        coverage: coverage(r.len()),
        above,
        below,
        ties: r.len() - above - below,
        sign_test_p: sign_test_p(above, below),
        range_contains_one: s.min <= 1.0 && 1.0 <= s.max,
    })
}

/// A side's p50 in `phase`, None when voided or the phase is absent.
pub fn side_p50(side: &Side, phase: &str) -> Option<f64> {
    if side.voided {
        return None;
    }
    let per_op = |s: &[BatchSample]| s.iter().map(|b| b.per_op_us()).collect::<Vec<f64>>();
    let p = &side.phases;
    let values = match phase {
        "gpu" => per_op(p.gpu.as_deref()?),
        "e2e" => per_op(&p.e2e),
        "single_gpu" => p.single.iter().filter_map(|s| s.gpu_us).collect(),
        "single_host" => p.single.iter().map(|s| s.host_us).collect(),
        _ => return None,
    };
    median(&values)
}

fn paired(
    num: &str,
    den: &str,
    p50s: &BTreeMap<String, Vec<Option<f64>>>,
    rounds: usize,
) -> Paired {
    let get = |name: &str, r: usize| p50s.get(name).and_then(|v| v.get(r).copied().flatten());
    let ratios: Vec<Option<f64>> = (0..rounds)
        .map(|r| match (get(num, r), get(den, r)) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        })
        .collect();
    Paired {
        numerator: num.into(),
        denominator: den.into(),
        summary: gain_summary(&ratios),
        ratios,
    }
}

/// Every statistic of a case, from its rounds' raw samples; `peers` are
/// the peer sides measured.
pub fn case_stats(rounds: &[ReplayRound], peers: &[String]) -> CaseStats {
    let names: Vec<&str> = [REFERENCE, CANDIDATE]
        .into_iter()
        .chain(peers.iter().map(String::as_str))
        .collect();
    let mut phases = BTreeMap::new();
    for phase in PHASES {
        let p50s: BTreeMap<String, Vec<Option<f64>>> = names
            .iter()
            .map(|&n| {
                let v = rounds
                    .iter()
                    .map(|r| {
                        r.sides
                            .iter()
                            .find(|s| s.name == n)
                            .and_then(|s| side_p50(s, phase))
                    })
                    .collect();
                (n.to_string(), v)
            })
            .collect();
        if p50s.values().flatten().all(Option::is_none) && phase != "e2e" {
            continue;
        }
        let headline = p50s
            .iter()
            .map(|(n, v)| {
                let present: Vec<f64> = v.iter().flatten().copied().collect();
                (n.clone(), median(&present))
            })
            .collect();
        let gain = paired(REFERENCE, CANDIDATE, &p50s, rounds.len());
        let (mut torch_gain, mut peer_gains) = (None, BTreeMap::new());
        for p in peers {
            let g = paired(p, CANDIDATE, &p50s, rounds.len());
            if p == TORCH {
                torch_gain = Some(g);
            } else {
                peer_gains.insert(p.clone(), g);
            }
        }
        phases.insert(
            phase.to_string(),
            PhaseStats {
                p50s,
                headline,
                gain,
                torch_gain,
                peer_gains,
            },
        );
    }
    let native_gpu = phases.get("gpu").is_some_and(|s| {
        [REFERENCE, CANDIDATE]
            .iter()
            .any(|n| s.p50s[*n].iter().any(Option::is_some))
    });
    let sides = rounds.iter().flat_map(|r| &r.sides);
    CaseStats {
        objective: if native_gpu { "gpu" } else { "e2e" }.into(),
        phases,
        outputs_valid: sides.clone().filter(|s| s.validation.pass).count(),
        outputs_invalid: sides.filter(|s| !s.validation.pass).count(),
    }
}

// ---------------------------------------------------------------------------
// The replay
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct ReplaySpec {
    pub reference: PathBuf,
    /// None with `aa`: the candidate is the reference.
    pub candidate: Option<PathBuf>,
    pub aa: bool,
    pub rounds: usize,
    pub config: PhaseConfig,
    /// Peer sides, measured as one block in this order.
    pub peers: Vec<PeerMode>,
    pub device: Device,
    pub python: String,
    pub peer_script: PathBuf,
    pub output: PathBuf,
    pub seed: u64,
    pub command_line: Vec<String>,
    /// Wall-clock budget in seconds: no round starts that the longest round
    /// so far predicts would end past it (None: no budget).
    pub deadline_s: Option<f64>,
    /// Continue the replay already in `output` from its last complete round
    /// up to `rounds`: a replay longer than one device call.
    pub resume: bool,
}

/// Why `earlier` (the replay in the output folder) cannot be continued as
/// `now` (this invocation, before any round), if it cannot: every frozen
/// input of the measurement must be the same, and so must the binary.
fn resume_mismatch(earlier: &ReplayFile, now: &ReplayFile) -> Option<String> {
    let differ = |what: &str| Some(format!("{what} differs from the replay being resumed"));
    if earlier.schema != now.schema {
        return differ("the schema");
    }
    if earlier.environment.binary_sha256 != now.environment.binary_sha256 {
        return differ("the lanefold binary (environment.binary_sha256)");
    }
    if earlier.environment.gpu_name != now.environment.gpu_name
        || earlier.environment.backend != now.environment.backend
    {
        return differ("the device");
    }
    if earlier.config != now.config {
        return differ("the phase configuration (--samples, --sample-ms, --warmup-ms, --l2)");
    }
    if earlier.aa != now.aa || earlier.seed != now.seed {
        return differ("--aa or --seed");
    }
    if earlier.peer_sides() != now.peer_sides() {
        return differ("the peer sides (--torch, --torch-compile, --liger, --quack)");
    }
    for (a, b) in earlier.sources.iter().zip(&now.sources) {
        if a.role != b.role || a.file_sha256 != b.file_sha256 || a.cases != b.cases {
            return differ(&format!("the {} file", b.role));
        }
    }
    let ids = |f: &ReplayFile| f.cases.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    if ids(earlier) != ids(now) {
        return differ("the matched cases");
    }
    for (a, b) in earlier.cases.iter().zip(&now.cases) {
        if a.reference != b.reference || a.candidate != b.candidate {
            return differ(&format!("case {}'s frozen sides", a.id));
        }
        if a.rounds.len() != earlier.rounds_done {
            return Some(format!(
                "case {} has {} rounds but the replay records {} complete",
                a.id,
                a.rounds.len(),
                earlier.rounds_done
            ));
        }
    }
    None
}

/// `target` relative to `base` (both made absolute), when both resolve.
fn relative_to(base: &Path, target: &Path) -> Option<String> {
    let base = base.canonicalize().ok()?;
    let target = match target.canonicalize() {
        Ok(t) => t,
        // A source stored gzipped: its plain name, in its real directory.
        Err(_) => {
            let parent = target.parent().filter(|p| !p.as_os_str().is_empty());
            let parent = parent.unwrap_or(Path::new(".")).canonicalize().ok()?;
            parent.join(target.file_name()?)
        }
    };
    let b: Vec<Component> = base.components().collect();
    let t: Vec<Component> = target.components().collect();
    let common = b.iter().zip(&t).take_while(|(x, y)| x == y).count();
    let mut rel = PathBuf::new();
    for _ in common..b.len() {
        rel.push("..");
    }
    for c in &t[common..] {
        rel.push(c.as_os_str());
    }
    rel.to_str().map(String::from)
}

struct Prepared {
    id: String,
    problem: Problem,
    reference: Plan,
    candidate: Plan,
    bytes_moved: u64,
}

fn frozen_side(c: &FrozenCase, p: &Plan, regenerated: Option<String>) -> FrozenSide {
    FrozenSide {
        request: c.request,
        layout: c.layout,
        describe: p.describe(),
        recorded_source_sha256: c.source_sha256.clone(),
        regenerated_source_sha256: regenerated,
    }
}

/// Run a frozen replay; results.json is rewritten atomically after every
/// round, and results.md at the end.
pub fn run_replay(spec: &ReplaySpec) -> Result<ReplayFile> {
    if spec.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let candidate_path = match (&spec.candidate, spec.aa) {
        (None, true) => spec.reference.clone(),
        (Some(_), true) => {
            bail!("--aa replays the reference against itself; leave out --candidate")
        }
        (Some(c), false) => c.clone(),
        (None, false) => bail!("--candidate is required (or --aa for an A/A control)"),
    };
    let peers: Vec<String> = spec.peers.iter().map(|m| m.side().to_string()).collect();
    if peers.iter().collect::<BTreeSet<_>>().len() != peers.len() {
        bail!("a peer side is enabled twice");
    }
    let reference_src = load_frozen(&spec.reference)?;
    let candidate_src = load_frozen(&candidate_path)?;
    let (cuda, target) = crate::bench::open_device(spec.device, spec.config.l2)?;

    // Match and freeze every case before anything is measured.
    let by_key: BTreeMap<String, &FrozenCase> =
        candidate_src.cases.iter().map(|c| (c.key(), c)).collect();
    let mut unmatched = vec![];
    let mut prepared = vec![];
    let mut cases = vec![];
    for r in &reference_src.cases {
        let Some(c) = by_key.get(&r.key()) else {
            unmatched.push(format!("{} (reference only)", r.key()));
            continue;
        };
        let (rp, rh) = on_device(cuda.as_ref(), freeze(r, REFERENCE, &target)?)?;
        let (cp, ch) = on_device(cuda.as_ref(), freeze(c, CANDIDATE, &target)?)?;
        let bytes_moved = Features::of(&rp, &target).bytes_moved;
        cases.push(ReplayCase {
            id: r.key(),
            op: r.op.clone(),
            dtype: r.dtype.clone(),
            shape: r.shape.clone(),
            bytes_moved,
            reference: frozen_side(r, &rp, rh),
            candidate: frozen_side(c, &cp, ch),
            rounds: vec![],
            stats: case_stats(&[], &peers),
        });
        prepared.push(Prepared {
            id: r.key(),
            problem: rp.problem.clone(),
            reference: rp,
            candidate: cp,
            bytes_moved,
        });
    }
    let ref_keys: BTreeSet<String> = reference_src.cases.iter().map(|c| c.key()).collect();
    for c in &candidate_src.cases {
        if !ref_keys.contains(&c.key()) {
            unmatched.push(format!("{} (candidate only)", c.key()));
        }
    }
    if prepared.is_empty() {
        bail!(
            "no case of {} matches one of {} by (op, dtype, shape)",
            spec.reference.display(),
            candidate_path.display()
        );
    }

    let mut peer = if peers.is_empty() {
        None
    } else {
        Some(PeerProcess::start(&spec.peer_script, &spec.python)?)
    };
    let capture_env = crate::env::capture(
        cuda.as_ref(),
        peer.as_ref().and_then(PeerProcess::peer),
        spec.command_line.clone(),
    );
    let env = capture_env.env.clone();
    std::fs::create_dir_all(&spec.output)?;
    let source = |role: &str, path: &Path, f: &Frozen| SourceRecord {
        role: role.into(),
        path: path.display().to_string(),
        relative_path: relative_to(&spec.output, path),
        schema: f.schema.clone(),
        file_sha256: f.file_sha256.clone(),
        binary_sha256: f.binary_sha256.clone(),
        binary_equal: f.binary_sha256.as_deref() == Some(env.binary_sha256.as_str()),
        cases: f.cases.clone(),
        skipped: f.skipped.clone(),
    };
    let sources = vec![
        source(REFERENCE, &spec.reference, &reference_src),
        source(CANDIDATE, &candidate_path, &candidate_src),
    ];
    let mut file = ReplayFile {
        schema: SCHEMA.into(),
        environment: env,
        config: spec.config,
        rounds: spec.rounds,
        rounds_done: 0,
        aa: spec.aa,
        torch: peers.iter().any(|p| p == TORCH),
        peers: Some(peers.clone()),
        seed: spec.seed,
        sources,
        unmatched,
        cases,
        resumed: vec![],
    };
    let scratch = std::env::temp_dir().join(format!("lanefold-replay-{}", std::process::id()));
    let results = spec.output.join("results.json");
    if spec.resume {
        let earlier =
            ReplayFile::read(&results).context("--resume needs the replay to continue")?;
        if let Some(why) = resume_mismatch(&earlier, &file) {
            bail!("--resume {}: {why}", spec.output.display());
        }
        if earlier.rounds_done >= spec.rounds {
            bail!(
                "--resume {}: the replay already has {} complete rounds; ask for more with --rounds",
                spec.output.display(),
                earlier.rounds_done
            );
        }
        println!(
            "resuming {} after {} of {} rounds",
            spec.output.display(),
            earlier.rounds_done,
            spec.rounds
        );
        let this_session = std::mem::replace(&mut file.environment, earlier.environment);
        file.resumed = earlier.resumed;
        file.resumed.push(this_session);
        file.rounds_done = earlier.rounds_done;
        for (case, before) in file.cases.iter_mut().zip(earlier.cases) {
            case.rounds = before.rounds;
            case.stats = case_stats(&case.rounds, &peers);
        }
    }
    let mut deadline = crate::deadline::Deadline::new(spec.deadline_s);
    if let Some(c) = cuda.as_ref() {
        // Every case's kernels compiled at once, on every core, inside the
        // deadline's clock; a round then times no compile, so the first
        // round no longer overstates the rest.
        let jobs: Vec<_> = prepared
            .iter()
            .flat_map(|case| [&case.reference, &case.candidate])
            .map(|p| (p.clone(), CodegenOptions::default()))
            .collect();
        eprintln!("{}", c.precompile(&jobs));
    }
    let pb = crate::progress::bar(
        ((spec.rounds - file.rounds_done.min(spec.rounds)) * prepared.len()) as u64,
        "replay",
    );
    for r in file.rounds_done..spec.rounds {
        if !deadline.allows_another() {
            println!(
                "deadline: stopping after {r} of {} rounds (--deadline-s {})",
                spec.rounds,
                deadline.limit_s().unwrap_or_default()
            );
            break;
        }
        deadline.start_unit();
        let order = round_order(r, &peers);
        for (k, case) in prepared.iter().enumerate() {
            pb.set_message(format!("round {} of {}: {}", r + 1, spec.rounds, case.id));
            let case_started = std::time::Instant::now();
            let mut wall: Vec<(String, f64)> = vec![];
            let seed = spec.seed + (r as u64) * 1_000_003 + (k as u64) * 10_007;
            let sets = input_sets(
                &case.problem,
                spec.config.l2,
                cuda.as_ref().map(|c| c.l2_bytes()),
                seed,
            );
            let want = reference(&case.problem, &sets[0])
                .with_context(|| format!("case {}: no float64 reference", case.id))?;
            let rec = &mut file.cases[k];
            let mut round = ReplayRound {
                round: r,
                seed,
                order: order.clone(),
                sides: vec![],
                kernel_sha256: BTreeMap::new(),
                missing: vec![],
            };
            let mut peer_files = PeerInputs::new(scratch.join(format!("round{r}-case{k}")));
            wall.push((
                "inputs+reference".into(),
                case_started.elapsed().as_secs_f64(),
            ));
            for who in &order {
                let side_started = std::time::Instant::now();
                if PeerMode::of_side(who).is_some() {
                    let peer = peer.as_mut().expect("peer started when peers are enabled");
                    // A refusal or a dead peer costs this side, never the replay.
                    match measure_peer(
                        peer,
                        who,
                        &case.problem,
                        &sets,
                        &mut peer_files,
                        &want,
                        &spec.config,
                        case.bytes_moved,
                        &|what| eprintln!("{}: {what}", case.id),
                    ) {
                        Ok(side) => round.sides.push(side),
                        Err(e) => round.missing.push(format!("{who} did not run: {e:#}")),
                    }
                    wall.push((who.clone(), side_started.elapsed().as_secs_f64()));
                    continue;
                }
                let (p, frozen) = if who == REFERENCE {
                    (&case.reference, &rec.reference)
                } else {
                    (&case.candidate, &rec.candidate)
                };
                let (mut side, kernel) = measure_native(
                    cuda.as_ref(),
                    p,
                    &sets,
                    &want,
                    &spec.config,
                    None,
                    case.bytes_moved,
                )
                .with_context(|| format!("case {}: round {r}: {who}", case.id))?;
                side.name = who.clone();
                if let Some(kr) = kernel {
                    if let Some(f) = &frozen.regenerated_source_sha256 {
                        if *f != kr.source_sha256 {
                            bail!(
                                "case {}: round {r}: the {who}'s measured kernel source {} differs from the frozen {f}",
                                case.id,
                                kr.source_sha256
                            );
                        }
                    }
                    round.kernel_sha256.insert(who.clone(), kr.source_sha256);
                }
                round.sides.push(side);
                wall.push((who.clone(), side_started.elapsed().as_secs_f64()));
            }
            for s in &round.sides {
                if s.voided {
                    round.missing.push(format!(
                        "{}: invalid output (worst rel err {:.3e}); its timing is voided this round",
                        s.name,
                        s.validation.worst_rel_err()
                    ));
                }
            }
            rec.rounds.push(round);
            rec.stats = case_stats(&rec.rounds, &peers);
            // Where a round's wall time goes, for planning device calls.
            let parts: Vec<String> = wall.iter().map(|(w, t)| format!("{w} {t:.1}")).collect();
            pb.suspend(|| {
                print_round(rec, r, &peers);
                println!(
                    "        wall s: {} (case {:.1})",
                    parts.join(", "),
                    case_started.elapsed().as_secs_f64()
                );
            });
            pb.inc(1);
        }
        file.rounds_done = r + 1;
        // An interrupted replay keeps every round already measured.
        file.write(&results)?;
        deadline.end_unit();
    }
    pb.finish_and_clear();
    let session = file.resumed.last_mut().unwrap_or(&mut file.environment);
    capture_env.record_end_clocks(session);
    file.write(&results)?;
    write_report(&file, &spec.output)?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(file)
}

/// results.md and plot.svg beside a replay's results.json (also for a
/// replay cut short: its complete rounds are all it reports).
pub fn write_report(file: &ReplayFile, dir: &Path) -> Result<()> {
    npy::write_atomically(&dir.join("results.md"), markdown(file).as_bytes())?;
    crate::render::plot_points(
        &plot_points(file),
        "median of round p50s",
        &dir.join("plot.svg"),
    )
}

/// plot.svg's points: each side's headline (objective phase) as GB/s of
/// the case's bytes moved; reference and candidate are lanefold's lines.
pub fn plot_points(file: &ReplayFile) -> Vec<crate::render::PlotPoint> {
    let mut points = vec![];
    for case in &file.cases {
        let Some(ph) = case.stats.phases.get(&case.stats.objective) else {
            continue;
        };
        for (side, us) in &ph.headline {
            let Some(us) = us.filter(|us| *us > 0.0) else {
                continue;
            };
            points.push(crate::render::PlotPoint {
                op: case.op.clone(),
                series: format!("{} {side}", case.dtype),
                ours: side == REFERENCE || side == CANDIDATE,
                shape: case.shape.clone(),
                gbps: case.bytes_moved as f64 / (us * 1e3),
            });
        }
    }
    points
}

fn print_round(case: &ReplayCase, r: usize, peers: &[String]) {
    let s = &case.stats;
    let Some(ph) = s.phases.get(&s.objective) else {
        return;
    };
    let p = |n: &str| {
        ph.p50s
            .get(n)
            .and_then(|v| v.get(r).copied().flatten())
            .map_or("—".to_string(), |x| format!("{x:.2}"))
    };
    let ratio = ph
        .gain
        .ratios
        .get(r)
        .copied()
        .flatten()
        .map_or("missing".to_string(), |x| format!("{x:.3}x"));
    let peers: String = peers.iter().map(|n| format!(" {n} {}", p(n))).collect();
    println!(
        "round {r} {:<40} {} µs/op: reference {} candidate {}{peers}  gain {ratio}",
        case.id,
        s.objective,
        p(REFERENCE),
        p(CANDIDATE),
    );
}

// ---------------------------------------------------------------------------
// results.md
// ---------------------------------------------------------------------------

fn us(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{v:.3}"))
}

fn gain_text(p: Option<&Paired>) -> String {
    match p.and_then(|p| p.summary) {
        Some(g) => format!("{:.3}× [{:.3}, {:.3}]", g.median, g.min, g.max),
        None => "—".into(),
    }
}

fn wv(l: &Layout) -> String {
    format!("{} / {}", l.workers, l.pack)
}

/// results.md: the throughput table with paired speedups, the
/// single-call latency table, positions, validation and provenance.
pub fn markdown(file: &ReplayFile) -> String {
    let e = &file.environment;
    let c = &file.config;
    let kind = if file.aa {
        "A/A control replay"
    } else {
        "frozen replay"
    };
    let peers = file.peer_sides();
    let mut md = crate::render::header(kind, e);
    md.push('\n');
    if !file.resumed.is_empty() {
        let when: Vec<String> = file
            .resumed
            .iter()
            .map(|r| format!("{} (`{}`)", r.utc_time, r.command_line.join(" ")))
            .collect();
        let _ = writeln!(
            md,
            "Continued with `--resume` (same binary, sources and settings) at {}.\n",
            when.join("; ")
        );
    }
    let valid: usize = file.cases.iter().map(|c| c.stats.outputs_valid).sum();
    let invalid: usize = file.cases.iter().map(|c| c.stats.outputs_invalid).sum();
    let missing: usize = file
        .cases
        .iter()
        .flat_map(|c| &c.rounds)
        .map(|r| r.missing.len())
        .sum();

    let _ = writeln!(
        md,
        "**Method.** {} of {} rounds, {} samples per phase, batches sized to about {} ms of host time, {} ms warm-up, L2 {}. In every round every case measures the reference and the candidate{} on the same freshly seeded inputs; the reference runs first in even rounds and the candidate in odd ones{}. Every output of every side was validated against float64 in every round: {valid} complete outputs valid, {invalid} invalid (voided for their round), {missing} missing-side notes.\n",
        file.rounds_done,
        file.rounds,
        c.samples,
        c.sample_ms,
        c.warmup_ms,
        match c.l2 {
            L2Mode::Warm => "warm",
            L2Mode::Cold => "cold (rotating input sets over 3x L2)",
            L2Mode::ColdInputs => "cold inputs (rotating input sets over 3x L2, one output set)",
        },
        if peers.is_empty() {
            String::new()
        } else {
            format!(" and the PyTorch peer sides {}", peers.join(", "))
        },
        if peers.is_empty() {
            ""
        } else {
            "; the peer sides run as one block, in that order, first in rounds 1, 2 (mod 4) and last otherwise; a peer that refused a case or did not run is missing for its round, with the reason in the positions table"
        },
    );
    if file.aa {
        let total = file.cases.len();
        let contain: Vec<&ReplayCase> = file
            .cases
            .iter()
            .filter(|c| {
                c.stats
                    .phases
                    .get(&c.stats.objective)
                    .and_then(|p| p.gain.summary)
                    .is_some_and(|g| g.range_contains_one)
            })
            .collect();
        let _ = writeln!(
            md,
            "**A/A control.** The candidate is the reference itself (same file, same layouts, same kernels). Its paired gain range should contain 1.0: it does in {} of {total} cases{}.\n",
            contain.len(),
            if contain.len() == total {
                String::new()
            } else {
                let not: Vec<&str> = file
                    .cases
                    .iter()
                    .filter(|c| !contain.iter().any(|k| k.id == c.id))
                    .map(|c| c.id.as_str())
                    .collect();
                format!(" (not in: {})", not.join(", "))
            }
        );
    }
    let _ = writeln!(md, "## Throughput (µs per op)\n");
    let mut h = "| op | dtype | shape | reference W / V | candidate W / V | phase | reference µs/op | candidate µs/op | candidate GB/s | paired speedup median [range] | coverage | sign-test p |".to_string();
    let mut sep = "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|".to_string();
    for p in &peers {
        let _ = write!(h, " {p} µs/op | candidate vs {p} median [range] |");
        sep += "---:|---:|";
    }
    let _ = writeln!(md, "{h}\n{sep}");
    let mut other_rows = vec![];
    for case in &file.cases {
        for (phase, ph) in &case.stats.phases {
            if phase.starts_with("single") {
                continue;
            }
            let g = ph.gain.summary;
            let candidate_us = ph.headline.get(CANDIDATE).copied().flatten();
            // Effective bandwidth: inputs read once plus outputs written once.
            let gbps = candidate_us.filter(|u| *u > 0.0).map_or("—".into(), |u| {
                format!("{:.0}", case.bytes_moved as f64 / (u * 1e3))
            });
            let mut row = format!(
                "| {} | {} | {} | {} | {} | {phase} | {} | {} | {gbps} | {} | {} | {} |",
                case.op,
                case.dtype,
                case.shape,
                wv(&case.reference.layout),
                wv(&case.candidate.layout),
                us(ph.headline.get(REFERENCE).copied().flatten()),
                us(candidate_us),
                gain_text(Some(&ph.gain)),
                g.map_or("—".into(), |g| format!("{:.3} (n={})", g.coverage, g.n)),
                g.map_or("—".into(), |g| format!("{:.3}", g.sign_test_p)),
            );
            for p in &peers {
                let _ = write!(
                    row,
                    " {} | {} |",
                    us(ph.headline.get(p).copied().flatten()),
                    gain_text(ph.peer_gain(p))
                );
            }
            if *phase == case.stats.objective {
                let _ = writeln!(md, "{row}");
            } else {
                other_rows.push(row);
            }
        }
    }
    if !other_rows.is_empty() {
        let _ = writeln!(md, "\nOther batch phase (not the objective):\n\n{h}\n{sep}");
        for r in other_rows {
            let _ = writeln!(md, "{r}");
        }
    }
    let _ = writeln!(
        md,
        "\nThe objective phase is gpu where the native sides measured it, else e2e. Phases are sampled separately and never subtracted:\n\n- {SCOPE_GPU}\n- {SCOPE_E2E}\n- {SCOPE_SINGLE}\n\nTable values are medians over rounds of per-round p50s. Gains are medians of paired per-round ratios reference p50 / candidate p50 (above 1: the candidate is faster; for a peer side, peer p50 / candidate p50). Ranges are the observed min–max over the n rounds with a ratio, not confidence intervals; the coverage 1 − 2^(1−n) is the probability that such a range contains the ratios' population median (continuous, independent rounds). The sign-test p is two-sided against 1, ties dropped.\n"
    );
    let _ = writeln!(
        md,
        "## Single-call latency (µs, medians of per-round p50s)\n"
    );
    let mut h = "| op | dtype | shape | candidate GPU single | candidate E2E single | reference GPU single | reference E2E single |".to_string();
    let mut sep = "|---|---|---|---:|---:|---:|---:|".to_string();
    for p in &peers {
        let _ = write!(h, " {p} GPU single | {p} E2E single |");
        sep += "---:|---:|";
    }
    let _ = writeln!(md, "{h}\n{sep}");
    for case in &file.cases {
        let get = |phase: &str, side: &str| {
            us(case
                .stats
                .phases
                .get(phase)
                .and_then(|p| p.headline.get(side).copied().flatten()))
        };
        let mut row = format!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            case.op,
            case.dtype,
            case.shape,
            get("single_gpu", CANDIDATE),
            get("single_host", CANDIDATE),
            get("single_gpu", REFERENCE),
            get("single_host", REFERENCE),
        );
        for p in &peers {
            let _ = write!(
                row,
                " {} | {} |",
                get("single_gpu", p),
                get("single_host", p)
            );
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(
        md,
        "\nGPU single = device events around one synchronized call; E2E single = host wall clock of launch + synchronize (— where the backend has no device clock).\n"
    );
    let _ = writeln!(
        md,
        "![GB/s of each side's objective-phase headline against row length](plot.svg)\n"
    );
    let _ = writeln!(md, "## Positions and validation per round\n");
    let _ = writeln!(md, "| case | round | seed | order | objective ratio | valid sides | missing |\n|---|---:|---:|---|---:|---:|---|");
    for case in &file.cases {
        let ph = case.stats.phases.get(&case.stats.objective);
        for r in &case.rounds {
            let ratio = ph
                .and_then(|p| p.gain.ratios.get(r.round).copied().flatten())
                .map_or("missing".into(), |x| format!("{x:.3}"));
            let valid = r.sides.iter().filter(|s| s.validation.pass).count();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {ratio} | {valid} / {} | {} |",
                case.id,
                r.round,
                r.seed,
                r.order.join(" → "),
                r.order.len(),
                if r.missing.is_empty() {
                    "—".to_string()
                } else {
                    r.missing.join("; ").replace('|', "/")
                }
            );
        }
    }
    let _ = writeln!(md, "\n## Provenance\n");
    let _ = writeln!(md, "This binary: `{}`.\n", e.binary_sha256);
    let _ = writeln!(md, "| role | file | schema | file SHA-256 | binary SHA-256 recorded in the file | same binary |\n|---|---|---|---|---|---|");
    for s in &file.sources {
        let _ = writeln!(
            md,
            "| {} | `{}` | {} | `{}` | {} | {} |",
            s.role,
            s.relative_path.as_deref().unwrap_or(&s.path),
            s.schema,
            s.file_sha256,
            s.binary_sha256
                .as_deref()
                .map_or("—".into(), |b| format!("`{b}`")),
            if s.binary_equal {
                "yes".to_string()
            } else {
                "**NO: a different executable wrote this file**".to_string()
            }
        );
    }
    if !file.unmatched.is_empty() {
        let _ = writeln!(
            md,
            "\nNot replayed (no match by op, dtype and shape): {}.",
            file.unmatched.join(", ")
        );
    }
    let _ = writeln!(md, "\nFrozen layouts (re-planned from the recorded requests and equal to the recorded layouts) and kernel source SHA-256 (the CUDA C regenerated for the plan, compared with the recorded hash where the file had one{}):\n\n| case | reference layout | reference source | candidate layout | candidate source |\n|---|---|---|---|---|",
        if e.backend == "cpu" {
            "; on the CPU backend the executor runs the plan, not this source"
        } else {
            ""
        }
    );
    let src = |f: &FrozenSide| {
        let regen = f
            .regenerated_source_sha256
            .as_deref()
            .map_or("—".to_string(), |h| format!("`{h}`"));
        match &f.recorded_source_sha256 {
            Some(r) if Some(r) == f.regenerated_source_sha256.as_ref() => {
                format!("{regen} (= recorded)")
            }
            Some(r) => format!("{regen} (recorded `{r}`)"),
            None => regen,
        }
    };
    for case in &file.cases {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            case.id,
            case.reference.describe,
            src(&case.reference),
            case.candidate.describe,
            src(&case.candidate)
        );
    }
    md
}

// ---------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------

/// Independent arithmetic for the audit (not the writer's).
mod check {
    pub(crate) use crate::audit::{close, close_opt, quantile};

    /// Two-sided sign test from a row of Pascal's triangle.
    pub fn sign_p(above: usize, below: usize) -> f64 {
        let m = above + below;
        if m == 0 {
            return 1.0;
        }
        let mut row = vec![1.0f64];
        for _ in 0..m {
            let mut next = vec![1.0f64; row.len() + 1];
            for i in 1..row.len() {
                next[i] = row[i - 1] + row[i];
            }
            row = next;
        }
        let k = above.min(below);
        let tail: f64 = row[..=k].iter().sum::<f64>() / 2f64.powi(m as i32);
        (tail * 2.0).min(1.0)
    }

    pub fn coverage(n: usize) -> f64 {
        if n == 0 {
            0.0
        } else {
            1.0 - 2f64.powi(1 - n as i32)
        }
    }
}

/// The frozen cases of a source file, read straight from its JSON.
fn audit_read_source(path: &Path) -> std::result::Result<(String, Vec<FrozenCase>), String> {
    let bytes = crate::results::read_bytes(path).map_err(|e| format!("{e}"))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let sha = sha256_hex(&bytes);
    let (list, prefix) = match v.get("schema").and_then(|s| s.as_str()) {
        Some(RESULTS_SCHEMA) => (v.get("cases"), ""),
        Some(SEARCH_SCHEMA) => (v.get("problems"), "/winner"),
        other => return Err(format!("{}: schema {other:?}", path.display())),
    };
    let mut out = vec![];
    for c in list.and_then(|l| l.as_array()).into_iter().flatten() {
        let text = |k: &str| c.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        let at = |p: &str| c.pointer(&format!("{prefix}{p}")).cloned();
        if prefix == "/winner" && c.get("winner").is_none_or(|w| w.is_null()) {
            continue;
        }
        let layout = if prefix.is_empty() {
            at("/plan/layout")
        } else {
            winner_layout(c)
        };
        let (Some(req), Some(layout)) = (at("/request"), layout) else {
            return Err(format!(
                "{}: a case without request or layout",
                path.display()
            ));
        };
        let kernel_sha = if prefix.is_empty() {
            at("/kernel/source_sha256")
        } else {
            at("/source_sha256")
        };
        out.push(FrozenCase {
            op: text("op"),
            dtype: text("dtype"),
            shape: text("shape"),
            request: serde_json::from_value(req).map_err(|e| e.to_string())?,
            layout: serde_json::from_value(layout).map_err(|e| e.to_string())?,
            source_sha256: kernel_sha
                .and_then(|s| s.as_str().map(String::from))
                .filter(|s| !s.is_empty()),
        });
    }
    Ok((sha, out))
}

fn audit_side(side: &Side, bad: &mut dyn FnMut(String)) {
    crate::audit::audit_side(&side.name, side, None, bad);
}

/// The raw per-round p50 of a side in a phase, recomputed for the audit.
fn audit_p50(side: &Side, phase: &str) -> Option<f64> {
    if side.voided {
        return None;
    }
    let p = &side.phases;
    let v: Vec<f64> = match phase {
        "gpu" => p
            .gpu
            .as_ref()?
            .iter()
            .map(|b| b.total_us / b.batch as f64)
            .collect(),
        "e2e" => p.e2e.iter().map(|b| b.total_us / b.batch as f64).collect(),
        "single_gpu" => p.single.iter().filter_map(|s| s.gpu_us).collect(),
        "single_host" => p.single.iter().map(|s| s.host_us).collect(),
        _ => vec![],
    };
    check::quantile(&v, 0.5)
}

fn audit_paired(
    what: &str,
    rec: &Paired,
    num: &[Option<f64>],
    den: &[Option<f64>],
    bad: &mut dyn FnMut(String),
) {
    let ratios: Vec<Option<f64>> = num
        .iter()
        .zip(den)
        .map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) if *b > 0.0 => Some(a / b),
            _ => None,
        })
        .collect();
    if rec.ratios.len() != ratios.len()
        || rec
            .ratios
            .iter()
            .zip(&ratios)
            .any(|(a, b)| !check::close_opt(*a, *b))
    {
        bad(format!(
            "{what}: paired ratios {:?} do not follow from the raw samples ({ratios:?})",
            rec.ratios
        ));
        return;
    }
    let present: Vec<f64> = ratios.iter().flatten().copied().collect();
    let Some(med) = check::quantile(&present, 0.5) else {
        if rec.summary.is_some() {
            bad(format!("{what}: a gain summary without any paired ratio"));
        }
        return;
    };
    let Some(s) = rec.summary else {
        bad(format!("{what}: paired ratios but no gain summary"));
        return;
    };
    let min = present.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = present.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let above = present.iter().filter(|&&x| x > 1.0).count();
    let below = present.iter().filter(|&&x| x < 1.0).count();
    let n = present.len();
    if s.n != n
        || !check::close(s.median, med)
        || !check::close(s.min, min)
        || !check::close(s.max, max)
    {
        bad(format!(
            "{what}: gain {} [{}, {}] over n={} does not follow from the ratios (recomputed {med} [{min}, {max}], n={n})",
            s.median, s.min, s.max, s.n
        ));
    }
    if !check::close(s.coverage, check::coverage(n)) {
        bad(format!(
            "{what}: coverage {} is not 1 - 2^(1-{n}) = {}",
            s.coverage,
            check::coverage(n)
        ));
    }
    if s.above != above || s.below != below || s.ties != n - above - below {
        bad(format!(
            "{what}: sign counts {}/{}/{} but ratios give {above}/{below}/{}",
            s.above,
            s.below,
            s.ties,
            n - above - below
        ));
    }
    let p = check::sign_p(above, below);
    if !check::close(s.sign_test_p, p) {
        bad(format!(
            "{what}: sign-test p {} but recomputed {p}",
            s.sign_test_p
        ));
    }
    if s.range_contains_one != (min <= 1.0 && 1.0 <= max) {
        bad(format!(
            "{what}: range_contains_one={} contradicts [{min}, {max}]",
            s.range_contains_one
        ));
    }
}

/// Does a missing-side note name `side` (`<side>: ...` or `<side> ...`)?
fn noted_missing(missing: &[String], side: &str) -> bool {
    missing.iter().any(|m| {
        m.strip_prefix(side)
            .is_some_and(|rest| rest.starts_with([' ', ':']))
    })
}

/// Resolve a recorded source path: relative to the replay directory
/// first, then as recorded; either may since have been gzipped.
fn locate_source(dir: &Path, s: &SourceRecord) -> Option<PathBuf> {
    let found = |p: &PathBuf| crate::results::locate(p).is_some();
    s.relative_path
        .as_ref()
        .map(|r| dir.join(r))
        .filter(found)
        .or_else(|| Some(PathBuf::from(&s.path)).filter(found))
}

/// Audit a `lanefold-replay/1` results file in `dir`: recompute per-round
/// p50s, headline medians, paired ratios (reference and every peer side
/// over the candidate), ranges, coverage and sign-test p-values from the
/// raw samples; check validation records, voiding, that every enabled
/// side ran or is noted missing with a reason, positions (A/B, and each
/// peer before / after the native sides), kernel hashes, binary-equality
/// flags, and that the frozen layouts equal those of the source files
/// (re-read where they still exist, else the recorded copies). Case
/// discrepancies start `case <id>: `.
pub fn audit_replay(dir: &Path, value: &serde_json::Value) -> Vec<String> {
    let file: ReplayFile = match serde_json::from_value(value.clone()) {
        Ok(f) => f,
        Err(e) => return vec![format!("results.json: not a lanefold replay file: {e}")],
    };
    let mut out = vec![];
    if file.schema != SCHEMA {
        out.push(format!("replay: schema {:?}", file.schema));
    }
    let env_bin = &file.environment.binary_sha256;
    if env_bin.len() != 64 || !env_bin.chars().all(|c| c.is_ascii_hexdigit()) {
        out.push("environment: binary_sha256 is not a SHA-256".into());
    }
    for (i, e) in file.resumed.iter().enumerate() {
        if e.binary_sha256 != *env_bin {
            out.push(format!(
                "resumed[{i}]: binary {} is not the replay's {env_bin}",
                e.binary_sha256
            ));
        }
    }
    // Sources: binary flags, and the frozen cases as the files say now.
    let mut frozen_of: BTreeMap<String, BTreeMap<String, FrozenCase>> = BTreeMap::new();
    for role in [REFERENCE, CANDIDATE] {
        let Some(s) = file.source(role) else {
            out.push(format!("source {role}: not recorded"));
            continue;
        };
        let equal = s.binary_sha256.as_deref() == Some(env_bin.as_str());
        if s.binary_equal != equal {
            out.push(format!(
                "source {role}: binary_equal={} but the recorded hashes say {equal}",
                s.binary_equal
            ));
        }
        let cases = match locate_source(dir, s) {
            Some(p) => match audit_read_source(&p) {
                Ok((sha, cases)) => {
                    if sha != s.file_sha256 {
                        out.push(format!(
                            "source {role}: {} hashes to {sha}, the replay recorded {} (changed since the replay)",
                            p.display(),
                            s.file_sha256
                        ));
                    }
                    if cases != s.cases {
                        out.push(format!(
                            "source {role}: the recorded copy of its frozen cases differs from {}",
                            p.display()
                        ));
                    }
                    cases
                }
                Err(e) => {
                    out.push(format!("source {role}: {e}"));
                    s.cases.clone()
                }
            },
            None => s.cases.clone(),
        };
        frozen_of.insert(
            role.to_string(),
            cases.into_iter().map(|c| (c.key(), c)).collect(),
        );
    }
    let peers = file.peer_sides();
    if let Some(list) = &file.peers {
        for p in list {
            if PeerMode::of_side(p).is_none() {
                out.push(format!("replay: {p:?} is not a PyTorch peer side"));
            }
        }
        if list.iter().collect::<BTreeSet<_>>().len() != list.len() {
            out.push("replay: a peer side is listed twice".into());
        }
        if file.torch != list.iter().any(|p| p == TORCH) {
            out.push(format!(
                "replay: torch={} contradicts the peer sides {list:?}",
                file.torch
            ));
        }
    }
    if file.aa {
        let (r, c) = (file.source(REFERENCE), file.source(CANDIDATE));
        if let (Some(r), Some(c)) = (r, c) {
            if r.file_sha256 != c.file_sha256 || r.path != c.path {
                out.push("replay: an A/A control whose candidate is not the reference file".into());
            }
        }
    }
    let mut ids = BTreeSet::new();
    for case in &file.cases {
        let id = case.id.clone();
        let mut bad = |m: String| out.push(format!("case {id}: {m}"));
        if !ids.insert(case.id.clone()) {
            bad("duplicate case id".into());
        }
        if case.id != format!("{}/{}/{}", case.op, case.dtype, case.shape) {
            bad("id does not name its op/dtype/shape".into());
        }
        // Frozen layouts against the sources.
        for (role, fs) in [(REFERENCE, &case.reference), (CANDIDATE, &case.candidate)] {
            match frozen_of.get(role).and_then(|m| m.get(&case.id)) {
                None => bad(format!("the {role} source has no case {}", case.id)),
                Some(src) => {
                    if src.layout != fs.layout || src.request != fs.request {
                        bad(format!(
                            "the {role}'s frozen layout {} / request {:?} differ from the source's {} / {:?}",
                            layout_text(&fs.layout),
                            fs.request,
                            layout_text(&src.layout),
                            src.request
                        ));
                    }
                    if src.source_sha256 != fs.recorded_source_sha256 {
                        bad(format!(
                            "the {role}'s recorded source hash {:?} differs from the source file's {:?}",
                            fs.recorded_source_sha256, src.source_sha256
                        ));
                    }
                }
            }
            if let (Some(r), Some(g)) = (&fs.recorded_source_sha256, &fs.regenerated_source_sha256)
            {
                if r != g {
                    bad(format!(
                        "the {role}'s regenerated source {g} differs from the recorded {r}"
                    ));
                }
            }
        }
        if file.aa && (case.reference != case.candidate) {
            bad("A/A control with different reference and candidate parameters".into());
        }
        // Rounds: numbering, positions, sides, validation.
        if case.rounds.len() != file.rounds_done {
            bad(format!(
                "{} rounds recorded, rounds_done is {}",
                case.rounds.len(),
                file.rounds_done
            ));
        }
        let expected_sides: Vec<&str> = [REFERENCE, CANDIDATE]
            .into_iter()
            .chain(peers.iter().map(String::as_str))
            .collect();
        let (mut a_first, mut b_first) = (0i64, 0i64);
        // Per peer: rounds it ran before / after both native sides.
        let mut peer_before_after: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        for (i, r) in case.rounds.iter().enumerate() {
            if r.round != i {
                bad(format!("round {i} is numbered {}", r.round));
            }
            let mut sorted_order: Vec<&str> = r.order.iter().map(String::as_str).collect();
            sorted_order.sort_unstable();
            let mut want: Vec<&str> = expected_sides.clone();
            want.sort_unstable();
            if sorted_order != want {
                bad(format!("round {i}: order {:?} is not {want:?}", r.order));
            }
            let pos = |n: &str| r.order.iter().position(|x| x == n);
            match (pos(REFERENCE), pos(CANDIDATE)) {
                (Some(a), Some(b)) if a < b => a_first += 1,
                (Some(_), Some(_)) => b_first += 1,
                _ => {}
            }
            if let (Some(a), Some(b)) = (pos(REFERENCE), pos(CANDIDATE)) {
                for p in &peers {
                    let Some(t) = pos(p) else { continue };
                    let e = peer_before_after.entry(p.as_str()).or_default();
                    if t < a.min(b) {
                        e.0 += 1;
                    } else if t > a.max(b) {
                        e.1 += 1;
                    } else {
                        bad(format!("round {i}: {p} runs between the native sides"));
                    }
                }
            }
            let mut seen = BTreeSet::new();
            for s in &r.sides {
                if !r.order.contains(&s.name) {
                    bad(format!("round {i}: side {} not in the order", s.name));
                }
                if !seen.insert(s.name.clone()) {
                    bad(format!("round {i}: side {} twice", s.name));
                }
                audit_side(s, &mut |m| bad(format!("round {i}: {m}")));
                if s.voided && !noted_missing(&r.missing, &s.name) {
                    bad(format!(
                        "round {i}: {} voided without a missing-ratio note",
                        s.name
                    ));
                }
            }
            for n in &r.order {
                if !seen.contains(n) && !noted_missing(&r.missing, n) {
                    bad(format!("round {i}: {n} neither measured nor noted missing"));
                }
            }
            for (who, h) in &r.kernel_sha256 {
                let f = if who == REFERENCE {
                    &case.reference
                } else {
                    &case.candidate
                };
                if f.regenerated_source_sha256.as_ref() != Some(h) {
                    bad(format!(
                        "round {i}: {who} ran kernel source {h}, not the frozen {:?}",
                        f.regenerated_source_sha256
                    ));
                }
            }
        }
        if (a_first - b_first).abs() > 1 {
            bad(format!(
                "positions unbalanced: reference first in {a_first} rounds, candidate first in {b_first}"
            ));
        }
        for (p, (before, after)) in &peer_before_after {
            if (before - after).abs() > 1 {
                bad(format!(
                    "{p} positions unbalanced: before the native sides in {before} rounds, after in {after}"
                ));
            }
        }
        // Statistics from the raw samples.
        let s = &case.stats;
        let valid = case
            .rounds
            .iter()
            .flat_map(|r| &r.sides)
            .filter(|x| x.validation.pass)
            .count();
        let all = case.rounds.iter().map(|r| r.sides.len()).sum::<usize>();
        if s.outputs_valid != valid || s.outputs_invalid != all - valid {
            bad(format!(
                "validation counts {} valid / {} invalid, sides say {valid} / {}",
                s.outputs_valid,
                s.outputs_invalid,
                all - valid
            ));
        }
        let mut native_gpu = false;
        for phase in PHASES {
            let p50s: BTreeMap<&str, Vec<Option<f64>>> = expected_sides
                .iter()
                .map(|&n| {
                    (
                        n,
                        case.rounds
                            .iter()
                            .map(|r| {
                                r.sides
                                    .iter()
                                    .find(|x| x.name == n)
                                    .and_then(|x| audit_p50(x, phase))
                            })
                            .collect(),
                    )
                })
                .collect();
            if phase == "gpu" {
                native_gpu = [REFERENCE, CANDIDATE]
                    .iter()
                    .any(|n| p50s[n].iter().any(Option::is_some));
            }
            let any = p50s.values().flatten().any(Option::is_some);
            let Some(rec) = s.phases.get(phase) else {
                if any || phase == "e2e" {
                    bad(format!("{phase}: statistics missing"));
                }
                continue;
            };
            for (n, v) in &p50s {
                let r = rec.p50s.get(*n);
                let ok = r.is_some_and(|r| {
                    r.len() == v.len() && r.iter().zip(v).all(|(a, b)| check::close_opt(*a, *b))
                });
                if !ok {
                    bad(format!(
                        "{phase}: per-round p50s of {n} {r:?} do not match the raw samples ({v:?})"
                    ));
                }
                let present: Vec<f64> = v.iter().flatten().copied().collect();
                let head = check::quantile(&present, 0.5);
                if !check::close_opt(rec.headline.get(*n).copied().flatten(), head) {
                    bad(format!(
                        "{phase}: headline of {n} {:?} is not the median of its per-round p50s ({head:?})",
                        rec.headline.get(*n)
                    ));
                }
            }
            if rec.p50s.len() != p50s.len() {
                bad(format!("{phase}: p50s for unexpected sides"));
            }
            if rec.gain.numerator != REFERENCE || rec.gain.denominator != CANDIDATE {
                bad(format!("{phase}: gain is not reference / candidate"));
            }
            audit_paired(
                &format!("{phase} gain"),
                &rec.gain,
                &p50s[REFERENCE],
                &p50s[CANDIDATE],
                &mut bad,
            );
            if rec.torch_gain.is_some() != peers.iter().any(|p| p == TORCH) {
                bad(format!(
                    "{phase}: torch gain present iff {TORCH} measured violated"
                ));
            }
            // Eager belongs in torch_gain, where older readers look.
            for extra in rec
                .peer_gains
                .keys()
                .filter(|k| *k == TORCH || !peers.contains(k))
            {
                bad(format!(
                    "{phase}: a gain for {extra}, which is not a peer side measured"
                ));
            }
            for p in &peers {
                let Some(g) = rec.peer_gain(p) else {
                    bad(format!("{phase}: {p} gain missing"));
                    continue;
                };
                if g.numerator != *p || g.denominator != CANDIDATE {
                    bad(format!("{phase}: {p} gain is not {p} / candidate"));
                }
                audit_paired(
                    &format!("{phase} {p} gain"),
                    g,
                    &p50s[p.as_str()],
                    &p50s[CANDIDATE],
                    &mut bad,
                );
            }
        }
        let objective = if native_gpu { "gpu" } else { "e2e" };
        if s.objective != objective {
            bad(format!(
                "objective phase recorded {} but the raw samples make it {objective}",
                s.objective
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{run_bench, BenchSpec};
    use crate::phases::{PhaseRecord, SingleCall};
    use lanefold_cpu::Validation;

    fn cfg() -> PhaseConfig {
        PhaseConfig {
            samples: 3,
            sample_ms: 1.0,
            warmup_ms: 1.0,
            l2: L2Mode::Warm,
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "lanefold-replay-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn positions_are_balanced_over_rounds() {
        let orders: Vec<Vec<String>> = (0..4).map(|r| round_order(r, &[TORCH.into()])).collect();
        let pos = |o: &Vec<String>, n: &str| o.iter().position(|x| x == n).unwrap();
        let a_first = orders
            .iter()
            .filter(|o| pos(o, REFERENCE) < pos(o, CANDIDATE))
            .count();
        assert_eq!(a_first, 2);
        let t_first = orders.iter().filter(|o| pos(o, TORCH) == 0).count();
        let t_last = orders.iter().filter(|o| pos(o, TORCH) == 2).count();
        assert_eq!((t_first, t_last), (2, 2));
        // Every A/B x torch-first/last combination once.
        let combos: BTreeSet<(bool, bool)> = orders
            .iter()
            .map(|o| (pos(o, REFERENCE) < pos(o, CANDIDATE), pos(o, TORCH) == 0))
            .collect();
        assert_eq!(combos.len(), 4);
        // Even rounds: reference first; two rounds already balance torch.
        assert_eq!(round_order(0, &[]), vec![REFERENCE, CANDIDATE]);
        assert_eq!(round_order(1, &[]), vec![CANDIDATE, REFERENCE]);
        assert_ne!(torch_first(0), torch_first(1));
    }

    fn all_peers() -> Vec<String> {
        PeerMode::ALL.iter().map(|m| m.side().to_string()).collect()
    }

    #[test]
    fn several_peers_run_as_one_balanced_block() {
        let peers = all_peers();
        let mut before = 0;
        for r in 0..4 {
            let o = round_order(r, &peers);
            assert_eq!(o.len(), 2 + peers.len());
            // The natives alternate as without peers, the block is intact.
            let native: Vec<&String> = o.iter().filter(|n| !peers.contains(n)).collect();
            assert_eq!(native, round_order(r, &[]).iter().collect::<Vec<_>>());
            let at = if torch_first(r) { 0 } else { 2 };
            assert_eq!(o[at..at + peers.len()], peers[..]);
            before += usize::from(torch_first(r));
        }
        assert_eq!(before, 2);
        // Eager alone: the orders the committed replay files recorded.
        let t = [TORCH.to_string()];
        let want = [
            [REFERENCE, CANDIDATE, TORCH],
            [TORCH, CANDIDATE, REFERENCE],
            [TORCH, REFERENCE, CANDIDATE],
            [CANDIDATE, REFERENCE, TORCH],
        ];
        for (r, w) in want.iter().enumerate() {
            assert_eq!(round_order(r, &t), w.to_vec());
        }
    }

    #[test]
    fn coverage_and_sign_test() {
        assert_eq!(coverage(1), 0.0);
        assert_eq!(coverage(4), 0.875);
        assert_eq!(check::coverage(4), 0.875);
        assert_eq!(sign_test_p(4, 0), 0.125);
        assert_eq!(sign_test_p(0, 4), 0.125);
        assert_eq!(sign_test_p(2, 2), 1.0);
        assert_eq!(sign_test_p(0, 0), 1.0);
        // 9 of 10: 2 * 11 / 1024.
        assert!((sign_test_p(9, 1) - 22.0 / 1024.0).abs() < 1e-15);
        for (a, b) in [(4, 0), (3, 1), (9, 1), (7, 5), (0, 12)] {
            assert!((sign_test_p(a, b) - check::sign_p(a, b)).abs() < 1e-12);
        }
        let g = gain_summary(&[Some(1.2), Some(1.1), None, Some(1.3), Some(1.25)]).unwrap();
        assert_eq!(g.n, 4);
        assert!((g.median - 1.225).abs() < 1e-12);
        assert_eq!((g.min, g.max), (1.1, 1.3));
        assert_eq!((g.above, g.below, g.ties), (4, 0, 0));
        assert_eq!(g.sign_test_p, 0.125);
        assert_eq!(g.coverage, 0.875);
        assert!(!g.range_contains_one);
        let t = gain_summary(&[Some(1.0), Some(0.9), Some(1.1)]).unwrap();
        assert_eq!((t.above, t.below, t.ties), (1, 1, 1));
        assert!(t.range_contains_one);
        assert!(gain_summary(&[None, None]).is_none());
    }

    /// A side whose e2e samples are `per_op` µs at batch 10 (CPU-like: no gpu phase).
    fn side(name: &str, per_op: &[f64], valid: bool) -> Side {
        let phases = PhaseRecord {
            gpu: None,
            gpu_enqueue_us: vec![],
            gpu_graph: None,
            e2e: per_op
                .iter()
                .map(|&u| BatchSample {
                    batch: 10,
                    total_us: u * 10.0,
                })
                .collect(),
            e2e_enqueue_us: per_op.iter().map(|u| u * 10.0).collect(),
            single: per_op
                .iter()
                .map(|&u| SingleCall {
                    gpu_us: None,
                    host_us: u + 100.0,
                })
                .collect(),
        };
        let v = Validation {
            outputs: vec![],
            pass: valid,
        };
        let mut s = Side::new(name, v, phases, 1000);
        s.name = name.into();
        s
    }

    fn round(r: usize, sides: Vec<Side>) -> ReplayRound {
        ReplayRound {
            round: r,
            seed: r as u64,
            order: round_order(r, &[]),
            sides,
            kernel_sha256: BTreeMap::new(),
            missing: vec![],
        }
    }

    #[test]
    fn statistics_on_constructed_rounds() {
        // Per-round p50s: reference 10, 12, 11, 30; candidate 8, 10, 10, 20.
        let rounds = vec![
            round(
                0,
                vec![
                    side(REFERENCE, &[9.0, 10.0, 50.0], true),
                    side(CANDIDATE, &[8.0, 7.0, 9.0], true),
                ],
            ),
            round(
                1,
                vec![
                    side(REFERENCE, &[12.0, 12.0, 12.0], true),
                    side(CANDIDATE, &[10.0, 11.0, 9.0], true),
                ],
            ),
            round(
                2,
                vec![
                    side(REFERENCE, &[11.0], true),
                    side(CANDIDATE, &[10.0], true),
                ],
            ),
            round(
                3,
                vec![
                    side(REFERENCE, &[30.0], true),
                    side(CANDIDATE, &[20.0], true),
                ],
            ),
        ];
        let s = case_stats(&rounds, &[]);
        assert_eq!(s.objective, "e2e");
        assert!(!s.phases.contains_key("gpu"));
        assert!(!s.phases.contains_key("single_gpu"));
        let e = &s.phases["e2e"];
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let p50 = e.p50s[REFERENCE]
            .iter()
            .map(|x| x.unwrap())
            .collect::<Vec<_>>();
        assert!(p50
            .iter()
            .zip([10.0, 12.0, 11.0, 30.0])
            .all(|(a, b)| close(*a, b)));
        // Median of 10, 11, 12, 30 = 11.5; of 8, 10, 10, 20 = 10.
        assert!(close(e.headline[REFERENCE].unwrap(), 11.5));
        assert!(close(e.headline[CANDIDATE].unwrap(), 10.0));
        // Ratios 1.25, 1.2, 1.1, 1.5: median 1.225, range [1.1, 1.5].
        let g = e.gain.summary.unwrap();
        assert!(close(g.median, 1.225) && close(g.min, 1.1) && close(g.max, 1.5));
        assert_eq!(g.sign_test_p, 0.125);
        assert_eq!(g.coverage, 0.875);
        assert!(!g.range_contains_one);
        assert_eq!(s.outputs_valid, 8);

        // A voided side: its round's ratio is missing, the others stand.
        let mut rounds = rounds;
        rounds[1].sides[1] = side(CANDIDATE, &[10.0], false);
        let s = case_stats(&rounds, &[]);
        let e = &s.phases["e2e"];
        assert_eq!(e.gain.ratios[1], None);
        assert_eq!(e.gain.summary.unwrap().n, 3);
        assert_eq!(e.p50s[CANDIDATE][1], None);
        assert_eq!((s.outputs_valid, s.outputs_invalid), (7, 1));
    }

    #[test]
    fn paired_gains_for_several_peers() {
        let peers = all_peers();
        let (eager, compile, liger, quack) = (&peers[0], &peers[1], &peers[2], &peers[3]);
        // Candidate 10 µs/op; eager 20, 30; compile 5, 10; liger only round
        // 1; quack 4 in both.
        let rounds: Vec<ReplayRound> = (0..2)
            .map(|r| {
                let mut sides = vec![
                    side(REFERENCE, &[12.0], true),
                    side(CANDIDATE, &[10.0], true),
                    side(eager, &[20.0 + 10.0 * r as f64], true),
                    side(compile, &[5.0 + 5.0 * r as f64], true),
                    side(quack, &[4.0], true),
                ];
                if r == 1 {
                    sides.push(side(liger, &[15.0], true));
                }
                ReplayRound {
                    order: round_order(r, &peers),
                    ..round(r, sides)
                }
            })
            .collect();
        let s = case_stats(&rounds, &peers);
        let e = &s.phases["e2e"];
        let ratios = |p: &str| e.peer_gain(p).unwrap().ratios.clone();
        assert_eq!(ratios(eager), vec![Some(2.0), Some(3.0)]);
        assert_eq!(ratios(compile), vec![Some(0.5), Some(1.0)]);
        assert_eq!(ratios(liger), vec![None, Some(1.5)]);
        assert_eq!(ratios(quack), vec![Some(0.4), Some(0.4)]);
        assert_eq!(e.headline[quack], Some(4.0));
        // Eager keeps its own field; the others are keyed by side.
        assert_eq!(e.torch_gain.as_ref().unwrap().numerator, *eager);
        assert_eq!(
            e.peer_gains.keys().collect::<Vec<_>>(),
            vec![compile, liger, quack]
        );
        let g = e.peer_gain(compile).unwrap().summary.unwrap();
        assert_eq!((g.n, g.median, g.below, g.ties), (2, 0.75, 1, 1));
        assert_eq!(e.peer_gain(liger).unwrap().summary.unwrap().n, 1);
        assert_eq!(e.headline[liger], Some(15.0));
        // Eager alone writes no peer_gains, so older files read the same.
        let s = case_stats(&rounds, &peers[..1]);
        let v = serde_json::to_value(&s.phases["e2e"]).unwrap();
        assert!(v.get("peer_gains").is_none() && v["torch_gain"].is_object());
        let back: PhaseStats = serde_json::from_value(v).unwrap();
        assert!(back.peer_gains.is_empty());
    }

    fn bench(dir: &Path, request: LayoutRequest) -> ResultsFile {
        run_bench(&bench_spec(dir, request)).unwrap()
    }

    fn bench_spec(dir: &Path, request: LayoutRequest) -> BenchSpec {
        BenchSpec {
            problems: crate::bench::grid(
                &[Operator::Sum],
                &["3x64".parse().unwrap(), "2x257".parse().unwrap()],
                &[DType::F32],
            ),
            request,
            device: Device::Cpu,
            config: cfg(),
            peer_modes: vec![],
            python: "python3".into(),
            peer_script: PathBuf::from("python/torch_peer.py"),
            capture_sources: false,
            output: dir.to_path_buf(),
            seed: 1,
            command_line: vec!["test".into()],
            deadline_s: None,
            occupancy_from_compiler: false,
            options: OperatorOptions::default(),
            quiet: false,
        }
    }

    fn spec(reference: &Path, candidate: Option<&Path>, out: &Path) -> ReplaySpec {
        ReplaySpec {
            reference: reference.join("results.json"),
            candidate: candidate.map(|c| c.join("results.json")),
            aa: candidate.is_none(),
            rounds: 2,
            config: cfg(),
            peers: vec![],
            device: Device::Cpu,
            python: "python3".into(),
            peer_script: PathBuf::from("python/torch_peer.py"),
            output: out.to_path_buf(),
            seed: 7,
            command_line: vec!["test".into()],
            deadline_s: None,
            resume: false,
        }
    }

    /// Under a spent budget a replay stops after its first round, and a
    /// bench after its first case, each with a complete, auditable report.
    #[test]
    fn a_deadline_ends_runs_after_whole_units_with_their_reports() {
        let (r, out) = (tmp("deadline-ref"), tmp("deadline-out"));
        bench(&r, LayoutRequest::default());
        let mut s = spec(&r, None, &out);
        s.rounds = 3;
        s.deadline_s = Some(1e-6);
        let file = run_replay(&s).unwrap();
        assert_eq!(file.rounds_done, 1);
        assert!(file.cases.iter().all(|c| c.rounds.len() == 1));
        assert!(out.join("results.md").is_file());
        assert!(audit(&out).is_empty(), "{:?}", audit(&out));

        let b = tmp("deadline-bench");
        let spec = BenchSpec {
            deadline_s: Some(1e-6),
            ..bench_spec(&b, LayoutRequest::default())
        };
        assert_eq!(run_bench(&spec).unwrap().cases.len(), 1);
        assert!(b.join("results.md").is_file());
        for d in [r, out, b] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// bench --no-weight/--no-bias: the programs lose those inputs, the
    /// files and reports say so, the bytes moved shrink; peers and replays
    /// refuse such cases by name, since both assume PyTorch's modules.
    #[test]
    fn benches_without_weight_or_bias_are_labelled_and_refused_by_peers_and_replays() {
        let (plain, bare) = (tmp("options-plain"), tmp("options-bare"));
        let ops = vec![Operator::Softmax, Operator::Rmsnorm, Operator::Layernorm];
        let shapes: Vec<Shape> = vec!["3x64".parse().unwrap(), "2x257".parse().unwrap()];
        let with_columns = run_bench(&BenchSpec {
            problems: crate::bench::grid(&ops, &shapes, &[DType::F32]),
            ..bench_spec(&plain, LayoutRequest::default())
        })
        .unwrap();
        let without = BenchSpec {
            problems: crate::bench::grid(&ops, &shapes, &[DType::F32]),
            options: OperatorOptions {
                weight: false,
                bias: false,
            },
            ..bench_spec(&bare, LayoutRequest::default())
        };
        let file = run_bench(&without).unwrap();
        let labels: Vec<String> = file.cases.iter().map(|c| c.op_label()).collect();
        assert_eq!(
            &labels[..3],
            [
                "softmax",
                "rmsnorm(no weight)",
                "layernorm(no weight, no bias)"
            ]
        );
        for (c, d) in file.cases.iter().zip(&with_columns.cases) {
            assert!(c.sides[0].validation.pass, "{}", c.id);
            assert!(c.id.starts_with(&c.op_label()), "{}", c.id);
            if c.op == "softmax" {
                assert_eq!(c.bytes_moved, d.bytes_moved);
                assert_eq!(c.options, OperatorOptions::default());
            } else {
                assert!(c.bytes_moved < d.bytes_moved, "{}", c.id);
            }
        }
        let md = std::fs::read_to_string(bare.join("results.md")).unwrap();
        assert!(
            md.contains("| layernorm(no weight, no bias) | f32 |"),
            "{md}"
        );
        // A file of default modules keeps its old form: no options field.
        let json = std::fs::read_to_string(plain.join("results.json")).unwrap();
        assert!(!json.contains("\"options\""));
        let refused = tmp("options-replay");
        let e = run_replay(&spec(&bare, None, &refused)).unwrap_err();
        assert!(format!("{e:#}").contains("rmsnorm(no weight)"), "{e:#}");
        let e = run_bench(&BenchSpec {
            peer_modes: vec!["eager".into()],
            ..without
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("--no-weight"), "{e:#}");
        for d in [plain, bare, refused] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// Needs NVRTC (CI runs it with `--ignored nvrtc`): a promise decided
    /// by the compiler is recorded as an explicit request, and a replay
    /// re-plans it, promise included, without compiling anything first.
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_a_compiler_promise_is_recorded_and_replayed_as_an_explicit_layout() {
        let (r, out) = (tmp("occupancy-ref"), tmp("occupancy-out"));
        let request = LayoutRequest {
            workers: 2048,
            pack: 8,
            cluster_group_threads: 256,
            mapper: lanefold_plan::MapperPolicy::Model,
            ..Default::default()
        };
        let file = run_bench(&BenchSpec {
            problems: crate::bench::grid(
                &[Operator::Rmsnorm],
                &["2x131072".parse().unwrap()],
                &[DType::Bf16],
            ),
            occupancy_from_compiler: true,
            ..bench_spec(&r, request)
        })
        .unwrap();
        let case = &file.cases[0];
        assert_eq!(case.request.occupancy, 4, "{:?}", case.request);
        assert_eq!(case.request.cluster_group_threads, 256);
        assert!(case.id.contains("occupancy=4"), "{}", case.id);
        let replayed = run_replay(&spec(&r, None, &out)).unwrap();
        assert_eq!(replayed.rounds_done, 2);
        assert!(audit(&out).is_empty(), "{:?}", audit(&out));
        for d in [r, out] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    fn audit(dir: &Path) -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        audit_replay(dir, &v)
    }

    #[test]
    fn a_cpu_replay_is_auditable_and_a_changed_sample_fails_it() {
        let (r, c, out) = (tmp("ref"), tmp("cand"), tmp("out"));
        bench(&r, LayoutRequest::default());
        bench(
            &c,
            LayoutRequest {
                pack: 4,
                workers: 32,
                ..Default::default()
            },
        );
        let file = run_replay(&spec(&r, Some(&c), &out)).unwrap();
        assert_eq!(file.schema, SCHEMA);
        assert_eq!((file.rounds_done, file.cases.len()), (2, 2));
        assert!(file.sources.iter().all(|s| s.binary_equal));
        let case = &file.cases[0];
        assert_eq!(case.stats.objective, "e2e");
        assert_eq!(case.candidate.layout.pack, 4);
        assert_eq!(case.rounds[0].order, vec![REFERENCE, CANDIDATE]);
        assert_eq!(case.rounds[1].order, vec![CANDIDATE, REFERENCE]);
        let g = case.stats.phases["e2e"].gain.summary.unwrap();
        assert_eq!(g.n, 2);
        assert_eq!(g.coverage, 0.5);
        assert_eq!(case.stats.outputs_valid, 4);
        assert!(out.join("results.md").is_file());
        assert!(out.join("plot.svg").is_file());
        // Both native sides of every case, at bytes moved / headline µs.
        let points = plot_points(&file);
        assert_eq!(points.len(), 2 * file.cases.len());
        let case = &file.cases[0];
        let ph = &case.stats.phases[&case.stats.objective];
        let cand = points
            .iter()
            .find(|p| p.shape == case.shape && p.series.ends_with(CANDIDATE))
            .unwrap();
        let us = ph.headline[CANDIDATE].unwrap();
        assert!(cand.ours && (cand.gbps - case.bytes_moved as f64 / (us * 1e3)).abs() < 1e-9);
        let md = std::fs::read_to_string(out.join("results.md")).unwrap();
        assert!(md.contains("paired speedup median [range]") && md.contains("E2E single"));
        assert_eq!(audit(&out), Vec::<String>::new());

        // One raw sample changed: the audit names the case.
        let path = out.join("results.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id = v["cases"][1]["id"].as_str().unwrap().to_string();
        let t = &mut v["cases"][1]["rounds"][1]["sides"][0]["phases"]["e2e"][0]["total_us"];
        *t = serde_json::json!(t.as_f64().unwrap() * 10.0 + 1.0);
        let f = audit_replay(&out, &v);
        assert!(!f.is_empty());
        assert!(
            f.iter().all(|m| m.starts_with(&format!("case {id}: "))),
            "{f:?}"
        );

        // A changed statistic, an unbalanced order, a false validation record.
        let clean: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id0 = file.cases[0].id.clone();
        let tamper = |f: &dyn Fn(&mut serde_json::Value), want: &str| {
            let mut v = clean.clone();
            f(&mut v);
            let found = audit_replay(&out, &v);
            assert!(
                found
                    .iter()
                    .any(|m| m.starts_with(&format!("case {id0}: ")) && m.contains(want)),
                "{want}: {found:?}"
            );
        };
        tamper(
            &|v| {
                v["cases"][0]["stats"]["phases"]["e2e"]["gain"]["summary"]["sign_test_p"] =
                    0.01.into()
            },
            "sign-test p",
        );
        tamper(
            &|v| {
                v["cases"][0]["stats"]["phases"]["e2e"]["gain"]["summary"]["coverage"] = 0.9.into()
            },
            "coverage",
        );
        tamper(
            &|v| v["cases"][0]["stats"]["phases"]["e2e"]["headline"]["candidate"] = 1e-3.into(),
            "headline",
        );
        tamper(
            &|v| v["cases"][0]["rounds"][1]["order"] = serde_json::json!([REFERENCE, CANDIDATE]),
            "positions unbalanced",
        );
        tamper(
            &|v| v["cases"][0]["rounds"][0]["sides"][0]["validation"]["pass"] = false.into(),
            "validation",
        );

        // A changed frozen layout in the recorded copy is caught when the
        // source file no longer exists.
        std::fs::remove_dir_all(&c).unwrap();
        assert_eq!(audit(&out), Vec::<String>::new());
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["cases"][0]["candidate"]["layout"]["pack"] = serde_json::json!(2);
        let f = audit_replay(&out, &v);
        assert!(
            f.iter()
                .any(|m| m.starts_with(&format!("case {id0}: ")) && m.contains("frozen layout")),
            "{f:?}"
        );
        for d in [r, out] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn an_aa_replay_records_its_range_and_whether_it_contains_one() {
        let (r, out) = (tmp("aa-ref"), tmp("aa-out"));
        bench(&r, LayoutRequest::default());
        let file = run_replay(&spec(&r, None, &out)).unwrap();
        assert!(file.aa);
        for case in &file.cases {
            assert_eq!(case.reference, case.candidate);
            let g = case.stats.phases["e2e"].gain.summary.unwrap();
            assert_eq!(g.range_contains_one, g.min <= 1.0 && 1.0 <= g.max);
        }
        let md = std::fs::read_to_string(out.join("results.md")).unwrap();
        assert!(md.contains("A/A control"));
        assert_eq!(audit(&out), Vec::<String>::new());
        for d in [r, out] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn a_layout_the_request_does_not_replan_to_is_refused() {
        let (r, out) = (tmp("frozen-ref"), tmp("frozen-out"));
        let mut file = bench(&r, LayoutRequest::default());
        let id = format!(
            "{}/{}/{}",
            file.cases[1].op, file.cases[1].dtype, file.cases[1].shape
        );
        let pack = file.cases[1].plan.layout.pack;
        file.cases[1].plan.layout.pack = if pack == 4 { 2 } else { 4 };
        file.write(&r.join("results.json")).unwrap();
        let e = run_replay(&spec(&r, None, &out)).unwrap_err().to_string();
        assert!(
            e.contains(&format!("case {id}:")) && e.contains("re-plans"),
            "{e}"
        );
        assert!(!out.join("results.json").exists());
        let _ = std::fs::remove_dir_all(r);
    }

    #[test]
    fn search_files_are_read_from_their_winners() {
        let r = tmp("search");
        let file = bench(&r, LayoutRequest::default());
        let problems: Vec<serde_json::Value> = file
            .cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    // The search helper's shape: the layout lives with the
                    // winning candidate.
                    serde_json::json!({
                        "op": c.op, "dtype": c.dtype, "shape": c.shape,
                        "candidates": [
                            {"index": 0, "plan": {"layout": {"workers": 1, "pack": 8, "unroll": 1, "rows_per_group": 1}}},
                            {"index": 3, "plan": {"layout": c.plan.layout}},
                        ],
                        "winner": {"candidate": 3, "request": c.request, "source_sha256": ""},
                    })
                } else {
                    serde_json::json!({
                        "op": c.op, "dtype": c.dtype, "shape": c.shape,
                        "winner": {
                            "request": c.request,
                            "source_sha256": null,
                            "plan": {"layout": c.plan.layout},
                        }
                    })
                }
            })
            .chain([serde_json::json!({
                "op": "sum", "dtype": "f32", "shape": "9x9", "winner": null
            })])
            .collect();
        let search = serde_json::json!({
            "schema": SEARCH_SCHEMA,
            "environment": {"binary_sha256": "ab"},
            "problems": problems,
        });
        let path = r.join("search.json");
        std::fs::write(&path, serde_json::to_string(&search).unwrap()).unwrap();
        let s = load_frozen(&path).unwrap();
        let f = load_frozen(&r.join("results.json")).unwrap();
        assert_eq!(s.cases, f.cases);
        assert_eq!(s.skipped, vec!["sum/f32/9x9".to_string()]);
        assert_eq!(s.binary_sha256.as_deref(), Some("ab"));
        assert_eq!(audit_read_source(&path).unwrap().1, s.cases);
        let _ = std::fs::remove_dir_all(r);
    }

    fn has_python() -> bool {
        std::process::Command::new("python3")
            .args(["-c", "import json, struct"])
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn every_peer_side_is_replayed_rendered_and_audited() {
        if !has_python() {
            eprintln!("no python3 here; skipping");
            return;
        }
        let (r, c, out) = (tmp("peers-ref"), tmp("peers-cand"), tmp("peers-out"));
        bench(&r, LayoutRequest::default());
        bench(
            &c,
            LayoutRequest {
                pack: 4,
                ..Default::default()
            },
        );
        let mut sp = spec(&r, Some(&c), &out);
        sp.peers = PeerMode::ALL.to_vec();
        sp.peer_script = crate::peer::tests::fake_script();
        let file = run_replay(&sp).unwrap();
        let peers = all_peers();
        let liger = PeerMode::Liger.side();
        let quack = PeerMode::Quack.side();
        assert_eq!(file.peers.as_ref(), Some(&peers));
        assert!(file.torch);
        for case in &file.cases {
            for (i, round) in case.rounds.iter().enumerate() {
                assert_eq!(round.order, round_order(i, &peers));
                // The fake peer refuses liger and quack: missing with the reason.
                let names: Vec<&str> = round.sides.iter().map(|s| s.name.as_str()).collect();
                assert!(!names.contains(&liger), "{names:?}");
                assert!(!names.contains(&quack), "{names:?}");
                assert_eq!(names.len(), 4);
                assert_eq!(round.missing.len(), 2, "{:?}", round.missing);
                for (reason, side) in round.missing.iter().zip([liger, quack]) {
                    assert!(
                        reason.starts_with(&format!("{side} did not run"))
                            && reason.contains("not installed"),
                        "{reason}"
                    );
                }
            }
            let e = &case.stats.phases["e2e"];
            assert_eq!(e.peer_gain(TORCH).unwrap().summary.unwrap().n, 2);
            assert_eq!(e.peer_gain(&peers[1]).unwrap().summary.unwrap().n, 2);
            assert!(e.peer_gain(liger).unwrap().summary.is_none());
            assert!(e.peer_gain(quack).unwrap().summary.is_none());
            assert_eq!(case.stats.outputs_invalid, 0);
        }
        let md = std::fs::read_to_string(out.join("results.md")).unwrap();
        for p in &peers {
            for col in [
                format!("| {p} µs/op | candidate vs {p} median [range] |"),
                format!("| {p} GPU single | {p} E2E single |"),
            ] {
                assert!(md.contains(&col), "{col}\n{md}");
            }
        }
        assert_eq!(audit(&out), Vec::<String>::new());

        let path = out.join("results.json");
        let clean: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id0 = file.cases[0].id.clone();
        let compile = PeerMode::Compile.side();
        // Index of a side in round `r` of case 0.
        let at = |r: usize, name: &str| {
            file.cases[0].rounds[r]
                .sides
                .iter()
                .position(|s| s.name == name)
                .unwrap()
        };
        let tamper = |f: &dyn Fn(&mut serde_json::Value), want: &str| {
            let mut v = clean.clone();
            f(&mut v);
            let found = audit_replay(&out, &v);
            assert!(
                found
                    .iter()
                    .any(|m| m.starts_with(&format!("case {id0}: ")) && m.contains(want)),
                "{want}: {found:?}"
            );
        };
        // A peer's raw sample: its p50 and its gain no longer follow.
        let k = at(1, compile);
        tamper(
            &|v| {
                let t = &mut v["cases"][0]["rounds"][1]["sides"][k]["phases"]["e2e"][0]["total_us"];
                *t = serde_json::json!(t.as_f64().unwrap() * 100.0);
            },
            &format!("per-round p50s of {compile}"),
        );
        tamper(
            &|v| {
                v["cases"][0]["stats"]["phases"]["e2e"]["peer_gains"][compile]["summary"]
                    ["median"] = 9.0.into()
            },
            &format!("e2e {compile} gain"),
        );
        // A peer side gone without a reason, and a reason gone.
        tamper(
            &|v| {
                v["cases"][0]["rounds"][0]["sides"]
                    .as_array_mut()
                    .unwrap()
                    .remove(at(0, compile));
            },
            &format!("{compile} neither measured nor noted missing"),
        );
        tamper(
            &|v| v["cases"][0]["rounds"][0]["missing"] = serde_json::json!([]),
            &format!("{liger} neither measured nor noted missing"),
        );
        // The peer block after the natives in both rounds.
        let mut late: Vec<String> = vec![CANDIDATE.into(), REFERENCE.into()];
        late.extend(peers.iter().cloned());
        tamper(
            &|v| v["cases"][0]["rounds"][1]["order"] = serde_json::json!(late),
            &format!("{compile} positions unbalanced"),
        );
        // A peer dropped from the file's list leaves its side unexpected.
        let mut v = clean.clone();
        v["peers"] = serde_json::json!([TORCH, liger, quack]);
        let f = audit_replay(&out, &v);
        assert!(f.iter().any(|m| m.contains("is not")), "{f:?}");
        v["peers"] = serde_json::json!([TORCH, compile, liger, quack, "torch-fast"]);
        let f = audit_replay(&out, &v);
        assert!(
            f.iter().any(|m| m.contains("not a PyTorch peer side")),
            "{f:?}"
        );
        for d in [r, c, out] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn an_eager_replay_without_a_peers_list_audits_as_before() {
        if !has_python() {
            eprintln!("no python3 here; skipping");
            return;
        }
        let (r, out) = (tmp("eager-ref"), tmp("eager-out"));
        bench(&r, LayoutRequest::default());
        let mut sp = spec(&r, None, &out);
        sp.peers = vec![PeerMode::Eager];
        sp.peer_script = crate::peer::tests::fake_script();
        run_replay(&sp).unwrap();
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
                .unwrap();
        assert!(v["cases"][0]["stats"]["phases"]["e2e"]
            .get("peer_gains")
            .is_none());
        // Files written before `peers` existed: derived from `torch`.
        v.as_object_mut().unwrap().remove("peers");
        let file: ReplayFile = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(file.peer_sides(), vec![TORCH.to_string()]);
        assert_eq!(audit_replay(&out, &v), Vec::<String>::new());
        v["torch"] = false.into();
        assert!(!audit_replay(&out, &v).is_empty());
        for d in [r, out] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[cfg(test)]
mod freeze_tests {
    use super::*;
    use lanefold_plan::{Layout, MapperPolicy};

    /// Committed reference files must freeze with today's mapper and
    /// codegen on the H200 target, regenerating each kernel byte for byte:
    /// a refusal found on the device costs a call. (The first references
    /// of 2026-11-29 no longer do: register plans' pack addresses were
    /// folded since, so their replay stops at the hash check, by design.)
    #[test]
    fn the_results_files_the_device_plan_replays_still_freeze() {
        for dir in [
            "2026-11-30-nc4096-ref-h200",
            "2026-11-30-nc4096-bf16-ref-h200",
            "2026-12-01-cpb-rms-ref-h200",
            "2026-12-01-cpb-ln-ref-h200",
            "2026-12-01-rt-w512-om-ob2-h200",
        ] {
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../bench/results")
                .join(dir)
                .join("results.json");
            let frozen = load_frozen(&path).unwrap();
            assert!(!frozen.cases.is_empty(), "{dir}");
            for c in &frozen.cases {
                // The online normalizer gained its masked-entry guard: its
                // sources changed, so those references stop at the hash
                // check until recorded again on the device.
                if c.request.online_normalizer {
                    continue;
                }
                let (p, hash) = freeze(c, REFERENCE, &Target::h200())
                    .unwrap_or_else(|e| panic!("{dir}: {e:#}"));
                assert_eq!(p.layout, c.layout, "{dir} {}", c.key());
                assert!(c.source_sha256.is_some(), "{dir} {}", c.key());
                assert_eq!(hash, c.source_sha256, "{dir} {}", c.key());
            }
        }
    }

    fn case(layout: Layout) -> FrozenCase {
        FrozenCase {
            op: "sum".into(),
            dtype: "f32".into(),
            shape: "32768x4096".into(),
            request: LayoutRequest {
                mapper: MapperPolicy::Model,
                ..Default::default()
            },
            layout,
            source_sha256: None,
        }
    }

    /// Regression: a results file recorded before the roofline-v3 mapping
    /// (automatic request, layout W=8 V=4 U=1 G=32) was refused because its
    /// request re-plans differently today; the layout is what is frozen.
    #[test]
    fn an_automatic_request_replays_its_recorded_layout_after_a_mapper_change() {
        let old = Layout {
            workers: 8,
            pack: 4,
            unroll: 1,
            rows_per_group: 32,
        };
        let mut c = case(old);
        let explicit = LayoutRequest {
            workers: 8,
            pack: 4,
            unroll: 1,
            rows_per_group: 32,
            ..c.request
        };
        let recorded = plan(&problem_of(&c).unwrap(), &Target::h200(), &explicit).unwrap();
        let source = lanefold_codegen::generate(&recorded, &CodegenOptions::default()).unwrap();
        c.source_sha256 = Some(sha256_hex(source.source.as_bytes()));
        let today = plan(&problem_of(&c).unwrap(), &Target::h200(), &c.request).unwrap();
        assert_ne!(
            today.layout, old,
            "the test needs a layout the mapper no longer picks"
        );
        let (p, _) = freeze(&c, REFERENCE, &Target::h200()).unwrap();
        assert_eq!(p.layout, old);
        // Without a recorded source hash nothing proves the kernel: refused.
        let unproven = case(old);
        assert!(freeze(&unproven, REFERENCE, &Target::h200()).is_err());
        // A recorded hash that is not this layout's source: refused.
        let mut tampered = c.clone();
        tampered.layout.pack = 8;
        assert!(freeze(&tampered, REFERENCE, &Target::h200()).is_err());
    }

    /// Regression: after the model mapping learned 256-thread cluster
    /// groups, an automatic long-row request recorded with 512-thread groups
    /// re-planned to the same W, V, U and G in other groups, so the layout
    /// matched but the regenerated source did not, and the replay refused a
    /// case it can reproduce.
    #[test]
    fn an_automatic_request_replays_its_recorded_cluster_groups_after_a_mapper_change() {
        let mut c = case(Layout {
            workers: 2048,
            pack: 4,
            unroll: 4,
            rows_per_group: 1,
        });
        c.op = "softmax".into();
        c.shape = "4096x131072".into();
        let problem = problem_of(&c).unwrap();
        let explicit_512 = LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 4,
            rows_per_group: 1,
            cluster_group_threads: 512,
            ..c.request
        };
        let recorded = plan(&problem, &Target::h200(), &explicit_512).unwrap();
        let source = lanefold_codegen::generate(&recorded, &CodegenOptions::default()).unwrap();
        c.source_sha256 = Some(sha256_hex(source.source.as_bytes()));
        let today = plan(&problem, &Target::h200(), &c.request).unwrap();
        assert_eq!(
            today.layout, c.layout,
            "the test needs the same layout today"
        );
        assert_ne!(
            today.threads_per_group, recorded.threads_per_group,
            "the test needs other cluster groups today"
        );
        let (p, hash) = freeze(&c, REFERENCE, &Target::h200()).unwrap();
        assert_eq!(p.threads_per_group, 512);
        assert_eq!(hash, c.source_sha256);
    }
}
