//! What the timeline draws, independent of the screen: tracks and their lanes, a whole-run
//! summary in fixed time bins (built by one pass over the store), and raw windows (the records
//! of one track inside a time window, read through the store's indexes). [`Lane::cells`] turns
//! either into one aggregate per screen column, so drawing costs what the screen holds.

use std::collections::{BTreeMap, HashMap};

use fuseprof_analyzer::classify::LaunchShape;
use fuseprof_analyzer::{Class, Rules};
use fuseprof_store::{
    CopyKind, GpuKind, GpuSpan, HostSpan, MemopKind, RangeKind, Store, StrId, Strings,
};

use crate::Result;

/// Bins of the whole-run summary (per lane): enough that a screen of a few hundred columns
/// over the whole run aggregates many bins per column, few enough that a lane costs 1 MB.
pub const SUMMARY_BINS: usize = 1 << 16;

/// A record this many bins long or longer is kept whole in the summary (its lane's long
/// list), so that a raw window need not read back further than this to find what is open at
/// its start.
pub const LONG_BINS: i64 = 4;

/// A raw window reads at most this many records per track; a view holding more is drawn
/// from the summary.
pub const RAW_LIMIT: usize = 20_000;

/// One row of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LaneKind {
    /// Kernels, copies and fills of a stream.
    Gpu,
    /// GPU-side annotations and syncs on a stream (Kineto's gpu_user_annotation, cuda_sync).
    GpuRanges,
    /// `nn.Module` ranges at this nesting depth.
    Module(u16),
    /// Ops, NVTX and user ranges at this nesting depth.
    Range(u16),
    /// Marks, Python frames and ranges that do not nest.
    Other,
    /// CUDA runtime and driver calls.
    Api,
}

/// A stream of a device, or a host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrackKey {
    Stream { device: i64, stream: i64 },
    Thread { pid: i64, tid: i64 },
}

/// (track index, lane) of one row.
pub type LaneId = (usize, LaneKind);

/// What a record on the timeline is, for selection and details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemRef {
    Kernel(i64),
    Memop(i64),
    Range(i64),
    Api(i64),
    /// A long record the summary pass kept without its row id: (start, name); looked up on
    /// the track when selected.
    At(i64, StrId),
}

/// One record of a lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start_ns: i64,
    pub end_ns: i64,
    /// Kernel class index for GPU lanes, name id for the others.
    pub key: u32,
    pub name: StrId,
    pub item: ItemRef,
}

impl Span {
    /// How long the record runs; saturating, for a damaged run's records that start or end
    /// further apart than an i64 of nanoseconds holds.
    pub fn dur_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// One screen column of one lane.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cell {
    /// Fraction of the column's time with a record running (0..=1).
    pub busy: f32,
    /// Records that start in the column.
    pub count: u32,
    /// Colour key of the dominant record or class (see [`Span::key`]).
    pub key: u32,
    /// The raw record with the most time in the column, where the column came from raw data.
    pub span: Option<Span>,
    /// Whether the column's data is known (false while the summary is still being built).
    pub known: bool,
    /// Whether it is an estimate from index samples (before the summary is in).
    pub sampled: bool,
}

/// One level of a lane's summary: `SUMMARY_BINS >> level` bins, each `bin_ns << level`
/// wide.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Level {
    /// Time with a record running, per bin (records overlapping in one lane add up; a reader
    /// caps it at the bin's width).
    pub busy: Vec<u64>,
    /// Records that start in the bin.
    pub count: Vec<u32>,
    /// Colour key of the bin's dominant class or record.
    pub key: Vec<u32>,
}

/// The summary of one lane over the whole run: the bins, and each coarser level made by
/// merging pairs (a mipmap), so that a column of any width reads 16 to 32 bins.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaneBins {
    pub levels: Vec<Level>,
    /// Records at least [`LONG_BINS`] bins long, by start.
    pub long: Vec<Span>,
}

