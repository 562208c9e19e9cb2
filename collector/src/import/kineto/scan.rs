//! The scanner over a Kineto trace's bytes.
//!
//! serde_json with derived structs spends most of an import's parsing time on its generic
//! machinery: a visitor call per key and value, an `Option` per field, the event moved several
//! times. Kineto writes every event in one shape (flat keys, short strings without escapes,
//! integer ids), which this scanner reads in one pass over the bytes, borrowing every string
//! from the buffer. Anything else in an event (an escape, a float where an id belongs, a
//! duplicate key, a syntax error) sends that one event through serde_json and the derived
//! `RawEvent`, so the records and the errors are exactly serde's. The document's outer levels
//! (the top-level object, `deviceProperties`, the version keys) are a handful of values and go
//! through serde_json as well.
//!
//! Kineto also writes a handful of event layouts (the same keys in the same order, only the
//! values differing) over and over. The scanner keeps each layout it has read as the bytes
//! between the values ([`Shapes`]), and reads an event that matches one by comparing those bytes
//! a word at a time and reading only its values, with the same functions as a key-by-key read.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{Args, DeviceProps, DistributedInfo, Num, Raw, RawEvent, Sink};

/// Why the scan stopped.
pub(super) enum ScanError {
    /// The text is not UTF-8, not JSON, or not a trace: the caller words it by checking the
    /// whole text as UTF-8, then reading it through serde_json ([`super::check`]), so the
    /// message and position are the standard library's or serde's.
    Invalid,
    /// The writer failed.
    Sink(fuseprof_store::Error),
    /// Reading the stream failed (corrupt gzip data).
    Read(std::io::Error),
}

pub(super) type Scan<T> = Result<T, ScanError>;

/// Nesting deeper than this in a value the scanner skips goes to serde_json (which has its
/// own limit, and its own error for it).
const MAX_DEPTH: u32 = 64;

/// Words of eight bytes [`Scanner::str_end`] tests itself before it hands a longer string to
/// memchr.
const SHORT_WORDS: usize = 4;

/// Flags (high bit of its byte) the first byte of `word` (little-endian) that ends a plain
/// string, leaves it to serde_json or has it checked as UTF-8: a quote, a backslash, a control
/// character or a byte outside ASCII. Bytes after
/// the first flagged one may be flagged wrongly (a borrow carries into them), so only the
/// lowest flag counts.
#[inline]
fn string_stops(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let quote = zero_byte(word ^ (ONES * b'"' as u64));
    let backslash = zero_byte(word ^ (ONES * b'\\' as u64));
    // A byte below 0x20 borrows when 0x20 is taken from it; one above 0x7f has its high bit.
    let control_or_high = (word.wrapping_sub(ONES * 0x20) | word) & HIGH;
    quote | backslash | control_or_high
}

/// How many of `word`'s bytes (little-endian, the first at the bottom) are ASCII digits
/// before the first that is not (8 when all are).
#[inline]
fn leading_digits(word: u64) -> usize {
    const HIGH_NIBBLES: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    // A digit's high nibble is 3, and stays 3 when 6 is added to it (0x3a..0x3f go to 4).
    // Adding carries out of a byte only from 0xfa up, which is flagged itself, so only the
    // lowest flag counts.
    let bad = ((word & HIGH_NIBBLES) ^ THREES)
        | ((word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES) ^ THREES);
    (bad.trailing_zeros() / 8) as usize
}

/// The value of eight ASCII digits (little-endian, the most significant at the bottom).
#[inline]
fn eight_digits(word: u64) -> u64 {
    let v = word.wrapping_sub(0x3030_3030_3030_3030);
    // Pairs, then quads, then the eight.
    let v = v.wrapping_mul(10).wrapping_add(v >> 8) & 0x00ff_00ff_00ff_00ff;
    let v = v.wrapping_mul(100).wrapping_add(v >> 16) & 0x0000_ffff_0000_ffff;
    v.wrapping_mul(10_000).wrapping_add(v >> 32) & 0xffff_ffff
}

/// The value of the first `n` (1 to 7) ASCII digits of `word`.
#[inline]
fn first_digits(word: u64, n: usize) -> u64 {
    // Shifted up past the other bytes, with zero digits filled in below: the same number.
    let pad = 8 * (8 - n) as u32;
    eight_digits((word << pad) | (0x3030_3030_3030_3030 >> (64 - pad)))
}

const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The scanner over a window of the document's bytes, which are not checked as UTF-8 ahead of
/// it: what it reads itself it checks (its punctuation, numbers and literals are ASCII, and a
/// string is ASCII by the word test that finds its end or else checked as UTF-8 whole), and
/// what it hands to serde_json is checked once read, so every byte of a document it accepts
/// has been checked one way or the other.
pub(super) struct Scanner<'a> {
    b: &'a [u8],
}

impl<'a> Scanner<'a> {
    pub fn new(bytes: &'a [u8]) -> Scanner<'a> {
        Scanner { b: bytes }
    }

    /// The text of bytes `i..e`, which the scanner has read and checked.
    #[inline(always)]
    fn text(&self, i: usize, e: usize) -> &'a str {
        let b = &self.b[i..e];
        debug_assert!(std::str::from_utf8(b).is_ok());
        // SAFETY: every caller passes bytes the scanner has read: strings through `str_end`,
        // which takes only UTF-8 (ASCII by its word test, else checked whole), and numbers,
        // literals and JSON's punctuation, which it takes byte by byte as ASCII.
        unsafe { std::str::from_utf8_unchecked(b) }
    }

    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    /// The byte at `i`, or 0 past the end (0 is valid nowhere the scanner looks).
    #[inline]
    pub(super) fn at(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }

    /// `i`, when it is a byte of the window (not its end).
    #[inline]
    pub(super) fn token(&self, i: usize) -> Option<usize> {
        (i < self.b.len()).then_some(i)
    }

    #[inline]
    pub(super) fn ws(&self, mut i: usize) -> usize {
        while matches!(self.at(i), b' ' | b'\n' | b'\r' | b'\t') {
            i += 1;
        }
        i
    }

