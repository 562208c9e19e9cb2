//! `nsys export --type sqlite` files (export schema 3.x).
//!
//! The export's tables and columns change between Nsight Systems releases, so every query is
//! built from the columns the file actually has; a table that is absent contributes nothing.
//! The major schema version is checked first: an unknown major is refused, not guessed at.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::Path;

use fuseprof_store::{
    Api, ApiCall, CopyKind, CreateOptions, Device, Kernel, Memop, MemopKind, Range, RangeKind,
    RawRows, RunInfo, StrId, Writer,
};
use rustc_hash::FxHashMap;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, SqliteConnection};

use super::{nominal_peaks, Format, ImportError, ImportReport, Result};
use crate::progress::Progress;

/// Rows between two updates of the progress counters.
const PROGRESS_EVERY: u64 = 4096;

/// The export schema majors this importer understands.
pub const SUPPORTED_MAJOR: i64 = 3;

const NVTX_CATEGORY: i64 = 33;
const NVTX_MARK: i64 = 34;
const NVTX_PUSH_POP: i64 = 59;
const NVTX_START_END: i64 = 60;
const NVTX_DOMAIN_CREATE: i64 = 75;

/// nsys packs thread and process ids into one number: `tid | pid << 24` (plus a node part).
fn split_global_tid(g: i64) -> (i64, i64) {
    ((g >> 24) & 0xFF_FFFF, g & 0xFF_FFFF)
}

/// Statements whose rows, stepped side by side, make one query's rows: each row in turn of
/// the statement whose row has the smallest integer in column `key`, the earlier statement's
/// first on a tie (each statement's rows are in that order already).
struct Query {
    sqls: Vec<String>,
    key: usize,
}

impl Query {
    fn one(sql: String) -> Query {
        Query {
            sqls: vec![sql],
            key: 0,
        }
    }
}

struct Source<'p> {
    path: &'p Path,
    rt: tokio::runtime::Runtime,
    conn: SqliteConnection,
    tables: HashMap<String, Vec<String>>,
    progress: Option<&'p Progress>,
}

