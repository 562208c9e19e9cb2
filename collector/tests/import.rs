//! Importers against real traces (counts in the store equal counts in the source) and against
//! bad input (a clear error, and no output file left behind).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use fuseprof_collector::import::{import, ImportError, ImportOptions};
use fuseprof_fixtures as fixtures;
use fuseprof_store::{RangeKind, Store};

fn read_gz(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Counts in the store, by what a user would count in the source.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    kernels: u64,
    memcpys: u64,
    memsets: u64,
    runtime: u64,
    driver: u64,
    ranges: BTreeMap<String, u64>,
    flows: u64,
}

fn tally_store(path: &Path) -> Tally {
    let mut s = Store::open(path).unwrap();
    let mut t = Tally::default();
    s.for_each_kernel(|_| t.kernels += 1).unwrap();
    s.for_each_memop(|m| match m.kind {
        fuseprof_store::MemopKind::Memcpy => t.memcpys += 1,
        fuseprof_store::MemopKind::Memset => t.memsets += 1,
    })
    .unwrap();
    s.for_each_api_call(|a| match a.api {
        fuseprof_store::Api::Runtime => t.runtime += 1,
        fuseprof_store::Api::Driver => t.driver += 1,
    })
    .unwrap();
    s.for_each_range(|r| *t.ranges.entry(r.kind.as_str().to_string()).or_default() += 1)
        .unwrap();
    s.for_each_flow(|_| t.flows += 1).unwrap();
    t
}

/// The same counts, read straight from the Kineto JSON with serde_json::Value.
fn tally_kineto(path: &Path) -> (Tally, u64) {
    let v: serde_json::Value = serde_json::from_slice(&read_gz(path)).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut t = Tally::default();
    for e in events {
        let ph = e["ph"].as_str().unwrap_or("");
        let cat = e["cat"].as_str().unwrap_or("");
        let kind = match (ph, cat) {
            ("X", "kernel") => {
                t.kernels += 1;
                continue;
            }
            ("X", "gpu_memcpy") => {
                t.memcpys += 1;
                continue;
            }
            ("X", "gpu_memset") => {
                t.memsets += 1;
                continue;
            }
            ("X", "cuda_runtime") => {
                t.runtime += 1;
                continue;
            }
            ("X", "cuda_driver") => {
                t.driver += 1;
                continue;
            }
            ("X", "cpu_op") => RangeKind::CpuOp,
            ("X", "user_annotation") => RangeKind::UserAnnotation,
            ("X", "gpu_user_annotation") => RangeKind::GpuUserAnnotation,
            ("X", "python_function") => RangeKind::PythonFunction,
            ("X", "cuda_sync") => RangeKind::CudaSync,
            ("X", _) => RangeKind::Other,
            ("i", _) => RangeKind::Instant,
            ("s" | "t" | "f", _) => {
                t.flows += 1;
                continue;
            }
            _ => continue,
        };
        *t.ranges.entry(kind.as_str().to_string()).or_default() += 1;
    }
    (t, events.len() as u64)
}

#[test]
fn every_kineto_fixture_imports_with_every_event_accounted_for() {
    let dir = tempfile::tempdir().unwrap();
    for rel in fixtures::KINETO {
        let input = fixtures::path(rel);
        let out = dir.path().join(format!("{}.sqlite", rel.replace('/', "_")));
        let report = import(&input, &out, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let (expected, source_events) = tally_kineto(&input);
        assert_eq!(tally_store(&out), expected, "{rel}");
        assert_eq!(report.source_events, source_events, "{rel}");
        let skipped: u64 = report.skipped.values().sum();
        assert_eq!(
            report.counts.events() + report.names + skipped,
            source_events,
            "{rel}: rows + names + skipped must cover every source event"
        );
        assert!(expected.kernels > 0, "{rel} has kernels");
    }
}

fn nsys_count(path: &Path, sql: &str) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Row};
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .immutable(true)
            .connect()
            .await
            .unwrap();
        let row = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut c)
            .await
            .unwrap();
        row.get::<i64, _>(0) as u64
    })
}

#[test]
fn every_nsys_fixture_imports_with_every_event_accounted_for() {
    let dir = tempfile::tempdir().unwrap();
    for rel in fixtures::NSYS {
        let input = fixtures::path(rel);
        let out = dir.path().join("run.sqlite");
        let _ = std::fs::remove_file(&out);
        let report = import(&input, &out, &ImportOptions::default()).unwrap();
        let n = |sql: &str| nsys_count(&input, sql);
        let mut ranges = BTreeMap::new();
        ranges.insert(
            "nvtx_push_pop".to_string(),
            n("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59"),
        );
        let starts = n("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60");
        if starts > 0 {
            ranges.insert("nvtx_start_end".to_string(), starts);
        }
        let marks = n("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34");
        if marks > 0 {
            ranges.insert("nvtx_mark".to_string(), marks);
        }
        ranges.insert(
            "cuda_sync".to_string(),
            n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
        );
        let overhead = n("SELECT count(*) FROM PROFILER_OVERHEAD")
            + n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_OVERHEAD");
        if overhead > 0 {
            ranges.insert("other".to_string(), overhead);
        }
        let expected = Tally {
            kernels: n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
            memcpys: n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
            memsets: n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET"),
            runtime: n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 0"),
            driver: n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 1"),
            ranges,
            flows: 0,
        };
        assert_eq!(tally_store(&out), expected, "{rel}");
        // Kernels and their launches join on (pid, correlation id): every kernel finds its call.
        let mut s = Store::open(&out).unwrap();
        let mut calls = std::collections::HashSet::new();
        s.for_each_api_call(|a| {
            calls.insert((a.pid, a.correlation_id));
        })
        .unwrap();
        let mut orphans = 0;
        s.for_each_kernel(|k| {
            if !calls.contains(&(k.pid.unwrap(), k.correlation_id)) {
                orphans += 1;
            }
        })
        .unwrap();
        // The fixtures are time windows cut from longer captures: some launches fall before the
        // window. The store must link exactly the kernels whose launch the source holds.
        let unlinked = n(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE NOT EXISTS \
             (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId \
              AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215))",
        );
        assert_eq!(
            orphans, unlinked,
            "{rel}: kernels without their launching call"
        );
        assert!(unlinked < report.counts.kernels / 10);
        assert!(report.counts.kernels > 1000);
        let info = s.info().unwrap();
        assert_eq!(info.run.source_format, "nsys");
        assert!(info.run.command.unwrap().starts_with("torchrun"));
    }
}

