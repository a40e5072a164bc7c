//! `lanefold compile-check`: every requested plan generated and compiled
//! by NVRTC alone (no driver, no GPU), with ptxas' register and spill
//! report per kernel. Catches code NVRTC refuses (inline PTX included)
//! and shows register counts where no device is at hand.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lanefold_codegen::CodegenOptions;
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Problem, Shape, Target};
use std::path::Path;

/// What every mode of `compile-check` plans: each shape, operator and
/// dtype (in that order) under one request, compiled for `arch`.
pub struct Checks<'a> {
    pub ops: &'a [Operator],
    pub shapes: &'a [Shape],
    pub dtypes: &'a [DType],
    pub columns: OperatorOptions,
    pub request: LayoutRequest,
    pub arch: &'a str,
}

impl Checks<'_> {
    fn problems(&self) -> impl Iterator<Item = (Operator, DType, Shape, Problem)> + '_ {
        self.shapes.iter().flat_map(move |&shape| {
            self.ops.iter().flat_map(move |&op| {
                self.dtypes.iter().map(move |&dtype| {
                    (
                        op,
                        dtype,
                        shape,
                        Problem::operator(op, self.columns, dtype, shape),
                    )
                })
            })
        })
    }

    /// The table under a line naming the compiler, then the summary.
    fn print(&self, table: &Table, summary: &str) {
        println!(
            "NVRTC {}, {}, target {}",
            lanefold_cuda::nvrtc_version().unwrap_or_default(),
            self.arch,
            Target::h200().name
        );
        println!("{table}");
        println!("{summary}");
    }
}

pub fn compile_check(
    checks: &Checks,
    occupancy_from_compiler: bool,
    cubin_dir: Option<&Path>,
) -> Result<()> {
    let (request, arch) = (&checks.request, checks.arch);
    if let Some(dir) = cubin_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if lanefold_cuda::nvrtc_version().is_none() {
        // The same clear error the runtime gives.
        lanefold_cuda::probe_nvrtc()?;
        bail!("NVRTC is present but did not report its version");
    }
    let target = Target::h200();
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "op",
        "dtype",
        "shape",
        "plan",
        "kernel",
        "registers (estimate)",
        "groups/SM (estimate)",
        "spill st/ld B",
        "stack B",
        "result",
    ]);
    // Plans first (in table order), then every kernel compiled at once.
    let mut planned = vec![];
    for (op, dtype, shape, problem) in checks.problems() {
        let p = match plan(&problem, &target, request) {
            Err(refusal) => Err(refusal),
            Ok(p) if occupancy_from_compiler && request.occupancy == 0 => Ok(
                lanefold_measure::bench::compiler_promise(&problem, &target, request, p, arch)?.0,
            ),
            Ok(p) => Ok(p),
        };
        planned.push((op, dtype, shape, p));
    }
    let plans: Vec<_> = planned
        .iter()
        .filter_map(|(_, _, _, p)| p.as_ref().ok().cloned())
        .collect();
    let mut results =
        lanefold_cuda::compile_offline_all(&plans, &CodegenOptions::default(), arch).into_iter();
    let (mut failures, mut compiled, mut refused) = (0, 0, 0);
    // Groups a multiprocessor by the compiler's count against the model's
    // (fewer, as many, more), and kernels that spill.
    let (mut fewer, mut same, mut more, mut spilling) = (0, 0, 0, 0);
    for (op, dtype, shape, p) in planned {
        let cells = match p {
            Err(refusal) => {
                refused += 1;
                no_kernel("—".into(), format!("refused: {refusal}"))
            }
            Ok(p) => match results.next().expect("one result a plan") {
                Ok(c) => {
                    compiled += 1;
                    if let Some(dir) = cubin_dir {
                        let path = dir.join(format!("{}.cubin", c.kernel));
                        lanefold_cpu::npy::write_atomically(&path, &c.cubin)
                            .with_context(|| format!("writing {}", path.display()))?;
                        // The source beside its binary, to read the SASS against.
                        let source = lanefold_codegen::generate(&p, &CodegenOptions::default())?;
                        let path = dir.join(format!("{}.cu", c.kernel));
                        lanefold_cpu::npy::write_atomically(&path, source.source.as_bytes())
                            .with_context(|| format!("writing {}", path.display()))?;
                    }
                    let n = |x: Option<u32>| x.map_or("?".into(), |x| x.to_string());
                    // What the register counts (and shared memory) allow,
                    // as the cost model computes it from its estimate.
                    let groups = |r| p.groups_per_multiprocessor(&target, r);
                    let by_compiler = c.ptxas.registers.map(groups);
                    match by_compiler.map(|g| g.cmp(&groups(p.registers))) {
                        Some(std::cmp::Ordering::Less) => fewer += 1,
                        Some(std::cmp::Ordering::Equal) => same += 1,
                        Some(std::cmp::Ordering::Greater) => more += 1,
                        None => {}
                    }
                    if c.ptxas.spill_store_bytes.unwrap_or(0)
                        + c.ptxas.spill_load_bytes.unwrap_or(0)
                        > 0
                    {
                        spilling += 1;
                    }
                    vec![
                        p.describe(),
                        c.kernel,
                        format!("{} ({})", n(c.ptxas.registers), p.registers),
                        format!("{} ({})", n(by_compiler), groups(p.registers)),
                        format!(
                            "{}/{}",
                            n(c.ptxas.spill_store_bytes),
                            n(c.ptxas.spill_load_bytes)
                        ),
                        n(c.ptxas.stack_bytes),
                        "ok".into(),
                    ]
                }
                Err(e) => {
                    failures += 1;
                    no_kernel(p.describe(), format!("FAILED: {e}"))
                }
            },
        };
        let mut row = vec![op.to_string(), dtype.to_string(), shape.to_string()];
        row.extend(cells);
        table.add_row(row);
    }
    checks.print(
        &table,
        &format!(
            "groups a multiprocessor by the compiler's registers against the model's estimate: \
             {fewer} fewer, {same} as many, {more} more; {spilling} kernels spill"
        ),
    );
    println!("{compiled} kernels compiled, {failures} failed, {refused} plans refused");
    if failures > 0 {
        bail!("{failures} kernels did not compile");
    }
    Ok(())
}

