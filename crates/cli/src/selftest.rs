//! Selftest matrices. The CPU matrix runs in CI; the CUDA matrix runs the
//! same cases (plus long rows) on the device and compares sums with the
//! CPU executor bit for bit.

use crate::{run_case, run_layouts, Backend, Case};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::data::{poisoned_outputs, random_inputs, same_bits};
use lanefold_cpu::reference::reference;
use lanefold_cpu::{validate, Buffers, Tensor};
use lanefold_ir::BufferKind;
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, ReductionOrder, Refusal, Shape, Target};

#[derive(Clone, Copy, Debug, Default)]
pub struct Report {
    pub passed: usize,
    pub failed: usize,
}

impl Report {
    fn record(&mut self, ok: bool, label: &str, detail: &str) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            println!("FAIL {label}: {detail}");
        }
    }

    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed, self.failed)
    }
}

/// A narrowing of every check (`selftest --ops`, `--max-rows`), for runs
/// that must stay small, such as under compute-sanitizer. Set once per
/// process, before any check runs.
#[derive(Clone, Debug, Default)]
pub struct Narrowing {
    /// Only these operators (empty: all six).
    pub ops: Vec<Operator>,
    /// At most this many rows in any check's shape.
    pub max_rows: Option<usize>,
}

static NARROWING: std::sync::OnceLock<Narrowing> = std::sync::OnceLock::new();

/// Narrow every check of this process; an error if already narrowed.
pub fn narrow(narrowing: Narrowing) -> anyhow::Result<()> {
    if let Some(op) = narrowing.ops.iter().find(|o| !Operator::SIX.contains(o)) {
        anyhow::bail!("the selftest has no checks of '{op}'");
    }
    if narrowing.max_rows == Some(0) {
        anyhow::bail!("--max-rows must be at least 1");
    }
    if let Some(line) = narrowing.describe() {
        println!("{line}");
    }
    NARROWING
        .set(narrowing)
        .map_err(|_| anyhow::anyhow!("the selftest was already narrowed"))
}

impl Narrowing {
    /// The six operators, less those left out.
    pub fn operators(&self) -> Vec<Operator> {
        Operator::SIX
            .into_iter()
            .filter(|op| self.ops.is_empty() || self.ops.contains(op))
            .collect()
    }

    /// A check's row count, capped.
    pub fn rows(&self, rows: usize) -> usize {
        self.max_rows.map_or(rows, |max| rows.min(max))
    }

    /// What is narrowed, for the log; None when nothing is.
    pub fn describe(&self) -> Option<String> {
        let mut parts = vec![];
        if !self.ops.is_empty() {
            let names: Vec<_> = self.ops.iter().map(|o| o.name()).collect();
            parts.push(format!("operators {}", names.join(",")));
        }
        if let Some(max) = self.max_rows {
            parts.push(format!("at most {max} rows"));
        }
        (!parts.is_empty()).then(|| format!("narrowed to {}", parts.join(", ")))
    }
}

fn narrowing() -> &'static Narrowing {
    static NONE: Narrowing = Narrowing {
        ops: Vec::new(),
        max_rows: None,
    };
    NARROWING.get().unwrap_or(&NONE)
}

fn operators() -> Vec<Operator> {
    narrowing().operators()
}

/// An f32 sum of rows x n: the exact-order checks' problem.
fn sum_f32(rows: usize, n: usize) -> Problem {
    Problem::operator(
        Operator::Sum,
        OperatorOptions::default(),
        DType::F32,
        shape(rows, n),
    )
}

fn shape(rows: usize, n: usize) -> Shape {
    Shape::new(narrowing().rows(rows), n).expect("selftest shapes are valid")
}

