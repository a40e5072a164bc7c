//! Where the synchronized single-call host time goes: one prepared plan
//! launched and waited for by several driver paths and context scheduling
//! modes, interleaved so drift spreads over all of them. A diagnostic for
//! the single-call target, not a timing phase of the results files.

use crate::call_graph::{pointer_and_word, CallGraph, TrailingNode};
use crate::{driver, CudaError, LaunchApi, Loaded, Prepared};
use cudarc::driver::sys;
use std::time::Instant;

/// One way to launch and wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyVariant {
    /// `cuStreamSynchronize` on an idle stream: the wait's own cost.
    SyncOnly,
    /// `cuLaunchKernelEx` then `cuStreamSynchronize`.
    ExSync,
    /// `cuLaunchKernelEx` then polling `cuStreamQuery`.
    ExSpin,
    /// `cuLaunchKernel` then `cuStreamSynchronize`.
    LegacySync,
    /// `cuLaunchKernel` then polling `cuStreamQuery`.
    LegacySpin,
    /// A one-launch graph replayed, then `cuStreamSynchronize`.
    GraphSync,
    /// A one-launch graph replayed, then polling `cuStreamQuery`.
    GraphSpin,
    /// lanefold's call path (the graph with this call's parameters set),
    /// then `cuStreamSynchronize`: the `single` phase.
    CallSync,
    /// lanefold's call path, then polling `cuStreamQuery`.
    CallSpin,
    /// lanefold's call path, then `cuStreamWriteValue32` of a host-mapped
    /// flag after the kernel, which the host spins on without a driver
    /// call: how much of the wait is the driver noticing completion.
    CallFlag,
    /// lanefold's call path, then a one-thread kernel that writes the
    /// host-mapped flag (for drivers that refuse the stream write to it),
    /// which the host spins on.
    CallKernelFlag,
    /// The call graph with the flag writer as a second node: one launch
    /// API call, then the host spins on the flag.
    GraphKernelFlag,
}

impl LatencyVariant {
    pub const ALL: [LatencyVariant; 12] = [
        LatencyVariant::SyncOnly,
        LatencyVariant::ExSync,
        LatencyVariant::ExSpin,
        LatencyVariant::LegacySync,
        LatencyVariant::LegacySpin,
        LatencyVariant::GraphSync,
        LatencyVariant::GraphSpin,
        LatencyVariant::CallSync,
        LatencyVariant::CallSpin,
        LatencyVariant::CallFlag,
        LatencyVariant::CallKernelFlag,
        LatencyVariant::GraphKernelFlag,
    ];

    pub fn label(self) -> &'static str {
        match self {
            LatencyVariant::SyncOnly => "sync only",
            LatencyVariant::ExSync => "launch-ex + sync",
            LatencyVariant::ExSpin => "launch-ex + poll",
            LatencyVariant::LegacySync => "launch + sync",
            LatencyVariant::LegacySpin => "launch + poll",
            LatencyVariant::GraphSync => "graph + sync",
            LatencyVariant::GraphSpin => "graph + poll",
            LatencyVariant::CallSync => "call path + sync",
            LatencyVariant::CallSpin => "call path + poll",
            LatencyVariant::CallFlag => "call path + mapped flag",
            LatencyVariant::CallKernelFlag => "call path + kernel-written flag",
            LatencyVariant::GraphKernelFlag => "call graph with a flag node",
        }
    }
}

/// Context scheduling modes tried, with the flag `cuCtxSetFlags` takes.
pub const SCHEDULES: [(&str, Option<u32>); 3] = [
    ("as opened", None),
    ("spin", Some(sys::CUctx_flags::CU_CTX_SCHED_SPIN as u32)),
    (
        "blocking",
        Some(sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32),
    ),
];

/// Host µs of every iteration of one variant under one schedule.
#[derive(Clone, Debug)]
pub struct LatencyProbe {
    pub schedule: &'static str,
    pub variant: LatencyVariant,
    pub host_us: Vec<f64>,
}

const SCHED_MASK: u32 = 0x07;

