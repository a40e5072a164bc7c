//! Launches on memory and streams the caller owns: the Python package's
//! path, where PyTorch allocated every buffer and chose the stream.
//!
//! [`CudaBackend::load_raw`] compiles (through the same memory and disk
//! caches as every other path) and loads a plan's kernel once;
//! [`CudaBackend::launch_raw`] then only enqueues it, on the caller's
//! `CUstream`, with the caller's device pointers as the kernel's pointer
//! arguments. Nothing here allocates, copies, synchronizes or frees: the
//! pointers are never wrapped in a `CudaSlice` (whose drop would free the
//! caller's memory), so the launch is capturable in a CUDA graph.

use crate::{argument_pointers, CudaBackend, CudaError, Loaded};
use cudarc::driver::sys;
use lanefold_codegen::{CodegenOptions, Kernel, ParamKind};
use lanefold_plan::Plan;
use std::sync::Arc;

/// A plan's kernel, compiled and loaded, for [`CudaBackend::launch_raw`].
#[derive(Clone)]
pub struct RawKernel {
    loaded: Arc<Loaded>,
    rows: usize,
    n: usize,
}

impl RawKernel {
    /// The kernel's buffer parameters in launch order: (name, is_output).
    pub fn buffers(&self) -> Vec<(String, bool)> {
        self.loaded
            .kernel
            .params
            .iter()
            .filter_map(|p| match p.kind {
                ParamKind::Input => Some((p.name.clone(), false)),
                ParamKind::Output => Some((p.name.clone(), true)),
                _ => None,
            })
            .collect()
    }

    /// Rows and row length the plan was made for.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.n)
    }

    pub fn kernel_name(&self) -> &str {
        &self.loaded.kernel.name
    }
}

impl CudaBackend {
    /// Generate, compile (memory and disk caches) and load `plan`'s kernel.
    pub fn load_raw(&self, plan: &Plan, options: &CodegenOptions) -> Result<RawKernel, CudaError> {
        let (plan, _, loaded) = self.load(plan, options)?;
        let plan = &plan;
        Ok(RawKernel {
            loaded,
            rows: plan.shape().rows,
            n: plan.shape().n,
        })
    }

    /// Compile (memory and disk caches) and load a kernel generated
    /// without a plan (the norms' column-gradient kernels), launched with
    /// `rows` and `n` as its integer arguments.
    pub fn load_raw_kernel(
        &self,
        kernel: Kernel,
        rows: usize,
        n: usize,
    ) -> Result<RawKernel, CudaError> {
        let loaded = self.load_kernel(kernel, &CodegenOptions::default())?;
        Ok(RawKernel { loaded, rows, n })
    }

    /// Enqueue one launch of `kernel` on `stream` with `buffers` (name,
    /// device pointer) as its pointer arguments; every buffer parameter of
    /// the kernel must be named exactly once. Returns once enqueued.
    ///
    /// # Safety
    ///
    /// Each pointer must be a device allocation of this backend's device
    /// (its primary context) holding at least the program's length of that
    /// buffer (rows x n, n, or rows elements of the plan's dtype; i64 for a
    /// row index), aligned to 16 bytes, and stay alive until the launch
    /// completes on `stream`. `stream` must be a stream of this device's
    /// primary context (or null, the legacy default stream).
    pub unsafe fn launch_raw(
        &self,
        kernel: &RawKernel,
        buffers: &[(&str, u64)],
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let k = &kernel.loaded.kernel;
        let mut pointers: Vec<u64> = vec![];
        let mut named = 0;
        for param in &k.params {
            if matches!(param.kind, ParamKind::Input | ParamKind::Output) {
                let mut hits = buffers.iter().filter(|(name, _)| *name == param.name);
                let ptr = match (hits.next(), hits.next()) {
                    (Some((_, p)), None) => *p,
                    (None, _) => {
                        return Err(CudaError::Data(format!(
                            "no device pointer for kernel parameter '{}'",
                            param.name
                        )))
                    }
                    (Some(_), Some(_)) => {
                        return Err(CudaError::Data(format!(
                            "buffer '{}' given twice",
                            param.name
                        )))
                    }
                };
                if ptr == 0 || !ptr.is_multiple_of(16) {
                    return Err(CudaError::Data(format!(
                        "buffer '{}': device pointer {ptr:#x} is null or not 16-byte aligned",
                        param.name
                    )));
                }
                pointers.push(ptr);
                named += 1;
            }
        }
        if named != buffers.len() {
            return Err(CudaError::Data(format!(
                "{} buffers given, the kernel takes {named}",
                buffers.len()
            )));
        }
        let mut ints = [kernel.rows as i32, kernel.n as i32];
        let mut raw = argument_pointers(k, &mut pointers, &mut ints);
        // SAFETY: `raw` points at live argument storage (`pointers`, `ints`)
        // matching the kernel's signature, generated from the same
        // parameter list; the caller vouches for the pointers and stream.
        unsafe { self.launch_ex(&kernel.loaded, &mut raw, stream) }
    }
}
