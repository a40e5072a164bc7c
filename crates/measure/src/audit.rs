//! The audit: recomputes every summary, bandwidth and ratio from the raw
//! samples in a results directory, with its own arithmetic (not the
//! writer's), and checks validation records, voiding, scope labels,
//! captured-source hashes and the schema. Each discrepancy names its case.

use crate::phases::BatchSample;
use crate::results::{
    ResultsFile, Side, SCHEMA, SCOPE_E2E, SCOPE_GPU, SCOPE_SINGLE, SCOPE_SINGLE_V1,
    SCOPE_SINGLE_V2, SCOPE_SINGLE_V3, SCOPE_SINGLE_V4, SCOPE_SINGLE_V5, SCOPE_SINGLE_V6,
};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Linear-interpolated quantile, written independently of
/// `results::Summary`; the audits of bench, search and replay files share it.
pub(crate) fn quantile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let h = (v.len() as f64 - 1.0) * p;
    let lo = h.floor() as usize;
    let frac = h - lo as f64;
    Some(if lo + 1 < v.len() {
        v[lo] * (1.0 - frac) + v[lo + 1] * frac
    } else {
        v[lo]
    })
}

/// Equal up to 1e-9, relative for magnitudes above 1, absolute below.
pub(crate) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

pub(crate) fn close_opt(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => close(a, b),
        _ => false,
    }
}

pub(crate) fn per_op_us(s: &[BatchSample]) -> Vec<f64> {
    s.iter().map(|b| b.total_us / b.batch as f64).collect()
}

