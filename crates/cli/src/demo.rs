//! `lanefold demo`: the point of lanefold in one screen. Realistic problems
//! (an LLM hidden size at prefill and at decode, a vocabulary-sized loss,
//! attention probabilities), each validated against float64 and then timed
//! the way `bench` times them, against this machine's own copy bandwidth
//! and, where PyTorch with CUDA is importable, torch eager.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_measure::bench::{run_bench, BenchProblem, BenchSpec, Device};
use lanefold_measure::phases::{L2Mode, PhaseConfig};
use lanefold_measure::results::{gbps, CaseResult};
use lanefold_plan::{LayoutRequest, Shape};

/// One problem of the demo: what it is, and its size on a GPU.
pub struct DemoProblem {
    pub what: &'static str,
    pub op: Operator,
    pub dtype: DType,
    pub rows: usize,
    pub n: usize,
}

/// The demo's problems at GPU size. On the CPU the row counts shrink (see
/// [`cpu_rows`]) so the float64 check stays within seconds.
pub const PROBLEMS: [DemoProblem; 7] = [
    DemoProblem {
        what: "Llama-3-8B RMSNorm, prefill",
        op: Operator::Rmsnorm,
        dtype: DType::Bf16,
        rows: 8192,
        n: 4096,
    },
    DemoProblem {
        what: "Llama-3-8B RMSNorm, decode of 32 sequences",
        op: Operator::Rmsnorm,
        dtype: DType::Bf16,
        rows: 32,
        n: 4096,
    },
    DemoProblem {
        what: "GPT-2 XL residual add + LayerNorm, training",
        op: Operator::ResidualLayernorm,
        dtype: DType::Bf16,
        rows: 16384,
        n: 1600,
    },
    DemoProblem {
        what: "Falcon-7B LayerNorm (f32), prefill",
        op: Operator::Layernorm,
        dtype: DType::F32,
        rows: 4096,
        n: 4544,
    },
    DemoProblem {
        what: "attention probabilities, 2048 keys",
        op: Operator::Softmax,
        dtype: DType::Bf16,
        rows: 65536,
        n: 2048,
    },
    DemoProblem {
        what: "Llama-3 loss over a 128256-token vocabulary",
        op: Operator::CrossEntropy,
        dtype: DType::Bf16,
        rows: 4096,
        n: 128256,
    },
    DemoProblem {
        what: "row sums (f32)",
        op: Operator::Sum,
        dtype: DType::F32,
        rows: 8192,
        n: 8192,
    },
];

/// Rows on the CPU: about 4 Mi elements per problem, at least one row.
pub fn cpu_rows(p: &DemoProblem) -> usize {
    (p.rows).min((4 << 20) / p.n).max(1)
}

