//! `lanefold._lanefold`: the native half of the PyTorch package.
//!
//! Python validates tensors (dtype, shape, device, contiguity) and
//! allocates every output with torch; this module gets the operator, the
//! dtype, the rows x n shape, eps and each buffer's address
//! (`tensor.data_ptr()`), plans with the automatic mapper, and
//!
//! - on the CPU runs the exact-order executor, reading the inputs from and
//!   writing the outputs to torch's memory;
//! - on CUDA launches the plan's kernel on torch's memory and torch's
//!   current stream (the device's primary context, which torch and cudarc
//!   share): no copy, no allocation, no synchronization. Kernels are
//!   compiled once per (device, operator, columns, dtype, shape, eps) in
//!   this process, through lanefold-cuda's memory and on-disk caches.
//!
//! Every failure is a Python exception (ValueError for bad arguments,
//! RuntimeError for planning, compilation, driver errors), never a panic.

use lanefold_codegen::{
    column_grad_kernels, scale_unless_one_kernel, CodegenOptions, ColumnGradKind,
};
use lanefold_cpu::data::expected_len;
use lanefold_cpu::{Buffers, Tensor};
use lanefold_cuda::{CudaBackend, RawKernel};
use lanefold_ir::{BufferKind, DType, Operator, OperatorOptions, Program, LAYERNORM_EPS};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, Shape, Target};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

fn runtime_error(msg: impl Into<String>) -> PyErr {
    PyRuntimeError::new_err(msg.into())
}

/// What a plan is made for: one entry of the plan and kernel caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    op: Operator,
    weight: bool,
    bias: bool,
    dtype: DType,
    rows: usize,
    n: usize,
    eps_bits: u32,
    /// The row output written over the first row input.
    in_place: bool,
}

impl Key {
    fn new(
        op: &str,
        dtype: &str,
        rows: usize,
        n: usize,
        eps: f64,
        names: &[&str],
    ) -> PyResult<Key> {
        let op: Operator = op.parse().map_err(|e| value_error(format!("{e}")))?;
        if op == Operator::Add {
            return Err(value_error("'add' is not one of the package's operators"));
        }
        let dtype: DType = dtype.parse().map_err(|e| value_error(format!("{e}")))?;
        Shape::new(rows, n).map_err(|e| value_error(format!("{e}")))?;
        let eps32 = eps as f32;
        if !(eps32.is_finite() && eps32 > 0.0) {
            return Err(value_error(format!(
                "eps must be a positive finite number, got {eps}"
            )));
        }
        let options = OperatorOptions {
            weight: names.contains(&"weight"),
            bias: names.contains(&"bias"),
        }
        .applied_to(op);
        Ok(Key {
            op,
            weight: options.weight,
            bias: options.bias,
            dtype,
            rows,
            n,
            eps_bits: eps32.to_bits(),
            in_place: false,
        })
    }

    fn problem(&self) -> Problem {
        Problem::operator(
            self.op,
            OperatorOptions {
                weight: self.weight,
                bias: self.bias,
            },
            self.dtype,
            Shape {
                rows: self.rows,
                n: self.n,
            },
        )
    }

    /// The plan on `target`, with this key's eps: the layout of `tuned` (a
    /// tuning cache's winner) where it plans, else the automatic one.
    fn plan(&self, target: &Target, tuned: Option<LayoutRequest>) -> PyResult<Plan> {
        let mut problem = self.problem();
        set_eps(&mut problem.program, self.op, f32::from_bits(self.eps_bits))?;
        // A winner searched with other columns (or none) may not plan here.
        if let Some(Ok(p)) = tuned.map(|t| {
            let request = LayoutRequest {
                in_place: self.in_place,
                ..t
            };
            plan(&problem, target, &request)
        }) {
            return Ok(p);
        }
        let request = LayoutRequest {
            in_place: self.in_place,
            ..LayoutRequest::default()
        };
        plan(&problem, target, &request).map_err(|e| {
            runtime_error(format!(
                "lanefold could not plan {} {} {}x{}: {e}",
                self.op, self.dtype, self.rows, self.n
            ))
        })
    }
}

