//! `lanefold bench` on the CPU and `lanefold audit` over what it wrote:
//! a clean file passes; a changed raw sample, a changed summary, a changed
//! captured source or a false validation record fails, naming the case.

mod common;

use common::{lanefold, load, save, text};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn bench_dir(name: &str) -> PathBuf {
    let dir = common::tmp("bench", name);
    let mut args = vec!["bench"];
    args.extend_from_slice(&common::FAST_CPU);
    args.extend_from_slice(&[
        "--ops",
        "sum,softmax",
        "--shapes",
        "3x64,2x257",
        "--dtypes",
        "f32,bf16",
        "--output",
        dir.to_str().unwrap(),
    ]);
    let o = lanefold(&args);
    assert!(o.status.success(), "{}", text(&o));
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn cpu_bench_writes_an_auditable_file_with_the_gpu_phase_absent() {
    let dir = bench_dir("clean");
    let v = load(&dir);
    assert_eq!(v["schema"], "lanefold-results/1");
    assert_eq!(v["cases"].as_array().unwrap().len(), 8);
    let side = &v["cases"][0]["sides"][0];
    assert_eq!(side["name"], "lanefold");
    assert!(
        side["phases"]["gpu"].is_null(),
        "gpu phase must be absent on the CPU"
    );
    assert_eq!(side["phases"]["e2e"].as_array().unwrap().len(), 3);
    assert!(dir.join("results.md").exists() && dir.join("plot.svg").exists());
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap();
    assert!(md.contains("Method.") && md.contains("softmax"), "{md}");
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_changed_raw_sample_fails_the_audit_naming_the_case() {
    let dir = bench_dir("sample");
    let mut v = load(&dir);
    let id = v["cases"][2]["id"].as_str().unwrap().to_string();
    let s = &mut v["cases"][2]["sides"][0]["phases"]["e2e"][1]["total_us"];
    *s = Value::from(s.as_f64().unwrap() * 1.5 + 1.0);
    save(&dir, &v);
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("case {id}: lanefold: e2e summary")),
        "{}",
        text(&o)
    );
}

#[test]
fn a_false_validation_record_or_missing_scope_fails_the_audit() {
    let dir = bench_dir("validation");
    let mut v = load(&dir);
    v["cases"][1]["sides"][0]["validation"]["outputs"][0]["rel_err"] = Value::from(0.5);
    v["cases"][3]["sides"][0]["scopes"]["gpu"] = Value::from("kernel time");
    save(&dir, &v);
    let out = text(&lanefold(&["audit", dir.to_str().unwrap()]));
    assert!(out.contains("contradicts its errors"), "{out}");
    assert!(out.contains("scope label for gpu"), "{out}");
}

/// Files written before the host clock of the single call left the end
/// event out keep their own label, which the audit still accepts; any other
/// label fails.
#[test]
fn the_audit_accepts_the_earlier_single_call_label_and_no_other() {
    let dir = bench_dir("single-label");
    let mut v = load(&dir);
    v["cases"][0]["sides"][0]["scopes"]["single"] =
        Value::from("single: one synchronized call; gpu = device events, host = wall clock (µs)");
    save(&dir, &v);
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    v["cases"][1]["sides"][0]["scopes"]["single"] = Value::from("single: host time");
    save(&dir, &v);
    let out = text(&lanefold(&["audit", dir.to_str().unwrap()]));
    assert!(out.contains("scope label for single"), "{out}");
}

#[test]
fn a_changed_captured_source_fails_its_hash_check() {
    let dir = bench_dir("source");
    // Attach a captured source to a case, as a CUDA bench does.
    let source = "extern \"C\" __global__ void k() {}\n";
    let sha = {
        use sha2::{Digest, Sha256};
        format!("{:x}", Sha256::digest(source.as_bytes()))
    };
    std::fs::create_dir_all(dir.join("sources")).unwrap();
    let rel = format!("sources/{sha}.cu");
    std::fs::write(dir.join(&rel), source).unwrap();
    let mut v = load(&dir);
    v["cases"][0]["kernel"] =
        serde_json::json!({"name": "k", "source_sha256": sha, "source_file": rel});
    save(&dir, &v);
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(dir.join(&rel), source.replace("k()", "k2()")).unwrap();
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("hashes to"), "{}", text(&o));
}

