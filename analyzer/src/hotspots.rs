//! Hotspots: where the GPU time goes, by op type, op type + input shapes, module, kernel and
//! class, and what happens between kernels (idle GPU, launch-bound stretches).

use serde::{Deserialize, Serialize};

use crate::attribution::{Item, FLAG_GRAPH, FLAG_NEW_LAUNCH};
use crate::classify::Class;
use crate::fxmap::FxMap;
use crate::ops::{Names, Role, Tree, NONE};

/// Gaps longer than this are the host doing something else (data loading, a sync), not launch
/// overhead: they count as idle but do not make a stretch launch-bound.
pub const LAUNCH_GAP_MAX_NS: i64 = 100_000;

/// GPU time of one op type (the innermost range's name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpRow {
    /// Op type (`aten::addmm`), annotation or module name; `(outside any range)` for GPU work
    /// launched outside every range.
    pub name: String,
    pub role: Option<Role>,
    /// How many ranges of this type ran (in scope), with or without GPU work.
    pub instances: u64,
    /// GPU time of the records this type launched itself.
    pub self_ns: i64,
    /// Self time plus that of every op nested in it (nested instances of the same type are
    /// not counted twice).
    pub total_ns: i64,
    /// `self_ns` as a percentage of all GPU time in scope.
    pub pct: f64,
    pub kernels: u64,
    pub launches: u64,
    /// `self_ns / instances`.
    pub mean_self_ns: f64,
    /// GPU idle time right before this type's records started (on their device).
    pub gap_before_ns: i64,
}

/// GPU time of one op type with one set of input shapes and dtypes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShapeRow {
    pub name: String,
    /// Input shapes as the trace gives them, e.g. `[[64, 3136, 96], [96]]`.
    pub dims: Option<String>,
    /// Input dtypes, e.g. `["c10::Half", "c10::Half"]`.
    pub dtypes: Option<String>,
    pub instances: u64,
    pub self_ns: i64,
    pub pct: f64,
    pub kernels: u64,
    pub launches: u64,
    pub mean_self_ns: f64,
    pub gap_before_ns: i64,
}

/// GPU time by module path (nested module frames and user ranges, `/`-separated).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModuleRow {
    /// `(top level)` for ops outside every module, `(outside any range)` for GPU work
    /// launched outside every range.
    pub path: String,
    /// GPU time launched by ops directly in this module (not in a sub-module).
    pub self_ns: i64,
    /// Including sub-modules.
    pub total_ns: i64,
    /// `self_ns` as a percentage of all GPU time in scope.
    pub pct: f64,
    pub kernels: u64,
    pub launches: u64,
    pub gap_before_ns: i64,
}

/// GPU time by kernel name (copies and fills appear as `Memcpy HtoD`, `Memset`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRow {
    pub name: String,
    pub class: Class,
    pub count: u64,
    pub total_ns: i64,
    pub pct: f64,
    pub mean_ns: f64,
    pub min_ns: i64,
    pub max_ns: i64,
    /// How many ran inside CUDA graphs.
    pub in_graphs: u64,
    pub gap_before_ns: i64,
}

/// GPU time by kernel class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassRow {
    pub class: Class,
    pub count: u64,
    pub total_ns: i64,
    pub pct: f64,
    pub mean_ns: f64,
    pub gap_before_ns: i64,
}

/// One device's timeline: how busy it was and where the time between kernels went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceTimeline {
    pub device: i64,
    /// From the first record's start to the last record's end.
    pub span_ns: i64,
    /// Time with at least one record running (overlaps counted once).
    pub busy_ns: i64,
    /// `span_ns - busy_ns`: the sum of every gap.
    pub idle_ns: i64,
    /// Sum of record durations minus `busy_ns`: time records overlapped on other streams.
    pub overlap_ns: i64,
    pub records: u64,
    /// Gaps between records by length: [< 10 us, 10-100 us, 100 us-1 ms, >= 1 ms]: count and ns.
    pub gap_counts: [u64; 4],
    pub gap_ns: [i64; 4],
    /// Stretches of at least 3 consecutive records each shorter than the idle gap before it
    /// (gaps under [`LAUNCH_GAP_MAX_NS`]): the GPU waits on the host's launches there.
    pub launch_bound_stretches: u64,
    pub launch_bound_records: u64,
    /// Records plus gaps inside those stretches.
    pub launch_bound_ns: i64,
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Acc {
    pub ns: i64,
    pub count: u64,
    pub launches: u64,
    pub gap_ns: i64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub graphs: u64,
    /// Device of the first record, and a dtype hint from its kernel name.
    pub device: u16,
    pub first_name: u32,
    pub class: Option<Class>,
}