/// The winner `lanefold tune` or `run --autotune` recorded for `key` on
/// the device `device_key` names, from the user's tuning cache.
fn tuned(device_key: &str, key: &Key) -> Option<LayoutRequest> {
    let shape = Shape::new(key.rows, key.n).ok()?;
    lanefold_measure::tuning::cached_request(device_key, key.op, key.dtype, shape, false)
}

/// The operator programs carry the PyTorch default eps; the caller's
/// replaces it before planning, so that every form the plan takes (its
/// cold path in or out, planned again by the CUDA runtime) keeps it.
fn set_eps(program: &mut Program, op: Operator, eps: f32) -> PyResult<()> {
    if op.default_eps().is_some() && !program.set_norm_eps(eps) {
        return Err(runtime_error(format!(
            "internal: the {op} program has no single eps constant"
        )));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another call failed midway; the maps
    // stay consistent (entries are inserted whole).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn cpu_plans() -> &'static Mutex<HashMap<Key, Arc<Plan>>> {
    static PLANS: OnceLock<Mutex<HashMap<Key, Arc<Plan>>>> = OnceLock::new();
    PLANS.get_or_init(Default::default)
}

/// The element size and dtype name of a program buffer.
fn element(kind: BufferKind, dtype: DType) -> (usize, &'static str) {
    if kind == BufferKind::RowIndex {
        (8, "i64")
    } else {
        let dtype = kind.float_dtype(dtype);
        (dtype.size_bytes(), dtype.name())
    }
}

fn find(buffers: &[(String, usize)], name: &str) -> PyResult<usize> {
    let mut hits = buffers.iter().filter(|(n, _)| n == name);
    match (hits.next(), hits.next()) {
        (Some((_, p)), None) => Ok(*p),
        (None, _) => Err(value_error(format!("missing buffer '{name}'"))),
        (Some(_), Some(_)) => Err(value_error(format!("buffer '{name}' given twice"))),
    }
}

/// Copy `len` elements at host address `ptr` into a tensor.
///
/// # Safety
/// `ptr` must point at `len` readable elements of the kind given.
unsafe fn read_host(ptr: usize, len: usize, kind: BufferKind, dtype: DType) -> Tensor {
    use std::slice::from_raw_parts;
    unsafe {
        if kind == BufferKind::RowIndex {
            return Tensor::I64(from_raw_parts(ptr as *const i64, len).to_vec());
        }
        match kind.float_dtype(dtype) {
            DType::F32 => Tensor::F32(from_raw_parts(ptr as *const f32, len).to_vec()),
            DType::Bf16 => Tensor::Bf16(from_raw_parts(ptr as *const half::bf16, len).to_vec()),
            DType::F16 => Tensor::F16(from_raw_parts(ptr as *const half::f16, len).to_vec()),
        }
    }
}

/// Copy a tensor to host address `ptr`.
///
/// # Safety
/// `ptr` must point at `t.len()` writable elements of `t`'s type.
unsafe fn write_host(ptr: usize, t: &Tensor) {
    use std::ptr::copy_nonoverlapping;
    unsafe {
        match t {
            Tensor::F32(v) => copy_nonoverlapping(v.as_ptr(), ptr as *mut f32, v.len()),
            Tensor::Bf16(v) => copy_nonoverlapping(v.as_ptr(), ptr as *mut half::bf16, v.len()),
            Tensor::F16(v) => copy_nonoverlapping(v.as_ptr(), ptr as *mut half::f16, v.len()),
            Tensor::I64(v) => copy_nonoverlapping(v.as_ptr(), ptr as *mut i64, v.len()),
        }
    }
}

fn check_address(name: &str, ptr: usize, size: usize) -> PyResult<()> {
    if ptr == 0 || !ptr.is_multiple_of(size) {
        return Err(value_error(format!(
            "buffer '{name}': address {ptr:#x} is null or not aligned to its {size}-byte elements"
        )));
    }
    Ok(())
}

/// Run `op` on host memory with the CPU executor.
///
/// `inputs` and `outputs` are (buffer name, `tensor.data_ptr()`) pairs of
/// contiguous CPU tensors of the program's lengths: rows x n for rows, n
/// for weight and bias, rows for target (int64) and for per-row outputs.
/// The caller (the Python package) guarantees the lengths and dtypes.
/// `in_place`: the plan writes its row output over its first row input,
/// whose address the caller gives for both.
#[pyfunction]
#[pyo3(signature = (op, dtype, rows, n, eps, inputs, outputs, in_place=false))]
#[allow(clippy::too_many_arguments)]
fn cpu_run(
    py: Python<'_>,
    op: &str,
    dtype: &str,
    rows: usize,
    n: usize,
    eps: f64,
    inputs: Vec<(String, usize)>,
    outputs: Vec<(String, usize)>,
    in_place: bool,
) -> PyResult<()> {
    let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
    let key = Key {
        in_place,
        ..Key::new(op, dtype, rows, n, eps, &names)?
    };
    let cached = lock(cpu_plans()).get(&key).cloned();
    let plan = match cached {
        Some(p) => p,
        None => {
            let p = Arc::new(key.plan(&Target::cpu(), None)?);
            lock(cpu_plans()).insert(key, p.clone());
            p
        }
    };
    let program = &plan.problem.program;
    for (name, _) in &inputs {
        if program.input(name).is_none() {
            return Err(value_error(format!("{op} takes no input '{name}'")));
        }
    }
    for (name, _) in &outputs {
        if program.output(name).is_none() {
            return Err(value_error(format!("{op} has no output '{name}'")));
        }
    }
    let mut host_inputs = Buffers::new();
    for decl in &program.inputs {
        let ptr = find(&inputs, &decl.name)?;
        let (size, _) = element(decl.kind, key.dtype);
        check_address(&decl.name, ptr, size)?;
        let len = expected_len(decl.kind, rows, n);
        // SAFETY: the caller passed a live contiguous tensor of this
        // buffer's length and dtype (checked by the Python package).
        let t = unsafe { read_host(ptr, len, decl.kind, key.dtype) };
        host_inputs.insert(decl.name.clone(), t);
    }
    let mut targets = vec![];
    for decl in &program.outputs {
        let ptr = find(&outputs, &decl.name)?;
        let (size, _) = element(decl.kind, key.dtype);
        check_address(&decl.name, ptr, size)?;
        targets.push((decl.name.clone(), ptr));
    }
    let mut host_outputs = Buffers::new();
    let plan_ref = &plan;
    let result = match plan.in_place_pair() {
        None => py.detach(|| lanefold_cpu::execute(plan_ref, &host_inputs, &mut host_outputs)),
        Some((input, output)) => {
            if find(&inputs, input)? != find(&outputs, output)? {
                return Err(value_error(format!(
                    "in place: '{output}' must be given the address of '{input}'"
                )));
            }
            // The executor writes the output into the input's copy; it
            // goes back to the one address as the output.
            let result = py.detach(|| {
                lanefold_cpu::execute_in_place(plan_ref, &mut host_inputs, &mut host_outputs)
            });
            if let Some(t) = host_inputs.remove(input) {
                host_outputs.insert(output.to_string(), t);
            }
            result
        }
    };
    result.map_err(|e| value_error(format!("{e}")))?;
    for (name, ptr) in targets {
        let t = host_outputs
            .get(&name)
            .ok_or_else(|| runtime_error(format!("internal: output '{name}' not written")))?;
        // SAFETY: as for the inputs; the executor wrote the program's
        // length of this output.
        unsafe { write_host(ptr, t) };
    }
    Ok(())
}

/// dweight (and dbias) of a norm on host memory: lanefold's fixed-order
/// column sums (`lanefold_cpu::columns`), bit-identical however torch
/// batches the rows. `op` is `rmsnorm_backward`, `layernorm_backward` or
/// `residual_layernorm_backward`; `x` is the normalized row (h for the
/// residual form), `dy` the output's gradient, both rows x n; `dbias` is 0
/// for rmsnorm. The caller guarantees lengths and dtypes, as for
/// [`cpu_run`].
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_column_grads(
    py: Python<'_>,
    op: &str,
    dtype: &str,
    rows: usize,
    n: usize,
    eps: f64,
    x: usize,
    dy: usize,
    dweight: usize,
    dbias: usize,
) -> PyResult<()> {
    use lanefold_cpu::columns::{column_grads, ColumnGrads};
    let key = Key::new(op, dtype, rows, n, eps, &["weight"])?;
    let (kind, x_name) = ColumnGrads::of(key.op)
        .ok_or_else(|| value_error(format!("{op} has no column gradients")))?;
    let (size, _) = element(BufferKind::Row, key.dtype);
    let mut inputs = Buffers::new();
    for (name, ptr) in [(x_name, x), ("dy", dy)] {
        check_address(name, ptr, size)?;
        // SAFETY: the caller passed live contiguous tensors of rows x n
        // elements of this dtype.
        let t = unsafe { read_host(ptr, rows * n, BufferKind::Row, key.dtype) };
        inputs.insert(name.to_string(), t);
    }
    let mut targets = vec![("dweight", dweight)];
    if kind == ColumnGrads::Layernorm {
        targets.push(("dbias", dbias));
    }
    for (name, ptr) in &targets {
        check_address(name, *ptr, size)?;
    }
    let eps = f32::from_bits(key.eps_bits);
    let out = py
        .detach(|| column_grads(key.op, &inputs, rows, n, eps, key.dtype))
        .map_err(|e| value_error(format!("{e}")))?;
    for (name, ptr) in targets {
        let t = out
            .get(name)
            .ok_or_else(|| runtime_error(format!("internal: '{name}' not computed")))?;
        // SAFETY: n writable elements of this dtype (the caller's tensor).
        unsafe { write_host(ptr, t) };
    }
    Ok(())
}

/// One open backend per device ordinal, opened on first use.
fn backends() -> &'static Mutex<HashMap<usize, Arc<CudaBackend>>> {
    static BACKENDS: OnceLock<Mutex<HashMap<usize, Arc<CudaBackend>>>> = OnceLock::new();
    BACKENDS.get_or_init(Default::default)
}

