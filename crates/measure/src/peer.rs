//! The PyTorch peer: `python/torch_peer.py` run as a subprocess, spoken to
//! in JSON lines (one request per line on its stdin, one reply per line on
//! its stdout; its stderr is forwarded to ours, prefixed, and its tail kept
//! for error messages). It loads the same `.npy` inputs, runs PyTorch
//! (eager, `torch.compile`, Liger-Kernel or Quack) through the same three phases
//! and writes its outputs for validation.

use crate::phases::{BatchSample, SingleCall};
use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the peer runs the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerMode {
    /// PyTorch eager.
    Eager,
    /// `torch.compile` (default mode; compilation excluded from timing).
    Compile,
    /// Liger-Kernel's functional operators, where they exist.
    Liger,
    /// Quack's (quack-kernels, CuTe DSL) kernels, where they exist
    /// with lanefold's semantics.
    Quack,
}

impl PeerMode {
    pub const ALL: [PeerMode; 4] = [
        PeerMode::Eager,
        PeerMode::Compile,
        PeerMode::Liger,
        PeerMode::Quack,
    ];

    /// The side name results files record for this mode (bench and replay).
    pub const fn side(self) -> &'static str {
        match self {
            PeerMode::Eager => "torch-eager",
            PeerMode::Compile => "torch-compile",
            PeerMode::Liger => "torch-liger",
            PeerMode::Quack => "torch-quack",
        }
    }

    /// The mode a side name records, if it is a peer side.
    pub fn of_side(name: &str) -> Option<PeerMode> {
        PeerMode::ALL.into_iter().find(|m| m.side() == name)
    }
}

impl std::fmt::Display for PeerMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerMode::Eager => "eager",
            PeerMode::Compile => "compile",
            PeerMode::Liger => "liger",
            PeerMode::Quack => "quack",
        })
    }
}

impl std::str::FromStr for PeerMode {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<PeerMode> {
        PeerMode::ALL
            .into_iter()
            .find(|m| m.to_string() == s)
            .ok_or_else(|| {
                anyhow!("unknown peer mode {s:?} (expected eager, compile, liger or quack)")
            })
    }
}

/// One case for the peer. Paths must be absolute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerRequest {
    /// Operator name as lanefold spells it (`rmsnorm`, `cross_entropy`, …).
    pub op: String,
    /// `f32`, `bf16` or `f16`.
    pub dtype: String,
    pub rows: usize,
    pub n: usize,
    /// Input sets, each input name -> `.npy` path: one set for L2 warm,
    /// several for L2 cold (call `k` of a batch uses set `k % sets`). (The
    /// script also accepts a single `"inputs"` object instead.)
    pub input_sets: Vec<BTreeMap<String, PathBuf>>,
    /// Where the peer writes `<output>.npy`.
    pub outputs_dir: PathBuf,
    /// `eager`, `compile`, `liger` or `quack` (see [`PeerMode`]).
    pub mode: String,
    pub samples: usize,
    /// Single calls to time ([`crate::phases::single_calls`]); scripts
    /// that predate it take `samples`.
    pub single_samples: usize,
    pub sample_ms: f64,
    pub warmup_ms: f64,
}

/// The peer's measurements of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerReply {
    pub mode: String,
    /// Output name -> `.npy` written (a final call on input set 0).
    pub outputs: BTreeMap<String, PathBuf>,
    pub gpu: Vec<BatchSample>,
    /// Was the gpu phase replayed as a CUDA graph (false: eager calls
    /// between events, e.g. when capture failed; `notes` says why)?
    pub gpu_graph: bool,
    /// Host time of each gpu sample's enqueue (the graph replay call), µs.
    #[serde(default)]
    pub gpu_enqueue_us: Vec<f64>,
    pub e2e: Vec<BatchSample>,
    /// Host time to enqueue each e2e sample's batch, µs.
    pub e2e_enqueue_us: Vec<f64>,
    pub single: Vec<SingleCall>,
    /// Free-text remarks from the peer (fallbacks, compile time, the
    /// Liger or Quack call used).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The peer answered `ok: false` for a case (it stays usable).
