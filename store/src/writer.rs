//! The one writer: every source (importers, the live collector) fills a run through it.
//!
//! Records are interned and batched on the caller's thread, then handed over a bounded channel
//! to a dedicated thread that encodes each batch straight into the b-tree pages of the file
//! (`btree.rs`: SQLite creates the schema, the bulk tables and their indexes are written as
//! pages; the small tables go through SQL at `finish`). The caller never waits on the writer
//! unless the channel is full, memory stays bounded by the channel and the index keys, and the
//! file appears under its final name only when `finish` succeeds.

pub(crate) mod btree;
mod interner;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteLockingMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqliteConnection};

use crate::model::*;
use crate::raw;
use crate::reader::{Table, API_CALLS, FLOWS, KERNELS, MEMOPS, RANGES, RESERVED_META, STRINGS};
use crate::{Error, Result};
use btree::{Geometry, PageFile, PairIndex, PrefixIndex, Record, TableTree};

const BATCH_RECORDS: usize = 16 * 1024;
const CHANNEL_BATCHES: usize = 4;

/// How many records of each kind a writer took, and when they lie.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub api_calls: u64,
    pub ranges: u64,
    pub flows: u64,
    pub strings: u64,
    /// The first start and the last end of the kernels, copies, API calls and ranges (a range
    /// without an end counts its start), as [`crate::Store::info`] gives them for the run.
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
}

impl Counts {
    /// Every record that became a row (strings excluded).
    pub fn events(&self) -> u64 {
        self.kernels + self.memcpys + self.memsets + self.api_calls + self.ranges + self.flows
    }
}

#[derive(Default)]
struct Batch {
    /// [`Writer::link_gpu_pids`] was on when this batch was sent.
    link_gpu_pids: bool,
    strings: Vec<(i64, Box<str>)>,
    kernels: Vec<Kernel>,
    memops: Vec<Memop>,
    api_calls: Vec<ApiCall>,
    ranges: Vec<Range>,
    flows: Vec<Flow>,
}

impl Batch {
    fn len(&self) -> usize {
        self.strings.len()
            + self.kernels.len()
            + self.memops.len()
            + self.api_calls.len()
            + self.ranges.len()
            + self.flows.len()
    }

    /// Empties the batch for reuse, keeping its capacity (fresh vectors would cost a page
    /// fault for every 4 KiB of records).
    fn clear(&mut self) {
        self.strings.clear();
        self.kernels.clear();
        self.memops.clear();
        self.api_calls.clear();
        self.ranges.clear();
        self.flows.clear();
    }
}

struct Finish {
    run: RunInfo,
    meta: BTreeMap<String, String>,
    processes: BTreeMap<i64, Option<String>>,
    threads: BTreeMap<(i64, i64), Option<String>>,
    devices: BTreeMap<i64, Device>,
}

enum Msg {
    Batch(Batch),
    Finish(Box<Finish>),
}

/// Options for [`Writer::create`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateOptions {
    /// Replace an existing file at the path instead of failing.
    pub overwrite: bool,
    /// Leave out the indexes of the event tables: for a run only ever read in row order (a
    /// rank's run before the ranks are merged), which then skips sorting and writing them.
    pub unindexed: bool,
}

/// Writes one run into a new store file.
///
/// ```
/// use fuseprof_store::{Writer, CreateOptions, RunInfo, Kernel, Store};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("run.sqlite");
/// let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
/// let name = w.intern("my_kernel");
/// w.kernel(Kernel { start_ns: 10, end_ns: 30, device_id: 0, stream_id: 7, pid: Some(1),
///     correlation_id: Some(5), external_id: None, name, grid: Some([1, 1, 1]),
///     block: Some([128, 1, 1]), registers_per_thread: Some(32), static_smem_bytes: Some(0),
///     dynamic_smem_bytes: Some(0), graph_id: None }).unwrap();
/// w.finish(RunInfo { source_format: "cupti".into(), ..Default::default() }).unwrap();
/// let mut store = Store::open(&path).unwrap();
/// assert_eq!(store.info().unwrap().counts.kernels, 1);
/// ```
pub struct Writer {
    tx: Option<SyncSender<Msg>>,
    /// Batches the writer thread has emptied, to fill again.
    spare: Receiver<Batch>,
    thread: Option<JoinHandle<Result<()>>>,
    // Interning runs once per event with long kernel names: a fast lookup matters here. Keyed
    // by bytes, so that `intern_utf8` finds a string it was given before without checking it.
    strings: interner::Interner,
    last_thread: Option<(i64, i64)>,
    batch: Batch,
    counts: Counts,
    processes: BTreeMap<i64, Option<String>>,
    threads: BTreeMap<(i64, i64), Option<String>>,
    devices: BTreeMap<i64, Device>,
    meta: BTreeMap<String, String>,
    link_gpu_pids: bool,
    tmp_path: PathBuf,
    final_path: PathBuf,
    overwrite: bool,
    done: bool,
}

