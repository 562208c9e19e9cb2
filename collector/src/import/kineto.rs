//! PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip-compressed.
//!
//! The whole file is mapped into memory (or read, and inflated when compressed) once and
//! parsed in place by a scanner made for Kineto's event shape (`scan.rs`, with serde_json for
//! anything else): strings are borrowed from those bytes where they carry no escapes, and each
//! element of `traceEvents` is handed to the writer as soon as it is parsed, so no event list
//! is ever built.

mod scan;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::Path;

use fuseprof_store::{
    Api, ApiCall, CopyKind, CreateOptions, Device, Flow, FlowPhase, Kernel, Mapped, Memop,
    MemopKind, Range, RangeKind, RunInfo, StrId, Writer,
};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{nominal_peaks, Format, ImportError, ImportReport, Result};
use crate::progress::{Counting, Progress};
use scan::ScanError;

/// Events between two updates of the progress counters.
const PROGRESS_EVERY: u64 = 4096;

/// A trace's bytes: the file mapped into memory, or read (and inflated) into a buffer.
pub enum Source {
    Mapped(Mapped),
    Read(Vec<u8>),
    Inflated(Anon),
}

impl std::ops::Deref for Source {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Read(v) => v,
            Source::Inflated(a) => a,
        }
    }
}

/// Fresh memory for inflating into, mapped anonymous and (when asked) populated up front: one
/// system call allocates every page, where filling a growing vector takes a page fault for
/// every 4 KiB (and its reads zero each chunk before inflating into it).
pub struct Anon {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    cap: usize,
}

impl Anon {
    fn new(cap: usize, populate: bool) -> std::io::Result<Anon> {
        let cap = cap.max(1 << 16);
        let populate = if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a fresh private anonymous mapping; the kernel checks the arguments.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Anon {
            ptr: std::ptr::NonNull::new(p.cast()).ok_or(std::io::ErrorKind::OutOfMemory)?,
            len: 0,
            cap,
        })
    }

    /// Doubles the room (the pages added are faulted in as they are filled).
    fn grow(&mut self) -> std::io::Result<()> {
        let cap = self
            .cap
            .checked_mul(2)
            .ok_or(std::io::ErrorKind::OutOfMemory)?;
        // SAFETY: remaps the mapping `new` made, moving it if it must; the old address is not
        // used again.
        let p = unsafe {
            libc::mremap(
                self.ptr.as_ptr().cast(),
                self.cap,
                cap,
                libc::MREMAP_MAYMOVE,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        self.ptr = std::ptr::NonNull::new(p.cast()).ok_or(std::io::ErrorKind::OutOfMemory)?;
        self.cap = cap;
        Ok(())
    }

    /// The room after the bytes filled so far (zeroed memory, as the mapping made it).
    fn spare(&mut self) -> &mut [u8] {
        // SAFETY: `cap` mapped, writable bytes from `ptr`, owned by `self`.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.len), self.cap - self.len)
        }
    }
}

impl std::ops::Deref for Anon {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the mapping, filled, live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `new` (or `grow`), unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.cap) };
    }
}

// SAFETY: memory owned by the value, like a `Vec<u8>`.
unsafe impl Send for Anon {}
unsafe impl Sync for Anon {}

/// How many bytes the gzip data `gz` likely inflates to: its trailer's ISIZE (a single
/// member's size modulo 2^32) where that is plausible, else eight times `gz`.
fn inflated_size_hint(gz: &[u8]) -> usize {
    // Deflate expands at most about 1032 times.
    gz.len()
        .checked_sub(4)
        .map(|at| u32::from_le_bytes([gz[at], gz[at + 1], gz[at + 2], gz[at + 3]]) as usize)
        .filter(|&n| n >= gz.len() && n / 1032 <= gz.len())
        .unwrap_or(gz.len().saturating_mul(8))
        .saturating_add(1)
}