#[test]
fn kineto_kernels_get_the_launching_process_and_shapes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.sqlite");
    import(
        &fixtures::path("kineto/hta_trace_compare_base_base.json.gz"),
        &out,
        &ImportOptions::default(),
    )
    .unwrap();
    let mut s = Store::open(&out).unwrap();
    let strings = s.strings().unwrap();
    let mut launches = std::collections::HashSet::new();
    s.for_each_api_call(|a| {
        launches.insert(a.correlation_id.unwrap());
    })
    .unwrap();
    let mut linked = 0;
    s.for_each_kernel(|k| {
        // This small trace keeps only some launches: a kernel gets the launching process
        // exactly when its launch is in the file.
        let launched_here = launches.contains(&k.correlation_id.unwrap());
        assert_eq!(k.pid.is_some(), launched_here, "{k:?}");
        if launched_here {
            linked += 1;
            assert_eq!(k.pid, Some(2568503));
        }
    })
    .unwrap();
    assert!(linked >= 2);
    let mut dims = Vec::new();
    s.for_each_range(|r| {
        if let Some(d) = r.input_dims {
            dims.push(strings.get(d).to_string());
        }
    })
    .unwrap();
    assert!(
        dims.contains(&"[[], [], [], [], []]".to_string()),
        "{dims:?}"
    );
}

// ---- bad input ---------------------------------------------------------------------------

/// Runs an import expected to fail; checks the message names the file and nothing is left.
fn expect_failure(input: &Path, needle: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.sqlite");
    let err = import(input, &out, &ImportOptions::default())
        .expect_err("the import should fail")
        .to_string();
    assert!(
        err.contains(needle),
        "message {err:?} should contain {needle:?}"
    );
    assert!(!err.contains('\n'), "one line: {err:?}");
    let left: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    err
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
    p
}

#[test]
fn truncated_json_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json = read_gz(&fixtures::path(
        "kineto/hta_critical_path_alexnet_trace.json.gz",
    ));
    let p = write(dir.path(), "cut.json", &json[..json.len() / 2]);
    let err = expect_failure(&p, "ends early");
    assert!(err.contains("cut.json"), "{err}");
}

#[test]
fn corrupt_json_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "bad.json",
        br#"{"traceEvents": [{"ph": "X",, }]}"#,
    );
    expect_failure(&p, "malformed JSON");
}

#[test]
fn a_gz_name_without_gzip_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "plain.json.gz", br#"{"traceEvents": []}"#);
    expect_failure(&p, "not gzip-compressed");
}

#[test]
fn truncated_gzip_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gz = std::fs::read(fixtures::path(
        "kineto/hta_critical_path_alexnet_trace.json.gz",
    ))
    .unwrap();
    let p = write(dir.path(), "cut.json.gz", &gz[..gz.len() / 3]);
    expect_failure(&p, "corrupt gzip");
}

#[test]
fn empty_traces_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "empty.json", b"");
    expect_failure(&p, "empty");
    let p = write(
        dir.path(),
        "noevents.json",
        br#"{"traceEvents": [], "schemaVersion": 1}"#,
    );
    expect_failure(&p, "no events");
    let p = write(dir.path(), "other.json", br#"{"hello": "world"}"#);
    expect_failure(&p, "no events");
}

#[test]
fn a_file_of_another_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "picture.png", b"\x89PNG\r\n\x1a\n0000000000");
    expect_failure(&p, "neither a PyTorch-profiler JSON trace");
    let p = write(dir.path(), "list.json", b"[1, 2, 3]");
    expect_failure(&p, "not a PyTorch-profiler trace");
}

fn sqlite_with(dir: &Path, name: &str, sql: &str) -> PathBuf {
    let p = dir.join(name);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Connection};
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&p)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut c)
            .await
            .unwrap();
        c.close().await.unwrap();
    });
    p
}

#[test]
fn an_sqlite_file_that_is_not_a_trace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = sqlite_with(dir.path(), "notes.sqlite", "CREATE TABLE notes (t TEXT);");
    expect_failure(&p, "not an nsys export");
}

#[test]
fn an_unknown_nsys_schema_major_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("future.sqlite");
    std::fs::copy(fixtures::path("nsys/nsysai_mfu_2gpu_before.sqlite"), &p).unwrap();
    let mut perms = std::fs::metadata(&p).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&p, perms).unwrap();
    sqlite_with(
        dir.path(),
        "future.sqlite",
        "UPDATE META_DATA_EXPORT SET value = '4' WHERE name = 'EXPORT_SCHEMA_VERSION_MAJOR';
         UPDATE META_DATA_EXPORT SET value = '4.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION';",
    );
    expect_failure(&p, "schema 4.0.0 (major 4) is not supported");
}