    /// One value from byte `i` through serde_json, and the byte after it. Its bytes are then
    /// checked as UTF-8 (serde_json checks the strings it returns, not those it passes over):
    /// a value that is not is refused as not JSON, and the caller's check of the whole text
    /// says where.
    pub(super) fn serde<T: Deserialize<'a>>(&self, i: usize) -> Scan<(T, usize)> {
        let mut values = serde_json::Deserializer::from_slice(&self.b[i..]).into_iter::<T>();
        match values.next() {
            Some(Ok(v)) => {
                let n = i + values.byte_offset();
                match simdutf8::basic::from_utf8(&self.b[i..n]) {
                    Ok(_) => Ok((v, n)),
                    Err(_) => Err(ScanError::Invalid),
                }
            }
            _ => Err(ScanError::Invalid),
        }
    }

    /// One member of the top-level object from `j` (its key): the value of `traceEvents` is
    /// left to the caller (`events_at` set, the byte of its value returned), every other value
    /// read by serde_json into `sink`; the byte after it. `None` when it cannot be read.
    pub(super) fn member(
        &self,
        j: usize,
        sink: &mut Sink<'_>,
        events_at: &mut Option<usize>,
    ) -> Result<Option<usize>, fuseprof_store::Error> {
        if self.at(j) != b'"' {
            return Ok(None);
        }
        let Ok((key, n)) = self.serde::<Cow<'a, str>>(j) else {
            return Ok(None);
        };
        let j = self.ws(n);
        if self.at(j) != b':' {
            return Ok(None);
        }
        let j = self.ws(j + 1);
        let end = match key.as_ref() {
            "traceEvents" => {
                *events_at = Some(j);
                return Ok(Some(j));
            }
            "deviceProperties" => self.whole::<Vec<DeviceProps<'a>>>(j).map(|(props, n)| {
                sink.devices(props);
                n
            }),
            "cupti_version" | "cuda_runtime_version" | "cuda_driver_version" | "schemaVersion" => {
                self.whole::<Num<'a>>(j).map(|(v, n)| {
                    let v = Some(match v {
                        Num::Int(i) => i.to_string(),
                        Num::Float(f) => f.to_string(),
                        Num::Text(t) => t.into_owned(),
                    });
                    let run = &mut sink.run;
                    match key.as_ref() {
                        "cupti_version" => run.cupti_version = v,
                        "cuda_runtime_version" => run.cuda_runtime_version = v,
                        "cuda_driver_version" => run.cuda_driver_version = v,
                        _ => run.tool_version = v,
                    }
                    n
                })
            }
            // A distributed job's rank, and the wall-clock base of the timestamps: kept as
            // meta for merging ranks (`super::super::ranks`).
            "distributedInfo" => self.whole::<DistributedInfo<'a>>(j).map(|(info, n)| {
                let fields = [
                    ("distributed_rank", info.rank),
                    ("distributed_world_size", info.world_size),
                    ("distributed_backend", info.backend),
                ];
                for (key, value) in fields {
                    match value {
                        Some(Num::Text(t)) => sink.w.meta(key, t),
                        Some(v) => sink.w.meta(key, v.as_i64().unwrap_or_default()),
                        None => {}
                    }
                }
                n
            }),
            "baseTimeNanoseconds" => self.whole::<Num<'a>>(j).map(|(v, n)| {
                if let Some(ns) = v.as_i64() {
                    sink.w.meta("base_time_ns", ns);
                }
                n
            }),
            _ => self.whole::<IgnoredAny>(j).map(|(_, n)| n),
        };
        Ok(end)
    }

    /// A value through serde_json, when the window holds it whole: something follows it (a
    /// number at the window's end may go on past it).
    fn whole<T: Deserialize<'a>>(&self, j: usize) -> Option<(T, usize)> {
        let (v, n) = self.serde::<T>(j).ok()?;
        self.token(self.ws(n))?;
        Some((v, n))
    }

    /// The end (closing quote) of a string whose contents start at `i`, when it has no escape
    /// and no control character and is UTF-8 (which the scanner checks here, string by string:
    /// the window is not checked ahead of it).
    #[inline(always)]
    fn str_end(&self, i: usize) -> Option<usize> {
        // Most strings (keys, phases, categories, ids) are a few bytes long: eight bytes at a
        // time for the first ones, where memchr would spend more setting up than searching.
        let mut j = i;
        for _ in 0..SHORT_WORDS {
            let Some(word) = self.b.get(j..j + 8) else {
                break;
            };
            let m = string_stops(u64::from_le_bytes(word.try_into().ok()?));
            if m != 0 {
                let k = j + (m.trailing_zeros() / 8) as usize;
                return match self.b[k] {
                    b'"' => Some(k),
                    0x80.. => self.str_end_utf8(i),
                    _ => None,
                };
            }
            j += 8;
        }
        let rest = self.b.get(j..)?;
        let k = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[k] != b'"' {
            return None;
        }
        // Branch-free over the whole string, so that it vectorises: a byte below 0x20 or above
        // 0x7f (0x20 taken away, at least 0x60) sends it to the UTF-8 check.
        if rest[..k]
            .iter()
            .fold(false, |bad, &c| bad | (c.wrapping_sub(0x20) >= 0x60))
        {
            return self.str_end_utf8(i);
        }
        Some(j + k)
    }

    /// [`Scanner::str_end`] for a string with bytes outside ASCII: its end, when it has no
    /// escape and no control character and is UTF-8.
    #[cold]
    fn str_end_utf8(&self, i: usize) -> Option<usize> {
        let rest = self.b.get(i..)?;
        let k = memchr::memchr2(b'"', b'\\', rest)?;
        let s = &rest[..k];
        if rest[k] != b'"' || s.iter().any(|&c| c < 0x20) || std::str::from_utf8(s).is_err() {
            return None;
        }
        Some(i + k)
    }

    /// A string value (contents, byte after it) or `null`.
    #[inline(always)]
    fn opt_str(&self, i: usize) -> Option<(Option<Cow<'a, str>>, usize)> {
        match self.at(i) {
            b'"' => {
                let e = self.str_end(i + 1)?;
                Some((Some(Cow::Borrowed(self.text(i + 1, e))), e + 1))
            }
            b'n' => Some((None, self.literal(i, b"null")?)),
            _ => None,
        }
    }

    #[inline]
    fn literal(&self, i: usize, word: &[u8]) -> Option<usize> {
        (self.b.get(i..i + word.len())? == word).then_some(i + word.len())
    }

    /// An integer as serde_json reads it into an `i64` without loss (at most 18 digits, no
    /// fraction or exponent); anything else is left to serde_json.
    #[inline(always)]
    fn int(&self, i: usize) -> Option<(i64, usize)> {
        let neg = self.at(i) == b'-';
        let start = i + neg as usize;
        // Up to fifteen digits from two words; longer numbers, and those at the window's end, a
        // byte at a time.
        let Some(word) = self.word(start) else {
            return self.int_bytes(i);
        };
        let n = leading_digits(word);
        if n == 0 {
            return None;
        }
        let (n, v) = if n < 8 {
            (n, first_digits(word, n))
        } else {
            let Some(next) = self.word(start + 8) else {
                return self.int_bytes(i);
            };
            let high = eight_digits(word);
            match leading_digits(next) {
                0 => (8, high),
                8 => return self.int_bytes(i),
                m => (8 + m, high * POW10[m] + first_digits(next, m)),
            }
        };
        let v = v as i64;
        let j = start + n;
        if (n > 1 && self.b[start] == b'0') || matches!(self.at(j), b'.' | b'e' | b'E') {
            return None;
        }
        Some((if neg { -v } else { v }, j))
    }

    /// [`Scanner::int`] a byte at a time.
    fn int_bytes(&self, i: usize) -> Option<(i64, usize)> {
        let neg = self.at(i) == b'-';
        let start = i + neg as usize;
        let mut j = start;
        let mut v: i64 = 0;
        while let c @ b'0'..=b'9' = self.at(j) {
            if j - start == 18 {
                return None;
            }
            v = v * 10 + (c - b'0') as i64;
            j += 1;
        }
        let digits = j - start;
        if digits == 0
            || (digits > 1 && self.b[start] == b'0')
            || matches!(self.at(j), b'.' | b'e' | b'E')
        {
            return None;
        }
        Some((if neg { -v } else { v }, j))
    }

    /// The eight bytes from `j` as a little-endian word, where the window holds them.
    #[inline]
    fn word(&self, j: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.b.get(j..j + 8)?.try_into().ok()?))
    }

    /// The end of the run of ASCII digits from `j`, eight bytes at a time.
    #[inline]
    fn digits_end(&self, mut j: usize) -> usize {
        while let Some(word) = self.word(j) {
            let n = leading_digits(word);
            j += n;
            if n < 8 {
                return j;
            }
        }
        while self.at(j).is_ascii_digit() {
            j += 1;
        }
        j
    }

    /// A field read as [`Num`]: an integer, a string, a boolean or `null`.
    #[inline(always)]
    fn opt_num(&self, i: usize) -> Option<(Option<Num<'a>>, usize)> {
        match self.at(i) {
            b'-' | b'0'..=b'9' => {
                let (v, j) = self.int(i)?;
                Some((Some(Num::Int(v)), j))
            }
            b'"' => {
                let e = self.str_end(i + 1)?;
                Some((Some(Num::Text(Cow::Borrowed(self.text(i + 1, e)))), e + 1))
            }
            b'n' => Some((None, self.literal(i, b"null")?)),
            b't' => Some((Some(Num::Int(1)), self.literal(i, b"true")?)),
            b'f' => Some((Some(Num::Int(0)), self.literal(i, b"false")?)),
            _ => None,
        }
    }

    /// A field kept as its JSON text (like serde_json's `RawValue`), or `null`.
    #[inline]
    fn opt_raw(&self, i: usize) -> Option<(Option<Raw<'a>>, usize)> {
        if self.at(i) == b'n' {
            return Some((None, self.literal(i, b"null")?));
        }
        let e = self.skip(i, 0)?;
        Some((Some(Raw(self.text(i, e))), e))
    }

    /// `[x, y, z]` launch dimensions of integers, or `null`.
    fn opt_triple(&self, i: usize) -> Option<(Option<[i64; 3]>, usize)> {
        if self.at(i) == b'n' {
            return Some((None, self.literal(i, b"null")?));
        }
        if self.at(i) != b'[' {
            return None;
        }
        let mut dims = [0i64; 3];
        let mut j = i + 1;
        for (k, d) in dims.iter_mut().enumerate() {
            j = self.ws(j);
            let (v, n) = self.int(j)?;
            *d = v;
            j = self.ws(n);
            let sep = if k < 2 { b',' } else { b']' };
            if self.at(j) != sep {
                return None;
            }
            j += 1;
        }
        Some((Some(dims), j))
    }

    /// A time in microseconds of the decimal form Kineto writes (`-`, 1 to 18 integer digits
    /// without a leading zero, an optional fraction), as integer nanoseconds rounded as
    /// `super::time_ns` rounds them, and the byte after it; `None` for any other form (an
    /// exponent, a string, bad JSON), which [`Scanner::opt_raw`] and `time_ns` then read. One
    /// pass over the bytes, eight digits at a time, instead of a pass to find the number's end
    /// and another to read it.
    #[inline(always)]
    fn decimal_time(&self, i: usize) -> Option<(i64, usize)> {
        let neg = self.at(i) == b'-';
        let start = i + neg as usize;
        let mut j = start;
        let mut us: u64 = 0;
        loop {
            let Some(word) = self.b.get(j..j + 8) else {
                // Near the window's end: a byte at a time.
                while let c @ b'0'..=b'9' = self.at(j) {
                    if j - start == 18 {
                        return None;
                    }
                    us = us * 10 + u64::from(c - b'0');
                    j += 1;
                }
                break;
            };
            let word = u64::from_le_bytes(word.try_into().ok()?);
            let n = leading_digits(word);
            if j - start + n > 18 {
                return None;
            }
            if n == 8 {
                us = us * POW10[8] + eight_digits(word);
                j += 8;
                continue;
            }
            if n > 0 {
                us = us * POW10[n] + first_digits(word, n);
                j += n;
            }
            break;
        }
        let digits = j - start;
        if digits == 0 || (digits > 1 && self.b[start] == b'0') {
            return None;
        }
        let mut frac = 0;
        if self.at(j) == b'.' {
            let from = j + 1;
            // Up to seven digits from one word (Kineto writes one or three); more a byte at a
            // time.
            if let Some(word) = self.word(from) {
                let n = leading_digits(word);
                if n == 0 {
                    return None;
                }
                if n < 8 {
                    let k = n.min(3);
                    let half_up = n > 3 && (word >> 24) as u8 >= b'5';
                    frac = (first_digits(word, k) * POW10[3 - k]) as i64 + i64::from(half_up);
                    j = from + n;
                    if matches!(self.at(j), b'e' | b'E') {
                        return None;
                    }
                    let ns = (us as i64).checked_mul(1000)?.checked_add(frac)?;
                    return Some((if neg { -ns } else { ns }, j));
                }
            }
            let mut k = from;
            while self.at(k).is_ascii_digit() {
                k += 1;
            }
            if k == from {
                return None;
            }
            frac = super::frac_ns(&self.b[from..k])?;
            j = k;
        }
        if matches!(self.at(j), b'e' | b'E') {
            return None;
        }
        let ns = (us as i64).checked_mul(1000)?.checked_add(frac)?;
        Some((if neg { -ns } else { ns }, j))
    }

    /// A time field: its JSON text (as [`Scanner::opt_raw`] keeps it) and, where it has the
    /// decimal form [`Scanner::decimal_time`] reads, its nanoseconds.
    #[inline(always)]
    fn opt_time(&self, i: usize) -> Option<(Option<Raw<'a>>, Option<i64>, usize)> {
        if matches!(self.at(i), b'-' | b'0'..=b'9') {
            if let Some((ns, e)) = self.decimal_time(i) {
                return Some((Some(Raw(self.text(i, e))), Some(ns), e));
            }
        }
        let (v, n) = self.opt_raw(i)?;
        Some((v, None, n))
    }

    /// The end of a number, by JSON's grammar.
    fn number_end(&self, i: usize) -> Option<usize> {
        let mut j = i + (self.at(i) == b'-') as usize;
        match self.at(j) {
            b'0' => j += 1,
            b'1'..=b'9' => j = self.digits_end(j),
            _ => return None,
        }
        if self.at(j) == b'.' {
            j += 1;
            if !self.at(j).is_ascii_digit() {
                return None;
            }
            j = self.digits_end(j);
        }
        if matches!(self.at(j), b'e' | b'E') {
            j += 1;
            if matches!(self.at(j), b'+' | b'-') {
                j += 1;
            }
            if !self.at(j).is_ascii_digit() {
                return None;
            }
            j = self.digits_end(j);
        }
        Some(j)
    }

    /// The end of a number of the plain forms Kineto writes for the values fuseprof passes
    /// over (`27`, `-3`, `22.222221`: digits, without a leading zero, and an optional fraction),
    /// read a word at a time in one place; `None` for anything else (an exponent, a leading
    /// zero, a number running to the window's end), which [`Scanner::skip`] then reads.
    #[inline]
    fn plain_number_end(&self, i: usize) -> Option<usize> {
        let start = i + (self.at(i) == b'-') as usize;
        let run = |j: usize| -> Option<usize> {
            let mut k = j;
            loop {
                let n = leading_digits(self.word(k)?);
                k += n;
                if n < 8 {
                    return Some(k);
                }
            }
        };
        let mut j = run(start)?;
        if j == start || (j - start > 1 && self.b[start] == b'0') {
            return None;
        }
        if self.at(j) == b'.' {
            let k = run(j + 1)?;
            if k == j + 1 {
                return None;
            }
            j = k;
        }
        (!matches!(self.at(j), b'e' | b'E')).then_some(j)
    }

    /// The end of any value, checked as serde_json checks a value it ignores; containers
    /// nest at most to `MAX_DEPTH` counting from `depth`.
    fn skip(&self, i: usize, depth: u32) -> Option<usize> {
        if !matches!(self.at(i), b'[' | b'{') {
            return self.scalar_end(i);
        }
        // One loop over the nesting rather than a call per value: the open containers as
        // bits, an object's 1.
        let mut open = 0u32;
        let mut objects = 0u64;
        let mut j = i;
        loop {
            // At a value.
            let c = self.at(j);
            if c == b'[' || c == b'{' {
                if depth + open >= MAX_DEPTH {
                    return None;
                }
                open += 1;
                objects = objects << 1 | u64::from(c == b'{');
                j = self.ws(j + 1);
                if self.at(j) == if c == b'[' { b']' } else { b'}' } {
                    j += 1;
                    open -= 1;
                    objects >>= 1;
                } else {
                    if c == b'{' {
                        j = self.key(j)?;
                    }
                    continue;
                }
            } else {
                // (Kineto's shapes and types: integers and plain strings.)
                j = match c {
                    b'"' => self.str_end(j + 1)? + 1,
                    _ => match self.plain_number_end(j) {
                        Some(e) => e,
                        None => self.scalar_end(j)?,
                    },
                };
            }
            // After a value: its container's separator or end.
            loop {
                if open == 0 {
                    return Some(j);
                }
                j = self.ws(j);
                let object = objects & 1 == 1;
                match self.at(j) {
                    b',' => {
                        j = self.ws(j + 1);
                        if object {
                            j = self.key(j)?;
                        }
                        break;
                    }
                    b']' if !object => {}
                    b'}' if object => {}
                    _ => return None,
                }
                j += 1;
                open -= 1;
                objects >>= 1;
            }
        }
    }

    /// A member's key and colon from `j` (its quote), and the byte of its value.
    #[inline]
    fn key(&self, j: usize) -> Option<usize> {
        if self.at(j) != b'"' {
            return None;
        }
        let j = self.ws(self.str_end(j + 1)? + 1);
        (self.at(j) == b':').then(|| self.ws(j + 1))
    }

    /// The end of a string, number or literal.
    #[inline]
    fn scalar_end(&self, i: usize) -> Option<usize> {
        match self.at(i) {
            b'"' => Some(self.str_end(i + 1)? + 1),
            b'-' | b'0'..=b'9' => self.number_end(i),
            b't' => self.literal(i, b"true"),
            b'f' => self.literal(i, b"false"),
            b'n' => self.literal(i, b"null"),
            _ => None,
        }
    }

    /// Calls `field(key, at)` for each member of the object at `i` (which returns the byte
    /// after the value, or `None` to give up), and returns the byte after the object.
    #[inline]
    fn members(
        &self,
        i: usize,
        mut field: impl FnMut(&'a [u8], usize) -> Option<usize>,
    ) -> Option<usize> {
        if self.at(i) != b'{' {
            return None;
        }
        let mut j = self.ws(i + 1);
        if self.at(j) == b'}' {
            return Some(j + 1);
        }
        loop {
            if self.at(j) != b'"' {
                return None;
            }
            let e = self.str_end(j + 1)?;
            let key = &self.b[j + 1..e];
            j = self.ws(e + 1);
            if self.at(j) != b':' {
                return None;
            }
            j = self.ws(field(key, self.ws(j + 1))?);
            match self.at(j) {
                b',' => j = self.ws(j + 1),
                b'}' => return Some(j + 1),
                _ => return None,
            }
        }
    }

    /// One event in Kineto's usual shape into `e`, and the byte after it; `None` for serde_json
    /// to read it. With `layout`, also the field and span of each value it read, in order.
    fn event(
        &self,
        i: usize,
        e: &mut RawEvent<'a>,
        mut layout: Option<&mut Vec<(Field, usize, usize)>>,
    ) -> Option<usize> {
        *e = RawEvent::default();
        let mut seen = 0u32;
        self.members(i, |key, j| {
            let field = Field::top(key);
            if field != Field::Args {
                return self.event_member(field, j, &mut seen, e, &mut layout);
            }
            field.first_in(&mut seen)?;
            if self.at(j) == b'n' {
                return self.literal(j, b"null");
            }
            e.args = Some(Args::default());
            let mut seen = 0u32;
            self.members(j, |key, j| {
                self.event_member(Field::arg(key), j, &mut seen, e, &mut layout)
            })
        })
    }

    /// The value of member `field` at `j` into `e` (`seen`: the fields met so far in its
    /// object), noted in `layout`; the byte after it.
    #[inline]
    fn event_member(
        &self,
        field: Field,
        j: usize,
        seen: &mut u32,
        e: &mut RawEvent<'a>,
        layout: &mut Option<&mut Vec<(Field, usize, usize)>>,
    ) -> Option<usize> {
        field.first_in(seen)?;
        let n = self.read(field, j, e)?;
        if let Some(l) = layout.as_deref_mut() {
            l.push((field, j, n));
        }
        Some(n)
    }

    /// The value of `field` at `j` into `e` (whose `args` is there for an args field), and the
    /// byte after it.
    #[inline(always)]
    fn read(&self, field: Field, j: usize, e: &mut RawEvent<'a>) -> Option<usize> {
        let num = |v: &mut Option<Num<'a>>| {
            let (x, n) = self.opt_num(j)?;
            *v = x;
            Some(n)
        };
        let str = |v: &mut Option<Cow<'a, str>>| {
            let (x, n) = self.opt_str(j)?;
            *v = x;
            Some(n)
        };
        let raw = |v: &mut Option<Raw<'a>>| {
            let (x, n) = self.opt_raw(j)?;
            *v = x;
            Some(n)
        };
        let triple = |v: &mut Option<[i64; 3]>| {
            let (x, n) = self.opt_triple(j)?;
            *v = x;
            Some(n)
        };
        let time = |v: &mut Option<Raw<'a>>, ns: &mut Option<i64>| {
            let (x, t, n) = self.opt_time(j)?;
            *v = x;
            *ns = t;
            Some(n)
        };
        match field {
            Field::Skip => match self.plain_number_end(j) {
                Some(n) => Some(n),
                None => self.skip(j, 1),
            },
            Field::Ph => str(&mut e.ph),
            Field::Cat => str(&mut e.cat),
            Field::Name => str(&mut e.name),
            Field::Pid => num(&mut e.pid),
            Field::Tid => num(&mut e.tid),
            Field::Id => num(&mut e.id),
            Field::Ts => time(&mut e.ts, &mut e.ts_ns),
            Field::Dur => time(&mut e.dur, &mut e.dur_ns),
            // (An event's `args` object is read member by member by the caller.)
            Field::Args => None,
            _ => {
                let a = e.args.as_mut()?;
                match field {
                    Field::ExternalId => num(&mut a.external_id),
                    Field::Correlation => num(&mut a.correlation),
                    Field::Device => num(&mut a.device),
                    Field::Stream => num(&mut a.stream),
                    Field::Grid => triple(&mut a.grid),
                    Field::Block => triple(&mut a.block),
                    Field::Registers => num(&mut a.registers),
                    Field::SharedMemory => num(&mut a.shared_memory),
                    Field::Bytes => num(&mut a.bytes),
                    Field::Kind => num(&mut a.kind),
                    Field::ArgName => num(&mut a.name),
                    Field::InputDims => raw(&mut a.input_dims),
                    _ => raw(&mut a.input_types),
                }
            }
        }
    }

    /// Whether the window holds `lit` at `j`.
    #[inline]
    fn lit(&self, j: usize, lit: &Literal) -> bool {
        let n = lit.bytes.len();
        match self.b.get(j..j + LITERAL_HEAD) {
            // The first 32 bytes as four words, those past the literal masked off: no branch
            // on the literal's length, which changes from one node to the next.
            Some(w) => {
                let mut diff = 0;
                for (k, (&want, &mask)) in lit.head.iter().zip(&lit.mask).enumerate() {
                    let x = u64::from_le_bytes(w[8 * k..8 * k + 8].try_into().unwrap_or_default());
                    diff |= (x ^ want) & mask;
                }
                diff == 0
                    && (n <= LITERAL_HEAD
                        || self.b.get(j + LITERAL_HEAD..j + n) == Some(&lit.bytes[LITERAL_HEAD..]))
            }
            None => self.b.get(j..j + n) == Some(&*lit.bytes),
        }
    }
}

