//! The analyzer: turns a fuseprof run into an operator tree, attributes every kernel, copy and
//! fill to the range that launched it, classifies kernels, finds the repeating step, ranks
//! hotspots and estimates headroom against the device's ceilings. [`analyze`] produces an
//! [`Analysis`] (a stable JSON document, fields in `JSON.md`), [`render_text`] the terminal
//! tables, and [`diff()`] compares two analyses.
//!
//! ```
//! use fuseprof_analyzer::{analyze, render_text, AnalyzeConfig};
//! use fuseprof_store::{CreateOptions, Kernel, Range, RangeKind, RunInfo, Store, Writer, Api, ApiCall};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("run.sqlite");
//! let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
//! let op = w.intern("aten::mm");
//! let mut r = Range::new(RangeKind::CpuOp, op, 1, 1, 0);
//! r.end_ns = Some(1_000);
//! w.range(r).unwrap();
//! let launch = w.intern("cudaLaunchKernel");
//! w.api_call(ApiCall { api: Api::Runtime, start_ns: 100, end_ns: 200, pid: 1, tid: 1,
//!     correlation_id: Some(7), external_id: None, name: launch, return_code: None }).unwrap();
//! let name = w.intern("nvjet_tst_128x64_64x4_1x2_h_bz_TNT");
//! w.kernel(Kernel { start_ns: 300, end_ns: 800, device_id: 0, stream_id: 7, pid: Some(1),
//!     correlation_id: Some(7), external_id: None, name, grid: None, block: None,
//!     registers_per_thread: None, static_smem_bytes: None, dynamic_smem_bytes: None,
//!     graph_id: None }).unwrap();
//! w.finish(RunInfo { source_format: "cupti".into(), ..Default::default() }).unwrap();
//!
//! let mut store = Store::open(&path).unwrap();
//! let a = analyze(&mut store, &AnalyzeConfig::default()).unwrap();
//! assert_eq!(a.totals.attributed_ns, 500);
//! assert_eq!(a.by_op[0].name, "aten::mm");
//! assert!(render_text(&a, &AnalyzeConfig::default()).contains("aten::mm"));
//! ```

mod attribution;
pub mod classify;
pub mod copies;
pub mod diff;
mod error;
pub mod floor;
mod fxmap;
pub mod headroom;
pub mod hotspots;
pub mod measured;
pub mod op_tree;
pub mod ops;
pub mod ranks;
mod report;
pub mod scope;
mod sort;
pub mod steps;
pub mod trace;

use std::path::Path;

use fuseprof_store::Store;
use serde::{Deserialize, Serialize};

pub use classify::{Class, Rules};
pub use diff::{diff, render_diff_text, Diff, DiffRow, DiffStatus};
pub use error::{Error, Result};
pub use floor::{FloorGap, FloorOp, LeftOut, StepFloor};
pub use headroom::Ceiling;
pub use hotspots::{ClassRow, DeviceTimeline, KernelRow, ModuleRow, OpRow, ShapeRow};
pub use op_tree::{
    analyze_with_op_tree, analyze_with_op_tree_observed, OpNode, OpNodeKind, OpTree,
};
pub use ops::Role;
pub use report::render_text;
pub use scope::{analyze_step_with_op_tree, LongRange, OpenRanges, Scoped};
pub use steps::StepSource;
pub use trace::{
    op_trace, DeviceIdle, GpuRecord, HostCopy, HostSpan, LaunchGap, LaunchStretch, OpInstance,
    OpTrace, TraceContext,
};

use attribution::{Item, FLAG_NO_LAUNCH, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET};
use fxmap::FxMap;
use hotspots::Acc;
use ops::{Names, TreeBuilder, NONE};

/// The version of the JSON document; bumped when a field changes meaning or goes away.
pub const JSON_VERSION: u32 = 1;

/// Which table `render_text` leads with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    #[default]
    Op,
    Shape,
    Module,
    Kernel,
    Class,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "op" => GroupBy::Op,
            "shape" => GroupBy::Shape,
            "module" => GroupBy::Module,
            "kernel" => GroupBy::Kernel,
            "class" => GroupBy::Class,
            _ => return None,
        })
    }
}

/// What `fuseprof analyze` was asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnalyzeConfig {
    /// The table shown first (the JSON always holds every table).
    pub by: GroupBy,
    /// Rows per table in the text output (the JSON holds every row).
    pub top: usize,
    /// Restrict every table to the GPU work launched in this step (numbered from 0 in the
    /// steps table).
    pub step: Option<usize>,
}

