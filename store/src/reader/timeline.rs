//! Reads for a timeline view (`fuseprof tui`): which tracks a run has, its time bounds, the
//! records of one stream or thread inside a time window, one record by id, and the next record
//! with a given name. Everything here goes through the indexes of `0002_indexes.sql` (kernels
//! and memops by (device_id, stream_id, start_ns), ranges and API calls by (pid, tid, start_ns),
//! all three by (correlation_id, pid)), so its cost follows the window, not the run. The
//! `for_each_span_*` passes are the exception: one lean page scan of a table each, for the
//! timeline's summary of the whole run (whose API calls are read by
//! [`Store::for_each_lean_call`]).

use crate::model::*;
use crate::raw::Stmt;
use crate::reader::pages::Record;
use crate::reader::{
    api_call_row, kernel_row, memop_row, range_kind, range_row, Store, API_CALL_ROW_COLUMNS,
    KERNELS, KERNEL_ROW_COLUMNS, RANGES, RANGE_ROW_COLUMNS,
};
use crate::Result;

/// A kernel, copy or fill as a timeline draws it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuSpan {
    /// The row id in `kernels` or `memops` (by `kind`).
    pub id: i64,
    pub kind: GpuKind,
    pub start_ns: i64,
    pub end_ns: i64,
    /// The kernel's name; `StrId(0)` (no string) for copies and fills.
    pub name: StrId,
    /// Copies only.
    pub copy_kind: Option<CopyKind>,
}

/// Which table a [`GpuSpan`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuKind {
    Kernel,
    Memcpy,
    Memset,
}

/// A host range or mark as a timeline draws it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostSpan {
    pub id: i64,
    pub kind: RangeKind,
    pub start_ns: i64,
    /// `None` for marks and ranges that never closed.
    pub end_ns: Option<i64>,
    pub depth: Option<i64>,
    pub name: StrId,
    pub domain: Option<StrId>,
    pub category: Option<StrId>,
}

/// A CUDA API call as a timeline draws it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiSpan {
    pub id: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    pub name: StrId,
    pub correlation_id: Option<i64>,
}

/// The columns of a kernel that a whole-run summary needs, read by
/// [`Store::for_each_span_kernel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassKernel {
    pub start_ns: i64,
    pub end_ns: i64,
    pub device_id: i64,
    pub stream_id: i64,
    pub name: StrId,
}

/// The columns of a memcpy or memset that a whole-run summary needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassMemop {
    pub kind: MemopKind,
    pub start_ns: i64,
    pub end_ns: i64,
    pub device_id: i64,
    pub stream_id: i64,
}

/// The columns of a range that a whole-run summary needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassRange {
    pub kind: RangeKind,
    pub start_ns: i64,
    pub end_ns: Option<i64>,
    pub pid: i64,
    pub tid: i64,
    pub domain: Option<StrId>,
    pub name: StrId,
    pub depth: Option<i64>,
}

/// Largest row id of each table: the row count of a run the writer wrote (ids are dense from
/// 1), found in O(log n) where `count(*)` reads a whole index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowEstimates {
    pub kernels: i64,
    pub memops: i64,
    pub ranges: i64,
    pub api_calls: i64,
}

/// Which way [`Store::next_kernel_named`] and friends search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The first record that starts after the given (start, id).
    Forward,
    /// The last record that starts before it.
    Backward,
}

const GPU_COLUMNS: &str = "id, start_ns, end_ns, name_id";
const MEMOP_COLUMNS: &str = "id, start_ns, end_ns, kind, copy_kind";
const RANGE_COLUMNS: &str = "id, kind, start_ns, end_ns, depth, name_id, domain_id, category_id";
const API_COLUMNS: &str = "id, start_ns, end_ns, name_id, correlation_id";

fn kernel_span(s: &Stmt<'_>) -> GpuSpan {
    GpuSpan {
        id: s.col_i64(0),
        kind: GpuKind::Kernel,
        start_ns: s.col_i64(1),
        end_ns: s.col_i64(2),
        name: StrId(s.col_i64(3)),
        copy_kind: None,
    }
}

fn memop_span(s: &Stmt<'_>) -> GpuSpan {
    let memset = s.col_text(3) == Some("memset");
    GpuSpan {
        id: s.col_i64(0),
        kind: if memset {
            GpuKind::Memset
        } else {
            GpuKind::Memcpy
        },
        start_ns: s.col_i64(1),
        end_ns: s.col_i64(2),
        name: StrId(0),
        copy_kind: if memset {
            None
        } else {
            s.col_text(4).map(CopyKind::parse)
        },
    }
}

