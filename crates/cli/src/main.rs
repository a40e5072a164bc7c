use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lanefold::args::{
    parse_dtype, parse_operator, parse_ops, parse_range, parse_shape, BackendArg, L2Arg,
};
use lanefold::selftest::{self, Report};
use lanefold::{exit_code, run_case, run_plan, Backend, Case};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::data::{expected_len, random_inputs};
use lanefold_cpu::npy::{self, Element};
use lanefold_ir::{BufferKind, DType, Operator, OperatorOptions};
use lanefold_plan::{
    enumerate, plan, CostPolicy, Features, LayoutRequest, Problem, RooflinePolicy, Shape, Target,
};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "lanefold",
    version = lanefold_measure::env::BUILD_VERSION,
    about = "Compiler, autotuner and checker for fused GPU row reductions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Say more where a short line stands for details, e.g. every
    /// directory searched for the CUDA driver when falling back to the CPU.
    #[arg(long, global = true)]
    verbose: bool,
    /// No progress bars (they are drawn on stderr, and only on a terminal).
    #[arg(long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// What lanefold is for, in one screen: realistic problems validated
    /// against float64, then timed against this machine's copy bandwidth
    /// and torch eager. `--verbose`: every operator on the seed's shapes,
    /// per layout.
    Demo {
        #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
        backend: BackendArg,
        /// The Python whose torch is compared (CUDA only).
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// What lanefold sees here (GPU, driver, NVRTC, caches, Python peers)
    /// and what it will use; exit 1 if the asked backend cannot work.
    Doctor(lanefold::doctor::DoctorArgs),
    /// Show the plan (or every candidate of a search space) with features,
    /// legality and predicted cost.
    Plan(PlanArgs),
    /// Execute one problem on seeded or `.npy` inputs and validate it.
    Run(RunArgs),
    /// The correctness matrix; its last line is `N passed, N failed`.
    Selftest {
        #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
        backend: BackendArg,
        /// CUDA only: skip the long-row shapes.
        #[arg(long, conflicts_with = "long_shapes_only")]
        quick: bool,
        /// Only the backward operators' cases (layout matrix in f32 and
        /// bf16; on CUDA also seed and long shapes) and the norms' column
        /// gradients (on CUDA: the same bits as the CPU's).
        #[arg(long, conflicts_with_all = ["long_shapes_only", "variants_only", "variant"])]
        backward: bool,
        /// CUDA only: only the long-row shapes, the part `--quick` skips,
        /// so the full selftest fits two device calls of 10 minutes.
        #[arg(long, conflicts_with_all = ["variants_only", "variant"])]
        long_shapes_only: bool,
        /// Only the checks of the opt-in variants (online normalizer,
        /// one-pass moments, staged columns, packed tiles, relaxed exit,
        /// pushed reduction, ...), of batch invariance and, on CUDA, of the
        /// call path and its completion flag: seconds instead of minutes
        /// on a device whose time is scarce.
        #[arg(long)]
        variants_only: bool,
        /// Only these variants' checks (comma-separated names, e.g.
        /// `l1-columns,prefetch-rows`; implies `--variants-only` without
        /// the call-path checks). The base matrix's groups are named too:
        /// `exact-sums`, `load-policy`, `cluster-groups`, `layout-matrix`.
        #[arg(long, value_delimiter = ',')]
        variant: Vec<String>,
        /// Only these operators' checks (comma-separated names), e.g. for
        /// a run under compute-sanitizer.
        #[arg(long, value_delimiter = ',')]
        ops: Vec<String>,
        /// At most this many rows in any check (persistent and prefetch
        /// checks then loop over fewer rows), e.g. under compute-sanitizer.
        #[arg(long)]
        max_rows: Option<usize>,
        /// Skip the opt-in variants' checks (run them apart with
        /// `--variants-only`), so the quick half and the variants each fit
        /// one device call (together they ran past 540 s).
        #[arg(long, conflicts_with_all = ["variants_only", "variant"])]
        skip_variants: bool,
        /// Differential fuzzing instead of the matrix: N drawn cases
        /// (operator, dtype, shape, legal plan, values at the numerical
        /// corners) each checked against an independent float64 oracle.
        #[arg(long, value_name = "N", conflicts_with_all = ["variants_only", "variant", "long_shapes_only"])]
        fuzz: Option<u64>,
        /// The fuzzer's seed (with `--fuzz`).
        #[arg(long, default_value_t = 1, requires = "fuzz")]
        seed: u64,
    },
    /// First speed table on CUDA: GPU µs per op (events around a batch,
    /// L2 warm) and effective GB/s, every timed plan validated first.
    Speed(SpeedArgs),
    /// Measure the three phases for lanefold and (optionally) PyTorch on the
    /// same inputs; write results.json (raw samples), results.md, plot.svg.
    Bench(BenchArgs),
    /// Layout search with an explicit objective: every candidate validated,
    /// duplicates measured once, the winner regenerated and measured afresh.
    Search(lanefold::search_cmd::SearchArgs),
    /// Search a list of shapes and record the winners in the tuning cache.
    Tune(lanefold::search_cmd::TuneArgs),
    /// Frozen, position-balanced replay of a reference against a candidate
    /// (or, with --aa, against itself).
    Replay(lanefold::replay_cmd::ReplayArgs),
    /// Render results.md and plot.svg again from a directory's results.json.
    Report { dir: PathBuf },
    /// The shape corpus from public model configurations, its fixed split
    /// into a fitted and a held-out part, and the default plan of each.
    Corpus(lanefold::corpus_cmd::CorpusArgs),
    /// Fit the cost model's constants to a target's committed searches
    /// (held-out corpus problems only reported) and write
    /// tuning/<target>-model.json, which the mapper embeds.
    FitModel(lanefold::fit_cmd::FitModelArgs),
    /// Recompute every summary and ratio of results directories from their
    /// raw samples; exit 1 listing each discrepancy.
    Audit {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// The headline hardware counters of each profiled launch in these
    /// directories (Nsight Compute raw pages, `NAME-raw.csv[.gz]`, from
    /// scripts/profile-ncu.sh), as a markdown table.
    Counters {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Bundle each results directory's captured kernel sources
    /// (`sources/*.cu[.gz]`) into one `sources.json.gz`, read back before
    /// the files are removed; the tools read sources from either form.
    BundleSources {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// CUDA: where a synchronized single call's host time goes, by launch
    /// API, wait method and context scheduling mode (raw samples to JSON).
    Latency {
        #[arg(long, value_parser = parse_operator, default_value = "rmsnorm")]
        op: Operator,
        #[arg(long, value_parser = parse_shape, default_value = "1x127")]
        shape: Shape,
        #[arg(long, value_parser = parse_dtype, default_value = "f32")]
        dtype: DType,
        #[arg(long, default_value_t = 2000)]
        iters: usize,
        #[arg(long)]
        output: PathBuf,
    },
    /// Generate and compile plans with NVRTC alone (no GPU needed) and
    /// print ptxas' registers and spills per kernel; exit 1 if any fails.
    CompileCheck {
        /// Operators, comma separated, or `all` (the six).
        #[arg(long, value_delimiter = ',', default_value = "all")]
        ops: Vec<String>,
        #[arg(long, value_delimiter = ',', value_parser = parse_shape, required_unless_present = "draw")]
        shapes: Vec<Shape>,
        /// Shapes of no list instead: this many, drawn from `--seed`
        /// (row lengths log-uniform over `--n-range`, a third rounded to
        /// multiples of 64; row counts log-uniform up to `--max-rows`).
        #[arg(long, conflicts_with = "shapes")]
        draw: Option<usize>,
        /// The seed of `--draw`.
        #[arg(long, default_value_t = 1, requires = "draw")]
        seed: u64,
        /// `--draw`'s largest row count.
        #[arg(long, default_value_t = 65536, requires = "draw")]
        max_rows: usize,
        /// `--draw`'s row lengths, `MIN-MAX`.
        #[arg(long, default_value = "1-262144", value_parser = parse_range, requires = "draw")]
        n_range: (usize, usize),
        #[arg(long, value_delimiter = ',', value_parser = parse_dtype, default_value = "f32")]
        dtypes: Vec<DType>,
        #[command(flatten)]
        layout: LayoutArgs,
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Compile each plan with and without this schedule token (added
        /// or removed) and count where the compiler's registers raise,
        /// keep or lower the groups a multiprocessor: the evidence for a
        /// rule that adds a register-shaping token over a range.
        #[arg(long, conflicts_with_all = ["cold_path", "occupancy_from_compiler", "cubin_dir"])]
        toggle: Option<String>,
        /// Show what bench's --occupancy-from-compiler would promise.
        #[arg(long)]
        occupancy_from_compiler: bool,
        /// Write each kernel's binary here as `<kernel>.cubin`, for
        /// `cuobjdump -sass` without a GPU (scripts/sass-offline.sh), and
        /// its source beside it as `<kernel>.cu`.
        #[arg(long)]
        cubin_dir: Option<PathBuf>,
        /// Report what the CUDA runtime does with each norm plan's cold
        /// path: the plain kernel's groups/SM, and whether the cold kernel
        /// kept them (promised, no spill) or the plain plan runs instead.
        #[arg(long)]
        cold_path: bool,
        /// Leave out the per-column weight (the norms).
        #[arg(long)]
        no_weight: bool,
        /// Leave out the per-column bias (layernorm, residual_layernorm).
        #[arg(long)]
        no_bias: bool,
    },
    /// Judge the replays in these directories against the speed targets
    /// of a targets file, case by case, from their recorded rounds, and
    /// searches against its automatic-mapping target (the automatic
    /// mapping against the winner); with --corpus, bench results against
    /// its shape corpus targets.
    Scorecard {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The targets file [default: bench/targets.toml in the current
        /// directory or the nearest one above it].
        #[arg(long, value_name = "FILE")]
        targets: Option<PathBuf>,
        /// One table over all the directories: per case, the latest
        /// verdict (by measurement time) about the layout this binary
        /// picks by default, else the latest at all, with its directory.
        #[arg(long)]
        standing: bool,
        /// Judge bench results instead: each case that is a problem of the
        /// shape corpus, against the targets file's [corpus] targets.
        #[arg(long, conflicts_with = "standing")]
        corpus: bool,
        /// With --corpus: the corpus file [default: bench/corpus.csv in the
        /// current directory or the nearest one above it].
        #[arg(long, value_name = "FILE", requires = "corpus")]
        corpus_file: Option<PathBuf>,
        /// With --corpus: the part of the split to judge.
        #[arg(long, value_enum, default_value_t = lanefold::corpus_cmd::PartArg::Report, requires = "corpus")]
        part: lanefold::corpus_cmd::PartArg,
        /// With --corpus: judge the input gradients of the corpus's
        /// training shapes (`rmsnorm_backward` on each rmsnorm problem, ...)
        /// against the [corpus_backward] targets.
        #[arg(long, requires = "corpus")]
        backward: bool,
        /// With --corpus: judge only results measured on a GPU whose name
        /// holds this (the targets are the H200's); `any` takes every GPU.
        #[arg(long, value_name = "NAME", default_value = "H200", requires = "corpus")]
        gpu: String,
    },
}

#[derive(Args)]
struct BenchArgs {
    /// Operators, comma separated, or `all` (the six).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    ops: Vec<String>,
    #[arg(long, value_delimiter = ',', value_parser = parse_shape, required_unless_present = "corpus")]
    shapes: Vec<Shape>,
    /// Element types (default f32; with --corpus, every dtype it lists).
    #[arg(long, value_delimiter = ',', value_parser = parse_dtype)]
    dtypes: Vec<DType>,
    /// Bench the problems of a shape corpus (e.g. bench/corpus.csv) instead
    /// of --shapes; --ops and --dtypes, when given, filter them, and a
    /// backward operator in --ops takes its forward's problems
    /// (`rmsnorm_backward`: the input gradient of each rmsnorm problem).
    #[arg(long, conflicts_with = "shapes")]
    corpus: Option<PathBuf>,
    /// With --corpus: only this part of its split.
    #[arg(long, value_enum, default_value_t = lanefold::corpus_cmd::PartArg::All, requires = "corpus")]
    part: lanefold::corpus_cmd::PartArg,
    /// With --corpus: only problems of at least this many rows (512: its
    /// prefill and training shapes, for the backward operators).
    #[arg(long, default_value_t = 0, requires = "corpus")]
    min_rows: usize,
    /// With --corpus: only shard I of N (`I/N`, I from 1): every Nth problem
    /// after the filters, from the Ith, so that N device calls of one
    /// length each run a part of the same size and mix.
    #[arg(long, value_name = "I/N", value_parser = lanefold::corpus_cmd::parse_shard, requires = "corpus")]
    shard: Option<(usize, usize)>,
    /// With --corpus: leave out the problems this results directory already
    /// holds (repeatable), so that a run its deadline cut short goes on.
    #[arg(long, value_name = "DIR", requires = "corpus")]
    skip_measured: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    #[command(flatten)]
    layout: LayoutArgs,
    /// Measure PyTorch eager through the Python peer.
    #[arg(long)]
    torch: bool,
    /// Also measure torch.compile.
    #[arg(long)]
    torch_compile: bool,
    /// Also measure Liger-Kernel (where installed and where it has the op).
    #[arg(long)]
    liger: bool,
    /// Also measure Quack's kernels, forward and backward (where `import
    /// quack` works in the peer's interpreter and Quack has the op).
    #[arg(long)]
    quack: bool,
    #[arg(long, default_value_t = 7)]
    samples: usize,
    #[arg(long, default_value_t = 20.0)]
    sample_ms: f64,
    #[arg(long, default_value_t = 100.0)]
    warmup_ms: f64,
    #[arg(long, value_enum, default_value_t = L2Arg::Warm)]
    l2: L2Arg,
    /// Store each kernel's CUDA source beside results.json (sources/SHA.cu).
    #[arg(long)]
    capture_sources: bool,
    /// Wall-clock budget in seconds: start no case the longest case so far
    /// says would end past it, and write the report of the cases done.
    #[arg(long, value_parser = lanefold::args::parse_seconds)]
    deadline_s: Option<f64>,
    /// Where no occupancy token is given: compile each plan (NVRTC) and, when
    /// the compiler lands a few registers over an occupancy step, promise
    /// that step if the promised kernel does not spill; the promise is
    /// recorded as an explicit layout. Same results.
    #[arg(long)]
    occupancy_from_compiler: bool,
    /// Leave out the per-column weight (rmsnorm, layernorm,
    /// residual_layernorm); lanefold alone, without peers or replays.
    #[arg(long)]
    no_weight: bool,
    /// Leave out the per-column bias (layernorm, residual_layernorm).
    #[arg(long)]
    no_bias: bool,
    #[arg(long)]
    output: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value = "python3")]
    python: String,
    /// The PyTorch peer script (default: python/torch_peer.py, found from
    /// the current directory or the executable's).
    #[arg(long)]
    peer_script: Option<PathBuf>,
}

#[derive(Args)]
struct SpeedArgs {
    #[arg(long, value_delimiter = ',', value_parser = parse_shape, default_value = "32768x4096,4096x32768,4096x131072")]
    shapes: Vec<Shape>,
    #[arg(long, value_delimiter = ',', value_parser = parse_dtype, default_value = "f32,bf16")]
    dtypes: Vec<DType>,
    #[arg(long, value_delimiter = ',', value_parser = parse_operator, default_value = "sum,softmax,rmsnorm,layernorm,residual_layernorm,cross_entropy")]
    ops: Vec<Operator>,
    #[command(flatten)]
    layout: LayoutArgs,
    #[arg(long, default_value_t = 7)]
    samples: usize,
    /// Target GPU time per sample's batch, µs.
    #[arg(long, default_value_t = 20000.0)]
    batch_us: f64,
    /// Directory for results.json (raw samples) and results.md.
    #[arg(long)]
    output: PathBuf,
}

#[derive(Args, Clone)]
struct ProblemArgs {
    #[arg(long, value_parser = parse_operator)]
    op: Operator,
    /// ROWSxN, e.g. 64x4096.
    #[arg(long, value_parser = parse_shape)]
    shape: Shape,
    #[arg(long, value_parser = parse_dtype, default_value = "f32")]
    dtype: DType,
    /// Leave out the per-column weight (rmsnorm, layernorm and their
    /// backwards).
    #[arg(long)]
    no_weight: bool,
    /// Leave out the per-column bias (layernorm).
    #[arg(long)]
    no_bias: bool,
    /// Withdraw the program's permission to reorder FP32 sums.
    #[arg(long)]
    no_reassociate: bool,
}

impl ProblemArgs {
    fn problem(&self) -> Problem {
        let options = OperatorOptions {
            weight: !self.no_weight,
            bias: !self.no_bias,
        };
        let mut p = Problem::operator(self.op, options, self.dtype, self.shape);
        if self.no_reassociate {
            p.program = p.program.exact();
        }
        p
    }
}

/// A request: `--schedule` and the layout flags, each of which stands for
/// one schedule token.
#[derive(Args, Clone)]
struct LayoutArgs {
    #[command(flatten)]
    schedule: lanefold::args::ScheduleArgs,
    /// W: workers per row, a power of two (0: automatic). Shorthand for
    /// the schedule token `W=N`.
    #[arg(long, help_heading = lanefold::args::SHORTHANDS, default_value_t = 0)]
    workers: u32,
    /// V: consecutive elements per worker, 1, 2, 4 or 8 (0: automatic).
    /// Shorthand for the schedule token `V=N`.
    #[arg(long, help_heading = lanefold::args::SHORTHANDS, default_value_t = 0)]
    pack: u32,
    /// U: stripe unroll, 1 to 8 (0: automatic). Shorthand for the
    /// schedule token `U=N`.
    #[arg(long, help_heading = lanefold::args::SHORTHANDS, default_value_t = 0)]
    unroll: u32,
    /// G: rows per group (0: automatic). Shorthand for the schedule token
    /// `G=N`.
    #[arg(long, help_heading = lanefold::args::SHORTHANDS, default_value_t = 0)]
    rows_per_group: u32,
}

impl LayoutArgs {
    /// The request of `--schedule` with the layout flags' tokens added,
    /// refused (naming the token) when the text does not parse.
    fn request(&self) -> Result<LayoutRequest> {
        let tokens: Vec<String> = [
            (self.workers, "W"),
            (self.pack, "V"),
            (self.unroll, "U"),
            (self.rows_per_group, "G"),
        ]
        .iter()
        .filter(|(n, _)| *n != 0)
        .map(|(n, name)| format!("{name}={n}"))
        .collect();
        self.schedule.request_with(&tokens)
    }
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    #[command(flatten)]
    layout: LayoutArgs,
    /// h200 or cpu.
    #[arg(long, default_value = "h200")]
    target: String,
    /// Print the row program in text form.
    #[arg(long)]
    print_ir: bool,
    /// Candidate lists (comma separated, 0 = automatic): enumerate their product.
    #[arg(long, value_delimiter = ',')]
    tune_workers: Vec<u32>,
    #[arg(long, value_delimiter = ',')]
    tune_pack: Vec<u32>,
    #[arg(long, value_delimiter = ',')]
    tune_unroll: Vec<u32>,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    #[command(flatten)]
    layout: LayoutArgs,
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    backend: BackendArg,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// NAME=PATH.npy for an input buffer (others are seeded random).
    #[arg(long, value_parser = parse_input)]
    input: Vec<(String, PathBuf)>,
    /// Write each output as DIR/NAME.npy.
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// CUDA: compile with fused multiply-add off.
    #[arg(long)]
    no_fma: bool,
    /// Ignore winners recorded by `lanefold tune`.
    #[arg(long)]
    no_tuning_cache: bool,
    /// Where the layout is automatic and the tuning cache has no winner
    /// for this problem: first search its layouts for at most SECONDS of
    /// compiling and measuring (the automatic mapping always, then the
    /// cost model's best-ranked), record the winner in the tuning cache and
    /// run with it; later calls find it there.
    #[arg(long, value_name = "SECONDS", conflicts_with = "no_tuning_cache", value_parser = lanefold::args::parse_seconds)]
    autotune: Option<f64>,
}

fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected NAME=PATH.npy"))?;
    Ok((name.to_string(), PathBuf::from(path)))
}

fn open_backend(arg: BackendArg) -> Result<Backend> {
    Ok(match arg {
        BackendArg::Cpu => Backend::Cpu,
        BackendArg::Cuda => Backend::cuda()?,
        BackendArg::Auto => {
            let (b, why) = Backend::detect();
            if let Some(why) = why {
                println!("{why}; running on the CPU");
            }
            b
        }
    })
}

/// Rust ignores SIGPIPE, so `println!` into a closed pipe (`lanefold plan |
/// head -1`) panics. A command-line tool should end quietly instead.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    restore_default_sigpipe();
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // A command line of older results may carry a policy flag that
        // is now a schedule token: say which.
        let args: Vec<String> = std::env::args().collect();
        let unknown = e.kind() == clap::error::ErrorKind::UnknownArgument;
        match lanefold::args::removed_flag_hint(&args).filter(|_| unknown) {
            Some(hint) => {
                let _ = e.print();
                eprintln!("hint: {hint}");
                std::process::exit(e.exit_code());
            }
            None => e.exit(),
        }
    });
    lanefold_cuda::set_verbose(cli.verbose);
    lanefold_measure::progress::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Demo { backend, python } => {
            if cli.verbose {
                demo(backend)
            } else {
                demo_cmd(backend, &python)
            }
        }
        Command::Plan(args) => plan_cmd(args),
        Command::Run(args) => run_cmd(args),
        Command::Selftest {
            backend,
            fuzz: Some(cases),
            seed,
            ..
        } => fuzz_cmd(backend, cases, seed),
        Command::Selftest {
            backend,
            quick,
            backward,
            long_shapes_only,
            variants_only,
            variant,
            ops,
            max_rows,
            skip_variants,
            fuzz: None,
            ..
        } => {
            let part = if backward {
                SelftestPart::Backward
            } else if long_shapes_only {
                SelftestPart::LongShapes
            } else if quick {
                SelftestPart::Quick
            } else {
                SelftestPart::Full
            };
            parse_ops(&ops)
                .and_then(|ops| selftest::narrow(selftest::Narrowing { ops, max_rows }))
                .and_then(|()| selftest_cmd(backend, part, variants_only, skip_variants, &variant))
        }
        Command::Bench(args) => bench_cmd(args),
        Command::Audit { dirs } => audit_cmd(&dirs),
        Command::Doctor(args) => lanefold::doctor::doctor_cmd(args),
        Command::Corpus(args) => lanefold::corpus_cmd::corpus_cmd(args),
        Command::FitModel(args) => lanefold::fit_cmd::fit_model_cmd(args),
        Command::Counters { dirs } => counters_cmd(&dirs),
        Command::BundleSources { dirs } => bundle_sources_cmd(&dirs),
        Command::Search(args) => lanefold::search_cmd::search_cmd(args),
        Command::Tune(args) => lanefold::search_cmd::tune_cmd(args),
        Command::Replay(args) => lanefold::replay_cmd::replay_cmd(args),
        Command::Report { dir } => report_cmd(&dir),
        Command::Scorecard {
            dirs,
            targets,
            corpus: true,
            corpus_file,
            part,
            backward,
            gpu,
            ..
        } => targets
            .map_or_else(default_targets_file, Ok)
            .and_then(|targets| {
                lanefold::corpus_cmd::corpus_scorecard(
                    &dirs,
                    &targets,
                    corpus_file.as_deref(),
                    part,
                    backward,
                    &gpu,
                )
            }),
        Command::Scorecard {
            dirs,
            targets,
            standing,
            ..
        } => scorecard_cmd(&dirs, targets.as_deref(), standing),
        Command::Latency {
            op,
            shape,
            dtype,
            iters,
            output,
        } => lanefold::latency::latency(
            &Case {
                op,
                dtype,
                shape,
                request: LayoutRequest::default(),
                seed: 1,
            },
            iters,
            &output,
        ),
        Command::CompileCheck {
            ops,
            shapes,
            draw,
            seed,
            max_rows,
            n_range,
            dtypes,
            layout,
            arch,
            toggle,
            occupancy_from_compiler,
            cubin_dir,
            cold_path,
            no_weight,
            no_bias,
        } => parse_ops(&ops).and_then(|ops| {
            let columns = OperatorOptions {
                weight: !no_weight,
                bias: !no_bias,
            };
            let shapes = match draw {
                Some(count) => lanefold_plan::drawn_shapes(seed, count, max_rows, n_range),
                None => shapes,
            };
            let request = layout.request()?;
            let checks = lanefold::compile_check::Checks {
                ops: &ops,
                shapes: &shapes,
                dtypes: &dtypes,
                columns,
                request,
                arch: &arch,
            };
            if let Some(token) = toggle {
                return lanefold::compile_check::toggle_check(&checks, &token);
            }
            if cold_path {
                return lanefold::compile_check::cold_path_check(&checks);
            }
            lanefold::compile_check::compile_check(
                &checks,
                occupancy_from_compiler,
                cubin_dir.as_deref(),
            )
        }),
        Command::Speed(args) => args.layout.request().and_then(|request| {
            lanefold::speed::speed(
                &args.shapes,
                &args.dtypes,
                &args.ops,
                &request,
                args.samples,
                args.batch_us,
                &args.output,
            )
        }),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(exit_code(&e));
    }
}

