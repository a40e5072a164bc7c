//! `lanefold bench`: each case planned, measured on lanefold's backend and
//! on each PyTorch peer mode through the same phases, every output
//! validated against float64, positions alternating from case to case, and
//! results.json rewritten atomically after every case.

use crate::devices::{CpuTimer, CudaTimer};
use crate::env::capture;
use crate::peer::{PeerMode, PeerProcess, PeerRequest};
use crate::phases::{sample, L2Mode, PhaseConfig, PhaseRecord};
use crate::render;
use crate::results::{CaseResult, KernelRecord, PlanRecord, ResultsFile, Side, SCHEMA};
use anyhow::{bail, Context, Result};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::data::{expected_len, random_inputs};
use lanefold_cpu::npy::{self, Element};
use lanefold_cpu::reference::{reference, Reference};
use lanefold_cpu::{validate, Buffers};
use lanefold_cuda::{ColdPathDecision, CudaBackend};
use lanefold_ir::{BufferKind, DType, Operator, OperatorOptions};
use lanefold_plan::{plan, Features, LayoutRequest, Plan, Problem, Shape, Target};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// CUDA when a GPU is present, the CPU executor otherwise.
    Auto,
    Cpu,
    Cuda,
}

#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// The cases, in the order they run (see [`grid`]).
    pub problems: Vec<BenchProblem>,
    pub request: LayoutRequest,
    pub device: Device,
    pub config: PhaseConfig,
    /// Peer modes: `eager`, `compile`, `liger`, `quack`.
    pub peer_modes: Vec<String>,
    pub python: String,
    pub peer_script: PathBuf,
    pub capture_sources: bool,
    pub output: PathBuf,
    pub seed: u64,
    pub command_line: Vec<String>,
    /// Wall-clock budget in seconds: no case starts that the longest case
    /// so far predicts would end past it (None: no budget).
    pub deadline_s: Option<f64>,
    /// See [`compiler_promise`]: only where the request makes no promise.
    pub occupancy_from_compiler: bool,
    /// Per-column inputs to leave out (PyTorch's modules have both). Only
    /// lanefold runs such cases: the peers build the default modules.
    pub options: OperatorOptions,
    /// No per-case lines on stdout (the caller prints its own summary).
    pub quiet: bool,
}

/// One case of a bench: an operator on rows of one dtype and shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchProblem {
    pub op: Operator,
    pub dtype: DType,
    pub shape: Shape,
}

/// Every operator on every shape in every dtype, shape-major: the cases of
/// `bench --ops --shapes --dtypes`.
pub fn grid(ops: &[Operator], shapes: &[Shape], dtypes: &[DType]) -> Vec<BenchProblem> {
    let mut out = vec![];
    for &shape in shapes {
        for &op in ops {
            for &dtype in dtypes {
                out.push(BenchProblem { op, dtype, shape });
            }
        }
    }
    out
}

/// `p` with the occupancy promise the compiler supports
/// ([`lanefold_cuda::compiler_occupancy`]) and the explicit request that
/// plans to it, or `p` and `request` unchanged; prints the decision.
pub fn compiler_promise(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
    p: Plan,
    arch: &str,
) -> Result<(Plan, LayoutRequest)> {
    let probe = lanefold_cuda::compiler_occupancy(&p, &CodegenOptions::default(), arch, target)
        .context("--occupancy-from-compiler needs NVRTC")?;
    let what = format!("{} {}", problem.program.name, p.describe());
    let Some(groups) = probe.keep else {
        match probe.tried {
            Some((g, r, local)) => println!(
                "occupancy: {what}: {} registers; promising {g} groups gave {r} and {local} local bytes: not kept",
                probe.registers
            ),
            None => println!("occupancy: {what}: {} registers, no step to try", probe.registers),
        }
        return Ok((p, *request));
    };
    let pinned = p.pinned_request(request, groups);
    let promised = plan(problem, target, &pinned)?;
    if promised.layout != p.layout || promised.min_groups_per_multiprocessor != Some(groups) {
        bail!(
            "{what}: the promised request planned to {} (a mapper bug: a pinned request must keep the layout)",
            promised.describe()
        );
    }
    let (_, r, _) = probe.tried.expect("a kept promise was tried");
    println!(
        "occupancy: {what}: {} registers -> {r} promising {groups} groups, no spill: kept",
        probe.registers
    );
    Ok((promised, pinned))
}

