//! results.json: a versioned schema holding the environment, every case's
//! plan, validation records and raw samples, and the summaries derived
//! from them (which the audit recomputes).

use crate::phases::{BatchSample, PhaseConfig, PhaseRecord};
use lanefold_cpu::Validation;
use lanefold_ir::OperatorOptions;
use lanefold_plan::{Layout, LayoutRequest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const SCHEMA: &str = "lanefold-results/1";

pub const SCOPE_GPU: &str =
    "gpu: device events around a CUDA-graph replay of a batch of launches, divided by the batch (µs per op)";
pub const SCOPE_E2E: &str =
    "e2e: host wall clock around a batch of direct launches ending in a synchronize, divided by the batch (µs per op)";
pub const SCOPE_SINGLE: &str =
    "single: synchronized calls, at least 15 per side (more where the batch phases take more samples), each through that side's own call path (lanefold: a cached graph of the kernel and a one-thread node behind it that writes a host-mapped completion flag, its parameters rewritten only when a call's arguments change; for cluster kernels, a direct launch of the kernel's watcher form, whose group 0 writes the flag once every other group has counted itself done; a peer: its op) and timed twice separately; gpu = device events around it, host = wall clock of call + wait for completion (lanefold: a spin until the flag is seen, else a synchronize; a peer: synchronize) with no event in the window (µs)";
/// The single-call label of two files written on 2026-12-01, when every
/// kernel's single calls ran a self-signalling form: the ticket form in
/// one, the watcher form in the other.
pub const SCOPE_SINGLE_V6: &str =
    "single: synchronized calls, at least 15 per side (more where the batch phases take more samples), each through that side's own call path (lanefold: the kernel's self-signalling form, the same kernel whose last group writes a host-mapped completion flag, replayed as a cached graph whose parameters are rewritten only when a call's arguments change, launched directly for cluster kernels; a second graph node writes the flag where that form cannot run; a peer: its op) and timed twice separately; gpu = device events around it, host = wall clock of call + wait for completion (lanefold: a spin until the flag is seen, else a synchronize; a peer: synchronize) with no event in the window (µs)";
/// The single-call label of files written from late 2026-11-30 to
/// 2026-12-01, when every call rewrote the graph's parameters and
/// cluster kernels synchronized.
pub const SCOPE_SINGLE_V5: &str =
    "single: synchronized calls, at least 15 per side (more where the batch phases take more samples), each through that side's own call path (lanefold: a cached graph given the call's parameters whose second node writes a host-mapped completion flag, a direct launch for cluster kernels; a peer: its op) and timed twice separately; gpu = device events around it, host = wall clock of call + wait for completion (lanefold: a spin until the flag is seen, else a synchronize; a peer: synchronize) with no event in the window (µs)";
/// The single-call label of files written on 2026-11-30, with as
/// many single calls as samples of the batch phases (3 in most replays).
pub const SCOPE_SINGLE_V4: &str =
    "single: one synchronized call through each side's own call path (lanefold: a cached graph given the call's parameters whose second node writes a host-mapped completion flag, a direct launch for cluster kernels; a peer: its op), timed twice separately; gpu = device events around it, host = wall clock of call + wait for completion (lanefold: a spin until the flag is seen, else a synchronize; a peer: synchronize) with no event in the window (µs)";
/// The single-call label of files written earlier on 2026-11-30, when
/// lanefold's call was a one-node graph and its wait a
/// stream synchronize.
pub const SCOPE_SINGLE_V3: &str =
    "single: one synchronized call through each side's own call path (lanefold: a cached one-node graph given the call's parameters; a peer: its op), timed twice separately; gpu = device events around it, host = wall clock of call + synchronize with no event in the window (µs)";
/// The single-call label of files written from late 2026-11-29 up to
/// 2026-11-30, when lanefold's call was a direct `cuLaunchKernelEx`.
pub const SCOPE_SINGLE_V2: &str =
    "single: one synchronized call, timed twice separately; gpu = device events around it, host = wall clock of launch + synchronize with no event in the window (µs)";
/// The single-call label of the first files of 2026-11-29, when
/// the host clock also covered recording and waiting on the end event.
pub const SCOPE_SINGLE_V1: &str =
    "single: one synchronized call; gpu = device events, host = wall clock (µs)";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub utc_time: String,
    pub host: String,
    pub backend: String,
    pub gpu_name: Option<String>,
    pub gpu_uuid: Option<String>,
    pub driver: Option<String>,
    pub compute_capability: Option<String>,
    pub l2_bytes: Option<u64>,
    pub sm_clock_mhz: Option<[String; 2]>,
    pub mem_clock_mhz: Option<[String; 2]>,
    pub torch: Option<String>,
    pub torch_cuda: Option<String>,
    pub liger: Option<String>,
    /// Quack's version where the peer had it (absent in files written
    /// before Quack was a peer, and where it was not installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quack: Option<String>,
    pub python: Option<String>,
    pub rustc: String,
    pub git_sha: String,
    pub git_dirty: bool,
    pub binary_sha256: String,
    pub command_line: Vec<String>,
}