/// What a member's value is read into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    /// A value fuseprof does not keep, checked and passed over.
    Skip,
    Ph,
    Cat,
    Name,
    Pid,
    Tid,
    Ts,
    Dur,
    Id,
    Args,
    ExternalId,
    Correlation,
    Device,
    Stream,
    Grid,
    Block,
    Registers,
    SharedMemory,
    Bytes,
    Kind,
    ArgName,
    InputDims,
    InputTypes,
}

impl Field {
    /// The field of an event's key.
    #[inline]
    fn top(key: &[u8]) -> Field {
        match key {
            b"ph" => Field::Ph,
            b"cat" => Field::Cat,
            b"name" => Field::Name,
            b"pid" => Field::Pid,
            b"tid" => Field::Tid,
            b"ts" => Field::Ts,
            b"dur" => Field::Dur,
            b"id" => Field::Id,
            b"args" => Field::Args,
            _ => Field::Skip,
        }
    }

    /// The field of a key of an event's `args`.
    #[inline]
    fn arg(key: &[u8]) -> Field {
        match key {
            b"External id" => Field::ExternalId,
            b"correlation" => Field::Correlation,
            b"device" => Field::Device,
            b"stream" => Field::Stream,
            b"grid" => Field::Grid,
            b"block" => Field::Block,
            b"registers per thread" => Field::Registers,
            b"shared memory" => Field::SharedMemory,
            b"bytes" => Field::Bytes,
            b"kind" => Field::Kind,
            b"name" => Field::ArgName,
            b"Input Dims" => Field::InputDims,
            b"Input type" => Field::InputTypes,
            _ => Field::Skip,
        }
    }

