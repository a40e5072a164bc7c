//! The `lanefold` command as a user meets it: bad input is a clear error
//! and a non-zero exit, refusals exit 2 with their reason.

mod common;

use common::lanefold;
use std::path::PathBuf;
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn assert_clean_failure(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stderr: {err}\nstdout: {}",
        stdout(o)
    );
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lanefold-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn malformed_shapes_and_dtypes_are_clear_errors() {
    for (shape, needle) in [
        ("0x5", "zero rows"),
        ("4x0", "zero-length rows"),
        ("abc", "malformed shape"),
    ] {
        let o = lanefold(&["plan", "--op", "sum", "--shape", shape]);
        assert_clean_failure(&o, 2, needle);
    }
    let o = lanefold(&["run", "--op", "sum", "--shape", "4x8", "--dtype", "f64"]);
    assert_clean_failure(&o, 2, "unsupported dtype 'f64'");
    let o = lanefold(&["run", "--op", "gelu", "--shape", "4x8"]);
    assert_clean_failure(&o, 2, "unknown operator 'gelu'");
}

#[test]
fn each_refusal_exits_2_with_its_reason() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--op", "softmax", "--shape", "4x128", "--workers", "48"],
            "invalid width",
        ),
        (
            &[
                "--op",
                "sum",
                "--shape",
                "4x128",
                "--workers",
                "32",
                "--no-reassociate",
            ],
            "missing reassociation permission",
        ),
        (
            &[
                "--op",
                "layernorm",
                "--shape",
                "2x262144",
                "--workers",
                "32",
                "--schedule",
                "registers",
            ],
            "resource overflow: private slots",
        ),
        (
            &[
                "--op",
                "add",
                "--shape",
                "4x128",
                "--schedule",
                "order=sequential",
            ],
            "element-only",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["plan"];
        full.extend_from_slice(args);
        assert_clean_failure(&lanefold(&full), 2, needle);
        // `run` refuses the same way before touching any data.
        full[0] = "run";
        assert_clean_failure(&lanefold(&full), 2, needle);
    }
}

