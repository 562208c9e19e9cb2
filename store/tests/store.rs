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

/// The first column of every row `query` gives on the run at `path`, as text.
fn texts(path: &Path, query: &'static str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Connection};
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .connect()
            .await
            .unwrap();
        let rows: Vec<(String,)> = sqlx::query_as(query).fetch_all(&mut c).await.unwrap();
        c.close().await.unwrap();
        rows.into_iter().map(|r| r.0).collect()
    })
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

/// The writer builds the tables' and indexes' b-tree pages itself: SQLite must find the file
/// sound, and every row and index entry as written.
#[test]
fn bulk_written_pages_pass_sqlites_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    w.link_gpu_pids(true);
    // Long strings take overflow pages, around the lengths where the local part changes.
    let mut names = Vec::new();
    for len in [1, 100, 4060, 4061, 4062, 4100, 8200, 20_000] {
        names.push(w.intern(&"k".repeat(len)));
    }
    let values = [
        0i64,
        1,
        -1,
        127,
        128,
        -129,
        40_000,
        -8_400_000,
        1 << 33,
        -(1 << 40),
        1 << 50,
        i64::MAX,
        i64::MIN,
    ];
    let n = 60_000i64;
    for i in 0..n {
        let v = values[i as usize % values.len()];
        let k = Kernel {
            start_ns: v.wrapping_add(i),
            end_ns: i * 10,
            device_id: i % 3,
            stream_id: i % 7,
            pid: (i % 5 == 0).then_some(v),
            correlation_id: (i % 11 != 0).then_some(i % 9000),
            external_id: (i % 2 == 0).then_some(v),
            name: names[i as usize % names.len()],
            grid: (i % 4 != 0).then_some([i, 1, v]),
            block: Some([128, 1, 1]),
            registers_per_thread: None,
            static_smem_bytes: Some(i % 2),
            dynamic_smem_bytes: None,
            graph_id: None,
        };
        w.kernel(k).unwrap();
        w.api_call(ApiCall {
            api: if i % 2 == 0 {
                Api::Runtime
            } else {
                Api::Driver
            },
            start_ns: i,
            end_ns: i + 1,
            pid: 100 + (i * 7919) % 13,
            tid: i % 4,
            correlation_id: (i % 13 != 0).then_some(i % 9000),
            external_id: None,
            name: names[0],
            return_code: Some(0),
        })
        .unwrap();
        let mut r = Range::new(RangeKind::CpuOp, names[i as usize % 3], i % 2, i % 3, v);
        r.external_id = (i % 3 != 0).then_some(i / 3);
        r.end_ns = Some(i);
        w.range(r).unwrap();
        if i % 10 == 0 {
            w.memop(Memop {
                kind: MemopKind::Memcpy,
                start_ns: i,
                end_ns: i + 5,
                device_id: 0,
                stream_id: 1,
                pid: None,
                correlation_id: Some(i % 9000),
                external_id: None,
                bytes: Some(v),
                copy_kind: Some(CopyKind::HtoD),
                value: None,
                src_memory: Some(MemoryKind::Pageable),
                dst_memory: Some(MemoryKind::Device),
            })
            .unwrap();
            w.flow(Flow {
                category: names[1],
                flow_id: i,
                phase: FlowPhase::Start,
                ts_ns: i,
                pid: 1,
                tid: 2,
            })
            .unwrap();
        }
    }
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Connection};
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .connect()
            .await
            .unwrap();
        let check: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check")
            .fetch_all(&mut c)
            .await
            .unwrap();
        assert_eq!(check, vec![("ok".to_string(),)]);
        let lens: Vec<(i64, i64)> = sqlx::query_as("SELECT id, length(value) FROM strings ORDER BY id")
            .fetch_all(&mut c)
            .await
            .unwrap();
        assert_eq!(
            lens.iter().map(|r| r.1).collect::<Vec<_>>(),
            [1, 100, 4060, 4061, 4062, 4100, 8200, 20_000]
        );
        let counts: (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM kernels), (SELECT count(*) FROM api_calls), \
             (SELECT count(*) FROM ranges), (SELECT count(*) FROM memops), (SELECT count(*) FROM flows)",
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert_eq!(counts, (n, n, n, n / 10, n / 10));
        // Every value as written, and a missing pid linked to the smallest launching pid.
        type Row = (i64, i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>);
        let rows: Vec<Row> =
            sqlx::query_as(
                "SELECT id, start_ns, pid, correlation_id, grid_z, \
                 (SELECT min(a.pid) FROM api_calls a WHERE a.correlation_id = k.correlation_id) \
                 FROM kernels k ORDER BY id",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
        for (id, start, pid, corr, grid_z, linked) in rows {
            let i = id - 1;
            let v = values[i as usize % values.len()];
            assert_eq!(start, v.wrapping_add(i));
            assert_eq!(corr, (i % 11 != 0).then_some(i % 9000));
            assert_eq!(grid_z, (i % 4 != 0).then_some(v));
            let want = if i % 5 == 0 { Some(v) } else { linked };
            assert_eq!(pid, want, "kernel {id}");
        }
        // Index order equals a sort of the table.
        for (index, table, cols) in [
            ("kernels_by_stream_time", "kernels", "device_id, stream_id, start_ns"),
            ("kernels_by_correlation", "kernels", "correlation_id, pid"),
            ("api_calls_by_correlation", "api_calls", "correlation_id, pid"),
            ("ranges_by_thread_time", "ranges", "pid, tid, start_ns"),
        ] {
            let by_index: Vec<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM {table} INDEXED BY {index} WHERE {} IS NOT NULL OR 1 ORDER BY {cols}, id",
                cols.split(',').next().unwrap()
            )))
            .fetch_all(&mut c)
            .await
            .unwrap();
            let sorted: Vec<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM {table} NOT INDEXED ORDER BY {cols}, id"
            )))
            .fetch_all(&mut c)
            .await
            .unwrap();
            assert_eq!(by_index, sorted, "{index}");
        }
        c.close().await.unwrap();
    });
    Store::open(&path).unwrap();
}

