//! Checking a run file as SQLite does, and repairing the runs an earlier fuseprof wrote with
//! data on SQLite's lock-byte page (every run over 1 GiB): SQLite refuses to read that page,
//! so those files read as "database disk image is malformed" everywhere but in fuseprof's own
//! page scanner.
//!
//! The repair moves the one page written there to the end of the file and points its one
//! reference (a parent's child pointer, a cell's first overflow page, or the previous page of
//! an overflow chain) at the new place; every other byte stays as it was, so no row is lost.
//! It writes a copy under a temporary name, checks the copy with `PRAGMA integrity_check`, and
//! only then renames it over the target: a failed repair leaves the original untouched.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::fileformat::{self, Malformed};
use crate::raw::{RawDb, Stmt};
use crate::reader::pages::{be16, be32, index_local_size, local_size, varint};
use crate::{Error, Result};

/// What `repair` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// The page moved off the lock-byte page and its new number, or `None` when the file had
    /// nothing to repair.
    pub moved: Option<(u32, u32)>,
    /// Where the valid file is.
    pub path: PathBuf,
}

/// Runs `PRAGMA integrity_check` (or `quick_check`, which leaves out the index contents) on
/// the file at `path`, read-only; the problems SQLite lists, empty when it says "ok".
pub fn integrity_check(path: &Path, quick: bool) -> Result<Vec<String>> {
    let mut db = RawDb::open_read_only(path)?;
    let sql = if quick {
        "PRAGMA quick_check"
    } else {
        "PRAGMA integrity_check"
    };
    let mut st = Stmt::prepare(db.handle(), sql)?;
    let mut problems = Vec::new();
    loop {
        match st.step() {
            Ok(true) => {
                let line = st.col_text(0).unwrap_or("").to_string();
                if line != "ok" {
                    problems.push(line);
                }
            }
            Ok(false) => return Ok(problems),
            // SQLite stops the check itself on some damage: that is the problem it names.
            Err(Error::Sqlite(why)) => {
                problems.push(why.trim_start_matches("step: ").to_string());
                return Ok(problems);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Rewrites the run at `path` into a valid SQLite file at `out` (over `path` when `None`).
/// A file without data on the lock-byte page is checked and left as it is; one SQLite finds
/// other faults in is refused, as is one whose damage is not the lock-byte page's.
pub fn repair(path: &Path, out: Option<&Path>) -> Result<Repaired> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| Error::Io {
            path: path.clone(),
            error,
        }
    };
    let file = File::open(path).map_err(io(path))?;
    let page = match fileformat::check(&file).map_err(io(path))? {
        None => {
            return Err(Error::NotAStore {
                path: path.into(),
                reason: "not an SQLite file".into(),
            })
        }
        Some(Err(Malformed::LockBytePage { page })) => page,
        Some(Err(m)) => return Err(malformed(path, m.to_string())),
        Some(Ok(_)) => {
            let problems = integrity_check(path, false)?;
            if let Some(first) = problems.first() {
                return Err(malformed(
                    path,
                    format!(
                        "PRAGMA integrity_check: {first} ({} problems); not the damage \
                         `repair` undoes",
                        problems.len()
                    ),
                ));
            }
            return Ok(Repaired {
                moved: None,
                path: path.into(),
            });
        }
    };
    drop(file);
    let target = out.unwrap_or(path);
    if out.is_some() && target.exists() {
        return Err(Error::OutputExists {
            path: target.into(),
        });
    }
    let partial = partial_name(target);
    let result = (|| {
        std::fs::copy(path, &partial).map_err(io(&partial))?;
        let moved = move_lock_page(&partial, page)?;
        let problems = integrity_check(&partial, false)?;
        if let Some(first) = problems.first() {
            return Err(malformed(
                path,
                format!(
                    "still malformed once the lock-byte page was moved (PRAGMA \
                     integrity_check: {first}); the file was left as it was"
                ),
            ));
        }
        std::fs::rename(&partial, target).map_err(io(target))?;
        Ok(moved)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    Ok(Repaired {
        moved: Some((page, result?)),
        path: target.into(),
    })
}

fn malformed(path: &Path, reason: String) -> Error {
    Error::Malformed {
        path: path.into(),
        reason,
    }
}

/// `target`'s partial file, beside it so that the rename is atomic.
fn partial_name(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".repair-partial");
    target.with_file_name(name)
}

/// Moves page `lock` of the file at `path` to a new last page and points its one reference
/// there; returns the new page's number.
fn move_lock_page(path: &Path, lock: u32) -> Result<u32> {
    let io = |error| Error::Io {
        path: path.into(),
        error,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let header = match fileformat::check(&file).map_err(io)? {
        Some(Err(Malformed::LockBytePage { .. })) => match fileformat::Header::read(&file) {
            Ok(Some(Ok(header))) => header,
            _ => return Err(malformed(path, "its header changed".into())),
        },
        _ => return Err(malformed(path, "its lock-byte page changed".into())),
    };
    let roots = {
        let mut db = RawDb::open_read_only(path)?;
        let mut st = Stmt::prepare(
            db.handle(),
            "SELECT rootpage FROM sqlite_schema WHERE rootpage > 0",
        )?;
        let mut roots = vec![1u32];
        while st.step()? {
            roots.push(u32::try_from(st.col_i64(0)).unwrap_or(0));
        }
        roots
    };
    let walk = Walker::new(&file, header.page_size, header.usable, header.pages);
    let refs = walk
        .references_to(&roots, lock)
        .map_err(|why| malformed(path, why))?;
    let &[(page, offset)] = refs.as_slice() else {
        return Err(malformed(
            path,
            format!(
                "the lock-byte page has {} references where a moved page has one",
                refs.len()
            ),
        ));
    };
    let size = header.page_size as u64;
    let new = u32::try_from(header.pages + 1)
        .ok()
        .filter(|&n| n < u32::MAX - 1)
        .ok_or_else(|| malformed(path, "no page number is left to move to".into()))?;
    let mut bytes = vec![0u8; header.page_size];
    file.read_exact_at(&mut bytes, (u64::from(lock) - 1) * size)
        .map_err(io)?;
    file.write_all_at(&bytes, header.pages * size).map_err(io)?;
    file.write_all_at(
        &new.to_be_bytes(),
        (u64::from(page) - 1) * size + offset as u64,
    )
    .map_err(io)?;
    file.write_all_at(&vec![0u8; header.page_size], (u64::from(lock) - 1) * size)
        .map_err(io)?;
    // The page count, and a change counter that the version-valid-for number matches, so that
    // SQLite trusts the count.
    let mut h = [0u8; 100];
    file.read_exact_at(&mut h, 0).map_err(io)?;
    let counter = u32::from_be_bytes(h[24..28].try_into().expect("4 bytes")).wrapping_add(1);
    h[24..28].copy_from_slice(&counter.to_be_bytes());
    h[28..32].copy_from_slice(&new.to_be_bytes());
    h[92..96].copy_from_slice(&counter.to_be_bytes());
    file.write_all_at(&h, 0).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(new)
}

/// Walks every b-tree of a file page by page, with its overflow chains.
struct Walker<'f> {
    file: &'f File,
    page_size: usize,
    usable: usize,
    pages: u64,
}

/// Where a page number is written: the page and the byte offset in it.
type Reference = (u32, usize);

impl<'f> Walker<'f> {
    fn new(file: &'f File, page_size: usize, usable: usize, pages: u64) -> Self {
        Walker {
            file,
            page_size,
            usable,
            pages,
        }
    }

    /// Every place in the trees rooted at `roots` that points at page `target`.
    fn references_to(&self, roots: &[u32], target: u32) -> Result<Vec<Reference>, String> {
        let mut seen = vec![false; self.pages as usize + 1];
        let mut found = Vec::new();
        let mut stack: Vec<u32> = roots.to_vec();
        let mut page = vec![0u8; self.page_size];
        let visit = |n: u32, seen: &mut Vec<bool>| -> Result<(), String> {
            let slot = seen
                .get_mut(n as usize)
                .filter(|_| n != 0)
                .ok_or_else(|| format!("page {n} is outside the file"))?;
            if *slot {
                return Err(format!("page {n} is referenced twice"));
            }
            *slot = true;
            Ok(())
        };
        let pointer = |n: u32, at: Reference, found: &mut Vec<Reference>| {
            if n == target {
                found.push(at);
            }
        };
        while let Some(n) = stack.pop() {
            visit(n, &mut seen)?;
            self.read(n, &mut page)?;
            let at = if n == 1 { 100 } else { 0 };
            let bad = || format!("page {n} is not a b-tree page");
            let kind = page[at];
            let interior = matches!(kind, 0x02 | 0x05);
            let index = matches!(kind, 0x02 | 0x0a);
            if !matches!(kind, 0x02 | 0x05 | 0x0a | 0x0d) {
                return Err(bad());
            }
            let cells = be16(&page, at + 3).ok_or_else(bad)?;
            let header = at + if interior { 12 } else { 8 };
            if interior {
                let right = be32(&page, at + 8).ok_or_else(bad)?;
                pointer(right, (n, at + 8), &mut found);
                stack.push(right);
            }
            for c in 0..cells {
                let cell = be16(&page, header + 2 * c).ok_or_else(bad)?;
                let mut p = cell;
                if interior {
                    let child = be32(&page, p).ok_or_else(bad)?;
                    pointer(child, (n, p), &mut found);
                    stack.push(child);
                    p += 4;
                }
                if kind == 0x05 {
                    continue; // an interior table cell holds only a key
                }
                let (size, len) = varint(page.get(p..).ok_or_else(bad)?).ok_or_else(bad)?;
                p += len;
                if kind == 0x0d {
                    p += varint(page.get(p..).ok_or_else(bad)?).ok_or_else(bad)?.1;
                }
                let size = usize::try_from(size).map_err(|_| bad())?;
                let local = if index {
                    index_local_size(self.usable, size)
                } else {
                    local_size(self.usable, size)
                };
                if local == size {
                    continue;
                }
                // The overflow chain: its first page, then each page's successor.
                let mut next = be32(&page, p + local).ok_or_else(bad)?;
                let mut from = (n, p + local);
                let mut rest = size - local;
                let mut overflow = vec![0u8; self.page_size];
                while rest > 0 {
                    pointer(next, from, &mut found);
                    visit(next, &mut seen)?;
                    self.read(next, &mut overflow)?;
                    from = (next, 0);
                    next = be32(&overflow, 0).ok_or_else(bad)?;
                    rest = rest.saturating_sub(self.usable - 4);
                }
            }
        }
        Ok(found)
    }

    fn read(&self, n: u32, buf: &mut [u8]) -> Result<(), String> {
        if n == 0 || u64::from(n) > self.pages {
            return Err(format!("page {n} is outside the file"));
        }
        self.file
            .read_exact_at(buf, (u64::from(n) - 1) * self.page_size as u64)
            .map_err(|e| format!("reading page {n}: {e}"))
    }
}
