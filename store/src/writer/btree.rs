//! Bulk loading of a run's large tables and their indexes by writing their SQLite b-tree pages
//! directly, in the format <https://www.sqlite.org/fileformat2.html> specifies (stable since
//! 2004; the lean scans in `reader/pages.rs` read the same format back).
//!
//! Inserting through SQLite costs about 0.8 µs a row (the statement machine, the b-tree
//! descent, the page cache) and building an index about 0.15 µs a row per index, several
//! times a single core's budget for millions of events a second. A run is written once, in
//! rowid order, into a file nobody else sees until it is published, so its b-trees can be
//! built bottom-up instead: rows are encoded into leaf pages that are appended to the file as
//! they fill, interior pages are built over them at the end, index entries are sorted in
//! memory and packed the same way, and each tree's top page goes to the root page SQLite
//! allocated when it created the (empty) schema. Nothing SQLite reads is left out: every page
//! belongs to exactly one tree, the header's page count is updated, and `PRAGMA
//! integrity_check` passes (a test checks it).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

/// The parts of the file header that writing pages depends on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub page_size: usize,
    /// Page size less the bytes reserved at the end of each page.
    pub usable: usize,
    /// Pages in the file before any was appended here.
    pub pages: u32,
}

/// Appends pages to the database file and writes root pages and the header in place.
pub(crate) struct PageFile {
    out: BufWriter<File>,
    geo: Geometry,
    next: u32,
    /// Bytes appended up to which writeback was started (see [`PageFile::start_writeback`]),
    /// and how many more start it again.
    written_back: u64,
    writeback_every: u64,
    /// Writes data on the lock-byte page as fuseprof did before it passed that page over, to
    /// make the damaged runs that `repair` is tested on.
    #[cfg(test)]
    pub(crate) lock_page_as_data: bool,
}

/// Writeback of appended pages starts every this many bytes.
const WRITEBACK_EVERY: u64 = 16 << 20;

impl PageFile {
    pub(crate) fn new(file: File, geo: Geometry) -> PageFile {
        PageFile {
            out: BufWriter::with_capacity(1 << 20, file),
            geo,
            next: geo.pages + 1,
            written_back: geo.pages as u64 * geo.page_size as u64,
            writeback_every: WRITEBACK_EVERY,
            #[cfg(test)]
            lock_page_as_data: false,
        }
    }

    /// The number the next page appended after `n` gets: the lock-byte page, the page that
    /// holds offset 1 GiB, is passed over (SQLite keeps it out of every tree and list, and a
    /// file that uses it is corrupt to SQLite).
    fn page_after(&self, n: u32) -> u32 {
        #[cfg(test)]
        if self.lock_page_as_data {
            return n + 1;
        }
        crate::fileformat::page_after(n, self.geo.page_size)
    }

    /// Starts the disk writes of the pages appended since the last call, without waiting for
    /// them, once there are `WRITEBACK_EVERY` bytes of them: the closing `fsync` then waits
    /// only for the last ones rather than for the whole run (most of its time, otherwise).
    fn start_writeback(&mut self) {
        let end = self.next as u64 * self.geo.page_size as u64;
        if end - self.written_back < self.writeback_every {
            return;
        }
        let (from, len) = (self.written_back, end - self.written_back);
        self.written_back = end;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            if self.out.flush().is_err() {
                return;
            }
            // Only a hint: a failure leaves the pages to the closing fsync.
            // SAFETY: a plain system call on a file descriptor this writer owns.
            unsafe {
                libc::sync_file_range(
                    self.out.get_ref().as_raw_fd(),
                    from as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (from, len);
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Writes `page` after the last one and returns its number.
    fn append(&mut self, page: &[u8]) -> std::io::Result<u32> {
        debug_assert_eq!(page.len(), self.geo.page_size);
        // SQLite's largest page number is 2^32 - 2.
        if self.next >= u32::MAX - 1 {
            return Err(std::io::Error::other(
                "the run needs more pages than SQLite allows",
            ));
        }
        if self.next == 1 + self.geo.pages {
            // The appended pages start where the file ends.
            use std::io::Seek;
            self.out.flush()?;
            self.out.get_mut().seek(std::io::SeekFrom::Start(
                self.geo.pages as u64 * self.geo.page_size as u64,
            ))?;
        }
        let mut n = self.next;
        if self.page_after(n - 1) != n {
            // The lock-byte page: zeros (SQLite itself leaves a hole), and the page after it.
            self.out.write_all(&vec![0u8; self.geo.page_size])?;
            n += 1;
        }
        self.out.write_all(page)?;
        self.next = n + 1;
        self.start_writeback();
        Ok(n)
    }

    /// Overwrites page `n`, one SQLite allocated (a tree's root).
    fn write_at(&mut self, n: u32, page: &[u8]) -> std::io::Result<()> {
        self.out.flush()?;
        self.out
            .get_ref()
            .write_all_at(page, (n as u64 - 1) * self.geo.page_size as u64)
    }

    /// Flushes the appended pages and sets the header's page count, so that SQLite sees them.
    pub(crate) fn close(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        let file = self.out.get_ref();
        let mut head = [0u8; 100];
        file.read_exact_at(&mut head, 0)?;
        // The in-header page count is trusted only while the change counter (offset 24)
        // equals the version-valid-for number (offset 92).
        let counter = u32::from_be_bytes(head[24..28].try_into().unwrap()).wrapping_add(1);
        head[24..28].copy_from_slice(&counter.to_be_bytes());
        head[28..32].copy_from_slice(&(self.next - 1).to_be_bytes());
        head[92..96].copy_from_slice(&counter.to_be_bytes());
        file.write_all_at(&head, 0)?;
        file.sync_all()
    }
}

/// SQLite's variable-length integer (1 to 9 bytes, big-endian).
pub(crate) fn put_varint(out: &mut Vec<u8>, v: u64) {
    if v <= 0x7f {
        out.push(v as u8);
        return;
    }
    let (b, n) = varint_bytes(v);
    out.extend_from_slice(&b[..n]);
}

/// `v` as SQLite's variable-length integer: the bytes, and how many of them it takes.
#[inline]
fn varint_bytes(v: u64) -> ([u8; 9], usize) {
    let mut b = [0u8; 9];
    if v > 0x00ff_ffff_ffff_ffff {
        // Nine bytes: eight of seven bits, then a full byte.
        b[8] = v as u8;
        let mut x = v >> 8;
        for i in (0..8).rev() {
            b[i] = (x & 0x7f) as u8 | 0x80;
            x >>= 7;
        }
        return (b, 9);
    }
    let n = varint_len(v);
    let mut x = v;
    for i in (0..n).rev() {
        b[i] = (x & 0x7f) as u8 | 0x80;
        x >>= 7;
    }
    b[n - 1] &= 0x7f;
    (b, n)
}

/// Writes `v` as a varint at the start of `out` and returns the bytes it took.
#[inline]
fn write_varint(out: &mut [u8], v: u64) -> usize {
    if v <= 0x7f {
        out[0] = v as u8;
        return 1;
    }
    let (b, n) = varint_bytes(v);
    copy_short(&mut out[..n], &b[..n]);
    n
}

/// Copies `src` into `dst`, of the same length, with a few loads and stores for the short
/// lengths of a record's parts (a call to `memcpy` for each costs more than the copy): two
/// overlapping blocks of the largest power of two that fits cover any length up to twice it.
#[inline]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..].copy_from_slice(&src[n - 4..]);
        }
        8..=15 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..].copy_from_slice(&src[n - 8..]);
        }
        16..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..].copy_from_slice(&src[n - 16..]);
        }
        _ => dst.copy_from_slice(src),
    }
}

