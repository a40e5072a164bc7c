//! The three phases and the sampler that drives any [`Timer`].
//!
//! - `gpu`: a batch of launches replayed as a CUDA graph between two device
//!   events; per-op time = interval / batch.
//! - `e2e`: host wall clock around a batch of direct launches ending in a
//!   synchronize.
//! - `single`: one synchronized call, timed by device events and by the host
//!   clock.

use serde::{Deserialize, Serialize};

/// L2 state of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum L2Mode {
    /// The same buffers every launch.
    Warm,
    /// Launches rotate among input sets totalling at least 3x the L2 size,
    /// each with its own outputs.
    Cold,
    /// The inputs rotate as in `Cold`; every launch writes the same
    /// outputs, as a PyTorch peer's come back from its allocator as the
    /// same block call after call.
    #[serde(rename = "cold-inputs")]
    ColdInputs,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseConfig {
    pub samples: usize,
    /// Each sample's batch is sized to about this much host time.
    pub sample_ms: f64,
    pub warmup_ms: f64,
    pub l2: L2Mode,
}

/// One timed batch: `total_us` over `batch` launches.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchSample {
    pub batch: usize,
    pub total_us: f64,
}

impl BatchSample {
    pub fn per_op_us(&self) -> f64 {
        self.total_us / self.batch as f64
    }
}

/// A GPU-phase batch as the runtime reports it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuBatch {
    /// Device-event interval around the batch, µs.
    pub gpu_us: f64,
    /// Host time to enqueue the batch (graph launch or direct launches), µs.
    pub enqueue_us: f64,
    /// Was the batch replayed as a CUDA graph (false: direct launches)?
    pub graph: bool,
}

/// A host-timed batch (e2e phase).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostBatch {
    /// Wall clock from the first enqueue to the end of the synchronize, µs.
    pub host_us: f64,
    /// Wall clock of enqueueing alone, µs.
    pub enqueue_us: f64,
}

/// One synchronized call.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SingleCall {
    /// Device-event interval (None on the CPU), µs.
    pub gpu_us: Option<f64>,
    /// Wall clock of launch + synchronize, µs.
    pub host_us: f64,
}

/// What a backend must provide for the sampler. Every method runs the
/// prepared plan on preallocated buffers; nothing compiles or transfers.
pub trait Timer {
    /// `batch` launches in the gpu phase; None where there is no device
    /// clock (the CPU): the phase is then recorded as absent.
    fn gpu_batch(&mut self, batch: usize) -> anyhow::Result<Option<GpuBatch>>;
    fn e2e_batch(&mut self, batch: usize) -> anyhow::Result<HostBatch>;
    fn single(&mut self) -> anyhow::Result<SingleCall>;
}

/// Raw samples of one side (lanefold or a peer) of one case.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    /// None: the phase does not exist on this backend (never filled in).
    pub gpu: Option<Vec<BatchSample>>,
    /// Host enqueue time of each gpu sample's batch, µs.
    #[serde(default)]
    pub gpu_enqueue_us: Vec<f64>,
    /// Was the gpu phase replayed as a CUDA graph?
    pub gpu_graph: Option<bool>,
    pub e2e: Vec<BatchSample>,
    /// Host enqueue time of each e2e sample's batch, µs.
    #[serde(default)]
    pub e2e_enqueue_us: Vec<f64>,
    pub single: Vec<SingleCall>,
}

/// Warm up, size batches to the host-time target, then take each phase's
/// samples separately.
pub fn sample(timer: &mut dyn Timer, cfg: &PhaseConfig) -> anyhow::Result<PhaseRecord> {
    use std::time::Instant;
    anyhow::ensure!(cfg.samples > 0, "--samples must be at least 1");
    let warm = Instant::now();
    let mut probe = 1usize;
    let mut per_op_us;
    loop {
        let b = timer.e2e_batch(probe)?;
        per_op_us = b.host_us / probe as f64;
        if warm.elapsed().as_secs_f64() * 1e3 >= cfg.warmup_ms {
            break;
        }
        // Grow the probe so the warm-up is not dominated by synchronizes.
        probe = (probe * 2).min(1 << 16);
    }
    let batch = ((cfg.sample_ms * 1e3 / per_op_us.max(1e-3)).ceil() as usize).clamp(1, 1 << 20);
    let mut rec = PhaseRecord::default();
    // gpu phase: the runtime caches one captured graph per batch size.
    let mut gpu = vec![];
    let mut present = true;
    for _ in 0..cfg.samples {
        match timer.gpu_batch(batch)? {
            Some(g) => {
                gpu.push(BatchSample {
                    batch,
                    total_us: g.gpu_us,
                });
                rec.gpu_enqueue_us.push(g.enqueue_us);
                rec.gpu_graph = Some(rec.gpu_graph.unwrap_or(true) && g.graph);
            }
            None => {
                present = false;
                break;
            }
        }
    }
    rec.gpu = present.then_some(gpu);
    for _ in 0..cfg.samples {
        let h = timer.e2e_batch(batch)?;
        rec.e2e.push(BatchSample {
            batch,
            total_us: h.host_us,
        });
        rec.e2e_enqueue_us.push(h.enqueue_us);
    }
    for _ in 0..single_calls(cfg.samples) {
        rec.single.push(timer.single()?);
    }
    Ok(rec)
}

