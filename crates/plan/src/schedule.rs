//! The schedule text form of a [`LayoutRequest`]: one compact, stable line
//! that names everything a request asks for, printed and parsed here and
//! nowhere else. `W=1024 V=4 U=8 G=1 stream reread-hints occupancy=1`.
//!
//! Grammar: tokens separated by whitespace, each at most once, in any
//! order when parsed and in the order of [`TOKENS`] when printed; a value
//! that equals the default (0, `auto`, the model mapper, no order) is left
//! out, and the request with nothing asked for prints as `auto`.
//!
//! - `W=n V=n U=n G=n`: workers, pack, unroll, rows per group (n > 0);
//! - `registers` or `stream`: the residency;
//! - flags: `streaming-hints hoisted-columns reread-hints keep-columns
//!   l1-columns unfolded-addresses ordered-columns staged-columns
//!   packed-resident rounded-resident computed-resident relaxed-exit push-reduce
//!   persistent-clusters prefetch-rows online-normalizer one-pass-moments
//!   fused-output no-cold-path batched-loads unguarded-stores recompute-derived
//!   aligned-packs in-place
//!   ordered-hinted-loads batch-invariant`;
//! - counts (n > 0): `early-columns=n shared-chunks=n l2-prefetch=n
//!   occupancy=n occupancy-cap=n group-threads=n`;
//! - `order=tree` or `order=sequential`; `mapper=seed`.
//!
//! [`crate::Plan::describe`] prints the schedule of the request a plan
//! realises ([`crate::Plan::schedule`]) with what the plan derives beside
//! it (`cluster=n`, a partial `staged-columns=n`), leaving out the tokens
//! after `in-place`, which a plan's kernel does not show.

use crate::mapper::{LayoutRequest, MapperPolicy, ReductionOrder, ResidencyRequest};
use std::fmt;
use std::str::FromStr;

/// How a token's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `name` alone: a boolean field set.
    Flag,
    /// `name=n`, n > 0.
    Count,
    /// One of several bare words for one field (`registers`, `stream`).
    Word,
    /// `name=word`.
    Choice,
}

/// One field of the request: its token name, kind, and how to read and
/// write it. Words and choices are written as the token name they print.
struct Field {
    name: &'static str,
    kind: Kind,
    /// The field's value as printed, `None` when it is the default.
    get: fn(&LayoutRequest) -> Option<String>,
    /// Set the field from a token's value (the count, the word, the
    /// choice; empty for a flag).
    set: fn(&mut LayoutRequest, &str) -> Result<(), String>,
}

macro_rules! flag {
    ($name:literal, $field:ident) => {
        Field {
            name: $name,
            kind: Kind::Flag,
            get: |r| r.$field.then(String::new),
            set: |r, _| {
                r.$field = true;
                Ok(())
            },
        }
    };
}

macro_rules! count {
    ($name:literal, $field:ident) => {
        Field {
            name: $name,
            kind: Kind::Count,
            get: |r| (r.$field != 0).then(|| r.$field.to_string()),
            set: |r, v| {
                r.$field = parse_count(v)?;
                Ok(())
            },
        }
    };
}

