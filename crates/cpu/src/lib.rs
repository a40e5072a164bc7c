//! The CPU side of lanefold: host tensors, an executor that reproduces a
//! plan's exact FP32 addition order, a plainly written float64 reference,
//! and validation of any backend's outputs against it.

pub mod backward;
pub mod columns;
pub mod data;
mod exec;
pub mod fuzz;
pub mod npy;
pub mod oracle;
pub mod reference;
mod validate;

pub use data::{Buffers, DataError, Tensor};
pub use exec::{cold_row, execute, execute_in_place, is_cold, reduce_tree, ExecError};
pub use validate::{validate, OutputCheck, Validation};