fn varint_len(v: u64) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ if v <= 0x00ff_ffff_ffff_ffff => (64 - v.leading_zeros() as usize).div_ceil(7),
        _ => 9,
    }
}

/// One row's record (header of serial types, then the values), built column by column.
#[derive(Default)]
pub(crate) struct Record {
    types: Vec<u8>,
    body: Vec<u8>,
    /// The file's schema format is 4: 0 and 1 take no body bytes (serial types 8 and 9).
    pub out: Vec<u8>,
}

impl Record {
    pub(crate) fn clear(&mut self) {
        self.types.clear();
        self.body.clear();
    }

    #[inline]
    pub(crate) fn null(&mut self) {
        self.types.push(0);
    }

    #[inline]
    pub(crate) fn int(&mut self, v: i64) {
        let (t, n) = int_serial(v);
        self.types.push(t);
        if n == 0 {
            return;
        }
        // All eight bytes, the value's lowest `n` first, then the rest dropped: a store of a
        // constant size rather than a copy of a variable one.
        let len = self.body.len();
        self.body
            .extend_from_slice(&((v as u64) << (64 - 8 * n as u32)).to_be_bytes());
        self.body.truncate(len + n);
    }

    #[inline]
    pub(crate) fn opt(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.int(v),
            None => self.null(),
        }
    }

    pub(crate) fn text(&mut self, s: &str) {
        let t = 13 + 2 * s.len() as u64;
        if t < 0x80 {
            self.types.push(t as u8);
        } else {
            put_varint(&mut self.types, t);
        }
        let s = s.as_bytes();
        if s.len() <= 32 {
            // As `int`: a store of a constant size, then the rest dropped.
            let mut b = [0u8; 32];
            copy_short(&mut b[..s.len()], s);
            let len = self.body.len();
            self.body.extend_from_slice(&b);
            self.body.truncate(len + s.len());
        } else {
            self.body.extend_from_slice(s);
        }
    }

    /// The record's serial types and body as built so far, to keep it in a compact form
    /// ([`Record::restore`] takes it back).
    pub(crate) fn parts(&self) -> (&[u8], &[u8]) {
        (&self.types, &self.body)
    }

    /// Rebuilds the record from serial types and a body kept by [`Record::parts`].
    pub(crate) fn load(&mut self, types: &[u8], body: &[u8]) {
        self.types.clear();
        self.types.extend_from_slice(types);
        self.body.clear();
        self.body.extend_from_slice(body);
    }

    /// Rebuilds the record from serial types and a body kept by [`Record::parts`], with the
    /// NULL column `col` (whose value would start at byte `at` of the body) set to `v`.
    pub(crate) fn restore(&mut self, types: &[u8], body: &[u8], col: usize, at: usize, v: i64) {
        self.types.clear();
        self.types.extend_from_slice(&types[..col]);
        self.body.clear();
        self.body.extend_from_slice(&body[..at]);
        self.int(v);
        self.types.extend_from_slice(&types[col + 1..]);
        self.body.extend_from_slice(&body[at..]);
    }

    /// The header's length, which counts its own varint.
    fn header_len(&self) -> usize {
        let len = self.types.len() + 1;
        if varint_len(len as u64) > 1 {
            self.types.len() + varint_len(self.types.len() as u64 + 2)
        } else {
            len
        }
    }

    /// The record's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.header_len() + self.body.len()
    }

    /// Writes the record into `out`, which is [`Record::len`] bytes long.
    fn write_to(&self, out: &mut [u8]) {
        let h = write_varint(out, self.header_len() as u64);
        let (types, body) = out[h..].split_at_mut(self.types.len());
        copy_short(types, &self.types);
        copy_short(body, &self.body);
    }

    /// The record's bytes, in `self.out`.
    pub(crate) fn finish(&mut self) -> &[u8] {
        self.out.clear();
        self.out.resize(self.len(), 0);
        let mut out = std::mem::take(&mut self.out);
        self.write_to(&mut out);
        self.out = out;
        &self.out
    }
}

/// The body bytes of a value of serial type `t`.
#[inline]
pub(crate) fn serial_size(t: u8) -> usize {
    match t {
        0 | 8 | 9 | 10 | 11 => 0,
        1..=4 => t as usize,
        5 => 6,
        6 | 7 => 8,
        _ => (t as usize - 12) / 2,
    }
}

