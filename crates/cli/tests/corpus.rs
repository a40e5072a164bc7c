//! The automatic mapper's pick for every corpus problem on the H200, one
//! line each, as a committed snapshot: a change of choice is a reviewable
//! diff (`cargo insta review`), never a silent move.

use std::path::{Path, PathBuf};

use lanefold::corpus_cmd::corpus_lines;
use lanefold_measure::corpus::{load, SPLIT_SEED};
use lanefold_plan::Target;

#[test]
fn default_plans_of_the_corpus_on_the_h200() {
    let corpus =
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/corpus.csv")).unwrap();
    let lines = corpus_lines(&corpus, SPLIT_SEED, Some(&Target::h200()));
    assert!(!lines.contains("refused"), "{lines}");
    insta::assert_snapshot!(lines);
}

/// The same for the drawn problems of no list (bench/drawn.csv): shapes
/// nobody chose, whose picks move only as a reviewed diff too.
#[test]
fn default_plans_of_the_drawn_problems_on_the_h200() {
    let drawn = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/drawn.csv")).unwrap();
    let lines = corpus_lines(&drawn, SPLIT_SEED, Some(&Target::h200()));
    assert!(!lines.contains("refused"), "{lines}");
    // Nothing is fitted on them: the split's part column says nothing.
    let lines: Vec<String> = lines
        .lines()
        .map(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            [&words[..3], &words[4..]].concat().join(" ")
        })
        .collect();
    insta::assert_snapshot!(lines.join("\n"));
}

/// `corpus --draw` prints a corpus file and refuses a count it cannot
/// draw with a usage error, not a hang or a panic.
#[test]
fn corpus_draw_prints_a_corpus_file_and_refuses_bad_counts() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lanefold"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["corpus", "--draw", "5", "--seed", "9"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let problems = lanefold_measure::corpus::parse(&text).unwrap();
    assert_eq!(problems, lanefold_measure::corpus::drawn(9, 5));
    for bad in ["0", "-3", "1000000", "many"] {
        let out = run(&["corpus", &format!("--draw={bad}")]);
        assert_eq!(out.status.code(), Some(2), "--draw {bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--draw"),
            "--draw {bad}"
        );
    }
}

/// Every corpus problem's default plan, written as its schedule text and
/// parsed back, plans explicitly to the same plan and the same kernel
/// source: the text form names everything the mapper chose.
#[test]
fn the_default_plans_schedule_text_plans_back_to_the_same_kernel() {
    use lanefold_ir::OperatorOptions;
    use lanefold_plan::{plan, LayoutRequest, Problem};
    let corpus =
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/corpus.csv")).unwrap();
    let target = Target::h200();
    let options = lanefold_codegen::CodegenOptions::default();
    for p in &corpus {
        let problem = Problem::operator(p.op, OperatorOptions::default(), p.dtype, p.shape);
        let chosen = plan(&problem, &target, &LayoutRequest::default()).unwrap();
        let text = chosen.schedule().to_string();
        let parsed: LayoutRequest = text.parse().unwrap();
        assert_eq!(parsed, chosen.schedule(), "{text}");
        let again = plan(&problem, &target, &parsed)
            .unwrap_or_else(|e| panic!("{} {} {}: {text}: {e}", p.op, p.dtype, p.shape));
        assert_eq!(again, chosen, "{} {} {}: {text}", p.op, p.dtype, p.shape);
        assert_eq!(again.describe(), chosen.describe());
        assert_eq!(
            lanefold_codegen::generate(&again, &options).unwrap().source,
            lanefold_codegen::generate(&chosen, &options)
                .unwrap()
                .source,
            "{text}"
        );
    }
}

mod common;
use common::{fake_peer, lanefold, load as load_results, text, tmp};

