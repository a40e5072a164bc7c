//! A plan compiled and resident on the device, ready to be timed.
//!
//! [`CudaBackend::prepare`] compiles (through the cache) and uploads every
//! input set once, with one NaN-poisoned output set per input set. The
//! timing methods then only launch: nothing compiles, allocates or
//! transfers inside a timed region. Launch `k` of a batch uses input set
//! `k % sets` (L2-cold rotation when several sets are given).
//!
//! Every method is synchronous (it returns after the device finished) and
//! every failure is a [`CudaError`], never a panic.

use crate::call_graph::CallPath;
use crate::{driver, ColdPathDecision, CudaBackend, CudaError, DeviceArgs, Loaded};
use cudarc::driver::{sys, CudaEvent, CudaGraph};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::data::{poisoned_outputs, Buffers};
use lanefold_plan::Plan;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// At most this many instantiated graphs are kept (one per batch size).
const GRAPH_CACHE: usize = 8;

/// Launches captured in one graph at most; larger batches replay it
/// several times between the same two events.
pub const MAX_GRAPH_LAUNCHES: usize = 16384;

/// A prepared plan: compiled kernel, resident inputs and outputs, timing
/// events and a per-batch-size cache of instantiated CUDA graphs.
/// What the compiler gave a kernel, per thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelResources {
    pub registers_per_thread: u32,
    /// Local memory: register spills and stack. Nonzero is worth a look.
    pub local_bytes_per_thread: u32,
}

pub struct Prepared<'a> {
    pub(crate) backend: &'a CudaBackend,
    /// The plan as resolved for the device ([`CudaBackend::resolve`]).
    plan: Plan,
    cold_path: ColdPathDecision,
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) sets: Vec<DeviceArgs>,
    /// Batch size -> instantiated graph, or None when capture failed for
    /// that size (direct launches are used then; capture is not retried).
    pub(crate) graphs: HashMap<usize, Option<CudaGraph>>,
    start: CudaEvent,
    end: CudaEvent,
    /// Set used by the next `single` call (rotates like the batches).
    next_single: usize,
    /// lanefold's one-call path, built on first use.
    call_path: Option<CallPath>,
    /// The options the kernel was generated with (its call path's
    /// self-signalling form is compiled with the same).
    pub(crate) options: CodegenOptions,
    source_sha256: String,
    /// Every set writes set 0's outputs ([`Prepared::share_outputs`]).
    shared_outputs: bool,
}

impl CudaBackend {
    /// Compile `plan` (cached), upload every input set once and one
    /// NaN-poisoned output set per input set.
    pub fn prepare(
        &self,
        plan: &Plan,
        options: &CodegenOptions,
        input_sets: &[Buffers],
    ) -> Result<Prepared<'_>, CudaError> {
        if input_sets.is_empty() {
            return Err(CudaError::Data(
                "prepare needs at least one input set".into(),
            ));
        }
        let (plan, cold_path, loaded) = self.load(plan, options)?;
        let plan = &plan;
        let poisoned = poisoned_outputs(&plan.problem);
        let mut sets = Vec::with_capacity(input_sets.len());
        for inputs in input_sets {
            sets.push(self.upload(plan, &loaded.kernel, inputs, Some(&poisoned))?);
        }
        self.stream
            .synchronize()
            .map_err(driver("uploading the input sets"))?;
        let event = || {
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("creating an event"))
        };
        Ok(Prepared {
            backend: self,
            plan: plan.clone(),
            cold_path,
            source_sha256: crate::sha256_hex(loaded.kernel.source.as_bytes()),
            loaded,
            sets,
            graphs: HashMap::new(),
            start: event()?,
            end: event()?,
            next_single: 0,
            call_path: None,
            options: *options,
            shared_outputs: false,
        })
    }
}

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

impl<'a> Prepared<'a> {
    /// Number of resident input sets.
    pub fn sets(&self) -> usize {
        self.sets.len()
    }

    /// The plan that runs: the one given, resolved for the device
    /// ([`CudaBackend::resolve`]). Record this one.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What became of the plan's cold path.
    pub fn cold_path(&self) -> &ColdPathDecision {
        &self.cold_path
    }

