//! Reading a run: metadata through sqlx queries, bulk scans through prepared statements.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Row, SqliteConnection};

pub(crate) mod pages;
mod timeline;
mod window;

pub use timeline::{
    ApiSpan, Direction, GpuKind, GpuSpan, HostSpan, PassKernel, PassMemop, PassRange, RowEstimates,
};

use crate::model::*;
use crate::raw::{self, RawDb, Stmt};
use crate::{Error, Result, SCHEMA_VERSION};
use pages::{PageFile, Record};

/// The columns of a [`Range`], in the order [`range_row`] reads them.
const RANGE_ROW_COLUMNS: &str = "kind, start_ns, end_ns, pid, tid, end_tid, domain_id, name_id, \
     category_id, color, depth, external_id, correlation_id, input_dims_id, input_types_id";

/// A [`Range`] from a row that selected [`RANGE_ROW_COLUMNS`].
fn range_row(s: &Stmt<'_>) -> Range {
    Range {
        kind: range_kind(s.col_bytes(0)),
        start_ns: s.col_i64(1),
        end_ns: s.col_opt_i64(2),
        pid: s.col_i64(3),
        tid: s.col_i64(4),
        end_tid: s.col_opt_i64(5),
        domain: s.col_opt_i64(6).map(StrId),
        name: StrId(s.col_i64(7)),
        category: s.col_opt_i64(8).map(StrId),
        color: s.col_opt_i64(9),
        depth: s.col_opt_i64(10),
        external_id: s.col_opt_i64(11),
        correlation_id: s.col_opt_i64(12),
        input_dims: s.col_opt_i64(13).map(StrId),
        input_types: s.col_opt_i64(14).map(StrId),
    }
}

/// `ranges.kind` as stored, unknown text read as [`RangeKind::Other`] (as the full scan does).
fn range_kind(text: &[u8]) -> RangeKind {
    RangeKind::from_bytes(text).unwrap_or(RangeKind::Other)
}

/// The columns of a [`LeanRange`], in the order [`lean_range_row`] reads them.
const LEAN_RANGE_ROW_COLUMNS: &str = "kind, start_ns, end_ns, pid, tid, domain_id, name_id, \
     category_id, depth, input_dims_id, input_types_id";

/// A [`LeanRange`] from a row that selected [`LEAN_RANGE_ROW_COLUMNS`] from column `at` on.
fn lean_range_row(s: &Stmt<'_>, at: i32) -> LeanRange {
    LeanRange {
        kind: range_kind(s.col_bytes(at)),
        start_ns: s.col_i64(at + 1),
        end_ns: s.col_opt_i64(at + 2),
        pid: s.col_i64(at + 3),
        tid: s.col_i64(at + 4),
        domain: s.col_opt_i64(at + 5).map(StrId),
        name: StrId(s.col_i64(at + 6)),
        category: s.col_opt_i64(at + 7).map(StrId),
        depth: s.col_opt_i64(at + 8),
        input_dims: s.col_opt_i64(at + 9).map(StrId),
        input_types: s.col_opt_i64(at + 10).map(StrId),
    }
}

/// The columns of a [`Kernel`], in the order [`kernel_row`] reads them.
const KERNEL_ROW_COLUMNS: &str = "start_ns, end_ns, device_id, stream_id, pid, correlation_id, \
     external_id, name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, \
     registers_per_thread, static_smem_bytes, dynamic_smem_bytes, graph_id";

/// A [`Kernel`] from a row that selected [`KERNEL_ROW_COLUMNS`] from column `at` on.
fn kernel_row(s: &Stmt<'_>, at: i32) -> Kernel {
    let triple = |i| {
        Some([
            s.col_opt_i64(i)?,
            s.col_opt_i64(i + 1)?,
            s.col_opt_i64(i + 2)?,
        ])
    };
    Kernel {
        start_ns: s.col_i64(at),
        end_ns: s.col_i64(at + 1),
        device_id: s.col_i64(at + 2),
        stream_id: s.col_i64(at + 3),
        pid: s.col_opt_i64(at + 4),
        correlation_id: s.col_opt_i64(at + 5),
        external_id: s.col_opt_i64(at + 6),
        name: StrId(s.col_i64(at + 7)),
        grid: triple(at + 8),
        block: triple(at + 11),
        registers_per_thread: s.col_opt_i64(at + 14),
        static_smem_bytes: s.col_opt_i64(at + 15),
        dynamic_smem_bytes: s.col_opt_i64(at + 16),
        graph_id: s.col_opt_i64(at + 17),
    }
}

/// The columns of a [`Memop`], in the order [`memop_row`] reads them.
const MEMOP_ROW_COLUMNS: &str = "kind, start_ns, end_ns, device_id, stream_id, pid, \
     correlation_id, external_id, bytes, copy_kind, value, src_memory, dst_memory";

/// [`MEMOP_ROW_COLUMNS`] for a run written before migration 7, whose copies have no memory
/// kinds: NULL in their place.
const MEMOP_ROW_COLUMNS_BEFORE_7: &str = "kind, start_ns, end_ns, device_id, stream_id, pid, \
     correlation_id, external_id, bytes, copy_kind, value, NULL, NULL";

/// A [`Memop`] from a row that selected [`MEMOP_ROW_COLUMNS`].
fn memop_row(s: &Stmt<'_>) -> Memop {
    Memop {
        kind: s
            .col_text(0)
            .and_then(MemopKind::parse)
            .unwrap_or(MemopKind::Memcpy),
        start_ns: s.col_i64(1),
        end_ns: s.col_i64(2),
        device_id: s.col_i64(3),
        stream_id: s.col_i64(4),
        pid: s.col_opt_i64(5),
        correlation_id: s.col_opt_i64(6),
        external_id: s.col_opt_i64(7),
        bytes: s.col_opt_i64(8),
        copy_kind: s.col_text(9).map(CopyKind::parse),
        value: s.col_opt_i64(10),
        src_memory: s.col_text(11).and_then(MemoryKind::parse),
        dst_memory: s.col_text(12).and_then(MemoryKind::parse),
    }
}

/// The columns of an [`ApiCall`], in the order [`api_call_row`] reads them.
const API_CALL_ROW_COLUMNS: &str = "api, start_ns, end_ns, pid, tid, correlation_id, \
     external_id, name_id, return_code";

/// An [`ApiCall`] from a row that selected [`API_CALL_ROW_COLUMNS`].
fn api_call_row(s: &Stmt<'_>) -> ApiCall {
    ApiCall {
        api: s.col_text(0).and_then(Api::parse).unwrap_or(Api::Runtime),
        start_ns: s.col_i64(1),
        end_ns: s.col_i64(2),
        pid: s.col_i64(3),
        tid: s.col_i64(4),
        correlation_id: s.col_opt_i64(5),
        external_id: s.col_opt_i64(6),
        name: StrId(s.col_i64(7)),
        return_code: s.col_opt_i64(8),
    }
}

/// An open, complete run.
pub struct Store {
    path: PathBuf,
    rt: tokio::runtime::Runtime,
    conn: SqliteConnection,
    /// The schema version the file was written with.
    pub schema_version: i64,
    /// Whether lean scans may read table pages from the file directly.
    page_scans: bool,
    /// How the last lean scan read its rows.
    last_lean_scan: PagesAndSql,
    /// The read-only connection the queries and scans step on, opened at their first use.
    raw: Option<RawDb>,
    /// Whether `memops` has the memory kind columns of migration 7.
    memops_memory: bool,
}

/// Rows a lean scan read from the table's pages and through SQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PagesAndSql {
    pages: u64,
    sql: u64,
}

