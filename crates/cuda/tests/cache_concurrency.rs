//! Two processes (this test binary, run twice as children), each with
//! several threads, store and load the same kernel cache directory at once,
//! with fake binaries: no GPU or NVRTC needed.

use lanefold_cuda::DiskCache;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_DIR: &str = "LANEFOLD_TEST_KERNEL_CACHE_CHILD_DIR";
const CHILD_ID: &str = "LANEFOLD_TEST_KERNEL_CACHE_CHILD_ID";
const PROCESSES: usize = 2;
const THREADS: usize = 4;
const ROUNDS: usize = 6;
const KEYS: usize = 24;

fn key(round: usize, i: usize) -> String {
    format!("r{round}k{i:02}")
}

/// The fake binary writer `writer` stores for `key`: tens of KiB, so a
/// torn write has room to show.
fn binary(key: &str, writer: usize) -> Vec<u8> {
    let mut out = format!("{key}|{writer}|").into_bytes();
    let len = 16 * 1024 + 1024 * (key.len() + writer % 7);
    let mut x = key
        .bytes()
        .fold(writer as u64 + 1, |h, b| h * 31 + b as u64);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    out
}

/// Whether `bytes` is exactly what some writer stores for `key`.
fn is_whole(key: &str, bytes: &[u8]) -> bool {
    (0..PROCESSES * THREADS).any(|w| bytes == binary(key, w))
}

/// The work of one child process: half its threads store (overwriting
/// what the other process stored), half load, alternating per round; a
/// stored entry must load back, and every loaded entry must be whole.
#[test]
fn child_process_of_the_concurrency_test() {
    let (Some(dir), Some(id)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_ID)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let id: usize = id.to_str().unwrap().parse().unwrap();
    // Start together: the parent creates `go` once both children run.
    let started = Instant::now();
    while !dir.join("go").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no start signal"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = DiskCache::new(dir.join("kernels"));
            std::thread::spawn(move || {
                let writer = id * THREADS + t;
                for round in 0..ROUNDS {
                    for j in 0..KEYS {
                        // Each thread walks the keys from its own start.
                        let k = key(round, (j + 5 * writer) % KEYS);
                        if (t + round) % 2 == 0 {
                            cache.store(&k, &binary(&k, writer)).unwrap();
                            let back = cache.load(&k).unwrap_or_else(|| {
                                panic!("entry {k} was lost right after it was stored")
                            });
                            assert!(is_whole(&k, &back), "entry {k} read back torn");
                        } else if let Some(bytes) = cache.load(&k) {
                            assert!(is_whole(&k, &bytes), "entry {k} read torn");
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "lanefold-kernel-cache-concurrency-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn two_processes_sharing_a_kernel_cache_lose_no_entry_and_read_none_torn() {
    let dir = temp_dir();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|id| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_process_of_the_concurrency_test",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR, &dir)
                .env(CHILD_ID, id.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(dir.join("go"), b"").unwrap();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        // The cache reports every entry it finds corrupt on stderr.
        assert!(
            !stderr.contains("corrupt") && !stderr.contains("unreadable"),
            "a reader met a bad entry:\n{stderr}"
        );
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
    }
    let cache = DiskCache::new(dir.join("kernels"));
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            let k = key(round, i);
            let bytes = cache
                .load(&k)
                .unwrap_or_else(|| panic!("entry {k} was lost"));
            assert!(is_whole(&k, &bytes), "entry {k} is torn");
        }
    }
    let temporaries: Vec<_> = file_names(&dir.join("kernels"))
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(temporaries.is_empty(), "left behind: {temporaries:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
