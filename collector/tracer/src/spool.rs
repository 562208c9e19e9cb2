//! The spool file: what one traced process hands to `fuseprof collect`.
//!
//! This file has no dependencies on purpose: the tracer writes it and the collector reads it
//! through `#[path]` includes of this one source, so the two cannot drift apart.
//!
//! Layout: `MAGIC` (8 bytes), `VERSION` (u32 LE), then records, each `len: u32 LE`, `tag: u8`,
//! `len` bytes of payload. All integers are little-endian; strings are `u32` length + UTF-8
//! bytes. A reader stops at the first record that is cut short: a process that crashed leaves
//! a valid prefix. Unknown tags are skipped by length, so a newer tracer can add records.

#![allow(dead_code)]

pub const MAGIC: &[u8; 8] = b"FPSPOOL\0";
/// The version this build writes. 2 appended the memory kinds to `MEMCPY`.
pub const VERSION: u32 = 2;
/// The oldest version this build reads: a version 1 spool's copies have no memory kinds.
pub const MIN_READ_VERSION: u32 = 1;
/// File name prefix of spool files inside the spool folder.
pub const FILE_PREFIX: &str = "fuseprof-";
pub const FILE_SUFFIX: &str = ".spool";

/// Environment the collector sets for the tracer.
pub const ENV_SPOOL_DIR: &str = "FUSEPROF_SPOOL_DIR";
pub const ENV_CAPTURE: &str = "FUSEPROF_CAPTURE";

/// Record tags. Payload layouts are written next to each tag.
pub mod tag {
    /// pid u32, ppid u32, cupti_version u32 (0 = no CUPTI), clock u8 (0 realtime, 1 monotonic),
    /// start_unix_ns i64, start_clock_ns u64, exe str, cmdline str (arguments joined by spaces),
    /// visible_devices str (CUDA_VISIBLE_DEVICES, "" when unset; absent in older spools).
    pub const PROCESS: u8 = 1;
    /// level u8 (0 info, 1 warning, 2 error), message str.
    pub const STATUS: u8 = 2;
    /// id u32, text str: kernel and API names the later records refer to.
    pub const STRING: u8 = 3;
    /// start u64, end u64, device u32, context u32, stream u32, correlation u32,
    /// grid i32 x3, block i32 x3, registers u16, static_smem i32, dynamic_smem i32,
    /// name u32 (STRING id), graph_id u32 (0 = none).
    pub const KERNEL: u8 = 4;
    /// start u64, end u64, device u32, context u32, stream u32, correlation u32, bytes u64,
    /// copy_kind u8 (CUPTI numbering), graph_id u32, then from version 2: src_kind u8,
    /// dst_kind u8 (`CUpti_ActivityMemoryKind` numbering: 0 unknown, 1 pageable, 2 pinned, ...).
    pub const MEMCPY: u8 = 5;
    /// start u64, end u64, device u32, context u32, stream u32, correlation u32, bytes u64,
    /// value u32, graph_id u32.
    pub const MEMSET: u8 = 6;
    /// api u8 (0 driver, 1 runtime), cbid u32, start u64, end u64, pid u32, tid u32,
    /// correlation u32, return_value u32, name u32 (STRING id).
    pub const API: u8 = 7;
    /// sync_type u32, start u64, end u64, correlation u32, context u32, stream u32, event u32.
    pub const SYNC: u8 = 8;
    /// overhead_kind u32, object_kind u32, object_id0 u32, object_id1 u32, start u64, end u64.
    pub const OVERHEAD: u8 = 9;
    /// id u32, cc_major u32, cc_minor u32, sm_count u32, memory_bytes u64, clock_khz u32,
    /// bandwidth_kib_per_s u64, name str.
    pub const DEVICE: u8 = 10;
    /// context u32, device u32.
    pub const CONTEXT: u8 = 11;
    /// cupti_dropped u64, nvtx_dropped u64: totals so far (the last one counts).
    pub const DROPPED: u8 = 12;
    /// tid u32, ts u64, domain u64, attributes (see `Attr`).
    pub const NVTX_PUSH: u8 = 13;
    /// tid u32, ts u64, domain u64.
    pub const NVTX_POP: u8 = 14;
    /// range_id u64, tid u32, ts u64, domain u64, attributes.
    pub const NVTX_START: u8 = 15;
    /// range_id u64, tid u32, ts u64.
    pub const NVTX_END: u8 = 16;
    /// tid u32, ts u64, domain u64, attributes.
    pub const NVTX_MARK: u8 = 17;
    /// domain u64, name str.
    pub const NVTX_DOMAIN: u8 = 18;
    /// domain u64, category u32, name str.
    pub const NVTX_CATEGORY: u8 = 19;
    /// handle u64, domain u64, text str: a registered string.
    pub const NVTX_STRING: u8 = 20;
    /// tid u32, name str.
    pub const THREAD_NAME: u8 = 21;
    /// on u8, ts u64: capture window opened (1) or closed (0).
    pub const CAPTURE: u8 = 22;
    /// ts u64, reason u8 (see `flush_reason`): everything gathered so far has been written.
    pub const FLUSHED: u8 = 23;
    /// cupti_minus_host_ns i64: cuptiGetTimestamp minus the host clock the NVTX records use,
    /// measured once; the reader adds it to NVTX timestamps.
    pub const CLOCK: u8 = 24;
    /// No payload: this process writes every record to its spool as it happens (a forked
    /// child, which may leave through `_exit` with no chance to flush), so a missing final
    /// flush loses nothing.
    pub const WRITE_THROUGH: u8 = 25;
    /// device u32, index u32 (the counter's place in that device's COUNTER_SAMPLES values),
    /// kind u8 (0 sum, 1 average), scale f64 (applied to every value), interval_ns u64,
    /// method str (`pm_sampling`), name str (the metric name the API accepted), quantity str
    /// (`dram_read_bytes`, ...), unit str.
    pub const COUNTER_METRIC: u8 = 26;
    /// device u32, metrics u32 (n), samples u32, then per sample: start u64, end u64 (the
    /// device's GPU clock, ns), n values f64. Values are as the API evaluated them, before scale.
    pub const COUNTER_SAMPLES: u8 = 27;
    /// device u32, cupti_ns u64 (cuptiGetTimestamp), gpu_ns u64 (the device's clock, that the
    /// counter samples use, read at the same moment): the reader adds cupti_ns - gpu_ns of the
    /// nearest pair to sample times. None spooled: the sample times are already on CUPTI's clock.
    pub const GPU_CLOCK: u8 = 28;
}

