//! Spool files (one per traced process) into one store run.
//!
//! Each file is read twice: first for the definitions its records refer to (names, NVTX
//! domains, categories, registered strings, contexts, the clock offset), then for the records.
//! A file cut short by a crash yields the records before the cut.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fuseprof_store::{
    parse_range_name, Api, ApiCall, CopyKind, CounterKind, CounterMetric, CounterSample, Device,
    Kernel, Memop, MemopKind, MemoryKind, Range, RangeKind, StrId, Writer,
};

use super::spool::{self, flush_reason, msg, tag, Dec};
use super::{CollectError, Result};
use crate::progress::Progress;

/// What ingestion found besides the records.
#[derive(Debug, Default)]
pub struct Report {
    pub processes: usize,
    /// Processes in which CUPTI started.
    pub cupti_processes: usize,
    pub cupti_version: Option<u32>,
    pub cupti_dropped: u64,
    pub nvtx_dropped: u64,
    pub start_unix_ns: Option<i64>,
    pub spool_bytes: u64,
    pub warnings: Vec<String>,
    /// Hardware counters (`--metrics`), ids numbered across processes, and their samples
    /// with times on the run's clock: written into the run once it is complete.
    pub counter_metrics: Vec<CounterMetric>,
    pub counter_samples: Vec<CounterSample>,
}

/// The spool files in `dir`, oldest first.
pub fn spool_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with(spool::FILE_PREFIX) && n.ends_with(spool::FILE_SUFFIX)
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

