//! The run as a stream of op instances: every outermost PyTorch op (an op with no op around it;
//! modules and annotations do not count) in launch order per thread, with its input shapes,
//! dtypes, module path, step, and the GPU work it launched itself or through the ops nested in
//! it. This is what the fusion advisor matches chains against; the aggregate tables of
//! [`crate::analyze`] cannot say which op followed which.

use fuseprof_store::{CopyKind, MemopKind, MemoryKind, Store};

use crate::headroom::{self, Ceiling};
use crate::hotspots::TimelineBuilder;
use crate::ops::{self, Role, NONE};
use crate::{
    lap, load, steps, AnalyzeConfig, Class, DeviceSummary, DeviceTimeline, Error, Result, Rules,
};

/// One GPU record launched by an op instance (or an op nested in it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuRecord {
    /// Kernel name (copies: `Memcpy HtoD`, fills: `Memset`), an index into
    /// [`OpTrace::kernel_names`].
    pub name: u32,
    pub class: Class,
    pub dur_ns: i64,
    /// The innermost op that launched it (`aten::_cudnn_attention_forward`), an index into
    /// [`OpTrace::kernel_names`] like `name`.
    pub launched_by: u32,
    /// What the hardware counters measured for this kernel (runs recorded with
    /// `collect --metrics`; None otherwise, and for copies and fills).
    pub counters: Option<crate::measured::RecordCounters>,
}

/// One outermost op instance.
#[derive(Clone, Debug, PartialEq)]
pub struct OpInstance {
    /// Index into [`OpTrace::threads`].
    pub thread: u32,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Op type with emit_nvtx fields removed (`aten::addmm`).
    pub name: String,
    /// Input shapes, where the trace recorded them.
    pub dims: Option<Vec<Vec<i64>>>,
    /// Input dtypes as the trace spells them (`c10::Half`), where recorded.
    pub dtypes: Option<Vec<String>>,
    /// `/`-joined module path (`SwinTransformer/layers.0.blocks.1.attn`), None outside modules.
    pub module: Option<String>,
    /// The step window its start falls in.
    pub step: Option<usize>,
    /// GPU time of its records (kernels, copies, fills), nested ops included.
    pub gpu_ns: i64,
    pub records: Vec<GpuRecord>,
}

impl OpInstance {
    /// The op name without its namespace (`aten::addmm` -> `addmm`).
    pub fn base_name(&self) -> &str {
        self.name.rsplit("::").next().unwrap_or(&self.name)
    }

    /// Element size guessed from the recorded dtypes, else from its kernels' names.
    pub fn elem_bytes(&self, kernel_names: &[String]) -> Option<u32> {
        self.dtypes
            .as_ref()
            .and_then(|t| t.first())
            .and_then(|t| headroom::dtype_bytes(t))
            .or_else(|| {
                self.records
                    .iter()
                    .find_map(|r| headroom::dtype_bytes_from_kernel(&kernel_names[r.name as usize]))
            })
    }
}

/// Every outermost op instance of a run (or of one step), in order per thread.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTrace {
    /// File name of the store.
    pub file: String,
    pub source_format: String,
    pub devices: Vec<DeviceSummary>,
    pub ceilings: Vec<Ceiling>,
    /// (pid, tid) of each thread index.
    pub threads: Vec<(i64, i64)>,
    /// The step the trace is restricted to, if any.
    pub step: Option<usize>,
    /// Steps the ops in scope come from: 1 with a step chosen, the run's steps otherwise, 0
    /// when the run has no steps (then every op is in scope and times are per run).
    pub steps: usize,
    /// GPU time of every record in scope (launched inside the scope's step windows).
    pub gpu_ns: i64,
    /// Sorted by (thread, start).
    pub ops: Vec<OpInstance>,
    /// Kernel and op names that [`GpuRecord`]s refer to.
    pub kernel_names: Vec<String>,
    /// Op ranges in scope, and how many of them carry input shapes.
    pub op_ranges: u64,
    pub op_ranges_with_shapes: u64,
    /// Backward ops were seen (autograd's `*Backward*` ranges or `aten::*_backward` ops).
    pub has_backward: bool,
    /// What happened between the ops: the GPU's busy and idle time, the host's annotations and
    /// the calls that made it wait. The advisor's settings read it.
    pub context: TraceContext,
}

