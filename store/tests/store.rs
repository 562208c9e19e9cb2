//! The store's contract: a run appears only when complete, and readers refuse what they
//! cannot trust.

use std::path::Path;

use fuseprof_store::*;

fn kernel(w: &mut Writer, name: &str, start_ns: i64) -> Kernel {
    Kernel {
        start_ns,
        end_ns: start_ns + 100,
        device_id: 0,
        stream_id: 7,
        pid: Some(42),
        correlation_id: Some(start_ns),
        external_id: None,
        name: w.intern(name),
        grid: Some([2, 1, 1]),
        block: Some([256, 1, 1]),
        registers_per_thread: Some(40),
        static_smem_bytes: Some(0),
        dynamic_smem_bytes: Some(1024),
        graph_id: None,
    }
}

fn sql(path: &Path, statement: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Connection};
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string()))
            .execute(&mut c)
            .await
            .unwrap();
        c.close().await.unwrap();
    });
}

#[test]
fn records_round_trip_and_strings_are_shared() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    let mut written = Vec::new();
    // More than one batch, so the writer thread sees several.
    for i in 0..40_000 {
        let k = kernel(
            &mut w,
            if i % 2 == 0 { "gemm" } else { "softmax" },
            i * 1000,
        );
        written.push(k.clone());
        w.kernel(k).unwrap();
    }
    let name = w.intern("aten::mm");
    let mut r = Range::new(RangeKind::NvtxPushPop, name, 42, 43, 5);
    r.end_ns = None; // never closed
    r.depth = Some(0);
    w.range(r.clone()).unwrap();
    w.thread(42, 43, Some("main"));
    w.meta("cupti_dropped_records", 0);
    w.meta("schema_version", "999"); // the store's own key: ignored
    w.device(Device {
        id: 0,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        sm_count: Some(132),
        ..Default::default()
    });
    let counts = w
        .finish(RunInfo {
            source_format: "cupti".into(),
            command: Some("python infer.py".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(counts.kernels, 40_000);
    assert_eq!(counts.strings, 3);

    let mut s = Store::open(&path).unwrap();
    let mut read = Vec::new();
    s.for_each_kernel(|k| read.push(k)).unwrap();
    assert_eq!(read, written);
    let mut ranges = Vec::new();
    s.for_each_range(|r| ranges.push(r)).unwrap();
    assert_eq!(ranges, vec![r]);
    let strings = s.strings().unwrap();
    assert_eq!(strings.len(), 3);
    assert_eq!(strings.get(read[1].name), "softmax");
    let info = s.info().unwrap();
    assert_eq!(info.counts.kernels, 40_000);
    assert_eq!(info.counts.threads, 1);
    assert_eq!(info.devices[0].sm_count, Some(132));
    assert_eq!(info.run.command.as_deref(), Some("python infer.py"));
    assert_eq!(info.kernel_time_ns, 40_000 * 100);
    assert_eq!(
        info.meta,
        vec![("cupti_dropped_records".to_string(), "0".to_string())]
    );
    assert_eq!(s.schema_version, SCHEMA_VERSION);
    // A published run is one plain file: no journal or WAL side files, even after reading.
    drop(s);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn an_abandoned_writer_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    for i in 0..20_000 {
        let k = kernel(&mut w, "k", i);
        w.kernel(k).unwrap();
    }
    drop(w);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_writer_refuses_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    std::fs::write(&path, b"keep me").unwrap();
    let err = Writer::create(&path, CreateOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::OutputExists { .. }));
    assert!(err.to_string().contains("run.sqlite: already exists"));
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}

fn finished_run(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("run.sqlite");
    let w = Writer::create(&path, CreateOptions::default()).unwrap();
    w.finish(RunInfo {
        source_format: "kineto".into(),
        ..Default::default()
    })
    .unwrap();
    path
}

#[test]
fn a_store_from_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = finished_run(dir.path());
    sql(
        &path,
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
    );
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, Error::NewerSchema { found: 99, .. }), "{err}");
    assert!(err.to_string().contains("newer fuseprof"));
}

#[test]
fn an_incomplete_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = finished_run(dir.path());
    sql(&path, "UPDATE run SET complete = 0");
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, Error::Incomplete { .. }), "{err}");
}

#[test]
fn files_that_are_not_runs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello, this is not SQLite at all, just some words").unwrap();
    let err = Store::open(&text).err().unwrap().to_string();
    assert!(err.contains("notes.txt: not a fuseprof run file"), "{err}");

    let other = dir.path().join("other.sqlite");
    sql(&other, "CREATE TABLE t (x INTEGER)");
    let err = Store::open(&other).err().unwrap().to_string();
    assert!(err.contains("without fuseprof's tables"), "{err}");

    let err = Store::open(&dir.path().join("missing.sqlite"))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Io { .. }));
    let err = Store::open(dir.path()).err().unwrap().to_string();
    assert!(err.contains("not a file"), "{err}");
}
