//! PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip-compressed.
//!
//! A plain file is mapped into memory (or read) whole and parsed in place; a gzip file is
//! inflated as it is parsed, through a window of a few megabytes (`feed.rs`). The scanner is
//! made for Kineto's event shape (`scan.rs`, with serde_json for anything else): strings are
//! borrowed from the bytes where they carry no escapes, and each element of `traceEvents` is
//! handed to the writer as soon as it is parsed, so no event list is ever built.

mod document;
mod feed;
mod inflate;
mod scan;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::Path;

use fuseprof_store::{
    Api, ApiCall, CopyKind, CreateOptions, Device, Flow, FlowPhase, Kernel, Mapped, Memop,
    MemopKind, MemoryKind, Range, RangeKind, RunInfo, StrId, Writer,
};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{nominal_peaks, Format, ImportError, ImportReport, Result};
use crate::progress::{Counting, Progress};
use feed::{Feed, Window};
use scan::ScanError;

/// Events between two updates of the progress counters.
const PROGRESS_EVERY: u64 = 4096;

/// A trace file's bytes: mapped into memory, or read into a buffer.
pub enum Source {
    Mapped(Mapped),
    Read(Vec<u8>),
}

impl std::ops::Deref for Source {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Read(v) => v,
        }
    }
}

/// The file's bytes, mapped when it can be.
fn read_file(path: &Path, progress: Option<&Progress>) -> Result<Source> {
    let io = |source| ImportError::Io {
        path: path.into(),
        error: source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if let Some(p) = progress {
        p.phase("reading", size);
    }
    match Mapped::new(&file, size) {
        Some(m) => {
            if let Some(p) = progress {
                p.add_bytes_done(size);
            }
            Ok(Source::Mapped(m))
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
            Ok(Source::Read(raw))
        }
    }
}

/// A mapped file read from start to end, its pages released from memory (in steps of `step`
/// bytes) once read, so that a large compressed trace does not stay resident as it inflates.
struct Behind<'r> {
    map: &'r Mapped,
    at: usize,
    released: usize,
    step: usize,
}

impl Read for Behind<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.map.len() - self.at);
        buf[..n].copy_from_slice(&self.map[self.at..self.at + n]);
        self.at += n;
        self.map
            .release_behind(&mut self.released, self.at, self.step);
        Ok(n)
    }
}

fn is_gzip(raw: &[u8]) -> bool {
    raw.starts_with(&[0x1f, 0x8b])
}

/// The trace's text, inflated when it is gzip-compressed (whole, for wording an error).
fn whole_text<'a>(path: &Path, raw: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if !is_gzip(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(raw)
        .read_to_end(&mut text)
        .map_err(|e| ImportError::format(path, format!("corrupt gzip data: {e}")))?;
    Ok(Cow::Owned(text))
}

pub(crate) fn import(
    path: &Path,
    output: &Path,
    create: CreateOptions,
    progress: Option<&Progress>,
) -> Result<ImportReport> {
    let cores = fuseprof_store::usable_cores();
    import_with(path, output, create, progress, Window::DEFAULT, cores)
}