/// 6 ops x V {1,2,4,8} x W {32,128,256} x N {1,31,33,127,128,129,257,4103}
/// x rows {1,5}, in `dtype`.
pub fn layout_matrix(dtype: DType) -> Vec<Case> {
    let mut cases = vec![];
    let mut seed = 1;
    for op in operators() {
        for pack in [1, 2, 4, 8] {
            for workers in [32, 128, 256] {
                for n in [1, 31, 33, 127, 128, 129, 257, 4103] {
                    for rows in [1, 5] {
                        seed += 1;
                        cases.push(Case {
                            op,
                            dtype,
                            shape: shape(rows, n),
                            request: LayoutRequest {
                                workers,
                                pack,
                                ..Default::default()
                            },
                            seed,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// The backward operators and the lse-saving forward
/// ([`Operator::training`]) x V {1,2,4,8} x W {32,256} x N
/// {1,33,129,4103} x rows {1,5}, in `dtype`; every other case asks for
/// `computed-resident` (the norm gradients' register plans keep g = w * dy
/// instead of dy and the weight).
pub fn backward_layout_matrix(dtype: DType) -> Vec<Case> {
    let mut cases = vec![];
    let mut seed = 7000;
    for op in Operator::training() {
        for pack in [1, 2, 4, 8] {
            for workers in [32, 256] {
                for n in [1, 33, 129, 4103] {
                    for rows in [1, 5] {
                        seed += 1;
                        cases.push(Case {
                            op,
                            dtype,
                            shape: shape(rows, n),
                            request: LayoutRequest {
                                workers,
                                pack,
                                computed_resident: seed % 2 == 0,
                                ..Default::default()
                            },
                            seed,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// The backward operators' checks alone (`selftest --backward`): their
/// layout matrix in f32 and bf16, batch invariance, cross_entropy_with_grad
/// against its halves, the norms' column gradients, and on CUDA the seed shapes and two long shapes with
/// automatic layouts.
pub fn backward_checks(backend: &Backend, report: &mut Report) {
    for dtype in [DType::F32, DType::Bf16] {
        run_cases(backend, &backward_layout_matrix(dtype), report);
    }
    let ns: &[usize] = match backend {
        Backend::Cuda(_) => &[127, 4096],
        Backend::Cpu => &[127],
    };
    let training: Vec<Operator> = Operator::training().collect();
    batch_invariance_checks_of(&training, backend, ns, report);
    cross_entropy_with_grad_checks(backend, report);
    cross_entropy_saved_lse_checks(backend, report);
    column_grad_checks(backend, report);
    if let Backend::Cuda(_) = backend {
        run_cases(
            backend,
            &shape_matrix_of(&training, &SEED_SHAPES, &[0, 4]),
            report,
        );
        run_cases(
            backend,
            &shape_matrix_of(&training, &LONG_SHAPES[..2], &[0]),
            report,
        );
    }
}

/// The training pair on the backend: cross_entropy_with_lse's loss is
/// cross_entropy's bit for bit on the same plan, and cross_entropy_backward
/// from the lse it wrote passes against the float64 gradient that
/// recomputes the normalizer (not the lse it was given), in both
/// normalizer forms (on CUDA also a long row and a vocabulary's).
pub fn cross_entropy_saved_lse_checks(backend: &Backend, report: &mut Report) {
    let shapes: &[(usize, usize)] = match backend {
        Backend::Cuda(_) => &[(5, 129), (64, 4096), (8, 50257), (4, 131072)],
        Backend::Cpu => &[(5, 129), (3, 4103)],
    };
    for dtype in [DType::F32, DType::Bf16] {
        for &(rows, n) in shapes {
            for online_normalizer in [false, true] {
                let problem = |op: Operator| {
                    Problem::operator(op, OperatorOptions::default(), dtype, shape(rows, n))
                };
                let saving = problem(Operator::CrossEntropyWithLse);
                let label = format!(
                    "cross_entropy_backward from cross_entropy_with_lse's lse {dtype} {} online={online_normalizer}",
                    saving.shape
                );
                let backward = problem(Operator::CrossEntropyBackward);
                let mut inputs = random_inputs(&backward, 41 + n as u64);
                let run = |problem: &Problem, p: &Plan, inputs: &Buffers| {
                    let mut mine = inputs.clone();
                    mine.retain(|name, _| problem.program.input(name).is_some());
                    let mut out = poisoned_outputs(problem);
                    backend.execute(p, &CodegenOptions::default(), &mine, &mut out)?;
                    anyhow::Ok(out)
                };
                let result = (|| -> anyhow::Result<Option<String>> {
                    let request = LayoutRequest {
                        online_normalizer,
                        ..Default::default()
                    };
                    let p = plan(&saving, &backend.target(), &request)?;
                    let fwd = run(&saving, &p, &inputs)?;
                    let plain = problem(Operator::CrossEntropy);
                    let pp = plan(&plain, &backend.target(), &p.schedule())?;
                    if !run(&plain, &pp, &inputs)?["loss"].same_bits(&fwd["loss"]) {
                        return Ok(Some(format!(
                            "loss differs from cross_entropy's on {}",
                            p.describe()
                        )));
                    }
                    let v = validate(
                        dtype,
                        &fwd,
                        &reference(&saving, &inputs).expect("an operator"),
                    );
                    if !v.pass {
                        return Ok(Some(format!("forward {}: {:?}", p.describe(), v.outputs)));
                    }
                    inputs.insert("lse".into(), fwd["lse"].clone());
                    let bp = plan(&backward, &backend.target(), &LayoutRequest::default())?;
                    let dx = run(&backward, &bp, &inputs)?;
                    let truth = problem(Operator::CrossEntropyBackwardRecompute);
                    let v = validate(
                        dtype,
                        &dx,
                        &reference(&truth, &inputs).expect("an operator"),
                    );
                    Ok((!v.pass).then(|| format!("backward {}: {:?}", bp.describe(), v.outputs)))
                })();
                match result {
                    Ok(differs) => {
                        report.record(differs.is_none(), &label, &differs.unwrap_or_default())
                    }
                    Err(e) => report.record(false, &label, &format!("{e:#}")),
                }
            }
        }
    }
}

/// cross_entropy_with_grad against its halves on its own plan: its loss
/// is cross_entropy's and its dx cross_entropy_backward_recompute's, bit for bit,
/// with and without the online normalizer (on CUDA also a clustered row).
pub fn cross_entropy_with_grad_checks(backend: &Backend, report: &mut Report) {
    let shapes: &[(usize, usize)] = match backend {
        Backend::Cuda(_) => &[(5, 129), (64, 4096), (4, 131072)],
        Backend::Cpu => &[(5, 129), (3, 4103)],
    };
    for dtype in [DType::F32, DType::Bf16] {
        for &(rows, n) in shapes {
            for online_normalizer in [false, true] {
                let fused = Problem::operator(
                    Operator::CrossEntropyWithGrad,
                    OperatorOptions::default(),
                    dtype,
                    shape(rows, n),
                );
                let label = format!(
                    "cross_entropy_with_grad against its halves {dtype} {} online={online_normalizer}",
                    fused.shape
                );
                let inputs = random_inputs(&fused, 31 + n as u64);
                let run = |problem: &Problem, p: &Plan| -> anyhow::Result<Buffers> {
                    let mut mine = inputs.clone();
                    mine.retain(|name, _| problem.program.input(name).is_some());
                    let mut out = poisoned_outputs(problem);
                    backend.execute(p, &CodegenOptions::default(), &mine, &mut out)?;
                    Ok(out)
                };
                let result = (|| -> anyhow::Result<Option<String>> {
                    let request = LayoutRequest {
                        online_normalizer,
                        ..Default::default()
                    };
                    let p = plan(&fused, &backend.target(), &request)?;
                    let both = run(&fused, &p)?;
                    for (op, name) in [
                        (Operator::CrossEntropy, "loss"),
                        (Operator::CrossEntropyBackwardRecompute, "dx"),
                    ] {
                        let half = Problem {
                            program: op.program(OperatorOptions::default()),
                            ..fused.clone()
                        };
                        let hp = plan(&half, &backend.target(), &p.schedule())?;
                        if hp.describe() != p.describe() {
                            return Ok(Some(format!(
                                "{op} planned {} for {}",
                                hp.describe(),
                                p.describe()
                            )));
                        }
                        if !run(&half, &hp)?[name].same_bits(&both[name]) {
                            return Ok(Some(format!(
                                "{name} differs from {op}'s on {}",
                                p.describe()
                            )));
                        }
                    }
                    Ok(None)
                })();
                match result {
                    Ok(differs) => {
                        report.record(differs.is_none(), &label, &differs.unwrap_or_default())
                    }
                    Err(e) => report.record(false, &label, &format!("{e:#}")),
                }
            }
        }
    }
}

/// The norms' dweight and dbias: the CPU's fixed-order sums against
/// float64, on CUDA the column kernels against the CPU bit for bit, and
/// (f32) 64 rows at once equal to two batches of 32 added.
pub fn column_grad_checks(backend: &Backend, report: &mut Report) {
    use lanefold_codegen::ColumnGradKind;
    use lanefold_cpu::columns::{column_grads, column_grads_reference, ColumnGrads};
    let ops = [
        (Operator::RmsnormBackward, ColumnGradKind::Rmsnorm),
        (Operator::LayernormBackward, ColumnGradKind::Layernorm),
        (
            Operator::ResidualLayernormBackward,
            ColumnGradKind::Layernorm,
        ),
    ];
    // On the device (computed on `rows` of the inputs), else the CPU's.
    let run = |op: Operator, kind, dtype, inputs: &Buffers, rows: std::ops::Range<usize>, n| {
        let (_, x) = ColumnGrads::of(op).expect("a norm");
        let sliced: Buffers = [x, "dy"]
            .iter()
            .map(|name| {
                let t = &inputs[*name];
                let v: Vec<f32> = (rows.start * n..rows.end * n).map(|i| t.get(i)).collect();
                (name.to_string(), Tensor::from_f32(dtype, &v))
            })
            .collect();
        let eps = ColumnGrads::of(op).unwrap().0.default_eps();
        match backend {
            Backend::Cuda(cuda) => cuda
                .column_grads(kind, dtype, &sliced[x], &sliced["dy"], rows.len(), n, eps)
                .map_err(|e| e.to_string()),
            Backend::Cpu => {
                column_grads(op, &sliced, rows.len(), n, eps, dtype).map_err(|e| e.to_string())
            }
        }
    };
    for (op, kind) in ops {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            let mut shapes = vec![(1, 1), (64, 33), (70, 300)];
            if let Backend::Cuda(_) = backend {
                shapes.extend([(1024, 4096), (3, 131072)]);
            }
            for (rows, n) in shapes {
                let label = format!("{op} columns {dtype} {rows}x{n}");
                let problem =
                    Problem::operator(op, OperatorOptions::default(), dtype, shape(rows, n));
                let inputs = random_inputs(&problem, (rows * 7 + n) as u64);
                let eps = ColumnGrads::of(op).unwrap().0.default_eps();
                let cpu = match column_grads(op, &inputs, rows, n, eps, dtype) {
                    Ok(c) => c,
                    Err(e) => {
                        report.record(false, &label, &e.to_string());
                        continue;
                    }
                };
                let want = column_grads_reference(op, &inputs, rows, n).expect("a norm");
                let v = lanefold_cpu::validate(dtype, &cpu, &want);
                report.record(v.pass, &label, &format!("against float64: {:?}", v.outputs));
                if let Backend::Cuda(_) = backend {
                    match run(op, kind, dtype, &inputs, 0..rows, n) {
                        Ok(gpu) => report.record(
                            same_bits(&gpu, &cpu),
                            &label,
                            "CUDA bits differ from the CPU's",
                        ),
                        Err(e) => report.record(false, &label, &e),
                    }
                }
                if dtype == DType::F32 && rows == 64 {
                    let halves = run(op, kind, dtype, &inputs, 0..32, n)
                        .and_then(|a| run(op, kind, dtype, &inputs, 32..64, n).map(|b| (a, b)));
                    let ok = halves.is_ok_and(|(a, b)| {
                        cpu.iter().all(|(name, whole)| {
                            (0..n).all(|j| {
                                whole.get(j).to_bits()
                                    == (a[name].get(j) + b[name].get(j)).to_bits()
                            })
                        })
                    });
                    report.record(
                        ok,
                        &label,
                        "two batches of 32 rows added differ from 64 at once",
                    );
                }
            }
        }
    }
}

/// Shapes x the six operators x f32 and bf16 x packs (0 = automatic).
pub fn shape_matrix(shapes: &[(usize, usize)], packs: &[u32]) -> Vec<Case> {
    shape_matrix_of(&operators(), shapes, packs)
}

/// Shapes x `ops` x f32 and bf16 x packs (0 = automatic).
pub fn shape_matrix_of(ops: &[Operator], shapes: &[(usize, usize)], packs: &[u32]) -> Vec<Case> {
    let mut cases = vec![];
    for &(rows, n) in shapes {
        for &op in ops {
            for dtype in [DType::F32, DType::Bf16] {
                for &pack in packs {
                    cases.push(Case {
                        op,
                        dtype,
                        shape: shape(rows, n),
                        request: LayoutRequest {
                            pack,
                            ..Default::default()
                        },
                        seed: (rows * 31 + n) as u64 + pack as u64,
                    });
                }
            }
        }
    }
    cases
}

pub const SEED_SHAPES: [(usize, usize); 4] = [(1, 127), (17, 257), (64, 4096), (1024, 4096)];
pub const LONG_SHAPES: [(usize, usize); 4] =
    [(32768, 4096), (4096, 32768), (4096, 131072), (1024, 262144)];

/// On CUDA, every case's kernel compiled ahead on all cores
/// ([`lanefold_cuda::CudaBackend::precompile`]): the checks then load
/// instead of compiling one kernel at a time. Nothing on the CPU.
fn precompile(backend: &Backend, cases: &[Case], options: &CodegenOptions) {
    let Backend::Cuda(cuda) = backend else {
        return;
    };
    let target = backend.target();
    let jobs: Vec<_> = cases
        .iter()
        .filter_map(|c| plan(&c.problem(), &target, &c.request).ok())
        .map(|p| (p, *options))
        .collect();
    let done = cuda.precompile(&jobs);
    if done.compiled >= 50 {
        println!("{done}");
    }
}

pub fn run_cases(backend: &Backend, cases: &[Case], report: &mut Report) {
    precompile(backend, cases, &CodegenOptions::default());
    let pb = lanefold_measure::progress::bar(cases.len() as u64, "selftest");
    for case in cases {
        pb.inc(1);
        let label = format!(
            "{} {} {} W={} V={}",
            case.op, case.dtype, case.shape, case.request.workers, case.request.pack
        );
        let started = std::time::Instant::now();
        match run_case(backend, case, &CodegenOptions::default()) {
            Ok(out) => {
                let worst = out.validation.worst_rel_err();
                if case.shape.elements() >= 1 << 20 {
                    pb.suspend(|| {
                        println!(
                            "{label:<44} {:<36} rel err {worst:.2e} {} ({:.1} s)",
                            out.plan.describe(),
                            if out.validation.pass { "ok" } else { "INVALID" },
                            started.elapsed().as_secs_f64()
                        )
                    });
                }
                let detail = format!(
                    "{} rel err {worst:.3e} {:?}",
                    out.plan.describe(),
                    out.validation.outputs
                );
                pb.suspend(|| report.record(out.validation.pass, &label, &detail));
            }
            Err(e) => pb.suspend(|| report.record(false, &label, &format!("{e:#}"))),
        }
    }
    pb.finish_and_clear();
}

/// Sums whose order is fixed by the plan: on the CPU, W=1 equals a plain
/// sequential loop; on CUDA (FMA off), every plan equals the CPU executor
/// on the same plan, bit for bit.
pub fn exact_sum_checks(backend: &Backend, report: &mut Report) {
    let options = CodegenOptions { fma: false };
    let mut plans = 0;
    for (rows, n) in [(3, 1), (5, 127), (4, 4103), (2, 65536), (1, 262144)] {
        for (workers, pack) in [(1, 1), (32, 1), (32, 4), (256, 2), (1024, 8), (0, 4)] {
            if workers == 1 && n > 65536 {
                continue;
            }
            let problem = sum_f32(rows, n);
            let request = LayoutRequest {
                workers,
                pack,
                ..Default::default()
            };
            let label = format!("exact sum {rows}x{n} W={workers} V={pack}");
            let p = match plan(&problem, &backend.target(), &request) {
                Ok(p) => p,
                Err(e) => {
                    report.record(false, &label, &e.to_string());
                    continue;
                }
            };
            plans += 1;
            let inputs = random_inputs(&problem, 99 + n as u64);
            let mut cpu = poisoned_outputs(&problem);
            lanefold_cpu::execute(&p, &inputs, &mut cpu).expect("cpu executor");
            let expected: Vec<u32> = (0..rows).map(|r| cpu["y"].get(r).to_bits()).collect();
            let got: Vec<u32> = match backend {
                Backend::Cpu => {
                    // The oracle for W=1 is a sequential f32 loop.
                    if p.layout.workers != 1 {
                        plans -= 1;
                        continue;
                    }
                    let x = &inputs["x"];
                    (0..rows)
                        .map(|r| (0..n).fold(0f32, |s, i| s + x.get(r * n + i)).to_bits())
                        .collect()
                }
                Backend::Cuda(_) => {
                    let mut out = poisoned_outputs(&problem);
                    match backend.execute(&p, &options, &inputs, &mut out) {
                        Ok(_) => (0..rows).map(|r| out["y"].get(r).to_bits()).collect(),
                        Err(e) => {
                            report.record(false, &label, &format!("{e:#}"));
                            continue;
                        }
                    }
                }
            };
            report.record(
                got == expected,
                &label,
                &format!("{} bits {got:x?} vs {expected:x?}", p.describe()),
            );
        }
    }
    println!("exact-order sums compared on {plans} plans");
}

/// Each of the four refusals, and an exact request honoured.
pub fn refusal_checks(report: &mut Report) {
    let t = Target::h200();
    let p = |op: Operator, s: (usize, usize)| {
        Problem::operator(op, OperatorOptions::default(), DType::F32, shape(s.0, s.1))
    };
    type Expect = fn(&Refusal) -> bool;
    let cases: Vec<(&str, Problem, LayoutRequest, Expect)> = vec![
        (
            "invalid width",
            p(Operator::Softmax, (4, 128)),
            LayoutRequest {
                workers: 48,
                ..Default::default()
            },
            |r| matches!(r, Refusal::InvalidWidth(_)),
        ),
        (
            "missing permission",
            Problem {
                program: Operator::Sum.program(OperatorOptions::default()).exact(),
                ..p(Operator::Sum, (4, 128))
            },
            LayoutRequest {
                workers: 32,
                ..Default::default()
            },
            |r| matches!(r, Refusal::MissingPermission(_)),
        ),
        (
            "resource overflow",
            p(Operator::Layernorm, (2, 262144)),
            LayoutRequest {
                workers: 32,
                residency: lanefold_plan::ResidencyRequest::Registers,
                ..Default::default()
            },
            |r| matches!(r, Refusal::ResourceOverflow { .. }),
        ),
        (
            "element-only",
            p(Operator::Add, (4, 128)),
            LayoutRequest {
                order: Some(ReductionOrder::Sequential),
                ..Default::default()
            },
            |r| matches!(r, Refusal::ElementOnly(_)),
        ),
    ];
    for (label, problem, request, expect) in cases {
        match plan(&problem, &t, &request) {
            Err(r) => report.record(expect(&r), label, &r.to_string()),
            Ok(p) => report.record(false, label, &format!("accepted {}", p.describe())),
        }
    }
}

/// Rows `range` of every per-row buffer (columns are shared).
fn slice_rows(problem: &Problem, inputs: &Buffers, range: std::ops::Range<usize>) -> Buffers {
    let n = problem.shape.n;
    problem
        .program
        .inputs
        .iter()
        .map(|d| {
            let t = &inputs[&d.name];
            let (lo, hi) = match d.kind {
                BufferKind::Row => (range.start * n, range.end * n),
                BufferKind::Column => (0, n),
                _ => (range.start, range.end),
            };
            let part = match t {
                Tensor::F32(v) => Tensor::F32(v[lo..hi].to_vec()),
                Tensor::Bf16(v) => Tensor::Bf16(v[lo..hi].to_vec()),
                Tensor::F16(v) => Tensor::F16(v[lo..hi].to_vec()),
                Tensor::I64(v) => Tensor::I64(v[lo..hi].to_vec()),
            };
            (d.name.clone(), part)
        })
        .collect()
}

/// Bits of row `row` of every output.
fn row_bits(problem: &Problem, outputs: &Buffers, row: usize) -> Vec<u32> {
    let n = problem.shape.n;
    let mut bits = vec![];
    for d in &problem.program.outputs {
        let t = &outputs[&d.name];
        let (lo, hi) = if d.kind == BufferKind::Row {
            (row * n, (row + 1) * n)
        } else {
            (row, row + 1)
        };
        bits.extend((lo..hi).map(|i| t.get(i).to_bits()));
    }
    bits
}

/// With the `batch-invariant` token, a row's outputs are bit-identical whether it
/// runs alone, among 7 rows or among 4096.
pub fn batch_invariance_checks(backend: &Backend, ns: &[usize], report: &mut Report) {
    batch_invariance_checks_of(&operators(), backend, ns, report);
}

/// [`batch_invariance_checks`] of `ops`.
pub fn batch_invariance_checks_of(
    ops: &[Operator],
    backend: &Backend,
    ns: &[usize],
    report: &mut Report,
) {
    const ROW: usize = 3;
    for &op in ops {
        for dtype in [DType::F32, DType::Bf16] {
            for &n in ns {
                let label = format!("batch invariance {op} {dtype} N={n}");
                let full = Problem::operator(op, OperatorOptions::default(), dtype, shape(4096, n));
                let inputs = random_inputs(&full, 7 + n as u64);
                let mut bits = vec![];
                for (rows, start) in [(1, ROW), (7, 0), (4096, 0)] {
                    let problem = Problem {
                        shape: shape(rows, n),
                        ..full.clone()
                    };
                    let request = LayoutRequest {
                        batch_invariant: true,
                        ..Default::default()
                    };
                    let result = plan(&problem, &backend.target(), &request)
                        .map_err(anyhow::Error::from)
                        .and_then(|p| {
                            let part = slice_rows(&problem, &inputs, start..start + rows);
                            let mut out = poisoned_outputs(&problem);
                            backend.execute(&p, &CodegenOptions::default(), &part, &mut out)?;
                            Ok(row_bits(&problem, &out, ROW - start))
                        });
                    match result {
                        Ok(b) => bits.push(b),
                        Err(e) => {
                            report.record(false, &label, &format!("{e:#}"));
                            break;
                        }
                    }
                }
                if bits.len() == 3 {
                    let same = bits[0] == bits[1] && bits[1] == bits[2];
                    report.record(same, &label, "row 3 differs between 1, 7 and 4096 rows");
                }
            }
        }
    }
}

/// Streaming hints, hoisted columns, kept columns, re-read hints and the
/// occupancy promise change where and how loads happen,
/// never the arithmetic: with either or both every output is valid and
/// bit-identical to the same plan without them (register plans, whose row
/// tiles load evict-first, and streamed plans, whose tiles do not).
pub fn load_policy_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::ResidencyRequest;
    for op in operators() {
        for dtype in [DType::F32, DType::Bf16] {
            for (rows, n, workers, residency) in [
                (64, 4096, 256, ResidencyRequest::Auto),
                (4, 8192, 32, ResidencyRequest::Stream),
            ] {
                let case = |(streaming_hints, hoist_columns, bounds, reread, keep_columns): (
                    bool,
                    bool,
                    bool,
                    bool,
                    bool,
                )| Case {
                    op,
                    dtype,
                    shape: shape(rows, n),
                    request: LayoutRequest {
                        workers,
                        pack: 4,
                        residency,
                        streaming_hints,
                        hoist_columns,
                        occupancy: if bounds { 2 } else { 0 },
                        reread_hints: reread,
                        keep_columns,
                        ..Default::default()
                    },
                    seed: 11 + n as u64,
                };
                let plain = run_case(
                    backend,
                    &case((false, false, false, false, false)),
                    &CodegenOptions::default(),
                );
                for policies in [
                    (true, false, false, false, false),
                    (false, true, false, false, false),
                    (true, true, false, false, false),
                    (false, false, true, false, false),
                    (false, false, false, true, false),
                    (false, false, false, false, true),
                ] {
                    let (hints, hoist, bounds, reread, keep) = policies;
                    let label = format!(
                        "load policy {op} {dtype} {rows}x{n} {residency:?} hints={hints} hoist={hoist} occupancy={} reread={reread} keep-columns={keep}",
                        if bounds { 2 } else { 0 }
                    );
                    let changed = run_case(backend, &case(policies), &CodegenOptions::default());
                    match (&plain, changed) {
                        (Ok(plain), Ok(changed)) => {
                            // Without a promise of its own, a norm's plan may carry
                            // the one its kept cold path makes.
                            let promise = changed.plan.min_groups_per_multiprocessor;
                            let cold_promise = matches!(
                                changed.cold_path,
                                Some(lanefold_cuda::ColdPathDecision::Kept { .. })
                            );
                            let ok = changed.validation.pass
                                && changed.plan.streaming_hints == hints
                                && if bounds {
                                    promise == Some(2)
                                } else {
                                    promise.is_none() || cold_promise
                                }
                                && same_bits(&plain.outputs, &changed.outputs);
                            report.record(ok, &label, "invalid, or not the same bits as without");
                        }
                        (Err(e), _) => report.record(false, &label, &format!("{e:#}")),
                        (_, Err(e)) => report.record(false, &label, &format!("{e:#}")),
                    }
                }
            }
        }
    }
}

/// Rows spanning clusters of smaller groups (`cluster_group_threads`):
/// 8 and 16 groups of 256 threads, and rows within the group limit split
/// (`split_groups`: W=512 as two groups of 256, W=1024 as four, plain and
/// pushed), every operator valid. The tree differs from the one-group
/// plan's, so results are judged against float64, not compared bit for
/// bit.
pub fn cluster_group_checks(backend: &Backend, report: &mut Report) {
    let forms = [
        (2048, 256, 65536, false),
        (4096, 256, 65536, false),
        (512, 256, 9001, false),
        (1024, 256, 30000, true),
    ];
    let target = backend.target();
    let mut cases = vec![];
    for op in operators() {
        for dtype in [DType::F32, DType::Bf16] {
            for (workers, threads, n, pushed) in forms {
                cases.push(Case {
                    op,
                    dtype,
                    shape: shape(3, n),
                    request: LayoutRequest {
                        workers,
                        pack: 4,
                        cluster_group_threads: threads,
                        split_groups: target.needs_split_groups(workers),
                        push_cluster_reduce: pushed,
                        ..Default::default()
                    },
                    seed: 5 + workers as u64,
                });
            }
        }
    }
    precompile(backend, &cases, &CodegenOptions::default());
    for case in &cases {
        let (workers, threads) = (case.request.workers, case.request.cluster_group_threads);
        let label = format!(
            "cluster groups of {threads} {} {} {} W={workers}{}",
            case.op,
            case.dtype,
            case.shape,
            if case.request.push_cluster_reduce {
                " pushed"
            } else {
                ""
            }
        );
        match run_case(backend, case, &CodegenOptions::default()) {
            Ok(out) => {
                let ok = out.validation.pass
                    && out.plan.threads_per_group == threads
                    && out.plan.groups_per_row == workers / threads
                    && out.plan.pushed_cluster_reduce == case.request.push_cluster_reduce;
                report.record(ok, &label, &out.plan.describe());
            }
            Err(e) => report.record(false, &label, &format!("{e:#}")),
        }
    }
}

/// A group of selftest checks, recording into the report.
pub type Checks = fn(&Backend, &mut Report);

/// A change to a request: a check's base layout, or the policy it turns on.
type RequestEdit = fn(&mut LayoutRequest);

/// Every opt-in variant's checks by name: the arithmetic variants, then
/// the load and barrier policies that must keep every bit.
pub const VARIANT_CHECKS: &[(&str, Checks)] = &[
    ("arithmetic", arithmetic_variant_checks),
    ("staged-columns", staged_column_checks),
    ("packed-resident", packed_resident_checks),
    ("relaxed-exit", relaxed_exit_checks),
    ("pushed-reduce", pushed_reduce_checks),
    ("cluster-rows", cluster_rows_checks),
    ("prefetch-rows", prefetched_rows_checks),
    ("l1-columns", l1_column_checks),
    ("ordered-columns", ordered_column_checks),
    ("early-columns", early_column_checks),
    ("shared-chunks", shared_chunk_checks),
    ("l2-prefetch", l2_prefetch_checks),
    ("rounded-resident", rounded_resident_checks),
    ("persistent-clusters", persistent_cluster_checks),
    ("prefetched-clusters", prefetched_cluster_checks),
    ("ordered-hinted-loads", ordered_hinted_load_checks),
    ("occupancy-cap", occupancy_cap_checks),
    ("batched-loads", batched_load_checks),
    ("unguarded-stores", unguarded_store_checks),
    ("recompute-derived", recompute_derived_checks),
    ("cold-path", cold_path_checks),
    ("aligned-packs", aligned_pack_checks),
    ("batch-invariance", batch_invariance_default_checks),
];

/// The base matrix's check groups by name, selectable like the variants'
/// (`selftest --variant layout-matrix,...`), e.g. for a sanitizer run.
pub const MATRIX_CHECKS: &[(&str, Checks)] = &[
    ("exact-sums", exact_sum_checks),
    ("load-policy", load_policy_checks),
    ("cluster-groups", cluster_group_checks),
    ("layout-matrix", layout_matrix_checks),
];

/// The f32 layout matrix ([`layout_matrix`]).
pub fn layout_matrix_checks(backend: &Backend, report: &mut Report) {
    run_cases(backend, &layout_matrix(DType::F32), report);
}

/// [`batch_invariance_checks`] on rows of 127 and 4096, as the full
/// selftest runs them.
pub fn batch_invariance_default_checks(backend: &Backend, report: &mut Report) {
    batch_invariance_checks(backend, &[127, 4096], report);
}

/// Every opt-in variant's checks.
pub fn variant_checks(backend: &Backend, report: &mut Report) {
    for &(name, checks) in VARIANT_CHECKS {
        run_variant_group(name, checks, backend, report);
    }
}

/// One variant group, then a progress line with its counts and time, so a
/// run cut short by an outer time limit still shows what passed (session
/// 18: a CUDA selftest past its call's limit printed nothing).
pub fn run_variant_group(name: &str, checks: Checks, backend: &Backend, report: &mut Report) {
    let started = std::time::Instant::now();
    let before = *report;
    checks(backend, report);
    println!(
        "variant {name}: {} passed, {} failed ({:.1} s)",
        report.passed - before.passed,
        report.failed - before.failed,
        started.elapsed().as_secs_f64()
    );
}

/// Hinted loads kept ordered (`ordered_hinted_loads`, no `.nc`): every
/// operator, f32 and bf16, streamed with re-read hints and with streaming
/// hints in registers. Same bits as the read-only loads.
pub fn ordered_hinted_load_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::ResidencyRequest;
    let bases: [(&str, RequestEdit); 2] = [
        ("ordered hinted loads, streamed", streamed_with_reread_hints),
        ("ordered hinted loads, registers", |request| {
            request.residency = ResidencyRequest::Registers;
            request.streaming_hints = true;
        }),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(32, 4, 512), (256, 4, 4096)],
        37,
        |request| request.ordered_hinted_loads = true,
        |plan| plan.ordered_hinted_loads,
        |_| true,
    );
}

/// Aligned packs (`aligned_packs`) on rows whose length is no multiple
/// of V, so that each row starts at a different shift: exact sums (FMA
/// off) equal the CPU executor bit for bit, so the executor mirrors the
/// shifted ownership; and every operator, f32 and bf16, in register and
/// streamed plans, valid against float64 and marked exactly where a row
/// is misaligned and the pack a vector.
pub fn aligned_pack_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::ResidencyRequest;
    let exact = CodegenOptions { fma: false };
    for (rows, n) in [(9, 3), (37, 127), (13, 4103), (5, 9001)] {
        for (workers, pack) in [(1, 8), (32, 8), (256, 4), (1024, 2)] {
            let problem = sum_f32(rows, n);
            let request = LayoutRequest {
                workers,
                pack,
                aligned_packs: true,
                ..Default::default()
            };
            let label = format!("aligned packs, exact sum {rows}x{n} W={workers} V={pack}");
            let p = match plan(&problem, &backend.target(), &request) {
                Ok(p) if p.aligned_packs => p,
                Ok(p) => {
                    report.record(false, &label, &format!("{}: not marked", p.describe()));
                    continue;
                }
                Err(e) => {
                    report.record(false, &label, &e.to_string());
                    continue;
                }
            };
            let inputs = random_inputs(&problem, 41 + n as u64);
            let mut cpu = poisoned_outputs(&problem);
            lanefold_cpu::execute(&p, &inputs, &mut cpu).expect("cpu executor");
            let mut out = poisoned_outputs(&problem);
            match backend.execute(&p, &exact, &inputs, &mut out) {
                Ok(_) => report.record(same_bits(&cpu, &out), &label, &p.describe()),
                Err(e) => report.record(false, &label, &format!("{e:#}")),
            }
        }
    }
    let ops = [
        Operator::Sum,
        Operator::Softmax,
        Operator::CrossEntropy,
        Operator::CrossEntropyWithLse,
        Operator::CrossEntropyWithGrad,
        Operator::CrossEntropyBackward,
        Operator::SoftmaxBackward,
        Operator::Rmsnorm,
        Operator::Layernorm,
        Operator::ResidualLayernorm,
    ];
    let mut cases = vec![];
    for op in ops {
        // Even rows too for the norms (the operators with a cold path):
        // their columns are then read gcd(N, V) elements an access.
        let lengths: &[usize] = if op.has_cold_path() {
            &[3, 127, 1001, 1002, 4103]
        } else {
            &[3, 127, 1001, 4103]
        };
        for dtype in [DType::F32, DType::Bf16] {
            for &n in lengths {
                for (workers, pack) in [(32, 8), (128, 2), (256, 4), (1024, 8)] {
                    for residency in [ResidencyRequest::Auto, ResidencyRequest::Stream] {
                        cases.push(Case {
                            op,
                            dtype,
                            shape: shape(37, n),
                            request: LayoutRequest {
                                workers,
                                pack,
                                residency,
                                aligned_packs: true,
                                ..Default::default()
                            },
                            seed: 43 + n as u64,
                        });
                    }
                }
            }
        }
    }
    // Rows spanning a cluster, pushed and through distributed shared
    // memory: the groups share the row's shift.
    for op in [
        Operator::Softmax,
        Operator::CrossEntropy,
        Operator::Rmsnorm,
        Operator::ResidualLayernorm,
    ] {
        for dtype in [DType::F32, DType::Bf16] {
            for (workers, pack, threads, pushed, n) in
                [(4096, 4, 512, true, 40003), (2048, 8, 256, false, 65541)]
            {
                cases.push(Case {
                    op,
                    dtype,
                    shape: shape(5, n),
                    request: LayoutRequest {
                        workers,
                        pack,
                        cluster_group_threads: threads,
                        push_cluster_reduce: pushed,
                        aligned_packs: true,
                        ..Default::default()
                    },
                    seed: 47 + n as u64,
                });
            }
        }
    }
    precompile(backend, &cases, &CodegenOptions::default());
    for case in &cases {
        let label = format!(
            "aligned packs {} {} {} W={} V={} {:?}",
            case.op,
            case.dtype,
            case.shape,
            case.request.workers,
            case.request.pack,
            case.request.residency
        );
        let pack = case.request.pack as usize;
        let applies = !case.shape.n.is_multiple_of(pack)
            && (pack * case.dtype.size_bytes()).is_multiple_of(4);
        match run_case(backend, case, &CodegenOptions::default()) {
            Ok(out) => report.record(
                out.validation.pass && out.plan.aligned_packs == applies,
                &label,
                &format!(
                    "{} rel err {:.3e}",
                    out.plan.describe(),
                    out.validation.worst_rel_err()
                ),
            ),
            Err(e) => report.record(false, &label, &format!("{e:#}")),
        }
    }
}

/// Batched loads (`batch_loads`): every operator, f32 and bf16, streamed
/// with re-read hints, one to two packs a worker, alone and with one
/// group per multiprocessor promised (the defaults' form for norm rows of
/// 128 KiB). Same bits as without; marked on every streamed plan.
pub fn batched_load_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::ResidencyRequest;
    let bases: [(&str, RequestEdit); 2] = [
        ("batched loads", streamed_with_reread_hints),
        ("batched loads, one group per SM", |request| {
            request.residency = ResidencyRequest::Stream;
            request.reread_hints = true;
            request.occupancy_cap = 1;
            request.occupancy = 1;
        }),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(256, 4, 1024), (1024, 4, 8192), (1024, 8, 16384)],
        37,
        |request| request.batch_loads = true,
        |plan| plan.batched_loads,
        |plan| plan.residency == lanefold_plan::Residency::Stream,
    );
}

/// Unguarded stores (`unguarded_stores`): every operator, f32 and bf16,
/// in registers, streamed and in aligned packs, on rows one group holds
/// alone and on rows split over a cluster or packed several to a group
/// (not marked there), 37 rows so the last group of several is partly
/// past the end. Same bits as with the guard.
pub fn unguarded_store_checks(backend: &Backend, report: &mut Report) {
    let bases: [(&str, RequestEdit); 3] = [
        ("unguarded stores, registers", in_registers),
        ("unguarded stores, streamed", streamed_with_reread_hints),
        ("unguarded stores, aligned packs", |request| {
            request.aligned_packs = true;
        }),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[
            (32, 4, 250),
            (256, 4, 1027),
            (512, 8, 8190),
            (2048, 4, 16388),
        ],
        37,
        |request| request.unguarded_stores = true,
        |plan| plan.unguarded_stores,
        |plan| {
            plan.layout.rows_per_group == 1
                && plan.groups_per_row == 1
                && plan.row_prefetch.is_none()
        },
    );
}

/// Recomputed derived tiles (`recompute_derived`): every operator, f32
/// and bf16, in registers (plain, packed 16-bit tiles, aligned packs) and
/// streamed and under one-pass moments (not marked there). Same bits as
/// keeping them.
pub fn recompute_derived_checks(backend: &Backend, report: &mut Report) {
    let bases: [(&str, RequestEdit); 4] = [
        ("recompute derived, registers", in_registers),
        ("recompute derived, packed", packed_in_registers),
        ("recompute derived, aligned packs", |request| {
            in_registers(request);
            request.aligned_packs = true;
        }),
        ("recompute derived, streamed", streamed_with_reread_hints),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(32, 4, 250), (256, 4, 1027), (256, 8, 8190)],
        37,
        |request| request.recompute_derived = true,
        |plan| plan.recompute_derived,
        |plan| plan.residency == lanefold_plan::Residency::Registers && !plan.one_pass_moments(),
    );
}

/// An occupancy cap (`occupancy_cap`): every operator, f32 and bf16,
/// streamed with re-read hints (whose pack addresses then fold) and in
/// registers, at one group per multiprocessor. Same bits as without;
/// marked wherever the threads alone would allow a second group.
pub fn occupancy_cap_checks(backend: &Backend, report: &mut Report) {
    let bases: [(&str, RequestEdit); 2] = [
        ("occupancy cap, streamed", streamed_with_reread_hints),
        ("occupancy cap, registers", in_registers),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(32, 4, 512), (256, 4, 4096), (1024, 4, 8192)],
        37,
        |request| request.occupancy_cap = 1,
        |plan| plan.occupancy_cap.is_some(),
        |_| true,
    );
}

/// Columns kept in L1 (`l1_columns`): every operator, f32 and bf16, in
/// register plans, streamed plans with re-read hints (row tiles that
/// bypass L1 with an L2 policy) and one warp. Same bits as without; marked
/// exactly where the program has columns.
pub fn l1_column_checks(backend: &Backend, report: &mut Report) {
    let bases: [(&str, RequestEdit); 2] = [
        ("columns in L1", in_registers),
        ("columns in L1, streamed", streamed_with_reread_hints),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(32, 4, 512), (256, 4, 4096), (512, 8, 16384)],
        37,
        |request| request.l1_columns = true,
        |plan| plan.l1_columns,
        |plan| plan.problem.program.column_inputs().count() > 0,
    );
}

/// Columns loaded in order below the chunk before's stores
/// (`ordered_columns`): every operator, f32 and bf16, in register plans
/// (bf16 also with packed tiles, the combination it is for) and streamed
/// plans, with and without kept columns' L2 policy. Same bits as without;
/// marked exactly where the program has columns.
pub fn ordered_column_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::ResidencyRequest;
    let bases: [(&str, RequestEdit); 4] = [
        ("ordered columns", in_registers),
        ("ordered columns, packed", packed_in_registers),
        ("ordered columns, kept", |request| {
            request.residency = ResidencyRequest::Registers;
            request.keep_columns = true;
        }),
        ("ordered columns, streamed", streamed_with_reread_hints),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(32, 4, 512), (256, 4, 4096), (512, 8, 16384)],
        37,
        |request| request.ordered_columns = true,
        |plan| plan.ordered_columns,
        |plan| plan.problem.program.column_inputs().count() > 0,
    );
}

/// Packed register tiles in a pushed cluster with one-pass moments: the
/// long-row layernorm default's form.
fn pushed_packed_one_pass(request: &mut LayoutRequest) {
    packed_in_registers(request);
    request.push_cluster_reduce = true;
    request.one_pass_moments = true;
}

/// Register plans plain, packed, and pushed with one-pass moments (the
/// long-row layernorm default's form), named by `labels` in that order.
fn register_forms(labels: [&'static str; 3]) -> [(&'static str, RequestEdit); 3] {
    [
        (labels[0], in_registers),
        (labels[1], packed_in_registers),
        (labels[2], pushed_packed_one_pass),
    ]
}

/// (W, V, n) of one group and of clusters of f32 and bf16 packs, for
/// checks over [`register_forms`].
const REGISTER_FORM_LAYOUTS: [(u32, u32, usize); 3] =
    [(256, 4, 4096), (2048, 4, 8192), (2048, 8, 32768)];

/// The norms' cold path (the default; `no_cold_path` leaves it out): rows
/// the fast statistics get right keep every bit. Every operator, f32 and
/// bf16, in register plans of one group and of a cluster, plain, packed,
/// pushed with one-pass moments, and streamed; marked exactly on the
/// norms.
pub fn cold_path_checks(backend: &Backend, report: &mut Report) {
    let bases: [(&str, RequestEdit); 4] = [
        ("cold path", |r| {
            in_registers(r);
            r.no_cold_path = true;
        }),
        ("cold path, packed", |r| {
            packed_in_registers(r);
            r.no_cold_path = true;
        }),
        ("cold path, pushed", |r| {
            pushed_packed_one_pass(r);
            r.no_cold_path = true;
        }),
        ("cold path, streamed", |r| {
            streamed_with_reread_hints(r);
            r.no_cold_path = true;
        }),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &REGISTER_FORM_LAYOUTS,
        37,
        |request| request.no_cold_path = false,
        |plan| plan.cold_path(),
        |plan| {
            matches!(
                plan.problem.operator_kind(),
                Some(Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm)
            )
        },
    );
}

/// The output phase's first chunks' columns loaded before the reduction
/// (`early_columns`): every operator, f32 and bf16, in register plans of
/// one group and of a cluster, plain, packed, and pushed with one-pass
/// moments (the long-row layernorm default's form). Same bits as without;
/// marked exactly on register plans of programs with columns.
pub fn early_column_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::Residency;
    same_bits_over_bases(
        backend,
        report,
        &register_forms([
            "early columns",
            "early columns, packed",
            "early columns, pushed",
        ]),
        &REGISTER_FORM_LAYOUTS,
        37,
        |request| request.early_columns = 2,
        |plan| plan.early_columns > 0,
        |plan| {
            plan.problem.program.column_inputs().count() > 0
                && plan.residency == Residency::Registers
        },
    );
}

/// Each group's share of the row two ahead prefetched into L2
/// (`l2_prefetch_rows`): every operator, f32 and bf16, in register plans
/// of one group and of a cluster, plain, packed, and pushed with one-pass
/// moments, on 37 rows, so the last rows' prefetches fall past the end
/// and must be skipped. Same bits as without; marked exactly on register
/// plans of one row per group.
pub fn l2_prefetch_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::Residency;
    same_bits_over_bases(
        backend,
        report,
        &register_forms(["l2 prefetch", "l2 prefetch, packed", "l2 prefetch, pushed"]),
        &REGISTER_FORM_LAYOUTS,
        37,
        |request| request.l2_prefetch_rows = 2,
        |plan| plan.l2_prefetch_rows > 0,
        |plan| plan.residency == Residency::Registers && plan.layout.rows_per_group == 1,
    );
}

/// The row's last chunks held in shared memory (`shared_chunks`): every
/// operator, f32 and bf16, in register plans of one group and of a
/// cluster, plain, packed, and pushed with one-pass moments (the long-row
/// layernorm form), with part of the row and all of it in shared memory,
/// and rows ending in a partial chunk (kept in registers beside the
/// shared ones) or in a partial pack (no shared chunks). Same bits as
/// without; marked exactly on register plans of one row per group whose
/// one row input stays resident and whose packs are whole.
pub fn shared_chunk_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::Residency;
    let mut layouts = REGISTER_FORM_LAYOUTS.to_vec();
    layouts.extend([
        (256, 4, 4000),
        (256, 8, 5000),
        (2048, 4, 9000),
        (256, 4, 4002),
    ]);
    same_bits_over_bases(
        backend,
        report,
        &register_forms([
            "shared chunks",
            "shared chunks, packed",
            "shared chunks, pushed",
        ]),
        &layouts,
        37,
        |request| request.shared_chunks = 2,
        |plan| plan.shared_chunks.is_some(),
        |plan| {
            plan.residency == Residency::Registers
                && plan.layout.rows_per_group == 1
                && plan.shape().n.is_multiple_of(plan.layout.pack as usize)
                && plan
                    .analysis
                    .resident_row_load(&plan.problem.program)
                    .is_some()
        },
    );
}

/// The rounded tile kept resident instead of its operands
/// (`rounded_resident`, residual_layernorm's h): every operator, f32, bf16
/// and f16, in register plans of one group and of a cluster, plain and
/// packed (with one-pass moments), and streamed plans, which keep x and
/// the residual. Same bits as without; marked exactly on register plans of
/// programs with such a tile.
pub fn rounded_resident_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::Residency;
    let bases: [(&str, RequestEdit); 3] = [
        ("rounded resident", in_registers),
        ("rounded resident, packed", packed_in_registers),
        ("rounded resident, streamed", streamed_with_reread_hints),
    ];
    for (name, base) in bases {
        same_bits_policy_checks(
            backend,
            report,
            name,
            &[DType::F32, DType::Bf16, DType::F16],
            &[(32, 4, 512), (256, 4, 4096), (512, 8, 16384)],
            37,
            base,
            |request| request.rounded_resident = true,
            |plan| plan.rounded_resident,
            |plan| {
                let program = &plan.problem.program;
                plan.residency == Residency::Registers
                    && program
                        .verify()
                        .is_ok_and(|a| a.keeping_rounded_tiles(program).is_some())
            },
        );
    }
}