fn kernels() -> &'static Mutex<HashMap<(usize, Key), RawKernel>> {
    static KERNELS: OnceLock<Mutex<HashMap<(usize, Key), RawKernel>>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

fn backend(device: usize) -> PyResult<Arc<CudaBackend>> {
    let mut map = lock(backends());
    if let Some(b) = map.get(&device) {
        return Ok(b.clone());
    }
    let b = Arc::new(CudaBackend::open(device).map_err(|e| {
        runtime_error(format!("lanefold could not open CUDA device {device}: {e}"))
    })?);
    map.insert(device, b.clone());
    Ok(b)
}

/// The kernel for `key` on `device`: planned, compiled and loaded on the
/// first call, then taken from the in-process cache.
fn kernel(device: usize, key: Key) -> PyResult<RawKernel> {
    if let Some(k) = lock(kernels()).get(&(device, key)) {
        return Ok(k.clone());
    }
    let backend = backend(device)?;
    let device_key = lanefold_measure::tuning::device_key(Some(&backend));
    let plan = key.plan(&Target::h200(), tuned(&device_key, &key))?;
    let k = backend
        .load_raw(&plan, &CodegenOptions::default())
        .map_err(|e| runtime_error(format!("lanefold: {e}")))?;
    lock(kernels()).insert((device, key), k.clone());
    Ok(k)
}