/// p50 with the observed range and quartiles (linear interpolation).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub min: f64,
    pub max: f64,
    pub q1: f64,
    pub q3: f64,
    pub iqr: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let pos = p * (v.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
        };
        let (q1, q3) = (q(0.25), q(0.75));
        Some(Summary {
            n: v.len(),
            p50: q(0.5),
            min: v[0],
            max: v[v.len() - 1],
            q1,
            q3,
            iqr: q3 - q1,
        })
    }
}

/// Per-op microseconds of a batch phase.
pub fn per_op(samples: &[BatchSample]) -> Vec<f64> {
    samples.iter().map(|s| s.per_op_us()).collect()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SideSummary {
    pub gpu: Option<Summary>,
    pub e2e: Option<Summary>,
    pub single_gpu: Option<Summary>,
    pub single_host: Option<Summary>,
}

impl SideSummary {
    pub fn of(p: &PhaseRecord) -> SideSummary {
        let single_gpu: Vec<f64> = p.single.iter().filter_map(|s| s.gpu_us).collect();
        SideSummary {
            gpu: p.gpu.as_deref().and_then(|g| Summary::of(&per_op(g))),
            e2e: Summary::of(&per_op(&p.e2e)),
            single_gpu: Summary::of(&single_gpu),
            single_host: Summary::of(&p.single.iter().map(|s| s.host_us).collect::<Vec<_>>()),
        }
    }
}

/// Phases whose host enqueue time per launch reaches the GPU time per
/// launch: the host, not the kernel, sets their pace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostBound {
    pub gpu: Option<bool>,
    pub e2e: Option<bool>,
}

impl HostBound {
    pub fn of(p: &PhaseRecord, s: &SideSummary) -> HostBound {
        let enqueue_per_op = |enq: &[f64], samples: &[BatchSample]| {
            let v: Vec<f64> = enq
                .iter()
                .zip(samples)
                .map(|(e, s)| e / s.batch as f64)
                .collect();
            Summary::of(&v).map(|s| s.p50)
        };
        let gpu_p50 = s.gpu.map(|g| g.p50);
        HostBound {
            gpu: match (&p.gpu, gpu_p50) {
                (Some(g), Some(t)) => enqueue_per_op(&p.gpu_enqueue_us, g).map(|e| e >= t),
                _ => None,
            },
            e2e: match gpu_p50 {
                Some(t) => enqueue_per_op(&p.e2e_enqueue_us, &p.e2e).map(|e| e >= t),
                None => None,
            },
        }
    }
}

/// One side of a case: lanefold, or a PyTorch peer mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// `lanefold`, or a peer side (`torch-eager`, `torch-compile`,
    /// `torch-liger`, `torch-quack`).
    pub name: String,
    pub validation: Validation,
    /// An invalid output voids the side's timing: its samples are dropped.
    pub voided: bool,
    pub phases: PhaseRecord,
    pub summary: SideSummary,
    pub host_bound: HostBound,
    /// bytes_moved / gpu p50.
    pub gpu_gbps_p50: Option<f64>,
    pub scopes: BTreeMap<String, String>,
}

