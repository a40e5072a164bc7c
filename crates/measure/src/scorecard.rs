//! The speed targets, judged case by case from replay files: a verdict
//! computed from the recorded per-round p50s and paired ratios, never
//! typed in by hand. The targets (each family's shapes and what a case
//! must show in every round) are read from a TOML file, bench/targets.toml,
//! so changing a threshold is an edit there and not a rebuild.

use crate::peer::PeerMode;
use crate::replay::{PhaseStats, ReplayCase, ReplayFile, CANDIDATE, TORCH};
use crate::search::{SearchFile, SearchProblem};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

/// What a case of a family must show.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Criterion {
    /// At least `min_tbps` effective bandwidth (median over rounds) and
    /// faster than every peer side that ran, in every round it ran.
    Bandwidth { min_tbps: f64 },
    /// GPU time at most the better of torch eager and torch.compile in every
    /// round; single-call host latency at most `max_single_us` and at most
    /// `max_single_of_eager` times torch eager's, in every round.
    ShortRows {
        max_single_us: f64,
        max_single_of_eager: f64,
    },
    /// Judged from searches: the automatic mapping reaches at least
    /// `min_fraction` of the searched winner's throughput.
    Automatic { min_fraction: f64 },
}

/// A target family: its name, shapes and criterion.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: String,
    pub shapes: Vec<String>,
    pub criterion: Criterion,
}

/// The targets the scorecard judges: the families judged from replays,
/// and the automatic mapping judged from searches on their shapes (as the
/// searching binary's mapper picked, and as this binary's picks).
#[derive(Clone, Debug, PartialEq)]
pub struct Targets {
    pub families: Vec<Family>,
    pub automatic: Family,
    pub automatic_today: Family,
    /// The shape corpus targets (`[corpus]`), where the file has them.
    pub corpus: Option<crate::corpus_score::CorpusTargets>,
    /// The targets of the corpus's input gradients (`[corpus_backward]`).
    pub corpus_backward: Option<crate::corpus_score::CorpusTargets>,
}

/// bench/targets.toml as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetsToml {
    family: Vec<FamilyToml>,
    automatic: AutomaticToml,
    corpus: Option<crate::corpus_score::CorpusToml>,
    corpus_backward: Option<crate::corpus_score::CorpusToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FamilyToml {
    name: String,
    shapes: Vec<String>,
    min_tbps: Option<f64>,
    max_single_us: Option<f64>,
    max_single_of_eager: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AutomaticToml {
    name: String,
    min_fraction: f64,
}

impl Targets {
    /// The targets in `text` (TOML), or what is wrong with it.
    pub fn parse(text: &str) -> Result<Targets, String> {
        let raw: TargetsToml = toml::from_str(text).map_err(|e| e.to_string())?;
        let positive = |name: &str, what: &str, x: f64| {
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(format!(
                    "target {name:?}: {what} must be a positive number, not {x}"
                ))
            }
        };
        let mut families: Vec<Family> = vec![];
        for f in raw.family {
            let criterion = match (f.min_tbps, f.max_single_us, f.max_single_of_eager) {
                (Some(t), None, None) => Criterion::Bandwidth {
                    min_tbps: positive(&f.name, "min_tbps", t)?,
                },
                (None, Some(us), Some(of)) => Criterion::ShortRows {
                    max_single_us: positive(&f.name, "max_single_us", us)?,
                    max_single_of_eager: positive(&f.name, "max_single_of_eager", of)?,
                },
                _ => {
                    let one = "give either min_tbps, or max_single_us with max_single_of_eager";
                    return Err(format!("target {:?}: {one}", f.name));
                }
            };
            if f.shapes.is_empty() {
                return Err(format!("target {:?}: no shapes", f.name));
            }
            for shape in &f.shapes {
                if let Some(other) = families.iter().find(|o| o.shapes.contains(shape)) {
                    return Err(format!(
                        "shape {shape} is in both {:?} and {:?}",
                        other.name, f.name
                    ));
                }
            }
            if families.iter().any(|o| o.name == f.name) {
                return Err(format!("target {:?} is named twice", f.name));
            }
            families.push(Family {
                name: f.name,
                shapes: f.shapes,
                criterion,
            });
        }
        let criterion = Criterion::Automatic {
            min_fraction: positive(
                &raw.automatic.name,
                "min_fraction",
                raw.automatic.min_fraction,
            )?,
        };
        let section = |raw: Option<crate::corpus_score::CorpusToml>, name| {
            raw.map(|r| crate::corpus_score::CorpusTargets::from_toml(r, name))
                .transpose()
        };
        Ok(Targets {
            corpus: section(raw.corpus, "corpus")?,
            corpus_backward: section(raw.corpus_backward, "corpus_backward")?,
            families,
            automatic_today: Family {
                name: format!("{}, this binary's mapper", raw.automatic.name),
                shapes: vec![],
                criterion,
            },
            automatic: Family {
                name: raw.automatic.name,
                shapes: vec![],
                criterion,
            },
        })
    }

    /// The targets in the file at `path`.
    pub fn read(path: &Path) -> anyhow::Result<Targets> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read targets file {}: {e}", path.display()))?;
        Targets::parse(&text)
            .map_err(|e| anyhow::anyhow!("targets file {}: {}", path.display(), e.trim_end()))
    }

    /// The family a shape belongs to, if any.
    pub fn family_of(&self, shape: &str) -> Option<&Family> {
        self.families
            .iter()
            .find(|f| f.shapes.iter().any(|s| s == shape))
    }

    fn all(&self) -> impl Iterator<Item = &Family> {
        self.families
            .iter()
            .chain([&self.automatic, &self.automatic_today])
    }
}