    /// Marks the field as met in its object (`seen`); `None` when it was already: serde's
    /// derived structs refuse a duplicate key. A value passed over may repeat.
    #[inline]
    fn first_in(self, seen: &mut u32) -> Option<()> {
        if self == Field::Skip {
            return Some(());
        }
        let bit = 1 << (self as u32);
        if *seen & bit != 0 {
            return None;
        }
        *seen |= bit;
        Some(())
    }
}

/// The layouts of the events met so far, as a tree: an event's layout is the bytes before each
/// value it reads (braces, keys, separators, whitespace, an `args` of `null` or `{}`: everything
/// but the values read), the field of each value, and the bytes after the last one. An event
/// whose bytes around its values are a known layout's has the same keys in the same order, so
/// reading only its values gives what [`Scanner::event`] gives: each value is read by the same
/// function as there. Kineto writes a handful of layouts over and over; the tree shares their
/// common beginnings, so an event is read in one pass whichever it has.
pub(super) struct Shapes {
    /// `nodes[0]` is the root; a node is reached by its literal and read by its field.
    nodes: Vec<Node>,
    layout: Vec<(Field, usize, usize)>,
}

struct Node {
    lit: Literal,
    /// `None`: the event ends after `lit`.
    field: Option<Field>,
    /// (At an end) whether the event has an `args` object.
    args: bool,
    children: Vec<u32>,
}

