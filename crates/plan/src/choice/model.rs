//! The cost model's own choice: the legal schedule of the model space
//! with the lowest prediction (roofline, [`crate::cost`]).

use crate::enumeration::{model_space, Legal};
use crate::legality::plan_rows;
use crate::mapper::{LayoutRequest, MapperPolicy, Plan, Problem, ReductionOrder, Refusal};
use crate::shape::Shape;
use crate::target::Target;

/// Rows the model mapping assumes when asked for batch invariance, so its
/// choice depends on N and dtype alone.
const CANONICAL_ROWS: usize = 4096;

/// What the model mapping ranks a legal candidate by (see [`model_pick`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelScore {
    /// The plan re-reads resident tiles from memory (streamed).
    pub rereads_tiles: bool,
    pub predicted_us: f64,
    pub groups_per_row: u32,
    /// The plan's register estimate per thread.
    pub registers: u32,
    pub threads_per_group: u32,
}

impl ModelScore {
    /// The roofline policy's score of `plan` on `target`.
    pub fn of(plan: &Plan, target: &Target) -> ModelScore {
        use crate::cost::{CostPolicy, Features, RooflinePolicy};
        ModelScore {
            rereads_tiles: plan.rereads_tiles(),
            predicted_us: RooflinePolicy.predict_us(&Features::of(plan, target), plan, target),
            groups_per_row: plan.groups_per_row,
            registers: plan.registers,
            threads_per_group: plan.threads_per_group,
        }
    }
}

/// The model mapping's choice among scored candidates (an index), shared
/// by the mapper and the test that holds it against the H200 searches.
/// Ranked by (re-reads resident tiles, predicted µs): on the H200 every
/// streamed pick the model made ran 3-7x slower than register plans of the
/// same problem (the 2026-11-29 large-shape searches), so a streamed
/// plan is chosen only when no register plan is legal. Predictions within
/// 2% are a tie the model cannot resolve; the tie goes to the plan with
/// the fewest groups per row (a cluster costs barriers the model prices
/// only roughly), then the lowest prediction.
pub fn model_pick(scored: &[ModelScore]) -> Option<usize> {
    let streamed_only = scored.iter().all(|c| c.rereads_tiles);
    let pool = || {
        scored
            .iter()
            .enumerate()
            .filter(move |(_, c)| streamed_only || !c.rereads_tiles)
    };
    let fastest = pool()
        .map(|(_, c)| c.predicted_us)
        .fold(f64::INFINITY, f64::min);
    let tied = || pool().filter(move |(_, c)| c.predicted_us <= fastest * 1.02);
    let (_, choice) = tied().min_by(|(_, a), (_, b)| {
        a.groups_per_row
            .cmp(&b.groups_per_row)
            .then(a.predicted_us.total_cmp(&b.predicted_us))
    })?;
    // Among the tied plans of the same group size and row split, the one
    // with the fewest registers: rmsnorm bf16 1024x4096 ran 4.10 µs as
    // W=128 V=8 G=2 against 4.68 as W=64 V=8 G=4, both 256 threads, which
    // the model priced 0.2% apart (2026-11-30-rmsnorm-1024-search-h200).
    tied()
        .filter(|(_, c)| {
            c.threads_per_group == choice.threads_per_group
                && c.groups_per_row == choice.groups_per_row
        })
        .min_by(|(_, a), (_, b)| {
            a.registers
                .cmp(&b.registers)
                .then(a.predicted_us.total_cmp(&b.predicted_us))
        })
        .map(|(i, _)| i)
}

/// The cost model's own answer, before any rule beside it.
pub(crate) enum ModelChoice {
    /// Nothing for the model to choose: the seed mapping's request.
    Seed(LayoutRequest),
    /// The candidate with the lowest prediction (see [`model_pick`]).
    Pick(LayoutRequest),
}

