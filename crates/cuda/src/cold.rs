//! The norms' cold path at the plain kernel's occupancy.
//!
//! The cold path (`Instr::Rescaled`) moves ptxas' register count, and with
//! it groups per multiprocessor, on about one norm plan in four. Only the
//! compiler knows by how much, so the runtime decides: compile the plain
//! kernel (no cold path), read its registers, and compile the cold one
//! promising the plain kernel's groups per multiprocessor
//! (`__launch_bounds__`). The cold kernel is kept only if it reaches them
//! with no local memory. Past the L2 it may instead promise one register
//! step fewer groups ([`step_down`]); otherwise the plain plan runs.

use crate::{compile_offline, CudaError, DiskCache, OfflineCompile};
use lanefold_codegen::{generate, nvrtc_options, CodegenOptions};
use lanefold_plan::{past_l2, plan, register_budget, Plan, Target};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// What [`resolve_cold_path`] did with a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColdPathDecision {
    /// The plan has no cold path (not a norm, or `no-cold-path`): as it is.
    Absent,
    /// The plan makes its own occupancy promise: as it is.
    OwnPromise,
    /// The cold path kept, promising `groups`: the plain kernel's, or
    /// (`stepped_from: Some(plain groups)`) one register step fewer.
    Kept {
        groups: u32,
        plain_registers: u32,
        registers: u32,
        stepped_from: Option<u32>,
    },
    /// The plain plan (`no-cold-path`) instead, and why.
    Plain {
        plain_registers: u32,
        groups: u32,
        reason: String,
    },
}

impl ColdPathDecision {
    /// Did the plan fall back to the plain kernel?
    pub fn fell_back(&self) -> bool {
        matches!(self, ColdPathDecision::Plain { .. })
    }
}

impl std::fmt::Display for ColdPathDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ColdPathDecision::Absent => f.write_str("no cold path"),
            ColdPathDecision::OwnPromise => f.write_str("cold path under the plan's own promise"),
            ColdPathDecision::Kept {
                groups,
                plain_registers,
                registers,
                stepped_from: None,
            } => write!(
                f,
                "cold path kept: {registers} registers promising {groups} groups/SM \
                 (plain: {plain_registers})"
            ),
            ColdPathDecision::Kept {
                groups,
                plain_registers,
                registers,
                stepped_from: Some(from),
            } => write!(
                f,
                "cold path kept at {groups} groups/SM, one register step below the plain \
                 kernel's {from} (past the L2: measured 0.998-1.005x): {registers} registers \
                 (plain: {plain_registers})"
            ),
            ColdPathDecision::Plain { reason, .. } => write!(f, "plain kernel: {reason}"),
        }
    }
}

/// A resolved plan and the binary compiled for it on the way, so a
/// backend need not compile it again.
pub(crate) struct Resolution {
    pub plan: Plan,
    pub decision: ColdPathDecision,
    /// (compile key, cubin) of the resolved plan's kernel, where it was
    /// compiled here (not when the decision was remembered).
    pub binary: Option<(String, Vec<u8>)>,
}

/// Decisions already made in this process, by the cold kernel's compile
/// key: a second use compiles nothing.
fn decisions() -> &'static Mutex<HashMap<String, ColdPathDecision>> {
    static D: OnceLock<Mutex<HashMap<String, ColdPathDecision>>> = OnceLock::new();
    D.get_or_init(Default::default)
}

/// `plan` as the CUDA runtime runs it for `arch` on `target`: a norm's
/// cold path promised the plain kernel's groups per multiprocessor
/// (`occupancy=B` in its schedule) where that compiles with no local
/// memory, past the L2 one register step fewer groups where that
/// does, else the plain plan (`no-cold-path`). Plans without a cold path
/// or with a promise of their own come back as they are. Compiles with
/// NVRTC alone (no device); remembered for the process.
pub fn resolve_cold_path(
    plan: &Plan,
    options: &CodegenOptions,
    arch: &str,
    target: &Target,
) -> Result<(Plan, ColdPathDecision), CudaError> {
    let r = resolve(plan, options, arch, target, None)?;
    Ok((r.plan, r.decision))
}