/// A fresh temporary folder and, in it, a corpus.csv of these rows.
fn corpus_in_tmp(name: &str, rows: &[&str]) -> (PathBuf, PathBuf) {
    let dir = tmp("corpus", name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("corpus.csv");
    let text = format!("model,tensor,op,dtype,rows,n,config\n{}\n", rows.join("\n"));
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// `bench --corpus` runs exactly the corpus's problems of the asked part,
/// in file order, filtered by --ops (a backward operator taking its
/// forward's problems), --dtypes and --min-rows; a filter that leaves
/// nothing, or a malformed corpus, is an error naming the file.
#[test]
fn bench_runs_the_problems_of_a_corpus_part() {
    let (dir, file) = corpus_in_tmp(
        "bench",
        &[
            "a,x,rmsnorm,bf16,3,257,c",
            "b,x,softmax,f32,2,64,c",
            "c,x,sum,f32,1,33,c",
        ],
    );
    let out = dir.join("out");
    let bench = |output: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--backend",
            "cpu",
            "--corpus",
            file.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.extend(["--output", output.to_str().unwrap()]);
        lanefold(&args)
    };
    let o = bench(
        &out,
        &[
            "--ops",
            "rmsnorm,softmax",
            "--samples",
            "1",
            "--sample-ms",
            "1",
            "--warmup-ms",
            "0",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Progress bars are drawn only on a terminal: piped output has none.
    assert!(!text(&o).contains("ETA"), "{}", text(&o));
    let v = load_results(&out);
    let ids: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids[0].starts_with("rmsnorm/bf16/3x257/"), "{ids:?}");
    // Each case records its request's schedule text beside the JSON.
    for case in v["cases"].as_array().unwrap() {
        let request: lanefold_plan::LayoutRequest =
            serde_json::from_value(case["request"].clone()).unwrap();
        let text = case["schedule"].as_str().unwrap();
        assert_eq!(text.parse::<lanefold_plan::LayoutRequest>(), Ok(request));
    }
    assert!(ids[1].starts_with("softmax/f32/2x64/"), "{ids:?}");

    // A backward operator takes its forward's problems; --min-rows keeps
    // those of as many rows or more.
    let backward = dir.join("backward");
    let quick = ["--samples", "1", "--sample-ms", "1", "--warmup-ms", "0"];
    let o = bench(
        &backward,
        &[
            &["--ops", "rmsnorm_backward,softmax,softmax_backward"][..],
            &["--min-rows", "2"],
            &quick,
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let v = load_results(&backward);
    let ids: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(
        ids[0].starts_with("rmsnorm_backward/bf16/3x257/"),
        "{ids:?}"
    );
    assert!(ids[1].starts_with("softmax/f32/2x64/"), "{ids:?}");
    assert!(ids[2].starts_with("softmax_backward/f32/2x64/"), "{ids:?}");
    let o = bench(
        &dir.join("few"),
        &[&["--min-rows", "4"][..], &quick].concat(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no problem of"), "{}", text(&o));

    // Shards split the filtered list: every second problem from the first,
    // then the rest; a malformed shard is a usage error.
    let ops = ["--ops", "rmsnorm_backward,softmax,softmax_backward"];
    let mut sharded = vec![];
    for shard in ["1/2", "2/2"] {
        let out = dir.join(format!("shard{}", &shard[..1]));
        let o = bench(&out, &[&ops[..], &["--shard", shard], &quick].concat());
        assert!(o.status.success(), "{}", text(&o));
        let v = load_results(&out);
        for case in v["cases"].as_array().unwrap() {
            sharded.push(case["id"].as_str().unwrap().to_string());
        }
    }
    let whole: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        sharded,
        [&whole[0], &whole[2], &whole[1]].map(String::from).to_vec()
    );
    for bad in ["3/2", "0/1", "x"] {
        let o = bench(&dir.join("bad-shard"), &["--shard", bad]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("write I/N"), "{}", text(&o));
    }

    let o = bench(&dir.join("none"), &["--dtypes", "f16"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no problem of"), "{}", text(&o));

    std::fs::write(&file, "model,op\nx,y\n").unwrap();
    let o = bench(&dir.join("bad"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("corpus.csv"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// `scorecard --corpus` judges the committed held-out run against the
/// [corpus] targets: verdicts first, the 7 problems its deadline left out
/// listed; another GPU, other parts, another corpus file, a replay
/// directory and a targets file without [corpus] behave as documented.
#[test]
fn corpus_scorecard_judges_the_committed_report_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let run = root.join("bench/results/2026-12-02-corpus-report-cold-h200");
    let run = run.to_str().unwrap();
    let o = lanefold(&["scorecard", "--corpus", run]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.starts_with("# Shape corpus: the report part\n\n44 of 51 problems measured."));
    let targets = out.find("## Targets").unwrap();
    assert!(targets < out.find("## rmsnorm").unwrap(), "{out}");
    assert!(out.contains("| 19 of 44 (43%) | missed |"), "{out}");
    assert_eq!(out.matches("| not measured |").count(), 7, "{out}");
    assert!(
        out.contains("| f32 | 65536x77 | 30.21 | 11.38 | torch-eager | 14.42 | 0.477 |"),
        "{out}"
    );
    assert!(
        out.contains("\nCost model against lanefold's gpu p50: within 25% on "),
        "{out}"
    );

    // Another GPU's results never enter the H200's card.
    let o = lanefold(&["scorecard", "--corpus", "--gpu", "H100", run]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("0 of 51 problems measured"),
        "{}",
        text(&o)
    );

    let o = lanefold(&["scorecard", "--corpus", "--part", "fit", run]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("0 of 93 problems measured"),
        "{}",
        text(&o)
    );

    let (dir, file) = corpus_in_tmp("scorecard", &["m,t,rmsnorm,f32,1,4096,c"]);
    let args = ["scorecard", "--corpus", "--part", "all", "--corpus-file"];
    let o = lanefold(&[&args[..], &[file.to_str().unwrap(), run]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("1 of 1 problems measured"),
        "{}",
        text(&o)
    );

    let replay = root.join("bench/results/2026-11-29-large-final-replay-h200");
    let o = lanefold(&["scorecard", "--corpus", replay.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("reads bench results files"),
        "{}",
        text(&o)
    );

    let committed = std::fs::read_to_string(root.join("bench/targets.toml")).unwrap();
    let without = dir.join("targets.toml");
    std::fs::write(&without, &committed[..committed.find("[corpus]").unwrap()]).unwrap();
    let o = lanefold(&[
        "scorecard",
        "--corpus",
        "--targets",
        without.to_str().unwrap(),
        run,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no [corpus] section"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// The README and PERFORMANCE.md quote the held-out standing that
/// bench/CORPUS.md (regenerated from the committed runs in CI) computes;
/// a new corpus run that moves it must move them too.
#[test]
fn readme_and_performance_quote_the_corpus_standing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |name: &str| std::fs::read_to_string(root.join(name)).unwrap();
    let corpus = read("bench/CORPUS.md");
    let wins = corpus
        .lines()
        .find(|l| l.starts_with("| wins |"))
        .expect("CORPUS.md has the wins target");
    // "| wins | ... | 34 of 51 (67%) | missed |": the measured cell.
    let measured = wins.split('|').nth(3).unwrap().trim();
    let count = &measured[..measured.find(" (").unwrap()];
    let readme = read("README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        readme.contains(&format!("on {count} problems")),
        "README.md should say `on {count} problems` (bench/CORPUS.md: {measured})"
    );
    assert!(
        read("PERFORMANCE.md").contains(&format!(": {count} (")),
        "PERFORMANCE.md should quote {measured}"
    );
}

/// `scorecard --corpus --backward` judges the input gradients of the
/// corpus's training shapes: a softmax problem of enough rows is judged as
/// softmax_backward (its forward's part of the split), one of too few rows
/// and a sum (no gradient) are left out.
#[test]
fn corpus_scorecard_judges_input_gradients_of_training_shapes() {
    let Some(fake) = fake_peer() else {
        return;
    };
    let (dir, file) = corpus_in_tmp(
        "backward-card",
        &[
            "a,probs,softmax,f32,512,64,c",
            "b,probs,softmax,f32,8,64,c",
            "c,x,sum,f32,1024,33,c",
        ],
    );
    let out = dir.join("bench");
    let o = lanefold(&[
        "bench",
        "--backend",
        "cpu",
        "--corpus",
        file.to_str().unwrap(),
        "--ops",
        "softmax_backward",
        "--min-rows",
        "512",
        "--torch",
        "--peer-script",
        fake.to_str().unwrap(),
        "--samples",
        "3",
        "--sample-ms",
        "1",
        "--warmup-ms",
        "0",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let card = |backward: bool| {
        // A CPU run names no GPU.
        let mut args = vec!["scorecard", "--corpus", "--part", "all", "--gpu", "any"];
        if backward {
            args.push("--backward");
        }
        args.extend([
            "--corpus-file",
            file.to_str().unwrap(),
            out.to_str().unwrap(),
        ]);
        lanefold(&args)
    };
    let o = card(true);
    assert!(o.status.success(), "{}", text(&o));
    let md = text(&o);
    assert!(
        md.starts_with("# Shape corpus: both parts, input gradients of its problems of 512 rows or more\n\n1 of 1 problems measured."),
        "{md}"
    );
    assert!(md.contains("## softmax_backward: 1 of 1 measured"), "{md}");
    assert!(md.contains("| a | probs | f32 | 512x64 |"), "{md}");
    assert!(!md.contains("| b | probs |"), "{md}");
    assert!(!md.contains("decode"), "{md}");
    // The forward card holds none of it: the cases are gradients.
    let o = card(false);
    assert!(
        text(&o).contains("0 of 3 problems measured"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The PyTorch peer's process is replaced where PyTorch would keep device
/// memory: a refusal for want of memory restarts it and runs the side once
/// more (a corpus run once lost every large case after one), and a reply
/// whose CUDA graph capture failed restarts it for the next side.
#[test]
fn regression_a_peer_out_of_memory_or_failed_capture_restarts_the_peer() {
    let Some(fake) = fake_peer() else {
        return;
    };
    let dir = tmp("bench", "peer-restarts");
    std::fs::create_dir_all(&dir).unwrap();
    // Each run's env: the stand-in peer's behaviours (python/fake_peer.py).
    let run = |name: &str, env: &[(&str, &std::ffi::OsStr)]| {
        let out = dir.join(name);
        let starts = dir.join(format!("{name}-starts"));
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lanefold"));
        cmd.args([
            "bench",
            "--backend",
            "cpu",
            "--ops",
            "sum",
            "--shapes",
            "64x33",
            "--torch",
            "--peer-script",
            fake.to_str().unwrap(),
            "--samples",
            "3",
            "--sample-ms",
            "1",
            "--warmup-ms",
            "0",
            "--output",
            out.to_str().unwrap(),
        ])
        .env("FAKE_PEER_STARTS", &starts);
        cmd.envs(env.iter().copied());
        let o = cmd.output().unwrap();
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        let sides: Vec<String> = load_results(&out)["cases"][0]["sides"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        let starts = std::fs::read_to_string(&starts).unwrap().lines().count();
        (t, sides, starts)
    };
    let marker = dir.join("oom-once");
    let (t, sides, starts) = run("oom", &[("FAKE_PEER_OOM_ONCE", marker.as_os_str())]);
    assert!(marker.exists(), "the fake peer never refused: {t}");
    assert!(
        t.contains("ran out of device memory; restarting the PyTorch peer"),
        "{t}"
    );
    assert!(sides.contains(&"torch-eager".to_string()), "{sides:?}");
    assert_eq!(starts, 2, "{t}");
    let (t, sides, starts) = run("no-graph", &[("FAKE_PEER_NO_GRAPH", "1".as_ref())]);
    assert!(
        t.contains("CUDA graph capture failed; restarting the PyTorch peer"),
        "{t}"
    );
    assert!(sides.contains(&"torch-eager".to_string()), "{sides:?}");
    assert_eq!(starts, 2, "{t}");
    let (_, _, starts) = run("plain", &[]);
    assert_eq!(starts, 1);
}
