use crate::cost::ModelParams;
use serde::{Deserialize, Serialize};

/// What the mapper and the cost policy know about a machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub warp_size: u32,
    pub max_threads_per_group: u32,
    /// Largest thread-block cluster (1: no clusters).
    pub max_cluster_groups: u32,
    /// Threads of each group when a row spans a cluster: smaller than the
    /// group limit so each worker keeps enough registers for its slots.
    pub cluster_group_threads: u32,
    /// A row of more workers than [`Target::cluster_group_threads`] spans
    /// a cluster even within the group limit (e.g. W=512 as two groups of
    /// 256): set for a request that splits its groups
    /// ([`crate::LayoutRequest::split_groups`]).
    #[serde(default)]
    pub clusters_within_group_limit: bool,
    pub max_registers_per_thread: u32,
    pub registers_per_group: u32,
    pub shared_bytes_per_group: u32,
    /// Shared memory of one multiprocessor, shared by its resident groups
    /// (each also takes [`SHARED_RESERVED_PER_GROUP`]).
    #[serde(default = "default_shared_bytes_per_multiprocessor")]
    pub shared_bytes_per_multiprocessor: u32,
    pub multiprocessors: u32,
    pub max_threads_per_multiprocessor: u32,
    /// Measured device-to-device copy bandwidth (read + write), GB/s.
    pub copy_gbps: f64,
    /// Launch cost of one kernel node in a replayed graph, µs.
    pub launch_us: f64,
    /// The cost model's constants on this machine: fitted where
    /// `tuning/<name>-model.json` ships, else the defaults.
    #[serde(default)]
    pub cost: ModelParams,
}

/// Shared memory the hardware keeps for each resident group (sm_80 and
/// later: 1 KiB per block).
pub const SHARED_RESERVED_PER_GROUP: u32 = 1024;

/// The shared-memory sizes (KiB) sm_90 can carve out of each
/// multiprocessor's 256 KiB of L1 and shared memory; a carve-out
/// preference in percent of the largest is rounded up to one of these.
pub const SHARED_CARVEOUTS_KIB: [u32; 10] = [0, 8, 16, 32, 64, 100, 132, 164, 196, 228];

/// Shared memory that caps a multiprocessor at `groups` groups of a kernel
/// needing `needed` bytes each: the smallest carve-out holding `groups`
/// groups, split `groups` ways (so one more does not fit), and the
/// carve-out preference in percent that asks the driver for it. None when
/// no carve-out holds `groups` groups. Returns (dynamic shared bytes per
/// group, carve-out percent).
pub fn occupancy_cap_shared(needed: u32, groups: u32) -> Option<(u32, u32)> {
    let largest = *SHARED_CARVEOUTS_KIB.last()?;
    let per_group = needed + SHARED_RESERVED_PER_GROUP;
    SHARED_CARVEOUTS_KIB.iter().find_map(|&kib| {
        let carveout = kib * 1024;
        let share = (carveout / groups.max(1)) / 128 * 128;
        let fits = share >= per_group && (groups + 1) * share > carveout;
        // The largest percent that still rounds up to this carve-out.
        let percent = kib * 100 / largest;
        (kib > 0 && fits).then(|| (share - SHARED_RESERVED_PER_GROUP, percent))
    })
}

/// sm_90's 228 KiB per multiprocessor; files written before the field
/// existed described the H200 or the CPU executor, which emulates it.
fn default_shared_bytes_per_multiprocessor() -> u32 {
    228 * 1024
}

impl Target {
    /// NVIDIA H200 (sm_90): 132 SMs, 64K registers and 227 KiB of shared
    /// memory per block, clusters of up to 16 blocks (non-portable size); copy bandwidth and
    /// graph-node cost as measured on our machine.
    pub fn h200() -> Target {
        Target {
            name: "h200".into(),
            warp_size: 32,
            max_threads_per_group: 1024,
            max_cluster_groups: 16,
            cluster_group_threads: 512,
            clusters_within_group_limit: false,
            max_registers_per_thread: 255,
            registers_per_group: 65536,
            shared_bytes_per_group: 227 * 1024,
            shared_bytes_per_multiprocessor: default_shared_bytes_per_multiprocessor(),
            multiprocessors: 132,
            max_threads_per_multiprocessor: 2048,
            copy_gbps: 4250.0,
            launch_us: 0.9,
            cost: crate::fitted::params("h200"),
        }
    }

    /// The CPU executor's target: it emulates the same worker hierarchy
    /// (warps of 32, groups, clusters) so any GPU plan also runs here.
    pub fn cpu() -> Target {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        Target {
            name: "cpu".into(),
            warp_size: 32,
            max_threads_per_group: 1024,
            max_cluster_groups: 16,
            cluster_group_threads: 512,
            clusters_within_group_limit: false,
            max_registers_per_thread: 255,
            registers_per_group: 65536,
            shared_bytes_per_group: 227 * 1024,
            shared_bytes_per_multiprocessor: default_shared_bytes_per_multiprocessor(),
            multiprocessors: cores,
            max_threads_per_multiprocessor: 2048,
            copy_gbps: 10.0,
            launch_us: 5.0,
            cost: crate::fitted::params("cpu"),
        }
    }

    /// Does a row of `workers` span a cluster only with
    /// [`crate::LayoutRequest::split_groups`]? It does when one group holds it.
    pub fn needs_split_groups(&self, workers: u32) -> bool {
        workers <= self.max_threads_per_group
    }

    pub fn by_name(name: &str) -> Option<Target> {
        match name {
            "h200" | "cuda" => Some(Target::h200()),
            "cpu" => Some(Target::cpu()),
            _ => None,
        }
    }

    /// Widest row: a full cluster of full groups.
    pub fn max_workers(&self) -> u32 {
        if self.max_cluster_groups > 1 {
            self.cluster_group_threads * self.max_cluster_groups
        } else {
            self.max_threads_per_group
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_occupancy_cap_fits_exactly_that_many_groups() {
        for needed in [0, 4, 1024, 8 * 1024, 40 * 1024] {
            for groups in 1..=8 {
                let Some((shared, percent)) = occupancy_cap_shared(needed, groups) else {
                    assert!(groups as u64 * (needed as u64 + 1024) > 228 * 1024);
                    continue;
                };
                assert!(shared >= needed);
                // The carve-out the percent rounds up to.
                let asked = percent as f64 * 228.0 / 100.0;
                let carveout = SHARED_CARVEOUTS_KIB
                    .iter()
                    .map(|&k| k as f64)
                    .find(|&k| k >= asked)
                    .unwrap() as u32
                    * 1024;
                let per_group = shared + SHARED_RESERVED_PER_GROUP;
                assert_eq!(
                    carveout / per_group,
                    groups,
                    "needed {needed}, {groups} groups"
                );
            }
        }
        // More groups than the largest carve-out holds: no cap.
        assert_eq!(occupancy_cap_shared(100 * 1024, 3), None);
    }
}