fn ctx_flags() -> Result<u32, CudaError> {
    let mut flags: std::ffi::c_uint = 0;
    // SAFETY: writes one unsigned int; the context is current.
    unsafe { sys::cuCtxGetFlags(&mut flags) }
        .result()
        .map_err(driver("reading the context flags"))?;
    Ok(flags)
}

fn set_ctx_flags(flags: u32) -> Result<(), CudaError> {
    // SAFETY: only the scheduling bits change; the context is current.
    unsafe { sys::cuCtxSetFlags(flags) }
        .result()
        .map_err(driver("setting the context flags"))
}

/// A 4-byte flag in host-mapped pinned memory that the GPU writes after
/// the stream's earlier work and the host reads without a driver call.
struct HostFlag {
    host: *mut u32,
    device: sys::CUdeviceptr,
    seq: u32,
}

/// Who writes the flag behind the stream's work.
#[derive(Clone, Copy)]
enum FlagWriter<'a> {
    /// The driver: `cuStreamWriteValue32` (ordered, with a memory barrier).
    Stream,
    /// A one-thread kernel launched behind the work ([`SIGNAL_SOURCE`]).
    Kernel(&'a Loaded),
}

/// The flag writer: a volatile store to the mapped word, then a system
/// fence so it leaves the GPU before the kernel ends. Stream order puts it
/// after the call's kernel has finished.
const SIGNAL_SOURCE: &str = r#"extern "C" __global__ void lf_signal(volatile unsigned* flag, unsigned seq)
{
    *flag = seq;
    __threadfence_system();
}
"#;

fn signal_kernel() -> lanefold_codegen::Kernel {
    lanefold_codegen::Kernel {
        name: "lf_signal".into(),
        source: SIGNAL_SOURCE.into(),
        grid: (1, 1, 1),
        block: (1, 1, 1),
        cluster: None,
        shared_bytes: 0,
        params: vec![],
    }
}

/// Longest wait for the flag before the variant is declared unsupported.
const FLAG_TIMEOUT_S: f64 = 1.0;

impl HostFlag {
    fn new() -> Result<HostFlag, CudaError> {
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: out-pointers to locals; 4 bytes, mapped into the device's
        // address space; freed in Drop.
        unsafe {
            sys::cuMemHostAlloc(&mut host, 4, sys::CU_MEMHOSTALLOC_DEVICEMAP)
                .result()
                .map_err(driver("allocating the mapped flag"))?;
            // The one owner of the allocation from here on: it frees it on
            // the error path below. (Building the result as `HostFlag {
            // device, ..flag }` copied the fields and then dropped `flag`,
            // freeing the memory the copy went on to spin on: the probe's
            // segfault in session 10, call 36.)
            let mut flag = HostFlag {
                host: host.cast(),
                device: 0,
                seq: 0,
            };
            std::ptr::write_volatile(flag.host, 0);
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0)
                .result()
                .map_err(driver("mapping the flag"))?;
            flag.device = device;
            Ok(flag)
        }
    }

    /// Enqueue the next value behind the stream's work and spin until it
    /// lands in host memory.
    fn signal_and_wait(
        &mut self,
        stream: sys::CUstream,
        writer: FlagWriter,
    ) -> Result<(), CudaError> {
        self.seq = self.seq.wrapping_add(1).max(1);
        match writer {
            // SAFETY: a live stream; the address is the mapped flag's.
            FlagWriter::Stream => unsafe {
                sys::cuStreamWriteValue32_v2(
                    stream,
                    self.device,
                    self.seq,
                    sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
                )
            }
            .result()
            .map_err(driver("enqueueing the flag write"))?,
            FlagWriter::Kernel(signal) => {
                let mut device = self.device;
                let mut seq = self.seq;
                let mut args = pointer_and_word(&mut device, &mut seq);
                // SAFETY: `lf_signal(unsigned*, unsigned)` takes these two
                // arguments, alive across the call; one thread, no shared
                // memory, a live stream of the current context.
                unsafe {
                    sys::cuLaunchKernel(
                        signal.function.cu_function(),
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        0,
                        stream,
                        args.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                }
                .result()
                .map_err(driver("launching the flag writer"))?
            }
        }
        self.wait_for(self.seq)
    }

    /// Clear the flag (the GPU is not writing it: the last value arrived).
    fn reset(&mut self) {
        // SAFETY: the pinned allocation lives as long as self.
        unsafe { std::ptr::write_volatile(self.host, 0) }
    }

    /// Spin until the flag holds `value`.
    fn wait_for(&self, value: u32) -> Result<(), CudaError> {
        let started = Instant::now();
        // SAFETY: the pinned allocation lives as long as self.
        while unsafe { std::ptr::read_volatile(self.host) } != value {
            if started.elapsed().as_secs_f64() > FLAG_TIMEOUT_S {
                return Err(CudaError::Data(format!(
                    "the mapped flag did not arrive within {FLAG_TIMEOUT_S} s"
                )));
            }
            std::hint::spin_loop();
        }
        Ok(())
    }
}

