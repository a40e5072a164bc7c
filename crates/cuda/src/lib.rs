//! The CUDA backend: the only crate that touches the driver.
//!
//! Kernels come from `lanefold-codegen`, are compiled by NVRTC to a cubin
//! for the device's own architecture, cached in memory and on disk (keyed
//! by SHA-256 of source, options and architecture, verified on load), and
//! launched with `cuLaunchKernelEx` (cluster dimensions set at launch).
//!
//! cudarc panics when `libcuda` or `libnvrtc` is missing; [`CudaBackend::open`]
//! probes for both first and returns [`CudaError::NoDriver`] /
//! [`CudaError::NoNvrtc`] instead.

mod cache;
mod call_graph;
mod cold;
mod columns;
mod completion;
mod cubin;
mod latency;
mod prepared;
mod raw;

pub use cache::{compile_key, default_dir as default_kernel_cache_dir, sha256_hex, DiskCache};
pub use call_graph::CallCompletion;
pub use cold::{resolve_cold_path, ColdPathDecision};
pub use cubin::{kernel_resources, CubinResources};
pub use latency::{LatencyProbe, LatencyVariant};
pub use prepared::{KernelResources, Prepared, MAX_GRAPH_LAUNCHES};
pub use raw::RawKernel;

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr,
};
use cudarc::nvrtc;
use lanefold_codegen::{
    arch_for, generate, nvrtc_options, CodegenError, CodegenOptions, Kernel, ParamKind,
};
use lanefold_cpu::data::{expected_len, Buffers, Tensor};
use lanefold_ir::BufferKind;
use lanefold_plan::Plan;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// `libcuda` cannot be loaded (no driver on this machine).
    #[error("{0}")]
    NoDriver(String),
    /// `libnvrtc` cannot be loaded.
    #[error("{0}")]
    NoNvrtc(String),
    #[error("CUDA driver error in {context}: {error}")]
    Driver {
        context: String,
        error: String,
        /// The driver refused an allocation: the case was too large for
        /// the memory left, the device still works.
        out_of_memory: bool,
    },
    #[error("NVRTC failed to compile kernel '{kernel}' ({error}):\n{log}")]
    Compile {
        kernel: String,
        error: String,
        log: String,
    },
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    #[error("data: {0}")]
    Data(String),
}

/// The launch attribute of a cluster of `blocks` blocks along x.
fn cluster_dimension(blocks: u32) -> sys::CUlaunchAttribute {
    // SAFETY: a plain-data union, zero is a valid bit pattern.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 {
        x: blocks,
        y: 1,
        z: 1,
    };
    sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        pad: [0; 4],
        value,
    }
}

fn driver(context: &str) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError + '_ {
    move |e| CudaError::Driver {
        context: context.to_string(),
        error: e.to_string(),
        out_of_memory: e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    }
}

impl CudaError {
    /// Whether the driver refused an allocation (see [`CudaError::Driver`]).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            CudaError::Driver {
                out_of_memory: true,
                ..
            }
        )
    }
}

/// Directories scanned (besides the dynamic loader's own search) for the
/// CUDA libraries, for the error message.
fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/nvidia/lib64",
        "/usr/lib64",
        "/usr/lib",
        "/usr/lib/wsl/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

fn scan_for(prefix: &str) -> bool {
    library_dirs().iter().any(|d| {
        std::fs::read_dir(d)
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
            })
            .unwrap_or(false)
    })
}

fn searched() -> String {
    library_dirs()
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Can the driver library be loaded? (The dynamic loader decides; the
/// directory scan only explains a failure.) Never panics.
pub fn probe_driver() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen the candidate names; no symbol is used.
    let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if present {
        return Ok(());
    }
    let found = if scan_for("libcuda.so") {
        "a libcuda.so file exists in the searched directories but could not be loaded"
    } else {
        "libcuda.so not found"
    };
    Err(CudaError::NoDriver(format!(
        "no CUDA driver found ({found} in {} nor by the dynamic loader)",
        searched()
    )))
}

static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`fallback_note`] gives the loader's details (`--verbose`).
pub fn set_verbose(verbose: bool) {
    VERBOSE.store(verbose, std::sync::atomic::Ordering::Relaxed);
}

/// Why a run falls back to the CPU, in one line: a missing driver or
/// NVRTC is the common case on a machine without a GPU, and the
/// directories searched are noise there, so they come only after
/// [`set_verbose`]`(true)`.
pub fn fallback_note(err: &CudaError) -> String {
    let verbose = VERBOSE.load(std::sync::atomic::Ordering::Relaxed);
    let short = match err {
        CudaError::NoDriver(_) => "no CUDA driver found",
        CudaError::NoNvrtc(_) => "no NVRTC found",
        other => return format!("no GPU in use ({other})"),
    };
    // The error itself starts with the short form.
    if verbose {
        err.to_string()
    } else {
        short.to_string()
    }
}

/// Can NVRTC be loaded? Never panics.
pub fn probe_nvrtc() -> Result<(), CudaError> {
    // SAFETY: as above.
    let present =
        std::panic::catch_unwind(|| unsafe { nvrtc::sys::is_culib_present() }).unwrap_or(false);
    if present {
        return Ok(());
    }
    let found = if scan_for("libnvrtc.so") {
        "a libnvrtc.so file exists in the searched directories but could not be loaded"
    } else {
        "libnvrtc.so not found"
    };
    Err(CudaError::NoNvrtc(format!(
        "no NVRTC found ({found} in {} nor by the dynamic loader); install the CUDA runtime compiler (cuda-nvrtc)",
        searched()
    )))
}

/// SHA-256 of the source of the kernel generated for `plan`.
pub fn kernel_source_sha256(plan: &Plan, options: &CodegenOptions) -> Result<String, CudaError> {
    Ok(sha256_hex(generate(plan, options)?.source.as_bytes()))
}

/// A compiled, loaded kernel.
struct Loaded {
    kernel: Kernel,
    function: CudaFunction,
    _module: Arc<CudaModule>,
}

/// Device buffers for one launch, in parameter order.
struct DeviceArgs {
    slices: Vec<(String, CudaSlice<u8>)>,
    pointers: Vec<u64>,
    ints: [i32; 2],
}

impl DeviceArgs {
    /// Raw argument pointers for `cuLaunchKernelEx` (valid while `self` is).
    fn raw(&mut self, kernel: &Kernel) -> Vec<*mut c_void> {
        argument_pointers(kernel, &mut self.pointers, &mut self.ints)
    }
}