#[derive(Debug, thiserror::Error)]
#[error("PyTorch peer refused the case: {0}")]
pub struct PeerRefused(pub String);

/// How many lines of the peer's stderr are kept for error messages.
const STDERR_TAIL: usize = 40;

/// A running peer process.
pub struct TorchPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    hello: serde_json::Value,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    python: String,
    /// Set once the process has died or the protocol broke.
    broken: Option<String>,
}

/// Where `python/torch_peer.py` is: `$LANEFOLD_TORCH_PEER` if set, else the
/// first `python/torch_peer.py` found in the executable's ancestors (e.g.
/// the repository above `target/release/`) or the current directory and
/// its ancestors; else the relative path `python/torch_peer.py`.
pub fn default_script() -> PathBuf {
    if let Some(p) = std::env::var_os("LANEFOLD_TORCH_PEER") {
        return PathBuf::from(p);
    }
    let rel = Path::new("python").join("torch_peer.py");
    let mut roots = vec![];
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    roots
        .into_iter()
        .map(|r| r.join(&rel))
        .find(|p| p.is_file())
        .unwrap_or(rel)
}

fn unavailable(python: &str, why: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("PyTorch peer unavailable (interpreter {python}): {why}")
}

impl TorchPeer {
    /// Start `python -u script` and say hello. Errors (never panics) when
    /// the interpreter cannot start, PyTorch cannot be imported or sees no
    /// CUDA device, or the script does not answer.
    pub fn start(script: &Path, python: &str) -> anyhow::Result<TorchPeer> {
        if !script.is_file() {
            bail!(
                "PyTorch peer unavailable: script {} not found (set LANEFOLD_TORCH_PEER or run from the repository)",
                script.display()
            );
        }
        let mut child = Command::new(python)
            .arg("-u")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| unavailable(python, format!("cannot start {python}: {e}")))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("PyTorch peer unavailable: no pipes to {python}");
        };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stderr) = stderr {
            let tail = stderr_tail.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("[torch-peer] {line}");
                    if let Ok(mut t) = tail.lock() {
                        if t.len() == STDERR_TAIL {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }
            });
        }
        let mut peer = TorchPeer {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            hello: serde_json::Value::Null,
            stderr_tail,
            python: python.to_string(),
            broken: None,
        };
        let hello = peer
            .exchange(&serde_json::json!({"cmd": "hello"}))
            .map_err(|e| unavailable(python, format!("{e:#}")))?;
        if hello.get("ok") != Some(&serde_json::Value::Bool(true)) {
            let why = hello
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("the peer said no")
                .to_string();
            return Err(unavailable(python, why));
        }
        peer.hello = hello;
        Ok(peer)
    }

    /// The peer's hello reply: torch, cuda, device, liger, quack, python
    /// versions.
    pub fn hello(&self) -> &serde_json::Value {
        &self.hello
    }

    /// The peer's interpreter.
    pub fn python(&self) -> &str {
        &self.python
    }

    /// Run one case. A refusal (`ok: false`) is an error whose root is
    /// [`PeerRefused`]; the peer stays usable. A dead peer is an error too,
    /// and every later call fails at once.
    pub fn run(&mut self, request: &PeerRequest) -> anyhow::Result<PeerReply> {
        let request_json = serde_json::to_value(request).context("encoding the peer request")?;
        let reply = self.exchange(&request_json)?;
        if reply.get("ok") != Some(&serde_json::Value::Bool(true)) {
            let why = reply
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("no reason given")
                .to_string();
            return Err(PeerRefused(format!(
                "{} {} {} {}x{}: {why}",
                request.mode, request.op, request.dtype, request.rows, request.n
            ))
            .into());
        }
        serde_json::from_value(reply).context("the PyTorch peer's reply does not fit the protocol")
    }

    fn stderr_tail(&self) -> String {
        // Give the forwarding thread a moment to drain the pipe.
        std::thread::sleep(Duration::from_millis(100));
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        if tail.is_empty() {
            String::new()
        } else {
            format!("\n--- peer stderr (last lines) ---\n{}", tail.join("\n"))
        }
    }

    /// Send one JSON line, read one JSON line back.
    fn exchange(&mut self, message: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        if let Some(why) = &self.broken {
            bail!("the PyTorch peer is no longer usable: {why}");
        }
        match self.exchange_inner(message) {
            Ok(v) => Ok(v),
            Err(e) => {
                let status = match self.child.try_wait() {
                    Ok(Some(s)) => format!(" (peer exited: {s})"),
                    _ => String::new(),
                };
                let msg = format!("{e:#}{status}");
                self.broken = Some(msg.clone());
                Err(anyhow!("{msg}{}", self.stderr_tail()))
            }
        }
    }

    fn exchange_inner(&mut self, message: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("the peer's stdin is closed"))?;
        let mut line = serde_json::to_string(message)?;
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .context("writing to the PyTorch peer")?;
        loop {
            let mut reply = String::new();
            let n = self
                .stdout
                .read_line(&mut reply)
                .context("reading from the PyTorch peer")?;
            if n == 0 {
                bail!("the PyTorch peer closed its output without replying");
            }
            let reply = reply.trim();
            if reply.is_empty() {
                continue;
            }
            if !reply.starts_with('{') {
                // Not protocol: something wrote to the peer's stdout anyway.
                eprintln!("[torch-peer stdout] {reply}");
                continue;
            }
            return serde_json::from_str(reply)
                .with_context(|| format!("the PyTorch peer replied with bad JSON: {reply}"));
        }
    }
}

