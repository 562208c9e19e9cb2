//! The tracer's NVTX side, end to end and without a GPU: `nvtx-bench` runs with the tracer
//! injected through NVTX_INJECTION64_PATH, and its spool is ingested into a run.

use std::path::PathBuf;
use std::process::Command;

use fuseprof_store::{RangeKind, Store};

/// The tracer library, built next to this package's binaries: `cargo test` builds only the
/// test harness of a cdylib crate, so the library itself is built (or brought up to date: a
/// stale copy would test old code) here, once per test process.
fn tracer() -> PathBuf {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_nvtx-bench"));
    let so = bench.with_file_name("libfuseprof_tracer.so");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !*built {
        let profile_dir = bench.parent().unwrap();
        let target_dir = profile_dir.parent().unwrap();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "-p", "fuseprof-tracer", "--target-dir"])
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        let status = cargo.status().unwrap();
        assert!(status.success(), "building the tracer failed: {status}");
        *built = true;
    }
    assert!(
        so.is_file(),
        "{} is missing after building the tracer",
        so.display()
    );
    so
}

#[test]
fn every_push_and_pop_reaches_the_run() {
    pairs_reach_the_run(None);
}

/// The entry points fuseprof's PyTorch op observer calls instead of NVTX give the same ranges.
#[test]
fn direct_pushes_reach_the_run_as_nvtx_pushes_do() {
    pairs_reach_the_run(Some("direct"));
}

fn pairs_reach_the_run(mode: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let n = 3000;
    let out = Command::new(env!("CARGO_BIN_EXE_nvtx-bench"))
        .arg(n.to_string())
        .args(mode)
        .env("NVTX_INJECTION64_PATH", tracer())
        .env("FUSEPROF_SPOOL_DIR", &spool)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.contains("\"traced\":true"), "{line}");
    let direct = format!("\"direct\":{}", mode.is_some());
    assert!(line.contains(&direct), "{line}");

    let run = dir.path().join("run.sqlite");
    let counts = fuseprof_collector::collect::ingest_spool_dir(&spool, &run).unwrap();
    // n timed pairs plus n/10 warm-up pairs.
    assert_eq!(counts.ranges, (n + n / 10) as u64);

    let mut store = Store::open(&run).unwrap();
    let strings = store.strings().unwrap();
    let mut ranges = 0;
    let mut last_start = 0;
    store
        .for_each_range(|r| {
            ranges += 1;
            assert_eq!(r.kind, RangeKind::NvtxPushPop);
            assert_eq!(r.depth, Some(0));
            let end = r.end_ns.expect("every range was popped");
            assert!(r.start_ns >= last_start && end >= r.start_ns);
            last_start = r.start_ns;
            // The emit_nvtx-style name is split into the op and its input shapes.
            assert_eq!(strings.get(r.name), "aten::linear");
            let dims = r.input_dims.map(|d| strings.get(d)).unwrap_or("");
            // emit_nvtx's `input_op_ids` tail is not part of the shapes.
            assert_eq!(dims, "[[64,3136,96],[288,96],[288]]");
        })
        .unwrap();
    assert_eq!(ranges, n + n / 10);
}

/// A forked child that leaves through `_exit` (as DataLoader workers do) still lands in the run
/// with its own pid and every record it made, and without a "no final flush" warning.
#[test]
fn a_forked_child_that_exits_with_underscore_exit_keeps_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fork-child"))
        .env("NVTX_INJECTION64_PATH", tracer())
        .env("FUSEPROF_SPOOL_DIR", &spool)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let pids: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (parent, child) = (
        pids["parent"].as_u64().unwrap() as u32,
        pids["child"].as_u64().unwrap() as u32,
    );

    let run = dir.path().join("run.sqlite");
    let (_, warnings) =
        fuseprof_collector::collect::ingest_spool_dir_with_warnings(&spool, &run).unwrap();
    assert!(
        !warnings.iter().any(|w| w.contains(&child.to_string())),
        "{warnings:?}"
    );
    let mut store = Store::open(&run).unwrap();
    let strings = store.strings().unwrap();
    let mut seen = Vec::new();
    store
        .for_each_range(|r| seen.push((r.pid as u32, r.kind, strings.get(r.name).to_string())))
        .unwrap();
    let count = |pid: u32, kind: RangeKind, name: &str| {
        seen.iter()
            .filter(|(p, k, n)| *p == pid && *k == kind && n == name)
            .count()
    };
    assert_eq!(count(child, RangeKind::NvtxMark, "item"), 5, "{seen:?}");
    assert_eq!(
        count(child, RangeKind::NvtxPushPop, "child-range"),
        1,
        "{seen:?}"
    );
    assert_eq!(
        count(parent, RangeKind::NvtxPushPop, "parent"),
        1,
        "{seen:?}"
    );
    // The child's copy of the parent's open range is not the child's.
    assert_eq!(
        count(child, RangeKind::NvtxPushPop, "parent"),
        0,
        "{seen:?}"
    );
}

/// `signal-loop` (NVTX ranges in a loop) with the tracer injected and `env` set, once it has
/// said "ready"; with its temporary folder and spool folder.
fn start_signal_loop(env: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, std::process::Child) {
    use std::io::{BufRead, BufReader};

    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_signal-loop"))
        .env("NVTX_INJECTION64_PATH", tracer())
        .env("FUSEPROF_SPOOL_DIR", &spool)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    (dir, spool, child)
}