/// The integer of serial type `t` (0 to 6, 8 or 9) whose body bytes start `bytes`; `None` for
/// NULL or a type that is not an integer.
#[inline]
pub(crate) fn serial_int(t: u8, bytes: &[u8]) -> Option<i64> {
    match t {
        1..=6 => {
            let n = serial_size(t);
            let mut word = [0u8; 8];
            word[..n].copy_from_slice(&bytes[..n]);
            // Big-endian two's complement in the top `n` bytes, shifted down with its sign.
            Some(i64::from_be_bytes(word) >> (64 - 8 * n))
        }
        8 => Some(0),
        9 => Some(1),
        _ => None,
    }
}

const TABLE_LEAF: u8 = 0x0d;
const TABLE_INTERIOR: u8 = 0x05;
const INDEX_LEAF: u8 = 0x0a;
const INDEX_INTERIOR: u8 = 0x02;

/// One b-tree page being filled: cell pointers grow from the header, cells from the end.
struct Page {
    buf: Vec<u8>,
    usable: usize,
    header: usize,
    cells: usize,
    content: usize,
}

impl Page {
    fn new(geo: Geometry, kind: u8) -> Page {
        let mut p = Page {
            buf: vec![0; geo.page_size],
            usable: geo.usable,
            header: 0,
            cells: 0,
            content: 0,
        };
        p.reset(kind);
        p
    }

    fn reset(&mut self, kind: u8) {
        self.buf.fill(0);
        self.buf[0] = kind;
        self.header = if kind == TABLE_INTERIOR || kind == INDEX_INTERIOR {
            12
        } else {
            8
        };
        self.cells = 0;
        self.content = self.usable;
    }

    fn fits(&self, cell: usize) -> bool {
        self.header + 2 * (self.cells + 1) + cell <= self.content
    }

    fn push(&mut self, cell: &[u8]) {
        debug_assert!(self.fits(cell.len()));
        self.content -= cell.len();
        copy_short(&mut self.buf[self.content..self.content + cell.len()], cell);
        let at = self.header + 2 * self.cells;
        self.buf[at..at + 2].copy_from_slice(&(self.content as u16).to_be_bytes());
        self.cells += 1;
    }

    /// Adds a cell of `len` bytes that `write` fills in place.
    fn push_with(&mut self, len: usize, write: impl FnOnce(&mut [u8])) {
        debug_assert!(self.fits(len));
        self.content -= len;
        write(&mut self.buf[self.content..self.content + len]);
        let at = self.header + 2 * self.cells;
        self.buf[at..at + 2].copy_from_slice(&(self.content as u16).to_be_bytes());
        self.cells += 1;
    }

    /// The finished page; `right` is an interior page's right-most child.
    fn seal(&mut self, right: Option<u32>) -> &[u8] {
        self.buf[3..5].copy_from_slice(&(self.cells as u16).to_be_bytes());
        // A content area that starts at 65536 is written as 0.
        self.buf[5..7].copy_from_slice(&(self.content as u16).to_be_bytes());
        if let Some(r) = right {
            self.buf[8..12].copy_from_slice(&r.to_be_bytes());
        }
        &self.buf
    }
}

/// A rowid table's b-tree, filled in rowid order.
pub(crate) struct TableTree {
    root: u32,
    leaf: Page,
    last_rowid: i64,
    rows: u64,
    /// The leaves written so far, with the largest rowid each holds.
    leaves: Vec<(u32, i64)>,
    cell: Vec<u8>,
    overflow: Vec<u8>,
}

impl TableTree {
    pub(crate) fn new(geo: Geometry, root: u32) -> TableTree {
        TableTree {
            root,
            leaf: Page::new(geo, TABLE_LEAF),
            last_rowid: 0,
            rows: 0,
            leaves: Vec::new(),
            cell: Vec::new(),
            overflow: Vec::new(),
        }
    }

    /// The rowid SQLite would give the next row.
    pub(crate) fn next_rowid(&self) -> i64 {
        self.rows as i64 + 1
    }

    /// Adds a row; rowids must increase.
    pub(crate) fn add(
        &mut self,
        file: &mut PageFile,
        rowid: i64,
        record: &mut Record,
    ) -> std::io::Result<()> {
        debug_assert!(self.rows == 0 || rowid > self.last_rowid);
        let geo = file.geometry();
        let u = geo.usable;
        let payload = record.len();
        // How much of the payload stays on the leaf (the rest goes to overflow pages).
        let max_local = u - 35;
        if payload <= max_local {
            // The usual row: its cell is written straight into the leaf.
            let len = varint_len(payload as u64) + varint_len(rowid as u64) + payload;
            self.make_room(file, len)?;
            self.leaf.push_with(len, |cell| {
                let mut at = write_varint(cell, payload as u64);
                at += write_varint(&mut cell[at..], rowid as u64);
                record.write_to(&mut cell[at..]);
            });
        } else {
            let record = record.finish();
            self.cell.clear();
            put_varint(&mut self.cell, record.len() as u64);
            put_varint(&mut self.cell, rowid as u64);
            let min_local = (u - 12) * 32 / 255 - 23;
            let k = min_local + (record.len() - min_local) % (u - 4);
            let local = if k <= max_local { k } else { min_local };
            self.cell.extend_from_slice(&record[..local]);
            let first = self.write_overflow(file, &record[local..])?;
            self.cell.extend_from_slice(&first.to_be_bytes());
            self.make_room(file, self.cell.len())?;
            self.leaf.push(&self.cell);
        }
        self.last_rowid = rowid;
        self.rows += 1;
        Ok(())
    }

    /// Writes the leaf out and starts the next one if a cell of `len` bytes does not fit.
    fn make_room(&mut self, file: &mut PageFile, len: usize) -> std::io::Result<()> {
        if !self.leaf.fits(len) {
            let n = file.append(self.leaf.seal(None))?;
            self.leaves.push((n, self.last_rowid));
            self.leaf.reset(TABLE_LEAF);
        }
        Ok(())
    }