impl Drop for TorchPeer {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"{\"cmd\": \"quit\"}\n");
            let _ = stdin.flush();
            // Dropping stdin closes it: end of input also ends the peer.
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The PyTorch peer as a process that is replaced where PyTorch keeps
/// device memory it will not give back: after a refusal for want of
/// memory, and after a case whose CUDA graph capture failed (PyTorch
/// without the fix of pytorch/pytorch#190348 keeps a failed capture's
/// private pool until the process exits; after Liger's uncapturable
/// cross-entropy gradients the peer held ~65 GB that `empty_cache` did not
/// return).
pub struct PeerProcess {
    peer: Option<TorchPeer>,
    script: PathBuf,
    python: String,
    /// Why the last restart failed; every later call says so.
    broken: Option<String>,
}

impl PeerProcess {
    pub fn start(script: &Path, python: &str) -> anyhow::Result<PeerProcess> {
        Ok(PeerProcess {
            peer: Some(TorchPeer::start(script, python)?),
            script: script.to_path_buf(),
            python: python.to_string(),
            broken: None,
        })
    }

    /// The running peer (None only after a failed restart).
    pub fn peer(&self) -> Option<&TorchPeer> {
        self.peer.as_ref()
    }

    fn running(&mut self) -> anyhow::Result<&mut TorchPeer> {
        let why = self.broken.clone();
        self.peer.as_mut().ok_or_else(|| {
            anyhow!(
                "the PyTorch peer could not be restarted: {}",
                why.unwrap_or_default()
            )
        })
    }

    /// A fresh process in place of this one; the old one ends first, so
    /// its memory is the driver's again.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        drop(self.peer.take());
        match TorchPeer::start(&self.script, &self.python) {
            Ok(peer) => {
                self.peer = Some(peer);
                Ok(())
            }
            Err(e) => {
                self.broken = Some(format!("{e:#}"));
                Err(e)
            }
        }
    }

    /// `request` run by the peer, restarted and run once more where it
    /// was refused for want of device memory; after a reply whose capture
    /// failed, the peer is restarted for the next case. `say` reports
    /// each restart.
    pub fn run(
        &mut self,
        request: &PeerRequest,
        say: &dyn Fn(String),
    ) -> anyhow::Result<PeerReply> {
        let mut result = self.running()?.run(request);
        if result.as_ref().is_err_and(out_of_memory) {
            say(format!(
                "{} ran out of device memory; restarting the PyTorch peer and trying once more",
                request.mode
            ));
            self.restart()?;
            result = self.running()?.run(request);
        }
        if result.as_ref().is_ok_and(|r| !r.gpu_graph) {
            say(format!(
                "{}'s CUDA graph capture failed; restarting the PyTorch peer, which would keep \
                 the capture's memory",
                request.mode
            ));
            // A failed restart costs the later cases, not this one's reply.
            let _ = self.restart();
        }
        result
    }
}

