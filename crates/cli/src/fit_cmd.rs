//! `lanefold fit-model`: fit the roofline's constants to a target's
//! committed searches (`lanefold_measure::fit`) and write
//! `tuning/<target>-model.json`, which the mapper embeds.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_measure::corpus::{self, Part, SPLIT_SEED};
use lanefold_measure::fit::{self, FitReport, ModelFile, Planned, Search, Weights, Within};
use lanefold_measure::progress::SlowBar;
use lanefold_plan::{fitted::MODEL_SCHEMA, ModelParams, Problem, Shape, Target};

#[derive(Args)]
pub struct FitModelArgs {
    /// The target whose searches are fitted.
    #[arg(long, default_value = "h200")]
    pub target: String,
    /// The directory of results directories (searches are found by schema).
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
    /// The shape corpus: searches on its held-out part are only reported.
    #[arg(long, default_value = "bench/corpus.csv")]
    pub corpus: PathBuf,
    /// The speed targets: their shapes' automatic plans are compared.
    #[arg(long, default_value = "bench/targets.toml")]
    pub targets: PathBuf,
    /// Where the model file goes [default: tuning/<target>-model.json].
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write nothing: fit, and exit 1 unless the output file holds the
    /// same parameters (the shipped file is reproducible).
    #[arg(long)]
    pub check: bool,
}

/// The shares of the best a pick is counted within.
const SHARES: [f64; 3] = [0.02, 0.05, 0.10];

pub fn fit_model_cmd(args: FitModelArgs) -> Result<()> {
    let target = Target::by_name(&args.target)
        .with_context(|| format!("unknown target '{}' (expected h200 or cpu)", args.target))?;
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("tuning/{}-model.json", target.name)));
    // The file `--check` holds to the fit, read before the fit runs.
    let shipped = args.check.then(|| ModelFile::read(&output)).transpose()?;
    let corpus = corpus::load(&args.corpus)?;
    let targets = lanefold_measure::scorecard::Targets::read(&args.targets)?;
    let held_out = fit::held_out_keys(&corpus, SPLIT_SEED);

    let bar = SlowBar::new(100 + fit::FIT_STAGES, "fit-model");
    let data = fit::collect(&args.results, &target, &held_out, &|i, n| {
        bar.set((100 * i / n.max(1)) as u64, "reading searches")
    })?;
    let defaults = ModelParams::default();
    let weights = Weights::default();
    // Target shapes first, so that a problem in both is listed as one.
    let mut problems: Vec<Planned> = vec![];
    for family in &targets.families {
        for shape in &family.shapes {
            let shape: Shape = shape
                .parse()
                .map_err(|e| anyhow::anyhow!("{}: shape {shape}: {e}", args.targets.display()))?;
            for op in Operator::SIX {
                for dtype in [DType::F32, DType::Bf16] {
                    problems.push(Planned {
                        problem: Problem::operator(op, OperatorOptions::default(), dtype, shape),
                        source: "target shape".into(),
                        pinned: true,
                        held_out: false,
                    });
                }
            }
        }
    }
    problems.extend(corpus.iter().map(|p| Planned {
        problem: Problem::operator(p.op, OperatorOptions::default(), p.dtype, p.shape),
        source: format!("corpus {}", p.part(SPLIT_SEED)),
        pinned: false,
        held_out: p.part(SPLIT_SEED) == Part::Report,
    }));
    let references = fit::references(&problems, &target, &defaults);
    let fitted = fit::fit(&data.fit, &references, &defaults, &weights, &|stage| {
        bar.set(100 + stage, "fitting")
    });
    bar.finish();
    let after = fitted.params;

    let all: Vec<&Search> = data.fit.iter().chain(&data.held_out).collect();
    let moved = fit::moved_picks(&problems, &target, &defaults, &after, &all);

    let count = |p: &ModelParams, s: &[Search], share| fit::picks_within(p, s, share);
    let within: Vec<Within> = SHARES
        .iter()
        .map(|&share| Within {
            within: share,
            fit_before: count(&defaults, &data.fit, share),
            fit_after: count(&after, &data.fit, share),
            held_out_before: count(&defaults, &data.held_out, share),
            held_out_after: count(&after, &data.held_out, share),
        })
        .collect();
    let file = ModelFile {
        schema: MODEL_SCHEMA.into(),
        about: fit::ABOUT.into(),
        target: target.name.clone(),
        params: after,
        fit: FitReport {
            version: lanefold_measure::env::BUILD_VERSION.into(),
            binary_sha256: lanefold_measure::env::binary_sha256(),
            corpus: args.corpus.display().to_string(),
            split_seed: SPLIT_SEED,
            weights,
            defaults,
            loss_before: fit::loss(&defaults, &data.fit, &references, &weights),
            loss_after: fitted.loss,
            sweeps: fitted.sweeps,
            evaluations: fitted.evaluations,
            fit_searches: data.fit.len(),
            held_out_searches: data.held_out.len(),
            samples: data.fit.iter().map(|s| s.samples.len()).sum(),
            within,
            searches: fit::search_picks(&defaults, &after, &data.fit),
            held_out: fit::search_picks(&defaults, &after, &data.held_out),
            moved,
            skipped: data.skipped.clone(),
        },
    };
    print_summary(&file);
    if let Some(shipped) = shipped {
        if !fit::same_params(&shipped.params, &file.params) {
            bail!(
                "{}: its parameters are not what the fit gives now; run `lanefold fit-model` \
                 and commit the file",
                output.display()
            );
        }
        println!("{}: the fit reproduces its parameters", output.display());
    } else {
        file.write(&output)?;
        println!("wrote {}", output.display());
    }
    Ok(())
}

fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}

fn print_summary(file: &ModelFile) {
    let f = &file.fit;
    let mut t = table(vec!["", "defaults", "fitted"]);
    for (name, b, a) in [
        ("loss", f.loss_before.total, f.loss_after.total),
        (
            "  mean squared log error",
            f.loss_before.msle,
            f.loss_after.msle,
        ),
        ("  ranking error", f.loss_before.rank, f.loss_after.rank),
        ("  soft pick regret", f.loss_before.pick, f.loss_after.pick),
        (
            "  share of picks moved",
            f.loss_before.moved,
            f.loss_after.moved,
        ),
    ] {
        t.add_row(vec![name.to_string(), format!("{b:.4}"), format!("{a:.4}")]);
    }
    for w in &f.within {
        let pct = 100.0 * w.within;
        t.add_row(vec![
            format!(
                "picks within {pct:.0}% of the best, {} fitted searches",
                f.fit_searches
            ),
            w.fit_before.to_string(),
            w.fit_after.to_string(),
        ]);
        if f.held_out_searches > 0 {
            t.add_row(vec![
                format!(
                    "picks within {pct:.0}% of the best, {} held-out searches",
                    f.held_out_searches
                ),
                w.held_out_before.to_string(),
                w.held_out_after.to_string(),
            ]);
        }
    }
    println!("{t}");
    if f.held_out_searches == 0 {
        println!("no committed search is on a held-out corpus problem");
    }
    let mut t = table(vec!["parameter", "default", "fitted", "bounds"]);
    for (b, (d, a)) in ModelParams::BOUNDS
        .iter()
        .zip(f.defaults.values().into_iter().zip(file.params.values()))
    {
        t.add_row(vec![
            b.name.to_string(),
            format!("{d:.4}"),
            format!("{a:.4}"),
            format!("{}..{}{}", b.min, b.max, if b.log { " (log)" } else { "" }),
        ]);
    }
    println!("{t}");
    let changed: Vec<_> = f
        .searches
        .iter()
        .chain(&f.held_out)
        .filter(|s| s.pick_before != s.pick_after)
        .collect();
    if !changed.is_empty() {
        let mut t = table(vec![
            "search",
            "pick (defaults)",
            "regret",
            "pick (fitted)",
            "regret",
        ]);
        for s in changed {
            t.add_row(vec![
                s.search.clone(),
                s.pick_before.clone(),
                format!("{:.3}", s.regret_before),
                s.pick_after.clone(),
                format!("{:.3}", s.regret_after),
            ]);
        }
        println!("searches whose pick the fit changes:\n{t}");
    }
    if f.moved.is_empty() {
        println!("no automatic plan of the corpus or the target shapes moves");
    } else {
        let mut t = table(vec![
            "problem",
            "from",
            "plan (defaults)",
            "µs",
            "plan (fitted)",
            "µs",
            "measured both",
        ]);
        for m in &f.moved {
            let measured = if m.measured.is_empty() {
                "no".to_string()
            } else {
                m.measured
                    .iter()
                    .map(|b| format!("{:.2} -> {:.2} ({})", b.before_us, b.after_us, b.search))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            t.add_row(vec![
                m.problem.clone(),
                m.source.clone(),
                m.before.clone(),
                format!("{:.2}", m.before_predicted_us),
                m.after.clone(),
                format!("{:.2}", m.after_predicted_us),
                measured,
            ]);
        }
        println!("automatic plans the fit moves:\n{t}");
    }
    println!(
        "{} samples in {} searches ({} held out); {} left out (the file's fit.skipped); \
         {} sweeps, {} evaluations",
        f.samples,
        f.fit_searches,
        f.held_out_searches,
        f.skipped.len(),
        f.sweeps,
        f.evaluations
    );
}