/// `p` as the CUDA backend runs it ([`CudaBackend::resolve`]: a norm's
/// cold path promised the plain kernel's occupancy, or the plain plan)
/// with the explicit request that plans to exactly it, to record, so that
/// replays re-plan the same kernel without a compiler. Unchanged without
/// a device or where nothing was decided.
pub fn resolved_for_device(
    cuda: Option<&CudaBackend>,
    p: Plan,
    request: &LayoutRequest,
) -> Result<(Plan, LayoutRequest)> {
    let Some(c) = cuda else {
        return Ok((p, *request));
    };
    let (q, decision) = c.resolve(&p, &CodegenOptions::default())?;
    match decision {
        ColdPathDecision::Kept { .. } | ColdPathDecision::Plain { .. } => {
            let pinned = q.pinned_request(request, q.min_groups_per_multiprocessor.unwrap_or(0));
            Ok((q, pinned))
        }
        ColdPathDecision::Absent | ColdPathDecision::OwnPromise => Ok((p, *request)),
    }
}

/// Bytes of one input set (for sizing L2-cold rotation).
fn input_bytes(inputs: &Buffers) -> u64 {
    inputs.values().map(|t| t.size_bytes() as u64).sum()
}

fn write_inputs(
    dir: &Path,
    problem: &Problem,
    inputs: &Buffers,
) -> Result<BTreeMap<String, PathBuf>> {
    let (rows, n) = (problem.shape.rows as u64, problem.shape.n as u64);
    let mut out = BTreeMap::new();
    for decl in &problem.program.inputs {
        let shape = match decl.kind {
            BufferKind::Row => vec![rows, n],
            k => vec![expected_len(k, rows as usize, n as usize) as u64],
        };
        let path = dir.join(format!("{}.npy", decl.name));
        npy::write_scratch(&path, &inputs[&decl.name], &shape)?;
        out.insert(decl.name.clone(), path);
    }
    Ok(out)
}

fn read_outputs(problem: &Problem, files: &BTreeMap<String, PathBuf>) -> Result<Buffers> {
    let (rows, n) = (problem.shape.rows as u64, problem.shape.n as u64);
    let mut out = Buffers::new();
    for decl in &problem.program.outputs {
        let path = files
            .get(&decl.name)
            .with_context(|| format!("peer returned no output '{}'", decl.name))?;
        let shape = match decl.kind {
            BufferKind::Row => vec![rows, n],
            k => vec![expected_len(k, rows as usize, n as usize) as u64],
        };
        out.insert(
            decl.name.clone(),
            npy::read(
                path,
                Element::Float(decl.kind.float_dtype(problem.dtype)),
                &shape,
            )?,
        );
    }
    Ok(out)
}

/// The device a measurement runs on, and its target. L2-cold rotation
/// needs the GPU's L2 size, so it is refused on the CPU.
pub fn open_device(device: Device, l2: L2Mode) -> Result<(Option<CudaBackend>, Target)> {
    let cuda = match device {
        Device::Cuda => Some(CudaBackend::open(0).context("--backend cuda")?),
        Device::Cpu => None,
        Device::Auto => match CudaBackend::open(0) {
            Ok(c) => Some(c),
            Err(e) => {
                println!(
                    "{}; measuring the CPU executor (gpu phase absent)",
                    lanefold_cuda::fallback_note(&e)
                );
                None
            }
        },
    };
    if l2 != L2Mode::Warm && cuda.is_none() {
        bail!("--l2 cold and cold-inputs need the GPU's L2 size; use --backend cuda");
    }
    let target = if cuda.is_some() {
        Target::h200()
    } else {
        Target::cpu()
    };
    Ok((cuda, target))
}

