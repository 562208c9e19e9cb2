//! Reading a run for the timeline: its tracks and bounds (index seeks only), the whole-run
//! summary (one pass per table, published table by table), and raw windows of one track.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use fuseprof_store::{
    Direction, LeanCall, PassKernel, PassMemop, PassRange, RowEstimates, Store, StrId,
};

use crate::model::*;
use crate::{Error, Result};

/// A track as the timeline lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Track {
    pub key: TrackKey,
    pub label: String,
}

/// What is known about a run before any record is read.
#[derive(Clone, Debug)]
pub struct Meta {
    pub path: PathBuf,
    pub tracks: Vec<Track>,
    pub first_ns: i64,
    pub last_ns: i64,
    pub rows: RowEstimates,
}

impl Meta {
    /// The track index of a stream or thread (looked up once per record by the summary pass,
    /// hence FxHash).
    pub fn track_index(&self) -> rustc_hash::FxHashMap<TrackKey, usize> {
        self.tracks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.key, i))
            .collect()
    }
}

pub(crate) const NS_PER_YEAR: i64 = 365 * 24 * 3600 * 1_000_000_000;
/// The times the explorer draws: within this of 1970 (1844 to 2096), so that a window, its
/// offset from another run's and ten times the run's span all fit an i64 of nanoseconds.
pub(crate) const MAX_ABS_NS: i64 = 126 * NS_PER_YEAR;
/// The longest run the explorer draws.
pub(crate) const MAX_SPAN_NS: i64 = 9 * NS_PER_YEAR;

/// Opens `path` as a run for the timeline: refuses what is not a run, runs without GPU
/// records, and runs whose times it cannot draw (a corrupt or absurd clock).
pub fn open(path: &Path) -> Result<(Store, Meta)> {
    let mut store = Store::open(path)?;
    let rows = store.row_estimates()?;
    if rows.kernels == 0 && rows.memops == 0 {
        return Err(Error::NoGpuWork { path: path.into() });
    }
    let streams = store.timeline_streams()?;
    let mut threads = store.timeline_threads()?;
    let processes: Vec<i64> = store.processes()?.into_iter().map(|p| p.0).collect();
    // GPU-side ranges use (device, stream) as (pid, tid): those keys are streams, not threads.
    threads.retain(|t| !streams.contains(t) || processes.contains(&t.0));
    let names: HashMap<(i64, i64), String> = store
        .threads()?
        .into_iter()
        .filter_map(|(p, t, n)| n.map(|n| ((p, t), n)))
        .collect();
    let (first_ns, last_ns) = store.timeline_bounds(&streams, &threads)?.unwrap_or((0, 1));
    if first_ns.unsigned_abs() > MAX_ABS_NS as u64
        || last_ns.unsigned_abs() > MAX_ABS_NS as u64
        || last_ns.saturating_sub(first_ns) > MAX_SPAN_NS
    {
        return Err(Error::TimeRange {
            path: path.into(),
            first_ns,
            last_ns,
        });
    }
    let mut tracks: Vec<Track> = streams
        .iter()
        .map(|&(device, stream)| Track {
            key: TrackKey::Stream { device, stream },
            label: format!("GPU{device} s{stream}"),
        })
        .collect();
    tracks.extend(threads.iter().map(|&(pid, tid)| Track {
        key: TrackKey::Thread { pid, tid },
        label: match names.get(&(pid, tid)) {
            Some(n) if n.contains(&tid.to_string()) => n.clone(),
            Some(n) if !n.is_empty() => format!("{n} {tid}"),
            _ if pid == tid => format!("main {tid}"),
            _ => format!("thread {tid}"),
        },
    }));
    Ok((
        store,
        Meta {
            path: path.into(),
            tracks,
            first_ns,
            last_ns: last_ns.max(first_ns + 1),
            rows,
        },
    ))
}

