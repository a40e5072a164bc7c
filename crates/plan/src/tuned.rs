//! The shipped tuning database: schedules measured ahead of the cost
//! model's pick, as data (`tuning/h200.json`, embedded), each covering a
//! target, operator, dtype and ranges of row length and row count. The
//! mapper consults it before its own rules ([`crate::plan`]); the file's
//! `about` says how an entry applies.

use crate::mapper::{LayoutRequest, Problem};
use lanefold_ir::{DType, Operator};
use serde::Deserialize;
use std::sync::OnceLock;

/// The embedded database files, one per target.
const FILES: &[(&str, &str)] = &[("h200", include_str!("../../../tuning/h200.json"))];

/// One entry of a database file, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryText {
    target: String,
    op: String,
    dtype: String,
    /// Row length: least and greatest (None: unbounded).
    n: (usize, Option<usize>),
    /// Row count: least and greatest (None: unbounded).
    rows: (usize, Option<usize>),
    schedule: String,
    evidence: String,
    results: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[allow(dead_code)]
    about: String,
    entries: Vec<EntryText>,
}

/// An inclusive range, unbounded above where `max` is None.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub min: usize,
    pub max: Option<usize>,
}

impl Span {
    pub fn contains(&self, x: usize) -> bool {
        x >= self.min && self.max.is_none_or(|m| x <= m)
    }

    pub fn overlaps(&self, other: &Span) -> bool {
        self.max.is_none_or(|m| other.min <= m) && other.max.is_none_or(|m| self.min <= m)
    }
}

/// One entry of the shipped database.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedEntry {
    pub target: String,
    pub op: Operator,
    pub dtype: DType,
    pub n: Span,
    pub rows: Span,
    /// The schedule measured ahead, parsed.
    pub schedule: LayoutRequest,
    /// What was measured, briefly.
    pub evidence: String,
    /// The results directory under `bench/results`, or where it went.
    pub results: String,
}

impl TunedEntry {
    /// Does this entry cover `problem` on the target named `target`?
    pub fn covers(&self, target: &str, problem: &Problem) -> bool {
        self.target == target
            && problem.operator_kind() == Some(self.op)
            && problem.dtype == self.dtype
            && self.n.contains(problem.shape.n)
            && self.rows.contains(problem.shape.rows)
    }

    /// `request` with the entry's layout (W, V, U, G, residency, cluster
    /// group size and split) in place of its own, its re-read hints added, and its
    /// occupancy promise where it makes one (else the request's).
    pub fn with_layout(&self, request: &LayoutRequest) -> LayoutRequest {
        let s = &self.schedule;
        LayoutRequest {
            workers: s.workers,
            pack: s.pack,
            unroll: s.unroll,
            rows_per_group: s.rows_per_group,
            residency: s.residency,
            cluster_group_threads: s.cluster_group_threads,
            split_groups: s.split_groups,
            reread_hints: s.reread_hints || request.reread_hints,
            occupancy: match s.occupancy {
                0 => request.occupancy,
                groups => groups,
            },
            ..*request
        }
    }

    /// Add the entry's other tokens (arithmetic, load and launch
    /// variants) to `request` ([`add_variants`]).
    pub fn add_variants(&self, request: &mut LayoutRequest) {
        add_variants(request, &self.schedule);
    }
}

