//! Command-line argument types and parsers shared by every subcommand.

use anyhow::Result;
use clap::ValueEnum;
use lanefold_ir::{DType, Operator};
use lanefold_measure::bench::Device;
use lanefold_measure::phases::L2Mode;
use lanefold_plan::Shape;

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
    /// Launches rotate among input sets totalling at least 3x the L2.
    Cold,
}

impl From<L2Arg> for L2Mode {
    fn from(l: L2Arg) -> L2Mode {
        match l {
            L2Arg::Warm => L2Mode::Warm,
            L2Arg::Cold => L2Mode::Cold,
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

/// Operator names, where `all` stands for the six.
pub fn parse_ops(ops: &[String]) -> Result<Vec<Operator>> {
    let mut out = vec![];
    for o in ops {
        if o == "all" {
            out.extend(Operator::SIX);
        } else {
            out.push(parse_operator(o).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_a_positive_finite_number_of_seconds() {
        assert_eq!(parse_seconds("300"), Ok(300.0));
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        for bad in ["0", "-3", "inf", "NaN", "five"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