impl Default for AnalyzeConfig {
    fn default() -> Self {
        AnalyzeConfig {
            by: GroupBy::Op,
            top: 15,
            step: None,
        }
    }
}

/// Everything `fuseprof analyze` finds; serialises as the stable JSON document of `JSON.md`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// Always `"fuseprof-analysis"`.
    pub format: String,
    /// [`JSON_VERSION`].
    pub version: u32,
    pub run: RunSummary,
    /// The step the tables are restricted to, if any.
    pub step: Option<usize>,
    pub totals: Totals,
    pub unattributed: Unattributed,
    pub steps: Steps,
    pub timeline: Vec<DeviceTimeline>,
    pub by_op: Vec<OpRow>,
    pub by_shape: Vec<ShapeRow>,
    pub by_module: Vec<ModuleRow>,
    pub by_kernel: Vec<KernelRow>,
    pub by_class: Vec<ClassRow>,
    pub headroom: Headroom,
    /// The step's floor against a fully fused model, and the ops that hold the gap to it
    /// (`floor.rs`; absent without ceilings, shapes, or with more than one device).
    #[serde(default)]
    pub floor: Option<floor::StepFloor>,
    /// Per rank and across ranks, for a distributed run (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<ranks::RankAnalysis>,
    /// What the run's hardware counters measured per kernel name (`collect --metrics`;
    /// absent without counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<measured::Measured>,
    /// Copies between host and device by direction and host memory (`copies.rs`; absent in
    /// documents from before it).
    #[serde(default)]
    pub host_copies: copies::HostCopies,
    /// Oddities in the input and how they were handled (never fatal).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// File name of the store (not the full path, so documents compare across machines).
    pub file: String,
    pub source_format: String,
    pub tool: Option<String>,
    pub devices: Vec<DeviceSummary>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub id: i64,
    pub name: Option<String>,
}

/// Sums over the GPU records in scope. Invariants (tested on every fixture):
/// `attributed_ns + unattributed_ns == gpu_ns`, `kernel_ns + memcpy_ns + memset_ns == gpu_ns`,
/// and the class totals sum to `gpu_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub gpu_ns: i64,
    pub kernel_ns: i64,
    pub memcpy_ns: i64,
    pub memset_ns: i64,
    pub kernels: u64,
    pub memcpys: u64,
    pub memsets: u64,
    pub attributed_ns: i64,
    pub unattributed_ns: i64,
    /// API calls that launched at least one record (a CUDA-graph launch counts once).
    pub launches: u64,
    pub graph_kernels: u64,
    /// Ranges in the operator tree (whole run), and how many of them are ops.
    pub ranges: u64,
    pub ops: u64,
}

/// GPU work that no range launched: reported, never dropped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Unattributed {
    pub ns: i64,
    pub records: u64,
    /// Records whose launching API call is not in the trace (and no External id matched).
    pub no_launch_record: u64,
    /// Records whose launch call ran while no range was open on its thread.
    pub outside_ranges: u64,
    /// Records without a launch call that were attributed through Kineto's External id.
    pub by_external_id: u64,
    /// The heaviest unattributed kernels.
    pub top_kernels: Vec<KernelRow>,
}

/// The repeating unit and the spread of its GPU time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    pub source: StepSource,
    /// The step annotation's name with numbers replaced by N (`ProfilerStep#N`).
    pub name: Option<String>,
    /// For `period`: top-level ops per step.
    pub period_ops: Option<usize>,
    pub steps: Vec<StepRow>,
    /// Spread of `gpu_ns` over the steps (None without steps).
    pub gpu: Option<Spread>,
    /// Spread of `wall_ns`.
    pub wall: Option<Spread>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub index: usize,
    /// Host-clock window; GPU work launched inside it belongs to the step.
    pub start_ns: i64,
    pub wall_ns: i64,
    /// Sum of the durations of the step's GPU records.
    pub gpu_ns: i64,
    pub records: u64,
    pub launches: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub mean_ns: f64,
    pub median_ns: f64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub stddev_ns: f64,
    /// Coefficient of variation, percent.
    pub cv_pct: f64,
}

