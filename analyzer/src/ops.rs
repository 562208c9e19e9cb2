//! The operator tree: host ranges (PyTorch ops, NVTX ranges, user annotations, `nn.Module`
//! frames) nested per thread, with names parsed into op type, input shapes and dtypes.

use std::collections::HashMap;

use crate::fxmap::FxMap;

/// Range-name parsing lives in the store crate, shared with the collector's ingest.
pub use fuseprof_store::{parse_range_name, ParsedName};
use fuseprof_store::{LeanRange, RangeKind, Strings};
use serde::{Deserialize, Serialize};

/// What a range stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A PyTorch operator (Kineto cpu_op, or an NVTX range from `emit_nvtx` such as
    /// `aten::addmm, seq = 12, sizes = [...]`) or an autograd function.
    Op,
    /// A module frame (`nn.Module: Linear_0` python_function events).
    Module,
    /// The repeating unit of the run (ProfilerStep#N and similar annotations).
    Step,
    /// Any other user range (NVTX, record_function, user annotations).
    User,
}

impl Role {
    fn bits(self) -> u32 {
        self as u32
    }
    fn from_bits(b: u32) -> Role {
        match b & 3 {
            0 => Role::Op,
            1 => Role::Module,
            2 => Role::Step,
            _ => Role::User,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Op => "op",
            Role::Module => "module",
            Role::Step => "step",
            Role::User => "user",
        }
    }
}

/// The NVTX domain of the collector's module ranges.
pub const MODULE_DOMAIN: &str = "pytorch.modules";

/// No range / no string.
pub(crate) const NONE: u32 = u32::MAX;

/// One range of the tree, kept small: a 10-million-kernel run holds tens of millions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RangeRec {
    pub start_ns: i64,
    pub end_ns: i64,
    /// Normalised name (an id in [`Names`]).
    pub name: u32,
    /// Input shapes text (an id in [`Names`]) or NONE.
    pub dims: u32,
    /// Input dtypes text (an id in [`Names`]) or NONE.
    pub types: u32,
    /// thread index << 2 | role.
    thread_role: u32,
}

impl RangeRec {
    pub fn thread(&self) -> u32 {
        self.thread_role >> 2
    }
    pub fn role(&self) -> Role {
        Role::from_bits(self.thread_role)
    }
}

/// The store's strings plus the texts the analyzer derives (normalised op names, NVTX sizes,
/// module paths). Ids below `base_len + 1` are the store's own.
pub(crate) struct Names {
    base: Strings,
    base_len: u32,
    extra: Vec<String>,
    extra_ids: HashMap<String, u32>,
}

impl Names {
    pub fn new(base: Strings) -> Names {
        let base_len = base.len() as u32;
        Names {
            base,
            base_len,
            extra: Vec::new(),
            extra_ids: HashMap::new(),
        }
    }
    pub fn get(&self, id: u32) -> &str {
        if id == NONE {
            ""
        } else if id <= self.base_len {
            self.base.get(fuseprof_store::StrId(id as i64))
        } else {
            self.extra
                .get((id - self.base_len - 1) as usize)
                .map_or("", |s| s.as_str())
        }
    }
    /// An id for `text`, reusing the store's id when `same_as` already spells it. An id that is
    /// not the store's (a corrupt file's reference past its string table) is never reused:
    /// every id handed out stays below `id_bound`.
    pub fn intern(&mut self, text: &str, same_as: Option<u32>) -> u32 {
        if let Some(id) = same_as {
            if id != NONE && id <= self.base_len && self.get(id) == text {
                return id;
            }
        }
        if let Some(&id) = self.extra_ids.get(text) {
            return id;
        }
        self.extra.push(text.to_string());
        let id = self.base_len + self.extra.len() as u32;
        self.extra_ids.insert(text.to_string(), id);
        id
    }
    /// How many store ids exist (ids 1..=len).
    pub fn base_len(&self) -> u32 {
        self.base_len
    }
    /// One past the largest id handed out so far.
    pub fn id_bound(&self) -> usize {
        self.base_len as usize + self.extra.len() + 1
    }
}