/// The whole-run summary: fixed bins from `t0_ns`, `bin_ns` wide, per lane.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub t0_ns: i64,
    pub bin_ns: i64,
    pub lanes: HashMap<LaneId, LaneBins>,
}

/// The records of one track that start in `[from_ns, to_ns)`, plus the long records open
/// there, by lane.
#[derive(Clone, Debug, Default)]
pub struct RawWindow {
    pub from_ns: i64,
    pub to_ns: i64,
    pub lanes: BTreeMap<LaneKind, Vec<Span>>,
    /// False when the window held more than the read limit (it is then not used to draw).
    pub complete: bool,
    pub records: usize,
}

/// Estimated columns of one track for one view, from index samples: what the timeline draws
/// before the summary pass has reached the track's table.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    pub from_ns: i64,
    pub to_ns: i64,
    pub cols: usize,
    pub lanes: BTreeMap<LaneKind, Vec<Cell>>,
}

/// Columns from samples: `samples[c]` are the first records (at most `limit`) that start in
/// column `c`, with their lanes. A column's estimate covers from its start to the last
/// sample's start when the sample hit the limit (the column holds more), else the whole
/// column; records from earlier columns that run into it count too.
pub fn probe_cells(
    samples: &[Vec<(LaneKind, Span)>],
    full: &[bool],
    from_ns: i64,
    to_ns: i64,
) -> BTreeMap<LaneKind, Vec<Cell>> {
    let n = samples.len();
    let mut out: BTreeMap<LaneKind, Vec<Cell>> = BTreeMap::new();
    if n == 0 {
        return out;
    }
    let w = (to_ns - from_ns) as f64 / n as f64;
    let mut carry: Vec<(LaneKind, Span)> = Vec::new();
    // Module lanes seen anywhere: an inferred parent at a depth modules use is a module.
    let nesting: std::collections::BTreeSet<LaneKind> = samples
        .iter()
        .flatten()
        .map(|(l, _)| *l)
        .filter(|l| matches!(l, LaneKind::Module(_)))
        .collect();
    for c in 0..n {
        let a = from_ns as f64 + c as f64 * w;
        let b = a + w;
        carry.retain(|(_, s)| s.end_ns as f64 > a);
        let cov_end = if full[c] {
            samples[c]
                .iter()
                .map(|(_, s)| s.start_ns as f64)
                .fold(a, f64::max)
                .min(b)
        } else {
            b
        };
        let cov = (cov_end - a).max(1.0);
        // Per lane: busy time, records starting here, time per colour key.
        type Acc = (f64, u32, Vec<(u32, f64)>);
        let mut per_lane: BTreeMap<LaneKind, Acc> = BTreeMap::new();
        for (lane, s) in carry.iter().chain(samples[c].iter()) {
            let ov = (s.end_ns as f64).min(cov_end) - (s.start_ns as f64).max(a);
            let e = per_lane.entry(*lane).or_default();
            if s.start_ns as f64 >= a {
                e.1 += 1;
            }
            let ov = if s.end_ns == s.start_ns {
                cov * 0.02
            } else {
                ov.max(0.0)
            };
            e.0 += ov;
            match e.2.iter_mut().find(|(k, _)| *k == s.key) {
                Some(slot) => slot.1 += ov,
                None => e.2.push((s.key, ov)),
            }
        }
        // A range at depth d means ranges open at every depth above it, and ranges of one
        // depth do not overlap: a nesting lane is at least as busy as the busiest deeper lane
        // of its kind. Ops sit inside modules, so modules above the shallowest op count ops.
        let busiest = |pick: &dyn Fn(LaneKind) -> Option<u16>, above: u16| {
            per_lane
                .iter()
                .filter(|(l, _)| pick(**l).is_some_and(|d| d > above))
                .map(|(_, a)| a.0)
                .fold(0.0f64, f64::max)
        };
        let module_depth = |l: LaneKind| match l {
            LaneKind::Module(d) => Some(d),
            _ => None,
        };
        let op_depth = |l: LaneKind| match l {
            LaneKind::Range(d) => Some(d),
            _ => None,
        };
        let op_min = per_lane.keys().filter_map(|l| op_depth(*l)).min();
        let deepest_module = nesting.iter().filter_map(|l| module_depth(*l)).max();
        let mut inferred: Vec<(LaneKind, f64)> = Vec::new();
        for d in 0..=deepest_module.unwrap_or(0) {
            if deepest_module.is_none() {
                break;
            }
            let mut b = busiest(&module_depth, d);
            if op_min.is_some_and(|m| d < m) {
                b = b.max(busiest(&op_depth, d));
            }
            inferred.push((LaneKind::Module(d), b));
        }
        if let Some(m) = op_min {
            let deepest = per_lane
                .keys()
                .filter_map(|l| op_depth(*l))
                .max()
                .unwrap_or(m);
            for d in m..deepest {
                inferred.push((LaneKind::Range(d), busiest(&op_depth, d)));
            }
        }
        for (lane, inf) in inferred {
            if inf > 0.0 {
                let e = per_lane.entry(lane).or_default();
                e.0 = e.0.max(inf);
            }
        }
        for (lane, (busy, count, votes)) in per_lane {
            let cells = out.entry(lane).or_insert_with(|| {
                vec![
                    Cell {
                        known: true,
                        sampled: true,
                        ..Cell::default()
                    };
                    n
                ]
            });
            cells[c].busy = (busy / cov).clamp(0.0, 1.0) as f32;
            cells[c].count = count;
            cells[c].key = votes
                .iter()
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .map_or(0, |v| v.0);
        }
        carry.extend(
            samples[c]
                .iter()
                .filter(|(_, s)| s.end_ns as f64 > b)
                .copied(),
        );
    }
    out
}

