//! `lanefold doctor` reports what this machine has and exits as documented:
//! 0 when the asked backend works, 1 when it cannot; `--json` is one JSON
//! object. CI has no GPU, so there it checks the CPU-only report; on a GPU
//! machine the same test checks the device line.

mod common;
use common::{lanefold, text};

#[test]
fn doctor_reports_the_machine_and_exits_by_the_asked_backend() {
    let gpu = lanefold_cuda::probe_driver().is_ok() && lanefold_cuda::nvrtc_version().is_some();
    let o = lanefold(&["doctor"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    for what in ["CUDA driver", "NVRTC", "kernel cache", "tuning cache"] {
        assert!(out.contains(what), "{out}");
    }
    let cpu = lanefold(&["doctor", "--backend", "cpu"]);
    assert!(cpu.status.success(), "{}", text(&cpu));

    let o = lanefold(&["doctor", "--backend", "cuda", "--json"]);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON object");
    assert_eq!(v["usable"].as_bool(), Some(gpu), "{v}");
    if gpu {
        assert!(o.status.success(), "{}", text(&o));
        assert!(out.contains("GPU resources"), "{out}");
    } else {
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            text(&o).contains("cuda backend cannot work"),
            "{}",
            text(&o)
        );
        assert!(out.contains("backend cpu: will work"), "{out}");
        let driver = &v["checks"][0];
        assert_eq!(driver["what"], "CUDA driver");
        assert_eq!(driver["status"], "missing");
        assert!(!driver["fix"].as_str().unwrap().is_empty());
    }
}
