//! Distributed runs: the ranks of one job in one run.
//!
//! Two ways in. [`merge_ranks`] copies several complete runs (one per rank, each imported on
//! its own) into one new run: every time shifted by its rank's clock offset, strings
//! re-interned, and the pids and GPU ids of a rank that collide with an earlier rank's
//! renumbered (`rank * 1_000_000_000 + pid`, `rank * 1000 + ordinal`; the source's ordinal is
//! kept in `devices.ordinal`), so each rank's processes and GPUs stay apart. Kineto's External
//! ids and flow ids, which link records without a pid, are offset by `rank << 40` for every
//! rank but the first. [`publish_with_ranks`] labels the processes and GPUs of one run that
//! already holds several ranks (an nsys export or a `collect` of a torchrun job) and publishes
//! it. Either way the run appears under its final name only when complete.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteLockingMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, Row};

use crate::model::{ApiCall, Device, Flow, Kernel, Memop, Range, RunInfo, StrId};
use crate::raw::{self, Stmt};
use crate::writer::CreateOptions;
use crate::{Error, Result, Store, Writer};

/// One rank of a distributed run: the `ranks` table's row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RankInfo {
    pub rank: i64,
    /// The file the rank came from.
    pub source_path: Option<String>,
    /// `trace`, `file_name`, `order` or `device` (see `migrations/0004_ranks.sql`).
    pub rank_source: String,
    pub world_size: Option<i64>,
    pub backend: Option<String>,
    /// `wall_clock`, `collectives`, `same_clock` or `unaligned`.
    pub clock: String,
    /// Added to every time of the rank's source.
    pub clock_offset_ns: i64,
    /// The part of `clock_offset_ns` found from the collectives.
    pub clock_correction_ns: i64,
    /// Collective kernels of the rank, and how many found their partner on the reference rank.
    pub collectives: i64,
    pub matched_collectives: i64,
    /// Median |end difference| of the matched collectives after alignment.
    pub residual_ns: Option<i64>,
}

/// A complete run holding one rank, for [`merge_ranks`].
#[derive(Clone, Debug)]
pub struct MergePart {
    pub path: PathBuf,
    pub info: RankInfo,
}

/// What [`merge_ranks`] renumbered.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MergeReport {
    /// (rank, source pid, pid in the run) for each renumbered process.
    pub pids_renumbered: Vec<(i64, i64, i64)>,
    /// (rank, source ordinal, id in the run) for each renumbered GPU.
    pub devices_renumbered: Vec<(i64, i64, i64)>,
}

/// Meta keys that describe one rank's source and make no sense for the merged run.
const PER_RANK_META: [&str; 2] = ["distributed_rank", "base_time_ns"];
const RANK_PID_STRIDE: i64 = 1_000_000_000;
const RANK_DEVICE_STRIDE: i64 = 1000;
const LINK_ID_SHIFT: u32 = 40;

impl Store {
    /// The ranks of a distributed run, by rank; empty for a run of one process or a run
    /// written before schema 3.
    pub fn ranks(&mut self) -> Result<Vec<RankInfo>> {
        if !self.has_ranks_table()? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        let rows = rt.block_on(
            sqlx::query(
                "SELECT rank, source_path, rank_source, world_size, backend, clock, \
                 clock_offset_ns, clock_correction_ns, collectives, matched_collectives, \
                 residual_ns FROM ranks ORDER BY rank",
            )
            .fetch_all(conn),
        )?;
        rows.iter()
            .map(|r| {
                Ok(RankInfo {
                    rank: r.try_get(0)?,
                    source_path: r.try_get(1)?,
                    rank_source: r.try_get(2)?,
                    world_size: r.try_get(3)?,
                    backend: r.try_get(4)?,
                    clock: r.try_get(5)?,
                    clock_offset_ns: r.try_get(6)?,
                    clock_correction_ns: r.try_get(7)?,
                    collectives: r.try_get(8)?,
                    matched_collectives: r.try_get(9)?,
                    residual_ns: r.try_get(10)?,
                })
            })
            .collect()
    }