impl Acc {
    fn add(&mut self, it: &Item, gap: i64) {
        if self.count == 0 {
            self.min_ns = it.dur_ns;
            self.max_ns = it.dur_ns;
            self.device = it.device;
            self.first_name = it.name;
            self.class = Some(it.class);
        } else {
            self.min_ns = self.min_ns.min(it.dur_ns);
            self.max_ns = self.max_ns.max(it.dur_ns);
        }
        self.ns += it.dur_ns;
        self.count += 1;
        self.gap_ns += gap;
        self.launches += u64::from(it.flags & FLAG_NEW_LAUNCH != 0);
        self.graphs += u64::from(it.flags & FLAG_GRAPH != 0);
    }
}

/// Module paths as a tree of (parent, name) pairs; id 0 is the top level.
pub(crate) struct Modules {
    pub nodes: Vec<(u32, u32)>,
    index: FxMap<(u32, u32), u32>,
}

impl Modules {
    fn new() -> Self {
        Modules {
            nodes: vec![(NONE, NONE)],
            index: FxMap::default(),
        }
    }
    fn child(&mut self, parent: u32, name: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.index.entry((parent, name)).or_insert(next);
        if id == next {
            self.nodes.push((parent, name));
        }
        id
    }
    /// `SwinTransformer/layers.0.blocks.1.attn`: a component that the next one spells out in
    /// full (`layers.0` before `layers.0.blocks.1`) is left out.
    pub fn path(&self, names: &Names, mut id: u32) -> String {
        let mut parts: Vec<&str> = Vec::new();
        while id != 0 && id != NONE {
            let (parent, name) = self.nodes[id as usize];
            parts.push(names.get(name).trim_start_matches("nn.Module: "));
            id = parent;
        }
        parts.reverse();
        let mut kept: Vec<&str> = Vec::with_capacity(parts.len());
        for (i, p) in parts.iter().enumerate() {
            let spelled_out = parts
                .get(i + 1)
                .is_some_and(|next| next.strip_prefix(p).is_some_and(|r| r.starts_with('.')));
            if !spelled_out {
                kept.push(p);
            }
        }
        kept.join("/")
    }
}

/// Everything accumulated in one pass over the records in scope.
pub(crate) struct Accumulated {
    pub by_op: FxMap<u32, Acc>,
    pub by_shape: FxMap<(u32, u32, u32), Acc>,
    pub by_module: Vec<Acc>,
    pub by_kernel: FxMap<u32, Acc>,
    pub by_class: [Acc; 12],
    pub module_of: Vec<u32>,
    pub modules: Modules,
    /// Per range: self GPU time, then (after `finish`) inclusive time.
    pub range_ns: Vec<i64>,
    pub timeline: Vec<DeviceTimeline>,
}

/// Module id of every range: parents come before children in the tree's order.
pub(crate) fn module_ids(tree: &Tree) -> (Vec<u32>, Modules) {
    let mut modules = Modules::new();
    let mut module_of = vec![0u32; tree.ranges.len()];
    for i in 0..tree.ranges.len() {
        let p = tree.parent[i];
        let up = if p == NONE { 0 } else { module_of[p as usize] };
        let r = &tree.ranges[i];
        module_of[i] = match r.role() {
            Role::Module | Role::User => modules.child(up, r.name),
            Role::Op | Role::Step => up,
        };
    }
    (module_of, modules)
}

/// One device's [`DeviceTimeline`], built from its records in start order.
pub(crate) struct TimelineBuilder {
    tl: DeviceTimeline,
    first_start: i64,
    /// The latest end of any record so far: a record starting after it starts after a gap.
    busy_end: i64,
    durations: i64,
    /// The open launch-bound run: its records, their time plus the gaps before them, and the
    /// gaps alone.
    run_len: u64,
    run_ns: i64,
    run_gap_ns: i64,
    /// Gaps inside closed launch-bound stretches.
    launch_bound_gap_ns: i64,
    /// Where kept ([`Self::keep_stretches`]): each closed stretch's records, as positions in
    /// the order pushed (first, one past the last).
    stretches: Option<Vec<(u64, u64)>>,
}

