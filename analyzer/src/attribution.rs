//! Attribution: every kernel, memcpy and memset belongs to the innermost range open on the
//! thread that launched it. The launching API call is found by (pid, correlation id); where the
//! trace lacks it (sampled Kineto traces), Kineto's External id names the op instead. CUDA-graph
//! kernels share the correlation id of their `cudaGraphLaunch`, so they land on the op that
//! launched the graph, and count as one launch.

use std::collections::HashMap;

use fuseprof_store::{CopyKind, Kernel, LeanKernel, MemopKind, Store};

use crate::classify::{Class, LaunchShape, Rules};
use crate::ops::{parse_range_name, step_family, Names, Tree, NONE};
use crate::Result;

pub(crate) const KIND_KERNEL: u8 = 0;
pub(crate) const KIND_MEMCPY: u8 = 1;
pub(crate) const KIND_MEMSET: u8 = 2;
pub(crate) const FLAG_GRAPH: u8 = 4;
/// The first GPU record of its launch call (so launches are counted once).
pub(crate) const FLAG_NEW_LAUNCH: u8 = 8;
/// No launch record was found for it.
pub(crate) const FLAG_NO_LAUNCH: u8 = 16;

/// One kernel, copy or fill, kept small.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub start_ns: i64,
    /// When the host launched it (the API call's start), or `start_ns` where unknown.
    pub launch_ns: i64,
    pub dur_ns: i64,
    /// The innermost range that launched it, or NONE.
    pub owner: u32,
    /// Kernel name, or a synthetic name such as `Memcpy HtoD`.
    pub name: u32,
    pub device: u16,
    pub class: Class,
    pub flags: u8,
    /// Position in the order records were read (in what would be padding).
    pub seq: u32,
}

// `seq` fills padding: the records keep their size, and with it the code path that sorting
// them with `sort_unstable_by_key` takes (see `crate::sort`).
const _: () = assert!(std::mem::size_of::<Item>() == 40);
const _: () = assert!(std::mem::size_of::<Launch>() == 24);

impl Item {
    pub fn kind(&self) -> u8 {
        self.flags & 3
    }
}

#[derive(Clone, Copy)]
struct Launch {
    correlation_id: i64,
    start_ns: i64,
    thread: u32,
    /// Position in the order calls were read (in what would be padding).
    seq: u32,
}

pub(crate) struct Attributed {
    pub items: Vec<Item>,
    pub devices: Vec<i64>,
    pub no_launch_record: u64,
    pub outside_ranges: u64,
    pub by_external_id: u64,
    pub reversed: u64,
    pub launches: u64,
}

struct Joiner<'a> {
    tree: &'a Tree,
    launches: Vec<Launch>,
    used: Vec<u64>,
    thread_pid: Vec<i64>,
    devices: Vec<i64>,
    device_index: HashMap<i64, u16>,
    /// The device of the previous record (records mostly come device by device).
    last_device: Option<(i64, u16)>,
    out: Attributed,
    /// Items without a launch record but with an External id: (item, pid, external id).
    pending: Vec<(u32, Option<i64>, i64)>,
    /// Where the previous search for each process's launches ended (a process's records come
    /// nearly in launch order, but records of several processes interleave, each with
    /// correlation ids of its own).
    launch_hints: Vec<(Option<i64>, usize)>,
    range_hints: Vec<usize>,
    /// When set, the range lookups of records with a launch call wait here (launching
    /// thread, launch time, item) for [`Joiner::resolve_deferred`].
    deferred: Option<Vec<(u32, i64, u32)>>,
}