impl Writer {
    /// Starts a run that will appear at `path` when [`Writer::finish`] succeeds. Until then it
    /// lives under a hidden temporary name in the same folder, removed if the writer is dropped.
    pub fn create(path: &Path, options: CreateOptions) -> Result<Writer> {
        if !options.overwrite && path.exists() {
            return Err(Error::OutputExists { path: path.into() });
        }
        let file_name = path.file_name().ok_or_else(|| Error::Io {
            path: path.into(),
            error: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        })?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp_path = parent.join(format!(
            ".{}.fuseprof-tmp-{}",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        // Fail early, with the user's path in the message, if the folder cannot be written.
        std::fs::File::create(&tmp_path).map_err(|source| Error::Io {
            path: path.into(),
            error: source,
        })?;

        let (tx, rx) = mpsc::sync_channel::<Msg>(CHANNEL_BATCHES);
        let (spare_tx, spare_rx) = mpsc::sync_channel::<Batch>(CHANNEL_BATCHES + 1);
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
        let thread_path = tmp_path.clone();
        let thread = std::thread::Builder::new()
            .name("fuseprof-store-writer".into())
            .spawn(move || writer_thread(&thread_path, options, rx, spare_tx, ready_tx))
            .map_err(|source| Error::Io {
                path: path.into(),
                error: source,
            })?;
        let mut w = Writer {
            tx: Some(tx),
            spare: spare_rx,
            thread: Some(thread),
            strings: interner::Interner::default(),
            last_thread: None,
            batch: Batch::default(),
            counts: Counts::default(),
            processes: BTreeMap::new(),
            threads: BTreeMap::new(),
            devices: BTreeMap::new(),
            meta: BTreeMap::new(),
            link_gpu_pids: false,
            tmp_path,
            final_path: path.into(),
            overwrite: options.overwrite,
            done: false,
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(w),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(w.thread_error()),
        }
    }

    /// The id of `s` in the run's string table, adding it on first sight.
    pub fn intern(&mut self, s: &str) -> StrId {
        match self.strings.find(s.as_bytes()) {
            Some(i) => StrId(i as i64 + 1),
            None => self.add_string(s),
        }
    }

    /// [`Writer::intern`] for bytes read from a source that says they are UTF-8 text: they are
    /// checked only the first time they are seen; `None` when they are not UTF-8.
    pub fn intern_utf8(&mut self, b: &[u8]) -> Option<StrId> {
        match self.strings.find(b) {
            Some(i) => Some(StrId(i as i64 + 1)),
            None => Some(self.add_string(std::str::from_utf8(b).ok()?)),
        }
    }

    fn add_string(&mut self, s: &str) -> StrId {
        let id = StrId(self.strings.add(s.as_bytes()) as i64 + 1);
        self.batch.strings.push((id.0, s.into()));
        self.counts.strings += 1;
        id
    }

    /// Widens the span of the records taken to `start..end`.
    #[inline]
    fn span(&mut self, start: i64, end: i64) {
        let c = &mut self.counts;
        c.first_ns = Some(c.first_ns.map_or(start, |f| f.min(start)));
        c.last_ns = Some(c.last_ns.map_or(end, |l| l.max(end)));
    }

    pub fn kernel(&mut self, k: Kernel) -> Result<()> {
        self.counts.kernels += 1;
        self.span(k.start_ns, k.end_ns);
        self.batch.kernels.push(k);
        self.maybe_flush()
    }

    pub fn memop(&mut self, m: Memop) -> Result<()> {
        match m.kind {
            MemopKind::Memcpy => self.counts.memcpys += 1,
            MemopKind::Memset => self.counts.memsets += 1,
        }
        self.span(m.start_ns, m.end_ns);
        self.batch.memops.push(m);
        self.maybe_flush()
    }

    pub fn api_call(&mut self, a: ApiCall) -> Result<()> {
        self.counts.api_calls += 1;
        self.span(a.start_ns, a.end_ns);
        self.batch.api_calls.push(a);
        self.maybe_flush()
    }

    pub fn range(&mut self, r: Range) -> Result<()> {
        self.counts.ranges += 1;
        self.span(r.start_ns, r.end_ns.unwrap_or(r.start_ns));
        self.batch.ranges.push(r);
        self.maybe_flush()
    }

    pub fn flow(&mut self, f: Flow) -> Result<()> {
        self.counts.flows += 1;
        self.batch.flows.push(f);
        self.maybe_flush()
    }

    /// Names a process; a later name replaces an earlier one, `None` keeps what is there.
    pub fn process(&mut self, pid: i64, name: Option<&str>) {
        let slot = self.processes.entry(pid).or_default();
        if let Some(n) = name {
            *slot = Some(n.to_string());
        }
    }

    /// Names a thread (and notes its process).
    pub fn thread(&mut self, pid: i64, tid: i64, name: Option<&str>) {
        // Sources call this for every event; consecutive events mostly share a thread.
        if name.is_none() && self.last_thread == Some((pid, tid)) {
            return;
        }
        self.last_thread = Some((pid, tid));
        self.process(pid, None);
        let slot = self.threads.entry((pid, tid)).or_default();
        if let Some(n) = name {
            *slot = Some(n.to_string());
        }
    }

    /// Describes device `d.id`. Several records of one device (one per process that used it)
    /// are merged: a field one of them leaves unknown keeps what another said.
    pub fn device(&mut self, d: Device) {
        match self.devices.entry(d.id) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(d);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let old = e.get_mut();
                old.name = d.name.or(old.name.take());
                old.compute_major = d.compute_major.or(old.compute_major);
                old.compute_minor = d.compute_minor.or(old.compute_minor);
                old.sm_count = d.sm_count.or(old.sm_count);
                old.memory_bytes = d.memory_bytes.or(old.memory_bytes);
                old.clock_khz = d.clock_khz.or(old.clock_khz);
                if d.mem_bandwidth_bytes_per_s.is_some() || d.peak_flops_fp16.is_some() {
                    old.mem_bandwidth_bytes_per_s = d.mem_bandwidth_bytes_per_s;
                    old.peak_flops_fp16 = d.peak_flops_fp16;
                    old.peak_source = d.peak_source;
                }
            }
        }
    }