/// One case's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub id: String,
    pub family: String,
    pub rounds: usize,
    /// The candidate's headline (median of round p50s) in the objective
    /// phase, µs, and what it is as TB/s of bytes moved.
    pub candidate_us: Option<f64>,
    pub tbps: Option<f64>,
    /// Each requirement the case missed, in words with its numbers.
    pub misses: Vec<String>,
    /// Set where this binary's default mapping differs from the layout
    /// the verdict is about (the verdict then says nothing about today's).
    pub todays_default: Option<String>,
    /// The layout is today's default, but this binary generates another
    /// kernel source for it than the one measured (codegen changed since;
    /// such drift otherwise shows only by replaying).
    pub kernel_changed: bool,
    /// Automatic mapping only: the searched winner's p50 over this layout's, so a
    /// met verdict shows its margin over the line.
    pub of_winner: Option<f64>,
}

impl Verdict {
    pub fn met(&self) -> bool {
        self.misses.is_empty()
    }
}

/// Verdicts for every case of `file` whose shape a family names.
pub fn score(file: &ReplayFile, targets: &Targets) -> Vec<Verdict> {
    let peers = file.peer_sides();
    file.cases
        .iter()
        .filter_map(|case| {
            targets
                .family_of(&case.shape)
                .map(|f| verdict(case, f, &peers))
        })
        .collect()
}

fn verdict(case: &ReplayCase, family: &Family, peers: &[String]) -> Verdict {
    let mut misses = vec![];
    let objective = case.stats.phases.get(&case.stats.objective);
    let candidate_us = objective.and_then(|p| p.headline.get(CANDIDATE).copied().flatten());
    let tbps = candidate_us.map(|us| case.bytes_moved as f64 / us / 1e6);
    let rounds = case.rounds.len();
    match (objective, family.criterion) {
        (None, _) => misses.push(format!("no {} phase recorded", case.stats.objective)),
        (Some(phase), Criterion::Bandwidth { min_tbps }) => {
            match tbps {
                Some(t) if t >= min_tbps => {}
                Some(t) => misses.push(format!("{t:.2} TB/s < {min_tbps:.1}")),
                None => misses.push("no candidate time".into()),
            }
            for peer in peers {
                // Faster in every round the peer ran: ratio peer / candidate > 1.
                if let Some(worst) = worst_ratio(phase, peer) {
                    if worst <= 1.0 {
                        misses.push(format!("{peer} faster in a round ({worst:.3}x)"));
                    }
                }
            }
        }
        (Some(_), Criterion::Automatic { .. }) => misses.push("judged from search files".into()),
        (
            Some(phase),
            Criterion::ShortRows {
                max_single_us,
                max_single_of_eager,
            },
        ) => {
            let eager = PeerMode::Eager.side();
            let compile = PeerMode::Compile.side();
            for peer in [eager, compile] {
                if !peers.iter().any(|p| p == peer) {
                    misses.push(format!("{peer} not measured"));
                } else if let Some(worst) = worst_ratio(phase, peer) {
                    // At most the peer's time: ratio peer / candidate >= 1.
                    if worst < 1.0 {
                        misses.push(format!("{peer} faster in a round ({worst:.3}x)"));
                    }
                }
            }
            match case.stats.phases.get("single_host") {
                None => misses.push("no single-call host phase".into()),
                Some(single) => {
                    let mine = round_p50s(single, CANDIDATE);
                    match mine.iter().flatten().copied().reduce(f64::max) {
                        None => misses.push("no single-call host time".into()),
                        Some(slowest) if slowest > max_single_us => misses.push(format!(
                            "single call {slowest:.1} µs > {max_single_us:.0} in a round"
                        )),
                        Some(_) => {}
                    }
                    let theirs = round_p50s(single, TORCH);
                    let half = mine.iter().zip(&theirs).all(|(m, t)| match (m, t) {
                        (Some(m), Some(t)) => *m <= max_single_of_eager * t,
                        _ => true,
                    });
                    if !half {
                        misses.push(format!(
                            "single call above {max_single_of_eager}x torch eager's in a round"
                        ));
                    }
                }
            }
        }
    }
    Verdict {
        id: case.id.clone(),
        family: family.name.clone(),
        rounds,
        candidate_us,
        tbps,
        misses,
        todays_default: None,
        kernel_changed: false,
        of_winner: None,
    }
}

/// The automatic mapping for every problem of `file` on a target shape: the automatic
/// candidate's measured objective p50 (through its duplicate when it was
/// measured once under another request) against the winner's fresh p50.
pub fn score_search(file: &SearchFile, targets: &Targets) -> Vec<Verdict> {
    judged_problems(file, targets)
        .map(|p| automatic_verdict_at(p, p.automatic, &targets.automatic))
        .collect()
}

/// The problems of `file` that the automatic mapping is judged on: those
/// on a target shape, in searches for throughput (a single-call search
/// ranks latency).
fn judged_problems<'a>(
    file: &'a SearchFile,
    targets: &'a Targets,
) -> impl Iterator<Item = &'a SearchProblem> {
    let throughput = file.objective != crate::search::Objective::Single;
    file.problems
        .iter()
        .filter(move |p| throughput && targets.family_of(&p.shape).is_some())
}

