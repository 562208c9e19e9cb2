//! The run as a stream of op instances: every outermost PyTorch op (an op with no op around it;
//! modules and annotations do not count) in launch order per thread, with its input shapes,
//! dtypes, module path, step, and the GPU work it launched itself or through the ops nested in
//! it. This is what the fusion advisor matches chains against; the aggregate tables of
//! [`crate::analyze`] cannot say which op followed which.

use fuseprof_store::Store;

use crate::headroom::{self, Ceiling};
use crate::ops::{self, Role, NONE};
use crate::{lap, load, steps, AnalyzeConfig, Class, DeviceSummary, Error, Result, Rules};

/// One GPU record launched by an op instance (or an op nested in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuRecord {
    /// Kernel name (copies: `Memcpy HtoD`, fills: `Memset`), an index into
    /// [`OpTrace::kernel_names`].
    pub name: u32,
    pub class: Class,
    pub dur_ns: i64,
    /// The innermost op that launched it (`aten::_cudnn_attention_forward`), an index into
    /// [`OpTrace::kernel_names`] like `name`.
    pub launched_by: u32,
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
        });
    }
    lap(&mut clock, "op trace");

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
    })
}