/// Two ranks' runs merged: every row copied once with its rank's offset, strings shared, the
/// second rank's colliding pid and GPU renumbered, and SQLite finds the file sound.
#[test]
fn merged_ranks_keep_every_row_and_pass_sqlites_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut parts = Vec::new();
    for rank in 0..2i64 {
        let path = dir.path().join(format!("rank{rank}.sqlite"));
        let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
        w.intern(&format!("only in rank {rank}"));
        for i in 0..5_000i64 {
            let mut k = kernel(&mut w, "shared_kernel", i * 10);
            k.pid = Some(42);
            k.external_id = Some(i);
            w.kernel(k).unwrap();
            let name = w.intern("cudaLaunchKernel");
            w.thread(42, 7, None);
            w.api_call(ApiCall {
                api: Api::Runtime,
                start_ns: i * 10,
                end_ns: i * 10 + 2,
                pid: 42,
                tid: 7,
                correlation_id: Some(i),
                external_id: Some(i),
                name,
                return_code: None,
            })
            .unwrap();
            let mut r = Range::new(RangeKind::GpuUserAnnotation, name, 0, 7, i * 10);
            r.end_ns = Some(i * 10 + 5);
            w.range(r).unwrap();
        }
        let cat = w.intern("ac2g");
        w.flow(Flow {
            category: cat,
            flow_id: 9,
            phase: FlowPhase::Start,
            ts_ns: 3,
            pid: 42,
            tid: 7,
        })
        .unwrap();
        w.process(42, Some("python"));
        w.device(Device {
            id: 0,
            name: Some("H100".into()),
            ..Default::default()
        });
        w.finish(RunInfo {
            source_format: "kineto".into(),
            ..Default::default()
        })
        .unwrap();
        parts.push(MergePart {
            path,
            info: RankInfo {
                rank,
                rank_source: "trace".into(),
                clock: "wall_clock".into(),
                clock_offset_ns: rank * 1_000,
                ..Default::default()
            },
        });
    }
    let out = dir.path().join("job.sqlite");
    let report = merge_ranks(
        &parts,
        &out,
        CreateOptions::default(),
        &RunInfo {
            source_format: "kineto".into(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(report.pids_renumbered, [(1, 42, 1_000_000_042)]);
    assert_eq!(report.devices_renumbered, [(1, 0, 1000)]);

    let mut s = Store::open(&out).unwrap();
    let strings = s.strings().unwrap();
    let texts: Vec<&str> = (1..=strings.len() as i64)
        .map(|i| strings.get(StrId(i)))
        .collect();
    assert_eq!(
        texts,
        [
            "only in rank 0",
            "shared_kernel",
            "cudaLaunchKernel",
            "ac2g",
            "only in rank 1"
        ]
    );
    let mut kernels = Vec::new();
    s.for_each_kernel(|k| kernels.push(k)).unwrap();
    assert_eq!(kernels.len(), 10_000);
    let second = &kernels[5_001];
    assert_eq!(
        (
            second.start_ns,
            second.pid,
            second.device_id,
            second.external_id
        ),
        (1_010, Some(1_000_000_042), 1000, Some((1 << 40) + 1))
    );
    assert_eq!(second.name, StrId(2));
    let mut gpu_ranges = Vec::new();
    s.for_each_range(|r| gpu_ranges.push((r.pid, r.start_ns)))
        .unwrap();
    assert_eq!(gpu_ranges[5_000], (1000, 1_000));
    let mut flows = Vec::new();
    s.for_each_flow(|f| flows.push((f.flow_id, f.pid, f.ts_ns)))
        .unwrap();
    assert_eq!(flows, [(9, 42, 3), ((1 << 40) + 9, 1_000_000_042, 1_003)]);
    assert_eq!(
        s.processes().unwrap(),
        [
            (42, Some("python".into())),
            (1_000_000_042, Some("python".into()))
        ]
    );
    assert_eq!(s.process_ranks().unwrap(), [(42, 0), (1_000_000_042, 1)]);
    assert_eq!(s.device_ranks().unwrap(), [(0, 0, 0), (1000, 1, 0)]);
    assert_eq!(s.devices().unwrap()[1].name.as_deref(), Some("H100"));
    assert_eq!(s.ranks().unwrap().len(), 2);
    assert!(s.meta().unwrap().contains(&("ranks".into(), "2".into())));
    drop(s);

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Connection};
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&out)
            .connect()
            .await
            .unwrap();
        let check: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check")
            .fetch_all(&mut c)
            .await
            .unwrap();
        assert_eq!(check, vec![("ok".to_string(),)]);
        c.close().await.unwrap();
    });
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["job.sqlite", "rank0.sqlite", "rank1.sqlite"]);
}

