//! The first speed table: GPU time per op from device events around a
//! batch of launches (L2 warm: the same buffers every launch), and the
//! effective bandwidth over bytes moved (inputs read once, outputs written
//! once). Each plan's outputs are validated before it is timed.

use crate::{run_case, Backend, Case};
use anyhow::{bail, Result};
use lanefold_codegen::CodegenOptions;
use lanefold_cpu::npy::write_atomically;
use lanefold_ir::{DType, Operator};
use lanefold_measure::results::{gbps, Summary};
use lanefold_plan::{CostPolicy, Features, LayoutRequest, RooflinePolicy, Shape};
use serde_json::json;
use std::path::Path;

#[allow(clippy::too_many_arguments)]
pub fn speed(
    shapes: &[Shape],
    dtypes: &[DType],
    ops: &[Operator],
    request: &LayoutRequest,
    samples: usize,
    batch_us: f64,
    output: &Path,
) -> Result<()> {
    let backend = Backend::cuda()?;
    let Backend::Cuda(cuda) = &backend else {
        bail!("speed needs CUDA")
    };
    let target = backend.target();
    let mut cases = vec![];
    let mut md = String::from(
        "| op | dtype | shape | plan | GPU µs/op (p50) | min | max | GB/s (p50) | predicted µs | valid (rel err) |\n|---|---|---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for &shape in shapes {
        for &op in ops {
            for &dtype in dtypes {
                let case = Case {
                    op,
                    dtype,
                    shape,
                    request: *request,
                    seed: 11,
                };
                let out = run_case(&backend, &case, &CodegenOptions::default())?;
                let f = Features::of(&out.plan, &target);
                let predicted = RooflinePolicy.predict_us(&f, &out.plan, &target);
                let batch = ((batch_us / predicted).ceil() as usize).clamp(1, 10_000);
                let times = if out.validation.pass {
                    cuda.time(
                        &out.plan,
                        &CodegenOptions::default(),
                        &out.inputs,
                        batch,
                        samples,
                    )?
                } else {
                    vec![]
                };
                let summary = Summary::of(&times);
                let p50 = summary.map_or(f64::NAN, |s| s.p50);
                let (min, max) = summary.map_or((f64::NAN, f64::NAN), |s| (s.min, s.max));
                let gbps = gbps(f.bytes_moved, p50);
                println!(
                    "{op:<19} {dtype:<4} {shape:<12} {:<34} {p50:>10.2} µs {gbps:>7.0} GB/s  valid={}",
                    out.plan.describe(),
                    out.validation.pass
                );
                md += &format!(
                    "| {op} | {dtype} | {shape} | {} | {p50:.2} | {min:.2} | {max:.2} | {gbps:.0} | {predicted:.1} | {} ({:.1e}) |\n",
                    out.plan.describe(),
                    if out.validation.pass { "yes" } else { "NO" },
                    out.validation.worst_rel_err()
                );
                cases.push(json!({
                    "op": op.name(), "dtype": dtype.name(), "shape": shape.to_string(),
                    "plan": out.plan.describe(), "layout": out.plan.layout,
                    "validation": out.validation, "batch": batch,
                    "gpu_us_per_op_samples": times, "gpu_us_per_op_p50": p50,
                    "bytes_moved": f.bytes_moved, "effective_gbps_p50": gbps,
                    "predicted_us": predicted,
                    "scope": "gpu: CUDA events around a batch of launches of one kernel, divided by the batch; L2 warm (same buffers each launch)",
                }));
            }
        }
    }
    let doc = json!({
        "schema": "lanefold-speed/1",
        "device": cuda.device_name(),
        "driver": cuda.driver_version(),
        "compute_capability": format!("{:?}", cuda.compute_capability()),
        "samples_per_case": samples,
        "cases": cases,
    });
    std::fs::create_dir_all(output)?;
    write_atomically(
        &output.join("results.json"),
        serde_json::to_string_pretty(&doc)?.as_bytes(),
    )?;
    lanefold_measure::results::remove_superseded_gz(&output.join("results.json"))?;
    let header = format!(
        "# First speed table on {} (driver {})\n\nGPU time per op: CUDA events around a batch of launches sized to about {batch_us:.0} µs, divided by the batch; {samples} samples per case; L2 warm (the same buffers every launch). Effective GB/s = (inputs read once + outputs written once) / p50. Every plan's outputs were validated against float64 before timing. Automatic layout unless the command line says otherwise.\n\n",
        cuda.device_name(),
        cuda.driver_version()
    );
    write_atomically(&output.join("results.md"), (header + &md).as_bytes())?;
    Ok(())
}
