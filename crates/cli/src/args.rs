//! Command-line argument types and parsers shared by every subcommand.

use anyhow::Result;
use clap::{Args, ValueEnum};
use lanefold_ir::{DType, Operator};
use lanefold_measure::bench::Device;
use lanefold_measure::phases::L2Mode;
use lanefold_plan::{LayoutRequest, Shape};

/// Where to run or measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// CUDA when a GPU is present, the CPU executor otherwise.
    Auto,
    Cpu,
    Cuda,
}

impl From<BackendArg> for Device {
    fn from(b: BackendArg) -> Device {
        match b {
            BackendArg::Auto => Device::Auto,
            BackendArg::Cpu => Device::Cpu,
            BackendArg::Cuda => Device::Cuda,
        }
    }
}

/// L2 state of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum L2Arg {
    /// The same buffers every launch.
    Warm,
    /// Launches rotate among input sets totalling at least 3x the L2, each
    /// with its own outputs.
    Cold,
    /// The inputs rotate as with `cold`; lanefold's launches all write one
    /// output set, as a PyTorch peer's outputs come back from its
    /// allocator as the same block call after call.
    ColdInputs,
}

impl From<L2Arg> for L2Mode {
    fn from(l: L2Arg) -> L2Mode {
        match l {
            L2Arg::Warm => L2Mode::Warm,
            L2Arg::Cold => L2Mode::Cold,
            L2Arg::ColdInputs => L2Mode::ColdInputs,
        }
    }
}

pub fn parse_operator(s: &str) -> Result<Operator, String> {
    s.parse()
        .map_err(|e: lanefold_ir::ParseOperatorError| e.to_string())
}

pub fn parse_shape(s: &str) -> Result<Shape, String> {
    s.parse()
        .map_err(|e: lanefold_plan::ShapeError| e.to_string())
}

/// `MIN-MAX` row lengths, both at least 1, MIN at most MAX.
pub fn parse_range(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("{s}: expected MIN-MAX, e.g. 700-200000");
    let (lo, hi) = s.trim().split_once('-').ok_or_else(bad)?;
    let lo: usize = lo.trim().parse().map_err(|_| bad())?;
    let hi: usize = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || lo > hi {
        return Err(format!("{s}: MIN must be at least 1 and at most MAX"));
    }
    Ok((lo, hi))
}

/// A time budget in seconds: a finite number above zero.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!(
            "{x}: a budget must be a positive number of seconds"
        )),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// `auto`, `registers` or `stream`.
pub fn parse_residency(s: &str) -> Result<lanefold_plan::ResidencyRequest, String> {
    use lanefold_plan::ResidencyRequest as R;
    match s.trim() {
        "auto" => Ok(R::Auto),
        "registers" => Ok(R::Registers),
        "stream" => Ok(R::Stream),
        other => Err(format!(
            "unknown residency '{other}' (expected auto, registers or stream)"
        )),
    }
}

pub fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse()
        .map_err(|e: lanefold_ir::DTypeError| e.to_string())
}

