//! The document level of a Kineto trace: the top-level object (or a bare events array) read
//! element by element from the feed's window, each element handed to the scanner (`scan.rs`),
//! and to the sink only once it is read whole, so that a stream is parsed as it is read.

use super::feed::Feed;
use super::scan::{Scan, ScanError, Scanner, Shapes};
use super::{RawEvent, Sink};

/// Parses the whole document from `feed` into `sink`.
///
/// The document level (the top-level object, the events array) is read element by element
/// through [`element`], each from the feed's window, so that a stream is parsed as it is
/// read (see `feed.rs`); each element is handed to the sink only once it is read whole.
pub(super) fn parse(feed: &mut Feed<'_>, sink: &mut Sink<'_>) -> Scan<()> {
    let i = element(feed, 0, |s, i| Ok(s.token(s.ws(i))))?;
    let end = match feed.scanner().at(i) {
        b'{' => object(feed, i, sink)?,
        b'[' => events(feed, i, sink)?,
        _ => return Err(ScanError::Invalid),
    };
    // Nothing but whitespace to the end.
    let mut j = end;
    loop {
        let s = feed.scanner();
        j = s.ws(j);
        if j < s.len() {
            return Err(ScanError::Invalid);
        }
        match feed.more(j)? {
            Some(k) => j = k,
            None => return Ok(()),
        }
    }
}

/// Reads one element from window position `i` with `read` (`Ok(None)`: it cannot, from what
/// the window holds), growing the window and reading it again from its start while the
/// document goes on; returns `read`'s position (the window's, after any refill).
fn element(
    feed: &mut Feed<'_>,
    i: usize,
    mut read: impl FnMut(&Scanner<'_>, usize) -> Scan<Option<usize>>,
) -> Scan<usize> {
    let mut i = feed.ready(i)?;
    loop {
        if let Some(end) = read(&feed.scanner(), i)? {
            return Ok(end);
        }
        match feed.more(i)? {
            Some(k) => i = k,
            None => return Err(ScanError::Invalid),
        }
    }
}

/// The top-level object from `i` (its `{`): `traceEvents` is scanned, every other key read by
/// serde_json; the byte after it.
fn object(feed: &mut Feed<'_>, i: usize, sink: &mut Sink<'_>) -> Scan<usize> {
    let mut j = element(feed, i, |s, i| Ok(s.token(s.ws(i + 1))))?;
    if feed.scanner().at(j) == b'}' {
        return Ok(j + 1);
    }
    loop {
        let mut events_at = None;
        j = element(feed, j, |s, j| {
            s.member(j, sink, &mut events_at).map_err(ScanError::Sink)
        })?;
        if events_at.is_some() {
            j = events(feed, j, sink)?;
        }
        j = element(feed, j, |s, j| Ok(s.token(s.ws(j))))?;
        match feed.scanner().at(j) {
            b',' => {
                j = element(feed, j + 1, |s, j| Ok(s.token(s.ws(j))))?;
                if feed.scanner().at(j) == b'}' {
                    return Err(ScanError::Invalid);
                }
            }
            b'}' => return Ok(j + 1),
            _ => return Err(ScanError::Invalid),
        }
    }
}

/// The events array from `i` (its `[`, or whitespace before it): each element scanned, or read by serde_json when it
/// is unusual; the byte after it.
fn events(feed: &mut Feed<'_>, i: usize, sink: &mut Sink<'_>) -> Scan<usize> {
    // (`i` may be at whitespace before it, where the window ended.)
    let mut j = element(feed, i, |s, i| {
        let i = s.ws(i);
        Ok((s.at(i) == b'[')
            .then(|| s.ws(i + 1))
            .and_then(|k| s.token(k)))
    })?;
    if feed.scanner().at(j) == b']' {
        return Ok(j + 1);
    }
    // Whether `j` is after an event (at its separator) rather than at one.
    let mut after_event = false;
    let mut shapes = Shapes::default();
    loop {
        j = feed.ready(j)?;
        let s = feed.scanner();
        // Events are read from this window while the window's `ahead` bytes follow them;
        // then it is refilled.
        let refill_at = if feed.ended() {
            usize::MAX
        } else {
            s.len().saturating_sub(feed.ahead())
        };
        // Filled in place event after event: an event with its args is several hundred bytes,
        // too many to move around for each.
        let mut event = RawEvent::default();
        let ended = loop {
            if !after_event {
                if j > refill_at {
                    break None;
                }
                j = match shapes.event(&s, j, &mut event) {
                    Some(n) => {
                        sink.event(&event).map_err(ScanError::Sink)?;
                        n
                    }
                    None => match s.serde::<RawEvent<'_>>(j) {
                        Ok((event, n)) => {
                            sink.event(&event).map_err(ScanError::Sink)?;
                            n
                        }
                        Err(_) => break None,
                    },
                };
                after_event = true;
            }
            let k = s.ws(j);
            match s.at(k) {
                b',' => {
                    let Some(next) = s.token(s.ws(k + 1)) else {
                        break None;
                    };
                    if s.at(next) == b']' {
                        return Err(ScanError::Invalid);
                    }
                    j = next;
                    after_event = false;
                    feed.passed(j);
                }
                b']' => break Some(k + 1),
                _ => break None,
            }
        };
        if let Some(end) = ended {
            return Ok(end);
        }
        // The window ends before the next event (refilled by `ready`), or the event or
        // separator at `j` could not be read from it: read again from `j` with more.
        if after_event || j <= refill_at {
            match feed.more(j)? {
                Some(k) => j = k,
                None => return Err(ScanError::Invalid),
            }
        }
    }
}