pub(crate) fn is_sha(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// One side checked against itself: validation records consistent with
/// their errors, voiding consistent with validation (and a voided side
/// without samples), scope labels intact, samples well formed, every
/// summary recomputed from the raw samples, and (given the bytes moved)
/// the gpu GB/s.
pub(crate) fn audit_side(
    who: &str,
    side: &Side,
    bytes_moved: Option<u64>,
    bad: &mut dyn FnMut(String),
) {
    let mut all = !side.validation.outputs.is_empty();
    for o in &side.validation.outputs {
        let should = o.elements > 0 && o.nonfinite == 0 && o.rel_err <= o.tolerance;
        if o.pass != should {
            bad(format!(
                "{who}: output '{}' pass={} contradicts its errors",
                o.name, o.pass
            ));
        }
        all &= o.pass;
    }
    if side.validation.pass != all {
        bad(format!(
            "{who}: validation pass={} contradicts its outputs",
            side.validation.pass
        ));
    }
    if side.voided == side.validation.pass {
        bad(format!(
            "{who}: voided={} but validation pass={}",
            side.voided, side.validation.pass
        ));
    }
    let p = &side.phases;
    let has_samples =
        p.gpu.as_ref().is_some_and(|g| !g.is_empty()) || !p.e2e.is_empty() || !p.single.is_empty();
    if side.voided && has_samples {
        bad(format!("{who}: invalid output but timing samples kept"));
    }
    for (k, labels) in [
        ("gpu", &[SCOPE_GPU][..]),
        ("e2e", &[SCOPE_E2E][..]),
        (
            "single",
            &[
                SCOPE_SINGLE,
                SCOPE_SINGLE_V6,
                SCOPE_SINGLE_V5,
                SCOPE_SINGLE_V4,
                SCOPE_SINGLE_V3,
                SCOPE_SINGLE_V2,
                SCOPE_SINGLE_V1,
            ][..],
        ),
    ] {
        if !side
            .scopes
            .get(k)
            .is_some_and(|v| labels.contains(&v.as_str()))
        {
            bad(format!("{who}: scope label for {k} missing or altered"));
        }
    }
    for b in p.gpu.iter().flatten().chain(&p.e2e) {
        if b.batch == 0 || !b.total_us.is_finite() || b.total_us <= 0.0 {
            bad(format!("{who}: malformed sample {b:?}"));
        }
    }
    let gpu = p.gpu.as_deref().map(per_op_us).unwrap_or_default();
    let e2e = per_op_us(&p.e2e);
    let sg: Vec<f64> = p.single.iter().filter_map(|s| s.gpu_us).collect();
    let sh: Vec<f64> = p.single.iter().map(|s| s.host_us).collect();
    let s = &side.summary;
    for (phase, raw, rec) in [
        ("gpu", &gpu, s.gpu),
        ("e2e", &e2e, s.e2e),
        ("single_gpu", &sg, s.single_gpu),
        ("single_host", &sh, s.single_host),
    ] {
        match (rec, quantile(raw, 0.5)) {
            (None, None) => {}
            (Some(r), Some(p50)) => {
                let min = raw.iter().cloned().fold(f64::INFINITY, f64::min);
                let max = raw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let (q1, q3) = (quantile(raw, 0.25).unwrap(), quantile(raw, 0.75).unwrap());
                if r.n != raw.len()
                    || !close(r.p50, p50)
                    || !close(r.min, min)
                    || !close(r.max, max)
                    || !close(r.q1, q1)
                    || !close(r.q3, q3)
                    || !close(r.iqr, q3 - q1)
                {
                    bad(format!(
                        "{who}: {phase} summary does not match its raw samples (recorded p50 {}, recomputed {p50})",
                        r.p50
                    ));
                }
            }
            (r, q) => bad(format!(
                "{who}: {phase} summary {r:?} but raw samples give {q:?}"
            )),
        }
    }
    if let Some(bytes) = bytes_moved {
        match (side.gpu_gbps_p50, quantile(&gpu, 0.5)) {
            (Some(g), Some(t)) if close(g, bytes as f64 / (t * 1e3)) => {}
            (None, None) => {}
            (g, _) => bad(format!(
                "{who}: gpu GB/s {g:?} does not follow from bytes and p50"
            )),
        }
    }
}

/// What is wrong with captured source `rel` of `dir` (`sources/SHA.cu`,
/// plain or gzipped) against its recorded SHA-256, taken over the
/// decompressed text; None: nothing.
pub(crate) fn captured_source_problem(dir: &Path, rel: &str, recorded: &str) -> Option<String> {
    let path = dir.join(rel);
    if crate::results::ambiguous(&path) {
        return Some(format!(
            "captured source {rel}: both {rel} and {rel}.gz (ambiguous; keep one)"
        ));
    }
    match crate::results::read_bytes(&path) {
        Ok(bytes) => {
            let h = format!("{:x}", Sha256::digest(&bytes));
            (h != recorded)
                .then(|| format!("captured source {rel} hashes to {h}, recorded {recorded}"))
        }
        Err(e) => Some(format!("captured source {rel}: {e}")),
    }
}

/// Audit one results directory; returns the discrepancies (empty: clean).
pub fn audit_dir(dir: &Path) -> Vec<String> {
    let results = dir.join("results.json");
    let selftest = dir.join("selftest.log");
    if crate::results::locate(&results).is_some() {
        // Readers would take the plain file; which one is the evidence?
        if crate::results::ambiguous(&results) {
            return vec![format!(
                "{}: both results.json and results.json.gz (ambiguous; keep one)",
                dir.display()
            )];
        }
        let text = match crate::results::read_text(&results) {
            Ok(t) => t,
            Err(e) => return vec![format!("{e}")],
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return vec![format!("{}: corrupt JSON: {e}", results.display())],
        };
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => match ResultsFile::read(&results) {
                Ok(file) => audit_results(dir, &file),
                Err(e) => vec![format!("{e}")],
            },
            Some("lanefold-speed/1") => audit_speed(&value),
            Some(crate::search::SEARCH_SCHEMA) => crate::search::audit_search(dir, &value),
            Some(crate::replay::SCHEMA) => crate::replay::audit_replay(dir, &value),
            other => vec![format!("{}: unknown schema {other:?}", results.display())],
        }
    } else if selftest.exists() {
        audit_selftest(dir)
    } else if let Some(probes) = latency_files(dir) {
        probes
            .iter()
            .flat_map(|path| {
                let name = path.file_name().map_or("?".into(), |n| n.to_string_lossy());
                audit_latency_file(path)
                    .into_iter()
                    .map(move |f| format!("{name}: {f}"))
            })
            .collect()
    } else if let Some(pages) = crate::counters::counter_files(dir) {
        pages
            .iter()
            .flat_map(|p| crate::counters::audit_counters_file(p))
            .collect()
    } else if let Some(runs) = run_dirs(dir) {
        // A campaign: one directory per run (A B B A orders, one schedule each).
        runs.iter().flat_map(|run| audit_dir(run)).collect()
    } else {
        vec![format!(
            "{}: neither results.json(.gz) nor selftest.log",
            dir.display()
        )]
    }
}