    /// Writes `rest` into a chain of overflow pages and returns the first one's number. The
    /// chain is written last page first, so each page knows its successor.
    fn write_overflow(&mut self, file: &mut PageFile, rest: &[u8]) -> std::io::Result<u32> {
        let geo = file.geometry();
        let per = geo.usable - 4;
        let chunks: Vec<&[u8]> = rest.chunks(per).collect();
        // Page numbers are given in order of writing (passing over the lock-byte page): each
        // page's successor is known before it is written, so the chain runs forward.
        let first = file.page_after(file.next - 1);
        let mut this = first;
        for (i, chunk) in chunks.iter().enumerate() {
            self.overflow.clear();
            self.overflow.resize(geo.page_size, 0);
            let next = if i + 1 < chunks.len() {
                file.page_after(this)
            } else {
                0
            };
            self.overflow[..4].copy_from_slice(&next.to_be_bytes());
            self.overflow[4..4 + chunk.len()].copy_from_slice(chunk);
            let n = file.append(&self.overflow)?;
            debug_assert_eq!(n, this);
            this = next;
        }
        Ok(first)
    }

    /// Writes the last leaf and the interior pages, the top one into the root page.
    pub(crate) fn finish(mut self, file: &mut PageFile) -> std::io::Result<()> {
        if self.rows == 0 {
            // The root SQLite made is already an empty leaf.
            return Ok(());
        }
        if self.leaves.is_empty() {
            return file.write_at(self.root, self.leaf.seal(None));
        }
        let n = file.append(self.leaf.seal(None))?;
        self.leaves.push((n, self.last_rowid));
        let geo = file.geometry();
        let mut level = std::mem::take(&mut self.leaves);
        let mut page = Page::new(geo, TABLE_INTERIOR);
        loop {
            // Each child but a node's last takes a cell (child, its largest rowid); the last
            // is the node's right-most pointer.
            let cap = geo.usable - 12;
            let groups = group(level.len(), cap, |i| 4 + varint_len(level[i].1 as u64) + 2);
            let mut up = Vec::with_capacity(groups.len());
            for g in &groups {
                page.reset(TABLE_INTERIOR);
                for &(child, key) in &level[g.start..g.end - 1] {
                    self.cell.clear();
                    self.cell.extend_from_slice(&child.to_be_bytes());
                    put_varint(&mut self.cell, key as u64);
                    page.push(&self.cell);
                }
                let (last, key) = level[g.end - 1];
                let bytes = page.seal(Some(last));
                if groups.len() == 1 {
                    return file.write_at(self.root, bytes);
                }
                up.push((file.append(bytes)?, key));
            }
            level = up;
        }
    }
}

/// Splits `n` children into consecutive nodes whose cells fit `cap` bytes, where `cost(i)` is
/// the bytes child `i` takes when it is not its node's last; every node gets at least two
/// children (`n >= 2`).
fn group(n: usize, cap: usize, cost: impl Fn(usize) -> usize) -> Vec<std::ops::Range<usize>> {
    debug_assert!(n >= 2);
    let mut groups = Vec::new();
    let mut start = 0;
    let mut used = 0;
    // The last child closes the last node as its right-most pointer, at no cost.
    for i in 0..n - 1 {
        // Child i closes its node (as the right-most pointer) when it does not fit as a cell.
        if i > start && used + cost(i) > cap {
            groups.push(start..i + 1);
            start = i + 1;
            used = 0;
            continue;
        }
        used += cost(i);
    }
    if start < n {
        groups.push(start..n);
    }
    // A last node with a single child borrows one from the node before it.
    let k = groups.len();
    if k >= 2 && groups[k - 1].len() == 1 {
        groups[k - 2].end -= 1;
        groups[k - 1].start -= 1;
    }
    groups
}

/// An index's key columns, compared as SQLite compares them (NULL first, then by value).
pub(crate) trait IndexKey: Ord + Copy {
    /// The key's columns.
    const COLS: usize;
    fn write(&self, rec: &mut IntRecord);
}

impl IndexKey for [i64; 3] {
    const COLS: usize = 3;
    #[inline]
    fn write(&self, rec: &mut IntRecord) {
        for &v in self {
            rec.int(v);
        }
    }
}

impl IndexKey for (Option<i64>, Option<i64>) {
    const COLS: usize = 2;
    #[inline]
    fn write(&self, rec: &mut IntRecord) {
        rec.opt(self.0);
        rec.opt(self.1);
    }
}

/// Most columns an [`IntRecord`] holds.
const INT_RECORD_COLS: usize = 6;

/// An index entry's record (its key's integers, then the rowid) built in place as a leaf
/// cell: the record's length, the header's length and the serial types, then the values. The
/// number of columns is known before the first (at most [`INT_RECORD_COLS`], so the header's
/// and the cell's lengths each take one byte), so each value goes straight to its place.
pub(crate) struct IntRecord {
    cols: usize,
    /// Where the next value goes.
    at: usize,
    /// The cell, with room for an eight-byte store past the last value.
    cell: [u8; 2 + INT_RECORD_COLS + 8 * INT_RECORD_COLS + 8],
}

impl IntRecord {
    fn new() -> Self {
        IntRecord {
            cols: 0,
            at: 0,
            cell: [0; 2 + INT_RECORD_COLS + 8 * INT_RECORD_COLS + 8],
        }
    }

    /// Starts a record of `cols` columns.
    #[inline]
    fn start(&mut self, cols: usize) {
        debug_assert!(cols <= INT_RECORD_COLS);
        self.cols = 0;
        self.at = 2 + cols;
        self.cell[1] = (cols + 1) as u8;
    }

    #[inline]
    fn opt(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.int(v),
            None => {
                self.cell[2 + self.cols] = 0;
                self.cols += 1;
            }
        }
    }

    /// As [`Record::int`].
    #[inline]
    fn int(&mut self, v: i64) {
        let (t, n) = int_serial(v);
        self.cell[2 + self.cols] = t;
        self.cols += 1;
        if n == 0 {
            return;
        }
        // All eight bytes stored, the value's lowest `n` first; the rest is overwritten by the
        // next value or lies past the end.
        let at = self.at;
        self.cell[at..at + 8].copy_from_slice(&((v as u64) << (64 - 8 * n as u32)).to_be_bytes());
        self.at += n;
    }

    /// The leaf cell; its record is `cell()[1..]`.
    #[inline]
    fn cell(&mut self) -> &[u8] {
        debug_assert_eq!(usize::from(self.cell[1]), self.cols + 1);
        self.cell[0] = (self.at - 1) as u8;
        &self.cell[..self.at]
    }
}