fn parse_count(v: &str) -> Result<u32, String> {
    match v.parse::<u32>() {
        Ok(0) => Err("0 is the default: leave the token out".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{v}' is not a positive whole number")),
    }
}

/// Every field, in the order the text form prints them.
const TOKENS: &[Field] = &[
    count!("W", workers),
    count!("V", pack),
    count!("U", unroll),
    count!("G", rows_per_group),
    Field {
        name: "residency",
        kind: Kind::Word,
        get: |r| match r.residency {
            ResidencyRequest::Auto => None,
            ResidencyRequest::Registers => Some("registers".into()),
            ResidencyRequest::Stream => Some("stream".into()),
        },
        set: |r, v| {
            r.residency = match v {
                "registers" => ResidencyRequest::Registers,
                "stream" => ResidencyRequest::Stream,
                _ => unreachable!("a residency word"),
            };
            Ok(())
        },
    },
    flag!("streaming-hints", streaming_hints),
    flag!("hoisted-columns", hoist_columns),
    flag!("reread-hints", reread_hints),
    flag!("keep-columns", keep_columns),
    flag!("l1-columns", l1_columns),
    flag!("unfolded-addresses", unfold_pack_addresses),
    flag!("ordered-columns", ordered_columns),
    count!("early-columns", early_columns),
    count!("shared-chunks", shared_chunks),
    count!("l2-prefetch", l2_prefetch_rows),
    flag!("staged-columns", stage_columns),
    flag!("packed-resident", pack_resident),
    flag!("rounded-resident", rounded_resident),
    flag!("computed-resident", computed_resident),
    flag!("relaxed-exit", relaxed_cluster_exit),
    flag!("push-reduce", push_cluster_reduce),
    flag!("persistent-clusters", persistent_clusters),
    flag!("prefetch-rows", prefetch_rows),
    flag!("online-normalizer", online_normalizer),
    flag!("one-pass-moments", one_pass_moments),
    flag!("fused-output", fused_output),
    flag!("no-cold-path", no_cold_path),
    count!("occupancy", occupancy),
    count!("occupancy-cap", occupancy_cap),
    flag!("batched-loads", batch_loads),
    flag!("unguarded-stores", unguarded_stores),
    flag!("recompute-derived", recompute_derived),
    flag!("aligned-packs", aligned_packs),
    flag!("split-groups", split_groups),
    count!("group-threads", cluster_group_threads),
    flag!("in-place", in_place),
    // Not shown by a plan's description (see `Plan::describe`).
    flag!("ordered-hinted-loads", ordered_hinted_loads),
    Field {
        name: "order",
        kind: Kind::Choice,
        get: |r| match r.order {
            None => None,
            Some(ReductionOrder::Tree) => Some("tree".into()),
            Some(ReductionOrder::Sequential) => Some("sequential".into()),
        },
        set: |r, v| {
            r.order = Some(match v {
                "tree" => ReductionOrder::Tree,
                "sequential" => ReductionOrder::Sequential,
                _ => return Err(format!("'{v}': expected tree or sequential")),
            });
            Ok(())
        },
    },
    Field {
        name: "mapper",
        kind: Kind::Choice,
        get: |r| (r.mapper == MapperPolicy::Seed).then(|| "seed".into()),
        set: |r, v| {
            r.mapper = match v {
                "seed" => MapperPolicy::Seed,
                "model" => return Err("model is the default: leave the token out".into()),
                _ => return Err(format!("'{v}': expected seed")),
            };
            Ok(())
        },
    },
    flag!("batch-invariant", batch_invariant),
];

/// The first token a plan's description leaves out.
const FIRST_UNDESCRIBED: &str = "ordered-hinted-loads";

/// A schedule text that does not parse: the token and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("schedule token '{token}': {reason}")]
pub struct ScheduleError {
    pub token: String,
    pub reason: String,
}

impl ScheduleError {
    fn new(token: &str, reason: impl Into<String>) -> Self {
        ScheduleError {
            token: token.to_string(),
            reason: reason.into(),
        }
    }
}

/// The request's tokens in print order: (field name, token text).
pub(crate) fn tokens(request: &LayoutRequest) -> Vec<(&'static str, String)> {
    TOKENS
        .iter()
        .filter_map(|f| {
            (f.get)(request).map(|v| {
                let text = match f.kind {
                    Kind::Flag => f.name.to_string(),
                    Kind::Word => v,
                    Kind::Count | Kind::Choice => format!("{}={v}", f.name),
                };
                (f.name, text)
            })
        })
        .collect()
}

/// The tokens a plan's description shows, in print order.
pub(crate) fn described_tokens(request: &LayoutRequest) -> Vec<(&'static str, String)> {
    let cut = TOKENS
        .iter()
        .position(|f| f.name == FIRST_UNDESCRIBED)
        .expect("the first undescribed token is a field");
    let shown: Vec<&str> = TOKENS[..cut].iter().map(|f| f.name).collect();
    tokens(request)
        .into_iter()
        .filter(|(name, _)| shown.contains(name))
        .collect()
}

impl fmt::Display for LayoutRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tokens = tokens(self);
        if tokens.is_empty() {
            return f.write_str("auto");
        }
        let texts: Vec<&str> = tokens.iter().map(|(_, t)| t.as_str()).collect();
        f.write_str(&texts.join(" "))
    }
}