impl Joiner<'_> {
    fn device(&mut self, id: i64) -> u16 {
        if let Some(&(last_id, d)) = self.last_device.as_ref() {
            if last_id == id {
                return d;
            }
        }
        let d = self.device_slow(id);
        self.last_device = Some((id, d));
        d
    }

    fn device_slow(&mut self, id: i64) -> u16 {
        let next = self.devices.len() as u16;
        let d = *self.device_index.entry(id).or_insert(next);
        if d == next {
            self.devices.push(id);
        }
        d
    }

    /// The launch call for (pid, correlation id): with a pid, the one of that process; without,
    /// only when the correlation id is unambiguous.
    fn find_launch(&mut self, pid: Option<i64>, corr: i64) -> Option<usize> {
        /// Processes with a hint of their own; beyond that they share the last.
        const HINTS: usize = 64;
        let h = match self.launch_hints.iter().position(|&(p, _)| p == pid) {
            Some(h) => h,
            None if self.launch_hints.len() < HINTS => {
                self.launch_hints.push((pid, 0));
                self.launch_hints.len() - 1
            }
            None => HINTS - 1,
        };
        let lo = crate::ops::gallop(&self.launches, self.launch_hints[h].1, |l| {
            l.correlation_id < corr
        });
        self.launch_hints[h].1 = lo;
        let mut found = None;
        for (i, l) in self.launches[lo..].iter().enumerate() {
            if l.correlation_id != corr {
                break;
            }
            match pid {
                Some(p) if self.thread_pid[l.thread as usize] == p => return Some(lo + i),
                Some(_) => {}
                None if found.is_some() => return None,
                None => found = Some(lo + i),
            }
        }
        found
    }

    /// Looks up the deferred records' ranges in (thread, launch time) order, so that each
    /// search starts next to the one before it, and stops deferring.
    fn resolve_deferred(&mut self) {
        let Some(mut d) = self.deferred.take() else {
            return;
        };
        d.sort_unstable();
        for (thread, launch_ns, item) in d {
            let hint = &mut self.range_hints[thread as usize];
            match self.tree.innermost(thread, launch_ns, hint) {
                Some(r) => self.out.items[item as usize].owner = r,
                None => self.out.outside_ranges += 1,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        start_ns: i64,
        end_ns: i64,
        device: i64,
        pid: Option<i64>,
        corr: Option<i64>,
        ext: Option<i64>,
        name: u32,
        class: Class,
        mut flags: u8,
    ) {
        let dur_ns = if end_ns < start_ns {
            self.out.reversed += 1;
            0
        } else {
            end_ns - start_ns
        };
        let device = self.device(device);
        let mut owner = NONE;
        let mut launch_ns = start_ns;
        match corr.and_then(|c| self.find_launch(pid, c)) {
            Some(li) => {
                let l = self.launches[li];
                launch_ns = l.start_ns;
                let (word, bit) = (li / 64, 1u64 << (li % 64));
                if self.used[word] & bit == 0 {
                    self.used[word] |= bit;
                    flags |= FLAG_NEW_LAUNCH;
                    self.out.launches += 1;
                }
                match &mut self.deferred {
                    Some(d) => d.push((l.thread, l.start_ns, self.out.items.len() as u32)),
                    None => {
                        let hint = &mut self.range_hints[l.thread as usize];
                        match self.tree.innermost(l.thread, l.start_ns, hint) {
                            Some(r) => owner = r,
                            None => self.out.outside_ranges += 1,
                        }
                    }
                }
            }
            None => {
                flags |= FLAG_NO_LAUNCH;
                match ext {
                    Some(e) => self.pending.push((self.out.items.len() as u32, pid, e)),
                    None => self.out.no_launch_record += 1,
                }
            }
        }
        self.out.items.push(Item {
            start_ns,
            launch_ns,
            dur_ns,
            owner,
            name,
            device,
            class,
            flags,
            seq: self.out.items.len() as u32,
        });
    }
}

/// The records of one time window (a step) that [`attribute`] joins instead of scanning the
/// run (`crate::scope`): the launch calls of the window and every other call sharing a
/// correlation id with a record read; the records launched in the window (and those that
/// start in it, where the run has records without a launch call). Each list in row id order,
/// as the scans give them.
pub(crate) struct WindowRecords {
    pub launches: Vec<fuseprof_store::LeanLaunch>,
    pub kernels: Vec<Kernel>,
    pub memops: Vec<fuseprof_store::LeanMemop>,
    /// Device ids in the order the whole run meets them (so device indexes and the
    /// headroom's device list are the whole run's).
    pub devices: Vec<i64>,
}

/// Reads launches, kernels and memops (of the whole run, or of `window`) and attributes each
/// GPU record to its range.
pub(crate) fn attribute(
    store: &mut Store,
    tree: &mut Tree,
    names: &mut Names,
    rules: &Rules,
    clock: &mut std::time::Instant,
    window: Option<&WindowRecords>,
    mut observer: Option<&mut dyn crate::RowObserver>,
) -> Result<Attributed> {
    let mut launches = Vec::new();
    let mut last: Option<((i64, i64), u32)> = None;
    let mut on_launch = |a: &fuseprof_store::LeanLaunch| {
        // A thread without ranges still launches; its work is then outside any range.
        let thread = match last {
            Some((key, t)) if key == (a.pid, a.tid) => t,
            _ => {
                let t = tree.add_thread(a.pid, a.tid);
                last = Some(((a.pid, a.tid), t));
                t
            }
        };
        launches.push(Launch {
            correlation_id: a.correlation_id,
            start_ns: a.start_ns,
            thread,
            seq: launches.len() as u32,
        });
    };
    match (window, observer.as_deref_mut()) {
        (None, None) => store.for_each_lean_launch(&mut on_launch)?,
        (None, Some(o)) => store.for_each_lean_call(|c| {
            o.call(c);
            if let Some(correlation_id) = c.correlation_id {
                on_launch(&fuseprof_store::LeanLaunch {
                    start_ns: c.start_ns,
                    pid: c.pid,
                    tid: c.tid,
                    correlation_id,
                });
            }
        })?,
        (Some(w), _) => w.launches.iter().for_each(&mut on_launch),
    }
    crate::lap(clock, "api calls scan");
    let tree: &Tree = tree;
    let thread_pid: Vec<i64> = tree.threads.iter().map(|t| t.0).collect();
    // Runtimes hand out correlation ids in call order, so this is usually sorted already, or
    // sorted within each process (the calls of a job's ranks interleave).
    if !launches.is_sorted_by_key(|l| (l.correlation_id, l.thread)) {
        let mut pids = thread_pid.clone();
        pids.sort_unstable();
        pids.dedup();
        let thread_stream: Vec<usize> = thread_pid
            .iter()
            .map(|p| pids.binary_search(p).unwrap_or(0))
            .collect();
        let path = crate::sort::sort_like_unstable_streams(
            &mut launches,
            |l| (l.correlation_id, l.thread),
            |l| l.seq,
            |l| thread_stream[l.thread as usize],
            pids.len(),
        );
        tracing::debug!("launches sorted: {path:?}");
    }
    crate::lap(clock, "launch sort");
    let used = vec![0u64; launches.len().div_ceil(64)];
    let devices = window.map_or_else(Vec::new, |w| w.devices.clone());
    let device_index = devices
        .iter()
        .enumerate()
        .map(|(i, &d)| (d, i as u16))
        .collect();
    let mut j = Joiner {
        tree,
        launches,
        used,
        thread_pid,
        devices,
        device_index,
        last_device: None,
        out: Attributed {
            items: Vec::new(),
            devices: Vec::new(),
            no_launch_record: 0,
            outside_ranges: 0,
            by_external_id: 0,
            reversed: 0,
            launches: 0,
        },
        pending: Vec::new(),
        launch_hints: Vec::new(),
        range_hints: vec![0; tree.threads.len()],
        deferred: None,
    };
    let push_kernel = |j: &mut Joiner<'_>, k: &LeanKernel, class: Class| {
        let flags = KIND_KERNEL | if k.graph_id.is_some() { FLAG_GRAPH } else { 0 };
        j.push(
            k.start_ns,
            k.end_ns,
            k.device_id,
            k.pid,
            k.correlation_id,
            k.external_id,
            k.name.0 as u32,
            class,
            flags,
        );
    };
    if let Some(w) = window {
        // The window's kernels come with every column; classified as the scans below do.
        let mut class_of: HashMap<u32, Class> = HashMap::new();
        for k in &w.kernels {
            let name = k.name.0 as u32;
            let class = if rules.uses_shape() {
                rules.classify(names.get(name), &launch_shape(k))
            } else {
                *class_of
                    .entry(name)
                    .or_insert_with(|| rules.classify(names.get(name), &LaunchShape::default()))
            };
            push_kernel(&mut j, &lean_kernel(k), class);
        }
    } else if rules.uses_shape() {
        // Rules that look at launch shapes need the kernel's every column.
        store.for_each_kernel(|k: Kernel| {
            let class = rules.classify(names.get(k.name.0 as u32), &launch_shape(&k));
            let k = lean_kernel(&k);
            if let Some(o) = observer.as_deref_mut() {
                o.kernel(&k);
            }
            push_kernel(&mut j, &k, class);
        })?;
    } else {
        // The class of each store name, computed once per name.
        let mut class_of: Vec<Option<Class>> = vec![None; names.base_len() as usize + 1];
        store.for_each_lean_kernel(|k| {
            if let Some(o) = observer.as_deref_mut() {
                o.kernel(k);
            }
            let name = k.name.0 as u32;
            let classify = || rules.classify(names.get(name), &LaunchShape::default());
            let class = match class_of.get_mut(name as usize) {
                Some(Some(c)) => *c,
                Some(slot) => *slot.insert(classify()),
                None => classify(),
            };
            push_kernel(&mut j, k, class);
        })?;
    }
    crate::lap(clock, "kernels scan and join");
    // Copies come in GPU order, which on each thread jumps back and forth over many ranges
    // between one copy's launch and the next: their range lookups are made in launch order
    // once all are read.
    j.deferred = Some(Vec::new());
    // The synthetic name of each (kind, copy kind), interned the first time it is met.
    let mut memop_names: Vec<((MemopKind, Option<CopyKind>), u32)> = Vec::new();
    let mut on_memop = |m: &fuseprof_store::LeanMemop| {
        let (class, kind) = match m.kind {
            MemopKind::Memset => (Class::Memset, KIND_MEMSET),
            MemopKind::Memcpy => (Class::Memcpy, KIND_MEMCPY),
        };
        let key = (m.kind, m.copy_kind.filter(|_| m.kind == MemopKind::Memcpy));
        let name = match memop_names.iter().find(|(k, _)| *k == key) {
            Some(&(_, name)) => name,
            None => {
                let label = match m.kind {
                    MemopKind::Memset => "Memset".to_string(),
                    MemopKind::Memcpy => {
                        format!("Memcpy {}", m.copy_kind.map_or("Unknown", |c| c.as_str()))
                    }
                };
                let name = names.intern(&label, None);
                memop_names.push((key, name));
                name
            }
        };
        j.push(
            m.start_ns,
            m.end_ns,
            m.device_id,
            m.pid,
            m.correlation_id,
            m.external_id,
            name,
            class,
            kind,
        );
    };
    match (window, observer) {
        (None, None) => store.for_each_lean_memop(&mut on_memop)?,
        (None, Some(o)) => store.for_each_lean_memop(|m| {
            o.memop(m);
            on_memop(m)
        })?,
        (Some(w), _) => w.memops.iter().for_each(&mut on_memop),
    }
    j.resolve_deferred();
    crate::lap(clock, "memops scan and join");
    if !j.pending.is_empty() {
        match window {
            None => resolve_external_ids(store, tree, names, &mut j)?,
            // A window is only analysed on its own where the whole run resolved no External
            // id (`crate::scope`): none resolves here either.
            Some(_) => j.out.no_launch_record += j.pending.len() as u64,
        }
    }
    j.out.devices = std::mem::take(&mut j.devices);
    crate::lap(clock, "external ids");
    Ok(j.out)
}

