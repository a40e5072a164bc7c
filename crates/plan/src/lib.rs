//! From a verified row program and a problem shape to a checked plan:
//! the consecutive-worker ownership layout, the machine description, the
//! fail-closed mapper and the cost policies that rank candidates.

mod cost;
mod layout;
mod mapper;
mod schedule;
mod shape;
mod target;
pub mod tuned;

pub use cost::{CostPolicy, Features, RooflinePolicy};
pub use layout::{vector_access, Layout, TreeLevels, VALID_PACKS};
pub use mapper::{
    automatic_note, enumerate, groups_per_multiprocessor, model_pick, occupancy_step_to_try, plan,
    ArithmeticKey, Candidate, ColumnStage, LayoutRequest, MapperPolicy, ModelScore, OccupancyCap,
    Plan, Problem, ReductionOrder, Refusal, Residency, ResidencyRequest, RowPrefetch, SharedChunks,
};
pub use schedule::ScheduleError;
pub use shape::{Shape, ShapeError};
pub use target::Target;