impl FromStr for LayoutRequest {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, ScheduleError> {
        let mut request = LayoutRequest::default();
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() || words == ["auto"] {
            return Ok(request);
        }
        let mut seen: Vec<(&'static str, &str)> = vec![];
        for &word in &words {
            let (name, value) = match word.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (word, None),
            };
            let (field, value) = match (TOKENS.iter().find(|f| f.name == name), value) {
                (Some(f), Some(v)) if matches!(f.kind, Kind::Count | Kind::Choice) => (f, v),
                (Some(f), None) if f.kind == Kind::Flag => (f, ""),
                (Some(f), Some(_)) if f.name == "staged-columns" => {
                    return Err(ScheduleError::new(
                        word,
                        "how many columns are staged is the plan's to derive (as a \
                         description shows it): write staged-columns",
                    ));
                }
                (Some(f), Some(_)) if f.kind == Kind::Flag => {
                    return Err(ScheduleError::new(word, "a flag takes no value"));
                }
                (Some(f), _) if f.kind == Kind::Word => {
                    return Err(ScheduleError::new(
                        word,
                        format!("unknown token; write the {} itself", f.name),
                    ));
                }
                (Some(f), _) => {
                    return Err(ScheduleError::new(
                        word,
                        format!("needs a value: {}=...", f.name),
                    ));
                }
                (None, None) if matches!(word, "registers" | "stream") => {
                    let residency = TOKENS
                        .iter()
                        .find(|f| f.kind == Kind::Word)
                        .expect("the residency is a field");
                    (residency, word)
                }
                (None, None) if word == "cold-path" => {
                    return Err(ScheduleError::new(
                        word,
                        "the norms take their cold path by default now: leave the token \
                         out (no-cold-path opts out)",
                    ));
                }
                (None, _) if word == "auto" => {
                    return Err(ScheduleError::new(
                        word,
                        "'auto' stands alone, for the request that asks for nothing",
                    ));
                }
                (None, Some(_)) if name == "cluster" => {
                    return Err(ScheduleError::new(
                        word,
                        "groups per row are the plan's to derive from W, V and the group \
                         size (as a description shows them): leave the token out",
                    ));
                }
                (None, _) => return Err(ScheduleError::new(word, "unknown token")),
            };
            if let Some((_, earlier)) = seen.iter().find(|(n, _)| *n == field.name) {
                let reason = if *earlier == word {
                    "given twice".to_string()
                } else {
                    format!("contradicts '{earlier}'")
                };
                return Err(ScheduleError::new(word, reason));
            }
            seen.push((field.name, word));
            (field.set)(&mut request, value).map_err(|reason| ScheduleError::new(word, reason))?;
        }
        if request.order == Some(ReductionOrder::Sequential) && request.workers > 1 {
            let w = seen.iter().find(|(n, _)| *n == "W").map_or("W", |(_, t)| t);
            return Err(ScheduleError::new(
                w,
                "contradicts 'order=sequential', which is W=1",
            ));
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arbitrary_request() -> impl Strategy<Value = LayoutRequest> {
        let count = || prop_oneof![Just(0u32), 1u32..=4096];
        let layout = (
            count(),
            count(),
            count(),
            count(),
            0..3u8,
            0..3u8,
            any::<bool>(),
        );
        let flags = proptest::collection::vec(any::<bool>(), 27);
        let counts = proptest::collection::vec(count(), 6);
        (layout, flags, counts, any::<bool>()).prop_map(|(l, b, c, seed)| {
            let (workers, pack, unroll, rows_per_group, residency, order, batch_invariant) = l;
            let order = match order {
                0 => None,
                1 => Some(ReductionOrder::Tree),
                _ => Some(ReductionOrder::Sequential),
            };
            LayoutRequest {
                // A sequential order with W > 1 is a contradiction, refused.
                workers: if order == Some(ReductionOrder::Sequential) {
                    workers.min(1)
                } else {
                    workers
                },
                pack,
                unroll,
                rows_per_group,
                order,
                residency: [
                    ResidencyRequest::Auto,
                    ResidencyRequest::Registers,
                    ResidencyRequest::Stream,
                ][residency as usize],
                batch_invariant,
                mapper: if seed {
                    MapperPolicy::Seed
                } else {
                    MapperPolicy::Model
                },
                streaming_hints: b[0],
                hoist_columns: b[1],
                reread_hints: b[2],
                keep_columns: b[3],
                stage_columns: b[4],
                pack_resident: b[5],
                rounded_resident: b[6],
                relaxed_cluster_exit: b[7],
                push_cluster_reduce: b[8],
                persistent_clusters: b[9],
                online_normalizer: b[10],
                one_pass_moments: b[11],
                fused_output: b[12],
                prefetch_rows: b[13],
                l1_columns: b[14],
                unfold_pack_addresses: b[15],
                ordered_columns: b[16],
                ordered_hinted_loads: b[17],
                batch_loads: b[18],
                cluster_group_threads: c[0],
                occupancy: c[1],
                occupancy_cap: c[2],
                early_columns: c[3],
                shared_chunks: c[4],
                l2_prefetch_rows: if b[19] { c[5] } else { 0 },
                no_cold_path: b[20],
                in_place: b[21],
                aligned_packs: b[22],
                split_groups: b[23],
                unguarded_stores: b[24],
                recompute_derived: b[25],
                computed_resident: b[26],
            }
        })
    }

    proptest! {
        #[test]
        fn a_schedule_printed_and_parsed_back_is_the_same_request(r in arbitrary_request()) {
            let text = r.to_string();
            let back: LayoutRequest = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            prop_assert_eq!(back, r, "{}", text);
            prop_assert_eq!(back.to_string(), text);
        }

        #[test]
        fn a_schedule_parses_in_any_token_order(r in arbitrary_request()) {
            let text = r.to_string();
            let reversed: Vec<&str> = text.split(' ').rev().collect();
            let back: LayoutRequest = reversed.join("  ").parse().unwrap();
            prop_assert_eq!(back, r);
        }
    }

    #[test]
    fn every_field_of_the_request_has_a_token() {
        // The default prints as `auto`; a request with every field set
        // prints one token per field.
        assert_eq!(LayoutRequest::default().to_string(), "auto");
        assert_eq!(
            "auto".parse::<LayoutRequest>(),
            Ok(LayoutRequest::default())
        );
        assert_eq!("".parse::<LayoutRequest>(), Ok(LayoutRequest::default()));
        let all = "W=1 V=4 U=2 G=1 stream streaming-hints hoisted-columns reread-hints \
                   keep-columns l1-columns unfolded-addresses ordered-columns \
                   early-columns=2 shared-chunks=3 l2-prefetch=8 staged-columns \
                   packed-resident rounded-resident computed-resident relaxed-exit push-reduce \
                   persistent-clusters prefetch-rows online-normalizer one-pass-moments \
                   fused-output no-cold-path occupancy=2 occupancy-cap=1 batched-loads unguarded-stores recompute-derived aligned-packs split-groups group-threads=256 in-place \
                   ordered-hinted-loads order=sequential mapper=seed batch-invariant";
        let r: LayoutRequest = all.parse().unwrap();
        assert_eq!(
            r.to_string(),
            all.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        assert_eq!(tokens(&r).len(), TOKENS.len());
        // Every field of the struct is one of the tokens: a new field
        // without a token fails the round trip of its JSON.
        let json = serde_json::to_value(r).unwrap();
        assert_eq!(json.as_object().unwrap().len(), TOKENS.len(), "{json}");
        for (name, value) in json.as_object().unwrap() {
            let default = serde_json::to_value(LayoutRequest::default()).unwrap();
            assert_ne!(
                value, &default[name],
                "{name} is not set by the full schedule"
            );
        }
    }

    /// `no-cold-path` round-trips, plans a norm without its cold path and
    /// shows in that plan's schedule; the default plan shows no token; the
    /// old opt-in `cold-path` is refused with the new default named.
    #[test]
    fn no_cold_path_round_trips_and_the_old_cold_path_token_is_refused() {
        use crate::{plan, Problem, Target};
        use lanefold_ir::{DType, Operator, OperatorOptions};
        let r: LayoutRequest = "W=256 V=4 no-cold-path".parse().unwrap();
        assert!(r.no_cold_path);
        assert_eq!(r.to_string(), "W=256 V=4 no-cold-path");
        let err = "W=256 cold-path".parse::<LayoutRequest>().unwrap_err();
        assert_eq!(err.token, "cold-path");
        assert!(err.reason.contains("by default now"), "{err}");
        for op in Operator::SIX {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                DType::Bf16,
                "64x4096".parse().unwrap(),
            );
            let target = Target::h200();
            let default = plan(&problem, &target, &LayoutRequest::default()).unwrap();
            let plain_request = LayoutRequest {
                no_cold_path: true,
                ..LayoutRequest::default()
            };
            let plain = plan(&problem, &target, &plain_request).unwrap();
            let norm = op.has_cold_path();
            assert_eq!(default.cold_path(), norm, "{op}");
            assert!(!plain.cold_path(), "{op}");
            assert!(!default.describe().contains("cold-path"), "{op}");
            assert_eq!(plain.describe().contains("no-cold-path"), norm, "{op}");
            // Each plan's schedule text plans back to it, from either
            // plan's own problem (the cold path added or taken out).
            for p in [&default, &plain] {
                let text = p.schedule().to_string();
                let back: LayoutRequest = text.parse().unwrap();
                for from in [&problem, &default.problem, &plain.problem] {
                    let q = plan(from, &target, &back).unwrap();
                    assert_eq!(q.describe(), p.describe(), "{op}: {text}");
                    assert_eq!(q.problem.program, p.problem.program, "{op}: {text}");
                }
            }
        }
    }

    /// Plans of every operator and dtype over short, long and cluster rows,
    /// asked for by many requests (automatic, explicit, with policies):
    /// each one's schedule text, parsed back, plans to the same plan.
    #[test]
    fn every_plans_schedule_text_plans_back_to_the_same_plan() {
        use crate::{enumerate, plan, Problem, Shape, Target};
        use lanefold_ir::{DType, Operator, OperatorOptions};
        let requests = [
            "auto",
            "stream reread-hints",
            "registers packed-resident ordered-columns",
            "staged-columns push-reduce persistent-clusters one-pass-moments",
            "group-threads=256 relaxed-exit online-normalizer",
            "registers G=1 prefetch-rows l2-prefetch=2",
            "keep-columns l1-columns occupancy=2 streaming-hints hoisted-columns",
            "batch-invariant",
            "order=sequential",
            "mapper=seed unfolded-addresses",
            "in-place",
            "in-place stream online-normalizer",
        ];
        let mut planned = 0;
        for target in [Target::h200(), Target::cpu()] {
            for op in Operator::SIX {
                for dtype in [DType::F32, DType::Bf16] {
                    for shape in ["1x127", "64x4096", "4x32768", "4x131072"] {
                        let shape: Shape = shape.parse().unwrap();
                        let problem =
                            Problem::operator(op, OperatorOptions::default(), dtype, shape);
                        for text in requests {
                            let base: LayoutRequest = text.parse().unwrap();
                            let candidates =
                                enumerate(&problem, &target, &base, &[0, 256], &[0, 4], &[0]);
                            for p in candidates.into_iter().filter_map(|c| c.outcome.ok()) {
                                let schedule = p.schedule().to_string();
                                let parsed: LayoutRequest = schedule.parse().unwrap();
                                let again = plan(&problem, &target, &parsed).unwrap_or_else(|e| {
                                    panic!("{op} {dtype} {shape} {text}: {schedule}: {e}")
                                });
                                assert_eq!(again, p, "{op} {dtype} {shape} {text}: {schedule}");
                                planned += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(planned > 1000, "{planned}");
    }

    #[test]
    fn malformed_schedules_are_refused_naming_the_token() {
        for (text, token, reason) in [
            ("W=256 frobnicate", "frobnicate", "unknown token"),
            ("W=256 W=256", "W=256", "given twice"),
            ("W=256 W=512", "W=512", "contradicts 'W=256'"),
            ("registers stream", "stream", "contradicts 'registers'"),
            ("W=0", "W=0", "0 is the default"),
            ("W=many", "W=many", "not a positive whole number"),
            ("W=-1", "W=-1", "not a positive whole number"),
            ("W", "W", "needs a value"),
            ("reread-hints=1", "reread-hints=1", "takes no value"),
            (
                "order=random",
                "order=random",
                "expected tree or sequential",
            ),
            ("mapper=model", "mapper=model", "the default"),
            (
                "residency=stream",
                "residency=stream",
                "write the residency itself",
            ),
            ("auto W=64", "auto", "stands alone"),
            (
                "W=64 order=sequential",
                "W=64",
                "contradicts 'order=sequential'",
            ),
        ] {
            let e = text.parse::<LayoutRequest>().unwrap_err();
            assert_eq!(e.token, token, "{text}: {e}");
            assert!(e.reason.contains(reason), "{text}: {e}");
            assert!(e.to_string().contains(token), "{text}: {e}");
        }
    }
}
