//! Table scans that read the b-tree pages of the file directly, for the lean scans of analysis.
//!
//! Stepping a SELECT costs SQLite about 50 ns per row plus about 20 ns per column read (on the
//! benchmark machine of `analyzer/BENCH.md`): most of the time of `fuseprof analyze` on a large
//! run, even with only the columns it needs. The rows of a table are the cells of its b-tree's
//! leaf pages, in rowid order, in the format that <https://www.sqlite.org/fileformat2.html>
//! specifies (stable since 2004); decoding them here costs a few ns per column.
//!
//! Only what that reading needs is supported: a rollback-journal file (not WAL) in UTF-8, a
//! table with a rowid. The caller holds a read transaction on its SQLite connection for the
//! whole scan (so no writer can change the file), checks the table's columns, and owns the
//! fallback: a scan returns the rowid from which SQL must go on whenever it meets anything it
//! does not expect (a page it cannot make sense of, a value that is not an integer where one
//! is expected), so that a caller sees exactly the rows and values a SELECT gives.

use std::ffi::c_int;
use std::marker::PhantomData;
use std::ptr::NonNull;

use libsqlite3_sys as ffi;

/// At most this many consecutive pages are read with one system call (leaf pages of a table
/// mostly follow each other in the file).
const MAX_RUN_PAGES: usize = 128;
/// Deeper than any b-tree of a file that fits on a disk; deeper means a corrupt file.
const MAX_DEPTH: usize = 20;

/// The main database file of a connection, read through the connection's own file handle
/// (SQLite's VFS), and the parts of its header that reading table pages depends on.
pub(crate) struct PageFile<'h> {
    file: NonNull<ffi::sqlite3_file>,
    read: unsafe extern "C" fn(*mut ffi::sqlite3_file, *mut std::ffi::c_void, c_int, i64) -> c_int,
    page_size: usize,
    /// Page size less the bytes reserved at the end of each page.
    usable: usize,
    /// Pages in the file, per its header.
    pages: u64,
    _handle: PhantomData<&'h mut ()>,
}

/// What reading a file's table pages depends on, from its 100-byte header.
pub(crate) struct Geometry {
    pub(crate) page_size: usize,
    /// Page size less the bytes reserved at the end of each page.
    pub(crate) usable: usize,
    /// Pages in the file.
    pub(crate) pages: u64,
}

impl Geometry {
    /// The geometry of a file of `len` bytes whose header is `h`, or why its pages cannot be
    /// read here: only a rollback-journal file in UTF-8 with the format's payload fractions.
    pub(crate) fn from_header(h: &[u8; 100], len: u64) -> Result<Geometry, &'static str> {
        if &h[..16] != b"SQLite format 3\0" {
            return Err("not an SQLite 3 file");
        }
        let page_size = match u16::from_be_bytes([h[16], h[17]]) {
            1 => 65_536,
            n => n as usize,
        };
        if page_size < 512 || !page_size.is_power_of_two() {
            return Err("page size");
        }
        // 1 = rollback journal; 2 = WAL, where the newest pages may be in the -wal file.
        if h[18] != 1 || h[19] != 1 {
            return Err("not in rollback-journal mode");
        }
        let usable = page_size - h[20] as usize;
        if usable < 480 {
            return Err("reserved bytes per page");
        }
        // Payload fractions: the format fixes them at 64, 32 and 32.
        if h[21..24] != [64, 32, 32] {
            return Err("payload fractions");
        }
        if u32::from_be_bytes([h[56], h[57], h[58], h[59]]) != 1 {
            return Err("text encoding is not UTF-8");
        }
        let change_counter = u32::from_be_bytes([h[24], h[25], h[26], h[27]]);
        let valid_for = u32::from_be_bytes([h[92], h[93], h[94], h[95]]);
        let in_header = u32::from_be_bytes([h[28], h[29], h[30], h[31]]) as u64;
        // The header's page count is valid only when written by the version that last
        // changed the file; else the file's length says.
        let pages = if in_header > 0 && valid_for == change_counter {
            in_header
        } else {
            len / page_size as u64
        };
        if pages * (page_size as u64) > len {
            return Err("the file is shorter than its header says");
        }
        Ok(Geometry {
            page_size,
            usable,
            pages,
        })
    }
}