    /// A run-level fact with no column of its own (e.g. `cupti_dropped_records`), kept in
    /// the `meta` table. The store's own keys (`format`, `schema_version`) cannot be set.
    pub fn meta(&mut self, key: &str, value: impl ToString) {
        if !RESERVED_META.contains(&key) {
            self.meta.insert(key.to_string(), value.to_string());
        }
    }

    /// When set, each kernel's and memop's missing `pid` comes from the API call with the same
    /// correlation id (sources such as Kineto put GPU work under a device "process"). Set it
    /// before adding kernels or copies: the writer then holds them back until `finish`, when
    /// every API call is known.
    pub fn link_gpu_pids(&mut self, on: bool) {
        self.link_gpu_pids = on;
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    fn maybe_flush(&mut self) -> Result<()> {
        if self.batch.len() >= BATCH_RECORDS {
            self.flush()
        } else {
            Ok(())
        }
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.len() == 0 {
            return Ok(());
        }
        let fresh = self.spare.try_recv().unwrap_or_default();
        let mut batch = std::mem::replace(&mut self.batch, fresh);
        batch.link_gpu_pids = self.link_gpu_pids;
        self.send(Msg::Batch(batch))
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let sent = match &self.tx {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(self.thread_error())
        }
    }

    /// The writer thread's own error, once it has stopped.
    fn thread_error(&mut self) -> Error {
        self.tx = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Err(e))) => e,
            Some(Ok(Ok(()))) => Error::WriterGone("it finished early".into()),
            Some(Err(_)) => Error::WriterGone("it panicked".into()),
            None => Error::WriterGone("it had already stopped".into()),
        }
    }

    /// Writes the run's description, commits, and moves the file to its final name.
    pub fn finish(mut self, run: RunInfo) -> Result<Counts> {
        self.flush()?;
        let finish = Finish {
            run,
            meta: std::mem::take(&mut self.meta),
            processes: std::mem::take(&mut self.processes),
            threads: std::mem::take(&mut self.threads),
            devices: std::mem::take(&mut self.devices),
        };
        self.send(Msg::Finish(Box::new(finish)))?;
        self.tx = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(e))) => return Err(e),
            _ => return Err(Error::WriterGone("it panicked".into())),
        }
        self.publish()?;
        self.done = true;
        Ok(self.counts.clone())
    }

    fn publish(&self) -> Result<()> {
        let io = |source| Error::Io {
            path: self.final_path.clone(),
            error: source,
        };
        if self.overwrite {
            return std::fs::rename(&self.tmp_path, &self.final_path).map_err(io);
        }
        // A hard link fails if the name was taken meanwhile, so nothing is ever clobbered.
        match std::fs::hard_link(&self.tmp_path, &self.final_path) {
            Ok(()) => std::fs::remove_file(&self.tmp_path).map_err(io),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::OutputExists {
                path: self.final_path.clone(),
            }),
            Err(_) if !self.final_path.exists() => {
                std::fs::rename(&self.tmp_path, &self.final_path).map_err(io)
            }
            Err(e) => Err(io(e)),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if !self.done {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut p = self.tmp_path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(PathBuf::from(p));
            }
        }
    }
}

fn writer_thread(
    path: &Path,
    options: CreateOptions,
    rx: Receiver<Msg>,
    spare: SyncSender<Batch>,
    ready: SyncSender<Result<()>>,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|source| Error::Io {
            path: path.into(),
            error: source,
        })?;
    rt.block_on(async move {
        let mut bulk = match open_for_writing(path, options.unindexed).await {
            Ok(b) => {
                let _ = ready.send(Ok(()));
                b
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return Err(Error::WriterGone("could not open the file".into()));
            }
        };
        let io = |error| Error::Io {
            path: path.into(),
            error,
        };
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Batch(mut b) => {
                    bulk.batch(&mut b).map_err(io)?;
                    b.clear();
                    // Back to the caller for its next batch; dropped if it has enough.
                    let _ = spare.try_send(b);
                }
                Msg::Finish(f) => {
                    bulk.finish().map_err(io)?;
                    let mut conn = connect(path).await?;
                    write_finish(&mut conn, *f).await?;
                    conn.close().await?;
                    return Ok(());
                }
            }
        }
        // The caller dropped the writer without finishing: leave, the file is discarded.
        Err(Error::WriterGone("the run was abandoned".into()))
    })
}