/// `meta` keys that belong to the store itself (the writer refuses them as a run's facts).
pub(crate) const RESERVED_META: [&str; 2] = ["format", "schema_version"];

/// A table as the page scans expect it and the bulk writer writes it: its columns in order,
/// the first the rowid.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) columns: &'static [&'static str],
}

pub(crate) const STRINGS: Table = Table {
    name: "strings",
    columns: &["id", "value"],
};

pub(crate) const RANGES: Table = Table {
    name: "ranges",
    columns: &[
        "id",
        "kind",
        "start_ns",
        "end_ns",
        "pid",
        "tid",
        "end_tid",
        "domain_id",
        "name_id",
        "category_id",
        "color",
        "depth",
        "external_id",
        "correlation_id",
        "input_dims_id",
        "input_types_id",
    ],
};

pub(crate) const API_CALLS: Table = Table {
    name: "api_calls",
    columns: &[
        "id",
        "api",
        "start_ns",
        "end_ns",
        "pid",
        "tid",
        "correlation_id",
        "external_id",
        "name_id",
        "return_code",
    ],
};

pub(crate) const MEMOPS: Table = Table {
    name: "memops",
    columns: &[
        "id",
        "kind",
        "start_ns",
        "end_ns",
        "device_id",
        "stream_id",
        "pid",
        "correlation_id",
        "external_id",
        "bytes",
        "copy_kind",
        "value",
        "src_memory",
        "dst_memory",
    ],
};

/// [`MEMOPS`] as runs written before migration 7 hold it: no memory kinds.
pub(crate) const MEMOPS_BEFORE_7: Table = Table {
    name: "memops",
    columns: MEMOPS.columns.split_at(12).0,
};

pub(crate) const KERNELS: Table = Table {
    name: "kernels",
    columns: &[
        "id",
        "start_ns",
        "end_ns",
        "device_id",
        "stream_id",
        "pid",
        "correlation_id",
        "external_id",
        "name_id",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers_per_thread",
        "static_smem_bytes",
        "dynamic_smem_bytes",
        "graph_id",
    ],
};

pub(crate) const FLOWS: Table = Table {
    name: "flows",
    columns: &[
        "id",
        "category_id",
        "flow_id",
        "phase",
        "ts_ns",
        "pid",
        "tid",
    ],
};

/// The first start and the last end of a run's records.
const SPAN_SQL: &str = "SELECT min(s), max(e) FROM ( \
     SELECT min(start_ns) s, max(end_ns) e FROM kernels \
     UNION ALL SELECT min(start_ns), max(end_ns) FROM memops \
     UNION ALL SELECT min(start_ns), max(end_ns) FROM api_calls \
     UNION ALL SELECT min(start_ns), max(coalesce(end_ns, start_ns)) FROM ranges)";

/// The run's string table; ids are dense from 1.
pub struct Strings {
    values: Vec<String>,
}

impl Strings {
    /// The text of `id`; an id the table lacks reads as "".
    pub fn get(&self, id: StrId) -> &str {
        usize::try_from(id.0 - 1)
            .ok()
            .and_then(|i| self.values.get(i))
            .map_or("", |s| s.as_str())
    }
    pub fn len(&self) -> usize {
        self.values.len()
    }
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Counts of what a run holds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TableCounts {
    pub kernels: i64,
    pub memcpys: i64,
    pub memsets: i64,
    pub runtime_calls: i64,
    pub driver_calls: i64,
    pub ranges: Vec<(String, i64)>,
    pub flows: i64,
    pub strings: i64,
    pub processes: i64,
    pub threads: i64,
    pub streams: i64,
}

/// What `fuseprof info` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Info {
    pub path: String,
    pub schema_version: i64,
    pub run: RunInfo,
    pub counts: TableCounts,
    pub devices: Vec<Device>,
    /// Earliest start and latest end over every record, in the source's clock.
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    pub kernel_time_ns: i64,
    /// Run-level facts written with [`crate::Writer::meta`], by key.
    pub meta: Vec<(String, String)>,
    /// The copies between host and device, by direction and host memory.
    pub host_copies: Vec<HostCopies>,
}

/// Copies of one direction between host and device from one kind of host memory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostCopies {
    /// `HtoD` or `DtoH`.
    pub direction: String,
    /// `pageable` or `pinned`; `None` where the source did not record it.
    pub host_memory: Option<MemoryKind>,
    pub count: i64,
    pub time_ns: i64,
    pub bytes: i64,
}

/// What opening a file whose schema is not UTF-8 says.
pub const SCHEMA_NOT_UTF8: &str =
    "its schema holds text that is not UTF-8: a corrupt or foreign SQLite file";

/// Whether every statement of the file's schema is UTF-8. sqlx panics (in its worker thread,
/// leaving the caller waiting for ever) when a column's declared type is not, so this is asked
/// before any query that reads a table of an untrusted file.
pub async fn schema_text_is_utf8(conn: &mut sqlx::SqliteConnection) -> sqlx::Result<bool> {
    let texts: Vec<Option<Vec<u8>>> =
        sqlx::query_scalar("SELECT CAST(sql AS BLOB) FROM sqlite_master")
            .fetch_all(conn)
            .await?;
    Ok(texts
        .iter()
        .flatten()
        .all(|t| std::str::from_utf8(t).is_ok()))
}

fn not_a_store(path: &Path, reason: impl Into<String>) -> Error {
    Error::NotAStore {
        path: path.into(),
        reason: reason.into(),
    }
}

/// The root page of `table` when its columns are the ones the lean scans expect, with the
/// first an alias of the rowid; `None` otherwise (SQL then reads it).
fn table_root(db: std::ptr::NonNull<libsqlite3_sys::sqlite3>, table: &Table) -> Option<u32> {
    let mut st = Stmt::prepare(
        db,
        "SELECT rootpage, sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
    )
    .ok()?;
    st.bind_text(1, table.name).ok()?;
    if !st.step().ok()? {
        return None;
    }
    let root = u32::try_from(st.col_i64(0)).ok()?;
    let create: String = st
        .col_text(1)?
        .to_ascii_uppercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    // A table without rowid is an index b-tree; `INTEGER PRIMARY KEY DESC` is no rowid alias.
    if create.contains("WITHOUT ROWID") || create.contains("PRIMARY KEY DESC") {
        return None;
    }
    drop(st);
    let mut st = Stmt::prepare(db, "SELECT name, type, pk FROM pragma_table_info(?1)").ok()?;
    st.bind_text(1, table.name).ok()?;
    let mut i = 0;
    while st.step().ok()? {
        let expected = table.columns.get(i)?;
        if st.col_text(0)? != *expected {
            return None;
        }
        // The first column alone is the primary key, declared INTEGER: an alias of the rowid
        // (stored as NULL in the record; the rows' order is its order).
        let pk = st.col_i64(2);
        let ok = if i == 0 {
            pk == 1 && st.col_text(1)?.eq_ignore_ascii_case("INTEGER")
        } else {
            pk == 0
        };
        if !ok {
            return None;
        }
        i += 1;
    }
    (i == table.columns.len() && root > 1).then_some(root)
}