/// Ops whose bytes and FLOPs follow from their shapes, against the device ceilings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headroom {
    pub ceilings: Vec<Ceiling>,
    /// GPU time of the ops with an estimate.
    pub covered_ns: i64,
    /// Their time at the ceilings.
    pub floor_ns: i64,
    /// `sum(max(0, measured - floor))` over the rows.
    pub headroom_ns: i64,
    pub rows: Vec<HeadroomRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadroomRow {
    pub name: String,
    pub dims: Option<String>,
    pub dtypes: Option<String>,
    pub device: i64,
    pub instances: u64,
    pub gpu_ns: i64,
    /// Per instance.
    pub bytes: f64,
    pub flops: f64,
    pub achieved_bytes_per_s: f64,
    pub achieved_flops_per_s: f64,
    /// Achieved as a percentage of the ceiling.
    pub bandwidth_pct: f64,
    pub flops_pct: Option<f64>,
    /// `memory` or `compute`: which ceiling sets the floor.
    pub bound: String,
    /// Time for all instances at the ceiling.
    pub floor_ns: i64,
    /// `max(0, gpu_ns - floor_ns)`.
    pub headroom_ns: i64,
    pub assumptions: Vec<String>,
    /// What the hardware counters measured for this op type and shape's kernels (runs
    /// recorded with `collect --metrics`; absent otherwise): DRAM bytes against `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<measured::MeasuredGroup>,
}

/// Logs how long the phase that ends now took (`FUSEPROF_LOG=fuseprof_analyzer=debug`) and
/// restarts the clock for the next one.
pub(crate) fn lap(clock: &mut std::time::Instant, phase: &str) {
    let now = std::time::Instant::now();
    tracing::debug!(
        "phase {phase}: {:.3} s",
        now.duration_since(*clock).as_secs_f64()
    );
    *clock = now;
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn pct(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round2(part as f64 * 100.0 / whole as f64)
    }
}

fn spread(values: &[i64]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<i64>() as f64 / n;
    let var = values
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let mid = sorted.len() / 2;
    let median = if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) as f64 / 2.0
    } else {
        sorted[mid] as f64
    };
    Some(Spread {
        mean_ns: round2(mean),
        median_ns: median,
        min_ns: sorted[0],
        max_ns: *sorted.last()?,
        stddev_ns: round2(var.sqrt()),
        cv_pct: if mean > 0.0 {
            round2(var.sqrt() * 100.0 / mean)
        } else {
            0.0
        },
    })
}

/// Analyzes the run in `store` with the built-in classification rules.
pub fn analyze(store: &mut Store, cfg: &AnalyzeConfig) -> Result<Analysis> {
    analyze_with_rules(store, cfg, &Rules::builtin())
}

/// Analyzes the run in `store`, classifying kernels with `rules`.
pub fn analyze_with_rules(
    store: &mut Store,
    cfg: &AnalyzeConfig,
    rules: &Rules,
) -> Result<Analysis> {
    analyze_inner(store, cfg, rules, None, None)
}

/// Sees the rows of the whole run's tables as an analysis reads them: each table once, whole,
/// in row order (ranges, then API calls, kernels and copies). Something else that needs the
/// same rows (the explorer's lane summary) takes them from the analysis's scans instead of
/// reading the run a second time.
pub trait RowObserver {
    fn range(&mut self, r: &fuseprof_store::LeanRange);
    fn call(&mut self, c: &fuseprof_store::LeanCall);
    fn kernel(&mut self, k: &fuseprof_store::LeanKernel);
    fn memop(&mut self, m: &fuseprof_store::LeanMemop);
}

/// What [`analyze_with_rules`] does; `hook` (for [`op_tree::analyze_with_op_tree`]) sees the
/// operator tree, the GPU records in scope and their groups once they are accumulated.
pub(crate) fn analyze_inner(
    store: &mut Store,
    cfg: &AnalyzeConfig,
    rules: &Rules,
    hook: Option<&mut op_tree::Hook<'_>>,
    observer: Option<&mut dyn RowObserver>,
) -> Result<Analysis> {
    let mut clock = std::time::Instant::now();
    let loaded = load(store, rules, &mut clock, None, observer)?;
    analyze_loaded(store, cfg, loaded, true, hook, clock)
}

