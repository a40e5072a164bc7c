//! Row programs: a small SSA IR over one row of length N.
//!
//! A program loads tiles (row inputs, per-column vectors), maps them element
//! by element, reduces tiles to per-row scalars, broadcasts scalars back and
//! stores tiles or scalars. Every element-wise instruction touches only the
//! logical element it is evaluated at, so ownership is a property of the
//! instruction set; the verifier checks the rest (types, purity, aliasing,
//! non-escape) and records whether the program permits reassociation.

mod dtype;
mod operators;
mod program;
mod text;
mod verify;

pub use dtype::{DType, DTypeError};
pub use operators::{
    NormForm, Operator, OperatorOptions, ParseOperatorError, COLUMN_GROUP_ROWS, IGNORE_INDEX,
    LAYERNORM_EPS, RMSNORM_EPS,
};
pub use program::{
    BinaryOp, BufferDecl, BufferKind, Builder, Instr, Program, ReduceOp, RowStat, UnaryOp, Value,
    LN_CANCEL_BITS, RESCUE_SCALE,
};
pub use verify::{Analysis, Kind, VerifyError};