fn sigterm(child: &std::process::Child) {
    // SAFETY: sends SIGTERM to a child this test spawned.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
}

/// Waits for the child to end by SIGTERM and ingests its spool into a run: the run's counts, the
/// warnings `collect` would print, and how long the wait took.
fn ended_by_sigterm(
    mut child: std::process::Child,
    dir: &tempfile::TempDir,
    spool: &std::path::Path,
) -> (fuseprof_store::Counts, Vec<String>, std::time::Duration) {
    use std::os::unix::process::ExitStatusExt;

    let started = std::time::Instant::now();
    let status = child.wait().unwrap();
    let waited = started.elapsed();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let run = dir.path().join("run.sqlite");
    let (counts, warnings) =
        fuseprof_collector::collect::ingest_spool_dir_with_warnings(spool, &run).unwrap();
    (counts, warnings, waited)
}

fn final_flush_missing(warnings: &[String]) -> bool {
    warnings.iter().any(|w| w.contains("without a final flush"))
}

/// SIGTERM to a traced program (default action) ends it with SIGTERM and a complete run: the
/// flush happens after the handler returns, so it works even when the flush needs the thread
/// the signal interrupted (as CUPTI's does when that thread is inside CUDA; simulated here by
/// FUSEPROF_TEST_FLUSH_WAITS_FOR_PROGRAM, since this test has no GPU). A flush waited for inside
/// the handler could never finish here: the previous tracer lost every record of such a run.
#[test]
fn sigterm_keeps_every_record_even_when_the_flush_needs_the_interrupted_thread() {
    let (dir, spool, child) = start_signal_loop(&[("FUSEPROF_TEST_FLUSH_WAITS_FOR_PROGRAM", "1")]);
    sigterm(&child);
    let (counts, warnings, waited) = ended_by_sigterm(child, &dir, &spool);
    // The flush did not wait for the 10 s watchdog (nor a 3 s in-handler timeout).
    assert!(waited < std::time::Duration::from_secs(3), "{waited:?}");
    assert!(!final_flush_missing(&warnings), "{warnings:?}");
    assert!(counts.ranges >= 100, "{counts:?}");
}

/// `timeout` and shells signal a whole process group, and `collect` passes the signal on as
/// well, so the program gets the same SIGTERM twice at once. The repeat must not cut the flush
/// short (seen on the device: a Swin-T loop under `timeout 15 fuseprof collect` ended without
/// its final flush).
#[test]
fn sigterm_delivered_twice_at_once_still_ends_with_a_complete_flush() {
    let (dir, spool, child) = start_signal_loop(&[("FUSEPROF_TEST_SIGNAL_FLUSH_DELAY_MS", "300")]);
    // The second arrives while the first one's flush (300 ms here) is under way.
    sigterm(&child);
    std::thread::sleep(std::time::Duration::from_millis(50));
    sigterm(&child);
    let (counts, warnings, _) = ended_by_sigterm(child, &dir, &spool);
    assert!(!final_flush_missing(&warnings), "{warnings:?}");
    assert!(counts.ranges >= 100, "{counts:?}");
}

/// A second SIGTERM after the duplicate window (500 ms) means "now": the program ends without
/// waiting for the flush still under way (5 s here), and the run says so.
#[test]
fn a_later_second_sigterm_ends_the_program_at_once() {
    let (dir, spool, child) = start_signal_loop(&[("FUSEPROF_TEST_SIGNAL_FLUSH_DELAY_MS", "5000")]);
    sigterm(&child);
    std::thread::sleep(std::time::Duration::from_millis(800));
    sigterm(&child);
    let (_, warnings, waited) = ended_by_sigterm(child, &dir, &spool);
    assert!(waited < std::time::Duration::from_secs(2), "{waited:?}");
    assert!(final_flush_missing(&warnings), "{warnings:?}");
}

/// A program that crashes (a real SIGSEGV, or abort) right after recording keeps every record it
/// made, with a crash flush: the crashing thread waits (bounded) for the writer before the
/// crash goes on. Without it the last records (the writer writes every 200 ms) were lost and the
/// run said "ended without a final flush".
#[test]
fn a_crash_keeps_every_record_made_before_it() {
    use std::os::unix::process::ExitStatusExt;

    for (how, sig) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool");
        std::fs::create_dir(&spool).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_crash-after-ranges"))
            .arg(how)
            .env("NVTX_INJECTION64_PATH", tracer())
            .env("FUSEPROF_SPOOL_DIR", &spool)
            .output()
            .unwrap();
        assert_eq!(out.status.signal(), Some(sig), "{how}: {out:?}");

        let run = dir.path().join("run.sqlite");
        let (counts, warnings) =
            fuseprof_collector::collect::ingest_spool_dir_with_warnings(&spool, &run).unwrap();
        assert!(
            warnings.iter().any(|w| w.contains("crashed")),
            "{how}: {warnings:?}"
        );
        assert!(
            !warnings.iter().any(|w| w.contains("without a final flush")),
            "{how}: {warnings:?}"
        );
        assert_eq!(counts.ranges, 50, "{how}: {counts:?}");
    }
}