fn unsupported<'h>(why: &str) -> Option<PageFile<'h>> {
    tracing::debug!("table pages not read directly: {why}");
    None
}

impl<'h> PageFile<'h> {
    /// The main database file of `db`, which the caller holds locked, inside a read
    /// transaction, for at least `'h`; `None` when its pages cannot be read here.
    pub(crate) fn new(db: NonNull<ffi::sqlite3>) -> Option<PageFile<'h>> {
        let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
        // SAFETY: `db` is live and ours while the caller holds sqlx's lock; the call writes
        // the main database's sqlite3_file pointer, which lives as long as the connection.
        let rc = unsafe {
            ffi::sqlite3_file_control(
                db.as_ptr(),
                c"main".as_ptr(),
                ffi::SQLITE_FCNTL_FILE_POINTER,
                (&mut file as *mut *mut ffi::sqlite3_file).cast(),
            )
        };
        let file = NonNull::new(file).filter(|_| rc == ffi::SQLITE_OK)?;
        // SAFETY: an open sqlite3_file always has its methods set (SQLite's contract).
        let methods = unsafe { file.as_ref().pMethods.as_ref() }?;
        let (Some(read), Some(size_of)) = (methods.xRead, methods.xFileSize) else {
            return unsupported("the file has no read method");
        };
        let mut len = 0i64;
        // SAFETY: as above; xFileSize writes the size.
        if unsafe { size_of(file.as_ptr(), &mut len) } != ffi::SQLITE_OK {
            return unsupported("cannot read the file's size");
        }
        let mut pf = PageFile {
            file,
            read,
            page_size: 0,
            usable: 0,
            pages: 0,
            _handle: PhantomData,
        };
        let mut h = [0u8; 100];
        if !pf.read_at(&mut h, 0) {
            return unsupported("cannot read the file header");
        }
        let g = match Geometry::from_header(&h, len.max(0) as u64) {
            Ok(g) => g,
            Err(why) => return unsupported(why),
        };
        pf.page_size = g.page_size;
        pf.usable = g.usable;
        pf.pages = g.pages;
        Some(pf)
    }

    /// Fills `buf` from `offset`; false on an error or a short read.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> bool {
        let (Ok(n), Ok(offset)) = (c_int::try_from(buf.len()), i64::try_from(offset)) else {
            return false;
        };
        // SAFETY: the file is live while the caller holds the connection ('h); xRead writes
        // at most `n` bytes into `buf` and reports a short read as an error.
        let rc = unsafe { (self.read)(self.file.as_ptr(), buf.as_mut_ptr().cast(), n, offset) };
        rc == ffi::SQLITE_OK
    }

    /// Reads pages `first..first + count` into `buf`; false when any lies outside the file.
    fn read_pages(&self, first: u32, count: usize, buf: &mut Vec<u8>) -> bool {
        if first == 0 || u64::from(first) + count as u64 - 1 > self.pages {
            return false;
        }
        // The lock-byte page holds no data: a tree that points there is malformed.
        let lock = u64::from(crate::fileformat::lock_byte_page(self.page_size));
        if (u64::from(first)..u64::from(first) + count as u64).contains(&lock) {
            return false;
        }
        buf.resize(count * self.page_size, 0);
        let offset = u64::from(first - 1) * self.page_size as u64;
        self.read_at(buf, offset)
    }

    /// Visits the rows of the table b-tree rooted at `root` in rowid order, calling `row` with
    /// each rowid and record. `row` returns false to stop at that row. Returns `None` when
    /// every row was visited, else the rowid from which SQL must take over: the row that `row`
    /// refused, or the one after the last visited when the pages hold something unexpected.
    pub(crate) fn scan(&self, root: u32, mut row: impl FnMut(i64, &[u8]) -> bool) -> Option<i64> {
        let mut walk = Walk {
            file: self,
            buffers: Vec::new(),
            overflow: Vec::new(),
            last_rowid: None,
            row: &mut row,
        };
        match walk.page_run(root, 1, 0) {
            Ok(()) => None,
            Err(Stop::Refused(rowid)) => Some(rowid),
            Err(Stop::Unexpected(why)) => {
                tracing::debug!("table pages: {why}; SQL goes on from there");
                Some(walk.last_rowid.map_or(i64::MIN, |r| r.saturating_add(1)))
            }
        }
    }
}