/// An export's tables come in `start` order, in a few runs of it, or in none: the import
/// takes their rows in the order SQLite's `ORDER BY start` gives, equal starts included.
#[test]
fn nsys_rows_come_in_the_order_order_by_start_gives() {
    const K: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
    let cases = [
        // Two runs that interleave, with equal starts within each and across them.
        (
            "runs",
            format!(
                "UPDATE {K} SET start = start / 1000000 * 1000000;
                 UPDATE {K} SET start = start - (SELECT (max(start) - min(start)) / 2000000
                     * 1000000 FROM {K}) WHERE rowid > (SELECT max(rowid) / 2 FROM {K});"
            ),
        ),
        // Two thousand runs of two rows that all overlap: every run joins the merge.
        (
            "many",
            format!("UPDATE {K} SET start = start + (rowid % 2) * 1000000000;"),
        ),
        // A start that is not an integer, out of order.
        (
            "real",
            format!("UPDATE {K} SET start = start - 1000000.5 WHERE rowid = 7;"),
        ),
    ];
    for (name, sql) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("export.sqlite");
        std::fs::copy(fixtures::path("nsys/nsysai_mfu_2gpu_before.sqlite"), &p).unwrap();
        let mut perms = std::fs::metadata(&p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&p, perms).unwrap();
        sqlite_with(dir.path(), "export.sqlite", &sql);
        let runs = nsys_count(
            &p,
            &format!(
                "SELECT count(*) FROM (SELECT start < lag(start) OVER (ORDER BY rowid) AS d \
                 FROM {K}) WHERE d"
            ),
        );
        assert!(runs > 0, "{name}: the kernels are still in order");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let expected: Vec<(i64, Option<i64>, i64)> = rt.block_on(async {
            use sqlx::ConnectOptions;
            let mut c = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&p)
                .read_only(true)
                .connect()
                .await
                .unwrap();
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT CASE typeof(start) WHEN 'integer' THEN start ELSE 0 END, \
                 correlationId, \"end\" FROM {K} ORDER BY start"
            )))
            .fetch_all(&mut c)
            .await
            .unwrap()
        });
        let out = dir.path().join("run.sqlite");
        import(&p, &out, &ImportOptions::default()).unwrap();
        let mut got = Vec::new();
        Store::open(&out)
            .unwrap()
            .for_each_kernel(|k| got.push((k.start_ns, k.correlation_id, k.end_ns)))
            .unwrap();
        assert_eq!(got.len(), expected.len(), "{name}");
        assert!(got == expected, "{name}: the kernels' order differs");
    }
}

/// NVTX domain and category registrations, anywhere in the table and named by text or by a
/// StringIds id, name the ranges of their domain and category, read from the export's pages
/// as through SQL (a WAL-mode copy of the export is read only through SQL).
#[test]
fn nvtx_registrations_name_their_ranges_from_pages_as_through_sql() {
    let sql = "DELETE FROM NVTX_EVENTS WHERE rowid IN (5000, 5001);
         INSERT INTO NVTX_EVENTS (rowid, start, eventType, domainId, text, globalTid)
             VALUES (5000, 60111430336, 75, 7, 'my.domain', 281477409407121);
         INSERT INTO StringIds (id, value) VALUES (999999, 'my category');
         INSERT INTO NVTX_EVENTS (rowid, start, eventType, domainId, category, textId, globalTid)
             VALUES (5001, 60111430336, 33, 7, 3, 999999, 281477409407121);
         INSERT INTO NVTX_EVENTS (start, eventType, domainId, category, text, globalTid)
             VALUES (60111430337, 33, 7, 4, 'late category', 281477409407121);
         UPDATE NVTX_EVENTS SET domainId = 7, category = 3
             WHERE rowid BETWEEN 100 AND 110 AND eventType = 59;
         UPDATE NVTX_EVENTS SET domainId = 7, category = 4
             WHERE rowid BETWEEN 9000 AND 9004 AND eventType = 59;";
    let dir = tempfile::tempdir().unwrap();
    let mut named = Vec::new();
    for (name, extra) in [("pages", ""), ("sql", "PRAGMA journal_mode = WAL;")] {
        let file = format!("{name}.sqlite");
        let p = dir.path().join(&file);
        std::fs::copy(fixtures::path(fixtures::NSYS[0]), &p).unwrap();
        let mut perms = std::fs::metadata(&p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&p, perms).unwrap();
        sqlite_with(dir.path(), &file, &format!("{sql}{extra}"));
        let out = dir.path().join(format!("{name}-run.sqlite"));
        import(&p, &out, &ImportOptions::default()).unwrap();
        let count = |domain: &str, category: &str| {
            nsys_count(
                &out,
                &format!(
                    "SELECT count(*) FROM ranges r JOIN strings d ON d.id = r.domain_id \
                     JOIN strings c ON c.id = r.category_id \
                     WHERE d.value = '{domain}' AND c.value = '{category}'"
                ),
            )
        };
        named.push((
            count("my.domain", "my category"),
            count("my.domain", "late category"),
        ));
    }
    assert_eq!(named[0], named[1], "pages and SQL disagree");
    assert!(named[0].0 >= 5 && named[0].1 >= 2, "{named:?}");
}

#[test]
fn an_existing_output_is_kept_and_the_import_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "run.sqlite", b"precious");
    let input = fixtures::path("kineto/hta_trace_compare_base_base.json.gz");
    let err = import(&input, &out, &ImportOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ImportError::Store(fuseprof_store::Error::OutputExists { .. })
        ),
        "{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    // --force replaces it.
    let opts = ImportOptions {
        overwrite: true,
        ..Default::default()
    };
    import(&input, &out, &opts).unwrap();
    assert!(Store::open(&out).is_ok());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn an_unwritable_output_is_refused() {
    let input = fixtures::path("kineto/hta_trace_compare_base_base.json.gz");
    let err = import(
        &input,
        Path::new("/nonexistent-dir/run.sqlite"),
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("/nonexistent-dir/run.sqlite"), "{err}");
}

