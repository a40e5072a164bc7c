//! Every kind of kernel the generator writes is valid C++ under a small
//! CUDA shim, checked with the host C++ compiler (`c++ -fsyntax-only`).
//! CI has no GPU and no NVRTC: this catches a codegen change that would
//! only fail to compile on the device. Inline PTX is replaced by a no-op
//! (its text is checked by NVRTC on the GPU, not here).

#[allow(dead_code)] // only the CUDA shim is used here
mod host;

use lanefold_codegen::{generate, scale_unless_one_kernel, CodegenOptions};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{enumerate, LayoutRequest, MapperPolicy, Problem, ResidencyRequest, Target};
use std::path::PathBuf;
use std::process::Command;

/// The host runtime's CUDA shim, inline PTX made a no-op.
const SHIM: &str = "#define LF_ASM(...) ((void)0)\n";

fn cxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    Command::new(&cxx)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cxx)
}

/// `c++ -fsyntax-only` over `files`, in one compiler process.
fn syntax_check(cxx: &str, files: &[PathBuf]) -> std::process::Output {
    Command::new(cxx)
        .args(["-fsyntax-only", "-std=c++17", "-w"])
        .args(files)
        .output()
        .unwrap()
}

/// The kernel source with inline PTX made a no-op, behind the shim.
fn shimmed(source: &str) -> String {
    let body = source
        .replace("asm volatile(", "LF_ASM(")
        .replace("asm(", "LF_ASM(")
        .replace("extern __shared__", "extern");
    format!("{}{SHIM}\n{body}", host::HEADER)
}

