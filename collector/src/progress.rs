//! Counters that an import or an ingest advances as it goes, for whoever shows progress (the
//! binary draws a bar from them on a terminal). Advancing them is a few relaxed atomic stores,
//! so the hot loops pay nothing measurable; nothing here prints.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct Progress {
    phase: Mutex<&'static str>,
    bytes_total: AtomicU64,
    bytes_done: AtomicU64,
    events: AtomicU64,
}

/// What [`Progress::snapshot`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub phase: &'static str,
    /// 0 while the size of the phase's work is not known.
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub events: u64,
}

impl Progress {
    /// Starts a phase ("reading", "parsing", "indexing", ...) over `bytes_total` bytes (0: not
    /// known); the bytes done start again at 0, the events go on counting.
    pub fn phase(&self, name: &'static str, bytes_total: u64) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = name;
        self.bytes_done.store(0, Ordering::Relaxed);
        self.bytes_total.store(bytes_total, Ordering::Relaxed);
    }

    pub fn set_bytes_done(&self, bytes: u64) {
        self.bytes_done.store(bytes, Ordering::Relaxed);
    }

    pub fn add_bytes_done(&self, bytes: u64) {
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn set_events(&self, events: u64) {
        self.events.store(events, Ordering::Relaxed);
    }

    pub fn add_events(&self, events: u64) {
        self.events.fetch_add(events, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            phase: *self.phase.lock().unwrap_or_else(|e| e.into_inner()),
            bytes_total: self.bytes_total.load(Ordering::Relaxed),
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
        }
    }
}

/// A reader that adds what it reads to a [`Progress`]'s bytes done.
pub(crate) struct Counting<'p, R> {
    pub inner: R,
    pub progress: Option<&'p Progress>,
}

impl<R: std::io::Read> std::io::Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(p) = self.progress {
            p.add_bytes_done(n as u64);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn phases_reset_the_bytes_and_keep_the_events() {
        let p = Progress::default();
        p.phase("reading", 100);
        let mut r = Counting {
            inner: &[7u8; 60][..],
            progress: Some(&p),
        };
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        p.add_events(5);
        assert_eq!(
            p.snapshot(),
            Snapshot {
                phase: "reading",
                bytes_total: 100,
                bytes_done: 60,
                events: 5
            }
        );
        p.phase("parsing", 0);
        let s = p.snapshot();
        assert_eq!(
            (s.phase, s.bytes_total, s.bytes_done, s.events),
            ("parsing", 0, 0, 5)
        );
    }
}