/// The serial type of integer `v` and its body bytes (schema format 4: 0 and 1 take none).
#[inline]
fn int_serial(v: i64) -> (u8, usize) {
    /// Serial type and body bytes of an integer, by the bytes its two's complement needs.
    const BY_BYTES: [(u8, u8); 9] = [
        (1, 1),
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 6),
        (5, 6),
        (6, 8),
        (6, 8),
    ];
    if (v as u64) < 2 {
        return (8 + v as u8, 0);
    }
    // The bits of the magnitude (of `!v` for a negative `v`) and a sign bit.
    let bits = 65 - ((v ^ (v >> 63)) as u64).leading_zeros();
    let (t, n) = BY_BYTES[bits.div_ceil(8) as usize];
    (t, n as usize)
}

/// An index's entries, collected as rows arrive and written as a b-tree at the end.
pub(crate) struct IndexTree<K> {
    root: u32,
    entries: Vec<(K, i64)>,
    /// How many of `entries` [`IndexTree::sort`] sorted: all of them unless one came since.
    sorted: usize,
}

impl<K: IndexKey> IndexTree<K> {
    /// The tree rooted at page `root`; root 0 (no page has that number) for an index left out
    /// of the run, which takes no entries and writes nothing.
    pub(crate) fn new(root: u32) -> Self {
        IndexTree {
            root,
            entries: Vec::new(),
            sorted: 0,
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, key: K, rowid: i64) {
        if self.root != 0 {
            self.entries.push((key, rowid));
        }
    }

    /// Sorts the entries, which [`IndexTree::finish`] then writes as they are: an index whose
    /// keys are all in can be sorted on another thread while other rows are still written.
    pub(crate) fn sort(&mut self) {
        if self.sorted != self.entries.len() {
            // Rowids are unique, so the order is total and the unstable sort exact.
            self.entries.sort_unstable();
            self.sorted = self.entries.len();
        }
    }

    /// Sorts the entries and writes the tree ([`write_index`]).
    pub(crate) fn finish(mut self, file: &mut PageFile) -> std::io::Result<()> {
        self.sort();
        let entries = &self.entries;
        write_index(self.root, entries.len(), |i| entries[i], file)
    }
}

/// One prefix `(a, b)` and its `(time, rowid)` pairs.
type PrefixGroup = ((i64, i64), Vec<(i64, i64)>);

/// Prefixes an index by prefix keeps apart; past them it keeps whole entries.
const MAX_PREFIXES: usize = 65_536;

/// The entries of an index on `(a, b, time)` whose rows come in time order per `(a, b)` (a
/// thread's calls and ranges, a stream's kernels), kept per prefix as `(time, rowid)` pairs as
/// rows arrive: half the memory of whole entries, and sorting them orders the few prefixes and
/// checks each one's pairs instead of sorting every entry. Past [`MAX_PREFIXES`] prefixes it
/// goes on as an [`IndexTree`] of whole entries.
pub(crate) struct PrefixIndex {
    root: u32,
    /// Each prefix's pairs, in the order the prefixes came (ordered by prefix by `sort`).
    groups: Vec<PrefixGroup>,
    find: rustc_hash::FxHashMap<(i64, i64), usize>,
    /// The group of the last entry: most entries follow one of the same thread or stream.
    last: usize,
    whole: Option<IndexTree<[i64; 3]>>,
    sorted: bool,
}

impl PrefixIndex {
    /// As [`IndexTree::new`].
    pub(crate) fn new(root: u32) -> Self {
        PrefixIndex {
            root,
            groups: Vec::new(),
            find: Default::default(),
            last: 0,
            whole: None,
            sorted: true,
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, [a, b, time]: [i64; 3], rowid: i64) {
        if self.root == 0 {
            return;
        }
        if let Some(whole) = &mut self.whole {
            return whole.add([a, b, time], rowid);
        }
        let g = match self.groups.get(self.last) {
            Some((p, _)) if *p == (a, b) => self.last,
            _ => match self.find.get(&(a, b)) {
                Some(&g) => g,
                None if self.groups.len() < MAX_PREFIXES => {
                    self.groups.push(((a, b), Vec::new()));
                    self.find.insert((a, b), self.groups.len() - 1);
                    self.groups.len() - 1
                }
                None => {
                    let mut whole = IndexTree::new(self.root);
                    for ((a, b), pairs) in std::mem::take(&mut self.groups) {
                        for (t, r) in pairs {
                            whole.add([a, b, t], r);
                        }
                    }
                    whole.add([a, b, time], rowid);
                    self.find = Default::default();
                    self.whole = Some(whole);
                    return;
                }
            },
        };
        self.last = g;
        self.groups[g].1.push((time, rowid));
        self.sorted = false;
    }

    /// As [`IndexTree::sort`].
    pub(crate) fn sort(&mut self) {
        if let Some(whole) = &mut self.whole {
            return whole.sort();
        }
        if self.sorted {
            return;
        }
        self.groups.sort_unstable_by_key(|g| g.0);
        for (g, (prefix, pairs)) in self.groups.iter_mut().enumerate() {
            // Entries may still come after a sort: each prefix is found where it now is.
            self.find.insert(*prefix, g);
            if !pairs.is_sorted() {
                // Pairs come in rowid order, so a stable sort by time orders them by (time,
                // rowid); it runs through the long sorted stretches that a thread's or a
                // stream's records keep, where an unstable sort would partition them.
                pairs.sort_by_key(|&(time, _)| time);
            }
        }
        self.sorted = true;
    }

    /// As [`IndexTree::finish`].
    pub(crate) fn finish(mut self, file: &mut PageFile) -> std::io::Result<()> {
        if let Some(whole) = self.whole {
            return whole.finish(file);
        }
        self.sort();
        // Where each group's entries start, and the group the last one asked for was in: the
        // tree is written in order, so a lookup is nearly always in that group or the next.
        let mut starts = Vec::with_capacity(self.groups.len() + 1);
        let mut n = 0;
        for (_, pairs) in &self.groups {
            starts.push(n);
            n += pairs.len();
        }
        starts.push(n);
        let near = std::cell::Cell::new(0);
        let groups = &self.groups;
        let entry = |i: usize| {
            let mut g = near.get();
            if !(starts[g] <= i && i < starts[g + 1]) {
                g = starts.partition_point(|&s| s <= i) - 1;
                near.set(g);
            }
            let ((a, b), pairs) = &groups[g];
            let (t, r) = pairs[i - starts[g]];
            ([*a, *b, t], r)
        };
        write_index(self.root, n, entry, file)
    }
}

/// The entries of an index on two nullable integer columns (`(correlation_id, pid)`), each
/// packed with its rowid into 16 bytes while both values lie in `0..u32::MAX - 1` (CUPTI's
/// correlation ids are 32-bit, process ids smaller): a 40-byte whole entry holds two
/// `Option<i64>`s. Past the first key that does not fit it goes on as an [`IndexTree`] of
/// whole entries. The tree it writes is the same either way.
pub(crate) struct PairIndex {
    root: u32,
    /// Each key packed as [`pack_pair`] packs it, which orders as the key does.
    packed: Vec<(u64, i64)>,
    whole: Option<IndexTree<(Option<i64>, Option<i64>)>>,
    sorted: usize,
}

/// `(a, b)` as one `u64` that orders as SQLite orders the pair (NULL first, then by value):
/// each half 0 for NULL, else the value plus one; `None` when a value lies outside
/// `0..u32::MAX - 1`.
fn pack_pair((a, b): (Option<i64>, Option<i64>)) -> Option<u64> {
    let half = |v: Option<i64>| match v {
        None => Some(0),
        Some(v) => u32::try_from(v)
            .ok()
            .filter(|&v| v < u32::MAX)
            .map(|v| u64::from(v) + 1),
    };
    Some(half(a)? << 32 | half(b)?)
}

fn unpack_pair(p: u64) -> (Option<i64>, Option<i64>) {
    let half = |h: u64| (h != 0).then(|| h as i64 - 1);
    (half(p >> 32), half(p & 0xffff_ffff))
}

impl PairIndex {
    /// As [`IndexTree::new`].
    pub(crate) fn new(root: u32) -> Self {
        PairIndex {
            root,
            packed: Vec::new(),
            whole: None,
            sorted: 0,
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, key: (Option<i64>, Option<i64>), rowid: i64) {
        if self.root == 0 {
            return;
        }
        if let Some(whole) = &mut self.whole {
            return whole.add(key, rowid);
        }
        match pack_pair(key) {
            Some(p) => self.packed.push((p, rowid)),
            None => {
                let mut whole = IndexTree::new(self.root);
                for (p, r) in std::mem::take(&mut self.packed) {
                    whole.add(unpack_pair(p), r);
                }
                whole.add(key, rowid);
                self.whole = Some(whole);
            }
        }
    }

    /// As [`IndexTree::sort`].
    pub(crate) fn sort(&mut self) {
        if let Some(whole) = &mut self.whole {
            return whole.sort();
        }
        if self.sorted != self.packed.len() {
            // Rowids are unique, so the order is total and any sort gives it: entries in rowid
            // order (as rows are written) need only a stable sort by key.
            if self.packed.is_sorted_by_key(|e| e.1) {
                radix_sort(&mut self.packed);
            } else {
                self.packed.sort_unstable();
            }
            self.sorted = self.packed.len();
        }
    }

    /// As [`IndexTree::finish`].
    pub(crate) fn finish(mut self, file: &mut PageFile) -> std::io::Result<()> {
        if let Some(whole) = self.whole {
            return whole.finish(file);
        }
        self.sort();
        let packed = &self.packed;
        let entry = |i: usize| {
            let (p, r) = packed[i];
            (unpack_pair(p), r)
        };
        write_index(self.root, packed.len(), entry, file)
    }
}

/// Sorts `v` by key, stably: a byte of the key a pass from the lowest (least significant
/// digit radix sort), passing over the bytes that every key shares. An index's keys (a
/// correlation id and a process id) differ in three or four of their eight bytes, so a few
/// passes of sequential reads and writes take the place of a comparison sort's
/// `log2(n)` levels.
fn radix_sort(v: &mut Vec<(u64, i64)>) {
    /// Below this many entries the comparison sort is as quick.
    const MIN_RADIX: usize = 1 << 12;
    if v.len() < MIN_RADIX {
        v.sort_by_key(|e| e.0);
        return;
    }
    let (all, any) = v
        .iter()
        .fold((u64::MAX, 0u64), |(and, or), e| (and & e.0, or | e.0));
    // The bytes in which some keys differ.
    let varying = all ^ any;
    let digits: Vec<u32> = (0..8)
        .filter(|b| (varying >> (8 * b)) & 0xff != 0)
        .map(|b| 8 * b)
        .collect();
    if digits.is_empty() {
        return;
    }
    let mut counts = vec![[0usize; 256]; digits.len()];
    for e in v.iter() {
        for (c, &shift) in counts.iter_mut().zip(&digits) {
            c[(e.0 >> shift) as u8 as usize] += 1;
        }
    }
    let mut src = std::mem::take(v);
    let mut dst = vec![(0u64, 0i64); src.len()];
    for (c, &shift) in counts.iter().zip(&digits) {
        let mut at = [0usize; 256];
        let mut sum = 0;
        for (a, &n) in at.iter_mut().zip(c) {
            *a = sum;
            sum += n;
        }
        for &e in &src {
            let d = (e.0 >> shift) as u8 as usize;
            dst[at[d]] = e;
            at[d] += 1;
        }
        std::mem::swap(&mut src, &mut dst);
    }
    *v = src;
}

/// Writes the index b-tree rooted at page `root` of the `n` sorted entries `entry(0..n)`:
/// leaves packed in order, and between two neighbouring pages of a level one entry that moves
/// up into their parent (an index b-tree holds each entry once, interior pages included).
fn write_index<K: IndexKey>(
    root: u32,
    n: usize,
    entry: impl Fn(usize) -> (K, i64),
    file: &mut PageFile,
) -> std::io::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let geo = file.geometry();
    let mut rec = IntRecord::new();
    // Entry `i` as a leaf cell (its record's length, then the record).
    let leaf_cell = |rec: &mut IntRecord, i: usize| {
        let (key, rowid) = entry(i);
        rec.start(K::COLS + 1);
        key.write(rec);
        rec.int(rowid);
    };
    // Every entry's record is small (integers only): it never needs an overflow page.
    debug_assert!(rec.cell.len() <= (geo.usable - 12) * 64 / 255 - 23);

