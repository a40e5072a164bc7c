//! `lanefold corpus`: the shape corpus, its split, and (with `--plans`) the
//! plan this binary's mapper picks for each problem, so a change of choice
//! shows as a reviewable diff of one line per problem.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_measure::bench::BenchProblem;
use lanefold_measure::corpus::{self, CorpusProblem, Part, SPLIT_SEED};
use lanefold_plan::{plan, LayoutRequest, Problem, Target};

#[derive(Args)]
pub struct CorpusArgs {
    /// The corpus file (CSV: model,tensor,op,dtype,rows,n,config).
    #[arg(long, default_value = "bench/corpus.csv")]
    pub file: PathBuf,
    /// Only the problems of this part of the split.
    #[arg(long, value_enum, default_value_t = PartArg::All)]
    pub part: PartArg,
    /// The split's seed; the committed split uses the default. With
    /// `--draw`, the draw's seed.
    #[arg(long, default_value_t = SPLIT_SEED)]
    pub seed: u64,
    /// Print a corpus file of this many problems of no list instead (shapes
    /// log-uniform over row lengths 32-262144 and 1-65536 rows, at most
    /// 2^28 elements; operator and dtype drawn per problem), for
    /// `bench --corpus FILE` and `scorecard --corpus --corpus-file FILE
    /// --part all`.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["part", "plans", "format"],
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub draw: Option<u32>,
    /// Output: a table, or one `op dtype shape part` line per problem.
    #[arg(long, value_enum, default_value_t = CorpusFormat::Table)]
    pub format: CorpusFormat,
    /// Add the plan the automatic mapper picks on this target (h200, cpu).
    #[arg(long, value_name = "TARGET")]
    pub plans: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum PartArg {
    All,
    Fit,
    Report,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum CorpusFormat {
    Table,
    Lines,
}

impl PartArg {
    /// The part it names (None: both).
    pub fn part(self) -> Option<Part> {
        match self {
            PartArg::All => None,
            PartArg::Fit => Some(Part::Fit),
            PartArg::Report => Some(Part::Report),
        }
    }

    pub fn admits(self, p: &CorpusProblem, seed: u64) -> bool {
        match self {
            PartArg::All => true,
            PartArg::Fit => p.part(seed) == Part::Fit,
            PartArg::Report => p.part(seed) == Part::Report,
        }
    }
}

/// The corpus problems of `part` (committed split) of at least `min_rows`
/// rows as bench cases, kept to `ops` and, when any are given, to
/// `dtypes`. A backward operator in `ops` takes its forward's problems:
/// `rmsnorm_backward` benches the input gradient of every rmsnorm problem.
pub fn corpus_problems(
    file: &Path,
    part: PartArg,
    min_rows: usize,
    ops: &[Operator],
    dtypes: &[DType],
    shard: Option<(usize, usize)>,
) -> Result<Vec<BenchProblem>> {
    let (i, n) = shard.unwrap_or((1, 1));
    let out: Vec<BenchProblem> = corpus::load(file)?
        .iter()
        .filter(|p| part.admits(p, SPLIT_SEED) && p.shape.rows >= min_rows)
        .filter(|p| dtypes.is_empty() || dtypes.contains(&p.dtype))
        .flat_map(|p| {
            ops.iter()
                .filter(|&&op| op == p.op || op.forward() == Some(p.op))
                .map(|&op| BenchProblem {
                    op,
                    dtype: p.dtype,
                    shape: p.shape,
                })
        })
        .enumerate()
        .filter(|(k, _)| k % n == i - 1)
        .map(|(_, p)| p)
        .collect();
    if out.is_empty() {
        bail!("no problem of {} is left after the filters", file.display());
    }
    Ok(out)
}

/// `problems` less those that a results directory in `dirs` already holds
/// (lanefold's side measured them), for `bench --corpus --skip-measured`:
/// a run cut short by its deadline goes on in the next device call.
pub fn skip_measured(problems: Vec<BenchProblem>, dirs: &[PathBuf]) -> Result<Vec<BenchProblem>> {
    let mut measured = std::collections::HashSet::new();
    for dir in dirs {
        let file = lanefold_measure::results::ResultsFile::read(&dir.join("results.json"))?;
        measured.extend(file.cases.into_iter().map(|c| (c.op, c.dtype, c.shape)));
    }
    let left: Vec<BenchProblem> = problems
        .into_iter()
        .filter(|p| {
            !measured.contains(&(p.op.to_string(), p.dtype.to_string(), p.shape.to_string()))
        })
        .collect();
    if left.is_empty() {
        bail!("every problem is already measured in the --skip-measured directories");
    }
    Ok(left)
}

/// `I/N` with 1 <= I <= N, for `bench --corpus --shard`.
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("shard '{text}': write I/N with 1 <= I <= N, e.g. 1/2");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n) = (
        i.trim().parse::<usize>().map_err(|_| bad())?,
        n.trim().parse::<usize>().map_err(|_| bad())?,
    );
    (1 <= i && i <= n).then_some((i, n)).ok_or_else(bad)
}