/// The kernel's argument array: in parameter order, a pointer to the next
/// of `pointers` for each buffer, to `ints[0]` for rows and `ints[1]` for
/// N (valid while both are).
fn argument_pointers(
    kernel: &Kernel,
    pointers: &mut [u64],
    ints: &mut [i32; 2],
) -> Vec<*mut c_void> {
    let mut out = vec![];
    let mut p = 0;
    for param in &kernel.params {
        match param.kind {
            ParamKind::Input | ParamKind::Output => {
                out.push(&mut pointers[p] as *mut u64 as *mut c_void);
                p += 1;
            }
            ParamKind::Rows => out.push(&mut ints[0] as *mut i32 as *mut c_void),
            ParamKind::N => out.push(&mut ints[1] as *mut i32 as *mut c_void),
        }
    }
    out
}

/// Which driver entry point launches a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaunchApi {
    /// `cuLaunchKernelEx` (needed for cluster dimensions).
    Ex,
    /// `cuLaunchKernel`.
    Legacy,
}

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: String,
    cc: (u32, u32),
    memory: Mutex<HashMap<String, Arc<Loaded>>>,
    /// Binaries [`CudaBackend::precompile`] built ahead, by compile key,
    /// each taken (and loaded) by the first [`CudaBackend::load`] asking.
    staged: Mutex<HashMap<String, Vec<u8>>>,
    disk: Option<DiskCache>,
}

/// One kernel [`CudaBackend::precompile`] will compile.
struct CompileJob {
    key: String,
    kernel: Kernel,
    options: Vec<String>,
}

/// The kernels of `jobs` that need compiling for `arch`: one per compile
/// key, none that `known` already has; plans codegen refuses are counted
/// as failed (their own load reports why). No NVRTC, no driver.
fn kernels_to_compile(
    jobs: &[(Plan, CodegenOptions)],
    arch: &str,
    known: impl Fn(&str) -> bool,
) -> (Vec<CompileJob>, Precompiled) {
    let mut report = Precompiled::default();
    let mut todo = vec![];
    let mut seen = HashSet::new();
    for (plan, options) in jobs {
        let Ok(kernel) = generate(plan, options) else {
            report.failed += 1;
            continue;
        };
        let options = nvrtc_options(options, arch);
        let key = compile_key(&kernel.source, &options, arch, nvrtc_id());
        if known(&key) || !seen.insert(key.clone()) {
            report.skipped += 1;
            continue;
        }
        todo.push(CompileJob {
            key,
            kernel,
            options,
        });
    }
    (todo, report)
}

/// What one [`CudaBackend::precompile`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Precompiled {
    /// Kernels compiled and staged.
    pub compiled: usize,
    /// Kernels already loaded, staged or on disk, and repeats.
    pub skipped: usize,
    /// Kernels NVRTC refused (or plans codegen refused): left for the
    /// load that needs them to report.
    pub failed: usize,
    /// Wall time of the whole call, NVRTC on every core.
    pub elapsed: std::time::Duration,
}

impl std::fmt::Display for Precompiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "compiled {} kernels ahead ({} skipped, {} failed) in {:.1} s",
            self.compiled,
            self.skipped,
            self.failed,
            self.elapsed.as_secs_f64()
        )
    }
}

