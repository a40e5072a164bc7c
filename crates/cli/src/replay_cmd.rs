//! `lanefold replay`: the frozen, position-balanced replay of a reference
//! and a candidate read from earlier results (or the reference against
//! itself with `--aa`), written as a `lanefold-replay/1` results.json and
//! results.md.

use crate::args::{BackendArg, L2Arg};
use anyhow::{bail, Result};
use clap::Args;
use lanefold_measure::peer::PeerMode;
use lanefold_measure::phases::PhaseConfig;
use lanefold_measure::replay::{run_replay, ReplaySpec, CANDIDATE, REFERENCE};
use std::path::PathBuf;

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
    #[arg(long, value_enum, default_value_t = L2Arg::Warm)]
    pub l2: L2Arg,
    /// Also measure PyTorch eager through the Python peer, every round.
    #[arg(long)]
    pub torch: bool,
    /// Also measure torch.compile through the Python peer, every round.
    #[arg(long)]
    pub torch_compile: bool,
    /// Also measure Liger-Kernel through the Python peer, every round
    /// (a case it cannot run, e.g. Liger not installed, is recorded missing
    /// with the reason).
    #[arg(long)]
    pub liger: bool,
    /// Also measure Quack's kernels (forward and backward) through the
    /// Python peer, every round (a case it cannot run, e.g. Quack not
    /// importable or an op it lacks, is recorded missing with the reason).
    #[arg(long)]
    pub quack: bool,
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
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
    /// Wall-clock budget in seconds: start no round the longest round so
    /// far says would end past it, and write the report of the rounds done
    /// (for a run under an outer time limit).
    #[arg(long, value_parser = crate::args::parse_seconds)]
    pub deadline_s: Option<f64>,
    /// Continue the replay already in --output from its last complete
    /// round up to --rounds, in a later session (same binary, sources,
    /// phase settings, seed and peers, or it is refused): a replay longer
    /// than one device call.
    #[arg(long)]
    pub resume: bool,
}

pub fn replay_cmd(args: ReplayArgs) -> Result<()> {
    let spec = ReplaySpec {
        reference: args.reference,
        candidate: args.candidate,
        aa: args.aa,
        rounds: args.rounds,
        config: PhaseConfig {
            samples: args.samples,
            sample_ms: args.sample_ms,
            warmup_ms: args.warmup_ms,
            l2: args.l2.into(),
        },
        peers: [
            (args.torch, PeerMode::Eager),
            (args.torch_compile, PeerMode::Compile),
            (args.liger, PeerMode::Liger),
            (args.quack, PeerMode::Quack),
        ]
        .into_iter()
        .filter_map(|(on, m)| on.then_some(m))
        .collect(),
        device: args.backend.into(),
        python: args.python,
        peer_script: args
            .peer_script
            .unwrap_or_else(lanefold_measure::peer::default_script),
        output: args.output.clone(),
        seed: args.seed,
        command_line: std::env::args().collect(),
        deadline_s: args.deadline_s,
        resume: args.resume,
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
    let missing: usize = file
        .cases
        .iter()
        .flat_map(|c| &c.rounds)
        .map(|r| r.missing.len())
        .sum();
    println!(
        "wrote {} ({} cases x {} rounds, {valid} outputs valid, {invalid} invalid, {missing} missing-side notes; {REFERENCE} vs {CANDIDATE}{}{})",
        args.output.join("results.json").display(),
        file.cases.len(),
        file.rounds_done,
        file.peer_sides()
            .iter()
            .map(|p| format!(", {p}"))
            .collect::<String>(),
        if file.aa { ", A/A control" } else { "" }
    );
    if invalid > 0 {
        bail!("{invalid} side(s) produced invalid outputs; their rounds were voided");
    }
    Ok(())
}
