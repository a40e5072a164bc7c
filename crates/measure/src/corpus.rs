//! The shape corpus: problems taken from public model configurations
//! (`bench/corpus.csv`), each naming its model and tensor, and the fixed
//! split into a part that rules, the cost model and the tuning database may
//! be fitted on and a held-out part that is only reported.
//!
//! The split is a pure function of a problem's identity and a seed (a
//! SHA-256 of both), so adding or reordering rows never moves another
//! problem between parts.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use lanefold_ir::{DType, Operator};
use lanefold_plan::Shape;
use sha2::{Digest, Sha256};

/// The seed of the committed split; changing it re-deals every problem.
pub const SPLIT_SEED: u64 = 1;

/// Share of problems held out for reporting, in percent.
pub const REPORT_PERCENT: u8 = 30;

/// One problem of the corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorpusProblem {
    pub model: String,
    pub tensor: String,
    pub op: Operator,
    pub dtype: DType,
    pub shape: Shape,
    /// The public configuration the sizes come from.
    pub config: String,
}

/// Which side of the split a problem falls on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Rules, the cost model and the tuning database may be fitted here.
    Fit,
    /// Held out: measured and reported, never fitted on.
    Report,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Fit => "fit",
            Part::Report => "report",
        })
    }
}

impl FromStr for Part {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "fit" => Ok(Part::Fit),
            "report" => Ok(Part::Report),
            _ => bail!("unknown corpus part {s:?} (expected fit or report)"),
        }
    }
}

impl CorpusProblem {
    /// The identity the split hashes: what is measured, not how it is named.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.op, self.dtype, self.shape)
    }

    /// The problem's part of the split drawn with `seed`; an input
    /// gradient's is its forward's, so held-out shapes stay held out.
    pub fn part(&self, seed: u64) -> Part {
        let op = self.op.forward().unwrap_or(self.op);
        let key = format!("{op}/{}/{}", self.dtype, self.shape);
        let digest = Sha256::digest(format!("lanefold-corpus/{seed}/{key}"));
        let draw = u16::from_be_bytes([digest[0], digest[1]]) as u32;
        if draw * 100 < REPORT_PERCENT as u32 * 65536 {
            Part::Report
        } else {
            Part::Fit
        }
    }
}

/// Reads and checks a corpus file; every row must parse, and a problem may
/// appear once only.
pub fn load(path: &Path) -> Result<Vec<CorpusProblem>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the corpus {}", path.display()))?;
    parse(&text).with_context(|| format!("in the corpus {}", path.display()))
}

pub fn parse(text: &str) -> Result<Vec<CorpusProblem>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let expected = ["model", "tensor", "op", "dtype", "rows", "n", "config"];
    let headers = reader.headers().context("reading the header")?.clone();
    if headers.iter().ne(expected) {
        bail!(
            "header is {:?}, expected {}",
            headers.iter().collect::<Vec<_>>(),
            expected.join(",")
        );
    }
    let mut out: Vec<CorpusProblem> = vec![];
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        let r = record.with_context(|| format!("line {line}"))?;
        let field = |k: usize| r.get(k).unwrap_or("").trim();
        let number = |k: usize| -> Result<usize> {
            field(k)
                .parse()
                .with_context(|| format!("line {line}: {} {:?}", expected[k], field(k)))
        };
        let shape =
            Shape::new(number(4)?, number(5)?).map_err(|e| anyhow::anyhow!("line {line}: {e}"))?;
        let p = CorpusProblem {
            model: field(0).to_string(),
            tensor: field(1).to_string(),
            op: field(2)
                .parse()
                .map_err(|e| anyhow::anyhow!("line {line}: {e}"))?,
            dtype: field(3)
                .parse()
                .map_err(|e| anyhow::anyhow!("line {line}: {e}"))?,
            shape,
            config: field(6).to_string(),
        };
        if p.model.is_empty() || p.tensor.is_empty() {
            bail!("line {line}: a problem names its model and tensor");
        }
        if let Some(first) = out.iter().position(|q| q.key() == p.key()) {
            bail!("line {line}: {} repeats line {}", p.key(), first + 2);
        }
        out.push(p);
    }
    Ok(out)
}

/// Row lengths, row counts and size of `drawn`'s problems: model-scale
/// rows (32 to 256 Ki elements), decode through training row counts, and
/// at most 2^28 elements (1 GiB of f32) so that a bench's rotated input
/// sets fit any card.
pub const DRAWN_N: (usize, usize) = (32, 262_144);
pub const DRAWN_MAX_ROWS: usize = 65_536;
pub const DRAWN_MAX_ELEMENTS: usize = 1 << 28;

/// `count` problems of no list, the same for the same seed: shapes from
/// [`lanefold_plan::drawn_shapes`] within the `DRAWN_*` bounds, and each
/// problem's operator (one of the six forwards) and dtype (f32 or bf16)
/// drawn from a hash of the seed and its index. Named `drawn` and
/// `seed-S.i`, so a corpus scorecard judges them like model problems;
/// written before anything is measured, they are shapes nobody tuned on.
pub fn drawn(seed: u64, count: usize) -> Vec<CorpusProblem> {
    let shapes = lanefold_plan::drawn_shapes(seed, count, DRAWN_MAX_ROWS, DRAWN_N);
    let mut out: Vec<CorpusProblem> = vec![];
    for (i, s) in shapes.into_iter().enumerate() {
        let digest = Sha256::digest(format!("lanefold-drawn/{seed}/{i}"));
        let rows = s.rows.min(DRAWN_MAX_ELEMENTS / s.n).max(1);
        let p = CorpusProblem {
            model: "drawn".into(),
            tensor: format!("seed-{seed}.{i}"),
            op: Operator::SIX[digest[0] as usize % Operator::SIX.len()],
            dtype: [DType::F32, DType::Bf16][digest[1] as usize % 2],
            shape: Shape::new(rows, s.n).expect("a capped drawn shape is within the limits"),
            config: format!("lanefold corpus --draw {count} --seed {seed}"),
        };
        // `load` refuses a repeat, so it is left out: a draw may hold
        // fewer than `count` problems.
        if out.iter().all(|q| q.key() != p.key()) {
            out.push(p);
        }
    }
    out
}

