//! The prepared campaigns (`bench/campaigns/*.txt`, cases files of
//! `scripts/abba.sh`) stay runnable: every line names a unique case, an
//! operator, a dtype and a shape that parse, and two schedules that plan
//! legally on the H200 and give different kernels.

use lanefold_codegen::{generate, CodegenOptions};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Problem, Target};
use std::collections::BTreeSet;
use std::path::Path;

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