/// The cells of a row without a compiled kernel: its plan, its result.
fn no_kernel(plan: String, result: String) -> Vec<String> {
    let dash = || "—".to_string();
    vec![plan, dash(), dash(), dash(), dash(), dash(), result]
}

/// `compile-check --cold-path`: what the CUDA runtime does with each norm
/// plan's cold path ([`lanefold_cuda::resolve_cold_path`]): the plain
/// kernel's registers and groups/SM, and whether the cold kernel kept them
/// under the promise or the plain plan runs instead. Other operators and
/// plans without a cold path are left out.
pub fn cold_path_check(checks: &Checks) -> Result<()> {
    use lanefold_cuda::ColdPathDecision;
    lanefold_cuda::probe_nvrtc()?;
    let target = Target::h200();
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["op", "dtype", "shape", "resolved plan", "decision"]);
    let (mut kept, mut lower, mut plain, mut own, mut refused) = (0, 0, 0, 0, 0);
    for (op, dtype, shape, problem) in checks.problems().filter(|(op, ..)| op.has_cold_path()) {
        let p = match plan(&problem, &target, &checks.request) {
            Ok(p) if p.cold_path() => p,
            Ok(_) => continue,
            Err(e) => {
                refused += 1;
                table.add_row([
                    op.to_string(),
                    dtype.to_string(),
                    shape.to_string(),
                    "—".into(),
                    format!("refused: {e}"),
                ]);
                continue;
            }
        };
        let (r, decision) =
            lanefold_cuda::resolve_cold_path(&p, &CodegenOptions::default(), checks.arch, &target)?;
        match decision {
            ColdPathDecision::Kept {
                stepped_from: Some(_),
                ..
            } => lower += 1,
            ColdPathDecision::Kept { .. } => kept += 1,
            ColdPathDecision::Plain { .. } => plain += 1,
            _ => own += 1,
        }
        table.add_row([
            op.to_string(),
            dtype.to_string(),
            shape.to_string(),
            r.describe(),
            decision.to_string(),
        ]);
    }
    checks.print(
        &table,
        &format!(
            "cold path: {kept} kept at the plain kernel's groups/SM, {lower} kept one register \
             step lower, {plain} plain, {own} under their own promise, {refused} refused"
        ),
    );
    Ok(())
}