/// Persistent clusters (`persistent_clusters`): every operator, f32 and
/// bf16, on clusters of 8 and 16 groups, pushed, plain, with staged
/// columns and packed with one-pass moments, on CUDA on 3001 rows, so that
/// every cluster loops over many rows and both sets of slots and barriers
/// turn over (the CPU executor, which runs no grid, checks the marking on
/// 37). Same bits as one cluster a row; marked exactly on pushed cluster
/// register plans.
pub fn persistent_cluster_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::Residency;
    let rows = match backend {
        Backend::Cuda(_) => 3001,
        _ => 37,
    };
    let bases: [(&str, RequestEdit); 3] = [
        ("persistent clusters", |request| {
            in_registers(request);
            request.push_cluster_reduce = true;
        }),
        ("persistent clusters, staged", |request| {
            in_registers(request);
            request.push_cluster_reduce = true;
            request.stage_columns = true;
        }),
        ("persistent clusters, packed", |request| {
            packed_in_registers(request);
            request.push_cluster_reduce = true;
        }),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        &[(2048, 4, 8192), (2048, 8, 16384), (4096, 4, 16384)],
        rows,
        |request| request.persistent_clusters = true,
        |plan| plan.persistent_clusters,
        |plan| {
            plan.groups_per_row > 1
                && plan.pushed_cluster_reduce
                && plan.residency == Residency::Registers
        },
    );
}