impl CudaBackend {
    /// Open device `ordinal`. Without a driver (or NVRTC) this is an error,
    /// never a panic.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        probe_driver()?;
        probe_nvrtc()?;
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| {
                CudaError::NoDriver("no CUDA driver found (loading libcuda panicked)".into())
            })?
            .map_err(driver("opening the device"))?;
        // One stream, one thread of work: no cross-stream event tracking.
        // SAFETY: every buffer is used on `stream` only.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("compute capability"))?;
        let cc = (major as u32, minor as u32);
        let stream = ctx.new_stream().map_err(driver("creating a stream"))?;
        Ok(CudaBackend {
            arch: arch_for(cc.0, cc.1),
            ctx,
            stream,
            cc,
            memory: Mutex::new(HashMap::new()),
            staged: Mutex::new(HashMap::new()),
            disk: cache::default_dir().map(DiskCache::new),
        })
    }

    /// Use another directory for the on-disk kernel cache (None: memory only).
    pub fn set_disk_cache(&mut self, dir: Option<PathBuf>) {
        self.disk = dir.map(DiskCache::new);
    }

    pub fn device_name(&self) -> String {
        self.ctx.name().unwrap_or_else(|e| format!("unknown ({e})"))
    }

    pub fn compute_capability(&self) -> (u32, u32) {
        self.cc
    }

    /// The architecture kernels are compiled for, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// `major.minor` of the installed driver's CUDA version.
    pub fn driver_version(&self) -> String {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: the driver is loaded (open succeeded); writes one int.
        match unsafe { sys::cuDriverGetVersion(&mut v) }.result() {
            Ok(()) => format!("{}.{}", v / 1000, (v % 1000) / 10),
            Err(e) => format!("unknown ({e})"),
        }
    }

    fn attribute(&self, a: sys::CUdevice_attribute) -> i64 {
        self.ctx.attribute(a).map(|x| x as i64).unwrap_or(0)
    }

    pub fn multiprocessors(&self) -> u32 {
        self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) as u32
    }

    pub fn l2_bytes(&self) -> u64 {
        self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) as u64
    }

    /// The device's rated peak SM clock, MHz (a driver attribute, not the
    /// current clock; use NVML / nvidia-smi for that). None if unreported.
    pub fn sm_clock_mhz(&self) -> Option<u32> {
        let khz = self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
        (khz > 0).then_some((khz / 1000) as u32)
    }

    /// The device's rated peak memory clock, MHz (driver attribute, as
    /// above). None if unreported.
    pub fn memory_clock_mhz(&self) -> Option<u32> {
        let khz = self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
        (khz > 0).then_some((khz / 1000) as u32)
    }

    /// The device UUID as nvidia-smi prints it (`GPU-xxxxxxxx-xxxx-...`).
    pub fn uuid(&self) -> Option<String> {
        let u = self.ctx.uuid().ok()?;
        let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
        let hex =
            |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
        Some(format!(
            "GPU-{}-{}-{}-{}-{}",
            hex(0..4),
            hex(4..6),
            hex(6..8),
            hex(8..10),
            hex(10..16)
        ))
    }

    /// The ordinal this backend was opened on.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// Device-to-device copy bandwidth, GB/s counting bytes read plus bytes
    /// written (the yardstick of a memory-bound kernel): the best of
    /// `samples` timed copies of `bytes` after one warm-up copy.
    pub fn copy_gbps(&self, bytes: usize, samples: usize) -> Result<f64, CudaError> {
        let src = self
            .stream
            .alloc_zeros::<u8>(bytes)
            .map_err(driver("allocating the copy source"))?;
        let mut dst = self
            .stream
            .alloc_zeros::<u8>(bytes)
            .map_err(driver("allocating the copy destination"))?;
        let event = || {
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("creating an event"))
        };
        let (start, end) = (event()?, event()?);
        let mut best = f64::INFINITY;
        for k in 0..=samples.max(1) {
            start
                .record(&self.stream)
                .map_err(driver("recording an event"))?;
            self.stream
                .memcpy_dtod(&src, &mut dst)
                .map_err(driver("copying"))?;
            end.record(&self.stream)
                .map_err(driver("recording an event"))?;
            end.synchronize().map_err(driver("copying"))?;
            let ms = start
                .elapsed_ms(&end)
                .map_err(driver("reading the events"))? as f64;
            if k > 0 {
                best = best.min(ms);
            }
        }
        Ok(2.0 * bytes as f64 / (best * 1e-3) / 1e9)
    }

    /// `plan` as this device runs it: a norm's cold path at the plain
    /// kernel's occupancy, or the plain plan ([`resolve_cold_path`]). The
    /// kernel compiled on the way is staged for [`CudaBackend::load`].
    pub fn resolve(
        &self,
        plan: &Plan,
        options: &CodegenOptions,
    ) -> Result<(Plan, ColdPathDecision), CudaError> {
        let r = cold::resolve(
            plan,
            options,
            &self.arch,
            &target_of(plan)?,
            self.disk.as_ref(),
        )?;
        self.stage(r.binary);
        Ok((r.plan, r.decision))
    }

    /// Keep a binary compiled on the way (a resolution's) for
    /// [`CudaBackend::load_kernel`], unless one is staged under its key.
    fn stage(&self, binary: Option<(String, Vec<u8>)>) {
        if let Some((key, bytes)) = binary {
            self.staged
                .lock()
                .expect("staging lock")
                .entry(key)
                .or_insert(bytes);
        }
    }

    /// Resolve ([`CudaBackend::resolve`]), generate, compile (cached) and
    /// load the kernel for `plan`: the one place a plan becomes a kernel.
    fn load(
        &self,
        plan: &Plan,
        options: &CodegenOptions,
    ) -> Result<(Plan, ColdPathDecision, Arc<Loaded>), CudaError> {
        let (plan, decision) = self.resolve(plan, options)?;
        let loaded = self.load_kernel(generate(&plan, options)?, options)?;
        Ok((plan, decision, loaded))
    }

    /// Compile (cached, in memory and on disk) and load a generated kernel.
    pub(crate) fn load_kernel(
        &self,
        kernel: Kernel,
        options: &CodegenOptions,
    ) -> Result<Arc<Loaded>, CudaError> {
        let opts = nvrtc_options(options, &self.arch);
        let key = compile_key(&kernel.source, &opts, &self.arch, nvrtc_id());
        if let Some(hit) = self.memory.lock().expect("cache lock").get(&key) {
            return Ok(hit.clone());
        }
        let mut binary = None;
        if let Some(disk) = &self.disk {
            if let Some(bytes) = disk.load(&key) {
                match self.load_binary(&kernel, bytes.clone()) {
                    Ok(l) => binary = Some(l),
                    Err(e) => disk.evict(&key, &bytes, &format!("the driver refused it: {e}")),
                }
            }
        }
        let loaded = match binary {
            Some(l) => l,
            None => {
                let staged = self.staged.lock().expect("staging lock").remove(&key);
                let bytes = match staged {
                    Some(bytes) => bytes,
                    None => compile_kernel(&kernel, &opts)?.0,
                };
                if let Some(disk) = &self.disk {
                    if let Err(e) = disk.store(&key, &bytes) {
                        eprintln!(
                            "lanefold: could not write the kernel cache under {}: {e}",
                            disk.dir().display()
                        );
                    }
                }
                self.load_binary(&kernel, bytes)?
            }
        };
        let loaded = Arc::new(loaded);
        self.memory
            .lock()
            .expect("cache lock")
            .insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Compile the kernels of many plans ahead, on every core, and stage
    /// the binaries for [`CudaBackend::load`]: a check suite of a thousand
    /// small kernels spends most of its time in NVRTC, one kernel at a
    /// time otherwise. Nothing is loaded onto the device here; a plan or
    /// kernel that fails is skipped, and its own load reports the error.
    pub fn precompile(&self, jobs: &[(Plan, CodegenOptions)]) -> Precompiled {
        let started = std::time::Instant::now();
        // Norm plans resolve first ([`CudaBackend::resolve`]: two compiles
        // each, on every core), staging the kernel each keeps; a plan that
        // fails to resolve is left for its own load to report.
        let resolutions: Vec<_> = jobs
            .par_iter()
            .map(|(p, o)| cold::resolve(p, o, &self.arch, &target_of(p)?, self.disk.as_ref()))
            .collect();
        let mut resolved = Vec::with_capacity(jobs.len());
        for ((p, o), r) in jobs.iter().zip(resolutions) {
            match r {
                Ok(r) => {
                    self.stage(r.binary);
                    resolved.push((r.plan, *o));
                }
                Err(_) => resolved.push((p.clone(), *o)),
            }
        }
        let jobs = &resolved[..];
        let (todo, mut report) = {
            let memory = self.memory.lock().expect("cache lock");
            let staged = self.staged.lock().expect("staging lock");
            let on_disk = |key: &str| {
                self.disk
                    .as_ref()
                    .is_some_and(|d| d.entry_path(key).exists())
            };
            kernels_to_compile(jobs, &self.arch, |key| {
                memory.contains_key(key) || staged.contains_key(key) || on_disk(key)
            })
        };
        let built: Vec<(String, Option<Vec<u8>>)> = todo
            .into_par_iter()
            .map(|job| {
                let bytes = compile_kernel(&job.kernel, &job.options).ok();
                (job.key, bytes.map(|(b, _)| b))
            })
            .collect();
        let mut staged = self.staged.lock().expect("staging lock");
        for (key, bytes) in built {
            match bytes {
                Some(b) => {
                    report.compiled += 1;
                    staged.insert(key, b);
                }
                None => report.failed += 1,
            }
        }
        report.elapsed = started.elapsed();
        report
    }

    /// Compile and load a hand-written helper kernel (no plan, no cache):
    /// the latency probe's flag writer.
    pub(crate) fn load_helper(&self, kernel: &Kernel) -> Result<Loaded, CudaError> {
        let opts = nvrtc_options(&CodegenOptions::default(), &self.arch);
        let (bytes, _log) = compile_kernel(kernel, &opts)?;
        self.load_binary(kernel, bytes)
    }

    fn load_binary(&self, kernel: &Kernel, bytes: Vec<u8>) -> Result<Loaded, CudaError> {
        let module = self
            .ctx
            .load_module(nvrtc::Ptx::from_binary(bytes))
            .map_err(driver("loading the kernel module"))?;
        let function = module
            .load_function(&kernel.name)
            .map_err(driver("finding the kernel function"))?;
        if kernel.cluster.is_some_and(|c| c > 8) {
            function
                .set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )
                .map_err(driver("allowing a non-portable cluster size"))?;
        }
        if kernel.shared_bytes > 48 * 1024 {
            function
                .set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    kernel.shared_bytes as i32,
                )
                .map_err(driver("raising the dynamic shared memory limit"))?;
        }
        if let Some(percent) = kernel.carveout_percent {
            // A hint in percent of the largest shared-memory carve-out,
            // rounded up to a size the hardware has; 0 asks for the least
            // that fits, leaving the rest to L1.
            function
                .set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                    percent as i32,
                )
                .map_err(driver("setting the shared-memory carve-out"))?;
        }
        let mut kernel = kernel.clone();
        if let (Some(rows), Some(cluster)) = (kernel.persistent_rows, kernel.cluster) {
            // A persistent cluster grid: as many clusters as the driver
            // keeps resident at once, at most one a row.
            let clusters = self.max_active_clusters(&function, &kernel)?;
            kernel.grid.0 = clusters.clamp(1, rows.max(1)) * cluster;
        } else if let Some(rows) = kernel.persistent_rows {
            // As many persistent groups as the compiled kernel keeps
            // resident at once (the plan only estimated its registers).
            let resident = function
                .occupancy_max_active_blocks_per_multiprocessor(
                    kernel.block.0,
                    kernel.shared_bytes as usize,
                    None,
                )
                .map_err(driver("reading the kernel's occupancy"))?;
            let groups = (self.multiprocessors() as u64 * resident.max(1) as u64).min(rows as u64);
            kernel.grid.0 = groups.max(1) as u32;
        }
        Ok(Loaded {
            kernel,
            function,
            _module: module,
        })
    }

    /// `cuOccupancyMaxActiveClusters` for a cluster kernel at its block
    /// size, cluster size and dynamic shared memory.
    fn max_active_clusters(
        &self,
        function: &cudarc::driver::CudaFunction,
        kernel: &Kernel,
    ) -> Result<u32, CudaError> {
        let cluster = kernel.cluster.unwrap_or(1);
        let mut attrs = [cluster_dimension(cluster)];
        let config = sys::CUlaunchConfig {
            gridDimX: cluster,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: kernel.block.0,
            blockDimY: kernel.block.1,
            blockDimZ: kernel.block.2,
            sharedMemBytes: kernel.shared_bytes,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: 1,
        };
        let mut clusters: std::ffi::c_int = 0;
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        // SAFETY: `config` and its one attribute outlive the call, and the
        // function belongs to this context.
        unsafe {
            sys::cuOccupancyMaxActiveClusters(&mut clusters, function.cu_function(), &config)
        }
        .result()
        .map_err(driver("reading the kernel's cluster occupancy"))?;
        if clusters < 1 {
            return Err(CudaError::Data(format!(
                "no cluster of {cluster} groups of {} threads with {} bytes of shared memory fits the device",
                kernel.block.0, kernel.shared_bytes
            )));
        }
        Ok(clusters as u32)
    }

    /// Upload inputs and allocate (or upload) outputs in parameter order.
    fn upload(
        &self,
        plan: &Plan,
        kernel: &Kernel,
        inputs: &Buffers,
        outputs: Option<&Buffers>,
    ) -> Result<DeviceArgs, CudaError> {
        let (rows, n) = (plan.shape().rows, plan.shape().n);
        let program = &plan.problem.program;
        let mut slices = vec![];
        let mut pointers = vec![];
        for param in &kernel.params {
            let (decl, source) = match param.kind {
                ParamKind::Input => (program.input(&param.name), Some(inputs)),
                ParamKind::Output => (program.output(&param.name), outputs),
                _ => continue,
            };
            let decl = decl.ok_or_else(|| {
                CudaError::Data(format!(
                    "kernel parameter '{}' is not a program buffer",
                    param.name
                ))
            })?;
            let len = expected_len(decl.kind, rows, n);
            let want = if decl.kind == BufferKind::RowIndex {
                "i64"
            } else {
                decl.kind.float_dtype(plan.dtype()).name()
            };
            let elem = if decl.kind == BufferKind::RowIndex {
                8
            } else {
                decl.kind.float_dtype(plan.dtype()).size_bytes()
            };
            let slice = match source {
                Some(buffers) => {
                    let t: &Tensor = buffers.get(&param.name).ok_or_else(|| {
                        CudaError::Data(format!("missing buffer '{}'", param.name))
                    })?;
                    if t.len() != len || t.dtype_name() != want {
                        return Err(CudaError::Data(format!(
                            "buffer '{}' is {} x {}, expected {len} x {want} for {:?} of shape {}",
                            param.name,
                            t.len(),
                            t.dtype_name(),
                            decl.kind,
                            plan.shape()
                        )));
                    }
                    self.stream
                        .clone_htod(&t.as_bytes())
                        .map_err(driver("uploading a buffer"))?
                }
                None => self
                    .stream
                    .alloc_zeros::<u8>(len * elem)
                    .map_err(driver("allocating an output"))?,
            };
            let (ptr, _guard) = slice.device_ptr(&self.stream);
            pointers.push(ptr);
            drop(_guard);
            slices.push((param.name.clone(), slice));
        }
        Ok(DeviceArgs {
            slices,
            pointers,
            ints: [rows as i32, n as i32],
        })
    }

    /// Enqueue one launch on the stream.
    pub(crate) fn launch(&self, loaded: &Loaded, args: &mut DeviceArgs) -> Result<(), CudaError> {
        self.launch_with(loaded, args, LaunchApi::Ex)
    }

    /// Launch through `api`. `Legacy` (`cuLaunchKernel`) has no launch
    /// attributes, so a cluster kernel always goes through `Ex`.
    pub(crate) fn launch_with(
        &self,
        loaded: &Loaded,
        args: &mut DeviceArgs,
        api: LaunchApi,
    ) -> Result<(), CudaError> {
        let k = &loaded.kernel;
        let mut raw = args.raw(k);
        if api == LaunchApi::Legacy && k.cluster.is_none() {
            self.ctx
                .bind_to_thread()
                .map_err(driver("binding the context"))?;
            // SAFETY: as below; no launch attributes are needed.
            return unsafe {
                sys::cuLaunchKernel(
                    loaded.function.cu_function(),
                    k.grid.0,
                    k.grid.1,
                    k.grid.2,
                    k.block.0,
                    k.block.1,
                    k.block.2,
                    k.shared_bytes,
                    self.stream.cu_stream(),
                    raw.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .result()
            .map_err(driver("launching the kernel"));
        }
        // SAFETY: `raw` points at live argument storage (`args`) matching
        // the kernel's signature (generated from the same parameter list);
        // the stream is this backend's own.
        unsafe { self.launch_ex(loaded, &mut raw, self.stream.cu_stream()) }
    }

    /// Enqueue `loaded` on `stream` with `cuLaunchKernelEx`: the kernel's
    /// grid, block, dynamic shared memory and, if it has one, its cluster
    /// dimension as a launch attribute.
    ///
    /// # Safety
    ///
    /// `args` must point at live argument storage matching the kernel's
    /// signature, valid until this returns; `stream` must be a stream of
    /// this backend's context (or null, the legacy default stream).
    pub(crate) unsafe fn launch_ex(
        &self,
        loaded: &Loaded,
        args: &mut [*mut c_void],
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let k = &loaded.kernel;
        let mut attrs: Vec<sys::CUlaunchAttribute> =
            k.cluster.map(cluster_dimension).into_iter().collect();
        let config = sys::CUlaunchConfig {
            gridDimX: k.grid.0,
            gridDimY: k.grid.1,
            gridDimZ: k.grid.2,
            blockDimX: k.block.0,
            blockDimY: k.block.1,
            blockDimZ: k.block.2,
            sharedMemBytes: k.shared_bytes,
            hStream: stream,
            attrs: if attrs.is_empty() {
                std::ptr::null_mut()
            } else {
                attrs.as_mut_ptr()
            },
            numAttrs: attrs.len() as u32,
        };
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        // SAFETY: the caller vouches for `args` and `stream`; `config` and
        // `attrs` live until the call returns.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                loaded.function.cu_function(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(driver("launching the kernel"))
    }

    /// Compile (cached), upload inputs, launch, synchronize and download
    /// every output into `outputs` (same names and lengths; overwritten).
    /// Returns the plan that ran ([`CudaBackend::resolve`]).
    pub fn execute(
        &self,
        plan: &Plan,
        options: &CodegenOptions,
        inputs: &Buffers,
        outputs: &mut Buffers,
    ) -> Result<(Plan, ColdPathDecision), CudaError> {
        let (plan, decision, loaded) = self.load(plan, options)?;
        let plan = &plan;
        // Outputs are uploaded as given (e.g. NaN-poisoned), so an element
        // the kernel fails to write stays visible.
        let mut args = self.upload(plan, &loaded.kernel, inputs, Some(outputs))?;
        self.launch(&loaded, &mut args)?;
        self.stream
            .synchronize()
            .map_err(driver("running the kernel"))?;
        for (name, slice) in &args.slices {
            if let Some(t) = outputs.get_mut(name) {
                if plan.problem.program.output(name).is_some() {
                    let bytes = self
                        .stream
                        .clone_dtoh(slice)
                        .map_err(driver("downloading an output"))?;
                    t.copy_from_bytes(&bytes);
                }
            }
        }
        Ok((plan.clone(), decision))
    }

    /// GPU time per launch, µs, one value per sample: inputs uploaded once
    /// ([`CudaBackend::prepare`]), warm-up launches, then per sample `batch`
    /// launches replayed as one CUDA graph (plain launches if capture
    /// fails) between two events ([`Prepared::gpu_batch`]).
    pub fn time(
        &self,
        plan: &Plan,
        options: &CodegenOptions,
        inputs: &Buffers,
        batch: usize,
        samples: usize,
    ) -> Result<Vec<f64>, CudaError> {
        let batch = batch.max(1);
        let mut prepared = self.prepare(plan, options, std::slice::from_ref(inputs))?;
        prepared.e2e_batch(3)?;
        let mut out = Vec::with_capacity(samples);
        for _ in 0..samples {
            let (gpu_us, _, _) = prepared.gpu_batch(batch)?;
            out.push(gpu_us / batch as f64);
        }
        Ok(out)
    }
}

/// The target a plan was made for, which its resolution must plan on.
fn target_of(plan: &Plan) -> Result<lanefold_plan::Target, CudaError> {
    lanefold_plan::Target::by_name(&plan.target)
        .ok_or_else(|| CudaError::Data(format!("unknown target '{}'", plan.target)))
}

/// NVRTC: a kernel's source to a cubin, with the compiler's log. Needs
/// `libnvrtc` only, no driver or device.
fn compile_kernel(kernel: &Kernel, opts: &[String]) -> Result<(Vec<u8>, String), CudaError> {
    let nv = |error: nvrtc::result::NvrtcError, log: String| CudaError::Compile {
        kernel: kernel.name.clone(),
        error: error.to_string(),
        log,
    };
    let src = CString::new(kernel.source.as_str())
        .map_err(|_| CudaError::Data("kernel source contains a NUL byte".into()))?;
    let file = CString::new(format!("{}.cu", kernel.name)).expect("kernel names are identifiers");
    let prog =
        nvrtc::result::create_program(&src, Some(&file)).map_err(|e| nv(e, String::new()))?;
    // SAFETY: `prog` is a live program until destroyed below.
    let result = unsafe {
        let compiled = nvrtc::result::compile_program(prog, opts);
        let log = nvrtc::result::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        match compiled {
            Err(e) => Err(nv(e, log)),
            Ok(()) => {
                let mut size = 0usize;
                match nvrtc::sys::nvrtcGetCUBINSize(prog, &mut size).result() {
                    Err(e) => Err(nv(e, log)),
                    Ok(()) => {
                        let mut bin = vec![0u8; size];
                        match nvrtc::sys::nvrtcGetCUBIN(
                            prog,
                            bin.as_mut_ptr() as *mut std::ffi::c_char,
                        )
                        .result()
                        {
                            Ok(()) => Ok((bin, log)),
                            Err(e) => Err(nv(e, log)),
                        }
                    }
                }
            }
        }
    };
    // SAFETY: destroyed once.
    let _ = unsafe { nvrtc::result::destroy_program(prog) };
    let (bin, log) = result?;
    if bin.is_empty() {
        return Err(CudaError::Compile {
            kernel: kernel.name.clone(),
            error: "empty cubin".into(),
            log: String::new(),
        });
    }
    Ok((bin, log))
}

/// [`compile_offline`] over many plans at once, on every core (NVRTC
/// allows concurrent calls on separate programs); results in plan order.
pub fn compile_offline_all(
    plans: &[Plan],
    options: &CodegenOptions,
    arch: &str,
) -> Vec<Result<OfflineCompile, CudaError>> {
    plans
        .par_iter()
        .map(|p| compile_offline(p, options, arch))
        .collect()
}

/// What ptxas reported for one kernel (`--ptxas-options=-v`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtxasReport {
    pub registers: Option<u32>,
    pub stack_bytes: Option<u32>,
    pub spill_store_bytes: Option<u32>,
    pub spill_load_bytes: Option<u32>,
}

