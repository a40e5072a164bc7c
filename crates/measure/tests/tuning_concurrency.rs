//! Two processes (this test binary, run twice as children), each with
//! several writer threads and a reader, record into one tuning cache at
//! once, starting over a lock file an earlier, killed writer left behind.

use lanefold_ir::{DType, Operator};
use lanefold_measure::search::Objective;
use lanefold_measure::tuning::{TuningCache, TuningEntry, TuningKey, CPU_DEVICE};
use lanefold_plan::{LayoutRequest, Shape};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

const CHILD_DIR: &str = "LANEFOLD_TEST_TUNING_CHILD_DIR";
const CHILD_ID: &str = "LANEFOLD_TEST_TUNING_CHILD_ID";
const PROCESSES: usize = 2;
const WRITERS: usize = 4;
const PER_WRITER: usize = 12;

fn key(process: usize, writer: usize, i: usize) -> TuningKey {
    let n = 64 + 10_000 * process + 100 * writer + i;
    TuningKey::new(
        CPU_DEVICE,
        Operator::Rmsnorm,
        DType::F32,
        Shape::new(4, n).unwrap(),
        false,
    )
}

fn entry(workers: u32) -> TuningEntry {
    TuningEntry {
        key: key(0, 0, 0),
        request: LayoutRequest {
            workers,
            pack: 2,
            unroll: 1,
            ..Default::default()
        },
        describe: format!("W={workers} V=2"),
        objective: Objective::HostWall,
        p50_us: 1.5,
        source_sha256: "0".repeat(64),
        shape: "4x64".into(),
        batch_invariant: false,
        recorded_utc: "2025-01-01T00:00:00Z".into(),
        results: None,
    }
}

/// The work of one child process: writers record their own keys, each
/// through its own view opened before anything was written; a reader
/// opens the file over and over and must never see it corrupt or shrink.
#[test]
fn child_process_of_the_concurrency_test() {
    let (Some(dir), Some(id)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_ID)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let id: usize = id.to_str().unwrap().parse().unwrap();
    let path = dir.join("tuning.json");
    let started = Instant::now();
    while !dir.join("go").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no start signal"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (path, done) = (path.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            while !done.load(Ordering::Relaxed) {
                let c = TuningCache::open(&path);
                assert!(c.warnings.is_empty(), "reader: {:?}", c.warnings);
                assert!(
                    c.len() >= seen,
                    "the file shrank from {seen} to {}",
                    c.len()
                );
                seen = c.len();
            }
        })
    };
    // Writers start their first record together.
    let barrier = Arc::new(Barrier::new(WRITERS));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = TuningCache::open(&path);
                barrier.wait();
                for i in 0..PER_WRITER {
                    c.record(&key(id, w, i), entry(32 * (w as u32 + 1)))
                        .unwrap();
                }
                assert!(c.warnings.is_empty(), "writer: {:?}", c.warnings);
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}

#[test]
fn two_processes_tuning_at_once_keep_every_entry_past_a_leftover_lock() {
    let dir = std::env::temp_dir().join(format!(
        "lanefold-tuning-concurrency-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A lock file as an earlier version left it when killed mid-write, old
    // enough for that version to steal it.
    let lock = dir.join("tuning.json.lock");
    std::fs::write(&lock, "12345\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(120))
        .unwrap();
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
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
    }
    let c = TuningCache::open(&dir.join("tuning.json"));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let mut lost = vec![];
    for p in 0..PROCESSES {
        for w in 0..WRITERS {
            for i in 0..PER_WRITER {
                match c.lookup(&key(p, w, i)) {
                    Some(r) => assert_eq!(r.workers, 32 * (w as u32 + 1)),
                    None => lost.push(key(p, w, i).text()),
                }
            }
        }
    }
    assert!(lost.is_empty(), "{} entries lost: {lost:?}", lost.len());
    assert_eq!(c.len(), PROCESSES * WRITERS * PER_WRITER);
    std::fs::remove_dir_all(&dir).unwrap();
}