/// The analysis of what [`load`] read; `with_ranks`: the per-rank analysis (of the whole run,
/// so left out by a window's analysis, which takes it from the whole run's).
pub(crate) fn analyze_loaded(
    store: &mut Store,
    cfg: &AnalyzeConfig,
    loaded: Loaded,
    with_ranks: bool,
    mut hook: Option<&mut op_tree::Hook<'_>>,
    mut clock: std::time::Instant,
) -> Result<Analysis> {
    let Loaded {
        path,
        run,
        device_rows,
        names,
        tree,
        mut items,
        devices,
        found,
        mut notes,
    } = loaded;
    let mut step_rows: Vec<StepRow> = found
        .windows
        .iter()
        .enumerate()
        .map(|(index, w)| StepRow {
            index,
            start_ns: w.start_ns,
            wall_ns: w.end_ns - w.start_ns,
            gpu_ns: 0,
            records: 0,
            launches: 0,
        })
        .collect();
    let mut hint = 0;
    for it in &items {
        if let Some(s) = steps::window_of(&found.windows, it.launch_ns, &mut hint) {
            step_rows[s].gpu_ns += it.dur_ns;
            step_rows[s].records += 1;
            step_rows[s].launches += u64::from(it.flags & attribution::FLAG_NEW_LAUNCH != 0);
        }
    }
    let steps = Steps {
        source: found.source,
        name: found.name.clone(),
        period_ops: found.period_ops,
        gpu: spread(&step_rows.iter().map(|s| s.gpu_ns).collect::<Vec<_>>()),
        wall: spread(&step_rows.iter().map(|s| s.wall_ns).collect::<Vec<_>>()),
        steps: step_rows,
    };

    lap(&mut clock, "steps");

    // Per rank and across ranks (whole run, whatever the scope).
    let rank_analysis = if with_ranks {
        ranks::analyze_ranks(store, &tree, &names, &items, &devices)?
    } else {
        None
    };
    lap(&mut clock, "ranks");

    // 4. Scope.
    let window = match cfg.step {
        None => None,
        Some(k) if found.windows.is_empty() => return Err(Error::NoSteps { requested: k }),
        Some(k) => Some(*found.windows.get(k).ok_or(Error::NoSuchStep {
            requested: k,
            available: found.windows.len(),
        })?),
    };
    let in_scope = |t: i64| window.is_none_or(|w| t >= w.start_ns && t < w.end_ns);
    if window.is_some() {
        items.retain(|it| in_scope(it.launch_ns));
    }
    if !items.is_sorted_by_key(|it| (it.device, it.start_ns, it.dur_ns)) {
        // Each GPU's records come in its own time order.
        let path = sort::sort_like_unstable_streams(
            &mut items,
            |it| (it.device, it.start_ns, it.dur_ns),
            |it| it.seq,
            |it| usize::from(it.device),
            devices.len(),
        );
        tracing::debug!("GPU records sorted: {path:?}");
    }

    lap(&mut clock, "scope and item sort");

    // 5. Totals.
    let mut totals = Totals {
        ranges: tree.ranges.len() as u64,
        ops: tree.ranges.iter().filter(|r| r.role() == Role::Op).count() as u64,
        ..Totals::default()
    };
    let mut un = Unattributed::default();
    let mut un_kernels: FxMap<u32, Acc> = FxMap::default();
    for it in &items {
        totals.gpu_ns += it.dur_ns;
        match it.kind() {
            KIND_KERNEL => {
                totals.kernel_ns += it.dur_ns;
                totals.kernels += 1;
            }
            KIND_MEMCPY => {
                totals.memcpy_ns += it.dur_ns;
                totals.memcpys += 1;
            }
            KIND_MEMSET => {
                totals.memset_ns += it.dur_ns;
                totals.memsets += 1;
            }
            _ => {}
        }
        totals.launches += u64::from(it.flags & attribution::FLAG_NEW_LAUNCH != 0);
        totals.graph_kernels += u64::from(it.flags & attribution::FLAG_GRAPH != 0);
        if it.owner == NONE {
            totals.unattributed_ns += it.dur_ns;
            un.ns += it.dur_ns;
            un.records += 1;
            if it.flags & FLAG_NO_LAUNCH != 0 {
                un.no_launch_record += 1;
            } else {
                un.outside_ranges += 1;
            }
            acc2_add(un_kernels.entry(it.name).or_default(), it);
        } else {
            totals.attributed_ns += it.dur_ns;
            if it.flags & FLAG_NO_LAUNCH != 0 {
                un.by_external_id += 1;
            }
        }
    }
    let gpu = totals.gpu_ns;

    lap(&mut clock, "totals");

    // 6. Groups and timeline.
    let mut acc = hotspots::accumulate(&tree, &items, &devices);
    acc.timeline.sort_by_key(|d| d.device);
    if let Some(hook) = hook.as_mut() {
        hook(
            &tree,
            &items,
            &acc,
            &names,
            window.map(|w| (w.start_ns, w.end_ns)),
        );
    }
    lap(&mut clock, "accumulate");
    let name_bound = names.id_bound();
    let (op_total, op_instances, role_of_name) =
        hotspots::op_totals(&tree, &acc.range_ns, name_bound, in_scope);
    lap(&mut clock, "op totals");
    let kernel_row = |name: u32, a: &Acc, names: &Names| KernelRow {
        name: names.get(name).to_string(),
        class: a.class.unwrap_or(Class::Other),
        count: a.count,
        total_ns: a.ns,
        pct: pct(a.ns, gpu),
        mean_ns: round2(a.ns as f64 / a.count.max(1) as f64),
        min_ns: a.min_ns,
        max_ns: a.max_ns,
        in_graphs: a.graphs,
        gap_before_ns: a.gap_ns,
    };

    let mut by_op: Vec<OpRow> = acc
        .by_op
        .iter()
        .map(|(&name, a)| {
            let instances = if name == NONE {
                0
            } else {
                op_instances[name as usize]
            };
            OpRow {
                name: if name == NONE {
                    "(outside any range)".into()
                } else {
                    names.get(name).to_string()
                },
                role: if name == NONE {
                    None
                } else {
                    role_of_name[name as usize]
                },
                instances,
                self_ns: a.ns,
                total_ns: if name == NONE {
                    a.ns
                } else {
                    op_total[name as usize].max(a.ns)
                },
                pct: pct(a.ns, gpu),
                kernels: a.count,
                launches: a.launches,
                mean_self_ns: round2(a.ns as f64 / instances.max(1) as f64),
                gap_before_ns: a.gap_ns,
            }
        })
        .collect();
    // Op types that launch nothing themselves but enclose ops that do.
    for (name, &total) in op_total.iter().enumerate() {
        let name = name as u32;
        // Op types that launch nothing themselves but enclose ops that do (aten::linear over
        // aten::addmm); modules and annotations have their own table.
        if total > 0
            && !acc.by_op.contains_key(&name)
            && role_of_name[name as usize] == Some(Role::Op)
        {
            let instances = op_instances[name as usize];
            by_op.push(OpRow {
                name: names.get(name).to_string(),
                role: role_of_name[name as usize],
                instances,
                self_ns: 0,
                total_ns: total,
                pct: 0.0,
                kernels: 0,
                launches: 0,
                mean_self_ns: 0.0,
                gap_before_ns: 0,
            });
        }
    }
    by_op.sort_by(|a, b| (b.self_ns, b.total_ns, &a.name).cmp(&(a.self_ns, a.total_ns, &b.name)));

    lap(&mut clock, "op table");
    let shape_inst = hotspots::shape_instances(&tree, &acc.by_shape, name_bound, in_scope);
    lap(&mut clock, "shape instances");
    let text = |id: u32| (id != NONE).then(|| names.get(id).to_string());
    let mut by_shape: Vec<ShapeRow> = acc
        .by_shape
        .iter()
        .map(|(&key, a)| {
            let instances = shape_inst.get(&key).copied().unwrap_or(0);
            ShapeRow {
                name: if key.0 == NONE {
                    "(outside any range)".into()
                } else {
                    names.get(key.0).to_string()
                },
                dims: text(key.1),
                dtypes: text(key.2),
                instances,
                self_ns: a.ns,
                pct: pct(a.ns, gpu),
                kernels: a.count,
                launches: a.launches,
                mean_self_ns: round2(a.ns as f64 / instances.max(1) as f64),
                gap_before_ns: a.gap_ns,
            }
        })
        .collect();
    by_shape.sort_by(|a, b| {
        (b.self_ns, &a.name, &a.dims, &a.dtypes).cmp(&(a.self_ns, &b.name, &b.dims, &b.dtypes))
    });

    let module_total = hotspots::module_totals(&acc.modules, &acc.by_module);
    let outside_module = acc.modules.nodes.len();
    let mut by_module: Vec<ModuleRow> = acc
        .by_module
        .iter()
        .enumerate()
        .filter(|(id, a)| a.count > 0 || module_total[*id] > 0)
        .map(|(id, a)| ModuleRow {
            path: if id == outside_module {
                "(outside any range)".into()
            } else if id == 0 {
                "(top level)".into()
            } else {
                acc.modules.path(&names, id as u32)
            },
            self_ns: a.ns,
            total_ns: module_total[id],
            pct: pct(a.ns, gpu),
            kernels: a.count,
            launches: a.launches,
            gap_before_ns: a.gap_ns,
        })
        .collect();
    by_module
        .sort_by(|a, b| (b.total_ns, b.self_ns, &a.path).cmp(&(a.total_ns, a.self_ns, &b.path)));

    let mut by_kernel: Vec<KernelRow> = acc
        .by_kernel
        .iter()
        .map(|(&name, a)| kernel_row(name, a, &names))
        .collect();
    by_kernel.sort_by(|a, b| (b.total_ns, &a.name).cmp(&(a.total_ns, &b.name)));

    let mut by_class: Vec<ClassRow> = Class::ALL
        .iter()
        .zip(acc.by_class.iter())
        .filter(|(_, a)| a.count > 0)
        .map(|(&class, a)| ClassRow {
            class,
            count: a.count,
            total_ns: a.ns,
            pct: pct(a.ns, gpu),
            mean_ns: round2(a.ns as f64 / a.count.max(1) as f64),
            gap_before_ns: a.gap_ns,
        })
        .collect();
    by_class.sort_by(|a, b| (b.total_ns, a.class).cmp(&(a.total_ns, b.class)));

    let mut top_un: Vec<KernelRow> = un_kernels
        .iter()
        .map(|(&name, a)| kernel_row(name, a, &names))
        .collect();
    top_un.sort_by(|a, b| (b.total_ns, &a.name).cmp(&(a.total_ns, &b.name)));
    top_un.truncate(10);
    un.top_kernels = top_un;

    lap(&mut clock, "other tables");

    // 7. Headroom.
    let ceilings: Vec<Ceiling> = device_rows
        .iter()
        .filter(|d| devices.contains(&d.id))
        .filter_map(headroom::ceiling_for)
        .collect();
    let unknown: Vec<String> = devices
        .iter()
        .filter(|d| !ceilings.iter().any(|c| c.device == **d))
        .map(|d| d.to_string())
        .collect();
    if !unknown.is_empty() {
        notes.push(format!(
            "no ceilings for device {} (the store has no peaks and the name matches no built-in \
             GPU): no headroom there",
            unknown.join(", ")
        ));
    }
    // The counters each kernel execution measured, summed per op type and shape.
    let counter_rows = store.named_kernel_counters()?;
    let mut shape_measured: FxMap<(u32, u32, u32), measured::MeasuredGroup> = FxMap::default();
    if !counter_rows.is_empty() {
        let per = measured::per_record(&counter_rows);
        for it in items.iter().filter(|it| it.kind() == KIND_KERNEL) {
            if it.owner == NONE {
                continue;
            }
            let key = (devices[it.device as usize], it.start_ns, it.dur_ns);
            if let Some(c) = per.get(&key) {
                let r = &tree.ranges[it.owner as usize];
                shape_measured
                    .entry((r.name, r.dims, r.types))
                    .or_default()
                    .add(c, it.dur_ns);
            }
        }
    }
    let mut hrows = Vec::new();
    for (&(name, dims, types), a) in &acc.by_shape {
        if name == NONE || dims == NONE {
            continue;
        }
        let device = devices[a.device as usize];
        let Some(ceiling) = ceilings.iter().find(|c| c.device == device) else {
            continue;
        };
        let Some(d) = ops::parse_dims(names.get(dims)) else {
            continue;
        };
        let t = (types != NONE)
            .then(|| ops::parse_types(names.get(types)))
            .flatten();
        let hint = headroom::dtype_bytes_from_kernel(names.get(a.first_name));
        let Some(est) = headroom::estimate(names.get(name), &d, t.as_deref(), hint) else {
            continue;
        };
        let instances = shape_inst
            .get(&(name, dims, types))
            .copied()
            .unwrap_or(0)
            .max(1);
        let bytes = est.bytes * instances as f64;
        let flops = est.flops * instances as f64;
        let secs = a.ns as f64 * 1e-9;
        let peak = match est.elem_bytes {
            2 | 1 => Some(ceiling.flops_16bit_per_s),
            4 => ceiling.flops_32bit_per_s,
            _ => None,
        };
        let mem_floor = bytes / ceiling.mem_bytes_per_s;
        let flop_floor = peak.map_or(0.0, |p| flops / p);
        let floor_ns = (mem_floor.max(flop_floor) * 1e9).round() as i64;
        let mut assumptions: Vec<String> = est.assumptions.iter().map(|s| s.to_string()).collect();
        if floor_ns > a.ns {
            assumptions.push(
                "estimate exceeds the measured time: shapes, dtype or ceiling are off".into(),
            );
        }
        hrows.push(HeadroomRow {
            name: names.get(name).to_string(),
            dims: text(dims),
            dtypes: text(types),
            device,
            instances,
            gpu_ns: a.ns,
            bytes: est.bytes,
            flops: est.flops,
            achieved_bytes_per_s: if secs > 0.0 {
                (bytes / secs).round()
            } else {
                0.0
            },
            achieved_flops_per_s: if secs > 0.0 {
                (flops / secs).round()
            } else {
                0.0
            },
            bandwidth_pct: if secs > 0.0 {
                round2(bytes / secs * 100.0 / ceiling.mem_bytes_per_s)
            } else {
                0.0
            },
            flops_pct: peak
                .filter(|_| secs > 0.0)
                .map(|p| round2(flops / secs * 100.0 / p)),
            bound: if flop_floor > mem_floor {
                "compute"
            } else {
                "memory"
            }
            .into(),
            floor_ns,
            headroom_ns: (a.ns - floor_ns).max(0),
            assumptions,
            measured: shape_measured
                .remove(&(name, dims, types))
                .map(|g| g.finish(Some(ceiling.mem_bytes_per_s))),
        });
    }
    hrows.sort_by(|a, b| {
        (b.headroom_ns, &a.name, &a.dims, &a.dtypes).cmp(&(
            a.headroom_ns,
            &b.name,
            &b.dims,
            &b.dtypes,
        ))
    });
    let headroom = Headroom {
        covered_ns: hrows.iter().map(|r| r.gpu_ns).sum(),
        floor_ns: hrows.iter().map(|r| r.floor_ns.min(r.gpu_ns)).sum(),
        headroom_ns: hrows.iter().map(|r| r.headroom_ns).sum(),
        ceilings,
        rows: hrows,
    };

    lap(&mut clock, "headroom");

    // 8. What the hardware counters measured (whole run).
    let measured = measured::measure(&counter_rows, &device_rows);

    // 9. The step's floor.
    let floor = floor::from_tree(
        &tree,
        &names,
        &items,
        &found.windows,
        cfg.step.zip(window),
        &devices,
        &headroom.ceilings,
        &mut notes,
    );
    lap(&mut clock, "step floor");

    // 10. Host<->device copies.
    let host_copies = copies::host_copies(store, &names, &found.windows, window)?;
    lap(&mut clock, "host copies");

    Ok(Analysis {
        format: "fuseprof-analysis".into(),
        version: JSON_VERSION,
        run: RunSummary {
            file: path.file_name().map_or_else(
                || path.display().to_string(),
                |f| f.to_string_lossy().into(),
            ),
            source_format: run.source_format,
            tool: run.tool,
            devices: devices
                .iter()
                .map(|&id| DeviceSummary {
                    id,
                    name: device_rows
                        .iter()
                        .find(|d| d.id == id)
                        .and_then(|d| d.name.clone()),
                })
                .collect(),
        },
        step: cfg.step,
        totals,
        unattributed: un,
        steps,
        timeline: acc.timeline,
        by_op,
        by_shape,
        by_module,
        by_kernel,
        by_class,
        headroom,
        floor,
        ranks: rank_analysis,
        measured,
        host_copies,
        notes,
    })
}

