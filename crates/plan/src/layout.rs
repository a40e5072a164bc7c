//! The consecutive-worker ownership layout.
//!
//! ```text
//! logical element i = (chunk * W + worker) * V + element
//! private slot      = chunk * V + element
//! 0 <= worker < W, 0 <= element < V, valid iff i < N
//! ```

use crate::target::Target;
use lanefold_ir::DType;
use serde::{Deserialize, Serialize};

pub const VALID_PACKS: [u32; 4] = [1, 2, 4, 8];

/// W workers per row, V consecutive elements per worker and chunk, stripe
/// unroll U, G rows per group. Fields are concrete (automatic choices are
/// resolved by the mapper before a `Layout` exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    pub workers: u32,
    pub pack: u32,
    pub unroll: u32,
    pub rows_per_group: u32,
}

/// Widths of the reduction tree's levels, innermost first: lanes of a warp,
/// warps of a group, groups of a cluster. Their product is W.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeLevels {
    pub lanes: u32,
    pub warps: u32,
    pub groups: u32,
}

impl Layout {
    /// Elements covered by one chunk across all workers.
    pub fn chunk_span(&self) -> usize {
        self.workers as usize * self.pack as usize
    }

    /// Elements of one chunk that each of `groups` groups sharing a row
    /// covers: its workers' packs, contiguous.
    pub fn group_chunk_span(&self, groups: u32) -> usize {
        self.chunk_span() / groups as usize
    }

    #[inline]
    pub fn logical(&self, chunk: usize, worker: usize, element: usize) -> usize {
        (chunk * self.workers as usize + worker) * self.pack as usize + element
    }

    /// Inverse map: (chunk, worker, element) of logical element i.
    pub fn owner(&self, i: usize) -> (usize, usize, usize) {
        let v = self.pack as usize;
        (
            i / self.chunk_span(),
            (i / v) % self.workers as usize,
            i % v,
        )
    }

    pub fn slot(&self, chunk: usize, element: usize) -> usize {
        chunk * self.pack as usize + element
    }

    /// Chunks that touch a row of n elements (the last may be partial).
    pub fn chunks(&self, n: usize) -> usize {
        n.div_ceil(self.chunk_span())
    }

    /// Chunks in which every worker's V elements are valid: unguarded code.
    pub fn complete_packs(&self, n: usize) -> usize {
        n / self.chunk_span()
    }

    /// Is there one guarded partial chunk at the end?
    pub fn has_partial_pack(&self, n: usize) -> bool {
        !n.is_multiple_of(self.chunk_span())
    }

    /// Private slots one worker needs to hold a whole materialized tile:
    /// `floor(N/(W*V))*V + min(N%(W*V), V)`.
    pub fn slot_bound(&self, n: usize) -> usize {
        let span = self.chunk_span();
        (n / span) * self.pack as usize + (n % span).min(self.pack as usize)
    }

    /// Valid elements owned by `worker` in a row of n.
    pub fn owned_count(&self, n: usize, worker: usize) -> usize {
        let v = self.pack as usize;
        let full = (n / self.chunk_span()) * v;
        let rem = n % self.chunk_span();
        full + rem.saturating_sub(worker * v).min(v)
    }

    /// Workers that own at least one element.
    pub fn live_workers(&self, n: usize) -> usize {
        n.div_ceil(self.pack as usize).min(self.workers as usize)
    }

    /// Groups per row: >1 means the row spans a cluster.
    /// Does a row span a cluster of groups?
    pub fn spans_cluster(&self, target: &Target) -> bool {
        self.workers > target.max_threads_per_group
            || (target.clusters_within_group_limit
                && target.max_cluster_groups > 1
                && self.workers > target.cluster_group_threads)
    }

    /// Workers of one row inside one group.
    pub fn workers_per_group(&self, target: &Target) -> u32 {
        if self.spans_cluster(target) {
            target.cluster_group_threads
        } else {
            self.workers
        }
    }

    /// Groups per row: >1 means the row spans a cluster.
    pub fn groups_per_row(&self, target: &Target) -> u32 {
        self.workers / self.workers_per_group(target)
    }