#[test]
fn committed_results_fail_the_audit_when_a_raw_sample_changes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text_json) = lanefold_measure::results::read_text(&dir.join("results.json")) else {
            continue;
        };
        let v: Value = serde_json::from_str(&text_json).unwrap();
        if v["schema"] != "lanefold-results/1" {
            continue;
        }
        let copy = std::env::temp_dir().join(format!(
            "lanefold-committed-{}-{}",
            std::process::id(),
            dir.file_name().unwrap().to_string_lossy()
        ));
        copy_dir(&dir, &copy);
        if dir.join("sources").exists() {
            copy_dir(&dir.join("sources"), &copy.join("sources"));
        }
        assert!(lanefold(&["audit", copy.to_str().unwrap()])
            .status
            .success());
        let mut t = v.clone();
        let case = t["cases"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| {
                c["sides"][0]["phases"]["e2e"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
            })
            .expect("a case with samples");
        let id = t["cases"][case]["id"].as_str().unwrap().to_string();
        let s = &mut t["cases"][case]["sides"][0]["phases"]["e2e"][0]["total_us"];
        *s = Value::from(s.as_f64().unwrap() * 3.0);
        save(&copy, &t);
        let o = lanefold(&["audit", copy.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(text(&o).contains(&format!("case {id}")), "{}", text(&o));
        // A changed captured source (plain, gzipped or bundled; written
        // back plain, a bundle unpacked into plain files) fails its hash
        // check.
        if let Some(rel) = v["cases"][0]["kernel"]["source_file"].as_str() {
            save(&copy, &v);
            let path = copy.join(rel);
            let mut src = lanefold_measure::results::read_text(&path).unwrap();
            src.push_str("// edited\n");
            let bundle = copy.join(lanefold_measure::results::SOURCES_BUNDLE);
            if bundle.is_file() {
                let entries = lanefold_measure::results::read_bundle(&bundle).unwrap();
                std::fs::create_dir_all(copy.join("sources")).unwrap();
                for (name, text) in entries {
                    std::fs::write(copy.join("sources").join(name), text).unwrap();
                }
                std::fs::remove_file(&bundle).unwrap();
            }
            let _ = std::fs::remove_file(lanefold_measure::results::gz_path(&path));
            std::fs::write(&path, src).unwrap();
            let o = lanefold(&["audit", copy.to_str().unwrap()]);
            assert!(text(&o).contains("hashes to"), "{}", text(&o));
        }
        checked += 1;
    }
    // bench/results/2026-11-29-baseline-h200 at least.
    assert!(checked >= 1, "no committed lanefold-results/1 file found");
}

/// Committed Nsight Compute probes: the audit passes them as they are and
/// fails, naming the launch, when a raw duration is changed; `counters`
/// tabulates them from the raw pages.
#[test]
fn committed_counter_probes_fail_the_audit_when_a_raw_duration_changes() {
    use std::io::{Read, Write};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/probes");
    let dir = root.join("2026-12-01-ncu-long-h200");
    let o = lanefold(&["counters", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("| ln-bf16 | `lf_layernorm_bf16_w4096_v8_u4_g1_c8_pk_pr_om` | 293.38 |"),
        "{}",
        text(&o)
    );
    let copy = common::tmp("counters", "committed");
    copy_dir(&dir, &copy);
    let o = lanefold(&["audit", copy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    let page = copy.join("ln-bf16-raw.csv.gz");
    let mut csv = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&page).unwrap())
        .read_to_string(&mut csv)
        .unwrap();
    let mut rows: Vec<String> = csv.lines().map(str::to_string).collect();
    let header: Vec<&str> = rows[0].split("\",\"").collect();
    let column = header
        .iter()
        .position(|h| h.trim_matches('"') == "gpu__time_duration.sum")
        .unwrap();
    let mut values: Vec<String> = rows[2].split("\",\"").map(str::to_string).collect();
    assert_eq!(values[column], "293.376000");
    values[column] = "263.376000".into();
    rows[2] = values.join("\",\"");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&page).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all((rows.join("\n") + "\n").as_bytes()).unwrap();
    gz.finish().unwrap();
    let o = lanefold(&["audit", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("ln-bf16: details Duration 293.38 us"),
        "{}",
        text(&o)
    );
}
