//! The on-disk kernel cache: `<key>.cubin` plus a sidecar `<key>.sha256`
//! holding the SHA-256 of the binary. Entries are written atomically
//! (temporary file, then rename) and verified on every load; a corrupt or
//! mismatching entry is reported, deleted and reported as a miss.

use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The cache key of a compilation: source, options and architecture.
pub fn compile_key(source: &str, options: &[String], arch: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"lanefold-kernel-v1\0");
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

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn binary_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    pub fn sidecar_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.sha256"))
    }

    /// The verified binary for `key`, or None (absent, or corrupt and now
    /// deleted, with a line on stderr).
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let bin = self.binary_path(key);
        let side = self.sidecar_path(key);
        let has_bin = bin.exists();
        let has_side = side.exists();
        if !has_bin && !has_side {
            return None;
        }
        let problem = match (fs::read(&bin), fs::read_to_string(&side)) {
            (Ok(bytes), Ok(recorded)) => {
                let actual = sha256_hex(&bytes);
                if bytes.is_empty() {
                    "empty binary".to_string()
                } else if recorded.trim() == actual {
                    return Some(bytes);
                } else {
                    format!(
                        "binary hashes to {actual}, sidecar records '{}'",
                        recorded.trim()
                    )
                }
            }
            (Err(e), _) => format!("binary unreadable: {e}"),
            (_, Err(e)) => format!("sidecar unreadable: {e}"),
        };
        self.evict(key, &problem);
        None
    }

    /// Report and delete a bad entry.
    pub fn evict(&self, key: &str, why: &str) {
        eprintln!(
            "lanefold: kernel cache entry {} is corrupt ({why}); deleting it and recompiling",
            self.binary_path(key).display()
        );
        let _ = fs::remove_file(self.binary_path(key));
        let _ = fs::remove_file(self.sidecar_path(key));
    }

    /// Store atomically: binary first, then its sidecar.
    pub fn store(&self, key: &str, bytes: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        atomic_write(&self.binary_path(key), bytes)?;
        atomic_write(
            &self.sidecar_path(key),
            format!("{}\n", sha256_hex(bytes)).as_bytes(),
        )
    }
}

fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let file_name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file_name}.{}.{nanos}.tmp", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
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

    #[test]
    fn store_then_load_round_trips() {
        let dir = temp_dir("roundtrip");
        let c = DiskCache::new(&dir);
        assert!(c.load("k").is_none());
        c.store("k", b"cubin bytes").unwrap();
        assert_eq!(c.load("k").as_deref(), Some(&b"cubin bytes"[..]));
        let side = fs::read_to_string(c.sidecar_path("k")).unwrap();
        assert_eq!(side.trim(), sha256_hex(b"cubin bytes"));
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn corrupt_or_half_written_entries_are_deleted() {
        let dir = temp_dir("corrupt");
        let c = DiskCache::new(&dir);
        c.store("k", b"good").unwrap();
        fs::write(c.binary_path("k"), b"tampered").unwrap();
        assert!(c.load("k").is_none());
        assert!(!c.binary_path("k").exists() && !c.sidecar_path("k").exists());

        // A binary without its sidecar.
        fs::write(c.binary_path("j"), b"orphan").unwrap();
        assert!(c.load("j").is_none());
        assert!(!c.binary_path("j").exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn keys_depend_on_source_options_and_arch() {
        let o = vec!["--fmad=false".to_string()];
        let k = compile_key("src", &o, "sm_90");
        assert_eq!(k.len(), 64);
        assert_ne!(k, compile_key("src2", &o, "sm_90"));
        assert_ne!(k, compile_key("src", &[], "sm_90"));
        assert_ne!(k, compile_key("src", &o, "sm_100"));
        assert_eq!(k, compile_key("src", &o, "sm_90"));
    }
}
