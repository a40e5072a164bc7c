//! `lanefold replay` on the CPU from two `lanefold bench --backend cpu`
//! runs: a frozen, position-balanced replay that `lanefold audit` passes;
//! a changed raw sample fails the audit naming its case; a recorded layout
//! the request does not re-plan to is refused naming its case; `--aa`
//! records its gain range and whether it contains 1.0. No timing outcome
//! is asserted (CPU timings are noise): only structure and arithmetic.

mod common;

use common::{fake_peer, lanefold, load, save, text};
use std::path::{Path, PathBuf};
use std::process::Output;

fn tmp(name: &str) -> PathBuf {
    common::tmp("replay", name)
}

/// A tiny CPU bench: rmsnorm f32 on 3x64 and 2x257 with extra layout flags.
fn bench(name: &str, layout: &[&str]) -> PathBuf {
    let dir = tmp(name);
    let mut args = vec!["bench"];
    args.extend_from_slice(&common::FAST_CPU);
    args.extend_from_slice(&[
        "--ops",
        "rmsnorm",
        "--shapes",
        "3x64,2x257",
        "--dtypes",
        "f32",
        "--output",
        dir.to_str().unwrap(),
    ]);
    args.extend_from_slice(layout);
    let o = lanefold(&args);
    assert!(o.status.success(), "{}", text(&o));
    dir
}

fn replay(reference: &Path, candidate: Option<&Path>, out: &Path) -> Output {
    replay_with(reference, candidate, out, &[])
}

fn replay_with(reference: &Path, candidate: Option<&Path>, out: &Path, extra: &[&str]) -> Output {
    let r = reference.join("results.json");
    let c = candidate.map(|c| c.join("results.json"));
    let mut args = vec!["replay"];
    args.extend_from_slice(&common::FAST_CPU);
    args.extend_from_slice(&[
        "--reference",
        r.to_str().unwrap(),
        "--rounds",
        "2",
        "--output",
        out.to_str().unwrap(),
    ]);
    match &c {
        Some(c) => args.extend_from_slice(&["--candidate", c.to_str().unwrap()]),
        None => args.push("--aa"),
    }
    args.extend_from_slice(extra);
    lanefold(&args)
}

fn audit(dir: &Path) -> Output {
    lanefold(&["audit", dir.to_str().unwrap()])
}

