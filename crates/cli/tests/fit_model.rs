//! `lanefold fit-model`: a fit over committed searches writes a model file
//! the mapper can read, `--check` holds a file to what the fit gives, and
//! bad inputs are refused naming what is wrong.

mod common;
use common::{lanefold, text, tmp};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `fit-model` on `results` with `corpus` and the committed targets.
fn fit_model(results: &Path, corpus: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    let root = root();
    let mut args = vec![
        "fit-model".to_string(),
        "--results".into(),
        results.display().to_string(),
        "--corpus".into(),
        corpus.display().to_string(),
        "--targets".into(),
        root.join("bench/targets.toml").display().to_string(),
        "--output".into(),
        output.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    lanefold(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn a_fit_writes_a_model_file_that_check_reproduces() {
    let dir = tmp("fit-model", "two-searches");
    let results = dir.join("results");
    for name in [
        "2026-11-29-rmsnorm-search-h200",
        "2026-11-29-softmax-bf16-search-h200",
    ] {
        let from = root().join("bench/results").join(name).join("results.json");
        let text = lanefold_measure::results::read_text(&from).unwrap();
        std::fs::create_dir_all(results.join(name)).unwrap();
        std::fs::write(results.join(name).join("results.json"), text).unwrap();
    }
    // The split deals rmsnorm f32 64x4096 to the held-out part, 1x127 to
    // the fitted one.
    let corpus = dir.join("corpus.csv");
    std::fs::write(
        &corpus,
        "model,tensor,op,dtype,rows,n,config\n\
         a,x,rmsnorm,f32,64,4096,c\n\
         b,x,rmsnorm,f32,1,127,c\n",
    )
    .unwrap();
    let output = dir.join("h200-model.json");
    let o = fit_model(&results, &corpus, &output, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("picks within 2% of the best, 5 fitted searches"),
        "{out}"
    );
    assert!(out.contains("1 held-out searches"), "{out}");
    let written = std::fs::read_to_string(&output).unwrap();
    let (target, params) = lanefold_plan::fitted::parse(&written).unwrap();
    assert_eq!(target, "h200");
    let file: serde_json::Value = serde_json::from_str(&written).unwrap();
    assert_eq!(file["fit"]["searches"].as_array().unwrap().len(), 5);
    assert_eq!(file["fit"]["held_out"].as_array().unwrap().len(), 1);
    assert!(file["fit"]["version"].as_str().unwrap().contains("git "));

    let o = fit_model(&results, &corpus, &output, &["--check"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("the fit reproduces its parameters"));
    // Another file's parameters are refused.
    let mut changed = file.clone();
    changed["params"]["tail"] = (params.tail + 0.01).into();
    std::fs::write(&output, changed.to_string()).unwrap();
    let o = fit_model(&results, &corpus, &output, &["--check"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("not what the fit gives now"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_inputs_are_refused_naming_them() {
    let dir = tmp("fit-model", "bad");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let corpus = root().join("bench/corpus.csv");
    let output = dir.join("model.json");
    let refused = |o: std::process::Output, what: &str| {
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains(what), "{what}: {}", text(&o));
    };
    let fit =
        |results: &Path, corpus: &Path, extra: &[&str]| fit_model(results, corpus, &output, extra);
    refused(
        fit(&dir.join("nowhere"), &corpus, &[]),
        "reading the results directory",
    );
    refused(fit(&empty, &corpus, &[]), "no search on h200");
    refused(
        fit(&empty, &corpus, &["--target", "cpu"]),
        "no search on cpu",
    );
    refused(
        fit(&empty, &corpus, &["--target", "tpu"]),
        "unknown target 'tpu'",
    );
    // --check reads the file before it fits.
    refused(fit(&empty, &corpus, &["--check"]), "reading the model file");
    std::fs::write(&output, "{\"schema\": \"lanefold-model/1\"}").unwrap();
    refused(fit(&empty, &corpus, &["--check"]), "missing field `target`");
    let bad = dir.join("corpus.csv");
    std::fs::write(&bad, "model,op\nx,y\n").unwrap();
    refused(fit(&empty, &bad, &[]), "corpus.csv");
    assert!(!dir.join("nowhere").exists());
    let _ = std::fs::remove_dir_all(dir);
}
