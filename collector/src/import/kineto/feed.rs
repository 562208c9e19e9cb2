//! The document's bytes as the scanner reads them, through a window: the bytes of a document
//! in memory (a mapped or read file), or a stream (a gzip file inflated as it is parsed) read a
//! chunk at a time into a buffer, so that a compressed trace never needs its inflated size in
//! memory. The bytes are not checked as UTF-8 here: the scanner checks what it reads (see
//! `scan.rs`), so that each byte is looked at once while it is in cache.
//!
//! A window holds the bytes from the element being read (an event, a key of the top level) to
//! some way past it. The scanner reads each element from the window; before an element, the
//! window is extended when fewer than `ahead` bytes follow it, and when an element cannot be
//! read from what the window holds and the document goes on, the window grows and the element
//! is read again from its start. So an element is only ever taken whole, and one that is not
//! JSON is refused once the document has ended, as the whole text would have been.
//!
//! A mapped document lets the pages the parser has passed go from the process's memory, so
//! that a large trace does not stay resident while its events are written.

use std::cell::Cell;
use std::io::Read;

use fuseprof_store::Mapped;

use super::scan::{Scan, ScanError, Scanner};

/// Window sizes: bytes read (or added to the window) at a time, and bytes kept ahead of the
/// element being read.
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

/// Where the bytes come from.
enum Source<'r> {
    /// All of them in memory, in `map` when it is mapped (with the bytes released so far).
    Memory {
        bytes: &'r [u8],
        map: Option<&'r Mapped>,
        released: Cell<usize>,
    },
    /// A stream, read into `buf`: `buf[..len]` read.
    Stream {
        reader: Box<dyn Read + 'r>,
        buf: Vec<u8>,
        len: usize,
    },
}

pub(super) struct Feed<'r> {
    source: Source<'r>,
    /// The window's end: it is `bytes[..end]` or `buf[..end]`.
    end: usize,
    /// Whether the window reaches the end of the document.
    ended: bool,
    window: Window,
}

impl<'r> Feed<'r> {
    /// A document that is all in `bytes`, which lie in `map` when given: the pages the parser
    /// has passed are then released (see [`Feed::passed`]).
    pub fn memory(bytes: &'r [u8], map: Option<&'r Mapped>, window: Window) -> Feed<'r> {
        Feed {
            source: Source::Memory {
                bytes,
                map,
                released: Cell::new(0),
            },
            end: 0,
            ended: false,
            window,
        }
    }

    /// A document read from `reader`.
    pub fn stream(reader: Box<dyn Read + 'r>, window: Window) -> Feed<'r> {
        Feed {
            source: Source::Stream {
                reader,
                buf: Vec::new(),
                len: 0,
            },
            end: 0,
            ended: false,
            window,
        }
    }

    /// The scanner over the window; positions are the window's.
    pub fn scanner(&self) -> Scanner<'_> {
        Scanner::new(match &self.source {
            Source::Memory { bytes, .. } => &bytes[..self.end],
            Source::Stream { buf, .. } => &buf[..self.end],
        })
    }

    /// Whether the window holds the rest of the document.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The bytes [`Feed::ready`] keeps ahead of an element.
    pub fn ahead(&self) -> usize {
        self.window.ahead
    }

    /// The parser is past window position `at` for good: a mapped document lets the pages
    /// before it go from the process's memory (they are never read again).
    #[inline]
    pub fn passed(&self, at: usize) {
        if let Source::Memory {
            map: Some(map),
            released,
            ..
        } = &self.source
        {
            let mut done = released.get();
            map.release_behind(&mut done, at, self.window.chunk);
            released.set(done);
        }
    }

    /// Makes at least the window's `ahead` bytes (or the rest of the document) follow window
    /// position `at`; returns where that byte now is.
    pub fn ready(&mut self, at: usize) -> Scan<usize> {
        if self.ended || self.end - at >= self.window.ahead {
            return Ok(at);
        }
        self.extend(at, self.window.ahead)
    }

    /// Reads more after an element from window position `at` could not be read from the
    /// window: `None` when the document has no more (the element is not JSON), else where
    /// `at`'s byte now is, with at least twice as many bytes after it as before.
    pub fn more(&mut self, at: usize) -> Scan<Option<usize>> {
        if self.ended {
            return Ok(None);
        }
        let want = (2 * (self.end - at)).max(self.window.ahead);
        self.extend(at, want).map(Some)
    }

    /// Extends the window by at least a chunk, and until `want` bytes follow `keep` (or to the
    /// end); a stream's window drops the bytes before `keep` first. Returns where `keep`'s byte
    /// now is.
    fn extend(&mut self, keep: usize, want: usize) -> Scan<usize> {
        let chunk = self.window.chunk.max(1);
        match &mut self.source {
            Source::Memory { bytes, .. } => {
                self.end = (keep + want).max(self.end + chunk).min(bytes.len());
                self.ended = self.end == bytes.len();
                Ok(keep)
            }
            Source::Stream { reader, buf, len } => {
                buf.copy_within(keep..*len, 0);
                *len -= keep;
                let size = want.saturating_add(8).max(chunk);
                if buf.len() < size {
                    buf.resize(size, 0);
                }
                while *len < buf.len() {
                    match reader.read(&mut buf[*len..]) {
                        Ok(0) => {
                            self.ended = true;
                            break;
                        }
                        Ok(n) => *len += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(ScanError::Read(e)),
                    }
                }
                self.end = *len;
                Ok(0)
            }
        }
    }
}