/// Names that mark the repeating unit, compared after lower-casing and dropping digits and
/// trailing separators (`ProfilerStep#12` -> `profilerstep`).
const STEP_NAMES: &[&str] = &[
    "profilerstep",
    "step",
    "train_step",
    "training_step",
    "train step",
    "training step",
    "train_iter",
    "iteration",
    "iter",
    "train_batch",
];

/// `ProfilerStep#12` -> Some("ProfilerStep#N"): the name of a step annotation with its number
/// replaced, or None when `name` does not name a step.
pub fn step_family(name: &str) -> Option<String> {
    let lower: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect();
    let key = lower.trim_end_matches(['#', ' ', '_', ':', '-']);
    if !STEP_NAMES.contains(&key) {
        return None;
    }
    let mut out = String::new();
    let mut in_num = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_num {
                out.push('N');
            }
            in_num = true;
        } else {
            out.push(c);
            in_num = false;
        }
    }
    Some(out)
}

/// What the analyzer needs to know about one store name, computed once per name.
#[derive(Clone, Copy)]
struct NameInfo {
    name: u32,
    sizes: u32,
    has_fields: bool,
    is_step: bool,
    is_module: bool,
}

/// Ranges of every thread, sorted by (thread, start, end descending) and nested.
pub(crate) struct Tree {
    pub ranges: Vec<RangeRec>,
    /// Parent of each range (NONE at the top of its thread).
    pub parent: Vec<u32>,
    /// First range of each thread: thread t owns `thread_start[t]..thread_start[t + 1]`.
    pub thread_start: Vec<u32>,
    /// (pid, tid) of each thread index.
    pub threads: Vec<(i64, i64)>,
    pub thread_index: FxMap<(i64, i64), u32>,
    /// The ranges whose role is [`Role::Step`], in order: the step finder reads these rather
    /// than every range (once for the run and once per rank).
    pub steps: Vec<u32>,
    /// Oddities met and how they were handled.
    pub unclosed: u64,
    pub clipped: u64,
    pub reversed: u64,
}

pub(crate) struct TreeBuilder<'n> {
    names: &'n mut Names,
    info: Vec<Option<NameInfo>>,
    /// Normalised spelling of each store dims text, computed once per text.
    dims_memo: Vec<u32>,
    module_domain: Option<u32>,
    last_thread: Option<((i64, i64), u32)>,
    ranges: Vec<RangeRec>,
    threads: Vec<(i64, i64)>,
    thread_index: FxMap<(i64, i64), u32>,
    unclosed: u64,
    reversed: u64,
    pub latest_ns: i64,
}

impl<'n> TreeBuilder<'n> {
    pub fn new(names: &'n mut Names) -> Self {
        let n = names.base_len() as usize + 1;
        TreeBuilder {
            names,
            info: vec![None; n],
            dims_memo: vec![NONE; n],
            module_domain: None,
            last_thread: None,
            ranges: Vec::new(),
            threads: Vec::new(),
            thread_index: FxMap::default(),
            unclosed: 0,
            reversed: 0,
            latest_ns: i64::MIN,
        }
    }

    fn name_info(&mut self, raw: u32) -> NameInfo {
        if let Some(Some(i)) = self.info.get(raw as usize) {
            return *i;
        }
        let text = self.names.get(raw).to_string();
        let parsed = parse_range_name(&text);
        let step = step_family(parsed.name);
        let is_module = parsed.name.starts_with("nn.Module: ");
        let name = match &step {
            Some(family) => self.names.intern(family, None),
            None => self.names.intern(parsed.name, Some(raw)),
        };
        let sizes = parsed
            .sizes
            .map_or(NONE, |s| self.names.intern(&normalize_dims(s), None));
        let info = NameInfo {
            name,
            sizes,
            has_fields: parsed.has_fields,
            is_step: step.is_some(),
            is_module,
        };
        if let Some(slot) = self.info.get_mut(raw as usize) {
            *slot = Some(info);
        }
        info
    }