async fn connect(path: &Path) -> Result<SqliteConnection> {
    // The file is private until published, so durability is bought once at the end (the
    // journal switch and close) rather than per batch.
    Ok(SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Off)
        .synchronous(SqliteSynchronous::Off)
        .locking_mode(SqliteLockingMode::Exclusive)
        .disable_statement_logging()
        .connect()
        .await?)
}

/// The tables the bulk loader fills, with their columns in schema order, as it writes them.
const BULK_TABLES: [&Table; 6] = [&STRINGS, &KERNELS, &MEMOPS, &API_CALLS, &RANGES, &FLOWS];

/// The indexes on those tables, as `Bulk` builds them (migration 2 declares them, 6 drops
/// the External id index that no reader used).
const BULK_INDEXES: [(&str, &str); 7] = [
    (
        "kernels_by_stream_time",
        "kernels (device_id, stream_id, start_ns)",
    ),
    ("kernels_by_correlation", "kernels (correlation_id, pid)"),
    (
        "memops_by_stream_time",
        "memops (device_id, stream_id, start_ns)",
    ),
    ("memops_by_correlation", "memops (correlation_id, pid)"),
    (
        "api_calls_by_correlation",
        "api_calls (correlation_id, pid)",
    ),
    ("api_calls_by_thread_time", "api_calls (pid, tid, start_ns)"),
    ("ranges_by_thread_time", "ranges (pid, tid, start_ns)"),
];

/// Creates the file with the whole schema through SQLite (every table and index empty, the
/// event tables' indexes dropped when `unindexed`), then hands it to the bulk loader, after
/// checking that the schema is the one it writes.
async fn open_for_writing(path: &Path, unindexed: bool) -> Result<Bulk> {
    let mut conn = connect(path).await?;
    sqlx::migrate!("./migrations").run(&mut conn).await?;
    if unindexed {
        for (name, _) in BULK_INDEXES {
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP INDEX {name}")))
                .execute(&mut conn)
                .await?;
        }
    }
    let mut roots = BTreeMap::new();
    let rows: Vec<(String, String, String, i64, Option<String>)> =
        sqlx::query_as("SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema")
            .fetch_all(&mut conn)
            .await?;
    let mismatch =
        |what: String| Error::Sqlite(format!("the bulk loader does not match the schema: {what}"));
    for &Table {
        name: table,
        columns,
    } in BULK_TABLES
    {
        let names: Vec<(String,)> =
            sqlx::query_as("SELECT name FROM pragma_table_info(?) ORDER BY cid")
                .bind(table)
                .fetch_all(&mut conn)
                .await?;
        if !names
            .iter()
            .map(|n| n.0.as_str())
            .eq(columns.iter().copied())
        {
            return Err(mismatch(format!("the columns of {table}")));
        }
    }
    for (kind, name, table, root, sql) in &rows {
        let bulk = BULK_TABLES.iter().any(|t| t.name == table);
        if kind == "index" && bulk {
            let known = BULK_INDEXES.iter().find(|(n, _)| n == name);
            let declared = sql
                .as_deref()
                .unwrap_or("")
                .split_whitespace()
                .collect::<Vec<_>>();
            let matches = known.is_some_and(|(_, on)| {
                declared.join(" ").ends_with(&format!(
                    "ON {}",
                    on.split_whitespace().collect::<Vec<_>>().join(" ")
                ))
            });
            if !matches {
                return Err(mismatch(format!("index {name}")));
            }
        }
        if kind == "table" || kind == "index" {
            roots.insert(name.clone(), *root as u32);
        }
    }
    conn.close().await?;

    let io = |error| Error::Io {
        path: path.into(),
        error,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let mut head = [0u8; 100];
    file.read_exact_at(&mut head, 0).map_err(io)?;
    let page_size = match u16::from_be_bytes([head[16], head[17]]) {
        1 => 65536,
        n => n as usize,
    };
    let pages = u32::from_be_bytes(head[28..32].try_into().unwrap());
    let len = file.metadata().map_err(io)?.len();
    // Schema format 4 (the bulk loader writes 0 and 1 as serial types 8 and 9) and UTF-8.
    if head[44..48] != [0, 0, 0, 4]
        || head[56..60] != [0, 0, 0, 1]
        || len != pages as u64 * page_size as u64
    {
        return Err(Error::Sqlite(
            "the new file's header is not the one the bulk loader writes for".into(),
        ));
    }
    let geo = Geometry {
        page_size,
        usable: page_size - head[20] as usize,
        pages,
    };
    let root = |name: &str| {
        roots
            .get(name)
            .copied()
            .ok_or_else(|| mismatch(format!("no {name}")))
    };
    // A dropped index is a tree that takes no entries.
    let index_root = |name: &str| if unindexed { Ok(0) } else { root(name) };
    Ok(Bulk {
        strings: TableTree::new(geo, root("strings")?),
        kernels: TableTree::new(geo, root("kernels")?),
        memops: TableTree::new(geo, root("memops")?),
        api_calls: TableTree::new(geo, root("api_calls")?),
        ranges: TableTree::new(geo, root("ranges")?),
        flows: TableTree::new(geo, root("flows")?),
        kernels_by_stream_time: PrefixIndex::new(index_root("kernels_by_stream_time")?),
        kernels_by_correlation: PairIndex::new(index_root("kernels_by_correlation")?),
        memops_by_stream_time: PrefixIndex::new(index_root("memops_by_stream_time")?),
        memops_by_correlation: PairIndex::new(index_root("memops_by_correlation")?),
        api_calls_by_correlation: PairIndex::new(index_root("api_calls_by_correlation")?),
        api_calls_by_thread_time: PrefixIndex::new(index_root("api_calls_by_thread_time")?),
        ranges_by_thread_time: PrefixIndex::new(index_root("ranges_by_thread_time")?),
        file: PageFile::new(file, geo),
        rec: Record::default(),
        link: None,
    })
}

/// Kernels and copies held back until the end, when each one's missing `pid` comes from the
/// API call with the same correlation id (the one with the smallest pid, as the index on
/// `api_calls (correlation_id, pid)` would give it first).
#[derive(Default)]
struct Link {
    kernels: HeldRows,
    memops: HeldRows,
    pids: PidsByCorrelation,
}

/// Rows held until the end, each as its record's serial types and body (a kernel's is about
/// 60 bytes, a quarter of a [`Kernel`]): a byte that counts the types, a byte that counts the
/// body bytes, the types, then the body. A kernel's or copy's record has at most 17 columns of
/// integers of at most 8 bytes and short texts, so both counts fit a byte.
#[derive(Default)]
struct HeldRows {
    bytes: Vec<u8>,
    rows: i64,
}

impl HeldRows {
    fn push(&mut self, rec: &Record) {
        let (types, body) = rec.parts();
        debug_assert!(types.len() <= 255 && body.len() <= 255);
        self.bytes.push(types.len() as u8);
        self.bytes.push(body.len() as u8);
        self.bytes.extend_from_slice(types);
        self.bytes.extend_from_slice(body);
        self.rows += 1;
    }

    /// Each row's serial types and body, in the order they were held.
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut rest = &self.bytes[..];
        std::iter::from_fn(move || {
            let (&[t, b], tail) = rest.split_first_chunk::<2>()?;
            let (types, tail) = tail.split_at(t as usize);
            let (body, tail) = tail.split_at(b as usize);
            rest = tail;
            Some((types, body))
        })
    }
}