/// Is PyTorch with a CUDA device importable by `python`?
fn torch_cuda(python: &str) -> bool {
    Command::new(python)
        .args([
            "-c",
            "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Host memcpy bandwidth, GB/s counting read plus write: the best of a few
/// copies of 256 MiB.
pub fn host_copy_gbps() -> f64 {
    let bytes = 256 << 20;
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let mut best = f64::INFINITY;
    for _ in 0..4 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * bytes as f64 / best / 1e9
}

/// A bar of `frac` (0..=1 shown) in `width` cells.
pub fn bar(frac: f64, width: usize) -> String {
    let cells = (frac.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!("{}{}", "█".repeat(cells), "·".repeat(width - cells))
}

fn p50_us(c: &CaseResult, side: &str) -> Option<f64> {
    let s = c.side(side)?;
    s.summary.gpu.or(s.summary.e2e).map(|x| x.p50)
}

pub fn demo(cuda: Option<&lanefold_cuda::CudaBackend>, python: &str) -> Result<()> {
    let started = Instant::now();
    let on_gpu = cuda.is_some();
    let (copy, copy_what) = match cuda {
        Some(c) => (
            c.copy_gbps(1 << 30, 5).context("timing a device copy")?,
            format!("{} device-to-device copy", c.device_name()),
        ),
        None => (host_copy_gbps(), "host memcpy".to_string()),
    };
    let torch = on_gpu && torch_cuda(python);
    let problems: Vec<BenchProblem> = PROBLEMS
        .iter()
        .map(|p| {
            let rows = if on_gpu { p.rows } else { cpu_rows(p) };
            Ok(BenchProblem {
                op: p.op,
                dtype: p.dtype,
                shape: Shape::new(rows, p.n)?,
            })
        })
        .collect::<Result<_>>()?;
    let scratch = std::env::temp_dir().join(format!("lanefold-demo-{}", std::process::id()));
    let spec = BenchSpec {
        problems,
        request: LayoutRequest::default(),
        device: if on_gpu { Device::Cuda } else { Device::Cpu },
        config: PhaseConfig {
            samples: 5,
            sample_ms: if on_gpu { 5.0 } else { 20.0 },
            warmup_ms: 10.0,
            l2: L2Mode::Warm,
        },
        peer_modes: if torch { vec!["eager".into()] } else { vec![] },
        python: python.to_string(),
        peer_script: lanefold_measure::peer::default_script(),
        capture_sources: false,
        output: scratch.clone(),
        seed: 7,
        command_line: std::env::args().collect(),
        deadline_s: None,
        occupancy_from_compiler: false,
        options: OperatorOptions::default(),
        quiet: true,
    };
    let file = run_bench(&spec);
    let _ = std::fs::remove_dir_all(&scratch);
    let file = file?;

    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["problem", "shape", "valid", "µs", "GB/s", "of copy"];
    if torch {
        header.extend(["torch µs", "speed-up"]);
    }
    table.set_header(header);
    let mut bars = String::new();
    let mut invalid = 0;
    let (mut fracs, mut speedups) = (vec![], vec![]);
    for (p, c) in PROBLEMS.iter().zip(&file.cases) {
        let native = c.side("lanefold");
        let valid = native.is_some_and(|s| s.validation.pass);
        invalid += usize::from(!valid);
        let us = p50_us(c, "lanefold");
        let rate = us.map(|t| gbps(c.bytes_moved, t));
        let frac = rate.map(|r| r / copy);
        let mut row = vec![
            p.what.to_string(),
            format!("{} {} {}", c.op, c.dtype, c.shape),
            if valid { "yes".into() } else { "NO".into() },
            us.map_or("—".into(), |t| format!("{t:.1}")),
            rate.map_or("—".into(), |r| {
                if r < 10.0 {
                    format!("{r:.2}")
                } else {
                    format!("{r:.0}")
                }
            }),
            frac.map_or("—".into(), |f| format!("{:.0}%", 100.0 * f)),
        ];
        if torch {
            let t = p50_us(c, "torch-eager");
            row.push(t.map_or("—".into(), |t| format!("{t:.1}")));
            let s = t.zip(us).map(|(t, u)| t / u);
            row.push(s.map_or("—".into(), |s| format!("{s:.2}x")));
            speedups.extend(s);
        }
        table.add_row(row);
        if let Some(f) = frac {
            fracs.push(f);
            let label = format!("{} {}", c.op, c.shape);
            bars += &format!("{label:<30} {} {:>4.0}%\n", bar(f, 40), 100.0 * f);
        }
    }
    println!("{table}");
    println!("effective bandwidth as a share of the {copy_what} ({copy:.0} GB/s, read + write):");
    print!("{bars}");
    let range = |v: &[f64]| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(0.0, f64::max);
        (lo, hi)
    };
    let (lo, hi) = range(&fracs);
    let mut closing = format!(
        "Shown: {} problems validated against float64, then run at {:.0}-{:.0}% of this {}'s copy bandwidth",
        file.cases.len() - invalid,
        100.0 * lo,
        100.0 * hi,
        if on_gpu { "GPU" } else { "machine" }
    );
    if !speedups.is_empty() {
        let geo = (speedups.iter().map(|s| s.ln()).sum::<f64>() / speedups.len() as f64).exp();
        closing += &format!(", {geo:.2}x torch eager (geometric mean)");
    }
    println!("{closing} in {:.1} s.", started.elapsed().as_secs_f64());
    if !on_gpu {
        println!(
            "(CPU sizes: rows cut to about 4 Mi elements per problem. On a machine with an NVIDIA GPU, \
             the same command runs the generated CUDA kernels; `lanefold doctor` says what is missing here.)"
        );
    } else if !torch {
        println!("(torch eager not compared: no PyTorch with CUDA for `{python}`.)");
    }
    if invalid > 0 {
        anyhow::bail!("{invalid} outputs failed validation");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_clamped_and_sized() {
        assert_eq!(bar(0.5, 4), "██··");
        assert_eq!(bar(1.7, 3), "███");
        assert_eq!(bar(-1.0, 2), "··");
    }

    /// CPU sizes keep every problem's row length and cut rows to about
    /// 4 Mi elements, never to zero.
    #[test]
    fn cpu_rows_keep_row_lengths_and_at_least_one_row() {
        for p in &PROBLEMS {
            let rows = cpu_rows(p);
            assert!(rows >= 1 && rows <= p.rows);
            assert!(rows * p.n <= (4 << 20) || rows == 1);
        }
    }
}