/// The calling thread's current CUDA context, put back on drop: opening a
/// backend, loading a kernel and launching make the device's primary
/// context current, and torch's notion of the current device is the
/// current context, which a call on another device than torch's current
/// one must leave as it found it.
struct RestoreContext(Option<cudarc::driver::sys::CUcontext>);

impl RestoreContext {
    fn save() -> RestoreContext {
        static DRIVER: OnceLock<bool> = OnceLock::new();
        // cudarc loads the driver on first use and panics without one.
        if !*DRIVER.get_or_init(|| lanefold_cuda::probe_driver().is_ok()) {
            return RestoreContext(None);
        }
        let mut ctx: cudarc::driver::sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the driver is loaded; writes one handle.
        let ok = unsafe { cudarc::driver::sys::cuCtxGetCurrent(&mut ctx) }
            .result()
            .is_ok();
        RestoreContext((ok && !ctx.is_null()).then_some(ctx))
    }
}

impl Drop for RestoreContext {
    fn drop(&mut self) {
        if let Some(ctx) = self.0 {
            // SAFETY: a context that was current on this thread, still
            // alive (torch holds its primary contexts for the process).
            let _ = unsafe { cudarc::driver::sys::cuCtxSetCurrent(ctx) };
        }
    }
}

/// A kernel made ready for launches: its device, and the buffer names in
/// the order [`cuda_launch`] takes their addresses.
struct Prepared {
    device: usize,
    kernel: RawKernel,
    names: Vec<String>,
}