/// Records to step through with n / N: kernels, copies or fills, and ranges by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Instances {
    pub label: String,
    pub kernels: Vec<StrId>,
    pub memops: Vec<(MemopKind, Option<CopyKind>)>,
    /// Range names, each list with an optional input-shapes filter.
    pub ranges: Vec<(Vec<StrId>, Option<Vec<StrId>>)>,
}

impl Instances {
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
            && self.memops.is_empty()
            && self.ranges.iter().all(|r| r.0.is_empty())
    }
}

/// An instance a search found: its track, record and lane (when the store says its depth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub track: usize,
    pub span: Span,
    pub lane: Option<LaneKind>,
}

/// Names and classes the timeline needs from the store's string table.
pub struct NameInfo {
    pub strings: Strings,
    /// Kernel class by name id (only meaningful for kernel names).
    pub class: Vec<Class>,
    /// Name id of the collector's module domain.
    pub module_domain: Option<StrId>,
}

impl NameInfo {
    pub fn load(store: &mut Store) -> Result<NameInfo> {
        let strings = store.strings()?;
        let rules = Rules::builtin();
        let mut class = vec![Class::Other; strings.len() + 1];
        let mut module_domain = None;
        for (id, c) in class.iter_mut().enumerate().skip(1) {
            let text = strings.get(StrId(id as i64));
            *c = rules.classify(text, &LaunchShape::default());
            if text == fuseprof_analyzer::ops::MODULE_DOMAIN {
                module_domain = Some(StrId(id as i64));
            }
        }
        Ok(NameInfo {
            strings,
            class,
            module_domain,
        })
    }

    pub fn get(&self, id: StrId) -> &str {
        self.strings.get(id)
    }

    pub fn class_of(&self, id: StrId) -> Class {
        self.class
            .get(id.0 as usize)
            .copied()
            .unwrap_or(Class::Other)
    }

    /// The class key of a GPU record.
    pub fn gpu_key(&self, kind: GpuKind, name: StrId) -> u32 {
        match kind {
            GpuKind::Kernel => class_index(self.class_of(name)),
            GpuKind::Memcpy => class_index(Class::Memcpy),
            GpuKind::Memset => class_index(Class::Memset),
        }
    }