    /// The generated CUDA C source.
    pub fn source(&self) -> &str {
        &self.loaded.kernel.source
    }

    /// SHA-256 (hex) of [`Prepared::source`].
    pub fn source_sha256(&self) -> String {
        self.source_sha256.clone()
    }

    /// Blocks per cluster the kernel launches with, if any.
    pub fn cluster(&self) -> Option<u32> {
        self.loaded.kernel.cluster
    }

    pub fn kernel_name(&self) -> &str {
        &self.loaded.kernel.name
    }

    /// Registers and local memory (spills and stack) per thread, as the
    /// driver reports them for the loaded function: the `-Xptxas -v` facts.
    pub fn resources(&self) -> Result<KernelResources, CudaError> {
        let f = &self.loaded.function;
        let registers = f.num_regs().map_err(driver("reading the register count"))?;
        let local = f
            .local_size_bytes()
            .map_err(driver("reading the local memory size"))?;
        Ok(KernelResources {
            registers_per_thread: registers.max(0) as u32,
            local_bytes_per_thread: local.max(0) as u32,
        })
    }

    /// Device bytes held by the input and output sets.
    pub fn resident_bytes(&self) -> usize {
        self.sets
            .iter()
            .flat_map(|s| s.slices.iter())
            .map(|(_, s)| s.len())
            .sum()
    }

