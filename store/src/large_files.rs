//! The page writer and `repair` on files past 1, 2 and 4 GiB, built in seconds: SQLite makes a
//! small database, its free list then takes every page up to just below the offset under test
//! (the file stays sparse: a free-list leaf page is never read), and the writer's own code
//! appends the tables' and the index's pages from there, across the offset. SQLite's
//! `PRAGMA integrity_check` then judges the file, and SQL reads the rows back.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use libsqlite3_sys as ffi;

use crate::fileformat::{self, lock_byte_page, Malformed};
use crate::raw::{RawDb, Stmt};
use crate::writer::btree::{Geometry, PageFile, PrefixIndex, Record, TableTree};

const GIB: u64 = 1 << 30;

/// Runs `sql` on a new writable connection to `path`.
fn exec(path: &Path, sql: &str) {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut db = std::ptr::null_mut();
    // SAFETY: plain SQLite calls on a connection this function opens and closes.
    unsafe {
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE;
        assert_eq!(
            ffi::sqlite3_open_v2(c.as_ptr(), &mut db, flags, std::ptr::null()),
            0
        );
        let sql = CString::new(sql).unwrap();
        let rc = ffi::sqlite3_exec(
            db,
            sql.as_ptr(),
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(rc, 0, "{sql:?}");
        ffi::sqlite3_close(db);
    }
}

/// A database of `page_size`-byte pages at `path` with a table `t (a, b, c, s)` at root page 2
/// and its index `t_abc (a, b, c)` at root page 3, grown to `pages` pages: every page from 4
/// on but the lock-byte page is on the free list. Returns the file and its geometry.
fn sparse_db(path: &Path, page_size: usize, pages: u32) -> (File, Geometry) {
    exec(
        path,
        &format!(
            "PRAGMA page_size = {page_size}; PRAGMA journal_mode = DELETE; \
             CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER, s TEXT); \
             CREATE INDEX t_abc ON t (a, b, c);"
        ),
    );
    let mut db = RawDb::open_read_only(path).unwrap();
    let mut st = Stmt::prepare(
        db.handle(),
        "SELECT rootpage FROM sqlite_schema ORDER BY name",
    )
    .unwrap();
    let mut roots = Vec::new();
    while st.step().unwrap() {
        roots.push(st.col_i64(0));
    }
    drop(st);
    drop(db);
    assert_eq!(roots, [2, 3]);

    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let lock = lock_byte_page(page_size);
    let free: Vec<u32> = (4..=pages).filter(|&p| p != lock).collect();
    // Free-list trunk pages, each listing as many leaves as it holds.
    let per_trunk = page_size / 4 - 2;
    let groups: Vec<&[u32]> = free.chunks(per_trunk + 1).collect();
    for (i, g) in groups.iter().enumerate() {
        let mut trunk = vec![0u8; page_size];
        let next = groups.get(i + 1).map_or(0, |n| n[0]);
        trunk[..4].copy_from_slice(&next.to_be_bytes());
        trunk[4..8].copy_from_slice(&(g.len() as u32 - 1).to_be_bytes());
        for (j, leaf) in g[1..].iter().enumerate() {
            trunk[8 + 4 * j..12 + 4 * j].copy_from_slice(&leaf.to_be_bytes());
        }
        file.write_all_at(&trunk, (u64::from(g[0]) - 1) * page_size as u64)
            .unwrap();
    }
    file.set_len(u64::from(pages) * page_size as u64).unwrap();
    let mut h = [0u8; 100];
    file.read_exact_at(&mut h, 0).unwrap();
    let counter = u32::from_be_bytes(h[24..28].try_into().unwrap()) + 1;
    h[24..28].copy_from_slice(&counter.to_be_bytes());
    h[28..32].copy_from_slice(&pages.to_be_bytes());
    h[32..36].copy_from_slice(&groups.first().map_or(0, |g| g[0]).to_be_bytes());
    h[36..40].copy_from_slice(&(free.len() as u32).to_be_bytes());
    h[92..96].copy_from_slice(&counter.to_be_bytes());
    file.write_all_at(&h, 0).unwrap();
    let geo = Geometry {
        page_size,
        usable: page_size,
        pages,
    };
    (file, geo)
}

/// The rows written: `a`, `b`, `c` and a short text, every 40th long enough for an overflow
/// chain of a few pages.
fn row(i: i64, page_size: usize) -> (i64, i64, i64, String) {
    let len = if i % 40 == 0 {
        3 * page_size + i as usize % 97
    } else {
        (i as usize * 37) % 20
    };
    let text: String = (0..len)
        .map(|j| (b'a' + ((i as usize + j) % 26) as u8) as char)
        .collect();
    (i % 7, i % 3, i, text)
}

/// Writes `rows` rows into the table's and the index's pages after page `pages`, with the
/// lock-byte page used for data as earlier versions did when `as_before`. Returns the pages
/// the file ends with.
fn write_rows(path: &Path, page_size: usize, pages: u32, rows: i64, as_before: bool) -> u32 {
    let (file, geo) = sparse_db(path, page_size, pages);
    let mut pf = PageFile::new(file, geo);
    pf.lock_page_as_data = as_before;
    let mut table = TableTree::new(geo, 2);
    let mut index = PrefixIndex::new(3);
    let mut rec = Record::default();
    for i in 1..=rows {
        let (a, b, c, s) = row(i, page_size);
        rec.clear();
        rec.int(a);
        rec.int(b);
        rec.int(c);
        rec.text(&s);
        table.add(&mut pf, i, &mut rec).unwrap();
        index.add([a, b, c], i);
    }
    table.finish(&mut pf).unwrap();
    index.finish(&mut pf).unwrap();
    pf.close().unwrap();
    let f = File::open(path).unwrap();
    let mut head = [0u8; 100];
    f.read_exact_at(&mut head, 0).unwrap();
    u32::from_be_bytes(head[28..32].try_into().unwrap())
}

fn integrity(path: &Path) -> Vec<String> {
    crate::integrity_check(path, false).unwrap()
}

/// The rows as SQL reads them back, through the table and through the index.
fn read_back(path: &Path) -> (i64, i64, i64, i64) {
    let mut db = RawDb::open_read_only(path).unwrap();
    let mut st = Stmt::prepare(
        db.handle(),
        "SELECT count(*), sum(c), sum(length(s)), \
         (SELECT count(*) FROM t INDEXED BY t_abc WHERE a = 3 AND b = 1) FROM t",
    )
    .unwrap();
    assert!(st.step().unwrap());
    (st.col_i64(0), st.col_i64(1), st.col_i64(2), st.col_i64(3))
}

fn expected(rows: i64, page_size: usize) -> (i64, i64, i64, i64) {
    let rs: Vec<_> = (1..=rows).map(|i| row(i, page_size)).collect();
    (
        rows,
        rs.iter().map(|r| r.2).sum(),
        rs.iter().map(|r| r.3.len() as i64).sum(),
        rs.iter().filter(|r| r.0 == 3 && r.1 == 1).count() as i64,
    )
}

/// Starts from which the pages written cross `offset` with each kind of page on the first page
/// past it (a table leaf, an overflow page, a table interior page, an index leaf and interior
/// page), and with the first and the last page written there. `probe` is a file the same rows
/// were written to from page 10: page `10 + k` is the kind the `k`-th page written is.
fn starts_across(offset: u64, page_size: usize, probe: &Path) -> Vec<u32> {
    let bytes = std::fs::read(probe).unwrap();
    let pages = (bytes.len() / page_size) as u32;
    let mut ks = vec![1, pages - 10];
    let mut kinds = Vec::new();
    for k in 1..=pages - 10 {
        let kind = match bytes[(9 + k) as usize * page_size] {
            t @ (0x02 | 0x05 | 0x0a | 0x0d) => t,
            _ => 0,
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
            ks.push(k);
        }
    }
    // Interior pages are appended only below a root of two levels: at 4096-byte pages.
    let every = if page_size == 4096 { 5 } else { 3 };
    assert_eq!(kinds.len(), every, "the probe writes every kind of page");
    let first_past = (offset / page_size as u64) as u32 + 1;
    ks.iter().map(|k| first_past - k).collect()
}

/// Rows enough for trees of three levels at 4096-byte pages (about a thousand pages).
const ROWS: i64 = 80_000;

#[test]
fn pages_written_across_1_2_and_4_gib_pass_sqlites_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    for page_size in [4096usize, 65536] {
        let rows = if page_size == 4096 { ROWS } else { ROWS / 8 };
        let want = expected(rows, page_size);
        // How many pages the rows take, from a start well below the lock-byte page.
        let probe = dir.path().join(format!("probe-{page_size}"));
        write_rows(&probe, page_size, 10, rows, false);
        for offset in [GIB, 2 * GIB, 4 * GIB] {
            for start in starts_across(offset, page_size, &probe) {
                let path = dir.path().join(format!("t-{page_size}-{offset}-{start}"));
                let end = write_rows(&path, page_size, start, rows, false);
                let what = format!("{page_size}-byte pages from page {start}");
                assert!(u64::from(end) * page_size as u64 > offset, "{what}");
                assert_eq!(integrity(&path), Vec::<String>::new(), "{what}");
                assert_eq!(read_back(&path), want, "{what}");
                let f = File::open(&path).unwrap();
                assert!(
                    matches!(fileformat::check(&f).unwrap(), Some(Ok(_))),
                    "{what}"
                );
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}

#[test]
fn repair_moves_data_off_the_lock_byte_page_and_keeps_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let page_size = 4096;
    let want = expected(ROWS, page_size);
    let probe = dir.path().join("probe");
    write_rows(&probe, page_size, 10, ROWS, false);
    let lock = lock_byte_page(page_size);
    for start in starts_across(GIB, page_size, &probe) {
        let what = format!("from page {start}");
        let path = dir.path().join(format!("damaged-{start}"));
        write_rows(&path, page_size, start, ROWS, true);
        // As the affected versions left it: SQLite refuses it, the open check names it.
        assert!(!integrity(&path).is_empty(), "{what}");
        let f = File::open(&path).unwrap();
        assert!(
            matches!(
                fileformat::check(&f).unwrap(),
                Some(Err(Malformed::LockBytePage { page })) if page == lock
            ),
            "{what}"
        );
        let err = crate::Store::open(&path).err().unwrap().to_string();
        assert!(
            err.contains("lock-byte page") && !err.contains('\n'),
            "{err}"
        );

        let out = dir.path().join(format!("repaired-{start}"));
        let r = crate::repair(&path, Some(&out)).unwrap();
        assert_eq!(r.moved.map(|m| m.0), Some(lock), "{what}");
        assert_eq!(integrity(&out), Vec::<String>::new(), "{what}");
        assert_eq!(read_back(&out), want, "{what}");
        // In place too, and a second repair finds nothing to do.
        crate::repair(&path, None).unwrap();
        assert_eq!(integrity(&path), Vec::<String>::new(), "{what}");
        assert_eq!(crate::repair(&path, None).unwrap().moved, None, "{what}");
        assert!(!dir
            .path()
            .join(format!("damaged-{start}.repair-partial"))
            .exists());
        for p in [&path, &out] {
            std::fs::remove_file(p).unwrap();
        }
    }
}
