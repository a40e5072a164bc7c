//! `lanefold doctor`: what lanefold sees on this machine and what it will
//! use, each problem with its fix. It only reads: it opens the device, asks
//! the driver and NVRTC their versions, sizes the caches and asks Python's
//! package metadata (no import of torch), and changes nothing.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use lanefold_cuda::CudaBackend;
use lanefold_measure::tuning::TuningCache;
use serde::Serialize;

use crate::args::BackendArg;

#[derive(Args)]
pub struct DoctorArgs {
    /// The backend you mean to use: exit 1 if it cannot work here (`auto`
    /// never fails: it falls back to the CPU).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// The Python that runs the PyTorch peer.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, with a limit worth knowing.
    Note,
    /// Missing; what needs it cannot run.
    Missing,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub what: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do about it; empty when nothing is needed.
    pub fix: String,
}

fn check(what: &'static str, status: Status, detail: String, fix: &str) -> Check {
    Check {
        what,
        status,
        detail,
        fix: fix.to_string(),
    }
}

/// Files and bytes under `dir` (recursively); None if it does not exist.
fn dir_size(dir: &Path) -> Option<(u64, u64)> {
    let mut files = 0;
    let mut bytes = 0;
    let mut stack = vec![std::fs::read_dir(dir).ok()?];
    while let Some(entries) = stack.pop() {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.extend(std::fs::read_dir(e.path()).ok()),
                Ok(m) => {
                    files += 1;
                    bytes += m.len();
                }
                Err(_) => {}
            }
        }
    }
    Some((files, bytes))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The GPU checks: driver, NVRTC, the device itself.
pub fn gpu_checks() -> (Vec<Check>, bool) {
    let mut out = vec![];
    let driver = lanefold_cuda::probe_driver();
    out.push(match &driver {
        Ok(()) => check("CUDA driver", Status::Ok, "libcuda loaded".into(), ""),
        Err(e) => check(
            "CUDA driver",
            Status::Missing,
            e.to_string(),
            "install the NVIDIA driver (libcuda.so) or add its directory to LD_LIBRARY_PATH; \
             the CPU backend works without it",
        ),
    });
    let nvrtc = lanefold_cuda::nvrtc_version();
    out.push(match &nvrtc {
        Some(v) => check("NVRTC", Status::Ok, format!("version {v}"), ""),
        None => check(
            "NVRTC",
            Status::Missing,
            lanefold_cuda::probe_nvrtc()
                .err()
                .map_or("not loadable".into(), |e| e.to_string()),
            "install the CUDA runtime compiler (cuda-nvrtc, or `pip install nvidia-cuda-nvrtc`) \
             and add its lib directory to LD_LIBRARY_PATH",
        ),
    });
    if driver.is_err() || nvrtc.is_none() {
        return (out, false);
    }
    match CudaBackend::open(0) {
        Ok(c) => {
            let (major, minor) = c.compute_capability();
            out.push(check(
                "GPU",
                Status::Ok,
                format!(
                    "{} ({}, compute {major}.{minor}), driver CUDA {}",
                    c.device_name(),
                    c.arch(),
                    c.driver_version()
                ),
                "",
            ));
            out.push(check(
                "GPU resources",
                Status::Ok,
                format!(
                    "{} SMs, L2 {}, SM clock {} MHz, memory clock {} MHz",
                    c.multiprocessors(),
                    mib(c.l2_bytes()),
                    c.sm_clock_mhz().map_or("?".into(), |x| x.to_string()),
                    c.memory_clock_mhz().map_or("?".into(), |x| x.to_string())
                ),
                "",
            ));
            let tuned = major == 9;
            out.push(check(
                "tuned target",
                if tuned { Status::Ok } else { Status::Note },
                if tuned {
                    "Hopper: the rules and measurements behind the default choice apply".into()
                } else {
                    format!("compute {major}.{minor}: plans are legal and correct, but the default choice was measured on Hopper")
                },
                if tuned { "" } else { "use `lanefold tune` for your shapes" },
            ));
            (out, true)
        }
        Err(e) => {
            out.push(check(
                "GPU",
                Status::Missing,
                e.to_string(),
                "check `nvidia-smi`; CUDA_VISIBLE_DEVICES may hide every device",
            ));
            (out, false)
        }
    }
}