    /// Every set's launches write set 0's outputs from now on, as a
    /// PyTorch peer's outputs come back from its allocator as the same
    /// block call after call (`--l2 cold-inputs`): the inputs still rotate.
    /// Before any batch or call has run, since graphs keep the pointers
    /// they were captured with.
    pub fn share_outputs(&mut self) -> Result<(), CudaError> {
        if !self.graphs.is_empty() || self.call_path.is_some() {
            return Err(CudaError::Data(
                "outputs are shared before any launch is captured".into(),
            ));
        }
        // A set's pointers run beside its slices: the outputs' slots.
        let program = &self.plan.problem.program;
        let slots: Vec<usize> = self.sets[0]
            .slices
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| program.output(name).is_some())
            .map(|(slot, _)| slot)
            .collect();
        let (first, rest) = self.sets.split_at_mut(1);
        for set in rest {
            for &slot in &slots {
                set.pointers[slot] = first[0].pointers[slot];
            }
        }
        self.shared_outputs = true;
        Ok(())
    }

    /// Poison set 0's outputs again and launch set 0 once, so that
    /// [`Prepared::outputs`]`(0)` holds its result alone after batches that
    /// shared the outputs.
    pub fn rerun_set0_poisoned(&mut self) -> Result<(), CudaError> {
        let poisoned = poisoned_outputs(&self.plan.problem);
        for (name, slice) in &mut self.sets[0].slices {
            if let Some(t) = poisoned.get(name) {
                self.backend
                    .stream
                    .memcpy_htod(&t.as_bytes(), slice)
                    .map_err(driver("poisoning an output"))?;
            }
        }
        self.launch_set(0)?;
        self.synchronize("rerunning set 0")
    }

    /// Launch with input set `k % sets`.
    fn launch_set(&mut self, k: usize) -> Result<(), CudaError> {
        let n = self.sets.len();
        self.backend.launch(&self.loaded, &mut self.sets[k % n])
    }

    /// The input set of the next single call (rotating like the batches).
    pub(crate) fn next_single_set(&mut self) -> usize {
        let k = self.next_single % self.sets.len();
        self.next_single = (k + 1) % self.sets.len();
        k
    }

    /// One call the way lanefold's runtime makes it ([`CallPath`]: a cached
    /// graph with this call's parameters and the completion flag's node; a
    /// direct launch for cluster kernels), with input set `k % sets`.
    pub(crate) fn call(&mut self, k: usize) -> Result<(), CudaError> {
        let n = self.sets.len();
        let args = &mut self.sets[k % n];
        match self.call_path.as_mut() {
            Some(path) => path.launch(self.backend, &self.loaded, args),
            // Building makes the first call.
            None => {
                self.call_path = Some(CallPath::build(
                    self.backend,
                    &self.loaded,
                    &self.options,
                    args,
                )?);
                Ok(())
            }
        }
    }

    /// Wait for the last [`Self::call`] the way lanefold's runtime does: a
    /// spin on the completion flag, or a stream synchronize without one.
    pub(crate) fn wait_call(&mut self) -> Result<(), CudaError> {
        match self.call_path.as_mut() {
            Some(path) => path.wait(self.backend),
            None => self.synchronize("waiting for the call"),
        }
    }

    /// Does lanefold's call end with the completion flag here (None until
    /// the first call)?
    pub fn call_waits_on_flag(&self) -> Option<bool> {
        self.call_path.as_ref().map(CallPath::waits_on_flag)
    }

    /// How lanefold's call learns it has finished: None until the first
    /// call, Some(None) where it synchronizes the stream.
    pub fn call_completion(&self) -> Option<Option<crate::CallCompletion>> {
        self.call_path.as_ref().map(CallPath::completion)
    }

    pub(crate) fn synchronize(&self, context: &str) -> Result<(), CudaError> {
        self.backend.stream.synchronize().map_err(driver(context))
    }

    /// Make sure the graph for `batch` launches exists: captured,
    /// instantiated, uploaded and replayed once (untimed) on first use;
    /// recorded as None when capture fails.
    pub(crate) fn graph(&mut self, batch: usize) -> Result<(), CudaError> {
        if self.graphs.contains_key(&batch) {
            return Ok(());
        }
        self.synchronize("before graph capture")?;
        let graph = self.capture(batch);
        if let Some(g) = &graph {
            g.upload().map_err(driver("uploading the graph"))?;
            g.launch().map_err(driver("warm-up graph launch"))?;
            self.synchronize("warm-up graph launch")?;
        }
        self.graphs.insert(batch, graph);
        Ok(())
    }

    /// Capture `batch` launches (rotating sets) as a graph; None (with the
    /// stream out of capture mode) when that is not possible.
    fn capture(&mut self, batch: usize) -> Option<CudaGraph> {
        let stream = self.backend.stream.clone();
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        if stream.begin_capture(mode).is_err() {
            return None;
        }
        let mut ok = true;
        for k in 0..batch {
            if self.launch_set(k).is_err() {
                ok = false;
                break;
            }
        }
        // Always end the capture, even after a failed launch, so the stream
        // is usable again.
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .ok()
            .flatten();
        if !ok {
            // A failed capture can leave an error recorded by cudarc: clear it.
            let _ = self.backend.ctx.check_err();
            let _ = stream.synchronize();
            return None;
        }
        graph
    }

    /// GPU phase: `batch` launches replayed as one CUDA graph between two
    /// events. Returns (device-event interval µs, host µs of the enqueue,
    /// graph?). Batches above [`MAX_GRAPH_LAUNCHES`] replay a graph of a
    /// whole number of rotations several times, then a remainder graph (so
    /// launch `k` still uses set `k % sets`). When capture is impossible
    /// the launches are enqueued directly between the events and `graph`
    /// is false.
    pub fn gpu_batch(&mut self, batch: usize) -> Result<(f64, f64, bool), CudaError> {
        let batch = batch.max(1);
        let sets = self.sets.len();
        let chunk = if batch > MAX_GRAPH_LAUNCHES {
            match MAX_GRAPH_LAUNCHES - MAX_GRAPH_LAUNCHES % sets {
                0 => MAX_GRAPH_LAUNCHES,
                whole => whole,
            }
        } else {
            batch
        };
        let (repeats, rest) = (batch / chunk, batch % chunk);
        let needed = [chunk, rest];
        if needed
            .iter()
            .any(|b| *b > 0 && !self.graphs.contains_key(b))
            && self.graphs.len() + 2 > GRAPH_CACHE
        {
            self.graphs.retain(|b, _| needed.contains(b));
        }
        self.graph(chunk)?;
        if rest > 0 {
            self.graph(rest)?;
        }
        let graphed = needed
            .iter()
            .all(|b| *b == 0 || matches!(self.graphs.get(b), Some(Some(_))));
        let stream = self.backend.stream.clone();
        self.start
            .record(&stream)
            .map_err(driver("recording an event"))?;
        let t0 = Instant::now();
        if graphed {
            if let Some(Some(g)) = self.graphs.get(&chunk) {
                for _ in 0..repeats {
                    g.launch().map_err(driver("launching the graph"))?;
                }
            }
            if let Some(Some(g)) = self.graphs.get(&rest) {
                if rest > 0 {
                    g.launch().map_err(driver("launching the graph"))?;
                }
            }
        } else {
            for k in 0..batch {
                self.launch_set(k)?;
            }
        }
        let enqueue_us = micros(t0);
        self.end
            .record(&stream)
            .map_err(driver("recording an event"))?;
        self.end
            .synchronize()
            .map_err(driver("running the timed batch"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(driver("reading the events"))?;
        Ok((ms as f64 * 1000.0, enqueue_us, graphed))
    }

    /// End-to-end phase: host wall clock around `batch` direct launches
    /// (rotating sets) and a stream synchronize. Returns (host µs, host µs
    /// until the last launch returned).
    pub fn e2e_batch(&mut self, batch: usize) -> Result<(f64, f64), CudaError> {
        let batch = batch.max(1);
        self.synchronize("before the e2e batch")?;
        let t0 = Instant::now();
        for k in 0..batch {
            self.launch_set(k)?;
        }
        let enqueue_us = micros(t0);
        self.synchronize("running the e2e batch")?;
        Ok((micros(t0), enqueue_us))
    }

    /// One synchronized call through lanefold's call path ([`Self::call`]),
    /// timed twice, separately: device events around one call, then the
    /// host wall clock of another call and its wait ([`Self::wait_call`]:
    /// until the GPU's completion flag reaches host memory) with no event
    /// in the window (as a user calls a kernel; recording and waiting on an
    /// event inside it added to the host time). The call path is built and
    /// used once untimed first. Returns (gpu µs, host µs).
    pub fn single(&mut self) -> Result<(f64, f64), CudaError> {
        self.synchronize("before the single call")?;
        let stream = self.backend.stream.clone();
        let k = self.next_single_set();
        if self.call_path.is_none() {
            self.call(k)?;
            self.synchronize("warming the call path")?;
        }
        self.start
            .record(&stream)
            .map_err(driver("recording an event"))?;
        self.call(k)?;
        self.end
            .record(&stream)
            .map_err(driver("recording an event"))?;
        self.end
            .synchronize()
            .map_err(driver("running the single call"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(driver("reading the events"))?;
        let t0 = Instant::now();
        self.call(k)?;
        self.wait_call()?;
        let host_us = micros(t0);
        self.synchronize("after the single call")?;
        Ok((ms as f64 * 1000.0, host_us))
    }

    /// Download the outputs written with input set `set`.
    pub fn outputs(&self, set: usize) -> Result<Buffers, CudaError> {
        let set = if self.shared_outputs && set < self.sets.len() {
            0
        } else {
            set
        };
        let args = self.sets.get(set).ok_or_else(|| {
            CudaError::Data(format!(
                "output set {set} does not exist ({} sets)",
                self.sets.len()
            ))
        })?;
        self.synchronize("before downloading outputs")?;
        let mut out = poisoned_outputs(&self.plan.problem);
        for (name, slice) in &args.slices {
            if let Some(t) = out.get_mut(name) {
                let bytes = self
                    .backend
                    .stream
                    .clone_dtoh(slice)
                    .map_err(driver("downloading an output"))?;
                if bytes.len() != t.size_bytes() {
                    return Err(CudaError::Data(format!(
                        "output '{name}' is {} bytes on the device, expected {}",
                        bytes.len(),
                        t.size_bytes()
                    )));
                }
                t.copy_from_bytes(&bytes);
            }
        }
        self.synchronize("downloading outputs")?;
        Ok(out)
    }
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        // Nothing may still run on the buffers when they are freed.
        let _ = self.backend.stream.synchronize();
        self.graphs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{kernel_source_sha256, probe_driver};
    use lanefold_cpu::data::random_inputs;
    use lanefold_ir::{DType, Operator, OperatorOptions};
    use lanefold_plan::{plan, LayoutRequest, Problem, Target};

    fn sum_plan(shape: &str) -> Plan {
        let p = Problem::operator(
            Operator::Sum,
            OperatorOptions::default(),
            DType::F32,
            shape.parse().unwrap(),
        );
        plan(&p, &Target::h200(), &LayoutRequest::default()).unwrap()
    }

    /// Every phase runs, every set's outputs match the CPU executor
    /// exactly (Sum without FMA), and errors are errors.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo test -p lanefold-cuda --release -- --ignored"]
    fn prepared_phases_rotate_sets_and_write_every_output() {
        probe_driver().expect("this test needs a CUDA driver");
        let backend = CudaBackend::open(0).expect("open device 0");
        let pl = sum_plan("64x4096");
        let options = CodegenOptions { fma: false };
        let sets: Vec<Buffers> = (0..3).map(|s| random_inputs(&pl.problem, s)).collect();
        assert!(matches!(
            backend.prepare(&pl, &options, &[]),
            Err(CudaError::Data(_))
        ));
        let mut p = backend.prepare(&pl, &options, &sets).unwrap();
        assert_eq!(p.sets(), 3);
        assert_eq!(
            p.source_sha256(),
            kernel_source_sha256(&pl, &options).unwrap()
        );
        assert!(p.source().contains(p.kernel_name()));
        // Nothing ran yet: outputs are the poison.
        let before = p.outputs(1).unwrap();
        assert!(before["y"].to_f64().iter().all(|x| x.is_nan()));

        let (gpu_us, enqueue_us, graph) = p.gpu_batch(10).unwrap();
        assert!(graph, "capture should work for a plain kernel");
        assert!(gpu_us > 0.0 && enqueue_us > 0.0, "{gpu_us} {enqueue_us}");
        let (again, _, _) = p.gpu_batch(10).unwrap();
        assert!(again > 0.0);
        let (host_us, enq) = p.e2e_batch(7).unwrap();
        assert!(host_us >= enq && enq > 0.0, "{host_us} {enq}");
        let (g, h) = p.single().unwrap();
        assert!(g > 0.0 && h >= g * 0.5, "{g} {h}");
        for (s, inputs) in sets.iter().enumerate() {
            let mut want = poisoned_outputs(&pl.problem);
            lanefold_cpu::execute(&pl, inputs, &mut want).unwrap();
            let got = p.outputs(s).unwrap();
            assert_eq!(got, want, "set {s}");
        }
        assert!(matches!(p.outputs(3), Err(CudaError::Data(_))));

        // A batch above the graph limit replays chunks; still a graph.
        let big = MAX_GRAPH_LAUNCHES * 2 + 5;
        let (gpu_us, _, graph) = p.gpu_batch(big).unwrap();
        assert!(graph && gpu_us > 0.0);
        eprintln!(
            "sum 64x4096: gpu {:.2} us/op over {big}, single {g:.2} us gpu / {h:.2} us host",
            gpu_us / big as f64
        );
        // time() goes through the same path.
        let t = backend.time(&pl, &options, &sets[0], 20, 3).unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.iter().all(|x| *x > 0.0));
    }

    /// With shared outputs every set writes set 0's buffers: after a batch
    /// they hold the last set's result, and a poisoned rerun of set 0
    /// gives set 0's exactly; sharing after a capture is refused.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo test -p lanefold-cuda --release -- --ignored"]
    fn shared_outputs_hold_the_last_set_and_rerun_set0_exactly() {
        probe_driver().expect("this test needs a CUDA driver");
        let backend = CudaBackend::open(0).expect("open device 0");
        let pl = sum_plan("64x4096");
        let options = CodegenOptions { fma: false };
        let sets: Vec<Buffers> = (0..3).map(|s| random_inputs(&pl.problem, s)).collect();
        let want = |s: usize| {
            let mut want = poisoned_outputs(&pl.problem);
            lanefold_cpu::execute(&pl, &sets[s], &mut want).unwrap();
            want
        };
        let mut p = backend.prepare(&pl, &options, &sets).unwrap();
        p.share_outputs().unwrap();
        // Launches 0..5 use sets 0, 1, 2, 0, 1: the last wrote set 1's.
        p.e2e_batch(5).unwrap();
        assert_eq!(p.outputs(2).unwrap(), want(1));
        p.rerun_set0_poisoned().unwrap();
        assert_eq!(p.outputs(0).unwrap(), want(0));
        p.gpu_batch(4).unwrap();
        assert!(matches!(p.share_outputs(), Err(CudaError::Data(_))));
    }
}