/// Synchronized single calls are heavy-tailed: in a 2026-11-30 A/A replay, with
/// three calls per round, one round's p50 of rmsnorm f32 17x257 was 12.2 µs
/// against a median of 6.8. Each side takes at least this many.
pub const SINGLE_CALLS_MIN: usize = 15;

/// Single calls per side and sample set for `samples` of the batch phases.
pub fn single_calls(samples: usize) -> usize {
    samples.max(SINGLE_CALLS_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timer with a fixed cost per launch and no device clock.
    struct Fake {
        per_op_us: f64,
        device: bool,
        calls: usize,
    }

    impl Timer for Fake {
        fn gpu_batch(&mut self, batch: usize) -> anyhow::Result<Option<GpuBatch>> {
            self.calls += 1;
            Ok(self.device.then_some(GpuBatch {
                gpu_us: self.per_op_us * batch as f64,
                enqueue_us: 1.0,
                graph: true,
            }))
        }
        fn e2e_batch(&mut self, batch: usize) -> anyhow::Result<HostBatch> {
            self.calls += 1;
            std::thread::sleep(std::time::Duration::from_micros(
                (self.per_op_us * batch as f64) as u64,
            ));
            Ok(HostBatch {
                host_us: self.per_op_us * batch as f64,
                enqueue_us: batch as f64,
            })
        }
        fn single(&mut self) -> anyhow::Result<SingleCall> {
            Ok(SingleCall {
                gpu_us: self.device.then_some(self.per_op_us),
                host_us: self.per_op_us + 5.0,
            })
        }
    }

    #[test]
    fn l2_modes_are_written_as_their_flags() {
        for (mode, text) in [
            (L2Mode::Warm, "\"warm\""),
            (L2Mode::Cold, "\"cold\""),
            (L2Mode::ColdInputs, "\"cold-inputs\""),
        ] {
            assert_eq!(serde_json::to_string(&mode).unwrap(), text);
            assert_eq!(serde_json::from_str::<L2Mode>(text).unwrap(), mode);
        }
    }

    fn cfg() -> PhaseConfig {
        PhaseConfig {
            samples: 3,
            sample_ms: 2.0,
            warmup_ms: 1.0,
            l2: L2Mode::Warm,
        }
    }

    #[test]
    fn batches_are_sized_to_the_host_time_target() {
        let mut t = Fake {
            per_op_us: 10.0,
            device: true,
            calls: 0,
        };
        let rec = sample(&mut t, &cfg()).unwrap();
        let gpu = rec.gpu.unwrap();
        assert_eq!(gpu.len(), 3);
        // 2 ms at 10 µs per launch.
        assert_eq!(gpu[0].batch, 200);
        assert_eq!(rec.e2e.len(), 3);
        assert_eq!(rec.single.len(), SINGLE_CALLS_MIN);
        assert_eq!(rec.gpu_graph, Some(true));
    }

    #[test]
    fn the_single_phase_label_states_the_call_count() {
        let label = crate::results::SCOPE_SINGLE;
        assert!(label.contains(&format!("at least {SINGLE_CALLS_MIN} per side")));
        assert_eq!(single_calls(3), SINGLE_CALLS_MIN);
        assert_eq!(single_calls(40), 40);
    }

    #[test]
    fn an_absent_gpu_phase_stays_absent() {
        let mut t = Fake {
            per_op_us: 50.0,
            device: false,
            calls: 0,
        };
        let rec = sample(&mut t, &cfg()).unwrap();
        assert!(rec.gpu.is_none());
        assert!(rec.single.iter().all(|s| s.gpu_us.is_none()));
        assert_eq!(rec.e2e.len(), 3);
    }
}