    /// Which lane group a host range belongs to (the depth is added by the caller).
    pub fn range_group(&self, kind: RangeKind, domain: Option<StrId>, name: StrId) -> Group {
        match kind {
            RangeKind::GpuUserAnnotation | RangeKind::CudaSync => Group::Gpu,
            RangeKind::NvtxPushPop | RangeKind::NvtxStartEnd
                if domain.is_some() && domain == self.module_domain =>
            {
                Group::Module
            }
            RangeKind::PythonFunction if self.get(name).starts_with("nn.Module: ") => Group::Module,
            RangeKind::CpuOp
            | RangeKind::UserAnnotation
            | RangeKind::NvtxPushPop
            | RangeKind::NvtxStartEnd => Group::Range,
            _ => Group::Other,
        }
    }
}

/// Lane groups of host ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Gpu,
    Module,
    Range,
    Other,
}

pub fn class_index(c: Class) -> u32 {
    Class::ALL.iter().position(|&x| x == c).unwrap_or(11) as u32
}

pub fn class_of_index(i: u32) -> Class {
    Class::ALL.get(i as usize).copied().unwrap_or(Class::Other)
}

/// The lane of a range given its group and nesting depth.
pub fn lane_of(group: Group, depth: i64) -> LaneKind {
    let d = depth.clamp(0, u16::MAX as i64) as u16;
    match group {
        Group::Gpu => LaneKind::GpuRanges,
        Group::Module => LaneKind::Module(d),
        Group::Range => LaneKind::Range(d),
        Group::Other => LaneKind::Other,
    }
}

/// Nesting depth for ranges the store has no depth for (Kineto, nsys): a stack per thread
/// over ranges in start order. `push` takes a range and returns its depth.
#[derive(Default)]
pub struct Nester {
    stack: Vec<i64>,
}

impl Nester {
    pub fn push(&mut self, start_ns: i64, end_ns: i64) -> i64 {
        while self.stack.last().is_some_and(|&e| e <= start_ns) {
            self.stack.pop();
        }
        let depth = self.stack.len() as i64;
        self.stack.push(end_ns.max(start_ns));
        depth
    }
}

/// Ranges of one thread without a stored depth, put back into start order from the order
/// the store holds them in (nearly in order for Kineto traces): a buffer of at most `cap`
/// ranges kept sorted; anything further out of order gets the depth of where it comes out.
/// Input already in order costs one comparison per range (Kineto traces come sorted).
pub struct Reorder<T> {
    /// Sorted by key.
    buf: std::collections::VecDeque<(OrderKey, T)>,
    seq: u64,
    cap: usize,
    last_out: i64,
    /// Ranges that came out after one that starts later: further out of order than `cap`.
    pub late: u64,
}

/// (start, longest first, arrival).
type OrderKey = (i64, std::cmp::Reverse<i64>, u64);

impl<T> Reorder<T> {
    pub fn new(cap: usize) -> Self {
        Reorder {
            buf: std::collections::VecDeque::new(),
            seq: 0,
            cap,
            last_out: i64::MIN,
            late: 0,
        }
    }
    /// Adds a range; returns the one that leaves the buffer, if any.
    pub fn push(&mut self, start_ns: i64, end_ns: i64, item: T) -> Option<(i64, i64, T)> {
        self.seq += 1;
        let key = (start_ns, std::cmp::Reverse(end_ns), self.seq);
        if self.buf.back().is_none_or(|(k, _)| *k <= key) {
            self.buf.push_back((key, item));
        } else {
            let at = self.buf.partition_point(|(k, _)| *k <= key);
            self.buf.insert(at, (key, item));
        }
        if self.buf.len() > self.cap {
            self.pop()
        } else {
            None
        }
    }
    pub fn pop(&mut self) -> Option<(i64, i64, T)> {
        let ((start, std::cmp::Reverse(end), _), item) = self.buf.pop_front()?;
        if start < self.last_out {
            self.late += 1;
        }
        self.last_out = start;
        Some((start, end, item))
    }
}

