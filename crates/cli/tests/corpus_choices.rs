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