impl PtxasReport {
    /// Read the numbers out of a verbose ptxas log. Stack and spill bytes
    /// are summed over every function it reports: the kernel's and those
    /// of the functions it calls (the norms' non-inlined cold path).
    pub fn parse(log: &str) -> PtxasReport {
        // "<n> <unit>" pairs: the number just before `unit`.
        fn before(text: &str, unit: &str) -> Option<u32> {
            let at = text.find(unit)?;
            text[..at].split_whitespace().last()?.parse().ok()
        }
        let mut r = PtxasReport::default();
        for line in log.lines() {
            if line.contains("Used ") && line.contains(" registers") {
                r.registers = before(line, " registers");
            }
            if line.contains("stack frame") {
                let add = |sum: Option<u32>, unit| match (sum, before(line, unit)) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                r.stack_bytes = add(r.stack_bytes, " bytes stack frame");
                r.spill_store_bytes = add(r.spill_store_bytes, " bytes spill stores");
                r.spill_load_bytes = add(r.spill_load_bytes, " bytes spill loads");
            }
        }
        r
    }
}

/// One kernel compiled without a device.
#[derive(Clone, Debug)]
pub struct OfflineCompile {
    pub kernel: String,
    /// The compiled binary (for `cuobjdump -sass` where no GPU is).
    pub cubin: Vec<u8>,
    pub log: String,
    pub ptxas: PtxasReport,
}