/// `lanefold scorecard`: each directory's verdicts, or with `standing`
/// one table over all of them.
fn scorecard_cmd(
    dirs: &[PathBuf],
    targets: Option<&std::path::Path>,
    standing: bool,
) -> Result<()> {
    use lanefold_measure::scorecard;
    let targets = scorecard::Targets::read(&match targets {
        Some(path) => path.to_path_buf(),
        None => default_targets_file()?,
    })?;
    let mut scored = vec![];
    for dir in dirs {
        let (verdicts, what, utc_time) = score_dir(dir, &targets)?;
        if !standing {
            let table = (!verdicts.is_empty()).then(|| scorecard::markdown(&verdicts, &targets));
            println!("# {} ({what})\n{}", dir.display(), or_no_case(table));
        }
        scored.push(scorecard::Scored {
            dir: dir
                .file_name()
                .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into()),
            utc_time,
            verdicts,
        });
    }
    if standing {
        let standing = scorecard::standing(&scored);
        let table =
            (!standing.is_empty()).then(|| scorecard::standing_markdown(&standing, &targets));
        println!(
            "# Standing over {} directories\n\nPer case, the latest verdict about the layout this binary picks by default, else the latest at all (marked).\n{}",
            dirs.len(),
            or_no_case(table)
        );
    }
    Ok(())
}