#[test]
fn records_of_one_device_merge_and_an_unknown_field_keeps_what_another_said() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    let full = Device {
        id: 1,
        name: Some("NVIDIA H200".into()),
        sm_count: Some(132),
        clock_khz: Some(1_980_000),
        mem_bandwidth_bytes_per_s: Some(4.8e12),
        peak_source: Some("nominal".into()),
        ..Device::default()
    };
    w.device(full.clone());
    // Another process's record of the same GPU, without clock or bandwidth.
    w.device(Device {
        id: 1,
        name: Some("NVIDIA H200".into()),
        sm_count: Some(132),
        ..Device::default()
    });
    w.device(Device {
        id: 0,
        sm_count: Some(132),
        ..Device::default()
    });
    w.finish(RunInfo::default()).unwrap();
    let devices = Store::open(&path).unwrap().devices().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1], full);
    assert_eq!(devices[0].sm_count, Some(132));
}

/// A run written without the event tables' indexes (a rank's run before the merge) is a sound
/// SQLite file with the same rows as one written with them, and none of those indexes.
#[test]
fn an_unindexed_run_has_the_rows_and_no_event_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, unindexed: bool| {
        let path = dir.path().join(name);
        let options = CreateOptions {
            unindexed,
            ..Default::default()
        };
        let mut w = Writer::create(&path, options).unwrap();
        w.link_gpu_pids(true);
        for i in 0..20_000i64 {
            let mut k = kernel(&mut w, &format!("k{}", i % 37), i * 10);
            k.pid = (i % 3 == 0).then_some(7);
            w.kernel(k).unwrap();
            let name = w.intern("cudaLaunchKernel");
            w.api_call(ApiCall {
                api: Api::Runtime,
                start_ns: i * 10 - 5,
                end_ns: i * 10 - 1,
                pid: 5 + i % 2,
                tid: 1,
                correlation_id: Some(i * 10),
                external_id: None,
                name,
                return_code: None,
            })
            .unwrap();
            let op = w.intern("aten::mm");
            let mut r = Range::new(RangeKind::CpuOp, op, 5, 1, i * 10 - 8);
            r.end_ns = Some(i * 10);
            r.external_id = (i % 2 == 0).then_some(i);
            w.range(r).unwrap();
        }
        let counts = w.finish(RunInfo::default()).unwrap();
        (path, counts)
    };
    let (indexed, with) = write("indexed.sqlite", false);
    let (unindexed, without) = write("unindexed.sqlite", true);
    assert_eq!(with, without);
    let rows = |path: &Path| {
        let mut s = Store::open(path).unwrap();
        let mut rows = Vec::new();
        s.for_each_kernel(|k| rows.push(format!("{k:?}"))).unwrap();
        s.for_each_api_call(|a| rows.push(format!("{a:?}")))
            .unwrap();
        s.for_each_range(|r| rows.push(format!("{r:?}"))).unwrap();
        rows
    };
    assert_eq!(rows(&indexed), rows(&unindexed));
    assert_eq!(texts(&unindexed, "PRAGMA integrity_check"), ["ok"]);
    let indexes = texts(
        &unindexed,
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN \
         ('kernels', 'memops', 'api_calls', 'ranges', 'flows')",
    );
    assert_eq!(indexes, Vec::<String>::new());
}