pub fn run_bench(spec: &BenchSpec) -> Result<ResultsFile> {
    let peers = spec
        .peer_modes
        .iter()
        .map(|m| Ok(m.parse::<PeerMode>()?.side().to_string()))
        .collect::<Result<Vec<String>>>()?;
    let leaves_out_columns = spec
        .problems
        .iter()
        .any(|c| spec.options.applied_to(c.op) != OperatorOptions::default());
    if leaves_out_columns && !peers.is_empty() {
        bail!(
            "--no-weight / --no-bias cases run lanefold alone: the PyTorch peers \
             build PyTorch's default modules, with weight and bias"
        );
    }
    let (cuda, target) = open_device(spec.device, spec.config.l2)?;
    let mut peer = if spec.peer_modes.is_empty() {
        None
    } else {
        Some(PeerProcess::start(&spec.peer_script, &spec.python)?)
    };
    let capture_env = capture(
        cuda.as_ref(),
        peer.as_ref().and_then(PeerProcess::peer),
        spec.command_line.clone(),
    );
    std::fs::create_dir_all(&spec.output)?;
    let scratch = std::env::temp_dir().join(format!("lanefold-bench-{}", std::process::id()));
    let mut file = ResultsFile {
        schema: SCHEMA.to_string(),
        environment: capture_env.env.clone(),
        config: spec.config,
        cases: vec![],
        not_run: vec![],
    };
    let capture = spec.capture_sources.then(|| spec.output.clone());
    let mut k = 0usize;
    let mut deadline = crate::deadline::Deadline::new(spec.deadline_s);
    let planned = spec.problems.len();
    let promised = spec.occupancy_from_compiler && spec.request.occupancy == 0;
    if let (Some(c), false) = (cuda.as_ref(), promised) {
        // Every case's kernel compiled at once, on every core (a plan
        // refused here is reported by its case below).
        let mut jobs = vec![];
        for &BenchProblem { op, dtype, shape } in &spec.problems {
            let problem = Problem::operator(op, spec.options.applied_to(op), dtype, shape);
            if let Ok(p) = plan(&problem, &target, &spec.request) {
                jobs.push((p, CodegenOptions::default()));
            }
        }
        let report = c.precompile(&jobs);
        if !spec.quiet {
            eprintln!("{report}");
        }
    }
    let pb = crate::progress::bar(planned as u64, "bench");
    'cases: for &BenchProblem { op, dtype, shape } in &spec.problems {
        pb.set_message(format!("{op} {dtype} {shape}"));
        if !deadline.allows_another() {
            println!(
                "deadline: stopping after {k} of {planned} cases (--deadline-s {})",
                deadline.limit_s().unwrap_or_default()
            );
            break 'cases;
        }
        deadline.start_unit();
        let options = spec.options.applied_to(op);
        let problem = Problem::operator(op, options, dtype, shape);
        let mut p = plan(&problem, &target, &spec.request)?;
        let mut request = spec.request;
        if promised {
            let arch = cuda.as_ref().map_or("sm_90", |c| c.arch());
            (p, request) = compiler_promise(&problem, &target, &spec.request, p, arch)?;
        }
        (p, request) = resolved_for_device(cuda.as_ref(), p, &request)?;
        let features = Features::of(&p, &target);
        let input_sets = input_sets(
            &problem,
            spec.config.l2,
            cuda.as_ref().map(|c| c.l2_bytes()),
            spec.seed + k as u64,
        );
        let want = reference(&problem, &input_sets[0]).context("no float64 reference")?;
        let id = format!(
            "{}/{dtype}/{shape}/{}",
            options.label(op),
            p.describe().replace(' ', ",")
        );
        let mut order: Vec<String> = vec!["lanefold".into()];
        order.extend(peers.iter().cloned());
        if k % 2 == 1 {
            order.rotate_left(1);
        }
        let mut sides = vec![];
        let mut peer_files = PeerInputs::new(scratch.join(format!("case{k}")));
        let mut kernel = None;
        let mut wall: Vec<String> = vec![];
        for who in &order {
            let side_started = std::time::Instant::now();
            if who == "lanefold" {
                let native = || {
                    measure_native(
                        cuda.as_ref(),
                        &p,
                        &input_sets,
                        &want,
                        &spec.config,
                        capture.as_deref(),
                        features.bytes_moved,
                    )
                };
                let mut measured = native();
                // The memory may be held by the peer ([`PeerProcess`]).
                let retry = measured.as_ref().is_err_and(is_out_of_memory);
                if let Some(process) = peer.as_mut().filter(|_| retry) {
                    pb.suspend(|| {
                        eprintln!(
                            "{id}: lanefold ran out of device memory; restarting the PyTorch \
                             peer and trying once more"
                        )
                    });
                    process.restart()?;
                    measured = native();
                }
                match measured {
                    Ok((side, k)) => {
                        kernel = k;
                        sides.push(side);
                    }
                    // A device that runs out of memory on one case must
                    // not lose the cases after it; any other failure stops
                    // the run.
                    Err(e) if is_out_of_memory(&e) => {
                        pb.suspend(|| eprintln!("{id}: lanefold did not run: {e:#}"));
                        file.not_run.push(format!("{id}: {e:#}"));
                        pb.inc(1);
                        k += 1;
                        deadline.end_unit();
                        continue 'cases;
                    }
                    Err(e) => return Err(e),
                }
            } else {
                let process = peer.as_mut().expect("peer started when modes are given");
                let say = |what: String| pb.suspend(|| eprintln!("{id}: {what}"));
                match measure_peer(
                    process,
                    who,
                    &problem,
                    &input_sets,
                    &mut peer_files,
                    &want,
                    &spec.config,
                    features.bytes_moved,
                    &say,
                ) {
                    Ok(side) => sides.push(side),
                    Err(e) => eprintln!("{id}: {who} did not run: {e:#}"),
                }
            }
            wall.push(format!("{who} {:.1}", side_started.elapsed().as_secs_f64()));
        }
        let ratios = CaseResult::compute_ratios(&sides);
        let line: Vec<String> = sides
            .iter()
            .map(|s| {
                format!(
                    "{} {} µs{}",
                    s.name,
                    s.summary
                        .gpu
                        .or(s.summary.e2e)
                        .map_or("—".into(), |x| format!("{:.2}", x.p50)),
                    if s.validation.pass { "" } else { " INVALID" }
                )
            })
            .collect();
        if !spec.quiet {
            pb.suspend(|| {
                println!("{id:<60} {}", line.join("  "));
                // Where a case's wall time goes, for planning device calls.
                println!("        wall s: {}", wall.join(", "));
            });
        }
        pb.inc(1);
        file.cases.push(CaseResult {
            id,
            op: op.name().into(),
            options,
            dtype: dtype.name().into(),
            shape: shape.to_string(),
            schedule: Some(request.to_string()),
            request,
            plan: PlanRecord::of(&p, &features, &target),
            kernel: kernel.take(),
            bytes_moved: features.bytes_moved,
            order,
            sides,
            ratios,
        });
        // An interrupted run keeps every case already measured.
        file.write(&spec.output.join("results.json"))?;
        k += 1;
        deadline.end_unit();
    }
    pb.finish_and_clear();
    capture_env.record_end_clocks(&mut file.environment);
    file.write(&spec.output.join("results.json"))?;
    write_report(&file, &spec.output)?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(file)
}

