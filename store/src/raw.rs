//! Prepared statements on a raw SQLite handle: the one sqlx lends out (`lock_handle`) to the
//! writer, or the reader's own read-only connection ([`RawDb`]).
//!
//! sqlx runs each statement through a worker thread and a channel: right for metadata, too slow
//! for millions of rows. The bulk paths (writing batches, scanning tables) step statements here.

use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;

use crate::{Error, Result};

/// A read-only connection of our own, outside sqlx. The store reader steps its queries and
/// scans here: borrowing sqlx's handle for each of them (`lock_handle`, a round trip through
/// the connection's worker thread every time) now and then left the caller and the worker
/// waiting on each other for ever.
pub(crate) struct RawDb {
    db: NonNull<ffi::sqlite3>,
}

// SAFETY: the connection is used by one thread at a time (through `&mut Store`), and SQLite's
// default threading mode (serialized) allows moving it between threads.
unsafe impl Send for RawDb {}

impl RawDb {
    pub(crate) fn open_read_only(path: &std::path::Path) -> Result<RawDb> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| Error::Sqlite("NUL in the run's path".into()))?;
        let mut db = ptr::null_mut();
        // SAFETY: `c` is NUL-terminated; `db` receives a handle (or null) that we own.
        let rc = unsafe {
            ffi::sqlite3_open_v2(c.as_ptr(), &mut db, ffi::SQLITE_OPEN_READONLY, ptr::null())
        };
        let Some(db) = NonNull::new(db) else {
            return Err(Error::Sqlite("open: out of memory".into()));
        };
        let raw = RawDb { db };
        if rc != ffi::SQLITE_OK {
            return Err(db_error(raw.db, "open"));
        }
        // Wait out a writer's lock (another process or thread keeping summaries in the run) as
        // sqlx's connections do, instead of failing with SQLITE_BUSY at once.
        // SAFETY: the handle is open and ours.
        unsafe { ffi::sqlite3_busy_timeout(raw.db.as_ptr(), 5_000) };
        Ok(raw)
    }

    pub(crate) fn handle(&mut self) -> NonNull<ffi::sqlite3> {
        self.db
    }
}

impl Drop for RawDb {
    fn drop(&mut self) {
        // SAFETY: the handle is ours, and every statement prepared on it was finalized when it
        // dropped (statements borrow the store mutably, so none outlives it).
        unsafe { ffi::sqlite3_close(self.db.as_ptr()) };
    }
}

/// A prepared statement that must not outlive the locked handle it came from (`'h`).
pub(crate) struct Stmt<'h> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    db: NonNull<ffi::sqlite3>,
    _handle: PhantomData<&'h mut ()>,
}

fn db_error(db: NonNull<ffi::sqlite3>, what: &str) -> Error {
    // SAFETY: `db` is a live handle held under sqlx's lock; sqlite3_errmsg returns a
    // NUL-terminated string owned by SQLite, copied before the next call.
    let msg = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db.as_ptr())) };
    Error::Sqlite(format!("{what}: {}", msg.to_string_lossy()))
}