/// Every prepared kernel of this process; a handle is an index. Handles
/// stay valid for the process (the Python side caches them), so
/// [`clear_caches`] leaves this list alone.
fn prepared() -> &'static Mutex<Vec<Arc<Prepared>>> {
    static PREPARED: OnceLock<Mutex<Vec<Arc<Prepared>>>> = OnceLock::new();
    PREPARED.get_or_init(Default::default)
}

/// Plan, compile and load (or find in the caches) the kernel of `op` over
/// rows x n on CUDA device `device`, for the buffers `names` (every input
/// and output, in the order later launches give their addresses). Returns
/// a handle for [`cuda_launch`]. The slow half of a call, paid once per
/// (op, dtype, shape, eps, buffers, device) by the Python side's cache.
/// `in_place`: the kernel that writes the row output over the first row
/// input (launched with one address for both).
#[pyfunction]
#[pyo3(signature = (op, dtype, rows, n, eps, device, names, in_place=false))]
#[allow(clippy::too_many_arguments)]
fn cuda_prepare(
    py: Python<'_>,
    op: &str,
    dtype: &str,
    rows: usize,
    n: usize,
    eps: f64,
    device: usize,
    names: Vec<String>,
    in_place: bool,
) -> PyResult<usize> {
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let key = Key {
        in_place,
        ..Key::new(op, dtype, rows, n, eps, &refs)?
    };
    let _restore = RestoreContext::save();
    // Planning and NVRTC may take a while on a cache miss: without the GIL.
    let kernel = py.detach(|| kernel(device, key))?;
    if kernel.shape() != (rows, n) {
        return Err(runtime_error("internal: cached kernel of another shape"));
    }
    let mut list = lock(prepared());
    list.push(Arc::new(Prepared {
        device,
        kernel,
        names,
    }));
    Ok(list.len() - 1)
}

/// Enqueue one launch of a prepared kernel on `stream` (a `CUstream`,
/// `torch.cuda.current_stream().cuda_stream`), on torch's memory:
/// `addresses` are the `tensor.data_ptr()`s of the buffers named at
/// [`cuda_prepare`], in that order, of contiguous 16-byte aligned tensors
/// on the prepared device with the program's lengths. Returns once
/// enqueued: no copy, no allocation, no synchronization.
#[pyfunction]
fn cuda_launch(handle: usize, stream: usize, addresses: Vec<u64>) -> PyResult<()> {
    let p = lock(prepared())
        .get(handle)
        .cloned()
        .ok_or_else(|| value_error(format!("no prepared kernel {handle}")))?;
    if addresses.len() != p.names.len() {
        return Err(value_error(format!(
            "{} addresses for {} buffers",
            addresses.len(),
            p.names.len()
        )));
    }
    let named: Vec<(&str, u64)> = p.names.iter().map(String::as_str).zip(addresses).collect();
    let backend = backend(p.device)?;
    let _restore = RestoreContext::save();
    // SAFETY: the Python package passes live, contiguous, 16-byte aligned
    // torch tensors on the prepared device of the program's lengths and
    // dtypes, and the current torch stream of that device; the launch is
    // enqueued on that stream, so torch's caching allocator orders reuse
    // after it.
    unsafe { backend.launch_raw(&p.kernel, &named, stream as cudarc::driver::sys::CUstream) }
        .map_err(|e| runtime_error(format!("lanefold: {e}")))
}