/// Whether `e` is the device refusing an allocation: a case-sized
/// failure, not a broken device.
fn is_out_of_memory(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<lanefold_cuda::CudaError>()
            .is_some_and(lanefold_cuda::CudaError::is_out_of_memory)
    })
}

/// Input sets for a case: one (L2 warm) or enough to cover three times the
/// L2 (cold), each from its own seed.
pub fn input_sets(problem: &Problem, l2: L2Mode, l2_bytes: Option<u64>, seed: u64) -> Vec<Buffers> {
    let first = random_inputs(problem, seed);
    let sets = match (l2, l2_bytes) {
        (L2Mode::Cold | L2Mode::ColdInputs, Some(l2)) => {
            (3 * l2).div_ceil(input_bytes(&first).max(1)).clamp(2, 64) as usize
        }
        _ => 1,
    };
    let mut all = vec![first];
    for s in 1..sets {
        all.push(random_inputs(problem, seed + 1000 * s as u64));
    }
    all
}

/// Stores a kernel source as `dir/sources/SHA.cu` (atomically) and returns
/// that relative path. Always plain; a gzipped copy beside it is removed,
/// as both forms in one directory are ambiguous; one the directory's
/// sources bundle already holds is left there.
pub(crate) fn capture_source(dir: &Path, sha: &str, source: &str) -> Result<String> {
    let rel = format!("sources/{sha}.cu");
    let path = dir.join(&rel);
    if crate::results::bundle_holds(&path, source.as_bytes())? {
        return Ok(rel);
    }
    npy::write_atomically(&path, source.as_bytes())?;
    crate::results::remove_superseded_gz(&path)?;
    Ok(rel)
}

