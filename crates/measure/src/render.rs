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

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "—",
    }
}

/// `# lanefold KIND on DEVICE` and the provenance sentence every results.md
/// opens with (time, command line, binary SHA-256, git commit, backend).
pub fn header(kind: &str, e: &crate::results::Environment) -> String {
    let device = e
        .gpu_name
        .clone()
        .unwrap_or_else(|| format!("the CPU of {}", e.host));
    format!(
        "# lanefold {kind} on {device}\n\nMeasured {} by `{}` (binary SHA-256 `{}`, git `{}`{}). Backend: {}.\n",
        e.utc_time,
        e.command_line.join(" "),
        e.binary_sha256,
        e.git_sha,
        if e.git_dirty { ", dirty tree" } else { "" },
        e.backend
    )
}

pub fn markdown(file: &ResultsFile) -> String {
    let e = &file.environment;
    let c = &file.config;
    let mut md = header("bench", e);
    md.push('\n');
    let _ = writeln!(md, "| environment | |\n|---|---|");
    // Quack's row only where a peer reported it: reports of files written
    // without it render as before.
    let quack = e.quack.clone().map(|v| ("Quack", Some(v)));
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
    ]
    .into_iter()
    .chain(quack)
    .chain([
        ("Python", e.python.clone()),
        ("rustc", Some(e.rustc.clone())),
    ]) {
        let _ = writeln!(md, "| {k} | {} |", v.unwrap_or_else(|| "—".into()));
    }
    // The file's own single-call label: older files timed it differently.
    let single_scope = file
        .cases
        .iter()
        .flat_map(|c| &c.sides)
        .find_map(|s| s.scopes.get("single"))
        .map_or(SCOPE_SINGLE, String::as_str);
    let _ = writeln!(
        md,
        "\n**Method.** {} samples per phase, each batch sized to about {} ms of host time, {} ms warm-up (compilation and transfers excluded), L2 {}. Phases are sampled separately and never subtracted:\n\n- {SCOPE_GPU}\n- {SCOPE_E2E}\n- {single_scope}\n\nEvery output of every side was validated against a float64 reference before its timing counted (normwise relative error; f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 1e-2); an invalid side's samples are dropped. Figures are p50 of the samples; ratios are peer p50 over lanefold p50 (above 1: lanefold faster). One run: this is a measurement, not a frozen replay.\n",
        c.samples,
        c.sample_ms,
        c.warmup_ms,
        match c.l2 {
            crate::phases::L2Mode::Warm => "warm (the same buffers each launch)",
            crate::phases::L2Mode::Cold => "cold (launches rotate among input sets totalling at least 3x L2)",
            crate::phases::L2Mode::ColdInputs => "cold inputs (launches rotate among input sets totalling at least 3x L2; lanefold's all write one output set, as a peer's outputs are one block from its allocator)",
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
            case.op_label(),
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
                "| {} | {} | {} | {} | {} | {} | {} | {}, {} |",
                case.op_label(),
                case.dtype,
                case.shape,
                s.name,
                us(s.summary.e2e),
                us(s.summary.single_gpu),
                us(s.summary.single_host),
                yes_no(s.host_bound.gpu),
                yes_no(s.host_bound.e2e)
            );
        }
    }
    md.push_str(&resources_table(&file.cases));
    if !file.not_run.is_empty() {
        let _ = writeln!(
            md,
            "\n**Did not run on lanefold's side** (left out above):\n"
        );
        for why in &file.not_run {
            let _ = writeln!(md, "- {why}");
        }
    }
    let _ = writeln!(
        md,
        "\n![GB/s against row length](plot.svg)\n\nRaw samples, validation records and kernel source hashes are in `results.json`; `lanefold audit` recomputes every figure above from them."
    );
    md
}

/// Registers and local memory per thread of each CUDA kernel, when the
/// driver reported them; empty otherwise (the CPU backend).
pub fn resources_table(cases: &[crate::results::CaseResult]) -> String {
    let rows: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let k = c.kernel.as_ref()?;
            let regs = k.registers_per_thread?;
            let local = k
                .local_bytes_per_thread
                .map_or("—".into(), |b| b.to_string());
            Some(format!(
                "| {} | {} | {} | `{}` | {regs} | {local} |",
                c.op_label(),
                c.dtype,
                c.shape,
                k.name
            ))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n## Kernel resources (per thread, from the driver)\n\n| op | dtype | shape | kernel | registers | local bytes (spills, stack) |\n|---|---|---|---|---:|---:|\n{}\n",
        rows.join("\n")
    )
}