impl OfflineCompile {
    /// The report from ptxas' log; where the log holds no register count
    /// (NVRTC on the H200 machine was seen to return an empty one), the
    /// kernel's registers and frame as its cubin records them.
    fn new(kernel: String, cubin: Vec<u8>, log: String) -> OfflineCompile {
        let mut ptxas = PtxasReport::parse(&log);
        if ptxas.registers.is_none() {
            if let Some(r) = cubin::kernel_resources(&cubin, &kernel) {
                ptxas = PtxasReport {
                    registers: Some(r.registers),
                    stack_bytes: Some(r.frame_bytes),
                    ..ptxas
                };
            }
        }
        OfflineCompile {
            kernel,
            cubin,
            log,
            ptxas,
        }
    }
}

/// Generate and compile `plan` for `arch` (e.g. `sm_90`) through NVRTC
/// alone, with ptxas' verbose report: a check of the generated code and
/// a register count where no GPU is. Loads nothing onto a device.
pub fn compile_offline(
    plan: &Plan,
    options: &CodegenOptions,
    arch: &str,
) -> Result<OfflineCompile, CudaError> {
    probe_nvrtc()?;
    let kernel = generate(plan, options)?;
    let mut opts = nvrtc_options(options, arch);
    opts.push("--ptxas-options=-v".to_string());
    let (cubin, log) = compile_kernel(&kernel, &opts)?;
    Ok(OfflineCompile::new(kernel.name, cubin, log))
}

