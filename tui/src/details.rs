//! The details of a selected record: everything the store has on it, its launch call and
//! the op and module around that call, and the other end of its launch flow.

use fuseprof_store::{parse_range_name, GpuKind, MemopKind, Store};

use crate::data::Meta;
use crate::format::{demangle, dur};
use crate::model::*;

/// The details of the selection, read from the store when it is selected.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    pub title: String,
    pub lines: Vec<(String, String)>,
    /// The other end of the launch flow (the API call of a GPU record, or the first record
    /// an API call launched): (track, span).
    pub flow: Option<(usize, Span)>,
}

/// How far back (in ranges of the thread) the details look for the op and modules around a
/// launch: far enough for a training step's worth of ops, bounded for a range open all run.
const OPEN_RANGES_WALK: i64 = 20_000;

/// What reading details needs.
struct Ctx<'a> {
    store: &'a mut Store,
    names: &'a NameInfo,
    meta: &'a Meta,
}

/// Everything the store has on the record `span` of track `track`: read when it is
/// selected (on a thread of its own unless blocking: the walk back to the ranges around a
/// launch may read tens of thousands of rows).
pub fn read(store: &mut Store, names: &NameInfo, meta: &Meta, track: usize, span: Span) -> Details {
    let r = &mut Ctx { store, names, meta };
    let t0 = r.meta.first_ns;
    let at = |t: i64| format!("{} (from the run's start)", dur(t.saturating_sub(t0)));
    let mut d = Details::default();
    let track_label = r.meta.tracks[track].label.clone();
    let thread_track = |m: &Meta, pid: i64, tid: i64| {
        m.tracks
            .iter()
            .position(|t| t.key == TrackKey::Thread { pid, tid })
    };
    let stream_track = |m: &Meta, device: i64, stream: i64| {
        m.tracks
            .iter()
            .position(|t| t.key == TrackKey::Stream { device, stream })
    };
    let mut launch: Option<(i64, Option<i64>, i64)> = None;
    match span.item {
        ItemRef::Kernel(id) => {
            let Ok(Some(k)) = r.store.kernel_by_id(id) else {
                d.title = "kernel (not found)".into();
                return d;
            };
            let name = r.names.get(k.name).to_string();
            d.title = format!("kernel {}", crate::format::short_kernel(&name));
            d.lines.push(("name".into(), demangle(&name)));
            if name.starts_with("_Z") {
                d.lines.push(("mangled".into(), name.clone()));
            }
            d.lines
                .push(("class".into(), r.names.class_of(k.name).as_str().into()));
            d.lines
                .push(("duration".into(), dur(k.end_ns.saturating_sub(k.start_ns))));
            d.lines.push(("start".into(), at(k.start_ns)));
            d.lines.push((
                "device, stream".into(),
                format!("{} , {}", k.device_id, k.stream_id),
            ));
            let xyz = |v: Option<[i64; 3]>| {
                v.map_or("-".into(), |g| format!("{} x {} x {}", g[0], g[1], g[2]))
            };
            d.lines.push(("grid".into(), xyz(k.grid)));
            d.lines.push(("block".into(), xyz(k.block)));
            let opt = |v: Option<i64>| v.map_or("-".into(), |x| x.to_string());
            d.lines
                .push(("registers/thread".into(), opt(k.registers_per_thread)));
            d.lines.push((
                "shared memory".into(),
                format!(
                    "{} static, {} dynamic (bytes)",
                    opt(k.static_smem_bytes),
                    opt(k.dynamic_smem_bytes)
                ),
            ));
            if let Some(g) = k.graph_id {
                d.lines.push(("CUDA graph".into(), g.to_string()));
            }
            d.lines
                .push(("correlation id".into(), opt(k.correlation_id)));
            if let Ok(rows) = r.store.counters_of_kernel(id) {
                counter_lines(r, &rows, &mut d);
            }
            if let Some(c) = k.correlation_id {
                launch = Some((c, k.pid, k.start_ns));
            }
        }
        ItemRef::Memop(id) => {
            let Ok(Some(m)) = r.store.memop_by_id(id) else {
                d.title = "copy (not found)".into();
                return d;
            };
            let what = match (m.kind, m.copy_kind) {
                (MemopKind::Memcpy, Some(c)) => format!("Memcpy {}", c.as_str()),
                (MemopKind::Memcpy, None) => "Memcpy".into(),
                (MemopKind::Memset, _) => "Memset".into(),
            };
            d.title = what.clone();
            d.lines.push(("kind".into(), what));
            d.lines
                .push(("duration".into(), dur(m.end_ns.saturating_sub(m.start_ns))));
            d.lines.push(("start".into(), at(m.start_ns)));
            d.lines.push((
                "device, stream".into(),
                format!("{} , {}", m.device_id, m.stream_id),
            ));
            if let Some(b) = m.bytes {
                let secs = m.end_ns.saturating_sub(m.start_ns).max(1) as f64 * 1e-9;
                d.lines.push((
                    "bytes".into(),
                    format!(
                        "{} ({:.1} GB/s)",
                        crate::format::count(b as u64),
                        b as f64 / secs / 1e9
                    ),
                ));
            }
            if let Some(v) = m.value {
                d.lines.push(("value".into(), v.to_string()));
            }
            if let Some(c) = m.correlation_id {
                launch = Some((c, m.pid, m.start_ns));
            }
        }
        ItemRef::Range(id) => {
            let Ok(Some(g)) = r.store.range_by_id(id) else {
                d.title = "range (not found)".into();
                return d;
            };
            let raw = r.names.get(g.name).to_string();
            let parsed = parse_range_name(&raw);
            d.title = format!("{} {}", g.kind.as_str(), parsed.name);
            d.lines.push(("name".into(), raw.clone()));
            d.lines.push(("kind".into(), g.kind.as_str().into()));
            match g.end_ns {
                Some(e) => d.lines.push(("duration".into(), dur(e - g.start_ns))),
                None => d
                    .lines
                    .push(("duration".into(), "(mark, or never closed)".into())),
            }
            d.lines.push(("start".into(), at(g.start_ns)));
            d.lines.push((
                "thread".into(),
                format!("{} (pid {}, tid {})", track_label, g.pid, g.tid),
            ));
            if let Some(dep) = g.depth {
                d.lines.push(("depth".into(), dep.to_string()));
            }
            if let Some(dm) = g.domain {
                d.lines.push(("domain".into(), r.names.get(dm).into()));
            }
            if let Some(c) = g.category {
                d.lines.push(("category".into(), r.names.get(c).into()));
            }
            let shapes = g
                .input_dims
                .map(|x| r.names.get(x).to_string())
                .or(parsed.sizes.map(|s| s.to_string()));
            if let Some(s) = shapes {
                d.lines.push(("input shapes".into(), s));
            }
            if let Some(t) = g.input_types {
                d.lines.push(("input dtypes".into(), r.names.get(t).into()));
            }
            // What the kernels launched inside the range measured, in a run with counters.
            if let Some(e) = g.end_ns.filter(|_| has_counters(r)) {
                if let Ok(rows) = r.store.counters_launched_from(g.pid, g.tid, g.start_ns, e) {
                    counter_lines(r, &rows, &mut d);
                }
            }
            if let Some(e) = g.end_ns {
                enclosing(r, g.pid, g.tid, g.start_ns, Some(e), &mut d);
            }
            return d;
        }
        ItemRef::Api(id) => {
            let Ok(Some(c)) = r.store.api_call_by_id(id) else {
                d.title = "API call (not found)".into();
                return d;
            };
            let name = r.names.get(c.name).to_string();
            d.title = format!("{} ({})", name, c.api.as_str());
            d.lines
                .push(("duration".into(), dur(c.end_ns.saturating_sub(c.start_ns))));
            d.lines.push(("start".into(), at(c.start_ns)));
            d.lines.push((
                "thread".into(),
                format!("{} (pid {}, tid {})", track_label, c.pid, c.tid),
            ));
            if let Some(rc) = c.return_code {
                d.lines.push(("return code".into(), rc.to_string()));
            }
            if let Some(corr) = c.correlation_id {
                d.lines.push(("correlation id".into(), corr.to_string()));
                if let Ok(recs) = r.store.launched_records(c.pid, corr) {
                    for (g, dev, st) in recs.iter().take(8) {
                        let label = match g.kind {
                            GpuKind::Kernel => crate::format::short_kernel(r.names.get(g.name)),
                            GpuKind::Memcpy => "Memcpy".into(),
                            GpuKind::Memset => "Memset".into(),
                        };
                        d.lines.push((
                            "launched".into(),
                            format!(
                                "{label} on GPU{dev} s{st}, {} after the call, {}",
                                dur(g.start_ns.saturating_sub(c.start_ns)),
                                dur(g.end_ns.saturating_sub(g.start_ns))
                            ),
                        ));
                    }
                    if recs.len() > 8 {
                        d.lines.push((
                            "launched".into(),
                            format!("… {} records in all", recs.len()),
                        ));
                    }
                    if let Some((g, dev, st)) = recs.first() {
                        if let Some(t) = stream_track(r.meta, *dev, *st) {
                            let mut v = Vec::new();
                            gpu_spans(r.names, &[*g], &mut v);
                            d.flow = v.first().map(|s| (t, *s));
                        }
                    }
                }
            }
            let (pid, tid, s, e) = (c.pid, c.tid, c.start_ns, c.end_ns);
            enclosing(r, pid, tid, s, Some(e), &mut d);
            return d;
        }
        ItemRef::At(..) => {
            d.title = "(record not found in the store)".into();
            return d;
        }
    }
    // GPU records: the launching call and the op and module around it.
    if let Some((corr, pid, start)) = launch {
        match r.store.launch_call(pid, corr) {
            Ok(Some((id, c))) => {
                let name = r.names.get(c.name).to_string();
                d.lines.push((
                    "launched by".into(),
                    format!(
                        "{name}, {} long, {} before the start (pid {}, tid {})",
                        dur(c.end_ns.saturating_sub(c.start_ns)),
                        dur(start.saturating_sub(c.start_ns)),
                        c.pid,
                        c.tid
                    ),
                ));
                if let Some(t) = thread_track(r.meta, c.pid, c.tid) {
                    d.flow = Some((
                        t,
                        Span {
                            start_ns: c.start_ns,
                            end_ns: c.end_ns,
                            key: c.name.0 as u32,
                            name: c.name,
                            item: ItemRef::Api(id),
                        },
                    ));
                }
                enclosing(r, c.pid, c.tid, c.start_ns, None, &mut d);
            }
            _ => d
                .lines
                .push(("launched by".into(), "(no launch call recorded)".into())),
        }
    }
    d
}

