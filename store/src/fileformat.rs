//! Rules of SQLite's file format (<https://www.sqlite.org/fileformat2.html>) that every page
//! fuseprof writes or reads directly must keep, and the cheap checks of a run's header and
//! lock-byte page made when it is opened.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The byte at this offset starts the range SQLite's file locks use (`PENDING_BYTE`); the page
/// that holds it, the lock-byte page, never holds data, whatever the page size. A database
/// larger than 1 GiB has one.
pub(crate) const PENDING_BYTE: u64 = 0x4000_0000;

/// The number of the lock-byte page in a file of `page_size`-byte pages.
pub(crate) fn lock_byte_page(page_size: usize) -> u32 {
    (PENDING_BYTE / page_size as u64 + 1) as u32
}

/// The page after `n` that may hold data: the lock-byte page is passed over.
pub(crate) fn page_after(n: u32, page_size: usize) -> u32 {
    let next = n + 1;
    if next == lock_byte_page(page_size) {
        next + 1
    } else {
        next
    }
}

/// What is wrong with a file that SQLite would refuse, in words a user can act on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// A header field contradicts the file (its page size, its page count, its freelist).
    Header(String),
    /// Data on the lock-byte page: what fuseprof's page writer left in runs over 1 GiB before
    /// it passed that page over. `fuseprof repair` moves it.
    LockBytePage { page: u32 },
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::Header(why) => write!(f, "its header is malformed ({why})"),
            Malformed::LockBytePage { page } => write!(
                f,
                "it holds data on SQLite's lock-byte page ({page}, at 1 GiB), which SQLite \
                 refuses to read: an earlier fuseprof wrote runs over 1 GiB this way; \
                 `fuseprof repair` rewrites it into a valid file"
            ),
        }
    }
}

/// The parts of a header the checks need.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub page_size: usize,
    /// Page size less the bytes reserved at the end of each page.
    pub usable: usize,
    /// Pages in the file, from the header when SQLite would trust it, else from its length.
    pub pages: u64,
}

impl Header {
    /// Reads the header of a file of `len` bytes whose first 100 bytes are `h`; `None` when
    /// it is not an SQLite 3 file at all (which the caller reports its own way).
    pub(crate) fn parse(h: &[u8; 100], len: u64) -> Option<Result<Header, Malformed>> {
        if &h[..16] != b"SQLite format 3\0" {
            return None;
        }
        let be32 = |at: usize| u32::from_be_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        let page_size = match u16::from_be_bytes([h[16], h[17]]) {
            1 => 65_536,
            n => n as usize,
        };
        let bad = |why: String| Some(Err(Malformed::Header(why)));
        if page_size < 512 || !page_size.is_power_of_two() {
            return bad(format!("page size {page_size}"));
        }
        let in_header = u64::from(be32(28));
        let pages = if in_header > 0 && be32(24) == be32(92) {
            in_header
        } else {
            len / page_size as u64
        };
        if pages * page_size as u64 > len {
            return bad(format!(
                "{pages} pages of {page_size} bytes, but the file has {len} bytes"
            ));
        }
        let (freelist_trunk, freelist_pages) = (be32(32), be32(36));
        if u64::from(freelist_trunk) > pages
            || u64::from(freelist_pages) >= pages.max(1)
            || (freelist_trunk == 0) != (freelist_pages == 0)
        {
            return bad(format!(
                "a freelist of {freelist_pages} pages from page {freelist_trunk} in {pages} pages"
            ));
        }
        Some(Ok(Header {
            page_size,
            usable: page_size.saturating_sub(h[20] as usize),
            pages,
        }))
    }

    pub(crate) fn lock_byte_page(&self) -> Option<u32> {
        let page = lock_byte_page(self.page_size);
        (u64::from(page) <= self.pages).then_some(page)
    }

    /// The header of `file`, as [`Header::parse`] reads it.
    pub(crate) fn read(file: &File) -> std::io::Result<Option<Result<Header, Malformed>>> {
        let len = file.metadata()?.len();
        let mut h = [0u8; 100];
        if len < 100 {
            return Ok(None);
        }
        file.read_exact_at(&mut h, 0)?;
        Ok(Header::parse(&h, len))
    }
}

/// Checks what can be checked in two reads: the header against the file's length, and that
/// the lock-byte page, where the file has one, holds nothing (SQLite never writes it, so its
/// bytes are zeros or a hole). `Ok(None)` for a file that is not SQLite at all.
pub(crate) fn check(file: &File) -> std::io::Result<Option<Result<Header, Malformed>>> {
    let header = match Header::read(file)? {
        Some(Ok(header)) => header,
        other => return Ok(other),
    };
    if let Some(page) = header.lock_byte_page() {
        let mut bytes = vec![0u8; header.page_size];
        file.read_exact_at(&mut bytes, (u64::from(page) - 1) * header.page_size as u64)?;
        if bytes.iter().any(|&b| b != 0) {
            return Ok(Some(Err(Malformed::LockBytePage { page })));
        }
    }
    Ok(Some(Ok(header)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_byte_page_holds_offset_one_gib() {
        for size in [512usize, 1024, 4096, 8192, 65536] {
            let page = lock_byte_page(size);
            let start = (u64::from(page) - 1) * size as u64;
            assert!(
                start <= PENDING_BYTE && PENDING_BYTE < start + size as u64,
                "{size}"
            );
            assert_eq!(page_after(page - 1, size), page + 1);
            assert_eq!(page_after(page - 2, size), page - 1);
            assert_eq!(page_after(page, size), page + 1);
        }
        assert_eq!(lock_byte_page(4096), 262_145);
    }
}