fn host_span(s: &Stmt<'_>) -> HostSpan {
    HostSpan {
        id: s.col_i64(0),
        kind: range_kind(s.col_bytes(1)),
        start_ns: s.col_i64(2),
        end_ns: s.col_opt_i64(3),
        depth: s.col_opt_i64(4),
        name: StrId(s.col_i64(5)),
        domain: s.col_opt_i64(6).map(StrId),
        category: s.col_opt_i64(7).map(StrId),
    }
}

fn api_span(s: &Stmt<'_>) -> ApiSpan {
    ApiSpan {
        id: s.col_i64(0),
        start_ns: s.col_i64(1),
        end_ns: s.col_i64(2),
        name: StrId(s.col_i64(3)),
        correlation_id: s.col_opt_i64(4),
    }
}

/// `name_id IN (1, 2, 3)` for a list of ids (integers, so inlining them is safe); `0 = 1`
/// for an empty list.
fn name_filter(names: &[StrId]) -> String {
    if names.is_empty() {
        return "0 = 1".into();
    }
    let ids: Vec<String> = names.iter().map(|n| n.0.to_string()).collect();
    format!("name_id IN ({})", ids.join(", "))
}

impl Store {
    /// The distinct values of a two-column index prefix `(a, b)` of `table`, in order, one
    /// index seek each (a loose index scan: SQLite would read the whole index for DISTINCT).
    /// Each seek must land past the pair before it: SQLite trusts the index's order, so a
    /// damaged index could otherwise send the scan round the same pairs for ever.
    fn distinct_pairs(&mut self, table: &str, a: &str, b: &str) -> Result<Vec<(i64, i64)>> {
        let same = format!(
            "SELECT {a}, {b} FROM {table} WHERE {a} = ?1 AND {b} > ?2 ORDER BY {a}, {b} LIMIT 1"
        );
        let next = format!("SELECT {a}, {b} FROM {table} WHERE {a} > ?1 ORDER BY {a}, {b} LIMIT 1");
        let mut out: Vec<(i64, i64)> = Vec::new();
        let mut found = None;
        self.query(
            &format!("SELECT {a}, {b} FROM {table} ORDER BY {a}, {b} LIMIT 1"),
            &[],
            |s| found = Some((s.col_i64(0), s.col_i64(1))),
        )?;
        while let Some(pair) = found.take() {
            out.push(pair);
            self.query(&same, &[pair.0, pair.1], |s| {
                found = Some((s.col_i64(0), s.col_i64(1)))
            })?;
            if found.is_none() {
                self.query(&next, &[pair.0], |s| {
                    found = Some((s.col_i64(0), s.col_i64(1)))
                })?;
            }
            if found.is_some_and(|f| f <= pair) {
                return Err(super::not_a_store(
                    &self.path,
                    format!("its {table} index on ({a}, {b}) is corrupt (out of order)"),
                ));
            }
        }
        Ok(out)
    }

    /// Sets how much of the file SQLite keeps in memory for this connection (its page
    /// cache), in KiB: window reads next to each other share pages.
    pub fn set_cache_kib(&mut self, kib: i64) -> Result<()> {
        self.query(&format!("PRAGMA cache_size = -{}", kib.max(0)), &[], |_| {})
    }