/// One point of a GB/s plot: a side of one case.
pub struct PlotPoint {
    pub op: String,
    /// The line: dtype and side, e.g. `bf16 lanefold`.
    pub series: String,
    /// Drawn solid and thick: lanefold's own lines.
    pub ours: bool,
    /// `ROWSxN`.
    pub shape: String,
    pub gbps: f64,
}

/// GB/s (gpu phase p50) against row length of a bench file.
pub fn plot(file: &ResultsFile, path: &Path) -> anyhow::Result<()> {
    let mut points = vec![];
    for case in &file.cases {
        for s in &case.sides {
            if let Some(gbps) = s.gpu_gbps_p50 {
                points.push(PlotPoint {
                    op: case.op_label(),
                    series: format!("{} {}", case.dtype, s.name),
                    ours: s.name == "lanefold",
                    shape: case.shape.clone(),
                    gbps,
                });
            }
        }
    }
    plot_points(&points, "gpu p50", path)
}

/// GB/s against row length: one panel per operator, a line per series
/// (lanefold solid, peers thin). Where several shapes share a row length,
/// the one with the most rows is drawn. `what` names the statistic.
pub fn plot_points(points: &[PlotPoint], what: &str, path: &Path) -> anyhow::Result<()> {
    type Series =
        std::collections::BTreeMap<(String, bool), std::collections::BTreeMap<u64, (u64, f64)>>;
    let mut panels: std::collections::BTreeMap<String, Series> = Default::default();
    for p in points {
        let mut dims = p.shape.split('x').map(|s| s.parse::<u64>().unwrap_or(1));
        let (rows, n) = (dims.next().unwrap_or(1), dims.next().unwrap_or(1));
        let line = panels
            .entry(p.op.clone())
            .or_default()
            .entry((p.series.clone(), p.ours))
            .or_default();
        if line.get(&n).is_none_or(|(r, _)| rows >= *r) {
            line.insert(n, (rows, p.gbps));
        }
    }
    let root = SVGBackend::new(path, (1500, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    let areas = root.split_evenly((rows, cols));
    for (area, (op, series)) in areas.iter().zip(&panels) {
        let points = series
            .values()
            .flat_map(|m| m.iter().map(|(n, (_, g))| (*n as f64, *g)));
        let (max_n, max_g) = points.fold((2.0f64, 1.0f64), |(a, b), (n, g)| (a.max(n), b.max(g)));
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{op}: GB/s ({what}) vs row length"),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d((1f64..max_n * 1.5).log_scale(), 0f64..max_g * 1.15)?;
        chart.configure_mesh().x_desc("N").y_desc("GB/s").draw()?;
        for (i, ((name, ours), pts)) in series.iter().enumerate() {
            let pts: Vec<(f64, f64)> = pts.iter().map(|(n, (_, g))| (*n as f64, *g)).collect();
            let ours = *ours;
            let style = ShapeStyle {
                color: Palette99::pick(i).to_rgba(),
                filled: ours,
                stroke_width: if ours { 3 } else { 1 },
            };
            chart
                .draw_series(LineSeries::new(pts.clone(), style))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, style)))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed results file, written before kernel resources and
    /// `not_run` were recorded.
    fn committed_file() -> ResultsFile {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/results/2026-11-29-large-auto-h200/results.json"
        );
        ResultsFile::read(Path::new(path)).unwrap()
    }

    #[test]
    fn kernel_resources_are_optional_and_rendered_when_recorded() {
        // A file written before resources were recorded reads and renders
        // without them.
        let mut file = committed_file();
        assert!(file.cases[0].kernel.is_some());
        assert_eq!(resources_table(&file.cases), "");
        let k = file.cases[0].kernel.as_mut().unwrap();
        k.registers_per_thread = Some(40);
        k.local_bytes_per_thread = Some(16);
        let name = k.name.clone();
        let table = resources_table(&file.cases);
        assert!(table.contains(&format!("`{name}` | 40 | 16 |")), "{table}");
        assert_eq!(table.matches("\n| sum |").count(), 1, "{table}");
        assert!(markdown(&file).contains("## Kernel resources"));
    }

    #[test]
    fn cases_lanefold_could_not_run_are_named_and_survive_a_round_trip() {
        let mut file = committed_file();
        // Files written before the field read as having none.
        assert!(file.not_run.is_empty());
        assert!(!markdown(&file).contains("Did not run"));
        file.not_run
            .push("cross_entropy_backward/bf16/8192x151936/W=512: out of memory".into());
        let md = markdown(&file);
        assert!(md.contains("**Did not run on lanefold's side**"), "{md}");
        assert!(md.contains("- cross_entropy_backward/bf16/8192x151936/W=512: out of memory"));
        let back: ResultsFile =
            serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(back.not_run, file.not_run);
    }
}
