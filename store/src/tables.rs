//! Rows of another SQLite file's tables read from its b-tree pages, for importers (an nsys
//! export holds millions of rows; stepping them through SQLite costs far more than decoding
//! the pages, as for the store's own scans in `reader/pages.rs`).
//!
//! A [`TableFile`] is the file opened a second time and mapped into memory (read with `pread`
//! where it cannot be mapped), so that pages are decoded where the page cache holds them; it is
//! meant for a file that does not change while it is read (an export opened immutable). Each [`TableCursor`]
//! walks the rows of one table in rowid order, from a rowid to before another, so that several
//! cursors can step side by side (the sorted runs of a table merged by time). Values read as
//! [`crate::RawRows`] reads them from a `SELECT` of the same columns, and a cursor that meets
//! anything it does not expect (a malformed page or record) stops with the rowid from which
//! the caller's SQL must go on, so that the caller sees the rows a `SELECT` gives.
//!
//! Only what that reading needs is supported: a rollback-journal file in UTF-8, an ordinary
//! rowid table whose columns read back as stored (no `REAL` affinity, no `INTEGER PRIMARY
//! KEY`, no default other than NULL, no hidden columns: the caller checks these from the
//! schema, [`TableFile::plain_column`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::mapped::Mapped;
use crate::reader::pages::{be16, be32, local_size, prefetch, varint, Geometry};

/// Deeper than any b-tree of a file that fits on a disk; deeper means a corrupt file.
const MAX_DEPTH: usize = 20;
/// At most this many consecutive leaf pages are read with one system call by a cursor (when
/// the file is not mapped).
const CHUNK_PAGES: usize = 8;
/// In a mapped file, a cursor that releases what it has read ([`TableCursor::releasing`])
/// takes this many consecutive leaf pages at a time and releases them when it moves on.
const MAPPED_CHUNK_PAGES: usize = 16;

/// An SQLite file opened for reading its table pages.
pub struct TableFile {
    file: File,
    /// The whole file, when it could be mapped.
    map: Option<Mapped>,
    page_size: usize,
    /// Page size less the bytes reserved at the end of each page.
    usable: usize,
    /// Pages in the file.
    pages: u64,
}

/// The leaf pages of one table b-tree, in rowid order, each with the largest rowid its
/// parent's key allows in it.
pub struct Leaves {
    pages: Vec<u32>,
    max_rowid: Vec<i64>,
}

impl TableFile {
    /// The file at `path`, or `None` when its pages cannot be read here (another journal
    /// mode or text encoding, an odd header): the caller then reads it through SQL.
    pub fn open(path: &Path) -> Option<TableFile> {
        let file = File::open(path).ok()?;
        let len = file.metadata().ok()?.len();
        let mut h = [0u8; 100];
        file.read_exact_at(&mut h, 0).ok()?;
        let Geometry {
            page_size,
            usable,
            pages,
        } = Geometry::from_header(&h, len).ok()?;
        let map = Mapped::new(&file, len);
        Some(TableFile {
            file,
            map,
            page_size,
            usable,
            pages,
        })
    }