/// Nodes kept at most: a trace whose events keep changing their keys stops adding layouts
/// there, and reads the rest through [`Scanner::event`].
const MAX_NODES: usize = 4096;
/// The longest literal kept: an event with more bytes between two values (a long key) keeps
/// its layout out of the tree, so that the tree stays within a few megabytes.
const MAX_LITERAL: usize = 256;

impl Default for Shapes {
    fn default() -> Self {
        Shapes {
            nodes: vec![Node {
                lit: Literal::new(b""),
                field: None,
                args: false,
                children: Vec::new(),
            }],
            layout: Vec::new(),
        }
    }
}

impl Shapes {
    /// One event at `i` into `e` and the byte after it: through a known layout, else through
    /// [`Scanner::event`], whose layout is then kept; `None` for serde_json to read it.
    #[inline]
    pub fn event<'a>(&mut self, s: &Scanner<'a>, i: usize, e: &mut RawEvent<'a>) -> Option<usize> {
        if let Some(n) = self.walk(s, i, e) {
            return Some(n);
        }
        self.layout.clear();
        let n = s.event(i, e, Some(&mut self.layout))?;
        if self.nodes.len() + self.layout.len() < MAX_NODES {
            self.learn(s, i, n, e.args.is_some());
        }
        Some(n)
    }

    /// Reads the event at `i` down the tree: at each node the first child whose literal is
    /// next and whose value reads; `None` where none does.
    #[inline]
    fn walk<'a>(&mut self, s: &Scanner<'a>, i: usize, e: &mut RawEvent<'a>) -> Option<usize> {
        // `args` is there from the start, so that an args field needs no check, and taken away
        // at the end of a layout without it. (The scanner only borrows from the text, so the
        // event it replaces owns nothing to drop.)
        std::mem::forget(std::mem::replace(
            e,
            RawEvent {
                args: Some(Args::default()),
                ..RawEvent::default()
            },
        ));
        let mut node = 0;
        let mut j = i;
        'down: loop {
            let children = &self.nodes[node].children;
            for (k, &c) in children.iter().enumerate() {
                let child = &self.nodes[c as usize];
                if !s.lit(j, &child.lit) {
                    continue;
                }
                let at = j + child.lit.bytes.len();
                let Some(field) = child.field else {
                    if !child.args {
                        e.args = None;
                    }
                    return Some(at);
                };
                // (A value that does not read leaves `e` as it was: another child may fit.)
                if let Some(n) = s.read(field, at, e) {
                    if k > 0 {
                        // The more common of two siblings drifts first.
                        self.nodes[node].children.swap(k - 1, k);
                    }
                    j = n;
                    node = c as usize;
                    continue 'down;
                }
            }
            return None;
        }
    }

    /// Adds the layout of the event [`Scanner::event`] read from `i` to `end` (its values at
    /// `self.layout`).
    fn learn(&mut self, s: &Scanner<'_>, i: usize, end: usize, args: bool) {
        let mut node = 0;
        let mut at = i;
        let mut steps = Vec::with_capacity(self.layout.len() + 1);
        for &(field, from, to) in &self.layout {
            steps.push((&s.b[at..from], Some(field)));
            at = to;
        }
        steps.push((&s.b[at..end], None));
        if steps.iter().any(|(lit, _)| lit.len() > MAX_LITERAL) {
            return;
        }
        for (lit, field) in steps {
            let lit = Literal::new(lit);
            let found = self.nodes[node].children.iter().copied().find(|&c| {
                let n = &self.nodes[c as usize];
                n.lit == lit && n.field == field && (field.is_some() || n.args == args)
            });
            node = match found {
                Some(c) => c as usize,
                None => {
                    self.nodes.push(Node {
                        lit,
                        field,
                        args,
                        children: Vec::new(),
                    });
                    let c = self.nodes.len() - 1;
                    self.nodes[node].children.push(c as u32);
                    c
                }
            };
        }
    }
}