#[test]
fn a_cpu_replay_is_balanced_validated_and_auditable() {
    let r = bench("ref", &[]);
    let c = bench("cand", &["--workers", "32", "--pack", "4"]);
    let out = tmp("out");
    let o = replay(&r, Some(&c), &out);
    assert!(o.status.success(), "{}", text(&o));
    let v = load(&out);
    assert_eq!(v["schema"], "lanefold-replay/1");
    assert_eq!(v["rounds_done"], 2);
    assert_eq!(v["aa"], false);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for case in cases {
        // Frozen layouts from the two files.
        assert_eq!(case["candidate"]["layout"]["pack"], 4);
        assert_eq!(case["candidate"]["layout"]["workers"], 32);
        // Positions: reference first in round 0, candidate first in round 1.
        let rounds = case["rounds"].as_array().unwrap();
        assert_eq!(
            rounds[0]["order"],
            serde_json::json!(["reference", "candidate"])
        );
        assert_eq!(
            rounds[1]["order"],
            serde_json::json!(["candidate", "reference"])
        );
        // Every side validated every round, the same seed for both sides.
        for r in rounds {
            for s in r["sides"].as_array().unwrap() {
                assert_eq!(s["validation"]["pass"], true);
                assert!(s["phases"]["gpu"].is_null());
            }
        }
        assert_ne!(rounds[0]["seed"], rounds[1]["seed"]);
        // The CPU has no gpu phase: the objective is e2e.
        assert_eq!(case["stats"]["objective"], "e2e");
        assert!(case["stats"]["phases"].get("gpu").is_none());
        let g = &case["stats"]["phases"]["e2e"]["gain"]["summary"];
        assert_eq!(g["n"], 2);
        assert_eq!(g["coverage"], 0.5);
        let (lo, hi, med) = (
            g["min"].as_f64().unwrap(),
            g["max"].as_f64().unwrap(),
            g["median"].as_f64().unwrap(),
        );
        assert!(lo <= med && med <= hi);
    }
    // Provenance: the same binary wrote the sources.
    for s in v["sources"].as_array().unwrap() {
        assert_eq!(s["binary_equal"], true);
        assert_eq!(s["binary_sha256"], v["environment"]["binary_sha256"]);
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("paired speedup median [range]"), "{md}");
    assert!(md.contains("E2E single"), "{md}");
    assert!(md.contains("## Provenance"), "{md}");

    let o = audit(&out);
    assert!(o.status.success(), "{}", text(&o));

    // Regression: `report` read every results.json as a bench file and
    // failed on a replay ("missing field `request`"); it renders replays.
    std::fs::remove_file(out.join("results.md")).unwrap();
    let o = lanefold(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let again = std::fs::read_to_string(out.join("results.md")).unwrap();
    // Same document; a figure read back from JSON may round differently in
    // its last printed digit, so digits are compared as a skeleton.
    let skeleton = |t: &str| -> String {
        t.chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect()
    };
    assert_eq!(
        skeleton(&again),
        skeleton(&md),
        "report renders the replay's results.md again"
    );

    // One raw sample changed: the audit fails naming the case.
    let mut t = load(&out);
    let id = t["cases"][1]["id"].as_str().unwrap().to_string();
    let s = &mut t["cases"][1]["rounds"][0]["sides"][1]["phases"]["e2e"][2]["total_us"];
    *s = serde_json::json!(s.as_f64().unwrap() * 7.0 + 1.0);
    save(&out, &t);
    let o = audit(&out);
    assert!(!o.status.success());
    assert!(text(&o).contains(&format!("case {id}: ")), "{}", text(&o));

    for d in [r, c, out] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_recorded_layout_its_request_does_not_replan_to_is_refused() {
    let r = bench("frozen", &[]);
    let mut v = load(&r);
    let case = &mut v["cases"][1];
    let id = format!(
        "{}/{}/{}",
        case["op"].as_str().unwrap(),
        case["dtype"].as_str().unwrap(),
        case["shape"].as_str().unwrap()
    );
    let pack = case["plan"]["layout"]["pack"].as_u64().unwrap();
    case["plan"]["layout"]["pack"] = serde_json::json!(if pack == 4 { 2 } else { 4 });
    save(&r, &v);
    let out = tmp("frozen-out");
    let o = replay(&r, None, &out);
    assert!(!o.status.success());
    assert!(text(&o).contains(&format!("case {id}:")), "{}", text(&o));
    assert!(!out.join("results.json").exists());
    let _ = std::fs::remove_dir_all(r);
}

#[test]
fn an_aa_control_records_its_range_and_whether_it_contains_one() {
    let r = bench("aa", &[]);
    let out = tmp("aa-out");
    let o = replay(&r, None, &out);
    assert!(o.status.success(), "{}", text(&o));
    let v = load(&out);
    assert_eq!(v["aa"], true);
    for case in v["cases"].as_array().unwrap() {
        assert_eq!(case["reference"], case["candidate"]);
        let g = &case["stats"]["phases"]["e2e"]["gain"]["summary"];
        let (lo, hi) = (g["min"].as_f64().unwrap(), g["max"].as_f64().unwrap());
        assert_eq!(g["range_contains_one"], lo <= 1.0 && 1.0 <= hi);
    }
    assert!(std::fs::read_to_string(out.join("results.md"))
        .unwrap()
        .contains("A/A control"));
    let o = audit(&out);
    assert!(o.status.success(), "{}", text(&o));
    // --aa with --candidate is a usage error.
    let o = lanefold(&[
        "replay",
        "--aa",
        "--reference",
        "x.json",
        "--candidate",
        "y.json",
        "--output",
        "z",
    ]);
    assert!(!o.status.success());
    for d in [r, out] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn peer_flags_add_each_side_and_a_refusing_peer_is_recorded_missing() {
    let Some(fake) = fake_peer() else {
        return;
    };
    // The stand-in peer answers only `sum` (and never liger or quack): on rmsnorm
    // every peer side refuses, which must cost those sides, not the replay.
    let r = bench("peers", &[]);
    let out = tmp("peers-out");
    let o = replay_with(
        &r,
        None,
        &out,
        &[
            "--torch",
            "--torch-compile",
            "--liger",
            "--quack",
            "--peer-script",
            fake.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v = load(&out);
    let peers = serde_json::json!(["torch-eager", "torch-compile", "torch-liger", "torch-quack"]);
    assert_eq!(v["peers"], peers);
    assert_eq!(v["torch"], true);
    for case in v["cases"].as_array().unwrap() {
        for round in case["rounds"].as_array().unwrap() {
            assert_eq!(round["order"].as_array().unwrap().len(), 6);
            assert_eq!(round["sides"].as_array().unwrap().len(), 2);
            let missing: Vec<&str> = round["missing"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap())
                .collect();
            for p in peers.as_array().unwrap() {
                let p = p.as_str().unwrap();
                assert!(
                    missing
                        .iter()
                        .any(|m| m.starts_with(&format!("{p} did not run"))),
                    "{missing:?}"
                );
            }
        }
        let e2e = &case["stats"]["phases"]["e2e"];
        assert!(e2e["torch_gain"]["summary"].is_null());
        assert!(e2e["peer_gains"]["torch-liger"]["summary"].is_null());
        assert!(e2e["peer_gains"]["torch-quack"]["summary"].is_null());
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(
        md.contains("candidate vs torch-compile median [range]"),
        "{md}"
    );
    assert!(
        md.contains("candidate vs torch-quack median [range]"),
        "{md}"
    );
    let o = audit(&out);
    assert!(o.status.success(), "{}", text(&o));
    for d in [r, out] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The load policies and the cluster group size are part of the recorded
/// request: a bench that asked for them replays them (A/A) and says so.
#[test]
fn requests_with_load_policies_replay_as_recorded() {
    let r = bench(
        "policies",
        &[
            "--workers",
            "32",
            "--pack",
            "4",
            "--schedule",
            "streaming-hints hoisted-columns",
        ],
    );
    let v = load(&r);
    for case in v["cases"].as_array().unwrap() {
        assert_eq!(case["request"]["streaming_hints"], true);
        assert_eq!(case["request"]["hoist_columns"], true);
        let id = case["id"].as_str().unwrap();
        assert!(id.contains("streaming-hints"), "{id}");
    }
    let out = tmp("policies-out");
    let o = replay(&r, None, &out);
    assert!(o.status.success(), "{}", text(&o));
    assert!(audit(&out).status.success());
    for d in [r, out] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Regression for the shared peer inputs: the case's `.npy` inputs are
/// written once and every peer side reads them; with the stand-in peer
/// (which computes real row sums from them) eager and compile both run and
/// validate, so the second side found the files the first one used.
#[test]
fn peer_sides_of_a_case_share_one_copy_of_the_inputs() {
    let Some(fake) = fake_peer() else {
        return;
    };
    let dir = tmp("shared-inputs");
    let mut args = vec!["bench"];
    args.extend_from_slice(&common::FAST_CPU);
    args.extend_from_slice(&[
        "--ops",
        "sum",
        "--shapes",
        "3x64,2x257",
        "--dtypes",
        "f32",
        "--torch",
        "--torch-compile",
        "--peer-script",
        fake.to_str().unwrap(),
        "--output",
        dir.to_str().unwrap(),
    ]);
    let o = lanefold(&args);
    assert!(o.status.success(), "{}", text(&o));
    let v = load(&dir);
    for case in v["cases"].as_array().unwrap() {
        let sides = case["sides"].as_array().unwrap();
        let names: Vec<&str> = sides.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for s in sides {
            assert_eq!(s["validation"]["pass"], true, "{}", s["name"]);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A backward operator goes to the peer like a forward one: its inputs
/// as the program names them (softmax_backward: y.npy and dy.npy), its
/// dx read back and validated against float64, in a bench and in a
/// replay of that bench (the stand-in peer computes dx from those files).
#[test]
fn a_backward_case_reaches_the_peer_by_its_programs_names_and_validates() {
    let Some(fake) = fake_peer() else {
        return;
    };
    let dir = tmp("backward-peer");
    let mut args = vec!["bench"];
    args.extend_from_slice(&common::FAST_CPU);
    args.extend_from_slice(&[
        "--ops",
        "softmax_backward",
        "--shapes",
        "3x64,2x257",
        "--dtypes",
        "f32",
        "--torch",
        "--peer-script",
        fake.to_str().unwrap(),
        "--output",
        dir.to_str().unwrap(),
    ]);
    let o = lanefold(&args);
    assert!(o.status.success(), "{}", text(&o));
    let v = load(&dir);
    for case in v["cases"].as_array().unwrap() {
        let sides = case["sides"].as_array().unwrap();
        let peer = sides
            .iter()
            .find(|s| s["name"] == "torch-eager")
            .unwrap_or_else(|| panic!("no torch-eager side: {}", text(&o)));
        assert_eq!(peer["validation"]["pass"], true, "{peer}");
        assert_eq!(peer["validation"]["outputs"][0]["name"], "dx");
    }
    let out = tmp("backward-peer-replay");
    let o = replay_with(
        &dir,
        None,
        &out,
        &["--torch", "--peer-script", fake.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    for case in load(&out)["cases"].as_array().unwrap() {
        for round in case["rounds"].as_array().unwrap() {
            let peer = round["sides"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == "torch-eager")
                .unwrap_or_else(|| panic!("no torch-eager side: {round}"));
            assert_eq!(peer["validation"]["pass"], true, "{peer}");
        }
    }
    for d in [dir, out] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The arguments of a replay of `r` against `c` into `out`, for `rounds`.
fn replay_rounds(r: &Path, c: &Path, out: &Path, rounds: &str, extra: &[&str]) -> Output {
    let (r, c) = (r.join("results.json"), c.join("results.json"));
    let mut args = vec![
        "replay",
        "--backend",
        "cpu",
        "--reference",
        r.to_str().unwrap(),
        "--candidate",
        c.to_str().unwrap(),
        "--rounds",
        rounds,
        "--sample-ms",
        "1",
        "--warmup-ms",
        "1",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    if !extra.contains(&"--samples") {
        args.extend_from_slice(&["--samples", "3"]);
    }
    lanefold(&args)
}

/// A replay longer than one device call: a later run continues it from its
/// last complete round, with the seeds and positions the uninterrupted
/// replay would have used, and the file records both sessions.
#[test]
fn a_resumed_replay_continues_its_rounds_and_passes_the_audit() {
    let r = bench("resume-ref", &[]);
    let c = bench("resume-cand", &["--workers", "32", "--pack", "4"]);
    let out = tmp("resume-out");
    let o = replay_rounds(&r, &c, &out, "1", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(load(&out)["rounds_done"], 1);
    let o = replay_rounds(&r, &c, &out, "3", &["--resume"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("resuming"), "{}", text(&o));
    let v = load(&out);
    assert_eq!(v["rounds_done"], 3);
    assert_eq!(v["resumed"].as_array().unwrap().len(), 1);
    for (k, case) in v["cases"].as_array().unwrap().iter().enumerate() {
        let rounds = case["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 3);
        for (i, round) in rounds.iter().enumerate() {
            assert_eq!(round["round"], i);
            assert_eq!(round["seed"], 1 + i as u64 * 1_000_003 + k as u64 * 10_007);
        }
        assert_eq!(
            rounds[1]["order"],
            serde_json::json!(["candidate", "reference"])
        );
        assert_eq!(case["stats"]["phases"]["e2e"]["gain"]["summary"]["n"], 3);
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("Continued with `--resume`"), "{md}");
    let o = audit(&out);
    assert!(o.status.success(), "{}", text(&o));
}

/// `--resume` refuses what it cannot continue, naming why: other phase
/// settings, a replay that already has the rounds asked for, no replay.
#[test]
fn resume_refuses_other_settings_a_complete_replay_and_a_missing_one() {
    let r = bench("resume2-ref", &[]);
    let c = bench("resume2-cand", &["--workers", "32", "--pack", "4"]);
    let out = tmp("resume2-out");
    let o = replay_rounds(&r, &c, &out, "1", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = replay_rounds(&r, &c, &out, "2", &["--resume", "--samples", "4"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("phase configuration"), "{}", text(&o));
    let o = replay_rounds(&r, &c, &out, "1", &["--resume"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("already has 1 complete rounds"),
        "{}",
        text(&o)
    );
    let o = replay_rounds(&r, &c, &tmp("resume2-none"), "2", &["--resume"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--resume needs the replay"),
        "{}",
        text(&o)
    );
    // The refusals left the replay as it was.
    assert_eq!(load(&out)["rounds_done"], 1);
}

/// Run scripts/compress-results.sh on `dirs`.
fn compress(dirs: &[&Path]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/compress-results.sh");
    std::process::Command::new("bash")
        .arg(script)
        .args(dirs)
        .env("BIN", env!("CARGO_BIN_EXE_lanefold"))
        .output()
        .expect("run compress-results.sh")
}

/// Regression: committed results are stored as results.json.gz. A replay
/// recorded its sources' file_sha256 over the JSON text, so gzipping them
/// afterwards keeps its audit clean; a replay, report, scorecard and
/// resume read the gzipped files by their plain names; a changed gzipped
/// source still fails, and a directory holding both forms is ambiguous.
#[test]
fn gzipped_results_read_transparently_and_keep_their_hashes() {
    use sha2::{Digest, Sha256};
    let r = bench("gz-ref", &[]);
    let c = bench("gz-cand", &["--workers", "32", "--pack", "4"]);
    let out = tmp("gz-out");
    let o = replay(&r, Some(&c), &out);
    assert!(o.status.success(), "{}", text(&o));
    let json = std::fs::read(r.join("results.json")).unwrap();
    let sha = format!("{:x}", Sha256::digest(&json));
    assert_eq!(load(&out)["sources"][0]["file_sha256"], sha.as_str());

    let o = compress(&[&r, &c, &out]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!r.join("results.json").exists() && r.join("results.json.gz").is_file());
    let gz = std::fs::read(r.join("results.json.gz")).unwrap();
    // Idempotent: nothing left to compress, nothing rewritten.
    let o = compress(&[&r, &c, &out]);
    assert!(
        o.status.success() && text(&o).contains("compressed 0 file(s)"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(r.join("results.json.gz")).unwrap(), gz);

    for dir in [&out, &r, &c] {
        let o = audit(dir);
        assert!(o.status.success(), "{}: {}", dir.display(), text(&o));
    }
    for cmd in ["report", "scorecard"] {
        let o = lanefold(&[cmd, out.to_str().unwrap()]);
        assert!(o.status.success(), "{cmd}: {}", text(&o));
    }
    // A new replay from the gzipped files records the same hash and a
    // relative path by the plain name, and audits clean.
    let again = tmp("gz-again");
    let o = replay(&r, Some(&c), &again);
    assert!(o.status.success(), "{}", text(&o));
    let v = load(&again);
    assert_eq!(v["sources"][0]["file_sha256"], sha.as_str());
    let rel = v["sources"][0]["relative_path"].as_str().unwrap();
    assert!(rel.ends_with("gz-ref/results.json"), "{rel}");
    let o = audit(&again);
    assert!(o.status.success(), "{}", text(&o));
    // A resumed gzipped replay is written plain again, the stale copy gone.
    let o = replay_rounds(&r, &c, &out, "3", &["--resume"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("results.json").is_file() && !out.join("results.json.gz").exists());
    let o = audit(&out);
    assert!(o.status.success(), "{}", text(&o));

    // A changed source, gzipped again, no longer matches the replay.
    let mut changed = load(&r);
    changed["cases"][0]["request"]["workers"] = 64.into();
    save(&r, &changed);
    let o = compress(&[&r]);
    assert!(o.status.success(), "{}", text(&o));
    let o = audit(&again);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("changed since the replay"),
        "{}",
        text(&o)
    );
    // Both forms in one directory: the audit and the script refuse it.
    std::fs::write(r.join("results.json"), &json).unwrap();
    let o = audit(&r);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("ambiguous"), "{}", text(&o));
    assert!(!compress(&[&r]).status.success());
    for d in [r, c, out, again] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A CPU search with captured kernel sources (sources/SHA.cu).
fn search_with_sources(dir: &Path) {
    let mut args = vec!["search"];
    args.extend(common::FAST_CPU);
    args.extend([
        "--ops",
        "rmsnorm",
        "--shapes",
        "4x64",
        "--tune-workers",
        "0,32",
        "--tune-pack",
        "1,2",
        "--max-candidates",
        "4",
        "--capture-sources",
        "--output",
        dir.to_str().unwrap(),
    ]);
    let o = lanefold(&args);
    assert!(o.status.success(), "{}", text(&o));
}

/// The files in DIR/sources whose names end in `suffix` (none where the
/// folder is gone).
fn sources_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let Ok(listing) = std::fs::read_dir(dir.join("sources")) else {
        return vec![];
    };
    let mut v: Vec<_> = listing
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// Regression: captured kernel sources are stored bundled, one
/// `sources.json.gz` per directory (thousands of small files had put the
/// tree over the device tool's carry limit). Their recorded source_sha256
/// is over the plain text, so the audit stays clean; a replay of the
/// search and a search written again into the directory still work, the
/// latter leaving bundled sources where they are; a corrupt bundle, an
/// entry whose text no longer matches its hash, and a source both loose
/// and bundled fail the audit.
#[test]
fn bundled_sources_keep_their_hashes_and_fail_the_audit_when_wrong() {
    let s = tmp("bundled-search");
    search_with_sources(&s);
    let v = load(&s);
    let rel = v["problems"][0]["winner"]["source_file"]
        .as_str()
        .unwrap()
        .to_string();
    let plain = s.join(&rel);
    let bundle = s.join(lanefold_measure::results::SOURCES_BUNDLE);
    let text_cu = std::fs::read(&plain).unwrap();
    let n = sources_ending(&s, ".cu").len();
    assert!(n >= 2, "{n} sources captured");

    // results.json gzipped, the n sources bundled: two files written.
    let o = compress(&[&s]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("compressed 2 file(s)"), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{n} sources bundled")),
        "{}",
        text(&o)
    );
    assert!(!s.join("sources").exists() && bundle.is_file());
    let bundle_bytes = std::fs::read(&bundle).unwrap();
    let o = audit(&s);
    assert!(o.status.success(), "{}", text(&o));
    // Idempotent.
    let o = compress(&[&s]);
    assert!(text(&o).contains("compressed 0 file(s)"), "{}", text(&o));
    assert_eq!(std::fs::read(&bundle).unwrap(), bundle_bytes);
    // A source loose beside its bundled copy is ambiguous; bundling it
    // again (same text) leaves the bundle's bytes as they were.
    std::fs::create_dir_all(plain.parent().unwrap()).unwrap();
    std::fs::write(&plain, &text_cu).unwrap();
    let o = audit(&s);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("ambiguous"), "{}", text(&o));
    let o = compress(&[&s]);
    assert!(
        o.status.success() && text(&o).contains("compressed 1 file(s)"),
        "{}",
        text(&o)
    );
    assert!(!plain.exists());
    assert_eq!(std::fs::read(&bundle).unwrap(), bundle_bytes);

    // A replay of the bundled search audits clean.
    let out = tmp("bundled-replay");
    let o = replay(&s, None, &out);
    assert!(o.status.success(), "{}", text(&o));
    let o = audit(&out);
    assert!(o.status.success(), "{}", text(&o));

    // The same search written again into the directory: the sources the
    // bundle holds are not written loose again.
    search_with_sources(&s);
    assert!(sources_ending(&s, ".cu").is_empty());
    let o = audit(&s);
    assert!(o.status.success(), "{}", text(&o));
    assert!(compress(&[&s]).status.success());
    assert_eq!(std::fs::read(&bundle).unwrap(), bundle_bytes);

    // A corrupt bundle.
    let mut bad = bundle_bytes.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    std::fs::write(&bundle, &bad).unwrap();
    let o = audit(&s);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("captured source {rel}: ")) && text(&o).contains("corrupt gzip"),
        "{}",
        text(&o)
    );
    // A bundled text that no longer matches its recorded hash: every
    // source loose again, one edited, bundled afresh.
    std::fs::remove_file(&bundle).unwrap();
    search_with_sources(&s);
    let mut edited = text_cu.clone();
    edited.extend_from_slice(b"// edited\n");
    std::fs::write(&plain, &edited).unwrap();
    assert!(compress(&[&s]).status.success());
    assert!(bundle.is_file() && !plain.exists());
    let o = audit(&s);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("captured source {rel} hashes to")),
        "{}",
        text(&o)
    );
    // A loose text that differs from the bundled one: the script refuses
    // to bundle it and leaves both.
    std::fs::create_dir_all(plain.parent().unwrap()).unwrap();
    std::fs::write(&plain, &text_cu).unwrap();
    let o = compress(&[&s]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("differs from the entry"), "{}", text(&o));
    assert!(plain.is_file() && bundle.is_file());
    for d in [s, out] {
        let _ = std::fs::remove_dir_all(d);
    }
}