    /// NVTX ranges the collector writes for `nn.Module` calls (`--pytorch modules`).
    fn is_module_domain(&mut self, r: &LeanRange) -> bool {
        let Some(d) = r.domain else { return false };
        let d = d.0 as u32;
        if self.module_domain.is_none() && self.names.get(d) == MODULE_DOMAIN {
            self.module_domain = Some(d);
        }
        self.module_domain == Some(d)
    }

    pub fn thread(&mut self, pid: i64, tid: i64) -> u32 {
        if let Some((key, t)) = self.last_thread {
            if key == (pid, tid) {
                return t;
            }
        }
        let t = self.thread_slow(pid, tid);
        self.last_thread = Some(((pid, tid), t));
        t
    }

    fn thread_slow(&mut self, pid: i64, tid: i64) -> u32 {
        let next = self.threads.len() as u32;
        let t = *self.thread_index.entry((pid, tid)).or_insert(next);
        if t == next {
            self.threads.push((pid, tid));
        }
        t
    }

    /// Takes one store range; marks, GPU-side ranges and plain Python frames are not part of
    /// the tree.
    pub fn add(&mut self, r: &LeanRange) {
        let raw = r.name.0 as u32;
        let role = match r.kind {
            RangeKind::CpuOp => {
                let i = self.name_info(raw);
                if i.is_step {
                    Role::Step
                } else {
                    Role::Op
                }
            }
            RangeKind::NvtxPushPop | RangeKind::NvtxStartEnd if self.is_module_domain(r) => {
                Role::Module
            }
            RangeKind::UserAnnotation | RangeKind::NvtxPushPop | RangeKind::NvtxStartEnd => {
                let i = self.name_info(raw);
                if i.is_step {
                    Role::Step
                } else if r.kind != RangeKind::UserAnnotation
                    && (i.has_fields || self.names.get(i.name).contains("::"))
                {
                    Role::Op
                } else {
                    Role::User
                }
            }
            RangeKind::PythonFunction if self.name_info(raw).is_module => Role::Module,
            _ => return,
        };
        let mut info = self.name_info(raw);
        if role == Role::Module && self.names.get(info.name) == "(unnamed)" {
            // The model itself: the collector names it by its class (the NVTX category).
            if let Some(c) = r.category {
                let class = self.names.get(c.0 as u32).to_string();
                info.name = self.names.intern(&class, Some(c.0 as u32));
            }
        }
        let end_ns = match r.end_ns {
            Some(e) if e >= r.start_ns => e,
            Some(_) => {
                self.reversed += 1;
                r.start_ns
            }
            None => {
                self.unclosed += 1;
                i64::MAX
            }
        };
        self.latest_ns = self.latest_ns.max(r.start_ns).max(if end_ns == i64::MAX {
            r.start_ns
        } else {
            end_ns
        });
        let dims = match r.input_dims {
            Some(d) => {
                let raw_dims = d.0 as u32;
                match self.dims_memo.get(raw_dims as usize) {
                    Some(&m) if m != NONE => m,
                    _ => {
                        let text = self.names.get(raw_dims);
                        let norm = normalize_dims(text);
                        let id = if norm == text {
                            raw_dims
                        } else {
                            self.names.intern(&norm, None)
                        };
                        if let Some(slot) = self.dims_memo.get_mut(raw_dims as usize) {
                            *slot = id;
                        }
                        id
                    }
                }
            }
            None => info.sizes,
        };
        let thread = self.thread(r.pid, r.tid);
        self.ranges.push(RangeRec {
            start_ns: r.start_ns,
            end_ns,
            name: info.name,
            dims,
            types: r.input_types.map_or(NONE, |t| t.0 as u32),
            thread_role: thread << 2 | role.bits(),
        });
    }

