//! Problems and requests the plan crate's tests share.

use crate::mapper::{LayoutRequest, MapperPolicy, Problem};
use lanefold_ir::{DType, Operator, OperatorOptions};

pub(crate) fn problem(op: Operator, shape: &str) -> Problem {
    typed(op, DType::F32, shape)
}

/// `op` with default options in `dtype` on `shape`.
pub(crate) fn typed(op: Operator, dtype: DType, shape: &str) -> Problem {
    Problem::operator(
        op,
        OperatorOptions::default(),
        dtype,
        shape.parse().unwrap(),
    )
}

/// The automatic request of a user who asks for nothing.
pub(crate) fn automatic() -> LayoutRequest {
    LayoutRequest {
        mapper: MapperPolicy::Model,
        ..Default::default()
    }
}

pub(crate) fn req(w: u32, v: u32) -> LayoutRequest {
    LayoutRequest {
        workers: w,
        pack: v,
        ..Default::default()
    }
}