/// Interning bytes gives a string given before as text its id without a second entry, checks
/// bytes met for the first time as UTF-8, and refuses bytes that are not.
#[test]
fn interned_bytes_share_ids_with_text_and_refuse_non_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    let mm = w.intern("aten::mm");
    assert_eq!(w.intern_utf8(b"aten::mm"), Some(mm));
    let arrow = w.intern_utf8("a \u{2192} b".as_bytes()).unwrap();
    assert_ne!(arrow, mm);
    assert_eq!(w.intern("a \u{2192} b"), arrow);
    assert_eq!(w.intern_utf8(b"bad \xff byte"), None);
    assert_eq!(w.intern_utf8(b"cut \xe2\x86"), None);
    assert_eq!(w.counts().strings, 2);
    let k = kernel(&mut w, "k", 0);
    w.kernel(k).unwrap();
    w.finish(RunInfo::default()).unwrap();
    let strings = Store::open(&path).unwrap().strings().unwrap();
    assert_eq!(strings.get(mm), "aten::mm");
    assert_eq!(strings.get(arrow), "a \u{2192} b");
    assert_eq!(strings.len(), 3);
}

/// Copies keep where they read and write; `info` splits host<->device copies by host memory;
/// the file passes SQLite's integrity check (the columns' CHECK constraints included).
#[test]
fn copies_keep_their_memory_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    let copy = |start_ns: i64, copy_kind, src, dst| Memop {
        kind: MemopKind::Memcpy,
        start_ns,
        end_ns: start_ns + 1_000,
        device_id: 0,
        stream_id: 7,
        pid: Some(1),
        correlation_id: Some(start_ns),
        external_id: None,
        bytes: Some(4_000),
        copy_kind: Some(copy_kind),
        value: None,
        src_memory: src,
        dst_memory: dst,
    };
    use MemoryKind::*;
    let written = vec![
        copy(0, CopyKind::HtoD, Some(Pageable), Some(Device)),
        copy(2_000, CopyKind::HtoD, Some(Pageable), Some(Device)),
        copy(4_000, CopyKind::HtoD, Some(Pinned), Some(Device)),
        copy(6_000, CopyKind::DtoH, Some(Device), Some(Pinned)),
        copy(8_000, CopyKind::DtoD, Some(Device), Some(Managed)),
        copy(10_000, CopyKind::HtoD, None, None),
    ];
    for m in &written {
        w.memop(m.clone()).unwrap();
    }
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(integrity_check(&path, false).unwrap(), Vec::<String>::new());
    let mut s = Store::open(&path).unwrap();
    let mut read = Vec::new();
    s.for_each_memop(|m| read.push(m)).unwrap();
    assert_eq!(read, written);
    let split: Vec<_> = s
        .info()
        .unwrap()
        .host_copies
        .into_iter()
        .map(|h| (h.direction, h.host_memory, h.count, h.time_ns, h.bytes))
        .collect();
    assert_eq!(
        split,
        vec![
            ("HtoD".into(), None, 1, 1_000, 4_000),
            ("HtoD".into(), Some(Pageable), 2, 2_000, 8_000),
            ("HtoD".into(), Some(Pinned), 1, 1_000, 4_000),
            ("DtoH".into(), Some(Pinned), 1, 1_000, 4_000),
        ]
    );
}