/// The lanes' bin builders of one table's pass, found by (track, lane) with the last one
/// remembered (records of one lane mostly come in runs).
struct Builders {
    /// Position in `list` by track and lane code ([`lane_code`]), or `usize::MAX`.
    index: Vec<usize>,
    list: Vec<(LaneId, BinBuilder)>,
}

/// Lane codes per track: the four fixed lanes, then modules and ranges by depth (deeper
/// lanes share the last code's bins).
const LANE_CODES: usize = 4 + 2 * 256;

fn lane_code(lane: LaneKind) -> usize {
    match lane {
        LaneKind::Gpu => 0,
        LaneKind::GpuRanges => 1,
        LaneKind::Other => 2,
        LaneKind::Api => 3,
        LaneKind::Module(d) => 4 + 2 * (d as usize).min(255),
        LaneKind::Range(d) => 5 + 2 * (d as usize).min(255),
    }
}

impl Builders {
    fn new(tracks: usize) -> Self {
        Builders {
            index: vec![usize::MAX; tracks * LANE_CODES],
            list: Vec::new(),
        }
    }
    fn get(&mut self, id: LaneId, gpu: bool) -> &mut BinBuilder {
        let slot = id.0 * LANE_CODES + lane_code(id.1);
        if self.index[slot] == usize::MAX {
            self.index[slot] = self.list.len();
            self.list.push((id, BinBuilder::new(gpu)));
        }
        &mut self.list[self.index[slot]].1
    }
    fn finish(&mut self, table: &'static str, summary: &Summary) -> PassPart {
        self.index.iter_mut().for_each(|i| *i = usize::MAX);
        PassPart {
            table,
            names: Vec::new(),
            lanes: self
                .list
                .drain(..)
                .map(|(k, b)| (k, b.finish(summary)))
                .collect(),
        }
    }
}

/// One table's lanes of the summary, as the pass finishes them.
pub struct PassPart {
    pub table: &'static str,
    pub lanes: HashMap<LaneId, LaneBins>,
    /// Which string ids name a record of the table (kernels, ranges; empty for API calls),
    /// so that a search need not scan a table for a name it never uses.
    pub names: Vec<bool>,
}

/// The whole-run summary: one lean page scan per table (kernels and memops, ranges, API
/// calls), each table's lanes handed to `publish` when its scan ends.
pub fn summarize(
    store: &mut Store,
    names: &NameInfo,
    meta: &Meta,
    summary: &Summary,
    mut publish: impl FnMut(PassPart),
) -> Result<()> {
    let mut s = Summarizer::new(names, meta, summary);
    store.for_each_span_kernel(|k| s.push_kernel(k))?;
    store.for_each_span_memop(|m| s.push_memop(m))?;
    publish(s.gpu_part());
    store.for_each_span_range(|r| s.push_range(r))?;
    publish(s.ranges_part());
    store.for_each_lean_call(|c| s.push_call(c))?;
    publish(s.api_part());
    Ok(())
}

/// Ranges kept back per thread to be nested in start order, and their nesting.
type Nesting = (Reorder<(LaneKindBase, StrId)>, Nester);

/// The whole-run summary built from rows handed to it, whatever reads them: each table's
/// rows in row order (kernels and copies, ranges, API calls; the tables in any order), each
/// table's lanes taken when its rows are in. [`summarize`] reads them itself; `import` hands
/// it the rows its analysis reads.
pub struct Summarizer<'m> {
    names: &'m NameInfo,
    summary: &'m Summary,
    index: rustc_hash::FxHashMap<TrackKey, usize>,
    gpu: Builders,
    ranges: Builders,
    api: Builders,
    /// The last stream's and threads' tracks (records of one mostly come in runs).
    last_stream: Option<((i64, i64), usize)>,
    last_range_thread: Option<((i64, i64), usize)>,
    last_call_thread: Option<((i64, i64), usize)>,
    /// Each name's class key.
    kernel_key: Vec<u32>,
    gpu_names: Vec<bool>,
    range_names: Vec<bool>,
    reorder: Vec<Option<Nesting>>,
}