/// Add the variant tokens of `variants` (all but its layout, residency,
/// cluster group size and split, re-read hints and promise) to `request`: flags set,
/// nonzero counts taken.
pub fn add_variants(request: &mut LayoutRequest, variants: &LayoutRequest) {
    // Every field named, so that a new one is classified here.
    let LayoutRequest {
        workers: _,
        pack: _,
        unroll: _,
        rows_per_group: _,
        order: _,
        residency: _,
        batch_invariant: _,
        mapper: _,
        cluster_group_threads: _,
        split_groups: _,
        reread_hints: _,
        occupancy: _,
        // The caller's buffers, never a tuned variant.
        in_place: _,
        streaming_hints,
        hoist_columns,
        keep_columns,
        stage_columns,
        pack_resident,
        rounded_resident,
        computed_resident,
        relaxed_cluster_exit,
        push_cluster_reduce,
        persistent_clusters,
        online_normalizer,
        one_pass_moments,
        fused_output,
        prefetch_rows,
        l1_columns,
        unfold_pack_addresses,
        ordered_columns,
        ordered_hinted_loads,
        occupancy_cap,
        batch_loads,
        unguarded_stores,
        recompute_derived,
        early_columns,
        shared_chunks,
        l2_prefetch_rows,
        no_cold_path,
        aligned_packs,
    } = *variants;
    let r = request;
    r.streaming_hints |= streaming_hints;
    r.no_cold_path |= no_cold_path;
    r.hoist_columns |= hoist_columns;
    r.keep_columns |= keep_columns;
    r.stage_columns |= stage_columns;
    r.pack_resident |= pack_resident;
    r.rounded_resident |= rounded_resident;
    r.computed_resident |= computed_resident;
    r.relaxed_cluster_exit |= relaxed_cluster_exit;
    r.push_cluster_reduce |= push_cluster_reduce;
    r.persistent_clusters |= persistent_clusters;
    r.online_normalizer |= online_normalizer;
    r.one_pass_moments |= one_pass_moments;
    r.fused_output |= fused_output;
    r.prefetch_rows |= prefetch_rows;
    r.l1_columns |= l1_columns;
    r.unfold_pack_addresses |= unfold_pack_addresses;
    r.ordered_columns |= ordered_columns;
    r.ordered_hinted_loads |= ordered_hinted_loads;
    r.batch_loads |= batch_loads;
    r.unguarded_stores |= unguarded_stores;
    r.recompute_derived |= recompute_derived;
    r.aligned_packs |= aligned_packs;
    for (field, value) in [
        (&mut r.occupancy_cap, occupancy_cap),
        (&mut r.early_columns, early_columns),
        (&mut r.shared_chunks, shared_chunks),
        (&mut r.l2_prefetch_rows, l2_prefetch_rows),
    ] {
        if value != 0 {
            *field = value;
        }
    }
}

/// Parse one database file; an error names the entry and what is wrong.
pub fn parse(text: &str) -> Result<Vec<TunedEntry>, String> {
    let file: FileText = serde_json::from_str(text).map_err(|e| e.to_string())?;
    file.entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let at =
                |what: String| format!("entry {i} ({} {} {}): {what}", e.op, e.dtype, e.target);
            let span = |(min, max): (usize, Option<usize>), name: &str| {
                if max.is_some_and(|m| m < min) {
                    Err(at(format!("{name} range is empty")))
                } else {
                    Ok(Span { min, max })
                }
            };
            Ok(TunedEntry {
                op: e.op.parse().map_err(|_| at("unknown operator".into()))?,
                dtype: e.dtype.parse().map_err(|_| at("unknown dtype".into()))?,
                n: span(e.n, "n")?,
                rows: span(e.rows, "rows")?,
                schedule: e.schedule.parse().map_err(|err| at(format!("{err}")))?,
                target: e.target.clone(),
                evidence: e.evidence.clone(),
                results: e.results.clone(),
            })
        })
        .collect()
}

/// Every shipped entry, parsed at first use (a test holds the files to
/// parsing, so a failure here is a broken build).
pub fn shipped() -> &'static [TunedEntry] {
    static ENTRIES: OnceLock<Vec<TunedEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        FILES
            .iter()
            .flat_map(|(name, text)| {
                parse(text).unwrap_or_else(|e| panic!("tuning/{name}.json: {e}"))
            })
            .collect()
    })
}