impl Side {
    pub fn new(name: &str, validation: Validation, phases: PhaseRecord, bytes_moved: u64) -> Side {
        let voided = !validation.pass;
        let phases = if voided {
            PhaseRecord::default()
        } else {
            phases
        };
        let summary = SideSummary::of(&phases);
        Side {
            name: name.to_string(),
            host_bound: HostBound::of(&phases, &summary),
            gpu_gbps_p50: summary.gpu.map(|g| gbps(bytes_moved, g.p50)),
            validation,
            voided,
            phases,
            summary,
            scopes: scopes(),
        }
    }
}

pub fn scopes() -> BTreeMap<String, String> {
    [
        ("gpu", SCOPE_GPU),
        ("e2e", SCOPE_E2E),
        ("single", SCOPE_SINGLE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// GB/s for `bytes` in `us` microseconds.
pub fn gbps(bytes: u64, us: f64) -> f64 {
    bytes as f64 / (us * 1e3)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub describe: String,
    pub layout: Layout,
    pub residency: String,
    pub groups_per_row: u32,
    pub predicted_us: f64,
}

impl PlanRecord {
    /// The record of a plan, with the cost model's prediction.
    pub fn of(
        plan: &lanefold_plan::Plan,
        features: &lanefold_plan::Features,
        target: &lanefold_plan::Target,
    ) -> PlanRecord {
        use lanefold_plan::CostPolicy;
        PlanRecord {
            describe: plan.describe(),
            layout: plan.layout,
            residency: match plan.residency {
                lanefold_plan::Residency::Registers => "registers".into(),
                lanefold_plan::Residency::Stream => "stream".into(),
            },
            groups_per_row: plan.groups_per_row,
            predicted_us: lanefold_plan::RooflinePolicy.predict_us(features, plan, target),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRecord {
    pub name: String,
    pub source_sha256: String,
    /// Relative to the results directory, when sources were captured.
    pub source_file: Option<String>,
    /// Registers per thread the driver reports for the loaded kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registers_per_thread: Option<u32>,
    /// Local memory per thread (spills, stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bytes_per_thread: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub op: String,
    /// Per-column inputs left out (`bench --no-weight/--no-bias`); absent
    /// for PyTorch's default modules, which every replay and peer assumes.
    #[serde(default, skip_serializing_if = "is_default_options")]
    pub options: OperatorOptions,
    pub dtype: String,
    pub shape: String,
    pub request: LayoutRequest,
    /// The request in its schedule text form, beside the JSON above
    /// (absent from files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    pub plan: PlanRecord,
    pub kernel: Option<KernelRecord>,
    /// Inputs read once plus outputs written once.
    pub bytes_moved: u64,
    /// Order the sides ran in (alternates from case to case).
    pub order: Vec<String>,
    pub sides: Vec<Side>,
    /// `<peer>/lanefold gpu p50` and `... e2e p50`: above 1, lanefold is faster.
    pub ratios: BTreeMap<String, f64>,
}

fn is_default_options(o: &OperatorOptions) -> bool {
    *o == OperatorOptions::default()
}

impl CaseResult {
    /// The operator as benched: `rmsnorm`, or `rmsnorm(no weight)`.
    pub fn op_label(&self) -> String {
        match self.op.parse::<lanefold_ir::Operator>() {
            Ok(op) => self.options.label(op),
            Err(_) => self.op.clone(),
        }
    }

    pub fn side(&self, name: &str) -> Option<&Side> {
        self.sides.iter().find(|s| s.name == name)
    }

    /// Ratios of each peer's p50 over lanefold's, per phase.
    pub fn compute_ratios(sides: &[Side]) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        let Some(native) = sides.iter().find(|s| s.name == "lanefold") else {
            return out;
        };
        for peer in sides.iter().filter(|s| s.name != "lanefold") {
            for (phase, a, b) in [
                ("gpu", peer.summary.gpu, native.summary.gpu),
                ("e2e", peer.summary.e2e, native.summary.e2e),
            ] {
                if let (Some(a), Some(b)) = (a, b) {
                    out.insert(format!("{}/lanefold {phase} p50", peer.name), a.p50 / b.p50);
                }
            }
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    pub schema: String,
    pub environment: Environment,
    pub config: PhaseConfig,
    pub cases: Vec<CaseResult>,
    /// Cases lanefold's own side could not run (`id: why`, e.g. the device
    /// out of memory): left out of `cases`, named so a run never drops
    /// one silently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<String>,
}

impl ResultsFile {
    pub fn read(path: &Path) -> anyhow::Result<ResultsFile> {
        let text = read_text(path)?;
        serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not a lanefold results file: {e}", path.display()))
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        write_json(path, self)
    }
}

/// Writes a results file atomically as compact JSON. These files are data
/// for the tools (results.md is the view for people), and compact JSON
/// halves them (a short-row replay: 3.0 -> 1.5 MB), which keeps the working
/// tree under the device tool's 64 MiB carry.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string(value)?;
    text.push('\n');
    lanefold_cpu::npy::write_atomically(path, text.as_bytes())?;
    remove_superseded_gz(path)
}

/// `…/results.json.gz` (or `…/sources/SHA.cu.gz`): where a committed
/// results file or captured kernel source is stored gzipped
/// (`scripts/compress-results.sh`), to keep the tree under the device
/// tool's carry limit.
pub fn gz_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".gz");
    path.with_file_name(name)
}

fn is_gz(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "gz")
}

/// A writer just wrote `path` (plain): a gzipped copy beside it (a
/// resumed replay of a committed directory, a source captured again) is
/// stale and would make the directory ambiguous.
pub fn remove_superseded_gz(path: &Path) -> anyhow::Result<()> {
    let gz = gz_path(path);
    match std::fs::remove_file(&gz) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(anyhow::anyhow!("{}: {e}", gz.display()))
        }
        _ => Ok(()),
    }
}

/// The file that holds a stored file's text: `path` if it exists, else
/// `path.gz`, else, for a captured source, its directory's bundle, which
/// holds other sources too: read the text through [`read_bytes`] with the
/// plain path (None: none of these). Plain wins where several exist; the
/// audit reports that case as ambiguous ([`ambiguous`]).
pub fn locate(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let gz = gz_path(path);
    if !is_gz(path) && gz.is_file() {
        return Some(gz);
    }
    let (bundle, name) = bundle_of(path)?;
    let held = read_bundle_cached(&bundle).ok()?.contains_key(&name);
    held.then_some(bundle)
}

/// A stored file in two forms (`path` and `path.gz`, or either and an
/// entry of its directory's sources bundle): readers take the first they
/// find, so which is the evidence is unclear.
pub fn ambiguous(path: &Path) -> bool {
    let forms = [path.is_file(), gz_path(path).is_file()];
    let bundled = bundle_of(path)
        .and_then(|(bundle, name)| Some(read_bundle_cached(&bundle).ok()?.contains_key(&name)))
        .unwrap_or(false);
    forms.into_iter().chain([bundled]).filter(|&f| f).count() > 1
}

/// A results directory's captured kernel sources in one file,
/// `DIR/sources.json.gz`: a JSON object from file name (`SHA.cu`) to the
/// source text. A tar header and padding per file cost more than most
/// gzipped sources, and the device tool's carry counts them: one file per
/// directory instead of hundreds keeps the tree under its 64 MiB.
pub const SOURCES_BUNDLE: &str = "sources.json.gz";

/// For `DIR/sources/SHA.cu` (or `.cu.gz`): `DIR/sources.json.gz` and the
/// entry name `SHA.cu`. None for any other path.
fn bundle_of(path: &Path) -> Option<(PathBuf, String)> {
    let parent = path.parent()?;
    if parent.file_name()? != "sources" {
        return None;
    }
    let file = path.file_name()?.to_str()?;
    let name = file.strip_suffix(".gz").unwrap_or(file);
    Some((parent.parent()?.join(SOURCES_BUNDLE), name.to_string()))
}

/// The entries of a sources bundle (read and parsed afresh).
pub fn read_bundle(bundle: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = read_text(bundle)?;
    serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: corrupt sources bundle: {e}", bundle.display()))
}

type Bundle = std::sync::Arc<BTreeMap<String, String>>;

/// [`read_bundle`] through a small cache keyed by path, length and
/// modification time: an audit reads hundreds of entries of one bundle.
fn read_bundle_cached(bundle: &Path) -> anyhow::Result<Bundle> {
    use std::sync::Mutex;
    type Key = (PathBuf, u64, Option<std::time::SystemTime>);
    static CACHE: Mutex<Vec<(Key, Bundle)>> = Mutex::new(Vec::new());
    let meta =
        std::fs::metadata(bundle).map_err(|e| anyhow::anyhow!("{}: {e}", bundle.display()))?;
    let key: Key = (bundle.to_path_buf(), meta.len(), meta.modified().ok());
    if let Some((_, b)) = CACHE
        .lock()
        .expect("bundle cache")
        .iter()
        .find(|(k, _)| *k == key)
    {
        return Ok(b.clone());
    }
    let b: Bundle = std::sync::Arc::new(read_bundle(bundle)?);
    let mut cache = CACHE.lock().expect("bundle cache");
    cache.retain(|(k, _)| k.0 != key.0);
    if cache.len() >= 4 {
        cache.remove(0);
    }
    cache.push((key, b.clone()));
    Ok(b)
}

/// The text of `DIR/sources/SHA.cu` from its directory's bundle: None
/// where the path is no captured source, there is no bundle, or the
/// bundle has no such entry.
fn bundled(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let Some((bundle, name)) = bundle_of(path) else {
        return Ok(None);
    };
    if !bundle.is_file() {
        return Ok(None);
    }
    Ok(read_bundle_cached(&bundle)?
        .get(&name)
        .map(|t| t.clone().into_bytes()))
}

/// Whether `DIR/sources/SHA.cu`'s bundle already holds exactly `text`
/// (a writer capturing it again then leaves it there).
pub fn bundle_holds(path: &Path, text: &[u8]) -> anyhow::Result<bool> {
    Ok(bundled(path)?.is_some_and(|b| b == text))
}

/// Move every captured source of results directory `dir` (`sources/*.cu`,
/// plain or gzipped) into its bundle, merged with the entries already
/// there, written atomically and read back before any file is removed;
/// the emptied `sources/` goes too. Deterministic: sorted names, compact
/// JSON, a gzip header without name or time. Returns how many sources
/// moved (0: nothing to do). A name held twice with different texts is an
/// error, and nothing is changed.
pub fn bundle_sources(dir: &Path) -> anyhow::Result<usize> {
    let sources = dir.join("sources");
    let bundle = dir.join(SOURCES_BUNDLE);
    let mut map = if bundle.is_file() {
        read_bundle(&bundle)?
    } else {
        BTreeMap::new()
    };
    let Ok(listing) = std::fs::read_dir(&sources) else {
        return Ok(0);
    };
    let mut files = vec![];
    for entry in listing {
        let path = entry?.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        let name = file.strip_suffix(".gz").unwrap_or(file);
        if !name.ends_with(".cu") || name.starts_with('.') {
            continue;
        }
        let text = String::from_utf8(read_bytes(&path)?)
            .map_err(|e| anyhow::anyhow!("{}: not UTF-8: {e}", path.display()))?;
        match map.get(name) {
            Some(held) if *held != text => anyhow::bail!(
                "{}: differs from the entry {name} of {} (keep one)",
                path.display(),
                bundle.display()
            ),
            _ => {
                map.insert(name.to_string(), text);
            }
        }
        files.push(path);
    }
    if files.is_empty() {
        return Ok(0);
    }
    let json = serde_json::to_string(&map)?;
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(vec![], flate2::Compression::best());
    std::io::Write::write_all(&mut gz, json.as_bytes())?;
    lanefold_cpu::npy::write_atomically(&bundle, &gz.finish()?)?;
    if read_bundle(&bundle)? != map {
        anyhow::bail!("{}: did not read back as written", bundle.display());
    }
    for f in &files {
        std::fs::remove_file(f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
    }
    let _ = std::fs::remove_dir(&sources);
    Ok(files.len())
}

/// The bytes of a results, replay or search file or a captured kernel
/// source, named by its plain path (`…/results.json`, `…/sources/SHA.cu`):
/// that file if it exists, else `path.gz` decompressed (a path ending in
/// `.gz` is decompressed too), else a source's entry in its directory's
/// bundle ([`SOURCES_BUNDLE`]). Every reader of these files goes through
/// here, and recorded `file_sha256`s and `source_sha256`s are over the
/// bytes it returns, so compressing a file changes no hash.
pub fn read_bytes(path: &Path) -> anyhow::Result<Vec<u8>> {
    let (found, raw) = match std::fs::read(path) {
        Ok(raw) => (path.to_path_buf(), raw),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !is_gz(path) => {
            let gz = gz_path(path);
            match std::fs::read(&gz) {
                Ok(raw) => (gz, raw),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if let Some(bytes) = bundled(path)? {
                        return Ok(bytes);
                    }
                    anyhow::bail!("{}: no such file (nor {})", path.display(), gz.display())
                }
                Err(e) => anyhow::bail!("{}: {e}", gz.display()),
            }
        }
        Err(e) => anyhow::bail!("{}: {e}", path.display()),
    };
    if !is_gz(&found) {
        return Ok(raw);
    }
    let mut bytes = vec![];
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("{}: corrupt gzip: {e}", found.display()))?;
    Ok(bytes)
}