    // Leaves, and the separator entry after each but the last.
    let mut children: Vec<u32> = Vec::new();
    let mut seps: Vec<Vec<u8>> = Vec::new();
    let mut page = Page::new(geo, INDEX_LEAF);
    let mut first = 0;
    let mut i = 0;
    while i < n {
        leaf_cell(&mut rec, i);
        let cell = rec.cell();
        if page.fits(cell.len()) {
            // The usual entry: its cell is written straight into the leaf.
            page.push(cell);
            i += 1;
            continue;
        }
        // The page is full: entry i separates it from the next leaf, which must not be
        // empty. When i is the last entry, the page's own last entry moves up instead.
        let next = if i + 1 < n {
            seps.push(cell[1..].to_vec());
            i + 1
        } else {
            page.reset(INDEX_LEAF);
            for j in first..i - 1 {
                leaf_cell(&mut rec, j);
                page.push(rec.cell());
            }
            leaf_cell(&mut rec, i - 1);
            seps.push(rec.cell()[1..].to_vec());
            i
        };
        children.push(file.append(page.seal(None))?);
        page.reset(INDEX_LEAF);
        first = next;
        i = next;
    }
    if children.is_empty() {
        return file.write_at(root, page.seal(None));
    }
    children.push(file.append(page.seal(None))?);