    /// `(pid, rank)` for every process of a rank.
    pub fn process_ranks(&mut self) -> Result<Vec<(i64, i64)>> {
        if !self.has_ranks_table()? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        Ok(rt.block_on(
            sqlx::query_as("SELECT pid, rank FROM processes WHERE rank IS NOT NULL ORDER BY pid")
                .fetch_all(conn),
        )?)
    }

    /// `(device id, rank, source ordinal)` for every GPU of a rank.
    pub fn device_ranks(&mut self) -> Result<Vec<(i64, i64, i64)>> {
        if !self.has_ranks_table()? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        Ok(rt.block_on(
            sqlx::query_as(
                "SELECT id, rank, coalesce(ordinal, id) FROM devices WHERE rank IS NOT NULL \
                 ORDER BY id",
            )
            .fetch_all(conn),
        )?)
    }

    fn has_ranks_table(&mut self) -> Result<bool> {
        let (rt, conn) = self.rt_conn();
        let n: i64 = rt.block_on(
            sqlx::query_scalar(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ranks'",
            )
            .fetch_one(conn),
        )?;
        Ok(n > 0)
    }
}

fn io_error(path: &Path, error: std::io::Error) -> Error {
    Error::Io {
        path: path.into(),
        error,
    }
}

/// The hidden name a run is built under before it is published at `path`.
fn temp_path(path: &Path, options: CreateOptions) -> Result<PathBuf> {
    if !options.overwrite && path.exists() {
        return Err(Error::OutputExists { path: path.into() });
    }
    let file_name = path.file_name().ok_or_else(|| {
        io_error(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        )
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(parent.join(format!(
        ".{}.fuseprof-tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    )))
}

/// Moves the finished file at `tmp` to `path`; never clobbers `path` unless `overwrite`.
fn publish(tmp: &Path, path: &Path, overwrite: bool) -> Result<()> {
    if overwrite {
        return std::fs::rename(tmp, path).map_err(|e| io_error(path, e));
    }
    match std::fs::hard_link(tmp, path) {
        Ok(()) => std::fs::remove_file(tmp).map_err(|e| io_error(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(Error::OutputExists { path: path.into() })
        }
        Err(_) if !path.exists() => std::fs::rename(tmp, path).map_err(|e| io_error(path, e)),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Deletes a file (and its journal side files) unless disarmed.
struct Removal(Option<PathBuf>);

impl Drop for Removal {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut s = p.clone().into_os_string();
                s.push(suffix);
                let _ = std::fs::remove_file(PathBuf::from(s));
            }
        }
    }
}

fn runtime(path: &Path) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| io_error(path, e))
}

async fn open_rw(path: &Path, create: bool) -> Result<sqlx::SqliteConnection> {
    Ok(SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(create)
        .journal_mode(SqliteJournalMode::Off)
        .synchronous(SqliteSynchronous::Off)
        .locking_mode(SqliteLockingMode::Exclusive)
        .pragma("cache_size", "-131072")
        .disable_statement_logging()
        .connect()
        .await?)
}

fn insert_ranks(db: std::ptr::NonNull<libsqlite3_sys::sqlite3>, ranks: &[RankInfo]) -> Result<()> {
    let mut st = Stmt::prepare(
        db,
        "INSERT INTO ranks (rank, source_path, rank_source, world_size, backend, clock, \
         clock_offset_ns, clock_correction_ns, collectives, matched_collectives, residual_ns) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?;
    for r in ranks {
        st.bind_i64(1, r.rank)?;
        match &r.source_path {
            Some(p) => st.bind_text(2, p)?,
            None => st.bind_opt_i64(2, None)?,
        }
        st.bind_text(3, &r.rank_source)?;
        st.bind_opt_i64(4, r.world_size)?;
        match &r.backend {
            Some(b) => st.bind_text(5, b)?,
            None => st.bind_opt_i64(5, None)?,
        }
        st.bind_text(6, &r.clock)?;
        st.bind_i64(7, r.clock_offset_ns)?;
        st.bind_i64(8, r.clock_correction_ns)?;
        st.bind_i64(9, r.collectives)?;
        st.bind_i64(10, r.matched_collectives)?;
        st.bind_opt_i64(11, r.residual_ns)?;
        st.execute()?;
    }
    Ok(())
}

/// Labels the processes and GPUs of the complete, not yet published run at `part` with their
/// ranks, writes `ranks`, and publishes the run at `output` (the part is gone afterwards).
pub fn publish_with_ranks(
    part: &Path,
    output: &Path,
    options: CreateOptions,
    ranks: &[RankInfo],
    process_rank: &[(i64, i64)],
    device_rank: &[(i64, i64)],
) -> Result<()> {
    let mut guard = Removal(Some(part.to_path_buf()));
    write_ranks(part, ranks, process_rank, device_rank)?;
    publish(part, output, options.overwrite)?;
    guard.0 = None; // published: nothing to remove
    Ok(())
}

/// Labels the processes (`(pid, rank)`) and GPUs (`(device id, rank)`) of the complete run at
/// `path`, which nobody reads yet, and writes its `ranks`. Nothing to do without ranks.
pub fn write_ranks(
    path: &Path,
    ranks: &[RankInfo],
    process_rank: &[(i64, i64)],
    device_rank: &[(i64, i64)],
) -> Result<()> {
    if ranks.is_empty() {
        return Ok(());
    }
    runtime(path)?.block_on(async {
        let mut conn = open_rw(path, false).await?;
        // The part was written by this build, so every migration is there; applying them is a
        // no-op that also covers a part from an older writer.
        sqlx::migrate!("./migrations").run(&mut conn).await?;
        conn.close().await?;
        Ok::<_, Error>(())
    })?;
    // A whole job's run keeps its GPUs' ids: each is its own ordinal.
    let devices: Vec<(i64, i64, i64)> = device_rank
        .iter()
        .map(|&(dev, rank)| (dev, rank, dev))
        .collect();
    label_ranks(path, ranks, process_rank, &devices)
}

/// An id for `old` of rank `rank` that no earlier rank took: `old` itself when free, else
/// offset by `stride * rank` away from zero.
fn fresh_id(old: i64, rank: i64, stride: i64, taken: &HashSet<i64>) -> Option<i64> {
    if !taken.contains(&old) {
        return Some(old);
    }
    let off = stride.checked_mul(rank.max(1))?;
    let new = if old < 0 {
        old.checked_sub(off)?
    } else {
        old.checked_add(off)?
    };
    (!taken.contains(&new)).then_some(new)
}

/// Copies the runs of `parts` (one rank each, complete) into one new run at `output`, each
/// rank's times shifted by its `clock_offset_ns`; `run` describes the merged run. Nothing is
/// left at `output` on error.
///
/// The rows are read from each part in order and go through one bulk [`Writer`] (b-tree pages
/// written directly, indexes sorted once), so the merged run's ids are rank 0's rows, then rank
/// 1's, and its strings are numbered by first sight across the ranks; the ranks' labels go in
/// through SQL before the run is published.
pub fn merge_ranks(
    parts: &[MergePart],
    output: &Path,
    options: CreateOptions,
    run: &RunInfo,
) -> Result<MergeReport> {
    let tmp = temp_path(output, options)?;
    // Fail early, naming the output, if its folder cannot be written.
    std::fs::File::create(&tmp).map_err(|e| io_error(output, e))?;
    let mut guard = Removal(Some(tmp.clone()));
    let mut w = Writer::create(
        &tmp,
        CreateOptions {
            overwrite: true,
            ..Default::default()
        },
    )?;
    let mut m = Merge::default();
    for (i, part) in parts.iter().enumerate() {
        m.part(&mut w, i, part)?;
    }
    w.meta("ranks", parts.len());
    w.finish(run.clone())?;
    let ranks: Vec<RankInfo> = parts.iter().map(|p| p.info.clone()).collect();
    label_ranks(&tmp, &ranks, &m.process_rank, &m.device_rank)?;
    publish(&tmp, output, options.overwrite)?;
    guard.0 = None; // published: nothing to remove
    m.report.pids_renumbered.sort_unstable();
    m.report.devices_renumbered.sort_unstable();
    Ok(m.report)
}

/// What [`merge_ranks`] carries from one rank to the next.
#[derive(Default)]
struct Merge {
    report: MergeReport,
    pids_taken: HashSet<i64>,
    devices_taken: HashSet<i64>,
    process_rank: Vec<(i64, i64)>,
    /// `(id in the run, rank, source ordinal)`.
    device_rank: Vec<(i64, i64, i64)>,
}

impl Merge {
    /// Copies the `i`-th part (rank `part.info.rank`) into `w`.
    fn part(&mut self, w: &mut Writer, i: usize, part: &MergePart) -> Result<()> {
        let rank = part.info.rank;
        let mut src = Store::open(&part.path)?;

        // Strings: the same text gets the same id across ranks, ids stay 1, 2, 3, ...
        let strings = src.strings()?;
        let smap: Vec<StrId> = std::iter::once(StrId(0))
            .chain((1..=strings.len() as i64).map(|id| w.intern(strings.get(StrId(id)))))
            .collect();
        drop(strings);
        let s = |id: StrId| -> Result<StrId> {
            usize::try_from(id.0)
                .ok()
                .filter(|&i| i > 0)
                .and_then(|i| smap.get(i).copied())
                .ok_or_else(|| {
                    Error::Sqlite(format!("rank {rank}: string id {} not in its table", id.0))
                })
        };

        // Processes (pid namespace) and GPUs (device namespace): each id the rank uses gets
        // its id in the run at first sight, while the rows are copied. An id's new value
        // depends only on the earlier ranks' ids, so the order of first sight does not matter.
        let pmap: RefCell<HashMap<i64, i64>> = RefCell::default();
        let dmap: RefCell<HashMap<i64, i64>> = RefCell::default();
        let unmapped: RefCell<Option<Error>> = RefCell::default();
        let map = |ids: &RefCell<HashMap<i64, i64>>,
                   old: i64,
                   stride: i64,
                   taken: &HashSet<i64>,
                   what: &str| {
            *ids.borrow_mut().entry(old).or_insert_with(|| {
                fresh_id(old, rank, stride, taken).unwrap_or_else(|| {
                    unmapped.borrow_mut().get_or_insert_with(|| {
                        Error::Sqlite(format!("rank {rank}: no free {what} for {old}"))
                    });
                    old
                })
            })
        };
        let pids_taken = &self.pids_taken;
        let devices_taken = &self.devices_taken;
        let p = |pid: i64| map(&pmap, pid, RANK_PID_STRIDE, pids_taken, "process id");
        let d = |dev: i64| map(&dmap, dev, RANK_DEVICE_STRIDE, devices_taken, "GPU id");

        // Saturating: a rank's stray record centuries off its clock stays at the edge of time.
        let off = part.info.clock_offset_ns;
        let link = if i == 0 {
            0
        } else {
            rank.max(1) << LINK_ID_SHIFT
        };
        let linked = |id: Option<i64>| id.map(|x| x.wrapping_add(link));
        // The scans call back per row; the first error stops the copying and is returned.
        let mut failed: Option<Error> = None;
        let mut keep = |r: Result<()>| {
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        };
        src.for_each_kernel(|k| {
            let row = s(k.name).map(|name| Kernel {
                start_ns: k.start_ns.saturating_add(off),
                end_ns: k.end_ns.saturating_add(off),
                device_id: d(k.device_id),
                pid: k.pid.map(p),
                external_id: linked(k.external_id),
                name,
                ..k
            });
            keep(row.and_then(|k| w.kernel(k)));
        })?;
        src.for_each_memop(|m| {
            keep(w.memop(Memop {
                start_ns: m.start_ns.saturating_add(off),
                end_ns: m.end_ns.saturating_add(off),
                device_id: d(m.device_id),
                pid: m.pid.map(p),
                external_id: linked(m.external_id),
                ..m
            }));
        })?;
        src.for_each_api_call(|a| {
            let row = s(a.name).map(|name| ApiCall {
                start_ns: a.start_ns.saturating_add(off),
                end_ns: a.end_ns.saturating_add(off),
                pid: p(a.pid),
                external_id: linked(a.external_id),
                name,
                ..a
            });
            keep(row.and_then(|a| w.api_call(a)));
        })?;
        src.for_each_range(|r| {
            let opt = |id: Option<StrId>| id.map(s).transpose();
            let row = (|| {
                Ok(Range {
                    start_ns: r.start_ns.saturating_add(off),
                    end_ns: r.end_ns.map(|e| e.saturating_add(off)),
                    pid: if r.kind.is_gpu_side() {
                        d(r.pid)
                    } else {
                        p(r.pid)
                    },
                    domain: opt(r.domain)?,
                    name: s(r.name)?,
                    category: opt(r.category)?,
                    external_id: linked(r.external_id),
                    input_dims: opt(r.input_dims)?,
                    input_types: opt(r.input_types)?,
                    ..r
                })
            })();
            keep(row.and_then(|r| w.range(r)));
        })?;
        src.for_each_flow(|f| {
            let row = s(f.category).map(|category| Flow {
                category,
                flow_id: f.flow_id.wrapping_add(link),
                ts_ns: f.ts_ns.saturating_add(off),
                pid: p(f.pid),
                ..f
            });
            keep(row.and_then(|f| w.flow(f)));
        })?;
        if let Some(e) = failed {
            return Err(e);
        }

        for (pid, tid, name) in src.threads()? {
            w.thread(p(pid), tid, name.as_deref());
        }
        for (pid, name) in src.processes()? {
            w.process(p(pid), name.as_deref());
        }
        if let Some(e) = unmapped.take() {
            return Err(e);
        }
        let mut pids: Vec<(i64, i64)> = pmap.take().into_iter().collect();
        pids.sort_unstable();
        for &(old, new) in &pids {
            if new != old {
                self.report.pids_renumbered.push((rank, old, new));
            }
            self.process_rank.push((new, rank));
            self.pids_taken.insert(new);
            w.process(new, None);
        }
        let mut devs: Vec<(i64, i64)> = dmap.take().into_iter().collect();
        devs.sort_unstable();
        let mut devices: HashMap<i64, Device> =
            src.devices()?.into_iter().map(|d| (d.id, d)).collect();
        for &(old, new) in &devs {
            if new != old {
                self.report.devices_renumbered.push((rank, old, new));
            }
            self.device_rank.push((new, rank, old));
            self.devices_taken.insert(new);
            let dev = devices.remove(&old).unwrap_or_default();
            w.device(Device { id: new, ..dev });
        }
        if i == 0 {
            for (key, value) in src.meta()? {
                if !PER_RANK_META.contains(&key.as_str()) {
                    w.meta(&key, value);
                }
            }
        }
        Ok(())
    }
}

/// Writes the `ranks` table and the processes' and GPUs' ranks into the complete run at
/// `path`, which nobody reads yet.
fn label_ranks(
    path: &Path,
    ranks: &[RankInfo],
    process_rank: &[(i64, i64)],
    device_rank: &[(i64, i64, i64)],
) -> Result<()> {
    let rt = runtime(path)?;
    rt.block_on(async {
        let mut conn = open_rw(path, false).await?;
        {
            let mut h = conn.lock_handle().await?;
            let db = h.as_raw_handle();
            raw::exec(db, "BEGIN")?;
            insert_ranks(db, ranks)?;
            let mut st = Stmt::prepare(db, "UPDATE processes SET rank = ?1 WHERE pid = ?2")?;
            for &(pid, rank) in process_rank {
                st.bind_i64(1, rank)?;
                st.bind_i64(2, pid)?;
                st.execute()?;
            }
            let mut st = Stmt::prepare(
                db,
                "INSERT INTO devices (id, rank, ordinal) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (id) DO UPDATE SET rank = ?2, ordinal = ?3",
            )?;
            for &(id, rank, ordinal) in device_rank {
                st.bind_i64(1, id)?;
                st.bind_i64(2, rank)?;
                st.bind_i64(3, ordinal)?;
                st.execute()?;
            }
            raw::exec(db, "COMMIT; PRAGMA journal_mode = DELETE;")?;
        }
        conn.close().await?;
        Ok::<_, Error>(())
    })
}

/// A collective (communication) kernel of one rank. Kernels with the same `key` (the same
/// kernel name) are the same kind of collective on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collective {
    pub key: u32,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// How far apart two ends may be and still be one collective: a sixteenth of the kernel's
/// duration, within [50 us, 5 ms]. The kernels of one collective end within microseconds of
/// each other on every rank (the transfer completes everywhere at once); uneven all-to-all
/// splits spread them by up to a few hundred.
fn tolerance_ns(c: &Collective) -> i64 {
    (c.end_ns.saturating_sub(c.start_ns) / 16).clamp(50_000, 5_000_000)
}

/// For each collective of `other` with its times shifted by `shift_ns`, the index of its
/// partner in `reference`: the collective of the same key whose end is nearest, within
/// tolerance, each reference collective taken by at most one (the nearest).
pub fn match_collectives(
    reference: &[Collective],
    other: &[Collective],
    shift_ns: i64,
) -> Vec<Option<usize>> {
    let mut by_key: HashMap<u32, Vec<(i64, usize)>> = HashMap::new();
    for (i, c) in reference.iter().enumerate() {
        by_key.entry(c.key).or_default().push((c.end_ns, i));
    }
    for v in by_key.values_mut() {
        v.sort_unstable();
    }
    let mut out: Vec<Option<usize>> = vec![None; other.len()];
    // reference index -> (distance, other index) of its nearest claimant
    let mut claimed: HashMap<usize, (u64, usize)> = HashMap::new();
    for (j, c) in other.iter().enumerate() {
        let Some(ends) = by_key.get(&c.key) else {
            continue;
        };
        // Saturating: a shift that would carry an end past i64 matches nothing.
        let end = c.end_ns.saturating_add(shift_ns);
        let at = ends.partition_point(|&(e, _)| e < end);
        let best = [at.checked_sub(1), Some(at)]
            .into_iter()
            .flatten()
            .filter_map(|k| ends.get(k))
            .map(|&(e, i)| (e.abs_diff(end), i))
            .min();
        let Some((dist, i)) = best else { continue };
        if dist > tolerance_ns(c).unsigned_abs() {
            continue;
        }
        match claimed.get(&i) {
            Some(&(d, _)) if d <= dist => {}
            prev => {
                if let Some(&(_, loser)) = prev {
                    out[loser] = None;
                }
                claimed.insert(i, (dist, j));
                out[j] = Some(i);
            }
        }
    }
    out
}

/// The shift that puts `other`'s collectives on `reference`'s clock, as found by
/// [`align_collectives`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alignment {
    pub shift_ns: i64,
    pub matched: usize,
    /// Median |end difference| of the matched pairs after the shift.
    pub residual_ns: i64,
}

/// Finds the shift of `other`'s clock that makes its collectives end with their partners on
/// `reference`. Candidates pair the first collectives of each key with their near neighbours
/// in order (so a few kernels missing from either trace do no harm); the one that matches
/// most wins, then the median end difference of its pairs refines it. With `window` (the
/// clocks are already about right, e.g. both on the wall clock) only shifts within it count,
/// and of the shifts that match nearly as well as the best the smallest wins, so that a
/// shift by a whole step is never taken for the right one. `None` when fewer than 3
/// collectives, or fewer than a quarter of the smaller side, match.
pub fn align_collectives(
    reference: &[Collective],
    other: &[Collective],
    window: Option<i64>,
) -> Option<Alignment> {
    const FIRST: usize = 64;
    const NEIGHBOURS: i64 = 3;
    let mut by_key: HashMap<u32, (Vec<i64>, Vec<i64>)> = HashMap::new();
    for c in reference {
        by_key.entry(c.key).or_default().0.push(c.end_ns);
    }
    for c in other {
        by_key.entry(c.key).or_default().1.push(c.end_ns);
    }
    let mut candidates: Vec<i64> = Vec::new();
    if window.is_some() {
        candidates.push(0);
    }
    for (r, o) in by_key.values_mut() {
        r.sort_unstable();
        o.sort_unstable();
        for (k, &oe) in o.iter().enumerate().take(FIRST) {
            for j in k as i64 - NEIGHBOURS..=k as i64 + NEIGHBOURS {
                if let Some(&re) = usize::try_from(j).ok().and_then(|j| r.get(j)) {
                    // Ends that far apart are no shift at all (clocks centuries apart).
                    let Some(shift) = re.checked_sub(oe) else {
                        continue;
                    };
                    if window.is_none_or(|w| shift.unsigned_abs() <= w.unsigned_abs()) {
                        candidates.push(shift);
                    }
                }
            }
        }
    }
    candidates.sort_unstable();
    candidates.dedup();
    let score = |shift: i64| {
        match_collectives(reference, other, shift)
            .iter()
            .filter(|m| m.is_some())
            .count()
    };
    let scored: Vec<(usize, i64)> = candidates.iter().map(|&s| (score(s), s)).collect();
    let best = scored.iter().map(|&(n, _)| n).max()?;
    let (_, shift) = scored
        .iter()
        .filter(|&&(n, _)| n * 10 >= best * 9)
        .min_by_key(|&&(n, s)| (s.unsigned_abs(), std::cmp::Reverse(n)))
        .copied()?;
    let diffs = |shift: i64| -> Vec<i64> {
        let mut d: Vec<i64> = match_collectives(reference, other, shift)
            .iter()
            .zip(other)
            // A matched pair's ends are within the tolerance once shifted: no overflow.
            .filter_map(|(m, c)| m.map(|i| reference[i].end_ns - c.end_ns.saturating_add(shift)))
            .collect();
        d.sort_unstable();
        d
    };
    let d = diffs(shift);
    let refined = shift.saturating_add(d.get(d.len() / 2).copied().unwrap_or(0));
    let d = diffs(refined);
    let matched = d.len();
    if matched < 3 || matched * 4 < reference.len().min(other.len()) {
        return None;
    }
    let mut abs: Vec<i64> = d.iter().map(|x| x.abs()).collect();
    abs.sort_unstable();
    Some(Alignment {
        shift_ns: refined,
        matched,
        residual_ns: abs[abs.len() / 2],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kept_when_free_and_moved_away_from_zero_when_taken() {
        let taken: HashSet<i64> = [0, 1, -1, 4037].into_iter().collect();
        assert_eq!(fresh_id(4045, 1, RANK_PID_STRIDE, &taken), Some(4045));
        assert_eq!(fresh_id(1, 1, RANK_PID_STRIDE, &taken), Some(1_000_000_001));
        assert_eq!(
            fresh_id(-1, 2, RANK_PID_STRIDE, &taken),
            Some(-2_000_000_001)
        );
        assert_eq!(fresh_id(0, 3, RANK_DEVICE_STRIDE, &taken), Some(3000));
        // Rank 0 never collides with itself; a taken id of rank 0 still moves (stride x 1).
        assert_eq!(fresh_id(0, 0, RANK_DEVICE_STRIDE, &taken), Some(1000));
    }

    fn coll(key: u32, start_us: i64, end_us: i64) -> Collective {
        Collective {
            key,
            start_ns: start_us * 1000,
            end_ns: end_us * 1000,
        }
    }

    #[test]
    fn collectives_align_despite_missing_kernels_and_a_periodic_workload() {
        // Rank 0's clock; every 1000 us a step with two all-reduces (key 0) and one
        // all-to-all (key 1). Rank 1 runs 12_345 us behind and misses two kernels.
        let mut r0 = Vec::new();
        let mut r1 = Vec::new();
        for step in 0..6 {
            let t = step * 1000;
            for (key, s, e) in [
                (0, t + 100, t + 300),
                (0, t + 400, t + 500),
                (1, t + 600, t + 900),
            ] {
                r0.push(coll(key, s, e));
                let missing = (step == 1 && key == 0 && s == t + 100) || (step == 4 && key == 1);
                if !missing {
                    // Rank 1 arrives later at some (starts later), ends within 3 us.
                    r1.push(coll(key, s + 50 - 12_345, e + step % 3 - 12_345));
                }
            }
        }
        let a = align_collectives(&r0, &r1, None).unwrap();
        assert!((a.shift_ns - 12_345_000).abs() <= 2_000, "{a:?}");
        assert_eq!(a.matched, 16);
        assert!(a.residual_ns <= 2_000);
        // On a wall clock about right, the unshifted candidate wins over a step's shift.
        let r1: Vec<Collective> = r1
            .iter()
            .map(|c| coll(c.key, c.start_ns / 1000 + 12_345, c.end_ns / 1000 + 12_345))
            .collect();
        let a = align_collectives(&r0, &r1, Some(2_000_000_000)).unwrap();
        assert!(a.shift_ns.abs() <= 2_000, "{a:?}");
        // Nothing in common: no alignment.
        let other = vec![coll(7, 0, 10), coll(7, 20, 30), coll(7, 40, 50)];
        assert_eq!(align_collectives(&r0, &other, None), None);
    }
}