/// The legal schedules of [`model_space`] the model ranks for `request`,
/// leaving out packs the H200 measured too wide
/// ([`super::rules::scalar_pack_too_wide`]) and cross-entropy widths it
/// measured slow ([`super::rules::cross_entropy_width_left_out`]), and
/// cross-entropy clusters without aligned packs
/// ([`super::rules::cross_entropy_cluster_unshifted`]) and long f32
/// layernorm register tiles without early columns
/// ([`super::rules::early_columns_only_with_shared_chunks`]); None where the seed mapping
/// answers (an exact-order reduction). A batch-invariant request is
/// scored at [`CANONICAL_ROWS`] rows.
pub(crate) fn ranked_space(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<Option<Vec<Legal>>, Refusal> {
    let baseline = plan_rows(problem, target, &seed_of(request))?;
    if baseline.order == ReductionOrder::Sequential {
        return Ok(None);
    }
    let scored = if request.batch_invariant {
        Problem {
            shape: Shape {
                rows: CANONICAL_ROWS,
                ..problem.shape
            },
            ..problem.clone()
        }
    } else {
        problem.clone()
    };
    Ok(Some(
        model_space(&scored, target, request)?
            .into_iter()
            .map(|c| super::rules::cross_entropy_cluster_unshifted(&scored, c))
            .map(|c| super::rules::early_columns_only_with_shared_chunks(&scored, c))
            .filter(|c| {
                !super::rules::scalar_pack_too_wide(
                    &scored,
                    &c.target,
                    c.request.pack,
                    c.plan.aligned_packs,
                ) && !super::rules::cross_entropy_width_left_out(&scored, &c.target, &c.plan)
            })
            .collect(),
    ))
}

fn seed_of(request: &LayoutRequest) -> LayoutRequest {
    LayoutRequest {
        mapper: MapperPolicy::Seed,
        ..*request
    }
}

/// The model's pick for `request` among the schedules of [`ranked_space`].
pub(crate) fn model_choice(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<ModelChoice, Refusal> {
    Ok(match ranked_pick(problem, target, request)? {
        Some(ranked) => ModelChoice::Pick(ranked.space[ranked.chosen].request),
        None => ModelChoice::Seed(seed_of(request)),
    })
}

/// The model's ranked space, its pick ([`model_pick`]) and the plan chosen
/// in its place: for a forward, the lighter plan of an exact tie
/// ([`lighter_exact_tie`]).
struct RankedPick {
    space: Vec<Legal>,
    pick: usize,
    chosen: usize,
}

/// [`RankedPick`] of `request`; None where the model has nothing to choose.
fn ranked_pick(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<Option<RankedPick>, Refusal> {
    let Some(space) = ranked_space(problem, target, request)? else {
        return Ok(None);
    };
    let scores: Vec<ModelScore> = space
        .iter()
        .map(|c| ModelScore::of(&c.plan, &c.target))
        .collect();
    let forward = problem
        .operator_kind()
        .is_none_or(|op| op.forward().is_none());
    Ok(model_pick(&scores).map(|pick| RankedPick {
        chosen: if forward {
            lighter_exact_tie(&scores, pick)
        } else {
            pick
        },
        pick,
        space,
    }))
}

/// Why the model's choice for `request` is not its own pick, where an
/// exact tie went to the lighter plan (for `lanefold plan`).
pub(crate) fn exact_tie_note(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Option<String> {
    let ranked = ranked_pick(problem, target, request).ok()??;
    let (pick, chosen) = (
        &ranked.space[ranked.pick].plan,
        &ranked.space[ranked.chosen].plan,
    );
    (ranked.pick != ranked.chosen).then(|| {
        format!(
            "{}, priced within 0.1% of the cost model's fastest plan, in place of its pick {} \
             for fewer registers ({} against {}; 1.02-1.47x on 8 of 11 rows of no list in \
             H200 A B B A, 2026-12-05)",
            chosen.describe(),
            pick.describe(),
            chosen.registers,
            pick.registers
        )
    })
}

/// The plan of fewest registers among those the model priced the very
/// same as the fastest of the `pick`'s kind (within 0.1%; as many groups a
/// row, streamed or not alike), in any group size ([`model_pick`]'s
/// register tie-break stays within one): where the model sees no
/// difference at all, the lighter plan keeps more groups per SM. f32 rows
/// of 11000-14000 held in 512 threads rather than 256, and 500-2000 rows
/// of 1000-11000 in one group of 256 rather than two rows of 64 workers,
/// ran 1.02-1.47x faster on 8 of 11 rows of no list, 0.97-1.0x on 3
/// (`2026-12-05-model-ties-fewer-registers-h200`). A step after the
/// model, not part of its fit, and for forwards only: the backwards it
/// would move (rmsnorm and residual_layernorm f32 on rows of 4096) are
/// unmeasured.
fn lighter_exact_tie(scored: &[ModelScore], pick: usize) -> usize {
    let p = &scored[pick];
    let alike = || {
        scored.iter().enumerate().filter(move |(_, c)| {
            c.rereads_tiles == p.rereads_tiles && c.groups_per_row == p.groups_per_row
        })
    };
    // The fastest prediction of the pick's kind, which the pick's own
    // register tie-break may have left by up to 2%.
    let fastest = alike()
        .map(|(_, c)| c.predicted_us)
        .fold(f64::INFINITY, f64::min);
    alike()
        .filter(|(_, c)| c.predicted_us <= fastest * 1.001 && c.registers < p.registers)
        .min_by(|(_, a), (_, b)| {
            a.registers
                .cmp(&b.registers)
                .then(a.predicted_us.total_cmp(&b.predicted_us))
        })
        .map_or(pick, |(i, _)| i)
}