/// Prefetched rows in persistent clusters (`prefetch_rows` with
/// `persistent_clusters`): every operator, f32 and bf16, on clusters of 8
/// and 16 groups, plain and packed with one-pass moments, on CUDA on 1001
/// rows (3001 took 176 s, which the quick half cannot spare), so every
/// group copies its strided share of dozens of rows and the
/// buffer's `mbarrier` turns over (the CPU executor checks the marking on
/// 37). Same bits as the persistent cluster without the copy; marked
/// exactly where the program has one row input.
pub fn prefetched_cluster_checks(backend: &Backend, report: &mut Report) {
    let rows = match backend {
        Backend::Cuda(_) => 1001,
        _ => 37,
    };
    let bases: [(&str, RequestEdit); 2] = [
        ("prefetched clusters", |request| {
            in_registers(request);
            request.push_cluster_reduce = true;
            request.persistent_clusters = true;
        }),
        ("prefetched clusters, packed", |request| {
            packed_in_registers(request);
            request.push_cluster_reduce = true;
            request.persistent_clusters = true;
        }),
    ];
    same_bits_over_bases(
        backend,
        report,
        &bases,
        // One copy a group, then 2 (clusters of 8, then of 16).
        &[(2048, 4, 8192), (2048, 4, 16384), (4096, 4, 32768)],
        rows,
        |request| request.prefetch_rows = true,
        |plan| plan.row_prefetch.is_some(),
        |plan| plan.persistent_clusters && plan.problem.program.row_inputs().count() == 1,
    );
}