impl<'h> Stmt<'h> {
    /// Prepares `sql` on `db`, which the caller holds locked for at least `'h`.
    pub(crate) fn prepare(db: NonNull<ffi::sqlite3>, sql: &str) -> Result<Stmt<'h>> {
        let mut stmt = ptr::null_mut();
        // SAFETY: `db` is live and exclusively ours while sqlx's lock is held; `sql` is valid
        // for its length, and SQLite copies what it needs.
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(
                db.as_ptr(),
                sql.as_ptr().cast(),
                sql.len() as c_int,
                &mut stmt,
                ptr::null_mut(),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(db_error(db, "prepare"));
        }
        let stmt = NonNull::new(stmt).ok_or_else(|| Error::Sqlite("empty statement".into()))?;
        Ok(Stmt {
            stmt,
            db,
            _handle: PhantomData,
        })
    }

    fn check(&self, rc: c_int, what: &str) -> Result<()> {
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(db_error(self.db, what))
        }
    }

    /// Binds parameter `idx` (1-based).
    pub(crate) fn bind_i64(&mut self, idx: c_int, v: i64) -> Result<()> {
        // SAFETY: the statement is live; SQLite checks `idx`.
        let rc = unsafe { ffi::sqlite3_bind_int64(self.stmt.as_ptr(), idx, v) };
        self.check(rc, "bind")
    }

    pub(crate) fn bind_opt_i64(&mut self, idx: c_int, v: Option<i64>) -> Result<()> {
        match v {
            Some(v) => self.bind_i64(idx, v),
            None => {
                // SAFETY: as above.
                let rc = unsafe { ffi::sqlite3_bind_null(self.stmt.as_ptr(), idx) };
                self.check(rc, "bind")
            }
        }
    }

    pub(crate) fn bind_text(&mut self, idx: c_int, s: &str) -> Result<()> {
        // SAFETY: SQLITE_TRANSIENT makes SQLite copy the bytes before returning, so `s` may be
        // dropped afterwards.
        let rc = unsafe {
            ffi::sqlite3_bind_text(
                self.stmt.as_ptr(),
                idx,
                s.as_ptr().cast(),
                s.len() as c_int,
                ffi::SQLITE_TRANSIENT(),
            )
        };
        self.check(rc, "bind")
    }

    /// Readies the statement to run again (its bindings stay until rebound).
    pub(crate) fn reset(&mut self) {
        // SAFETY: the statement is live; reset only rewinds it.
        unsafe { ffi::sqlite3_reset(self.stmt.as_ptr()) };
    }

    /// Runs one step: `true` when a row is ready to read.
    pub(crate) fn step(&mut self) -> Result<bool> {
        // SAFETY: the statement is live and its parameters are bound.
        match unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            _ => Err(db_error(self.db, "step")),
        }
    }

    /// Steps an INSERT to completion and readies the statement for the next row.
    pub(crate) fn execute(&mut self) -> Result<()> {
        self.step()?;
        // SAFETY: the statement is live; reset keeps bindings, which the next row overwrites.
        unsafe { ffi::sqlite3_reset(self.stmt.as_ptr()) };
        Ok(())
    }

    pub(crate) fn col_i64(&self, i: c_int) -> i64 {
        // SAFETY: called only after `step` returned a row; out-of-range columns read as 0.
        unsafe { ffi::sqlite3_column_int64(self.stmt.as_ptr(), i) }
    }

    pub(crate) fn col_opt_i64(&self, i: c_int) -> Option<i64> {
        // SAFETY: as in `col_i64`; the value pointer is used before the next step. One
        // sqlite3_column_value call instead of sqlite3_column_type plus sqlite3_column_int64:
        // each sqlite3_column_* call repeats the statement's checks and error bookkeeping, a
        // visible cost over tens of millions of rows.
        unsafe {
            let v = ffi::sqlite3_column_value(self.stmt.as_ptr(), i);
            if ffi::sqlite3_value_type(v) == ffi::SQLITE_NULL {
                None
            } else {
                Some(ffi::sqlite3_value_int64(v))
            }
        }
    }

    /// An INTEGER column's value; `None` for NULL and any other storage class.
    pub(crate) fn col_int(&self, i: c_int) -> Option<i64> {
        // SAFETY: as in `col_opt_i64`, whose single sqlite3_column_value call this shares.
        unsafe {
            let v = ffi::sqlite3_column_value(self.stmt.as_ptr(), i);
            (ffi::sqlite3_value_type(v) == ffi::SQLITE_INTEGER).then(|| ffi::sqlite3_value_int64(v))
        }
    }

    /// The bytes of a text or blob column, without the UTF-8 check of [`Stmt::col_text`];
    /// `None` for NULL.
    pub(crate) fn col_opt_bytes(&self, i: c_int) -> Option<&[u8]> {
        // SAFETY: as in `col_i64`.
        if unsafe { ffi::sqlite3_column_type(self.stmt.as_ptr(), i) } == ffi::SQLITE_NULL {
            None
        } else {
            Some(self.col_bytes(i))
        }
    }

    /// The bytes of a text or blob column, without the UTF-8 check of [`Stmt::col_text`]; empty
    /// for NULL and for an empty value.
    pub(crate) fn col_bytes(&self, i: c_int) -> &[u8] {
        // SAFETY: as in `col_text`: the pointer is valid until the next step, and the borrow of
        // `self` cannot outlive that; sqlite3_column_bytes is called after sqlite3_column_blob,
        // as SQLite documents.
        unsafe {
            let p = ffi::sqlite3_column_blob(self.stmt.as_ptr(), i);
            if p.is_null() {
                return &[];
            }
            let n = ffi::sqlite3_column_bytes(self.stmt.as_ptr(), i) as usize;
            std::slice::from_raw_parts(p.cast::<u8>(), n)
        }
    }

    /// The storage class of a column's value (`SQLITE_INTEGER`, `SQLITE_FLOAT`, …).
    pub(crate) fn col_type(&self, i: c_int) -> c_int {
        // SAFETY: as in `col_i64`.
        unsafe { ffi::sqlite3_column_type(self.stmt.as_ptr(), i) }
    }

    pub(crate) fn col_f64(&self, i: c_int) -> f64 {
        // SAFETY: as in `col_i64`.
        unsafe { ffi::sqlite3_column_double(self.stmt.as_ptr(), i) }
    }

    pub(crate) fn col_text(&self, i: c_int) -> Option<&str> {
        // SAFETY: after a row step, sqlite3_column_text returns a pointer valid until the next
        // step/reset/finalize, and the returned borrow of `self` cannot outlive that.
        unsafe {
            let p = ffi::sqlite3_column_text(self.stmt.as_ptr(), i);
            if p.is_null() {
                return None;
            }
            let n = ffi::sqlite3_column_bytes(self.stmt.as_ptr(), i) as usize;
            std::str::from_utf8(std::slice::from_raw_parts(p, n)).ok()
        }
    }
}

impl Drop for Stmt<'_> {
    fn drop(&mut self) {
        // SAFETY: the statement was prepared by us and is finalized exactly once.
        unsafe { ffi::sqlite3_finalize(self.stmt.as_ptr()) };
    }
}

/// Runs SQL with no result rows (several statements allowed).
pub(crate) fn exec(db: NonNull<ffi::sqlite3>, sql: &str) -> Result<()> {
    let c = std::ffi::CString::new(sql).map_err(|_| Error::Sqlite("NUL in SQL".into()))?;
    // SAFETY: `db` is live under sqlx's lock; no callback is passed.
    let rc = unsafe {
        ffi::sqlite3_exec(
            db.as_ptr(),
            c.as_ptr(),
            None,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(db_error(db, "exec"))
    }
}
