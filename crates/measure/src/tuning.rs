//! The tuning cache: search winners keyed by device, operator, dtype and
//! shape bucket, in one JSON file (`$XDG_CACHE_HOME/lanefold/tuning.json`,
//! else `~/.cache/lanefold/tuning.json`; `LANEFOLD_TUNING_CACHE` overrides).
//!
//! Writes are read-modify-write under an advisory lock (`flock` on
//! `tuning.json.lock`, which the OS releases when its holder exits or dies,
//! so no lock is ever stale) and land atomically (temporary file + rename),
//! so processes and threads tuning at once keep all their entries and a
//! reader never sees a partial file. A corrupt file is reported on stderr
//! and treated as empty (then rewritten on the next record), never fatal.

use crate::search::Objective;
use anyhow::{Context, Result};
use lanefold_ir::{DType, Operator};
use lanefold_plan::{LayoutRequest, Shape};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const TUNING_SCHEMA: &str = "lanefold-tuning/1";
/// The device key of the CPU executor.
pub const CPU_DEVICE: &str = "cpu";
/// Give up waiting for the lock after this long.
const LOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// The device key of a CUDA device: name and compute capability.
pub fn cuda_device_key(name: &str, major: u32, minor: u32) -> String {
    format!("{name} cc{major}.{minor}")
}

/// The device key of an open CUDA backend, or `cpu` for None.
pub fn device_key(cuda: Option<&lanefold_cuda::CudaBackend>) -> String {
    match cuda {
        Some(c) => {
            let (major, minor) = c.compute_capability();
            cuda_device_key(&c.device_name(), major, minor)
        }
        None => CPU_DEVICE.to_string(),
    }
}

/// Rows bucket: the next power of two of the row count.
pub fn rows_bucket(rows: usize) -> usize {
    rows.max(1).next_power_of_two()
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TuningKey {
    pub device: String,
    pub op: String,
    pub dtype: String,
    /// The rows bucket, or `*` for a batch-invariant entry.
    pub rows: String,
    /// Row length, exact.
    pub n: usize,
}

impl TuningKey {
    pub fn new(
        device: &str,
        op: Operator,
        dtype: DType,
        shape: Shape,
        batch_invariant: bool,
    ) -> TuningKey {
        TuningKey {
            device: device.to_string(),
            op: op.name().to_string(),
            dtype: dtype.name().to_string(),
            rows: if batch_invariant {
                "*".to_string()
            } else {
                rows_bucket(shape.rows).to_string()
            },
            n: shape.n,
        }
    }

    /// `device|op|dtype|rows|n`: the key in the JSON file.
    pub fn text(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}",
            self.device, self.op, self.dtype, self.rows, self.n
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningEntry {
    pub key: TuningKey,
    /// The winner's recorded request (what `run` and `demo` will plan).
    pub request: LayoutRequest,
    pub describe: String,
    pub objective: Objective,
    /// The winner's fresh objective p50, µs per op.
    pub p50_us: f64,
    pub source_sha256: String,
    /// The shape the winner was measured on.
    pub shape: String,
    pub batch_invariant: bool,
    pub recorded_utc: String,
    /// The search results directory the entry came from.
    pub results: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    schema: String,
    entries: BTreeMap<String, TuningEntry>,
}

pub struct TuningCache {
    path: PathBuf,
    entries: BTreeMap<String, TuningEntry>,
    /// Problems met reading the file (also printed on stderr).
    pub warnings: Vec<String>,
}

/// Read the file: entries, or empty with a warning when unreadable or
/// corrupt. A missing file is simply empty.
fn read_entries(path: &Path) -> (BTreeMap<String, TuningEntry>, Option<String>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (BTreeMap::new(), None),
        Err(e) => {
            return (
                BTreeMap::new(),
                Some(format!(
                    "warning: tuning cache {} unreadable ({e}); ignoring it",
                    path.display()
                )),
            )
        }
    };
    match serde_json::from_str::<CacheFile>(&text) {
        Ok(f) if f.schema == TUNING_SCHEMA => (f.entries, None),
        Ok(f) => (
            BTreeMap::new(),
            Some(format!(
                "warning: tuning cache {} has schema {:?}, expected {TUNING_SCHEMA}; ignoring it",
                path.display(),
                f.schema
            )),
        ),
        Err(e) => (
            BTreeMap::new(),
            Some(format!(
                "warning: tuning cache {} is corrupt ({e}); ignoring it",
                path.display()
            )),
        ),
    }
}

/// The exclusive lock on `<path>.lock`, held until the file is dropped.
/// The lock file is never deleted: a waiter could otherwise lock the
/// deleted file while a newcomer locks a new one, and both would hold it.
fn lock(path: &Path) -> Result<std::fs::File> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock = path.with_file_name(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .with_context(|| format!("open the lock {}", lock.display()))?;
    let started = Instant::now();
    loop {
        match fs4::FileExt::try_lock(&file) {
            Ok(()) => return Ok(file),
            Err(fs4::TryLockError::WouldBlock) if started.elapsed() < LOCK_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(fs4::TryLockError::WouldBlock) => anyhow::bail!(
                "timed out after {} s waiting for the lock {} (another lanefold is writing the tuning cache)",
                LOCK_TIMEOUT.as_secs(),
                lock.display()
            ),
            Err(fs4::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("lock {}", lock.display()))
            }
        }
    }
}

