//! Generated kernels executed on the host (`host`), against the CPU
//! executor: every output must match the executor's bit for bit (both
//! without FMA; `lf_exp` is the executor's `expf` there), so an index, a
//! shift, a guard or a reduction order that differs from the plan shows.
//! CI has no GPU, and golden files pin text, not behaviour. Kernels that
//! need the hardware are left to the CUDA selftest.

mod host;

use host::{param_buffers, runs_on_the_host, Host};
use lanefold_codegen::{generate, CodegenOptions, Kernel, ParamKind};
use lanefold_cpu::data::{poisoned_outputs, random_inputs};
use lanefold_cpu::{execute, Buffers, Tensor};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, Target};

/// The first element whose bits differ, unless NaN on both sides (the
/// payload is the conversion's); widening to f32 keeps 16-bit bits apart.
fn same(a: &Tensor, b: &Tensor) -> Option<usize> {
    if a.len() != b.len() || a.dtype_name() != b.dtype_name() {
        return Some(0);
    }
    (0..a.len()).find(|&i| match a {
        Tensor::I64(_) => a.index(i) != b.index(i),
        _ => {
            let (x, y) = (a.get(i), b.get(i));
            x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan())
        }
    })
}

struct Case {
    plan: Plan,
    kernel: Kernel,
    inputs: Buffers,
}

/// The layouts every operator runs in (schedule text; `auto` is the
/// default plan), and the variants that apply to some operators only.
const LAYOUTS: [&str; 6] = [
    "auto",
    "W=32 V=8 G=2",
    "W=128 V=4 U=2",
    "W=256 V=4 stream reread-hints",
    "W=32 V=8 aligned-packs",
    "W=64 V=4 stream aligned-packs",
];
const VARIANTS: [&str; 20] = [
    "W=64 V=4 online-normalizer",
    "W=128 V=4 stream online-normalizer aligned-packs",
    "W=64 V=4 one-pass-moments",
    "W=64 V=8 fused-output",
    "W=64 V=8 packed-resident",
    "W=64 V=4 hoisted-columns streaming-hints",
    "W=128 V=4 early-columns=2 batched-loads",
    "W=32 V=4 U=4 unfolded-addresses",
    "W=64 V=4 batch-invariant",
    "W=64 V=4 no-cold-path",
    "W=32 V=2 G=4 ordered-columns",
    "W=1 V=1",
    "W=128 V=8 early-columns=2 aligned-packs",
    "W=64 V=8 packed-resident aligned-packs",
    "W=128 V=4 U=2 unguarded-stores",
    "W=64 V=4 stream aligned-packs unguarded-stores",
    "W=64 V=4 registers recompute-derived",
    "W=32 V=8 registers aligned-packs recompute-derived",
    "W=64 V=4 registers computed-resident",
    "W=32 V=8 registers aligned-packs computed-resident early-columns=2",
];

/// Forms that apply to a row ending in a partial chunk of whole vector
/// packs (`2x1000`: one chunk of 512 and 61 packs of eight), run there.
const PARTIAL_CHUNK_VARIANTS: [&str; 5] = [
    "W=64 V=8 registers packed-resident",
    "W=64 V=8 registers packed-resident one-pass-moments",
    "W=64 V=4 registers shared-chunks=2",
    "W=64 V=8 registers shared-chunks=1",
    "W=64 V=4 registers packed-resident shared-chunks=2",
];

