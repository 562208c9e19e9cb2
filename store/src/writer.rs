//! The one writer: every source (importers, the live collector) fills a run through it.
//!
//! Records are interned and batched on the caller's thread, then handed over a bounded channel
//! to a dedicated thread that owns the sqlx connection and inserts each batch through prepared
//! statements. The caller never waits on SQLite unless the channel is full, memory stays bounded
//! by the channel, and the file appears under its final name only when `finish` succeeds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use libsqlite3_sys as ffi;
use rustc_hash::FxHashMap;
use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteLockingMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqliteConnection};

use crate::model::*;
use crate::raw::{self, Stmt};
use crate::{Error, Result};

const BATCH_RECORDS: usize = 16 * 1024;
/// `meta` keys that belong to the store itself.
pub(crate) const RESERVED_META: [&str; 2] = ["format", "schema_version"];
/// The migration that creates the tables; later ones only add indexes.
const TABLES_MIGRATION: i64 = 1;
const CHANNEL_BATCHES: usize = 4;

/// How many records of each kind a writer took.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub api_calls: u64,
    pub ranges: u64,
    pub flows: u64,
    pub strings: u64,
}

impl Counts {
    /// Every record that became a row (strings excluded).
    pub fn events(&self) -> u64 {
        self.kernels + self.memcpys + self.memsets + self.api_calls + self.ranges + self.flows
    }
}

#[derive(Default)]
struct Batch {
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
}

struct Finish {
    run: RunInfo,
    meta: BTreeMap<String, String>,
    processes: BTreeMap<i64, Option<String>>,
    threads: BTreeMap<(i64, i64), Option<String>>,
    devices: BTreeMap<i64, Device>,
    link_gpu_pids: bool,
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
    thread: Option<JoinHandle<Result<()>>>,
    // Interning runs once per event with long kernel names: a fast hash matters here.
    strings: FxHashMap<Box<str>, StrId>,
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
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
        let thread_path = tmp_path.clone();
        let thread = std::thread::Builder::new()
            .name("fuseprof-store-writer".into())
            .spawn(move || writer_thread(&thread_path, rx, ready_tx))
            .map_err(|source| Error::Io {
                path: path.into(),
                error: source,
            })?;
        let mut w = Writer {
            tx: Some(tx),
            thread: Some(thread),
            strings: FxHashMap::default(),
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
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = StrId(self.strings.len() as i64 + 1);
        let owned: Box<str> = s.into();
        self.strings.insert(owned.clone(), id);
        self.batch.strings.push((id.0, owned));
        self.counts.strings += 1;
        id
    }

    pub fn kernel(&mut self, k: Kernel) -> Result<()> {
        self.counts.kernels += 1;
        self.batch.kernels.push(k);
        self.maybe_flush()
    }

    pub fn memop(&mut self, m: Memop) -> Result<()> {
        match m.kind {
            MemopKind::Memcpy => self.counts.memcpys += 1,
            MemopKind::Memset => self.counts.memsets += 1,
        }
        self.batch.memops.push(m);
        self.maybe_flush()
    }

    pub fn api_call(&mut self, a: ApiCall) -> Result<()> {
        self.counts.api_calls += 1;
        self.batch.api_calls.push(a);
        self.maybe_flush()
    }

