//! The cost model against what the H200 searches measured
//! (bench/results/2026-11-29-*-search-h200): each candidate's recorded
//! layout is planned again and scored; the model's pick must be within 10%
//! of the best measured candidate. In-sample: roofline-v2 and v3 were
//! adjusted after these searches and v5's constants are fitted to them
//! (`lanefold fit-model`), so this pins the lessons, it does not prove the
//! model on unseen shapes.

use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{model_pick, plan, LayoutRequest, ModelScore, Problem, Target};
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

/// Every H200 search committed so far: the candidates of each problem,
/// planned again from their recorded layouts (not their requests, whose
/// automatic parts may resolve differently today) and scored. Searches of
/// one problem run in the same call are pooled (the long-row W searches
/// with 512- and 256-thread cluster groups), since the model mapping
/// chooses among all of them.
const SEARCHES: [&[&str]; 20] = [
    &["2026-11-29-rmsnorm-search-h200"],
    &["2026-11-29-softmax-search-h200"],
    &["2026-11-29-layernorm-search-h200"],
    &["2026-11-29-cross_entropy-search-h200"],
    &["2026-11-29-sum-unroll-search-h200"],
    &["2026-11-29-wide-rows-search-h200"],
    &["2026-11-29-norms-search-h200"],
    &["2026-11-29-softmax-bf16-search-h200"],
    &[
        "2026-11-29-long-rows-search-g512-h200",
        "2026-11-29-long-rows-search-g256-h200",
        "2026-11-29-long-rows-search-g256-rmsnorm-h200",
    ],
    &["2026-11-30-residual-search-h200"],
    &["2026-11-30-rmsnorm-1024-search-h200"],
    &["2026-11-30-t1s-rmsnorm-f32-32768x4096-h200"],
    &["2026-11-30-t1s-layernorm-f32-32768x4096-h200"],
    &["2026-11-30-t1s-rmsnorm-f32-16384x8192-h200"],
    &["2026-11-30-t1s-layernorm-f32-16384x8192-h200"],
    &["2026-11-30-t1s-softmax-f32-32768x4096-h200"],
    &["2026-11-30-t1s-softmax-f32-16384x8192-h200"],
    &["2026-11-30-t1s-softmax-bf16-16384x8192-h200"],
    &["2026-11-30-t1s-layernorm-bf16-32768x4096-h200"],
    &["2026-11-30-t1s-layernorm-bf16-16384x8192-h200"],
];

/// A results file's JSON text: `path`, else `path.gz` decompressed (as
/// `lanefold_measure::results::read_bytes` reads it; that crate depends on
/// this one).
fn read_results(path: &str) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(_) => {
            let gz = std::fs::File::open(format!("{path}.gz")).unwrap();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(gz), &mut text)
                .unwrap();
            text
        }
    }
}

struct Scored {
    id: String,
    regret: f64,
    rho: f64,
}

struct Measured {
    measured: f64,
    name: String,
    score: ModelScore,
}