/// bench/targets.toml in the current directory or the nearest one above.
fn default_targets_file() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("the current directory")?;
    cwd.ancestors()
        .map(|dir| dir.join("bench/targets.toml"))
        .find(|path| path.is_file())
        .with_context(|| {
            format!(
                "no bench/targets.toml in {} or above it; pass --targets FILE",
                cwd.display()
            )
        })
}

fn or_no_case(table: Option<String>) -> String {
    table.unwrap_or_else(|| "\nno case of a target shape\n".to_string())
}

/// One directory's verdicts, what they come from (a search, or rounds of
/// a replay) and when it was measured.
fn score_dir(
    dir: &std::path::Path,
    targets: &lanefold_measure::scorecard::Targets,
) -> Result<(Vec<lanefold_measure::scorecard::Verdict>, String, String)> {
    use lanefold_measure::{replay::ReplayFile, scorecard, search::SearchFile};
    let path = dir.join("results.json");
    let text = lanefold_measure::results::read_text(&path)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    Ok(match value.get("schema").and_then(|s| s.as_str()) {
        Some(s) if s.starts_with("lanefold-search/") => {
            let file = SearchFile::read(&path)?;
            let target = lanefold_plan::Target::by_name(&file.target)
                .with_context(|| format!("{}: unknown target {}", dir.display(), file.target))?;
            let mut verdicts = scorecard::score_search(&file, targets);
            verdicts.extend(scorecard::score_search_today(&file, &target, targets));
            (verdicts, "search".to_string(), file.environment.utc_time)
        }
        _ => {
            let file = ReplayFile::read(&path).with_context(|| {
                format!(
                    "{}: the scorecard reads replay and search files",
                    dir.display()
                )
            })?;
            let rounds = format!("{} of {} rounds", file.rounds_done, file.rounds);
            let mut verdicts = scorecard::score(&file, targets);
            if let Some(target) = lanefold_plan::Target::by_name(&file.environment.backend) {
                scorecard::mark_todays_default(&mut verdicts, &file, &target);
            }
            (verdicts, rounds, file.environment.utc_time.clone())
        }
    })
}

