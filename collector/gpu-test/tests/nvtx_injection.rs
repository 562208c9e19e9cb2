//! The tracer's NVTX side, end to end and without a GPU: `nvtx-bench` runs with the tracer
//! injected through NVTX_INJECTION64_PATH, and its spool is ingested into a run.

use std::path::PathBuf;
use std::process::Command;

use fuseprof_store::{RangeKind, Store};

/// The tracer library, built next to this package's binaries: `cargo test` builds only the
/// test harness of a cdylib crate, so the library itself is built here when it is missing.
fn tracer() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_nvtx-bench"));
    let so = bench.with_file_name("libfuseprof_tracer.so");
    if !so.is_file() {
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
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let n = 3000;
    let out = Command::new(env!("CARGO_BIN_EXE_nvtx-bench"))
        .arg(n.to_string())
        .env("NVTX_INJECTION64_PATH", tracer())
        .env("FUSEPROF_SPOOL_DIR", &spool)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.contains("\"traced\":true"), "{line}");

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
            assert!(dims.starts_with("[[64,3136,96],[288,96],[288]"), "{dims}");
        })
        .unwrap();
    assert_eq!(ranges, n + n / 10);
}
