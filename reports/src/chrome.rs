//! Chrome-trace JSON (the format Perfetto and chrome://tracing open).
//!
//! Layout: each host process keeps its pid, each thread its tid, and NVTX ranges, ops and API
//! calls sit on their threads. Each GPU becomes a process of its own (pid `GPU_PID_BASE + id`,
//! named "GPU n: <name>") whose threads are its streams, holding kernels, copies and fills.
//! Every kernel, copy or fill whose launching API call is in the run gets a flow arrow from
//! that call. Times are microseconds from the run's first event, so sub-microsecond detail
//! survives the JSON doubles; the offset is in `otherData.fuseprof_origin_ns`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use fuseprof_store::{Api, RangeKind, Store};
use serde_json::json;

/// Process id given to GPU `n` in the export: far above real pids.
pub const GPU_PID_BASE: i64 = 1 << 40;
/// Process id of the "fuseprof advice" track ([`export_marked`]): above every GPU's.
pub const ADVICE_PID: i64 = 1 << 41;
/// The name of the advice track's process.
pub const ADVICE_TRACK: &str = "fuseprof advice";

/// A time range to point a user at: one slice on the advice track, on a row named `row`.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub row: String,
    pub name: String,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Shown with the slice in Perfetto's details.
    pub args: serde_json::Value,
}