    /// Threads of one group: its workers of each of its rows (a cluster
    /// group of G rows holds the same slice of each).
    pub fn threads_per_group(&self, target: &Target) -> u32 {
        if self.spans_cluster(target) {
            target.cluster_group_threads * self.rows_per_group
        } else {
            self.workers * self.rows_per_group
        }
    }

    pub fn tree(&self, target: &Target) -> TreeLevels {
        let lanes = self.workers.min(target.warp_size);
        let per_group = self.workers_per_group(target);
        TreeLevels {
            lanes,
            warps: per_group / lanes,
            groups: self.workers / per_group,
        }
    }
}

/// Vector loads and stores are used when a pack is at least 4 bytes, a
/// multiple of 4 bytes, and every row start is aligned to the pack (n % V
/// == 0, so row * n * size is a multiple of V * size). Returns (32-bit
/// words per pack, words per access instruction); None: one scalar access
/// per element. The code generator and the cost model both decide by it.
pub fn vector_access(dtype: DType, pack: usize, n: usize) -> Option<(usize, usize)> {
    let bytes = pack * dtype.size_bytes();
    if pack < 2 || !bytes.is_multiple_of(4) || !n.is_multiple_of(pack) {
        return None;
    }
    let words = bytes / 4;
    Some((words, words.min(4)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(w_log: u32, v_idx: usize) -> Layout {
        Layout {
            workers: 1 << w_log,
            pack: VALID_PACKS[v_idx],
            unroll: 1,
            rows_per_group: 1,
        }
    }

    #[test]
    fn seed_example_w4_v2() {
        let l = layout(2, 1);
        // worker 1 owns 2,3 in chunk 0 and 10,11 in chunk 1.
        assert_eq!(l.logical(0, 1, 0), 2);
        assert_eq!(l.logical(1, 1, 1), 11);
        assert_eq!(l.owner(13), (1, 2, 1));
        assert_eq!(l.slot(1, 1), 3);
    }

    proptest! {
        #[test]
        fn map_is_a_bijection_onto_valid_indices(n in 1usize..5000, w_log in 0u32..11, v_idx in 0usize..4) {
            let l = layout(w_log, v_idx);
            let mut seen = vec![false; n];
            for chunk in 0..l.chunks(n) {
                for worker in 0..l.workers as usize {
                    for element in 0..l.pack as usize {
                        let i = l.logical(chunk, worker, element);
                        if i < n {
                            prop_assert!(!seen[i], "element {} mapped twice", i);
                            seen[i] = true;
                            prop_assert_eq!(l.owner(i), (chunk, worker, element));
                        }
                    }
                }
            }
            prop_assert!(seen.iter().all(|&s| s));
        }

        #[test]
        fn slot_bound_equals_the_largest_per_worker_count(n in 1usize..5000, w_log in 0u32..11, v_idx in 0usize..4) {
            let l = layout(w_log, v_idx);
            let mut counts = vec![0usize; l.workers as usize];
            let mut max_slot = 0;
            for i in 0..n {
                let (chunk, worker, element) = l.owner(i);
                counts[worker] += 1;
                max_slot = max_slot.max(l.slot(chunk, element) + 1);
            }
            let largest = *counts.iter().max().unwrap();
            prop_assert_eq!(l.slot_bound(n), largest);
            // Slots are dense: the bound is also the highest slot used.
            prop_assert_eq!(l.slot_bound(n), max_slot);
            for (w, c) in counts.iter().enumerate() {
                prop_assert_eq!(l.owned_count(n, w), *c);
            }
        }

        #[test]
        fn complete_packs_plus_partial_cover_the_row(n in 1usize..5000, w_log in 0u32..11, v_idx in 0usize..4) {
            let l = layout(w_log, v_idx);
            let full = l.complete_packs(n);
            prop_assert_eq!(full + l.has_partial_pack(n) as usize, l.chunks(n));
            prop_assert!(full * l.chunk_span() <= n);
        }

        #[test]
        fn tree_levels_multiply_to_w(w_log in 0u32..14) {
            let l = layout(w_log, 0);
            let t = l.tree(&Target::h200());
            prop_assert_eq!(t.lanes * t.warps * t.groups, l.workers);
        }
    }
}
