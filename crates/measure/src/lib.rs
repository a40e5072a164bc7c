//! Measurement: the three phases (ARCHITECTURE.md), sampled separately and
//! never subtracted; the PyTorch peer; results files with raw samples;
//! rendering; the audit that recomputes every summary from them; and the
//! hardware counters of profiled launches (Nsight Compute raw pages).

pub mod audit;
pub mod bench;
pub mod corpus;
pub mod corpus_score;
pub mod counters;
pub mod deadline;
pub mod devices;
pub mod env;
pub mod fit;
pub mod peer;
pub mod phases;
pub mod progress;
pub mod render;
pub mod replay;
pub mod results;
pub mod scorecard;
pub mod search;
pub mod tuning;