    /// Whether a column declared as `pragma_table_xinfo` gives it (`decl_type`, `default`,
    /// `pk`, `hidden`) reads back as stored, so that a cursor can read it: not `REAL` affinity
    /// (whose integers read as floats), not the rowid's alias, no default but NULL (a row
    /// written before the column was added reads its default), not hidden or generated.
    pub fn plain_column(decl_type: &str, default: Option<&str>, pk: i64, hidden: i64) -> bool {
        let t = decl_type.to_ascii_uppercase();
        let real = !t.contains("INT")
            && !t.contains("CHAR")
            && !t.contains("CLOB")
            && !t.contains("TEXT")
            && !t.contains("BLOB")
            && (t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB"));
        !real && pk == 0 && hidden == 0 && default.is_none_or(|d| d.eq_ignore_ascii_case("NULL"))
    }

    /// Makes pages `first..first + count` readable at the returned offset of `self.bytes(buf)`:
    /// in the map where the file is mapped, else read into `buf`; `None` when any lies outside
    /// the file.
    fn load(&self, first: u32, count: usize, buf: &mut Vec<u8>) -> Option<usize> {
        if first == 0 || count == 0 || u64::from(first) + count as u64 - 1 > self.pages {
            return None;
        }
        // The lock-byte page holds no data: a tree that points there is malformed.
        let lock = u64::from(crate::fileformat::lock_byte_page(self.page_size));
        if (u64::from(first)..u64::from(first) + count as u64).contains(&lock) {
            return None;
        }
        let offset = usize::try_from(u64::from(first - 1) * self.page_size as u64).ok()?;
        let len = count * self.page_size;
        if let Some(map) = &self.map {
            return (offset + len <= map.len()).then_some(offset);
        }
        buf.resize(len, 0);
        self.file.read_exact_at(buf, offset as u64).ok()?;
        Some(0)
    }

    /// Pages `count` from offset `at` (of [`Self::load`]) are no longer needed in memory.
    fn release(&self, at: usize, count: usize) {
        if let Some(map) = &self.map {
            map.release(at, count * self.page_size);
        }
    }

    /// Pages `count` from offset `at` (of [`Self::load`]) are about to be read.
    fn populate(&self, at: usize, count: usize) {
        if let Some(map) = &self.map {
            map.populate(at, count * self.page_size);
        }
    }

    /// What [`Self::load`]'s offsets index: the map, or the buffer pages were read into.
    fn bytes<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        self.map.as_deref().unwrap_or(buf)
    }

    /// The leaf pages of the table b-tree rooted at `root`; `None` when its interior pages are
    /// not what a table b-tree holds.
    pub fn leaves(&self, root: u32) -> Option<Leaves> {
        let mut out = Leaves {
            pages: Vec::new(),
            max_rowid: Vec::new(),
        };
        let mut buf = Vec::new();
        self.walk(root, i64::MAX, 0, &mut buf, &mut out)?;
        Some(out)
    }

    fn walk(
        &self,
        pgno: u32,
        bound: i64,
        depth: usize,
        buf: &mut Vec<u8>,
        out: &mut Leaves,
    ) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        let at = self.load(pgno, 1, buf)?;
        let page = &self.bytes(buf)[at..at + self.usable];
        let at = if pgno == 1 { 100 } else { 0 };
        match *page.get(at)? {
            0x0d => {
                out.pages.push(pgno);
                out.max_rowid.push(bound);
                Some(())
            }
            0x05 => {
                let cells = be16(page, at + 3)?;
                let mut children = Vec::with_capacity(cells + 1);
                let mut last = i64::MIN;
                for c in 0..cells {
                    let ptr = be16(page, at + 12 + 2 * c)?;
                    let child = be32(page, ptr)?;
                    let (key, _) = varint(page.get(ptr + 4..)?)?;
                    let key = key as i64;
                    if key < last || key > bound {
                        return None;
                    }
                    last = key;
                    children.push((child, key));
                }
                children.push((be32(page, at + 8)?, bound));
                for (child, key) in children {
                    self.walk(child, key, depth + 1, buf, out)?;
                }
                Some(())
            }
            _ => None,
        }
    }
}

/// Serial type of a column the row reads as NULL without decoding (one the table lacks, or
/// the record does).
const NULL: u32 = 0;

/// One table's rows from a rowid to before another, in rowid order; see the module's text.
pub struct TableCursor<'f> {
    file: &'f TableFile,
    leaves: &'f Leaves,
    /// For each column asked for, its place in the table's records (`None`: always NULL).
    cols: Vec<Option<usize>>,
    /// Serial-type slots to decode: one more than the highest place asked for.
    width: usize,
    lo: i64,
    hi: Option<i64>,
    /// The next leaf (index into `leaves`) to read into `buf`.
    next_leaf: usize,
    /// Leaf pages loaded (`TableFile::load`), `buf_leaves.0` the index of the first,
    /// `buf_leaves.1` how many, at `base` in `file.bytes(&buf)`.
    buf: Vec<u8>,
    base: usize,
    buf_leaves: (usize, usize),
    /// Whether pages are released once read (see [`TableCursor::releasing`]).
    release: bool,
    /// One past the last leaf that can hold a row before `hi`: the leaves read at a time stop
    /// there, so that a cursor over part of a table maps none of the rest.
    end_leaf: usize,
    /// Whether `buf` holds leaves yet.
    loaded: bool,
    /// The leaf being read (index into the buffer), its cell count and next cell.
    leaf: usize,
    cells: usize,
    cell: usize,
    /// The last rowid seen (for the order check) and the last one read as a row.
    prev: Option<i64>,
    last_rowid: Option<i64>,
    /// The current row.
    rowid: i64,
    overflow: Vec<u8>,
    /// Where the current record lies in `buf` (`None`: in `overflow`).
    rec_at: Option<(usize, usize)>,
    types: Vec<u32>,
    offsets: Vec<u32>,
    done: bool,
}