/// Temporary file + rename; the temporary name is unique per process,
/// thread and call.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("tuning"),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    Ok(())
}

impl TuningCache {
    /// `LANEFOLD_TUNING_CACHE`, else `$XDG_CACHE_HOME/lanefold/tuning.json`,
    /// else `$HOME/.cache/lanefold/tuning.json`.
    pub fn default_path() -> Option<PathBuf> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(p) = var("LANEFOLD_TUNING_CACHE") {
            return Some(PathBuf::from(p));
        }
        let base = var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("lanefold").join("tuning.json"))
    }

    /// Open (never fails: a missing file is empty, an unreadable or corrupt
    /// one is reported on stderr and ignored).
    pub fn open(path: &Path) -> TuningCache {
        let (entries, warning) = read_entries(path);
        if let Some(w) = &warning {
            eprintln!("{w}");
        }
        TuningCache {
            path: path.to_path_buf(),
            entries,
            warnings: warning.into_iter().collect(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn lookup(&self, key: &TuningKey) -> Option<LayoutRequest> {
        self.entry(key).map(|e| e.request)
    }

    pub fn entry(&self, key: &TuningKey) -> Option<&TuningEntry> {
        self.entries.get(&key.text())
    }

    pub fn entries(&self) -> impl Iterator<Item = &TuningEntry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Record an entry: under the lock, re-read the file (entries other
    /// processes wrote meanwhile are kept), insert, write atomically.
    pub fn record(&mut self, key: &TuningKey, mut entry: TuningEntry) -> Result<()> {
        entry.key = key.clone();
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let _guard = lock(&self.path)?;
        let (mut entries, warning) = read_entries(&self.path);
        if let Some(w) = warning {
            eprintln!("{w} (it will be rewritten)");
            self.warnings.push(w);
        }
        entries.insert(key.text(), entry);
        let file = CacheFile {
            schema: TUNING_SCHEMA.to_string(),
            entries,
        };
        let text = serde_json::to_string_pretty(&file)?;
        write_atomically(&self.path, text.as_bytes())
            .with_context(|| format!("write {}", self.path.display()))?;
        self.entries = file.entries;
        Ok(())
    }
}

/// The cached winner for a problem on `device` (see [`device_key`]), from
/// the default cache file; None when there is no file, no entry or no
/// cache directory. With `batch_invariant` only the rows-independent
/// (`*`) entry is used.
pub fn cached_request(
    device: &str,
    op: Operator,
    dtype: DType,
    shape: Shape,
    batch_invariant: bool,
) -> Option<LayoutRequest> {
    let path = TuningCache::default_path()?;
    if !path.exists() {
        return None;
    }
    TuningCache::open(&path).lookup(&TuningKey::new(device, op, dtype, shape, batch_invariant))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lanefold-tuning-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d.join("sub").join("tuning.json")
    }

    fn key(rows: usize, n: usize) -> TuningKey {
        TuningKey::new(
            CPU_DEVICE,
            Operator::Rmsnorm,
            DType::F32,
            Shape::new(rows, n).unwrap(),
            false,
        )
    }

    fn entry(w: u32) -> TuningEntry {
        TuningEntry {
            key: key(1, 1),
            request: LayoutRequest {
                workers: w,
                pack: 2,
                unroll: 1,
                ..Default::default()
            },
            describe: format!("W={w} V=2"),
            objective: Objective::HostWall,
            p50_us: 1.5,
            source_sha256: "0".repeat(64),
            shape: "4x64".into(),
            batch_invariant: false,
            recorded_utc: "2025-01-01T00:00:00Z".into(),
            results: None,
        }
    }

    #[test]
    fn keys_bucket_rows_and_batch_invariance_drops_them() {
        assert_eq!(rows_bucket(17), 32);
        assert_eq!(rows_bucket(1), 1);
        assert_eq!(rows_bucket(1024), 1024);
        assert_eq!(key(17, 257), key(32, 257));
        assert_ne!(key(17, 257), key(33, 257));
        assert_ne!(key(17, 257), key(17, 256));
        let inv = |rows| {
            TuningKey::new(
                CPU_DEVICE,
                Operator::Rmsnorm,
                DType::F32,
                Shape::new(rows, 64).unwrap(),
                true,
            )
        };
        assert_eq!(inv(1), inv(4096));
        assert_eq!(inv(7).rows, "*");
        assert_eq!(
            cuda_device_key("NVIDIA H200", 9, 0),
            "NVIDIA H200 cc9.0".to_string()
        );
    }

    #[test]
    fn round_trip() {
        let path = tmp("roundtrip");
        let mut c = TuningCache::open(&path);
        assert!(c.is_empty() && c.warnings.is_empty());
        c.record(&key(4, 64), entry(32)).unwrap();
        c.record(&key(3, 257), entry(128)).unwrap();
        let again = TuningCache::open(&path);
        assert!(again.warnings.is_empty());
        assert_eq!(again.len(), 2);
        assert_eq!(again.lookup(&key(4, 64)).unwrap().workers, 32);
        assert_eq!(
            again.lookup(&key(3, 64)).unwrap().workers,
            32,
            "same bucket"
        );
        assert_eq!(again.lookup(&key(3, 257)).unwrap().workers, 128);
        assert_eq!(again.lookup(&key(8, 64)), None);
        assert_eq!(again.entry(&key(4, 64)).unwrap().key, key(4, 64));
        // No temporary file is left behind; the lock file stays.
        let mut left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["tuning.json", "tuning.json.lock"]);
    }

    #[test]
    fn a_corrupt_file_is_reported_ignored_and_rewritten() {
        let path = tmp("corrupt");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{\"schema\": \"lanefold-tuning/1\", \"entries\": {").unwrap();
        let mut c = TuningCache::open(&path);
        assert!(c.is_empty());
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("corrupt"), "{:?}", c.warnings);
        c.record(&key(4, 64), entry(64)).unwrap();
        let again = TuningCache::open(&path);
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
        assert_eq!(again.lookup(&key(4, 64)).unwrap().workers, 64);
    }

    #[test]
    fn two_writers_at_once_keep_every_entry() {
        let path = tmp("concurrent");
        let per = 25;
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    // Each writer has its own view, opened before the other
                    // wrote anything: a writer that did not re-read under
                    // the lock would drop the other's entries.
                    let mut c = TuningCache::open(&path);
                    for i in 0..per {
                        c.record(&key(1, 1000 * (t + 1) + i), entry(32)).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let c = TuningCache::open(&path);
        assert_eq!(c.len(), 2 * per);
    }

    #[test]
    fn a_lock_file_left_by_a_dead_process_does_not_block() {
        // An earlier version's lock (a file whose existence was the lock),
        // fresh, as left by a process killed while writing: it blocked
        // every writer for a minute, then was stolen.
        let path = tmp("leftover");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let lock_path = path.with_file_name("tuning.json.lock");
        std::fs::write(&lock_path, "12345\n").unwrap();
        let started = Instant::now();
        let mut c = TuningCache::open(&path);
        c.record(&key(4, 64), entry(32)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(TuningCache::open(&path).len(), 1);
    }

    #[test]
    fn a_lock_held_long_is_never_stolen_from_its_holder() {
        let path = tmp("held");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let held = lock(&path).unwrap();
        // As if held for two minutes (a stopped or slow writer): a lock
        // judged stale by age was stolen, and two writers overlapped.
        std::fs::File::options()
            .write(true)
            .open(path.with_file_name("tuning.json.lock"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(120))
            .unwrap();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                TuningCache::open(&path)
                    .record(&key(4, 64), entry(32))
                    .unwrap()
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(!path.exists(), "the writer did not wait for the lock");
        drop(held);
        writer.join().unwrap();
        assert_eq!(TuningCache::open(&path).len(), 1);
    }
}
