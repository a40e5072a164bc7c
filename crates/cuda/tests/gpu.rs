//! GPU checks against the CPU executor. They skip (pass) on a machine
//! without a CUDA driver; on a GPU machine they run every case.

use lanefold_codegen::CodegenOptions;
use lanefold_cpu::data::{poisoned_outputs, random_inputs};
use lanefold_cuda::{probe_driver, CudaBackend};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, ResidencyRequest, Target};

#[allow(clippy::too_many_arguments)]
fn make(
    op: Operator,
    dtype: DType,
    shape: &str,
    w: u32,
    v: u32,
    u: u32,
    g: u32,
    stream: bool,
) -> Option<Plan> {
    let problem = Problem::operator(
        op,
        OperatorOptions::default(),
        dtype,
        shape.parse().unwrap(),
    );
    let req = LayoutRequest {
        workers: w,
        pack: v,
        unroll: u,
        rows_per_group: g,
        residency: if stream {
            ResidencyRequest::Stream
        } else {
            ResidencyRequest::Auto
        },
        ..Default::default()
    };
    match plan(&problem, &Target::h200(), &req) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("refused {op} {shape}: {e}");
            None
        }
    }
}

fn cases() -> Vec<(Option<Plan>, bool)> {
    use Operator::*;
    let f32_ = DType::F32;
    vec![
        (make(Sum, f32_, "64x4096", 32, 1, 1, 0, false), true),
        (make(Sum, f32_, "1000x777", 0, 0, 0, 0, false), true),
        (make(Sum, f32_, "37x1001", 64, 4, 2, 0, false), true),
        (make(Sum, f32_, "7x5000", 8, 2, 4, 3, false), true),
        (make(Sum, DType::Bf16, "64x4096", 256, 8, 1, 0, false), true),
        (make(Sum, DType::F16, "9x12345", 512, 8, 1, 1, false), true),
        (make(Sum, f32_, "4x262144", 4096, 4, 1, 1, false), true),
        (make(Sum, f32_, "3x262147", 8192, 4, 2, 1, false), true),
        (make(Sum, f32_, "5x999", 1, 1, 4, 0, false), true),
        (make(Softmax, f32_, "64x4096", 256, 4, 1, 1, false), false),
        (make(Softmax, f32_, "33x1001", 64, 4, 1, 0, false), false),
        (make(Softmax, f32_, "1x262144", 0, 0, 0, 0, false), false),
        (
            make(Softmax, DType::Bf16, "2x262144", 0, 8, 0, 0, false),
            false,
        ),
        (
            make(Rmsnorm, DType::Bf16, "33x4096", 128, 8, 1, 2, false),
            false,
        ),
        (make(Rmsnorm, f32_, "32768x127", 0, 0, 0, 0, false), false),
        (make(Layernorm, f32_, "2x262144", 32, 4, 1, 1, true), false),
        (make(Layernorm, f32_, "64x4096", 256, 4, 2, 1, true), false),
        (
            make(CrossEntropy, DType::Bf16, "64x32000", 0, 0, 0, 0, false),
            false,
        ),
        (
            make(CrossEntropy, f32_, "17x1003", 128, 2, 1, 0, false),
            false,
        ),
        (
            make(ResidualLayernorm, DType::F16, "16x4096", 0, 0, 0, 0, false),
            false,
        ),
        (
            make(ResidualLayernorm, DType::F16, "5x4099", 512, 2, 1, 1, false),
            false,
        ),
        (make(Add, DType::Bf16, "8x1000", 128, 8, 1, 0, false), false),
    ]
}

#[test]
#[ignore = "needs a CUDA GPU: run `cargo test -p lanefold-cuda --release -- --ignored` there; `lanefold selftest --backend cuda` covers the same cases"]
fn gpu_matches_the_cpu_executor() {
    probe_driver().expect("this test needs a CUDA driver");
    let backend = CudaBackend::open(0).expect("open device 0");
    eprintln!(
        "{} sm_{}{} driver {} SMs {} L2 {}",
        backend.device_name(),
        backend.compute_capability().0,
        backend.compute_capability().1,
        backend.driver_version(),
        backend.multiprocessors(),
        backend.l2_bytes()
    );
    let mut failures = vec![];
    for (plan, exact) in cases() {
        let Some(plan) = plan else { continue };
        let label = format!(
            "{} {} {} {}",
            plan.problem.program.name,
            plan.dtype(),
            plan.shape(),
            plan.describe()
        );
        let inputs = random_inputs(&plan.problem, 7);
        let mut cpu = poisoned_outputs(&plan.problem);
        lanefold_cpu::execute(&plan, &inputs, &mut cpu).unwrap();
        for fma in [false, true] {
            let mut gpu = poisoned_outputs(&plan.problem);
            if let Err(e) = backend.execute(&plan, &CodegenOptions { fma }, &inputs, &mut gpu) {
                failures.push(format!("{label} fma={fma}: {e}"));
                continue;
            }
            for (name, c) in &cpu {
                let g = &gpu[name];
                let mut bad = 0usize;
                let mut max_rel = 0f64;
                let mut num = 0f64;
                let mut den = 0f64;
                for i in 0..c.len() {
                    let (a, b) = (c.get(i) as f64, g.get(i) as f64);
                    if a.to_bits() != b.to_bits() {
                        bad += 1;
                    }
                    if b.is_nan() != a.is_nan() {
                        max_rel = f64::INFINITY;
                    }
                    num += (a - b) * (a - b);
                    den += a * a;
                }
                let rel = (num / den.max(1e-30)).sqrt();
                max_rel = max_rel.max(rel);
                let ok = if exact && !fma {
                    bad == 0
                } else {
                    max_rel <= plan.dtype().tolerance()
                };
                eprintln!("{label} fma={fma} {name}: {bad}/{} differ from CPU, normwise rel {max_rel:.3e} {}", c.len(), if ok { "ok" } else { "FAIL" });
                if !ok {
                    failures.push(format!(
                        "{label} fma={fma} {name}: {bad} differ, rel {max_rel:e}"
                    ));
                }
            }
        }
    }
    // Timing path.
    let p = make(
        Operator::Softmax,
        DType::F32,
        "4096x4096",
        0,
        0,
        0,
        0,
        false,
    )
    .unwrap();
    let inputs = random_inputs(&p.problem, 1);
    let t = backend
        .time(&p, &CodegenOptions::default(), &inputs, 50, 5)
        .unwrap();
    let bytes = 2.0 * 4096.0 * 4096.0 * 4.0;
    eprintln!(
        "softmax 4096x4096 f32 {}: {t:?} us -> {:.0} GB/s",
        p.describe(),
        bytes / t[t.len() / 2] / 1e3
    );
    let p = make(Operator::Softmax, DType::F32, "1x262144", 0, 0, 0, 0, false).unwrap();
    let inputs = random_inputs(&p.problem, 1);
    let t = backend
        .time(&p, &CodegenOptions::default(), &inputs, 50, 3)
        .unwrap();
    eprintln!("softmax 1x262144 cluster {}: {t:?} us", p.describe());
    assert!(failures.is_empty(), "{failures:#?}");
}