impl Summary {
    pub fn new(t0_ns: i64, t1_ns: i64) -> Summary {
        let span = (t1_ns - t0_ns).max(1);
        let bin_ns = (span + SUMMARY_BINS as i64 - 1) / SUMMARY_BINS as i64;
        Summary {
            t0_ns,
            bin_ns: bin_ns.max(1),
            lanes: HashMap::new(),
        }
    }

    fn bin(&self, t: i64) -> usize {
        ((t - self.t0_ns).max(0) / self.bin_ns).min(SUMMARY_BINS as i64 - 1) as usize
    }
}

/// Accumulates one lane's bins during the pass.
pub struct BinBuilder {
    busy: Vec<u32>,
    count: Vec<u32>,
    /// GPU lanes: time per class per bin; host lanes: the longest record's (key, ns).
    class_ns: Option<Vec<[u32; 12]>>,
    best: Vec<(u32, u32)>,
    long: Vec<Span>,
}

impl BinBuilder {
    pub fn new(gpu: bool) -> Self {
        BinBuilder {
            busy: vec![0; SUMMARY_BINS],
            count: vec![0; SUMMARY_BINS],
            class_ns: gpu.then(|| vec![[0; 12]; SUMMARY_BINS]),
            best: if gpu {
                Vec::new()
            } else {
                vec![(0, 0); SUMMARY_BINS]
            },
            long: Vec::new(),
        }
    }

    /// Adds a record `[start, end)` with colour key `key` (and `name` for the long list).
    pub fn add(
        &mut self,
        s: &Summary,
        start: i64,
        end: i64,
        key: u32,
        name: StrId,
        group_long: ItemRef,
    ) {
        let end = end.max(start);
        let b0 = s.bin(start);
        let b1 = s.bin((end - 1).max(start));
        self.count[b0] = self.count[b0].saturating_add(1);
        if end - start >= LONG_BINS * s.bin_ns {
            self.long.push(Span {
                start_ns: start,
                end_ns: end,
                key,
                name,
                item: group_long,
            });
        }
        for b in b0..=b1 {
            let lo = (s.t0_ns + b as i64 * s.bin_ns).max(start);
            let hi = (s.t0_ns + (b as i64 + 1) * s.bin_ns).min(end);
            let ns = (hi - lo).max(0) as u32;
            self.busy[b] = self.busy[b].saturating_add(ns);
            if let Some(c) = self.class_ns.as_mut() {
                c[b][key as usize % 12] = c[b][key as usize % 12].saturating_add(ns);
            } else if ns >= self.best[b].1 {
                self.best[b] = (key, ns.max(1));
            }
        }
    }

    pub fn finish(self, s: &Summary) -> LaneBins {
        let cap = s.bin_ns.min(u32::MAX as i64) as u32;
        let key = match &self.class_ns {
            Some(c) => c
                .iter()
                .map(|h| {
                    h.iter()
                        .enumerate()
                        .max_by_key(|(i, &v)| (v, std::cmp::Reverse(*i)))
                        .map_or(0, |(i, _)| i as u32)
                })
                .collect(),
            None => self.best.iter().map(|b| b.0).collect(),
        };
        let mut long = self.long;
        long.sort_by_key(|l| (l.start_ns, std::cmp::Reverse(l.end_ns)));
        LaneBins::from_finest(
            Level {
                busy: self.busy.into_iter().map(|b| b.min(cap) as u64).collect(),
                count: self.count,
                key,
            },
            long,
        )
    }
}

