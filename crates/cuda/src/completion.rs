//! How the host learns that a call has finished without asking the
//! driver: a 4-byte flag in host-mapped pinned memory that a one-thread
//! kernel writes behind the call's kernel (a second node of the call
//! graph, or a launch behind it), and that the host spins on. On the H200
//! the call graph with this node and a spin on the flag took 6.3-7.4 µs a
//! call where the graph plus `cuStreamSynchronize` took 7.7-8.7
//! (p50 of 2000 in a 2026-11-30 probe, in git history at 2d680226).

use crate::call_graph::pointer_and_word;
use crate::{driver, CudaError, Loaded};
use cudarc::driver::sys;
use std::time::Instant;

/// A 4-byte flag in host-mapped pinned memory that the GPU writes after
/// the stream's earlier work and the host reads without a driver call.
pub(crate) struct HostFlag {
    host: *mut u32,
    pub(crate) device: sys::CUdeviceptr,
    seq: u32,
}

/// Who writes the flag behind the stream's work.
#[derive(Clone, Copy)]
pub(crate) enum FlagWriter<'a> {
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

pub(crate) fn signal_kernel() -> lanefold_codegen::Kernel {
    lanefold_codegen::Kernel {
        name: "lf_signal".into(),
        source: SIGNAL_SOURCE.into(),
        grid: (1, 1, 1),
        block: (1, 1, 1),
        cluster: None,
        shared_bytes: 0,
        params: vec![],
        persistent_rows: None,
        carveout_percent: None,
    }
}

/// Longest wait for the flag before the variant is declared unsupported.
const FLAG_TIMEOUT_S: f64 = 1.0;

impl HostFlag {
    pub(crate) fn new() -> Result<HostFlag, CudaError> {
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
            // segfault once.)
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
    pub(crate) fn signal_and_wait(
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
    pub(crate) fn reset(&mut self) {
        // SAFETY: the pinned allocation lives as long as self.
        unsafe { std::ptr::write_volatile(self.host, 0) }
    }

    /// Spin until the flag holds `value`.
    pub(crate) fn wait_for(&self, value: u32) -> Result<(), CudaError> {
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

    /// scripts/synccheck-clusters.cu, the pushed reduction's mbarrier
    /// protocol alone for compute-sanitizer, is run only on a device: its
    /// kernel half at least compiles for sm_90a here.
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_compiles_the_synccheck_probe() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/synccheck-clusters.cu"
        );
        let kernel = lanefold_codegen::Kernel {
            name: "push_kernel".into(),
            source: std::fs::read_to_string(path).unwrap(),
            ..signal_kernel()
        };
        let opts = lanefold_codegen::nvrtc_options(&Default::default(), "sm_90a");
        let (cubin, _log) = crate::compile_kernel(&kernel, &opts).expect("the probe compiles");
        assert!(cubin.windows(11).any(|w| w == b"push_kernel"));
    }
}
