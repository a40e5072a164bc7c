//! [`Timer`] implementations for the two native backends.
//!
//! - [`CudaTimer`]: a [`lanefold_cuda::Prepared`] plan (resident inputs,
//!   preallocated outputs, graph-replayed gpu phase).
//! - [`CpuTimer`]: the CPU executor. It has no device clock: its gpu phase
//!   is absent (`None`), never filled in from another phase.

use crate::phases::{GpuBatch, HostBatch, SingleCall, Timer};
use lanefold_cpu::data::{poisoned_outputs, Buffers};
use lanefold_plan::Plan;
use std::time::Instant;

/// The CUDA backend's timer: every method runs the prepared plan.
pub struct CudaTimer<'a>(pub lanefold_cuda::Prepared<'a>);

impl Timer for CudaTimer<'_> {
    fn gpu_batch(&mut self, batch: usize) -> anyhow::Result<Option<GpuBatch>> {
        let (gpu_us, enqueue_us, graph) = self.0.gpu_batch(batch)?;
        Ok(Some(GpuBatch {
            gpu_us,
            enqueue_us,
            graph,
        }))
    }

    fn e2e_batch(&mut self, batch: usize) -> anyhow::Result<HostBatch> {
        let (host_us, enqueue_us) = self.0.e2e_batch(batch)?;
        Ok(HostBatch {
            host_us,
            enqueue_us,
        })
    }

    fn single(&mut self) -> anyhow::Result<SingleCall> {
        let (gpu_us, host_us) = self.0.single()?;
        Ok(SingleCall {
            gpu_us: Some(gpu_us),
            host_us,
        })
    }
}

/// The CPU executor's timer. Launch `k` of a batch uses input set
/// `k % sets` and writes that set's own (preallocated) outputs.
pub struct CpuTimer {
    plan: Plan,
    inputs: Vec<Buffers>,
    outputs: Vec<Buffers>,
    next_single: usize,
}

impl CpuTimer {
    /// One NaN-poisoned output set per input set.
    pub fn new(plan: Plan, input_sets: Vec<Buffers>) -> CpuTimer {
        let outputs = input_sets
            .iter()
            .map(|_| poisoned_outputs(&plan.problem))
            .collect();
        CpuTimer {
            plan,
            inputs: input_sets,
            outputs,
            next_single: 0,
        }
    }

    pub fn sets(&self) -> usize {
        self.inputs.len()
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The outputs last written with input set `set` (NaN if never run).
    /// Panics if `set >= self.sets()`, like slice indexing.
    pub fn outputs(&self, set: usize) -> &Buffers {
        &self.outputs[set]
    }

    fn run(&mut self, k: usize) -> anyhow::Result<()> {
        let n = self.inputs.len();
        if n == 0 {
            anyhow::bail!("the CPU timer has no input sets");
        }
        lanefold_cpu::execute(&self.plan, &self.inputs[k % n], &mut self.outputs[k % n])?;
        Ok(())
    }
}

fn micros(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e6
}

impl Timer for CpuTimer {
    /// No device clock on the CPU: the gpu phase is absent.
    fn gpu_batch(&mut self, _batch: usize) -> anyhow::Result<Option<GpuBatch>> {
        Ok(None)
    }

    /// Synchronous execution: enqueue time is the whole host time.
    fn e2e_batch(&mut self, batch: usize) -> anyhow::Result<HostBatch> {
        let t0 = Instant::now();
        for k in 0..batch.max(1) {
            self.run(k)?;
        }
        let host_us = micros(t0);
        Ok(HostBatch {
            host_us,
            enqueue_us: host_us,
        })
    }

    fn single(&mut self) -> anyhow::Result<SingleCall> {
        let k = self.next_single;
        self.next_single = (k + 1) % self.inputs.len().max(1);
        let t0 = Instant::now();
        self.run(k)?;
        Ok(SingleCall {
            gpu_us: None,
            host_us: micros(t0),
        })
    }
}

/// Current SM and memory clocks (MHz) of the GPU `id` (an nvidia-smi
/// index or a `GPU-…` UUID, e.g. [`lanefold_cuda::CudaBackend::uuid`]),
/// read through `nvidia-smi`. None when nvidia-smi is missing or fails.
pub fn current_clocks_mhz(id: &str) -> Option<(u32, u32)> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=clocks.sm,clocks.mem",
            "--format=csv,noheader,nounits",
            "-i",
            id,
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_clocks(&String::from_utf8_lossy(&out.stdout))
}

fn parse_clocks(text: &str) -> Option<(u32, u32)> {
    let line = text.lines().next()?;
    let mut it = line.split(',').map(|s| s.trim().parse::<u32>());
    match (it.next(), it.next()) {
        (Some(Ok(sm)), Some(Ok(mem))) => Some((sm, mem)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanefold_cpu::data::random_inputs;
    use lanefold_ir::{DType, Operator, OperatorOptions};
    use lanefold_plan::{plan, LayoutRequest, Problem, Target};

    fn timer(op: Operator, shape: &str, sets: u64) -> CpuTimer {
        let p = Problem::operator(
            op,
            OperatorOptions::default(),
            DType::F32,
            shape.parse().unwrap(),
        );
        let pl = plan(&p, &Target::h200(), &LayoutRequest::default()).unwrap();
        let inputs = (0..sets).map(|s| random_inputs(&p, s)).collect();
        CpuTimer::new(pl, inputs)
    }

    fn has_nan(b: &Buffers) -> bool {
        b.values().any(|t| t.to_f64().iter().any(|x| x.is_nan()))
    }

    #[test]
    fn cpu_gpu_phase_is_absent() {
        let mut t = timer(Operator::Sum, "8x100", 1);
        assert_eq!(t.gpu_batch(10).unwrap(), None);
        // Nothing ran: the outputs are still poisoned.
        assert!(has_nan(t.outputs(0)));
    }

    #[test]
    fn cpu_e2e_and_single_are_positive_and_write_outputs() {
        let mut t = timer(Operator::Softmax, "16x300", 2);
        assert!(has_nan(t.outputs(0)) && has_nan(t.outputs(1)));
        let s = t.single().unwrap();
        assert_eq!(s.gpu_us, None);
        assert!(s.host_us > 0.0);
        assert!(!has_nan(t.outputs(0)), "single wrote set 0");
        let b = t.e2e_batch(4).unwrap();
        assert!(b.host_us > 0.0);
        assert_eq!(b.host_us, b.enqueue_us);
        assert!(!has_nan(t.outputs(1)), "the batch rotated to set 1");
    }

    #[test]
    fn cpu_outputs_match_a_direct_execution() {
        let mut t = timer(Operator::Rmsnorm, "5x257", 3);
        t.e2e_batch(3).unwrap();
        for s in 0..3 {
            let mut want = poisoned_outputs(&t.plan().problem);
            lanefold_cpu::execute(t.plan(), &t.inputs[s], &mut want).unwrap();
            assert_eq!(t.outputs(s), &want);
        }
    }

    #[test]
    fn cpu_timer_without_sets_is_an_error() {
        let mut t = timer(Operator::Sum, "2x10", 0);
        assert!(t.e2e_batch(1).is_err());
        assert!(t.single().is_err());
    }

    #[test]
    fn clocks_parse() {
        assert_eq!(parse_clocks("1980, 3201\n"), Some((1980, 3201)));
        assert_eq!(parse_clocks("[N/A], 3201\n"), None);
        assert_eq!(parse_clocks(""), None);
    }
}