/// Render results.md (and plot.svg) again for any of the three results
/// schemas, chosen by the file's `schema` field.
fn report_cmd(dir: &std::path::Path) -> Result<()> {
    use lanefold_measure::{bench, replay, results::ResultsFile, search::SearchFile};
    let path = dir.join("results.json");
    let text = lanefold_measure::results::read_text(&path)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(s) if s.starts_with("lanefold-replay/") => {
            replay::write_report(&replay::ReplayFile::read(&path)?, dir)
        }
        Some(s) if s.starts_with("lanefold-search/") => {
            let md = lanefold_measure::search::markdown(&SearchFile::read(&path)?);
            Ok(lanefold_cpu::npy::write_atomically(
                &dir.join("results.md"),
                md.as_bytes(),
            )?)
        }
        _ => bench::write_report(&ResultsFile::read(&path)?, dir),
    }
}

/// The demo: realistic problems validated, then timed against this
/// machine's copy bandwidth and torch eager.
fn demo_cmd(backend: BackendArg, python: &str) -> Result<()> {
    match open_backend(backend)? {
        Backend::Cuda(c) => lanefold::demo::demo(Some(&c), python),
        Backend::Cpu => lanefold::demo::demo(None, python),
    }
}

/// `demo --verbose`: every operator on the seed's shapes, per layout.
fn demo(backend: BackendArg) -> Result<()> {
    let backend = open_backend(backend)?;
    let started = Instant::now();
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "operator",
        "dtype",
        "shape",
        "layout",
        "rel err",
        "tolerance",
        "valid",
        "ms",
    ]);
    let mut failures = 0;
    for (rows, n) in selftest::SEED_SHAPES {
        for op in Operator::SIX {
            for dtype in [DType::F32, DType::Bf16] {
                for pack in [0, 4] {
                    let shape = Shape::new(rows, n)?;
                    let request = LayoutRequest {
                        pack,
                        ..Default::default()
                    };
                    let (request, _) = backend.tuned(op, dtype, shape, request);
                    let case = Case {
                        op,
                        dtype,
                        shape,
                        request,
                        seed: 42,
                    };
                    let t0 = Instant::now();
                    let out = run_case(&backend, &case, &CodegenOptions::default())
                        .with_context(|| format!("{op} {dtype} {rows}x{n}"))?;
                    let ok = out.validation.pass;
                    failures += usize::from(!ok);
                    table.add_row([
                        op.to_string(),
                        dtype.to_string(),
                        format!("{rows}x{n}"),
                        out.plan.describe(),
                        format!("{:.2e}", out.validation.worst_rel_err()),
                        format!("{:.0e}", dtype.tolerance()),
                        if ok { "yes".into() } else { "NO".to_string() },
                        format!("{:.1}", t0.elapsed().as_secs_f64() * 1e3),
                    ]);
                }
            }
        }
    }
    println!("{table}");
    println!(
        "backend {}: {} cases, {} invalid, {:.1} s (times include input generation and validation)",
        backend.name(),
        table.row_count(),
        failures,
        started.elapsed().as_secs_f64()
    );
    if failures > 0 {
        bail!("{failures} outputs failed validation");
    }
    Ok(())
}