#[test]
fn an_exact_request_is_honoured_with_one_worker() {
    let o = lanefold(&[
        "run",
        "--op",
        "sum",
        "--shape",
        "3x1000",
        "--schedule",
        "order=sequential",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("W=1 "), "{}", stdout(&o));
}

fn has_driver() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

#[test]
fn cuda_without_a_driver_says_so() {
    if has_driver() {
        return; // Only meaningful where no GPU driver is installed (CI).
    }
    let o = lanefold(&[
        "run",
        "--op",
        "sum",
        "--shape",
        "4x128",
        "--backend",
        "cuda",
    ]);
    assert_clean_failure(&o, 1, "no CUDA driver");
    // The latency probe is CUDA-only: the same clean refusal, no file.
    let out = std::env::temp_dir().join(format!("lanefold-latency-{}.json", std::process::id()));
    let o = lanefold(&["latency", "--output", out.to_str().unwrap()]);
    assert_clean_failure(&o, 1, "no CUDA driver");
    assert!(!out.exists());
}

/// Without a GPU, the automatic backend falls back to the CPU with one
/// line; the directories searched for the driver come only with --verbose.
#[test]
fn auto_backend_without_a_driver_says_so_in_one_line() {
    if has_driver() {
        return; // Only meaningful where no GPU driver is installed (CI).
    }
    let run = [
        "run",
        "--op",
        "sum",
        "--shape",
        "4x128",
        "--backend",
        "auto",
    ];
    let o = lanefold(&run);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l == "no CUDA driver found; running on the CPU"),
        "{out}"
    );
    assert!(!out.contains("libcuda.so"), "{out}");
    let o = lanefold(&[&run[..], &["--verbose"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("no CUDA driver found ("), "{out}");
    assert!(out.contains("libcuda.so"), "{out}");
}

/// A missing `.npy` input is one error naming the path, its OS error once.
#[test]
fn a_missing_npy_input_names_its_path_and_os_error_once() {
    let o = lanefold(&[
        "run",
        "--op",
        "softmax",
        "--shape",
        "3x40",
        "--backend",
        "cpu",
        "--input",
        "x=/nonexistent/x.npy",
    ]);
    assert_clean_failure(&o, 1, "/nonexistent/x.npy: No such file or directory");
    let err = stderr(&o);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn compile_check_without_nvrtc_says_so() {
    let has_nvrtc = std::env::var_os("LD_LIBRARY_PATH").is_some()
        || std::path::Path::new("/usr/local/cuda/lib64").exists()
        || std::path::Path::new("/usr/lib/x86_64-linux-gnu/libnvrtc.so").exists();
    if has_nvrtc {
        return; // Only meaningful where no NVRTC can be found (CI's tests).
    }
    let o = lanefold(&["compile-check", "--ops", "sum", "--shapes", "4x128"]);
    assert_clean_failure(&o, 1, "no NVRTC found");
}

/// `--toggle`: the layernorm whose centred row is a second tile gains a
/// group with `recompute-derived`; under one-pass moments (few rows)
/// legality drops the token, and the summary says so.
#[test]
fn compile_check_toggle_counts_groups_each_way() {
    let o = lanefold(&[
        "compile-check",
        "--quiet",
        "--ops",
        "layernorm",
        "--shapes",
        "2048x22408,8x4096",
        "--toggle",
        "recompute-derived",
    ]);
    if stderr(&o).contains("no NVRTC found") {
        eprintln!("SKIPPED: no NVRTC");
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("raised on 1, kept on 0, lowered on 0; 1 plans where legality drops it"),
        "{out}"
    );
}

#[test]
fn compile_check_refuses_a_toggle_that_is_no_token_and_draws_beside_shapes() {
    let o = lanefold(&[
        "compile-check",
        "--shapes",
        "4x128",
        "--toggle",
        "no-such-token",
    ]);
    assert_clean_failure(&o, 1, "--toggle no-such-token: not a schedule token");
    let o = lanefold(&["compile-check", "--shapes", "4x128", "--draw", "3"]);
    assert_clean_failure(&o, 2, "cannot be used with");
    let o = lanefold(&["compile-check", "--draw", "3", "--n-range", "9-3"]);
    assert_clean_failure(&o, 2, "MIN must be at least 1 and at most MAX");
}

#[test]
fn latency_refuses_a_malformed_shape() {
    let o = lanefold(&[
        "latency",
        "--shape",
        "0x127",
        "--output",
        "/tmp/unused.json",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("0x127"),
        "{o:?}"
    );
}

#[test]
fn plan_prints_ir_and_a_candidate_table() {
    let o = lanefold(&[
        "plan",
        "--op",
        "rmsnorm",
        "--shape",
        "64x4096",
        "--print-ir",
        "--tune-workers",
        "0,32,48",
        "--tune-pack",
        "1,4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("reduce.sum"), "{out}");
    assert!(out.contains("resident"), "{out}");
    assert_eq!(out.matches(" legal ").count(), 4, "{out}");
    assert_eq!(out.matches("invalid width").count(), 2, "{out}");
}

#[test]
fn npy_inputs_are_checked_and_outputs_written() {
    let dir = tmpdir("npy");
    // Produce inputs by running once with outputs, then feed an output back
    // as an input of the right shape.
    let o = lanefold(&[
        "run",
        "--op",
        "residual_layernorm",
        "--shape",
        "3x40",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let h = dir.join("h.npy");
    assert!(h.exists() && dir.join("y.npy").exists());
    let arg = format!("x={}", h.display());
    let o = lanefold(&["run", "--op", "softmax", "--shape", "3x40", "--input", &arg]);
    assert!(o.status.success(), "{}", stderr(&o));

    // Wrong shape.
    let o = lanefold(&["run", "--op", "softmax", "--shape", "4x30", "--input", &arg]);
    assert_clean_failure(&o, 1, "shape");
    // Wrong dtype: an f32 file for a bf16 problem.
    let o = lanefold(&[
        "run", "--op", "softmax", "--shape", "3x40", "--dtype", "bf16", "--input", &arg,
    ]);
    assert_clean_failure(&o, 1, "does not fit bf16");
    // Not an npy file at all.
    let junk = dir.join("junk.npy");
    std::fs::write(&junk, b"not numpy").unwrap();
    let o = lanefold(&[
        "run",
        "--op",
        "softmax",
        "--shape",
        "3x40",
        "--input",
        &format!("x={}", junk.display()),
    ]);
    assert_clean_failure(&o, 1, "junk.npy");
}

#[test]
fn an_out_of_range_target_is_refused() {
    let dir = tmpdir("target");
    let path = dir.join("t.npy");
    // A minimal <i8 .npy with targets [0, 7, 2] for rows of 5 classes.
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    for t in [0i64, 7, 2] {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    let o = lanefold(&[
        "run",
        "--op",
        "cross_entropy",
        "--shape",
        "3x5",
        "--input",
        &format!("target={}", path.display()),
    ]);
    assert_clean_failure(&o, 1, "target index 7 at row 1 is out of range");
}

/// Regression: `lanefold plan ... | head -1` panicked with "failed printing
/// to stdout: Broken pipe" once the reader went away.
#[cfg(unix)]
#[test]
fn a_closed_stdout_pipe_ends_the_command_without_a_panic() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_lanefold"))
        .args(["plan", "--op", "softmax", "--shape", "64x4096"])
        .args(["--tune-workers", "0,8,16,32,64,128,256,512,1024"])
        .args(["--tune-pack", "1,2,4,8", "--tune-unroll", "1,2,4,8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before the first line
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The scorecard judges a committed replay from its recorded rounds and
/// refuses a file that is not a replay, naming the directory.
#[test]
fn scorecard_judges_a_replay_and_refuses_a_bench_file() {
    let results = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
    let replay = results.join("2026-11-29-large-final-replay-h200");
    let o = lanefold(&["scorecard", replay.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("(1 of 3 rounds)"), "{out}");
    assert!(
        out.contains("## Target 1 large shapes: 9 of 24 cases met"),
        "{out}"
    );
    let bench = results.join("2026-11-29-large-final-h200");
    let o = lanefold(&["scorecard", bench.to_str().unwrap()]);
    assert_clean_failure(&o, 1, "the scorecard reads replay and search files");
}

/// The scorecard's targets come from `--targets FILE` (else
/// bench/targets.toml): a missing or malformed file is a clear error.
#[test]
fn scorecard_reads_its_targets_from_a_file_and_refuses_a_bad_one() {
    let results = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
    let replay = results.join("2026-11-29-large-final-replay-h200");
    let replay = replay.to_str().unwrap();
    let dir = tmpdir("targets");
    let committed = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/targets.toml"),
    )
    .unwrap();
    let lenient = dir.join("lenient.toml");
    std::fs::write(
        &lenient,
        committed.replacen("min_tbps = 4.0", "min_tbps = 0.1", 1),
    )
    .unwrap();
    let o = lanefold(&["scorecard", "--targets", lenient.to_str().unwrap(), replay]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("## Target 1 large shapes: 11 of 24 cases met"),
        "{}",
        stdout(&o)
    );
    let missing = dir.join("missing.toml");
    let o = lanefold(&["scorecard", "--targets", missing.to_str().unwrap(), replay]);
    assert_clean_failure(&o, 1, "missing.toml");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[family]]\nname = \"x\"\nshapes = [\"1x2\"]\n").unwrap();
    let o = lanefold(&["scorecard", "--targets", bad.to_str().unwrap(), replay]);
    assert_clean_failure(&o, 1, "bad.toml");
}

/// `selftest --variant NAME` runs that variant's checks alone; a name it
/// does not know is an error listing the names it does.
#[test]
fn selftest_runs_one_named_variant_and_refuses_unknown_names() {
    let o = lanefold(&["selftest", "--variant", "l1-columns"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    // 6 operators x 2 dtypes x 3 layouts x (registers, streamed).
    assert!(out.contains("72 passed, 0 failed"), "{out}");
    let o = lanefold(&["selftest", "--variant", "l1-columns,nope"]);
    assert_clean_failure(&o, 1, "unknown variant 'nope'");
    assert!(stderr(&o).contains("prefetch-rows"));
}

/// The base matrix's groups are named like the variants, and `--ops` and
/// `--max-rows` narrow every check (a sanitizer run's subset).
#[test]
fn selftest_runs_named_matrix_groups_narrowed_to_some_operators() {
    let o = lanefold(&[
        "selftest",
        "--variant",
        "layout-matrix,cluster-groups",
        "--ops",
        "softmax",
        "--max-rows",
        "2",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("narrowed to operators softmax, at most 2 rows"),
        "{out}"
    );
    // 4 packs x 3 widths x 8 lengths x 2 row counts.
    assert!(
        out.contains("variant layout-matrix: 192 passed, 0 failed"),
        "{out}"
    );
    // 2 dtypes x 4 forms (two past the group limit, two within it).
    assert!(
        out.contains("variant cluster-groups: 8 passed, 0 failed"),
        "{out}"
    );
    let o = lanefold(&["selftest", "--variant", "layout-matrix", "--ops", "add"]);
    assert_clean_failure(&o, 1, "no checks of 'add'");
    let o = lanefold(&["selftest", "--variant", "layout-matrix", "--max-rows", "0"]);
    assert_clean_failure(&o, 1, "at least 1");
}

/// `--skip-variants` leaves the variant groups out (each prints a progress
/// line when it runs) and cannot be combined with `--variants-only`.
#[test]
fn selftest_skip_variants_runs_no_variant_group() {
    let o = lanefold(&["selftest", "--variant", "arithmetic"]);
    // 4 variants x 2 operators x 2 dtypes x 5 layouts.
    assert!(stdout(&o).contains("variant arithmetic: 80 passed, 0 failed"));
    let o = lanefold(&["selftest", "--skip-variants"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.lines().any(|l| l.starts_with("variant ")), "{out}");
    assert!(out.trim_end().ends_with("passed, 0 failed"), "{out}");
    let o = lanefold(&["selftest", "--skip-variants", "--variants-only"]);
    assert_clean_failure(&o, 2, "cannot be used with");
}

/// The long-row half of the selftest is CUDA only: on the CPU it is a
/// clear error, and it cannot be combined with `--quick`, its complement.
#[test]
fn selftest_long_shapes_only_refuses_the_cpu_and_quick() {
    let o = lanefold(&["selftest", "--long-shapes-only"]);
    assert_clean_failure(&o, 1, "--long-shapes-only runs on CUDA only");
    let o = lanefold(&["selftest", "--long-shapes-only", "--quick"]);
    assert_clean_failure(&o, 2, "cannot be used with");
}

/// Ordered columns are a scheduling choice: the plan names them, and the
/// selftest's check group passes on the CPU (the marking; CUDA checks bits).
#[test]
fn ordered_columns_show_in_the_plan_and_their_checks_pass() {
    let o = lanefold(&[
        "plan",
        "--op",
        "layernorm",
        "--shape",
        "64x4096",
        "--dtype",
        "bf16",
        "--schedule",
        "ordered-columns",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(stdout(&o).contains("ordered-columns"), "{}", stdout(&o));
    let o = lanefold(&["selftest", "--variant", "ordered-columns"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    // 6 operators x 2 dtypes x 3 layouts x 4 bases.
    assert!(
        stdout(&o).contains("144 passed, 0 failed"),
        "{}",
        stdout(&o)
    );
}

/// h kept resident and persistent clusters are asked for by token, shown
/// in the plan where they apply, and their CPU checks (the marking) pass.
#[test]
fn rounded_resident_and_persistent_clusters_show_in_the_plan_and_their_checks_pass() {
    let o = lanefold(&[
        "plan",
        "--op",
        "residual_layernorm",
        "--shape",
        "64x4096",
        "--dtype",
        "bf16",
        "--schedule",
        "registers rounded-resident",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(stdout(&o).contains("rounded-resident"), "{}", stdout(&o));
    let o = lanefold(&[
        "plan",
        "--op",
        "layernorm",
        "--shape",
        "64x131072",
        "--dtype",
        "bf16",
        "--schedule",
        "push-reduce persistent-clusters",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(stdout(&o).contains("persistent-clusters"), "{}", stdout(&o));
    let o = lanefold(&["selftest", "--variant", "rounded-resident"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    // 6 operators x 3 dtypes x 3 layouts x 3 bases.
    assert!(
        stdout(&o).contains("162 passed, 0 failed"),
        "{}",
        stdout(&o)
    );
}

/// The occupancy cap and batched loads are asked for by token and shown in
/// the plan; a promise above the cap is a clear error, not a panic.
#[test]
fn plan_shows_an_occupancy_cap_and_batched_loads_and_refuses_a_promise_above_the_cap() {
    let args = [
        "plan",
        "--op",
        "rmsnorm",
        "--dtype",
        "f32",
        "--shape",
        "64x32768",
        "--target",
        "h200",
        "--workers",
        "1024",
        "--pack",
        "4",
        "--schedule",
    ];
    let o = lanefold(&[&args[..], &["stream occupancy-cap=1 batched-loads"]].concat());
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("occupancy-cap=1"), "{out}");
    assert!(out.contains("batched-loads"), "{out}");
    let o = lanefold(&[&args[..], &["stream occupancy-cap=1 occupancy=2"]].concat());
    assert_clean_failure(&o, 2, "promised above the cap");
}

/// The per-policy flags are gone: every kernel choice is a schedule token.
/// A command line recorded with one (older results) is refused with the
/// token to use, and the help lists none of them.
#[test]
fn a_removed_policy_flag_is_refused_naming_its_schedule_token() {
    let o = lanefold(&[
        "plan",
        "--op",
        "rmsnorm",
        "--shape",
        "64x32768",
        "--reread-hints",
    ]);
    assert_clean_failure(&o, 2, "--schedule");
    assert!(stderr(&o).contains("reread-hints"), "{}", stderr(&o));
    let help = stdout(&lanefold(&["bench", "--help"]));
    for gone in [
        "--reread-hints",
        "--residency",
        "--occupancy-cap",
        "--mapper",
        "--order",
    ] {
        assert!(!help.contains(gone), "{gone} in bench --help");
    }
    assert!(
        help.contains("--schedule") && help.contains("--workers"),
        "{help}"
    );
}

/// `--version` names the commit the binary was built from, so a binary run
/// on another machine (whose checkout may be another commit) still says
/// which source it is: `scripts/selftest-cuda.sh` records it.
#[test]
fn version_names_the_commit_the_binary_was_built_from() {
    let o = lanefold(&["--version"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let sha = out
        .split("(git ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no commit in {out}"));
    assert!(
        sha == "unknown" || (sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit())),
        "{out}"
    );
    assert!(
        out.contains("dirty: true") || out.contains("dirty: false"),
        "{out}"
    );
}

/// `lanefold run` on inputs with -inf masks (a fully masked row among
/// them), a masked cross-entropy target and rmsnorm rows near 1e30:
/// each output matches float64 in kind and value, so the run exits 0 and
/// says it validated.
#[test]
fn masked_and_huge_npy_inputs_validate() {
    use lanefold_cpu::{npy, Tensor};
    let dir = tmpdir("nonfinite");
    let (rows, n) = (3usize, 40usize);
    let mut x: Vec<f32> = (0..rows * n).map(|i| (i % 7) as f32 * 0.25).collect();
    for i in 0..n {
        x[i] = if i % 2 == 0 { f32::NEG_INFINITY } else { x[i] };
        x[n + i] = f32::NEG_INFINITY;
    }
    let masked = dir.join("masked.npy");
    npy::write(&masked, &Tensor::F32(x), &[rows as u64, n as u64]).unwrap();
    let arg = format!("x={}", masked.display());
    let o = lanefold(&["run", "--op", "softmax", "--shape", "3x40", "--input", &arg]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), stdout(&o));
    assert!(
        stdout(&o).contains("validated against float64"),
        "{}",
        stdout(&o)
    );

    let targets = dir.join("targets.npy");
    npy::write(&targets, &Tensor::I64(vec![0, 3, 5]), &[3]).unwrap();
    let t = format!("target={}", targets.display());
    let o = lanefold(&[
        "run",
        "--op",
        "cross_entropy",
        "--shape",
        "3x40",
        "--input",
        &arg,
        "--input",
        &t,
    ]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), stdout(&o));
    assert!(stdout(&o).contains("validated against float64"));

    let huge: Vec<f32> = (0..rows * n)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 2e28)
        .collect();
    let path = dir.join("huge.npy");
    npy::write(&path, &Tensor::F32(huge), &[rows as u64, n as u64]).unwrap();
    let arg = format!("x={}", path.display());
    // The norms meet float64 there by default (their cold path) on the
    // CPU: f32 rows at 1e30 normalised to 0 when it was opt-in.
    for op in ["rmsnorm", "layernorm", "residual_layernorm"] {
        let args = [
            "run",
            "--op",
            op,
            "--shape",
            "3x40",
            "--input",
            &arg,
            "--backend",
            "cpu",
        ];
        let o = lanefold(&args);
        assert!(o.status.success(), "{op}: {}\n{}", stderr(&o), stdout(&o));
        assert!(stdout(&o).contains("validated against float64"));
    }
    let o = lanefold(&[
        "run",
        "--op",
        "layernorm",
        "--shape",
        "3x40",
        "--input",
        &arg,
        "--backend",
        "cpu",
        "--schedule",
        "no-cold-path",
    ]);
    assert!(
        !o.status.success(),
        "the fast path alone normalises 1e30 rows to 0"
    );
    assert!(
        stderr(&o).contains("no-cold-path leaves out"),
        "{}",
        stderr(&o)
    );
    // The old opt-in token is refused with the new default named.
    let o = lanefold(&[
        "plan",
        "--op",
        "layernorm",
        "--shape",
        "3x40",
        "--schedule",
        "cold-path",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("by default now"), "{}", stderr(&o));
}

/// Masked long rows went NaN in the online normalizer: a softmax and a
/// cross-entropy row of 70,001 entries, mostly -inf, validate.
#[test]
fn regression_masked_long_rows_went_nan() {
    use lanefold_cpu::{npy, Tensor};
    let dir = tmpdir("masked-long");
    let (rows, n) = (2usize, 70_001usize);
    let x: Vec<f32> = (0..rows * n)
        .map(|i| {
            if i % 5 == 0 {
                (i % 11) as f32 * 0.5
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let masked = dir.join("masked.npy");
    npy::write(&masked, &Tensor::F32(x), &[rows as u64, n as u64]).unwrap();
    let arg = format!("x={}", masked.display());
    let targets = dir.join("targets.npy");
    npy::write(&targets, &Tensor::I64(vec![5, 1]), &[2]).unwrap();
    let t = format!("target={}", targets.display());
    for (op, extra) in [("softmax", None), ("cross_entropy", Some(t.as_str()))] {
        for schedule in ["auto", "online-normalizer", "W=256 V=4 online-normalizer"] {
            let mut args = vec!["run", "--op", op, "--shape", "2x70001", "--input", &arg];
            if let Some(t) = extra {
                args.extend(["--input", t]);
            }
            args.extend(["--schedule", schedule]);
            let o = lanefold(&args);
            assert!(
                o.status.success(),
                "{op} {schedule}: {}\n{}",
                stderr(&o),
                stdout(&o)
            );
            assert!(stdout(&o).contains("validated against float64"));
        }
    }
}

/// `selftest --fuzz N --seed S` runs N drawn cases against the oracle and
/// ends with the selftest's summary line.
#[test]
fn selftest_fuzz_runs_its_cases_against_the_oracle() {
    let o = lanefold(&[
        "selftest",
        "--backend",
        "cpu",
        "--fuzz",
        "3",
        "--seed",
        "11",
    ]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("fuzz on cpu: 3 cases, seed 11"), "{out}");
    assert!(out.trim_end().ends_with("3 passed, 0 failed"), "{out}");
    let o = lanefold(&["selftest", "--seed", "11"]);
    assert_clean_failure(&o, 2, "--fuzz");
}

/// A per-row scalar input (cross_entropy_backward's dloss) is read from a
/// `.npy` of `rows` elements: here the forward's per-row losses.
#[test]
fn a_per_row_scalar_input_reads_from_npy() {
    let dir = tmpdir("dloss");
    let d = dir.to_str().unwrap();
    let o = lanefold(&[
        "run",
        "--op",
        "cross_entropy",
        "--shape",
        "3x40",
        "--output-dir",
        d,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let arg = format!("dloss={}", dir.join("loss.npy").display());
    let args = ["run", "--op", "cross_entropy_backward", "--shape", "3x40"];
    let o = lanefold(&[&args[..], &["--input", &arg]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("dx"), "{}", stdout(&o));
    // A row of a per-row scalar per row, not rows x n.
    let o = lanefold(&[
        "run",
        "--op",
        "cross_entropy_backward",
        "--shape",
        "4x40",
        "--input",
        &arg,
    ]);
    assert_clean_failure(&o, 1, "shape");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --op cross_entropy_with_grad` validates both outputs and writes
/// them: on one schedule and seed, the loss.npy of `cross_entropy` and the
/// dx.npy of `cross_entropy_backward_recompute`, byte for byte.
#[test]
fn cross_entropy_with_grad_writes_the_forwards_loss_and_the_backwards_dx() {
    let dir = tmpdir("with-grad");
    let run = |op: &str| -> PathBuf {
        let out = dir.join(op);
        let args = ["run", "--op", op, "--shape", "6x300", "--dtype", "bf16"];
        let more = [
            "--schedule",
            "W=32 V=4",
            "--output-dir",
            out.to_str().unwrap(),
        ];
        let o = lanefold(&[&args[..], &more[..]].concat());
        assert!(o.status.success(), "{op}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("validated against float64"),
            "{}",
            stdout(&o)
        );
        out
    };
    let both = run("cross_entropy_with_grad");
    let read = |d: &PathBuf, name: &str| std::fs::read(d.join(name)).unwrap();
    assert_eq!(
        read(&both, "loss.npy"),
        read(&run("cross_entropy"), "loss.npy")
    );
    assert_eq!(
        read(&both, "dx.npy"),
        read(&run("cross_entropy_backward_recompute"), "dx.npy")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The training pair through `.npy` files: `cross_entropy_with_lse`
/// writes an f32 lse.npy, `cross_entropy_backward` reads it back (and the
/// forward's x and target), validated; an lse in the storage dtype is
/// refused with its name, never a panic.
#[test]
fn the_saved_lse_travels_from_the_forward_to_the_backward_as_npy() {
    let dir = tmpdir("saved-lse");
    let d = dir.to_str().unwrap();
    let shape = ["--shape", "5x300", "--dtype", "bf16", "--seed", "3"];
    let fwd = dir.join("fwd");
    let o = lanefold(
        &[
            &["run", "--op", "cross_entropy_with_lse", "--output-dir"][..],
            &[fwd.to_str().unwrap()],
            &shape[..],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lse = std::fs::read(fwd.join("lse.npy")).unwrap();
    assert!(
        String::from_utf8_lossy(&lse[..80]).contains("<f4"),
        "f32 lse"
    );
    // The same seed gives the backward the forward's x and target.
    let arg = format!("lse={}", fwd.join("lse.npy").display());
    let o = lanefold(
        &[
            &["run", "--op", "cross_entropy_backward", "--input", &arg][..],
            &shape[..],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("validated against float64"),
        "{}",
        stdout(&o)
    );
    let loss = format!("lse={}", fwd.join("loss.npy").display());
    let o = lanefold(
        &[
            &["run", "--op", "cross_entropy_backward", "--input", &loss][..],
            &shape[..],
        ]
        .concat(),
    );
    assert_clean_failure(&o, 1, "lse");
    let _ = d;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `selftest --backward`: the backward operators' layout matrix in f32 and
/// bf16 on the CPU.
#[test]
fn selftest_backward_runs_the_backward_layout_matrix() {
    let o = lanefold(&["selftest", "--backward"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    // 8 operators (7 backward, the lse-saving forward) x 4 packs x 2
    // widths x 4 lengths x 2 row counts x 2 dtypes, their batch invariance
    // (8 x 2 dtypes), cross_entropy_with_grad against its halves and the
    // backward from the saved lse (each 2 dtypes x 2 shapes x 2 forms),
    // then 3 norms' column gradients x 3 dtypes x 3 shapes and 3 splits.
    assert!(
        stdout(&o).contains("1086 passed, 0 failed"),
        "{}",
        stdout(&o)
    );
}

/// Both cold modes size their input sets by the GPU's L2: on the CPU each
/// is refused with the reason, never silently measured warm.
#[test]
fn cold_l2_modes_are_refused_on_the_cpu() {
    let out = tmpdir("cold-cpu");
    for mode in ["cold", "cold-inputs"] {
        let dir = out.join(mode);
        let o = lanefold(&[
            "bench",
            "--backend",
            "cpu",
            "--ops",
            "sum",
            "--shapes",
            "4x64",
            "--l2",
            mode,
            "--output",
            dir.to_str().unwrap(),
        ]);
        assert_clean_failure(&o, 1, "need the GPU's L2 size");
        assert!(!dir.join("results.json").exists(), "{mode}");
    }
    let _ = std::fs::remove_dir_all(out);
}