fn cases() -> Vec<Case> {
    let target = Target::h200();
    let mut out = vec![];
    let mut ops = Operator::SIX.to_vec();
    ops.extend(Operator::training());
    for op in ops {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            // f16 on the forward operators' default and layouts of one shape.
            let f16 = dtype == DType::F16;
            if f16 && !Operator::SIX.contains(&op) {
                continue;
            }
            // The gradients' shapes: one odd, one of partial chunks.
            let shapes: &[&str] = if op.forward().is_some() {
                &["3x1001", "2x4103", "2x1000"]
            } else {
                &["3x1001", "2x1002", "5x130", "2x4103", "2x1000"]
            };
            for &shape in shapes.iter().filter(|&&s| !f16 || s == "2x1002") {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    dtype,
                    shape.parse().unwrap(),
                );
                // The variants on one shape each: their paths, not sizes.
                let (layouts, variants): (&[&str], &[&str]) = match shape {
                    "3x1001" => (&LAYOUTS, &VARIANTS),
                    "2x1000" => (&[], &PARTIAL_CHUNK_VARIANTS),
                    _ => (&LAYOUTS, &[]),
                };
                for text in layouts.iter().chain(variants) {
                    let request: LayoutRequest = match *text {
                        "auto" => LayoutRequest::default(),
                        t => t.parse().unwrap_or_else(|e| panic!("{t}: {e}")),
                    };
                    let Ok(p) = plan(&problem, &target, &request) else {
                        continue;
                    };
                    let options = CodegenOptions { fma: false };
                    let kernel = generate(&p, &options).unwrap();
                    if !runs_on_the_host(&kernel) {
                        continue;
                    }
                    let mut inputs = random_inputs(&problem, 7 + shape.len() as u64);
                    if p.cold_path() {
                        rows_for_the_cold_path(&mut inputs, p.shape().n);
                    }
                    out.push(Case {
                        plan: p,
                        kernel,
                        inputs,
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| a.kernel.source.cmp(&b.kernel.source));
    out.dedup_by(|a, b| a.kernel.source == b.kernel.source);
    out
}

/// A norm's rows its fast statistics get wrong, so the cold path runs:
/// row 0 far from zero (4096 + 1e-2 x), row 1 at 1e30 (its sum of
/// squares overflows f32).
fn rows_for_the_cold_path(inputs: &mut Buffers, n: usize) {
    let edit = |v: f32, row: usize| {
        if row == 0 {
            4096.0 + 1e-2 * v
        } else {
            v * 1e30
        }
    };
    match inputs.get_mut("x") {
        Some(Tensor::F32(x)) => {
            for (i, v) in x.iter_mut().take(2 * n).enumerate() {
                *v = edit(*v, i / n);
            }
        }
        Some(Tensor::Bf16(x)) => {
            for (i, v) in x.iter_mut().take(2 * n).enumerate() {
                *v = half::bf16::from_f32(edit(v.to_f32(), i / n));
            }
        }
        // 1e30 is infinite in f16: the cold path's non-finite rows.
        Some(Tensor::F16(x)) => {
            for (i, v) in x.iter_mut().take(2 * n).enumerate() {
                *v = half::f16::from_f32(edit(v.to_f32(), i / n));
            }
        }
        _ => panic!("a norm's x"),
    }
}

/// One case on the host: its outputs, or why not.
fn run(host: &Host, k: usize, case: &Case) -> Result<Buffers, String> {
    let mut outputs = poisoned_outputs(&case.plan.problem);
    let shape = case.plan.shape();
    let buffers = param_buffers(&case.kernel, shape.rows, shape.n, |name| {
        let t = case.inputs.get(name).or(outputs.get(name));
        t.expect("a buffer").as_bytes()
    });
    let back = host.run(&format!("k{k}"), &case.kernel, case.plan.dtype(), &buffers)?;
    for (p, b) in case.kernel.params.iter().zip(back) {
        if let Some(t) = outputs
            .get_mut(&p.name)
            .filter(|_| p.kind == ParamKind::Output)
        {
            t.copy_from_bytes(&b);
        }
    }
    Ok(outputs)
}

#[test]
fn generated_kernels_run_on_the_host_give_the_cpu_executors_bits() {
    let Some(host) = Host::new("host-exec") else {
        eprintln!("SKIPPED: no C++20 compiler (CXX, else c++)");
        return;
    };
    let cases = cases();
    eprintln!("{} kernels on the host", cases.len());
    let count = |s: &str| cases.iter().filter(|c| c.kernel.name.contains(s)).count();
    assert!(cases.len() >= 150, "{} cases", cases.len());
    assert!(count("_ap") >= 40, "aligned-pack kernels: {}", count("_ap"));
    assert!(
        count("_stream") >= 20,
        "streamed kernels: {}",
        count("_stream")
    );
    assert!(count("_cp") >= 20, "cold-path kernels: {}", count("_cp"));
    let packed_partial = cases
        .iter()
        .filter(|c| c.plan.packed_resident && c.plan.layout.has_partial_pack(c.plan.shape().n))
        .count();
    assert!(
        packed_partial >= 6,
        "packed partial-chunk kernels: {packed_partial}"
    );
    assert!(count("_sh") >= 12, "shared-chunk kernels: {}", count("_sh"));
    assert_same_bits(&host, &cases);
}

/// Every case run on the host and against the CPU executor, spread over
/// the machine's threads; fails listing each output that differs.
fn assert_same_bits(host: &Host, cases: &[Case]) {
    let failures = differences(host, cases);
    assert!(
        failures.is_empty(),
        "{} of {} kernels differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// [`assert_same_bits`]'s runs: one line per output that differs.
fn differences(host: &Host, cases: &[Case]) -> Vec<String> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        let chunks: Vec<Vec<(usize, &Case)>> = (0..workers)
            .map(|w| cases.iter().enumerate().skip(w).step_by(workers).collect())
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let host = &host;
                s.spawn(move || {
                    let mut failed = vec![];
                    for (k, case) in chunk {
                        let what = format!("{} ({})", case.kernel.name, case.plan.describe());
                        let mut want = poisoned_outputs(&case.plan.problem);
                        execute(&case.plan, &case.inputs, &mut want).unwrap();
                        match run(host, k, case) {
                            Ok(got) => {
                                for (name, w) in &want {
                                    if let Some(i) = same(w, &got[name]) {
                                        failed.push(format!(
                                            "{what}: {name}[{i}] host {} executor {}",
                                            got[name].get(i),
                                            w.get(i)
                                        ));
                                    }
                                }
                            }
                            Err(e) => failed.push(format!("{what}: {e}")),
                        }
                    }
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// Shapes of no list: `LANEFOLD_HOST_DRAWS` (default 48) problems drawn
/// from a fixed seed (`LANEFOLD_HOST_SEED`), each operator and gradient in
/// f32 and bf16, 1-300 rows of 1-70,000 elements (at most 2^17 in all,
/// lengths log-uniform so odd and prime ones come), under the automatic
/// mapping the H200 would give them. The kernels a host can run must give
/// the executor's bits; the rest (clusters) are left to the device.
#[test]
fn automatic_kernels_of_drawn_shapes_give_the_cpu_executors_bits() {
    let Some(host) = Host::new("host-draws") else {
        eprintln!("SKIPPED: no C++20 compiler (CXX, else c++)");
        return;
    };
    let env = |name, default| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let draws: usize = env("LANEFOLD_HOST_DRAWS", 48) as usize;
    let mut state: u64 = env("LANEFOLD_HOST_SEED", 20261205);
    // xorshift64*: reproducible from the seed alone.
    let mut next = move |below: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d) % below
    };
    let mut ops = Operator::SIX.to_vec();
    ops.extend(Operator::training());
    let target = Target::h200();
    let mut cases = vec![];
    let mut drawn = vec![];
    while drawn.len() < draws {
        let op = ops[next(ops.len() as u64) as usize];
        let dtype = [DType::F32, DType::Bf16][next(2) as usize];
        // Log-uniform length: 2^(0..16.1), so 1 to about 70,000.
        let n = (2f64.powf(next(16_100) as f64 / 1000.0) as usize).clamp(1, 70_000);
        let rows = 1 + next(300.min((1 << 17) / n as u64).max(1)) as usize;
        let shape = format!("{rows}x{n}");
        drawn.push(format!("{op} {dtype} {shape}"));
        let problem = Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            shape.parse().unwrap(),
        );
        let p = plan(&problem, &target, &LayoutRequest::default())
            .unwrap_or_else(|e| panic!("{op} {dtype} {shape}: the automatic mapping refused: {e}"));
        let kernel = generate(&p, &CodegenOptions { fma: false }).unwrap();
        if !runs_on_the_host(&kernel) {
            continue;
        }
        let mut inputs = random_inputs(&problem, drawn.len() as u64);
        if p.cold_path() && rows >= 2 && next(2) == 0 {
            rows_for_the_cold_path(&mut inputs, n);
        }
        cases.push(Case {
            plan: p,
            kernel,
            inputs,
        });
    }
    eprintln!(
        "{} of {} drawn problems run on the host",
        cases.len(),
        drawn.len()
    );
    assert!(2 * cases.len() >= drawn.len(), "{drawn:?}");
    assert_same_bits(&host, &cases);
}
