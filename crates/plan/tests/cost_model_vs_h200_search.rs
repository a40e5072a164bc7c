//! The cost model against what the H200 search measured
//! (bench/results/2026-11-29-rmsnorm-search-h200): each candidate's
//! recorded request is planned again and scored; the model's pick must be
//! within 10% of the best measured candidate and its ranking positively
//! correlated with the measurements. In-sample: roofline-v2 was adjusted
//! after this search (bench/NOTES.md), so this pins the lesson, it does not
//! prove the model on unseen shapes.

use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, CostPolicy, Features, LayoutRequest, Problem, RooflinePolicy, Target};
use serde_json::Value;

fn ranks(v: &[f64]) -> Vec<f64> {
    v.iter()
        .map(|&x| {
            let less = v.iter().filter(|&&y| y < x).count() as f64;
            let eq = v.iter().filter(|&&y| y == x).count() as f64;
            less + (eq - 1.0) / 2.0
        })
        .collect()
}

fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

#[test]
fn roofline_v2_picks_within_10_percent_of_the_h200_search_winner() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/results/2026-11-29-rmsnorm-search-h200/results.json"
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let target = Target::h200();
    let mut problems = 0;
    for p in file["problems"].as_array().unwrap() {
        let op: Operator = p["op"].as_str().unwrap().parse().unwrap();
        let dtype: DType = p["dtype"].as_str().unwrap().parse().unwrap();
        let problem = Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            p["shape"].as_str().unwrap().parse().unwrap(),
        );
        let (mut predicted, mut measured) = (vec![], vec![]);
        for c in p["candidates"].as_array().unwrap() {
            let Some(gpu) = c["side"]["summary"]["gpu"]["p50"].as_f64() else {
                continue;
            };
            let request: LayoutRequest = serde_json::from_value(c["request"].clone()).unwrap();
            let plan = plan(&problem, &target, &request).unwrap();
            let f = Features::of(&plan, &target);
            predicted.push(RooflinePolicy.predict_us(&f, &plan, &target));
            measured.push(gpu);
        }
        let pick = (0..predicted.len())
            .min_by(|&a, &b| predicted[a].total_cmp(&predicted[b]))
            .unwrap();
        let best = measured.iter().cloned().fold(f64::INFINITY, f64::min);
        let regret = measured[pick] / best - 1.0;
        let rho = spearman(&predicted, &measured);
        assert!(regret <= 0.10, "{}: regret {regret:.3}", p["id"]);
        assert!(rho > 0.0, "{}: rank correlation {rho:.3}", p["id"]);
        problems += 1;
    }
    assert_eq!(problems, 4);
}