/// Measure lanefold's side of a case: prepare (compile, upload), sample
/// the phases, download set 0's outputs and validate them. With
/// `capture`, the kernel source is stored as `capture/sources/SHA.cu`.
#[allow(clippy::too_many_arguments)]
pub fn measure_native(
    cuda: Option<&CudaBackend>,
    plan: &lanefold_plan::Plan,
    input_sets: &[Buffers],
    want: &Reference,
    config: &PhaseConfig,
    capture: Option<&Path>,
    bytes_moved: u64,
) -> Result<(Side, Option<KernelRecord>)> {
    let (phases, outputs, kernel) = match cuda {
        Some(c) => {
            let mut prepared = c.prepare(plan, &CodegenOptions::default(), input_sets)?;
            let shared = config.l2 == L2Mode::ColdInputs;
            if shared {
                prepared.share_outputs()?;
            }
            let source_sha256 = prepared.source_sha256();
            let mut source_file = None;
            if let Some(dir) = capture {
                source_file = Some(capture_source(dir, &source_sha256, prepared.source())?);
            }
            // Informational: a driver that cannot say leaves them absent.
            let resources = prepared.resources().ok();
            let kernel = KernelRecord {
                name: prepared.kernel_name().to_string(),
                source_sha256,
                source_file,
                registers_per_thread: resources.map(|r| r.registers_per_thread),
                local_bytes_per_thread: resources.map(|r| r.local_bytes_per_thread),
            };
            let mut timer = CudaTimer(prepared);
            let phases = sample(&mut timer, config)?;
            if shared {
                timer.0.rerun_set0_poisoned()?;
            }
            (phases, timer.0.outputs(0)?, Some(kernel))
        }
        None => {
            let mut timer = CpuTimer::new(plan.clone(), input_sets.to_vec());
            let phases = sample(&mut timer, config)?;
            (phases, timer.outputs(0).clone(), None)
        }
    };
    let v = validate(plan.dtype(), &outputs, want);
    Ok((Side::new("lanefold", v, phases, bytes_moved), kernel))
}

/// The `.npy` files of one case's input sets for the PyTorch peer,
/// written once on first use and shared by every peer side of the case
/// (each side used to write its own copy: up to 1.6 GB per large case and
/// round with three peers). The directory is removed on drop.
pub struct PeerInputs {
    dir: PathBuf,
    /// Per input set: buffer name to its file.
    files: Option<Vec<BTreeMap<String, PathBuf>>>,
}

