//! A gzip stream inflated on a thread of its own, ahead of the parser, where the process may
//! use more than one core: inflating is about a sixth of a compressed trace's import, and the
//! parser then reads inflated chunks as they come instead of waiting for each.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::Scope;

/// Chunks inflated ahead of the parser: bounded, so that memory stays a few chunks.
const AHEAD: usize = 4;

/// The reading end: inflated chunks, in order, then the end of the stream or its error.
pub(super) struct Inflated {
    chunks: Receiver<io::Result<Vec<u8>>>,
    /// Emptied chunks back to the inflating thread, to be filled again.
    spare: SyncSender<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    done: bool,
}

impl Inflated {
    /// Reads `source` (an inflating reader) on a thread of `scope`, `chunk` bytes at a time.
    /// The thread ends at the end of the stream, at its first error (passed on to the reader
    /// in turn), or once the reading end is dropped.
    pub fn spawn<'scope, R: Read + Send + 'scope>(
        scope: &'scope Scope<'scope, '_>,
        mut source: R,
        chunk: usize,
    ) -> Inflated {
        let (to_reader, chunks) = sync_channel::<io::Result<Vec<u8>>>(AHEAD);
        let (spare, spares) = sync_channel::<Vec<u8>>(AHEAD + 2);
        scope.spawn(move || loop {
            let mut buf = spares.try_recv().unwrap_or_default();
            buf.resize(chunk.max(1), 0);
            let mut len = 0;
            let mut failed = None;
            while len < buf.len() {
                match source.read(&mut buf[len..]) {
                    Ok(0) => break,
                    Ok(n) => len += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            buf.truncate(len);
            let end = len == 0 || failed.is_some();
            if len > 0 && to_reader.send(Ok(buf)).is_err() {
                return;
            }
            if let Some(e) = failed {
                let _ = to_reader.send(Err(e));
            }
            if end {
                return; // dropping the sender tells the reader the stream ended
            }
        });
        Inflated {
            chunks,
            spare,
            chunk: Vec::new(),
            at: 0,
            done: false,
        }
    }
}

impl Read for Inflated {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            match self.chunks.recv() {
                Ok(Ok(next)) => {
                    let used = std::mem::replace(&mut self.chunk, next);
                    self.at = 0;
                    let _ = self.spare.try_send(used);
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => self.done = true,
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives `data` a few bytes at a time, then fails if `fail` is set.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        fail: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                return if self.fail {
                    Err(io::Error::new(io::ErrorKind::InvalidData, "bad block"))
                } else {
                    Ok(0)
                };
            }
            let n = buf.len().min(3).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn gives_the_stream_in_order_then_its_end_or_error() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for chunk in [1, 5, 64, 4096, 20_000] {
            for fail in [false, true] {
                std::thread::scope(|s| {
                    let source = Trickle {
                        data: data.clone(),
                        at: 0,
                        fail,
                    };
                    let mut r = Inflated::spawn(s, source, chunk);
                    let mut got = Vec::new();
                    let result = r.read_to_end(&mut got);
                    assert_eq!(got, data, "chunk {chunk}");
                    assert_eq!(result.is_err(), fail, "chunk {chunk}");
                });
            }
        }
    }

    #[test]
    fn a_reader_dropped_early_ends_the_thread() {
        let data = vec![b'x'; 1 << 20];
        std::thread::scope(|s| {
            let source = Trickle {
                data,
                at: 0,
                fail: false,
            };
            let mut r = Inflated::spawn(s, source, 1024);
            let mut first = [0u8; 10];
            r.read_exact(&mut first).unwrap();
            drop(r);
            // The scope joins the thread: the test ends only if it stopped.
        });
    }
}