/// [`import`], the trace read through windows of `window`'s sizes, with `cores` cores to use.
fn import_with(
    path: &Path,
    output: &Path,
    create: CreateOptions,
    progress: Option<&Progress>,
    window: Window,
    cores: usize,
) -> Result<ImportReport> {
    let raw = read_file(path, progress)?;
    let gzip = is_gzip(&raw);
    if !gzip && path.extension().is_some_and(|e| e == "gz") {
        return Err(ImportError::format(
            path,
            "named .gz but not gzip-compressed",
        ));
    }
    let mut writer = Writer::create(output, create)?;
    // Kineto files kernels under a per-device "process"; the launching process comes from the
    // runtime call with the same correlation id.
    writer.link_gpu_pids(true);
    let mut sink = Sink::new(&mut writer);
    sink.progress = progress.map(|p| (p, (!gzip).then(|| raw.as_ptr() as usize)));
    // With several cores, a gzip stream is inflated on a thread of its own, ahead of the parser.
    let parsed = std::thread::scope(|scope| {
        let mut feed = if gzip {
            if let Some(p) = progress {
                // Progress in compressed bytes, as they are inflated.
                p.phase("parsing", raw.len() as u64);
            }
            let compressed: Box<dyn Read + Send + '_> = match &raw {
                Source::Mapped(m) => Box::new(Behind {
                    map: m,
                    at: 0,
                    released: 0,
                    step: window.chunk,
                }),
                Source::Read(v) => Box::new(&v[..]),
            };
            // A small file gets a window its size would fill, not the usual megabytes.
            let chunk = window.chunk.min(raw.len().saturating_mul(16).max(1 << 16));
            let inflating = flate2::read::MultiGzDecoder::new(Counting {
                inner: compressed,
                progress,
            });
            let reader: Box<dyn Read + '_> = if cores > 1 {
                Box::new(inflate::Inflated::spawn(scope, inflating, chunk))
            } else {
                Box::new(inflating)
            };
            Feed::stream(reader, Window { chunk, ..window })
        } else {
            if let Some(p) = progress {
                p.phase("parsing", raw.len() as u64);
            }
            let map = match &raw {
                Source::Mapped(m) => Some(m),
                Source::Read(_) => None,
            };
            Feed::memory(&raw, map, window)
        };
        document::parse(&mut feed, &mut sink)
    });
    match parsed {
        Ok(()) => {}
        Err(ScanError::Sink(e)) => return Err(e.into()),
        Err(ScanError::Read(e)) => {
            return Err(ImportError::format(path, format!("corrupt gzip data: {e}")))
        }
        Err(ScanError::Invalid) => {
            let text = whole_text(path, &raw)?;
            let text = std::str::from_utf8(&text).map_err(|e| {
                ImportError::format(path, format!("not UTF-8 text (byte {})", e.valid_up_to()))
            })?;
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
    /// The counters to advance, and the address of the text being parsed when it is whole: an
    /// event's borrowed `ts` lies in it, so its address gives the bytes parsed so far (a
    /// stream counts its bytes as it reads them).
    progress: Option<(&'w Progress, Option<usize>)>,
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
            if let Some((p, base)) = self.progress {
                if let (Some(base), Some(ts)) = (base, e.ts) {
                    p.set_bytes_done((ts.0.as_ptr() as usize).saturating_sub(base) as u64);
                }
                p.set_events(self.events);
            }
        }
        let ph = e.ph.as_deref().unwrap_or("");
        let cat = e.cat.as_deref().unwrap_or("");
        let name = e.name.as_deref().unwrap_or("");
        let args = e.args.as_ref().unwrap_or(&NO_ARGS);
        let start_ns = e.ts_ns.or_else(|| e.ts.and_then(time_ns)).unwrap_or(0);
        let end_ns = start_ns
            + e.dur_ns
                .or_else(|| e.dur.and_then(time_ns))
                .unwrap_or(0)
                .max(0);
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
                        let (src_memory, dst_memory) = if kind == MemopKind::Memcpy {
                            memory_from_name(name)
                        } else {
                            (None, None)
                        };
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
                            src_memory,
                            dst_memory,
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

/// A copy's source and destination memory from its name, as Kineto writes them from CUPTI's
/// records: "Memcpy HtoD (Pageable -> Device)". A side Kineto names no CUDA kind of (ROCm's
/// "Host") or a name without them is unknown.
fn memory_from_name(name: &str) -> (Option<MemoryKind>, Option<MemoryKind>) {
    let sides = name
        .strip_prefix("Memcpy ")
        .and_then(|rest| rest.split_once('('))
        .and_then(|(_, inner)| inner.strip_suffix(')'))
        .and_then(|inner| inner.split_once("->"));
    match sides {
        Some((src, dst)) => (MemoryKind::from_label(src), MemoryKind::from_label(dst)),
        None => (None, None),
    }
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

#[derive(Deserialize, Default, Debug)]
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

#[derive(Deserialize, Default, Debug)]
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
    /// `ts` and `dur` in nanoseconds, where the scanner read them with the event (else
    /// `time_ns` reads the text).
    #[serde(skip)]
    ts_ns: Option<i64>,
    #[serde(skip)]
    dur_ns: Option<i64>,
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

    /// Every table of a run but `run` (which holds the import's time), row by row as text.
    fn dump(path: &Path) -> Vec<(String, Vec<String>)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::ConnectOptions;
            let mut c = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .read_only(true)
                .connect()
                .await
                .unwrap();
            let tables: Vec<(String,)> = sqlx::query_as(
                "SELECT name FROM sqlite_schema WHERE type = 'table' \
                 AND name NOT IN ('run', '_sqlx_migrations') ORDER BY name",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            let mut out = Vec::new();
            for (t,) in tables {
                let cols: Vec<(String,)> =
                    sqlx::query_as("SELECT name FROM pragma_table_info(?) ORDER BY cid")
                        .bind(&t)
                        .fetch_all(&mut c)
                        .await
                        .unwrap();
                let row = cols
                    .iter()
                    .map(|(c,)| format!("quote(\"{c}\")"))
                    .collect::<Vec<_>>()
                    .join(" || '|' || ");
                let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT {row} FROM \"{t}\" ORDER BY 1"
                )))
                .fetch_all(&mut c)
                .await
                .unwrap();
                out.push((t, rows.into_iter().map(|r| r.0).collect()));
            }
            out
        })
    }

    fn gzip(text: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text).unwrap();
        e.finish().unwrap()
    }

    /// A trace read through windows of a few bytes (every element cut by a refill, every element
    /// read again after a failed try), plain or gzip, gives the run its whole text gives: on every
    /// Kineto fixture, and on traces of unusual shape (whitespace between every token,
    /// escapes and other events for serde_json, keys after `traceEvents`, a bare array, UTF-8
    /// cut by the reads).
    #[test]
    fn windows_over_a_stream_give_the_run_the_whole_text_gives() {
        let dir = tempfile::tempdir().unwrap();
        let mut texts: Vec<(String, Vec<u8>)> = fuseprof_fixtures::KINETO
            .iter()
            .take(3)
            .map(|f| {
                let raw = std::fs::read(fuseprof_fixtures::path(f)).unwrap();
                (
                    f.to_string(),
                    whole_text(Path::new(f), &raw).unwrap().into_owned(),
                )
            })
            .collect();
        let events = r#"[
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2,
             "ts": 10.5, "dur": 3, "args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]],
             "Input type": ["float", "float"], "Other": {"a": [1, 2.5e3, null, true]}}},
            {"ph":"X","cat":"kernel","name":"k\u00e9rnel \"quoted\"","pid":0,"tid":7,
             "ts":11,"dur":1,"args":{"correlation":9,"device":0,"stream":7,
             "grid":[1,1,1],"block":[32,1,1]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel ü", "pid": 1,
             "tid": 2, "ts": 10.75, "dur": 0.5, "args": {"correlation": 9}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2,
             "ts": 1e1, "dur": 2.0, "id": "0x10", "args": {"External id": 8}}
        ]"#;
        texts.push((
            "object".into(),
            format!(
                r#" {{ "schemaVersion": 1, "traceEvents": {events},
                  "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3"}}],
                  "distributedInfo": {{"rank": 0}}, "other": {{"x": "ünïcode"}} }} "#
            )
            .into_bytes(),
        ));
        texts.push(("array".into(), events.as_bytes().to_vec()));
        for (name, text) in &texts {
            let plain = dir.path().join("whole.json");
            std::fs::write(&plain, text).unwrap();
            let want_out = dir.path().join("whole.sqlite");
            let _ = std::fs::remove_file(&want_out);
            let want_report = import(&plain, &want_out, CreateOptions::default(), None).unwrap();
            let want = dump(&want_out);
            let gz = dir.path().join("stream.json.gz");
            std::fs::write(&gz, gzip(text)).unwrap();
            let mut windows = vec![(1, 1), (7, 3), (64, 16), (4096, 1024), (1 << 20, 1 << 16)];
            if text.len() < 4096 {
                // The small traces through many small windows: elements cut at every byte.
                windows.extend((2..48).map(|c| (c, 1)));
            }
            for (chunk, ahead) in windows {
                // The gzip stream inflated on the parser's thread (one core) and ahead of it.
                for (input, cores) in [(&gz, 1), (&gz, 2), (&plain, 1)] {
                    let out = dir.path().join(format!("stream-{chunk}.sqlite"));
                    let _ = std::fs::remove_file(&out);
                    let window = Window { chunk, ahead };
                    let report =
                        import_with(input, &out, CreateOptions::default(), None, window, cores)
                            .unwrap_or_else(|e| {
                                panic!("{name} {input:?}, {window:?}, {cores} cores: {e}")
                            });
                    assert_eq!(report.source_events, want_report.source_events, "{name}");
                    assert!(
                        dump(&out) == want,
                        "{name} {input:?}, {window:?}, {cores} cores"
                    );
                }
            }
        }
    }

    /// What the whole text's import refuses, every window refuses with the same words.
    #[test]
    fn windows_refuse_what_the_whole_text_refuses() {
        let dir = tempfile::tempdir().unwrap();
        for text in [
            &br#"{"traceEvents": [{"ph": "X", "ts": 1}, ]}"#[..],
            br#"{"traceEvents": [{"ph": "X", "ts": 1}]"#,
            br#"{"traceEvents": [{"ph": "X", "ts": 1}]} x"#,
            br#"{"traceEvents": [{"ph": "X", "ts": 1} {"ph": "X"}]}"#,
            b"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"\xff\"}]}",
            b"",
        ] {
            let plain = dir.path().join("whole.json");
            std::fs::write(&plain, text).unwrap();
            let out = dir.path().join("out.sqlite");
            let want = import(&plain, &out, CreateOptions::default(), None)
                .unwrap_err()
                .to_string()
                .replace("whole.json", "");
            let gz = dir.path().join("stream.json.gz");
            std::fs::write(&gz, gzip(text)).unwrap();
            for (chunk, ahead) in [(1, 1), (5, 2), (1 << 20, 1 << 16)] {
                for (input, cores) in [(&gz, 1), (&gz, 2), (&plain, 1)] {
                    let _ = std::fs::remove_file(&out);
                    let window = Window { chunk, ahead };
                    let got =
                        import_with(input, &out, CreateOptions::default(), None, window, cores)
                            .unwrap_err()
                            .to_string()
                            .replace("stream.json.gz", "")
                            .replace("whole.json", "");
                    let text = String::from_utf8_lossy(text);
                    assert_eq!(got, want, "{text:?} {input:?}, {window:?}");
                }
            }
        }
    }

    /// A byte that is not UTF-8 anywhere in the document is refused at its offset, whether
    /// the scanner reads it (a name, a key, a kept raw value, an argument passed over) or
    /// serde_json does (an event of unusual shape, a top-level value): the window is not
    /// checked as UTF-8 ahead of the parser, so each way must check what it reads.
    #[test]
    fn bytes_that_are_not_utf8_are_refused_wherever_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let event = r#"{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":10.5,"dur":3,"args":{"External id":7,"Input Dims":[[2,3]],"Input type":["float"],"Other":"abc"}}"#;
        let odd = r#"{"ph": "X", "cat": "cpu_op", "name": "aé", "pid": 1, "tid": 2, "ts": 1e1, "dur": 2.0, "args": {"Other": "abc"}}"#;
        let doc = format!(
            r#"{{"schemaVersion":1,"traceEvents":[{event},{event},{odd}],"other":{{"x":"abc"}}}}"#
        );
        // Each place: the text the bad byte replaces the first byte of (after `from`).
        let places = [
            (0, "aten::mm"),
            (0, "cpu_op"),
            (0, "Input Dims"),
            (0, "float"),
            (0, "abc"),
            (doc.find(event).unwrap() + event.len(), "aten::mm"),
            (doc.find(event).unwrap() + event.len(), "abc"),
            (doc.find(odd).unwrap(), "abc"),
            (doc.find(odd).unwrap(), "cpu_op"),
            (doc.find(odd).unwrap() + odd.len(), "abc"),
        ];
        for (from, what) in places {
            let at = from + doc[from..].find(what).unwrap();
            for bad in [&[0xffu8][..], &[0xc3, 0x28], &[0xe2, 0x82]] {
                let mut text = doc.as_bytes().to_vec();
                text.splice(at..at + bad.len(), bad.iter().copied());
                let plain = dir.path().join("bad.json");
                std::fs::write(&plain, &text).unwrap();
                let gz = dir.path().join("bad.json.gz");
                std::fs::write(&gz, gzip(&text)).unwrap();
                for (input, cores) in [(&plain, 1), (&gz, 1), (&gz, 2)] {
                    let out = dir.path().join("out.sqlite");
                    let _ = std::fs::remove_file(&out);
                    let e = import_with(
                        input,
                        &out,
                        CreateOptions::default(),
                        None,
                        Window::DEFAULT,
                        cores,
                    )
                    .unwrap_err()
                    .to_string();
                    assert!(
                        e.ends_with(&format!("not UTF-8 text (byte {at})")),
                        "{what} after {from}, {bad:x?}, {input:?}: {e}"
                    );
                    assert!(!out.exists());
                }
            }
        }
    }

    /// A gzip stream that breaks off or goes bad part way is refused with the same words
    /// whether it is inflated on the parser's thread or ahead of it.
    #[test]
    fn a_bad_gzip_stream_is_refused_alike_on_one_core_and_two() {
        let dir = tempfile::tempdir().unwrap();
        let events: String = (0..2000)
            .map(|i| {
                format!(
                    r#"{{"ph":"X","cat":"cpu_op","name":"op{i}","pid":1,"tid":1,"ts":{i},"dur":1}}"#
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let good = gzip(format!(r#"{{"traceEvents":[{events}]}}"#).as_bytes());
        let mut garbled = good.clone();
        let mid = garbled.len() / 2;
        garbled[mid..mid + 16].iter_mut().for_each(|b| *b ^= 0x5a);
        let cut = good[..good.len() / 2].to_vec();
        for (what, bytes) in [("garbled", garbled), ("cut", cut)] {
            let gz = dir.path().join("bad.json.gz");
            std::fs::write(&gz, &bytes).unwrap();
            let out = dir.path().join("out.sqlite");
            for (chunk, ahead) in [(7, 3), (4096, 1024), (1 << 20, 1 << 16)] {
                let window = Window { chunk, ahead };
                let said: Vec<String> = [1, 2]
                    .into_iter()
                    .map(|cores| {
                        let e =
                            import_with(&gz, &out, CreateOptions::default(), None, window, cores)
                                .unwrap_err()
                                .to_string();
                        assert!(!out.exists(), "{what}: no run is left behind");
                        e
                    })
                    .collect();
                assert_eq!(said[0], said[1], "{what}, {window:?}");
                if what == "cut" {
                    assert!(said[0].contains("corrupt gzip data"), "{}", said[0]);
                }
            }
        }
    }

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

    #[test]
    fn memory_kinds_come_from_the_copys_name() {
        use MemoryKind::*;
        let m = memory_from_name;
        assert_eq!(
            m("Memcpy HtoD (Pageable -> Device)"),
            (Some(Pageable), Some(Device))
        );
        assert_eq!(
            m("Memcpy DtoH (Device -> Pinned)"),
            (Some(Device), Some(Pinned))
        );
        assert_eq!(m("Memcpy HtoD (Host -> Device)"), (None, Some(Device)));
        assert_eq!(m("Memcpy HtoD"), (None, None));
        assert_eq!(m("Memset (Device)"), (None, None));
    }
}