/// One mark per setting with a worst step: the step's window, named after the setting and
/// step, on a row of the setting's own (several settings may share a step), with the saving
/// and the names to search for as its details.
pub fn advice_marks(settings: &[fuseprof_fusion_advisor::Setting]) -> Vec<Mark> {
    settings
        .iter()
        .filter_map(|s| {
            let w = s.worst_step.as_ref()?;
            Some(Mark {
                row: s.id.clone(),
                name: format!("{}: step {}", s.id, w.step),
                start_ns: w.start_ns,
                end_ns: w.end_ns,
                args: json!({
                    "title": s.title,
                    "change": s.change,
                    "saving_ns_per_step": s.saving_ns_per_step,
                    "symptom_ns_in_step": w.symptom_ns,
                    "kernels": s.kernels,
                    "ops": s.ops,
                }),
            })
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{}: already exists; refusing to overwrite it", .0.display())]
    Exists(PathBuf),
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
}

/// What an export wrote.
#[derive(Clone, Debug, Default)]
pub struct ExportSummary {
    pub events: u64,
    pub flows: u64,
}

struct Out {
    w: BufWriter<File>,
    first: bool,
    events: u64,
    origin_ns: i64,
}

impl Out {
    fn event(&mut self, v: serde_json::Value) -> std::io::Result<()> {
        if !self.first {
            self.w.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.w, &v)?;
        self.events += 1;
        Ok(())
    }
    fn us(&self, ns: i64) -> f64 {
        (ns - self.origin_ns) as f64 / 1e3
    }
}

/// Writes the run as Chrome-trace JSON to `path` (through a temporary name, renamed at the end,
/// so a failed export leaves nothing that looks complete).
pub fn export(
    store: &mut Store,
    path: &Path,
    overwrite: bool,
) -> Result<ExportSummary, ExportError> {
    export_marked(store, path, overwrite, &[])
}

/// [`export`], with `marks` as slices on a track of their own named [`ADVICE_TRACK`] (one row
/// per [`Mark::row`]), so that the ranges the advice points at show beside the run.
pub fn export_marked(
    store: &mut Store,
    path: &Path,
    overwrite: bool,
    marks: &[Mark],
) -> Result<ExportSummary, ExportError> {
    if !overwrite && path.exists() {
        return Err(ExportError::Exists(path.into()));
    }
    let tmp = tmp_name(path);
    let result = write_trace(store, &tmp, marks);
    match result {
        Ok(summary) => {
            std::fs::rename(&tmp, path).map_err(|source| ExportError::Io {
                path: path.into(),
                error: source,
            })?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn tmp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.json".into());
    path.with_file_name(format!(".{name}.fuseprof-tmp-{}", std::process::id()))
}

enum CounterError {
    Io(std::io::Error),
    Store(fuseprof_store::Error),
}

/// The hardware counters as counter tracks ("C" events) of their GPU's process: a count over
/// each sample (DRAM bytes) as a rate in GB/s, a rate or percentage as it is; a gap between
/// samples drops a count's track to 0. Returns the devices that have counters.
fn write_counters(store: &mut Store, out: &mut Out) -> Result<Vec<i64>, CounterError> {
    let mut devices = Vec::new();
    for m in store.counter_metrics().map_err(CounterError::Store)? {
        let samples = store.counter_samples(m.id).map_err(CounterError::Store)?;
        let sum = m.kind == fuseprof_store::CounterKind::Sum;
        let name = if sum {
            format!("{} (GB/s)", m.quantity)
        } else if m.unit.is_empty() {
            m.quantity.clone()
        } else {
            format!("{} ({})", m.quantity, m.unit)
        };
        let pid = GPU_PID_BASE + m.device_id;
        devices.push(m.device_id);
        for (i, s) in samples.iter().enumerate() {
            let value = if sum {
                // bytes per ns = GB/s
                s.value / (s.end_ns - s.start_ns).max(1) as f64
            } else {
                s.value
            };
            out.event(json!({"ph":"C","name":name,"pid":pid,"ts":out.us(s.start_ns),"args":{"value":value}}))
                .map_err(CounterError::Io)?;
            let next_start = samples.get(i + 1).map(|n| n.start_ns);
            if sum && next_start.is_none_or(|n| n > s.end_ns) {
                out.event(json!({"ph":"C","name":name,"pid":pid,"ts":out.us(s.end_ns),"args":{"value":0.0}}))
                    .map_err(CounterError::Io)?;
            }
        }
    }
    Ok(devices)
}

fn write_trace(
    store: &mut Store,
    tmp: &Path,
    marks: &[Mark],
) -> Result<ExportSummary, ExportError> {
    let io = |source| ExportError::Io {
        path: tmp.into(),
        error: source,
    };
    let info = store.info()?;
    let strings = store.strings()?;
    let file = File::create(tmp).map_err(io)?;
    let mut out = Out {
        w: BufWriter::with_capacity(1 << 20, file),
        first: true,
        events: 0,
        origin_ns: info.first_ns.unwrap_or(0),
    };
    out.w
        .write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
        .map_err(io)?;

    // Names for the tracks.
    for (pid, name) in store.processes()? {
        let label = name.unwrap_or_else(|| format!("process {pid}"));
        out.event(json!({"ph":"M","name":"process_name","pid":pid,"tid":0,"args":{"name":label}}))
            .map_err(io)?;
    }
    for (pid, tid, name) in store.threads()? {
        if let Some(name) = name {
            out.event(
                json!({"ph":"M","name":"thread_name","pid":pid,"tid":tid,"args":{"name":name}}),
            )
            .map_err(io)?;
        }
    }
    let mut device_names = HashMap::new();
    for d in &info.devices {
        device_names.insert(d.id, d.name.clone());
    }

    // Launches by (pid, correlation id): where each flow arrow starts.
    let mut launches: HashMap<(i64, i64), (i64, i64, i64)> = HashMap::new();
    let mut err = None;
    store.for_each_api_call(|a| {
        if let Some(c) = a.correlation_id {
            launches.insert((a.pid, c), (a.tid, a.start_ns, a.end_ns));
        }
        let cat = match a.api {
            Api::Runtime => "cuda_runtime",
            Api::Driver => "cuda_driver",
        };
        let mut args = json!({});
        if let Some(c) = a.correlation_id {
            args["correlation"] = c.into();
        }
        if let Some(r) = a.return_code {
            args["return"] = r.into();
        }
        let ev = json!({"ph":"X","cat":cat,"name":strings.get(a.name),"pid":a.pid,"tid":a.tid,
            "ts":out.us(a.start_ns),"dur":(a.end_ns - a.start_ns).max(0) as f64 / 1e3,"args":args});
        if let Err(e) = out.event(ev) {
            err.get_or_insert(e);
        }
    })?;
    if let Some(e) = err.take() {
        return Err(io(e));
    }

    let mut streams: HashMap<(i64, i64), ()> = HashMap::new();
    let mut flows = 0u64;
    let mut flow = |out: &mut Out,
                    pid: Option<i64>,
                    corr: Option<i64>,
                    gpu_pid: i64,
                    stream: i64,
                    start_ns: i64|
     -> std::io::Result<()> {
        let (Some(pid), Some(c)) = (pid, corr) else {
            return Ok(());
        };
        let Some(&(tid, launch_ns, _)) = launches.get(&(pid, c)) else {
            return Ok(());
        };
        flows += 1;
        let id = flows;
        out.event(json!({"ph":"s","cat":"launch","name":"launch","id":id,"pid":pid,"tid":tid,"ts":out.us(launch_ns)}))?;
        out.event(json!({"ph":"f","bp":"e","cat":"launch","name":"launch","id":id,"pid":gpu_pid,"tid":stream,"ts":out.us(start_ns)}))
    };

    store.for_each_kernel(|k| {
        let gpu_pid = GPU_PID_BASE + k.device_id;
        streams.insert((k.device_id, k.stream_id), ());
        let mut args = json!({"device":k.device_id,"stream":k.stream_id});
        if let Some(c) = k.correlation_id {
            args["correlation"] = c.into();
        }
        if let Some(g) = k.grid {
            args["grid"] = json!(g);
        }
        if let Some(b) = k.block {
            args["block"] = json!(b);
        }
        if let Some(r) = k.registers_per_thread {
            args["registers per thread"] = r.into();
        }
        let smem = k.static_smem_bytes.unwrap_or(0) + k.dynamic_smem_bytes.unwrap_or(0);
        args["shared memory"] = smem.into();
        let ev = json!({"ph":"X","cat":"kernel","name":strings.get(k.name),"pid":gpu_pid,"tid":k.stream_id,
            "ts":out.us(k.start_ns),"dur":(k.end_ns - k.start_ns).max(0) as f64 / 1e3,"args":args});
        let r = out
            .event(ev)
            .and_then(|()| flow(&mut out, k.pid, k.correlation_id, gpu_pid, k.stream_id, k.start_ns));
        if let Err(e) = r {
            err.get_or_insert(e);
        }
    })?;
    store.for_each_memop(|m| {
        let gpu_pid = GPU_PID_BASE + m.device_id;
        streams.insert((m.device_id, m.stream_id), ());
        let name = match (m.kind, m.copy_kind) {
            (fuseprof_store::MemopKind::Memcpy, Some(k)) => format!("Memcpy {}", k.as_str()),
            (fuseprof_store::MemopKind::Memcpy, None) => "Memcpy".to_string(),
            (fuseprof_store::MemopKind::Memset, _) => "Memset".to_string(),
        };
        let cat = match m.kind {
            fuseprof_store::MemopKind::Memcpy => "gpu_memcpy",
            fuseprof_store::MemopKind::Memset => "gpu_memset",
        };
        let mut args = json!({"device":m.device_id,"stream":m.stream_id});
        if let Some(b) = m.bytes {
            args["bytes"] = b.into();
        }
        let ev = json!({"ph":"X","cat":cat,"name":name,"pid":gpu_pid,"tid":m.stream_id,
            "ts":out.us(m.start_ns),"dur":(m.end_ns - m.start_ns).max(0) as f64 / 1e3,"args":args});
        let r = out.event(ev).and_then(|()| {
            flow(
                &mut out,
                m.pid,
                m.correlation_id,
                gpu_pid,
                m.stream_id,
                m.start_ns,
            )
        });
        if let Err(e) = r {
            err.get_or_insert(e);
        }
    })?;
    if let Some(e) = err.take() {
        return Err(io(e));
    }

    store.for_each_range(|r| {
        let (pid, tid) = if r.kind.is_gpu_side() {
            streams.insert((r.pid, r.tid), ());
            (GPU_PID_BASE + r.pid, r.tid)
        } else {
            (r.pid, r.tid)
        };
        let cat = match r.category {
            Some(c) if r.kind == RangeKind::Other || r.kind == RangeKind::Instant => strings.get(c),
            _ => r.kind.as_str(),
        };
        let mut args = json!({});
        if let Some(d) = r.domain {
            args["domain"] = strings.get(d).into();
        }
        if let Some(x) = r.external_id {
            args["External id"] = x.into();
        }
        if let Some(d) = r.input_dims {
            args["Input Dims"] = serde_json::from_str(strings.get(d)).unwrap_or(serde_json::Value::Null);
        }
        let ev = match r.end_ns {
            Some(end) if !matches!(r.kind, RangeKind::NvtxMark | RangeKind::Instant) => {
                json!({"ph":"X","cat":cat,"name":strings.get(r.name),"pid":pid,"tid":tid,
                    "ts":out.us(r.start_ns),"dur":(end - r.start_ns).max(0) as f64 / 1e3,"args":args})
            }
            // Marks, and ranges that never closed, are instants.
            _ => json!({"ph":"i","s":"t","cat":cat,"name":strings.get(r.name),"pid":pid,"tid":tid,
                "ts":out.us(r.start_ns),"args":args}),
        };
        if let Err(e) = out.event(ev) {
            err.get_or_insert(e);
        }
    })?;
    if let Some(e) = err.take() {
        return Err(io(e));
    }

    let mut gpus: Vec<i64> = streams.keys().map(|(d, _)| *d).collect();
    gpus.extend(write_counters(store, &mut out).map_err(|e| match e {
        CounterError::Io(e) => io(e),
        CounterError::Store(e) => ExportError::Store(e),
    })?);
    gpus.sort_unstable();
    gpus.dedup();
    for d in gpus {
        let label = match device_names.get(&d).cloned().flatten() {
            Some(n) => format!("GPU {d}: {n}"),
            None => format!("GPU {d}"),
        };
        out.event(json!({"ph":"M","name":"process_name","pid":GPU_PID_BASE + d,"tid":0,"args":{"name":label}}))
            .map_err(io)?;
    }
    let mut keys: Vec<_> = streams.into_keys().collect();
    keys.sort_unstable();
    for (d, s) in keys {
        out.event(json!({"ph":"M","name":"thread_name","pid":GPU_PID_BASE + d,"tid":s,"args":{"name":format!("stream {s}")}}))
            .map_err(io)?;
    }
    if !marks.is_empty() {
        out.event(json!({"ph":"M","name":"process_name","pid":ADVICE_PID,"tid":0,"args":{"name":ADVICE_TRACK}}))
            .map_err(io)?;
        // Above the run's own processes in Perfetto's list.
        out.event(json!({"ph":"M","name":"process_sort_index","pid":ADVICE_PID,"tid":0,"args":{"sort_index":-1}}))
            .map_err(io)?;
        let mut rows: Vec<&str> = Vec::new();
        for m in marks {
            let tid = match rows.iter().position(|r| *r == m.row) {
                Some(i) => i,
                None => {
                    rows.push(&m.row);
                    out.event(json!({"ph":"M","name":"thread_name","pid":ADVICE_PID,
                        "tid":rows.len() - 1,"args":{"name":m.row}}))
                        .map_err(io)?;
                    rows.len() - 1
                }
            };
            out.event(
                json!({"ph":"X","cat":"fuseprof_advice","name":m.name,"pid":ADVICE_PID,
                "tid":tid,"ts":out.us(m.start_ns),"dur":(m.end_ns - m.start_ns).max(0) as f64 / 1e3,
                "args":m.args}),
            )
            .map_err(io)?;
        }
    }
    let events = out.events;
    let other =
        json!({"fuseprof_origin_ns": out.origin_ns, "source_format": info.run.source_format});
    write!(out.w, "\n],\"otherData\":{other}}}\n").map_err(io)?;
    let file = out.w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(ExportSummary { events, flows })
}