    /// Sorts and nests. `run_end_ns` closes ranges that never closed and have no parent.
    pub fn build(self, run_end_ns: i64) -> Tree {
        let TreeBuilder {
            mut ranges,
            threads,
            thread_index,
            unclosed,
            reversed,
            ..
        } = self;
        let order = |a: &RangeRec, b: &RangeRec| {
            (a.thread(), a.start_ns, b.end_ns).cmp(&(b.thread(), b.start_ns, a.end_ns))
        };
        if !ranges.is_sorted_by(|a, b| order(a, b).is_le()) {
            ranges = by_thread(ranges, threads.len());
            // A thread's ranges mostly come in start order already (a trace lists each
            // thread's events in time order): only those that do not are sorted.
            let mut from = 0;
            while from < ranges.len() {
                let t = ranges[from].thread();
                let to = from + ranges[from..].partition_point(|r| r.thread() == t);
                let run = &mut ranges[from..to];
                if !run.is_sorted_by(|a, b| order(a, b).is_le()) {
                    run.sort_unstable_by(order);
                }
                from = to;
            }
        }
        let mut parent = vec![NONE; ranges.len()];
        let mut thread_start = vec![0u32; threads.len() + 1];
        let mut clipped = 0;
        let mut stack: Vec<u32> = Vec::new();
        let mut current_thread = u32::MAX;
        for i in 0..ranges.len() {
            let t = ranges[i].thread();
            if t != current_thread {
                stack.clear();
                for tt in current_thread.wrapping_add(1)..=t {
                    thread_start[tt as usize] = i as u32;
                }
                current_thread = t;
            }
            let start = ranges[i].start_ns;
            while let Some(&top) = stack.last() {
                if ranges[top as usize].end_ns <= start {
                    stack.pop();
                } else {
                    break;
                }
            }
            if let Some(&top) = stack.last() {
                parent[i] = top;
                let parent_end = ranges[top as usize].end_ns;
                if ranges[i].end_ns > parent_end {
                    // Overlapping without nesting (or never closed): end with the parent, so
                    // that the ranges of a thread always form a tree.
                    if ranges[i].end_ns != i64::MAX {
                        clipped += 1;
                    }
                    ranges[i].end_ns = parent_end;
                }
            }
            stack.push(i as u32);
        }
        for tt in current_thread.wrapping_add(1)..=threads.len() as u32 {
            thread_start[tt as usize] = ranges.len() as u32;
        }
        let mut steps = Vec::new();
        for (i, r) in ranges.iter_mut().enumerate() {
            if r.end_ns == i64::MAX {
                r.end_ns = run_end_ns.max(r.start_ns);
            }
            if r.role() == Role::Step {
                steps.push(i as u32);
            }
        }
        Tree {
            ranges,
            parent,
            thread_start,
            threads,
            thread_index,
            steps,
            unclosed,
            clipped,
            reversed,
        }
    }
}

/// `ranges` grouped by thread (thread order, each thread's ranges in the order they came): one
/// counting pass and one copy, where a sort of the whole would compare every range many times.
fn by_thread(ranges: Vec<RangeRec>, threads: usize) -> Vec<RangeRec> {
    let Some(&filler) = ranges.first() else {
        return ranges;
    };
    let mut at = vec![0usize; threads + 1];
    for r in &ranges {
        at[r.thread() as usize + 1] += 1;
    }
    for t in 1..at.len() {
        at[t] += at[t - 1];
    }
    let mut out = vec![filler; ranges.len()];
    for r in ranges {
        let slot = &mut at[r.thread() as usize];
        out[*slot] = r;
        *slot += 1;
    }
    out
}

