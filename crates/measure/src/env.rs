//! The environment a results file records.

use crate::results::Environment;
use sha2::{Digest, Sha256};
use std::process::Command;

/// UTC time as RFC 3339, from the system clock.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn binary_sha256() -> String {
    std::env::current_exe()
        .and_then(std::fs::read)
        .map(|b| format!("{:x}", Sha256::digest(&b)))
        .unwrap_or_else(|_| "unknown".into())
}

/// `nvidia-smi --query-gpu=FIELDS` for GPU 0, when the tool exists.
pub fn nvidia_smi(fields: &str) -> Option<Vec<String>> {
    let out = Command::new("nvidia-smi")
        .args([
            &format!("--query-gpu={fields}"),
            "--format=csv,noheader,nounits",
            "-i",
            "0",
        ])
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(',')
            .map(|s| s.trim().to_string())
            .collect()
    })
}

pub fn host() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `lanefold --version`: the package version and the commit the binary was
/// built from (with the dirty flag), so a copy run elsewhere, where the
/// checkout may be another commit, still names its source.
pub const BUILD_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("LANEFOLD_GIT_SHA"),
    ", dirty: ",
    env!("LANEFOLD_GIT_DIRTY"),
    ")"
);

/// What is known before any case runs; GPU and peer fields are filled in
/// by the caller.
pub fn base_environment(backend: &str, command_line: Vec<String>) -> Environment {
    Environment {
        utc_time: utc_now(),
        host: host(),
        backend: backend.to_string(),
        rustc: env!("LANEFOLD_RUSTC").to_string(),
        git_sha: env!("LANEFOLD_GIT_SHA").to_string(),
        git_dirty: env!("LANEFOLD_GIT_DIRTY") == "true",
        binary_sha256: binary_sha256(),
        command_line,
        ..Default::default()
    }
}

/// The environment of a measurement: the base, the GPU (name, compute
/// capability, L2, UUID, driver) and the PyTorch peer's versions. Clocks
/// are read now; call [`record_end_clocks`] when the run ends.
pub struct EnvironmentCapture {
    pub env: Environment,
    start_clocks: Option<Vec<String>>,
}

const CLOCKS: &str = "clocks.sm,clocks.mem";

pub fn capture(
    cuda: Option<&lanefold_cuda::CudaBackend>,
    peer: Option<&crate::peer::TorchPeer>,
    command_line: Vec<String>,
) -> EnvironmentCapture {
    let mut env = base_environment(if cuda.is_some() { "cuda" } else { "cpu" }, command_line);
    if let Some(c) = cuda {
        let (major, minor) = c.compute_capability();
        env.gpu_name = Some(c.device_name());
        env.compute_capability = Some(format!("{major}.{minor}"));
        env.l2_bytes = Some(c.l2_bytes());
        env.driver = Some(c.driver_version());
        if let Some(v) = nvidia_smi("uuid,driver_version") {
            env.gpu_uuid = v.first().cloned();
            env.driver = Some(format!(
                "{} (CUDA {})",
                v.get(1).cloned().unwrap_or_default(),
                c.driver_version()
            ));
        }
    }
    if let Some(p) = peer {
        let h = p.hello();
        let s = |k: &str| h.get(k).and_then(|v| v.as_str()).map(String::from);
        env.torch = s("torch");
        env.torch_cuda = s("cuda");
        env.liger = s("liger");
        env.quack = s("quack");
        env.python = s("python");
    }
    EnvironmentCapture {
        env,
        start_clocks: nvidia_smi(CLOCKS),
    }
}

impl EnvironmentCapture {
    /// Record SM and memory clocks at the start and now, where nvidia-smi
    /// answers.
    pub fn record_end_clocks(&self, env: &mut Environment) {
        if let (Some(a), Some(b)) = (&self.start_clocks, nvidia_smi(CLOCKS)) {
            let pair = |i: usize| {
                [
                    a.get(i).cloned().unwrap_or_default(),
                    b.get(i).cloned().unwrap_or_default(),
                ]
            };
            env.sm_clock_mhz = Some(pair(0));
            env.mem_clock_mhz = Some(pair(1));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_now_is_rfc3339() {
        let t = super::utc_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T");
    }
}