/// One line per problem: `op dtype RxN part [plan]`.
pub fn corpus_lines(problems: &[CorpusProblem], seed: u64, target: Option<&Target>) -> String {
    let mut out = String::new();
    for p in problems {
        out.push_str(&format!(
            "{} {} {} {}",
            p.op,
            p.dtype,
            p.shape,
            p.part(seed)
        ));
        if let Some(t) = target {
            out.push(' ');
            out.push_str(&default_plan(p, t));
        }
        out.push('\n');
    }
    out
}

fn default_plan(p: &CorpusProblem, target: &Target) -> String {
    let problem = Problem::operator(p.op, OperatorOptions::default(), p.dtype, p.shape);
    match plan(&problem, target, &LayoutRequest::default()) {
        Ok(plan) => plan.describe(),
        Err(refusal) => format!("refused: {refusal}"),
    }
}

pub fn corpus_cmd(args: CorpusArgs) -> Result<()> {
    if let Some(count) = args.draw {
        print!(
            "{}",
            corpus::to_csv(&corpus::drawn(args.seed, count as usize))
        );
        return Ok(());
    }
    let all = corpus::load(&args.file)?;
    let problems: Vec<CorpusProblem> = all
        .iter()
        .filter(|p| args.part.admits(p, args.seed))
        .cloned()
        .collect();
    let target = match &args.plans {
        Some(name) => Some(
            Target::by_name(name)
                .with_context(|| format!("unknown target '{name}' (expected h200 or cpu)"))?,
        ),
        None => None,
    };
    match args.format {
        CorpusFormat::Lines => print!("{}", corpus_lines(&problems, args.seed, target.as_ref())),
        CorpusFormat::Table => {
            let mut table = Table::new();
            table.load_preset(UTF8_FULL_CONDENSED);
            let mut header = vec!["model", "tensor", "op", "dtype", "shape", "part"];
            if target.is_some() {
                header.push("default plan");
            }
            table.set_header(header);
            for p in &problems {
                let mut row = vec![
                    p.model.clone(),
                    p.tensor.clone(),
                    p.op.to_string(),
                    p.dtype.to_string(),
                    p.shape.to_string(),
                    p.part(args.seed).to_string(),
                ];
                if let Some(t) = &target {
                    row.push(default_plan(p, t));
                }
                table.add_row(row);
            }
            println!("{table}");
            let held = problems
                .iter()
                .filter(|p| p.part(args.seed) == Part::Report)
                .count();
            println!(
                "{} problems ({} held out for reporting) from {}",
                problems.len(),
                held,
                args.file.display()
            );
        }
    }
    Ok(())
}