impl Tree {
    /// The innermost range of `thread` open at `t_ns` (start <= t < end). `hint` is where the
    /// previous lookup on this thread ended: launches come nearly in time order, so the search
    /// gallops from there instead of bisecting the whole thread.
    pub fn innermost(&self, thread: u32, t_ns: i64, hint: &mut usize) -> Option<u32> {
        let lo = self.thread_start[thread as usize] as usize;
        let hi = self.thread_start[thread as usize + 1] as usize;
        let slice = &self.ranges[lo..hi];
        let n = gallop(slice, *hint, |r| r.start_ns <= t_ns);
        *hint = n;
        if n == 0 {
            return None;
        }
        let mut i = (lo + n - 1) as u32;
        loop {
            if self.ranges[i as usize].end_ns > t_ns {
                return Some(i);
            }
            i = self.parent[i as usize];
            if i == NONE {
                return None;
            }
        }
    }

    /// The thread of range `i`, from the threads' first ranges: the same as
    /// `ranges[i].thread()` without reading the range (a cache miss for each of a run's
    /// records when they are visited in launch order).
    #[inline]
    pub fn thread_of(&self, i: u32) -> u32 {
        let starts = &self.thread_start[..self.threads.len()];
        (starts.partition_point(|&s| s <= i) - 1) as u32
    }

    /// The first range of `thread` that starts at `start_ns` and whose name passes `name_ok`.
    pub fn find(&self, thread: u32, start_ns: i64, name_ok: impl Fn(u32) -> bool) -> Option<u32> {
        let lo = self.thread_start[thread as usize] as usize;
        let hi = self.thread_start[thread as usize + 1] as usize;
        let slice = &self.ranges[lo..hi];
        let from = slice.partition_point(|r| r.start_ns < start_ns);
        slice[from..]
            .iter()
            .take_while(|r| r.start_ns == start_ns)
            .position(|r| name_ok(r.name))
            .map(|p| (lo + from + p) as u32)
    }

    /// The index of thread (pid, tid), adding it (with no ranges) when it has none.
    pub fn add_thread(&mut self, pid: i64, tid: i64) -> u32 {
        if let Some(&t) = self.thread_index.get(&(pid, tid)) {
            return t;
        }
        let t = self.threads.len() as u32;
        self.threads.push((pid, tid));
        self.thread_index.insert((pid, tid), t);
        self.thread_start.push(self.ranges.len() as u32);
        t
    }
}

/// Elements [`gallop`] steps over one by one from its hint before it gallops: lookups made in
/// order mostly land a few elements on, where reading the neighbours in turn costs less than
/// jumping (each jump a mispredicted branch, often a cache miss).
const WALK: usize = 8;

/// `slice.partition_point(pred)`, searched outwards from `hint` (a few steps, then exponential
/// then binary), so that lookups near the previous one touch few cache lines.
pub(crate) fn gallop<T>(slice: &[T], hint: usize, pred: impl Fn(&T) -> bool) -> usize {
    let n = slice.len();
    let hint = hint.min(n);
    if hint < n && pred(&slice[hint]) {
        // The answer is above hint.
        let walk_end = n.min(hint + 1 + WALK);
        for (i, x) in slice[hint + 1..walk_end].iter().enumerate() {
            if !pred(x) {
                return hint + 1 + i;
            }
        }
        if walk_end == n {
            return n;
        }
        let hint = walk_end - 1;
        let mut step = 1;
        let mut lo = hint + 1;
        loop {
            let probe = hint + step;
            if probe >= n || !pred(&slice[probe]) {
                let hi = probe.min(n);
                return lo + slice[lo..hi].partition_point(&pred);
            }
            lo = probe + 1;
            step *= 2;
        }
    } else {
        // The answer is at or below hint.
        let walk_end = hint.saturating_sub(WALK);
        for i in (walk_end..hint).rev() {
            if pred(&slice[i]) {
                return i + 1;
            }
        }
        if walk_end == 0 {
            return 0;
        }
        let hint = walk_end;
        let mut step = 1;
        let mut hi = hint;
        loop {
            if step > hint {
                return slice[..hi].partition_point(&pred);
            }
            let probe = hint - step;
            if pred(&slice[probe]) {
                return probe + 1 + slice[probe + 1..hi].partition_point(&pred);
            }
            hi = probe;
            step *= 2;
        }
    }
}