impl<'p> Source<'p> {
    fn open(path: &'p Path, progress: Option<&'p Progress>) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|source| ImportError::Io {
                path: path.into(),
                error: source,
            })?;
        let mut conn = rt
            .block_on(
                SqliteConnectOptions::new()
                    .filename(path)
                    .read_only(true)
                    .immutable(true)
                    .disable_statement_logging()
                    .connect(),
            )
            .map_err(|e| ImportError::format(path, format!("cannot open as SQLite: {e}")))?;
        let utf8 = rt
            .block_on(fuseprof_store::schema_text_is_utf8(&mut conn))
            .map_err(|e| ImportError::format(path, format!("not a readable SQLite file: {e}")))?;
        if !utf8 {
            return Err(ImportError::format(path, fuseprof_store::SCHEMA_NOT_UTF8));
        }
        let names: Vec<String> = rt
            .block_on(
                sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
                    .fetch_all(&mut conn),
            )
            .map_err(|e| ImportError::format(path, format!("not a readable SQLite file: {e}")))?;
        let mut tables = HashMap::new();
        for name in names {
            let cols: Vec<String> = rt
                .block_on(
                    sqlx::query_scalar("SELECT name FROM pragma_table_info(?)")
                        .bind(&name)
                        .fetch_all(&mut conn),
                )
                .map_err(|e| ImportError::format(path, e.to_string()))?;
            tables.insert(name, cols);
        }
        Ok(Source {
            path,
            rt,
            conn,
            tables,
            progress,
        })
    }

    fn has(&self, table: &str, col: &str) -> bool {
        self.tables
            .get(table)
            .is_some_and(|c| c.iter().any(|x| x == col))
    }

    /// `SELECT` of `cols` from `table`, with NULL for the columns this export lacks; `None`
    /// when the table is absent.
    fn select(&self, table: &str, cols: &[&str], tail: &str) -> Option<String> {
        self.tables.get(table)?;
        let list: Vec<String> = cols
            .iter()
            .map(|c| {
                if self.has(table, c) {
                    format!("\"{c}\"")
                } else {
                    "NULL".to_string()
                }
            })
            .collect();
        Some(format!(
            "SELECT {} FROM \"{table}\" {tail}",
            list.join(", ")
        ))
    }

    /// Steps through the rows of `sql`, calling `f` on each.
    fn rows(&mut self, sql: String, f: impl FnMut(&RawRows<'_>) -> Result<()>) -> Result<u64> {
        self.query(Query::one(sql), f)
    }

    /// The query of `cols` (which holds `start`) of `table` in `start` order, as `ORDER BY
    /// start` gives it; `None` when the table is absent.
    ///
    /// An export's tables are mostly in `start` order already, or made of a few runs in that
    /// order, yet `ORDER BY start` has SQLite sort every row, which takes about as long as
    /// reading them. So a first pass over (rowid, start) finds
    /// where each run begins, and the query reads the runs side by side in rowid order and
    /// merges them. SQLite's sorter keeps rows with equal keys in the order it read them
    /// (rowid order), as the merge does by taking the earlier run first, so the rows come in
    /// the same order. When a `start` is not an integer (SQLite orders mixed types its own
    /// way) or the runs are too many, SQLite sorts as before.
    fn by_start(&mut self, table: &str, cols: &[&str]) -> Result<Option<Query>> {
        let (Some(key), Some(all)) = (
            cols.iter().position(|c| *c == "start"),
            self.select(table, cols, ""),
        ) else {
            return Ok(None);
        };
        let runs = if self.has(table, "start") {
            self.runs(table)?
        } else {
            None
        };
        let Some(runs) = runs else {
            return Ok(Some(Query::one(format!("{all} ORDER BY start"))));
        };
        let sqls = runs
            .iter()
            .enumerate()
            .map(|(k, lo)| match runs.get(k + 1) {
                Some(hi) => format!("{all} WHERE rowid >= {lo} AND rowid < {hi} ORDER BY rowid"),
                None => format!("{all} WHERE rowid >= {lo} ORDER BY rowid"),
            })
            .collect();
        Ok(Some(Query { sqls, key }))
    }

    /// The first rowid of each run of rows in `start` order in `table`, read in rowid order;
    /// `None` when SQLite must sort the table (see [`Source::by_start`]).
    fn runs(&mut self, table: &str) -> Result<Option<Vec<i64>>> {
        /// More runs than this are cheaper to sort than to merge.
        const MAX_RUNS: usize = 1024;
        let mut runs = Vec::new();
        let mut last = i64::MIN;
        let mut sortable = true;
        let sql = format!("SELECT rowid, \"start\" FROM \"{table}\" ORDER BY rowid");
        self.scan(sql, |r| {
            let (Some(rowid), Some(start)) = (r.int(0), r.int(1)) else {
                sortable = false;
                return Ok(false);
            };
            if runs.is_empty() || start < last {
                if runs.len() == MAX_RUNS {
                    sortable = false;
                    return Ok(false);
                }
                runs.push(rowid);
            }
            last = start;
            Ok(true)
        })?;
        Ok((sortable && !runs.is_empty()).then_some(runs))
    }

    /// Steps through `sql`'s rows, calling `f` on each until it returns `false`; counts no
    /// events.
    fn scan(&mut self, sql: String, mut f: impl FnMut(&RawRows<'_>) -> Result<bool>) -> Result<()> {
        let path = self.path;
        let conn = &mut self.conn;
        let bad = |e: &dyn std::fmt::Display| {
            ImportError::format(path, format!("reading the export: {e}"))
        };
        self.rt.block_on(async move {
            let mut handle = conn.lock_handle().await.map_err(|e| bad(&e))?;
            let mut rows = RawRows::prepare(&mut handle, &sql).map_err(|e| bad(&e))?;
            while rows.step().map_err(|e| bad(&e))? && f(&rows)? {}
            Ok(())
        })
    }

    /// Steps through the rows of `q`, calling `f` on each.
    fn query(&mut self, q: Query, mut f: impl FnMut(&RawRows<'_>) -> Result<()>) -> Result<u64> {
        let Query { sqls, key } = q;
        let path = self.path;
        let progress = self.progress;
        let conn = &mut self.conn;
        let bad = |e: &dyn std::fmt::Display| {
            ImportError::format(path, format!("reading the export: {e}"))
        };
        self.rt.block_on(async move {
            let mut handle = conn.lock_handle().await.map_err(|e| bad(&e))?;
            let mut cursors = RawRows::prepare_each(&mut handle, &sqls).map_err(|e| bad(&e))?;
            // The statement to step next, by (its row's key, its place in `sqls`).
            let mut next = BinaryHeap::with_capacity(cursors.len());
            for (k, c) in cursors.iter_mut().enumerate() {
                if c.step().map_err(|e| bad(&e))? {
                    next.push(Reverse((c.int(key), k)));
                }
            }
            let mut n = 0;
            while let Some(mut top) = next.peek_mut() {
                let k = top.0 .1;
                let c = &mut cursors[k];
                f(c)?;
                n += 1;
                if n % PROGRESS_EVERY == 0 {
                    if let Some(p) = progress {
                        p.add_events(PROGRESS_EVERY);
                    }
                }
                if c.step().map_err(|e| bad(&e))? {
                    // Moved back into place when `top` drops.
                    top.0 = (c.int(key), k);
                } else {
                    PeekMut::pop(top);
                }
            }
            if let Some(p) = progress {
                p.add_events(n % PROGRESS_EVERY);
            }
            Ok(n)
        })
    }

    fn meta(&mut self, table: &str) -> Result<Vec<(String, String)>> {
        let Some(sql) = self.select(table, &["name", "value"], "") else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.rows(sql, |r| {
            let name = get_text(r, 0);
            let value = get_text(r, 1);
            if let (Some(n), Some(v)) = (name, value) {
                out.push((n, v));
            }
            Ok(())
        })?;
        Ok(out)
    }
}

fn get_i64(r: &RawRows<'_>, i: usize) -> Option<i64> {
    r.int(i)
}

fn get_f64(r: &RawRows<'_>, i: usize) -> Option<f64> {
    r.real(i)
}

fn get_text(r: &RawRows<'_>, i: usize) -> Option<String> {
    r.text(i).map(str::to_string)
}

/// Maps nsys StringIds to the run's interned strings, interning on first use (looked up once
/// an event: a fast hash matters here).
struct Names {
    source: FxHashMap<i64, String>,
    ours: FxHashMap<i64, StrId>,
}

impl Names {
    fn get(&mut self, w: &mut Writer, id: Option<i64>) -> Option<StrId> {
        let id = id?;
        if let Some(&s) = self.ours.get(&id) {
            return Some(s);
        }
        let text = self.source.get(&id)?;
        let s = w.intern(text);
        self.ours.insert(id, s);
        Some(s)
    }
}

pub(crate) fn import(
    path: &Path,
    output: &Path,
    create: CreateOptions,
    progress: Option<&Progress>,
) -> Result<ImportReport> {
    if let Some(p) = progress {
        p.phase("reading", 0);
    }
    let mut src = Source::open(path, progress)?;
    if src.tables.contains_key("run")
        && src.tables.contains_key("meta")
        && src.tables.contains_key("kernels")
    {
        return Err(ImportError::format(
            path,
            "this is already a fuseprof run file; open it directly",
        ));
    }
    if !src.tables.contains_key("META_DATA_EXPORT") {
        return Err(ImportError::format(
            path,
            "an SQLite file but not an nsys export (no META_DATA_EXPORT table)",
        ));
    }
    let export: HashMap<String, String> = src.meta("META_DATA_EXPORT")?.into_iter().collect();
    let version = export
        .get("EXPORT_SCHEMA_VERSION")
        .cloned()
        .unwrap_or_default();
    let major = export
        .get("EXPORT_SCHEMA_VERSION_MAJOR")
        .cloned()
        .or_else(|| version.split('.').next().map(str::to_string))
        .and_then(|m| m.parse::<i64>().ok());
    match major {
        Some(SUPPORTED_MAJOR) => {}
        Some(m) => {
            return Err(ImportError::format(
                path,
                format!(
                    "nsys export schema {version} (major {m}) is not supported; \
                     fuseprof reads schema {SUPPORTED_MAJOR}.x"
                ),
            ))
        }
        None => {
            return Err(ImportError::format(
                path,
                "the nsys export does not say its schema version",
            ))
        }
    }

    let mut source_strings = FxHashMap::default();
    if let Some(sql) = src.select("StringIds", &["id", "value"], "") {
        src.rows(sql, |r| {
            if let (Some(id), Some(v)) = (get_i64(r, 0), get_text(r, 1)) {
                source_strings.insert(id, v);
            }
            Ok(())
        })?;
    }
    let mut names = Names {
        source: source_strings,
        ours: FxHashMap::default(),
    };

    let mut w = Writer::create(output, create)?;
    let mut source_events = 0u64;
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    let mut named = 0u64;
    let mut devices: BTreeMap<i64, Device> = BTreeMap::new();

    // Kernels.
    if let Some(sql) = src.by_start(
        "CUPTI_ACTIVITY_KIND_KERNEL",
        &[
            "start",
            "end",
            "deviceId",
            "streamId",
            "globalPid",
            "correlationId",
            "demangledName",
            "shortName",
            "gridX",
            "gridY",
            "gridZ",
            "blockX",
            "blockY",
            "blockZ",
            "registersPerThread",
            "staticSharedMemory",
            "dynamicSharedMemory",
            "graphId",
        ],
    )? {
        source_events += src.query(sql, |r| {
            let name = names
                .get(&mut w, get_i64(r, 6))
                .or_else(|| names.get(&mut w, get_i64(r, 7)))
                .unwrap_or_else(|| w.intern("<unnamed kernel>"));
            let dims = |i| Some([get_i64(r, i)?, get_i64(r, i + 1)?, get_i64(r, i + 2)?]);
            let device_id = get_i64(r, 2).unwrap_or(0);
            devices.entry(device_id).or_insert_with(|| Device {
                id: device_id,
                ..Default::default()
            });
            w.kernel(Kernel {
                start_ns: get_i64(r, 0).unwrap_or(0),
                end_ns: get_i64(r, 1).unwrap_or(0),
                device_id,
                stream_id: get_i64(r, 3).unwrap_or(0),
                pid: get_i64(r, 4).map(|g| split_global_tid(g).0),
                correlation_id: get_i64(r, 5),
                external_id: None,
                name,
                grid: dims(8),
                block: dims(11),
                registers_per_thread: get_i64(r, 14),
                static_smem_bytes: get_i64(r, 15),
                dynamic_smem_bytes: get_i64(r, 16),
                graph_id: get_i64(r, 17),
            })?;
            Ok(())
        })?;
    }

    // Copies and fills.
    for (table, kind) in [
        ("CUPTI_ACTIVITY_KIND_MEMCPY", MemopKind::Memcpy),
        ("CUPTI_ACTIVITY_KIND_MEMSET", MemopKind::Memset),
    ] {
        let Some(sql) = src.by_start(
            table,
            &[
                "start",
                "end",
                "deviceId",
                "streamId",
                "globalPid",
                "correlationId",
                "bytes",
                "copyKind",
                "value",
            ],
        )?
        else {
            continue;
        };
        source_events += src.query(sql, |r| {
            w.memop(Memop {
                kind,
                start_ns: get_i64(r, 0).unwrap_or(0),
                end_ns: get_i64(r, 1).unwrap_or(0),
                device_id: get_i64(r, 2).unwrap_or(0),
                stream_id: get_i64(r, 3).unwrap_or(0),
                pid: get_i64(r, 4).map(|g| split_global_tid(g).0),
                correlation_id: get_i64(r, 5),
                external_id: None,
                bytes: get_i64(r, 6),
                copy_kind: (kind == MemopKind::Memcpy)
                    .then(|| CopyKind::from_cupti(get_i64(r, 7).unwrap_or(0))),
                value: if kind == MemopKind::Memset {
                    get_i64(r, 8)
                } else {
                    None
                },
            })?;
            Ok(())
        })?;
    }

    // CUDA runtime and driver calls (eventClass 0 = runtime, 1 = driver).
    if let Some(sql) = src.by_start(
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        &[
            "start",
            "end",
            "eventClass",
            "globalTid",
            "correlationId",
            "nameId",
            "returnValue",
        ],
    )? {
        source_events += src.query(sql, |r| {
            let (pid, tid) = split_global_tid(get_i64(r, 3).unwrap_or(0));
            let name = names
                .get(&mut w, get_i64(r, 5))
                .unwrap_or_else(|| w.intern("<unnamed call>"));
            w.thread(pid, tid, None);
            w.api_call(ApiCall {
                api: if get_i64(r, 2) == Some(1) {
                    Api::Driver
                } else {
                    Api::Runtime
                },
                start_ns: get_i64(r, 0).unwrap_or(0),
                end_ns: get_i64(r, 1).unwrap_or(0),
                pid,
                tid,
                correlation_id: get_i64(r, 4),
                external_id: None,
                name,
                return_code: get_i64(r, 6),
            })?;
            Ok(())
        })?;
    }

    // Synchronisation spans sit on the GPU side (device, stream), as Kineto's cuda_sync does.
    if let Some(sql) = src.by_start(
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        &[
            "start",
            "end",
            "deviceId",
            "streamId",
            "correlationId",
            "syncType",
        ],
    )? {
        let sync_names: HashMap<i64, String> = enum_labels(&mut src, "ENUM_CUPTI_SYNC_TYPE")?;
        source_events += src.query(sql, |r| {
            let label = get_i64(r, 5)
                .and_then(|t| sync_names.get(&t).cloned())
                .unwrap_or_else(|| "Synchronize".into());
            let name = w.intern(&label);
            let mut range = Range::new(
                RangeKind::CudaSync,
                name,
                get_i64(r, 2).unwrap_or(0),
                get_i64(r, 3).unwrap_or(0),
                get_i64(r, 0).unwrap_or(0),
            );
            range.end_ns = get_i64(r, 1);
            range.correlation_id = get_i64(r, 4);
            w.range(range)?;
            Ok(())
        })?;
    }

    // NVTX: domain and category registrations first, so ranges can carry their names.
    let mut domains: FxHashMap<i64, StrId> = FxHashMap::default();
    let mut categories: FxHashMap<(i64, i64), StrId> = FxHashMap::default();
    if let Some(sql) = src.select(
        "NVTX_EVENTS",
        &["eventType", "domainId", "category", "text", "textId"],
        &format!("WHERE eventType IN ({NVTX_DOMAIN_CREATE}, {NVTX_CATEGORY})"),
    ) {
        src.rows(sql, |r| {
            let text = get_text(r, 3)
                .or_else(|| get_i64(r, 4).and_then(|i| names.source.get(&i).cloned()));
            let Some(text) = text else { return Ok(()) };
            let id = w.intern(&text);
            let domain = get_i64(r, 1).unwrap_or(0);
            if get_i64(r, 0) == Some(NVTX_DOMAIN_CREATE) {
                domains.insert(domain, id);
            } else if let Some(c) = get_i64(r, 2) {
                categories.insert((domain, c), id);
            }
            Ok(())
        })?;
    }
    if let Some(sql) = src.by_start(
        "NVTX_EVENTS",
        &[
            "start",
            "end",
            "eventType",
            "globalTid",
            "endGlobalTid",
            "domainId",
            "category",
            "color",
            "text",
            "textId",
        ],
    )? {
        source_events += src.query(sql, |r| {
            let kind = match get_i64(r, 2) {
                Some(NVTX_PUSH_POP) => RangeKind::NvtxPushPop,
                Some(NVTX_START_END) => RangeKind::NvtxStartEnd,
                Some(NVTX_MARK) => RangeKind::NvtxMark,
                Some(NVTX_DOMAIN_CREATE) | Some(NVTX_CATEGORY) => {
                    *skipped
                        .entry("NVTX domain/category registrations (folded into names)".into())
                        .or_default() += 1;
                    return Ok(());
                }
                Some(t) => {
                    *skipped
                        .entry(format!("NVTX events of type {t}"))
                        .or_default() += 1;
                    return Ok(());
                }
                None => {
                    *skipped
                        .entry("NVTX events without a type".into())
                        .or_default() += 1;
                    return Ok(());
                }
            };
            let (pid, tid) = split_global_tid(get_i64(r, 3).unwrap_or(0));
            let name = match r.text(8) {
                Some(t) => w.intern(t),
                None => names
                    .get(&mut w, get_i64(r, 9))
                    .unwrap_or_else(|| w.intern("")),
            };
            let domain_id = get_i64(r, 5).unwrap_or(0);
            let mut range = Range::new(kind, name, pid, tid, get_i64(r, 0).unwrap_or(0));
            range.end_ns = if kind == RangeKind::NvtxMark {
                None
            } else {
                get_i64(r, 1)
            };
            range.end_tid = get_i64(r, 4).map(|g| split_global_tid(g).1);
            range.domain = domains.get(&domain_id).copied();
            range.category = get_i64(r, 6).and_then(|c| {
                categories
                    .get(&(domain_id, c))
                    .copied()
                    .or_else(|| Some(w.intern(&c.to_string())))
            });
            range.color = get_i64(r, 7);
            w.thread(pid, tid, None);
            w.range(range)?;
            Ok(())
        })?;
    }

    // CUPTI's own overhead, as ranges on the thread that paid it.
    for table in ["CUPTI_ACTIVITY_KIND_OVERHEAD", "PROFILER_OVERHEAD"] {
        let Some(sql) = src.select(table, &["start", "end", "globalTid", "nameId"], "") else {
            continue;
        };
        let category = w.intern("profiler_overhead");
        source_events += src.rows(sql, |r| {
            let (pid, tid) = split_global_tid(get_i64(r, 2).unwrap_or(0));
            let name = names
                .get(&mut w, get_i64(r, 3))
                .unwrap_or_else(|| w.intern("overhead"));
            let mut range =
                Range::new(RangeKind::Other, name, pid, tid, get_i64(r, 0).unwrap_or(0));
            range.end_ns = get_i64(r, 1);
            range.category = Some(category);
            w.range(range)?;
            Ok(())
        })?;
    }

    // Names of processes and threads.
    if let Some(sql) = src.select("PROCESSES", &["globalPid", "pid", "name"], "") {
        source_events += src.rows(sql, |r| {
            let pid = get_i64(r, 1)
                .or_else(|| get_i64(r, 0).map(|g| split_global_tid(g).0))
                .unwrap_or(0);
            w.process(pid, get_text(r, 2).as_deref());
            named += 1;
            Ok(())
        })?;
    }
    if let Some(sql) = src.select("ThreadNames", &["nameId", "globalTid"], "") {
        source_events += src.rows(sql, |r| {
            let (pid, tid) = split_global_tid(get_i64(r, 1).unwrap_or(0));
            let name = get_i64(r, 0).and_then(|i| names.source.get(&i).cloned());
            w.thread(pid, tid, name.as_deref());
            named += 1;
            Ok(())
        })?;
    }

    // GPUs: TARGET_INFO_GPU where the export has it, else the ids kernels ran on.
    if let Some(sql) = src.select(
        "TARGET_INFO_GPU",
        &[
            "id",
            "name",
            "totalMemory",
            "smCount",
            "clockRate",
            "memoryBandwidth",
            "computeMajor",
            "computeMinor",
            "computeCapabilityMajor",
            "computeCapabilityMinor",
        ],
        "",
    ) {
        src.rows(sql, |r| {
            let id = get_i64(r, 0).unwrap_or(0);
            let name = get_text(r, 1);
            let bw = get_f64(r, 5).filter(|b| *b > 0.0);
            let peaks = name.as_deref().and_then(nominal_peaks);
            devices.insert(
                id,
                Device {
                    id,
                    compute_major: get_i64(r, 6).or_else(|| get_i64(r, 8)),
                    compute_minor: get_i64(r, 7).or_else(|| get_i64(r, 9)),
                    sm_count: get_i64(r, 3),
                    memory_bytes: get_i64(r, 2),
                    clock_khz: get_i64(r, 4).map(|hz| hz / 1000),
                    mem_bandwidth_bytes_per_s: bw.or(peaks.map(|p| p.0)),
                    peak_flops_fp16: peaks.map(|p| p.1),
                    peak_source: peaks.map(|_| "nominal".into()),
                    name,
                },
            );
            Ok(())
        })?;
    }
    for d in devices.into_values() {
        w.device(d);
    }

    let capture: Vec<(String, String)> = src.meta("META_DATA_CAPTURE")?;
    let mut command = capture
        .iter()
        .find(|(k, _)| k == "PROCESS_0:COMMAND")
        .map(|(_, v)| v.clone());
    if let Some(cmd) = command.as_mut() {
        let mut args: Vec<(usize, &String)> = capture
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("PROCESS_0:ARGUMENT_")
                    .and_then(|i| i.parse().ok())
                    .map(|i| (i, v))
            })
            .collect();
        args.sort();
        for (_, a) in args {
            cmd.push(' ');
            cmd.push_str(a);
        }
    }
    let mut start_unix_ns = None;
    if let Some(sql) = src.select("TARGET_INFO_SESSION_START_TIME", &["utcEpochNs"], "") {
        src.rows(sql, |r| {
            start_unix_ns = get_i64(r, 0);
            Ok(())
        })?;
    }
    let tool = match (
        export.get("EXPORT_PRODUCT_NAME"),
        export.get("EXPORT_PRODUCT_VERSION"),
    ) {
        (Some(n), Some(v)) => Some(format!("{n} {v}")),
        (Some(n), None) => Some(n.clone()),
        _ => Some("NVIDIA Nsight Systems".into()),
    };
    if let Some(p) = progress {
        p.phase("indexing", 0);
    }
    let counts = w.finish(RunInfo {
        source_format: "nsys".into(),
        source_path: Some(path.display().to_string()),
        command,
        host: export.get("EXPORT_HOST").cloned(),
        start_unix_ns,
        tool,
        tool_version: Some(format!("export schema {version}")),
        ..Default::default()
    })?;
    Ok(ImportReport {
        format: Format::Nsys,
        source_events,
        counts,
        skipped,
        names: named,
    })
}

fn enum_labels(src: &mut Source<'_>, table: &str) -> Result<HashMap<i64, String>> {
    let mut out = HashMap::new();
    if let Some(sql) = src.select(table, &["id", "label"], "") {
        src.rows(sql, |r| {
            if let (Some(id), Some(l)) = (get_i64(r, 0), get_text(r, 1)) {
                out.insert(id, l);
            }
            Ok(())
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::split_global_tid;

    #[test]
    fn global_tids_unpack_to_pid_and_tid() {
        // From the nsys fixture: python3 pid 145, its main thread.
        assert_eq!(split_global_tid(281477409407121), (145, 145));
        assert_eq!(split_global_tid(281477409406976), (145, 0));
    }
}