impl<'m> Summarizer<'m> {
    pub fn new(names: &'m NameInfo, meta: &Meta, summary: &'m Summary) -> Self {
        let tracks = meta.tracks.len();
        Summarizer {
            names,
            summary,
            index: meta.track_index(),
            gpu: Builders::new(tracks),
            ranges: Builders::new(tracks),
            api: Builders::new(tracks),
            last_stream: None,
            last_range_thread: None,
            last_call_thread: None,
            kernel_key: names.class.iter().map(|&c| class_index(c)).collect(),
            gpu_names: vec![false; names.class.len()],
            range_names: vec![false; names.class.len()],
            reorder: (0..tracks).map(|_| None).collect(),
        }
    }

    fn stream_track(&mut self, d: i64, s: i64) -> Option<usize> {
        if let Some((k, t)) = self.last_stream {
            if k == (d, s) {
                return Some(t);
            }
        }
        let t = *self.index.get(&TrackKey::Stream {
            device: d,
            stream: s,
        })?;
        self.last_stream = Some(((d, s), t));
        Some(t)
    }

    pub fn push_kernel(&mut self, k: &PassKernel) {
        if let Some(t) = self.stream_track(k.device_id, k.stream_id) {
            let key = self
                .kernel_key
                .get(k.name.0 as usize)
                .copied()
                .unwrap_or(11);
            if let Some(u) = self.gpu_names.get_mut(k.name.0 as usize) {
                *u = true;
            }
            self.gpu.get((t, LaneKind::Gpu), true).add(
                self.summary,
                k.start_ns,
                k.end_ns,
                key,
                k.name,
                ItemRef::At(k.start_ns, k.name),
            );
        }
    }

    pub fn push_memop(&mut self, m: &PassMemop) {
        if let Some(t) = self.stream_track(m.device_id, m.stream_id) {
            let kind = match m.kind {
                fuseprof_store::MemopKind::Memcpy => fuseprof_store::GpuKind::Memcpy,
                fuseprof_store::MemopKind::Memset => fuseprof_store::GpuKind::Memset,
            };
            self.gpu.get((t, LaneKind::Gpu), true).add(
                self.summary,
                m.start_ns,
                m.end_ns,
                self.names.gpu_key(kind, StrId(0)),
                StrId(0),
                ItemRef::At(m.start_ns, StrId(0)),
            );
        }
    }

    /// The kernels' and copies' lanes.
    pub fn gpu_part(&mut self) -> PassPart {
        let mut part = self.gpu.finish("kernels", self.summary);
        part.names = std::mem::replace(&mut self.gpu_names, vec![false; self.names.class.len()]);
        part
    }

    fn add_range(&mut self, t: usize, lane: LaneKind, s: i64, e: i64, name: StrId) {
        self.ranges.get((t, lane), false).add(
            self.summary,
            s,
            e,
            name.0 as u32,
            name,
            ItemRef::At(s, name),
        );
    }

    /// Ranges: stored depth where the source gives it (fuseprof's own runs), else nested per
    /// thread in start order.
    pub fn push_range(&mut self, r: &PassRange) {
        if let Some(u) = self.range_names.get_mut(r.name.0 as usize) {
            *u = true;
        }
        let group = self.names.range_group(r.kind, r.domain, r.name);
        let thread = TrackKey::Thread {
            pid: r.pid,
            tid: r.tid,
        };
        let t = match self.last_range_thread {
            Some((k, t)) if k == (r.pid, r.tid) && group != Group::Gpu => t,
            // GPU-side ranges belong on their stream; where (pid, tid) names no stream, they
            // stay on the thread track that the store lists for them.
            _ if group == Group::Gpu => {
                let stream = TrackKey::Stream {
                    device: r.pid,
                    stream: r.tid,
                };
                let Some(&t) = self.index.get(&stream).or_else(|| self.index.get(&thread)) else {
                    return;
                };
                t
            }
            _ => {
                let Some(&t) = self.index.get(&thread) else {
                    return;
                };
                self.last_range_thread = Some(((r.pid, r.tid), t));
                t
            }
        };
        let end = r.end_ns.unwrap_or(r.start_ns).max(r.start_ns);
        match (group, r.depth) {
            (Group::Module | Group::Range, None) => {
                let base = if group == Group::Module {
                    LaneKindBase::Module
                } else {
                    LaneKindBase::Range
                };
                let (buf, nester) = self.reorder[t]
                    .get_or_insert_with(|| (Reorder::new(REORDER_WINDOW), Nester::default()));
                if let Some((s, e, (base, name))) = buf.push(r.start_ns, end, (base, r.name)) {
                    let d = nester.push(s, e);
                    self.add_range(t, base.lane(d), s, e, name);
                }
            }
            (g, d) => self.add_range(t, lane_of(g, d.unwrap_or(0)), r.start_ns, end, r.name),
        }
    }