/// The smallest pid of the API calls with each correlation id.
///
/// Calls come about in the order of their correlation ids, and kernels about in the order of
/// theirs: most ids go to a vector in increasing order, and each kernel's is looked up from
/// where the one before it was found. A hash map would scatter every access over the whole
/// table instead (a cache miss each, most of the pid link's time). An id that comes after a
/// larger one (a fifth of a Kineto trace's calls, whose threads' calls come thread by thread)
/// is set aside in a second vector, merged in by [`PidsByCorrelation::seal`] before any lookup.
#[derive(Default)]
struct PidsByCorrelation {
    /// Strictly increasing ids, each with its smallest pid so far.
    ordered: Vec<(i64, i64)>,
    /// The ids that came after a larger one, as they came.
    late: Vec<(i64, i64)>,
}

impl PidsByCorrelation {
    fn insert(&mut self, c: i64, pid: i64) {
        match self.ordered.last_mut() {
            Some(last) if last.0 == c => last.1 = last.1.min(pid),
            Some(last) if last.0 > c => self.late.push((c, pid)),
            _ => self.ordered.push((c, pid)),
        }
    }

    /// Merges the ids that came out of order into `ordered`, once every call is in: lookups
    /// then gallop through one vector.
    fn seal(&mut self) {
        if self.late.is_empty() {
            return;
        }
        let mut late = std::mem::take(&mut self.late);
        late.sort_unstable();
        // Two sorted runs: the stable sort finds them and merges them in one pass.
        self.ordered.append(&mut late);
        self.ordered.sort();
        // An id met more than once keeps its smallest pid (the first of its pairs, as the pairs
        // sort by pid next).
        self.ordered.dedup_by_key(|e| e.0);
    }

    /// The pid of id `c`, once sealed; `near` is where the last lookup ended in `ordered`,
    /// moved to where this one does.
    fn get(&self, c: i64, near: &mut usize) -> Option<i64> {
        debug_assert!(self.late.is_empty(), "looked up before sealed");
        let v = &self.ordered;
        // The bracket [lo, hi) that holds `c`'s place, widened from `near` in doubling steps.
        let at = (*near).min(v.len());
        let (mut lo, mut hi);
        if at < v.len() && v[at].0 <= c {
            let mut step = 1;
            lo = at;
            hi = at + 1;
            while hi < v.len() && v[hi].0 <= c {
                lo = hi;
                hi = (hi + step).min(v.len());
                step *= 2;
            }
        } else {
            let mut step = 1;
            hi = at;
            lo = at.saturating_sub(1);
            while lo > 0 && v[lo].0 > c {
                hi = lo;
                lo = lo.saturating_sub(step);
                step *= 2;
            }
        }
        let i = lo + v[lo..hi].partition_point(|e| e.0 < c);
        *near = i;
        v.get(i).filter(|e| e.0 == c).map(|e| e.1)
    }
}