pub fn ingest(files: &[PathBuf], w: &mut Writer, progress: Option<&Progress>) -> Result<Report> {
    let mut report = Report::default();
    if let Some(p) = progress {
        let total = files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        p.phase("ingesting", total);
    }
    for path in files {
        let bytes = std::fs::read(path).map_err(|e| CollectError::Spool {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let done_before = report.spool_bytes;
        report.spool_bytes += bytes.len() as u64;
        let progress = progress.map(|p| (p, done_before + 12));
        if bytes.len() < 12 {
            // Created but never written: a process that died at once.
            continue;
        }
        if &bytes[..8] != spool::MAGIC {
            return Err(CollectError::Spool {
                path: path.clone(),
                message: "not a fuseprof spool file".into(),
            });
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if !(spool::MIN_READ_VERSION..=spool::VERSION).contains(&version) {
            return Err(CollectError::Spool {
                path: path.clone(),
                message: format!(
                    "spool format version {version}, this build reads {} to {}",
                    spool::MIN_READ_VERSION,
                    spool::VERSION
                ),
            });
        }
        ingest_one(&bytes[12..], version, w, &mut report, progress)?;
    }
    if let Some(p) = progress {
        p.phase("indexing", 0);
    }
    Ok(report)
}

#[derive(Default)]
struct Defs {
    pid: i64,
    exe: String,
    cmdline: String,
    cupti_version: u32,
    start_unix_ns: Option<i64>,
    clock_offset_ns: i64,
    strings: HashMap<u32, String>,
    domains: HashMap<u64, String>,
    categories: HashMap<(u64, u32), String>,
    registered: HashMap<u64, String>,
    context_device: HashMap<u32, u32>,
    /// The machine's GPU ordinal of each device the process saw (CUDA_VISIBLE_DEVICES, when
    /// it lists ordinals); empty: the process's ids are the machine's.
    visible: Vec<u32>,
    cupti_dropped: u64,
    nvtx_dropped: u64,
    final_flush: bool,
    /// The last flush was a crash signal's.
    crashed: bool,
    /// The process wrote each record as it happened (a forked child): nothing to lose.
    write_through: bool,
    statuses: Vec<(u8, String)>,
    /// Counters by (device as the process numbers it, index): (metric, scale).
    counters: HashMap<(u32, u32), (CounterMetric, f64)>,
    /// Per device as the process numbers it: (cupti_ns, gpu_ns) readings, in order.
    gpu_clocks: HashMap<u32, Vec<(i64, i64)>>,
}

/// An NVTX range opened and not yet closed.
struct Open {
    tid: u32,
    start_ns: i64,
    domain: u64,
    category: u32,
    color: Option<u32>,
    text: String,
}

impl Defs {
    /// The machine's ordinal of the process's device `id`: two processes that each see their
    /// own GPU as device 0 (`CUDA_VISIBLE_DEVICES=1`, `=2`, ... per process) keep their GPUs
    /// apart in the run.
    fn device(&self, id: u32) -> u32 {
        self.visible.get(id as usize).copied().unwrap_or(id)
    }
}

/// The ordinals of a `CUDA_VISIBLE_DEVICES` value ("2,3"); empty when unset or when it names
/// GPUs otherwise (UUIDs, MIG instances): the process's own ids are kept then.
fn visible_ordinals(v: &str) -> Vec<u32> {
    let parsed: Option<Vec<u32>> = v.split(',').map(|s| s.trim().parse().ok()).collect();
    parsed.unwrap_or_default()
}

fn collect_defs(data: &[u8]) -> Defs {
    let mut d = Defs::default();
    let mut dec = Dec::new(data);
    while let Some((t, payload)) = dec.record() {
        let mut p = Dec::new(payload);
        let _ = (|| -> Option<()> {
            match t {
                tag::PROCESS => {
                    d.pid = p.u32()? as i64;
                    let _ppid = p.u32()?;
                    let v = p.u32()?;
                    if v != 0 {
                        d.cupti_version = v;
                    }
                    let _clock = p.u8()?;
                    let start = p.i64()?;
                    d.start_unix_ns.get_or_insert(start);
                    let _start_clock = p.u64()?;
                    d.exe = p.str()?;
                    d.cmdline = p.str()?;
                    if let Some(v) = p.str() {
                        d.visible = visible_ordinals(&v);
                    }
                }
                tag::STATUS => {
                    let level = p.u8()?;
                    d.statuses.push((level, p.str()?));
                }
                tag::STRING => {
                    let id = p.u32()?;
                    d.strings.insert(id, p.str()?);
                }
                tag::CONTEXT => {
                    let ctx = p.u32()?;
                    d.context_device.insert(ctx, p.u32()?);
                }
                tag::DROPPED => {
                    d.cupti_dropped = d.cupti_dropped.max(p.u64()?);
                    d.nvtx_dropped = d.nvtx_dropped.max(p.u64()?);
                }
                tag::NVTX_DOMAIN => {
                    let id = p.u64()?;
                    d.domains.insert(id, p.str()?);
                }
                tag::NVTX_CATEGORY => {
                    let domain = p.u64()?;
                    let cat = p.u32()?;
                    d.categories.insert((domain, cat), p.str()?);
                }
                tag::NVTX_STRING => {
                    let id = p.u64()?;
                    let _domain = p.u64()?;
                    d.registered.insert(id, p.str()?);
                }
                tag::CLOCK => d.clock_offset_ns = p.i64()?,
                tag::COUNTER_METRIC => {
                    let device = p.u32()?;
                    let index = p.u32()?;
                    let kind = if p.u8()? == 0 {
                        CounterKind::Sum
                    } else {
                        CounterKind::Average
                    };
                    let scale = p.f64()?;
                    let interval_ns = p.u64()? as i64;
                    let method = p.str()?;
                    let name = p.str()?;
                    let quantity = p.str()?;
                    let unit = p.str()?;
                    let metric = CounterMetric {
                        id: 0, // numbered across processes by `ingest_one`
                        device_id: d.device(device) as i64,
                        name,
                        quantity,
                        kind,
                        unit,
                        method,
                        interval_ns: Some(interval_ns),
                    };
                    d.counters.insert((device, index), (metric, scale));
                }
                tag::GPU_CLOCK => {
                    let device = p.u32()?;
                    let cupti = p.u64()? as i64;
                    let gpu = p.u64()? as i64;
                    d.gpu_clocks.entry(device).or_default().push((cupti, gpu));
                }
                tag::WRITE_THROUGH => d.write_through = true,
                tag::FLUSHED => {
                    let _ts = p.u64()?;
                    let reason = p.u8()?;
                    match reason {
                        flush_reason::EXIT | flush_reason::SIGNAL => d.final_flush = true,
                        flush_reason::CRASH => {
                            d.final_flush = true;
                            d.crashed = true;
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
            Some(())
        })();
    }
    d
}

/// Reads (category, color, message text) as spooled by the tracer.
fn read_attrs(p: &mut Dec, defs: &Defs) -> Option<(u32, Option<u32>, String)> {
    let category = p.u32()?;
    let has_color = p.u8()?;
    let color = p.u32()?;
    let text = match p.u8()? {
        msg::TEXT => p.str()?,
        msg::REGISTERED => {
            let id = p.u64()?;
            defs.registered
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("<registered string {id}>"))
        }
        _ => String::new(),
    };
    Some((category, (has_color != 0).then_some(color), text))
}

fn sync_name(kind: u32) -> &'static str {
    match kind {
        1 => "cudaEventSynchronize",
        2 => "cudaStreamWaitEvent",
        3 => "cudaStreamSynchronize",
        4 => "cudaDeviceSynchronize",
        _ => "synchronize",
    }
}

fn overhead_name(kind: u32) -> String {
    match kind {
        1 => "driver compiler".into(),
        0x10000 => "CUPTI buffer flush".into(),
        0x20000 => "CUPTI instrumentation".into(),
        0x30000 => "CUPTI resource".into(),
        0x40000 => "runtime triggered module loading".into(),
        0x50000 => "lazy function loading".into(),
        0x60000 => "command buffer full".into(),
        0x70000 => "activity buffer request".into(),
        0x80000 => "UVM activity init".into(),
        k => format!("CUPTI overhead {k:#x}"),
    }
}

/// Name, input dims, and whether it is a module range, from an NVTX message. PyTorch ops
/// (`aten::addmm, seq = 12, sizes = [[256], [2048, 6948]]`, from emit_nvtx or fuseprof's op
/// observer) are split by the store's `parse_range_name`, as the analyzer splits them; the
/// fuseprof PyTorch hook writes `module:<path>:<Class>` for `nn.Module` calls.
fn split_message(text: &str) -> (String, Option<String>, Option<(String, String)>) {
    if let Some(rest) = text.strip_prefix("module:") {
        let (path, class) = rest.rsplit_once(':').unwrap_or((rest, ""));
        // The root module has an empty path: it is named by its class.
        let name = if path.is_empty() { class } else { path };
        return (name.to_string(), None, Some((path.into(), class.into())));
    }
    let is_torch_op =
        text.contains(", seq = ") || text.contains(", sizes = ") || text.contains(", op_id = ");
    if !is_torch_op {
        return (text.to_string(), None, None);
    }
    let parsed = parse_range_name(text);
    let dims = parsed
        .sizes
        .map(|s| s.chars().filter(|c| !c.is_whitespace()).collect::<String>());
    (parsed.name.to_string(), dims, None)
}

struct Emitter<'a> {
    w: &'a mut Writer,
    pid: i64,
    modules_domain: Option<StrId>,
}

impl Emitter<'_> {
    fn range(
        &mut self,
        kind: RangeKind,
        o: &Open,
        end: Option<(i64, u32)>,
        depth: Option<i64>,
        defs: &Defs,
    ) -> Result<()> {
        let (name, dims, module) = split_message(&o.text);
        let name = self
            .w
            .intern(if name.is_empty() { "(unnamed)" } else { &name });
        let mut r = Range::new(kind, name, self.pid, o.tid as i64, o.start_ns);
        r.end_ns = end.map(|e| e.0);
        r.end_tid = end.and_then(|e| (e.1 != o.tid).then_some(e.1 as i64));
        r.depth = depth;
        r.color = o.color.map(|c| c as i64);
        r.input_dims = dims.map(|d| self.w.intern(&d));
        if let Some((_, class)) = module {
            let dom = *self
                .modules_domain
                .get_or_insert_with(|| self.w.intern("pytorch.modules"));
            r.domain = Some(dom);
            if !class.is_empty() {
                r.category = Some(self.w.intern(&class));
            }
        } else {
            r.domain = defs.domains.get(&o.domain).map(|d| self.w.intern(d));
            r.category = match (o.category, defs.categories.get(&(o.domain, o.category))) {
                (0, _) => None,
                (_, Some(name)) => Some(self.w.intern(name)),
                (c, None) => Some(self.w.intern(&c.to_string())),
            };
        }
        self.w.thread(self.pid, o.tid as i64, None);
        self.w.range(r)?;
        Ok(())
    }
}

/// Records between two updates of the progress counters.
const PROGRESS_EVERY: u64 = 4096;

/// Ingests one process's spool records; `progress` is advanced to its file's bytes read so far
/// (the second item: the bytes before this file's records).
fn ingest_one(
    data: &[u8],
    version: u32,
    w: &mut Writer,
    report: &mut Report,
    progress: Option<(&Progress, u64)>,
) -> Result<()> {
    let defs = collect_defs(data);
    if defs.pid == 0 {
        return Ok(());
    }
    let pid = defs.pid;
    report.processes += 1;
    if defs.cupti_version != 0 {
        report.cupti_processes += 1;
        report.cupti_version.get_or_insert(defs.cupti_version);
    }
    report.cupti_dropped += defs.cupti_dropped;
    report.nvtx_dropped += defs.nvtx_dropped;
    if let Some(s) = defs.start_unix_ns {
        report.start_unix_ns = Some(report.start_unix_ns.map_or(s, |r| r.min(s)));
    }
    let exe_name = Path::new(&defs.exe)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let label = if defs.cmdline.is_empty() {
        exe_name.clone()
    } else {
        defs.cmdline.clone()
    };
    w.process(pid, Some(&label));
    for (level, m) in &defs.statuses {
        if *level >= 1 {
            report
                .warnings
                .push(format!("process {pid} ({exe_name}): {m}"));
        }
    }
    if defs.crashed {
        report.warnings.push(format!(
            "process {pid} ({exe_name}) crashed; the run keeps what it recorded up to the crash"
        ));
    }
    if !defs.final_flush && !defs.write_through {
        report.warnings.push(format!(
            "process {pid} ({exe_name}) ended without a final flush (it crashed, was killed, or \
             left through _exit); the run keeps what it had written"
        ));
    }

    let off = defs.clock_offset_ns;
    // This process's counters get run-wide ids.
    let mut counter_ids: HashMap<(u32, u32), (i64, f64)> = HashMap::new();
    let mut counter_keys: Vec<&(u32, u32)> = defs.counters.keys().collect();
    counter_keys.sort();
    for key in counter_keys {
        let (metric, scale) = &defs.counters[key];
        let id = report.counter_metrics.len() as i64 + 1;
        report.counter_metrics.push(CounterMetric {
            id,
            ..metric.clone()
        });
        counter_ids.insert(*key, (id, *scale));
    }
    let mut em = Emitter {
        w,
        pid,
        modules_domain: None,
    };
    let mut stacks: HashMap<(u32, u64), Vec<Open>> = HashMap::new();
    let mut started: HashMap<u64, Open> = HashMap::new();
    let mut unmatched_pops = 0u64;
    let mut short_records = 0u64;
    let mut dec = Dec::new(data);
    let mut records = 0u64;
    while let Some((t, payload)) = dec.record() {
        records += 1;
        if records.is_multiple_of(PROGRESS_EVERY) {
            if let Some((p, base)) = progress {
                p.set_bytes_done(base + dec.pos as u64);
                p.add_events(PROGRESS_EVERY);
            }
        }
        let mut p = Dec::new(payload);
        let res = (|| -> Option<Result<()>> {
            match t {
                tag::KERNEL => {
                    let start_ns = p.u64()? as i64;
                    let end_ns = p.u64()? as i64;
                    let device = p.u32()?;
                    let _ctx = p.u32()?;
                    let stream = p.u32()?;
                    let corr = p.u32()?;
                    let device = defs.device(device);
                    let grid = [p.i32()? as i64, p.i32()? as i64, p.i32()? as i64];
                    let block = [p.i32()? as i64, p.i32()? as i64, p.i32()? as i64];
                    let regs = p.u16()?;
                    let ssmem = p.i32()?;
                    let dsmem = p.i32()?;
                    let name_id = p.u32()?;
                    let graph = p.u32()?;
                    let name = defs.strings.get(&name_id).map_or("<unknown kernel>", |s| s);
                    let name = em.w.intern(name);
                    Some(
                        em.w.kernel(Kernel {
                            start_ns,
                            end_ns,
                            device_id: device as i64,
                            stream_id: stream as i64,
                            pid: Some(pid),
                            correlation_id: Some(corr as i64),
                            external_id: None,
                            name,
                            grid: Some(grid),
                            block: Some(block),
                            registers_per_thread: Some(regs as i64),
                            static_smem_bytes: Some(ssmem as i64),
                            dynamic_smem_bytes: Some(dsmem as i64),
                            graph_id: (graph != 0).then_some(graph as i64),
                        })
                        .map_err(Into::into),
                    )
                }
                tag::MEMCPY | tag::MEMSET => {
                    let start_ns = p.u64()? as i64;
                    let end_ns = p.u64()? as i64;
                    let device = p.u32()?;
                    let _ctx = p.u32()?;
                    let stream = p.u32()?;
                    let corr = p.u32()?;
                    let bytes = p.u64()?;
                    let device = defs.device(device);
                    let (kind, copy_kind, value) = if t == tag::MEMCPY {
                        (
                            MemopKind::Memcpy,
                            Some(CopyKind::from_cupti(p.u8()? as i64)),
                            None,
                        )
                    } else {
                        (MemopKind::Memset, None, Some(p.u32()? as i64))
                    };
                    let _graph_id = p.u32()?;
                    // Version 2 appended the copy's memory kinds (CUPTI numbering).
                    let (src_memory, dst_memory) = if t == tag::MEMCPY && version >= 2 {
                        let src = p.u8()?;
                        let dst = p.u8()?;
                        (
                            MemoryKind::from_cupti(src.into()),
                            MemoryKind::from_cupti(dst.into()),
                        )
                    } else {
                        (None, None)
                    };
                    Some(
                        em.w.memop(Memop {
                            kind,
                            start_ns,
                            end_ns,
                            device_id: device as i64,
                            stream_id: stream as i64,
                            pid: Some(pid),
                            correlation_id: Some(corr as i64),
                            external_id: None,
                            bytes: Some(bytes as i64),
                            copy_kind,
                            value,
                            src_memory,
                            dst_memory,
                        })
                        .map_err(Into::into),
                    )
                }
                tag::API => {
                    let runtime = p.u8()? == 1;
                    let _cbid = p.u32()?;
                    let start_ns = p.u64()? as i64;
                    let end_ns = p.u64()? as i64;
                    let rec_pid = p.u32()? as i64;
                    let tid = p.u32()? as i64;
                    let corr = p.u32()?;
                    let ret = p.u32()?;
                    let name_id = p.u32()?;
                    let name = defs.strings.get(&name_id).map_or("<unknown api>", |s| s);
                    let name = em.w.intern(name);
                    let rec_pid = if rec_pid == 0 { pid } else { rec_pid };
                    em.w.thread(rec_pid, tid, None);
                    Some(
                        em.w.api_call(ApiCall {
                            api: if runtime { Api::Runtime } else { Api::Driver },
                            start_ns,
                            end_ns,
                            pid: rec_pid,
                            tid,
                            correlation_id: Some(corr as i64),
                            external_id: None,
                            name,
                            return_code: Some(ret as i64),
                        })
                        .map_err(Into::into),
                    )
                }
                tag::SYNC => {
                    let kind = p.u32()?;
                    let start_ns = p.u64()? as i64;
                    let end_ns = p.u64()? as i64;
                    let corr = p.u32()?;
                    let ctx = p.u32()?;
                    let stream = p.u32()?;
                    let device = defs.device(defs.context_device.get(&ctx).copied().unwrap_or(0));
                    let name = em.w.intern(sync_name(kind));
                    // GPU-side range: pid/tid are device/stream (u32::MAX = the whole context).
                    let tid = if stream == u32::MAX {
                        -1
                    } else {
                        stream as i64
                    };
                    let mut r = Range::new(RangeKind::CudaSync, name, device as i64, tid, start_ns);
                    r.end_ns = Some(end_ns);
                    r.correlation_id = Some(corr as i64);
                    Some(em.w.range(r).map_err(Into::into))
                }
                tag::OVERHEAD => {
                    let kind = p.u32()?;
                    let object_kind = p.u32()?;
                    let _id0 = p.u32()?;
                    let id1 = p.u32()?;
                    let start_ns = p.u64()? as i64;
                    let end_ns = p.u64()? as i64;
                    // Object kind 2 = thread: id0 is the process, id1 the thread.
                    let tid = if object_kind == 2 { id1 as i64 } else { 0 };
                    let name = em.w.intern(&overhead_name(kind));
                    let cat = em.w.intern("cupti_overhead");
                    let mut r = Range::new(RangeKind::Other, name, pid, tid, start_ns);
                    r.end_ns = Some(end_ns);
                    r.category = Some(cat);
                    Some(em.w.range(r).map_err(Into::into))
                }
                tag::DEVICE => {
                    let id = p.u32()?;
                    let major = p.u32()?;
                    let minor = p.u32()?;
                    let sms = p.u32()?;
                    let mem = p.u64()?;
                    let clock_khz = p.u32()?;
                    let bw_kib = p.u64()?;
                    let name = p.str()?;
                    em.w.device(Device {
                        id: defs.device(id) as i64,
                        name: Some(name),
                        compute_major: Some(major as i64),
                        compute_minor: Some(minor as i64),
                        sm_count: Some(sms as i64),
                        memory_bytes: Some(mem as i64),
                        clock_khz: (clock_khz > 0).then_some(clock_khz as i64),
                        // CUPTI reports the nominal bandwidth in KB/s.
                        mem_bandwidth_bytes_per_s: (bw_kib > 0).then_some(bw_kib as f64 * 1000.0),
                        peak_flops_fp16: None,
                        peak_source: (bw_kib > 0).then(|| "nominal".to_string()),
                    });
                    Some(Ok(()))
                }
                tag::THREAD_NAME => {
                    let tid = p.u32()?;
                    let name = p.str()?;
                    em.w.thread(pid, tid as i64, Some(&name));
                    Some(Ok(()))
                }
                tag::NVTX_PUSH => {
                    let tid = p.u32()?;
                    let ts = p.u64()? as i64 + off;
                    let domain = p.u64()?;
                    let (category, color, text) = read_attrs(&mut p, &defs)?;
                    stacks.entry((tid, domain)).or_default().push(Open {
                        tid,
                        start_ns: ts,
                        domain,
                        category,
                        color,
                        text,
                    });
                    Some(Ok(()))
                }
                tag::NVTX_POP => {
                    let tid = p.u32()?;
                    let ts = p.u64()? as i64 + off;
                    let domain = p.u64()?;
                    let stack = stacks.entry((tid, domain)).or_default();
                    match stack.pop() {
                        Some(o) => {
                            let depth = stack.len() as i64;
                            Some(em.range(
                                RangeKind::NvtxPushPop,
                                &o,
                                Some((ts, tid)),
                                Some(depth),
                                &defs,
                            ))
                        }
                        None => {
                            unmatched_pops += 1;
                            Some(Ok(()))
                        }
                    }
                }
                tag::NVTX_START => {
                    let id = p.u64()?;
                    let tid = p.u32()?;
                    let ts = p.u64()? as i64 + off;
                    let domain = p.u64()?;
                    let (category, color, text) = read_attrs(&mut p, &defs)?;
                    started.insert(
                        id,
                        Open {
                            tid,
                            start_ns: ts,
                            domain,
                            category,
                            color,
                            text,
                        },
                    );
                    Some(Ok(()))
                }
                tag::NVTX_END => {
                    let id = p.u64()?;
                    let tid = p.u32()?;
                    let ts = p.u64()? as i64 + off;
                    match started.remove(&id) {
                        Some(o) => Some(em.range(
                            RangeKind::NvtxStartEnd,
                            &o,
                            Some((ts, tid)),
                            None,
                            &defs,
                        )),
                        None => Some(Ok(())),
                    }
                }
                tag::NVTX_MARK => {
                    let tid = p.u32()?;
                    let ts = p.u64()? as i64 + off;
                    let domain = p.u64()?;
                    let (category, color, text) = read_attrs(&mut p, &defs)?;
                    let o = Open {
                        tid,
                        start_ns: ts,
                        domain,
                        category,
                        color,
                        text,
                    };
                    Some(em.range(RangeKind::NvtxMark, &o, None, None, &defs))
                }
                tag::COUNTER_SAMPLES => {
                    let device = p.u32()?;
                    let n = p.u32()?;
                    let count = p.u32()?;
                    let clocks = defs.gpu_clocks.get(&device).map_or(&[][..], |c| &c[..]);
                    for _ in 0..count {
                        let start = gpu_to_cupti(p.u64()? as i64, clocks);
                        let end = gpu_to_cupti(p.u64()? as i64, clocks);
                        for i in 0..n {
                            let v = p.f64()?;
                            if let Some(&(metric_id, scale)) = counter_ids.get(&(device, i)) {
                                report.counter_samples.push(CounterSample {
                                    metric_id,
                                    start_ns: start,
                                    end_ns: end,
                                    value: v * scale,
                                });
                            }
                        }
                    }
                    Some(Ok(()))
                }
                _ => Some(Ok(())),
            }
        })();
        match res {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            // A whole record shorter than its layout: skipped and counted.
            None => short_records += 1,
        }
    }
    // Ranges still open when the process ended: kept, with no end.
    let mut open: Vec<(Open, Option<i64>, RangeKind)> = Vec::new();
    for (_, stack) in stacks {
        for (depth, o) in stack.into_iter().enumerate() {
            open.push((o, Some(depth as i64), RangeKind::NvtxPushPop));
        }
    }
    for (_, o) in started {
        open.push((o, None, RangeKind::NvtxStartEnd));
    }
    open.sort_by_key(|(o, _, _)| o.start_ns);
    for (o, depth, kind) in open {
        em.range(kind, &o, None, depth, &defs)?;
    }
    if short_records > 0 {
        report.warnings.push(format!(
            "process {pid} ({exe_name}): {short_records} spool records were shorter than their \
             layout and were skipped"
        ));
    }
    if unmatched_pops > 0 {
        report.warnings.push(format!(
            "process {pid} ({exe_name}): {unmatched_pops} NVTX pops had no matching push"
        ));
    }
    Ok(())
}

/// A device-clock time on CUPTI's clock, from the (cupti_ns, gpu_ns) readings the tracer took
/// (interpolated between the two around it, extrapolated from the nearest two outside them);
/// unchanged when there are none (the times are then taken to be on CUPTI's clock already).
fn gpu_to_cupti(gpu_ns: i64, clocks: &[(i64, i64)]) -> i64 {
    match clocks {
        [] => gpu_ns,
        [(c, g)] => gpu_ns + (c - g),
        _ => {
            // The pair of readings around gpu_ns (or the nearest pair outside them).
            let i = clocks
                .partition_point(|&(_, g)| g <= gpu_ns)
                .clamp(1, clocks.len() - 1);
            let (c0, g0) = clocks[i - 1];
            let (c1, g1) = clocks[i];
            if g1 == g0 {
                return gpu_ns + (c0 - g0);
            }
            let rate = (c1 - c0) as f64 / (g1 - g0) as f64;
            c0 + ((gpu_ns - g0) as f64 * rate).round() as i64
        }
    }
}

#[cfg(test)]
mod clock_tests {
    use super::gpu_to_cupti;

    #[test]
    fn device_times_follow_the_clock_readings() {
        assert_eq!(gpu_to_cupti(500, &[]), 500);
        assert_eq!(gpu_to_cupti(500, &[(1_100, 100)]), 1_500);
        // The CUPTI clock ran 1% faster than the device's between the readings.
        let pairs = [(10_000, 0), (111_000, 100_000)];
        assert_eq!(gpu_to_cupti(50_000, &pairs), 60_500);
        assert_eq!(gpu_to_cupti(200_000, &pairs), 212_000);
        assert_eq!(gpu_to_cupti(-100_000, &pairs), -91_000);
    }
}