impl LaneBins {
    /// A lane's summary from its finest level (the coarser ones are made from it) and its
    /// long records, sorted by start.
    pub fn from_finest(finest: Level, long: Vec<Span>) -> LaneBins {
        let mut levels = vec![finest];
        while levels.last().is_some_and(|l| l.busy.len() > 1) {
            let prev = levels.last().expect("not empty");
            let n = prev.busy.len() / 2;
            let mut next = Level {
                busy: Vec::with_capacity(n),
                count: Vec::with_capacity(n),
                key: Vec::with_capacity(n),
            };
            for i in 0..n {
                let (a, b) = (2 * i, 2 * i + 1);
                next.busy.push(prev.busy[a] + prev.busy[b]);
                next.count.push(prev.count[a].saturating_add(prev.count[b]));
                // The dominant key of the busier half (exact per bin, approximate above).
                next.key.push(if prev.busy[b] > prev.busy[a] {
                    prev.key[b]
                } else {
                    prev.key[a]
                });
            }
            levels.push(next);
        }
        LaneBins { levels, long }
    }
}

/// One lane's aggregate over `n` columns of `[from_ns, to_ns)` from the summary, read from the
/// coarsest level with at least 16 bins per column (a bin cut by a column's edge counts in
/// proportion, so fewer bins would blur the edges).
pub fn cells_from_bins(
    s: &Summary,
    bins: &LaneBins,
    from_ns: i64,
    to_ns: i64,
    n: usize,
) -> Vec<Cell> {
    let mut out = vec![Cell::default(); n];
    let width = (to_ns - from_ns) as f64 / n.max(1) as f64;
    let per_col = width / s.bin_ns as f64;
    let mut level = 0usize;
    while level + 1 < bins.levels.len() && (1u64 << (level + 1)) as f64 * 16.0 <= per_col {
        level += 1;
    }
    let lv = &bins.levels[level];
    let bin_ns = (s.bin_ns << level) as f64;
    let nb = lv.busy.len();
    let mut votes: Vec<(u32, f64)> = Vec::with_capacity(8);
    for (c, cell) in out.iter_mut().enumerate() {
        let a = from_ns as f64 + c as f64 * width;
        let b = a + width;
        cell.known = true;
        // Bins overlapping [a, b), each weighted by the part of it inside.
        let fa = (a - s.t0_ns as f64) / bin_ns;
        let fb = (b - s.t0_ns as f64) / bin_ns;
        if fb <= 0.0 || fa >= nb as f64 {
            continue;
        }
        let i0 = fa.floor().max(0.0) as usize;
        let i1 = (fb.ceil().max(0.0) as usize).min(nb);
        let mut busy = 0.0f64;
        let mut count = 0.0f64;
        votes.clear();
        for i in i0..i1 {
            let w = (fb.min(i as f64 + 1.0) - fa.max(i as f64)).clamp(0.0, 1.0);
            if w <= 0.0 || lv.busy[i] == 0 && lv.count[i] == 0 {
                continue;
            }
            let v = lv.busy[i] as f64 * w;
            busy += v;
            count += lv.count[i] as f64 * w;
            let k = lv.key[i];
            match votes.iter_mut().find(|(key, _)| *key == k) {
                Some(slot) => slot.1 += v + 1.0,
                None => votes.push((k, v + 1.0)),
            }
        }
        cell.busy = (busy / width).clamp(0.0, 1.0) as f32;
        cell.count = count.round() as u32;
        cell.key = votes
            .iter()
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map_or(0, |v| v.0);
    }
    out
}

