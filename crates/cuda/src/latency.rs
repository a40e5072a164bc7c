//! Where the synchronized single-call host time goes: one prepared plan
//! launched and waited for by several driver paths and context scheduling
//! modes, interleaved so drift spreads over all of them. A diagnostic for
//! the single-call target, not a timing phase of the results files.

use crate::call_graph::{CallCompletion, CallPath};
use crate::completion::{signal_kernel, FlagWriter, HostFlag};
use crate::{driver, CudaError, LaunchApi, Loaded, Prepared};
use cudarc::driver::sys;
use lanefold_codegen::Signal;
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
    /// lanefold's call path (the graph with this call's parameters set
    /// and its completion flag's node), then `cuStreamSynchronize`.
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
    /// lanefold's call path and its own wait, as the `single` phase makes
    /// it (the first completion that works for the kernel).
    CallPathWait,
    /// The call path built with the flag writer as a second graph node.
    PathFlagNode,
    /// The call path built with the self-signalling kernel, last group by
    /// ticket.
    PathTicket,
    /// The call path built with the self-signalling kernel, group 0
    /// watching the others' counts.
    PathWatcher,
}

impl LatencyVariant {
    pub const ALL: [LatencyVariant; 15] = [
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
        LatencyVariant::CallPathWait,
        LatencyVariant::PathFlagNode,
        LatencyVariant::PathTicket,
        LatencyVariant::PathWatcher,
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
            LatencyVariant::CallPathWait => "call path + its flag (lanefold)",
            LatencyVariant::PathFlagNode => "path: flag node",
            LatencyVariant::PathTicket => "path: kernel, ticket",
            LatencyVariant::PathWatcher => "path: kernel, watcher",
        }
    }

    /// The completion a `Path*` variant builds its own call path with.
    fn completion(self) -> Option<CallCompletion> {
        match self {
            LatencyVariant::PathFlagNode => Some(CallCompletion::FlagNode),
            LatencyVariant::PathTicket => Some(CallCompletion::Kernel(Signal::Ticket)),
            LatencyVariant::PathWatcher => Some(CallCompletion::Kernel(Signal::Watcher)),
            _ => None,
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

/// The extra flags the probe could set up, each with its writer (the call
/// path's own flag is [`LatencyVariant::CallPathWait`]).
struct Flags {
    stream: Option<HostFlag>,
    kernel: Option<(HostFlag, Loaded)>,
    /// The `Path*` variants' own call paths, where they could be built.
    paths: Vec<(LatencyVariant, CallPath)>,
}

impl Prepared<'_> {
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
            LatencyVariant::CallPathWait => {
                self.call(k)?;
                self.wait_call()?;
                return Ok(t0.elapsed().as_secs_f64() * 1e6);
            }
            LatencyVariant::PathFlagNode
            | LatencyVariant::PathTicket
            | LatencyVariant::PathWatcher => {
                let (_, path) = flags
                    .paths
                    .iter_mut()
                    .find(|(v, _)| *v == variant)
                    .expect("runs only with its path");
                path.launch(self.backend, &self.loaded, &mut self.sets[k])?;
                path.wait(self.backend)?;
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
        // (the H200's driver refused them once): then that flag
        // variant is left out, not the probe.
        let stream = self.backend.stream.cu_stream();
        let mut flags = Flags {
            stream: HostFlag::new().ok(),
            kernel: None,
            paths: vec![],
        };
        for variant in LatencyVariant::ALL {
            let Some(completion) = variant.completion() else {
                continue;
            };
            let options = self.options;
            match CallPath::build_as(
                self.backend,
                &self.loaded,
                &options,
                &mut self.sets[0],
                completion,
            ) {
                Ok(path) => flags.paths.push((variant, path)),
                Err(e) => {
                    eprintln!("latency: {} is left out: {e}", variant.label());
                    self.synchronize("after a call path that failed")?;
                }
            }
        }
        if let Some(f) = flags.stream.as_mut() {
            if let Err(e) = f.signal_and_wait(stream, FlagWriter::Stream) {
                eprintln!("latency: the mapped-flag variant is left out: {e}");
                flags.stream = None;
            }
        }
        match HostFlag::new().and_then(|f| Ok((f, self.backend.load_helper(&signal_kernel())?))) {
            Ok((mut f, signal)) => match f.signal_and_wait(stream, FlagWriter::Kernel(&signal)) {
                Ok(()) => flags.kernel = Some((f, signal)),
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
                v if v.completion().is_some() => flags.paths.iter().any(|(p, _)| p == v),
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