fn audit_results(dir: &Path, file: &ResultsFile) -> Vec<String> {
    let mut out = vec![];
    let mut ids = std::collections::HashSet::new();
    if !is_sha(&file.environment.binary_sha256) {
        out.push("environment: binary_sha256 is not a SHA-256".to_string());
    }
    for case in &file.cases {
        let id = &case.id;
        let mut bad = |m: String| out.push(format!("case {id}: {m}"));
        if !ids.insert(id.clone()) {
            bad("duplicate case id".into());
        }
        if !case.sides.iter().any(|s| s.name == "lanefold") {
            bad("no lanefold side".into());
        }
        let mut p50s = std::collections::BTreeMap::new();
        for side in &case.sides {
            let name = &side.name;
            audit_side(name, side, Some(case.bytes_moved), &mut bad);
            let gpu_p50 = side
                .phases
                .gpu
                .as_deref()
                .and_then(|g| quantile(&per_op_us(g), 0.5));
            let e2e_p50 = quantile(&per_op_us(&side.phases.e2e), 0.5);
            p50s.insert(name.clone(), (gpu_p50, e2e_p50));
        }
        // Ratios.
        if let Some((ng, ne)) = p50s.get("lanefold").copied() {
            let mut expected = std::collections::BTreeMap::new();
            for (name, (g, e)) in &p50s {
                if name == "lanefold" {
                    continue;
                }
                if let (Some(a), Some(b)) = (g, ng) {
                    expected.insert(format!("{name}/lanefold gpu p50"), a / b);
                }
                if let (Some(a), Some(b)) = (e, ne) {
                    expected.insert(format!("{name}/lanefold e2e p50"), a / b);
                }
            }
            let keys_match = expected.keys().eq(case.ratios.keys());
            if !keys_match || expected.iter().any(|(k, v)| !close(*v, case.ratios[k])) {
                bad(format!(
                    "ratios {:?} do not follow from the raw samples ({expected:?})",
                    case.ratios
                ));
            }
        }
        if let Some(k) = &case.kernel {
            if !is_sha(&k.source_sha256) {
                bad("kernel source_sha256 is not a SHA-256".into());
            }
            if let Some(f) = &k.source_file {
                if let Some(m) = captured_source_problem(dir, f, &k.source_sha256) {
                    bad(m);
                }
            }
        }
    }
    out
}