enum Stop {
    /// The row callback refused this rowid.
    Refused(i64),
    /// The pages hold something this reader does not expect.
    Unexpected(&'static str),
}

struct Walk<'p, 'h, F> {
    file: &'p PageFile<'h>,
    /// One buffer per tree level, each holding a run of pages.
    buffers: Vec<Vec<u8>>,
    /// A record that spills onto overflow pages, put back together.
    overflow: Vec<u8>,
    last_rowid: Option<i64>,
    row: &'p mut F,
}

pub(crate) fn be16(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]) as usize)
}

pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Asks the CPU to bring `bytes` (a page about to be read) into its caches, a cache line at a
/// time, so that decoding it does not wait on memory at each cell: a page's cells lie in an
/// order the hardware's own prefetcher does not follow across pages.
#[inline]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch only hints (it never faults, whatever the address); SSE, which
        // it needs, is part of every x86_64.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// How much of a payload of `size` bytes a table leaf cell holds on its own page, for pages of
/// `usable` bytes.
pub(crate) fn local_size(usable: usize, size: usize) -> usize {
    local_size_under(usable, size, usable - 35)
}

/// How much of a payload of `size` bytes an index cell holds on its own page.
pub(crate) fn index_local_size(usable: usize, size: usize) -> usize {
    local_size_under(usable, size, (usable - 12) * 64 / 255 - 23)
}

/// The format's local payload size for cells whose largest local payload is `max_local`.
fn local_size_under(usable: usize, size: usize, max_local: usize) -> usize {
    if size <= max_local {
        return size;
    }
    let min_local = (usable - 12) * 32 / 255 - 23;
    let k = min_local + (size - min_local) % (usable - 4);
    if k <= max_local {
        k
    } else {
        min_local
    }
}

/// A varint at the start of `b`: its value and length.
#[inline(always)]
pub(crate) fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    if first < 0x80 {
        return Some((first as u64, 1));
    }
    long_varint(b)
}

fn long_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for i in 0..8 {
        let byte = *b.get(i)?;
        v = (v << 7) | (byte & 0x7f) as u64;
        if byte < 0x80 {
            return Some((v, i + 1));
        }
    }
    Some(((v << 8) | *b.get(8)? as u64, 9))
}

impl<F: FnMut(i64, &[u8]) -> bool> Walk<'_, '_, F> {
    /// Visits `count` consecutive pages from `first`, all `depth` levels down the tree.
    fn page_run(&mut self, first: u32, count: usize, depth: usize) -> Result<(), Stop> {
        if depth >= MAX_DEPTH {
            return Err(Stop::Unexpected("b-tree too deep"));
        }
        if self.buffers.len() <= depth {
            self.buffers.resize_with(depth + 1, Vec::new);
        }
        let mut buf = std::mem::take(&mut self.buffers[depth]);
        let result = if self.file.read_pages(first, count, &mut buf) {
            let size = self.file.page_size;
            (0..count).try_for_each(|i| {
                let page = &buf[i * size..(i + 1) * size];
                self.page(first + i as u32, page, depth)
            })
        } else {
            Err(Stop::Unexpected(
                "page number outside the file, or the lock-byte page",
            ))
        };
        self.buffers[depth] = buf;
        result
    }

