//! The fuzz targets' corpora and every input that once crashed them (fuzz/corpus/TARGET,
//! fuzz/regressions/TARGET), run through the importers and the spool ingest as the targets run
//! them (fuzz/src/lib.rs): no panic, an accepted input makes a run that passes SQLite's
//! `quick_check` and opens again, and an accepted plain Kineto trace is JSON as serde_json
//! reads it.

use std::path::Path;

use fuseprof_collector::collect::ingest_spool_dir;
use fuseprof_collector::import::{import, Format, ImportOptions};

fn reopen(out: &Path) {
    let problems = fuseprof_store::integrity_check(out, true).expect("SQLite opens the run");
    assert!(problems.is_empty(), "SQLite's quick_check: {problems:?}");
    let mut store = fuseprof_store::Store::open(out).expect("an accepted input makes a valid run");
    store.info().expect("its counts read back");
}

fn run_imports(target: &str, format: Format) {
    let files = fuseprof_fixtures::fuzz_inputs(target);
    assert!(!files.is_empty(), "no {target} corpus");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.sqlite");
    for f in files {
        let opts = ImportOptions {
            overwrite: true,
            format: Some(format),
            progress: None,
            jobs: None,
        };
        if import(&f, &out, &opts).is_ok() {
            reopen(&out);
            // A plain Kineto trace that is accepted is JSON as serde_json reads it.
            let data = std::fs::read(&f).unwrap();
            if format == Format::Kineto && !data.starts_with(&[0x1f, 0x8b]) {
                assert!(
                    serde_json::from_slice::<serde::de::IgnoredAny>(&data).is_ok(),
                    "{f:?} was accepted but is not JSON"
                );
            }
        }
    }
}

#[test]
fn kineto_corpus() {
    run_imports("kineto", Format::Kineto);
}

#[test]
fn nsys_corpus() {
    run_imports("nsys", Format::Nsys);
}

#[test]
fn spool_corpus() {
    let files = fuseprof_fixtures::fuzz_inputs("spool");
    assert!(!files.is_empty(), "no spool corpus");
    let dir = tempfile::tempdir().unwrap();
    for f in files {
        let spool = dir.path().join("spool");
        let _ = std::fs::remove_dir_all(&spool);
        std::fs::create_dir_all(&spool).unwrap();
        std::fs::copy(&f, spool.join("fuseprof-4242-1.spool")).unwrap();
        let out = dir.path().join("run.sqlite");
        let _ = std::fs::remove_file(&out);
        if ingest_spool_dir(&spool, &out).is_ok() {
            reopen(&out);
        }
    }
}
