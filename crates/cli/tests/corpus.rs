//! The automatic mapper's pick for every corpus problem on the H200, one
//! line each, as a committed snapshot: a change of choice is a reviewable
//! diff (`cargo insta review`), never a silent move.

use std::path::Path;

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

mod common;
use common::{lanefold, load as load_results, text, tmp};

/// `bench --corpus` runs exactly the corpus's problems of the asked part,
/// in file order, filtered by --ops and --dtypes; a filter that leaves
/// nothing, or a malformed corpus, is an error naming the file.
#[test]
fn bench_runs_the_problems_of_a_corpus_part() {
    let dir = tmp("corpus", "bench");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("corpus.csv");
    std::fs::write(
        &file,
        "model,tensor,op,dtype,rows,n,config\n\
         a,x,rmsnorm,bf16,3,257,c\n\
         b,x,softmax,f32,2,64,c\n\
         c,x,sum,f32,1,33,c\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = lanefold(&[
        "bench",
        "--backend",
        "cpu",
        "--corpus",
        file.to_str().unwrap(),
        "--ops",
        "rmsnorm,softmax",
        "--samples",
        "1",
        "--sample-ms",
        "1",
        "--warmup-ms",
        "0",
        "--output",
        out.to_str().unwrap(),
    ]);
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
    assert!(ids[1].starts_with("softmax/f32/2x64/"), "{ids:?}");

    let o = lanefold(&[
        "bench",
        "--backend",
        "cpu",
        "--corpus",
        file.to_str().unwrap(),
        "--dtypes",
        "f16",
        "--output",
        dir.join("none").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no problem of"), "{}", text(&o));

    std::fs::write(&file, "model,op\nx,y\n").unwrap();
    let o = lanefold(&[
        "bench",
        "--backend",
        "cpu",
        "--corpus",
        file.to_str().unwrap(),
        "--output",
        dir.join("bad").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("corpus.csv"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}