/// The bytes of a literal that [`Scanner::lit`] compares as words.
const LITERAL_HEAD: usize = 32;

/// Bytes an event must hold at some point, and its first [`LITERAL_HEAD`] as little-endian
/// words with the masks that keep only the literal's bytes of each, for [`Scanner::lit`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct Literal {
    bytes: Box<[u8]>,
    head: [u64; 4],
    mask: [u64; 4],
}

impl Literal {
    fn new(bytes: &[u8]) -> Literal {
        let mut head = [0u64; 4];
        let mut mask = [0u64; 4];
        for (k, c) in bytes.chunks(8).take(4).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            head[k] = u64::from_le_bytes(w);
            mask[k] = u64::MAX >> (8 * (8 - c.len()));
        }
        Literal {
            bytes: bytes.into(),
            head,
            mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integers read from words read as the byte loop reads them, and numbers end where it
    /// ends.
    #[test]
    fn word_integers_match_the_byte_loop() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..50_000 {
            let mut t = String::new();
            if next().is_multiple_of(5) {
                t.push('-');
            }
            for k in 0..next() % 22 {
                let d = if k == 0 && next().is_multiple_of(6) {
                    0
                } else {
                    next() % 10
                };
                t.push(char::from(b'0' + d as u8));
            }
            let ends = [
                "",
                ",",
                "}",
                ".5",
                "e2",
                "E",
                "x",
                " ",
                "]",
                ".",
                ".25e1",
                ".123456789012,",
            ];
            t.push_str(ends[next() as usize % ends.len()]);
            // Some padding after, so that both short windows and long ones are read.
            for pad in ["", "0123456789abcdef"] {
                let doc = format!("{t}{pad}");
                let s = Scanner::new(doc.as_bytes());
                assert_eq!(s.int(0), s.int_bytes(0), "{doc:?}");
                let bytes = number_end_bytes(&s, 0);
                assert_eq!(s.number_end(0), bytes, "{doc:?}");
                // The plain forms' reader ends where the grammar does, or leaves it to `skip`.
                let plain = s.plain_number_end(0);
                assert!(plain.is_none() || plain == bytes, "{doc:?}");
            }
        }
    }

    /// The end of any value by recursion (the reference for `skip`).
    fn skip_rec(s: &Scanner<'_>, i: usize, depth: u32) -> Option<usize> {
        match s.at(i) {
            b'[' if depth < MAX_DEPTH => {
                let mut j = s.ws(i + 1);
                if s.at(j) == b']' {
                    return Some(j + 1);
                }
                loop {
                    j = s.ws(skip_rec(s, j, depth + 1)?);
                    match s.at(j) {
                        b',' => j = s.ws(j + 1),
                        b']' => return Some(j + 1),
                        _ => return None,
                    }
                }
            }
            b'{' if depth < MAX_DEPTH => {
                let mut j = s.ws(i + 1);
                if s.at(j) == b'}' {
                    return Some(j + 1);
                }
                loop {
                    if s.at(j) != b'"' {
                        return None;
                    }
                    j = s.ws(s.str_end(j + 1)? + 1);
                    if s.at(j) != b':' {
                        return None;
                    }
                    j = s.ws(skip_rec(s, s.ws(j + 1), depth + 1)?);
                    match s.at(j) {
                        b',' => j = s.ws(j + 1),
                        b'}' => return Some(j + 1),
                        _ => return None,
                    }
                }
            }
            b'[' | b'{' => None,
            _ => s.scalar_end(i),
        }
    }

