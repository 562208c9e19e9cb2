//! Reads for analysing one time window of a run (a step, `fuseprof tui`'s step scope) without
//! reading the run: ranges and launch calls of one thread by start, GPU records of one stream
//! by start, and every launch call, kernel and memop of one correlation id. All go through
//! the indexes of `0002_indexes.sql`, so their cost follows the window. Each row comes with
//! its row id, so that a caller can put rows in the order a whole-table scan gives them.

use crate::model::*;
use crate::raw::Stmt;
use crate::reader::{
    kernel_row, lean_range_row, Store, KERNEL_ROW_COLUMNS, LEAN_RANGE_ROW_COLUMNS,
};
use crate::Result;

const LEAN_LAUNCH_COLUMNS: &str = "id, start_ns, pid, tid, correlation_id";
const LEAN_MEMOP_COLUMNS: &str = "id, kind, start_ns, end_ns, device_id, stream_id, pid, \
     correlation_id, external_id, copy_kind";

fn lean_range(s: &Stmt<'_>) -> (i64, LeanRange) {
    (s.col_i64(0), lean_range_row(s, 1))
}

fn lean_launch(s: &Stmt<'_>) -> (i64, LeanLaunch) {
    (
        s.col_i64(0),
        LeanLaunch {
            start_ns: s.col_i64(1),
            pid: s.col_i64(2),
            tid: s.col_i64(3),
            correlation_id: s.col_i64(4),
        },
    )
}

fn kernel(s: &Stmt<'_>) -> (i64, Kernel) {
    (s.col_i64(0), kernel_row(s, 1))
}

fn lean_memop(s: &Stmt<'_>) -> (i64, LeanMemop) {
    // Text read as the lean scan reads it: invalid UTF-8 as no text.
    let kind = std::str::from_utf8(s.col_bytes(1))
        .ok()
        .and_then(MemopKind::parse)
        .unwrap_or(MemopKind::Memcpy);
    (
        s.col_i64(0),
        LeanMemop {
            kind,
            start_ns: s.col_i64(2),
            end_ns: s.col_i64(3),
            device_id: s.col_i64(4),
            stream_id: s.col_i64(5),
            pid: s.col_opt_i64(6),
            correlation_id: s.col_opt_i64(7),
            external_id: s.col_opt_i64(8),
            copy_kind: s
                .col_opt_bytes(9)
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(CopyKind::parse),
        },
    )
}

impl Store {
    /// Ranges and marks of one thread (GPU-side ranges: one device and stream) that start in
    /// `[from_ns, to_ns)`, with their row ids, by start.
    pub fn lean_ranges_window(
        &mut self,
        pid: i64,
        tid: i64,
        from_ns: i64,
        to_ns: i64,
        mut f: impl FnMut(i64, LeanRange),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT id, {LEAN_RANGE_ROW_COLUMNS} FROM ranges WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id"
            ),
            &[pid, tid, from_ns, to_ns],
            |s| {
                let (id, r) = lean_range(s);
                f(id, r)
            },
        )
    }

    /// Ranges and marks of one thread that start at `start_ns` with name `name`, with their
    /// row ids (a range the caller knows by its start and name).
    pub fn lean_ranges_at(
        &mut self,
        pid: i64,
        tid: i64,
        start_ns: i64,
        name: StrId,
        mut f: impl FnMut(i64, LeanRange),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT id, {LEAN_RANGE_ROW_COLUMNS} FROM ranges WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns = ?3 AND name_id = ?4 ORDER BY id"
            ),
            &[pid, tid, start_ns, name.0],
            |s| {
                let (id, r) = lean_range(s);
                f(id, r)
            },
        )
    }

    /// CUDA API calls with a correlation id of one thread that start in `[from_ns, to_ns)`,
    /// with their row ids, by start.
    pub fn lean_launches_window(
        &mut self,
        pid: i64,
        tid: i64,
        from_ns: i64,
        to_ns: i64,
        mut f: impl FnMut(i64, LeanLaunch),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT {LEAN_LAUNCH_COLUMNS} FROM api_calls WHERE pid = ?1 AND tid = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 AND correlation_id IS NOT NULL \
                 ORDER BY start_ns, id"
            ),
            &[pid, tid, from_ns, to_ns],
            |s| {
                let (id, l) = lean_launch(s);
                f(id, l)
            },
        )
    }

    /// Every CUDA API call with correlation id `correlation_id` (of any process), with its
    /// row id.
    pub fn lean_launches_by_correlation(
        &mut self,
        correlation_id: i64,
        mut f: impl FnMut(i64, LeanLaunch),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT {LEAN_LAUNCH_COLUMNS} FROM api_calls WHERE correlation_id = ?1 ORDER BY id"
            ),
            &[correlation_id],
            |s| {
                let (id, l) = lean_launch(s);
                f(id, l)
            },
        )
    }

    /// Every kernel with correlation id `correlation_id` (of any process), with its row id.
    pub fn kernels_by_correlation(
        &mut self,
        correlation_id: i64,
        mut f: impl FnMut(i64, Kernel),
    ) -> Result<()> {
        self.query(
            &format!("SELECT id, {KERNEL_ROW_COLUMNS} FROM kernels WHERE correlation_id = ?1 ORDER BY id"),
            &[correlation_id],
            |s| {
                let (id, k) = kernel(s);
                f(id, k)
            },
        )
    }

    /// Every memcpy and memset with correlation id `correlation_id`, with its row id.
    pub fn lean_memops_by_correlation(
        &mut self,
        correlation_id: i64,
        mut f: impl FnMut(i64, LeanMemop),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT {LEAN_MEMOP_COLUMNS} FROM memops WHERE correlation_id = ?1 ORDER BY id"
            ),
            &[correlation_id],
            |s| {
                let (id, m) = lean_memop(s);
                f(id, m)
            },
        )
    }

    /// Kernels of one stream that start in `[from_ns, to_ns)`, with their row ids, by start.
    pub fn kernels_window(
        &mut self,
        device_id: i64,
        stream_id: i64,
        from_ns: i64,
        to_ns: i64,
        mut f: impl FnMut(i64, Kernel),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT id, {KERNEL_ROW_COLUMNS} FROM kernels WHERE device_id = ?1 AND stream_id = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id"
            ),
            &[device_id, stream_id, from_ns, to_ns],
            |s| {
                let (id, k) = kernel(s);
                f(id, k)
            },
        )
    }

    /// Memcpys and memsets of one stream that start in `[from_ns, to_ns)`, with their row
    /// ids, by start.
    pub fn lean_memops_window(
        &mut self,
        device_id: i64,
        stream_id: i64,
        from_ns: i64,
        to_ns: i64,
        mut f: impl FnMut(i64, LeanMemop),
    ) -> Result<()> {
        self.query(
            &format!(
                "SELECT {LEAN_MEMOP_COLUMNS} FROM memops WHERE device_id = ?1 AND stream_id = ?2 \
                 AND start_ns >= ?3 AND start_ns < ?4 ORDER BY start_ns, id"
            ),
            &[device_id, stream_id, from_ns, to_ns],
            |s| {
                let (id, m) = lean_memop(s);
                f(id, m)
            },
        )
    }
}