fn score(dirs: &[&str]) -> Vec<Scored> {
    let target = Target::h200();
    // Problem id -> its measured candidates, in file order.
    let mut problems: Vec<(String, Vec<Measured>)> = vec![];
    for dir in dirs {
        let path = format!(
            "{}/../../bench/results/{dir}/results.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let file: Value = serde_json::from_str(&read_results(&path)).unwrap();
        for p in file["problems"].as_array().unwrap() {
            let op: Operator = p["op"].as_str().unwrap().parse().unwrap();
            let dtype: DType = p["dtype"].as_str().unwrap().parse().unwrap();
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                dtype,
                p["shape"].as_str().unwrap().parse().unwrap(),
            );
            let id = p["id"].as_str().unwrap().to_string();
            let at = match problems.iter().position(|(i, _)| *i == id) {
                Some(at) => at,
                None => {
                    problems.push((id.clone(), vec![]));
                    problems.len() - 1
                }
            };
            for c in p["candidates"].as_array().unwrap() {
                let Some(gpu) = c["side"]["summary"]["gpu"]["p50"].as_f64() else {
                    continue;
                };
                let layout = &c["plan"]["layout"];
                let field = |k: &str| layout[k].as_u64().unwrap() as u32;
                let request: LayoutRequest = LayoutRequest {
                    workers: field("workers"),
                    pack: field("pack"),
                    unroll: field("unroll"),
                    rows_per_group: field("rows_per_group"),
                    residency: serde_json::from_value(c["plan"]["residency"].clone()).unwrap(),
                    ..serde_json::from_value(c["request"].clone()).unwrap()
                };
                let mut plan = plan(&problem, &target, &request).unwrap();
                // An automatic request may have resolved to smaller cluster
                // groups than the target's; the recorded split says which.
                if let Some(split) = c["plan"]["groups_per_row"].as_u64() {
                    if split as u32 != plan.groups_per_row && request.cluster_group_threads == 0 {
                        let request = LayoutRequest {
                            cluster_group_threads: request.workers / split as u32,
                            ..request
                        };
                        plan = lanefold_plan::plan(&problem, &target, &request).unwrap();
                    }
                }
                if let Some(describe) = c["plan"]["describe"].as_str() {
                    // Rows of one scalar pack per worker leave their
                    // addresses unfolded, a later codegen choice
                    // the older files' descriptions do not name.
                    let today = plan.describe().replace(" unfolded-addresses", "");
                    assert_eq!(
                        today,
                        describe.replace(" unfolded-addresses", ""),
                        "{dir} {id}"
                    );
                }
                assert_eq!(
                    serde_json::to_value(plan.layout).unwrap(),
                    *layout,
                    "{dir} {id}"
                );
                problems[at].1.push(Measured {
                    measured: gpu,
                    name: plan.describe(),
                    score: ModelScore::of(&plan, &target),
                });
            }
        }
    }
    problems
        .into_iter()
        .map(|(id, m)| {
            let scores: Vec<ModelScore> = m.iter().map(|c| c.score).collect();
            let pick = model_pick(&scores).unwrap();
            let best = (0..m.len())
                .min_by(|&a, &b| m[a].measured.total_cmp(&m[b].measured))
                .unwrap();
            let predicted: Vec<f64> = m.iter().map(|c| c.score.predicted_us).collect();
            let measured: Vec<f64> = m.iter().map(|c| c.measured).collect();
            Scored {
                id: format!(
                    "{}: {id} (pick {}, best {})",
                    dirs.join("+"),
                    m[pick].name,
                    m[best].name
                ),
                regret: m[pick].measured / m[best].measured - 1.0,
                rho: spearman(&predicted, &measured),
            }
        })
        .collect()
}

#[test]
fn the_cost_model_picks_within_10_percent_of_every_h200_search_winner() {
    let mut problems = 0;
    let mut failures = vec![];
    for dir in SEARCHES {
        for s in score(dir) {
            eprintln!("{}: regret {:.3}, rho {:.3}", s.id, s.regret, s.rho);
            // Known miss, pinned so it cannot grow: on 4096x32768 f32
            // rmsnorm a streamed W=1024 plan, re-reading each row from L2,
            // beat every register plan; the model prices re-reads as DRAM
            // traffic. The mapper now takes
            // that plan through a rule beside the model
            // (`hinted_stream_instead`, measured 1.106x in a paired replay);
            // this test holds the model's own pick.
            // Second known miss: on bf16 rmsnorm 4096x131072 the model takes
            // V=8 in 8 groups of 256 threads; NVRTC gave it 71 registers
            // against V=4's 64, three groups per SM instead of four, 659 µs
            // against 597 (the best, 589, is V=4 in 4 groups of 512 at 64
            // registers); the register estimate cannot see a 7-register gap.
            // Third: on bf16 residual_layernorm 4096x32768 a streamed
            // W=1024 V=8 U=2 plan (re-reading x and the residual from L2:
            // 17 MB in flight across the chip) ran 312.6 µs against the
            // pick's 363 (cluster of 8 groups of 256); same blind spot as
            // the first (2026-11-30-residual-search-h200).
            let allowed = if s.id.contains("residual_layernorm/bf16/4096x32768") {
                0.17
            } else if s.id.contains("rmsnorm/f32/4096x32768") {
                0.20
            } else if s.id.contains("rmsnorm/bf16/4096x131072") {
                0.13
            } else {
                0.10
            };
            if s.regret > allowed {
                failures.push(format!("{}: regret {:.3}", s.id, s.regret));
            }
            problems += 1;
        }
    }
    assert_eq!(problems, 4 + 3 * 6 + 6 + 6 + 7 + 2 + 4 + 2 + 2 + 9);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The W x V x U sum search is where v2 saw no difference at all; v3 must
/// rank it the way the H200 did.
#[test]
fn the_cost_model_ranks_the_sum_unroll_search_positively() {
    for s in score(&["2026-11-29-sum-unroll-search-h200"]) {
        assert!(s.rho > 0.3, "{}: rank correlation {:.3}", s.id, s.rho);
    }
}