/// What every reading of a run starts from: the operator tree, each GPU record attributed to its
/// range, and the step windows (always over the whole run).
pub(crate) struct Loaded {
    pub path: std::path::PathBuf,
    pub run: fuseprof_store::RunInfo,
    pub device_rows: Vec<fuseprof_store::Device>,
    pub names: Names,
    pub tree: ops::Tree,
    pub items: Vec<Item>,
    pub devices: Vec<i64>,
    pub found: steps::Found,
    pub notes: Vec<String>,
}

/// How the notes on ranges that never closed, and on ranges cut at their parent's end, begin
/// (after the count): a window's analysis (`scope`) looks for them.
pub(crate) const NOTE_UNCLOSED: &str = "ranges never closed";
pub(crate) const NOTE_CLIPPED: &str = "ranges overlapped their enclosing range without nesting";

/// What a time window's analysis reads instead of the run (`scope`): its ranges (row id
/// order), its records, when its unclosed ranges close, and the whole run's steps.
pub(crate) struct WindowInput {
    pub ranges: Vec<fuseprof_store::LeanRange>,
    pub records: attribution::WindowRecords,
    pub close_at_ns: i64,
    pub found: steps::Found,
}

/// Reads the run (or `window`) into the operator tree and the attributed GPU records;
/// `observer` (whole runs only) sees each row read.
pub(crate) fn load(
    store: &mut Store,
    rules: &Rules,
    clock: &mut std::time::Instant,
    window: Option<WindowInput>,
    mut observer: Option<&mut dyn RowObserver>,
) -> Result<Loaded> {
    let path = store.path().to_path_buf();
    let run = store.run()?;
    let device_rows = store.devices()?;
    let mut names = Names::new(store.strings()?);
    let mut notes = Vec::new();
    lap(clock, "run, devices and strings");

    // 1. The operator tree.
    let mut tb = TreeBuilder::new(&mut names);
    match &window {
        None => match observer.as_deref_mut() {
            Some(o) => store.for_each_lean_range(|r| {
                o.range(r);
                tb.add(r)
            })?,
            None => store.for_each_lean_range(|r| tb.add(r))?,
        },
        Some(w) => w.ranges.iter().for_each(|r| tb.add(r)),
    }
    let latest_range_ns = match &window {
        None => tb.latest_ns,
        Some(w) => tb.latest_ns.max(w.close_at_ns),
    };
    lap(clock, "ranges scan");
    // Ranges that never closed end with the run; the run's end is not known before the GPU
    // records are read, so close them at the latest range time seen (then notes say so).
    let mut tree = tb.build(latest_range_ns);
    lap(clock, "tree build");

    // 2. Attribution.
    let att = attribution::attribute(
        store,
        &mut tree,
        &mut names,
        rules,
        clock,
        window.as_ref().map(|w| &w.records),
        observer,
    )?;
    // (A window without GPU work is an empty step, not an empty run.)
    if att.items.is_empty() && window.is_none() {
        return Err(Error::EmptyRun { path });
    }
    if tree.unclosed > 0 {
        notes.push(format!(
            "{} {NOTE_UNCLOSED}; each was closed where its parent closes, or at the last \
             range event of the run",
            tree.unclosed
        ));
    }
    if tree.clipped > 0 {
        notes.push(format!(
            "{} {NOTE_CLIPPED}; each was cut at its \
             parent's end",
            tree.clipped
        ));
    }
    if tree.reversed > 0 {
        notes.push(format!(
            "{} ranges end before they start; they were taken as zero-length",
            tree.reversed
        ));
    }
    if att.reversed > 0 {
        notes.push(format!(
            "{} GPU records end before they start; their duration was taken as 0",
            att.reversed
        ));
    }
    if tree.ranges.is_empty() {
        notes.push(
            "the run has no ranges (no cpu_op, NVTX or annotation ranges): all GPU time is \
             unattributed; record with PyTorch's profiler or emit_nvtx to get ops"
                .into(),
        );
    }
    lap(clock, "notes");

    let found = match window {
        None => steps::find(&tree, &names, &att.items),
        Some(w) => w.found,
    };
    lap(clock, "steps");
    Ok(Loaded {
        path,
        run,
        device_rows,
        names,
        tree,
        items: att.items,
        devices: att.devices,
        found,
        notes,
    })
}