fn audit_speed(v: &serde_json::Value) -> Vec<String> {
    let mut out = vec![];
    let Some(cases) = v.get("cases").and_then(|c| c.as_array()) else {
        return vec!["speed file: no cases".into()];
    };
    for c in cases {
        let id = format!(
            "{}/{}/{}",
            c["op"].as_str().unwrap_or("?"),
            c["dtype"].as_str().unwrap_or("?"),
            c["shape"].as_str().unwrap_or("?")
        );
        let samples: Vec<f64> = c["gpu_us_per_op_samples"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        let valid = c["validation"]["pass"].as_bool() == Some(true);
        if !valid {
            out.push(format!("case {id}: validation did not pass"));
            continue;
        }
        let Some(p50) = quantile(&samples, 0.5) else {
            out.push(format!("case {id}: no samples"));
            continue;
        };
        let rec = c["gpu_us_per_op_p50"].as_f64().unwrap_or(f64::NAN);
        if !close(rec, p50) {
            out.push(format!(
                "case {id}: recorded p50 {rec} but samples give {p50}"
            ));
        }
        let bytes = c["bytes_moved"].as_f64().unwrap_or(f64::NAN);
        let g = c["effective_gbps_p50"].as_f64().unwrap_or(f64::NAN);
        if !close(g, bytes / (p50 * 1e3)) {
            out.push(format!(
                "case {id}: GB/s {g} does not follow from bytes and p50"
            ));
        }
    }
    out
}

/// The subdirectories of `dir` (sorted), where it holds only directories,
/// at least one, and perhaps a `README.md` saying what the campaign
/// measured; None otherwise.
fn run_dirs(dir: &Path) -> Option<Vec<std::path::PathBuf>> {
    let mut runs = vec![];
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.is_dir() {
            runs.push(path);
        } else if path.file_name().is_none_or(|n| n != "README.md") {
            return None;
        }
    }
    runs.sort();
    (!runs.is_empty()).then_some(runs)
}

/// The `lanefold-latency/1` files of a probe directory, plain or gzipped
/// (`.json`, `.json.gz`; None: none there).
fn latency_files(dir: &Path) -> Option<Vec<std::path::PathBuf>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            name.ends_with(".json") || name.ends_with(".json.gz")
        })
        .collect();
    files.sort();
    (!files.is_empty()).then_some(files)
}

/// A probe file's text, decompressed where its name ends in `.gz`.
pub(crate) fn read_probe_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    if path.extension().is_some_and(|x| x == "gz") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .map_err(|e| format!("corrupt gzip: {e}"))?;
        Ok(text)
    } else {
        String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))
    }
}

/// A launch-latency probe: every variant has the iterations the file
/// claims, and each recorded p50 follows from its raw samples.
fn audit_latency_file(path: &Path) -> Vec<String> {
    let value: serde_json::Value = match read_probe_text(path)
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("corrupt JSON: {e}")))
    {
        Ok(v) => v,
        Err(e) => return vec![e],
    };
    if value["schema"].as_str() != Some("lanefold-latency/1") {
        return vec![format!("unknown schema {:?}", value["schema"])];
    }
    let mut out = vec![];
    let iters = value["iters"].as_u64();
    let Some(probes) = value["probes"].as_array().filter(|p| !p.is_empty()) else {
        return vec!["no probes".into()];
    };
    for p in probes {
        let id = format!(
            "{} / {}",
            p["schedule"].as_str().unwrap_or("?"),
            p["variant"].as_str().unwrap_or("?")
        );
        let samples: Vec<f64> = p["host_us_samples"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        if iters != Some(samples.len() as u64) {
            out.push(format!(
                "{id}: {} samples, the file claims {iters:?} iterations",
                samples.len()
            ));
        }
        if samples.iter().any(|x| !x.is_finite() || *x <= 0.0) {
            out.push(format!("{id}: a sample is not a positive time"));
        }
        let recorded = p["host_us_p50"].as_f64();
        if !close_opt(recorded, quantile(&samples, 0.5)) {
            out.push(format!(
                "{id}: recorded p50 {recorded:?} but samples give {:?}",
                quantile(&samples, 0.5)
            ));
        }
    }
    out
}

