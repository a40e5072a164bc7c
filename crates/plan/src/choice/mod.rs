//! Choice: what an automatic request becomes on a target, made before
//! the legality check and only among legal plans. In order:
//!
//! 1. Variants ([`LayoutRequest::with_measured_variants`]): the arithmetic,
//!    load and launch variants of the ladders in [`rules`] and of the
//!    tuning database entry covering the problem.
//! 2. The cost model's pick among the legal schedules of
//!    [`crate::enumeration::model_space`] ([`model::model_pick`]).
//! 3. A rule beside the model in place of that pick: the tuning database's
//!    schedule where an entry covers the problem (`tuning/h200.json`),
//!    else the first range rule of [`rules`] that applies.
//!
//! Explicit requests (W or V given, or the seed mapping) skip 1-3 and
//! batch-invariant requests skip every step whose answer depends on the
//! row count. Every rule names its evidence; `lanefold plan` prints it
//! ([`automatic_note`]).

pub(crate) mod defaults;
pub(crate) mod model;
pub(crate) mod rules;

pub use model::{model_pick, ModelScore};
pub use rules::{occupancy_step_to_try, past_l2};

use crate::legality::{plan_rows, with_cluster_group_threads};
use crate::mapper::{plan, LayoutRequest, Plan, Problem, Refusal, ResidencyRequest};
use crate::schedule::tokens;
use crate::target::Target;
use model::{exact_tie_note, model_choice, ModelChoice};

use rules::{
    cluster_pushed_instead, decode_norm_spread_instead, early_columns_instead,
    few_rows_cross_entropy_cluster_instead, few_rows_narrower_instead, few_rows_one_chunk_instead,
    hinted_stream_instead, one_chunk_instead, one_row_per_multiprocessor, online_register_instead,
    residual_layernorm_pushed_cluster_instead, rmsnorm_wider_group_instead,
    saved_lse_backward_wide_instead, short_f32_one_warp_instead, softmax_decode_pushed_instead,
    tiny_rows_one_thread_instead, whole_row_stream_instead,
};