#[test]
fn a_missing_input_is_refused() {
    expect_failure(Path::new("/no/such/trace.json"), "/no/such/trace.json");
}

#[test]
fn imports_advance_the_progress_counters_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, sized) in [
        ("kineto/hta_timeline_analysis_sampled_rank-0.json.gz", true),
        ("nsys/nsysai_mfu_2gpu_before.sqlite", false),
    ] {
        let progress = std::sync::Arc::new(fuseprof_collector::progress::Progress::default());
        let opts = ImportOptions {
            progress: Some(progress.clone()),
            ..Default::default()
        };
        let out = dir.path().join("run.sqlite");
        let _ = std::fs::remove_file(&out);
        let report = import(&fixtures::path(fixture), &out, &opts).unwrap();
        let s = progress.snapshot();
        // The last phase is the index build; every event was counted on the way.
        assert_eq!(s.phase, "indexing", "{fixture}");
        if sized {
            assert_eq!(s.events, report.source_events, "{fixture}");
        } else {
            // nsys counts the rows it read, which include the metadata tables.
            assert!(s.events >= report.source_events, "{fixture}: {s:?}");
        }
    }
}

// ---- ranks of one distributed job ----------------------------------------------------------

mod ranks {
    use super::*;
    use fuseprof_collector::import::ranks::import_ranks;
    use fuseprof_store::RankInfo;

    fn rank_paths() -> Vec<PathBuf> {
        fixtures::KINETO_RANKS
            .iter()
            .map(|p| fixtures::path(p))
            .collect()
    }

    /// The rank-1 trace as JSON, changed by `edit`, written gzip-free under `name`.
    fn edited_rank1(dir: &Path, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
        let mut v: serde_json::Value =
            serde_json::from_slice(&read_gz(&fixtures::path(fixtures::KINETO_RANKS[1]))).unwrap();
        edit(&mut v);
        write(dir, name, &serde_json::to_vec(&v).unwrap())
    }

    /// Shifts every timestamp by `by_us` (the trace's clock starts elsewhere).
    fn shift(v: &mut serde_json::Value, by_us: i64) {
        for e in v["traceEvents"].as_array_mut().unwrap() {
            if let Some(ts) = e.get("ts").and_then(|t| t.as_i64()) {
                e["ts"] = (ts + by_us).into();
            }
        }
    }

    fn ranks_of(path: &Path) -> Vec<RankInfo> {
        Store::open(path).unwrap().ranks().unwrap()
    }

    fn left_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn two_hta_ranks_merge_into_one_run_with_each_rank_apart() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("job.sqlite");
        // Given in reverse order: the ranks come from the traces.
        let mut inputs = rank_paths();
        inputs.reverse();
        let report = import_ranks(&inputs, &out, &ImportOptions::default()).unwrap();
        assert_eq!(left_in(dir.path()), ["job.sqlite"]);
        let ranks = ranks_of(&out);
        assert_eq!(ranks, report.ranks);
        assert_eq!(ranks.len(), 2);
        for (i, r) in ranks.iter().enumerate() {
            assert_eq!(r.rank, i as i64);
            assert_eq!(r.rank_source, "trace");
            assert_eq!(r.world_size, Some(128));
            assert_eq!(r.backend.as_deref(), Some("nccl"));
            // Timestamps are Unix-epoch microseconds: the wall clock, as it is.
            assert_eq!(r.clock, "wall_clock");
            assert_eq!(r.collectives, 10);
        }
        // The sampled traces miss some kernels: half of rank 1's collectives find a partner,
        // their ends agree within a few hundred microseconds, and no correction is needed.
        assert_eq!(ranks[1].matched_collectives, 5);
        assert!(ranks[1].residual_ns.unwrap() < 400_000, "{:?}", ranks[1]);
        assert!(
            ranks[1].clock_correction_ns.abs() < 100_000,
            "{:?}",
            ranks[1]
        );