/// Shapes as one spelling: `[[256], [2048, 6948]]` and `[[256],[2048,6948]]` are the same, and
/// whatever follows the list (emit_nvtx's `, input_op_ids=[...]`) is not part of it.
pub fn normalize_dims(s: &str) -> String {
    let s = leading_list(s);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !c.is_whitespace() {
            out.push(c);
        }
        if c == ',' {
            out.push(' ');
        }
    }
    out
}

/// The first balanced `[...]` of `s`, or `s` trimmed when it has none.
fn leading_list(s: &str) -> &str {
    let s = s.trim();
    let Some(open) = s.find('[') else {
        return s;
    };
    let mut depth = 0i32;
    for (i, c) in s[open..].char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return &s[open..open + i + 1];
                }
            }
            _ => {}
        }
    }
    s
}

/// Parses a shapes list `[[64, 3136, 96], [96], []]` into dims per input; non-tensor inputs
/// (scalars, lists of tensors) come back as empty lists.
pub fn parse_dims(s: &str) -> Option<Vec<Vec<i64>>> {
    let v: serde_json::Value = serde_json::from_str(s).ok()?;
    let outer = v.as_array()?;
    Some(
        outer
            .iter()
            .map(|inner| {
                inner
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
                    .unwrap_or_default()
            })
            .collect(),
    )
}

/// Parses a dtypes list `["c10::Half", "float", ""]`.
pub fn parse_types(s: &str) -> Option<Vec<String>> {
    serde_json::from_str(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_s_thread_follows_from_the_threads_first_ranges() {
        // Threads 0 and 2 have ranges, 1 and 4 none, 3 one; thread 5 is added later.
        let per_thread = [3usize, 0, 4, 1, 0];
        let mut tree = Tree {
            ranges: Vec::new(),
            parent: Vec::new(),
            thread_start: Vec::new(),
            threads: Vec::new(),
            thread_index: FxMap::default(),
            steps: Vec::new(),
            unclosed: 0,
            clipped: 0,
            reversed: 0,
        };
        for (t, &n) in per_thread.iter().enumerate() {
            tree.thread_start.push(tree.ranges.len() as u32);
            tree.threads.push((1, t as i64));
            for k in 0..n {
                tree.ranges.push(RangeRec {
                    start_ns: k as i64,
                    end_ns: k as i64 + 1,
                    name: 0,
                    dims: NONE,
                    types: NONE,
                    thread_role: (t as u32) << 2,
                });
                tree.parent.push(NONE);
            }
        }
        tree.thread_start.push(tree.ranges.len() as u32);
        tree.add_thread(1, 5);
        for (i, r) in tree.ranges.iter().enumerate() {
            assert_eq!(tree.thread_of(i as u32), r.thread(), "range {i}");
        }
    }

    #[test]
    fn gallop_finds_what_partition_point_finds_from_any_hint() {
        let v: Vec<i64> = vec![1, 3, 3, 5, 8, 8, 8, 13, 21, 34];
        for t in -1..40 {
            let want = v.partition_point(|&x| x <= t);
            for hint in 0..=v.len() + 2 {
                assert_eq!(gallop(&v, hint, |&x| x <= t), want, "t {t} hint {hint}");
            }
        }
        assert_eq!(gallop(&[] as &[i64], 3, |&x| x < 1), 0);
        // Long enough that the answer lies past the steps taken one by one, either way.
        let v: Vec<i64> = (0..300).map(|i| i / 3 * 2).collect();
        for t in (-2..204).step_by(3) {
            let want = v.partition_point(|&x| x <= t);
            for hint in (0..=v.len() + 2).step_by(7) {
                assert_eq!(gallop(&v, hint, |&x| x <= t), want, "t {t} hint {hint}");
            }
        }
    }
}
