//! The rows of any query, stepped on the raw handle of a locked sqlx connection.
//!
//! sqlx's row stream hands every row over from its worker thread and copies each value, about
//! a microsecond a row: most of an nsys import's time. Stepping the statement on the caller's
//! thread, as the store's own scans do, costs a small fraction of that. The getters read a
//! value as sqlx's `try_get::<Option<T>>` does, so a caller that moves over sees the same
//! values: a value of another storage class reads as `None`, as sqlx's type check refuses it.

use std::ffi::c_int;

use libsqlite3_sys as ffi;
use sqlx::sqlite::LockedSqliteHandle;

use crate::raw::Stmt;
use crate::Result;

/// The connection behind a locked sqlx handle, lent for `'h`: statements prepared on it with
/// [`RawRows::prepare_on`] may be stepped side by side, and more prepared while others are.
#[derive(Clone, Copy)]
pub struct RawHandle<'h> {
    db: std::ptr::NonNull<ffi::sqlite3>,
    _handle: std::marker::PhantomData<&'h mut ()>,
}

impl<'h> RawHandle<'h> {
    pub fn new(handle: &'h mut LockedSqliteHandle<'_>) -> RawHandle<'h> {
        RawHandle {
            db: handle.as_raw_handle(),
            _handle: std::marker::PhantomData,
        }
    }
}

/// A prepared query and its current row.
pub struct RawRows<'h> {
    st: Stmt<'h>,
}

impl<'h> RawRows<'h> {
    /// Prepares `sql` on the connection behind `handle`, which stays locked while the rows are.
    pub fn prepare(handle: &'h mut LockedSqliteHandle<'_>, sql: &str) -> Result<RawRows<'h>> {
        Ok(RawRows {
            st: Stmt::prepare(handle.as_raw_handle(), sql)?,
        })
    }

    /// Prepares each of `sqls` on the connection behind `handle`, to be stepped side by side.
    pub fn prepare_each(
        handle: &'h mut LockedSqliteHandle<'_>,
        sqls: &[String],
    ) -> Result<Vec<RawRows<'h>>> {
        let db = handle.as_raw_handle();
        sqls.iter()
            .map(|sql| {
                Ok(RawRows {
                    st: Stmt::prepare(db, sql)?,
                })
            })
            .collect()
    }

    /// Prepares `sql` on the connection `db` lends.
    pub fn prepare_on(db: RawHandle<'h>, sql: &str) -> Result<RawRows<'h>> {
        Ok(RawRows {
            st: Stmt::prepare(db.db, sql)?,
        })
    }

    /// Moves to the next row; `false` after the last.
    pub fn step(&mut self) -> Result<bool> {
        self.st.step()
    }

    /// An INTEGER value; `None` for NULL and any other storage class.
    pub fn int(&self, i: usize) -> Option<i64> {
        self.st.col_int(i as c_int)
    }

    /// A REAL value; `None` for NULL and any other storage class.
    pub fn real(&self, i: usize) -> Option<f64> {
        let i = i as c_int;
        (self.st.col_type(i) == ffi::SQLITE_FLOAT).then(|| self.st.col_f64(i))
    }

    /// A TEXT value that is UTF-8; `None` for NULL, any other storage class and bad UTF-8.
    pub fn text(&self, i: usize) -> Option<&str> {
        let i = i as c_int;
        if self.st.col_type(i) != ffi::SQLITE_TEXT {
            return None;
        }
        self.st.col_text(i)
    }
}