impl Drop for HostFlag {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once.
        unsafe {
            let _ = sys::cuMemFreeHost(self.host.cast());
        }
    }
}

/// The flags the probe could set up, each with its writer.
struct Flags {
    stream: Option<HostFlag>,
    kernel: Option<(HostFlag, Loaded)>,
    /// The call graph whose second node writes 1 to the flag.
    graph: Option<(HostFlag, CallGraph)>,
}

impl Prepared<'_> {
    /// The call graph with `signal` writing 1 to a fresh flag after the
    /// kernel, tried once; None where the call path has no graph (cluster
    /// kernels).
    fn flag_graph(&mut self, signal: &Loaded) -> Result<Option<(HostFlag, CallGraph)>, CudaError> {
        let mut flag = HostFlag::new()?;
        let trailing = TrailingNode {
            loaded: signal,
            pointer: flag.device,
            word: 1,
        };
        let graph = CallGraph::with_trailing(
            self.backend,
            &self.loaded,
            &mut self.sets[0],
            Some(trailing),
        )?;
        let Some(graph) = graph else { return Ok(None) };
        flag.reset();
        graph.launch(self.backend, &self.loaded, &mut self.sets[0])?;
        flag.wait_for(1)?;
        Ok(Some((flag, graph)))
    }

    /// Poll the stream until its work is done.
    fn poll(&self) -> Result<(), CudaError> {
        let stream = self.backend.stream.cu_stream();
        loop {
            // SAFETY: a live stream of the current context.
            match unsafe { sys::cuStreamQuery(stream) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY => std::hint::spin_loop(),
                e => return e.result().map_err(driver("polling the stream")),
            }
        }
    }

    fn one(&mut self, variant: LatencyVariant, flags: &mut Flags) -> Result<f64, CudaError> {
        let k = self.next_single_set();
        let t0 = Instant::now();
        match variant {
            LatencyVariant::SyncOnly => {}
            LatencyVariant::ExSync | LatencyVariant::ExSpin => {
                self.backend
                    .launch_with(&self.loaded, &mut self.sets[k], LaunchApi::Ex)?
            }
            LatencyVariant::LegacySync | LatencyVariant::LegacySpin => {
                self.backend
                    .launch_with(&self.loaded, &mut self.sets[k], LaunchApi::Legacy)?
            }
            LatencyVariant::GraphSync | LatencyVariant::GraphSpin => match self.graphs.get(&1) {
                Some(Some(g)) => g.launch().map_err(driver("launching the graph"))?,
                _ => self.backend.launch(&self.loaded, &mut self.sets[0])?,
            },
            LatencyVariant::CallSync
            | LatencyVariant::CallSpin
            | LatencyVariant::CallFlag
            | LatencyVariant::CallKernelFlag => self.call(k)?,
            LatencyVariant::GraphKernelFlag => {
                let (flag, graph) = flags.graph.as_mut().expect("runs only with its graph");
                flag.reset();
                graph.launch(self.backend, &self.loaded, &mut self.sets[k])?;
                flag.wait_for(1)?;
                return Ok(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        let stream = self.backend.stream.cu_stream();
        match variant {
            LatencyVariant::CallFlag => {
                let flag = flags.stream.as_mut().expect("runs only with its flag");
                flag.signal_and_wait(stream, FlagWriter::Stream)?;
                return Ok(t0.elapsed().as_secs_f64() * 1e6);
            }
            LatencyVariant::CallKernelFlag => {
                let (flag, signal) = flags.kernel.as_mut().expect("runs only with its flag");
                flag.signal_and_wait(stream, FlagWriter::Kernel(signal))?;
                return Ok(t0.elapsed().as_secs_f64() * 1e6);
            }
            _ => {}
        }
        match variant {
            LatencyVariant::ExSpin
            | LatencyVariant::LegacySpin
            | LatencyVariant::GraphSpin
            | LatencyVariant::CallSpin => self.poll()?,
            _ => self.synchronize("waiting in the latency probe")?,
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    }

    /// `iters` timed calls of every variant under every schedule in
    /// [`SCHEDULES`] (after `iters / 10` untimed ones); the context's
    /// original flags are restored before returning, error or not.
    pub fn latency_probe(&mut self, iters: usize) -> Result<Vec<LatencyProbe>, CudaError> {
        self.backend
            .ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        self.graph(1)?;
        self.call(0)?;
        self.synchronize("warming the call path")?;
        // Stream memory operations may be missing on a driver or device
        // (the H200's driver refused them in session 8): then that flag
        // variant is left out, not the probe.
        let stream = self.backend.stream.cu_stream();
        let mut flags = Flags {
            stream: HostFlag::new().ok(),
            kernel: None,
            graph: None,
        };
        if let Some(f) = flags.stream.as_mut() {
            if let Err(e) = f.signal_and_wait(stream, FlagWriter::Stream) {
                eprintln!("latency: the mapped-flag variant is left out: {e}");
                flags.stream = None;
            }
        }
        match HostFlag::new().and_then(|f| Ok((f, self.backend.load_helper(&signal_kernel())?))) {
            Ok((mut f, signal)) => match f.signal_and_wait(stream, FlagWriter::Kernel(&signal)) {
                Ok(()) => {
                    match self.flag_graph(&signal) {
                        Ok(Some(g)) => flags.graph = Some(g),
                        Ok(None) => {}
                        Err(e) => eprintln!("latency: the graph with a flag node is left out: {e}"),
                    }
                    flags.kernel = Some((f, signal));
                }
                Err(e) => eprintln!("latency: the kernel-written flag is left out: {e}"),
            },
            Err(e) => eprintln!("latency: the kernel-written flag is left out: {e}"),
        }
        let original = ctx_flags()?;
        let result = self.probe_schedules(iters.max(1), original, &mut flags);
        let restored = set_ctx_flags(original);
        let out = result?;
        restored?;
        Ok(out)
    }

    fn probe_schedules(
        &mut self,
        iters: usize,
        original: u32,
        flags: &mut Flags,
    ) -> Result<Vec<LatencyProbe>, CudaError> {
        let variants: Vec<LatencyVariant> = LatencyVariant::ALL
            .into_iter()
            .filter(|v| match v {
                LatencyVariant::CallFlag => flags.stream.is_some(),
                LatencyVariant::CallKernelFlag => flags.kernel.is_some(),
                LatencyVariant::GraphKernelFlag => flags.graph.is_some(),
                _ => true,
            })
            .collect();
        let mut out = vec![];
        for (schedule, sched_flag) in SCHEDULES {
            let ctx = match sched_flag {
                Some(f) => (original & !SCHED_MASK) | f,
                None => original,
            };
            set_ctx_flags(ctx)?;
            let mut samples = vec![Vec::with_capacity(iters); variants.len()];
            for i in 0..iters + iters / 10 {
                for (v, variant) in variants.iter().enumerate() {
                    let us = self.one(*variant, flags)?;
                    if i >= iters / 10 {
                        samples[v].push(us);
                    }
                }
            }
            for (variant, host_us) in variants.iter().zip(samples) {
                out.push(LatencyProbe {
                    schedule,
                    variant: *variant,
                    host_us,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_compiles_the_flag_writer_with_the_symbol_the_probe_loads() {
        let kernel = signal_kernel();
        let opts = lanefold_codegen::nvrtc_options(&Default::default(), "sm_90");
        let (cubin, _log) =
            crate::compile_kernel(&kernel, &opts).expect("the flag writer compiles");
        assert!(!cubin.is_empty());
        // The symbol the probe looks up is in the binary.
        assert!(cubin.windows(9).any(|w| w == b"lf_signal"));
    }
}
