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
    Api, ApiCall, CopyKind, CreateOptions, Device, Kernel, Leaves, Memop, MemopKind, MemoryKind,
    Range, RangeKind, RawHandle, RawRows, ResumeAt, RunInfo, StrId, TableCursor, TableFile, Writer,
};
use rustc_hash::FxHashMap;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, SqliteConnection};

use super::{nominal_peaks, Format, ImportError, ImportReport, Result};
use crate::progress::Progress;

/// Rows between two updates of the progress counters.
const PROGRESS_EVERY: u64 = 4096;

/// The most runs of a table in `start` order that are merged rather than sorted by SQLite: a
/// run read from the pages is a cursor of a few hundred bytes that joins the merge only when
/// the merge reaches it (an export's runs mostly follow one another), while a run read through
/// SQL is a prepared statement of its own.
const MAX_PAGE_RUNS: usize = 1 << 16;
const MAX_SQL_RUNS: usize = 1024;

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
/// first on a tie (each statement's rows are in that order already). With `pages`, the rows
/// are read from the table's pages instead, one cursor per rowid range of `pages` (`sqls` may
/// then be empty), and a cursor that meets anything unexpected hands over to SQL from where it
/// stopped.
struct Query {
    sqls: Vec<String>,
    key: usize,
    pages: Option<PagePlan>,
}

/// How a query's rows are read from the table's pages: the `SELECT` without its `WHERE`
/// (for a hand-over to SQL), each column's place in the records, and one rowid range a
/// statement.
struct PagePlan {
    all: String,
    leaves: Leaves,
    cols: Vec<Option<usize>>,
    ranges: Vec<(Option<i64>, Option<i64>)>,
}

impl Query {
    fn one(sql: String) -> Query {
        Query {
            sqls: vec![sql],
            key: 0,
            pages: None,
        }
    }
}

/// One row of a query, read through SQL or from the pages; the getters read as
/// [`RawRows`]'s do.
enum Row<'a, 'h> {
    Sql(&'a RawRows<'h>),
    Page(&'a TableCursor<'a>),
}

impl Row<'_, '_> {
    fn int(&self, i: usize) -> Option<i64> {
        match self {
            Row::Sql(r) => r.int(i),
            Row::Page(r) => r.int(i),
        }
    }

    fn real(&self, i: usize) -> Option<f64> {
        match self {
            Row::Sql(r) => r.real(i),
            Row::Page(r) => r.real(i),
        }
    }

    fn text(&self, i: usize) -> Option<&str> {
        match self {
            Row::Sql(r) => r.text(i),
            Row::Page(r) => r.text(i),
        }
    }

    /// A TEXT column's bytes, checked as UTF-8 only where SQL reads them.
    fn text_bytes(&self, i: usize) -> Option<&[u8]> {
        match self {
            Row::Sql(r) => r.text(i).map(str::as_bytes),
            Row::Page(r) => r.text_bytes(i),
        }
    }
}

/// A statement of a query being stepped: from the pages until they hand over to SQL.
enum Cursor<'f, 'h> {
    Page {
        cursor: Box<TableCursor<'f>>,
        hi: Option<i64>,
    },
    Sql(RawRows<'h>),
}

/// A pass over a whole table (in rowid order) that [`Source::by_start_with`] does along with
/// its own first pass: `f` gets `cols` of each row `keep` holds for; through SQL, the rows of
/// `SELECT cols ... tail`, which `keep` must also hold for. `keep` reads only the first of
/// `cols`.
struct SidePass<'a> {
    cols: &'a [&'a str],
    tail: &'a str,
    keep: &'a dyn Fn(&Row<'_, '_>) -> bool,
    f: &'a mut dyn FnMut(&Row<'_, '_>) -> Result<()>,
}

/// What reading a table from its pages needs: its root page and, for each column, its place
/// in the records when the pages hold it as a `SELECT` reads it (see [`TableFile`]).
struct PageTable {
    root: u32,
    plain: HashMap<String, Option<usize>>,
}