/// `resolved` without the tokens the CUDA runtime adds when it resolves a
/// norm's cold path (an occupancy promise, or `no-cold-path`) where the
/// plan as planned, `planned`, has none: the device's realization of
/// today's pick matches the pick.
fn as_planned(resolved: &str, planned: &str) -> String {
    let promised = planned.split(' ').any(|t| t.starts_with("occupancy="));
    let plain = planned.split(' ').any(|t| t == "no-cold-path");
    resolved
        .split(' ')
        .filter(|t| (promised || !t.starts_with("occupancy=")) && (plain || *t != "no-cold-path"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The automatic mapping for today's mapper: each problem of `file` on a target shape
/// planned again with today's default request (the base's load and launch
/// policies kept) on `target`; the pick's time is
/// that of the measured candidate with the same layout description, if
/// the search measured one.
pub fn score_search_today(
    file: &SearchFile,
    target: &lanefold_plan::Target,
    targets: &Targets,
) -> Vec<Verdict> {
    judged_problems(file, targets)
        .map(|problem| {
            let today = todays_pick(problem, target);
            let pick = today
                .as_ref()
                .map(|plan| plan.describe())
                .map_err(Clone::clone);
            let measured = pick.as_ref().ok().and_then(|describe| {
                let measured_as = |same: &dyn Fn(&str) -> bool| {
                    problem.candidates.iter().position(|c| {
                        c.plan.as_ref().is_some_and(|p| same(&p.describe))
                            && (c.objective_p50.is_some() || c.duplicate_of.is_some())
                    })
                };
                measured_as(&|d| d == describe)
                    .or_else(|| measured_as(&|d| as_planned(d, describe) == *describe))
            });
            let mut v = automatic_verdict_at(problem, measured, &targets.automatic_today);
            if let (Ok(plan), Some(at)) = (&today, measured) {
                // Through a duplicate to the candidate that was measured.
                let c = &problem.candidates[at];
                let c = c.duplicate_of.map_or(c, |d| &problem.candidates[d]);
                v.kernel_changed = kernel_differs(plan, c.source_sha256.as_deref());
            }
            match (&pick, measured) {
                (Err(e), _) => v.misses = vec![format!("today's mapper refuses it: {e}")],
                (Ok(describe), None) => {
                    v.misses = vec![format!("today's pick {describe} was not measured here")];
                    v.todays_default = Some(describe.clone());
                }
                _ => {}
            }
            // A search run with a policy the default does not take (an
            // experiment) says nothing about the plain default's pick.
            let plain = lanefold_plan::LayoutRequest::default();
            if let (Ok(with_policies), Ok(default)) = (
                &pick,
                default_plan(&problem.op, &problem.dtype, &problem.shape, &plain, target)
                    .map(|plan| plan.describe()),
            ) {
                if *with_policies != default {
                    v.todays_default = Some(default);
                }
            }
            v
        })
        .collect()
}

/// Marks each replay verdict whose candidate layout is not what this
/// binary's default mapping picks on `target` today: the plain automatic
/// request, so a candidate replayed with a policy the default does not
/// take (an experiment) is marked too.
pub fn mark_todays_default(
    verdicts: &mut [Verdict],
    file: &ReplayFile,
    target: &lanefold_plan::Target,
) {
    let request = lanefold_plan::LayoutRequest::default();
    for v in verdicts.iter_mut() {
        let Some(case) = file.cases.iter().find(|c| c.id == v.id) else {
            continue;
        };
        match default_plan(&case.op, &case.dtype, &case.shape, &request, target) {
            Ok(today) if today.describe() != case.candidate.describe => {
                v.todays_default = Some(today.describe())
            }
            Ok(today) => {
                v.kernel_changed =
                    kernel_differs(&today, case.candidate.recorded_source_sha256.as_deref())
            }
            Err(e) => v.todays_default = Some(format!("refused today: {e}")),
        }
    }
}

fn todays_pick(
    problem: &SearchProblem,
    target: &lanefold_plan::Target,
) -> Result<lanefold_plan::Plan, String> {
    // Old searches recorded the seed mapper or fixed cluster group sizes
    // in their base: only its policies carry over.
    let request = problem.base.automatic_with_policies();
    default_plan(
        &problem.op,
        &problem.dtype,
        &problem.shape,
        &request,
        target,
    )
}

/// The default mapping's plan for one problem.
fn default_plan(
    op: &str,
    dtype: &str,
    shape: &str,
    request: &lanefold_plan::LayoutRequest,
    target: &lanefold_plan::Target,
) -> Result<lanefold_plan::Plan, String> {
    let p = crate::replay::problem_named(op, dtype, shape).map_err(|e| e.to_string())?;
    lanefold_plan::plan(&p, target, request).map_err(|e| e.to_string())
}

/// Does this binary generate another kernel source for `plan` than the
/// measured one (`recorded`, where the file has it)?
fn kernel_differs(plan: &lanefold_plan::Plan, recorded: Option<&str>) -> bool {
    let options = lanefold_codegen::CodegenOptions::default();
    match (
        recorded,
        lanefold_cuda::kernel_source_sha256(plan, &options),
    ) {
        (Some(recorded), Ok(today)) => recorded != today,
        _ => false,
    }
}

/// Candidate `at` (followed through duplicates) against the fresh winner.
fn automatic_verdict_at(
    problem: &SearchProblem,
    mut at: Option<usize>,
    family: &Family,
) -> Verdict {
    let Criterion::Automatic { min_fraction } = family.criterion else {
        unreachable!("the automatic mapping has an Automatic criterion")
    };
    let mut misses = vec![];
    while let Some(dup) = at.and_then(|i| problem.candidates.get(i)?.duplicate_of) {
        at = Some(dup);
    }
    let automatic_us = at.and_then(|i| problem.candidates.get(i)?.objective_p50);
    let winner = problem.winner.as_ref();
    let winner_us = winner.and_then(|w| w.fresh_p50);
    let of_winner = automatic_us.zip(winner_us).map(|(auto, best)| best / auto);
    match (automatic_us, winner_us, of_winner) {
        (None, ..) => misses.push("automatic mapping not measured".into()),
        (_, None, _) => misses.push(format!(
            "no winner ({})",
            problem
                .no_winner
                .as_deref()
                .unwrap_or("no fresh measurement")
        )),
        (_, Some(best), Some(f)) if f < min_fraction => misses.push(format!(
            "automatic reaches {:.0}% of the searched winner ({best:.2} µs, {})",
            100.0 * f,
            winner.map_or("", |w| w.describe.as_str())
        )),
        _ => {}
    }
    Verdict {
        id: problem.id.clone(),
        family: family.name.clone(),
        rounds: 1,
        candidate_us: automatic_us,
        tbps: automatic_us.map(|us| problem.bytes_moved as f64 / us / 1e6),
        misses,
        todays_default: None,
        kernel_changed: false,
        of_winner,
    }
}

fn round_p50s(phase: &PhaseStats, side: &str) -> Vec<Option<f64>> {
    phase.p50s.get(side).cloned().unwrap_or_default()
}

/// The smallest paired per-round ratio peer / candidate, over the rounds
/// where both ran (None: never both): the recorded gain summary's minimum.
fn worst_ratio(phase: &PhaseStats, peer: &str) -> Option<f64> {
    Some(phase.peer_gain(peer)?.summary.as_ref()?.min)
}

/// The verdicts of one results directory, with when it was measured.
#[derive(Clone, Debug)]
pub struct Scored {
    pub dir: String,
    /// The file's environment `utc_time` (ISO 8601, so it sorts).
    pub utc_time: String,
    pub verdicts: Vec<Verdict>,
}

/// A verdict with the directory it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced {
    pub verdict: Verdict,
    pub source: String,
}

/// Where each case stands across many directories: per target and case,
/// the latest verdict about the layout this binary picks by default, or,
/// where no directory measured that layout, the latest verdict at all
/// (still marked as not today's default). Directories are ordered by the
/// time they were measured, not by the order given.
pub fn standing(scored: &[Scored]) -> Vec<Sourced> {
    let mut order: Vec<&Scored> = scored.iter().collect();
    order.sort_by(|a, b| a.utc_time.cmp(&b.utc_time));
    let mut out: Vec<Sourced> = vec![];
    for s in order {
        for v in &s.verdicts {
            let candidate = Sourced {
                verdict: v.clone(),
                source: s.dir.clone(),
            };
            match out
                .iter_mut()
                .find(|o| o.verdict.family == v.family && o.verdict.id == v.id)
            {
                None => out.push(candidate),
                Some(o) if v.todays_default.is_none() || o.verdict.todays_default.is_some() => {
                    *o = candidate
                }
                Some(_) => {}
            }
        }
    }
    out
}

/// A markdown table of verdicts, grouped by family, with a count per family.
pub fn markdown(verdicts: &[Verdict], targets: &Targets) -> String {
    let rows: Vec<(&Verdict, Option<&str>)> = verdicts.iter().map(|v| (v, None)).collect();
    table(&rows, targets)
}

/// [`markdown`] for a [`standing`], with each verdict's directory.
pub fn standing_markdown(standing: &[Sourced], targets: &Targets) -> String {
    let rows: Vec<(&Verdict, Option<&str>)> = standing
        .iter()
        .map(|s| (&s.verdict, Some(s.source.as_str())))
        .collect();
    table(&rows, targets)
}

fn table(rows: &[(&Verdict, Option<&str>)], targets: &Targets) -> String {
    let mut md = String::new();
    let sourced = rows.iter().any(|(_, source)| source.is_some());
    for family in targets.all() {
        let mine: Vec<&(&Verdict, Option<&str>)> = rows
            .iter()
            .filter(|(v, _)| v.family == family.name)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let met = mine.iter().filter(|(v, _)| v.met()).count();
        let _ = writeln!(
            md,
            "\n## Target {}: {met} of {} cases met\n",
            family.name,
            mine.len()
        );
        // A search is one round: the automatic tables have no rounds column.
        let automatic = matches!(family.criterion, Criterion::Automatic { .. });
        if family.name == targets.automatic.name {
            md += "The automatic mapping as the binary that ran the search resolved it (a later mapper may pick otherwise); µs is its measured p50.\n";
        }
        if family.name == targets.automatic_today.name {
            md += "The automatic mapping of the binary writing this, looked up by layout among the candidates the search measured; µs is that candidate's measured p50.\n";
        }
        if automatic {
            md += "A met verdict shows the searched winner's p50 as a percentage of this layout's.\n\n";
        }
        let mut head = vec!["case"];
        let mut align = vec!["---"];
        if !automatic {
            head.push("rounds");
            align.push("---:");
        }
        head.extend(["µs", "TB/s", "verdict"]);
        align.extend(["---:", "---:", "---"]);
        if sourced {
            head.push("from");
            align.push("---");
        }
        let _ = writeln!(md, "| {} |\n|{}|", head.join(" | "), align.join("|"));
        for (v, source) in mine {
            let num = |x: Option<f64>, d: usize| x.map_or("—".into(), |x| format!("{x:.d$}"));
            let mut verdict = if v.met() {
                match v.of_winner {
                    Some(f) => format!("met, {:.0}%", 100.0 * f),
                    None => "met".to_string(),
                }
            } else {
                v.misses.join("; ")
            };
            if let Some(today) = &v.todays_default {
                let _ = write!(verdict, " (not today's default: {today})");
            } else if v.kernel_changed {
                verdict.push_str(" (today's kernel for this layout differs from the one measured)");
            }
            let _ = write!(md, "| {} |", v.id);
            if !automatic {
                let _ = write!(md, " {} |", v.rounds);
            }
            let _ = write!(
                md,
                " {} | {} | {verdict} |",
                num(v.candidate_us, 2),
                num(v.tbps, 2)
            );
            match source {
                Some(dir) => {
                    let _ = writeln!(md, " {dir} |");
                }
                None => md.push('\n'),
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    /// A search's automatic candidate, resolved on the device with the cold
    /// path's occupancy promise (or the plain kernel), is today's pick as
    /// planned; a pick that makes its own promise is not stripped.
    #[test]
    fn regression_a_device_resolved_automatic_candidate_is_todays_pick() {
        let pick = "W=128 V=8 U=4 G=2 registers early-columns=4";
        assert_eq!(as_planned(&format!("{pick} occupancy=4"), pick), pick);
        assert_eq!(as_planned(&format!("{pick} no-cold-path"), pick), pick);
        let own = "W=128 V=8 U=4 G=2 registers occupancy=2";
        assert_eq!(
            as_planned("W=128 V=8 U=4 G=2 registers occupancy=4", own),
            "W=128 V=8 U=4 G=2 registers occupancy=4"
        );
        assert_ne!(
            as_planned("W=64 V=8 U=4 G=4 registers occupancy=4", pick),
            pick
        );
    }

    use super::*;

    /// The committed targets file.
    fn targets() -> Targets {
        let path = format!("{}/../../bench/targets.toml", env!("CARGO_MANIFEST_DIR"));
        Targets::read(Path::new(&path)).unwrap()
    }

    fn committed(dir: &str) -> ReplayFile {
        let path = format!(
            "{}/../../bench/results/{dir}/results.json",
            env!("CARGO_MANIFEST_DIR")
        );
        ReplayFile::read(std::path::Path::new(&path)).unwrap()
    }

    /// Against the committed final large-shape replay (one round, all
    /// three peers): verdicts follow from its recorded numbers.
    #[test]
    fn large_shape_verdicts_follow_the_recorded_ratios() {
        let verdicts = score(&committed("2026-11-29-large-final-replay-h200"), &targets());
        assert_eq!(verdicts.len(), 24);
        let get = |id: &str| verdicts.iter().find(|v| v.id == id).unwrap();
        // sum f32 32768x4096: 4.53 TB/s, faster than eager and compile.
        let sum = get("sum/f32/32768x4096");
        assert!(sum.met(), "{:?}", sum.misses);
        assert!((sum.tbps.unwrap() - 4.526).abs() < 0.01);
        // rmsnorm f32 32768x4096: 4.13 TB/s, torch.compile 0.967x.
        let rms = get("rmsnorm/f32/32768x4096");
        assert_eq!(rms.misses.len(), 1, "{:?}", rms.misses);
        assert!(rms.misses[0].starts_with("torch-compile faster"));
        // residual_layernorm bf16 4096x32768: both under 4 TB/s and slower.
        let res = get("residual_layernorm/bf16/4096x32768");
        assert!(res.misses[0].contains("TB/s < 4.0"), "{:?}", res.misses);
        assert!(res.misses.iter().any(|m| m.starts_with("torch-compile")));
        // Liger refuses residual_layernorm: no verdict on a peer that never ran.
        assert!(!res.misses.iter().any(|m| m.contains("liger")));
        let md = markdown(&verdicts, &targets());
        assert!(md.contains("## Target 1 large shapes: "), "{md}");
    }

    /// A Quack side is judged as every peer side that ran: where it is the
    /// fastest peer, the bandwidth verdict names it with its worst ratio.
    /// (The committed large-shape replay, with a Quack side added to one
    /// case at half of torch.compile's times.)
    #[test]
    fn a_faster_quack_side_is_named_in_the_verdict() {
        use crate::results::Side;
        let mut file = committed("2026-11-29-large-final-replay-h200");
        let before = score(&file, &targets());
        let quack = PeerMode::Quack.side();
        let compile = PeerMode::Compile.side();
        let mut peers = file.peer_sides();
        peers.push(quack.to_string());
        file.peers = Some(peers.clone());
        let id = "rmsnorm/f32/32768x4096";
        let case = file.cases.iter_mut().find(|c| c.id == id).unwrap();
        let half =
            |s: &mut Vec<crate::phases::BatchSample>| s.iter_mut().for_each(|b| b.total_us /= 2.0);
        for round in &mut case.rounds {
            let theirs = round.sides.iter().find(|s| s.name == compile).unwrap();
            let mut phases = theirs.phases.clone();
            if let Some(gpu) = phases.gpu.as_mut() {
                half(gpu);
            }
            half(&mut phases.e2e);
            let side = Side::new(quack, theirs.validation.clone(), phases, case.bytes_moved);
            round.order.push(quack.to_string());
            round.sides.push(side);
        }
        case.stats = crate::replay::case_stats(&case.rounds, &peers);
        let after = score(&file, &targets());
        let get = |v: &[Verdict]| v.iter().find(|v| v.id == id).unwrap().clone();
        let (was, now) = (get(&before), get(&after));
        assert_eq!(now.misses[..was.misses.len()], was.misses[..]);
        assert_eq!(now.misses.len(), was.misses.len() + 1, "{:?}", now.misses);
        let named = now.misses.last().unwrap();
        assert!(
            named.starts_with("torch-quack faster in a round (0."),
            "{named}"
        );
        // Its worst ratio is the smallest of the case's peers.
        let phase = &case_phase(&file, id);
        let worst = |p: &str| worst_ratio(phase, p).unwrap();
        assert!(peers
            .iter()
            .filter(|p| *p != quack)
            .all(|p| worst(p) > worst(quack)));
        assert!(markdown(&after, &targets()).contains(named.as_str()));
        // Every other case's verdict is unchanged.
        for (a, b) in before.iter().zip(&after) {
            if a.id != id {
                assert_eq!(a, b);
            }
        }
    }

    fn case_phase(file: &ReplayFile, id: &str) -> PhaseStats {
        let case = file.cases.iter().find(|c| c.id == id).unwrap();
        case.stats.phases[&case.stats.objective].clone()
    }

    /// The load-policy replay's 1024x4096 cases ran torch.compile and Liger
    /// but no torch eager: short rows cannot be met without it, and the
    /// single call (14.8 µs on rmsnorm bf16) is above 10 µs.
    #[test]
    fn short_row_verdicts_need_both_torch_peers_and_a_fast_single_call() {
        let verdicts = score(&committed("2026-11-29-loads-replay-h200"), &targets());
        let v = verdicts
            .iter()
            .find(|v| v.id == "rmsnorm/bf16/1024x4096")
            .unwrap();
        assert_eq!(v.family, "3 short rows");
        assert!(
            v.misses.contains(&"torch-eager not measured".to_string()),
            "{:?}",
            v.misses
        );
        assert!(
            v.misses
                .iter()
                .any(|m| m.starts_with("single call ") && m.ends_with(" µs > 10 in a round")),
            "{:?}",
            v.misses
        );
        // rmsnorm bf16 1024x4096 beat torch.compile in every round (1.067-1.099x).
        assert!(
            !v.misses.iter().any(|m| m.starts_with("torch-compile")),
            "{:?}",
            v.misses
        );
    }

    #[test]
    fn families_name_their_shapes_once() {
        let targets = targets();
        let mut all: Vec<&str> = targets
            .families
            .iter()
            .flat_map(|f| f.shapes.iter().map(String::as_str))
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(
            targets.family_of("1024x262144").unwrap().name,
            "2 long rows"
        );
        assert!(targets.family_of("3x64").is_none());
        let twice = "[[family]]\nname = \"a\"\nshapes = [\"1x2\"]\nmin_tbps = 1.0\n\
                     [[family]]\nname = \"b\"\nshapes = [\"1x2\"]\nmin_tbps = 1.0\n\
                     [automatic]\nname = \"c\"\nmin_fraction = 0.9\n";
        let e = Targets::parse(twice).unwrap_err();
        assert!(e.contains("shape 1x2 is in both"), "{e}");
    }

    /// The thresholds come from the targets file: the same replay meets
    /// the large-shape bandwidth line at 4.0 TB/s and misses it at 4.6.
    #[test]
    fn a_changed_threshold_in_the_targets_file_changes_the_verdict() {
        let file = committed("2026-11-29-large-final-replay-h200");
        let sum = |targets: &Targets| {
            score(&file, targets)
                .into_iter()
                .find(|v| v.id == "sum/f32/32768x4096")
                .unwrap()
        };
        let committed_targets = targets();
        assert!(sum(&committed_targets).met());
        let path = format!("{}/../../bench/targets.toml", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains("min_tbps = 4.0"));
        let stricter =
            Targets::parse(&text.replacen("min_tbps = 4.0", "min_tbps = 4.6", 1)).unwrap();
        let v = sum(&stricter);
        assert_eq!(v.misses, vec!["4.53 TB/s < 4.6".to_string()]);
        // A renamed family heads its table by the file's name.
        let renamed = Targets::parse(&text.replace("1 large shapes", "big")).unwrap();
        assert!(markdown(&[sum(&renamed)], &renamed).contains("## Target big: 1 of 1 cases met"));
    }

    /// A targets file that is not TOML, lacks a field, has an unknown one
    /// or mixes criteria is refused with a message saying what is wrong.
    #[test]
    fn a_malformed_targets_file_is_refused_with_a_message() {
        let e = Targets::parse("[[family]\nname = ").unwrap_err();
        assert!(!e.is_empty());
        let e = Targets::parse("[[family]]\nname = \"a\"\nshapes = [\"1x2\"]\nmin_tbps = 1.0\n")
            .unwrap_err();
        assert!(e.contains("automatic"), "{e}");
        let unknown = "[[family]]\nname = \"a\"\nshapes = [\"1x2\"]\nmin_tbs = 1.0\n\
                       [automatic]\nname = \"c\"\nmin_fraction = 0.9\n";
        let e = Targets::parse(unknown).unwrap_err();
        assert!(e.contains("min_tbs"), "{e}");
        let both = "[[family]]\nname = \"a\"\nshapes = [\"1x2\"]\nmin_tbps = 1.0\n\
                    max_single_us = 3.0\nmax_single_of_eager = 0.5\n\
                    [automatic]\nname = \"c\"\nmin_fraction = 0.9\n";
        let e = Targets::parse(both).unwrap_err();
        assert!(e.contains("either min_tbps"), "{e}");
        let negative = "[[family]]\nname = \"a\"\nshapes = [\"1x2\"]\nmin_tbps = -1.0\n\
                        [automatic]\nname = \"c\"\nmin_fraction = 0.9\n";
        let e = Targets::parse(negative).unwrap_err();
        assert!(e.contains("positive"), "{e}");
        let missing = Targets::read(Path::new("/nonexistent/targets.toml")).unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/targets.toml"),
            "{missing}"
        );
    }

    /// The automatic mapping from the committed searches of 2026-11-30: the
    /// mapping against the fresh winner, through duplicates.
    #[test]
    fn automatic_mapping_verdicts_come_from_the_searches() {
        let targets = targets();
        let search = |dir: &str| {
            let path = format!(
                "{}/../../bench/results/{dir}/results.json",
                env!("CARGO_MANIFEST_DIR")
            );
            SearchFile::read(std::path::Path::new(&path)).unwrap()
        };
        let v = score_search(&search("2026-11-30-rmsnorm-1024-search-h200"), &targets);
        assert_eq!(v.len(), 2);
        let get = |v: &[Verdict], id: &str| v.iter().find(|x| x.id == id).unwrap().clone();
        // f32: the automatic W=256 V=4 U=4 is the winner's layout family.
        let f32 = get(&v, "rmsnorm/f32/1024x4096");
        assert!(f32.met(), "{:?}", f32.misses);
        assert!((f32.candidate_us.unwrap() - 7.081).abs() < 0.01);
        // Its margin: the winner's fresh p50 over the automatic's, shown
        // beside "met" so a verdict near the 90% line is visible.
        let margin = f32.of_winner.unwrap();
        assert!((0.9..=1.05).contains(&margin), "{margin}");
        let shown = format!("met, {:.0}%", 100.0 * margin);
        assert!(
            markdown(std::slice::from_ref(&f32), &targets).contains(&shown),
            "{shown}"
        );
        // bf16: the automatic W=64 V=8 (4.68 µs, measured as a duplicate
        // of an explicit request) reaches under 90% of the winner.
        let bf16 = get(&v, "rmsnorm/bf16/1024x4096");
        assert!((bf16.candidate_us.unwrap() - 4.681).abs() < 0.01);
        assert!(
            bf16.misses[0].starts_with("automatic reaches 8"),
            "{:?}",
            bf16.misses
        );
        // A single-call search ranks latency, not throughput: the automatic
        // mapping is not judged on it.
        let mut latency = search("2026-11-30-rmsnorm-1024-search-h200");
        latency.objective = crate::search::Objective::Single;
        assert!(score_search(&latency, &targets).is_empty());
        assert!(score_search_today(&latency, &lanefold_plan::Target::h200(), &targets).is_empty());
        let v = score_search(&search("2026-11-30-residual-search-h200"), &targets);
        let res = get(&v, "residual_layernorm/bf16/4096x32768");
        assert!(res.misses[0].contains("W=1024 V=8 U=2"), "{:?}", res.misses);
        let md = markdown(&v, &targets);
        assert!(md.contains("## Target 4 automatic mapping: "), "{md}");

        // Today's mapper, looked up among the measured layouts: the grid
        // search measured the pick for f32, within 90% of the winner;
        // bf16's now loads its columns early, a layout the first search
        // never ran.
        let h200 = lanefold_plan::Target::h200();
        let today = score_search_today(
            &search("2026-11-30-rmsnorm-1024-search-h200"),
            &h200,
            &targets,
        );
        let grid = score_search_today(
            &search("2026-12-01-t4-grid-1024x4096-s20-h200"),
            &h200,
            &targets,
        );
        let measured = get(&grid, "rmsnorm/f32/1024x4096");
        assert!(measured.met(), "{:?}", measured.misses);
        assert!((measured.candidate_us.unwrap() - 6.037).abs() < 0.01);
        let bf16 = get(&today, "rmsnorm/bf16/1024x4096");
        assert!(
            bf16.misses[0].contains("early-columns=4 was not measured here"),
            "{:?}",
            bf16.misses
        );
        // A search that never measured today's pick says so.
        let old = score_search_today(&search("2026-11-29-softmax-search-h200"), &h200, &targets);
        let f32 = get(&old, "softmax/f32/32768x4096");
        assert!(
            f32.misses[0].contains("was not measured here"),
            "{:?}",
            f32.misses
        );
        // ... and is no verdict about today's default, so a standing
        // prefers one that measured it.
        assert!(f32.todays_default.is_some());
        assert!(bf16.todays_default.is_some());
        assert!(measured.todays_default.is_none());
        // A search run with a policy the default does not take (the
        // online normalizer at 1024x4096) is marked likewise.
        let online = score_search_today(
            &search("2026-11-30-grid-online-search-h200"),
            &h200,
            &targets,
        );
        let ce = get(&online, "cross_entropy/f32/1024x4096");
        assert!(ce.todays_default.is_some(), "{ce:?}");
        let plain = score_search_today(
            &search("2026-11-30-grid-1024x4096-search-h200"),
            &h200,
            &targets,
        );
        let ce = get(&plain, "cross_entropy/f32/1024x4096");
        assert!(ce.todays_default.is_none() && ce.met(), "{ce:?}");
    }

    /// A 2026-11-30 replay measured sum f32 1024x4096's layout before pack
    /// addresses were folded: same description, another kernel, and the
    /// verdict says so; a 2026-12-01 replay measured today's kernel. The
    /// standing prefers neither by this mark.
    #[test]
    fn regression_a_verdict_on_an_older_kernel_of_todays_layout_is_marked() {
        let h200 = lanefold_plan::Target::h200();
        let mark = |file: ReplayFile| {
            let mut verdicts = score(&file, &targets());
            mark_todays_default(&mut verdicts, &file, &h200);
            verdicts
                .into_iter()
                .find(|v| v.id == "sum/f32/1024x4096")
                .unwrap()
        };
        // That replay's one case, kept as test data (the whole replay is in
        // git history).
        let old = mark(
            ReplayFile::read(std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/older-kernel-replay/results.json"
            )))
            .unwrap(),
        );
        assert!(
            old.todays_default.is_none() && old.kernel_changed,
            "{old:?}"
        );
        let new = mark(committed("2026-12-01-short-all-s21c-aa-h200"));
        assert!(
            new.todays_default.is_none() && !new.kernel_changed,
            "{new:?}"
        );
        let md = markdown(&[old], &targets());
        assert!(md.contains("differs from the one measured"), "{md}");
    }

    /// A replay of 2026-11-30's large-shape layouts: where today's default maps a case
    /// otherwise, the verdict says so (and only there).
    #[test]
    fn replay_verdicts_name_a_different_default_of_today() {
        let file = committed("2026-11-30-large-aa-h200");
        let mut verdicts = score(&file, &targets());
        mark_todays_default(&mut verdicts, &file, &lanefold_plan::Target::h200());
        let get = |id: &str| verdicts.iter().find(|v| v.id == id).unwrap();
        let res = get("residual_layernorm/bf16/4096x32768");
        // Today's default there keeps h resident.
        assert!(
            res.todays_default.as_deref().is_some_and(|t| t.contains(
                "W=512 V=8 U=4 G=1 registers ordered-columns packed-resident rounded-resident"
            )),
            "{:?}",
            res.todays_default
        );
        // residual_layernorm f32 32768x4096 still maps as recorded; rmsnorm f32
        // there streams now.
        assert_eq!(
            get("residual_layernorm/f32/32768x4096").todays_default,
            None
        );
        assert!(get("rmsnorm/f32/32768x4096")
            .todays_default
            .as_deref()
            .is_some_and(|t| t.contains("W=512 V=4 U=4 G=1 stream reread-hints")));
        assert!(markdown(&verdicts, &targets()).contains("(not today's default: "));
    }

    fn verdict(id: &str, met: bool, todays_default: Option<&str>) -> Verdict {
        Verdict {
            id: id.into(),
            family: "2 long rows".into(),
            rounds: 2,
            candidate_us: Some(1.0),
            tbps: Some(if met { 4.0 } else { 3.0 }),
            misses: if met { vec![] } else { vec!["slow".into()] },
            todays_default: todays_default.map(String::from),
            kernel_changed: false,
            of_winner: None,
        }
    }

    fn scored(dir: &str, utc_time: &str, verdicts: Vec<Verdict>) -> Scored {
        Scored {
            dir: dir.into(),
            utc_time: utc_time.into(),
            verdicts,
        }
    }

    /// The standing takes, per case, the latest verdict about today's
    /// default layout by measurement time (not argument order); a later
    /// experiment on another layout never hides it, and a case measured
    /// only on other layouts keeps its latest verdict, still marked.
    #[test]
    fn standing_takes_the_latest_verdict_about_todays_default() {
        let case = "layernorm/f32/4096x131072";
        let other = "rmsnorm/f32/1024x262144";
        let standing = standing(&[
            // Given first, measured last: an experiment on another layout.
            scored(
                "c-experiment",
                "2026-11-30T18:00:00Z",
                vec![
                    verdict(case, true, Some("W=1 V=1")),
                    verdict(other, true, Some("W=2 V=2")),
                ],
            ),
            scored(
                "b-default",
                "2026-11-30T17:00:00Z",
                vec![verdict(case, false, None)],
            ),
            scored(
                "a-old",
                "2026-11-29T09:00:00Z",
                vec![
                    verdict(case, true, None),
                    verdict(other, false, Some("W=3 V=3")),
                ],
            ),
        ]);
        assert_eq!(standing.len(), 2);
        let get = |id: &str| standing.iter().find(|s| s.verdict.id == id).unwrap();
        assert_eq!(get(case).source, "b-default");
        assert!(!get(case).verdict.met());
        assert_eq!(get(other).source, "c-experiment");
        assert!(get(other).verdict.todays_default.is_some());
        let md = standing_markdown(&standing, &targets());
        assert!(
            md.contains("## Target 2 long rows: 1 of 2 cases met"),
            "{md}"
        );
        assert!(md.contains("| slow | b-default |"), "{md}");
    }
}