/// Prefetched rows (`prefetch_rows`): every operator, f32, bf16 and f16,
/// on CUDA on 3001 rows, so that each persistent group takes several rows
/// and the last ones fewer (the CPU executor, which runs no grid, checks
/// the marking on 301). Same bits as the plain register plan; marked
/// exactly where the program has one row input (not residual_layernorm).
pub fn prefetched_rows_checks(backend: &Backend, report: &mut Report) {
    let rows = match backend {
        Backend::Cuda(_) => 3001,
        _ => 301,
    };
    same_bits_policy_checks(
        backend,
        report,
        "prefetched rows",
        &[DType::F32, DType::Bf16, DType::F16],
        // One warp (no block barrier in its tree), then 8 and 16 warps.
        &[(32, 4, 512), (256, 4, 4096), (512, 8, 16384)],
        rows,
        |request| {
            request.rows_per_group = 1;
            request.residency = lanefold_plan::ResidencyRequest::Registers;
        },
        |request| request.prefetch_rows = true,
        |plan| plan.row_prefetch.is_some(),
        |plan| plan.problem.program.row_inputs().count() == 1,
    );
}

/// Two rows per cluster (G=2 on a row spanning a cluster: each group holds
/// the same slice of both rows): every operator, f32 and bf16, on clusters
/// of 8 and 16 groups, with the barrier on an even row count and the
/// pushed reduction on an odd one (the last cluster's second row past the
/// end computes and stores nothing). Same bits as one row per cluster.
pub fn cluster_rows_checks(backend: &Backend, report: &mut Report) {
    let two_rows = |plan: &Plan| {
        plan.layout.rows_per_group == 2
            && plan.threads_per_group == 512
            && plan.groups == plan.shape().rows.div_ceil(2) as u64 * plan.groups_per_row as u64
    };
    for (name, rows, base) in [
        ("two rows per cluster", 300, (|_| {}) as RequestEdit),
        ("two rows per cluster, pushed", 17, |request| {
            request.push_cluster_reduce = true
        }),
    ] {
        same_bits_policy_checks(
            backend,
            report,
            name,
            &[DType::F32, DType::Bf16],
            &[(2048, 4, 16384), (4096, 8, 65536)],
            rows,
            base,
            |request| request.rows_per_group = 2,
            two_rows,
            |plan| plan.groups_per_row > 1,
        );
    }
}

