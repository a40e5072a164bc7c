//! The on-disk kernel cache: one file per compile key, `<key>.kernel`,
//! holding a header line `lanefold-kernel/2 <sha256> <length>` and then the
//! binary. Concurrent processes and threads share it safely:
//! - an entry is one file, written under a unique temporary name in the
//!   same directory and renamed into place, so a reader sees a whole entry
//!   or none (a binary and a separate hash file could be seen half-replaced);
//! - every load verifies length and hash; a bad entry is reported, treated
//!   as a miss and deleted, but only if it still holds the bytes that were
//!   judged, checked under the directory's lock file (which every rename
//!   into place also takes), so a good entry just stored by another
//!   process survives.
//!
//! Files of the earlier two-file layout (`<key>.cubin` + `<key>.sha256`)
//! are ignored.

use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The first word of an entry's header line.
const MAGIC: &str = "lanefold-kernel/2";
/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The cache key of a compilation: source, options, architecture and the
/// compiler (NVRTC's `major.minor`), so that builds against different
/// compilers sharing a cache never load each other's binaries.
pub fn compile_key(source: &str, options: &[String], arch: &str, compiler: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"lanefold-kernel-v1\0");
    h.update(compiler.as_bytes());
    h.update(b"\0");
    h.update(source.as_bytes());
    h.update(b"\0");
    for o in options {
        h.update(o.as_bytes());
        h.update(b"\0");
    }
    h.update(arch.as_bytes());
    let digest = h.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `$XDG_CACHE_HOME/lanefold/kernels`, else `$HOME/.cache/lanefold/kernels`.
pub fn default_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("lanefold").join("kernels"))
}

#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

/// An entry file's bytes for `binary`.
fn encode(binary: &[u8]) -> Vec<u8> {
    let mut out = format!("{MAGIC} {} {}\n", sha256_hex(binary), binary.len()).into_bytes();
    out.extend_from_slice(binary);
    out
}

/// The binary an entry file holds, or why it holds none.
fn decode(raw: &[u8]) -> Result<&[u8], String> {
    let Some(newline) = raw.iter().position(|&b| b == b'\n') else {
        return Err(format!("no header line in {} bytes", raw.len()));
    };
    let header = String::from_utf8_lossy(&raw[..newline]);
    let binary = &raw[newline + 1..];
    let fields: Vec<&str> = header.split(' ').collect();
    let [MAGIC, recorded, length] = fields[..] else {
        let shown: String = header.chars().take(80).collect();
        return Err(format!("unknown header '{shown}'"));
    };
    if length.parse::<usize>().ok() != Some(binary.len()) {
        return Err(format!(
            "header records {length} bytes, the file holds {}",
            binary.len()
        ));
    }
    if binary.is_empty() {
        return Err("empty binary".to_string());
    }
    let actual = sha256_hex(binary);
    if actual != recorded {
        return Err(format!(
            "binary hashes to {actual}, header records '{recorded}'"
        ));
    }
    Ok(binary)
}

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file holding `key`'s entry.
    pub fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.kernel"))
    }

    /// The lock file that renames into place and deletions take.
    fn lock_path(&self) -> PathBuf {
        self.dir.join(".lock")
    }

    /// The verified binary for `key`, or None: absent, unreadable, or
    /// corrupt (then deleted); the last two reported on stderr.
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.entry_path(key);
        let raw = match fs::read(&path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                eprintln!(
                    "lanefold: kernel cache entry {} is unreadable ({e}); recompiling",
                    path.display()
                );
                return None;
            }
        };
        match decode(&raw) {
            Ok(binary) => Some(binary.to_vec()),
            Err(why) => {
                self.remove_if(key, &why, |now| now == raw);
                None
            }
        }
    }

    /// Report and delete `key`'s entry if it still holds `binary` (say,
    /// one the driver refused); an entry stored since is kept.
    pub fn evict(&self, key: &str, binary: &[u8], why: &str) {
        self.remove_if(key, why, |now| decode(now).is_ok_and(|b| b == binary));
    }

    /// Under the lock, delete `key`'s entry if `still_bad` holds for the
    /// file's current bytes.
    fn remove_if(&self, key: &str, why: &str, still_bad: impl Fn(&[u8]) -> bool) {
        let path = self.entry_path(key);
        eprintln!(
            "lanefold: kernel cache entry {} is corrupt ({why}); deleting it and recompiling",
            path.display()
        );
        // Without the lock the entry is left; the next store replaces it.
        let Ok(_lock) = lock(&self.lock_path()) else {
            return;
        };
        if fs::read(&path).is_ok_and(|now| still_bad(&now)) {
            let _ = fs::remove_file(&path);
        }
    }

    /// Store atomically: the whole entry to a temporary file of its own,
    /// then (under the lock) renamed into place.
    pub fn store(&self, key: &str, binary: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let path = self.entry_path(key);
        let tmp = write_temporary(&path, &encode(binary))?;
        let renamed = lock(&self.lock_path()).and_then(|guard| {
            let renamed = fs::rename(&tmp, &path);
            drop(guard);
            renamed
        });
        if renamed.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        renamed
    }
}