/// Whether the peer refused a case for want of device memory.
pub fn out_of_memory(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<PeerRefused>()
            .is_some_and(|r| r.0.contains("OutOfMemoryError"))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/torch_peer.py")
    }

    #[test]
    fn an_out_of_memory_refusal_is_told_apart_from_other_refusals() {
        let oom = PeerRefused(
            "eager cross_entropy_backward bf16 4096x152064: OutOfMemoryError: CUDA out of memory"
                .into(),
        );
        assert!(out_of_memory(&anyhow::Error::from(oom).context("case 3")));
        let other = PeerRefused("liger sum f32 65536x8: no sum operator".into());
        assert!(!out_of_memory(&anyhow::Error::from(other)));
        assert!(!out_of_memory(&anyhow!("OutOfMemoryError")));
    }

    fn has(python: &str, module: &str) -> bool {
        Command::new(python)
            .args(["-c", &format!("import {module}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    #[test]
    fn without_torch_start_is_a_clear_error() {
        if !has("python3", "sys") {
            eprintln!("no python3 here; skipping");
            return;
        }
        match TorchPeer::start(&script(), "python3") {
            Ok(peer) => {
                // A machine with PyTorch and a GPU: the peer must work.
                assert!(has("python3", "torch"));
                assert!(peer.hello()["torch"].is_string(), "{}", peer.hello());
            }
            Err(e) => {
                let msg = format!("{e:#}");
                eprintln!("{msg}");
                assert!(msg.contains("PyTorch peer unavailable"), "{msg}");
                if !has("python3", "torch") {
                    assert!(msg.contains("import torch failed"), "{msg}");
                }
            }
        }
    }

    #[test]
    fn missing_python_or_script_is_an_error() {
        let e = TorchPeer::start(&script(), "/nonexistent/python3-lanefold")
            .err()
            .expect("no such interpreter");
        assert!(
            format!("{e:#}").contains("PyTorch peer unavailable"),
            "{e:#}"
        );
        let e = TorchPeer::start(Path::new("/nonexistent/peer.py"), "python3")
            .err()
            .expect("no such script");
        assert!(format!("{e:#}").contains("not found"), "{e:#}");
    }

    #[test]
    fn default_script_finds_the_repository_copy() {
        // Tests run with the crate directory as cwd; the ancestors search
        // reaches the workspace root.
        if std::env::var_os("LANEFOLD_TORCH_PEER").is_none() {
            let p = default_script();
            assert!(p.is_file(), "{}", p.display());
            assert!(p.ends_with("python/torch_peer.py"));
        }
    }

    fn request() -> PeerRequest {
        PeerRequest {
            op: "rmsnorm".into(),
            dtype: "bf16".into(),
            rows: 64,
            n: 4096,
            input_sets: vec![cold_set("a")],
            outputs_dir: PathBuf::from("/abs/out"),
            mode: PeerMode::Eager.to_string(),
            samples: 3,
            single_samples: 15,
            sample_ms: 20.0,
            warmup_ms: 100.0,
        }
    }

    #[test]
    fn request_encodes_as_the_protocol_says() {
        let v = serde_json::to_value(request()).unwrap();
        assert_eq!(v["op"], "rmsnorm");
        assert_eq!(v["mode"], "eager");
        assert_eq!(
            (v["samples"].as_u64(), v["single_samples"].as_u64()),
            (Some(3), Some(15))
        );
        assert_eq!(v["input_sets"][0]["x"], "/abs/a/x.npy");
        let mut cold = request();
        cold.input_sets.push(cold_set("b"));
        let v = serde_json::to_value(&cold).unwrap();
        assert_eq!(v["input_sets"][1]["x"], "/abs/b/x.npy");
    }

    fn cold_set(d: &str) -> BTreeMap<String, PathBuf> {
        [("x".to_string(), PathBuf::from(format!("/abs/{d}/x.npy")))].into()
    }

    /// `python/fake_peer.py`: a stand-in peer speaking the protocol with
    /// the standard library only (shared with the replay tests).
    pub(crate) fn fake_script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/fake_peer.py")
    }

    fn fake_peer() -> Option<TorchPeer> {
        if !has("python3", "json") {
            return None;
        }
        Some(TorchPeer::start(&fake_script(), "python3").unwrap())
    }

    #[test]
    fn protocol_round_trip_with_a_fake_peer() {
        let Some(mut peer) = fake_peer() else {
            return;
        };
        assert_eq!(peer.hello()["torch"], "fake");
        let mut req = request();
        req.op = "sum".into();
        let reply = peer.run(&req).unwrap();
        assert_eq!(reply.mode, "eager");
        assert!(reply.gpu_enqueue_us.is_empty());
        assert_eq!(reply.outputs["y"], PathBuf::from("/abs/out/y.npy"));
        assert_eq!(reply.gpu[0].per_op_us(), 20.0);
        assert!(reply.gpu_graph);
        assert_eq!(reply.single[0].gpu_us, Some(2.0));
        assert!(reply.notes.is_empty());
        // A refusal is an error, and the peer stays usable.
        let e = peer.run(&request()).unwrap_err();
        assert!(e.downcast_ref::<PeerRefused>().is_some(), "{e:#}");
        assert!(format!("{e:#}").contains("only sum"), "{e:#}");
        assert!(peer.run(&req).is_ok());
        // A dead peer is an error with its stderr, then stays dead.
        req.op = "die".into();
        let e = format!("{:#}", peer.run(&req).unwrap_err());
        assert!(e.contains("closed its output"), "{e}");
        assert!(e.contains("dying on purpose"), "{e}");
        req.op = "sum".into();
        let e = format!("{:#}", peer.run(&req).unwrap_err());
        assert!(e.contains("no longer usable"), "{e}");
        // Other modes answer too; liger and quack are refused as when not
        // installed.
        let mut peer = fake_peer().unwrap();
        req.mode = PeerMode::Compile.to_string();
        assert_eq!(peer.run(&req).unwrap().mode, "compile");
        for mode in [PeerMode::Liger, PeerMode::Quack] {
            req.mode = mode.to_string();
            let e = format!("{:#}", peer.run(&req).unwrap_err());
            assert!(e.contains("not installed"), "{e}");
        }
    }

    /// The real script, without Quack: a quack case is refused with a
    /// reason naming Quack (checked before torch and the device, so on any
    /// machine), and the peer keeps answering.
    #[test]
    fn quack_mode_is_refused_clearly_without_quack() {
        if !has("python3", "json") || has("python3", "quack") {
            eprintln!("no python3, or Quack is importable here; skipping");
            return;
        }
        let mut child = Command::new("python3")
            .arg("-u")
            .arg(script())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut ask = |v: serde_json::Value| -> serde_json::Value {
            writeln!(stdin, "{v}").unwrap();
            stdin.flush().unwrap();
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            serde_json::from_str(&line).unwrap()
        };
        let mut req = serde_json::to_value(request()).unwrap();
        req["mode"] = PeerMode::Quack.to_string().into();
        let reply = ask(req);
        assert_eq!(reply["ok"], false, "{reply}");
        let why = reply["error"].as_str().unwrap();
        assert!(
            why.contains("Quack") && why.contains("not installed"),
            "{why}"
        );
        let hello = ask(serde_json::json!({"cmd": "hello"}));
        if hello["ok"] == true {
            assert!(hello["quack"].is_null(), "{hello}");
        }
        writeln!(stdin, "{{\"cmd\": \"quit\"}}").unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn side_names_and_modes_round_trip() {
        for m in PeerMode::ALL {
            assert_eq!(PeerMode::of_side(m.side()), Some(m));
            assert_eq!(m.to_string().parse::<PeerMode>().unwrap(), m);
        }
        assert_eq!(PeerMode::Eager.side(), "torch-eager");
        assert_eq!(PeerMode::Quack.side(), "torch-quack");
        assert_eq!("quack".parse::<PeerMode>().unwrap(), PeerMode::Quack);
        assert_eq!(
            serde_json::to_value(PeerMode::Quack).unwrap(),
            serde_json::json!("quack")
        );
        assert_eq!(PeerMode::of_side("lanefold"), None);
        assert!("fast".parse::<PeerMode>().is_err());
    }
}