    /// Every (device, stream) with a kernel, copy or fill, in order.
    pub fn timeline_streams(&mut self) -> Result<Vec<(i64, i64)>> {
        let mut v = self.distinct_pairs("kernels", "device_id", "stream_id")?;
        v.extend(self.distinct_pairs("memops", "device_id", "stream_id")?);
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// Every (pid, tid) with a range or an API call, in order. GPU-side ranges
    /// ([`RangeKind::is_gpu_side`]) use (device, stream) here, as in the store.
    pub fn timeline_threads(&mut self) -> Result<Vec<(i64, i64)>> {
        let mut v = self.distinct_pairs("ranges", "pid", "tid")?;
        v.extend(self.distinct_pairs("api_calls", "pid", "tid")?);
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// The largest row id of each record table.
    pub fn row_estimates(&mut self) -> Result<RowEstimates> {
        let mut max = |table: &str| -> Result<i64> {
            let mut v = 0;
            self.query(&format!("SELECT max(id) FROM {table}"), &[], |s| {
                v = s.col_i64(0)
            })?;
            Ok(v)
        };
        Ok(RowEstimates {
            kernels: max("kernels")?,
            memops: max("memops")?,
            ranges: max("ranges")?,
            api_calls: max("api_calls")?,
        })
    }

    /// The first start and (about) the last end over the given streams and threads, from the
    /// first and last records of each by start (the end is the latest of the last 64 by
    /// start: a range that opened earlier and closed later than those is not seen).
    pub fn timeline_bounds(
        &mut self,
        streams: &[(i64, i64)],
        threads: &[(i64, i64)],
    ) -> Result<Option<(i64, i64)>> {
        let mut first = i64::MAX;
        let mut last = i64::MIN;
        let tables = [
            ("kernels", "device_id", "stream_id", "end_ns", streams),
            ("memops", "device_id", "stream_id", "end_ns", streams),
            (
                "ranges",
                "pid",
                "tid",
                "coalesce(end_ns, start_ns)",
                threads,
            ),
            ("api_calls", "pid", "tid", "end_ns", threads),
        ];
        for (table, a, b, end, keys) in tables {
            let first_sql =
                format!("SELECT min(start_ns) FROM {table} WHERE {a} = ?1 AND {b} = ?2");
            let last_sql = format!(
                "SELECT max(e) FROM (SELECT {end} AS e FROM {table} WHERE {a} = ?1 AND {b} = ?2 \
                 ORDER BY start_ns DESC LIMIT 64)"
            );
            for &(x, y) in keys {
                self.query(&first_sql, &[x, y], |s| {
                    if let Some(v) = s.col_opt_i64(0) {
                        first = first.min(v);
                    }
                })?;
                self.query(&last_sql, &[x, y], |s| {
                    if let Some(v) = s.col_opt_i64(0) {
                        last = last.max(v);
                    }
                })?;
            }
        }
        Ok((first <= last).then_some((first, last)))
    }

    /// Kernels, copies and fills of one stream that start in `[from_ns, to_ns)`, by start;
    /// at most `limit` of each table (so a caller can tell a window is too full by getting
    /// `limit` back).
    pub fn stream_window(
        &mut self,
        device_id: i64,
        stream_id: i64,
        from_ns: i64,
        to_ns: i64,
        limit: i64,
    ) -> Result<Vec<GpuSpan>> {
        let mut out = Vec::new();
        let p = [device_id, stream_id, from_ns, to_ns, limit];
        self.query(
            &format!(
                "SELECT {GPU_COLUMNS} FROM kernels WHERE device_id = ?1 AND stream_id = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
            ),
            &p,
            |s| out.push(kernel_span(s)),
        )?;
        self.query(
            &format!(
                "SELECT {MEMOP_COLUMNS} FROM memops WHERE device_id = ?1 AND stream_id = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
            ),
            &p,
            |s| out.push(memop_span(s)),
        )?;
        out.sort_by_key(|g| (g.start_ns, g.kind, g.id));
        Ok(out)
    }

    /// Samples of one stream for a screen: for each `start` in `starts`, the first `limit`
    /// kernels and the first `limit` copies and fills that start in `[start, start +
    /// width_ns)`, by start. One index seek per column and table, one prepared statement per
    /// table.
    pub fn stream_samples(
        &mut self,
        device_id: i64,
        stream_id: i64,
        starts: &[i64],
        width_ns: i64,
        limit: i64,
    ) -> Result<Vec<Vec<GpuSpan>>> {
        let mut out: Vec<Vec<GpuSpan>> = vec![Vec::new(); starts.len()];
        let db = self.raw_db()?;
        let mut read = || -> Result<()> {
            for (sql, memops) in [
                (
                    format!(
                        "SELECT {GPU_COLUMNS} FROM kernels WHERE device_id = ?1 AND stream_id = ?2 \
                         AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
                    ),
                    false,
                ),
                (
                    format!(
                        "SELECT {MEMOP_COLUMNS} FROM memops WHERE device_id = ?1 AND stream_id = ?2 \
                         AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
                    ),
                    true,
                ),
            ] {
                let mut st = Stmt::prepare(db, &sql)?;
                for (i, &start) in starts.iter().enumerate() {
                    st.reset();
                    for (j, p) in [device_id, stream_id, start, start + width_ns, limit]
                        .into_iter()
                        .enumerate()
                    {
                        st.bind_i64(j as i32 + 1, p)?;
                    }
                    while st.step()? {
                        out[i].push(if memops {
                            memop_span(&st)
                        } else {
                            kernel_span(&st)
                        });
                    }
                }
            }
            Ok(())
        };
        read()?;
        for v in &mut out {
            v.sort_by_key(|g| (g.start_ns, g.kind, g.id));
        }
        Ok(out)
    }

    /// Samples of one thread's ranges for a screen: for each `start`, the first `limit` ranges
    /// and marks that start in `[start, start + width_ns)`, by start.
    pub fn thread_range_samples(
        &mut self,
        pid: i64,
        tid: i64,
        starts: &[i64],
        width_ns: i64,
        limit: i64,
    ) -> Result<Vec<Vec<HostSpan>>> {
        let mut out: Vec<Vec<HostSpan>> = vec![Vec::new(); starts.len()];
        let db = self.raw_db()?;
        let mut read = || -> Result<()> {
            let mut st = Stmt::prepare(
                db,
                &format!(
                    "SELECT {RANGE_COLUMNS} FROM ranges WHERE pid = ?1 AND tid = ?2 \
                     AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
                ),
            )?;
            for (i, &start) in starts.iter().enumerate() {
                st.reset();
                for (j, p) in [pid, tid, start, start + width_ns, limit]
                    .into_iter()
                    .enumerate()
                {
                    st.bind_i64(j as i32 + 1, p)?;
                }
                while st.step()? {
                    out[i].push(host_span(&st));
                }
            }
            Ok(())
        };
        read()?;
        Ok(out)
    }

    /// Ranges and marks of one thread (or, for GPU-side ranges, one device and stream) that
    /// start in `[from_ns, to_ns)`, by start; at most `limit`.
    pub fn thread_ranges_window(
        &mut self,
        pid: i64,
        tid: i64,
        from_ns: i64,
        to_ns: i64,
        limit: i64,
    ) -> Result<Vec<HostSpan>> {
        let mut out = Vec::new();
        self.query(
            &format!(
                "SELECT {RANGE_COLUMNS} FROM ranges WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
            ),
            &[pid, tid, from_ns, to_ns, limit],
            |s| out.push(host_span(s)),
        )?;
        Ok(out)
    }

    /// CUDA API calls of one thread that start in `[from_ns, to_ns)`, by start; at most
    /// `limit`.
    pub fn thread_api_window(
        &mut self,
        pid: i64,
        tid: i64,
        from_ns: i64,
        to_ns: i64,
        limit: i64,
    ) -> Result<Vec<ApiSpan>> {
        let mut out = Vec::new();
        self.query(
            &format!(
                "SELECT {API_COLUMNS} FROM api_calls WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id LIMIT ?5"
            ),
            &[pid, tid, from_ns, to_ns, limit],
            |s| out.push(api_span(s)),
        )?;
        Ok(out)
    }

    /// The ranges of a thread open at `t_ns` (start <= t < end, or marks and unclosed ranges
    /// that started before), innermost first, found by walking back from `t_ns` through at
    /// most `max_rows` ranges of the thread.
    pub fn ranges_open_at(
        &mut self,
        pid: i64,
        tid: i64,
        t_ns: i64,
        max_rows: i64,
    ) -> Result<Vec<HostSpan>> {
        let mut out: Vec<HostSpan> = Vec::new();
        self.query(
            &format!(
                "SELECT {RANGE_COLUMNS} FROM ranges WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns <= ?3 ORDER BY start_ns DESC, id DESC LIMIT ?4"
            ),
            &[pid, tid, t_ns, max_rows],
            |s| {
                let r = host_span(s);
                if r.end_ns.is_some_and(|e| e > t_ns) {
                    out.push(r);
                }
            },
        )?;
        // Walking back by start gives inner ranges first; keep that, outermost last.
        Ok(out)
    }

    /// The kernel with row id `id`.
    pub fn kernel_by_id(&mut self, id: i64) -> Result<Option<Kernel>> {
        let mut out = None;
        self.query(
            &format!("SELECT {KERNEL_ROW_COLUMNS} FROM kernels WHERE id = ?1"),
            &[id],
            |s| out = Some(kernel_row(s, 0)),
        )?;
        Ok(out)
    }

    /// The memcpy or memset with row id `id`.
    pub fn memop_by_id(&mut self, id: i64) -> Result<Option<Memop>> {
        let mut out = None;
        let (_, columns) = self.memops_layout();
        self.query(
            &format!("SELECT {columns} FROM memops WHERE id = ?1"),
            &[id],
            |s| out = Some(memop_row(s)),
        )?;
        Ok(out)
    }

    /// The range or mark with row id `id`.
    pub fn range_by_id(&mut self, id: i64) -> Result<Option<Range>> {
        let mut out = None;
        self.query(
            &format!("SELECT {RANGE_ROW_COLUMNS} FROM ranges WHERE id = ?1"),
            &[id],
            |s| out = Some(range_row(s)),
        )?;
        Ok(out)
    }

    /// The API call with row id `id`.
    pub fn api_call_by_id(&mut self, id: i64) -> Result<Option<ApiCall>> {
        let mut out = None;
        self.query(
            &format!("SELECT {API_CALL_ROW_COLUMNS} FROM api_calls WHERE id = ?1"),
            &[id],
            |s| out = Some(api_call_row(s)),
        )?;
        Ok(out)
    }

    /// The API call that launched the GPU record with this correlation id: the one of process
    /// `pid` where it is known, else the only one with that id. Returns its row id too.
    pub fn launch_call(
        &mut self,
        pid: Option<i64>,
        correlation_id: i64,
    ) -> Result<Option<(i64, ApiCall)>> {
        let mut ids = Vec::new();
        match pid {
            Some(p) => self.query(
                "SELECT id FROM api_calls WHERE correlation_id = ?1 AND pid = ?2 LIMIT 2",
                &[correlation_id, p],
                |s| ids.push(s.col_i64(0)),
            )?,
            None => self.query(
                "SELECT id FROM api_calls WHERE correlation_id = ?1 LIMIT 2",
                &[correlation_id],
                |s| ids.push(s.col_i64(0)),
            )?,
        }
        if ids.len() != 1 {
            return Ok(None);
        }
        Ok(self.api_call_by_id(ids[0])?.map(|c| (ids[0], c)))
    }

    /// The kernels, copies and fills an API call of process `pid` launched (one for a kernel
    /// launch, many for a CUDA-graph launch), with their device and stream.
    pub fn launched_records(
        &mut self,
        pid: i64,
        correlation_id: i64,
    ) -> Result<Vec<(GpuSpan, i64, i64)>> {
        let mut out = Vec::new();
        self.query(
            &format!(
                "SELECT {GPU_COLUMNS}, device_id, stream_id FROM kernels \
                 WHERE correlation_id = ?1 AND (pid = ?2 OR pid IS NULL) ORDER BY start_ns"
            ),
            &[correlation_id, pid],
            |s| out.push((kernel_span(s), s.col_i64(4), s.col_i64(5))),
        )?;
        self.query(
            &format!(
                "SELECT {MEMOP_COLUMNS}, device_id, stream_id FROM memops \
                 WHERE correlation_id = ?1 AND (pid = ?2 OR pid IS NULL) ORDER BY start_ns"
            ),
            &[correlation_id, pid],
            |s| out.push((memop_span(s), s.col_i64(5), s.col_i64(6))),
        )?;
        Ok(out)
    }

    /// The next (or previous) kernel of one stream named one of `names`, from `(start_ns, id)`
    /// exclusive. The index gives the stream's kernels in time order; the name is checked on
    /// each row, so the cost is the number of kernels skipped.
    pub fn next_kernel_named(
        &mut self,
        device_id: i64,
        stream_id: i64,
        from: (i64, i64),
        names: &[StrId],
        dir: Direction,
    ) -> Result<Option<GpuSpan>> {
        let (cmp, order) = match dir {
            Direction::Forward => (">", "ASC"),
            Direction::Backward => ("<", "DESC"),
        };
        let mut out = None;
        self.query(
            &format!(
                "SELECT {GPU_COLUMNS} FROM kernels WHERE device_id = ?1 AND stream_id = ?2 \
                 AND start_ns {cmp}= ?3 AND (start_ns, id) {cmp} (?3, ?4) AND {} \
                 ORDER BY start_ns {order}, id {order} LIMIT 1",
                name_filter(names)
            ),
            &[device_id, stream_id, from.0, from.1],
            |s| out = Some(kernel_span(s)),
        )?;
        Ok(out)
    }

    /// The next (or previous) copy or fill of one stream of `kind`, from `(start_ns, id)`
    /// exclusive; copies only of `copy_kind` when given.
    pub fn next_memop(
        &mut self,
        device_id: i64,
        stream_id: i64,
        from: (i64, i64),
        kind: MemopKind,
        copy_kind: Option<CopyKind>,
        dir: Direction,
    ) -> Result<Option<GpuSpan>> {
        let (cmp, order) = match dir {
            Direction::Forward => (">", "ASC"),
            Direction::Backward => ("<", "DESC"),
        };
        // Both texts are this crate's own spellings, not user input.
        let copy = copy_kind.map_or(String::new(), |c| {
            format!(" AND copy_kind = '{}'", c.as_str())
        });
        let mut out = None;
        self.query(
            &format!(
                "SELECT {MEMOP_COLUMNS} FROM memops WHERE device_id = ?1 AND stream_id = ?2 \
                 AND start_ns {cmp}= ?3 AND (start_ns, id) {cmp} (?3, ?4) AND kind = '{}'{copy} \
                 ORDER BY start_ns {order}, id {order} LIMIT 1",
                kind.as_str()
            ),
            &[device_id, stream_id, from.0, from.1],
            |s| out = Some(memop_span(s)),
        )?;
        Ok(out)
    }

    /// The next (or previous) range of one thread named one of `names`, from `(start_ns, id)`
    /// exclusive; with `dims`, only ranges whose input shapes are one of them.
    pub fn next_range_named(
        &mut self,
        pid: i64,
        tid: i64,
        from: (i64, i64),
        names: &[StrId],
        dims: Option<&[StrId]>,
        dir: Direction,
    ) -> Result<Option<HostSpan>> {
        let (cmp, order) = match dir {
            Direction::Forward => (">", "ASC"),
            Direction::Backward => ("<", "DESC"),
        };
        let dims = dims.map_or(String::new(), |d| {
            format!(
                " AND {}",
                name_filter(d).replacen("name_id", "input_dims_id", 1)
            )
        });
        let mut out = None;
        self.query(
            &format!(
                "SELECT {RANGE_COLUMNS} FROM ranges WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns {cmp}= ?3 AND (start_ns, id) {cmp} (?3, ?4) AND {}{dims} \
                 ORDER BY start_ns {order}, id {order} LIMIT 1",
                name_filter(names)
            ),
            &[pid, tid, from.0, from.1],
            |s| out = Some(host_span(s)),
        )?;
        Ok(out)
    }

    /// Every kernel with only the columns of [`PassKernel`], in row order, read from the
    /// table's pages where possible (as the lean scans are).
    pub fn for_each_span_kernel(&mut self, f: impl FnMut(&PassKernel)) -> Result<()> {
        self.lean_scan(
            &KERNELS,
            "SELECT start_ns, end_ns, device_id, stream_id, name_id FROM kernels \
             WHERE id >= ?1 ORDER BY id",
            |r: &Record<'_, 9>| {
                Some(PassKernel {
                    start_ns: r.i64(1)?,
                    end_ns: r.i64(2)?,
                    device_id: r.i64(3)?,
                    stream_id: r.i64(4)?,
                    name: StrId(r.i64(8)?),
                })
            },
            |s| PassKernel {
                start_ns: s.col_i64(0),
                end_ns: s.col_i64(1),
                device_id: s.col_i64(2),
                stream_id: s.col_i64(3),
                name: StrId(s.col_i64(4)),
            },
            f,
        )
    }

    /// Every memcpy and memset with only the columns of [`PassMemop`], in row order.
    pub fn for_each_span_memop(&mut self, f: impl FnMut(&PassMemop)) -> Result<()> {
        let kind = |b: &[u8]| {
            if b == b"memset" {
                MemopKind::Memset
            } else {
                MemopKind::Memcpy
            }
        };
        let (table, _) = self.memops_layout();
        self.lean_scan(
            table,
            "SELECT kind, start_ns, end_ns, device_id, stream_id FROM memops \
             WHERE id >= ?1 ORDER BY id",
            |r: &Record<'_, 6>| {
                Some(PassMemop {
                    kind: kind(r.bytes(1)?),
                    start_ns: r.i64(2)?,
                    end_ns: r.i64(3)?,
                    device_id: r.i64(4)?,
                    stream_id: r.i64(5)?,
                })
            },
            |s| PassMemop {
                kind: kind(s.col_bytes(0)),
                start_ns: s.col_i64(1),
                end_ns: s.col_i64(2),
                device_id: s.col_i64(3),
                stream_id: s.col_i64(4),
            },
            f,
        )
    }