/// An exclusive advisory lock on `path` (created if absent, never
/// deleted: deleting a lock file lets two holders lock different files),
/// held until the returned file is dropped; the OS releases it if the
/// process dies.
fn lock(path: &Path) -> std::io::Result<fs::File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    fs4::FileExt::lock(&file)?;
    Ok(file)
}

/// Write `bytes` (synced) to a new temporary file beside `path`, named
/// uniquely per process, call and time, and never one that exists already.
fn write_temporary(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let tmp = path.with_file_name(format!(
            ".{file_name}.{}.{}.{nanos}.tmp",
            std::process::id(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = f.write_all(bytes).and_then(|()| f.sync_all());
        if let Err(e) = written {
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        return Ok(tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "lanefold-cache-test-{tag}-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn store_then_load_round_trips() {
        let dir = temp_dir("roundtrip");
        let c = DiskCache::new(&dir);
        assert!(c.load("k").is_none());
        c.store("k", b"cubin bytes").unwrap();
        assert_eq!(c.load("k").as_deref(), Some(&b"cubin bytes"[..]));
        let raw = fs::read(c.entry_path("k")).unwrap();
        let header = format!("lanefold-kernel/2 {} 11\n", sha256_hex(b"cubin bytes"));
        assert!(raw.starts_with(header.as_bytes()));
        // Storing again replaces the entry.
        c.store("k", b"other bytes").unwrap();
        assert_eq!(c.load("k").as_deref(), Some(&b"other bytes"[..]));
        // No temporary files are left behind: the entry and the lock file.
        assert_eq!(names(&dir), vec![".lock", "k.kernel"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn corrupt_or_half_written_entries_are_deleted() {
        let dir = temp_dir("corrupt");
        let c = DiskCache::new(&dir);
        let good = encode(b"good binary");
        let bad: Vec<(&str, Vec<u8>)> = vec![
            ("tampered", {
                let mut b = good.clone();
                *b.last_mut().unwrap() ^= 1;
                b
            }),
            ("truncated", good[..good.len() - 3].to_vec()),
            (
                "header only",
                good[..good.iter().position(|&b| b == b'\n').unwrap()].to_vec(),
            ),
            ("empty file", vec![]),
            ("empty binary", encode(b"")),
            ("foreign", b"\x7fELF not ours".to_vec()),
        ];
        for (what, bytes) in bad {
            fs::write(c.entry_path("k"), &bytes).unwrap();
            assert!(c.load("k").is_none(), "{what}");
            assert!(!c.entry_path("k").exists(), "{what}");
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn eviction_keeps_an_entry_stored_since() {
        let dir = temp_dir("evict");
        let c = DiskCache::new(&dir);
        c.store("k", b"refused").unwrap();
        // Another process replaced the entry after this one read it.
        c.store("k", b"fresh").unwrap();
        c.evict("k", b"refused", "the driver refused it");
        assert_eq!(c.load("k").as_deref(), Some(&b"fresh"[..]));
        c.evict("k", b"fresh", "the driver refused it");
        assert!(c.load("k").is_none());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn keys_depend_on_source_options_arch_and_compiler() {
        let o = vec!["--fmad=false".to_string()];
        let k = compile_key("src", &o, "sm_90", "13.0");
        assert_eq!(k.len(), 64);
        assert_ne!(k, compile_key("src2", &o, "sm_90", "13.0"));
        assert_ne!(k, compile_key("src", &[], "sm_90", "13.0"));
        assert_ne!(k, compile_key("src", &o, "sm_100", "13.0"));
        assert_ne!(k, compile_key("src", &o, "sm_90", "12.8"));
        assert_eq!(k, compile_key("src", &o, "sm_90", "13.0"));
    }
}