/// Column slices staged in shared memory with `cp.async`
/// (`stage_columns`): every operator, f32 and bf16, on clusters of 8
/// groups of 256 threads with 2-word packs (V=4 bf16), 4-word packs, and
/// two accesses per pack (V=8 f32). Same bits as the plan without staging;
/// the plan is marked exactly where the program has columns.
pub fn staged_column_checks(backend: &Backend, report: &mut Report) {
    same_bits_policy_checks(
        backend,
        report,
        "staged columns",
        &[DType::F32, DType::Bf16],
        &[(2048, 4, 16384), (2048, 8, 32768)],
        300,
        |_| {},
        |request| request.stage_columns = true,
        |plan| plan.staged_columns(),
        |plan| plan.problem.program.column_inputs().count() > 0,
    );
}

/// Resident tiles of 16-bit inputs kept as their loaded words, two values
/// per register (`pack_resident`): every operator, f32, bf16 and f16, on a
/// cluster and on single groups (V=4 and V=8). Same bits as the unpacked
/// plan; marked exactly where a 16-bit plan holds a tile in registers.
/// Rows ending in a partial chunk pack in explicit register plans (that
/// chunk's words read element by element), rows of a partial pack never.
pub fn packed_resident_checks(backend: &Backend, report: &mut Report) {
    same_bits_policy_checks(
        backend,
        report,
        "packed resident",
        &[DType::F32, DType::Bf16, DType::F16],
        &[(2048, 8, 32768), (256, 4, 4096), (512, 8, 4096)],
        300,
        |_| {},
        |request| request.pack_resident = true,
        |plan| plan.packed_resident,
        |plan| plan.dtype() != DType::F32 && plan.resident_slots > 0,
    );
    same_bits_policy_checks(
        backend,
        report,
        "packed resident, partial chunk",
        &[DType::F32, DType::Bf16, DType::F16],
        &[
            (2048, 8, 36000),
            (256, 4, 4000),
            (512, 8, 5000),
            (256, 4, 4002),
        ],
        300,
        in_registers,
        |request| request.pack_resident = true,
        |plan| plan.packed_resident,
        |plan| {
            plan.dtype() != DType::F32
                && plan.resident_slots > 0
                && plan.shape().n.is_multiple_of(plan.layout.pack as usize)
        },
    );
}