fn audit_selftest(dir: &Path) -> Vec<String> {
    let log = match std::fs::read_to_string(dir.join("selftest.log")) {
        Ok(l) => l,
        Err(e) => return vec![format!("selftest.log: {e}")],
    };
    let fails = log.lines().filter(|l| l.starts_with("FAIL ")).count();
    let summary = log.lines().rev().find_map(|l| {
        let (p, f) = l.trim().split_once(" passed, ")?;
        Some((
            p.parse::<usize>().ok()?,
            f.strip_suffix(" failed")?.parse::<usize>().ok()?,
        ))
    });
    let mut out = vec![];
    match summary {
        None => out.push("selftest.log: no 'N passed, N failed' line".into()),
        Some((passed, failed)) => {
            if failed != fails {
                out.push(format!(
                    "selftest.log: says {failed} failed but lists {fails} FAIL lines"
                ));
            }
            if failed > 0 || passed == 0 {
                out.push(format!("selftest.log: {passed} passed, {failed} failed"));
            }
        }
    }
    match std::fs::read_to_string(dir.join("environment.txt")) {
        Ok(env)
            if env
                .split_whitespace()
                .any(|w| w.len() == 64 && w.chars().all(|c| c.is_ascii_hexdigit())) => {}
        _ => out.push("environment.txt: missing or without the binary's SHA-256".into()),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.5));
        assert_eq!(quantile(&[5.0], 0.25), Some(5.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    /// The committed probe passes; a copy with one sample changed, or a
    /// sample missing, does not.
    #[test]
    fn a_tampered_latency_probe_fails_its_audit() {
        let committed = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/probes/2026-11-30-latency-h200");
        assert_eq!(audit_dir(&committed), Vec::<String>::new());
        let dir = std::env::temp_dir().join(format!("lanefold-probe-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = read_probe_text(&committed.join("rmsnorm-1x127-f32.json.gz")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let samples = v["probes"][1]["host_us_samples"].as_array_mut().unwrap();
        for x in samples.iter_mut().take(1500) {
            *x = serde_json::json!(1.0);
        }
        v["probes"][2]["host_us_samples"]
            .as_array_mut()
            .unwrap()
            .pop();
        std::fs::write(dir.join("tampered.json"), v.to_string()).unwrap();
        let findings = audit_dir(&dir);
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            findings.iter().any(|f| f.contains("recorded p50")),
            "{findings:?}"
        );
        assert!(
            findings.iter().any(|f| f.contains("1999 samples")),
            "{findings:?}"
        );
    }

    /// A campaign directory (one subdirectory per run) is audited run by
    /// run; a run with no results in it is reported.
    #[test]
    fn a_campaign_of_runs_is_audited_run_by_run() {
        let committed = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/results/2026-12-03-cold-path-trade-h200");
        assert_eq!(audit_dir(&committed), Vec::<String>::new());
        let dir = std::env::temp_dir().join(format!("lanefold-campaign-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a1")).unwrap();
        let run = committed.join("rmsnorm-f32-4096x2048-a1/results.json.gz");
        std::fs::copy(run, dir.join("a1/results.json.gz")).unwrap();
        assert_eq!(audit_dir(&dir), Vec::<String>::new());
        // A README beside the runs says what they measured.
        std::fs::write(dir.join("README.md"), "A B B A").unwrap();
        assert_eq!(audit_dir(&dir), Vec::<String>::new());
        std::fs::create_dir_all(dir.join("b1")).unwrap();
        let findings = audit_dir(&dir);
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            findings.len() == 1 && findings[0].contains("b1"),
            "{findings:?}"
        );
    }

    /// A truncated gzipped probe is reported, not skipped or a panic.
    #[test]
    fn a_truncated_gzipped_probe_fails_its_audit() {
        let committed = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/probes/2026-11-30-latency-h200/rmsnorm-1x127-f32.json.gz");
        let bytes = std::fs::read(&committed).unwrap();
        let dir = std::env::temp_dir().join(format!("lanefold-probe-gz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cut.json.gz"), &bytes[..bytes.len() / 2]).unwrap();
        let findings = audit_dir(&dir);
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            findings.iter().any(|f| f.contains("corrupt gzip")),
            "{findings:?}"
        );
    }
}