pub(crate) fn resolve(
    p: &Plan,
    options: &CodegenOptions,
    arch: &str,
    target: &Target,
    disk: Option<&DiskCache>,
) -> Result<Resolution, CudaError> {
    let as_is = |decision| {
        Ok(Resolution {
            plan: p.clone(),
            decision,
            binary: None,
        })
    };
    if !p.cold_path() {
        return as_is(ColdPathDecision::Absent);
    }
    if p.min_groups_per_multiprocessor.is_some() {
        return as_is(ColdPathDecision::OwnPromise);
    }
    let key = compile_key_of(p, options, arch)?;
    let remembered = decisions()
        .lock()
        .expect("decision lock")
        .get(&key)
        .cloned();
    let known = remembered.or_else(|| {
        let d = decode_decision(&disk?.load(&decision_key(&key))?)?;
        decisions()
            .lock()
            .expect("decision lock")
            .insert(key.clone(), d.clone());
        Some(d)
    });
    if let Some(decision) = known {
        let plan = resolved_plan(p, target, &decision)?;
        return Ok(Resolution {
            plan,
            decision,
            binary: None,
        });
    }
    let plain = replan(p, target, |r| r.no_cold_path = true)?;
    let plain_compile = compile_offline(&plain, options, arch)?;
    let no_count = |c: &OfflineCompile| ColdPathDecision::Plain {
        plain_registers: 0,
        groups: 0,
        reason: format!(
            "ptxas reported no register count for {} (log: '{}'), so the plain kernel's \
             occupancy is unknown",
            c.kernel,
            c.log.trim()
        ),
    };
    // The plain kernel, not remembered: a later compile may report the count.
    let plain_for = |c: &OfflineCompile, plain: Plan, cubin| -> Result<Resolution, CudaError> {
        Ok(Resolution {
            decision: no_count(c),
            binary: Some((compile_key_of(&plain, options, arch)?, cubin)),
            plan: plain,
        })
    };
    let Some(plain_registers) = plain_compile.ptxas.registers else {
        return plain_for(&plain_compile, plain, plain_compile.cubin.clone());
    };
    let groups = resident_need(
        &plain,
        plain.groups_per_multiprocessor(target, plain_registers),
        target,
    );
    let promise = |g: u32| -> Result<(Plan, OfflineCompile), CudaError> {
        let promised = replan(p, target, |r| r.occupancy = g)?;
        let cold = compile_offline(&promised, options, arch)?;
        Ok((promised, cold))
    };
    // Why the cold kernel does not keep `g` groups, or None where it does.
    let short_of = |promised: &Plan, cold: &OfflineCompile, registers: u32, g: u32| {
        let local = kernel_local_bytes(cold);
        let reached = promised.groups_per_multiprocessor(target, registers);
        if local > 0 {
            Some(format!(
                "spills {local} bytes in the kernel to keep {g} groups/SM"
            ))
        } else if reached < g {
            Some(format!(
                "takes {registers} registers, {reached} groups/SM against the {g} it must keep"
            ))
        } else {
            None
        }
    };
    let (promised, cold) = promise(groups)?;
    let Some(registers) = cold.ptxas.registers else {
        return plain_for(&cold, plain, plain_compile.cubin);
    };
    let (decision, plan, compiled) = match short_of(&promised, &cold, registers, groups) {
        None => {
            let decision = ColdPathDecision::Kept {
                groups,
                plain_registers,
                registers,
                stepped_from: None,
            };
            (decision, promised, cold)
        }
        Some(why) => {
            let mut reason =
                format!("the cold path {why} (the plain kernel: {plain_registers} registers)");
            let mut lower_kept = None;
            if let Some(lower) = step_down(&promised, target, groups) {
                let (promised, cold) = promise(lower)?;
                let Some(registers) = cold.ptxas.registers else {
                    return plain_for(&cold, plain, plain_compile.cubin);
                };
                match short_of(&promised, &cold, registers, lower) {
                    None => {
                        let decision = ColdPathDecision::Kept {
                            groups: lower,
                            plain_registers,
                            registers,
                            stepped_from: Some(groups),
                        };
                        lower_kept = Some((decision, promised, cold));
                    }
                    Some(why) => reason += &format!("; one register step lower it {why}"),
                }
            }
            lower_kept.unwrap_or_else(|| {
                let decision = ColdPathDecision::Plain {
                    plain_registers,
                    groups,
                    reason,
                };
                (decision, plain, plain_compile)
            })
        }
    };
    if let Some(disk) = disk {
        if let Err(e) = disk.store(&decision_key(&key), encode_decision(&decision).as_bytes()) {
            eprintln!(
                "lanefold: could not write the kernel cache under {}: {e}",
                disk.dir().display()
            );
        }
    }
    decisions()
        .lock()
        .expect("decision lock")
        .insert(key, decision.clone());
    let binary_key = compile_key_of(&plan, options, arch)?;
    Ok(Resolution {
        plan,
        decision,
        binary: Some((binary_key, compiled.cubin)),
    })
}