enum Cell {
    Row,
    /// Before the cursor's first rowid.
    Before,
    /// At or past the cursor's end.
    Past,
}

/// Why a cursor stopped early: SQL must go on from this rowid (the pages hold something this
/// reader does not expect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumeAt(pub i64);

impl<'f> TableCursor<'f> {
    /// The rows of the table whose leaves are `leaves` with rowid in `lo..hi` (`hi` `None`:
    /// to the end), reading for each column of `cols` its place in the record (`None`: a
    /// column the table lacks, read as NULL).
    pub fn new(
        file: &'f TableFile,
        leaves: &'f Leaves,
        cols: Vec<Option<usize>>,
        lo: Option<i64>,
        hi: Option<i64>,
    ) -> TableCursor<'f> {
        let width = cols.iter().flatten().map(|&c| c + 1).max().unwrap_or(0);
        let next_leaf = match lo {
            Some(lo) => leaves.max_rowid.partition_point(|&m| m < lo),
            None => 0,
        };
        TableCursor {
            file,
            leaves,
            cols,
            width,
            lo: lo.unwrap_or(i64::MIN),
            hi,
            next_leaf,
            buf: Vec::new(),
            base: 0,
            buf_leaves: (0, 0),
            release: false,
            end_leaf: match hi {
                // The first leaf whose rowids may reach `hi` is the last one needed.
                Some(hi) => {
                    (leaves.max_rowid.partition_point(|&m| m < hi) + 1).min(leaves.pages.len())
                }
                None => leaves.pages.len(),
            },
            loaded: false,
            leaf: 0,
            cells: 0,
            cell: 0,
            prev: None,
            last_rowid: None,
            rowid: 0,
            overflow: Vec::new(),
            rec_at: None,
            types: vec![NULL; width],
            offsets: vec![0; width],
            done: false,
        }
    }

    /// Releases each run of leaf pages of a mapped file from the process's memory once the
    /// cursor has read it, so that a pass over a large file holds what it is reading rather
    /// than the whole file (pages read again fault back in from the page cache).
    pub fn releasing(mut self) -> Self {
        self.release = true;
        self
    }

    /// Moves to the next row: `Ok(false)` after the last; `Err` when the pages hold something
    /// unexpected, with the rowid from which SQL must go on (the cursor is then done).
    pub fn step(&mut self) -> Result<bool, ResumeAt> {
        if self.done {
            return Ok(false);
        }
        match self.advance() {
            Some(more) => {
                self.done = !more;
                Ok(more)
            }
            None => {
                self.done = true;
                Err(ResumeAt(
                    self.last_rowid.map_or(self.lo, |r| r.saturating_add(1)),
                ))
            }
        }
    }

    /// `None`: something unexpected.
    fn advance(&mut self) -> Option<bool> {
        loop {
            while self.cell < self.cells {
                let c = self.cell;
                self.cell += 1;
                match self.cell_at(c)? {
                    Cell::Row => return Some(true),
                    Cell::Before => {}
                    Cell::Past => return Some(false),
                }
            }
            // The next leaf: in the buffer, or read with the ones that follow it in the file.
            if self.loaded && self.leaf + 1 < self.buf_leaves.1 {
                self.leaf += 1;
            } else {
                if self.next_leaf >= self.leaves.pages.len() {
                    return Some(false);
                }
                let first = self.next_leaf;
                let pages = &self.leaves.pages;
                let chunk = if self.release && self.file.map.is_some() {
                    if self.loaded {
                        self.file.release(self.base, self.buf_leaves.1);
                    }
                    MAPPED_CHUNK_PAGES
                } else {
                    CHUNK_PAGES
                };
                let mut n = 1;
                while n < chunk
                    && first + n < self.end_leaf
                    && first + n < pages.len()
                    && pages[first + n] == pages[first + n - 1].wrapping_add(1)
                {
                    n += 1;
                }
                self.base = self.file.load(pages[first], n, &mut self.buf)?;
                if self.release {
                    // (Released pages would fault back one window at a time.)
                    self.file.populate(self.base, n);
                }
                self.buf_leaves = (first, n);
                self.next_leaf = first + n;
                self.leaf = 0;
                self.loaded = true;
            }
            let (off, at) = self.page_pos();
            let bytes = self.file.bytes(&self.buf);
            // The next leaf of the run at hand, while this one is read.
            if self.leaf + 1 < self.buf_leaves.1 {
                let next = off + self.file.page_size;
                prefetch(
                    bytes
                        .get(next..next + self.file.page_size)
                        .unwrap_or_default(),
                );
            }
            let page = &bytes[off..off + self.file.usable];
            if *page.get(at)? != 0x0d {
                return None;
            }
            self.cells = be16(page, at + 3)?;
            self.cell = 0;
        }
    }

    /// Where the leaf being read starts in `file.bytes(&buf)`, and where its header starts in
    /// it.
    fn page_pos(&self) -> (usize, usize) {
        let pgno = self.leaves.pages[self.buf_leaves.0 + self.leaf];
        (
            self.base + self.leaf * self.file.page_size,
            if pgno == 1 { 100 } else { 0 },
        )
    }

    /// Decodes cell `c` of the leaf being read as the current row, unless its rowid lies
    /// outside the cursor's range; `None` when it is malformed or out of order.
    fn cell_at(&mut self, c: usize) -> Option<Cell> {
        let usable = self.file.usable;
        let (page_off, at) = self.page_pos();
        let file = self.file;
        let page = &file.bytes(&self.buf)[page_off..page_off + usable];
        let ptr = be16(page, at + 8 + 2 * c)?;
        let cell = page.get(ptr..)?;
        let (size, n1) = varint(cell)?;
        let (rowid, n2) = varint(cell.get(n1..)?)?;
        let rowid = rowid as i64;
        if rowid > self.leaves.max_rowid[self.buf_leaves.0 + self.leaf]
            || self.prev.is_some_and(|p| rowid <= p)
        {
            return None;
        }
        self.prev = Some(rowid);
        if rowid < self.lo {
            return Some(Cell::Before);
        }
        if self.hi.is_some_and(|hi| rowid >= hi) {
            return Some(Cell::Past);
        }
        let size = usize::try_from(size).ok()?;
        let body = ptr + n1 + n2;
        let local = local_size(usable, size);
        if local == size {
            page.get(body..body + size)?;
            self.rec_at = Some((page_off + body, size));
        } else {
            let first_overflow = be32(page, body + local)?;
            let mut rec = std::mem::take(&mut self.overflow);
            rec.clear();
            rec.extend_from_slice(page.get(body..body + local)?);
            let read = self.read_overflow(first_overflow, size, &mut rec);
            self.overflow = rec;
            read?;
            self.rec_at = None;
        }
        self.decode_header()?;
        self.rowid = rowid;
        self.last_rowid = Some(rowid);
        Some(Cell::Row)
    }

    fn read_overflow(&self, mut next: u32, size: usize, rec: &mut Vec<u8>) -> Option<()> {
        let mut buf = Vec::new();
        let mut hops = 0u64;
        while rec.len() < size {
            hops += 1;
            if next == 0 || hops > self.file.pages {
                return None;
            }
            let at = self.file.load(next, 1, &mut buf)?;
            let page = &self.file.bytes(&buf)[at..at + self.file.page_size];
            next = be32(page, 0)?;
            let take = (size - rec.len()).min(self.file.usable - 4);
            rec.extend_from_slice(&page[4..4 + take]);
        }
        Some(())
    }

    fn rec(&self) -> &[u8] {
        match self.rec_at {
            Some((at, len)) => &self.file.bytes(&self.buf)[at..at + len],
            None => &self.overflow,
        }
    }

    /// Each slot's serial type and where its value starts, for the first `width` columns.
    fn decode_header(&mut self) -> Option<()> {
        /// Body bytes of each one-byte serial type (0x80 and up take a longer varint); 10 and
        /// 11 are reserved, marked with `u32::MAX`.
        const LEN: [u32; 128] = {
            let mut len = [0u32; 128];
            let mut t = 0;
            while t < 128 {
                len[t] = match t {
                    0..=9 => [0, 1, 2, 3, 4, 6, 8, 8, 0, 0][t],
                    10 | 11 => u32::MAX,
                    _ => (t as u32 - 12) / 2,
                };
                t += 1;
            }
            len
        };
        let (rec_at, width) = (self.rec_at, self.width);
        let file = self.file;
        let rec: &[u8] = match rec_at {
            Some((at, len)) => &file.bytes(&self.buf)[at..at + len],
            None => &self.overflow,
        };
        let (header_len, mut h) = varint(rec)?;
        let header_len = usize::try_from(header_len).ok()?;
        let header = rec.get(..header_len)?;
        let mut body = header_len as u64;
        let slots = self
            .types
            .iter_mut()
            .zip(self.offsets.iter_mut())
            .take(width);
        for (ty, off) in slots {
            let t = match header.get(h) {
                None => {
                    // A record written before the column was added: NULL (no default).
                    *ty = NULL;
                    continue;
                }
                Some(&b) if b < 0x80 => {
                    h += 1;
                    let len = LEN[b as usize];
                    if len == u32::MAX {
                        return None;
                    }
                    *ty = u32::from(b);
                    *off = u32::try_from(body).ok()?;
                    body += u64::from(len);
                    continue;
                }
                Some(_) => {
                    let (t, n) = varint(&header[h..])?;
                    h += n;
                    t
                }
            };
            let t = u32::try_from(t).ok()?;
            let len = match t {
                0..=9 => [0, 1, 2, 3, 4, 6, 8, 8, 0, 0][t as usize],
                10 | 11 => return None,
                _ => (t - 12) / 2,
            };
            *ty = t;
            *off = u32::try_from(body).ok()?;
            body += u64::from(len);
        }
        (body <= rec.len() as u64 && h <= header_len).then_some(())
    }

    /// The current row's rowid.
    pub fn rowid(&self) -> i64 {
        self.rowid
    }

    fn slot(&self, i: usize) -> Option<(u32, usize)> {
        let k = (*self.cols.get(i)?)?;
        Some((self.types[k], self.offsets[k] as usize))
    }

    /// An INTEGER value; `None` for NULL and any other storage class.
    pub fn int(&self, i: usize) -> Option<i64> {
        let (t, o) = self.slot(i)?;
        let n = match t {
            1..=4 => t as usize,
            5 => 6,
            6 => 8,
            8 => return Some(0),
            9 => return Some(1),
            _ => return None,
        };
        let rec = self.rec();
        let end = o + n;
        let b = rec.get(end.checked_sub(8).unwrap_or(usize::MAX)..end);
        if let Some(b) = b {
            // The eight bytes that end with the value, read at once: the value is their low
            // `n` bytes, sign-extended from its top bit.
            let w = u64::from_be_bytes(b.try_into().ok()?);
            let shift = 64 - 8 * n as u32;
            return Some(((w << shift) as i64) >> shift);
        }
        let b = rec.get(o..end)?;
        // Big-endian two's complement of `n` bytes, sign-extended.
        let mut v = (b[0] as i8) as i64;
        for &x in &b[1..] {
            v = (v << 8) | x as i64;
        }
        Some(v)
    }

    /// A REAL value; `None` for NULL and any other storage class.
    pub fn real(&self, i: usize) -> Option<f64> {
        let (t, o) = self.slot(i)?;
        if t != 7 {
            return None;
        }
        let b = self.rec().get(o..o + 8)?;
        Some(f64::from_bits(u64::from_be_bytes(b.try_into().ok()?)))
    }

    /// A TEXT value that is UTF-8; `None` for NULL, any other storage class and bad UTF-8.
    pub fn text(&self, i: usize) -> Option<&str> {
        std::str::from_utf8(self.text_bytes(i)?).ok()
    }

    /// A TEXT column's bytes, not checked as UTF-8; `None` as for [`TableCursor::text`] but for
    /// bytes that are not UTF-8.
    pub fn text_bytes(&self, i: usize) -> Option<&[u8]> {
        let (t, o) = self.slot(i)?;
        if t < 13 || t % 2 == 0 {
            return None;
        }
        self.rec().get(o..o + ((t - 13) / 2) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::{ConnectOptions, Row};

    /// A table of integers, floats, texts (some long enough to spill onto overflow pages) and
    /// NULLs, with a column added after the first rows: the cursor reads what SQL reads, over
    /// the whole table and over rowid ranges.
    #[test]
    fn cursors_read_what_sql_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        type Row = (i64, Option<i64>, Option<f64>, Option<String>, Option<i64>);
        let want: Vec<Row> = rt.block_on(async {
            let mut c = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Delete)
                .connect()
                .await
                .unwrap();
            sqlx::query("CREATE TABLE t (a INTEGER, r, s TEXT)")
                .execute(&mut c)
                .await
                .unwrap();
            let mut tx = sqlx::Connection::begin(&mut c).await.unwrap();
            for i in 0..5000i64 {
                if i == 3000 {
                    sqlx::query("ALTER TABLE t ADD COLUMN late INTEGER")
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                }
                let a = match i % 7 {
                    0 => None,
                    1 => Some(i64::MIN + i),
                    2 => Some(1),
                    3 => Some(0),
                    // Every integer size, of both signs.
                    _ => Some((i * 1_000_003 - 2_000_000_000) >> (i % 40)),
                };
                let s = match i % 5 {
                    0 => None,
                    1 => Some("x".repeat((i as usize * 37) % 9000)),
                    _ => Some(format!("row {i} ü")),
                };
                let sql = if i >= 3000 {
                    "INSERT INTO t (a, r, s, late) VALUES (?, ?, ?, ?)"
                } else {
                    "INSERT INTO t (a, r, s) VALUES (?, ?, ?)"
                };
                let mut q = sqlx::query(sql)
                    .bind(a)
                    .bind((i % 3 == 0).then_some(i as f64 / 4.0))
                    .bind(s);
                if i >= 3000 {
                    q = q.bind(i);
                }
                q.execute(&mut *tx).await.unwrap();
            }
            sqlx::query("DELETE FROM t WHERE rowid % 11 = 0")
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            sqlx::query("SELECT rowid, a, r, s, late FROM t ORDER BY rowid")
                .fetch_all(&mut c)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect()
        });
        let root: i64 = rt.block_on(async {
            let mut c = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .connect()
                .await
                .unwrap();
            sqlx::query_scalar("SELECT rootpage FROM sqlite_master WHERE name = 't'")
                .fetch_one(&mut c)
                .await
                .unwrap()
        });
        // A REAL column keeps whole numbers as integers, which SQL reads back as floats.
        assert!(!TableFile::plain_column("REAL", None, 0, 0));
        assert!(!TableFile::plain_column("INTEGER", Some("0"), 0, 0));
        assert!(TableFile::plain_column("", Some("NULL"), 0, 0));
        let mapped = TableFile::open(&path).unwrap();
        assert!(mapped.map.is_some());
        // The same file read with `pread`, as where it cannot be mapped.
        let read = TableFile {
            map: None,
            ..TableFile::open(&path).unwrap()
        };
        let leaves = mapped.leaves(root as u32).unwrap();
        assert!(leaves.pages.len() > 10, "a tree of several levels");
        assert!(read.leaves(root as u32).unwrap().pages == leaves.pages);
        let cols = vec![Some(0), Some(1), Some(2), None, Some(3)];
        for (file, lo, hi, release) in [(None, None), (Some(77), Some(3001)), (Some(4990), None)]
            .into_iter()
            .flat_map(|(lo, hi)| {
                [(&mapped, false), (&mapped, true), (&read, false)]
                    .map(|(file, release)| (file, lo, hi, release))
            })
        {
            let mut c = TableCursor::new(file, &leaves, cols.clone(), lo, hi);
            if release {
                c = c.releasing();
            }
            let mut got = Vec::new();
            while c.step().unwrap() {
                let s = c.text(2).map(str::to_string);
                assert_eq!(c.int(3), None);
                got.push((c.rowid(), c.int(0), c.real(1), s, c.int(4)));
            }
            let want: Vec<_> = want
                .iter()
                .filter(|r| lo.is_none_or(|l| r.0 >= l) && hi.is_none_or(|h| r.0 < h))
                .cloned()
                .collect();
            assert_eq!(got.len(), want.len(), "rows {lo:?}..{hi:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g == w, "rows {lo:?}..{hi:?}: row {} differs", w.0);
            }
        }
    }
}