/// The two column-gradient kernels per (device, key), loaded.
type ColumnKernels = HashMap<(usize, Key), [RawKernel; 2]>;

fn column_kernels() -> &'static Mutex<ColumnKernels> {
    static KERNELS: OnceLock<Mutex<ColumnKernels>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

/// The column-gradient kind of a backward norm operator.
fn column_kind(op: Operator) -> PyResult<ColumnGradKind> {
    match op {
        Operator::RmsnormBackward => Ok(ColumnGradKind::Rmsnorm),
        Operator::LayernormBackward | Operator::ResidualLayernormBackward => {
            Ok(ColumnGradKind::Layernorm)
        }
        _ => Err(value_error(format!("{op} has no column gradients"))),
    }
}

/// [`cpu_column_grads`] on CUDA: lanefold's two column-gradient kernels
/// (the CPU's order, bit for bit) enqueued on `stream` over torch's memory.
/// `partials` is a float32 workspace of `column_partials_len` floats
/// (`COLUMN_GROUP_ROWS`-row groups, dweight's then dbias's); `dbias` is 0
/// for rmsnorm. Returns once enqueued.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cuda_column_grads(
    py: Python<'_>,
    op: &str,
    dtype: &str,
    rows: usize,
    n: usize,
    eps: f64,
    device: usize,
    stream: usize,
    x: u64,
    dy: u64,
    partials: u64,
    dweight: u64,
    dbias: u64,
) -> PyResult<()> {
    let key = Key::new(op, dtype, rows, n, eps, &["weight"])?;
    let kind = column_kind(key.op)?;
    let _restore = RestoreContext::save();
    let cached = lock(column_kernels()).get(&(device, key)).cloned();
    let [first, second] = match cached {
        Some(k) => k,
        None => {
            let backend = backend(device)?;
            let loaded = py.detach(|| -> PyResult<[RawKernel; 2]> {
                let eps = f32::from_bits(key.eps_bits);
                let [a, b] = column_grad_kernels(kind, key.dtype, rows, n, eps)
                    .map_err(|e| runtime_error(format!("lanefold: {e}")))?;
                let load = |k| {
                    backend
                        .load_raw_kernel(k, rows, n)
                        .map_err(|e| runtime_error(format!("lanefold: {e}")))
                };
                Ok([load(a)?, load(b)?])
            })?;
            lock(column_kernels()).insert((device, key), loaded.clone());
            loaded
        }
    };
    let backend = backend(device)?;
    let stream = stream as cudarc::driver::sys::CUstream;
    let mut outputs = vec![("partials", partials), ("dweight", dweight)];
    if kind == ColumnGradKind::Layernorm {
        outputs.push(("dbias", dbias));
    }
    // SAFETY: the Python package passes live, contiguous, 16-byte aligned
    // torch tensors on `device` (x and dy of rows x n, partials of
    // `column_partials_len` floats, dweight and dbias of n) and that
    // device's current torch stream; both launches are enqueued on it, in
    // order, so the second reads what the first wrote.
    unsafe {
        backend.launch_raw(
            &first,
            &[("x", x), ("dy", dy), ("partials", partials)],
            stream,
        )
    }
    .map_err(|e| runtime_error(format!("lanefold: {e}")))?;
    unsafe { backend.launch_raw(&second, &outputs, stream) }
        .map_err(|e| runtime_error(format!("lanefold: {e}")))
}

/// The in-place scale kernel per (device, dtype, rows, n), loaded.
type ScaleKernels = HashMap<(usize, DType, usize, usize), RawKernel>;

fn scale_kernels() -> &'static Mutex<ScaleKernels> {
    static KERNELS: OnceLock<Mutex<ScaleKernels>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