/// One lane's aggregate over `n` columns of `[from_ns, to_ns)` from raw records (sorted by
/// start). GPU lanes (`by_class`) take the class with the most time as their colour, others
/// the record with the most time.
pub fn cells_from_spans(
    spans: &[Span],
    from_ns: i64,
    to_ns: i64,
    n: usize,
    by_class: bool,
) -> Vec<Cell> {
    let mut out = vec![
        Cell {
            known: true,
            ..Cell::default()
        };
        n
    ];
    if n == 0 || to_ns <= from_ns {
        return out;
    }
    let width = (to_ns - from_ns) as f64 / n as f64;
    let mut busy = vec![0f64; n];
    let mut best = vec![0f64; n];
    let mut class_ns = if by_class {
        vec![[0f64; 12]; n]
    } else {
        Vec::new()
    };
    for sp in spans {
        if sp.end_ns < from_ns || sp.start_ns >= to_ns {
            continue;
        }
        // Saturating: a record of a damaged run may start or end ages outside the window,
        // further than an i64 of nanoseconds reaches from its edge.
        let s = sp.start_ns.saturating_sub(from_ns) as f64 / width;
        let e = sp.end_ns.max(sp.start_ns).saturating_sub(from_ns) as f64 / width;
        let c0 = (s.floor().max(0.0) as usize).min(n - 1);
        let c1 = (e.ceil() as usize).clamp(c0 + 1, n);
        if sp.start_ns >= from_ns {
            out[c0].count += 1;
        }
        for c in c0..c1.min(n) {
            // A zero-length record (a mark) still shows: it counts as a sliver.
            let ov = if sp.end_ns > sp.start_ns {
                (e.min(c as f64 + 1.0) - s.max(c as f64)).max(0.0)
            } else {
                0.02
            };
            busy[c] += ov;
            if by_class {
                class_ns[c][sp.key as usize % 12] += ov;
            }
            if ov > best[c] {
                best[c] = ov;
                out[c].span = Some(*sp);
                if !by_class {
                    out[c].key = sp.key;
                }
            }
        }
    }
    for c in 0..n {
        out[c].busy = busy[c].min(1.0) as f32;
        if by_class && busy[c] > 0.0 {
            out[c].key = class_ns[c]
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| i as u32);
        }
    }
    out
}

/// The spans of a raw window that a range read gives, by lane. `open` are long ranges from
/// the summary that started before the window's read start (with their depth in the lane).
pub fn range_spans(
    names: &NameInfo,
    ranges: &[HostSpan],
    open: &[(LaneKind, Span)],
    lanes: &mut BTreeMap<LaneKind, Vec<Span>>,
) {
    let mut nester = Nester::default();
    // Seed the stack with what is open at the window's start (long ranges of nesting lanes).
    let mut seeds: Vec<(i64, i64)> = open
        .iter()
        .filter(|(l, _)| matches!(l, LaneKind::Module(_) | LaneKind::Range(_)))
        .map(|(_, s)| (s.start_ns, s.end_ns))
        .collect();
    seeds.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
    for (s, e) in seeds {
        nester.push(s, e);
    }
    for (lane, sp) in open {
        lanes.entry(*lane).or_default().push(*sp);
    }
    for r in ranges {
        let group = names.range_group(r.kind, r.domain, r.name);
        let end = r.end_ns.unwrap_or(r.start_ns).max(r.start_ns);
        let depth = match (group, r.depth) {
            (Group::Module | Group::Range, Some(d)) => d,
            (Group::Module | Group::Range, None) => nester.push(r.start_ns, end),
            _ => 0,
        };
        // A long range the summary already gave is not drawn twice.
        let lane = lane_of(group, depth);
        let span = Span {
            start_ns: r.start_ns,
            end_ns: end,
            key: r.name.0 as u32,
            name: r.name,
            item: ItemRef::Range(r.id),
        };
        let v = lanes.entry(lane).or_default();
        if let Some(dup) = v.iter_mut().find(|s| {
            matches!(s.item, ItemRef::At(..)) && s.start_ns == span.start_ns && s.name == span.name
        }) {
            *dup = span;
        } else {
            v.push(span);
        }
    }
    for v in lanes.values_mut() {
        v.sort_by_key(|s| (s.start_ns, std::cmp::Reverse(s.end_ns)));
    }
}