fn plan_cmd(args: PlanArgs) -> Result<()> {
    let target = Target::by_name(&args.target)
        .with_context(|| format!("unknown target '{}' (expected h200 or cpu)", args.target))?;
    let problem = args.problem.problem();
    let base = args.layout.request()?;
    if args.print_ir {
        print!("{}", problem.as_requested(&base).program.to_text());
    }
    let searching =
        !(args.tune_workers.is_empty() && args.tune_pack.is_empty() && args.tune_unroll.is_empty());
    let or_base = |list: &[u32], b: u32| {
        if list.is_empty() {
            vec![b]
        } else {
            list.to_vec()
        }
    };
    let candidates = if searching {
        enumerate(
            &problem,
            &target,
            &base,
            &or_base(&args.tune_workers, base.workers),
            &or_base(&args.tune_pack, base.pack),
            &or_base(&args.tune_unroll, base.unroll),
        )
    } else {
        // A single request: a refusal is the command's result (exit 2).
        let p = plan(&problem, &target, &base)?;
        vec![lanefold_plan::Candidate {
            request: base,
            outcome: Ok(p),
        }]
    };
    let policy = RooflinePolicy;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "request W/V/U",
        "layout",
        "slots",
        "live lanes",
        "groups",
        "waves",
        "MB moved",
        "passes",
        "predicted µs",
        "legality",
    ]);
    for c in &candidates {
        let r = &c.request;
        let req = format!("{}/{}/{}", r.workers, r.pack, r.unroll);
        match &c.outcome {
            Ok(p) => {
                let f = Features::of(p, &target);
                table.add_row([
                    req,
                    p.describe(),
                    p.slot_bound.to_string(),
                    f.live_lanes.to_string(),
                    f.groups.to_string(),
                    format!("{:.2}", f.waves),
                    format!("{:.2}", f.bytes_moved as f64 / 1e6),
                    format!("{:.2}", f.passes),
                    format!("{:.2}", policy.predict_us(&f, p, &target)),
                    "legal".into(),
                ]);
            }
            Err(e) => {
                table.add_row([
                    req,
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    e.to_string(),
                ]);
            }
        }
    }
    println!(
        "{} {} {} on {} (cost policy {})",
        problem.program.name,
        problem.dtype,
        problem.shape,
        target.name,
        policy.name()
    );
    println!("{table}");
    if !searching {
        if let Some(Ok(p)) = candidates.first().map(|c| &c.outcome) {
            println!("schedule: {}", p.schedule());
        }
        if let Some(note) = lanefold_plan::automatic_note(&problem, &target, &base) {
            println!("note: {note}");
        }
    }
    let packed = candidates
        .iter()
        .any(|c| c.outcome.as_ref().is_ok_and(|p| p.packed_resident));
    if packed {
        println!(
            "note: predicted µs of packed-resident plans assume unpacked registers, \
             as the mapper does so that packing never moves a layout; on the H200 \
             softmax bf16 4096x131072 ran 645 µs against 1453 predicted"
        );
    }
    Ok(())
}

