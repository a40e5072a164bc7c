//! Enumeration: the schedule space of a problem, each candidate with the
//! mapper's answer (a legal plan or a refusal).

use crate::layout::VALID_PACKS;
use crate::legality::{plan_rows, with_cluster_group_threads};
use crate::mapper::{plan, LayoutRequest, Plan, Problem, Refusal};
use crate::target::Target;

/// One enumerated candidate: its request and what the mapper made of it.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub request: LayoutRequest,
    pub outcome: Result<Plan, Refusal>,
}

/// The Cartesian product of W, V and U lists (0 = automatic) over `base`.
pub fn enumerate(
    problem: &Problem,
    target: &Target,
    base: &LayoutRequest,
    workers: &[u32],
    packs: &[u32],
    unrolls: &[u32],
) -> Vec<Candidate> {
    let mut out = vec![];
    for &w in workers {
        for &v in packs {
            for &u in unrolls {
                let request = LayoutRequest {
                    workers: w,
                    pack: v,
                    unroll: u,
                    ..*base
                };
                out.push(Candidate {
                    request,
                    outcome: plan(problem, target, &request),
                });
            }
        }
    }
    out
}

/// Cluster group size the model mapping also tries for rows that span a
/// cluster when the request leaves it automatic: on the H200, 256-thread
/// groups let two or more of a long row's groups share a multiprocessor,
/// and softmax f32 4096x131072 ran 1133 µs in 8 such groups against 1410
/// in 4 groups of 512 (2026-11-29-long-rows-search-g256-h200).
const AUTO_CLUSTER_GROUP_THREADS: u32 = 256;

/// One legal schedule of the model's space: the request, its plan and the
/// target with the request's cluster group size.
pub(crate) struct Legal {
    pub request: LayoutRequest,
    pub plan: Plan,
    pub target: Target,
}

/// The legal schedules the cost model chooses among for `request`, in a
/// fixed order: W a power of two from 8 to the target's widest row, V in
/// 1, 2, 4, 8, at the request's cluster group size and, where the request
/// leaves it automatic and the target has clusters, at
/// [`AUTO_CLUSTER_GROUP_THREADS`] too (only plans whose rows span a
/// cluster: a smaller group changes no other). An element-only program's
/// rows never span a cluster here.
pub(crate) fn model_space(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<Vec<Legal>, Refusal> {
    let mut group_sizes = vec![request.cluster_group_threads];
    if request.cluster_group_threads == 0
        && target.max_cluster_groups > 1
        && target.cluster_group_threads != AUTO_CLUSTER_GROUP_THREADS
    {
        group_sizes.push(AUTO_CLUSTER_GROUP_THREADS);
    }
    let mut out = vec![];
    for &group_threads in &group_sizes {
        let target = with_cluster_group_threads(target, group_threads)?;
        let mut w = 8;
        while w <= target.max_workers() {
            for v in VALID_PACKS {
                let candidate = LayoutRequest {
                    workers: w,
                    pack: v,
                    cluster_group_threads: group_threads,
                    ..*request
                };
                let Ok(p) = plan_rows(problem, &target, &candidate) else {
                    continue;
                };
                if group_threads != request.cluster_group_threads && p.groups_per_row == 1 {
                    continue;
                }
                // A row spans a cluster to share its reductions; an
                // element-only program has none to share and pays the
                // cluster's launch for nothing (bf16 1024x128256 saved-lse
                // cross-entropy backward on the H200: W=2048 in clusters
                // of 4 174 µs, W=512 or 1024 in one group 141 µs).
                if p.groups_per_row > 1 && !p.analysis.has_reduction() {
                    continue;
                }
                out.push(Legal {
                    request: candidate,
                    plan: p,
                    target: target.clone(),
                });
            }
            w *= 2;
        }
    }
    Ok(out)
}