/// The file's bytes, mapped when it can be, inflated when it is gzip-compressed.
pub fn read_source(path: &Path, progress: Option<&Progress>) -> Result<Source> {
    let io = |source| ImportError::Io {
        path: path.into(),
        error: source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if let Some(p) = progress {
        p.phase("reading", size);
    }
    let raw = match Mapped::new(&file, size) {
        Some(m) => {
            if let Some(p) = progress {
                p.add_bytes_done(size);
            }
            Source::Mapped(m)
        }
        None => {
            let mut raw = Vec::with_capacity(size as usize);
            // In chunks through `File`'s own reads, which fill the vector's spare capacity as it
            // is (a wrapping reader would have read_to_end zero every chunk first); progress per
            // chunk.
            loop {
                let n = (&file).take(16 << 20).read_to_end(&mut raw).map_err(io)?;
                if n == 0 {
                    break;
                }
                if let Some(p) = progress {
                    p.add_bytes_done(n as u64);
                }
            }
            Source::Read(raw)
        }
    };
    if raw.starts_with(&[0x1f, 0x8b]) {
        if let Some(p) = progress {
            p.phase("inflating", raw.len() as u64);
        }
        let hint = inflated_size_hint(&raw);
        // Populated only when the hint is a size JSON compresses from, so that a trailer
        // that claims more does not allocate it all at once.
        let mut out = Anon::new(hint, hint / 64 <= raw.len()).map_err(io)?;
        let mut gz = flate2::read::MultiGzDecoder::new(Counting {
            inner: &raw[..],
            progress,
        });
        loop {
            if out.len == out.cap {
                out.grow().map_err(io)?;
            }
            match gz.read(out.spare()) {
                Ok(0) => break,
                Ok(n) => out.len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ImportError::format(path, format!("corrupt gzip data: {e}"))),
            }
        }
        Ok(Source::Inflated(out))
    } else if path.extension().is_some_and(|e| e == "gz") {
        Err(ImportError::format(
            path,
            "named .gz but not gzip-compressed",
        ))
    } else {
        Ok(raw)
    }
}

pub(crate) fn import(
    path: &Path,
    output: &Path,
    create: CreateOptions,
    progress: Option<&Progress>,
) -> Result<ImportReport> {
    let buf = read_source(path, progress)?;
    // One UTF-8 check over the whole buffer is far cheaper than serde_json's check per string.
    let text = std::str::from_utf8(&buf).map_err(|e| {
        ImportError::format(path, format!("not UTF-8 text (byte {})", e.valid_up_to()))
    })?;
    if let Some(p) = progress {
        p.phase("parsing", text.len() as u64);
    }
    let mut writer = Writer::create(output, create)?;
    // Kineto files kernels under a per-device "process"; the launching process comes from the
    // runtime call with the same correlation id.
    writer.link_gpu_pids(true);
    let mut sink = Sink::new(&mut writer);
    sink.progress = progress.map(|p| (p, text.as_ptr() as usize));
    match scan::parse(text, &mut sink) {
        Ok(()) => {}
        Err(ScanError::Sink(e)) => return Err(e.into()),
        Err(ScanError::Invalid) => {
            let what = check(text).map_or_else(
                || "not a PyTorch-profiler trace".to_string(),
                |e| describe_json_error(&e),
            );
            return Err(ImportError::format(path, what));
        }
    }
    if sink.events == 0 {
        return Err(ImportError::format(
            path,
            "the trace holds no events (no 'traceEvents', or it is empty)",
        ));
    }
    if let Some(p) = progress {
        p.set_events(sink.events);
        p.phase("indexing", 0);
    }
    let report = ImportReport {
        format: Format::Kineto,
        source_events: sink.events,
        counts: Default::default(),
        skipped: std::mem::take(&mut sink.skipped),
        names: sink.names,
    };
    let run = std::mem::take(&mut sink.run);
    let devices = std::mem::take(&mut sink.devices);
    drop(sink);
    for d in devices {
        writer.device(d);
    }
    let counts = writer.finish(RunInfo {
        source_format: "kineto".into(),
        source_path: Some(path.display().to_string()),
        ..run
    })?;
    Ok(ImportReport { counts, ..report })
}