    /// The ranges' lanes, once the ranges kept back are nested.
    pub fn ranges_part(&mut self) -> PassPart {
        let fresh = (0..self.reorder.len()).map(|_| None).collect();
        let reorder = std::mem::replace(&mut self.reorder, fresh);
        for (t, nesting) in reorder.into_iter().enumerate() {
            let Some((mut buf, mut nester)) = nesting else {
                continue;
            };
            while let Some((s, e, (base, name))) = buf.pop() {
                let d = nester.push(s, e);
                self.add_range(t, base.lane(d), s, e, name);
            }
            if buf.late > 0 {
                tracing::debug!(
                    "track {t}: {} ranges were further out of start order than \
                     {REORDER_WINDOW}; their depth may be off",
                    buf.late
                );
            }
        }
        let mut part = self.ranges.finish("ranges", self.summary);
        part.names = std::mem::replace(&mut self.range_names, vec![false; self.names.class.len()]);
        part
    }

    pub fn push_call(&mut self, a: &LeanCall) {
        let t = match self.last_call_thread {
            Some((k, t)) if k == (a.pid, a.tid) => t,
            _ => {
                let Some(&t) = self.index.get(&TrackKey::Thread {
                    pid: a.pid,
                    tid: a.tid,
                }) else {
                    return;
                };
                self.last_call_thread = Some(((a.pid, a.tid), t));
                t
            }
        };
        self.api.get((t, LaneKind::Api), false).add(
            self.summary,
            a.start_ns,
            a.end_ns,
            0,
            StrId(0),
            ItemRef::At(a.start_ns, StrId(0)),
        );
    }

    /// The API calls' lanes.
    pub fn api_part(&mut self) -> PassPart {
        self.api.finish("api_calls", self.summary)
    }
}

/// The rows an analysis reads (`import` keeps both summaries from one read of each table).
impl fuseprof_analyzer::RowObserver for Summarizer<'_> {
    fn range(&mut self, r: &fuseprof_store::LeanRange) {
        self.push_range(&PassRange {
            kind: r.kind,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            pid: r.pid,
            tid: r.tid,
            domain: r.domain,
            name: r.name,
            depth: r.depth,
        });
    }
    fn call(&mut self, c: &LeanCall) {
        self.push_call(c);
    }
    fn kernel(&mut self, k: &fuseprof_store::LeanKernel) {
        self.push_kernel(&PassKernel {
            start_ns: k.start_ns,
            end_ns: k.end_ns,
            device_id: k.device_id,
            stream_id: k.stream_id,
            name: k.name,
        });
    }
    fn memop(&mut self, m: &fuseprof_store::LeanMemop) {
        self.push_memop(&PassMemop {
            kind: m.kind,
            start_ns: m.start_ns,
            end_ns: m.end_ns,
            device_id: m.device_id,
            stream_id: m.stream_id,
        });
    }
}