/// Operator names, where `all` stands for the six and `backward` for
/// their input gradients.
pub fn parse_ops(ops: &[String]) -> Result<Vec<Operator>> {
    let mut out = vec![];
    for o in ops {
        if o == "all" {
            out.extend(Operator::SIX);
        } else if o == "backward" {
            out.extend(Operator::BACKWARD);
        } else {
            out.push(parse_operator(o).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(out)
}

/// The help heading of the layout flags that stand for schedule tokens.
pub const SHORTHANDS: &str = "Schedule shorthands";

/// The schedule a request asks for, in its one text form: shared by every
/// command that plans (`plan`, `run`, `bench`, `compile-check`, `speed`)
/// and by `search`, where every candidate takes it. Every kernel choice is
/// a token of it; only W, V, U and G also have flags, which add their
/// tokens to the text before it is parsed once
/// ([`ScheduleArgs::request_with`]).
#[derive(Args, Clone, Debug, Default)]
pub struct ScheduleArgs {
    /// The schedule, in the text form `lanefold plan` prints, e.g.
    /// `W=1024 V=4 U=8 G=1 stream reread-hints occupancy=1` (tokens the
    /// defaults leave out; `auto` for none). A token given twice, or
    /// contradicting another, is refused. docs/cli.md lists the tokens.
    #[arg(long, value_name = "TEXT", help_heading = "Schedule")]
    pub schedule: Option<String>,
}

impl ScheduleArgs {
    /// The request of `--schedule` with `more` (the layout flags' tokens)
    /// added: one parse of one text.
    pub fn request_with(&self, more: &[String]) -> Result<LayoutRequest> {
        let given = self.schedule.as_deref().map(str::trim).unwrap_or("");
        let mut words: Vec<String> = if given == "auto" {
            vec![]
        } else {
            vec![given.to_string()]
        };
        words.extend(more.iter().cloned());
        let text = words.join(" ");
        text.parse().map_err(|e| match &self.schedule {
            Some(s) => anyhow::anyhow!("--schedule '{s}' with the flags given: {e}"),
            None => anyhow::anyhow!("the flags given: {e}"),
        })
    }

    /// The request of `--schedule`.
    pub fn request(&self) -> Result<LayoutRequest> {
        self.request_with(&[])
    }
}

/// The flags that each stood for one schedule token before every kernel
/// choice moved into `--schedule`, with their tokens (`N` for the value):
/// command lines recorded in older results use them. Only for the hint of
/// [`removed_flag_hint`]; no command accepts them.
const REMOVED_FLAGS: &[(&str, &str)] = &[
    ("--streaming-hints", "streaming-hints"),
    ("--hoist-columns", "hoisted-columns"),
    ("--cluster-group-threads", "group-threads=N"),
    ("--occupancy", "occupancy=N"),
    ("--reread-hints", "reread-hints"),
    ("--keep-columns", "keep-columns"),
    ("--stage-columns", "staged-columns"),
    ("--pack-resident", "packed-resident"),
    ("--rounded-resident", "rounded-resident"),
    ("--relaxed-cluster-exit", "relaxed-exit"),
    ("--push-cluster-reduce", "push-reduce"),
    ("--persistent-clusters", "persistent-clusters"),
    ("--online-normalizer", "online-normalizer"),
    ("--one-pass-moments", "one-pass-moments"),
    ("--fused-output", "fused-output"),
    ("--prefetch-rows", "prefetch-rows"),
    ("--l1-columns", "l1-columns"),
    ("--unfold-pack-addresses", "unfolded-addresses"),
    ("--ordered-columns", "ordered-columns"),
    ("--ordered-hinted-loads", "ordered-hinted-loads"),
    ("--occupancy-cap", "occupancy-cap=N"),
    ("--batch-loads", "batched-loads"),
    ("--early-columns", "early-columns=N"),
    ("--shared-chunks", "shared-chunks=N"),
    ("--l2-prefetch-rows", "l2-prefetch=N"),
    ("--residency", "registers or stream"),
    ("--order", "order=tree or order=sequential"),
    ("--mapper", "mapper=seed"),
];

/// For a command line that clap refused: the first removed flag in it and
/// the schedule token that replaces it, as a hint to add to the error.
/// `--batch-invariant` stays a flag of `tune` (its cache key), so it is
/// named only where the subcommand is not `tune`.
pub fn removed_flag_hint(args: &[String]) -> Option<String> {
    let tune = args.get(1).is_some_and(|a| a == "tune");
    args.iter().find_map(|arg| {
        let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
        let token = REMOVED_FLAGS
            .iter()
            .find(|(flag, _)| *flag == name)
            .map(|(_, token)| *token)
            .or((name == "--batch-invariant" && !tune).then_some("batch-invariant"))?;
        Some(format!(
            "{name} is now the schedule token {token}: pass it in --schedule '...'"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_text_and_the_layout_tokens_parse_once() {
        let text = ScheduleArgs {
            schedule: Some("reread-hints occupancy=2".into()),
        };
        let r = text.request_with(&["W=256".into()]).unwrap();
        assert_eq!(r.to_string(), "W=256 reread-hints occupancy=2");
        let e = text
            .request_with(&["occupancy=1".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'occupancy=1': contradicts 'occupancy=2'"),
            "{e}"
        );
        let auto = ScheduleArgs {
            schedule: Some("auto".into()),
        };
        assert_eq!(
            auto.request_with(&["V=4".into()]).unwrap().to_string(),
            "V=4"
        );
        let bad = ScheduleArgs {
            schedule: Some("W=256 wide".into()),
        };
        let e = bad.request().unwrap_err().to_string();
        assert!(e.contains("'wide': unknown token"), "{e}");
    }

    #[test]
    fn a_removed_policy_flag_is_answered_with_its_schedule_token() {
        let line = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let hint = removed_flag_hint(&line("lanefold bench --reread-hints --torch")).unwrap();
        assert!(
            hint.contains("--reread-hints") && hint.contains("reread-hints"),
            "{hint}"
        );
        let hint = removed_flag_hint(&line("lanefold run --occupancy-cap=2")).unwrap();
        assert!(hint.contains("occupancy-cap=N"), "{hint}");
        assert!(removed_flag_hint(&line("lanefold plan --batch-invariant")).is_some());
        // Flags that stay are not named.
        assert_eq!(
            removed_flag_hint(&line("lanefold tune --batch-invariant")),
            None
        );
        assert_eq!(
            removed_flag_hint(&line(
                "lanefold bench --occupancy-from-compiler --tune-residency stream"
            )),
            None
        );
        // Every removed flag's token is one the schedule parses.
        for (_, token) in REMOVED_FLAGS {
            let first = token.split(' ').next().unwrap().replace('N', "2");
            assert!(first.parse::<LayoutRequest>().is_ok(), "{token}");
        }
    }

    #[test]
    fn a_budget_is_a_positive_finite_number_of_seconds() {
        assert_eq!(parse_seconds("300"), Ok(300.0));
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        for bad in ["0", "-3", "inf", "NaN", "five"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