/// The request the mapper plans for `request`: as given unless the cost
/// model chooses its layout ([`LayoutRequest::model_chooses_layout`]).
pub(crate) fn choose_layout(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<LayoutRequest, Refusal> {
    if request.model_chooses_layout() {
        choose_by_model(problem, target, request)
    } else {
        Ok(*request)
    }
}

impl LayoutRequest {
    /// An automatic request with the variants that paired H200 measurements
    /// showed faster for this problem: those of the ladders in
    /// [`rules::VARIANT_LADDERS`] (operator, dtype, row length, row count,
    /// bytes against the L2) and of the tuning database entry covering it.
    /// Every other request as given, so an explicit layout (a search
    /// candidate, a frozen replay) keeps its recorded arithmetic. The rules
    /// depending on the row count and the database skip batch-invariant
    /// requests, since these variants may change the arithmetic.
    pub fn with_measured_variants(&self, problem: &Problem, target: &Target) -> LayoutRequest {
        if target.name != "h200" || !self.model_chooses_layout() || !problem.program.reassociation {
            return *self;
        }
        let mut request = *self;
        for rung in rules::variant_rungs(problem, target, self.batch_invariant) {
            crate::tuned::add_variants(&mut request, rung);
        }
        if let Some(entry) =
            crate::tuned::lookup(&target.name, problem).filter(|_| !self.batch_invariant)
        {
            entry.add_variants(&mut request);
        }
        request
    }
}

/// The request with W and V filled in by the cost model (see
/// [`crate::MapperPolicy::Model`]), or a rule's in place of the model's
/// pick. An exact-order or element-only request keeps the seed mapping's
/// answer, since the model has nothing to choose there.
fn choose_by_model(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Result<LayoutRequest, Refusal> {
    match model_choice(problem, target, request)? {
        ModelChoice::Seed(seed) => Ok(seed),
        ModelChoice::Pick(pick) => {
            Ok(rule_beside_model(problem, target, request, &pick)?
                .map_or(pick, |rule| rule.request))
        }
    }
}

/// What the cost model ranks for the automatic mapping of `request` on
/// `problem`, after the mapper's first steps (the measured variants, the
/// problem's requested form): each legal candidate's plan and target.
/// Empty where the model chooses nothing (an explicit or exact-order
/// request) or a tuning database entry replaces its pick. For fitting the
/// model's constants against how far its picks move.
pub fn model_candidates(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Vec<(Plan, Target)> {
    let request = request.with_measured_variants(problem, target);
    let problem = &*problem.as_requested(&request);
    if !request.model_chooses_layout() || crate::tuned::lookup(&target.name, problem).is_some() {
        return vec![];
    }
    match model::ranked_space(problem, target, &request) {
        Ok(Some(space)) => space.into_iter().map(|c| (c.plan, c.target)).collect(),
        _ => vec![],
    }
}

/// A rule beside the cost model: the request it puts in place of the
/// model's pick, the model's own plan, and why.
struct RuleBesideModel {
    request: LayoutRequest,
    model_plan: Plan,
    why: String,
}

/// The request a rule beside the cost model puts in place of the model's
/// `pick`: the tuning database's, else the first range rule's, with
/// [`one_row_per_multiprocessor`] applied to it. Only for an automatic
/// residency and a request that may depend on the row count.
fn rule_beside_model(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
    pick: &LayoutRequest,
) -> Result<Option<RuleBesideModel>, Refusal> {
    Ok(
        layout_rule_beside_model(problem, target, request, pick)?.map(|rule| RuleBesideModel {
            request: one_row_per_multiprocessor(problem, target, rule.request),
            ..rule
        }),
    )
}

fn layout_rule_beside_model(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
    pick: &LayoutRequest,
) -> Result<Option<RuleBesideModel>, Refusal> {
    if request.residency != ResidencyRequest::Auto || request.batch_invariant {
        return Ok(None);
    }
    // On the pick's own group size, as the mapper plans it.
    let model_plan = plan_rows(
        problem,
        &with_cluster_group_threads(target, pick.cluster_group_threads)?,
        pick,
    )?;
    if let Some((tuned, evidence)) = tuned_layout_instead(problem, target, pick) {
        return Ok(Some(RuleBesideModel {
            request: tuned,
            model_plan,
            why: format!("the tuning database's schedule for this problem ({evidence})"),
        }));
    }
    // The range rules hold where they were measured: the H200 target
    // (which the H100 runs plan on too), not the CPU executor's.
    if target.name != "h200" {
        return Ok(None);
    }
    let rule = RANGE_RULES
        .iter()
        .find_map(|(rule, why)| Some((rule(problem, target, &model_plan, request, pick)?, why)));
    Ok(rule.map(|(request, why)| RuleBesideModel {
        request,
        model_plan,
        why: why.to_string(),
    }))
}

/// A range rule beside the model: given the problem, the target, the
/// model's plan, the request and the model's pick, the request in place of
/// that pick, or None where the rule does not apply.
type RangeRule =
    fn(&Problem, &Target, &Plan, &LayoutRequest, &LayoutRequest) -> Option<LayoutRequest>;

/// The range rules of [`rules`] in the order they are tried, each with
/// the note `lanefold plan` prints for it.
const RANGE_RULES: &[(RangeRule, &str)] = &[
    (
        |p, t, m, _, pick| few_rows_cross_entropy_cluster_instead(p, t, m, pick),
        "cross-entropy on fewer rows than half the multiprocessors, rows of \
         40000-131072: a cluster a row, pushed, its groups as many as fit in \
         1.5 waves, of 256 threads past one wave of four (one group a row \
         1.05-1.87x slower in H200 A B B A on rows of no list, 2026-12-05); in \
         two groups unrolled by 8 where that covers the row (U=4 1.07-1.16x \
         slower, H100 and H200, 2026-12-06); misaligned rows in aligned packs \
         (one group a row 1.33-1.56x slower, H200, 2026-12-06); up to as many \
         rows as multiprocessors, rows of 70000-250000 the model spans in a \
         cluster of 1024-thread groups in four groups of 256 a row, pushed (the \
         cluster picks 1.02-1.41x slower, H100, 2026-12-07)",
    ),
    (
        |p, t, m, _, pick| residual_layernorm_pushed_cluster_instead(p, t, m, pick),
        "residual_layernorm on 16-byte aligned rows of 26000-32767 larger than \
         the L2, picked in a fenced cluster: a pushed cluster of eight groups \
         of 256 in 16-byte packs (the fenced picks 1.20-1.62x slower in H100 A \
         B B A on rows of no list, 2026-12-07)",
    ),
    (
        |p, t, m, _, pick| decode_norm_spread_instead(p, t, m, pick),
        "norm rows of 28-112 KB on at most half the multiprocessors: the row \
         spread over as many groups of 512 as keep the rows within one wave, \
         pushed, or one group of 1024 where that is two (one group of 512 \
         1.01-1.48x slower in H100 A B B A on rows of no list, 2026-12-06)",
    ),
    (
        |p, t, m, _, pick| few_rows_narrower_instead(p, t, m, pick),
        "fewer rows than multiprocessors: at most 512 workers per row (256 for \
         softmax and cross-entropy), every pack in flight (one block reduction \
         over fewer warps; 1.05-1.22x on 1-64 x 4096 in the H200 grid searches \
         of 2026-11-30)",
    ),
    (
        |p, t, m, _, pick| saved_lse_backward_wide_instead(p, t, m, pick),
        "bf16 cross-entropy backward from a saved lse on rows of 16384-100000: \
         one group of 1024 workers a row (the W=512 picks 1.008-1.26x slower in \
         H200 searches of rows of no list, 2026-12-03)",
    ),
    (
        |p, t, m, _, pick| few_rows_one_chunk_instead(p, t, m, pick),
        "short rmsnorm rows, bf16 layernorm rows of 640 or more and bf16 \
         residual_layernorm rows of 257-512, fewer than multiprocessors: one \
         chunk a worker (one warp a row 1.06-1.86x slower in H200 searches and \
         A B B A on rows of no list, 2026-12-03 and 2026-12-06)",
    ),
    (
        |p, t, m, _, pick| tiny_rows_one_thread_instead(p, t, m, pick),
        "f32 and bf16 sums and softmax over rows of at most 16 elements in \
         their tens of thousands: one thread a row (the W=8 picks 1.13-4.9x \
         slower in the H200 searches of 2026-12-03)",
    ),
    (
        |p, t, _, _, pick| online_register_instead(p, t, pick),
        "16-bit softmax on rows of 18432-32767 larger than the L2: a register \
         plan with the online normalizer, two groups per SM (the streamed plan \
         1.12-1.42x slower in H200 A B B A on rows of no list, 2026-12-04)",
    ),
    (
        |p, t, m, _, pick| whole_row_stream_instead(p, t, m, pick),
        "rows of 4096-8192 larger than the L2: streamed with re-read hints, the \
         whole row in one chunk per pass (1.02-1.05x over the model's picks in \
         2026-11-30-t1s-*-h200)",
    ),
    (
        |p, t, m, _, pick| hinted_stream_instead(p, t, m, pick),
        "a streamed plan with re-read hints: bf16 softmax rows of 32769-65535 \
         larger than the L2 in 512-worker groups (the model's register tiles \
         and clusters ran 1.02-1.89x slower), else where 64 private slots per \
         thread compile to 108-128 registers on sm_90 (the streamed plans \
         measured 1.02-1.11x faster)",
    ),
    (
        |p, t, _, _, pick| short_f32_one_warp_instead(p, t, pick),
        "misaligned f32 rmsnorm, layernorm and softmax rows under 64 elements, \
         one to eight a multiprocessor: one warp a row of scalars, eight rows \
         a group (aligned packs of four 1.25-1.48x slower in H100 A B B A on \
         rows of no list, 2026-12-07)",
    ),
    (
        |p, t, m, _, pick| one_chunk_instead(p, t, m, pick),
        "short rmsnorm rows of at most a wave of 256-thread groups: one chunk a \
         worker, at most 256 workers (the narrow picks 1.04-1.30x slower in the \
         H200 searches of 2026-12-03); bf16 residual_layernorm rows of 257-512 \
         from the SM count up in groups of 256 threads (one warp a row \
         1.10-1.16x slower in H100 A B B A on rows of no list, 2026-12-07)",
    ),
    (
        |p, t, m, request, _| softmax_decode_pushed_instead(p, t, m, request),
        "softmax decode rows of 32768-131071, at most 64, picked in one group a \
         row: the model's pick with partials pushed, or on at most 16 \
         misaligned 16-bit rows the widest pushed cluster (the one-group picks \
         1.11-2.16x slower in H100 A B B A on rows of no list, 2026-12-06)",
    ),
    (
        |p, t, m, _, pick| cluster_pushed_instead(p, t, m, pick),
        "softmax rows under 131072 spanning a cluster, and rmsnorm and \
         layernorm rows of 65536-131071: the same layout, partials pushed (the \
         unpushed plans 1.08-2.19x and 1.035-1.17x slower in H100 A B B A on \
         rows of no list, 2026-12-06 and 2026-12-07)",
    ),
    (
        |p, t, m, _, pick| rmsnorm_wider_group_instead(p, t, m, pick),
        "rmsnorm rows picked in one narrow group: bf16 rows of 13000-16384 on \
         a tile of 24-64 MiB in one group of 512, every chunk in flight (the \
         256-thread picks 1.10-1.34x slower in H100 and H200 A B B A on rows \
         of no list, 2026-12-06 and 2026-12-07); f32 rows of 20000-28000 on \
         one to two rows a multiprocessor in one group of 1024 (the narrow \
         picks 1.26-2.19x slower in H100 A B B A on rows of no list, 2026-12-07)",
    ),
    (
        |p, t, m, _, pick| early_columns_instead(p, t, m, pick),
        "every chunk's weight and bias loaded before the reduction, on an \
         output phase of three chunks or more and a problem within the L2 (the \
         column loads otherwise wait on each chunk's store in turn; 1.01-1.42x \
         in the H200 searches of 2026-12-03)",
    ),
];

/// The shipped tuning database's schedule for this problem in place of
/// the model's `pick` ([`crate::tuned`]: `tuning/h200.json`), with the
/// entry's evidence and results directory; None where no entry covers the
/// problem or the mapper refuses the entry's layout.
fn tuned_layout_instead(
    problem: &Problem,
    target: &Target,
    pick: &LayoutRequest,
) -> Option<(LayoutRequest, String)> {
    let entry = crate::tuned::lookup(&target.name, problem)?;
    let request = entry.with_layout(pick);
    let target = with_cluster_group_threads(target, request.cluster_group_threads).ok()?;
    plan_rows(problem, &target, &request)
        .ok()
        .map(|_| (request, format!("{}; {}", entry.evidence, entry.results)))
}

/// Why the automatic mapping of `request` is not the cost model's own
/// pick, when a rule beside the model replaced it (for `lanefold plan`).
pub fn automatic_note(
    problem: &Problem,
    target: &Target,
    request: &LayoutRequest,
) -> Option<String> {
    if !request.model_chooses_layout() {
        return None;
    }
    let measured = request.with_measured_variants(problem, target);
    let mut notes = vec![];
    // The tokens the ladders and the tuning database added, where the plan
    // realises them (a cluster variant changes nothing on a row one group
    // holds, packed tiles nothing on a plan with none): no note otherwise.
    let asked = tokens(request);
    let realised: Vec<&str> = plan(problem, target, request)
        .map(|p| {
            tokens(&p.schedule())
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        })
        .unwrap_or_default();
    let chosen: Vec<String> = tokens(&measured)
        .into_iter()
        .filter(|token| !asked.contains(token) && realised.contains(&token.0))
        .map(|(_, t)| variant_note(&t).map_or(t.clone(), String::from))
        .collect();
    if !chosen.is_empty() {
        notes.push(format!(
            "automatic on the H200 for this operator and row length: {}; \
             each measured faster in paired benches",
            chosen.join("; ")
        ));
    }
    if let Some(rule) = model_rule_note(problem, target, &measured)
        .or_else(|| exact_tie_note(&problem.as_requested(&measured), target, &measured))
    {
        notes.push(rule);
    }
    (!notes.is_empty()).then(|| notes.join("\n"))
}

/// What a variant token the automatic request takes does, for its note
/// in `lanefold plan`.
fn variant_note(token: &str) -> Option<&'static str> {
    let name = token.split_once('=').map_or(token, |(name, _)| name);
    Some(match name {
        "online-normalizer" => "the online normalizer (the maximum and the sum in one pass)",
        "one-pass-moments" => "one-pass moments (two phases instead of three)",
        "staged-columns" => "the weight staged in shared memory while the row is reduced",
        "packed-resident" => "resident 16-bit tiles packed two values per register",
        "ordered-columns" => "weight and bias loaded a chunk at a time after the earlier stores",
        "early-columns" => "the first n chunks' weight and bias loaded before the exchange",
        "rounded-resident" => "h kept resident instead of x and the residual",
        "keep-columns" => "weight and bias loaded evict-last, kept in L2 by the rows' stream",
        "l2-prefetch" => "each group's share of a row ahead prefetched into L2 as it starts",
        "push-reduce" => "the cluster's partials pushed by st.async (no release barrier)",
        "aligned-packs" => "misaligned rows read in aligned packs (vectors but a row's ends)",
        "unguarded-stores" => "no row guard on the stores, so a worker loads ahead of them",
        "recompute-derived" => "x - mean recomputed in the output phase, not kept as a tile",
        _ => return None,
    })
}

/// The rule beside the cost model that replaced its pick, if one did.
fn model_rule_note(problem: &Problem, target: &Target, request: &LayoutRequest) -> Option<String> {
    let problem = &*problem.as_requested(request);
    let target = with_cluster_group_threads(target, request.cluster_group_threads).ok()?;
    // The path `choose_by_model` takes, so the note names the rule that ran.
    let ModelChoice::Pick(pick) = model_choice(problem, &target, request).ok()? else {
        return None;
    };
    let rule = rule_beside_model(problem, &target, request, &pick).ok()??;
    let picked = rule.model_plan.describe();
    if plan_rows(problem, &target, &rule.request).is_ok_and(|p| p.describe() == picked) {
        return Some(format!("{}, the cost model's pick as well", rule.why));
    }
    Some(format!(
        "{} replaces the cost model's pick {picked}",
        rule.why
    ))
}

#[cfg(test)]
mod tests;