/// Ranges without a stored depth may come this far out of start order (per thread) and
/// still nest right (Kineto traces come sorted: none of the fixtures or the 10 M benchmark
/// run needs more); a small heap stays in cache.
const REORDER_WINDOW: usize = 256;

/// A lane group that takes a depth.
#[derive(Clone, Copy, Debug)]
pub enum LaneKindBase {
    Module,
    Range,
}

impl LaneKindBase {
    fn lane(self, depth: i64) -> LaneKind {
        match self {
            LaneKindBase::Module => lane_of(Group::Module, depth),
            LaneKindBase::Range => lane_of(Group::Range, depth),
        }
    }
}

/// The records of track `track` in `[from_ns, to_ns)` read through the indexes, with what
/// is open at `from_ns`: long records the summary kept (`long`, by lane), else the ranges the
/// store finds open there.
pub fn read_raw(
    store: &mut Store,
    names: &NameInfo,
    key: TrackKey,
    from_ns: i64,
    to_ns: i64,
    long: Option<&[(LaneKind, Span)]>,
    lookback_ns: i64,
) -> Result<RawWindow> {
    let limit = RAW_LIMIT as i64;
    let read_from = from_ns.saturating_sub(lookback_ns);
    let mut w = RawWindow {
        from_ns,
        to_ns,
        lanes: BTreeMap::new(),
        complete: true,
        records: 0,
    };
    match key {
        TrackKey::Stream { device, stream } => {
            let gpu = store.stream_window(device, stream, read_from, to_ns, limit)?;
            w.complete &= gpu.len() < limit as usize;
            w.records += gpu.len();
            let mut spans = Vec::new();
            if let Some(long) = long {
                spans.extend(
                    long.iter()
                        .filter(|(l, s)| *l == LaneKind::Gpu && s.start_ns < read_from)
                        .map(|(_, s)| *s),
                );
            }
            gpu_spans(names, &gpu, &mut spans);
            if !spans.is_empty() {
                w.lanes.insert(LaneKind::Gpu, spans);
            }
            let ranges = store.thread_ranges_window(device, stream, read_from, to_ns, limit)?;
            w.complete &= ranges.len() < limit as usize;
            w.records += ranges.len();
            let open: Vec<(LaneKind, Span)> = long
                .unwrap_or(&[])
                .iter()
                .filter(|(l, s)| *l == LaneKind::GpuRanges && s.start_ns < read_from)
                .copied()
                .collect();
            if !ranges.is_empty() || !open.is_empty() {
                range_spans(names, &ranges, &open, &mut w.lanes);
            }
        }
        TrackKey::Thread { pid, tid } => {
            let mut ranges = store.thread_ranges_window(pid, tid, read_from, to_ns, limit)?;
            w.complete &= ranges.len() < limit as usize;
            w.records += ranges.len();
            let open: Vec<(LaneKind, Span)> = match long {
                Some(long) => long
                    .iter()
                    .filter(|(l, s)| *l != LaneKind::Api && s.start_ns < read_from)
                    .copied()
                    .collect(),
                None => {
                    // No summary yet: ask the store what is open at the read start.
                    let mut open = store.ranges_open_at(pid, tid, read_from, 5_000)?;
                    open.retain(|r| r.start_ns < read_from);
                    open.reverse();
                    ranges.splice(0..0, open);
                    Vec::new()
                }
            };
            range_spans(names, &ranges, &open, &mut w.lanes);
            let api = store.thread_api_window(pid, tid, read_from, to_ns, limit)?;
            w.complete &= api.len() < limit as usize;
            w.records += api.len();
            if !api.is_empty() {
                w.lanes.insert(
                    LaneKind::Api,
                    api.iter()
                        .map(|a| Span {
                            start_ns: a.start_ns,
                            end_ns: a.end_ns.max(a.start_ns),
                            key: a.name.0 as u32,
                            name: a.name,
                            item: ItemRef::Api(a.id),
                        })
                        .collect(),
                );
            }
        }
    }
    Ok(w)
}