/// Whether the run holds hardware counters (`collect --metrics`): a range's kernels are looked
/// up only then.
fn has_counters(r: &mut Ctx) -> bool {
    r.store.counter_metrics().is_ok_and(|m| !m.is_empty())
}

/// Adds what the hardware counters measured for `rows` (one kernel's, or the kernels an op
/// launched): DRAM bytes, the bandwidth they make over the kernels' time against the device's
/// peak, the tensor pipe's activity, and whether the values are shared or estimated. Nothing
/// where there are none.
fn counter_lines(r: &mut Ctx, rows: &[fuseprof_store::NamedKernelCounter], d: &mut Details) {
    let Some(device) = rows.first().map(|x| x.device_id) else {
        return;
    };
    let peak = r
        .store
        .devices()
        .ok()
        .and_then(|ds| ds.into_iter().find(|x| x.id == device))
        .and_then(|x| fuseprof_analyzer::headroom::ceiling_for(&x))
        .map(|c| c.mem_bytes_per_s);
    let Some(g) = fuseprof_analyzer::measured::group(rows, peak) else {
        return;
    };
    let of = if g.kernels > 1 {
        format!(" ({} kernels)", g.kernels)
    } else {
        String::new()
    };
    if let Some(b) = g.dram_bytes {
        d.lines.push((
            "DRAM bytes".into(),
            format!("{:.2} MB read + written, measured{of}", b / 1e6),
        ));
    }
    if let Some(bw) = g.achieved_bytes_per_s {
        let pct = g
            .bandwidth_pct_of_peak
            .map(|p| format!(", {p:.1}% of peak"))
            .unwrap_or_default();
        d.lines
            .push(("achieved".into(), format!("{:.1} GB/s{pct}", bw / 1e9)));
    }
    if let Some(t) = g.tensor_pipe_pct {
        d.lines
            .push(("tensor pipe".into(), format!("{t:.1}% active")));
    }
    let values = match (g.shared, g.estimated) {
        (0, 0) => "measured (CUPTI PM sampling)".to_string(),
        _ if g.kernels == 1 => {
            let mut why = Vec::new();
            if g.shared > 0 {
                why.push("shared with work that ran at the same time");
            }
            if g.estimated > 0 {
                why.push("estimated: the kernel is shorter than a sample");
            }
            why.join("; ")
        }
        (s, e) => format!("of {} kernels, {s} shared, {e} estimated", g.kernels),
    };
    d.lines.push(("counter values".into(), values));
}