    pub fn range(&mut self, r: Range) -> Result<()> {
        self.counts.ranges += 1;
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

    pub fn device(&mut self, d: Device) {
        self.devices.insert(d.id, d);
    }

    /// A run-level fact with no column of its own (e.g. `cupti_dropped_records`), kept in
    /// the `meta` table. The store's own keys (`format`, `schema_version`) cannot be set.
    pub fn meta(&mut self, key: &str, value: impl ToString) {
        if !RESERVED_META.contains(&key) {
            self.meta.insert(key.to_string(), value.to_string());
        }
    }

    /// When set, `finish` fills each kernel's and memop's missing `pid` from the API call with
    /// the same correlation id (sources such as Kineto put GPU work under a device "process").
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
        let batch = std::mem::take(&mut self.batch);
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
            link_gpu_pids: self.link_gpu_pids,
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

fn writer_thread(path: &Path, rx: Receiver<Msg>, ready: SyncSender<Result<()>>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|source| Error::Io {
            path: path.into(),
            error: source,
        })?;
    rt.block_on(async move {
        let opened = open_for_writing(path).await;
        let mut conn = match opened {
            Ok(c) => {
                let _ = ready.send(Ok(()));
                c
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return Err(Error::WriterGone("could not open the file".into()));
            }
        };
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Batch(b) => {
                    let mut h = conn.lock_handle().await?;
                    write_batch(h.as_raw_handle(), &b)?;
                }
                Msg::Finish(f) => {
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

async fn open_for_writing(path: &Path) -> Result<SqliteConnection> {
    // The file is private until published, so durability is bought once at the end (the WAL
    // switch and close) rather than per batch.
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Off)
        .synchronous(SqliteSynchronous::Off)
        .locking_mode(SqliteLockingMode::Exclusive)
        .pragma("cache_size", "-131072")
        // The index build at finish is slow by nature on large runs; sqlx would log it as a
        // "slow statement" warning on the user's terminal.
        .disable_statement_logging()
        .connect()
        .await?;
    // Tables only: the indexes (migration 2) are built once at `finish`, which costs far less
    // than maintaining them row by row during a bulk load.
    sqlx::migrate!("./migrations")
        .run_to(TABLES_MIGRATION, &mut conn)
        .await?;
    sqlx::query("BEGIN").execute(&mut conn).await?;
    Ok(conn)
}

fn write_batch(db: NonNull<ffi::sqlite3>, b: &Batch) -> Result<()> {
    if !b.strings.is_empty() {
        let mut st = Stmt::prepare(db, "INSERT INTO strings (id, value) VALUES (?1, ?2)")?;
        for (id, s) in &b.strings {
            st.bind_i64(1, *id)?;
            st.bind_text(2, s)?;
            st.execute()?;
        }
    }
    if !b.kernels.is_empty() {
        let mut st = Stmt::prepare(
            db,
            "INSERT INTO kernels (start_ns, end_ns, device_id, stream_id, pid, correlation_id, \
             external_id, name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, \
             registers_per_thread, static_smem_bytes, dynamic_smem_bytes, graph_id) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)",
        )?;
        for k in &b.kernels {
            st.bind_i64(1, k.start_ns)?;
            st.bind_i64(2, k.end_ns)?;
            st.bind_i64(3, k.device_id)?;
            st.bind_i64(4, k.stream_id)?;
            st.bind_opt_i64(5, k.pid)?;
            st.bind_opt_i64(6, k.correlation_id)?;
            st.bind_opt_i64(7, k.external_id)?;
            st.bind_i64(8, k.name.0)?;
            for i in 0..3 {
                st.bind_opt_i64(9 + i as i32, k.grid.map(|g| g[i]))?;
                st.bind_opt_i64(12 + i as i32, k.block.map(|g| g[i]))?;
            }
            st.bind_opt_i64(15, k.registers_per_thread)?;
            st.bind_opt_i64(16, k.static_smem_bytes)?;
            st.bind_opt_i64(17, k.dynamic_smem_bytes)?;
            st.bind_opt_i64(18, k.graph_id)?;
            st.execute()?;
        }
    }
    if !b.memops.is_empty() {
        let mut st = Stmt::prepare(
            db,
            "INSERT INTO memops (kind, start_ns, end_ns, device_id, stream_id, pid, \
             correlation_id, external_id, bytes, copy_kind, value) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
        )?;
        for m in &b.memops {
            st.bind_text(1, m.kind.as_str())?;
            st.bind_i64(2, m.start_ns)?;
            st.bind_i64(3, m.end_ns)?;
            st.bind_i64(4, m.device_id)?;
            st.bind_i64(5, m.stream_id)?;
            st.bind_opt_i64(6, m.pid)?;
            st.bind_opt_i64(7, m.correlation_id)?;
            st.bind_opt_i64(8, m.external_id)?;
            st.bind_opt_i64(9, m.bytes)?;
            match m.copy_kind {
                Some(c) => st.bind_text(10, c.as_str())?,
                None => st.bind_opt_i64(10, None)?,
            }
            st.bind_opt_i64(11, m.value)?;
            st.execute()?;
        }
    }
    if !b.api_calls.is_empty() {
        let mut st = Stmt::prepare(
            db,
            "INSERT INTO api_calls (api, start_ns, end_ns, pid, tid, correlation_id, \
             external_id, name_id, return_code) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
        )?;
        for a in &b.api_calls {
            st.bind_text(1, a.api.as_str())?;
            st.bind_i64(2, a.start_ns)?;
            st.bind_i64(3, a.end_ns)?;
            st.bind_i64(4, a.pid)?;
            st.bind_i64(5, a.tid)?;
            st.bind_opt_i64(6, a.correlation_id)?;
            st.bind_opt_i64(7, a.external_id)?;
            st.bind_i64(8, a.name.0)?;
            st.bind_opt_i64(9, a.return_code)?;
            st.execute()?;
        }
    }
    if !b.ranges.is_empty() {
        let mut st = Stmt::prepare(
            db,
            "INSERT INTO ranges (kind, start_ns, end_ns, pid, tid, end_tid, domain_id, name_id, \
             category_id, color, depth, external_id, correlation_id, input_dims_id, \
             input_types_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)",
        )?;
        for r in &b.ranges {
            st.bind_text(1, r.kind.as_str())?;
            st.bind_i64(2, r.start_ns)?;
            st.bind_opt_i64(3, r.end_ns)?;
            st.bind_i64(4, r.pid)?;
            st.bind_i64(5, r.tid)?;
            st.bind_opt_i64(6, r.end_tid)?;
            st.bind_opt_i64(7, r.domain.map(|s| s.0))?;
            st.bind_i64(8, r.name.0)?;
            st.bind_opt_i64(9, r.category.map(|s| s.0))?;
            st.bind_opt_i64(10, r.color)?;
            st.bind_opt_i64(11, r.depth)?;
            st.bind_opt_i64(12, r.external_id)?;
            st.bind_opt_i64(13, r.correlation_id)?;
            st.bind_opt_i64(14, r.input_dims.map(|s| s.0))?;
            st.bind_opt_i64(15, r.input_types.map(|s| s.0))?;
            st.execute()?;
        }
    }
    if !b.flows.is_empty() {
        let mut st = Stmt::prepare(
            db,
            "INSERT INTO flows (category_id, flow_id, phase, ts_ns, pid, tid) \
             VALUES (?1,?2,?3,?4,?5,?6)",
        )?;
        for f in &b.flows {
            st.bind_i64(1, f.category.0)?;
            st.bind_i64(2, f.flow_id)?;
            st.bind_text(3, f.phase.as_str())?;
            st.bind_i64(4, f.ts_ns)?;
            st.bind_i64(5, f.pid)?;
            st.bind_i64(6, f.tid)?;
            st.execute()?;
        }
    }
    Ok(())
}

async fn write_finish(conn: &mut SqliteConnection, f: Finish) -> Result<()> {
    sqlx::query("COMMIT").execute(&mut *conn).await?;
    sqlx::migrate!("./migrations").run(&mut *conn).await?;
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
    if f.link_gpu_pids {
        for sql in [
            "UPDATE kernels SET pid = (SELECT a.pid FROM api_calls a \
             WHERE a.correlation_id = kernels.correlation_id LIMIT 1) \
             WHERE pid IS NULL AND correlation_id IS NOT NULL",
            "UPDATE memops SET pid = (SELECT a.pid FROM api_calls a \
             WHERE a.correlation_id = memops.correlation_id LIMIT 1) \
             WHERE pid IS NULL AND correlation_id IS NOT NULL",
        ] {
            sqlx::query(sql).execute(&mut *conn).await?;
        }
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