    fn page(&mut self, pgno: u32, page: &[u8], depth: usize) -> Result<(), Stop> {
        let bad = || Stop::Unexpected("malformed page");
        let page = &page[..self.file.usable];
        let at = if pgno == 1 { 100 } else { 0 };
        let kind = *page.get(at).ok_or_else(bad)?;
        let cells = be16(page, at + 3).ok_or_else(bad)?;
        match kind {
            // Interior table page: cells are (left child, key); the right-most child follows.
            0x05 => {
                let header = at + 12;
                let mut children = Vec::with_capacity(cells + 1);
                for c in 0..cells {
                    let ptr = be16(page, header + 2 * c).ok_or_else(bad)?;
                    children.push(be32(page, ptr).ok_or_else(bad)?);
                }
                children.push(be32(page, at + 8).ok_or_else(bad)?);
                let mut i = 0;
                while i < children.len() {
                    let mut j = i + 1;
                    while j < children.len()
                        && j - i < MAX_RUN_PAGES
                        && children[j] == children[j - 1].wrapping_add(1)
                    {
                        j += 1;
                    }
                    self.page_run(children[i], j - i, depth + 1)?;
                    i = j;
                }
                Ok(())
            }
            // Leaf table page: cells are (payload size, rowid, payload[, overflow page]).
            0x0d => {
                let header = at + 8;
                for c in 0..cells {
                    let ptr = be16(page, header + 2 * c).ok_or_else(bad)?;
                    let cell = page.get(ptr..).ok_or_else(bad)?;
                    let (size, n1) = varint(cell).ok_or_else(bad)?;
                    let (rowid, n2) = varint(&cell[n1..]).ok_or_else(bad)?;
                    let rowid = rowid as i64;
                    if self.last_rowid.is_some_and(|last| rowid <= last) {
                        return Err(Stop::Unexpected("rowids out of order"));
                    }
                    let body = &cell[n1 + n2..];
                    let size = usize::try_from(size).map_err(|_| bad())?;
                    let local = local_size(self.file.usable, size);
                    let record: &[u8] = if local == size {
                        body.get(..size).ok_or_else(bad)?
                    } else {
                        let first_overflow = be32(body, local).ok_or_else(bad)?;
                        let mut rec = std::mem::take(&mut self.overflow);
                        rec.clear();
                        rec.extend_from_slice(body.get(..local).ok_or_else(bad)?);
                        let read = self.read_overflow(first_overflow, size, &mut rec);
                        self.overflow = rec;
                        read?;
                        &self.overflow
                    };
                    if !(self.row)(rowid, record) {
                        return Err(Stop::Refused(rowid));
                    }
                    self.last_rowid = Some(rowid);
                }
                Ok(())
            }
            _ => Err(Stop::Unexpected("not a table b-tree page")),
        }
    }

    /// Appends the rest of a payload of `size` bytes from the overflow chain at `next`.
    fn read_overflow(&self, mut next: u32, size: usize, rec: &mut Vec<u8>) -> Result<(), Stop> {
        let mut page = Vec::new();
        let mut hops = 0u64;
        while rec.len() < size {
            hops += 1;
            if next == 0 || hops > self.file.pages || !self.file.read_pages(next, 1, &mut page) {
                return Err(Stop::Unexpected("broken overflow chain"));
            }
            next = be32(&page, 0).ok_or(Stop::Unexpected("broken overflow chain"))?;
            let take = (size - rec.len()).min(self.file.usable - 4);
            rec.extend_from_slice(&page[4..4 + take]);
        }
        Ok(())
    }
}

/// Bytes of the value of each serial type below 12 (10 and 11 are reserved).
const FIXED_SIZE: [u32; 12] = [0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0];
/// Bytes of the value of each one-byte serial type.
const SMALL_SIZE: [u8; 128] = {
    let mut sizes = [0u8; 128];
    let mut t = 0;
    while t < 128 {
        sizes[t] = if t < 12 {
            FIXED_SIZE[t] as u8
        } else {
            ((t - 12) / 2) as u8
        };
        t += 1;
    }
    sizes
};
/// Serial type of a column the record lacks.
const ABSENT: u32 = u32::MAX;

/// The header of a record, decoded up to its first `N` columns: each column's serial type and
/// where its value starts. Values are decoded when asked for.
pub(crate) struct Record<'a, const N: usize> {
    rec: &'a [u8],
    types: [u32; N],
    offsets: [u32; N],
}