/// GPU spans of a raw window as lane spans.
pub fn gpu_spans(names: &NameInfo, gpu: &[GpuSpan], out: &mut Vec<Span>) {
    for g in gpu {
        out.push(Span {
            start_ns: g.start_ns,
            end_ns: g.end_ns.max(g.start_ns),
            key: names.gpu_key(g.kind, g.name),
            name: g.name,
            item: match g.kind {
                GpuKind::Kernel => ItemRef::Kernel(g.id),
                GpuKind::Memcpy | GpuKind::Memset => ItemRef::Memop(g.id),
            },
        });
    }
    out.sort_by_key(|s| (s.start_ns, s.end_ns));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(s: i64, e: i64, key: u32) -> Span {
        Span {
            start_ns: s,
            end_ns: e,
            key,
            name: StrId(key as i64),
            item: ItemRef::Kernel(s),
        }
    }

    #[test]
    fn raw_cells_aggregate_what_a_column_holds() {
        // Ten columns of 100 ns: a record over columns 0-2, ten short ones in column 5.
        let mut spans = vec![span(0, 250, 1)];
        for i in 0..10 {
            spans.push(span(500 + i * 10, 505 + i * 10, 2));
        }
        let cells = cells_from_spans(&spans, 0, 1_000, 10, true);
        assert_eq!(cells[0].busy, 1.0);
        assert_eq!(cells[2].busy, 0.5);
        assert_eq!(cells[3].busy, 0.0);
        assert!((cells[5].busy - 0.5).abs() < 1e-6);
        assert_eq!(cells[5].count, 10);
        assert_eq!(cells[5].key, 2);
        assert_eq!(cells[0].span.unwrap().start_ns, 0);
    }

    #[test]
    fn records_further_from_the_window_than_an_i64_reaches_fill_it() {
        // A damaged run's records: one from before the i64's reach of the window's start,
        // one past the window's end by as much; both cover every column, and nothing panics.
        let from = 1_700_000_000_000_000_000;
        let spans = [span(i64::MIN, from + 500, 1), span(from + 500, i64::MAX, 2)];
        let cells = cells_from_spans(&spans, from, from + 1_000, 10, true);
        assert!(cells.iter().all(|c| c.busy == 1.0), "{cells:?}");
        assert_eq!(cells[5].count, 1);
        assert_eq!(spans[0].dur_ns(), i64::MAX);
    }

    #[test]
    fn summary_cells_match_raw_cells_at_coarse_zoom() {
        let spans: Vec<Span> = (0..10_000)
            .map(|i| span(i * 1_000, i * 1_000 + 300 + (i % 3) * 100, (i % 2) as u32))
            .collect();
        let s0 = Summary::new(0, 10_000_000);
        let mut b = BinBuilder::new(true);
        for sp in &spans {
            b.add(&s0, sp.start_ns, sp.end_ns, sp.key, sp.name, sp.item);
        }
        let bins = b.finish(&s0);
        let from_bins = cells_from_bins(&s0, &bins, 0, 10_000_000, 50);
        let from_raw = cells_from_spans(&spans, 0, 10_000_000, 50, true);
        for (x, y) in from_bins.iter().zip(&from_raw) {
            assert!((x.busy - y.busy).abs() < 0.02, "{x:?} {y:?}");
            assert!((x.count as i64 - y.count as i64).abs() <= 4, "{x:?} {y:?}");
        }
        assert!(bins.long.is_empty());
    }

    #[test]
    fn nesting_and_reordering_give_depths() {
        let mut r = Reorder::new(2);
        let mut n = Nester::default();
        let mut out = Vec::new();
        for (s, e) in [(10, 20), (0, 100), (30, 40), (35, 38), (200, 300)] {
            if let Some((s, e, ())) = r.push(s, e, ()) {
                out.push((s, n.push(s, e)));
            }
        }
        while let Some((s, e, ())) = r.pop() {
            out.push((s, n.push(s, e)));
        }
        assert_eq!(out, [(0, 0), (10, 1), (30, 1), (35, 2), (200, 0)]);
    }
}