    let cap = geo.usable - 12;
    let mut page = Page::new(geo, INDEX_INTERIOR);
    let mut cell = Vec::new();
    loop {
        // Child j (not its node's last) takes a cell: its page, then the separator after it.
        let groups = group(children.len(), cap, |j| {
            4 + varint_len(seps[j].len() as u64) + seps[j].len() + 2
        });
        let mut up_children = Vec::with_capacity(groups.len());
        let mut up_seps = Vec::with_capacity(groups.len());
        for (gi, g) in groups.iter().enumerate() {
            page.reset(INDEX_INTERIOR);
            for j in g.start..g.end - 1 {
                cell.clear();
                cell.extend_from_slice(&children[j].to_be_bytes());
                put_varint(&mut cell, seps[j].len() as u64);
                cell.extend_from_slice(&seps[j]);
                page.push(&cell);
            }
            let bytes = page.seal(Some(children[g.end - 1]));
            if groups.len() == 1 {
                return file.write_at(root, bytes);
            }
            up_children.push(file.append(bytes)?);
            if gi + 1 < groups.len() {
                up_seps.push(std::mem::take(&mut seps[g.end - 1]));
            }
        }
        children = up_children;
        seps = up_seps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch file of two 512-byte pages at `path` (a header page and a root), as a page file.
    fn scratch(path: &std::path::Path) -> PageFile {
        let geo = Geometry {
            page_size: 512,
            usable: 512,
            pages: 2,
        };
        std::fs::write(path, vec![0u8; 2 * 512]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        PageFile::new(file, geo)
    }

    /// The bytes of a scratch file `name` in `dir` once `finish` has written into it.
    fn written(dir: &std::path::Path, name: &str, finish: impl FnOnce(&mut PageFile)) -> Vec<u8> {
        let path = dir.join(name);
        let mut f = scratch(&path);
        finish(&mut f);
        f.close().unwrap();
        std::fs::read(&path).unwrap()
    }

    /// A reproducible stream of pseudo-random non-negative numbers.
    fn numbers(seed: u64) -> impl FnMut() -> i64 {
        let mut x = seed;
        move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as i64
        }
    }

    /// Pages appended with writeback started after every one of them are the file's bytes, as
    /// without it: the buffer is flushed in order around each start.
    #[test]
    fn writeback_leaves_the_pages_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut want = vec![0u8; 2 * 512];
        for every in [512, 3 * 512, WRITEBACK_EVERY] {
            let path = dir.path().join(format!("w{every}"));
            let mut f = scratch(&path);
            f.writeback_every = every;
            want.truncate(2 * 512);
            for i in 0..20u8 {
                let page = vec![i + 1; 512];
                assert_eq!(f.append(&page).unwrap(), 3 + u32::from(i));
                want.extend_from_slice(&page);
            }
            // A root page rewritten in place after the appends.
            f.write_at(2, &[0xaa; 512]).unwrap();
            want[512..1024].fill(0xaa);
            f.close().unwrap();
            let got = std::fs::read(&path).unwrap();
            assert_eq!(got.len(), want.len(), "{every}");
            // The header's change counter and page count are the close's own.
            assert_eq!(got[100..], want[100..], "{every}");
            assert_eq!(u32::from_be_bytes(got[28..32].try_into().unwrap()), 22);
        }
    }

    /// An index kept by prefix writes the same tree as one of whole entries: prefixes whose
    /// times come out of order, entries added after a sort, and more prefixes than it keeps.
    #[test]
    fn entries_kept_by_prefix_write_the_whole_sorts_tree() {
        let dir = tempfile::tempdir().unwrap();
        let mut next = numbers(11);
        for (case, prefixes) in [(0, 3), (1, 40), (2, MAX_PREFIXES + 5)] {
            let (mut by_prefix, mut whole) = (PrefixIndex::new(2), IndexTree::new(2));
            let n = (prefixes * 2).max(5000);
            for i in 0..n as i64 {
                let p = if case == 2 {
                    i % prefixes as i64
                } else {
                    next() % prefixes as i64
                };
                // Mostly increasing times per prefix, some out of order, some negative.
                let t = if next() % 10 == 0 {
                    next() % 1000 - 500
                } else {
                    i * 3
                };
                let key = [p / 7 - 2, p % 7, t];
                by_prefix.add(key, i + 1);
                whole.add(key, i + 1);
                if i == n as i64 / 2 {
                    by_prefix.sort();
                }
            }
            let a = written(dir.path(), &format!("p{case}"), |f| {
                by_prefix.finish(f).unwrap()
            });
            let b = written(dir.path(), &format!("w{case}"), |f| {
                whole.finish(f).unwrap()
            });
            assert!(a.len() > 4 * 512, "{case}");
            assert!(a == b, "case {case}: the trees differ");
        }
    }