/// Environment the collector sets for counters: the set (`memory`, `compute`, `all`, or a
/// comma list of metric names) and the sampling interval in ns.
pub const ENV_METRICS: &str = "FUSEPROF_METRICS";
pub const ENV_METRICS_INTERVAL_NS: &str = "FUSEPROF_METRICS_INTERVAL_NS";

/// Why the tracer flushed completely.
pub mod flush_reason {
    pub const EXIT: u8 = 0;
    pub const SIGNAL: u8 = 1;
    pub const PROFILER_STOP: u8 = 2;
    pub const CAPTURE_END: u8 = 3;
    /// A crash signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): what was recorded up to it.
    pub const CRASH: u8 = 4;
}

/// NVTX event attributes as spooled: category u32, color_argb u32 with has_color u8,
/// then the message: kind u8 (0 none, 1 text str, 2 registered handle u64).
pub mod msg {
    pub const NONE: u8 = 0;
    pub const TEXT: u8 = 1;
    pub const REGISTERED: u8 = 2;
}

/// Appends little-endian values to a byte buffer.
pub struct Enc<'a>(pub &'a mut Vec<u8>);

impl Enc<'_> {
    /// Starts a record; finish it with [`Enc::end`] at the returned position.
    pub fn begin(&mut self, tag: u8) -> usize {
        let at = self.0.len();
        self.0.extend_from_slice(&[0, 0, 0, 0, tag]);
        at
    }
    pub fn end(&mut self, at: usize) {
        let len = (self.0.len() - at - 5) as u32;
        self.0[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

/// Reads little-endian values; every read returns `None` past the end.
pub struct Dec<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    pub fn i32(&mut self) -> Option<i32> {
        self.u32().map(|v| v as i32)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    pub fn i64(&mut self) -> Option<i64> {
        self.u64().map(|v| v as i64)
    }
    pub fn f64(&mut self) -> Option<f64> {
        self.u64().map(f64::from_bits)
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> Option<String> {
        self.bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
    /// The next whole record: (tag, payload). `None` at the end or at a record cut short.
    pub fn record(&mut self) -> Option<(u8, &'a [u8])> {
        let len = self.u32()? as usize;
        let tag = self.u8()?;
        let payload = self.take(len)?;
        Some((tag, payload))
    }
}