/// The long records of the summary for one track, with their lanes.
pub fn long_spans(summary: &Summary, track: usize) -> Vec<(LaneKind, Span)> {
    let mut out: Vec<(LaneKind, Span)> = summary
        .lanes
        .iter()
        .filter(|((t, _), _)| *t == track)
        .flat_map(|((_, lane), bins)| bins.long.iter().map(move |s| (*lane, *s)))
        .collect();
    out.sort_by_key(|(l, s)| (s.start_ns, *l));
    out
}

/// Records sampled per column and table for a [`Probe`].
const PROBE_GPU_SAMPLES: i64 = 8;
const PROBE_RANGE_SAMPLES: i64 = 32;

/// Estimated columns of track `key` for `cols` columns of `[from_ns, to_ns)`, from the first
/// records of each column (one index seek per column and table): the timeline's picture
/// before the summary pass has read the track's table.
pub fn probe(
    store: &mut Store,
    names: &NameInfo,
    key: TrackKey,
    from_ns: i64,
    to_ns: i64,
    cols: usize,
) -> Result<Probe> {
    let w = ((to_ns - from_ns) / cols.max(1) as i64).max(1);
    let starts: Vec<i64> = (0..cols as i64).map(|c| from_ns + c * w).collect();
    let mut samples: Vec<Vec<(LaneKind, Span)>> = vec![Vec::new(); cols];
    let mut full = vec![false; cols];
    let mut lanes = BTreeMap::new();
    match key {
        TrackKey::Stream { device, stream } => {
            let gpu = store.stream_samples(device, stream, &starts, w, PROBE_GPU_SAMPLES)?;
            for (c, g) in gpu.iter().enumerate() {
                full[c] = g.len() as i64 >= PROBE_GPU_SAMPLES;
                let mut spans = Vec::new();
                gpu_spans(names, g, &mut spans);
                samples[c] = spans.into_iter().map(|s| (LaneKind::Gpu, s)).collect();
            }
            lanes.extend(probe_cells(
                &samples,
                &full,
                from_ns,
                from_ns + w * cols as i64,
            ));
        }
        TrackKey::Thread { pid, tid } => {
            let ranges = store.thread_range_samples(pid, tid, &starts, w, PROBE_RANGE_SAMPLES)?;
            for (c, rs) in ranges.iter().enumerate() {
                full[c] = rs.len() as i64 >= PROBE_RANGE_SAMPLES;
                let mut by_lane = BTreeMap::new();
                range_spans(names, rs, &[], &mut by_lane);
                samples[c] = by_lane
                    .into_iter()
                    .flat_map(|(l, v)| v.into_iter().map(move |s| (l, s)))
                    .collect();
                samples[c].sort_by_key(|(_, s)| s.start_ns);
            }
            lanes.extend(probe_cells(
                &samples,
                &full,
                from_ns,
                from_ns + w * cols as i64,
            ));
        }
    }
    Ok(Probe {
        from_ns,
        to_ns,
        cols,
        lanes,
    })
}

