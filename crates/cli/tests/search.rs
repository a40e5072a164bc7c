//! `lanefold search`, `lanefold tune` and `lanefold audit` over search
//! files, on the CPU backend: budgeting over the Cartesian product, the
//! explicit objective, the tuning cache filled by two processes at once,
//! and the audit of a tampered search file.

mod common;

use common::{lanefold, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    common::tmp("search-cli", name)
}

fn search(dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["search", "--output", dir.to_str().unwrap()];
    args.extend(common::FAST_CPU);
    args.extend(extra);
    let o = lanefold(&args);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

fn statuses(problem: &Value) -> Vec<(String, bool)> {
    problem["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_string(),
                !c["side"].is_null(),
            )
        })
        .collect()
}

#[test]
fn search_budgets_the_product_and_audits_clean_then_fails_when_tampered() {
    let dir = tmp("budget");
    let v = search(
        &dir,
        &[
            "--ops",
            "rmsnorm",
            "--shapes",
            "4x64",
            "--tune-workers",
            "0,32,128,256",
            "--tune-pack",
            "1,2,4",
            "--max-candidates",
            "4",
            "--capture-sources",
        ],
    );
    assert_eq!(v["schema"], "lanefold-search/1");
    assert_eq!(v["objective"], "host-wall", "host-wall is the default");
    let p = &v["problems"][0];
    let s = statuses(p);
    // The automatic mapping joins the product when it is not one of its 12.
    let auto_added = p["candidates"][p["automatic"].as_u64().unwrap() as usize]["added"] == true;
    assert_eq!(s.len(), 12 + auto_added as usize);
    let measured = s.iter().filter(|x| x.1).count();
    let over = s.iter().filter(|x| x.0 == "over_budget").count();
    let auto_in_top = {
        let auto = p["automatic"].as_u64().unwrap() as usize;
        p["candidates"][auto]["predicted_rank"].as_u64().unwrap() <= 4
    };
    assert_eq!(measured, if auto_in_top { 4 } else { 5 }, "{s:?}");
    assert_eq!(over + measured, s.len(), "{s:?}");
    assert!(!p["winner"].is_null());
    assert!(p["winner"]["fresh_p50"].as_f64().unwrap() > 0.0);
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap();
    assert!(
        md.contains("over budget") && md.contains("**winner**"),
        "{md}"
    );

    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    // A changed raw sample fails the audit, naming the case.
    let mut t = v.clone();
    let c = s.iter().position(|x| x.1).unwrap();
    let sample = &mut t["problems"][0]["candidates"][c]["side"]["phases"]["e2e"][1]["total_us"];
    *sample = serde_json::json!(sample.as_f64().unwrap() * 5.0 + 100.0);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&t).unwrap(),
    )
    .unwrap();
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("case rmsnorm/f32/4x64: "), "{}", text(&o));
}

#[test]
fn gpu_objective_on_the_cpu_rejects_every_candidate_and_has_no_winner() {
    let dir = tmp("gpu");
    let v = search(
        &dir,
        &[
            "--ops",
            "softmax",
            "--shapes",
            "3x257",
            "--tune-workers",
            "0,32",
            "--tune-pack",
            "1,4",
            "--tuning-metric",
            "gpu",
        ],
    );
    assert_eq!(v["objective"], "gpu");
    let p = &v["problems"][0];
    let cands = p["candidates"].as_array().unwrap();
    let measured: Vec<&Value> = cands.iter().filter(|c| !c["side"].is_null()).collect();
    assert!(!measured.is_empty());
    for c in measured {
        assert_eq!(c["status"], "rejected");
        assert_eq!(c["reason"], "objective phase absent");
        assert!(c["objective_p50"].is_null());
    }
    assert!(p["winner"].is_null());
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap();
    assert!(md.contains("No winner"), "{md}");
    let o = lanefold(&["audit", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn two_tune_processes_at_once_both_land_in_the_cache() {
    let root = tmp("tune");
    let cache = root.join("cache").join("tuning.json");
    let spawn = |shape: &str, out: &str| {
        let mut args: Vec<String> = [
            "tune",
            "--ops",
            "rmsnorm",
            "--shapes",
            shape,
            "--tune-workers",
            "0,32",
            "--tune-pack",
            "1,2",
            "--cache",
            cache.to_str().unwrap(),
            "--output",
            root.join(out).to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(common::FAST_CPU.iter().map(|s| s.to_string()));
        Command::new(env!("CARGO_BIN_EXE_lanefold"))
            .args(&args)
            .output()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| spawn("4x64", "a").unwrap());
        let b = s.spawn(|| spawn("3x257", "b").unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.status.success(), "{}", text(&a));
    assert!(b.status.success(), "{}", text(&b));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    let keys: Vec<&String> = v["entries"].as_object().unwrap().keys().collect();
    assert!(
        keys.contains(&&"cpu|rmsnorm|f32|4|64".to_string()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&&"cpu|rmsnorm|f32|4|257".to_string()),
        "{keys:?}"
    );

    // A corrupt cache is reported and ignored, then rewritten.
    std::fs::write(&cache, "not json").unwrap();
    let o = spawn("4x64", "c").unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("corrupt"), "{}", text(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    assert_eq!(v["entries"].as_object().unwrap().len(), 1);
}

/// `run --autotune`: the first call of a problem the cache does not cover
/// searches within its budget, records the winner and runs with it; the
/// next call finds it and searches nothing; the search it wrote audits.
#[test]
fn run_autotune_searches_an_uncovered_problem_once() {
    let root = tmp("autotune");
    std::fs::create_dir_all(&root).unwrap();
    let cache = root.join("tuning.json");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lanefold"))
            .args([
                "run",
                "--op",
                "softmax",
                "--shape",
                "8x300",
                "--backend",
                "cpu",
            ])
            .args(extra)
            .env("LANEFOLD_TUNING_CACHE", &cache)
            .env("TMPDIR", &root)
            .output()
            .unwrap()
    };
    let first = run(&["--autotune", "30"]);
    assert!(first.status.success(), "{}", text(&first));
    let out = text(&first);
    assert!(out.contains("autotune: "), "{out}");
    assert!(out.contains("recorded"), "{out}");
    assert!(out.contains("layout from the tuning cache"), "{out}");
    assert!(out.contains("validated against float64"), "{out}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    let entry = &v["entries"]["cpu|softmax|f32|8|300"];
    assert!(entry.is_object(), "{v}");
    let searched = PathBuf::from(entry["results"].as_str().unwrap());
    let o = lanefold(&["audit", searched.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    let second = run(&["--autotune", "30"]);
    assert!(second.status.success(), "{}", text(&second));
    let out = text(&second);
    assert!(out.contains("covers this problem; no search"), "{out}");
    assert!(!out.contains("recorded"), "{out}");

    let given = run(&["--autotune", "30", "--workers", "32"]);
    assert!(
        text(&given).contains("the layout is given"),
        "{}",
        text(&given)
    );
    let bad = run(&["--autotune", "-1"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}