impl<'a, const N: usize> Record<'a, N> {
    /// Decodes the header of `rec`; `None` when the record is malformed (or holds a text or
    /// blob over 2 GB).
    #[inline]
    pub(crate) fn parse(rec: &'a [u8]) -> Option<Self> {
        let mut types = [ABSENT; N];
        let mut offsets = [0u32; N];
        let (header_len, mut h) = varint(rec)?;
        let header_len = usize::try_from(header_len).ok()?;
        let header = rec.get(..header_len)?;
        let mut body = header_len as u64;
        // The common case: a one-byte header size and at least N one-byte serial types.
        if h == 1 {
            if let Some(first) = header.get(1..1 + N) {
                if first.iter().all(|&b| b < 0x80) {
                    for ((t_slot, o_slot), &b) in
                        types.iter_mut().zip(offsets.iter_mut()).zip(first)
                    {
                        *t_slot = b as u32;
                        *o_slot = body as u32;
                        body += u64::from(SMALL_SIZE[b as usize]);
                    }
                    return (body <= rec.len() as u64).then_some(Record {
                        rec,
                        types,
                        offsets,
                    });
                }
            }
        }
        for (t_slot, o_slot) in types.iter_mut().zip(offsets.iter_mut()) {
            let Some(&b) = header.get(h) else { break };
            // Serial types below 128 (integers, NULL, short texts) take one byte.
            let t = if b < 0x80 {
                h += 1;
                b as u64
            } else {
                let (t, n) = varint(&header[h..])?;
                h += n;
                t
            };
            let t = u32::try_from(t).ok().filter(|&t| t != ABSENT)?;
            *t_slot = t;
            *o_slot = body as u32;
            body += u64::from(match t {
                0..=11 => FIXED_SIZE[t as usize],
                _ => (t - 12) / 2,
            });
        }
        // Every value decoded lies inside the record.
        if body > rec.len() as u64 || h > header_len {
            return None;
        }
        Some(Record {
            rec,
            types,
            offsets,
        })
    }

    /// An INTEGER column: `Some(None)` for NULL, `None` for a value that is not an integer
    /// or a column the record lacks (SQL then reads the row).
    #[inline]
    pub(crate) fn opt_i64(&self, i: usize) -> Option<Option<i64>> {
        let o = self.offsets[i] as usize;
        let be = |n: usize| -> Option<i64> {
            let b = self.rec.get(o..o + n)?;
            // Big-endian two's complement of `n` bytes, sign-extended.
            let mut v = (b[0] as i8) as i64;
            for &x in &b[1..] {
                v = (v << 8) | x as i64;
            }
            Some(v)
        };
        Some(match self.types[i] {
            0 => None,
            1 => Some((*self.rec.get(o)? as i8) as i64),
            2 => Some(i16::from_be_bytes(self.rec.get(o..o + 2)?.try_into().ok()?) as i64),
            3 => Some(be(3)?),
            4 => Some(i32::from_be_bytes(self.rec.get(o..o + 4)?.try_into().ok()?) as i64),
            5 => Some(be(6)?),
            6 => Some(i64::from_be_bytes(self.rec.get(o..o + 8)?.try_into().ok()?)),
            8 => Some(0),
            9 => Some(1),
            // A float, text, blob, reserved type or a column the record lacks.
            _ => return None,
        })
    }

    /// A NOT NULL INTEGER column as `sqlite3_column_int64` reads it (NULL reads as 0).
    #[inline]
    pub(crate) fn i64(&self, i: usize) -> Option<i64> {
        Some(self.opt_i64(i)?.unwrap_or(0))
    }