    /// An index of packed pairs writes the tree of its whole entries: keys with NULLs, keys
    /// that repeat, enough entries for the radix sort, entries added after a sort, and a key
    /// too large to pack (after which it keeps whole entries).
    #[test]
    fn packed_pairs_write_the_whole_entries_tree() {
        let dir = tempfile::tempdir().unwrap();
        let mut next = numbers(7);
        for case in 0..4 {
            let (mut packed, mut whole) = (PairIndex::new(2), IndexTree::new(2));
            let n = 20_000i64;
            for i in 0..n {
                // Two processes' correlation ids interleaved, some NULL, a few repeated.
                let corr = match next() % 20 {
                    0 => None,
                    1 => Some(5),
                    _ => Some(i / 2 + next() % 300),
                };
                let pid = match next() % 9 {
                    0 => None,
                    k => Some(1000 + k % 2),
                };
                let key = match (case, i) {
                    (1, 12_345) => (Some(u32::MAX as i64), pid),
                    (2, 17) => (corr, Some(-1)),
                    _ => (corr, pid),
                };
                packed.add(key, i + 1);
                whole.add(key, i + 1);
                if case == 3 && i == n / 2 {
                    packed.sort();
                }
            }
            assert_eq!(
                packed.whole.is_some(),
                case == 1 || case == 2,
                "case {case}"
            );
            let a = written(dir.path(), &format!("p{case}"), |f| {
                packed.finish(f).unwrap()
            });
            let b = written(dir.path(), &format!("w{case}"), |f| {
                whole.finish(f).unwrap()
            });
            assert!(a.len() > 4 * 512, "{case}");
            assert!(a == b, "case {case}: the trees differ");
        }
    }

    /// Short copies copy every length as `copy_from_slice` does.
    #[test]
    fn short_copies_copy_every_length() {
        let src: Vec<u8> = (1..=80).collect();
        for n in 0..=80 {
            let mut dst = vec![0u8; n];
            copy_short(&mut dst, &src[..n]);
            assert_eq!(dst, &src[..n], "{n}");
        }
    }

    /// Keys packed in pairs order as the pairs do, and the radix sort orders as a stable sort.
    #[test]
    fn packed_pairs_order_as_the_pairs() {
        let vals = [
            None,
            Some(0),
            Some(1),
            Some(255),
            Some(256),
            Some(70_000),
            Some(u32::MAX as i64 - 1),
        ];
        for a in vals {
            for b in vals {
                let p = pack_pair((a, b)).unwrap();
                assert_eq!(unpack_pair(p), (a, b));
                for c in vals {
                    for d in vals {
                        let q = pack_pair((c, d)).unwrap();
                        assert_eq!(p.cmp(&q), (a, b).cmp(&(c, d)), "{a:?} {b:?} {c:?} {d:?}");
                    }
                }
            }
        }
        for v in [Some(-1), Some(u32::MAX as i64), Some(i64::MAX)] {
            assert_eq!(pack_pair((v, None)), None);
            assert_eq!(pack_pair((None, v)), None);
        }
        let mut x = 3u64;
        for n in [0, 5, 5000, 100_000] {
            let mut v: Vec<(u64, i64)> = (0..n)
                .map(|i| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    // Keys spread over a few bytes, with repeats; rowids in order.
                    ((x >> 40) & 0x00ff_0f0f | 1 << 40, i)
                })
                .collect();
            let mut want = v.clone();
            want.sort_by_key(|e| e.0);
            radix_sort(&mut v);
            assert!(v == want, "n {n}");
        }
    }

    /// Every integer a record holds reads back from its serial type and body bytes, and a
    /// NULL column filled by `restore` gives the record built with the value in place.
    #[test]
    fn integers_read_back_and_restore_in_place() {
        let mut values = vec![
            0i64,
            1,
            -1,
            2,
            127,
            128,
            -128,
            -129,
            32767,
            -32769,
            i64::MAX,
            i64::MIN,
        ];
        for shift in 0..63 {
            values.extend([1i64 << shift, (1i64 << shift) - 1, -(1i64 << shift)]);
        }
        let (mut with, mut held, mut back) =
            (Record::default(), Record::default(), Record::default());
        for &v in &values {
            with.clear();
            with.int(v);
            let (types, body) = with.parts();
            assert_eq!(serial_size(types[0]), body.len(), "{v}");
            assert_eq!(serial_int(types[0], body), Some(v), "{v}");
            for &w in &values[..20] {
                with.clear();
                held.clear();
                for r in [&mut with, &mut held] {
                    r.int(w);
                    r.text("memcpy");
                }
                with.int(v);
                held.null();
                for r in [&mut with, &mut held] {
                    r.int(w);
                }
                let (types, body) = held.parts();
                let at = serial_size(types[0]) + serial_size(types[1]);
                assert_eq!(serial_int(types[2], &body[at..]), None);
                back.restore(types, body, 2, at, v);
                assert_eq!(back.finish(), with.finish(), "{v} after {w}");
            }
        }
    }

    #[test]
    fn varints_match_sqlite() {
        for (v, bytes) in [
            (0u64, vec![0u8]),
            (127, vec![0x7f]),
            (128, vec![0x81, 0x00]),
            (16383, vec![0xff, 0x7f]),
            (16384, vec![0x81, 0x80, 0x00]),
            (u64::MAX, vec![0xff; 9]),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            assert_eq!(varint_len(v), bytes.len(), "{v}");
        }
        for shift in 0..64 {
            let v = 1u64 << shift;
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn groups_never_leave_a_node_with_one_child() {
        for n in 2..200 {
            for cap in [25, 60, 100] {
                let g = group(n, cap, |_| 6);
                assert_eq!(g.first().unwrap().start, 0);
                assert_eq!(g.last().unwrap().end, n);
                for w in g.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                for r in &g {
                    assert!(r.len() >= 2, "n {n} cap {cap}: {g:?}");
                    assert!((r.len() - 1) * 6 <= cap.max(6), "n {n} cap {cap}: {g:?}");
                }
            }
        }
    }
}