/// Adds the op and module open on (pid, tid) at `t` (for a range: around `[t, end)`).
fn enclosing(r: &mut Ctx, pid: i64, tid: i64, t: i64, end: Option<i64>, d: &mut Details) {
    let Ok(open) = r.store.ranges_open_at(pid, tid, t, OPEN_RANGES_WALK) else {
        return;
    };
    let mut op = None;
    let mut module = None;
    let mut stack = Vec::new();
    for h in &open {
        // A range's own row is not its parent.
        if end.is_some() && h.start_ns == t && h.end_ns == end {
            continue;
        }
        let group = r.names.range_group(h.kind, h.domain, h.name);
        let name = parse_range_name(r.names.get(h.name)).name.to_string();
        match group {
            Group::Module if module.is_none() => module = Some((name.clone(), h)),
            Group::Range if op.is_none() && module.is_none() => op = Some((name.clone(), h)),
            _ => {}
        }
        stack.push(name);
    }
    if let Some((name, h)) = op {
        let sizes = parse_range_name(r.names.get(h.name))
            .sizes
            .map(|s| s.to_string());
        d.lines.push(("op".into(), name));
        if let Some(s) = sizes {
            d.lines.push(("op shapes".into(), s));
        } else if let Ok(Some(full)) = r.store.range_by_id(h.id) {
            if let Some(x) = full.input_dims {
                d.lines.push(("op shapes".into(), r.names.get(x).into()));
            }
        }
    }
    if let Some((name, _)) = module {
        d.lines.push(("module".into(), name));
    }
    if !stack.is_empty() {
        stack.reverse();
        d.lines.push(("enclosing".into(), stack.join(" > ")));
    }
}