fn launch_shape(k: &Kernel) -> LaunchShape {
    LaunchShape {
        grid: k.grid,
        block: k.block,
        smem_bytes: match (k.static_smem_bytes, k.dynamic_smem_bytes) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        },
    }
}

fn lean_kernel(k: &Kernel) -> LeanKernel {
    LeanKernel {
        start_ns: k.start_ns,
        end_ns: k.end_ns,
        device_id: k.device_id,
        stream_id: k.stream_id,
        pid: k.pid,
        correlation_id: k.correlation_id,
        external_id: k.external_id,
        name: k.name,
        graph_id: k.graph_id,
    }
}

/// Second chance for records without a launch call: the range carrying the same Kineto
/// External id. Only runs when such records exist, so the common case keeps no id table.
fn resolve_external_ids(
    store: &mut Store,
    tree: &Tree,
    names: &Names,
    j: &mut Joiner<'_>,
) -> Result<()> {
    let mut wanted: HashMap<i64, Vec<(u32, Option<i64>)>> = HashMap::new();
    for &(item, pid, ext) in &j.pending {
        wanted.entry(ext).or_default().push((item, pid));
    }
    let pending = j.pending.len() as u64;
    let mut resolved = 0u64;
    let items = &mut j.out.items;
    store.for_each_range(|r| {
        let Some(ext) = r.external_id else { return };
        let Some(list) = wanted.get_mut(&ext) else {
            return;
        };
        let Some(&thread) = tree.thread_index.get(&(r.pid, r.tid)) else {
            return;
        };
        let raw = names.get(r.name.0 as u32);
        let parsed = parse_range_name(raw).name;
        let family = step_family(parsed);
        let Some(range) = tree.find(thread, r.start_ns, |n| {
            let text = names.get(n);
            text == parsed || family.as_deref() == Some(text)
        }) else {
            return;
        };
        list.retain(|&(item, pid)| {
            if pid.is_some_and(|p| p != r.pid) {
                return true;
            }
            let it = &mut items[item as usize];
            it.owner = range;
            it.launch_ns = r.start_ns;
            resolved += 1;
            false
        });
    })?;
    j.out.by_external_id = resolved;
    j.out.no_launch_record += pending - resolved;
    Ok(())
}
