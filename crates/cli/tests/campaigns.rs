//! The prepared campaigns (`bench/campaigns/*.txt`, cases files of
//! `scripts/abba.sh`) stay runnable: every line names a unique case, an
//! operator, a dtype and a shape that parse, and two schedules that plan
//! legally on the H200 and give different kernels.

use lanefold_codegen::{generate, CodegenOptions};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Problem, Target};
use std::collections::BTreeSet;
use std::path::Path;

mod common;

#[test]
fn every_campaign_case_plans_both_forms_and_they_differ() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/campaigns");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "txt") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let mut names = BTreeSet::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap().trim();
            if line.is_empty() {
                continue;
            }
            let what = format!("{}: {line}", path.display());
            let parts: Vec<&str> = line.split('|').map(str::trim).collect();
            assert_eq!(parts.len(), 3, "{what}");
            let head: Vec<&str> = parts[0].split_whitespace().collect();
            assert_eq!(head.len(), 4, "{what}");
            assert!(names.insert(head[0]), "{what}: name used twice");
            let op: Operator = head[1].parse().unwrap();
            let dtype: DType = head[2].parse().unwrap();
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                dtype,
                head[3].parse().unwrap(),
            );
            let kernels: Vec<String> = parts[1..]
                .iter()
                .map(|schedule| {
                    let request: LayoutRequest = schedule.parse().unwrap();
                    let p = plan(&problem, &Target::h200(), &request)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    generate(&p, &CodegenOptions::default()).unwrap().source
                })
                .collect();
            assert_ne!(kernels[0], kernels[1], "{what}: both forms give one kernel");
        }
    }
    // No campaign pending is a state the tree may be in: each one leaves
    // once it has run.
    if files == 0 {
        eprintln!("no campaign pending in {}", dir.display());
    }
}

/// `scripts/campaigns.sh` runs several campaigns in one command, each with
/// the L2 state its header asks for, one tar each; an unknown campaign
/// stops it before anything runs.
#[test]
fn several_campaigns_run_in_one_command_each_with_its_l2() {
    let root = common::tmp("campaigns", "several");
    let cases = root.join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    let line = "r rmsnorm f32 8x29 | auto | W=32 V=1 U=1 G=8 registers\n";
    std::fs::write(cases.join("warm.txt"), format!("# L2=warm\n{line}")).unwrap();
    std::fs::write(cases.join("cold.txt"), format!("# cold inputs\n{line}")).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/campaigns.sh");
    let run = |names: &[&str]| {
        std::process::Command::new("bash")
            .arg(&script)
            .args(names)
            .env("BIN", env!("CARGO_BIN_EXE_lanefold"))
            .env("BACKEND", "cpu")
            .env("GPU_TAG", "test")
            .env("BUDGET_S", "300")
            .env("CAMPAIGNS_DIR", &cases)
            .env("OUT_ROOT", root.join("out"))
            .env("TAR_TO", root.join("tars"))
            .env_remove("L2")
            .output()
            .unwrap()
    };
    let missing = run(&["warm", "absent"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(!root.join("out").exists(), "ran before refusing");

    let out = run(&["warm", "cold:250"]);
    let text = common::text(&out);
    assert!(out.status.success(), "{text}");
    for form in ["a1", "b1", "b2", "a2"] {
        let dir = root.join(format!("out/warm-test/r-{form}"));
        assert!(dir.join("results.json").exists(), "{text}");
    }
    assert!(text.contains("r (e2e p50): A "), "{text}");
    // The CPU backend refuses cold inputs: the header without `L2=warm`
    // asked for them.
    let log = std::fs::read_to_string(root.join("out/cold-test/r-a1.log")).unwrap();
    assert!(log.contains("cold-inputs"), "{log}");
    for name in ["warm-test", "cold-test"] {
        assert!(root.join(format!("tars/{name}.tgz")).exists(), "{text}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