/// `compile-check --toggle TOKEN`: each plan compiled with and without the
/// schedule token `TOKEN` (the plan's own schedule, the token added or
/// removed, at any value, planned again), and the groups a multiprocessor the compiler's
/// register counts allow each way. The evidence for a rule over ranges
/// that adds a register-shaping token: where it raises groups, keeps
/// them, lowers them. Plans where legality drops the token are counted
/// apart.
pub fn toggle_check(checks: &Checks, token: &str) -> Result<()> {
    token
        .parse::<LayoutRequest>()
        .with_context(|| format!("--toggle {token}: not a schedule token"))?;
    lanefold_cuda::probe_nvrtc()?;
    let target = Target::h200();
    // (op, dtype, shape, plan with the token, plan without) or why not.
    let mut pairs = vec![];
    for (op, dtype, shape, problem) in checks.problems() {
        let pair = plan(&problem, &target, &checks.request)
            .map_err(|e| format!("refused: {e}"))
            .and_then(|p| {
                // The schedule that plans back to `p` (a
                // description also shows derived tokens).
                let text = p.schedule().to_string();
                let mut words: Vec<&str> = text.split_whitespace().collect();
                // A token with a value is present at any value (a plan
                // derives `early-columns=7` from a request of 8).
                let name = |w: &str| w.split_once('=').map_or(w, |(name, _)| name).to_string();
                let had = words.iter().any(|w| name(w) == name(token));
                if had {
                    words.retain(|w| name(w) != name(token));
                } else {
                    words.push(token);
                }
                let other = words
                    .join(" ")
                    .parse::<LayoutRequest>()
                    .map_err(|e| format!("toggled schedule: {e}"))
                    .and_then(|r| {
                        plan(&problem, &target, &r)
                            .map_err(|e| format!("toggled plan refused: {e}"))
                    })?;
                if other.describe() == p.describe() {
                    return Err(NOT_APPLICABLE.into());
                }
                Ok(if had { (p, other) } else { (other, p) })
            });
        pairs.push((op, dtype, shape, pair));
    }
    let plans: Vec<_> = pairs
        .iter()
        .filter_map(|(.., pair)| pair.as_ref().ok())
        .flat_map(|(with, without)| [with.clone(), without.clone()])
        .collect();
    let mut results =
        lanefold_cuda::compile_offline_all(&plans, &CodegenOptions::default(), checks.arch)
            .into_iter();
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "op".to_string(),
        "dtype".into(),
        "shape".into(),
        format!("plan with {token}"),
        "registers with / without".into(),
        "groups/SM with / without".into(),
        "spill B with / without".into(),
    ]);
    let (mut raised, mut kept, mut lowered, mut failed) = (0, 0, 0, 0);
    let (mut inapplicable, mut refused) = (0, 0);
    for (op, dtype, shape, pair) in pairs {
        let mut row = vec![op.to_string(), dtype.to_string(), shape.to_string()];
        match pair {
            Err(why) => {
                if why == NOT_APPLICABLE {
                    inapplicable += 1;
                } else {
                    refused += 1;
                }
                row.extend([why, "—".into(), "—".into(), "—".into()]);
            }
            Ok((with, without)) => {
                let a = results.next().expect("one result a plan");
                let b = results.next().expect("one result a plan");
                let (Ok(a), Ok(b)) = (a, b) else {
                    failed += 1;
                    row.extend([with.describe(), "FAILED".into(), "—".into(), "—".into()]);
                    table.add_row(row);
                    continue;
                };
                let groups = |p: &lanefold_plan::Plan, c: &lanefold_cuda::OfflineCompile| {
                    c.ptxas
                        .registers
                        .map(|r| p.groups_per_multiprocessor(&target, r))
                };
                let (ga, gb) = (groups(&with, &a), groups(&without, &b));
                match ga.zip(gb).map(|(x, y)| x.cmp(&y)) {
                    Some(std::cmp::Ordering::Greater) => raised += 1,
                    Some(std::cmp::Ordering::Equal) => kept += 1,
                    Some(std::cmp::Ordering::Less) => lowered += 1,
                    None => failed += 1,
                }
                let n = |x: Option<u32>| x.map_or("?".into(), |x| x.to_string());
                let spill = |c: &lanefold_cuda::OfflineCompile| {
                    c.ptxas.spill_store_bytes.unwrap_or(0) + c.ptxas.spill_load_bytes.unwrap_or(0)
                };
                row.extend([
                    with.describe(),
                    format!("{} / {}", n(a.ptxas.registers), n(b.ptxas.registers)),
                    format!("{} / {}", n(ga), n(gb)),
                    format!("{} / {}", spill(&a), spill(&b)),
                ]);
            }
        }
        table.add_row(row);
    }
    checks.print(
        &table,
        &format!(
            "with {token} against without, groups a multiprocessor by the compiler's registers: \
             raised on {raised}, kept on {kept}, lowered on {lowered}; {inapplicable} plans \
             where legality drops it, {refused} refused"
        ),
    );
    if failed > 0 {
        bail!("{failed} plans did not compile or gave no register count");
    }
    Ok(())
}

const NOT_APPLICABLE: &str = "not applicable (legality drops it)";