        // Every record of both traces, each rank's on its own process and GPU.
        let mut whole = Tally::default();
        for p in rank_paths() {
            let (t, _) = tally_kineto(&p);
            whole.kernels += t.kernels;
            whole.memcpys += t.memcpys;
            whole.memsets += t.memsets;
            whole.runtime += t.runtime;
            whole.flows += t.flows;
        }
        let merged = tally_store(&out);
        assert_eq!(
            (
                merged.kernels,
                merged.memcpys,
                merged.memsets,
                merged.runtime,
                merged.flows
            ),
            (
                whole.kernels,
                whole.memcpys,
                whole.memsets,
                whole.runtime,
                whole.flows
            )
        );
        let mut s = Store::open(&out).unwrap();
        let procs = s.process_ranks().unwrap();
        assert!(
            procs.contains(&(4037, 0)) && procs.contains(&(4045, 1)),
            "{procs:?}"
        );
        let devices = s.device_ranks().unwrap();
        assert_eq!(devices, [(0, 0, 0), (1, 1, 1)]);
        let mut per_device: BTreeMap<i64, (u64, BTreeMap<Option<i64>, u64>)> = BTreeMap::new();
        s.for_each_kernel(|k| {
            let e = per_device.entry(k.device_id).or_default();
            e.0 += 1;
            *e.1.entry(k.pid).or_default() += 1;
        })
        .unwrap();
        assert_eq!(per_device[&0].0, 1154);
        assert_eq!(per_device[&1].0, 1104);
        // The kernels' launching process is the rank's own (or unknown), never the other's.
        assert!(!per_device[&0].1.contains_key(&Some(4045)));
        assert!(!per_device[&1].1.contains_key(&Some(4037)));
        // One string table: each text once.
        let strings = s.strings().unwrap();
        let mut seen = std::collections::HashSet::new();
        for i in 1..=strings.len() as i64 {
            assert!(seen.insert(strings.get(fuseprof_store::StrId(i)).to_string()));
        }
    }

    #[test]
    fn a_rank_on_its_own_clock_is_aligned_by_its_collectives() {
        let dir = tempfile::tempdir().unwrap();
        // Rank 1 as a trace whose clock starts near zero (no wall-clock base).
        const SHIFT_US: i64 = -1_682_725_800_000_000 + 123_456;
        let r1 = edited_rank1(dir.path(), "r1.json", |v| shift(v, SHIFT_US));
        let out = dir.path().join("job.sqlite");
        let inputs = [rank_paths()[0].clone(), r1];
        let report = import_ranks(&inputs, &out, &ImportOptions::default()).unwrap();
        let r = &report.ranks[1];
        assert_eq!(r.clock, "collectives");
        // Shifted back to within a millisecond of where it was recorded.
        assert!(
            (r.clock_offset_ns + SHIFT_US * 1000).abs() < 1_000_000,
            "{r:?}"
        );
        assert_eq!(r.matched_collectives, 5);

        // With its collectives renamed too, nothing can align it: flagged, not refused.
        let r1 = edited_rank1(dir.path(), "r1b.json", |v| {
            shift(v, SHIFT_US);
            for e in v["traceEvents"].as_array_mut().unwrap() {
                if let Some(n) = e["name"].as_str().filter(|n| n.contains("nccl")) {
                    e["name"] = n.replace("nccl", "xyz").into();
                }
            }
        });
        let out = dir.path().join("job2.sqlite");
        let report = import_ranks(
            &[rank_paths()[0].clone(), r1],
            &out,
            &ImportOptions::default(),
        )
        .unwrap();
        assert_eq!(report.ranks[1].clock, "unaligned");
        assert_eq!(report.ranks[1].clock_offset_ns, 0);
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("rank 1") && n.contains("own clock")),
            "{:?}",
            report.notes
        );
    }

    #[test]
    fn a_wall_clock_base_is_applied_and_its_error_corrected_by_the_collectives() {
        let dir = tempfile::tempdir().unwrap();
        // Rank 1 written as newer PyTorch writes it: timestamps relative to a wall-clock base.
        const BASE_US: i64 = 1_682_725_800_000_000;
        let r1 = edited_rank1(dir.path(), "r1.json", |v| {
            shift(v, -BASE_US);
            v["baseTimeNanoseconds"] = (BASE_US * 1000).into();
        });
        let out = dir.path().join("job.sqlite");
        let inputs = [rank_paths()[0].clone(), r1];
        let report = import_ranks(&inputs, &out, &ImportOptions::default()).unwrap();
        let r = &report.ranks[1];
        assert_eq!(r.clock, "wall_clock");
        assert_eq!(r.clock_offset_ns - r.clock_correction_ns, BASE_US * 1000);
        assert!(r.clock_correction_ns.abs() < 100_000, "{r:?}");
        // A base 0.7 s off (a host clock that drifted, a base cut to whole seconds): the
        // collectives put the rank back.
        let r1 = edited_rank1(dir.path(), "r1b.json", |v| {
            shift(v, -BASE_US);
            v["baseTimeNanoseconds"] = (BASE_US * 1000 + 700_000_000).into();
        });
        let out = dir.path().join("job2.sqlite");
        let report = import_ranks(
            &[rank_paths()[0].clone(), r1],
            &out,
            &ImportOptions::default(),
        )
        .unwrap();
        let r = &report.ranks[1];
        assert_eq!(r.clock, "wall_clock");
        assert!(
            (r.clock_correction_ns + 700_000_000).abs() < 1_000_000,
            "{r:?}"
        );
        assert!(
            (r.clock_offset_ns - BASE_US * 1000).abs() < 1_000_000,
            "{r:?}"
        );
    }

    #[test]
    fn ranks_come_from_file_names_when_the_trace_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let a = edited_rank1(dir.path(), "job_rank7.json", |v| {
            v.as_object_mut().unwrap().remove("distributedInfo");
        });
        let b = edited_rank1(dir.path(), "job_rank-3.json", |v| {
            v.as_object_mut().unwrap().remove("distributedInfo");
        });
        let out = dir.path().join("job.sqlite");
        let report = import_ranks(&[a, b], &out, &ImportOptions::default()).unwrap();
        let got: Vec<(i64, &str)> = report
            .ranks
            .iter()
            .map(|r| (r.rank, r.rank_source.as_str()))
            .collect();
        assert_eq!(got, [(3, "file_name"), (7, "file_name")]);
        // The same trace twice: every pid and GPU of the second is renumbered.
        let devices = Store::open(&out).unwrap().device_ranks().unwrap();
        assert_eq!(devices, [(1, 3, 1), (7001, 7, 1)]);
    }

    /// Everything a run holds, row by row in id order (threads by pid and tid).
    fn contents(path: &Path) -> Vec<String> {
        let mut s = Store::open(path).unwrap();
        let mut rows = Vec::new();
        let strings = s.strings().unwrap();
        for i in 1..=strings.len() as i64 {
            rows.push(format!(
                "string {i} {:?}",
                strings.get(fuseprof_store::StrId(i))
            ));
        }
        s.for_each_kernel(|k| rows.push(format!("{k:?}"))).unwrap();
        s.for_each_memop(|m| rows.push(format!("{m:?}"))).unwrap();
        s.for_each_api_call(|a| rows.push(format!("{a:?}")))
            .unwrap();
        s.for_each_range(|r| rows.push(format!("{r:?}"))).unwrap();
        s.for_each_flow(|f| rows.push(format!("{f:?}"))).unwrap();
        rows.push(format!("{:?}", s.processes().unwrap()));
        rows.push(format!("{:?}", s.threads().unwrap()));
        rows.push(format!("{:?}", s.devices().unwrap()));
        rows.push(format!("{:?}", s.meta().unwrap()));
        rows.push(format!("{:?}", s.ranks().unwrap()));
        rows.push(format!("{:?}", s.process_ranks().unwrap()));
        rows.push(format!("{:?}", s.device_ranks().unwrap()));
        rows.push(format!("{:?}", s.run().unwrap()));
        rows
    }

    #[test]
    fn ranks_imported_one_at_a_time_or_at_once_make_the_same_run() {
        let dir = tempfile::tempdir().unwrap();
        // The HTA pair and a third rank: rank 1's trace as rank 2, 1.5 ms behind, so that the
        // collectives move it, and gzip-free, so the inputs take different times to read.
        let rank2 = edited_rank1(dir.path(), "third.json", |v| {
            v["distributedInfo"]["rank"] = 2.into();
            shift(v, -1_500);
        });
        let mut inputs = rank_paths();
        inputs.push(rank2);
        let mut runs = Vec::new();
        for jobs in [1, 2, 3] {
            let out = dir.path().join(format!("job-{jobs}.sqlite"));
            let options = ImportOptions {
                jobs: Some(jobs),
                ..Default::default()
            };
            let report = import_ranks(&inputs, &out, &options).unwrap();
            assert_eq!(report.ranks.len(), 3);
            assert_eq!(report.ranks[2].clock, "wall_clock");
            assert!(report.ranks[2].clock_correction_ns.abs() > 1_000_000);
            runs.push((jobs, contents(&out), report));
        }
        let (_, first, first_report) = &runs[0];
        assert!(first.len() > 10_000, "{} rows", first.len());
        for (jobs, rows, report) in &runs[1..] {
            assert_eq!(rows.len(), first.len(), "{jobs} at once");
            for (a, b) in first.iter().zip(rows) {
                assert_eq!(a, b, "{jobs} at once");
            }
            assert_eq!(report.ranks, first_report.ranks);
            assert_eq!(
                format!("{:?}", report.merge),
                format!("{:?}", first_report.merge)
            );
        }
    }

    /// Runs a multi-rank import expected to fail, one input at a time and two at once: one
    /// line naming the file (the same either way), nothing left.
    fn expect_ranks_failure(inputs: &[PathBuf], dir: &Path, needle: &str) -> String {
        let before = left_in(dir);
        let out = dir.join("job.sqlite");
        let mut errors = Vec::new();
        for jobs in [1, 2] {
            let options = ImportOptions {
                jobs: Some(jobs),
                ..Default::default()
            };
            let err = import_ranks(inputs, &out, &options)
                .expect_err("the merge should fail")
                .to_string();
            assert!(err.contains(needle), "{err:?} should contain {needle:?}");
            assert!(!err.contains('\n'), "one line: {err:?}");
            assert_eq!(left_in(dir), before, "files left behind");
            errors.push(err);
        }
        assert_eq!(
            errors[0], errors[1],
            "the error depends on the inputs read at once"
        );
        errors.remove(0)
    }

    #[test]
    fn bad_rank_sets_are_refused_with_nothing_left() {
        let dir = tempfile::tempdir().unwrap();
        // One rank's file truncated.
        let json = read_gz(&fixtures::path(fixtures::KINETO_RANKS[1]));
        let cut = write(dir.path(), "rank-1.json", &json[..json.len() * 2 / 3]);
        let err = expect_ranks_failure(
            &[rank_paths()[0].clone(), cut.clone()],
            dir.path(),
            "ends early",
        );
        assert!(err.contains("rank-1.json"), "{err}");
        // Two bad files: the first one named, however many are read at once.
        let not_json = write(dir.path(), "rank-2.json", b"{\"traceEvents\": [ nope");
        let err = expect_ranks_failure(
            &[rank_paths()[0].clone(), cut, not_json],
            dir.path(),
            "ends early",
        );
        assert!(err.contains("rank-1.json"), "{err}");
        // The same rank twice.
        let twin = edited_rank1(dir.path(), "twin.json", |_| {});
        let err = expect_ranks_failure(&[rank_paths()[1].clone(), twin], dir.path(), "rank 1");
        assert!(err.contains("twin.json"), "{err}");
        // A rank of another job (another world size).
        let other = edited_rank1(dir.path(), "other.json", |v| {
            v["distributedInfo"]["world_size"] = 64.into();
        });
        expect_ranks_failure(&[rank_paths()[0].clone(), other], dir.path(), "another job");
        // A rank recorded a day later.
        let later = edited_rank1(dir.path(), "later.json", |v| shift(v, 86_400_000_000));
        let err = expect_ranks_failure(
            &[rank_paths()[0].clone(), later],
            dir.path(),
            "different jobs",
        );
        let gap_s = |err: &str| -> f64 {
            let at = err.find("(by ").expect("the gap is given") + 4;
            err[at..].split(' ').next().unwrap().parse().unwrap()
        };
        assert!((86_000.0..86_400.0).contains(&gap_s(&err)), "{err}");
        // A rank whose clock base is 285 years before 1970: the gap (3.4e8 years of
        // nanoseconds more than an i64 holds) is still told right.
        let ancient = edited_rank1(dir.path(), "ancient.json", |v| {
            v["baseTimeNanoseconds"] = (-9_000_000_000_000_000_000_i64).into();
            shift(v, -1_682_700_000_000_000);
        });
        let err = expect_ranks_failure(
            &[rank_paths()[0].clone(), ancient],
            dir.path(),
            "different jobs",
        );
        assert!((1.06e10..1.07e10).contains(&gap_s(&err)), "{err}");
        // An nsys export among them.
        let nsys = fixtures::path(fixtures::NSYS[0]);
        expect_ranks_failure(&[rank_paths()[0].clone(), nsys], dir.path(), "nsys export");
    }

    #[test]
    fn a_two_gpu_nsys_export_becomes_one_rank_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.sqlite");
        import(
            &fixtures::path(fixtures::NSYS[0]),
            &out,
            &ImportOptions::default(),
        )
        .unwrap();
        assert_eq!(left_in(dir.path()), ["run.sqlite"]);
        let mut s = Store::open(&out).unwrap();
        let ranks = s.ranks().unwrap();
        assert_eq!(ranks.len(), 2);
        assert!(ranks
            .iter()
            .all(|r| r.clock == "same_clock" && r.rank_source == "device"));
        // 33 SendRecv kernels per GPU, every one paired, ends within 50 us (median).
        assert_eq!(
            (ranks[1].collectives, ranks[1].matched_collectives),
            (33, 33)
        );
        assert!(ranks[1].residual_ns.unwrap() < 50_000, "{:?}", ranks[1]);
        assert_eq!(s.process_ranks().unwrap(), [(144, 0), (145, 1)]);
        assert_eq!(s.device_ranks().unwrap(), [(0, 0, 0), (1, 1, 1)]);
    }

    /// The 2-GPU export split into one export per process, as `nsys profile` run per rank
    /// writes them.
    fn per_rank_exports(dir: &Path) -> Vec<PathBuf> {
        [(144, "job_rank0.sqlite"), (145, "job_rank1.sqlite")]
            .iter()
            .map(|&(pid, name)| {
                let p = dir.join(name);
                std::fs::copy(fixtures::path(fixtures::NSYS[0]), &p).unwrap();
                let mut sql = String::new();
                for (table, col) in [
                    ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
                    ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
                    ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"),
                    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "globalPid"),
                    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                    ("NVTX_EVENTS", "globalTid"),
                    ("ThreadNames", "globalTid"),
                    ("PROFILER_OVERHEAD", "globalTid"),
                    ("PROCESSES", "globalPid"),
                ] {
                    sql += &format!("DELETE FROM {table} WHERE ({col} >> 24) & 16777215 != {pid};");
                }
                sqlite_with(dir, name, &sql)
            })
            .collect()
    }

    #[test]
    fn one_nsys_export_per_rank_merges_as_the_whole_jobs_export_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut inputs = per_rank_exports(dir.path());
        inputs.reverse();
        let out = dir.path().join("job.sqlite");
        let report = import_ranks(&inputs, &out, &ImportOptions::default()).unwrap();
        let ranks = ranks_of(&out);
        assert_eq!(ranks, report.ranks);
        assert_eq!(ranks.len(), 2);
        for (i, r) in ranks.iter().enumerate() {
            assert_eq!((r.rank, r.rank_source.as_str()), (i as i64, "file_name"));
            // One host's session start on the wall clock; its collectives agree.
            assert_eq!(r.clock, "wall_clock", "{r:?}");
        }
        assert_eq!(
            (ranks[1].collectives, ranks[1].matched_collectives),
            (33, 33)
        );
        assert!(
            ranks[1].clock_correction_ns.abs() < 50_000,
            "{:?}",
            ranks[1]
        );

        // What the whole job's export gives: every kernel, each process a rank on its GPU.
        let whole = dir.path().join("whole.sqlite");
        import(
            &fixtures::path(fixtures::NSYS[0]),
            &whole,
            &ImportOptions::default(),
        )
        .unwrap();
        let kernels = |p: &Path| {
            let mut per_device: BTreeMap<i64, (u64, i64)> = BTreeMap::new();
            Store::open(p)
                .unwrap()
                .for_each_kernel(|k| {
                    let e = per_device.entry(k.device_id).or_default();
                    e.0 += 1;
                    e.1 = e.1.max(k.end_ns - k.start_ns);
                })
                .unwrap();
            per_device
        };
        assert_eq!(kernels(&out), kernels(&whole));
        let mut s = Store::open(&out).unwrap();
        assert_eq!(s.process_ranks().unwrap(), [(144, 0), (145, 1)]);
        // Each rank's GPU is its own; rank 1's synchronisations recorded on device 0 keep a
        // device of rank 1 (the merge keeps ranks' GPUs apart).
        assert_eq!(
            s.device_ranks().unwrap(),
            [(0, 0, 0), (1, 1, 1), (1000, 1, 0)]
        );
        assert_eq!(s.run().unwrap().source_format, "nsys");

        // An export of the whole job is not one rank.
        let other = tempfile::tempdir().unwrap();
        let both = [inputs[0].clone(), fixtures::path(fixtures::NSYS[0])];
        expect_ranks_failure(&both, other.path(), "holds a whole job (2 ranks");
    }

    #[test]
    fn a_run_of_a_whole_job_is_labelled_in_place_as_collect_does() {
        // The 2-GPU export with its labels taken off stands for a collected torchrun job.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.sqlite");
        import(
            &fixtures::path(fixtures::NSYS[1]),
            &out,
            &ImportOptions::default(),
        )
        .unwrap();
        sqlite_with(
            dir.path(),
            "run.sqlite",
            "DELETE FROM ranks; UPDATE processes SET rank = NULL; UPDATE devices SET rank = NULL;",
        );
        assert!(ranks_of(&out).is_empty());
        let ranks =
            fuseprof_collector::import::ranks::label_ranks_in_place(&out, "collect").unwrap();
        assert_eq!(ranks, ranks_of(&out));
        assert_eq!(ranks.len(), 2);
        assert_eq!(
            (ranks[1].collectives, ranks[1].matched_collectives),
            (31, 31)
        );
        assert_eq!(Store::open(&out).unwrap().process_ranks().unwrap().len(), 2);
        // A run of one process stays as it is.
        let one = dir.path().join("one.sqlite");
        let input = fixtures::path("kineto/hta_critical_path_alexnet_trace.json.gz");
        import(&input, &one, &ImportOptions::default()).unwrap();
        let ranks = fuseprof_collector::import::ranks::label_ranks_in_place(&one, "x").unwrap();
        assert!(ranks.is_empty() && ranks_of(&one).is_empty());
    }

    #[test]
    fn a_single_gpu_run_has_no_ranks() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.sqlite");
        let input = fixtures::path("kineto/hta_critical_path_alexnet_trace.json.gz");
        import(&input, &out, &ImportOptions::default()).unwrap();
        assert!(ranks_of(&out).is_empty());
    }
}