    /// Every range and mark with only the columns of [`PassRange`], in row order.
    pub fn for_each_span_range(&mut self, f: impl FnMut(&PassRange)) -> Result<()> {
        self.lean_scan(
            &RANGES,
            "SELECT kind, start_ns, end_ns, pid, tid, domain_id, name_id, depth FROM ranges \
             WHERE id >= ?1 ORDER BY id",
            |r: &Record<'_, 12>| {
                Some(PassRange {
                    kind: range_kind(r.bytes(1)?),
                    start_ns: r.i64(2)?,
                    end_ns: r.opt_i64(3)?,
                    pid: r.i64(4)?,
                    tid: r.i64(5)?,
                    domain: r.opt_i64(7)?.map(StrId),
                    name: StrId(r.i64(8)?),
                    depth: r.opt_i64(11)?,
                })
            },
            |s| PassRange {
                kind: range_kind(s.col_bytes(0)),
                start_ns: s.col_i64(1),
                end_ns: s.col_opt_i64(2),
                pid: s.col_i64(3),
                tid: s.col_i64(4),
                domain: s.col_opt_i64(5).map(StrId),
                name: StrId(s.col_i64(6)),
                depth: s.col_opt_i64(7),
            },
            f,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateOptions, Writer};

    /// Two streams, two threads; thread 1 has nested ranges, stream (0, 7) kernels named
    /// a/b alternately every 1,000 ns, launched by API calls on thread 1.
    fn run(path: &std::path::Path) {
        let mut w = Writer::create(path, CreateOptions::default()).unwrap();
        let a = w.intern("a");
        let b = w.intern("b");
        let launch = w.intern("cudaLaunchKernel");
        let outer = w.intern("outer");
        let inner = w.intern("inner");
        let mut r = Range::new(RangeKind::NvtxPushPop, outer, 1, 1, 0);
        r.end_ns = Some(100_000);
        r.depth = Some(0);
        w.range(r).unwrap();
        for i in 0..50i64 {
            let t = 1_000 * i;
            let mut r = Range::new(RangeKind::NvtxPushPop, inner, 1, 1, t + 10);
            r.end_ns = Some(t + 500);
            r.depth = Some(1);
            w.range(r).unwrap();
            w.api_call(ApiCall {
                api: Api::Runtime,
                start_ns: t + 20,
                end_ns: t + 40,
                pid: 1,
                tid: 1,
                correlation_id: Some(i),
                external_id: None,
                name: launch,
                return_code: None,
            })
            .unwrap();
            w.kernel(Kernel {
                start_ns: t + 100,
                end_ns: t + 600,
                device_id: 0,
                stream_id: 7,
                pid: Some(1),
                correlation_id: Some(i),
                external_id: None,
                name: if i % 2 == 0 { a } else { b },
                grid: Some([i, 1, 1]),
                block: Some([128, 1, 1]),
                registers_per_thread: Some(32),
                static_smem_bytes: None,
                dynamic_smem_bytes: None,
                graph_id: None,
            })
            .unwrap();
        }
        w.memop(Memop {
            kind: MemopKind::Memcpy,
            start_ns: 200_000,
            end_ns: 201_000,
            device_id: 1,
            stream_id: 3,
            pid: Some(1),
            correlation_id: None,
            external_id: None,
            bytes: Some(64),
            copy_kind: Some(CopyKind::HtoD),
            value: None,
            src_memory: Some(MemoryKind::Pinned),
            dst_memory: Some(MemoryKind::Device),
        })
        .unwrap();
        let mut r = Range::new(RangeKind::NvtxMark, a, 2, 5, 150_000);
        r.depth = None;
        w.range(r).unwrap();
        w.finish(RunInfo {
            source_format: "cupti".into(),
            ..Default::default()
        })
        .unwrap();
    }