/// [`read_bytes`] as UTF-8 text.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    String::from_utf8(read_bytes(path)?)
        .map_err(|e| anyhow::anyhow!("{}: not UTF-8: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_numpy_linear_quantiles() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.p50, s.min, s.max), (2.5, 1.0, 4.0));
        assert_eq!((s.q1, s.q3), (1.75, 3.25));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn an_invalid_side_loses_its_samples() {
        let v = Validation {
            outputs: vec![],
            pass: false,
        };
        let p = PhaseRecord {
            e2e: vec![BatchSample {
                batch: 1,
                total_us: 3.0,
            }],
            ..Default::default()
        };
        let s = Side::new("lanefold", v, p, 100);
        assert!(s.voided && s.phases.e2e.is_empty() && s.summary.e2e.is_none());
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::GzEncoder::new(vec![], flate2::Compression::best());
        z.write_all(bytes).unwrap();
        z.finish().unwrap()
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("lanefold-results-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_plain_then_gzipped_and_names_what_it_tried() {
        let d = fresh_dir("read");
        let path = d.join("results.json");
        let text = "{\"schema\":\"x\"}\n";
        // Neither: both names in the error.
        let e = read_bytes(&path).unwrap_err().to_string();
        assert!(
            e.contains("results.json:") && e.contains("results.json.gz"),
            "{e}"
        );
        assert!(locate(&path).is_none());
        // Gzipped only: the JSON text, by the plain name or the .gz one.
        std::fs::write(gz_path(&path), gzip(text.as_bytes())).unwrap();
        assert_eq!(read_text(&path).unwrap(), text);
        assert_eq!(read_text(&gz_path(&path)).unwrap(), text);
        assert_eq!(locate(&path), Some(gz_path(&path)));
        // Both: plain wins (the audit calls it ambiguous).
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(read_text(&path).unwrap(), "{}");
        assert_eq!(locate(&path), Some(path.clone()));
        // Plain only.
        std::fs::remove_file(gz_path(&path)).unwrap();
        assert_eq!(read_text(&path).unwrap(), "{}");
        // A missing .gz path is not looked for as .gz.gz.
        let e = read_bytes(&gz_path(&path)).unwrap_err().to_string();
        assert!(
            e.contains("results.json.gz:") && !e.contains(".gz.gz"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_corrupt_gzip_is_an_error_naming_the_file() {
        let d = fresh_dir("corrupt");
        let path = d.join("results.json");
        let mut z = gzip(br#"{"schema":"lanefold-results/1"}"#);
        // A flipped payload byte (the CRC catches it), a truncation, and
        // bytes that are no gzip at all.
        let n = z.len();
        z[n / 2] ^= 0xff;
        let garbage: [&[u8]; 3] = [&z, &gzip(b"{}")[..12], b"not gzip"];
        for bytes in garbage {
            std::fs::write(gz_path(&path), bytes).unwrap();
            let e = read_bytes(&path).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{}: corrupt gzip", gz_path(&path).display())),
                "{e}"
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn writing_the_plain_file_removes_a_stale_gzipped_copy() {
        let d = fresh_dir("write");
        let path = d.join("results.json");
        std::fs::write(gz_path(&path), gzip(b"{\"old\":1}\n")).unwrap();
        write_json(&path, &serde_json::json!({"new": 2})).unwrap();
        assert!(!gz_path(&path).exists());
        assert_eq!(read_text(&path).unwrap(), "{\"new\":2}\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bundled_sources_read_back_exactly_and_bundling_is_idempotent() {
        let d = fresh_dir("bundle");
        let src = d.join("sources");
        std::fs::create_dir_all(&src).unwrap();
        let (a, b) = ("__global__ void a() {}\n", "__global__ void b() {}\n");
        std::fs::write(src.join("aa.cu"), a).unwrap();
        std::fs::write(src.join("bb.cu.gz"), gzip(b.as_bytes())).unwrap();
        assert_eq!(bundle_sources(&d).unwrap(), 2);
        // The files are gone, the texts read back by their plain names.
        assert!(!src.exists());
        assert_eq!(read_text(&src.join("aa.cu")).unwrap(), a);
        assert_eq!(read_text(&src.join("bb.cu")).unwrap(), b);
        assert_eq!(locate(&src.join("aa.cu")), Some(d.join(SOURCES_BUNDLE)));
        assert!(locate(&src.join("cc.cu")).is_none());
        let e = read_bytes(&src.join("cc.cu")).unwrap_err().to_string();
        assert!(e.contains("cc.cu: no such file"), "{e}");
        // Nothing left to move: unchanged bytes.
        let first = std::fs::read(d.join(SOURCES_BUNDLE)).unwrap();
        assert_eq!(bundle_sources(&d).unwrap(), 0);
        assert_eq!(std::fs::read(d.join(SOURCES_BUNDLE)).unwrap(), first);
        // A later capture merges in; the same texts give the same bytes.
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("cc.cu"), "c").unwrap();
        assert!(!ambiguous(&src.join("aa.cu")));
        std::fs::write(src.join("aa.cu"), a).unwrap();
        // A source both loose and bundled is two forms of one file.
        assert!(ambiguous(&src.join("aa.cu")));
        assert!(bundle_holds(&src.join("aa.cu"), a.as_bytes()).unwrap());
        assert!(!bundle_holds(&src.join("aa.cu"), b"other").unwrap());
        assert_eq!(bundle_sources(&d).unwrap(), 2);
        assert_eq!(read_text(&src.join("cc.cu")).unwrap(), "c");
        let e2 = fresh_dir("bundle-same");
        std::fs::create_dir_all(e2.join("sources")).unwrap();
        for (name, text) in [("aa.cu", a), ("bb.cu", b), ("cc.cu", "c")] {
            std::fs::write(e2.join("sources").join(name), text).unwrap();
        }
        bundle_sources(&e2).unwrap();
        assert_eq!(
            std::fs::read(e2.join(SOURCES_BUNDLE)).unwrap(),
            std::fs::read(d.join(SOURCES_BUNDLE)).unwrap()
        );
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&e2).unwrap();
    }

    #[test]
    fn a_bundle_conflict_or_corruption_is_an_error_and_changes_nothing() {
        let d = fresh_dir("bundle-conflict");
        let src = d.join("sources");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("aa.cu"), "one").unwrap();
        bundle_sources(&d).unwrap();
        let before = std::fs::read(d.join(SOURCES_BUNDLE)).unwrap();
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("aa.cu"), "two").unwrap();
        let e = bundle_sources(&d).unwrap_err().to_string();
        assert!(e.contains("differs from the entry aa.cu"), "{e}");
        assert_eq!(std::fs::read(d.join(SOURCES_BUNDLE)).unwrap(), before);
        assert!(src.join("aa.cu").exists());
        std::fs::remove_file(src.join("aa.cu")).unwrap();
        // A bundle that is no JSON object of texts says so.
        std::fs::write(d.join(SOURCES_BUNDLE), gzip(b"[1, 2]")).unwrap();
        let e = read_bytes(&src.join("aa.cu")).unwrap_err().to_string();
        assert!(e.contains("corrupt sources bundle"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