/// A kernel's row, in the `kernels` table's column order.
fn kernel_record(r: &mut Record, k: &Kernel) {
    r.clear();
    r.null();
    r.int(k.start_ns);
    r.int(k.end_ns);
    r.int(k.device_id);
    r.int(k.stream_id);
    r.opt(k.pid);
    r.opt(k.correlation_id);
    r.opt(k.external_id);
    r.int(k.name.0);
    for dims in [k.grid, k.block] {
        for i in 0..3 {
            r.opt(dims.map(|d| d[i]));
        }
    }
    r.opt(k.registers_per_thread);
    r.opt(k.static_smem_bytes);
    r.opt(k.dynamic_smem_bytes);
    r.opt(k.graph_id);
}

/// A copy's or fill's row, in the `memops` table's column order.
fn memop_record(r: &mut Record, m: &Memop) {
    r.clear();
    r.null();
    r.text(m.kind.as_str());
    r.int(m.start_ns);
    r.int(m.end_ns);
    r.int(m.device_id);
    r.int(m.stream_id);
    r.opt(m.pid);
    r.opt(m.correlation_id);
    r.opt(m.external_id);
    r.opt(m.bytes);
    match m.copy_kind {
        Some(c) => r.text(c.as_str()),
        None => r.null(),
    }
    r.opt(m.value);
    for side in [m.src_memory, m.dst_memory] {
        match side {
            Some(k) => r.text(k.as_str()),
            None => r.null(),
        }
    }
}

/// The `pid` column of [`kernel_record`] and [`memop_record`]; `correlation_id` follows it.
const KERNEL_PID: usize = 5;
const MEMOP_PID: usize = 6;

/// A held row (`types`, `body`) back into `rec`, its `pid` (column `col`) filled by `pid_of`
/// from its correlation id where it was held without one; its `(correlation_id, pid)` key.
fn linked(
    rec: &mut Record,
    types: &[u8],
    body: &[u8],
    col: usize,
    pid_of: impl FnOnce(i64) -> Option<i64>,
) -> (Option<i64>, Option<i64>) {
    let at: usize = types[..col].iter().map(|&t| btree::serial_size(t)).sum();
    let pid = btree::serial_int(types[col], &body[at..]);
    let after = at + btree::serial_size(types[col]);
    let correlation = btree::serial_int(types[col + 1], &body[after..]);
    if pid.is_some() {
        rec.load(types, body);
        return (correlation, pid);
    }
    let pid = correlation.and_then(pid_of);
    match pid {
        Some(p) => rec.restore(types, body, col, at, p),
        None => rec.load(types, body),
    }
    (correlation, pid)
}

/// The writer thread's side of a run being loaded: one b-tree per bulk table and index.
struct Bulk {
    file: PageFile,
    rec: Record,
    strings: TableTree,
    kernels: TableTree,
    memops: TableTree,
    api_calls: TableTree,
    ranges: TableTree,
    flows: TableTree,
    kernels_by_stream_time: PrefixIndex,
    kernels_by_correlation: PairIndex,
    memops_by_stream_time: PrefixIndex,
    memops_by_correlation: PairIndex,
    api_calls_by_correlation: PairIndex,
    api_calls_by_thread_time: PrefixIndex,
    ranges_by_thread_time: PrefixIndex,
    link: Option<Link>,
}

impl Bulk {
    fn batch(&mut self, b: &mut Batch) -> std::io::Result<()> {
        if b.link_gpu_pids && self.link.is_none() {
            self.link = Some(Link::default());
        }
        for (id, s) in &b.strings {
            let r = &mut self.rec;
            r.clear();
            r.null();
            r.text(s);
            self.strings.add(&mut self.file, *id, r)?;
        }
        for a in &b.api_calls {
            self.api_call(a)?;
        }
        match &mut self.link {
            Some(link) => {
                // Their rowids follow the rows written so far, in the order they are held.
                for k in &b.kernels {
                    kernel_record(&mut self.rec, k);
                    link.kernels.push(&self.rec);
                    let id = self.kernels.next_rowid() + link.kernels.rows - 1;
                    self.kernels_by_stream_time
                        .add([k.device_id, k.stream_id, k.start_ns], id);
                }
                for m in &b.memops {
                    memop_record(&mut self.rec, m);
                    link.memops.push(&self.rec);
                    let id = self.memops.next_rowid() + link.memops.rows - 1;
                    self.memops_by_stream_time
                        .add([m.device_id, m.stream_id, m.start_ns], id);
                }
            }
            None => {
                for k in &b.kernels {
                    self.kernel(k)?;
                }
                for m in &b.memops {
                    self.memop(m)?;
                }
            }
        }
        for r in &b.ranges {
            self.range(r)?;
        }
        for f in &b.flows {
            self.flow(f)?;
        }
        Ok(())
    }

    fn kernel(&mut self, k: &Kernel) -> std::io::Result<()> {
        let id = self.kernels.next_rowid();
        kernel_record(&mut self.rec, k);
        self.kernels.add(&mut self.file, id, &mut self.rec)?;
        self.kernels_by_stream_time
            .add([k.device_id, k.stream_id, k.start_ns], id);
        self.kernels_by_correlation
            .add((k.correlation_id, k.pid), id);
        Ok(())
    }

