//! `lanefold replay`: the frozen, position-balanced replay of a reference
//! and a candidate read from earlier results (or the reference against
//! itself with `--aa`), written as a `lanefold-replay/1` results.json and
//! results.md.

use crate::Backend;
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use lanefold_measure::bench::Device;
use lanefold_measure::phases::{L2Mode, PhaseConfig};
use lanefold_measure::replay::{run_replay, ReplaySpec, CANDIDATE, REFERENCE};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReplayBackend {
    /// CUDA when a GPU is present, else the CPU executor.
    Auto,
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReplayL2 {
    Warm,
    Cold,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The reference's results.json (lanefold-results/1) or search file
    /// (lanefold-search/1: its winners).
    #[arg(long)]
    pub reference: PathBuf,
    /// The candidate's file, matched to the reference by (op, dtype, shape).
    #[arg(long, required_unless_present = "aa", conflicts_with = "aa")]
    pub candidate: Option<PathBuf>,
    /// A/A control: replay the reference against itself.
    #[arg(long)]
    pub aa: bool,
    #[arg(long, default_value_t = 4)]
    pub rounds: usize,
    #[arg(long, default_value_t = 9)]
    pub samples: usize,
    #[arg(long, default_value_t = 30.0)]
    pub sample_ms: f64,
    #[arg(long, default_value_t = 200.0)]
    pub warmup_ms: f64,
    #[arg(long, value_enum, default_value_t = ReplayL2::Warm)]
    pub l2: ReplayL2,
    /// Also measure PyTorch eager through the Python peer, every round.
    #[arg(long)]
    pub torch: bool,
    #[arg(long, value_enum, default_value_t = ReplayBackend::Auto)]
    pub backend: ReplayBackend,
    #[arg(long)]
    pub output: PathBuf,
    /// Base seed; every round and case draws fresh inputs from it.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// The PyTorch peer script (default: python/torch_peer.py, found from
    /// the current directory or the executable's).
    #[arg(long)]
    pub peer_script: Option<PathBuf>,
}

pub fn replay_cmd(args: ReplayArgs) -> Result<()> {
    let device = match args.backend {
        ReplayBackend::Cpu => Device::Cpu,
        ReplayBackend::Cuda => Device::Cuda,
        ReplayBackend::Auto => match Backend::detect() {
            (Backend::Cuda(_), _) => Device::Cuda,
            (_, why) => {
                println!(
                    "no GPU in use ({}); replaying on the CPU executor (gpu phase absent: the objective is e2e)",
                    why.unwrap_or_default()
                );
                Device::Cpu
            }
        },
    };
    let spec = ReplaySpec {
        reference: args.reference,
        candidate: args.candidate,
        aa: args.aa,
        rounds: args.rounds,
        config: PhaseConfig {
            samples: args.samples,
            sample_ms: args.sample_ms,
            warmup_ms: args.warmup_ms,
            l2: match args.l2 {
                ReplayL2::Warm => L2Mode::Warm,
                ReplayL2::Cold => L2Mode::Cold,
            },
        },
        torch: args.torch,
        device,
        python: args.python,
        peer_script: args
            .peer_script
            .unwrap_or_else(lanefold_measure::peer::default_script),
        output: args.output.clone(),
        seed: args.seed,
        command_line: std::env::args().collect(),
    };
    let file = run_replay(&spec)?;
    for s in &file.sources {
        if !s.binary_equal {
            println!(
                "note: {} ({}) was written by a different executable ({}); flagged in results.md",
                s.role,
                s.path,
                s.binary_sha256.as_deref().unwrap_or("no hash recorded")
            );
        }
    }
    let invalid: usize = file.cases.iter().map(|c| c.stats.outputs_invalid).sum();
    let valid: usize = file.cases.iter().map(|c| c.stats.outputs_valid).sum();
    println!(
        "wrote {} ({} cases x {} rounds, {valid} outputs valid, {invalid} invalid; {REFERENCE} vs {CANDIDATE}{})",
        args.output.join("results.json").display(),
        file.cases.len(),
        file.rounds_done,
        if file.aa { ", A/A control" } else { "" }
    );
    if invalid > 0 {
        bail!("{invalid} side(s) produced invalid outputs; their rounds were voided");
    }
    Ok(())
}