/// The next (or previous) instance of `inst` from `(start_ns, id)` over every stream and
/// thread of a run: one index scan per track and name list, from there until a match.
pub fn find_instance(
    store: &mut Store,
    names: &NameInfo,
    tracks: &[Track],
    inst: &Instances,
    from: (i64, i64),
    dir: Direction,
) -> Result<Option<Found>> {
    let mut best: Option<Found> = None;
    let better = |a: i64, b: i64| match dir {
        Direction::Forward => a < b,
        Direction::Backward => a > b,
    };
    for (track, t) in tracks.iter().enumerate() {
        let mut found: Vec<(Span, Option<LaneKind>)> = Vec::new();
        match t.key {
            TrackKey::Stream { device, stream } => {
                let mut v = Vec::new();
                if !inst.kernels.is_empty() {
                    v.extend(store.next_kernel_named(device, stream, from, &inst.kernels, dir)?);
                }
                for &(kind, copy) in &inst.memops {
                    v.extend(store.next_memop(device, stream, from, kind, copy, dir)?);
                }
                let mut spans = Vec::new();
                gpu_spans(names, &v, &mut spans);
                found.extend(spans.into_iter().map(|s| (s, Some(LaneKind::Gpu))));
            }
            TrackKey::Thread { pid, tid } => {
                for (list, dims) in &inst.ranges {
                    if list.is_empty() {
                        continue;
                    }
                    if let Some(h) =
                        store.next_range_named(pid, tid, from, list, dims.as_deref(), dir)?
                    {
                        let group = names.range_group(h.kind, h.domain, h.name);
                        found.push((
                            Span {
                                start_ns: h.start_ns,
                                end_ns: h.end_ns.unwrap_or(h.start_ns).max(h.start_ns),
                                key: h.name.0 as u32,
                                name: h.name,
                                item: ItemRef::Range(h.id),
                            },
                            h.depth.map(|d| lane_of(group, d)),
                        ));
                    }
                }
            }
        }
        for (span, lane) in found {
            if best
                .as_ref()
                .is_none_or(|b| better(span.start_ns, b.span.start_ns))
            {
                best = Some(Found { track, span, lane });
            }
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swin() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("swin.sqlite");
        let gz = fuseprof_fixtures::path("recordings/swin_t_infer_modules.sqlite.gz");
        let mut r = flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap());
        std::io::copy(&mut r, &mut std::fs::File::create(&out).unwrap()).unwrap();
        (dir, out)
    }

    /// The sampled picture (before the summary) against the summary's on a real run: the
    /// same columns busy and idle, close busy fractions.
    #[test]
    fn samples_estimate_what_the_summary_finds() {
        let (_dir, path) = swin();
        let (mut store, meta) = open(&path).unwrap();
        let names = NameInfo::load(&mut store).unwrap();
        let summary = Summary::new(meta.first_ns, meta.last_ns);
        let mut parts = Vec::new();
        summarize(&mut store, &names, &meta, &summary, |p| parts.push(p)).unwrap();
        let lanes: HashMap<LaneId, LaneBins> = parts.into_iter().flat_map(|p| p.lanes).collect();
        let (from, to, n) = (meta.first_ns, meta.last_ns, 120);
        let mut errors = Vec::new();
        for (t, track) in meta.tracks.iter().enumerate() {
            let p = probe(&mut store, &names, track.key, from, to, n).unwrap();
            for (lane, sampled) in &p.lanes {
                let Some(bins) = lanes.get(&(t, *lane)) else {
                    panic!("{lane:?} of {} sampled but not in the summary", track.label);
                };
                let exact = cells_from_bins(&summary, bins, from, to, n);
                let diff: f32 = sampled
                    .iter()
                    .zip(&exact)
                    .map(|(a, b)| (a.busy - b.busy).abs())
                    .sum::<f32>()
                    / n as f32;
                errors.push(diff);
                assert!(sampled.iter().all(|c| c.sampled && c.known));
            }
            if matches!(track.key, TrackKey::Stream { .. }) {
                let g = &p.lanes[&LaneKind::Gpu];
                let exact = cells_from_bins(&summary, &lanes[&(t, LaneKind::Gpu)], from, to, n);
                let idle = |c: &Cell| c.busy < 0.01;
                let agree = g
                    .iter()
                    .zip(&exact)
                    .filter(|(a, b)| idle(a) == idle(b))
                    .count();
                assert!(
                    agree as f64 >= 0.9 * n as f64,
                    "{agree} of {n} columns agree"
                );
            }
        }
        // An estimate: every lane within 0.3 of the summary's busy fraction on average, and
        // the lanes together within 0.15.
        let worst = errors.iter().cloned().fold(0.0, f32::max);
        let mean = errors.iter().sum::<f32>() / errors.len() as f32;
        assert!(
            worst < 0.3 && mean < 0.15,
            "worst {worst}, mean {mean}: {errors:?}"
        );
    }
}