/// The relaxed arrive before exit (`relaxed_cluster_exit`): every operator,
/// f32 and bf16, on clusters of 8 and 16 groups. Same bits as the release
/// arrive; marked exactly where a row spans a cluster.
pub fn relaxed_exit_checks(backend: &Backend, report: &mut Report) {
    same_bits_policy_checks(
        backend,
        report,
        "relaxed cluster exit",
        &[DType::F32, DType::Bf16],
        &[(2048, 4, 16384), (4096, 8, 65536)],
        300,
        |_| {},
        |request| request.relaxed_cluster_exit = true,
        |plan| plan.relaxed_cluster_exit,
        |plan| plan.groups_per_row > 1,
    );
}

/// The pushed cluster reduction (`push_cluster_reduce`): every operator,
/// f32 and bf16 (softmax and cross_entropy also with the online
/// normalizer's pairs), on clusters of 8 and 16 groups. Same bits as the
/// pulled reduction; marked exactly where a row spans a cluster.
pub fn pushed_reduce_checks(backend: &Backend, report: &mut Report) {
    let layouts = [(2048, 4, 16384), (4096, 8, 65536)];
    let dtypes = [DType::F32, DType::Bf16];
    let spans = |plan: &Plan| plan.groups_per_row > 1;
    same_bits_policy_checks(
        backend,
        report,
        "pushed reduction",
        &dtypes,
        &layouts,
        300,
        |_| {},
        |request| request.push_cluster_reduce = true,
        |plan| plan.pushed_cluster_reduce,
        spans,
    );
    same_bits_policy_checks(
        backend,
        report,
        "pushed reduction, online normalizer",
        &dtypes,
        &layouts,
        300,
        |request| request.online_normalizer = true,
        |request| request.push_cluster_reduce = true,
        |plan| plan.pushed_cluster_reduce,
        spans,
    );
}

/// The base layouts most policy checks run on: a register plan, and a
/// streamed plan with re-read hints.
fn in_registers(request: &mut LayoutRequest) {
    request.residency = lanefold_plan::ResidencyRequest::Registers;
}

/// A register plan with packed 16-bit tiles and one-pass moments: the
/// combination the packed layernorm defaults take.
fn packed_in_registers(request: &mut LayoutRequest) {
    in_registers(request);
    request.pack_resident = true;
    request.one_pass_moments = true;
}

fn streamed_with_reread_hints(request: &mut LayoutRequest) {
    request.residency = lanefold_plan::ResidencyRequest::Stream;
    request.reread_hints = true;
}

/// [`same_bits_policy_checks`] in f32 and bf16 on 37 rows for each named
/// base layout: the shape most policies' checks share.
#[allow(clippy::too_many_arguments)]
fn same_bits_over_bases(
    backend: &Backend,
    report: &mut Report,
    bases: &[(&str, RequestEdit)],
    layouts: &[(u32, u32, usize)],
    rows: usize,
    enable: RequestEdit,
    marked: fn(&Plan) -> bool,
    applies: fn(&Plan) -> bool,
) {
    for &(name, base) in bases {
        same_bits_policy_checks(
            backend,
            report,
            name,
            &[DType::F32, DType::Bf16],
            layouts,
            rows,
            base,
            enable,
            marked,
            applies,
        );
    }
}

/// A load or register policy that must not change a bit: each operator
/// and dtype on each (W, V, n) with `rows` rows, 256-thread cluster
/// groups and `base`,
/// planned without and with `enable`; the second valid, marked (`marked`) exactly
/// where `applies` says, and bit-identical to the first.
#[allow(clippy::too_many_arguments)]
fn same_bits_policy_checks(
    backend: &Backend,
    report: &mut Report,
    name: &str,
    dtypes: &[DType],
    layouts: &[(u32, u32, usize)],
    rows: usize,
    base: RequestEdit,
    enable: RequestEdit,
    marked: fn(&Plan) -> bool,
    applies: fn(&Plan) -> bool,
) {
    let case = |op, dtype, (workers, pack, n): (u32, u32, usize), on: bool| {
        let mut request = LayoutRequest {
            workers,
            pack,
            cluster_group_threads: 256,
            ..Default::default()
        };
        base(&mut request);
        if on {
            enable(&mut request);
        }
        Case {
            op,
            dtype,
            shape: shape(rows, n),
            request,
            seed: 29 + pack as u64,
        }
    };
    let options = CodegenOptions::default();
    let mut all = vec![];
    for op in operators() {
        for &dtype in dtypes {
            for &layout in layouts {
                all.extend([false, true].map(|on| case(op, dtype, layout, on)));
            }
        }
    }
    precompile(backend, &all, &options);
    for pair in all.chunks_exact(2) {
        let (plain, variant) = (&pair[0], &pair[1]);
        let about_cold_path = plain.request.no_cold_path != variant.request.no_cold_path;
        let label = format!(
            "{name} {} {} {} W={} V={}",
            plain.op, plain.dtype, plain.shape, plain.request.workers, plain.request.pack
        );
        match run_layouts(backend, plain, &[plain.request, variant.request], &options).as_deref() {
            Ok([plain, variant]) => {
                // Where the check is about the cold path and the runtime ran
                // the plain kernel instead (its documented fallback), the
                // plan is rightly unmarked.
                let fell_back =
                    about_cold_path && variant.cold_path.as_ref().is_some_and(|d| d.fell_back());
                let ok = variant.validation.pass
                    && (marked(&variant.plan) == applies(&variant.plan)
                        || (fell_back && !marked(&variant.plan)))
                    && same_bits(&plain.outputs, &variant.outputs);
                let mut detail = variant.plan.describe();
                if let (true, Some(d)) = (fell_back, &variant.cold_path) {
                    detail = format!("{detail} ({d})");
                }
                report.record(ok, &label, &detail);
            }
            Ok(_) => unreachable!("two layouts, two outcomes"),
            Err(e) => report.record(false, &label, &format!("{e:#}")),
        }
    }
}

/// The arithmetic variants that change rounding, each on the operators it
/// rewrites: the online normalizer (softmax, cross_entropy) and one-pass
/// moments (layernorm, residual_layernorm). Register plans of one group,
/// several rows per group and a cluster of 256-thread groups, and a
/// streamed plan with re-read hints; each valid against float64 (the
/// rounding differs from the plain plan's), each plan marked, and softmax
/// and the layernorms with one phase fewer (two).
pub fn arithmetic_variant_checks(backend: &Backend, report: &mut Report) {
    use lanefold_plan::ResidencyRequest;
    struct Variant {
        name: &'static str,
        request: LayoutRequest,
        ops: [Operator; 2],
        dtypes: [DType; 2],
        marked: fn(&Plan) -> bool,
        /// Phases of the variant's program for this plan (cross_entropy
        /// aside).
        phases: fn(&Plan) -> usize,
        seed: u64,
    }
    let variants = [
        Variant {
            name: "online normalizer",
            request: LayoutRequest {
                online_normalizer: true,
                ..Default::default()
            },
            ops: [Operator::Softmax, Operator::CrossEntropy],
            dtypes: [DType::F32, DType::Bf16],
            marked: Plan::online_normalizer,
            phases: |_| 2,
            seed: 23,
        },
        Variant {
            name: "one-pass moments",
            request: LayoutRequest {
                one_pass_moments: true,
                ..Default::default()
            },
            ops: [Operator::Layernorm, Operator::ResidualLayernorm],
            dtypes: [DType::F32, DType::Bf16],
            marked: Plan::one_pass_moments,
            phases: |_| 2,
            seed: 29,
        },
        // 16-bit rows only: f32 rows keep the centred output. An automatic
        // layout on the H200 may add one-pass moments (few rows), which
        // the fused form keeps (regression: on CUDA the 1x127 checks
        // expected three phases there).
        Variant {
            name: "fused output",
            request: LayoutRequest {
                fused_output: true,
                ..Default::default()
            },
            ops: [Operator::Layernorm, Operator::ResidualLayernorm],
            dtypes: [DType::Bf16, DType::F16],
            marked: Plan::fused_output,
            phases: |p| if p.one_pass_moments() { 2 } else { 3 },
            seed: 31,
        },
        Variant {
            name: "fused output, one-pass moments",
            request: LayoutRequest {
                fused_output: true,
                one_pass_moments: true,
                ..Default::default()
            },
            ops: [Operator::Layernorm, Operator::ResidualLayernorm],
            dtypes: [DType::Bf16, DType::F16],
            marked: |p| p.fused_output() && p.one_pass_moments(),
            phases: |_| 2,
            seed: 37,
        },
    ];
    for Variant {
        name,
        request: variant,
        ops,
        dtypes,
        marked,
        phases,
        seed,
    } in variants
    {
        for op in ops.into_iter().filter(|op| operators().contains(op)) {
            for dtype in dtypes {
                for (rows, n, workers, pack, group_threads, residency) in [
                    (1, 127, 0, 0, 0, ResidencyRequest::Auto),
                    (17, 257, 32, 4, 0, ResidencyRequest::Auto),
                    (64, 4096, 256, 4, 0, ResidencyRequest::Auto),
                    (3, 65536, 2048, 4, 256, ResidencyRequest::Auto),
                    (4, 32768, 1024, 8, 0, ResidencyRequest::Stream),
                ] {
                    let case = Case {
                        op,
                        dtype,
                        shape: shape(rows, n),
                        request: LayoutRequest {
                            workers,
                            pack,
                            residency,
                            cluster_group_threads: group_threads,
                            reread_hints: residency == ResidencyRequest::Stream,
                            mapper: lanefold_plan::MapperPolicy::Model,
                            ..variant
                        },
                        seed: seed + n as u64,
                    };
                    let label = format!("{name} {op} {dtype} {rows}x{n} W={workers} {residency:?}");
                    match run_case(backend, &case, &CodegenOptions::default()) {
                        Ok(out) => {
                            let phases_ok = op == Operator::CrossEntropy
                                || out.plan.analysis.num_phases == phases(&out.plan);
                            let ok = out.validation.pass && marked(&out.plan) && phases_ok;
                            report.record(ok, &label, &out.plan.describe());
                        }
                        Err(e) => report.record(false, &label, &format!("{e:#}")),
                    }
                }
            }
        }
    }
}

