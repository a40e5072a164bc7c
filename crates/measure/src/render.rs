//! results.md and plot.svg, rendered from results.json alone.

use crate::results::{ResultsFile, Summary, SCOPE_E2E, SCOPE_GPU, SCOPE_SINGLE};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

fn us(s: Option<Summary>) -> String {
    s.map_or("—".into(), |s| format!("{:.2}", s.p50))
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("—".into(), |v| format!("{v:.digits$}"))
}

pub fn markdown(file: &ResultsFile) -> String {
    let e = &file.environment;
    let c = &file.config;
    let mut md = String::new();
    let device = e
        .gpu_name
        .clone()
        .unwrap_or_else(|| format!("the CPU of {}", e.host));
    let _ = writeln!(md, "# lanefold bench on {device}\n");
    let _ = writeln!(
        md,
        "Measured {} by `{}` (binary SHA-256 `{}`, git `{}`{}). Backend: {}.\n",
        e.utc_time,
        e.command_line.join(" "),
        e.binary_sha256,
        e.git_sha,
        if e.git_dirty { ", dirty tree" } else { "" },
        e.backend
    );
    let _ = writeln!(md, "| environment | |\n|---|---|");
    for (k, v) in [
        ("GPU", e.gpu_name.clone()),
        ("GPU UUID", e.gpu_uuid.clone()),
        ("driver / CUDA", e.driver.clone()),
        ("compute capability", e.compute_capability.clone()),
        ("L2 bytes", e.l2_bytes.map(|b| b.to_string())),
        (
            "SM clock MHz (start, end)",
            e.sm_clock_mhz.clone().map(|c| c.join(", ")),
        ),
        (
            "memory clock MHz (start, end)",
            e.mem_clock_mhz.clone().map(|c| c.join(", ")),
        ),
        ("PyTorch", e.torch.clone()),
        ("Liger-Kernel", e.liger.clone()),
        ("Python", e.python.clone()),
        ("rustc", Some(e.rustc.clone())),
    ] {
        let _ = writeln!(md, "| {k} | {} |", v.unwrap_or_else(|| "—".into()));
    }
    let _ = writeln!(
        md,
        "\n**Method.** {} samples per phase, each batch sized to about {} ms of host time, {} ms warm-up (compilation and transfers excluded), L2 {}. Phases are sampled separately and never subtracted:\n\n- {SCOPE_GPU}\n- {SCOPE_E2E}\n- {SCOPE_SINGLE}\n\nEvery output of every side was validated against a float64 reference before its timing counted (normwise relative error; f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 1e-2); an invalid side's samples are dropped. Figures are p50 of the samples; ratios are peer p50 over lanefold p50 (above 1: lanefold faster). One run: this is a measurement, not a frozen replay.\n",
        c.samples,
        c.sample_ms,
        c.warmup_ms,
        match c.l2 {
            crate::phases::L2Mode::Warm => "warm (the same buffers each launch)",
            crate::phases::L2Mode::Cold => "cold (launches rotate among input sets totalling at least 3x L2)",
        }
    );
    let peers: Vec<String> = {
        let mut v: Vec<String> = file
            .cases
            .iter()
            .flat_map(|c| c.sides.iter().map(|s| s.name.clone()))
            .filter(|n| n != "lanefold")
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let _ = writeln!(md, "## GPU throughput (µs per op, p50)\n");
    let mut header = "| op | dtype | shape | lanefold plan | lanefold | GB/s |".to_string();
    let mut rule = "|---|---|---|---|---:|---:|".to_string();
    for p in &peers {
        let _ = write!(header, " {p} | {p} GB/s | {p}/lanefold |");
        rule += "---:|---:|---:|";
    }
    let _ = writeln!(md, "{header} valid |\n{rule}---|");
    for case in &file.cases {
        let native = case.side("lanefold");
        let mut row = format!(
            "| {} | {} | {} | {} | {} | {} |",
            case.op,
            case.dtype,
            case.shape,
            case.plan.describe,
            us(native.and_then(|s| s.summary.gpu)),
            opt(native.and_then(|s| s.gpu_gbps_p50), 0)
        );
        for p in &peers {
            let side = case.side(p);
            let _ = write!(
                row,
                " {} | {} | {} |",
                us(side.and_then(|s| s.summary.gpu)),
                opt(side.and_then(|s| s.gpu_gbps_p50), 0),
                opt(
                    case.ratios.get(&format!("{p}/lanefold gpu p50")).copied(),
                    3
                )
            );
        }
        let valid: Vec<String> = case
            .sides
            .iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s.name,
                    if s.validation.pass {
                        "yes"
                    } else {
                        "NO (voided)"
                    }
                )
            })
            .collect();
        let _ = writeln!(md, "{row} {} |", valid.join(", "));
    }
    let _ = writeln!(md, "\n## End-to-end and single-call latency (µs, p50)\n");
    let _ = writeln!(md, "| op | dtype | shape | side | e2e per op | single GPU | single host | host-bound (gpu, e2e) |\n|---|---|---|---|---:|---:|---:|---|");
    for case in &file.cases {
        for s in &case.sides {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {:?}, {:?} |",
                case.op,
                case.dtype,
                case.shape,
                s.name,
                us(s.summary.e2e),
                us(s.summary.single_gpu),
                us(s.summary.single_host),
                s.host_bound.gpu,
                s.host_bound.e2e
            );
        }
    }
    let _ = writeln!(
        md,
        "\n![GB/s against row length](plot.svg)\n\nRaw samples, validation records and kernel source hashes are in `results.json`; `lanefold audit` recomputes every figure above from them."
    );
    md
}

/// GB/s (gpu phase p50) against row length, one panel-free line per
/// operator and side, log-scaled row length.
pub fn plot(file: &ResultsFile, path: &Path) -> anyhow::Result<()> {
    let mut series: std::collections::BTreeMap<String, Vec<(f64, f64)>> = Default::default();
    for case in &file.cases {
        let n: f64 = case
            .shape
            .split('x')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1.0);
        for s in &case.sides {
            if let Some(g) = s.gpu_gbps_p50 {
                series
                    .entry(format!("{} {} {}", case.op, case.dtype, s.name))
                    .or_default()
                    .push((n, g));
            }
        }
    }
    let max_n = series.values().flatten().map(|p| p.0).fold(2.0, f64::max);
    let max_g = series.values().flatten().map(|p| p.1).fold(1.0, f64::max);
    let root = SVGBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "effective GB/s (gpu phase p50) vs row length",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..max_n * 1.5).log_scale(), 0f64..max_g * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("row length N")
        .y_desc("GB/s")
        .draw()?;
    for (i, (name, mut pts)) in series.into_iter().enumerate() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = Palette99::pick(i).to_rgba();
        let dashed = !name.ends_with("lanefold");
        let style = ShapeStyle {
            color,
            filled: !dashed,
            stroke_width: if dashed { 1 } else { 2 },
        };
        chart
            .draw_series(LineSeries::new(pts.clone(), style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, style)))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
