//! Records the git commit, a dirty flag and the compiler version, so every
//! results file says which source produced its binary. The flag covers the
//! paths the binary is built from, and the script reruns whenever one of
//! them changes: watching only the git index and HEAD left an edited,
//! unstaged source recorded as clean.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What the binary is built from, relative to the repository root.
const SOURCES: [&str; 4] = ["crates", "tuning", "Cargo.toml", "Cargo.lock"];

fn main() {
    let sha = run("git", &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let mut status = vec![
        "-C",
        "../..",
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
    ];
    status.extend(SOURCES);
    let dirty = run("git", &status).map(|s| !s.is_empty()).unwrap_or(true);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LANEFOLD_GIT_SHA={sha}");
    println!("cargo:rustc-env=LANEFOLD_GIT_DIRTY={dirty}");
    println!("cargo:rustc-env=LANEFOLD_RUSTC={version}");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/index");
    for path in SOURCES {
        println!("cargo:rerun-if-changed=../../{path}");
    }
}