/// Copies by (direction, source memory, destination memory), as the store gives them.
fn copies_by_memory(path: &Path) -> BTreeMap<(String, String, String), u64> {
    let mut out = BTreeMap::new();
    let side = |m: Option<fuseprof_store::MemoryKind>| m.map_or("unknown", |m| m.as_str());
    Store::open(path)
        .unwrap()
        .for_each_memop(|m| {
            if m.kind == fuseprof_store::MemopKind::Memcpy {
                let dir = m.copy_kind.map_or("none", |c| c.as_str());
                let key = (
                    dir.to_string(),
                    side(m.src_memory).into(),
                    side(m.dst_memory).into(),
                );
                *out.entry(key).or_default() += 1;
            }
        })
        .unwrap();
    out
}

#[test]
fn kineto_copies_keep_the_memory_kinds_their_names_give() {
    let dir = tempfile::tempdir().unwrap();
    let mut pageable_h2d = 0;
    for rel in fixtures::KINETO {
        let input = fixtures::path(rel);
        let out = dir.path().join(format!("{}.sqlite", rel.replace('/', "_")));
        import(&input, &out, &ImportOptions::default()).unwrap();
        // From the JSON: "Memcpy HtoD (Pageable -> Device)", CUDA's kinds lower-cased, ROCm's
        // "Host" unknown.
        let v: serde_json::Value = serde_json::from_slice(&read_gz(&input)).unwrap();
        let mut expected = BTreeMap::new();
        for e in v["traceEvents"].as_array().unwrap() {
            if e["ph"] != "X" || e["cat"] != "gpu_memcpy" {
                continue;
            }
            let name = e["name"].as_str().unwrap();
            let (dir, sides) = name
                .strip_prefix("Memcpy ")
                .unwrap()
                .split_once(" (")
                .unwrap();
            let (src, dst) = sides.trim_end_matches(')').split_once(" -> ").unwrap();
            let kind = |s: &str| match s {
                "Pageable" | "Pinned" | "Device" | "Managed" | "Array" => s.to_lowercase(),
                _ => "unknown".to_string(),
            };
            *expected
                .entry((dir.to_string(), kind(src), kind(dst)))
                .or_default() += 1;
        }
        let got = copies_by_memory(&out);
        assert_eq!(got, expected, "{rel}");
        pageable_h2d += got
            .get(&("HtoD".into(), "pageable".into(), "device".into()))
            .copied()
            .unwrap_or(0);
    }
    assert!(pageable_h2d > 0, "the fixtures hold pageable copies");
}

