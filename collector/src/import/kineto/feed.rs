//! The document's bytes as the scanner reads them: the whole text (a mapped or read file), or
//! a window over a stream (a gzip file inflated as it is parsed), so that a compressed trace
//! never needs its inflated size in memory.
//!
//! A window holds the bytes from the element being read (an event, a key of the top level) to
//! some way past it. The scanner reads each element from the window; before an element, the
//! window is refilled when fewer than `ahead` bytes follow it, and when an element cannot be
//! read from what the window holds and the stream goes on, the window grows and the element is
//! read again from its start. So an element is only ever taken whole, and one that is not
//! JSON is refused once the stream has ended, as the whole text would have been.

use std::io::Read;

use super::scan::{Scan, ScanError, Scanner};

/// Window sizes: bytes read at a time, and bytes kept ahead of the element being read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub chunk: usize,
    pub ahead: usize,
}

impl Window {
    /// For traces: events are a few hundred bytes, top-level values a few kilobytes.
    pub const DEFAULT: Window = Window {
        chunk: 8 << 20,
        ahead: 256 << 10,
    };
}

pub(super) struct Feed<'r> {
    /// The whole document, when it is all in memory.
    whole: Option<&'r str>,
    /// The stream and its window: `buf[..len]` read, of it `buf[..valid]` checked UTF-8 (the
    /// rest is the start of a character cut by a read), `buf[0]` at `start` in the document.
    reader: Option<Box<dyn Read + 'r>>,
    buf: Vec<u8>,
    len: usize,
    valid: usize,
    start: u64,
    ended: bool,
    window: Window,
}

impl<'r> Feed<'r> {
    /// A document that is all in `text`.
    pub fn whole(text: &'r str) -> Feed<'r> {
        Feed {
            whole: Some(text),
            reader: None,
            buf: Vec::new(),
            len: 0,
            valid: 0,
            start: 0,
            ended: true,
            window: Window::DEFAULT,
        }
    }

    /// A document read from `reader` through a window of `window`'s sizes.
    pub fn stream(reader: Box<dyn Read + 'r>, window: Window) -> Feed<'r> {
        Feed {
            whole: None,
            reader: Some(reader),
            buf: Vec::new(),
            len: 0,
            valid: 0,
            start: 0,
            ended: false,
            window,
        }
    }

    /// The scanner over the window (or the whole text); positions are the window's.
    pub fn scanner(&self) -> Scanner<'_> {
        match self.whole {
            Some(text) => Scanner::new(text),
            // SAFETY: `buf[..valid]` was checked to be UTF-8 when it was read (`check`).
            None => Scanner::new(unsafe { std::str::from_utf8_unchecked(&self.buf[..self.valid]) }),
        }
    }

    /// Whether the window holds the rest of the document.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The bytes [`Feed::ready`] keeps ahead of an element.
    pub fn ahead(&self) -> usize {
        self.window.ahead
    }

    /// Makes at least the window's `ahead` bytes (or the rest of the document) follow window
    /// position `at`; returns where that byte now is.
    pub fn ready(&mut self, at: usize) -> Scan<usize> {
        if self.ended || self.valid - at >= self.window.ahead {
            return Ok(at);
        }
        self.fill(at, self.window.ahead)
    }

    /// Reads more after an element from window position `at` could not be read from the
    /// window: `None` when the document has no more (the element is not JSON), else where
    /// `at`'s byte now is, with at least twice as many bytes after it as before.
    pub fn more(&mut self, at: usize) -> Scan<Option<usize>> {
        if self.ended {
            return Ok(None);
        }
        let want = (2 * (self.valid - at)).max(self.window.ahead);
        self.fill(at, want).map(Some)
    }

    /// Drops the bytes before `keep`, then fills the buffer (at least a chunk, and room for
    /// `want` bytes after `keep`) or reads to the end of the stream.
    fn fill(&mut self, keep: usize, want: usize) -> Scan<usize> {
        self.buf.copy_within(keep..self.len, 0);
        self.start += keep as u64;
        self.len -= keep;
        self.valid -= keep;
        let size = want.saturating_add(8).max(self.window.chunk);
        if self.buf.len() < size {
            self.buf.resize(size, 0);
        }
        let reader = self.reader.as_mut().ok_or(ScanError::Invalid)?;
        while self.len < self.buf.len() {
            match reader.read(&mut self.buf[self.len..]) {
                Ok(0) => {
                    self.ended = true;
                    break;
                }
                Ok(n) => self.len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ScanError::Read(e)),
            }
        }
        self.check()?;
        Ok(0)
    }

    /// Checks the bytes read since the last check as UTF-8, leaving a character a read cut
    /// for the next (or refusing it at the end).
    fn check(&mut self) -> Scan<()> {
        match std::str::from_utf8(&self.buf[self.valid..self.len]) {
            Ok(_) => self.valid = self.len,
            Err(e) => {
                self.valid += e.valid_up_to();
                if e.error_len().is_some() || self.ended {
                    return Err(ScanError::NotUtf8(self.start + self.valid as u64));
                }
            }
        }
        Ok(())
    }
}