fn run_cmd(args: RunArgs) -> Result<()> {
    let backend = open_backend(args.backend)?;
    let problem = args.problem.problem();
    let tuned = || -> Result<(LayoutRequest, bool)> {
        Ok(if args.no_tuning_cache || args.problem.no_reassociate {
            (args.layout.request()?, false)
        } else {
            backend.tuned(
                args.problem.op,
                problem.dtype,
                problem.shape,
                args.layout.request()?,
            )
        })
    };
    let (mut request, mut from_cache) = tuned()?;
    if let Some(seconds) = args.autotune {
        if from_cache {
            println!("autotune: the tuning cache covers this problem; no search");
        } else if !lanefold::tunable(&request) || args.problem.no_reassociate {
            println!("autotune: the layout is given, nothing to search");
        } else if request.batch_invariant {
            println!(
                "autotune: batch-invariant winners come from `lanefold tune --batch-invariant`"
            );
        } else {
            let device = match backend {
                Backend::Cpu => lanefold_measure::bench::Device::Cpu,
                Backend::Cuda(_) => lanefold_measure::bench::Device::Cuda,
            };
            lanefold::search_cmd::autotune(
                device,
                args.problem.op,
                problem.dtype,
                problem.shape,
                seconds,
            )?;
            (request, from_cache) = tuned()?;
        }
    }
    if from_cache {
        println!("layout from the tuning cache");
    }
    let p = plan(&problem, &backend.target(), &request)?;
    let (rows, n) = (problem.shape.rows as u64, problem.shape.n as u64);
    let mut inputs = random_inputs(&problem, args.seed);
    for (name, path) in &args.input {
        let decl = problem.program.input(name).with_context(|| {
            format!(
                "--input {name}: '{}' has no input named '{name}'",
                problem.program.name
            )
        })?;
        let (element, shape) = match decl.kind {
            BufferKind::Row => (Element::Float(problem.dtype), vec![rows, n]),
            BufferKind::Column => (Element::Float(problem.dtype), vec![n]),
            BufferKind::RowIndex => (Element::Index, vec![rows]),
            BufferKind::RowScalar => (Element::Float(problem.dtype), vec![rows]),
            // A saved statistic is f32 whatever the storage dtype.
            BufferKind::RowScalarF32 => (Element::Float(DType::F32), vec![rows]),
        };
        inputs.insert(name.clone(), npy::read(path, element, &shape)?);
    }
    // A saved lse not given is the one the given x's forward would save
    // (the seeded one belongs to the seeded x).
    let lse_given = args.input.iter().any(|(name, _)| name == "lse");
    if !lse_given {
        if let Some(lse) = lanefold_cpu::data::saved_lse(&problem, &inputs) {
            inputs.insert("lse".into(), lse);
        }
    }
    let options = CodegenOptions { fma: !args.no_fma };
    let out = run_plan(&backend, p, inputs, &options)?;
    println!(
        "{} {} {} on {}: {}",
        problem.program.name,
        problem.dtype,
        problem.shape,
        backend.name(),
        out.plan.describe()
    );
    if let Some(d) = out
        .cold_path
        .as_ref()
        .filter(|d| **d != lanefold_cuda::ColdPathDecision::Absent)
    {
        println!("{d}");
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "output",
        "elements",
        "non-finite",
        "max abs err",
        "rel err",
        "tolerance",
        "valid",
    ]);
    for c in &out.validation.outputs {
        table.add_row([
            c.name.clone(),
            c.elements.to_string(),
            c.nonfinite.to_string(),
            format!("{:.3e}", c.max_abs_err),
            format!("{:.3e}", c.rel_err),
            format!("{:.0e}", c.tolerance),
            if c.pass {
                "yes".into()
            } else {
                "NO".to_string()
            },
        ]);
    }
    println!("{table}");
    if let Some(dir) = &args.output_dir {
        for decl in &problem.program.outputs {
            let shape = match decl.kind {
                BufferKind::Row => vec![rows, n],
                _ => vec![expected_len(decl.kind, rows as usize, n as usize) as u64],
            };
            let path = dir.join(format!("{}.npy", decl.name));
            npy::write(&path, &out.outputs[&decl.name], &shape)?;
            println!("wrote {}", path.display());
        }
    }
    if !out.validation.pass {
        let norm = matches!(
            problem.operator_kind(),
            Some(Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm)
        );
        if let Some(lanefold_cuda::ColdPathDecision::Plain { reason, .. }) = &out.cold_path {
            bail!(
                "output failed validation against float64 (rows whose squares overflow f32, \
                 or far from 0 for their spread, need the norms' cold path, and this plan \
                 runs without it: it did not fit the plain kernel's occupancy: {reason})"
            );
        }
        if norm && !out.plan.cold_path() {
            bail!(
                "output failed validation against float64 (rows whose squares overflow f32, \
                 or far from 0 for their spread, need the norms' cold path, which \
                 no-cold-path leaves out)"
            );
        }
        bail!("output failed validation against float64");
    }
    println!("validated against float64");
    Ok(())
}