fn acc2_add(a: &mut Acc, it: &Item) {
    if a.count == 0 {
        a.class = Some(it.class);
        a.min_ns = it.dur_ns;
        a.max_ns = it.dur_ns;
    } else {
        a.min_ns = a.min_ns.min(it.dur_ns);
        a.max_ns = a.max_ns.max(it.dur_ns);
    }
    a.ns += it.dur_ns;
    a.count += 1;
    a.graphs += u64::from(it.flags & attribution::FLAG_GRAPH != 0);
}

/// Opens `path` and analyzes it: what `fuseprof analyze` does.
/// The spread of the step wall times of a run whose steps are annotated (NVTX `step`,
/// `ProfilerStep#N`, ...), read from its ranges alone: it needs no GPU records, so it serves
/// runs traced with CUDA activity off (`fuseprof bench` times its rounds so). None when the run
/// has no step annotation.
pub fn annotated_step_wall(path: &Path) -> Result<Option<Spread>> {
    Ok(annotated_steps(path)?.and_then(|s| s.wall))
}

/// The annotated steps of a run: the text their ranges carry and the spread of their wall
/// times (see [`annotated_step_wall`]). None when the run has no step annotation.
#[derive(Clone, Debug, PartialEq)]
pub struct AnnotatedSteps {
    /// The ranges' text (`step`, `ProfilerStep#3`: one family of equal texts).
    pub name: String,
    pub wall: Option<Spread>,
}

/// [`annotated_step_wall`] with the steps' range text.
pub fn annotated_steps(path: &Path) -> Result<Option<AnnotatedSteps>> {
    let mut store = Store::open(path)?;
    let mut names = Names::new(store.strings()?);
    let mut tb = TreeBuilder::new(&mut names);
    store.for_each_lean_range(|r| tb.add(r))?;
    let latest_ns = tb.latest_ns;
    let tree = tb.build(latest_ns);
    let found = steps::find(&tree, &names, &[]);
    if found.source != steps::StepSource::Annotation {
        return Ok(None);
    }
    let wall = spread(
        &found
            .windows
            .iter()
            .map(|w| w.end_ns - w.start_ns)
            .collect::<Vec<_>>(),
    );
    Ok(found.name.map(|name| AnnotatedSteps { name, wall }))
}

pub fn analyze_file(path: &Path, cfg: &AnalyzeConfig) -> Result<Analysis> {
    let mut store = Store::open(path)?;
    analyze(&mut store, cfg)
}