    /// A TEXT column's bytes as `sqlite3_column_blob` reads them: empty for NULL; `None` for
    /// a number (SQL would turn it into text) or a column the record lacks.
    #[inline]
    pub(crate) fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        Some(self.opt_bytes(i)?.unwrap_or(&[]))
    }

    /// Whether the record holds column `i`: a row written before a column was added (`ALTER
    /// TABLE ADD COLUMN`) ends early, and SQL reads the columns it lacks as their default.
    #[inline]
    pub(crate) fn has(&self, i: usize) -> bool {
        self.types[i] != ABSENT
    }

    /// A TEXT column's bytes, `Some(None)` for NULL; `None` as for [`Record::bytes`].
    #[inline]
    pub(crate) fn opt_bytes(&self, i: usize) -> Option<Option<&'a [u8]>> {
        let o = self.offsets[i] as usize;
        match self.types[i] {
            0 => Some(None),
            t if t >= 12 && t != ABSENT => self.rec.get(o..o + ((t - 12) / 2) as usize).map(Some),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_decode_as_the_format_specifies() {
        assert_eq!(varint(&[0x00]), Some((0, 1)));
        assert_eq!(varint(&[0x7f]), Some((127, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0x81, 0x80, 0x00]), Some((1 << 14, 3)));
        // Nine bytes: the last contributes all eight bits.
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81]), None);
        assert_eq!(varint(&[]), None);
    }

    #[test]
    fn records_decode_every_serial_type() {
        // Header: size 11, then NULL, i8, i16, i24, i48, i64, 0, 1, text "ab"; blob "c" last.
        let mut rec = vec![11, 0, 1, 2, 3, 5, 6, 8, 9, 17, 14];
        rec.extend_from_slice(&[0xff]); // -1
        rec.extend_from_slice(&[0x01, 0x00]); // 256
        rec.extend_from_slice(&[0x80, 0x00, 0x00]); // -2^23
        rec.extend_from_slice(&[0x00, 0x01, 0x00, 0x00, 0x00, 0x00]); // 2^32
        rec.extend_from_slice(&i64::MIN.to_be_bytes());
        rec.extend_from_slice(b"ab");
        rec.extend_from_slice(b"c");
        let r = Record::<11>::parse(&rec).unwrap();
        assert_eq!(r.opt_i64(0), Some(None));
        assert_eq!(r.i64(0), Some(0));
        assert_eq!(r.i64(1), Some(-1));
        assert_eq!(r.i64(2), Some(256));
        assert_eq!(r.i64(3), Some(-(1 << 23)));
        assert_eq!(r.i64(4), Some(1 << 32));
        assert_eq!(r.i64(5), Some(i64::MIN));
        assert_eq!(r.i64(6), Some(0));
        assert_eq!(r.i64(7), Some(1));
        assert_eq!(r.bytes(8), Some(&b"ab"[..]));
        assert_eq!(r.i64(8), None, "text where an integer is expected");
        assert_eq!(r.bytes(9), Some(&b"c"[..]));
        assert_eq!(r.opt_i64(10), None, "a column the record lacks");
        assert_eq!(r.bytes(10), None);
        // The same through the one-byte-types fast path (ten columns, all in the header).
        let fast = Record::<10>::parse(&rec).unwrap();
        for i in 0..10 {
            assert_eq!(fast.opt_i64(i), r.opt_i64(i), "column {i}");
            assert_eq!(fast.bytes(i), r.bytes(i), "column {i}");
        }
        // A float is not read here; a reserved type and a truncated body are malformed only
        // when decoded.
        assert_eq!(
            Record::<1>::parse(&[2, 7, 0, 0, 0, 0, 0, 0, 0, 0])
                .unwrap()
                .i64(0),
            None
        );
        assert_eq!(Record::<1>::parse(&[2, 10]).unwrap().i64(0), None);
        assert!(Record::<1>::parse(&[2, 6, 0, 0]).is_none());
        assert!(
            Record::<1>::parse(&[5, 6]).is_none(),
            "header longer than the record"
        );
        // An i32 and a text whose serial type takes two bytes (a 100-byte text).
        let mut rec = vec![4, 4, 0x81, 0x55];
        rec.extend_from_slice(&(-5i32).to_be_bytes());
        rec.extend_from_slice(&[b'x'; 100]);
        let r = Record::<3>::parse(&rec).unwrap();
        assert_eq!(r.i64(0), Some(-5));
        assert_eq!(r.bytes(1), Some(&[b'x'; 100][..]));
        assert_eq!(r.bytes(2), None);
    }
}