fn describe_json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => format!(
            "the JSON ends early (truncated file?) at line {} column {}",
            e.line(),
            e.column()
        ),
        Category::Syntax => format!("malformed JSON: {e}"),
        Category::Data => format!("not a PyTorch-profiler trace: {e}"),
        Category::Io => format!("read error: {e}"),
    }
}

/// What is wrong with a text the scanner refused, as serde_json reads the whole of it into
/// the trace's types (`None` if it finds nothing wrong).
fn check(text: &str) -> Option<serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    Check.deserialize(&mut de).and_then(|()| de.end()).err()
}

/// The shape of a trace for serde_json: an object with `traceEvents` (and the keys the import
/// reads), or a bare array of events.
struct Check;

impl<'de> DeserializeSeed<'de> for Check {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome-trace object with 'traceEvents', or an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Events.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "traceEvents" => map.next_value_seed(Events)?,
                "deviceProperties" => drop(map.next_value::<Vec<DeviceProps<'de>>>()?),
                "cupti_version"
                | "cuda_runtime_version"
                | "cuda_driver_version"
                | "schemaVersion"
                | "baseTimeNanoseconds" => drop(map.next_value::<Num<'de>>()?),
                "distributedInfo" => drop(map.next_value::<DistributedInfo<'de>>()?),
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(())
    }
}

struct Events;

impl<'de> DeserializeSeed<'de> for Events {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Events {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<RawEvent<'de>>()?.is_some() {}
        Ok(())
    }
}

/// Receives parsed events and writes them.
struct Sink<'w> {
    w: &'w mut Writer,
    events: u64,
    names: u64,
    skipped: BTreeMap<String, u64>,
    /// Kineto writes non-numeric pids/tids for its own spans ("Spans", "Traces"): each gets a
    /// negative id, named after the text.
    text_ids: HashMap<String, i64>,
    run: RunInfo,
    devices: Vec<Device>,
    cat_ids: HashMap<String, StrId>,
    /// The counters to advance, and the address of the text being parsed: an event's
    /// borrowed `ts` lies in it, so its address gives the bytes parsed so far.
    progress: Option<(&'w Progress, usize)>,
}

impl<'w> Sink<'w> {
    fn new(w: &'w mut Writer) -> Self {
        Sink {
            w,
            events: 0,
            names: 0,
            skipped: BTreeMap::new(),
            text_ids: HashMap::new(),
            run: RunInfo {
                tool: Some("PyTorch Profiler (Kineto)".into()),
                ..Default::default()
            },
            devices: Vec::new(),
            cat_ids: HashMap::new(),
            progress: None,
        }
    }

    fn devices(&mut self, props: Vec<DeviceProps<'_>>) {
        for p in props {
            let name = p.name.map(|n| n.into_owned());
            let peaks = name.as_deref().and_then(nominal_peaks);
            self.devices.push(Device {
                id: p.id.unwrap_or(self.devices.len() as i64),
                compute_major: p.compute_major,
                compute_minor: p.compute_minor,
                sm_count: p.num_sms,
                memory_bytes: p.total_global_mem,
                mem_bandwidth_bytes_per_s: peaks.map(|p| p.0),
                peak_flops_fp16: peaks.map(|p| p.1),
                peak_source: peaks.map(|_| "nominal".to_string()),
                name,
                ..Default::default()
            });
        }
    }

    fn skip(&mut self, why: &str) {
        *self.skipped.entry(why.to_string()).or_default() += 1;
    }

    fn id_of(&mut self, id: &Option<Num<'_>>, is_pid: bool) -> i64 {
        match id {
            Some(Num::Int(i)) => *i,
            Some(Num::Float(f)) => *f as i64,
            Some(Num::Text(t)) => {
                if let Some(i) = parse_int(t) {
                    return i;
                }
                if let Some(&i) = self.text_ids.get(t.as_ref()) {
                    return i;
                }
                let i = -(self.text_ids.len() as i64) - 1;
                self.text_ids.insert(t.to_string(), i);
                if is_pid {
                    self.w.process(i, Some(t));
                }
                i
            }
            None => 0,
        }
    }

    fn category(&mut self, cat: &str) -> StrId {
        if let Some(&id) = self.cat_ids.get(cat) {
            return id;
        }
        let id = self.w.intern(cat);
        self.cat_ids.insert(cat.to_string(), id);
        id
    }

    fn event(&mut self, e: &RawEvent<'_>) -> fuseprof_store::Result<()> {
        self.events += 1;
        if self.events.is_multiple_of(PROGRESS_EVERY) {
            if let (Some((p, base)), Some(ts)) = (self.progress, e.ts) {
                p.set_bytes_done((ts.0.as_ptr() as usize).saturating_sub(base) as u64);
                p.set_events(self.events);
            }
        }
        let ph = e.ph.as_deref().unwrap_or("");
        let cat = e.cat.as_deref().unwrap_or("");
        let name = e.name.as_deref().unwrap_or("");
        let args = e.args.as_ref().unwrap_or(&NO_ARGS);
        let start_ns = e.ts.and_then(time_ns).unwrap_or(0);
        let end_ns = start_ns + e.dur.and_then(time_ns).unwrap_or(0).max(0);
        match ph {
            "X" => {
                let pid = self.id_of(&e.pid, true);
                let tid = self.id_of(&e.tid, false);
                match cat {
                    "kernel" => {
                        let name = self.w.intern(name);
                        self.w.kernel(Kernel {
                            start_ns,
                            end_ns,
                            device_id: args.device.as_ref().and_then(Num::as_i64).unwrap_or(pid),
                            stream_id: args.stream.as_ref().and_then(Num::as_i64).unwrap_or(tid),
                            pid: None,
                            correlation_id: args.correlation.as_ref().and_then(Num::as_i64),
                            external_id: args.external_id.as_ref().and_then(Num::as_i64),
                            name,
                            grid: args.grid,
                            block: args.block,
                            registers_per_thread: args.registers.as_ref().and_then(Num::as_i64),
                            // Kineto reports static + dynamic shared memory as one number.
                            static_smem_bytes: args.shared_memory.as_ref().and_then(Num::as_i64),
                            dynamic_smem_bytes: None,
                            graph_id: None,
                        })
                    }
                    "gpu_memcpy" | "gpu_memset" => {
                        let kind = if cat == "gpu_memcpy" {
                            MemopKind::Memcpy
                        } else {
                            MemopKind::Memset
                        };
                        let copy_kind = (kind == MemopKind::Memcpy).then(|| {
                            match args.kind.as_ref().and_then(Num::text) {
                                Some(k) => CopyKind::parse(k),
                                None => copy_kind_from_name(name),
                            }
                        });
                        self.w.memop(Memop {
                            kind,
                            start_ns,
                            end_ns,
                            device_id: args.device.as_ref().and_then(Num::as_i64).unwrap_or(pid),
                            stream_id: args.stream.as_ref().and_then(Num::as_i64).unwrap_or(tid),
                            pid: None,
                            correlation_id: args.correlation.as_ref().and_then(Num::as_i64),
                            external_id: args.external_id.as_ref().and_then(Num::as_i64),
                            bytes: args.bytes.as_ref().and_then(Num::as_i64),
                            copy_kind,
                            value: None,
                        })
                    }
                    "cuda_runtime" | "cuda_driver" => {
                        let name = self.w.intern(name);
                        self.w.thread(pid, tid, None);
                        self.w.api_call(ApiCall {
                            api: if cat == "cuda_driver" {
                                Api::Driver
                            } else {
                                Api::Runtime
                            },
                            start_ns,
                            end_ns,
                            pid,
                            tid,
                            correlation_id: args.correlation.as_ref().and_then(Num::as_i64),
                            external_id: args.external_id.as_ref().and_then(Num::as_i64),
                            name,
                            return_code: None,
                        })
                    }
                    _ => {
                        let kind = match cat {
                            "cpu_op" => RangeKind::CpuOp,
                            "user_annotation" => RangeKind::UserAnnotation,
                            "gpu_user_annotation" => RangeKind::GpuUserAnnotation,
                            "python_function" => RangeKind::PythonFunction,
                            "cuda_sync" => RangeKind::CudaSync,
                            _ => RangeKind::Other,
                        };
                        let name = self.w.intern(name);
                        let mut r = Range::new(kind, name, pid, tid, start_ns);
                        r.end_ns = Some(end_ns);
                        if kind.is_gpu_side() {
                            if let Some(d) = args.device.as_ref().and_then(Num::as_i64) {
                                r.pid = d;
                            }
                            if let Some(s) = args.stream.as_ref().and_then(Num::as_i64) {
                                r.tid = s;
                            }
                        }
                        if kind == RangeKind::Other && !cat.is_empty() {
                            r.category = Some(self.category(cat));
                        }
                        r.external_id = args.external_id.as_ref().and_then(Num::as_i64);
                        r.correlation_id = args.correlation.as_ref().and_then(Num::as_i64);
                        r.input_dims = args.input_dims.map(|v| self.w.intern(v.0));
                        r.input_types = args.input_types.map(|v| self.w.intern(v.0));
                        if !kind.is_gpu_side() {
                            self.w.thread(pid, tid, None);
                        }
                        self.w.range(r)
                    }
                }
            }
            "i" | "I" | "n" => {
                let pid = self.id_of(&e.pid, true);
                let tid = self.id_of(&e.tid, false);
                let name = self.w.intern(name);
                let mut r = Range::new(RangeKind::Instant, name, pid, tid, start_ns);
                if !cat.is_empty() {
                    r.category = Some(self.category(cat));
                }
                self.w.range(r)
            }
            "s" | "t" | "f" => {
                let pid = self.id_of(&e.pid, true);
                let tid = self.id_of(&e.tid, false);
                let Some(flow_id) = e.id.as_ref().and_then(Num::as_i64) else {
                    self.skip("flow without a numeric id");
                    return Ok(());
                };
                let category = self.category(if cat.is_empty() { name } else { cat });
                self.w.flow(Flow {
                    category,
                    flow_id,
                    phase: FlowPhase::parse(ph).unwrap_or(FlowPhase::Start),
                    ts_ns: start_ns,
                    pid,
                    tid,
                })
            }
            "M" => {
                let pid = self.id_of(&e.pid, true);
                let label = args.name.as_ref().and_then(Num::text);
                match name {
                    "process_name" => {
                        self.names += 1;
                        self.w.process(pid, label);
                    }
                    "thread_name" => {
                        self.names += 1;
                        let tid = self.id_of(&e.tid, false);
                        self.w.thread(pid, tid, label);
                    }
                    _ => self.skip("metadata (labels, sort order)"),
                }
                Ok(())
            }
            "C" => {
                self.skip("counter samples");
                Ok(())
            }
            other => {
                self.skip(&format!("events with phase {other:?}"));
                Ok(())
            }
        }
    }
}

fn copy_kind_from_name(name: &str) -> CopyKind {
    // "Memcpy HtoD (Pageable -> Device)"
    name.strip_prefix("Memcpy ")
        .and_then(|rest| rest.split_whitespace().next())
        .map_or(CopyKind::Unknown, CopyKind::parse)
}

/// Microseconds as written (integer, decimal or exponent) to integer nanoseconds, exactly for
/// the decimal forms Kineto writes.
fn time_ns(raw: Raw<'_>) -> Option<i64> {
    let text = raw.0.trim_matches('"');
    if let Some(ns) = decimal_ns(text.as_bytes()) {
        return Some(ns);
    }
    if text.contains(['e', 'E']) {
        return text.parse::<f64>().ok().map(|us| (us * 1e3).round() as i64);
    }
    let (neg, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let ns: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let ns = ns
        .checked_mul(1000)?
        .checked_add(frac_ns(frac.as_bytes())?)?;
    Some(if neg { -ns } else { ns })
}

/// [`time_ns`] of the form Kineto writes (`-`, 1 to 18 digits, `.` and digits), in one pass
/// over the bytes; `None` for any other form, which `time_ns` reads the general way.
#[inline]
fn decimal_ns(b: &[u8]) -> Option<i64> {
    let (neg, b) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let int_len = b
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(b.len());
    if int_len == 0 || int_len > 18 {
        return None;
    }
    let us = b[..int_len]
        .iter()
        .fold(0i64, |v, &d| v * 10 + (d - b'0') as i64);
    let frac = match &b[int_len..] {
        [] => &[][..],
        [b'.', f @ ..] => f,
        _ => return None,
    };
    let ns = us.checked_mul(1000)?.checked_add(frac_ns(frac)?)?;
    Some(if neg { -ns } else { ns })
}

/// The nanoseconds of a fraction of a microsecond given by its digits, rounded half up;
/// `None` if one is not a digit.
#[inline]
fn frac_ns(digits: &[u8]) -> Option<i64> {
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut ns = 0;
    let mut scale = 100;
    for &d in digits.iter().take(3) {
        ns += (d - b'0') as i64 * scale;
        scale /= 10;
    }
    if digits.len() > 3 && digits[3] >= b'5' {
        ns += 1;
    }
    Some(ns)
}

fn parse_int(t: &str) -> Option<i64> {
    if let Some(hex) = t.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    t.parse().ok()
}

/// A number as Kineto may write it: integer, float, or text ("0x7f", "12", "HtoD").
#[derive(Clone, Debug)]
enum Num<'a> {
    Int(i64),
    Float(f64),
    Text(Cow<'a, str>),
}

impl Num<'_> {
    fn as_i64(&self) -> Option<i64> {
        match self {
            Num::Int(i) => Some(*i),
            Num::Float(f) => Some(*f as i64),
            Num::Text(t) => parse_int(t),
        }
    }
    fn text(&self) -> Option<&str> {
        match self {
            Num::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Num<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num<'de>, E> {
                Ok(Num::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num<'de>, E> {
                Ok(Num::Int(v as i64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num<'de>, E> {
                Ok(Num::Float(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Num<'de>, E> {
                Ok(Num::Int(v as i64))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Num<'de>, E> {
                Ok(Num::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Num<'de>, E> {
                Ok(Num::Text(Cow::Owned(v.to_string())))
            }
            fn visit_unit<E>(self) -> Result<Num<'de>, E> {
                Ok(Num::Text(Cow::Borrowed("")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Num<'de>, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num::Text(Cow::Borrowed("")))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Num<'de>, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num::Text(Cow::Borrowed("")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[x, y, z]` launch dimensions; anything else (Triton writes `"grid(100,)"`) reads as absent.
fn triple<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[i64; 3]>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<[i64; 3]>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("launch dimensions")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
            let mut dims = [0i64; 3];
            let mut n = 0;
            let mut ok = true;
            while let Some(v) = s.next_element::<Num<'de>>()? {
                match (n < 3, v.as_i64()) {
                    (true, Some(x)) => dims[n] = x,
                    _ => ok = false,
                }
                n += 1;
            }
            Ok((ok && n == 3).then_some(dims))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A value kept as its JSON text, as serde_json's `RawValue` gives it.
#[derive(Clone, Copy, Debug)]
struct Raw<'a>(&'a str);

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(d).map(|v| Raw(v.get()))
    }
}

/// The `args` of an event without any.
const NO_ARGS: Args<'static> = Args {
    external_id: None,
    correlation: None,
    device: None,
    stream: None,
    grid: None,
    block: None,
    registers: None,
    shared_memory: None,
    bytes: None,
    kind: None,
    name: None,
    input_dims: None,
    input_types: None,
};

#[derive(Deserialize, Default)]
struct Args<'a> {
    #[serde(rename = "External id", borrow)]
    external_id: Option<Num<'a>>,
    #[serde(borrow)]
    correlation: Option<Num<'a>>,
    #[serde(borrow)]
    device: Option<Num<'a>>,
    #[serde(borrow)]
    stream: Option<Num<'a>>,
    #[serde(default, deserialize_with = "triple")]
    grid: Option<[i64; 3]>,
    #[serde(default, deserialize_with = "triple")]
    block: Option<[i64; 3]>,
    #[serde(rename = "registers per thread", borrow)]
    registers: Option<Num<'a>>,
    #[serde(rename = "shared memory", borrow)]
    shared_memory: Option<Num<'a>>,
    #[serde(borrow)]
    bytes: Option<Num<'a>>,
    #[serde(borrow)]
    kind: Option<Num<'a>>,
    #[serde(borrow)]
    name: Option<Num<'a>>,
    #[serde(rename = "Input Dims", borrow)]
    input_dims: Option<Raw<'a>>,
    #[serde(rename = "Input type", borrow)]
    input_types: Option<Raw<'a>>,
}

#[derive(Deserialize, Default)]
struct RawEvent<'a> {
    #[serde(borrow)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pid: Option<Num<'a>>,
    #[serde(borrow)]
    tid: Option<Num<'a>>,
    #[serde(borrow)]
    ts: Option<Raw<'a>>,
    #[serde(borrow)]
    dur: Option<Raw<'a>>,
    #[serde(borrow)]
    id: Option<Num<'a>>,
    #[serde(borrow)]
    args: Option<Args<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceProps<'a> {
    id: Option<i64>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    total_global_mem: Option<i64>,
    compute_major: Option<i64>,
    compute_minor: Option<i64>,
    num_sms: Option<i64>,
}

#[derive(Deserialize)]
struct DistributedInfo<'a> {
    #[serde(borrow)]
    rank: Option<Num<'a>>,
    #[serde(borrow)]
    world_size: Option<Num<'a>>,
    #[serde(borrow)]
    backend: Option<Num<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(s: &str) -> Option<i64> {
        time_ns(Raw(s))
    }

    #[test]
    fn microsecond_text_becomes_exact_nanoseconds() {
        assert_eq!(ns("1695835542514261"), Some(1_695_835_542_514_261_000));
        assert_eq!(ns("4203669604595.407"), Some(4_203_669_604_595_407));
        assert_eq!(ns("2.5"), Some(2_500));
        assert_eq!(ns("0.0004"), Some(0));
        assert_eq!(ns("0.0005"), Some(1));
        assert_eq!(ns("1.5e3"), Some(1_500_000));
        assert_eq!(ns("-3.25"), Some(-3_250));
        assert_eq!(ns("\"12\""), Some(12_000));
        assert_eq!(ns("\"abc\""), None);
        assert_eq!(ns("-0.0015"), Some(-2));
        assert_eq!(ns("+2"), Some(2_000));
        assert_eq!(ns("7."), Some(7_000));
        assert_eq!(ns(".25"), Some(250));
        assert_eq!(ns("1.2x"), None);
        assert_eq!(ns("9223372036854775.807"), Some(i64::MAX));
        assert_eq!(ns("9223372036854775.808"), None);
        assert_eq!(ns("9223372036854776"), None);
        assert_eq!(ns("12345678901234567890"), None);
    }

    #[test]
    fn copy_kind_comes_from_the_event_name_when_args_lack_it() {
        assert_eq!(
            copy_kind_from_name("Memcpy HtoD (Pageable -> Device)"),
            CopyKind::HtoD
        );
        assert_eq!(
            copy_kind_from_name("Memcpy DtoD (Device -> Device)"),
            CopyKind::DtoD
        );
        assert_eq!(copy_kind_from_name("Memset (Device)"), CopyKind::Unknown);
    }
}