/// `lanefold scorecard --corpus`: the bench results in `dirs` judged as a
/// corpus scorecard (markdown on stdout); with `backward`, the input
/// gradients of its training shapes against `[corpus_backward]`. Only
/// results of a GPU whose name holds `gpu` count (`any`: every GPU), so
/// that one card never mixes cards of different copy rates.
pub fn corpus_scorecard(
    dirs: &[PathBuf],
    targets: &Path,
    corpus_file: Option<&Path>,
    part: PartArg,
    backward: bool,
    gpu: &str,
) -> Result<()> {
    use lanefold_measure::corpus_score::{self, Source};
    use lanefold_measure::results::{read_text, ResultsFile};
    let all = lanefold_measure::scorecard::Targets::read(targets)?;
    let (section, corpus_targets) = if backward {
        ("corpus_backward", all.corpus_backward)
    } else {
        ("corpus", all.corpus)
    };
    let corpus_targets = corpus_targets
        .with_context(|| format!("targets file {}: no [{section}] section", targets.display()))?;
    let corpus_file = match corpus_file {
        Some(f) => f.to_path_buf(),
        None => nearest("bench/corpus.csv", "--corpus-file")?,
    };
    let mut problems = corpus::load(&corpus_file)?;
    if backward {
        problems = corpus_score::input_gradient_problems(&problems);
    }
    let mut sources = vec![];
    for dir in dirs {
        let path = dir.join("results.json");
        let value: serde_json::Value = serde_json::from_str(&read_text(&path)?)
            .with_context(|| format!("{}: not JSON", path.display()))?;
        let schema = value.get("schema").and_then(|s| s.as_str()).unwrap_or("");
        if !schema.starts_with("lanefold-results/") {
            bail!(
                "{}: the corpus scorecard reads bench results files (lanefold-results), not {schema:?}",
                dir.display()
            );
        }
        let file = ResultsFile::read(&path)?;
        let name = file.environment.gpu_name.as_deref().unwrap_or("");
        if gpu != "any" && !name.to_lowercase().contains(&gpu.to_lowercase()) {
            continue;
        }
        sources.push(Source {
            dir: dir
                .file_name()
                .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into()),
            file,
        });
    }
    let card = corpus_score::score(&problems, part.part(), &sources, &corpus_targets);
    print!("{}", corpus_score::markdown(&card));
    Ok(())
}

/// `relative` in the current directory or the nearest one above it.
fn nearest(relative: &str, flag: &str) -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("the current directory")?;
    cwd.ancestors()
        .map(|dir| dir.join(relative))
        .find(|path| path.is_file())
        .with_context(|| {
            format!(
                "no {relative} in {} or above it; pass {flag} FILE",
                cwd.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first half of the report part, of which a committed run holds
    /// the 20 problems its deadline left time for: the other 6 remain.
    #[test]
    fn a_deadline_cut_corpus_run_goes_on_with_the_problems_it_left() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let all = || {
            let file = root.join("bench/corpus.csv");
            corpus_problems(&file, PartArg::Report, 0, &Operator::SIX, &[], Some((1, 2))).unwrap()
        };
        let run = root.join("bench/results/2026-12-07-corpus-cold-inputs-forward-1-h100");
        let left = skip_measured(all(), std::slice::from_ref(&run)).unwrap();
        assert_eq!((all().len(), left.len()), (26, 6));
        let held = lanefold_measure::results::ResultsFile::read(&run.join("results.json")).unwrap();
        for p in &left {
            let id = (p.op.to_string(), p.dtype.to_string(), p.shape.to_string());
            assert!(!held
                .cases
                .iter()
                .any(|c| (c.op.clone(), c.dtype.clone(), c.shape.clone()) == id));
        }
        // The earlier run of the same half held all 26: nothing is left.
        let earlier = run.with_file_name("2026-12-06-corpus-cold-inputs-a-h100");
        let err = skip_measured(left, &[earlier]).unwrap_err();
        assert!(err.to_string().contains("already measured"), "{err}");
        assert!(skip_measured(all(), &[root.join("bench/results/no-such-run")]).is_err());
    }
}