/// The run around its ops, over the same scope as [`OpTrace::ops`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceContext {
    /// Host-clock windows of the steps in scope, in order (empty when the run has no steps).
    pub windows: Vec<(i64, i64)>,
    /// When at least one device ran a record in scope: merged (start, end) intervals, in order.
    pub busy: Vec<(i64, i64)>,
    /// Each device's timeline over the records in scope (idle gaps, launch-bound stretches).
    pub timeline: Vec<DeviceIdle>,
    /// User ranges in scope (record_function, NVTX, Kineto user annotations such as
    /// `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`), in order per thread.
    pub annotations: Vec<HostSpan>,
    /// CUDA API calls in scope that make the host wait for the GPU (stream, device and event
    /// synchronisation, synchronous copies), in start order.
    pub syncs: Vec<HostSpan>,
    /// Compute capability of each device in [`OpTrace::devices`] order, where the store has it.
    pub compute_capability: Vec<Option<(i64, i64)>>,
    /// Copies between host and device in scope (their GPU start inside a step window), in
    /// start order.
    pub host_copies: Vec<HostCopy>,
    /// Durations of the kernel launch calls in scope (`cudaLaunchKernel`, `cuLaunchKernel`
    /// and their variants), sorted: the host's cost per launch as recorded, tracer included.
    pub launch_call_ns: Vec<i64>,
    /// Consecutive kernel launch calls on one thread, both in scope: how many host ranges
    /// (ops, modules, annotations: each one the tracer records) opened between the first
    /// call's end and the second's start, and that host time. What each range adds to it is
    /// the tracer's cost per range and the program's own cost per op together.
    pub launch_host_gaps: Vec<LaunchGap>,
    /// Host ranges in scope (ops, modules and other user ranges; step annotations left out):
    /// what the tracer recorded on the host besides the API calls.
    pub host_ranges: u64,
    /// The run's first record's start (over every record, in scope or not): the zero of a
    /// timeline of the run (Perfetto, `fuseprof export`).
    pub origin_ns: i64,
}

/// The host time between two consecutive kernel launch calls on one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchGap {
    /// Host ranges opened between them.
    pub ranges: u32,
    /// From the first call's end to the second's start.
    pub host_ns: i64,
}

/// One copy between host and device memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostCopy {
    pub start_ns: i64,
    pub dur_ns: i64,
    pub bytes: Option<i64>,
    /// Host to device (else device to host).
    pub to_device: bool,
    /// The host side: `Pageable` or `Pinned` where the source recorded it.
    pub host_memory: Option<MemoryKind>,
}

/// A device's timeline and the idle time inside its launch-bound stretches.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceIdle {
    pub timeline: DeviceTimeline,
    /// Gaps inside the launch-bound stretches of [`DeviceTimeline::launch_bound_ns`]: what the
    /// GPU would not wait if the stretches' kernels were launched at once (a CUDA graph).
    pub launch_bound_gap_ns: i64,
    /// Each launch-bound stretch, in order: where to see it in a timeline.
    pub stretches: Vec<LaunchStretch>,
    /// The kernels in the stretches (each one waited on its launch) with the idle time
    /// before them, most first; at most [`LAUNCH_BOUND_KERNELS`].
    pub launch_bound_kernels: Vec<(String, i64)>,
}

/// The most kernel names [`DeviceIdle::launch_bound_kernels`] keeps.
pub const LAUNCH_BOUND_KERNELS: usize = 8;

/// One launch-bound stretch of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchStretch {
    /// From the end of the work before its first gap to its last record's end.
    pub start_ns: i64,
    pub end_ns: i64,
    /// The idle gaps inside it.
    pub gap_ns: i64,
}

/// A span of host time: a range or an API call.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpan {
    /// Index into [`OpTrace::threads`].
    pub thread: u32,
    pub start_ns: i64,
    pub end_ns: i64,
    /// The range's text or the API call's name (`cudaStreamSynchronize`).
    pub name: String,
    /// The outermost op open around it on its thread (`aten::item`), where one is.
    pub op: Option<String>,
}