/// Groups per multiprocessor the cold kernel must keep: the plain
/// kernel's `groups`, or fewer where that many already hold every group of
/// the problem at once (a promise beyond them buys nothing, and a smaller
/// one leaves the cold path room not to spill). Clusters keep the plain
/// count: where they land depends on the GPU's partitions.
fn resident_need(plain: &Plan, groups: u32, target: &Target) -> u32 {
    if plain.groups_per_row > 1 {
        return groups;
    }
    let all_at_once = plain.groups.div_ceil(target.multiprocessors.max(1) as u64);
    groups.min(all_at_once.max(1) as u32)
}

/// The smaller promise to try where the cold kernel cannot keep `groups`:
/// the most groups whose register budget per thread is higher (one step;
/// at 256 threads 7 groups get the 32 registers 8 do), at least 2. Only past
/// the L2, off clusters and from 3 groups: there one step cost 0.998-1.005x
/// the plain kernel, within the L2 1.16-1.22x
/// (2026-12-03-cold-path-trade-h200).
fn step_down(p: &Plan, target: &Target, groups: u32) -> Option<u32> {
    if !past_l2(&p.problem) || p.groups_per_row > 1 || groups < 3 {
        return None;
    }
    let budget = |g: u32| {
        register_budget(target, p.threads_per_group, g).min(target.max_registers_per_thread)
    };
    (2..groups).rev().find(|&g| budget(g) > budget(groups))
}

/// The kernel cache's entry for the decision about the cold kernel whose
/// compile key is `key`: later processes decide alike without compiling.
/// NVRTC 13.0 on the H200 was seen to give an empty ptxas log for a kernel
/// an earlier process had compiled, so a process cannot always decide anew.
/// The rule's version is in the key: a decision cached by an older rule is
/// not this one's (a plain fallback cached before the step down past the
/// L2 existed kept a later binary on the plain kernel).
fn decision_key(key: &str) -> String {
    format!("{key}-cold-path-v{DECISION_RULE}")
}

/// Raised whenever [`resolve`] would decide a kernel differently.
const DECISION_RULE: u32 = 2;

/// One line: `kept GROUPS PLAIN_REGISTERS REGISTERS`,
/// `kept-lower GROUPS PLAIN_REGISTERS REGISTERS PLAIN_GROUPS` (a tag older
/// readers refuse, so they decide anew) or
/// `plain PLAIN_REGISTERS GROUPS REASON`.
fn encode_decision(d: &ColdPathDecision) -> String {
    match d {
        ColdPathDecision::Kept {
            groups,
            plain_registers,
            registers,
            stepped_from: None,
        } => format!("kept {groups} {plain_registers} {registers}"),
        ColdPathDecision::Kept {
            groups,
            plain_registers,
            registers,
            stepped_from: Some(from),
        } => format!("kept-lower {groups} {plain_registers} {registers} {from}"),
        ColdPathDecision::Plain {
            plain_registers,
            groups,
            reason,
        } => format!("plain {plain_registers} {groups} {reason}"),
        ColdPathDecision::Absent => "absent".into(),
        ColdPathDecision::OwnPromise => "own-promise".into(),
    }
}

/// [`encode_decision`]'s line read back (None: not a kept or plain line).
fn decode_decision(bytes: &[u8]) -> Option<ColdPathDecision> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut fields = text.splitn(4, ' ');
    let tag = fields.next()?;
    let a: u32 = fields.next()?.parse().ok()?;
    let b: u32 = fields.next()?.parse().ok()?;
    let rest = fields.next();
    match tag {
        "kept" => Some(ColdPathDecision::Kept {
            groups: a,
            plain_registers: b,
            registers: rest?.parse().ok()?,
            stepped_from: None,
        }),
        "kept-lower" => {
            let (registers, from) = rest?.split_once(' ')?;
            Some(ColdPathDecision::Kept {
                groups: a,
                plain_registers: b,
                registers: registers.parse().ok()?,
                stepped_from: Some(from.parse().ok()?),
            })
        }
        "plain" => Some(ColdPathDecision::Plain {
            plain_registers: a,
            groups: b,
            reason: rest?.to_string(),
        }),
        _ => None,
    }
}

