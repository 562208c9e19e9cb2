//! A file mapped read-only into memory, for readers of large outside files (the Kineto
//! importer's JSON, the nsys importer's export pages).

/// A file mapped read-only into memory, whole.
///
/// Mapping spares reading the file into a buffer of its own: no copy out of the page cache,
/// no fresh pages to zero and fault in for the copy. As with any mapped file, a process that
/// truncates the file meanwhile makes reads past its new end fault (SIGBUS).
pub struct Mapped {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl Mapped {
    /// `file`'s first `len` bytes (its size), or `None` when it cannot be mapped (a pipe, an
    /// empty file): the caller then reads it.
    pub fn new(file: &std::fs::File, len: u64) -> Option<Mapped> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok().filter(|&n| n > 0)?;
        // SAFETY: a fresh private read-only mapping of an open file descriptor; the kernel
        // checks the arguments, and the mapping stays valid until `munmap` in `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Mapped {
            ptr: std::ptr::NonNull::new(p.cast())?,
            len,
        })
    }
}

/// The page size the mapping's advice rounds to.
const PAGE: usize = 4096;

impl Mapped {
    /// Lets the kernel drop the pages wholly inside `at..at + len` from this process's memory,
    /// for a reader done with them: read again, they fault back in from the page cache
    /// unchanged (the mapping is private and never written), so slices stay valid.
    pub fn release(&self, at: usize, len: usize) {
        let start = at.next_multiple_of(PAGE);
        let end = at.saturating_add(len).min(self.len) / PAGE * PAGE;
        self.advise(start, end, libc::MADV_DONTNEED);
    }

    /// Maps the pages of `at..at + len` in one call, for a reader about to read them all: the
    /// faults they would take one 64 KiB window at a time (after [`Mapped::release`], each
    /// time) become one system call, and the pages are there for the CPU to prefetch. Only a
    /// hint: where the kernel cannot (before Linux 5.14), the pages fault in as they are read.
    pub fn populate(&self, at: usize, len: usize) {
        #[cfg(target_os = "linux")]
        self.advise(
            at / PAGE * PAGE,
            at.saturating_add(len).min(self.len),
            libc::MADV_POPULATE_READ,
        );
        #[cfg(not(target_os = "linux"))]
        let _ = (at, len);
    }

    /// Gives the kernel `advice` on the mapping's bytes `start..end` (`start` on a page,
    /// `end` at most the mapping's length).
    fn advise(&self, start: usize, end: usize, advice: libc::c_int) {
        if start < end {
            // SAFETY: a range of this mapping (its callers bound it by `len`); the advice given
            // (dropping a private mapping's unwritten pages, reading pages in) keeps every
            // byte as the file has it.
            unsafe { libc::madvise(self.ptr.as_ptr().add(start).cast(), end - start, advice) };
        }
    }

    /// For a reader going from front to back, now past `at`: releases the pages from `*done`
    /// up to `at` in whole steps of `step` bytes (so one call per step), advancing `*done`.
    pub fn release_behind(&self, done: &mut usize, at: usize, step: usize) {
        let step = step.max(1);
        if at >= *done + step {
            let upto = at / step * step;
            self.release(*done, upto - *done);
            *done = upto;
        }
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` mapped, readable bytes that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, unmapped once; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// SAFETY: the mapping is read-only memory owned by the value, like a `Box<[u8]>`.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}
