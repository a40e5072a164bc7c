//! Helpers shared by the command-line tests. Each test binary uses a
//! different subset of them.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A CPU run with the fewest, shortest samples the phases accept.
pub const FAST_CPU: [&str; 8] = [
    "--backend",
    "cpu",
    "--samples",
    "3",
    "--sample-ms",
    "1",
    "--warmup-ms",
    "1",
];

/// Run the `lanefold` binary built for these tests.
pub fn lanefold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lanefold"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run lanefold")
}

/// stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh (removed if present, not created) temporary path for this
/// process, unique per `kind` and `name`.
pub fn tmp(kind: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lanefold-{kind}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// DIR/results.json (or its gzipped copy) as JSON.
pub fn load(dir: &Path) -> Value {
    let text = lanefold_measure::results::read_text(&dir.join("results.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Overwrite DIR/results.json (as a tamperer would), in place of a
/// gzipped copy too.
pub fn save(dir: &Path, v: &Value) {
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(v).unwrap(),
    )
    .unwrap();
    let _ = std::fs::remove_file(dir.join("results.json.gz"));
}

/// The stand-in PyTorch peer (python/fake_peer.py), where python3 can run
/// it; None (and a note) where it cannot.
pub fn fake_peer() -> Option<PathBuf> {
    let python_ok = Command::new("python3")
        .args(["-c", "import json, struct"])
        .status()
        .is_ok_and(|s| s.success());
    if !python_ok {
        eprintln!("no python3 here; skipping");
        return None;
    }
    Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/fake_peer.py"))
}