/// The shipped entry covering `problem` on the target named `target`.
pub fn lookup(target: &str, problem: &Problem) -> Option<&'static TunedEntry> {
    shipped().iter().find(|e| e.covers(target, problem))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan, Shape, Target};
    use lanefold_ir::OperatorOptions;
    use std::path::Path;

    /// A problem of the entry's operator and dtype at the least of its
    /// ranges.
    fn least(e: &TunedEntry) -> Problem {
        let shape = Shape {
            rows: e.rows.min,
            n: e.n.min,
        };
        Problem::operator(e.op, OperatorOptions::default(), e.dtype, shape)
    }

    #[test]
    fn the_shipped_database_parses_and_its_schedules_are_canonical() {
        for (name, text) in FILES {
            let entries = parse(text).unwrap_or_else(|e| panic!("tuning/{name}.json: {e}"));
            assert!(!entries.is_empty());
            let raw: serde_json::Value = serde_json::from_str(text).unwrap();
            for (e, r) in entries.iter().zip(raw["entries"].as_array().unwrap()) {
                assert_eq!(e.target, *name, "an entry in the file of another target");
                assert!(Target::by_name(&e.target).is_some(), "{}", e.target);
                // Written as printed, so the file diffs as the mapper prints.
                assert_eq!(e.schedule.to_string(), r["schedule"].as_str().unwrap());
                assert!(!e.evidence.is_empty());
            }
        }
        assert_eq!(
            shipped().len(),
            FILES
                .iter()
                .map(|(_, t)| parse(t).unwrap().len())
                .sum::<usize>()
        );
    }

    #[test]
    fn every_entry_is_legal_and_chosen_in_its_ranges() {
        for e in shipped() {
            let target = Target::by_name(&e.target).unwrap();
            let problem = least(e);
            assert!(e.covers(&e.target, &problem));
            // The schedule alone plans, and the automatic mapping takes it.
            plan(&problem, &target, &e.schedule)
                .unwrap_or_else(|r| panic!("{} refused: {r}", e.schedule));
            let chosen = plan(&problem, &target, &LayoutRequest::default()).unwrap();
            let s = e.schedule;
            let l = chosen.layout;
            assert_eq!(
                (l.workers, l.pack, l.unroll, l.rows_per_group),
                (s.workers, s.pack, s.unroll, s.rows_per_group),
                "{}: {}",
                e.schedule,
                chosen.describe()
            );
        }
    }

    #[test]
    fn entries_of_one_target_op_and_dtype_do_not_overlap() {
        let entries = shipped();
        for (i, a) in entries.iter().enumerate() {
            for b in &entries[i + 1..] {
                let same = (a.target == b.target) && a.op == b.op && a.dtype == b.dtype;
                assert!(
                    !(same && a.n.overlaps(&b.n) && a.rows.overlaps(&b.rows)),
                    "{} {} {}: {:?}x{:?} overlaps {:?}x{:?}",
                    a.target,
                    a.op,
                    a.dtype,
                    a.rows,
                    a.n,
                    b.rows,
                    b.n
                );
            }
        }
    }

    #[test]
    fn every_entry_cites_a_results_directory_or_the_git_history() {
        let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
        for e in shipped() {
            assert!(
                e.results == "git history 2d680226" || results.join(&e.results).is_dir(),
                "{}: no results directory {}",
                e.schedule,
                e.results
            );
        }
    }

    #[test]
    fn malformed_entries_are_refused_naming_the_entry() {
        let entry = |schedule: &str, n: &str, rows: &str| {
            format!(
                r#"{{"about": "", "entries": [{{"target": "h200", "op": "softmax",
                "dtype": "bf16", "n": {n}, "rows": {rows}, "schedule": "{schedule}",
                "evidence": "e", "results": "r"}}]}}"#
            )
        };
        assert!(parse(&entry("W=256", "[4096, 4096]", "[1, null]")).is_ok());
        let e = parse(&entry("W=256 wide", "[4096, 4096]", "[1, null]")).unwrap_err();
        assert!(e.contains("entry 0") && e.contains("'wide'"), "{e}");
        let e = parse(&entry("W=256", "[4096, 2048]", "[1, null]")).unwrap_err();
        assert!(e.contains("n range is empty"), "{e}");
        let spans = |a: (usize, Option<usize>), b: (usize, Option<usize>)| {
            let s = |(min, max)| Span { min, max };
            s(a).overlaps(&s(b))
        };
        assert!(spans((1, Some(4)), (4, None)));
        assert!(!spans((1, Some(3)), (4, None)));
        assert!(spans((8, None), (4, None)));
        assert!(!spans((5, Some(5)), (4, Some(4))));
    }
}
