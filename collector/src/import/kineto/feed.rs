//! The document's bytes as the scanner reads them, through a window: the bytes of a document
//! in memory (a mapped or read file) checked as UTF-8 a chunk at a time as the parser reaches
//! them, or a stream (a gzip file inflated as it is parsed) read a chunk at a time into a
//! buffer, so that a compressed trace never needs its inflated size in memory.
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

/// Window sizes: bytes read (or checked) at a time, and bytes kept ahead of the element being
/// read.
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
    /// A stream, read into `buf`: `buf[..len]` read, `buf[0]` at `start` in the document.
    Stream {
        reader: Box<dyn Read + 'r>,
        buf: Vec<u8>,
        len: usize,
        start: u64,
    },
}

pub(super) struct Feed<'r> {
    source: Source<'r>,
    /// The window's bytes checked as UTF-8 (the window is `bytes[..valid]` or `buf[..valid]`;
    /// bytes read after it are the start of a character cut by a read).
    valid: usize,
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
            valid: 0,
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
                start: 0,
            },
            valid: 0,
            ended: false,
            window,
        }
    }

    /// The scanner over the window; positions are the window's.
    pub fn scanner(&self) -> Scanner<'_> {
        let bytes = match &self.source {
            Source::Memory { bytes, .. } => &bytes[..self.valid],
            Source::Stream { buf, .. } => &buf[..self.valid],
        };
        // SAFETY: the window's bytes were checked to be UTF-8 as they were added (`check`).
        Scanner::new(unsafe { std::str::from_utf8_unchecked(bytes) })
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
        if self.ended || self.valid - at >= self.window.ahead {
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
        let want = (2 * (self.valid - at)).max(self.window.ahead);
        self.extend(at, want).map(Some)
    }

    /// Extends the window by at least a chunk, and until `want` bytes follow `keep` (or to the
    /// end); a stream's window drops the bytes before `keep` first. Returns where `keep`'s byte
    /// now is.
    fn extend(&mut self, keep: usize, want: usize) -> Scan<usize> {
        let chunk = self.window.chunk.max(1);
        match &mut self.source {
            Source::Memory { bytes, .. } => {
                // Four bytes or more, so that a character cut by the last check is whole.
                let upto = (keep + want)
                    .max(self.valid + chunk.max(4))
                    .min(bytes.len());
                let ended = upto == bytes.len();
                self.ended = ended;
                self.valid += check(&bytes[self.valid..upto], ended, self.valid as u64)?;
                Ok(keep)
            }
            Source::Stream {
                reader,
                buf,
                len,
                start,
            } => {
                buf.copy_within(keep..*len, 0);
                *start += keep as u64;
                *len -= keep;
                self.valid -= keep;
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
                self.valid += check(
                    &buf[self.valid..*len],
                    self.ended,
                    *start + self.valid as u64,
                )?;
                Ok(0)
            }
        }
    }
}

/// How many of `bytes` (from offset `at` of the document) are whole UTF-8 characters: all but
/// a character cut at their end, which is left for the next check unless the document ends.
fn check(bytes: &[u8], ended: bool, at: u64) -> Scan<usize> {
    // The SIMD check passes a valid window several times as fast as the standard library's;
    // it says nothing of where an error is, so the standard one finds that.
    if simdutf8::basic::from_utf8(bytes).is_ok() {
        return Ok(bytes.len());
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => Ok(bytes.len()),
        Err(e) if e.error_len().is_none() && !ended => Ok(e.valid_up_to()),
        Err(e) => Err(ScanError::NotUtf8(at + e.valid_up_to() as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check` takes the whole characters of any cut of a text, refuses a bad byte or a cut
    /// character at the document's end at its offset, as the standard library's check places
    /// them.
    #[test]
    fn check_keeps_whole_characters_and_places_errors() {
        let text = "a\u{e9}b \u{2192} \u{1f600}!".as_bytes();
        for k in 0..=text.len() {
            let cut = &text[..k];
            let whole = match std::str::from_utf8(cut) {
                Ok(_) => k,
                Err(e) => e.valid_up_to(),
            };
            assert!(
                matches!(check(cut, false, 0), Ok(n) if n == whole),
                "cut at {k}"
            );
            match check(cut, true, 7) {
                Ok(n) => assert_eq!(n, k),
                Err(ScanError::NotUtf8(at)) => assert_eq!(at, 7 + whole as u64, "cut at {k}"),
                Err(_) => panic!("cut at {k}: another error"),
            }
        }
        let mut bad = text.to_vec();
        bad[5] = 0xff;
        for ended in [false, true] {
            assert!(matches!(
                check(&bad, ended, 100),
                Err(ScanError::NotUtf8(105))
            ));
        }
    }
}
