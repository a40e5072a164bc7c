//! `lanefold latency`: where a synchronized single call's host time goes
//! (see `lanefold_cuda::LatencyProbe`). Validates the plan first, prints
//! percentiles per (schedule, variant) and writes every raw sample.

use crate::{run_case, Backend, Case};
use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::npy::write_atomically;
use lanefold_measure::results::Summary;
use serde_json::json;
use std::path::Path;

pub fn latency(case: &Case, iters: usize, output: &Path) -> Result<()> {
    let backend = Backend::cuda()?;
    let Backend::Cuda(cuda) = &backend else {
        bail!("latency needs CUDA")
    };
    let options = CodegenOptions::default();
    let out = run_case(&backend, case, &options)?;
    if !out.validation.pass {
        bail!(
            "{} {} {}: the plan's outputs are wrong; nothing timed",
            case.op,
            case.dtype,
            case.shape
        );
    }
    let mut prepared = cuda.prepare(&out.plan, &options, std::slice::from_ref(&out.inputs))?;
    let mut event_us = vec![];
    for _ in 0..iters.clamp(1, 200) {
        event_us.push(prepared.single()?.0);
    }
    let probes = prepared.latency_probe(iters)?;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["schedule", "variant", "p10 µs", "p50 µs", "p90 µs", "n"]);
    let mut rows = vec![];
    for p in &probes {
        // Summaries of the samples as written, so the audit re-derives them.
        let host_us = to_nanoseconds(&p.host_us);
        let s = Summary::of(&host_us).context("no samples")?;
        let q = |f: f64| percentile(&host_us, f);
        table.add_row([
            p.schedule.to_string(),
            p.variant.label().to_string(),
            format!("{:.2}", q(0.1)),
            format!("{:.2}", s.p50),
            format!("{:.2}", q(0.9)),
            p.host_us.len().to_string(),
        ]);
        rows.push(json!({
            "schedule": p.schedule, "variant": p.variant.label(),
            "host_us_p50": s.p50, "host_us_samples": host_us,
        }));
    }
    let event_us = to_nanoseconds(&event_us);
    let gpu = Summary::of(&event_us).context("no event samples")?;
    println!(
        "{} {} {} {}: one call {:.2} µs on the GPU (events, p50 of {})",
        case.op,
        case.dtype,
        case.shape,
        out.plan.describe(),
        gpu.p50,
        event_us.len()
    );
    println!("{table}");
    let doc = json!({
        "schema": "lanefold-latency/1",
        "device": cuda.device_name(),
        "driver": cuda.driver_version(),
        "op": case.op.name(), "dtype": case.dtype.name(), "shape": case.shape.to_string(),
        "plan": out.plan.describe(),
        "iters": iters,
        "order": "per iteration, every variant once in the listed order; 10% untimed warm-up",
        "gpu_event_us_samples": event_us,
        "call_waits_on_flag": prepared.call_waits_on_flag(),
        "call_completion": prepared.call_completion().map(|c| c.map_or("synchronize".to_string(), |c| format!("{c:?}"))),
        "probes": rows,
    });
    // Compact: 2000 samples of 36 variants stay under a megabyte.
    write_atomically(output, serde_json::to_string(&doc)?.as_bytes())
        .with_context(|| format!("writing {}", output.display()))?;
    println!("wrote {}", output.display());
    Ok(())
}

/// Nearest-rank percentile of unsorted samples (`f` in 0..=1).
fn percentile(samples: &[f64], f: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * f).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// Samples in µs rounded to whole nanoseconds, the host clock's resolution.
fn to_nanoseconds(us: &[f64]) -> Vec<f64> {
    us.iter().map(|u| (u * 1000.0).round() / 1000.0).collect()
}