    fn memop(&mut self, m: &Memop) -> std::io::Result<()> {
        let id = self.memops.next_rowid();
        memop_record(&mut self.rec, m);
        self.memops.add(&mut self.file, id, &mut self.rec)?;
        self.memops_by_stream_time
            .add([m.device_id, m.stream_id, m.start_ns], id);
        self.memops_by_correlation
            .add((m.correlation_id, m.pid), id);
        Ok(())
    }

    fn api_call(&mut self, a: &ApiCall) -> std::io::Result<()> {
        let id = self.api_calls.next_rowid();
        let r = &mut self.rec;
        r.clear();
        r.null();
        r.text(a.api.as_str());
        r.int(a.start_ns);
        r.int(a.end_ns);
        r.int(a.pid);
        r.int(a.tid);
        r.opt(a.correlation_id);
        r.opt(a.external_id);
        r.int(a.name.0);
        r.opt(a.return_code);
        self.api_calls.add(&mut self.file, id, r)?;
        self.api_calls_by_correlation
            .add((a.correlation_id, Some(a.pid)), id);
        self.api_calls_by_thread_time
            .add([a.pid, a.tid, a.start_ns], id);
        if let (Some(link), Some(c)) = (&mut self.link, a.correlation_id) {
            link.pids.insert(c, a.pid);
        }
        Ok(())
    }

    fn range(&mut self, x: &Range) -> std::io::Result<()> {
        let id = self.ranges.next_rowid();
        let r = &mut self.rec;
        r.clear();
        r.null();
        r.text(x.kind.as_str());
        r.int(x.start_ns);
        r.opt(x.end_ns);
        r.int(x.pid);
        r.int(x.tid);
        r.opt(x.end_tid);
        r.opt(x.domain.map(|s| s.0));
        r.int(x.name.0);
        r.opt(x.category.map(|s| s.0));
        r.opt(x.color);
        r.opt(x.depth);
        r.opt(x.external_id);
        r.opt(x.correlation_id);
        r.opt(x.input_dims.map(|s| s.0));
        r.opt(x.input_types.map(|s| s.0));
        self.ranges.add(&mut self.file, id, r)?;
        self.ranges_by_thread_time
            .add([x.pid, x.tid, x.start_ns], id);
        Ok(())
    }

    fn flow(&mut self, f: &Flow) -> std::io::Result<()> {
        let id = self.flows.next_rowid();
        let r = &mut self.rec;
        r.clear();
        r.null();
        r.int(f.category.0);
        r.int(f.flow_id);
        r.text(f.phase.as_str());
        r.int(f.ts_ns);
        r.int(f.pid);
        r.int(f.tid);
        self.flows.add(&mut self.file, id, r)?;
        Ok(())
    }

    /// Writes the held rows, the rest of every tree and the header.
    ///
    /// Where the process may use more than one core, the API call and range indexes (whose
    /// keys are all in by now) are sorted on a second thread while this one writes the held
    /// kernels and copies and sorts their indexes; every tree is then written in the same order
    /// as on one core, so the file is the same.
    fn finish(mut self) -> std::io::Result<()> {
        let cores = crate::usable_cores();
        let done = (
            std::mem::replace(&mut self.api_calls_by_correlation, PairIndex::new(0)),
            std::mem::replace(&mut self.api_calls_by_thread_time, PrefixIndex::new(0)),
            std::mem::replace(&mut self.ranges_by_thread_time, PrefixIndex::new(0)),
        );
        let done = std::thread::scope(|s| -> std::io::Result<_> {
            // Ok: sorting on the second thread; Err: left for this one.
            let sorting = if cores > 1 {
                Ok(s.spawn(move || {
                    let (mut a, mut b, mut c) = done;
                    a.sort();
                    b.sort();
                    c.sort();
                    (a, b, c)
                }))
            } else {
                Err(done)
            };
            if let Some(mut link) = self.link.take() {
                link.pids.seal();
                let mut near = 0;
                for (types, body) in link.kernels.iter() {
                    let id = self.kernels.next_rowid();
                    let key = linked(&mut self.rec, types, body, KERNEL_PID, |c| {
                        link.pids.get(c, &mut near)
                    });
                    self.kernels.add(&mut self.file, id, &mut self.rec)?;
                    self.kernels_by_correlation.add(key, id);
                }
                for (types, body) in link.memops.iter() {
                    let id = self.memops.next_rowid();
                    let key = linked(&mut self.rec, types, body, MEMOP_PID, |c| {
                        link.pids.get(c, &mut near)
                    });
                    self.memops.add(&mut self.file, id, &mut self.rec)?;
                    self.memops_by_correlation.add(key, id);
                }
            }
            Ok(match sorting {
                Ok(sorting) => {
                    self.kernels_by_stream_time.sort();
                    self.kernels_by_correlation.sort();
                    self.memops_by_stream_time.sort();
                    self.memops_by_correlation.sort();
                    sorting
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p))
                }
                Err(done) => done,
            })
        })?;
        (
            self.api_calls_by_correlation,
            self.api_calls_by_thread_time,
            self.ranges_by_thread_time,
        ) = done;
        let f = &mut self.file;
        for t in [
            self.strings,
            self.kernels,
            self.memops,
            self.api_calls,
            self.ranges,
            self.flows,
        ] {
            t.finish(f)?;
        }
        self.kernels_by_stream_time.finish(f)?;
        self.kernels_by_correlation.finish(f)?;
        self.memops_by_stream_time.finish(f)?;
        self.memops_by_correlation.finish(f)?;
        self.api_calls_by_correlation.finish(f)?;
        self.api_calls_by_thread_time.finish(f)?;
        self.ranges_by_thread_time.finish(f)?;
        self.file.close()
    }
}