/// CUDA runtime and driver calls that return only once the GPU has finished work queued before
/// them (names as the runtime spells them, without nsys's `_v3020`-style version suffix).
const SYNC_CALLS: &[&str] = &[
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpyFromSymbol",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH",
    "cuMemcpyDtoH_v2",
];

/// An API name without the `_v3020` suffix nsys exports carry.
fn api_base(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((head, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => name,
    }
}

/// Whether API call `name` makes the host wait for the GPU.
pub fn is_sync_call(name: &str) -> bool {
    SYNC_CALLS.contains(&api_base(name)) || SYNC_CALLS.contains(&name)
}

/// Whether API call `name` launches a kernel (`cudaLaunchKernel`, `cudaLaunchKernelExC`,
/// `cuLaunchKernel`, `cuLaunchKernelEx`, nsys's `_v7000` suffixes removed); graph launches
/// are not counted, as one stands for many kernels.
pub fn is_launch_call(name: &str) -> bool {
    let n = api_base(name);
    (n.starts_with("cudaLaunchKernel") || n.starts_with("cuLaunchKernel")) && !n.contains("Graph")
}

impl TraceContext {
    /// GPU idle time (no device running a record in scope) inside `[from, to)`.
    pub fn idle_between(&self, from: i64, to: i64) -> i64 {
        if to <= from {
            return 0;
        }
        let first = self.busy.partition_point(|&(_, e)| e <= from);
        let mut busy = 0;
        for &(s, e) in &self.busy[first..] {
            if s >= to {
                break;
            }
            busy += e.min(to) - s.max(from);
        }
        (to - from) - busy
    }

    /// When the GPU next starts work at or after `t` (None: it never does in scope).
    pub fn next_busy_from(&self, t: i64) -> Option<i64> {
        let i = self.busy.partition_point(|&(_, e)| e <= t);
        self.busy.get(i).map(|&(s, _)| s.max(t))
    }

    /// The step window `t` falls in.
    pub fn window_at(&self, t: i64) -> Option<(i64, i64)> {
        let i = self.windows.partition_point(|&(s, _)| s <= t);
        (i > 0 && t < self.windows[i - 1].1).then(|| self.windows[i - 1])
    }
}

impl OpTrace {
    /// Divides a run-wide sum by the step count (per run when there are no steps).
    pub fn per_step(&self, ns: i64) -> f64 {
        ns as f64 / self.steps.max(1) as f64
    }
}

fn is_backward(name: &str) -> bool {
    name.contains("Backward") || name.ends_with("_backward") || name.contains("autograd::engine")
}

/// Reads `store` into an [`OpTrace`] (restricted to `cfg.step` when set).
pub fn op_trace(store: &mut Store, cfg: &AnalyzeConfig) -> Result<OpTrace> {
    let mut clock = std::time::Instant::now();
    let loaded = load(store, &Rules::builtin(), &mut clock, None, None)?;
    let tree = &loaded.tree;
    let names = &loaded.names;
    let windows = &loaded.found.windows;
    let window = match cfg.step {
        None => None,
        Some(k) if windows.is_empty() => return Err(Error::NoSteps { requested: k }),
        Some(k) => Some(*windows.get(k).ok_or(Error::NoSuchStep {
            requested: k,
            available: windows.len(),
        })?),
    };
    let in_scope = |t: i64, hint: &mut usize| -> Option<Option<usize>> {
        match window {
            Some(w) => (t >= w.start_ns && t < w.end_ns).then_some(cfg.step),
            None if windows.is_empty() => Some(None),
            None => steps::window_of(windows, t, hint).map(Some),
        }
    };

    // The outermost op above each range (NONE for ranges outside every op); parents come
    // before their children in the tree's order.
    let n = tree.ranges.len();
    let mut outer = vec![NONE; n];
    let mut has_backward = false;
    for i in 0..n {
        let p = tree.parent[i];
        let up = if p == NONE { NONE } else { outer[p as usize] };
        let r = &tree.ranges[i];
        outer[i] = if up == NONE && r.role() == Role::Op {
            i as u32
        } else {
            up
        };
        has_backward = has_backward || is_backward(names.get(r.name));
    }
    let (module_of, modules) = crate::hotspots::module_ids(tree);

    // Outermost ops in scope, indexed by range.
    let mut slot = vec![u32::MAX; n];
    let mut out: Vec<OpInstance> = Vec::new();
    let mut op_ranges = 0;
    let mut with_shapes = 0;
    let mut hint = 0;
    let mut last_thread = u32::MAX;
    for (i, r) in tree.ranges.iter().enumerate() {
        if r.role() != Role::Op {
            continue;
        }
        if r.thread() != last_thread {
            last_thread = r.thread();
            hint = 0;
        }
        let Some(step) = in_scope(r.start_ns, &mut hint) else {
            continue;
        };
        op_ranges += 1;
        with_shapes += u64::from(r.dims != NONE);
        if outer[i] != i as u32 {
            continue;
        }
        slot[i] = out.len() as u32;
        let module = module_of[i];
        out.push(OpInstance {
            thread: r.thread(),
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            name: names.get(r.name).to_string(),
            dims: (r.dims != NONE)
                .then(|| ops::parse_dims(names.get(r.dims)))
                .flatten(),
            dtypes: (r.types != NONE)
                .then(|| ops::parse_types(names.get(r.types)))
                .flatten(),
            module: (module != 0).then(|| modules.path(names, module)),
            step,
            gpu_ns: 0,
            records: Vec::new(),
        });
    }

    // GPU records in scope, each to the outermost op of the range that launched it.
    let mut kernel_names: Vec<String> = Vec::new();
    let mut kernel_index: std::collections::HashMap<u32, u32> = Default::default();
    let mut gpu_ns = 0;
    let mut items = loaded.items.clone();
    items.sort_by_key(|it| (it.launch_ns, it.start_ns));
    // Each kernel's counters, found by (device, start, duration); empty without counters.
    let counters = crate::measured::per_record(&store.named_kernel_counters()?);
    let mut hint = 0;
    for it in &items {
        if in_scope(it.launch_ns, &mut hint).is_none() {
            continue;
        }
        gpu_ns += it.dur_ns;
        if it.owner == NONE {
            continue;
        }
        let o = outer[it.owner as usize];
        if o == NONE || slot[o as usize] == u32::MAX {
            continue;
        }
        let op = &mut out[slot[o as usize] as usize];
        let mut intern = |id: u32| {
            let next = kernel_names.len() as u32;
            *kernel_index.entry(id).or_insert_with(|| {
                kernel_names.push(names.get(id).to_string());
                next
            })
        };
        let name = intern(it.name);
        let launched_by = intern(tree.ranges[it.owner as usize].name);
        op.gpu_ns += it.dur_ns;
        op.records.push(GpuRecord {
            name,
            class: it.class,
            dur_ns: it.dur_ns,
            launched_by,
            counters: (it.kind() == crate::attribution::KIND_KERNEL)
                .then(|| {
                    counters.get(&(loaded.devices[it.device as usize], it.start_ns, it.dur_ns))
                })
                .flatten()
                .copied(),
        });
    }
    lap(&mut clock, "op trace");

    // The GPU's busy intervals and each device's timeline, over the records in scope.
    let mut scoped: Vec<&crate::attribution::Item> = Vec::new();
    let mut hint = 0;
    for it in &items {
        if in_scope(it.launch_ns, &mut hint).is_some() {
            scoped.push(it);
        }
    }
    scoped.sort_by_key(|it| (it.device, it.start_ns));
    let mut timeline = Vec::new();
    let mut i = 0;
    while i < scoped.len() {
        let device = scoped[i].device;
        let mut tb = TimelineBuilder::new(loaded.devices[device as usize], scoped[i].start_ns)
            .keep_stretches();
        let first = i;
        // The idle gap before each of the device's records.
        let mut gaps = Vec::new();
        while i < scoped.len() && scoped[i].device == device {
            gaps.push(tb.push(scoped[i].start_ns, scoped[i].dur_ns));
            i += 1;
        }
        let (timeline_of, launch_bound_gap_ns) = tb.finish();
        let mut stretches = Vec::new();
        let mut waited: std::collections::HashMap<u32, i64> = Default::default();
        for &(a, b) in tb.stretches() {
            let (a, b) = (a as usize, b as usize);
            let records = &scoped[first + a..first + b];
            let last = records[records.len() - 1];
            stretches.push(LaunchStretch {
                start_ns: records[0].start_ns - gaps[a],
                end_ns: last.start_ns + last.dur_ns,
                gap_ns: gaps[a..b].iter().sum(),
            });
            for (it, gap) in records.iter().zip(&gaps[a..b]) {
                *waited.entry(it.name).or_default() += gap;
            }
        }
        let mut launch_bound_kernels: Vec<(String, i64)> = waited
            .into_iter()
            .map(|(id, ns)| (names.get(id).to_string(), ns))
            .collect();
        launch_bound_kernels.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        launch_bound_kernels.truncate(LAUNCH_BOUND_KERNELS);
        timeline.push(DeviceIdle {
            timeline: timeline_of,
            launch_bound_gap_ns,
            stretches,
            launch_bound_kernels,
        });
    }
    scoped.sort_by_key(|it| it.start_ns);
    let mut busy: Vec<(i64, i64)> = Vec::new();
    for it in &scoped {
        let (s, e) = (it.start_ns, it.start_ns + it.dur_ns);
        match busy.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => busy.push((s, e)),
        }
    }

    // The outermost op open at `t` on `thread` (ops are sorted by (thread, start) and the
    // outermost ones of a thread do not overlap).
    let op_at = |thread: u32, t: i64| -> Option<String> {
        let i = out.partition_point(|o| (o.thread, o.start_ns) <= (thread, t));
        let o = out.get(i.checked_sub(1)?)?;
        (o.thread == thread && t < o.end_ns).then(|| o.name.clone())
    };
    let mut annotations = Vec::new();
    let mut hint = 0;
    let mut last_thread = u32::MAX;
    for r in &tree.ranges {
        if r.role() != Role::User {
            continue;
        }
        if r.thread() != last_thread {
            last_thread = r.thread();
            hint = 0;
        }
        if in_scope(r.start_ns, &mut hint).is_none() {
            continue;
        }
        annotations.push(HostSpan {
            thread: r.thread(),
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            name: names.get(r.name).to_string(),
            op: op_at(r.thread(), r.start_ns),
        });
    }
    let mut calls = Vec::new();
    let mut launches = Vec::new();
    store.for_each_api_call(|c| {
        let name = names.get(c.name.0 as u32);
        if is_sync_call(name) {
            calls.push((c.pid, c.tid, c.start_ns, c.end_ns, name.to_string()));
        } else if is_launch_call(name) {
            launches.push((c.start_ns, c.end_ns, c.pid, c.tid));
        }
    })?;
    launches.sort_unstable();
    let mut hint = 0;
    launches.retain(|&(start, ..)| in_scope(start, &mut hint).is_some());
    let mut launch_call_ns: Vec<i64> = launches.iter().map(|l| (l.1 - l.0).max(0)).collect();
    launch_call_ns.sort_unstable();
    // The host ranges' starts per thread, and how many are in scope.
    let mut range_starts: Vec<Vec<i64>> = vec![Vec::new(); tree.threads.len()];
    let mut host_ranges = 0u64;
    let mut hint = 0;
    for r in &tree.ranges {
        if r.role() == Role::Step {
            continue;
        }
        if let Some(v) = range_starts.get_mut(r.thread() as usize) {
            v.push(r.start_ns);
        }
    }
    for v in &mut range_starts {
        v.sort_unstable();
    }
    let mut in_scope_starts: Vec<i64> = range_starts.iter().flatten().copied().collect();
    in_scope_starts.sort_unstable();
    for &t in &in_scope_starts {
        host_ranges += u64::from(in_scope(t, &mut hint).is_some());
    }
    // Consecutive launch calls per thread and the ranges opened between them.
    let mut by_thread: Vec<(u32, i64, i64)> = launches
        .iter()
        .filter_map(|&(s, e, pid, tid)| Some((*tree.thread_index.get(&(pid, tid))?, s, e)))
        .collect();
    by_thread.sort_unstable();
    let launch_host_gaps: Vec<LaunchGap> = by_thread
        .windows(2)
        .filter(|w| w[0].0 == w[1].0 && w[1].1 >= w[0].2)
        .map(|w| {
            let starts = &range_starts[w[0].0 as usize];
            let opened =
                starts.partition_point(|&t| t < w[1].1) - starts.partition_point(|&t| t < w[0].2);
            LaunchGap {
                ranges: u32::try_from(opened).unwrap_or(u32::MAX),
                host_ns: w[1].1 - w[0].2,
            }
        })
        .collect();
    calls.sort_by_key(|c| c.2);
    let mut syncs = Vec::new();
    for (pid, tid, start_ns, end_ns, name) in calls {
        let mut hint = 0;
        if in_scope(start_ns, &mut hint).is_none() {
            continue;
        }
        let thread = tree.thread_index.get(&(pid, tid)).copied();
        syncs.push(HostSpan {
            thread: thread.unwrap_or(u32::MAX),
            start_ns,
            end_ns,
            name: api_base(&name).to_string(),
            op: thread.and_then(|t| op_at(t, start_ns)),
        });
    }
    // Host<->device copies, scoped by their GPU start: a synchronous copy runs while the host
    // waits in the call that queued it, inside the same step.
    let mut host_copies = Vec::new();
    store.for_each_memop(|m| {
        let to_device = match m.copy_kind {
            Some(CopyKind::HtoD) => true,
            Some(CopyKind::DtoH) => false,
            _ => return,
        };
        if m.kind == MemopKind::Memcpy {
            host_copies.push(HostCopy {
                start_ns: m.start_ns,
                dur_ns: (m.end_ns - m.start_ns).max(0),
                bytes: m.bytes,
                to_device,
                host_memory: if to_device {
                    m.src_memory
                } else {
                    m.dst_memory
                },
            });
        }
    })?;
    host_copies.sort_by_key(|c| c.start_ns);
    let mut hint = 0;
    host_copies.retain(|c| in_scope(c.start_ns, &mut hint).is_some());
    let origin_ns = store.span()?.0.unwrap_or(0);
    let context = TraceContext {
        origin_ns,
        host_copies,
        launch_call_ns,
        launch_host_gaps,
        host_ranges,
        windows: match window {
            Some(w) => vec![(w.start_ns, w.end_ns)],
            None => windows.iter().map(|w| (w.start_ns, w.end_ns)).collect(),
        },
        busy,
        timeline,
        annotations,
        syncs,
        compute_capability: loaded
            .devices
            .iter()
            .map(|&id| {
                let d = loaded.device_rows.iter().find(|d| d.id == id)?;
                Some((d.compute_major?, d.compute_minor?))
            })
            .collect(),
    };
    lap(&mut clock, "op trace context");

    let path = &loaded.path;
    Ok(OpTrace {
        file: path.file_name().map_or_else(
            || path.display().to_string(),
            |f| f.to_string_lossy().into(),
        ),
        source_format: loaded.run.source_format.clone(),
        devices: loaded
            .devices
            .iter()
            .map(|&id| DeviceSummary {
                id,
                name: loaded
                    .device_rows
                    .iter()
                    .find(|d| d.id == id)
                    .and_then(|d| d.name.clone()),
            })
            .collect(),
        ceilings: loaded
            .device_rows
            .iter()
            .filter(|d| loaded.devices.contains(&d.id))
            .filter_map(headroom::ceiling_for)
            .collect(),
        threads: tree.threads.clone(),
        step: cfg.step,
        steps: match (cfg.step, windows.len()) {
            (Some(_), _) => 1,
            (None, w) => w,
        },
        gpu_ns,
        ops: out,
        kernel_names,
        op_ranges,
        op_ranges_with_shapes: with_shapes,
        has_backward,
        context,
    })
}