impl TimelineBuilder {
    pub(crate) fn new(device: i64, first_start: i64) -> Self {
        TimelineBuilder {
            tl: DeviceTimeline {
                device,
                span_ns: 0,
                busy_ns: 0,
                idle_ns: 0,
                overlap_ns: 0,
                records: 0,
                gap_counts: [0; 4],
                gap_ns: [0; 4],
                launch_bound_stretches: 0,
                launch_bound_records: 0,
                launch_bound_ns: 0,
            },
            first_start,
            busy_end: first_start,
            durations: 0,
            run_len: 0,
            run_ns: 0,
            run_gap_ns: 0,
            launch_bound_gap_ns: 0,
            stretches: None,
        }
    }

    /// Keeps where each launch-bound stretch lies, for [`Self::stretches`].
    pub(crate) fn keep_stretches(mut self) -> Self {
        self.stretches = Some(Vec::new());
        self
    }

    /// The launch-bound stretches closed so far (with [`Self::keep_stretches`]; else none):
    /// the positions of their records in the order pushed, first and one past the last.
    pub(crate) fn stretches(&self) -> &[(u64, u64)] {
        self.stretches.as_deref().unwrap_or(&[])
    }

    fn close_run(&mut self) {
        if self.run_len >= 3 {
            self.tl.launch_bound_stretches += 1;
            self.tl.launch_bound_records += self.run_len;
            self.tl.launch_bound_ns += self.run_ns;
            self.launch_bound_gap_ns += self.run_gap_ns;
            if let Some(s) = &mut self.stretches {
                // Called before the record that ends the run is counted.
                s.push((self.tl.records - self.run_len, self.tl.records));
            }
        }
        self.run_len = 0;
        self.run_ns = 0;
        self.run_gap_ns = 0;
    }

    /// Adds the next record (by start) and returns the idle gap before it.
    pub(crate) fn push(&mut self, start_ns: i64, dur_ns: i64) -> i64 {
        let gap = (start_ns - self.busy_end).max(0);
        if gap > 0 {
            let b = match gap {
                g if g < 10_000 => 0,
                g if g < 100_000 => 1,
                g if g < 1_000_000 => 2,
                _ => 3,
            };
            self.tl.gap_counts[b] += 1;
            self.tl.gap_ns[b] += gap;
            self.tl.idle_ns += gap;
        }
        if gap > 0 && gap < LAUNCH_GAP_MAX_NS && dur_ns < gap {
            self.run_len += 1;
            self.run_ns += gap + dur_ns;
            self.run_gap_ns += gap;
        } else {
            self.close_run();
        }
        self.busy_end = self.busy_end.max(start_ns + dur_ns);
        self.durations += dur_ns;
        self.tl.records += 1;
        gap
    }

    /// The timeline, and the idle time inside its launch-bound stretches (the gaps a CUDA graph
    /// of those kernels would close).
    pub(crate) fn finish(&mut self) -> (DeviceTimeline, i64) {
        self.close_run();
        let mut tl = self.tl.clone();
        tl.span_ns = self.busy_end - self.first_start;
        tl.busy_ns = tl.span_ns - tl.idle_ns;
        tl.overlap_ns = self.durations - tl.busy_ns;
        (tl, self.launch_bound_gap_ns)
    }
}

/// `items` must be sorted by (device, start).
pub(crate) fn accumulate(tree: &Tree, items: &[Item], devices: &[i64]) -> Accumulated {
    let (module_of, modules) = module_ids(tree);
    let mut a = Accumulated {
        by_op: FxMap::default(),
        by_shape: FxMap::default(),
        by_module: vec![Acc::default(); modules.nodes.len() + 1],
        by_kernel: FxMap::default(),
        by_class: [Acc::default(); 12],
        module_of,
        modules,
        range_ns: vec![0; tree.ranges.len()],
        timeline: Vec::new(),
    };
    let outside_module = a.modules.nodes.len();
    let mut i = 0;
    while i < items.len() {
        let device = items[i].device;
        let mut tl = TimelineBuilder::new(devices[device as usize], items[i].start_ns);
        while i < items.len() && items[i].device == device {
            let it = &items[i];
            let gap = tl.push(it.start_ns, it.dur_ns);

            // Groups.
            let owner = it.owner;
            let (op_key, shape_key, module) = if owner == NONE {
                (NONE, (NONE, NONE, NONE), outside_module)
            } else {
                let r = &tree.ranges[owner as usize];
                a.range_ns[owner as usize] += it.dur_ns;
                (
                    r.name,
                    (r.name, r.dims, r.types),
                    a.module_of[owner as usize] as usize,
                )
            };
            a.by_op.entry(op_key).or_default().add(it, gap);
            a.by_shape.entry(shape_key).or_default().add(it, gap);
            a.by_module[module].add(it, gap);
            a.by_kernel.entry(it.name).or_default().add(it, gap);
            a.by_class[it.class.index()].add(it, gap);
            i += 1;
        }
        a.timeline.push(tl.finish().0);
    }
    // Inclusive time per range: children come after their parents.
    for i in (0..tree.ranges.len()).rev() {
        let p = tree.parent[i];
        if p != NONE {
            let v = a.range_ns[i];
            a.range_ns[p as usize] += v;
        }
    }
    a
}

