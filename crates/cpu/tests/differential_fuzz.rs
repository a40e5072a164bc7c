//! Differential fuzzing of the CPU executor against the independent
//! float64 oracle: drawn operators, dtypes, shapes, legal plans and values
//! at the numerical corners ([`lanefold_cpu::fuzz`]), rows up to 70,000
//! elements long. A fixed seed and case
//! count keep CI reproducible; `LANEFOLD_FUZZ_CASES` runs more.

use lanefold_cpu::fuzz::{draw, run_cpu, FuzzLimits};
use lanefold_plan::Target;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed};

fn cases() -> u32 {
    std::env::var("LANEFOLD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

proptest! {
    #![proptest_config(Config {
        cases: cases(),
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(20261202),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn the_cpu_executor_meets_the_float64_oracle(seed in any::<u64>()) {
        let case = draw(seed, 0, &Target::cpu(), FuzzLimits { max_elements: 1 << 17 });
        let v = run_cpu(&case).unwrap();
        prop_assert!(
            v.pass,
            "seed {seed}: {}: {:?}",
            case.label(),
            v.outputs
        );
    }
}

/// One failing case's elements, printed: `LANEFOLD_FUZZ_SEED=<seed from
/// the failure> cargo test -p lanefold-cpu --test differential_fuzz
/// replay_one_case -- --ignored --nocapture`.
#[test]
#[ignore = "a debugging aid: prints the case of LANEFOLD_FUZZ_SEED; the fuzz it replays runs in the proptest above and, on CUDA, in `selftest --fuzz` (scripts/fuzz-cuda.sh)"]
fn replay_one_case() {
    let seed: u64 = std::env::var("LANEFOLD_FUZZ_SEED")
        .expect("LANEFOLD_FUZZ_SEED")
        .parse()
        .unwrap();
    let case = draw(
        seed,
        0,
        &Target::cpu(),
        FuzzLimits {
            max_elements: 1 << 17,
        },
    );
    let mut outputs = lanefold_cpu::data::poisoned_outputs(&case.plan.problem);
    lanefold_cpu::execute(&case.plan, &case.inputs, &mut outputs).unwrap();
    let want = lanefold_cpu::oracle::expected(&case.plan.problem, &case.inputs).unwrap();
    let n = case.plan.problem.shape.n;
    for (name, e) in &want {
        let got = &outputs[name];
        for i in 0..got.len() {
            let (g, w) = (got.get(i) as f64, e.values[i]);
            if (g - w).abs() > 1e-6 * w.abs().max(1e-30) || g.is_nan() != w.is_nan() {
                let r = i / n.max(1);
                let xs: Vec<f32> = (r * n..(r + 1) * n)
                    .map(|j| case.inputs["x"].get(j))
                    .collect();
                println!(
                    "{name}[{i}] row {r} {:?}: got {g:e} want {w:e} x {:?}",
                    case.rows[r],
                    &xs[..xs.len().min(4)]
                );
            }
        }
    }
}