#[test]
fn nsys_copies_keep_their_memory_kinds_by_the_exports_enum() {
    let dir = tempfile::tempdir().unwrap();
    for rel in fixtures::NSYS {
        let input = fixtures::path(rel);
        let out = dir.path().join("run.sqlite");
        let _ = std::fs::remove_file(&out);
        import(&input, &out, &ImportOptions::default()).unwrap();
        let got = copies_by_memory(&out);
        // Every copy has its kinds, labelled by the export's own ENUM_CUDA_MEM_KIND.
        let n = |sql: &str| nsys_count(&input, sql);
        let labelled = |src: &str, dst: &str, copy: i64| {
            n(&format!(
                "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m \
                 JOIN ENUM_CUDA_MEM_KIND s ON s.id = m.srcKind \
                 JOIN ENUM_CUDA_MEM_KIND d ON d.id = m.dstKind \
                 WHERE s.label = '{src}' AND d.label = '{dst}' AND m.copyKind = {copy}"
            ))
        };
        let h2d = labelled("Pageable", "Device", 1);
        let d2d = labelled("Device", "Device", 8);
        assert!(h2d > 0 && d2d > 0, "{rel}");
        let expected: BTreeMap<_, _> = [
            (("DtoD".into(), "device".into(), "device".into()), d2d),
            (("HtoD".into(), "pageable".into(), "device".into()), h2d),
        ]
        .into();
        assert_eq!(got, expected, "{rel}");
        assert_eq!(
            got.values().sum::<u64>(),
            n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
            "{rel}"
        );
    }
}