/// `problems` as a corpus file that [`load`] reads back.
pub fn to_csv(problems: &[CorpusProblem]) -> String {
    let mut out = String::from("model,tensor,op,dtype,rows,n,config\n");
    for p in problems {
        out.push_str(&format!(
            "{},{},{},{},{},{},{}\n",
            p.model, p.tensor, p.op, p.dtype, p.shape.rows, p.shape.n, p.config
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed() -> Vec<CorpusProblem> {
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/corpus.csv")).unwrap()
    }

    /// The committed corpus spans what it claims: at least 80 problems from
    /// at least 15 model families, every operator, both dtypes, decode
    /// through training row counts.
    #[test]
    fn committed_corpus_covers_models_operators_and_row_ranges() {
        let c = committed();
        assert!(c.len() >= 80, "{}", c.len());
        let mut families: Vec<&str> = c
            .iter()
            .map(|p| p.model.split(['-', '.']).next().unwrap())
            .collect();
        families.sort();
        families.dedup();
        assert!(families.len() >= 15, "{families:?}");
        for op in Operator::SIX {
            assert!(c.iter().any(|p| p.op == op), "{op}");
        }
        for dtype in [DType::F32, DType::Bf16] {
            assert!(c.iter().any(|p| p.dtype == dtype), "{dtype}");
        }
        assert!(c.iter().any(|p| p.shape.rows <= 64));
        assert!(c.iter().any(|p| p.shape.rows >= 65536));
    }

    /// The split is a function of the problem and the seed, holds out about
    /// the stated share, and every operator has held-out problems.
    #[test]
    fn split_is_stable_and_holds_out_every_operator() {
        let c = committed();
        let report: Vec<_> = c
            .iter()
            .filter(|p| p.part(SPLIT_SEED) == Part::Report)
            .collect();
        let share = report.len() as f64 / c.len() as f64;
        assert!((0.2..0.4).contains(&share), "{share}");
        for op in Operator::SIX {
            assert!(
                report.iter().any(|p| p.op == op),
                "{op} has no held-out problem"
            );
        }
        let mut reversed = c.clone();
        reversed.reverse();
        for p in &reversed {
            let again = c.iter().find(|q| q.key() == p.key()).unwrap();
            assert_eq!(p.part(SPLIT_SEED), again.part(SPLIT_SEED));
        }
        assert_ne!(
            c.iter().map(|p| p.part(SPLIT_SEED)).collect::<Vec<_>>(),
            c.iter().map(|p| p.part(SPLIT_SEED + 1)).collect::<Vec<_>>(),
            "another seed deals another split"
        );
    }

    #[test]
    fn bad_rows_are_refused_with_their_line() {
        let head = "model,tensor,op,dtype,rows,n,config\n";
        let e = parse(&format!("{head}m,t,rmsnorm,bf16,0,4096,c\n")).unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        let e = parse(&format!("{head}m,t,norm,bf16,1,4096,c\n")).unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        let e = parse(&format!(
            "{head}m,t,rmsnorm,bf16,1,4096,c\nm2,t,rmsnorm,bf16,1,4096,c\n"
        ))
        .unwrap_err();
        assert!(format!("{e:#}").contains("repeats line 2"), "{e:#}");
        assert!(parse("rows,n\n1,2\n").is_err());
    }

    /// bench/drawn.csv is what its lines' commands print: each line names
    /// the `lanefold corpus --draw N --seed S` that wrote it, and those
    /// commands, run again, give the file's problems in its order.
    #[test]
    fn committed_drawn_problems_are_their_commands_output() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/drawn.csv");
        let committed = load(&path).unwrap();
        let mut commands: Vec<&str> = committed.iter().map(|p| p.config.as_str()).collect();
        commands.dedup();
        let again: Vec<CorpusProblem> = commands
            .iter()
            .flat_map(|c| {
                let words: Vec<&str> = c.split_whitespace().collect();
                let (count, seed) = match words[..] {
                    ["lanefold", "corpus", "--draw", n, "--seed", s] => {
                        (n.parse().unwrap(), s.parse().unwrap())
                    }
                    _ => panic!("{c:?} is not a draw command"),
                };
                drawn(seed, count)
            })
            .collect();
        assert_eq!(committed, again);
    }

    #[test]
    fn drawn_problems_are_reproducible_within_bounds_and_read_back() {
        let a = drawn(7, 200);
        assert_eq!(a, drawn(7, 200));
        assert_ne!(a, drawn(8, 200));
        assert!(a.len() >= 195, "{}", a.len());
        for p in &a {
            assert!(Operator::SIX.contains(&p.op), "{}", p.op);
            assert!(matches!(p.dtype, DType::F32 | DType::Bf16));
            assert!((DRAWN_N.0..=DRAWN_N.1).contains(&p.shape.n), "{}", p.shape);
            assert!(p.shape.rows <= DRAWN_MAX_ROWS && p.shape.elements() <= DRAWN_MAX_ELEMENTS);
        }
        for op in Operator::SIX {
            assert!(a.iter().any(|p| p.op == op), "{op} never drawn");
        }
        assert!(a.iter().any(|p| p.shape.rows <= 64) && a.iter().any(|p| p.shape.rows >= 4096));
        assert_eq!(parse(&to_csv(&a)).unwrap(), a);
    }
}
