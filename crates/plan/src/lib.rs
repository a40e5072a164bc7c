//! From a verified row program and a problem shape to a checked plan:
//! the consecutive-worker ownership layout, the machine description, the
//! mapper's types and entry point, the legality check, the schedule space,
//! and the automatic choice (tuning database, measured rules, cost model).

mod choice;
mod cost;
mod enumeration;
pub mod fitted;
mod layout;
mod legality;
mod mapper;
mod schedule;
mod shape;
mod target;
#[cfg(test)]
mod testing;
pub mod tuned;

pub use choice::{
    automatic_note, model_candidates, model_pick, occupancy_step_to_try, past_l2, ModelScore,
};
pub use cost::{CostInputs, CostPolicy, Features, ModelParams, ParamBound, RooflinePolicy};
pub use enumeration::{enumerate, Candidate};
pub use layout::{vector_access, Layout, TreeLevels, VALID_PACKS};
pub use mapper::{
    groups_per_multiprocessor, plan, register_budget, ArithmeticKey, ColumnStage, LayoutRequest,
    MapperPolicy, OccupancyCap, Plan, Problem, ReductionOrder, Refusal, Residency,
    ResidencyRequest, RowPrefetch, SharedChunks,
};
pub use schedule::ScheduleError;
pub use shape::{drawn_shapes, Shape, ShapeError};
pub use target::Target;