/// `x *= scale` in place on CUDA over rows x n elements of `dtype`, left
/// untouched by the kernel itself where the one-element `scale` (same
/// dtype) is exactly 1: the host never reads it. Enqueued on `stream`;
/// returns once enqueued.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cuda_scale_unless_one(
    py: Python<'_>,
    dtype: &str,
    rows: usize,
    n: usize,
    device: usize,
    stream: usize,
    x: u64,
    scale: u64,
) -> PyResult<()> {
    let dtype: DType = dtype.parse().map_err(|e| value_error(format!("{e}")))?;
    let key = (device, dtype, rows, n);
    let _restore = RestoreContext::save();
    let cached = lock(scale_kernels()).get(&key).cloned();
    let kernel = match cached {
        Some(k) => k,
        None => {
            let backend = backend(device)?;
            let loaded = py.detach(|| -> PyResult<RawKernel> {
                let k = scale_unless_one_kernel(dtype, rows, n)
                    .map_err(|e| value_error(format!("lanefold: {e}")))?;
                backend
                    .load_raw_kernel(k, rows, n)
                    .map_err(|e| runtime_error(format!("lanefold: {e}")))
            })?;
            lock(scale_kernels()).insert(key, loaded.clone());
            loaded
        }
    };
    let backend = backend(device)?;
    // SAFETY: the Python package passes a live, contiguous, 16-byte
    // aligned torch tensor `x` of rows x n elements of `dtype` and a
    // one-element `scale` of that dtype, both on `device`, and that
    // device's current torch stream, on which the launch is enqueued.
    unsafe {
        backend.launch_raw(
            &kernel,
            &[("x", x), ("scale", scale)],
            stream as cudarc::driver::sys::CUstream,
        )
    }
    .map_err(|e| runtime_error(format!("lanefold: {e}")))
}

/// Drop every cached plan and kernel (compiled binaries stay on disk).
#[pyfunction]
fn clear_caches() {
    lock(cpu_plans()).clear();
    lock(kernels()).clear();
    lock(column_kernels()).clear();
    lock(scale_kernels()).clear();
}

/// A description of the plan a call runs: the automatic mapper's for the
/// CPU executor's target, or with `cuda=True` the H200's, or the tuning
/// cache's winner for the device `device_key` names (as `lanefold tune`
/// records it, e.g. `NVIDIA H200 cc9.0`) or CUDA device `device` is.
#[pyfunction]
#[pyo3(signature = (op, dtype, rows, n, weight=true, bias=true, cuda=false, device=None, device_key=None))]
#[allow(clippy::too_many_arguments)]
fn describe_plan(
    op: &str,
    dtype: &str,
    rows: usize,
    n: usize,
    weight: bool,
    bias: bool,
    cuda: bool,
    device: Option<usize>,
    device_key: Option<String>,
) -> PyResult<String> {
    let mut names = vec![];
    if weight {
        names.push("weight");
    }
    if bias {
        names.push("bias");
    }
    // Any eps for an operator without one: it carries none.
    let default_eps = op
        .parse::<Operator>()
        .ok()
        .and_then(Operator::default_eps)
        .unwrap_or(LAYERNORM_EPS);
    let key = Key::new(op, dtype, rows, n, default_eps as f64, &names)?;
    if !cuda {
        return Ok(key.plan(&Target::cpu(), None)?.describe());
    }
    let device_key = match (device_key, device) {
        (Some(k), _) => Some(k),
        (None, Some(d)) => Some(lanefold_measure::tuning::device_key(Some(&*backend(d)?))),
        (None, None) => None,
    };
    let tuned = device_key.and_then(|k| tuned(&k, &key));
    Ok(key.plan(&Target::h200(), tuned)?.describe())
}

#[pymodule]
fn _lanefold(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cpu_run, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_prepare, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_launch, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_column_grads, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_column_grads, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_scale_unless_one, m)?)?;
    m.add("COLUMN_GROUP_ROWS", lanefold_ir::COLUMN_GROUP_ROWS)?;
    m.add_function(wrap_pyfunction!(clear_caches, m)?)?;
    m.add_function(wrap_pyfunction!(describe_plan, m)?)?;
    Ok(())
}