/// Inclusive GPU time per op type, counting each instance only when no enclosing range has the
/// same type (so `aten::to > aten::_to_copy > aten::copy_` chains are not counted twice), and
/// instance counts, over ranges whose start passes `in_scope`.
pub(crate) fn op_totals(
    tree: &Tree,
    range_ns: &[i64],
    name_bound: usize,
    in_scope: impl Fn(i64) -> bool,
) -> (Vec<i64>, Vec<u64>, Vec<Option<Role>>) {
    let mut totals = vec![0i64; name_bound];
    let mut instances = vec![0u64; name_bound];
    let mut roles = vec![None; name_bound];
    for (i, r) in tree.ranges.iter().enumerate() {
        if !in_scope(r.start_ns) {
            continue;
        }
        let n = r.name as usize;
        instances[n] += 1;
        if roles[n].is_none() {
            roles[n] = Some(r.role());
        }
        if range_ns[i] == 0 {
            continue;
        }
        let mut p = tree.parent[i];
        let mut nested = false;
        while p != NONE {
            if tree.ranges[p as usize].name == r.name {
                nested = true;
                break;
            }
            p = tree.parent[p as usize];
        }
        if !nested {
            totals[n] += range_ns[i];
        }
    }
    (totals, instances, roles)
}

/// Instances per (op, dims, dtypes), for op types that did GPU work.
pub(crate) fn shape_instances(
    tree: &Tree,
    with_work: &FxMap<(u32, u32, u32), Acc>,
    name_bound: usize,
    in_scope: impl Fn(i64) -> bool,
) -> FxMap<(u32, u32, u32), u64> {
    let mut worked = vec![false; name_bound];
    for k in with_work.keys() {
        if k.0 != NONE {
            worked[k.0 as usize] = true;
        }
    }
    let mut out: FxMap<(u32, u32, u32), u64> = FxMap::default();
    for r in &tree.ranges {
        if worked[r.name as usize] && in_scope(r.start_ns) {
            *out.entry((r.name, r.dims, r.types)).or_default() += 1;
        }
    }
    out
}

/// Module totals including sub-modules; a child's id is always above its parent's.
pub(crate) fn module_totals(modules: &Modules, by_module: &[Acc]) -> Vec<i64> {
    let mut total: Vec<i64> = by_module.iter().map(|a| a.ns).collect();
    for id in (1..modules.nodes.len()).rev() {
        let p = modules.nodes[id].0;
        if p != NONE && p != 0 {
            total[p as usize] += total[id];
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::TimelineBuilder;

    #[test]
    fn kept_stretches_are_the_records_that_waited_on_their_launches() {
        let mut tb = TimelineBuilder::new(0, 0).keep_stretches();
        // Busy to 10 ns; three records each shorter than the gap before it (10, 15, 15 ns);
        // then one longer than its 1 ns gap ends the stretch; two more short ones after a
        // long record are too few to count.
        let gaps: Vec<i64> = [
            (0, 10),
            (20, 5),
            (40, 5),
            (60, 5),
            (66, 100),
            (170, 1),
            (175, 1),
        ]
        .iter()
        .map(|&(s, d)| tb.push(s, d))
        .collect();
        assert_eq!(gaps, [0, 10, 15, 15, 1, 4, 4]);
        let (tl, gap_ns) = tb.finish();
        assert_eq!(tb.stretches(), [(1, 4)]);
        assert_eq!(gap_ns, 40);
        assert_eq!(tl.launch_bound_stretches, 1);
        // Not kept unless asked for.
        let mut plain = TimelineBuilder::new(0, 0);
        for (s, d) in [(0, 10), (20, 5), (40, 5), (60, 5)] {
            plain.push(s, d);
        }
        plain.finish();
        assert!(plain.stretches().is_empty());
    }
}