/// `selftest --fuzz N --seed S`: the differential fuzzer on `backend`.
fn fuzz_cmd(backend: BackendArg, cases: u64, seed: u64) -> Result<()> {
    let backend = open_backend(backend)?;
    println!("fuzz on {}: {cases} cases, seed {seed}", backend.name());
    let started = Instant::now();
    let mut report = Report::default();
    selftest::fuzz_checks(&backend, cases, seed, &mut report);
    println!("elapsed {:.1} s", started.elapsed().as_secs_f64());
    println!("{}", report.summary());
    if report.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Which shapes of the full selftest run (`--quick`, `--long-shapes-only`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum SelftestPart {
    Full,
    Quick,
    LongShapes,
    Backward,
}

fn selftest_cmd(
    backend: BackendArg,
    part: SelftestPart,
    variants_only: bool,
    skip_variants: bool,
    variants: &[String],
) -> Result<()> {
    let groups = || {
        selftest::MATRIX_CHECKS
            .iter()
            .chain(selftest::VARIANT_CHECKS)
    };
    let known: Vec<&str> = groups().map(|(n, _)| *n).collect();
    if let Some(unknown) = variants.iter().find(|v| !known.contains(&v.as_str())) {
        bail!(
            "unknown variant '{unknown}' for --variant; known: {}",
            known.join(", ")
        );
    }
    let backend = match backend {
        BackendArg::Auto => open_backend(BackendArg::Auto)?,
        other => open_backend(other)?,
    };
    if part == SelftestPart::LongShapes && !matches!(backend, Backend::Cuda(_)) {
        bail!("--long-shapes-only runs on CUDA only (the CPU selftest has no long-row part)");
    }
    println!("selftest on {}", backend.name());
    let started = Instant::now();
    let mut report = Report::default();
    if !variants.is_empty() {
        for &(name, checks) in groups() {
            if variants.iter().any(|v| v == name) {
                selftest::run_variant_group(name, checks, &backend, &mut report);
            }
        }
    } else if variants_only {
        selftest::variant_checks(&backend, &mut report);
        selftest::call_path_checks(&backend, &mut report);
        selftest::latency_flag_checks(&backend, &mut report);
    } else if part == SelftestPart::LongShapes {
        long_shape_checks(&backend, &mut report);
    } else if part == SelftestPart::Backward {
        selftest::backward_checks(&backend, &mut report);
    } else {
        full_selftest(
            &backend,
            part == SelftestPart::Quick,
            !skip_variants,
            started,
            &mut report,
        );
    }
    println!("elapsed {:.1} s", started.elapsed().as_secs_f64());
    println!("{}", report.summary());
    if report.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Every check of the selftest, in order, with progress lines.
fn full_selftest(
    backend: &Backend,
    quick: bool,
    variants: bool,
    started: Instant,
    report: &mut Report,
) {
    selftest::refusal_checks(report);
    selftest::exact_sum_checks(backend, report);
    selftest::load_policy_checks(backend, report);
    selftest::cluster_group_checks(backend, report);
    if variants {
        selftest::variant_checks(backend, report);
    }
    selftest::call_path_checks(backend, report);
    selftest::latency_flag_checks(backend, report);
    selftest::run_cases(backend, &selftest::layout_matrix(DType::F32), report);
    selftest::run_cases(
        backend,
        &selftest::backward_layout_matrix(DType::F32),
        report,
    );
    println!(
        "layout matrix done: {} ({:.1} s)",
        report.summary(),
        started.elapsed().as_secs_f64()
    );
    if let Backend::Cuda(_) = backend {
        selftest::run_cases(
            backend,
            &selftest::shape_matrix(&selftest::SEED_SHAPES, &[0, 4]),
            report,
        );
        selftest::run_cases(
            backend,
            &selftest::shape_matrix_of(
                &Operator::training().collect::<Vec<_>>(),
                &selftest::SEED_SHAPES,
                &[0, 4],
            ),
            report,
        );
        println!(
            "seed shapes done: {} ({:.1} s)",
            report.summary(),
            started.elapsed().as_secs_f64()
        );
        if !quick {
            long_shape_checks(backend, report);
        }
    }
}

/// The long-row shapes, each with the automatic layout (CUDA).
fn long_shape_checks(backend: &Backend, report: &mut Report) {
    selftest::run_cases(
        backend,
        &selftest::shape_matrix(&selftest::LONG_SHAPES, &[0]),
        report,
    );
}

fn bench_cmd(args: BenchArgs) -> Result<()> {
    use lanefold_measure::bench::{grid, run_bench, BenchSpec};
    use lanefold_measure::phases::PhaseConfig;
    let ops = parse_ops(&args.ops)?;
    let problems = match &args.corpus {
        Some(file) => lanefold::corpus_cmd::skip_measured(
            lanefold::corpus_cmd::corpus_problems(
                file,
                args.part,
                args.min_rows,
                &ops,
                &args.dtypes,
                args.shard,
            )?,
            &args.skip_measured,
        )?,
        None if args.dtypes.is_empty() => grid(&ops, &args.shapes, &[DType::F32]),
        None => grid(&ops, &args.shapes, &args.dtypes),
    };
    let mut peer_modes = vec![];
    if args.torch {
        peer_modes.push("eager".to_string());
    }
    if args.torch_compile {
        peer_modes.push("compile".to_string());
    }
    if args.liger {
        peer_modes.push("liger".to_string());
    }
    if args.quack {
        peer_modes.push("quack".to_string());
    }
    let spec = BenchSpec {
        problems,
        request: args.layout.request()?,
        device: args.backend.into(),
        config: PhaseConfig {
            samples: args.samples,
            sample_ms: args.sample_ms,
            warmup_ms: args.warmup_ms,
            l2: args.l2.into(),
        },
        peer_modes,
        python: args.python,
        peer_script: args
            .peer_script
            .unwrap_or_else(lanefold_measure::peer::default_script),
        capture_sources: args.capture_sources,
        output: args.output.clone(),
        seed: args.seed,
        command_line: std::env::args().collect(),
        deadline_s: args.deadline_s,
        occupancy_from_compiler: args.occupancy_from_compiler,
        options: OperatorOptions {
            weight: !args.no_weight,
            bias: !args.no_bias,
        },
        quiet: false,
    };
    let file = run_bench(&spec)?;
    let invalid = file
        .cases
        .iter()
        .flat_map(|c| c.sides.iter())
        .filter(|s| !s.validation.pass)
        .count();
    println!(
        "wrote {} ({} cases)",
        args.output.join("results.json").display(),
        file.cases.len()
    );
    if invalid > 0 {
        bail!("{invalid} side(s) produced invalid outputs; their timings were voided");
    }
    if !file.not_run.is_empty() {
        bail!(
            "{} case(s) did not run on lanefold's side and are left out of the results:\n  {}",
            file.not_run.len(),
            file.not_run.join("\n  ")
        );
    }
    Ok(())
}

fn bundle_sources_cmd(dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        let moved = lanefold_measure::results::bundle_sources(dir)?;
        if moved > 0 {
            println!("{}: {moved} sources bundled", dir.display());
        }
    }
    Ok(())
}

fn counters_cmd(dirs: &[PathBuf]) -> Result<()> {
    use lanefold_measure::counters;
    let mut launches = vec![];
    for dir in dirs {
        let files = counters::counter_files(dir).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: no Nsight Compute raw pages (NAME-raw.csv[.gz])",
                dir.display()
            )
        })?;
        for file in files {
            launches.push(counters::read_counters(&file).map_err(anyhow::Error::msg)?);
        }
    }
    print!("{}", counters::table(&launches));
    Ok(())
}

fn audit_cmd(dirs: &[PathBuf]) -> Result<()> {
    let mut total = 0;
    for dir in dirs {
        let findings = lanefold_measure::audit::audit_dir(dir);
        if findings.is_empty() {
            println!("{}: ok", dir.display());
        }
        for f in &findings {
            println!("{}: {f}", dir.display());
        }
        total += findings.len();
    }
    if total > 0 {
        bail!("audit found {total} discrepancies");
    }
    Ok(())
}
