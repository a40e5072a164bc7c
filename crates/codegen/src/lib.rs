//! Plan to CUDA C. A pure function: no driver, no file system, no clock.
//!
//! One kernel evaluates one plan. Each thread is one worker of one row; the
//! row's program is evaluated phase by phase (ARCHITECTURE.md): tiles are
//! recomputed element-wise where a phase demands them, loads needed in more
//! than one phase are kept in private slots (registers) or re-read from
//! memory, and every reduction follows the plan's order exactly:
//!
//! 1. the worker recurrence over its chunks and elements, in order;
//! 2. an xor butterfly over the lanes of a warp (`tree.lanes`);
//! 3. shared memory joins the warps of a group (`tree.warps`);
//! 4. distributed shared memory joins the groups of a cluster (`tree.groups`).

mod columns;
mod emit;
mod scale;
mod signal;

use lanefold_plan::Plan;
use serde::{Deserialize, Serialize};

pub use columns::{column_grad_kernels, column_partials_len, ColumnGradKind};
pub use emit::kernel_name;
pub use scale::scale_unless_one_kernel;
pub use signal::{self_signalling, Signal, SIGNAL_PARAMS};

/// Code generation switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CodegenOptions {
    /// Let the compiler contract multiply-adds into FMAs. Off, every
    /// operation rounds separately (the CPU executor's semantics).
    pub fma: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions { fma: true }
    }
}

/// What a kernel argument is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    /// A device pointer to a program input (read only).
    Input,
    /// A device pointer to a program output.
    Output,
    /// `int rows`.
    Rows,
    /// `int n` (must equal the plan's N: the kernel traps otherwise).
    N,
}

/// One kernel argument, in launch order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    /// The buffer name for pointers; `rows` / `n` for the two integers.
    pub name: String,
    pub kind: ParamKind,
    /// The C type as written in the signature.
    pub c_type: String,
}

/// A generated kernel and how to launch it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    pub source: String,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    /// Blocks per cluster along x (a row spans the cluster), set at launch.
    /// Sizes above 8 need the non-portable cluster size attribute.
    pub cluster: Option<u32>,
    /// Dynamic shared memory per block, bytes, to pass at launch.
    pub shared_bytes: u32,
    /// Every program input pointer (program order), every output pointer
    /// (program order), then `int rows`, `int n`.
    pub params: Vec<Param>,
    /// A persistent grid over this many rows (prefetched rows): `grid` is
    /// the plan's estimate of the groups that fit at once; the runtime may
    /// launch as many as the driver's occupancy allows, at most one a row.
    #[serde(default)]
    pub persistent_rows: Option<u32>,
    /// The shared-memory carve-out to ask the driver for, in percent of
    /// the largest (a hint it rounds up to a size the hardware has): 0 for
    /// plans that keep their columns in L1 (the least that fits), the
    /// capped carve-out for an occupancy cap; None: the driver's choice.
    #[serde(default)]
    pub carveout_percent: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    #[error("unsupported plan: {0}")]
    Unsupported(String),
    #[error("inconsistent plan: {0}")]
    Inconsistent(String),
}

/// Generate the CUDA C kernel for `plan`.
pub fn generate(plan: &Plan, options: &CodegenOptions) -> Result<Kernel, CodegenError> {
    emit::generate(plan, options)
}

/// NVRTC options for a kernel generated with `options`, compiled for
/// `arch` (e.g. `sm_90`, from the device's compute capability).
pub fn nvrtc_options(options: &CodegenOptions, arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        format!("--fmad={}", options.fma),
        // IEEE division and square root, denormals kept (the defaults,
        // spelled out so the cache key records them).
        "--prec-div=true".to_string(),
        "--prec-sqrt=true".to_string(),
        "--ftz=false".to_string(),
    ]
}

/// `sm_XY` for a compute capability.
pub fn arch_for(major: u32, minor: u32) -> String {
    format!("sm_{major}{minor}")
}

#[cfg(test)]
mod tests;