#[test]
fn memory_kinds_come_from_cupti_numbers_and_labels() {
    use MemoryKind::*;
    let cupti: Vec<_> = (0..9).map(MemoryKind::from_cupti).collect();
    assert_eq!(
        cupti,
        [
            None,
            Some(Pageable),
            Some(Pinned),
            Some(Device),
            Some(Array),
            Some(Managed),
            Some(Device),
            Some(Managed),
            None
        ]
    );
    assert_eq!(MemoryKind::from_label("Pageable"), Some(Pageable));
    assert_eq!(MemoryKind::from_label("Device Static"), Some(Device));
    assert_eq!(MemoryKind::from_label("Managed Static"), Some(Managed));
    assert_eq!(MemoryKind::from_label("Unknown"), None);
    assert_eq!(MemoryKind::from_label("Host"), None);
    for k in [Pageable, Pinned, Device, Managed, Array] {
        assert_eq!(MemoryKind::parse(k.as_str()), Some(k));
    }
}

/// Counters written into a finished run read back as written, and their samples are
/// attributed to the run's kernels (`kernel_counters`), with the shared flag where two streams
/// ran at once. A run without counters reads as having none.
#[test]
fn counters_round_trip_and_are_attributed_to_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    // Kernels 0..100 and 100..200 on stream 7; 150..250 on stream 8 overlaps the second.
    for (start, stream) in [(0, 7), (100, 7), (150, 8)] {
        let mut k = kernel(&mut w, "k", start);
        k.stream_id = stream;
        w.kernel(k).unwrap();
    }
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    assert!(Store::open(&path)
        .unwrap()
        .counter_metrics()
        .unwrap()
        .is_empty());

    let metric = CounterMetric {
        id: 1,
        device_id: 0,
        name: "dram__bytes_read.sum".into(),
        quantity: "dram_read_bytes".into(),
        kind: CounterKind::Sum,
        unit: "byte".into(),
        method: "pm_sampling".into(),
        interval_ns: Some(50),
    };
    let samples: Vec<CounterSample> = (0..5)
        .map(|i| CounterSample {
            metric_id: 1,
            start_ns: i * 50,
            end_ns: i * 50 + 50,
            value: 1000.0,
        })
        .collect();
    let report = record_counters(&path, std::slice::from_ref(&metric), &samples).unwrap();
    assert_eq!(report.samples, 5);
    assert_eq!(report.kernel_values, 3);
    assert_eq!(report.shared, 2);

    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.counter_metrics().unwrap(), vec![metric]);
    assert_eq!(s.counter_samples(1).unwrap(), samples);
    let got = s.kernel_counters().unwrap();
    let by_kernel: Vec<(i64, f64, bool)> = got
        .iter()
        .map(|k| (k.kernel_id, k.value, k.shared))
        .collect();
    // 0..100 alone: two whole samples. 100..150 alone (1000), then 150..200 shared with the
    // third kernel (500 each), then 200..250 the third alone (1000).
    assert_eq!(
        by_kernel,
        vec![(1, 2000.0, false), (2, 1500.0, true), (3, 1500.0, true)]
    );
    // The five samples' bytes are all accounted for.
    assert_eq!(got.iter().map(|k| k.value).sum::<f64>(), 5000.0);
}