impl Store {
    /// Opens a run written by [`crate::Writer`]; refuses files that are not runs, runs from a
    /// newer schema, and runs whose writer never finished.
    pub fn open(path: &Path) -> Result<Store> {
        let meta = std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.into(),
            error: source,
        })?;
        if !meta.is_file() {
            return Err(not_a_store(path, "it is not a file"));
        }
        // What SQLite would only find out at the first read of a bad page, said at once.
        let file = std::fs::File::open(path).map_err(|error| Error::Io {
            path: path.into(),
            error,
        })?;
        if let Ok(Some(Err(m))) = crate::fileformat::check(&file) {
            return Err(Error::Malformed {
                path: path.into(),
                reason: m.to_string(),
            });
        }
        drop(file);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|source| Error::Io {
                path: path.into(),
                error: source,
            })?;
        let mut conn = rt
            .block_on(
                SqliteConnectOptions::new()
                    .filename(path)
                    .read_only(true)
                    .disable_statement_logging()
                    .connect(),
            )
            .map_err(|e| not_a_store(path, format!("cannot open it as SQLite: {e}")))?;
        rt.block_on(schema_text_is_utf8(&mut conn))
            .map_err(|e| not_a_store(path, format!("cannot read its schema: {e}")))?
            .then_some(())
            .ok_or_else(|| not_a_store(path, SCHEMA_NOT_UTF8))?;
        let format: Option<String> = rt
            .block_on(
                sqlx::query_scalar("SELECT value FROM meta WHERE key = 'format'")
                    .fetch_optional(&mut conn),
            )
            .map_err(|e| match e {
                sqlx::Error::Database(d) if d.message().contains("no such table") => {
                    not_a_store(path, "an SQLite file without fuseprof's tables")
                }
                e => not_a_store(path, e.to_string()),
            })?;
        if format.as_deref() != Some("fuseprof-store") {
            return Err(not_a_store(path, "its meta table names no fuseprof store"));
        }
        let version: String = rt
            .block_on(
                sqlx::query_scalar("SELECT value FROM meta WHERE key = 'schema_version'")
                    .fetch_one(&mut conn),
            )
            .map_err(|e| not_a_store(path, format!("no schema version: {e}")))?;
        let schema_version: i64 = version
            .parse()
            .map_err(|_| not_a_store(path, format!("schema version {version:?}")))?;
        if schema_version > SCHEMA_VERSION {
            return Err(Error::NewerSchema {
                path: path.into(),
                found: schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        let complete: Option<i64> = rt.block_on(
            sqlx::query_scalar("SELECT complete FROM run WHERE id = 1").fetch_optional(&mut conn),
        )?;
        if complete != Some(1) {
            return Err(Error::Incomplete { path: path.into() });
        }
        let memops_memory: i64 = rt.block_on(
            sqlx::query_scalar(
                "SELECT count(*) FROM pragma_table_info('memops') \
                 WHERE name IN ('src_memory', 'dst_memory')",
            )
            .fetch_one(&mut conn),
        )?;
        Ok(Store {
            path: path.into(),
            rt,
            conn,
            schema_version,
            page_scans: true,
            last_lean_scan: PagesAndSql::default(),
            raw: None,
            memops_memory: memops_memory == 2,
        })
    }

    /// The raw read-only connection (see [`RawDb`]).
    pub(crate) fn raw_db(&mut self) -> Result<std::ptr::NonNull<libsqlite3_sys::sqlite3>> {
        if self.raw.is_none() {
            self.raw = Some(RawDb::open_read_only(&self.path)?);
        }
        Ok(self.raw.as_mut().expect("opened above").handle())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `memops` table as this run holds it, and the columns that select a [`Memop`] from
    /// it (NULL memory kinds in a run written before migration 7).
    pub(crate) fn memops_layout(&self) -> (&'static Table, &'static str) {
        if self.memops_memory {
            (&MEMOPS, MEMOP_ROW_COLUMNS)
        } else {
            (&MEMOPS_BEFORE_7, MEMOP_ROW_COLUMNS_BEFORE_7)
        }
    }

    pub(crate) fn rt_conn(&mut self) -> (&tokio::runtime::Runtime, &mut SqliteConnection) {
        (&self.rt, &mut self.conn)
    }

    /// Whether the lean scans (`for_each_lean_*`) read the tables' pages from the file
    /// directly (the default; 4 to 6 times faster on a large run) or step SQL SELECTs. Both
    /// give the same rows and values: where the pages hold anything the direct reader does not
    /// expect, SQL takes over from that row.
    pub fn set_page_scans(&mut self, on: bool) {
        self.page_scans = on;
    }

    pub fn run(&mut self) -> Result<RunInfo> {
        let row = self.rt.block_on(
            sqlx::query(
                "SELECT source_format, source_path, command, host, start_unix_ns, tool, \
                 tool_version, cuda_runtime_version, cuda_driver_version, cupti_version \
                 FROM run WHERE id = 1",
            )
            .fetch_one(&mut self.conn),
        )?;
        Ok(RunInfo {
            source_format: row.try_get(0)?,
            source_path: row.try_get(1)?,
            command: row.try_get(2)?,
            host: row.try_get(3)?,
            start_unix_ns: row.try_get(4)?,
            tool: row.try_get(5)?,
            tool_version: row.try_get(6)?,
            cuda_runtime_version: row.try_get(7)?,
            cuda_driver_version: row.try_get(8)?,
            cupti_version: row.try_get(9)?,
        })
    }

    pub fn devices(&mut self) -> Result<Vec<Device>> {
        let rows = self.rt.block_on(
            sqlx::query(
                "SELECT id, name, compute_major, compute_minor, sm_count, memory_bytes, \
                 clock_khz, mem_bandwidth_bytes_per_s, peak_flops_fp16, peak_source \
                 FROM devices ORDER BY id",
            )
            .fetch_all(&mut self.conn),
        )?;
        rows.iter()
            .map(|r| {
                Ok(Device {
                    id: r.try_get(0)?,
                    name: r.try_get(1)?,
                    compute_major: r.try_get(2)?,
                    compute_minor: r.try_get(3)?,
                    sm_count: r.try_get(4)?,
                    memory_bytes: r.try_get(5)?,
                    clock_khz: r.try_get(6)?,
                    mem_bandwidth_bytes_per_s: r.try_get(7)?,
                    peak_flops_fp16: r.try_get(8)?,
                    peak_source: r.try_get(9)?,
                })
            })
            .collect()
    }

    /// `(pid, name)` for every process.
    pub fn processes(&mut self) -> Result<Vec<(i64, Option<String>)>> {
        let rows = self.rt.block_on(
            sqlx::query_as("SELECT pid, name FROM processes ORDER BY pid")
                .fetch_all(&mut self.conn),
        )?;
        Ok(rows)
    }

    /// `(pid, tid, name)` for every thread.
    pub fn threads(&mut self) -> Result<Vec<(i64, i64, Option<String>)>> {
        let rows = self.rt.block_on(
            sqlx::query_as("SELECT pid, tid, name FROM threads ORDER BY pid, tid")
                .fetch_all(&mut self.conn),
        )?;
        Ok(rows)
    }

    /// The whole string table (unique texts only, so it stays small).
    pub fn strings(&mut self) -> Result<Strings> {
        // The writer numbers strings 1, 2, 3, ... in order; anything else is a corrupt file,
        // refused rather than trusted (an id taken as an index could be anything).
        let mut values = Vec::new();
        let mut bad = None;
        self.scan("SELECT id, value FROM strings ORDER BY id", |st| {
            let id = st.col_i64(0);
            if bad.is_none() && id == values.len() as i64 + 1 {
                values.push(st.col_text(1).unwrap_or("").to_string());
            } else {
                bad.get_or_insert(id);
            }
        })?;
        if let Some(id) = bad {
            return Err(not_a_store(
                &self.path,
                format!("its string table is corrupt (id {id} out of sequence)"),
            ));
        }
        Ok(Strings { values })
    }

    /// Run-level facts written with [`crate::Writer::meta`] (the store's own keys left out).
    pub fn meta(&mut self) -> Result<Vec<(String, String)>> {
        let rows: Vec<(String, String)> = self.rt.block_on(
            sqlx::query_as("SELECT key, value FROM meta ORDER BY key").fetch_all(&mut self.conn),
        )?;
        Ok(rows
            .into_iter()
            .filter(|(k, _)| !RESERVED_META.contains(&k.as_str()))
            .collect())
    }

    /// The earliest start and the latest end over every record (kernels, copies, API calls,
    /// ranges), on the run's clock: the span a timeline of the run shows, whose start is its
    /// zero (`fuseprof export`'s origin).
    pub fn span(&mut self) -> Result<(Option<i64>, Option<i64>)> {
        Ok(self
            .rt
            .block_on(sqlx::query_as(SPAN_SQL).fetch_one(&mut self.conn))?)
    }

    pub fn info(&mut self) -> Result<Info> {
        let run = self.run()?;
        let meta = self.meta()?;
        let devices = self.devices()?;
        let q = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
        let c = &mut self.conn;
        let rt = &self.rt;
        let mut counts = TableCounts {
            kernels: rt.block_on(q("SELECT count(*) FROM kernels").fetch_one(&mut *c))?,
            memcpys: rt.block_on(
                q("SELECT count(*) FROM memops WHERE kind = 'memcpy'").fetch_one(&mut *c),
            )?,
            memsets: rt.block_on(
                q("SELECT count(*) FROM memops WHERE kind = 'memset'").fetch_one(&mut *c),
            )?,
            runtime_calls: rt.block_on(
                q("SELECT count(*) FROM api_calls WHERE api = 'runtime'").fetch_one(&mut *c),
            )?,
            driver_calls: rt.block_on(
                q("SELECT count(*) FROM api_calls WHERE api = 'driver'").fetch_one(&mut *c),
            )?,
            ranges: Vec::new(),
            flows: rt.block_on(q("SELECT count(*) FROM flows").fetch_one(&mut *c))?,
            strings: rt.block_on(q("SELECT count(*) FROM strings").fetch_one(&mut *c))?,
            processes: rt.block_on(q("SELECT count(*) FROM processes").fetch_one(&mut *c))?,
            threads: rt.block_on(q("SELECT count(*) FROM threads").fetch_one(&mut *c))?,
            streams: rt.block_on(
                q(
                    "SELECT count(*) FROM (SELECT DISTINCT device_id, stream_id FROM kernels \
                   UNION SELECT DISTINCT device_id, stream_id FROM memops)",
                )
                .fetch_one(&mut *c),
            )?,
        };
        counts.ranges = rt.block_on(
            sqlx::query_as("SELECT kind, count(*) FROM ranges GROUP BY kind ORDER BY kind")
                .fetch_all(&mut *c),
        )?;
        let (first_ns, last_ns) = rt.block_on(sqlx::query_as(SPAN_SQL).fetch_one(&mut *c))?;
        let kernel_time_ns = rt.block_on(
            // total() and the cast: a kernel whose end minus start overflows 64 bits (a
            // corrupt record that was kept) makes a REAL, and an integer sum could overflow;
            // the cast saturates instead.
            q("SELECT CAST(total(end_ns - start_ns) AS INTEGER) FROM kernels").fetch_one(&mut *c),
        )?;
        // The host side of a copy: its source going to the device, its destination coming back.
        let host_side = if self.memops_memory {
            "CASE copy_kind WHEN 'HtoD' THEN src_memory ELSE dst_memory END"
        } else {
            "NULL"
        };
        let rows: Vec<(String, Option<String>, i64, i64, i64)> = rt.block_on(
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT copy_kind, {host_side} AS host, count(*), \
                 CAST(total(end_ns - start_ns) AS INTEGER), CAST(total(bytes) AS INTEGER) \
                 FROM memops WHERE kind = 'memcpy' AND copy_kind IN ('HtoD', 'DtoH') \
                 GROUP BY 1, 2 ORDER BY 1 DESC, 2"
            )))
            .fetch_all(&mut *c),
        )?;
        let host_copies = rows
            .into_iter()
            .map(|(direction, host, count, time_ns, bytes)| HostCopies {
                direction,
                host_memory: host.as_deref().and_then(MemoryKind::parse),
                count,
                time_ns,
                bytes,
            })
            .collect();
        Ok(Info {
            path: self.path.display().to_string(),
            schema_version: self.schema_version,
            run,
            counts,
            devices,
            first_ns,
            last_ns,
            kernel_time_ns,
            meta,
            host_copies,
        })
    }

    /// Runs a read-only query through the raw handle, calling `row` for each result row.
    fn scan(&mut self, sql: &str, row: impl FnMut(&Stmt<'_>)) -> Result<()> {
        self.query(sql, &[], row)
    }

    /// Runs `sql` with `params` bound to ?1, ?2, ... and calls `row` for each result row.
    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[i64],
        mut row: impl FnMut(&Stmt<'_>),
    ) -> Result<()> {
        let db = self.raw_db()?;
        let mut st = Stmt::prepare(db, sql)?;
        for (i, p) in params.iter().enumerate() {
            st.bind_i64(i as i32 + 1, *p)?;
        }
        while st.step()? {
            row(&st);
        }
        Ok(())
    }

    /// Every kernel, in the order they were written (read from the pages, as the lean scans
    /// are, SQL taking over at the first row they cannot decode).
    pub fn for_each_kernel(&mut self, mut f: impl FnMut(Kernel)) -> Result<()> {
        self.lean_scan(
            &KERNELS,
            &format!("SELECT {KERNEL_ROW_COLUMNS} FROM kernels WHERE id >= ?1 ORDER BY id"),
            |r: &Record<'_, 19>| {
                // As `kernel_row` reads them: a triple with a NULL is no triple.
                let triple = |i: usize| -> Option<Option<[i64; 3]>> {
                    Some(
                        match (r.opt_i64(i)?, r.opt_i64(i + 1)?, r.opt_i64(i + 2)?) {
                            (Some(x), Some(y), Some(z)) => Some([x, y, z]),
                            _ => None,
                        },
                    )
                };
                Some(Kernel {
                    start_ns: r.i64(1)?,
                    end_ns: r.i64(2)?,
                    device_id: r.i64(3)?,
                    stream_id: r.i64(4)?,
                    pid: r.opt_i64(5)?,
                    correlation_id: r.opt_i64(6)?,
                    external_id: r.opt_i64(7)?,
                    name: StrId(r.i64(8)?),
                    grid: triple(9)?,
                    block: triple(12)?,
                    registers_per_thread: r.opt_i64(15)?,
                    static_smem_bytes: r.opt_i64(16)?,
                    dynamic_smem_bytes: r.opt_i64(17)?,
                    graph_id: r.opt_i64(18)?,
                })
            },
            |s| kernel_row(s, 0),
            |k| f(k.clone()),
        )
    }

    /// Every memcpy and memset, in the order they were written.
    pub fn for_each_memop(&mut self, mut f: impl FnMut(Memop)) -> Result<()> {
        // Text read as SQL gives it: invalid UTF-8 as no text.
        fn text(b: &[u8]) -> Option<&str> {
            std::str::from_utf8(b).ok()
        }
        let kind = |t: Option<&str>| t.and_then(MemopKind::parse).unwrap_or(MemopKind::Memcpy);
        let (table, columns) = self.memops_layout();
        let memory = self.memops_memory;
        // A run before migration 7 has no memory kinds, and a row written before the run was
        // migrated ends at `value`: their memory kinds are NULL (the columns' default).
        let side = |r: &Record<'_, 14>, i: usize| -> Option<Option<MemoryKind>> {
            if !memory || !r.has(i) {
                return Some(None);
            }
            Some(r.opt_bytes(i)?.and_then(text).and_then(MemoryKind::parse))
        };
        self.lean_scan(
            table,
            &format!("SELECT {columns} FROM memops WHERE id >= ?1 ORDER BY id"),
            |r: &Record<'_, 14>| {
                Some(Memop {
                    kind: kind(r.opt_bytes(1)?.and_then(text)),
                    start_ns: r.i64(2)?,
                    end_ns: r.i64(3)?,
                    device_id: r.i64(4)?,
                    stream_id: r.i64(5)?,
                    pid: r.opt_i64(6)?,
                    correlation_id: r.opt_i64(7)?,
                    external_id: r.opt_i64(8)?,
                    bytes: r.opt_i64(9)?,
                    copy_kind: r.opt_bytes(10)?.and_then(text).map(CopyKind::parse),
                    value: r.opt_i64(11)?,
                    src_memory: side(r, 12)?,
                    dst_memory: side(r, 13)?,
                })
            },
            memop_row,
            |m| f(m.clone()),
        )
    }

    /// Every CUDA API call, in the order they were written.
    pub fn for_each_api_call(&mut self, mut f: impl FnMut(ApiCall)) -> Result<()> {
        let api = |t: Option<&str>| t.and_then(Api::parse).unwrap_or(Api::Runtime);
        self.lean_scan(
            &API_CALLS,
            &format!("SELECT {API_CALL_ROW_COLUMNS} FROM api_calls WHERE id >= ?1 ORDER BY id"),
            |r: &Record<'_, 10>| {
                Some(ApiCall {
                    api: api(r.opt_bytes(1)?.and_then(|b| std::str::from_utf8(b).ok())),
                    start_ns: r.i64(2)?,
                    end_ns: r.i64(3)?,
                    pid: r.i64(4)?,
                    tid: r.i64(5)?,
                    correlation_id: r.opt_i64(6)?,
                    external_id: r.opt_i64(7)?,
                    name: StrId(r.i64(8)?),
                    return_code: r.opt_i64(9)?,
                })
            },
            api_call_row,
            |a| f(a.clone()),
        )
    }

    /// Every range and mark, in the order they were written.
    pub fn for_each_range(&mut self, mut f: impl FnMut(Range)) -> Result<()> {
        self.lean_scan(
            &RANGES,
            &format!("SELECT {RANGE_ROW_COLUMNS} FROM ranges WHERE id >= ?1 ORDER BY id"),
            |r: &Record<'_, 16>| {
                Some(Range {
                    kind: range_kind(r.bytes(1)?),
                    start_ns: r.i64(2)?,
                    end_ns: r.opt_i64(3)?,
                    pid: r.i64(4)?,
                    tid: r.i64(5)?,
                    end_tid: r.opt_i64(6)?,
                    domain: r.opt_i64(7)?.map(StrId),
                    name: StrId(r.i64(8)?),
                    category: r.opt_i64(9)?.map(StrId),
                    color: r.opt_i64(10)?,
                    depth: r.opt_i64(11)?,
                    external_id: r.opt_i64(12)?,
                    correlation_id: r.opt_i64(13)?,
                    input_dims: r.opt_i64(14)?.map(StrId),
                    input_types: r.opt_i64(15)?.map(StrId),
                })
            },
            range_row,
            |r| f(r.clone()),
        )
    }

    /// A lean scan of `table`: its pages read directly where possible (rows decoded from the
    /// first `N` columns of each record by `from_record`, which returns `None` for anything
    /// it does not expect), then, from the first row the pages could not give, SQL (`sql`
    /// selects the rows from rowid `?1` on, decoded by `from_stmt`). `f` sees each row once,
    /// in rowid order. One read transaction spans both, so they read the same file.
    fn lean_scan<T, const N: usize>(
        &mut self,
        table: &Table,
        sql: &str,
        from_record: impl Fn(&Record<'_, N>) -> Option<T>,
        from_stmt: impl Fn(&Stmt<'_>) -> T,
        mut f: impl FnMut(&T),
    ) -> Result<()> {
        let page_scans = self.page_scans;
        let db = self.raw_db()?;
        let mut rows = PagesAndSql::default();
        let rows_read = &mut rows;
        let result = {
            let in_txn = page_scans && raw::exec(db, "BEGIN").is_ok();
            let result = (|| {
                let mut from = i64::MIN;
                if let Some(root) = in_txn.then(|| table_root(db, table)).flatten() {
                    // Reading the schema took SQLite's shared lock: until COMMIT no writer can
                    // change the file.
                    if let Some(pages) = PageFile::new(db) {
                        let resume = pages.scan(root, |_, rec| {
                            let Some(row) = Record::<N>::parse(rec).and_then(|r| from_record(&r))
                            else {
                                return false;
                            };
                            rows_read.pages += 1;
                            f(&row);
                            true
                        });
                        match resume {
                            None => return Ok(()),
                            Some(rowid) => from = rowid,
                        }
                    }
                }
                let mut st = Stmt::prepare(db, sql)?;
                st.bind_i64(1, from)?;
                while st.step()? {
                    rows_read.sql += 1;
                    f(&from_stmt(&st));
                }
                Ok(())
            })();
            // A read-only transaction: nothing to keep or undo.
            let commit = if in_txn {
                raw::exec(db, "COMMIT")
            } else {
                Ok(())
            };
            result.and(commit)
        };
        tracing::debug!(
            "{}: {} rows from its pages, {} through SQL",
            table.name,
            rows.pages,
            rows.sql
        );
        self.last_lean_scan = rows;
        result
    }

    /// Every range and mark, in the order they were written, with only the columns of
    /// [`LeanRange`]: what [`Store::for_each_range`] gives, faster.
    pub fn for_each_lean_range(&mut self, f: impl FnMut(&LeanRange)) -> Result<()> {
        // Columns in table order: SQLite decodes a record's header up to the last column read.
        self.lean_scan(
            &RANGES,
            &format!("SELECT {LEAN_RANGE_ROW_COLUMNS} FROM ranges WHERE id >= ?1 ORDER BY id"),
            |r: &Record<'_, 16>| {
                Some(LeanRange {
                    kind: range_kind(r.bytes(1)?),
                    start_ns: r.i64(2)?,
                    end_ns: r.opt_i64(3)?,
                    pid: r.i64(4)?,
                    tid: r.i64(5)?,
                    domain: r.opt_i64(7)?.map(StrId),
                    name: StrId(r.i64(8)?),
                    category: r.opt_i64(9)?.map(StrId),
                    depth: r.opt_i64(11)?,
                    input_dims: r.opt_i64(14)?.map(StrId),
                    input_types: r.opt_i64(15)?.map(StrId),
                })
            },
            |s| lean_range_row(s, 0),
            f,
        )
    }

    /// Every CUDA API call that has a correlation id, in the order they were written, with only
    /// the columns of [`LeanLaunch`].
    pub fn for_each_lean_launch(&mut self, mut f: impl FnMut(&LeanLaunch)) -> Result<()> {
        self.lean_scan(
            &API_CALLS,
            "SELECT start_ns, pid, tid, correlation_id FROM api_calls WHERE id >= ?1 \
             ORDER BY id",
            |r: &Record<'_, 7>| {
                let Some(correlation_id) = r.opt_i64(6)? else {
                    return Some(None);
                };
                Some(Some(LeanLaunch {
                    start_ns: r.i64(2)?,
                    pid: r.i64(4)?,
                    tid: r.i64(5)?,
                    correlation_id,
                }))
            },
            |s| {
                s.col_opt_i64(3).map(|correlation_id| LeanLaunch {
                    start_ns: s.col_i64(0),
                    pid: s.col_i64(1),
                    tid: s.col_i64(2),
                    correlation_id,
                })
            },
            |l| {
                if let Some(l) = l {
                    f(l)
                }
            },
        )
    }

    /// Every CUDA API call, in the order they were written, with only the columns of
    /// [`LeanCall`].
    pub fn for_each_lean_call(&mut self, f: impl FnMut(&LeanCall)) -> Result<()> {
        self.lean_scan(
            &API_CALLS,
            "SELECT start_ns, end_ns, pid, tid, correlation_id FROM api_calls WHERE id >= ?1 \
             ORDER BY id",
            |r: &Record<'_, 7>| {
                Some(LeanCall {
                    start_ns: r.i64(2)?,
                    end_ns: r.i64(3)?,
                    pid: r.i64(4)?,
                    tid: r.i64(5)?,
                    correlation_id: r.opt_i64(6)?,
                })
            },
            |s| LeanCall {
                start_ns: s.col_i64(0),
                end_ns: s.col_i64(1),
                pid: s.col_i64(2),
                tid: s.col_i64(3),
                correlation_id: s.col_opt_i64(4),
            },
            f,
        )
    }

    /// Every kernel, in the order they were written, with only the columns of [`LeanKernel`].
    pub fn for_each_lean_kernel(&mut self, f: impl FnMut(&LeanKernel)) -> Result<()> {
        self.lean_scan(
            &KERNELS,
            "SELECT start_ns, end_ns, device_id, stream_id, pid, correlation_id, external_id, \
             name_id, graph_id FROM kernels WHERE id >= ?1 ORDER BY id",
            |r: &Record<'_, 19>| {
                Some(LeanKernel {
                    start_ns: r.i64(1)?,
                    end_ns: r.i64(2)?,
                    device_id: r.i64(3)?,
                    stream_id: r.i64(4)?,
                    pid: r.opt_i64(5)?,
                    correlation_id: r.opt_i64(6)?,
                    external_id: r.opt_i64(7)?,
                    name: StrId(r.i64(8)?),
                    graph_id: r.opt_i64(18)?,
                })
            },
            |s| LeanKernel {
                start_ns: s.col_i64(0),
                end_ns: s.col_i64(1),
                device_id: s.col_i64(2),
                stream_id: s.col_i64(3),
                pid: s.col_opt_i64(4),
                correlation_id: s.col_opt_i64(5),
                external_id: s.col_opt_i64(6),
                name: StrId(s.col_i64(7)),
                graph_id: s.col_opt_i64(8),
            },
            f,
        )
    }

    /// Every memcpy and memset, in the order they were written, with only the columns of
    /// [`LeanMemop`].
    pub fn for_each_lean_memop(&mut self, f: impl FnMut(&LeanMemop)) -> Result<()> {
        // Text read as for_each_memop reads it: invalid UTF-8 as no text.
        let kind = |b: &[u8]| {
            std::str::from_utf8(b)
                .ok()
                .and_then(MemopKind::parse)
                .unwrap_or(MemopKind::Memcpy)
        };
        let copy_kind = |b: &[u8]| std::str::from_utf8(b).ok().map(CopyKind::parse);
        let (table, _) = self.memops_layout();
        self.lean_scan(
            table,
            "SELECT kind, start_ns, end_ns, device_id, stream_id, pid, correlation_id, \
             external_id, copy_kind FROM memops WHERE id >= ?1 ORDER BY id",
            |r: &Record<'_, 11>| {
                Some(LeanMemop {
                    kind: kind(r.bytes(1)?),
                    start_ns: r.i64(2)?,
                    end_ns: r.i64(3)?,
                    device_id: r.i64(4)?,
                    stream_id: r.i64(5)?,
                    pid: r.opt_i64(6)?,
                    correlation_id: r.opt_i64(7)?,
                    external_id: r.opt_i64(8)?,
                    copy_kind: r.opt_bytes(10)?.and_then(copy_kind),
                })
            },
            |s| LeanMemop {
                kind: kind(s.col_bytes(0)),
                start_ns: s.col_i64(1),
                end_ns: s.col_i64(2),
                device_id: s.col_i64(3),
                stream_id: s.col_i64(4),
                pid: s.col_opt_i64(5),
                correlation_id: s.col_opt_i64(6),
                external_id: s.col_opt_i64(7),
                copy_kind: s.col_opt_bytes(8).and_then(copy_kind),
            },
            f,
        )
    }

    /// Every flow end, in the order they were written.
    pub fn for_each_flow(&mut self, mut f: impl FnMut(Flow)) -> Result<()> {
        let phase = |t: Option<&str>| t.and_then(FlowPhase::parse).unwrap_or(FlowPhase::Start);
        self.lean_scan(
            &FLOWS,
            "SELECT category_id, flow_id, phase, ts_ns, pid, tid FROM flows WHERE id >= ?1 \
             ORDER BY id",
            |r: &Record<'_, 7>| {
                Some(Flow {
                    category: StrId(r.i64(1)?),
                    flow_id: r.i64(2)?,
                    phase: phase(r.opt_bytes(3)?.and_then(|b| std::str::from_utf8(b).ok())),
                    ts_ns: r.i64(4)?,
                    pid: r.i64(5)?,
                    tid: r.i64(6)?,
                })
            },
            |s| Flow {
                category: StrId(s.col_i64(0)),
                flow_id: s.col_i64(1),
                phase: phase(s.col_text(2)),
                ts_ns: s.col_i64(3),
                pid: s.col_i64(4),
                tid: s.col_i64(5),
            },
            |fl| f(fl.clone()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateOptions, Writer};

    /// A run whose rows mix every range kind, NULL and non-NULL values in every nullable column
    /// the lean scans read, and API calls with and without correlation ids.
    fn varied_run(path: &Path, rows: i64) -> crate::Counts {
        let mut w = Writer::create(path, CreateOptions::default()).unwrap();
        let names: Vec<StrId> = (0..7).map(|i| w.intern(&format!("name {i}"))).collect();
        // A small deterministic generator: each row's choices differ, no two runs differ.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for i in 0..rows {
            let t = i * 1_000;
            let mut opt = |v: i64| (next(3) != 0).then_some(v);
            let mut r = Range::new(
                RangeKind::ALL[i as usize % RangeKind::ALL.len()],
                names[i as usize % names.len()],
                1 + i % 2,
                10 + i % 3,
                t,
            );
            r.end_ns = opt(t + 500);
            r.end_tid = opt(11);
            r.domain = opt(1).map(|_| names[1]);
            r.category = opt(1).map(|_| names[2]);
            r.color = opt(0xff00ff);
            r.depth = opt(i % 4);
            r.external_id = opt(i);
            r.correlation_id = opt(i + 7);
            r.input_dims = opt(1).map(|_| names[3]);
            r.input_types = opt(1).map(|_| names[4]);
            w.range(r).unwrap();
            w.api_call(ApiCall {
                api: if i % 5 == 0 {
                    Api::Driver
                } else {
                    Api::Runtime
                },
                start_ns: t + 10,
                end_ns: t + 20,
                pid: 1 + i % 2,
                tid: 10 + i % 3,
                correlation_id: opt(i),
                external_id: opt(i + 1),
                name: names[5],
                return_code: opt(0),
            })
            .unwrap();
            w.kernel(Kernel {
                start_ns: t + 100,
                end_ns: t + 100 + i % 50,
                device_id: i % 2,
                stream_id: 7 + i % 3,
                pid: opt(1 + i % 2),
                correlation_id: opt(i),
                external_id: opt(i + 1),
                name: names[6],
                grid: opt(1).map(|_| [i, 1, 1]),
                block: opt(1).map(|_| [256, 1, 1]),
                registers_per_thread: opt(32),
                static_smem_bytes: opt(0),
                dynamic_smem_bytes: opt(1024),
                graph_id: opt(3),
            })
            .unwrap();
            let memset = i % 4 == 0;
            w.memop(Memop {
                kind: if memset {
                    MemopKind::Memset
                } else {
                    MemopKind::Memcpy
                },
                start_ns: t + 200,
                end_ns: t + 300,
                device_id: i % 2,
                stream_id: 7,
                pid: opt(1),
                correlation_id: opt(i),
                external_id: opt(i + 1),
                bytes: opt(4096),
                copy_kind: if memset {
                    None
                } else {
                    opt(i % 12).map(CopyKind::from_cupti)
                },
                value: if memset { opt(0) } else { None },
                // Every kind, NULL and a value no CUPTI kind maps to among them.
                src_memory: if memset {
                    None
                } else {
                    opt(i % 9).and_then(|k| MemoryKind::from_cupti(k as u32))
                },
                dst_memory: if memset {
                    None
                } else {
                    opt(i % 7).and_then(|k| MemoryKind::from_cupti(k as u32 + 1))
                },
            })
            .unwrap();
            w.flow(Flow {
                category: names[i as usize % 7],
                flow_id: i / 2,
                phase: [FlowPhase::Start, FlowPhase::Step, FlowPhase::Finish][i as usize % 3],
                ts_ns: t + 15,
                pid: 1 + i % 2,
                tid: 10 + i % 3,
            })
            .unwrap();
        }
        w.finish(RunInfo {
            source_format: "cupti".into(),
            ..Default::default()
        })
        .unwrap()
    }

    /// The writer's span of the rows it took is the run's, as `info` reads it through SQL.
    #[test]
    fn the_writers_span_is_the_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        let counts = varied_run(&path, 3_000);
        let info = Store::open(&path).unwrap().info().unwrap();
        assert!(counts.first_ns.is_some());
        assert_eq!(
            (counts.first_ns, counts.last_ns),
            (info.first_ns, info.last_ns)
        );
    }

    #[test]
    fn range_kinds_read_as_parse_reads_them() {
        for k in RangeKind::ALL {
            assert_eq!(range_kind(k.as_str().as_bytes()), k);
        }
        for other in ["", "cpu_op ", "CPU_OP", "gpu_memcpy", "\u{e9}"] {
            assert_eq!(
                range_kind(other.as_bytes()),
                RangeKind::parse(other).unwrap_or(RangeKind::Other)
            );
        }
    }

    #[test]
    fn lean_scans_give_the_full_scans_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        varied_run(&path, 3_000);
        let mut s = Store::open(&path).unwrap();

        let mut full = Vec::new();
        s.for_each_range(|r| {
            full.push(LeanRange {
                kind: r.kind,
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                pid: r.pid,
                tid: r.tid,
                domain: r.domain,
                name: r.name,
                category: r.category,
                depth: r.depth,
                input_dims: r.input_dims,
                input_types: r.input_types,
            })
        })
        .unwrap();
        let mut lean = Vec::new();
        s.for_each_lean_range(|r| lean.push(*r)).unwrap();
        assert_eq!(full.len(), 3_000);
        assert_eq!(lean, full);
        // Every kind and both NULL and non-NULL in each nullable column were written.
        assert!(RangeKind::ALL
            .iter()
            .all(|k| lean.iter().any(|r| r.kind == *k)));
        assert!(lean.iter().any(|r| r.input_types.is_none()));
        assert!(lean.iter().any(|r| r.input_types.is_some()));

        let mut full = Vec::new();
        s.for_each_api_call(|a| {
            if let Some(correlation_id) = a.correlation_id {
                full.push(LeanLaunch {
                    start_ns: a.start_ns,
                    pid: a.pid,
                    tid: a.tid,
                    correlation_id,
                });
            }
        })
        .unwrap();
        let mut lean = Vec::new();
        s.for_each_lean_launch(|a| lean.push(*a)).unwrap();
        assert!(!lean.is_empty() && lean.len() < 3_000);
        assert_eq!(lean, full);

        let mut full = Vec::new();
        s.for_each_api_call(|a| {
            full.push(LeanCall {
                start_ns: a.start_ns,
                end_ns: a.end_ns,
                pid: a.pid,
                tid: a.tid,
                correlation_id: a.correlation_id,
            })
        })
        .unwrap();
        let mut lean = Vec::new();
        s.for_each_lean_call(|a| lean.push(*a)).unwrap();
        assert_eq!(full.len(), 3_000);
        assert_eq!(lean, full);

        let mut full = Vec::new();
        s.for_each_kernel(|k| {
            full.push(LeanKernel {
                start_ns: k.start_ns,
                end_ns: k.end_ns,
                device_id: k.device_id,
                stream_id: k.stream_id,
                pid: k.pid,
                correlation_id: k.correlation_id,
                external_id: k.external_id,
                name: k.name,
                graph_id: k.graph_id,
            })
        })
        .unwrap();
        let mut lean = Vec::new();
        s.for_each_lean_kernel(|k| lean.push(*k)).unwrap();
        assert_eq!(full.len(), 3_000);
        assert_eq!(lean, full);
        assert!(lean.iter().any(|k| k.graph_id.is_none()));
        assert!(lean.iter().any(|k| k.graph_id.is_some()));

        let mut full = Vec::new();
        s.for_each_memop(|m| {
            full.push(LeanMemop {
                kind: m.kind,
                start_ns: m.start_ns,
                end_ns: m.end_ns,
                device_id: m.device_id,
                stream_id: m.stream_id,
                pid: m.pid,
                correlation_id: m.correlation_id,
                external_id: m.external_id,
                copy_kind: m.copy_kind,
            })
        })
        .unwrap();
        let mut lean = Vec::new();
        s.for_each_lean_memop(|m| lean.push(*m)).unwrap();
        assert_eq!(full.len(), 3_000);
        assert_eq!(lean, full);
        assert!(lean.iter().any(|m| m.kind == MemopKind::Memset));
        assert!(lean.iter().any(|m| m.copy_kind.is_none()));
        assert!(lean.iter().any(|m| m.copy_kind == Some(CopyKind::DtoH)));
    }

    /// Runs `statements` on a writable connection to `path`.
    fn sql(path: &Path, statements: &str) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut c = SqliteConnectOptions::new()
                .filename(path)
                .connect()
                .await
                .unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(statements.to_string()))
                .execute(&mut c)
                .await
                .unwrap();
            c.close().await.unwrap();
        });
    }

    /// What the four lean scans give, and how each read its rows.
    struct LeanRows {
        ranges: Vec<LeanRange>,
        launches: Vec<LeanLaunch>,
        kernels: Vec<LeanKernel>,
        memops: Vec<LeanMemop>,
        read: [PagesAndSql; 4],
    }

    fn lean_rows(s: &mut Store) -> LeanRows {
        let mut ranges = Vec::new();
        s.for_each_lean_range(|r| ranges.push(*r)).unwrap();
        let r = s.last_lean_scan;
        let mut launches = Vec::new();
        s.for_each_lean_launch(|l| launches.push(*l)).unwrap();
        let l = s.last_lean_scan;
        let mut kernels = Vec::new();
        s.for_each_lean_kernel(|k| kernels.push(*k)).unwrap();
        let k = s.last_lean_scan;
        let mut memops = Vec::new();
        s.for_each_lean_memop(|m| memops.push(*m)).unwrap();
        LeanRows {
            ranges,
            launches,
            kernels,
            memops,
            read: [r, l, k, s.last_lean_scan],
        }
    }

    /// Every row of the five bulk tables through the full scans, as text, and how each scan
    /// read its rows.
    fn full_rows(s: &mut Store) -> (Vec<String>, [PagesAndSql; 5]) {
        let mut rows = Vec::new();
        s.for_each_range(|r| rows.push(format!("{r:?}"))).unwrap();
        let r = s.last_lean_scan;
        s.for_each_api_call(|a| rows.push(format!("{a:?}")))
            .unwrap();
        let a = s.last_lean_scan;
        s.for_each_kernel(|k| rows.push(format!("{k:?}"))).unwrap();
        let k = s.last_lean_scan;
        s.for_each_memop(|m| rows.push(format!("{m:?}"))).unwrap();
        let m = s.last_lean_scan;
        s.for_each_flow(|f| rows.push(format!("{f:?}"))).unwrap();
        (rows, [r, a, k, m, s.last_lean_scan])
    }

    /// The lean scans with page reading on and off, which must give the same rows, as must the
    /// full scans; returns how the lean page scans read theirs.
    fn pages_agree_with_sql(path: &Path) -> [PagesAndSql; 4] {
        let mut s = Store::open(path).unwrap();
        let pages = lean_rows(&mut s);
        let (full_pages, full_read) = full_rows(&mut s);
        s.set_page_scans(false);
        let (full_sql, full_sql_read) = full_rows(&mut s);
        assert!(full_sql_read.iter().all(|r| r.pages == 0 && r.sql > 0));
        assert_eq!(
            full_read.map(|r| r.pages + r.sql),
            full_sql_read.map(|r| r.sql)
        );
        assert_eq!(full_pages, full_sql);
        let sql = lean_rows(&mut s);
        assert!(sql.read.iter().all(|r| r.pages == 0 && r.sql > 0));
        assert_eq!(pages.ranges, sql.ranges);
        assert_eq!(pages.launches, sql.launches);
        assert_eq!(pages.kernels, sql.kernels);
        assert_eq!(pages.memops, sql.memops);
        pages.read
    }

    fn all_pages(rows: u64) -> PagesAndSql {
        PagesAndSql {
            pages: rows,
            sql: 0,
        }
    }

    #[test]
    fn page_scans_read_every_row_as_sql_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        // Enough rows for b-trees three levels deep.
        varied_run(&path, 40_000);
        assert_eq!(pages_agree_with_sql(&path), [all_pages(40_000); 4]);
        let (rows, read) = full_rows(&mut Store::open(&path).unwrap());
        assert_eq!(rows.len(), 5 * 40_000);
        assert_eq!(read, [all_pages(40_000); 5]);
    }

    /// A run written before migration 7 reads its copies' memory kinds as unknown, by pages as
    /// by SQL; migrated (the columns added, its rows left shorter than the table) it reads the
    /// same, still from its pages.
    #[test]
    fn runs_before_the_memory_kinds_read_them_as_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        varied_run(&path, 3_000);
        let mut s = Store::open(&path).unwrap();
        let (now, _) = full_rows(&mut s);
        assert!(now.iter().any(|r| r.contains("src_memory: Some(Pageable)")));
        drop(s);
        // Back to the table as it was (VACUUM rewrites every row without the columns).
        sql(
            &path,
            "ALTER TABLE memops DROP COLUMN src_memory; \
             ALTER TABLE memops DROP COLUMN dst_memory; \
             DELETE FROM _sqlx_migrations WHERE version = 7; VACUUM;",
        );
        let unknown: Vec<String> = now
            .iter()
            .map(|r| {
                let mut r = r.clone();
                for kind in ["Pageable", "Pinned", "Device", "Managed", "Array"] {
                    r = r.replace(&format!("Some({kind})"), "None");
                }
                r
            })
            .collect();
        let mut s = Store::open(&path).unwrap();
        assert!(!s.memops_memory);
        let (old, read) = full_rows(&mut s);
        assert_eq!(old, unknown);
        assert_eq!(read[3], all_pages(3_000));
        let mut one = None;
        s.query("SELECT min(id) FROM memops", &[], |st| {
            one = Some(st.col_i64(0))
        })
        .unwrap();
        assert!(s.memop_by_id(one.unwrap()).unwrap().is_some());
        drop(s);
        assert_eq!(pages_agree_with_sql(&path), [all_pages(3_000); 4]);
        // Migrated: the columns are back, NULL in every row written before.
        sql(
            &path,
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/0007_memcpy_memory.sql"),
            )
            .unwrap(),
        );
        let mut s = Store::open(&path).unwrap();
        assert!(s.memops_memory);
        let (migrated, read) = full_rows(&mut s);
        assert_eq!(migrated, unknown);
        assert_eq!(read[3], all_pages(3_000));
    }

    #[test]
    fn page_scans_follow_small_pages_and_overflow_chains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        varied_run(&path, 3_000);
        // Small pages make deep trees; a 2,000-byte kind pushes the rest of its record onto
        // overflow pages (such kinds read as `Other` either way).
        sql(
            &path,
            "PRAGMA page_size = 512; VACUUM; \
             UPDATE ranges SET kind = kind || printf('%.2000c', 'x') WHERE id % 100 = 7;",
        );
        assert_eq!(pages_agree_with_sql(&path), [all_pages(3_000); 4]);
        let mut s = Store::open(&path).unwrap();
        let mut others = 0;
        s.for_each_lean_range(|r| others += u64::from(r.kind == RangeKind::Other))
            .unwrap();
        assert!(others >= 30);
    }

    #[test]
    fn sql_takes_over_from_the_first_value_pages_do_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        varied_run(&path, 3_000);
        // Floats and a text in integer columns: SQL reads them truncated, and as 0.
        sql(
            &path,
            "UPDATE ranges SET pid = 'x' WHERE id = 2000; \
             UPDATE kernels SET start_ns = 1.5 WHERE id = 1000; \
             UPDATE api_calls SET tid = 2.5 WHERE id = 500 AND correlation_id IS NOT NULL; \
             UPDATE api_calls SET correlation_id = 7 WHERE id = 500; \
             UPDATE memops SET device_id = 2.5 WHERE id = 2500;",
        );
        let read = pages_agree_with_sql(&path);
        assert_eq!(
            read,
            [
                PagesAndSql {
                    pages: 1_999,
                    sql: 1_001
                },
                PagesAndSql {
                    pages: 499,
                    sql: 2_501
                },
                PagesAndSql {
                    pages: 999,
                    sql: 2_001
                },
                PagesAndSql {
                    pages: 2_499,
                    sql: 501
                },
            ]
        );
        let mut s = Store::open(&path).unwrap();
        let rows = lean_rows(&mut s);
        assert_eq!(rows.ranges[1_999].pid, 0);
        assert_eq!(rows.kernels[999].start_ns, 1);
        assert!(rows
            .launches
            .iter()
            .any(|l| l.correlation_id == 7 && l.tid == 2));
        assert_eq!(rows.memops[2_499].device_id, 2);
    }

    #[test]
    fn a_table_with_other_columns_is_read_through_sql() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        varied_run(&path, 500);
        sql(&path, "ALTER TABLE kernels ADD COLUMN cluster_x INTEGER;");
        let read = pages_agree_with_sql(&path);
        assert_eq!(read[2], PagesAndSql { pages: 0, sql: 500 });
        assert_eq!(read[0], all_pages(500));
    }

    #[test]
    fn a_wal_file_is_read_through_sql() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        varied_run(&path, 500);
        sql(&path, "PRAGMA journal_mode = WAL;");
        let mut s = Store::open(&path).unwrap();
        let rows = lean_rows(&mut s);
        assert_eq!(rows.ranges.len(), 500);
        assert_eq!(s.last_lean_scan, PagesAndSql { pages: 0, sql: 500 });
    }
}