/// The plan a remembered decision gives.
fn resolved_plan(
    p: &Plan,
    target: &Target,
    decision: &ColdPathDecision,
) -> Result<Plan, CudaError> {
    match decision {
        ColdPathDecision::Kept { groups, .. } => replan(p, target, |r| r.occupancy = *groups),
        ColdPathDecision::Plain { .. } => replan(p, target, |r| r.no_cold_path = true),
        _ => Ok(p.clone()),
    }
}

/// `p`'s own schedule, edited, planned again: the same layout or an error.
fn replan(
    p: &Plan,
    target: &Target,
    edit: impl Fn(&mut lanefold_plan::LayoutRequest),
) -> Result<Plan, CudaError> {
    let mut request = p.schedule();
    edit(&mut request);
    let q = plan(&p.problem, target, &request).map_err(|e| {
        CudaError::Data(format!(
            "the cold path's plan '{request}' was refused: {e} (a mapper bug: it must plan \
             like '{}')",
            p.describe()
        ))
    })?;
    if q.layout != p.layout || q.residency != p.residency {
        return Err(CudaError::Data(format!(
            "the cold path's plan '{request}' planned to {} (a mapper bug: it must keep {})",
            q.describe(),
            p.describe()
        )));
    }
    Ok(q)
}

/// Local memory of the kernel itself (its spill stores and stack frame),
/// where the hot path would pay for it; the non-inlined cold functions'
/// own frames are left out: they run only for the rare rows that need
/// them. A log without the kernel's line counts everything it reports.
fn kernel_local_bytes(c: &OfflineCompile) -> u32 {
    let header = format!("Function properties for {}", c.kernel);
    let mut lines = c.log.lines();
    while let Some(line) = lines.next() {
        if line.trim_end().ends_with(&header) {
            let r = crate::PtxasReport::parse(lines.next().unwrap_or_default());
            return r.spill_store_bytes.unwrap_or(0) + r.stack_bytes.unwrap_or(0);
        }
    }
    c.ptxas.spill_store_bytes.unwrap_or(0) + c.ptxas.stack_bytes.unwrap_or(0)
}