struct Source<'p> {
    path: &'p Path,
    rt: tokio::runtime::Runtime,
    conn: SqliteConnection,
    tables: HashMap<String, Vec<String>>,
    /// The export opened for reading table pages (`None`: everything through SQL).
    file: Option<TableFile>,
    page_tables: HashMap<String, PageTable>,
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
        let names: Vec<(String, Option<i64>)> = rt
            .block_on(
                sqlx::query_as("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'")
                    .fetch_all(&mut conn),
            )
            .map_err(|e| ImportError::format(path, format!("not a readable SQLite file: {e}")))?;
        let mut tables = HashMap::new();
        let mut page_tables = HashMap::new();
        for (name, root) in names {
            let cols: Vec<String> = rt
                .block_on(
                    sqlx::query_scalar("SELECT name FROM pragma_table_info(?)")
                        .bind(&name)
                        .fetch_all(&mut conn),
                )
                .map_err(|e| ImportError::format(path, e.to_string()))?;
            type XInfo = (i64, String, Option<String>, Option<String>, i64, i64);
            let xinfo: Vec<XInfo> = rt
                .block_on(
                    sqlx::query_as(
                        "SELECT cid, name, type, dflt_value, pk, hidden \
                         FROM pragma_table_xinfo(?) ORDER BY cid",
                    )
                    .bind(&name)
                    .fetch_all(&mut conn),
                )
                .map_err(|e| ImportError::format(path, e.to_string()))?;
            // Records hold the columns in declaration order, hidden ones too: a table with
            // hidden (generated) columns is read through SQL.
            let root = root.and_then(|r| u32::try_from(r).ok()).filter(|&r| r > 0);
            if let (Some(root), true) = (root, xinfo.iter().all(|x| x.5 == 0)) {
                let plain = xinfo
                    .iter()
                    .enumerate()
                    .map(|(k, (_, col, ty, dflt, pk, hidden))| {
                        let ok = TableFile::plain_column(
                            ty.as_deref().unwrap_or(""),
                            dflt.as_deref(),
                            *pk,
                            *hidden,
                        );
                        (col.clone(), ok.then_some(k))
                    })
                    .collect();
                page_tables.insert(name.clone(), PageTable { root, plain });
            }
            tables.insert(name, cols);
        }
        Ok(Source {
            path,
            rt,
            conn,
            tables,
            file: TableFile::open(path),
            page_tables,
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

    /// How to read `cols` of `table` from its pages: the leaves and each column's place in
    /// the records (`None` for a column the table lacks); `None` when some column asked for
    /// cannot be read there, or the pages are not a table's.
    fn page_plan(&self, table: &str, cols: &[&str]) -> Option<(Leaves, Vec<Option<usize>>)> {
        let places = self.places(table, cols)?;
        Some((self.leaves(table)?, places))
    }

    /// Each of `cols`' place in `table`'s records (`None` for a column the table lacks);
    /// `None` when some column cannot be read from the pages.
    fn places(&self, table: &str, cols: &[&str]) -> Option<Vec<Option<usize>>> {
        self.file.as_ref()?;
        let t = self.page_tables.get(table)?;
        cols.iter()
            .map(|c| match t.plain.get(*c) {
                Some(place) => place.map(Some),
                None => Some(None),
            })
            .collect()
    }

    /// The leaf pages of `table`, when they can be read.
    fn leaves(&self, table: &str) -> Option<Leaves> {
        self.file
            .as_ref()?
            .leaves(self.page_tables.get(table)?.root)
    }

    /// Steps through the rows of `sql`, calling `f` on each.
    fn rows(&mut self, sql: String, f: impl FnMut(&Row<'_, '_>) -> Result<()>) -> Result<u64> {
        self.query(Query::one(sql), f)
    }

    /// The rows of `cols` of `table` in rowid order (read from the pages where they can be),
    /// as `select(table, cols, tail)` gives them when `keep` holds for each of them; `keep`
    /// must hold for every row `tail`'s `WHERE` keeps.
    fn rows_where(
        &mut self,
        table: &str,
        cols: &[&str],
        tail: &str,
        keep: &dyn Fn(&Row<'_, '_>) -> bool,
        f: &mut dyn FnMut(&Row<'_, '_>) -> Result<()>,
    ) -> Result<()> {
        let Some(filtered) = self.select(table, cols, tail) else {
            return Ok(());
        };
        let q = match (self.select(table, cols, ""), self.page_plan(table, cols)) {
            (Some(all), Some((leaves, places))) => Query {
                sqls: vec![format!("{all} ORDER BY rowid")],
                key: 0,
                pages: Some(PagePlan {
                    all,
                    leaves,
                    cols: places,
                    ranges: vec![(None, None)],
                }),
            },
            _ => Query::one(filtered),
        };
        self.query(q, |r| if keep(r) { f(r) } else { Ok(()) })?;
        Ok(())
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
        self.by_start_with(table, cols, None)
    }

    /// [`Source::by_start`], with `side`'s pass over the table done along with the first
    /// pass where the pages allow (else on its own, before this returns).
    fn by_start_with(
        &mut self,
        table: &str,
        cols: &[&str],
        mut side: Option<SidePass<'_>>,
    ) -> Result<Option<Query>> {
        let (Some(key), Some(all)) = (
            cols.iter().position(|c| *c == "start"),
            self.select(table, cols, ""),
        ) else {
            if let Some(side) = side {
                self.rows_where(table, side.cols, side.tail, side.keep, side.f)?;
            }
            return Ok(None);
        };
        // The leaves are found once, for the first pass and the query.
        let leaves = self.leaves(table);
        let (runs, side_done) = if self.has(table, "start") {
            self.runs(table, leaves.as_ref(), side.as_mut())?
        } else {
            (None, false)
        };
        if let (Some(side), false) = (side, side_done) {
            self.rows_where(table, side.cols, side.tail, side.keep, side.f)?;
        }
        let plan = runs
            .as_ref()
            .and_then(|_| Some((leaves?, self.places(table, cols)?)));
        let runs = runs.filter(|r| plan.is_some() || r.len() <= MAX_SQL_RUNS);
        let Some(runs) = runs else {
            return Ok(Some(Query::one(format!("{all} ORDER BY start"))));
        };
        let ranges: Vec<(Option<i64>, Option<i64>)> = runs
            .iter()
            .enumerate()
            .map(|(k, lo)| (Some(*lo), runs.get(k + 1).copied()))
            .collect();
        // A run read from the pages needs no statement of its own.
        let sqls = match plan {
            Some(_) => Vec::new(),
            None => ranges.iter().map(|&r| range_sql(&all, r)).collect(),
        };
        let pages = plan.map(|(leaves, places)| PagePlan {
            all,
            leaves,
            cols: places,
            ranges,
        });
        Ok(Some(Query { sqls, key, pages }))
    }

    /// The first rowid of each run of rows in `start` order in `table`, read in rowid order
    /// (at most [`MAX_PAGE_RUNS`]);
    /// `None` when SQLite must sort the table (see [`Source::by_start`]). When the pages are
    /// read whole, `side`'s rows are handed to it once the pass is through (the `bool`: whether
    /// they were).
    fn runs(
        &mut self,
        table: &str,
        leaves: Option<&Leaves>,
        mut side: Option<&mut SidePass<'_>>,
    ) -> Result<(Option<Vec<i64>>, bool)> {
        let mut runs = Vec::new();
        let mut last = i64::MIN;
        let mut sortable = true;
        let mut visit = |rowid: Option<i64>, start: Option<i64>| {
            let (Some(rowid), Some(start)) = (rowid, start) else {
                sortable = false;
                return false;
            };
            if runs.is_empty() || start < last {
                if runs.len() == MAX_PAGE_RUNS {
                    sortable = false;
                    return false;
                }
                runs.push(rowid);
            }
            last = start;
            true
        };
        let sql = format!("SELECT rowid, \"start\" FROM \"{table}\" ORDER BY rowid");
        let mut resume = None;
        let mut side_done = false;
        // The pass reads `start` and, for the side pass, only the column `keep` reads (every
        // other column of a row is decoded only for the few rows it keeps, once the pass is
        // through): the side pass's places for that pass and for its whole rows.
        let side_places = side.as_ref().and_then(|s| {
            let first = *s.cols.first()?;
            Some((
                self.places(table, &[first, "start"])?,
                self.places(table, s.cols)?,
            ))
        });
        let (places, key) = match &side_places {
            Some((slim, _)) => (Some(slim.clone()), 1),
            None => {
                side = None;
                (self.places(table, &["start"]), 0)
            }
        };
        let mut kept = Vec::new();
        if let (Some(file), Some(leaves), Some(places)) = (self.file.as_ref(), leaves, places) {
            // Not released: the query's cursors read the same pages next and release them
            // (mapping them twice costs more system time than the pass saves in memory).
            let mut c = TableCursor::new(file, leaves, places, None, None);
            let mut counting = true;
            loop {
                match c.step() {
                    Ok(true) => {
                        if counting && !visit(Some(c.rowid()), c.int(key)) {
                            counting = false;
                            if side.is_none() {
                                break;
                            }
                        }
                        if side.as_ref().is_some_and(|s| (s.keep)(&Row::Page(&c))) {
                            kept.push(c.rowid());
                        }
                    }
                    Ok(false) => {
                        side_done = side.is_some();
                        break;
                    }
                    Err(ResumeAt(r)) => {
                        if counting {
                            resume = Some(r);
                        }
                        break;
                    }
                }
            }
        } else {
            resume = Some(i64::MIN);
        }
        if let Some(from) = resume {
            let sql = range_sql(&sql.replace(" ORDER BY rowid", ""), (Some(from), None));
            self.scan(sql, |r| Ok(visit(r.int(0), r.int(1))))?;
        }
        if let (true, Some(s), Some((_, whole)), Some(leaves)) =
            (side_done, side, side_places, leaves)
        {
            self.rows_at(table, leaves, whole, &kept, s)?;
        }
        Ok(((sortable && !runs.is_empty()).then_some(runs), side_done))
    }

    /// Hands `side.f` the side pass's columns (`places` in the records) of each row of
    /// `rowids`, in turn: from the pages, or through SQL where they hold something unexpected.
    fn rows_at(
        &mut self,
        table: &str,
        leaves: &Leaves,
        places: Vec<Option<usize>>,
        rowids: &[i64],
        side: &mut SidePass<'_>,
    ) -> Result<()> {
        for &r in rowids {
            if let Some(file) = self.file.as_ref() {
                let mut c =
                    TableCursor::new(file, leaves, places.clone(), Some(r), r.checked_add(1));
                if matches!(c.step(), Ok(true)) && c.rowid() == r {
                    (side.f)(&Row::Page(&c))?;
                    continue;
                }
            }
            let Some(sql) = self.select(table, side.cols, &format!("WHERE rowid = {r}")) else {
                continue;
            };
            let f = &mut side.f;
            self.scan(sql, |row| {
                f(&Row::Sql(row))?;
                Ok(false)
            })?;
        }
        Ok(())
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
    fn query(&mut self, q: Query, mut f: impl FnMut(&Row<'_, '_>) -> Result<()>) -> Result<u64> {
        let Query { sqls, key, pages } = q;
        let path = self.path;
        let progress = self.progress;
        let file = self.file.as_ref();
        let conn = &mut self.conn;
        let bad = |e: &dyn std::fmt::Display| {
            ImportError::format(path, format!("reading the export: {e}"))
        };
        self.rt.block_on(async move {
            let mut handle = conn.lock_handle().await.map_err(|e| bad(&e))?;
            let db = RawHandle::new(&mut handle);
            let mut cursors: Vec<Cursor<'_, '_>> = match (&pages, file) {
                (Some(p), Some(file)) => p
                    .ranges
                    .iter()
                    .map(|&(lo, hi)| Cursor::Page {
                        cursor: Box::new(
                            TableCursor::new(file, &p.leaves, p.cols.clone(), lo, hi).releasing(),
                        ),
                        hi,
                    })
                    .collect(),
                _ => sqls
                    .iter()
                    .map(|sql| RawRows::prepare_on(db, sql).map(Cursor::Sql))
                    .collect::<fuseprof_store::Result<_>>()
                    .map_err(|e| bad(&e))?,
            };
            let all = pages.as_ref().map(|p| p.all.as_str());
            let row = |c: &Cursor<'_, '_>, f: &mut dyn FnMut(&Row<'_, '_>) -> Result<()>| match c {
                Cursor::Sql(r) => f(&Row::Sql(r)),
                Cursor::Page { cursor, .. } => f(&Row::Page(cursor)),
            };
            let int = |c: &Cursor<'_, '_>, i: usize| match c {
                Cursor::Sql(r) => r.int(i),
                Cursor::Page { cursor, .. } => cursor.int(i),
            };
            // The statement to step next, by (its row's key, its place in `sqls`). A run joins
            // the heap only once the merge reaches its first key: an export's runs mostly
            // follow one another in time, so the heap holds one or two of them rather than all
            // (each row's step then sifts through fewer levels), and the rows come out in the
            // same order.
            let mut waiting = Vec::with_capacity(cursors.len());
            for (k, c) in cursors.iter_mut().enumerate() {
                if step_cursor(c, db, all).map_err(|e| bad(&e))? {
                    waiting.push((int(c, key), k));
                }
            }
            // Last to join first.
            waiting.sort_unstable_by(|a, b| b.cmp(a));
            let mut next = BinaryHeap::with_capacity(cursors.len());
            let mut n = 0;
            loop {
                while let Some(&w) = waiting.last() {
                    if next.peek().is_some_and(|Reverse(top)| *top < w) {
                        break;
                    }
                    next.push(Reverse(w));
                    waiting.pop();
                }
                let Some(mut top) = next.peek_mut() else {
                    break;
                };
                let k = top.0 .1;
                row(&cursors[k], &mut f)?;
                n += 1;
                if n % PROGRESS_EVERY == 0 {
                    if let Some(p) = progress {
                        p.add_events(PROGRESS_EVERY);
                    }
                }
                if step_cursor(&mut cursors[k], db, all).map_err(|e| bad(&e))? {
                    // Moved back into place when `top` drops.
                    top.0 = (int(&cursors[k], key), k);
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

/// Steps `c`: whether it has a row. A page cursor that stops early is replaced by SQL (`all`,
/// the query's `SELECT` without `WHERE`) from where it stopped, up to the end of its range.
fn step_cursor<'f, 'h>(
    c: &mut Cursor<'f, 'h>,
    db: RawHandle<'h>,
    all: Option<&str>,
) -> fuseprof_store::Result<bool> {
    match c {
        Cursor::Sql(r) => r.step(),
        Cursor::Page { cursor, hi } => match cursor.step() {
            Ok(more) => Ok(more),
            Err(ResumeAt(from)) => {
                let all = all.expect("a page cursor comes with its query's SELECT");
                let mut r = RawRows::prepare_on(db, &range_sql(all, (Some(from), *hi)))?;
                let more = r.step()?;
                *c = Cursor::Sql(r);
                Ok(more)
            }
        },
    }
}

/// `all` (a `SELECT` without `WHERE`) restricted to rowids in `lo..hi`, in rowid order.
fn range_sql(all: &str, (lo, hi): (Option<i64>, Option<i64>)) -> String {
    match (lo, hi) {
        (Some(lo), Some(hi)) => {
            format!("{all} WHERE rowid >= {lo} AND rowid < {hi} ORDER BY rowid")
        }
        (Some(lo), None) => format!("{all} WHERE rowid >= {lo} ORDER BY rowid"),
        (None, Some(hi)) => format!("{all} WHERE rowid < {hi} ORDER BY rowid"),
        (None, None) => format!("{all} ORDER BY rowid"),
    }
}

fn get_i64(r: &Row<'_, '_>, i: usize) -> Option<i64> {
    r.int(i)
}

fn get_f64(r: &Row<'_, '_>, i: usize) -> Option<f64> {
    r.real(i)
}

fn get_text(r: &Row<'_, '_>, i: usize) -> Option<String> {
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

    // Copies and fills; a copy's memory kinds through the export's own enum where it has one.
    let mem_kinds = MemKinds::new(enum_labels(&mut src, "ENUM_CUDA_MEM_KIND")?);
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
                "srcKind",
                "dstKind",
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
                src_memory: get_i64(r, 9).and_then(|k| mem_kinds.get(k)),
                dst_memory: get_i64(r, 10).and_then(|k| mem_kinds.get(k)),
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
    // Read along with the first pass over the NVTX table, where the pages allow.
    let registration = |r: &Row<'_, '_>| match (r.int(0), r.real(0)) {
        (Some(t), _) => t == NVTX_DOMAIN_CREATE || t == NVTX_CATEGORY,
        (None, Some(t)) => t == NVTX_DOMAIN_CREATE as f64 || t == NVTX_CATEGORY as f64,
        (None, None) => false,
    };
    let mut register = |r: &Row<'_, '_>| {
        let text =
            get_text(r, 3).or_else(|| get_i64(r, 4).and_then(|i| names.source.get(&i).cloned()));
        let Some(text) = text else { return Ok(()) };
        let id = w.intern(&text);
        let domain = get_i64(r, 1).unwrap_or(0);
        if get_i64(r, 0) == Some(NVTX_DOMAIN_CREATE) {
            domains.insert(domain, id);
        } else if let Some(c) = get_i64(r, 2) {
            categories.insert((domain, c), id);
        }
        Ok(())
    };
    let tail = format!("WHERE eventType IN ({NVTX_DOMAIN_CREATE}, {NVTX_CATEGORY})");
    let nvtx = src.by_start_with(
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
        Some(SidePass {
            cols: &["eventType", "domainId", "category", "text", "textId"],
            tail: &tail,
            keep: &registration,
            f: &mut register,
        }),
    )?;
    if let Some(sql) = nvtx {
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
            // (Most ranges repeat a name: its bytes are checked as UTF-8 when first met.)
            let name = match r.text_bytes(8).and_then(|t| w.intern_utf8(t)) {
                Some(id) => id,
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

/// How an export numbers memory kinds in `srcKind` and `dstKind`: its `ENUM_CUDA_MEM_KIND`
/// labels (`Pageable`, `Device Static`, ...) where it has the table, else the numbering that
/// table holds in the exports we have seen (Nsight Systems' own `CUDA_MEMOPR_MEMORY_KIND_*`:
/// 0 pageable, 1 pinned, 2 device, 3 array, 4 managed, 5 device static, 6 managed static,
/// 7 unknown), which is not CUPTI's (there 0 is unknown and 1 pageable).
struct MemKinds(HashMap<i64, Option<MemoryKind>>);

impl MemKinds {
    fn new(labels: HashMap<i64, String>) -> Self {
        const DEFAULT: [&str; 8] = [
            "Pageable",
            "Pinned",
            "Device",
            "Array",
            "Managed",
            "Device Static",
            "Managed Static",
            "Unknown",
        ];
        let labels = if labels.is_empty() {
            (0..).zip(DEFAULT.map(String::from)).collect()
        } else {
            labels
        };
        MemKinds(
            labels
                .into_iter()
                .map(|(id, l)| (id, MemoryKind::from_label(&l)))
                .collect(),
        )
    }

    fn get(&self, kind: i64) -> Option<MemoryKind> {
        self.0.get(&kind).copied().flatten()
    }
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
    use super::{split_global_tid, MemKinds, MemoryKind};

    #[test]
    fn memory_kinds_follow_the_exports_enum_else_its_usual_numbering() {
        let usual = MemKinds::new(Default::default());
        assert_eq!(usual.get(0), Some(MemoryKind::Pageable));
        assert_eq!(usual.get(1), Some(MemoryKind::Pinned));
        assert_eq!(usual.get(5), Some(MemoryKind::Device));
        assert_eq!(usual.get(7), None);
        assert_eq!(usual.get(42), None);
        // An export that numbers them otherwise is read by its labels.
        let own = MemKinds::new([(3, "Pinned".to_string()), (0, "Unknown".to_string())].into());
        assert_eq!(own.get(3), Some(MemoryKind::Pinned));
        assert_eq!(own.get(0), None);
        assert_eq!(own.get(1), None);
    }

    #[test]
    fn global_tids_unpack_to_pid_and_tid() {
        // From the nsys fixture: python3 pid 145, its main thread.
        assert_eq!(split_global_tid(281477409407121), (145, 145));
        assert_eq!(split_global_tid(281477409406976), (145, 0));
    }
}