/// [`compile_offline`] of a kernel generated without a plan (the norms'
/// column-gradient kernels).
pub fn compile_kernel_offline(
    kernel: &Kernel,
    options: &CodegenOptions,
    arch: &str,
) -> Result<OfflineCompile, CudaError> {
    probe_nvrtc()?;
    let mut opts = nvrtc_options(options, arch);
    opts.push("--ptxas-options=-v".to_string());
    let (cubin, log) = compile_kernel(kernel, &opts)?;
    Ok(OfflineCompile::new(kernel.name.clone(), cubin, log))
}

/// What the compiler said about an occupancy promise for one plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OccupancyProbe {
    /// Registers per thread without a promise.
    pub registers: u32,
    /// The promise tried (groups per multiprocessor) with the registers
    /// and local bytes (spill stores + stack) it compiled to; None where
    /// the count was not a few registers over a step.
    pub tried: Option<(u32, u32, u32)>,
    /// The promise to keep: tried and nothing spilled.
    pub keep: Option<u32>,
}

/// Compile `plan` (offline) and, where the compiler lands a few registers
/// over an occupancy step ([`lanefold_plan::occupancy_step_to_try`]), the
/// same plan promising that step; keep the promise only if the promised
/// kernel uses no local memory. The occupancy then comes from the
/// compiler's count, not the mapper's estimate.
pub fn compiler_occupancy(
    plan: &Plan,
    options: &CodegenOptions,
    arch: &str,
    target: &lanefold_plan::Target,
) -> Result<OccupancyProbe, CudaError> {
    let registers_of = |c: &OfflineCompile| {
        c.ptxas.registers.ok_or_else(|| CudaError::Compile {
            kernel: c.kernel.clone(),
            error: "ptxas reported no register count".into(),
            log: c.log.clone(),
        })
    };
    let plain = Plan {
        min_groups_per_multiprocessor: None,
        ..plan.clone()
    };
    let registers = registers_of(&compile_offline(&plain, options, arch)?)?;
    // Never a step the plan's occupancy cap forbids.
    let step = lanefold_plan::occupancy_step_to_try(
        target,
        plan.threads_per_group,
        registers,
        plan.shared_bytes,
    )
    .filter(|&groups| plan.occupancy_cap.is_none_or(|cap| groups <= cap.groups));
    let Some(groups) = step else {
        return Ok(OccupancyProbe {
            registers,
            tried: None,
            keep: None,
        });
    };
    let promised = Plan {
        min_groups_per_multiprocessor: Some(groups),
        ..plain
    };
    let c = compile_offline(&promised, options, arch)?;
    let local = c.ptxas.spill_store_bytes.unwrap_or(0) + c.ptxas.stack_bytes.unwrap_or(0);
    Ok(OccupancyProbe {
        registers,
        tried: Some((groups, registers_of(&c)?, local)),
        keep: (local == 0).then_some(groups),
    })
}