/// CUDA only: lanefold's one-call path (a cached graph of the kernel, with
/// its cluster dimension where it has one, and its flag node, parameters
/// following the call's input set) writes exactly what a direct launch
/// writes, into the buffers of the call's own input set:
/// two sets, each called twice, each compared bit for bit; and it ended
/// with the flag it should throughout.
pub fn call_path_checks(backend: &Backend, report: &mut Report) {
    let Backend::Cuda(cuda) = backend else {
        return;
    };
    let options = CodegenOptions::default();
    for (op, dtype, rows, n) in [
        (Operator::Rmsnorm, DType::F32, 1, 127),
        (Operator::Softmax, DType::Bf16, 64, 4096),
        (Operator::CrossEntropy, DType::F32, 1024, 4096),
        (Operator::ResidualLayernorm, DType::Bf16, 17, 257),
        (Operator::Layernorm, DType::F32, 3, 65536),
    ] {
        let label = format!("call path {op} {dtype} {rows}x{n}");
        let problem = Problem::operator(op, OperatorOptions::default(), dtype, shape(rows, n));
        let result = (|| -> anyhow::Result<(bool, bool)> {
            let plan = plan(&problem, &backend.target(), &LayoutRequest::default())?;
            let sets = [random_inputs(&problem, 21), random_inputs(&problem, 22)];
            let mut prepared = cuda.prepare(&plan, &options, &sets)?;
            // Each single() calls twice with one set, rotating sets.
            prepared.single()?;
            prepared.single()?;
            let mut same = true;
            for (k, inputs) in sets.iter().enumerate() {
                let mut direct = poisoned_outputs(&problem);
                backend.execute(&plan, &options, inputs, &mut direct)?;
                let called = prepared.outputs(k)?;
                same &= same_bits(&direct, &called);
            }
            let expected = lanefold_cuda::CallCompletion::FlagNode;
            Ok((same, prepared.call_completion() == Some(Some(expected))))
        })();
        match result {
            Ok((same, signalled)) => {
                report.record(same, &label, "outputs differ from a direct launch's");
                // Four calls, each seen through its own flag write (for the
                // watcher form: the counter was back at zero every call).
                report.record(
                    signalled,
                    &format!("{label}: ends with its flag"),
                    "the call fell back to a slower completion",
                );
            }
            Err(e) => report.record(false, &label, &format!("{e:#}")),
        }
    }
}

/// CUDA only: the latency probe's flag waits arrive. The kernel-written
/// flag and the call graph's flag node must both be set up and time every
/// call under every schedule (a flag freed before it was read crashed the
/// probe once; a lost write would time out instead).
pub fn latency_flag_checks(backend: &Backend, report: &mut Report) {
    let Backend::Cuda(cuda) = backend else {
        return;
    };
    let iters = 20;
    let problem = Problem::operator(
        Operator::Rmsnorm,
        OperatorOptions::default(),
        DType::F32,
        shape(1, 127),
    );
    let result = (|| -> anyhow::Result<Vec<lanefold_cuda::LatencyProbe>> {
        let plan = plan(&problem, &backend.target(), &LayoutRequest::default())?;
        let sets = [random_inputs(&problem, 23)];
        let mut prepared = cuda.prepare(&plan, &CodegenOptions::default(), &sets)?;
        Ok(prepared.latency_probe(iters)?)
    })();
    for variant in [
        lanefold_cuda::LatencyVariant::CallKernelFlag,
        lanefold_cuda::LatencyVariant::CallPathWait,
        lanefold_cuda::LatencyVariant::PathFlagNode,
        lanefold_cuda::LatencyVariant::PathTicket,
        lanefold_cuda::LatencyVariant::PathWatcher,
    ] {
        let label = format!("latency probe: {}", variant.label());
        match &result {
            Ok(probes) => {
                let timed: Vec<_> = probes.iter().filter(|p| p.variant == variant).collect();
                report.record(
                    !timed.is_empty()
                        && timed.iter().all(|p| {
                            p.host_us.len() == iters && p.host_us.iter().all(|&us| us > 0.0)
                        }),
                    &label,
                    &format!("{} schedules timed it", timed.len()),
                );
            }
            Err(e) => report.record(false, &label, &format!("{e:#}")),
        }
    }
}

/// Cases drawn per batch of `fuzz_checks`: on CUDA each batch's kernels
/// compile ahead on all cores.
const FUZZ_BATCH: u64 = 256;

/// Differential fuzzing: `cases` cases of the stream `seed` drawn by
/// [`lanefold_cpu::fuzz::draw`] (planned on the backend's target), each
/// run on `backend` and judged against the independent float64 oracle:
/// where the CUDA runtime ran a norm's plain kernel, the rows that kernel
/// promises ([`lanefold_cpu::fuzz::check_resolved`]).
pub fn fuzz_checks(backend: &Backend, cases: u64, seed: u64, report: &mut Report) {
    use lanefold_cpu::fuzz::{check_resolved, draw, FuzzLimits};
    use rayon::prelude::*;
    let target = backend.target();
    let limits = FuzzLimits {
        max_elements: 1 << 20,
    };
    let options = CodegenOptions::default();
    let mut start = 0;
    let mut rows_left_out = 0;
    while start < cases {
        let end = (start + FUZZ_BATCH).min(cases);
        // Drawing and judging (float64 on the host) run on every core; the
        // device runs one case at a time.
        let batch: Vec<_> = (start..end)
            .into_par_iter()
            .map(|i| (i, draw(seed, i, &target, limits)))
            .collect();
        if let Backend::Cuda(cuda) = backend {
            let jobs: Vec<_> = batch
                .iter()
                .map(|(_, c)| (c.plan.clone(), options))
                .collect();
            cuda.precompile(&jobs);
        }
        let ran: Vec<_> = batch
            .iter()
            .map(|(_, case)| {
                let mut outputs = poisoned_outputs(&case.plan.problem);
                backend
                    .execute(&case.plan, &options, &case.inputs, &mut outputs)
                    .map(|(resolved, cold)| (outputs, resolved, cold))
            })
            .collect();
        let judged: Vec<_> = batch
            .par_iter()
            .zip(ran)
            .map(|((i, case), ran)| {
                let label = format!("fuzz seed {seed} case {i}: {}", case.label());
                match ran {
                    Ok((outputs, resolved, cold)) => {
                        // Where the runtime ran the plain kernel, rows past
                        // its known limits are not held to float64.
                        let (v, left_out) = check_resolved(case, &resolved, &outputs);
                        let mut detail = format!("{:?}", v.outputs);
                        if let Some(d) = cold.filter(|d| d.fell_back()) {
                            detail = format!(
                                "{detail} (the runtime ran the plain kernel, {left_out} rows \
                                 past its limits left out: {d})"
                            );
                        }
                        (v.pass, label, detail, left_out)
                    }
                    Err(e) => (false, label, format!("{e:#}"), 0),
                }
            })
            .collect();
        for (pass, label, detail, left_out) in judged {
            report.record(pass, &label, &detail);
            rows_left_out += left_out;
        }
        println!(
            "fuzz: {end}/{cases} cases, {} ({rows_left_out} rows past the plain kernel's \
             limits left out where the runtime ran it)",
            report.summary()
        );
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrowing_keeps_the_chosen_operators_in_order_and_caps_rows() {
        let all = Narrowing::default();
        assert_eq!(all.operators(), Operator::SIX.to_vec());
        assert_eq!(all.rows(3001), 3001);
        assert_eq!(all.describe(), None);
        let some = Narrowing {
            ops: vec![Operator::CrossEntropy, Operator::Softmax],
            max_rows: Some(64),
        };
        assert_eq!(
            some.operators(),
            vec![Operator::Softmax, Operator::CrossEntropy]
        );
        assert_eq!((some.rows(3001), some.rows(5)), (64, 5));
        assert_eq!(
            some.describe().unwrap(),
            "narrowed to operators cross_entropy,softmax, at most 64 rows"
        );
    }
}