/// The kernel and tuning caches.
pub fn cache_checks() -> Vec<Check> {
    let mut out = vec![];
    match lanefold_cuda::default_kernel_cache_dir() {
        Some(dir) => out.push(match dir_size(&dir) {
            Some((files, bytes)) => check(
                "kernel cache",
                Status::Ok,
                format!("{} ({files} files, {})", dir.display(), mib(bytes)),
                "",
            ),
            None => check(
                "kernel cache",
                Status::Ok,
                format!("{} (empty; created on first compile)", dir.display()),
                "",
            ),
        }),
        None => out.push(check(
            "kernel cache",
            Status::Note,
            "neither XDG_CACHE_HOME nor HOME is set: compiled kernels live in memory only".into(),
            "set XDG_CACHE_HOME to keep compiled kernels between runs",
        )),
    }
    match TuningCache::default_path() {
        Some(path) => {
            let size = std::fs::metadata(&path).map(|m| m.len()).ok();
            out.push(check(
                "tuning cache",
                Status::Ok,
                match size {
                    Some(b) => format!("{} ({b} bytes)", path.display()),
                    None => format!(
                        "{} (none yet; `lanefold tune` and `run --autotune` write it)",
                        path.display()
                    ),
                },
                "",
            ))
        }
        None => out.push(check(
            "tuning cache",
            Status::Note,
            "no LANEFOLD_TUNING_CACHE, XDG_CACHE_HOME or HOME: tuned winners are not kept".into(),
            "set LANEFOLD_TUNING_CACHE to a writable file path",
        )),
    }
    out
}

/// Python and the peers' packages, by package metadata (fast: nothing is
/// imported).
pub fn python_checks(python: &str) -> Vec<Check> {
    const PROBE: &str = "import json, sys\n\
        from importlib import metadata\n\
        def v(*names):\n\
        \x20   for n in names:\n\
        \x20       try:\n\
        \x20           return metadata.version(n)\n\
        \x20       except Exception:\n\
        \x20           pass\n\
        print(json.dumps({'python': sys.version.split()[0], 'torch': v('torch'), \
        'triton': v('triton'), 'liger': v('liger-kernel', 'liger_kernel'), \
        'quack': v('quack-kernels'), 'numpy': v('numpy')}))\n";
    let found = Command::new(python)
        .args(["-c", PROBE])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok());
    let Some(v) = found else {
        return vec![check(
            "Python",
            Status::Missing,
            format!("`{python}` did not run"),
            "install Python 3.9+ (or pass --python) to compare with PyTorch; lanefold itself needs no Python",
        )];
    };
    let version = |k: &str| v[k].as_str().map(str::to_string);
    let mut out = vec![check(
        "Python",
        Status::Ok,
        format!("{python} {}", version("python").unwrap_or_default()),
        "",
    )];
    for (what, key, fix) in [
        (
            "torch (peer)",
            "torch",
            "`pip install torch` for the eager and torch.compile peers",
        ),
        (
            "triton (torch.compile)",
            "triton",
            "torch.compile on GPU needs triton (comes with CUDA torch)",
        ),
        (
            "Liger-Kernel (peer)",
            "liger",
            "`pip install liger-kernel` to compare with Liger",
        ),
        (
            "Quack (peer)",
            "quack",
            "`pip install quack-kernels` to compare with Quack (Hopper)",
        ),
    ] {
        out.push(match version(key) {
            Some(ver) => check(what, Status::Ok, ver, ""),
            None => check(what, Status::Note, "not installed".into(), fix),
        });
    }
    out
}

pub fn doctor_cmd(args: DoctorArgs) -> Result<()> {
    let (mut checks, gpu_ok) = gpu_checks();
    checks.extend(cache_checks());
    checks.extend(python_checks(&args.python));
    let backend = match (args.backend, gpu_ok) {
        (BackendArg::Cpu, _) | (BackendArg::Auto, false) => "cpu",
        (BackendArg::Cuda, _) | (BackendArg::Auto, true) => "cuda",
    };
    let usable = backend == "cpu" || gpu_ok;
    if args.json {
        let v = serde_json::json!({
            "checks": checks,
            "backend": backend,
            "usable": usable,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_content_arrangement(ContentArrangement::Dynamic);
        table.set_width(120);
        table.set_header(["check", "status", "what lanefold sees", "fix"]);
        for c in &checks {
            let status = match c.status {
                Status::Ok => "ok",
                Status::Note => "note",
                Status::Missing => "MISSING",
            };
            table.add_row([c.what, status, &c.detail, &c.fix]);
        }
        println!("{table}");
        println!(
            "backend {}: {}",
            backend,
            if usable {
                "will work"
            } else {
                "cannot work here (see the MISSING lines)"
            }
        );
    }
    if !usable {
        bail!("the {backend} backend cannot work on this machine");
    }
    Ok(())
}