fn compile_key_of(p: &Plan, options: &CodegenOptions, arch: &str) -> Result<String, CudaError> {
    let kernel = generate(p, options)?;
    let opts = nvrtc_options(options, arch);
    Ok(crate::compile_key(
        &kernel.source,
        &opts,
        arch,
        crate::nvrtc_id(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanefold_ir::{DType, Operator, OperatorOptions};
    use lanefold_plan::{LayoutRequest, Problem, ResidencyRequest};

    /// A decision read back from its cache line is the decision; other
    /// lines (a torn or foreign entry) are none.
    #[test]
    fn a_cold_path_decision_round_trips_through_its_cache_line() {
        for d in [
            ColdPathDecision::Kept {
                groups: 4,
                plain_registers: 32,
                registers: 28,
                stepped_from: None,
            },
            ColdPathDecision::Kept {
                groups: 2,
                plain_registers: 40,
                registers: 64,
                stepped_from: Some(3),
            },
            ColdPathDecision::Plain {
                plain_registers: 35,
                groups: 6,
                reason: "the cold path spills 16 bytes in the kernel".into(),
            },
        ] {
            assert_eq!(decode_decision(encode_decision(&d).as_bytes()), Some(d));
        }
        for bad in [
            "",
            "kept 4 32",
            "kept x 32 28",
            "kept 2 40 64 3",
            "kept-lower 2 40 64",
            "kept-lower 2 40 64 x",
            "absent",
            "plain 35",
        ] {
            assert_eq!(decode_decision(bad.as_bytes()), None, "{bad}");
        }
    }

    /// Resolves the automatic layernorm f32 plan of `shape` with a plain
    /// decision stored in an empty kernel cache under `entry(compile key)`
    /// and no decision in memory: the stored decision and the result.
    fn resolve_over_a_stored_plain_decision(
        shape: &str,
        entry: fn(&str) -> String,
    ) -> (ColdPathDecision, Result<Resolution, CudaError>) {
        let target = Target::h200();
        let options = CodegenOptions::default();
        let problem = Problem::operator(
            Operator::Layernorm,
            OperatorOptions::default(),
            DType::F32,
            shape.parse().unwrap(),
        );
        let p = plan(&problem, &target, &LayoutRequest::default()).unwrap();
        assert!(p.cold_path() && p.min_groups_per_multiprocessor.is_none());
        let dir =
            std::env::temp_dir().join(format!("lanefold-cold-{shape}-{}", std::process::id()));
        let disk = DiskCache::new(&dir);
        let key = compile_key_of(&p, &options, "sm_90").unwrap();
        let stored = ColdPathDecision::Plain {
            plain_registers: 40,
            groups: 5,
            reason: "stored by an earlier process".into(),
        };
        disk.store(&entry(&key), encode_decision(&stored).as_bytes())
            .unwrap();
        decisions().lock().unwrap().remove(&key);
        let r = resolve(&p, &options, "sm_90", &target, Some(&disk));
        std::fs::remove_dir_all(&dir).unwrap();
        (stored, r)
    }

    /// On the H200 a second process got an empty ptxas log for the plain
    /// kernel a first process had compiled, and every norm call failed
    /// ("ptxas reported no register count"). A decision in the kernel
    /// cache is now taken as it is, with nothing compiled: a stored plain
    /// decision (which no compile here would make) comes back.
    #[test]
    fn regression_a_later_process_takes_the_cold_path_decision_from_the_kernel_cache() {
        let (stored, r) = resolve_over_a_stored_plain_decision("24x4096", decision_key);
        let r = r.unwrap();
        assert_eq!(r.decision, stored);
        assert!(r.binary.is_none(), "nothing compiled");
        assert!(!r.plan.cold_path() && r.plan.describe().contains("no-cold-path"));
    }

    /// A plain fallback that an older rule cached (under its key) is not
    /// taken: the kernel is decided anew (here it compiles, or without
    /// NVRTC it fails), never run plain on the old word.
    #[test]
    fn regression_a_decision_cached_by_an_older_rule_is_decided_anew() {
        let (stored, r) =
            resolve_over_a_stored_plain_decision("8192x8192", |key| format!("{key}-cold-path"));
        assert!(
            !matches!(&r, Ok(r) if r.decision == stored),
            "{:?}",
            r.map(|r| r.decision)
        );
    }

    /// The promise is the plain kernel's groups per SM, or fewer where
    /// those already hold all of a problem's groups at once; clusters keep
    /// the plain count.
    #[test]
    fn the_cold_path_promises_only_the_groups_a_problem_can_use() {
        let target = Target::h200();
        let norm = |shape: &str, request: LayoutRequest| {
            let problem = Problem::operator(
                Operator::Rmsnorm,
                OperatorOptions::default(),
                DType::Bf16,
                shape.parse().unwrap(),
            );
            plan(&problem, &target, &request).unwrap()
        };
        let w512 = || LayoutRequest {
            workers: 512,
            pack: 8,
            ..Default::default()
        };
        // 64 groups on 132 SMs: one each at most.
        assert_eq!(resident_need(&norm("64x4096", w512()), 4, &target), 1);
        // 300 groups: three per SM hold them all.
        assert_eq!(resident_need(&norm("300x4096", w512()), 4, &target), 3);
        // Many waves: the plain kernel's count.
        assert_eq!(resident_need(&norm("32768x4096", w512()), 4, &target), 4);
        let cluster = norm(
            "64x131072",
            LayoutRequest {
                workers: 4096,
                pack: 8,
                ..Default::default()
            },
        );
        assert!(cluster.groups_per_row > 1);
        assert_eq!(resident_need(&cluster, 2, &target), 2);
    }

    /// One register step down: the most groups below the plain kernel's
    /// whose per-thread budget is higher, at least 2; none within the L2,
    /// for clusters, from fewer than 3 groups, or where both budgets are
    /// already past the 255 registers a thread may have.
    #[test]
    fn the_cold_path_steps_down_one_register_budget_only_past_the_l2() {
        let target = Target::h200();
        let norm = |shape: &str, workers: u32| {
            let problem = Problem::operator(
                Operator::Rmsnorm,
                OperatorOptions::default(),
                DType::Bf16,
                shape.parse().unwrap(),
            );
            let request = LayoutRequest {
                workers,
                pack: 8,
                rows_per_group: 1,
                ..Default::default()
            };
            plan(&problem, &target, &request).unwrap()
        };
        let w256 = norm("65536x2048", 256);
        assert!(past_l2(&w256.problem));
        assert_eq!((w256.threads_per_group, w256.groups_per_row), (256, 1));
        // 8 and 7 groups both get 32 registers, 6 get 40.
        assert_eq!(step_down(&w256, &target, 8), Some(6));
        assert_eq!(step_down(&w256, &target, 7), Some(6));
        assert_eq!(step_down(&w256, &target, 6), Some(5));
        assert_eq!(step_down(&w256, &target, 3), Some(2));
        assert_eq!(step_down(&w256, &target, 2), None);
        assert_eq!(step_down(&w256, &target, 1), None);
        let w512 = norm("65536x4096", 512);
        assert_eq!(w512.threads_per_group, 512);
        assert_eq!(step_down(&w512, &target, 3), Some(2));
        let w64 = norm("262144x512", 64);
        assert!(past_l2(&w64.problem));
        assert_eq!(w64.threads_per_group, 64);
        // 341 and 512 registers a thread: both capped at 255.
        assert_eq!(step_down(&w64, &target, 3), None);
        assert_eq!(step_down(&w64, &target, 5), Some(4));
        // 16 MB, in the L2: one group fewer cost 1.16-1.22x there.
        let in_l2 = norm("4096x2048", 256);
        assert!(!past_l2(&in_l2.problem));
        assert_eq!(step_down(&in_l2, &target, 8), None);
        let cluster = norm("1024x131072", 4096);
        assert!(past_l2(&cluster.problem) && cluster.groups_per_row > 1);
        assert_eq!(step_down(&cluster, &target, 3), None);
    }

    /// Needs NVRTC: CI runs it after `scripts/fetch-nvrtc.sh` (`--ignored`).
    /// Over norm plans in f32 and bf16, in registers and streamed, short
    /// and long rows, a resolved cold kernel keeps the plain kernel's
    /// groups per multiprocessor (or those the problem can use,
    /// [`resident_need`]) with no local memory, and its schedule
    /// says so (`occupancy=B`); a plain fallback says `no-cold-path`.
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_a_resolved_cold_path_keeps_the_plain_kernels_groups_without_spilling() {
        let target = Target::h200();
        let options = CodegenOptions::default();
        let mut kept = 0;
        for op in [
            Operator::Rmsnorm,
            Operator::Layernorm,
            Operator::ResidualLayernorm,
        ] {
            for dtype in [DType::F32, DType::Bf16] {
                for (shape, residency) in [
                    ("64x4096", ResidencyRequest::Auto),
                    ("4096x8192", ResidencyRequest::Stream),
                    ("1024x4096", ResidencyRequest::Registers),
                    ("4x131072", ResidencyRequest::Auto),
                ] {
                    let problem = Problem::operator(
                        op,
                        OperatorOptions::default(),
                        dtype,
                        shape.parse().unwrap(),
                    );
                    let request = LayoutRequest {
                        residency,
                        ..Default::default()
                    };
                    let p = plan(&problem, &target, &request).unwrap();
                    assert!(p.cold_path(), "{op} {dtype} {shape}");
                    let what = format!("{op} {dtype} {shape} {}", p.describe());
                    if p.min_groups_per_multiprocessor.is_some() {
                        continue;
                    }
                    let (r, decision) = resolve_cold_path(&p, &options, "sm_90", &target)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(r.layout, p.layout, "{what}");
                    let plain = replan(&p, &target, |r| r.no_cold_path = true).unwrap();
                    let c = compile_offline(&plain, &options, "sm_90").unwrap();
                    let plain_registers = c.ptxas.registers.unwrap();
                    let groups = resident_need(
                        &plain,
                        plain.groups_per_multiprocessor(&target, plain_registers),
                        &target,
                    );
                    let c = compile_offline(&r, &options, "sm_90").unwrap();
                    let local =
                        c.ptxas.spill_store_bytes.unwrap_or(0) + c.ptxas.stack_bytes.unwrap_or(0);
                    let reached = r.groups_per_multiprocessor(&target, c.ptxas.registers.unwrap());
                    eprintln!("{what}: {decision}");
                    match decision {
                        ColdPathDecision::Kept {
                            groups: g,
                            stepped_from,
                            ..
                        } => {
                            kept += 1;
                            assert_eq!(stepped_from.unwrap_or(g), groups, "{what}");
                            let groups = match stepped_from {
                                Some(_) => step_down(&plain, &target, groups).unwrap(),
                                None => groups,
                            };
                            assert_eq!(g, groups, "{what}");
                            assert!(r.cold_path(), "{what}");
                            assert_eq!(r.min_groups_per_multiprocessor, Some(groups), "{what}");
                            assert!(
                                r.describe()
                                    .split_whitespace()
                                    .any(|t| t == format!("occupancy={groups}")),
                                "{what}: {}",
                                r.describe()
                            );
                            assert_eq!((local, reached >= groups), (0, true), "{what}");
                        }
                        ColdPathDecision::Plain { .. } => {
                            assert!(!r.cold_path(), "{what}");
                            assert!(r.describe().contains("no-cold-path"), "{what}");
                            assert_eq!(reached, groups, "{what}");
                        }
                        d => panic!("{what}: {d:?}"),
                    }
                    // Remembered: the same answer again.
                    let (again, _) = resolve_cold_path(&p, &options, "sm_90", &target).unwrap();
                    assert_eq!(again.describe(), r.describe(), "{what}");
                }
            }
        }
        assert!(kept >= 18, "only {kept} kept");
    }

    /// Needs NVRTC. Layernorm f32 8192x8192 (268 MB, past the L2): its
    /// cold kernel spills at the plain kernel's 3 groups/SM, so it promises
    /// 2 and is kept there with no local memory, the same when remembered
    /// in the process or read from the kernel cache. Rmsnorm f32 4096x2048
    /// (33 MB, in the L2) still runs the plain kernel: one group fewer cost
    /// 1.16-1.22x within the L2.
    #[test]
    #[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
    fn nvrtc_past_the_l2_a_spilling_cold_path_is_kept_one_register_step_lower() {
        let target = Target::h200();
        let options = CodegenOptions::default();
        let norm = |op, shape: &str| {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                DType::F32,
                shape.parse().unwrap(),
            );
            let p = plan(&problem, &target, &LayoutRequest::default()).unwrap();
            assert!(p.cold_path() && p.min_groups_per_multiprocessor.is_none());
            let key = compile_key_of(&p, &options, "sm_90").unwrap();
            decisions().lock().unwrap().remove(&key);
            (p, key)
        };
        let (p, key) = norm(Operator::Layernorm, "8192x8192");
        assert!(past_l2(&p.problem));
        let dir = std::env::temp_dir().join(format!("lanefold-cold-lower-{}", std::process::id()));
        let disk = DiskCache::new(&dir);
        let r = resolve(&p, &options, "sm_90", &target, Some(&disk)).unwrap();
        let ColdPathDecision::Kept {
            groups: 2,
            stepped_from: Some(3),
            ..
        } = r.decision
        else {
            panic!("{}: {}", p.describe(), r.decision);
        };
        assert!(r.decision.to_string().contains("one register step below"));
        assert!(r.binary.is_some());
        assert!(r.plan.cold_path() && r.plan.min_groups_per_multiprocessor == Some(2));
        assert!(
            r.plan.describe().ends_with("occupancy=2"),
            "{}",
            r.plan.describe()
        );
        let c = compile_offline(&r.plan, &options, "sm_90").unwrap();
        assert_eq!(kernel_local_bytes(&c), 0, "{}", c.log);
        assert!(
            r.plan
                .groups_per_multiprocessor(&target, c.ptxas.registers.unwrap())
                >= 2
        );
        let in_process = resolve(&p, &options, "sm_90", &target, None).unwrap();
        decisions().lock().unwrap().remove(&key);
        let from_disk = resolve(&p, &options, "sm_90", &target, Some(&disk)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for again in [in_process, from_disk] {
            assert!(again.binary.is_none(), "nothing compiled");
            assert_eq!(again.decision, r.decision);
            assert_eq!(again.plan.describe(), r.plan.describe());
        }

        let (p, _) = norm(Operator::Rmsnorm, "4096x2048");
        assert!(!past_l2(&p.problem));
        let (q, decision) = resolve_cold_path(&p, &options, "sm_90", &target).unwrap();
        let ColdPathDecision::Plain { groups, .. } = decision else {
            panic!("{}: {decision}", p.describe());
        };
        assert!(groups >= 3, "{decision}");
        assert!(!q.cold_path() && q.describe().contains("no-cold-path"));
    }
}