/// The compiler part of a cache key: NVRTC's `major.minor`, asked once.
pub(crate) fn nvrtc_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| nvrtc_version().unwrap_or_else(|| "no-nvrtc".into()))
}

/// `major.minor` of the loaded NVRTC, or None where it is missing.
pub fn nvrtc_version() -> Option<String> {
    probe_nvrtc().ok()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (probed); writes two ints.
    unsafe { nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .ok()?;
    Some(format!("{major}.{minor}"))
}

#[cfg(test)]
mod tests {

    #[test]
    fn ptxas_reports_are_read_from_a_verbose_log() {
        let log = "ptxas info    : 11 bytes gmem\n\
ptxas info    : Compiling entry function 'lf_softmax_bf16_w2048_v8_u4_g1_c8_ob4' for 'sm_90'\n\
ptxas info    : Function properties for lf_softmax_bf16_w2048_v8_u4_g1_c8_ob4\n\
    160 bytes stack frame, 184 bytes spill stores, 180 bytes spill loads\n\
ptxas info    : Used 64 registers, used 1 barriers, 160 bytes cumulative stack size\n";
        let r = PtxasReport::parse(log);
        assert_eq!(r.registers, Some(64));
        assert_eq!(r.stack_bytes, Some(160));
        assert_eq!(r.spill_store_bytes, Some(184));
        assert_eq!(r.spill_load_bytes, Some(180));
        assert_eq!(PtxasReport::parse("no report"), PtxasReport::default());
        // A kernel calling non-inlined functions: the callees' lines come
        // after the kernel's, and their local memory counts too.
        let log = "ptxas info    : Function properties for lf_k\n\
ptxas         .     0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n\
ptxas info    : Used 32 registers, used 1 barriers\n\
ptxas info    : Function properties for _Z11lf_cold_outPKt\n\
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Function properties for _Z13lf_cold_statsPKt\n\
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
        let r = PtxasReport::parse(log);
        assert_eq!(r.registers, Some(32));
        assert_eq!(r.stack_bytes, Some(16));
        assert_eq!(r.spill_store_bytes, Some(8));
        assert_eq!(r.spill_load_bytes, Some(8));
    }

    use super::*;

    /// This machine has no GPU: open must fail with a clear error.
    #[test]
    fn open_without_a_driver_is_an_error_not_a_panic() {
        if probe_driver().is_ok() {
            eprintln!("a CUDA driver is present; skipping the no-driver check");
            return;
        }
        let err = match CudaBackend::open(0) {
            Err(e) => e,
            Ok(_) => panic!("open succeeded without a driver"),
        };
        let msg = err.to_string();
        assert!(matches!(err, CudaError::NoDriver(_)), "{msg}");
        assert!(msg.contains("no CUDA driver"), "{msg}");
        assert!(msg.contains("libcuda.so"), "{msg}");
    }

    #[test]
    fn kernel_source_hash_is_stable() {
        use lanefold_ir::{DType, Operator, OperatorOptions};
        use lanefold_plan::{plan, LayoutRequest, Problem, Target};
        let p = Problem::operator(
            Operator::Sum,
            OperatorOptions::default(),
            DType::F32,
            "4x100".parse().unwrap(),
        );
        let pl = plan(&p, &Target::h200(), &LayoutRequest::default()).unwrap();
        let a = kernel_source_sha256(&pl, &CodegenOptions::default()).unwrap();
        let b = kernel_source_sha256(&pl, &CodegenOptions::default()).unwrap();
        let c = kernel_source_sha256(&pl, &CodegenOptions { fma: false }).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        // FMA is an NVRTC option: the source differs only in its comment.
        assert_ne!(a, c);
    }

    /// Needs NVRTC: CI runs it after `scripts/fetch-nvrtc.sh` (`--ignored`).
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_occupancy_promise_is_kept_for_long_bf16_rmsnorm_and_refused_where_it_spills() {
        use lanefold_ir::{DType, Operator, OperatorOptions};
        use lanefold_plan::{plan, LayoutRequest, MapperPolicy, Problem, Target};
        let target = Target::h200();
        let probe = |op, dtype, shape: &str, workers, pack, group_threads| {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                dtype,
                shape.parse().unwrap(),
            );
            let request = LayoutRequest {
                workers,
                pack,
                cluster_group_threads: group_threads,
                mapper: MapperPolicy::Model,
                // The kernels measured: without the norms' cold path.
                no_cold_path: true,
                ..Default::default()
            };
            let p = plan(&problem, &target, &request).unwrap();
            super::compiler_occupancy(&p, &Default::default(), "sm_90", &target).unwrap()
        };
        // The layout measured on the H200: W=2048 V=8 in 8
        // groups of 256, 71 registers, 64 under the promise, no spill.
        let rmsnorm = probe(Operator::Rmsnorm, DType::Bf16, "4x131072", 2048, 8, 256);
        assert_eq!(rmsnorm.keep, Some(4), "{rmsnorm:?}");
        assert!(rmsnorm.registers > 64, "{rmsnorm:?}");
        // softmax there (80 registers) is too far over to try: it spilled.
        let softmax = probe(Operator::Softmax, DType::Bf16, "4x131072", 2048, 8, 256);
        assert_eq!((softmax.tried, softmax.keep), (None, None), "{softmax:?}");
        // layernorm f32 W=256 V=4 (44 registers) is tried for 6 groups and
        // needs local memory there: not kept.
        let layernorm = probe(Operator::Layernorm, DType::F32, "4x4096", 256, 4, 0);
        let (groups, _, local) = layernorm.tried.expect("a few registers over 6 groups' 40");
        assert_eq!((groups, layernorm.keep), (6, None), "{layernorm:?}");
        assert!(local > 0, "{layernorm:?}");
    }

    /// Needs NVRTC. The self-signalling form of every operator's default
    /// kernel compiles (clusters, persistent and streamed plans among
    /// them) to a binary other than the kernel's, within 8 registers and
    /// 16 bytes of spills of it.
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_compiles_the_self_signalling_form_of_every_default_kernel() {
        use lanefold_ir::{DType, Operator, OperatorOptions};
        use lanefold_plan::{plan, LayoutRequest, Problem, Target};
        let options = CodegenOptions::default();
        let mut kernels = vec![];
        for op in Operator::SIX {
            for dtype in [DType::F32, DType::Bf16] {
                for shape in ["1x127", "1024x4096", "4x32768", "4x131072"] {
                    let problem = Problem::operator(
                        op,
                        OperatorOptions::default(),
                        dtype,
                        shape.parse().unwrap(),
                    );
                    let p = plan(&problem, &Target::h200(), &LayoutRequest::default()).unwrap();
                    kernels.push(generate(&p, &options).unwrap());
                }
            }
        }
        let mut opts = nvrtc_options(&options, "sm_90");
        opts.push("--ptxas-options=-v".to_string());
        let forms: Vec<_> = kernels
            .iter()
            .flat_map(|k| lanefold_codegen::Signal::ALL.map(|signal| (k, signal)))
            .collect();
        let results: Vec<_> = forms
            .par_iter()
            .map(|&(k, signal)| {
                let signalled = lanefold_codegen::self_signalling(k, signal).unwrap();
                let (plain, plain_log) = compile_kernel(k, &opts).unwrap();
                let (cubin, log) = compile_kernel(&signalled, &opts)
                    .unwrap_or_else(|e| panic!("{} {signal:?}: {e}", k.name));
                (
                    format!("{} {signal:?}", k.name),
                    OfflineCompile::new(k.name.clone(), plain, plain_log),
                    OfflineCompile::new(signalled.name.clone(), cubin, log),
                )
            })
            .collect();
        // Through OfflineCompile: the device's NVRTC at times returns an
        // empty log, and the registers then come from the cubin.
        for (name, plain, signalled) in results {
            assert_ne!(
                plain.cubin, signalled.cubin,
                "{name}: the epilogue is in the binary"
            );
            let (a, b) = (plain.ptxas, signalled.ptxas);
            assert!(b.registers.is_some(), "{name}: {}", signalled.log);
            assert!(a.registers.is_some(), "{name}: {}", plain.log);
            assert!(
                b.registers <= a.registers.map(|r| r + 8),
                "{name}: {:?} registers against {:?}",
                b.registers,
                a.registers
            );
            // A few bytes where the kernel already sits at its register
            // bound (rmsnorm f32 4x131072's prefetching clusters: 8).
            let spill = |r: PtxasReport| r.spill_store_bytes.unwrap_or(0);
            assert!(spill(b) <= spill(a) + 16, "{name}: {a:?} -> {b:?}");
        }
    }

    /// Needs NVRTC. Compiling on every core at once must give each plan
    /// the binary a lone compile gives it, in plan order.
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_parallel_compiles_equal_serial_ones_in_plan_order() {
        use lanefold_ir::{DType, Operator, OperatorOptions};
        use lanefold_plan::{plan, LayoutRequest, Problem, Target};
        let mut plans = vec![];
        for op in Operator::SIX {
            for (shape, workers) in [("5x127", 32), ("3x4103", 256), ("2x131072", 0)] {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    DType::Bf16,
                    shape.parse().unwrap(),
                );
                let request = LayoutRequest {
                    workers,
                    ..Default::default()
                };
                plans.push(plan(&problem, &Target::h200(), &request).unwrap());
            }
        }
        let options = CodegenOptions::default();
        let parallel = super::compile_offline_all(&plans, &options, "sm_90");
        assert_eq!(parallel.len(), plans.len());
        for (p, got) in plans.iter().zip(parallel) {
            let got = got.unwrap();
            let alone = super::compile_offline(p, &options, "sm_90").unwrap();
            assert_eq!(got.kernel, alone.kernel);
            assert_eq!(got.cubin, alone.cubin, "{}", got.kernel);
        }
    }

    /// The compile list of a precompile: one job per compile key, known
    /// keys skipped, FMA on and off kept apart (different options).
    #[test]
    fn precompile_lists_each_compile_key_once_and_skips_known_ones() {
        use lanefold_ir::{DType, Operator, OperatorOptions};
        use lanefold_plan::{plan, LayoutRequest, Problem, Target};
        let planned = |shape: &str, workers| {
            let problem = Problem::operator(
                Operator::Rmsnorm,
                OperatorOptions::default(),
                DType::F32,
                shape.parse().unwrap(),
            );
            let request = LayoutRequest {
                workers,
                pack: 4,
                ..Default::default()
            };
            plan(&problem, &Target::h200(), &request).unwrap()
        };
        let fma = CodegenOptions::default();
        let no_fma = CodegenOptions { fma: false };
        let a = planned("5x4096", 256);
        let b = planned("5x4096", 128);
        let jobs = vec![
            (a.clone(), fma),
            (b.clone(), fma),
            (a.clone(), fma),
            (a.clone(), no_fma),
        ];
        let (todo, report) = super::kernels_to_compile(&jobs, "sm_90", |_| false);
        assert_eq!(todo.len(), 3);
        assert_eq!((report.skipped, report.failed), (1, 0));
        let keys: HashSet<_> = todo.iter().map(|j| j.key.clone()).collect();
        assert_eq!(keys.len(), 3);
        // Each key is the one `load` computes for that kernel.
        for job in &todo {
            assert_eq!(
                job.key,
                compile_key(&job.kernel.source, &job.options, "sm_90", nvrtc_id())
            );
        }
        // Known keys (loaded, staged or on disk) are not compiled again.
        let known = todo[0].key.clone();
        let (again, report) = super::kernels_to_compile(&jobs, "sm_90", |k| k == known);
        assert_eq!(again.len(), 2);
        assert_eq!(report.skipped, 2);
        assert!(again.iter().all(|j| j.key != known));
    }
}
