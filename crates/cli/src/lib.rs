//! The harness behind the `lanefold` command: one way to run a case on the
//! CPU executor or on CUDA, validate it against float64, and the selftest
//! matrices built from it.

use anyhow::{Context, Result};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::data::{poisoned_outputs, random_inputs};
use lanefold_cpu::reference::{reference, Reference};
use lanefold_cpu::{Buffers, Validation};
use lanefold_cuda::{ColdPathDecision, CudaBackend};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, Refusal, Shape, Target};

pub mod args;
pub mod compile_check;
pub mod corpus_cmd;
pub mod demo;
pub mod doctor;
pub mod fit_cmd;
pub mod latency;
pub mod replay_cmd;
pub mod search_cmd;
pub mod selftest;
pub mod speed;

/// Where a plan runs.
pub enum Backend {
    Cpu,
    Cuda(Box<CudaBackend>),
}

impl Backend {
    pub fn name(&self) -> String {
        match self {
            Backend::Cpu => "cpu".into(),
            Backend::Cuda(c) => format!("cuda ({})", c.device_name()),
        }
    }

    pub fn target(&self) -> Target {
        match self {
            Backend::Cpu => Target::cpu(),
            Backend::Cuda(_) => Target::h200(),
        }
    }

    /// Open CUDA, with a clear error when there is no driver.
    pub fn cuda() -> Result<Backend> {
        let b = CudaBackend::open(0).context("--backend cuda")?;
        Ok(Backend::Cuda(Box::new(b)))
    }

    /// CUDA when a GPU is present, the CPU otherwise (the reason is returned,
    /// in one line unless `--verbose`).
    pub fn detect() -> (Backend, Option<String>) {
        match CudaBackend::open(0) {
            Ok(b) => (Backend::Cuda(Box::new(b)), None),
            Err(e) => (Backend::Cpu, Some(lanefold_cuda::fallback_note(&e))),
        }
    }

    /// The tuning cache's key for this backend.
    pub fn device_key(&self) -> String {
        match self {
            Backend::Cpu => lanefold_measure::tuning::device_key(None),
            Backend::Cuda(c) => lanefold_measure::tuning::device_key(Some(c)),
        }
    }

    /// The request to use: the tuning cache's winner when `request` leaves
    /// the whole layout automatic ([`tunable`]) and the cache has one,
    /// else `request`.
    pub fn tuned(
        &self,
        problem_op: Operator,
        dtype: DType,
        shape: Shape,
        request: LayoutRequest,
    ) -> (LayoutRequest, bool) {
        if tunable(&request) {
            let cached = lanefold_measure::tuning::cached_request(
                &self.device_key(),
                problem_op,
                dtype,
                shape,
                request.batch_invariant,
            );
            if let Some(c) = cached {
                return (
                    LayoutRequest {
                        batch_invariant: request.batch_invariant,
                        residency: request.residency,
                        ..c
                    },
                    true,
                );
            }
        }
        (request, false)
    }

    /// Run `plan`; returns the plan that ran and, on CUDA, what became of
    /// its cold path ([`CudaBackend::resolve`]). The CPU runs plans as
    /// they are.
    pub fn execute(
        &self,
        plan: &Plan,
        options: &CodegenOptions,
        inputs: &Buffers,
        outputs: &mut Buffers,
    ) -> Result<(Plan, Option<ColdPathDecision>)> {
        Ok(match self {
            Backend::Cpu => {
                lanefold_cpu::execute(plan, inputs, outputs)?;
                (plan.clone(), None)
            }
            Backend::Cuda(c) => {
                let (plan, decision) = c.execute(plan, options, inputs, outputs)?;
                (plan, Some(decision))
            }
        })
    }
}

/// Does `request` leave the whole layout (W, V, U, G and the order) to
/// lanefold, so that a tuning cache's winner may stand in for it?
pub fn tunable(request: &LayoutRequest) -> bool {
    request.workers == 0
        && request.pack == 0
        && request.unroll == 0
        && request.rows_per_group == 0
        && request.order.is_none()
}

/// One case: a problem and a layout request.
#[derive(Clone, Debug)]
pub struct Case {
    pub op: Operator,
    pub dtype: DType,
    pub shape: Shape,
    pub request: LayoutRequest,
    pub seed: u64,
}

impl Case {
    pub fn problem(&self) -> Problem {
        Problem::operator(self.op, OperatorOptions::default(), self.dtype, self.shape)
    }
}

pub struct Outcome {
    /// The plan that ran (on CUDA, resolved: [`CudaBackend::resolve`]).
    pub plan: Plan,
    /// On CUDA, what became of the plan's cold path.
    pub cold_path: Option<ColdPathDecision>,
    pub validation: Validation,
    pub outputs: Buffers,
    pub inputs: Buffers,
}

/// Plan, generate seeded inputs, poison the outputs, execute on `backend`
/// and validate every element against float64. A refusal comes back as
/// an error that downcasts to [`Refusal`].
pub fn run_case(backend: &Backend, case: &Case, options: &CodegenOptions) -> Result<Outcome> {
    let problem = case.problem();
    let plan = plan(&problem, &backend.target(), &case.request)?;
    let inputs = random_inputs(&problem, case.seed);
    run_plan(backend, plan, inputs, options)
}

/// Execute an already resolved plan on given inputs and validate.
pub fn run_plan(
    backend: &Backend,
    plan: Plan,
    inputs: Buffers,
    options: &CodegenOptions,
) -> Result<Outcome> {
    lanefold_cpu::data::check_inputs(&plan.problem, &inputs)?;
    let want = float64_reference(&plan.problem, &inputs)?;
    run_plan_against(backend, plan, inputs, &want, options)
}

fn float64_reference(problem: &Problem, inputs: &Buffers) -> Result<Reference> {
    reference(problem, inputs).context("no float64 reference for this program")
}

/// [`run_plan`] on checked inputs, against a float64 reference already
/// computed for them.
fn run_plan_against(
    backend: &Backend,
    plan: Plan,
    inputs: Buffers,
    want: &Reference,
    options: &CodegenOptions,
) -> Result<Outcome> {
    let problem = &plan.problem;
    let mut outputs = poisoned_outputs(problem);
    let (plan, cold_path) = backend.execute(&plan, options, &inputs, &mut outputs)?;
    let validation = lanefold_cpu::validate(problem.dtype, &outputs, want);
    Ok(Outcome {
        plan,
        cold_path,
        validation,
        outputs,
        inputs,
    })
}

/// Several layouts of one case (`case.request` ignored), each run on the
/// same seeded inputs and validated against one float64 reference: on
/// rows of thousands of elements the inputs and the reference cost the
/// host more than the kernels do, so a comparison of layouts makes them
/// once.
pub fn run_layouts(
    backend: &Backend,
    case: &Case,
    requests: &[LayoutRequest],
    options: &CodegenOptions,
) -> Result<Vec<Outcome>> {
    let problem = case.problem();
    let plans = requests
        .iter()
        .map(|request| plan(&problem, &backend.target(), request))
        .collect::<Result<Vec<_>, _>>()?;
    let inputs = random_inputs(&problem, case.seed);
    let want = float64_reference(&problem, &inputs)?;
    plans
        .into_iter()
        .map(|p| run_plan_against(backend, p, inputs.clone(), &want, options))
        .collect()
}

/// Exit code for an error: 2 for a refused plan, 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.downcast_ref::<Refusal>().is_some() {
        2
    } else {
        1
    }
}