impl PeerInputs {
    pub fn new(dir: PathBuf) -> PeerInputs {
        PeerInputs { dir, files: None }
    }

    fn files(
        &mut self,
        problem: &Problem,
        input_sets: &[Buffers],
    ) -> Result<Vec<BTreeMap<String, PathBuf>>> {
        if self.files.is_none() {
            let mut files = vec![];
            for (s, inputs) in input_sets.iter().enumerate() {
                files.push(write_inputs(
                    &self.dir.join(format!("set{s}")),
                    problem,
                    inputs,
                )?);
            }
            self.files = Some(files);
        }
        Ok(self.files.clone().unwrap_or_default())
    }
}

impl Drop for PeerInputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Measure the PyTorch peer side `who` (a [`PeerMode::side`] name) on the
/// same inputs, through `.npy` files shared by the case's peer sides.
#[allow(clippy::too_many_arguments)]
pub fn measure_peer(
    peer: &mut PeerProcess,
    who: &str,
    problem: &Problem,
    input_sets: &[Buffers],
    files: &mut PeerInputs,
    want: &Reference,
    config: &PhaseConfig,
    bytes_moved: u64,
    say: &dyn Fn(String),
) -> Result<Side> {
    let mode = PeerMode::of_side(who)
        .with_context(|| format!("{who} is not a PyTorch peer side"))?
        .to_string();
    let input_files = files.files(problem, input_sets)?;
    let outputs_dir = files.dir.join(format!("out-{mode}"));
    let request = PeerRequest {
        op: problem.program.name.clone(),
        dtype: problem.dtype.name().to_string(),
        rows: problem.shape.rows,
        n: problem.shape.n,
        input_sets: input_files,
        outputs_dir: outputs_dir.clone(),
        mode,
        samples: config.samples,
        single_samples: crate::phases::single_calls(config.samples),
        sample_ms: config.sample_ms,
        warmup_ms: config.warmup_ms,
    };
    let result = peer.run(&request, say).and_then(|reply| {
        let outputs = read_outputs(problem, &reply.outputs)?;
        let v = validate(problem.dtype, &outputs, want);
        let phases = PhaseRecord {
            gpu: Some(reply.gpu),
            gpu_enqueue_us: reply.gpu_enqueue_us,
            gpu_graph: Some(reply.gpu_graph),
            e2e: reply.e2e,
            e2e_enqueue_us: reply.e2e_enqueue_us,
            single: reply.single,
        };
        Ok(Side::new(who, v, phases, bytes_moved))
    });
    let _ = std::fs::remove_dir_all(&outputs_dir);
    result
}

/// results.md and plot.svg beside results.json.
pub fn write_report(file: &ResultsFile, dir: &Path) -> Result<()> {
    npy::write_atomically(&dir.join("results.md"), render::markdown(file).as_bytes())?;
    render::plot(file, &dir.join("plot.svg"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_out_of_memory;
    use lanefold_cuda::CudaError;

    /// The corpus run goes on past a case the device has no memory for:
    /// the refusal is found through any context added on the way up.
    #[test]
    fn regression_an_out_of_memory_case_is_found_under_added_context() {
        let oom = || CudaError::Driver {
            context: "uploading a buffer".into(),
            error: "DriverError(CUDA_ERROR_OUT_OF_MEMORY)".into(),
            out_of_memory: true,
        };
        assert!(is_out_of_memory(&anyhow::Error::from(oom())));
        assert!(is_out_of_memory(
            &anyhow::Error::from(oom()).context("preparing the case")
        ));
        let other = CudaError::Data("out of memory in a name".into());
        assert!(!is_out_of_memory(&anyhow::Error::from(other)));
        assert!(!is_out_of_memory(&anyhow::anyhow!(
            "CUDA_ERROR_OUT_OF_MEMORY"
        )));
    }
}