/// Sources covering every emitter path: the six operators in three storage
/// dtypes; scalar, 4-, 8- and 16-byte accesses; partial packs; unrolled
/// stripes; packed rows; streamed tiles; clusters; gathered targets;
/// evict-first cache hints, hoisted column loads, staged columns,
/// prefetched rows and 256-thread cluster groups.
fn sources() -> Vec<(String, String)> {
    let target = Target::h200();
    let mut out = vec![];
    for op in Operator::SIX {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for (shape, workers, packs) in [
                ("17x257", &[0, 32][..], &[1, 2, 4, 8][..]),
                ("64x4096", &[0, 128][..], &[0, 4, 8][..]),
                ("2x262144", &[0][..], &[0, 1][..]),
            ] {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    dtype,
                    shape.parse().unwrap(),
                );
                for residency in [ResidencyRequest::Auto, ResidencyRequest::Stream] {
                    for (mapper, load_policies) in [
                        (MapperPolicy::Model, false),
                        (MapperPolicy::Model, true),
                        (MapperPolicy::Seed, false),
                    ] {
                        let base = LayoutRequest {
                            residency,
                            mapper,
                            streaming_hints: load_policies,
                            hoist_columns: load_policies,
                            cluster_group_threads: if load_policies { 256 } else { 0 },
                            occupancy: u32::from(load_policies),
                            reread_hints: load_policies,
                            stage_columns: load_policies,
                            pack_resident: load_policies,
                            relaxed_cluster_exit: load_policies,
                            push_cluster_reduce: load_policies,
                            prefetch_rows: load_policies,
                            no_cold_path: mapper == MapperPolicy::Seed,
                            // One row per group with load policies, so
                            // that rows can be prefetched.
                            rows_per_group: match (shape, load_policies) {
                                ("17x257", _) => 2,
                                (_, true) => 1,
                                _ => 0,
                            },
                            ..Default::default()
                        };
                        for c in enumerate(&problem, &target, &base, workers, packs, &[1, 2]) {
                            let Ok(plan) = c.outcome else { continue };
                            let k = generate(&plan, &CodegenOptions::default()).unwrap();
                            out.push((k.name, k.source));
                        }
                    }
                }
            }
        }
    }
    out.extend(backward_sources(&target));
    // The in-place scale: its packs with and without a tail, each dtype.
    for dtype in [DType::F32, DType::Bf16, DType::F16] {
        for (rows, n) in [(7, 9), (64, 4096)] {
            let k = scale_unless_one_kernel(dtype, rows, n).unwrap();
            out.push((k.name, k.source));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The backward operators' kernels: three dtypes, partial and full packs,
/// registers and streamed tiles, clusters on long rows.
fn backward_sources(target: &Target) -> Vec<(String, String)> {
    let mut out = vec![];
    for op in Operator::training() {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for (shape, workers, packs) in [
                ("17x257", &[0, 32][..], &[1, 2, 4, 8][..]),
                ("64x4096", &[0, 128][..], &[0, 4, 8][..]),
                ("2x262144", &[0][..], &[0][..]),
            ] {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    dtype,
                    shape.parse().unwrap(),
                );
                for residency in [ResidencyRequest::Auto, ResidencyRequest::Stream] {
                    let base = LayoutRequest {
                        residency,
                        ..Default::default()
                    };
                    for c in enumerate(&problem, target, &base, workers, packs, &[1, 2]) {
                        let Ok(plan) = c.outcome else { continue };
                        let k = generate(&plan, &CodegenOptions::default()).unwrap();
                        out.push((k.name, k.source));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_kind_of_generated_kernel_is_valid_cxx_under_a_cuda_shim() {
    let kernels = sources();
    assert!(kernels.len() > 100, "{} kernels", kernels.len());
    assert!(
        kernels
            .iter()
            .any(|(n, _)| n.starts_with("lf_cross_entropy_backward")),
        "a backward kernel"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, _)| n.starts_with("lf_scale_unless_one")),
        "an in-place scale kernel"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, _)| n.starts_with("lf_cross_entropy_with_grad")),
        "a kernel with a per-row and a row output"
    );
    assert!(
        kernels.iter().any(|(n, _)| n.contains("_c")),
        "a cluster kernel"
    );
    assert!(
        kernels.iter().any(|(n, _)| n.contains("_stream")),
        "a streamed kernel"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, s)| n.contains("_pf") && s.contains("lf_prefetch_wait(lf_rowbar")),
        "a kernel with prefetched rows"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, s)| n.contains("_cs") && s.contains("lf_st_cs(q + 0, a);")),
        "a kernel with streaming hints"
    );
    assert!(
        kernels.iter().any(|(n, _)| n.contains("_hc")),
        "a kernel with hoisted columns"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, s)| n.ends_with("_ob1") && s.contains(" __launch_bounds__(256, 1) ")),
        "a kernel with an occupancy promise"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, s)| n.contains("_rr") && s.contains("lf_ld_drop(q + 0, lf_drop)")),
        "a kernel with re-read hints"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, s)| n.contains("_sc") && s.contains("cp.async.wait_all")),
        "a kernel with staged columns"
    );
    assert!(
        kernels
            .iter()
            .any(|(n, s)| n.ends_with("_cp") && s.contains("lf_cold_out(")),
        "a kernel with the cold path"
    );
    let Some(cxx) = cxx() else {
        eprintln!("SKIPPED: no C++ compiler (set CXX); the generated sources were not checked");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cxx_syntax");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = vec![];
    for (name, source) in &kernels {
        let path = dir.join(format!("{name}.cpp"));
        std::fs::write(&path, shimmed(source)).unwrap();
        files.push(path);
    }
    // One compiler process per batch keeps this to a few seconds.
    for batch in files.chunks(64) {
        let out = syntax_check(&cxx, batch);
        assert!(
            out.status.success(),
            "generated CUDA failed the C++ syntax check:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_shim_check_rejects_broken_source() {
    let Some(cxx) = cxx() else {
        eprintln!("SKIPPED: no C++ compiler (set CXX)");
        return;
    };
    let problem = Problem::operator(
        Operator::Sum,
        OperatorOptions::default(),
        DType::F32,
        "17x257".parse().unwrap(),
    );
    let plan = lanefold_plan::plan(&problem, &Target::h200(), &LayoutRequest::default()).unwrap();
    let good = generate(&plan, &CodegenOptions::default()).unwrap().source;
    let broken = good.replacen(
        "const int tid = threadIdx.x;",
        "const int tid = threadIdx.x",
        1,
    );
    assert_ne!(broken, good);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cxx_syntax_broken");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.cpp");
    std::fs::write(&path, shimmed(&broken)).unwrap();
    assert!(
        !syntax_check(&cxx, &[path]).status.success(),
        "a missing semicolon must fail"
    );
}