    #[test]
    fn tracks_bounds_windows_and_lookups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        run(&path);
        let mut s = Store::open(&path).unwrap();
        let streams = s.timeline_streams().unwrap();
        assert_eq!(streams, vec![(0, 7), (1, 3)]);
        let threads = s.timeline_threads().unwrap();
        assert_eq!(threads, vec![(1, 1), (2, 5)]);
        assert_eq!(
            s.timeline_bounds(&streams, &threads).unwrap(),
            Some((0, 201_000))
        );
        assert_eq!(
            s.row_estimates().unwrap(),
            RowEstimates {
                kernels: 50,
                memops: 1,
                ranges: 52,
                api_calls: 50
            }
        );

        let w = s.stream_window(0, 7, 2_000, 5_000, 100).unwrap();
        assert_eq!(
            w.iter().map(|g| g.start_ns).collect::<Vec<_>>(),
            [2_100, 3_100, 4_100]
        );
        assert_eq!(s.stream_window(0, 7, 0, 50_000, 4).unwrap().len(), 4);
        let m = s.stream_window(1, 3, 0, i64::MAX, 10).unwrap();
        assert_eq!(m[0].kind, GpuKind::Memcpy);
        assert_eq!(m[0].copy_kind, Some(CopyKind::HtoD));

        let r = s.thread_ranges_window(1, 1, 0, 2_000, 100).unwrap();
        assert_eq!(
            r.iter().map(|r| r.depth).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(1)]
        );
        let api = s.thread_api_window(1, 1, 0, 2_000, 100).unwrap();
        assert_eq!(api.len(), 2);

        // Samples: two kernels at most from each of three columns.
        let samples = s
            .stream_samples(0, 7, &[0, 10_000, 60_000], 10_000, 2)
            .unwrap();
        assert_eq!(
            samples
                .iter()
                .map(|v| v.iter().map(|g| g.start_ns).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
            [vec![100, 1_100], vec![10_100, 11_100], vec![]]
        );
        let samples = s
            .thread_range_samples(1, 1, &[0, 49_000], 1_000, 5)
            .unwrap();
        assert_eq!(samples[0].len(), 2);
        assert_eq!(samples[1].len(), 1);

        // Open at 3,200: inner ranges end at 3,500, the outer one at 100,000.
        let open = s.ranges_open_at(1, 1, 3_200, 1_000).unwrap();
        assert_eq!(
            open.iter()
                .map(|r| (r.start_ns, r.depth))
                .collect::<Vec<_>>(),
            [(3_010, Some(1)), (0, Some(0))]
        );
        assert!(s.ranges_open_at(1, 1, 3_200, 1).unwrap().len() == 1);

        // The flow: kernel -> launch call -> the kernels it launched.
        let k = s.kernel_by_id(w[0].id).unwrap().unwrap();
        assert_eq!(k.grid, Some([2, 1, 1]));
        let (call_id, call) = s
            .launch_call(k.pid, k.correlation_id.unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(call.start_ns, 2_020);
        assert_eq!(s.api_call_by_id(call_id).unwrap(), Some(call));
        let launched = s.launched_records(1, 2).unwrap();
        assert_eq!(launched.len(), 1);
        assert_eq!((launched[0].1, launched[0].2), (0, 7));

        // Next / previous by name.
        let b = StrId(2);
        let next = s
            .next_kernel_named(0, 7, (2_100, w[0].id), &[b], Direction::Forward)
            .unwrap()
            .unwrap();
        assert_eq!(next.start_ns, 3_100);
        let prev = s
            .next_kernel_named(0, 7, (2_100, w[0].id), &[b], Direction::Backward)
            .unwrap()
            .unwrap();
        assert_eq!(prev.start_ns, 1_100);
        assert_eq!(
            s.next_kernel_named(0, 7, (49_100, i64::MAX), &[b], Direction::Forward)
                .unwrap(),
            None
        );
        let inner = s
            .next_range_named(1, 1, (0, 0), &[StrId(5)], None, Direction::Forward)
            .unwrap()
            .unwrap();
        assert_eq!(inner.start_ns, 10);
        let copy = s
            .next_memop(
                1,
                3,
                (0, 0),
                MemopKind::Memcpy,
                Some(CopyKind::HtoD),
                Direction::Forward,
            )
            .unwrap();
        assert!(copy.is_some());
        let none = s
            .next_memop(
                1,
                3,
                (0, 0),
                MemopKind::Memcpy,
                Some(CopyKind::DtoH),
                Direction::Forward,
            )
            .unwrap();
        assert!(none.is_none());

        // The passes see every row.
        let mut n = 0;
        s.for_each_span_kernel(|k| {
            assert_eq!((k.device_id, k.stream_id), (0, 7));
            n += 1
        })
        .unwrap();
        assert_eq!(n, 50);
        let mut depths = Vec::new();
        s.for_each_span_range(|r| depths.push(r.depth)).unwrap();
        assert_eq!(depths.len(), 52);
        assert_eq!(depths[51], None);
        let mut calls = 0;
        s.for_each_lean_call(|_| calls += 1).unwrap();
        let mut memops = 0;
        s.for_each_span_memop(|m| {
            assert_eq!(m.kind, MemopKind::Memcpy);
            memops += 1
        })
        .unwrap();
        assert_eq!((calls, memops), (50, 1));
    }
}