    /// Values skipped in one loop end where the recursion ends them, or are refused alike:
    /// random nestings of every kind of value, cut and altered at every byte, and nestings
    /// around the depth limit.
    #[test]
    fn skipping_a_value_ends_where_the_recursion_does() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        fn value(next: &mut dyn FnMut() -> u64, depth: u32, out: &mut String) {
            let ws = |next: &mut dyn FnMut() -> u64, out: &mut String| {
                if next().is_multiple_of(4) {
                    out.push(' ');
                }
            };
            match next() % if depth > 4 { 5 } else { 7 } {
                0 => out.push_str("\"ab\\\"c\""),
                1 => out.push_str(["0", "-12", "3.25", "1e5", "2E-3", "10"][next() as usize % 6]),
                2 => out.push_str(["true", "false", "null"][next() as usize % 3]),
                3 => out.push_str("\"x\""),
                4 => out.push_str("17"),
                5 => {
                    out.push('[');
                    for k in 0..next() % 4 {
                        if k > 0 {
                            out.push(',');
                        }
                        ws(next, out);
                        value(next, depth + 1, out);
                        ws(next, out);
                    }
                    out.push(']');
                }
                _ => {
                    out.push('{');
                    for k in 0..next() % 4 {
                        if k > 0 {
                            out.push(',');
                        }
                        ws(next, out);
                        out.push_str(&format!("\"k{k}\""));
                        ws(next, out);
                        out.push(':');
                        ws(next, out);
                        value(next, depth + 1, out);
                    }
                    out.push('}');
                }
            }
        }
        let mut docs = Vec::new();
        for _ in 0..3000 {
            let mut v = String::new();
            value(&mut next, 0, &mut v);
            docs.push(format!("{v},"));
        }
        for n in [62, 63, 64, 65] {
            docs.push(format!("{}1{}", "[".repeat(n), "]".repeat(n)));
            docs.push(format!(
                "{}{}",
                "{\"a\":[".repeat(n / 2),
                "]}".repeat(n / 2)
            ));
        }
        let alter = [b' ', b',', b']', b'}', b'"', b':', b'[', b'{', b'1', b'x'];
        for (d, doc) in docs.iter().enumerate() {
            let bytes = doc.as_bytes();
            let mut variants = vec![doc.clone()];
            if d % 10 == 0 {
                for cut in 0..bytes.len() {
                    variants.push(String::from_utf8_lossy(&bytes[..cut]).into_owned());
                    let mut b = bytes.to_vec();
                    b[cut] = alter[(cut + d) % alter.len()];
                    variants.push(String::from_utf8_lossy(&b).into_owned());
                }
            }
            for v in &variants {
                let s = Scanner::new(v.as_bytes());
                for depth in [0, 1] {
                    assert_eq!(s.skip(0, depth), skip_rec(&s, 0, depth), "{v:?} {depth}");
                }
            }
        }
    }

    /// The end of a number a byte at a time (the reference for `number_end`).
    fn number_end_bytes(s: &Scanner<'_>, i: usize) -> Option<usize> {
        let digits = |mut j: usize| {
            while s.at(j).is_ascii_digit() {
                j += 1;
            }
            j
        };
        let mut j = i + (s.at(i) == b'-') as usize;
        match s.at(j) {
            b'0' => j += 1,
            b'1'..=b'9' => j = digits(j),
            _ => return None,
        }
        if s.at(j) == b'.' {
            j += 1;
            if !s.at(j).is_ascii_digit() {
                return None;
            }
            j = digits(j);
        }
        if matches!(s.at(j), b'e' | b'E') {
            j += 1;
            if matches!(s.at(j), b'+' | b'-') {
                j += 1;
            }
            if !s.at(j).is_ascii_digit() {
                return None;
            }
            j = digits(j);
        }
        Some(j)
    }

    /// Events read through the layouts learned so far read as [`Scanner::event`] reads them,
    /// and are refused where it refuses them: every event of the Kineto fixtures, and variants
    /// that keep a learned layout's keys but change a value's type, the whitespace, an escape,
    /// `args` (null, empty, absent) or repeat a key, met in several orders.
    #[test]
    fn layouts_read_what_the_scanner_reads() {
        let mut events: Vec<String> = Vec::new();
        for f in fuseprof_fixtures::KINETO {
            let raw = std::fs::read(fuseprof_fixtures::path(f)).unwrap();
            let text = super::super::whole_text(std::path::Path::new(f), &raw).unwrap();
            let doc: serde_json::Value = serde_json::from_slice(&text).unwrap();
            let list = doc["traceEvents"].as_array().unwrap();
            // A spread of each fixture's events (all of a small one).
            let step = (list.len() / 3000).max(1);
            for e in list.iter().step_by(step) {
                events.push(serde_json::to_string(e).unwrap());
            }
        }
        let base = events.len();
        let mut variants = Vec::new();
        for (k, e) in events.iter().enumerate().step_by(7) {
            let v = match k % 6 {
                0 => e.replacen("\":", "\": ", 1),
                1 => match e.find(|c: char| c.is_ascii_digit()) {
                    Some(d) => format!("{}.5{}", &e[..d + 1], &e[d + 1..]),
                    None => continue,
                },
                2 => e.replacen("\"name\":\"", "\"name\":\"\\u0041", 1),
                3 => e.replacen("\"cat\":", "\"cat\":\"x\",\"cat\":", 1),
                4 => e.replacen("\"ph\":\"X\"", "\"ph\":null", 1),
                _ => e.replacen(",\"", " , \"", 1),
            };
            variants.push(v);
        }
        events.extend(variants);
        events.extend(
            [
                r#"{"args":null,"cat":"cpu_op","dur":1,"name":"a","ph":"X","pid":1,"tid":1,"ts":1}"#,
                r#"{"args":{},"cat":"cpu_op","dur":1,"name":"a","ph":"X","pid":1,"tid":1,"ts":1}"#,
                r#"{"cat":"cpu_op","dur":1,"name":"a","ph":"X","pid":1,"tid":1,"ts":1}"#,
                r#"{"args":{"External id":1,"External id":2},"cat":"cpu_op","ph":"X","ts":1}"#,
                r#"{"args":{"External id":"7"},"cat":"cpu_op","ph":"X","ts":1}"#,
                r#"{"args":{"External id":7},"cat":"cpu_op","ph":"X","ts":1e3}"#,
                r#"{"args":{"External id":7},"cat":"cpu_op","ph":"X","ts":1}"#,
                r#"{"args":{"External id":7,"grid":[1,2,3]},"ph":"X","ts":1}"#,
                r#"{"args":{"External id":7,"grid":[1,2]},"ph":"X","ts":1}"#,
                r#"{"args":{"External id":7,"grid":null},"ph":"X","ts":1}"#,
                r#"{"args":{"External id":7},"ph":"X","ts":1}"#,
                r#"{"args":{"External id":7},"ph":"X","ts":1,}"#,
                r#"{"args":{"External id":7},"ph":"X","ts":1]"#,
                r#"{"args":{"External id":7},"ph":"X","ts":1"#,
            ]
            .map(String::from),
        );
        // A key longer than a kept literal: read key by key every time.
        let long = format!(
            r#"{{"args":{{"{}":1}},"ph":"X","ts":1}}"#,
            "k".repeat(MAX_LITERAL)
        );
        events.push(long.clone());
        events.push(long);
        let mut doc = String::new();
        let mut at = Vec::new();
        for e in &events {
            at.push(doc.len());
            doc.push_str(e);
            doc.push('\n');
        }
        let s = Scanner::new(doc.as_bytes());
        let mut shapes = Shapes::default();
        let mut learned = 0;
        for round in 0..4 {
            let mut order: Vec<usize> = (0..at.len()).collect();
            match round {
                0 => {}
                1 => order.reverse(),
                _ => order.sort_by_key(|&k| (k * 7919 + round * 104_729) % at.len()),
            }
            for k in order {
                let mut want = RawEvent::default();
                let mut got = RawEvent::default();
                let want_end = s.event(at[k], &mut want, None);
                let got_end = shapes.event(&s, at[k], &mut got);
                assert_eq!(got_end, want_end, "{}", events[k]);
                if want_end.is_some() {
                    assert_eq!(format!("{got:?}"), format!("{want:?}"), "{}", events[k]);
                }
            }
            if round == 0 {
                learned = shapes.nodes.len();
            }
        }
        // The later rounds met no layout the first did not.
        assert_eq!(shapes.nodes.len(), learned);
        assert!(
            base > 3000 && learned > 20,
            "{base} events, {learned} nodes"
        );
    }

    #[test]
    fn digit_words_read_as_the_bytes_say() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut w = [0u8; 8];
            for (k, b) in w.iter_mut().enumerate() {
                let r = (x >> (8 * k)) as u8;
                // Mostly digits, some bytes just outside them and some anything.
                *b = match r % 16 {
                    0 => b'/',
                    1 => b':',
                    2 => r,
                    _ => b'0' + r % 10,
                };
            }
            let want = w.iter().take_while(|c| c.is_ascii_digit()).count();
            let word = u64::from_le_bytes(w);
            assert_eq!(leading_digits(word), want, "{w:?}");
            let value = |n: usize| {
                std::str::from_utf8(&w[..n])
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            };
            if want == 8 {
                assert_eq!(eight_digits(word), value(8), "{w:?}");
            }
            for n in 1..want.min(7) + 1 {
                assert_eq!(first_digits(word, n), value(n), "{w:?} {n}");
            }
        }
    }

    /// The one-pass time reads what the text would give `time_ns`, and ends where the JSON
    /// number does; it declines the forms it leaves to the general path, and nothing else.
    #[test]
    fn decimal_times_match_time_ns() {
        let mut texts: Vec<String> = Vec::new();
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for _ in 0..20_000 {
            let int_len = 1 + next() as usize % 21;
            let mut t = String::new();
            if next().is_multiple_of(4) {
                t.push('-');
            }
            for k in 0..int_len {
                // A leading zero now and then.
                let d = if k == 0 && next() % 8 != 0 {
                    1 + next() % 9
                } else {
                    next() % 10
                };
                t.push(char::from(b'0' + d as u8));
            }
            match next() % 6 {
                0 => {}
                1 => t.push('.'),
                _ => {
                    t.push('.');
                    for _ in 0..1 + next() % 12 {
                        t.push(char::from(b'0' + (next() % 10) as u8));
                    }
                }
            }
            if next().is_multiple_of(10) {
                t.push_str(["e3", "E-2", "e+1"][next() as usize % 3]);
            }
            texts.push(t);
        }
        texts.extend(
            [
                "0",
                "-0",
                "0.5",
                "-",
                "-.5",
                "00",
                "1.",
                "999999999999999999",
            ]
            .map(String::from),
        );
        for t in &texts {
            for tail in ["", ",", "}", " ", "x", "0123456789"] {
                let doc = format!("{t}{tail}");
                let s = Scanner::new(doc.as_bytes());
                let general = s.number_end(0).filter(|&e| !s.at(e).is_ascii_digit());
                match s.decimal_time(0) {
                    Some((ns, end)) => {
                        assert_eq!(Some(end), general, "{doc:?}");
                        assert_eq!(Some(ns), super::super::time_ns(Raw(&doc[..end])), "{doc:?}");
                        assert!(!matches!(s.at(end), b'.' | b'e' | b'E'), "{doc:?}");
                    }
                    None => {
                        // Declined: an exponent, a leading zero, over 18 integer digits, a
                        // time too large for nanoseconds, or no number at all.
                        let num = general.map(|e| &doc[..e]);
                        let int = t
                            .trim_start_matches('-')
                            .split(['.', 'e', 'E'])
                            .next()
                            .unwrap();
                        assert!(
                            num.is_none_or(|n| n.contains(['e', 'E'])
                                || int.len() > 18
                                || (int.len() > 1 && int.starts_with('0'))
                                || n.ends_with('.')
                                || super::super::time_ns(Raw(n)).is_none()),
                            "{doc:?} declined"
                        );
                    }
                }
            }
        }
    }

    /// Strings with characters outside ASCII are read by the scanner when they are UTF-8, and
    /// refused (for serde_json, whose error the import then words) when they are not, short
    /// and long, at the window's end or not.
    #[test]
    fn strings_outside_ascii_are_read_when_they_are_utf8() {
        for pad in [
            "",
            "a very long name that goes past the words tested one by one ",
        ] {
            for (name, ok) in [
                (&b"k\xc3\xa9rnel"[..], true),
                (b"\xe2\x86\x92 \xf0\x9f\x98\x80", true),
                (b"k\xffrnel", false),
                (b"k\xc3(", false),
                (b"k\xc3\xa9\x01", false),
                (b"\xc3\xa9\\u0041", false),
            ] {
                let mut doc = br#"{"name":""#.to_vec();
                doc.extend_from_slice(pad.as_bytes());
                doc.extend_from_slice(name);
                doc.extend_from_slice(br#"","ph":"X"}"#);
                for cut in [0, 2] {
                    // (With the window cut short, the event cannot be read from it.)
                    let s = Scanner::new(&doc[..doc.len() - cut]);
                    let mut e = RawEvent::default();
                    let read = s.event(0, &mut e, None);
                    let whole = cut == 0 && ok;
                    assert_eq!(read.is_some(), whole, "{doc:?} cut {cut}");
                    if whole {
                        let want = format!("{pad}{}", std::str::from_utf8(name).unwrap());
                        assert_eq!(e.name.as_deref(), Some(want.as_str()));
                    }
                }
            }
        }
    }

    #[test]
    fn string_stops_flag_the_first_quote_backslash_control_or_non_ascii_byte() {
        let samples = [
            b'a', b' ', b'"', b'\\', 0, 0x1f, 0x20, 0x7f, 0x80, 0x9f, 0xa0, 0xff,
        ];
        // Every word of two sample bytes over a background byte, at every pair of positions.
        for &bg in &[b'x', 0xc3] {
            for &p in &samples {
                for &q in &samples {
                    for i in 0..8 {
                        for j in 0..8 {
                            let mut w = [bg; 8];
                            w[i] = p;
                            w[j] = q;
                            let stop =
                                |c: u8| c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c);
                            let want = w.iter().position(|&c| stop(c));
                            let m = string_stops(u64::from_le_bytes(w));
                            let got = (m != 0).then(|| (m.trailing_zeros() / 8) as usize);
                            assert_eq!(got, want, "{w:?}");
                        }
                    }
                }
            }
        }
    }
}