async fn write_finish(conn: &mut SqliteConnection, f: Finish) -> Result<()> {
    sqlx::query("BEGIN").execute(&mut *conn).await?;
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let r = &f.run;
    sqlx::query(
        "INSERT INTO run (id, source_format, source_path, command, host, start_unix_ns, tool, \
         tool_version, cuda_runtime_version, cuda_driver_version, cupti_version, \
         fuseprof_version, imported_unix_ns, complete) \
         VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
    )
    .bind(&r.source_format)
    .bind(&r.source_path)
    .bind(&r.command)
    .bind(&r.host)
    .bind(r.start_unix_ns)
    .bind(&r.tool)
    .bind(&r.tool_version)
    .bind(&r.cuda_runtime_version)
    .bind(&r.cuda_driver_version)
    .bind(&r.cupti_version)
    .bind(env!("CARGO_PKG_VERSION"))
    .bind(now_ns)
    .execute(&mut *conn)
    .await?;
    for (key, value) in &f.meta {
        sqlx::query("INSERT INTO meta (key, value) VALUES (?, ?)")
            .bind(key)
            .bind(value)
            .execute(&mut *conn)
            .await?;
    }
    for (pid, name) in &f.processes {
        sqlx::query("INSERT INTO processes (pid, name) VALUES (?, ?)")
            .bind(pid)
            .bind(name)
            .execute(&mut *conn)
            .await?;
    }
    for ((pid, tid), name) in &f.threads {
        sqlx::query("INSERT INTO threads (pid, tid, name) VALUES (?, ?, ?)")
            .bind(pid)
            .bind(tid)
            .bind(name)
            .execute(&mut *conn)
            .await?;
    }
    for d in f.devices.values() {
        sqlx::query(
            "INSERT INTO devices (id, name, compute_major, compute_minor, sm_count, \
             memory_bytes, clock_khz, mem_bandwidth_bytes_per_s, peak_flops_fp16, peak_source) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(d.id)
        .bind(&d.name)
        .bind(d.compute_major)
        .bind(d.compute_minor)
        .bind(d.sm_count)
        .bind(d.memory_bytes)
        .bind(d.clock_khz)
        .bind(d.mem_bandwidth_bytes_per_s)
        .bind(d.peak_flops_fp16)
        .bind(&d.peak_source)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query("UPDATE run SET complete = 1")
        .execute(&mut *conn)
        .await?;
    sqlx::query("COMMIT").execute(&mut *conn).await?;
    // A published run never changes again, so it needs no WAL (whose -wal/-shm side files
    // every reader would otherwise leave behind); a rollback journal keeps it one plain file.
    let mut h = conn.lock_handle().await?;
    raw::exec(h.as_raw_handle(), "PRAGMA journal_mode = DELETE;")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::PidsByCorrelation;
    use std::collections::HashMap;

    /// Each id's smallest pid, whatever order ids come and are asked for in, as a map gives.
    #[test]
    fn pids_by_correlation_match_a_map() {
        let mut pids = PidsByCorrelation::default();
        let mut want: HashMap<i64, i64> = HashMap::new();
        // Mostly increasing ids with repeats, jumps and some out of order.
        let mut x = 7u64;
        let mut id = -50i64;
        for i in 0..20_000i64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as i64;
            id += match r % 10 {
                0 => -(r % 300),
                1 => 0,
                2 => 1_000_000,
                _ => 1 + r % 3,
            };
            let pid = (r >> 8) % 5 - 2 + i % 2;
            pids.insert(id, pid);
            let p = want.entry(id).or_insert(pid);
            *p = (*p).min(pid);
        }
        let mut ids: Vec<i64> = want.keys().copied().collect();
        ids.sort();
        let mut near = 0;
        assert!(!pids.late.is_empty());
        pids.seal();
        assert!(pids.late.is_empty());
        assert!(pids.ordered.windows(2).all(|w| w[0].0 < w[1].0));
        for pass in 0..3 {
            let order: Vec<i64> = match pass {
                0 => ids.clone(),
                1 => ids.iter().rev().copied().collect(),
                _ => ids.iter().map(|i| i ^ 0x55).collect(),
            };
            for c in order.iter().copied().chain([i64::MIN, i64::MAX, -51]) {
                assert_eq!(pids.get(c, &mut near), want.get(&c).copied(), "id {c}");
            }
        }
    }
}
