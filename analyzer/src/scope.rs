//! One step's analysis read from the step alone: what [`crate::analyze_with_op_tree`] gives
//! with `AnalyzeConfig { step: Some(k) }`, at a cost that follows the step, not the run
//! (`fuseprof tui` scopes its tables so on runs of millions of kernels).
//!
//! The whole run's analysis supplies what only the whole run knows: the step windows, the
//! device order, the per-rank analysis, the range counts and the notes. The step's records
//! are read through the store's indexes: the launch calls that start in the step (every
//! thread), the kernels and memops of their correlation ids, every launch call sharing one of
//! those ids (so a record finds the launch the whole-run join finds), and, where the run has
//! records without a launch call, the records that start in the step. The ranges are those
//! that start in the step, plus those open at its start: read from `lookback_ns` before it,
//! and the longer ones the caller names ([`OpenRanges`]). Those records attributed and scoped
//! as the whole-run analysis does give the same tables.
//!
//! Where the window alone cannot give the same answer the caller is told so
//! ([`Scoped::NeedsWholeRun`]): runs whose ranges do not nest (some were cut at their parent's
//! end, or never closed) and runs whose records without a launch call were attributed through
//! Kineto's External id (the op with that id may launch work that starts after the step).

use std::collections::{BTreeSet, HashMap};

use fuseprof_store::{Kernel, LeanLaunch, LeanMemop, LeanRange, Store, StrId};

use crate::attribution::WindowRecords;
use crate::op_tree::{build, OpTree};
use crate::steps::{Found, Window};
use crate::{
    analyze_loaded, load, Analysis, AnalyzeConfig, Error, Result, Rules, WindowInput, NOTE_CLIPPED,
    NOTE_UNCLOSED,
};

/// Where the ranges open at a step's start are: every range that starts before
/// `start - lookback_ns` and is still open at `start` must be in `long` (by thread, start and
/// name; `long` may hold more). `fuseprof tui` takes them from its timeline summary, which
/// keeps every range at least `lookback_ns` long.
#[derive(Clone, Debug, Default)]
pub struct OpenRanges {
    pub lookback_ns: i64,
    pub long: Vec<LongRange>,
}

/// A range known by its thread (GPU-side ranges: device and stream), start and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongRange {
    pub pid: i64,
    pub tid: i64,
    pub start_ns: i64,
    pub name: StrId,
}

/// A step's analysis, or why it needs the whole run's records.
#[derive(Debug)]
pub enum Scoped {
    Done(Box<(Analysis, OpTree)>),
    NeedsWholeRun(String),
}

/// The values of `m` by key (row id): the order a scan of the table gives.
fn by_id<T>(m: HashMap<i64, T>) -> Vec<T> {
    let mut v: Vec<(i64, T)> = m.into_iter().collect();
    v.sort_unstable_by_key(|(id, _)| *id);
    v.into_iter().map(|(_, x)| x).collect()
}

/// The analysis and operator tree of step `step` of the run whose whole-run analysis (no step)
/// is `whole`, reading only the step's records: equal to [`crate::analyze_with_op_tree`] with
/// `step: Some(step)` (tested on every fixture), or [`Scoped::NeedsWholeRun`].
pub fn analyze_step_with_op_tree(
    store: &mut Store,
    whole: &Analysis,
    step: usize,
    rules: &Rules,
    open: &OpenRanges,
) -> Result<Scoped> {
    if whole.step.is_some() {
        return Ok(Scoped::NeedsWholeRun(
            "the analysis given is of one step, not of the run".into(),
        ));
    }
    let rows = &whole.steps.steps;
    if rows.is_empty() {
        return Err(Error::NoSteps { requested: step });
    }
    let Some(row) = rows.get(step) else {
        return Err(Error::NoSuchStep {
            requested: step,
            available: rows.len(),
        });
    };
    if let Some(n) = whole
        .notes
        .iter()
        .find(|n| n.contains(NOTE_UNCLOSED) || n.contains(NOTE_CLIPPED))
    {
        return Ok(Scoped::NeedsWholeRun(format!(
            "the run's ranges do not nest ({n})"
        )));
    }
    if whole.unattributed.by_external_id > 0 {
        return Ok(Scoped::NeedsWholeRun(
            "records without a launch call were attributed through External ids".into(),
        ));
    }
    let (from, to) = (row.start_ns, row.start_ns + row.wall_ns);
    let mut clock = std::time::Instant::now();

    // Ranges: those that start in the step, from the lookback on, and the long ones.
    let threads = store.timeline_threads()?;
    let mut ranges: Vec<(i64, LeanRange)> = Vec::new();
    let read_from = from.saturating_sub(open.lookback_ns.max(0));
    for &(pid, tid) in &threads {
        store.lean_ranges_window(pid, tid, read_from, to, |id, r| ranges.push((id, r)))?;
    }
    for l in open.long.iter().filter(|l| l.start_ns < read_from) {
        store.lean_ranges_at(l.pid, l.tid, l.start_ns, l.name, |id, r| {
            if r.end_ns.is_none_or(|e| e > from) {
                ranges.push((id, r))
            }
        })?;
    }
    ranges.sort_unstable_by_key(|(id, _)| *id);
    ranges.dedup_by_key(|(id, _)| *id);
    crate::lap(&mut clock, "window: ranges");

    // Launch calls in the step, and the records of their correlation ids.
    let mut correlation: BTreeSet<i64> = BTreeSet::new();
    for &(pid, tid) in &threads {
        store.lean_launches_window(pid, tid, from, to, |_, l| {
            correlation.insert(l.correlation_id);
        })?;
    }
    let mut kernels: HashMap<i64, Kernel> = HashMap::new();
    let mut memops: HashMap<i64, LeanMemop> = HashMap::new();
    for &c in &correlation {
        store.kernels_by_correlation(c, |id, k| {
            kernels.insert(id, k);
        })?;
        store.lean_memops_by_correlation(c, |id, m| {
            memops.insert(id, m);
        })?;
    }
    // Records without a launch call belong to the step they start in.
    if whole.unattributed.no_launch_record > 0 {
        for (device, stream) in store.timeline_streams()? {
            store.kernels_window(device, stream, from, to, |id, k| {
                kernels.insert(id, k);
            })?;
            store.lean_memops_window(device, stream, from, to, |id, m| {
                memops.insert(id, m);
            })?;
        }
    }
    // Every launch call of those records' correlation ids, wherever it is.
    let wanted: BTreeSet<i64> = kernels
        .values()
        .filter_map(|k| k.correlation_id)
        .chain(memops.values().filter_map(|m| m.correlation_id))
        .collect();
    let mut launches: HashMap<i64, LeanLaunch> = HashMap::new();
    for &c in &wanted {
        store.lean_launches_by_correlation(c, |id, l| {
            launches.insert(id, l);
        })?;
    }
    let records = WindowRecords {
        launches: by_id(launches),
        kernels: by_id(kernels),
        memops: by_id(memops),
        devices: whole.run.devices.iter().map(|d| d.id).collect(),
    };
    crate::lap(&mut clock, "window: records");

    let found = Found {
        source: whole.steps.source,
        name: whole.steps.name.clone(),
        period_ops: whole.steps.period_ops,
        windows: rows
            .iter()
            .map(|s| Window {
                start_ns: s.start_ns,
                end_ns: s.start_ns + s.wall_ns,
            })
            .collect(),
    };
    let input = WindowInput {
        ranges: ranges.into_iter().map(|(_, r)| r).collect(),
        records,
        close_at_ns: to,
        found,
    };
    let loaded = load(store, rules, &mut clock, Some(input), None)?;
    let cfg = AnalyzeConfig {
        step: Some(step),
        ..AnalyzeConfig::default()
    };
    let mut tree = None;
    let mut hook = |t: &crate::ops::Tree,
                    items: &[crate::attribution::Item],
                    acc: &_,
                    names: &_,
                    scope: Option<(i64, i64)>| {
        tree = Some(build(t, items, acc, names, scope));
    };
    let mut a = analyze_loaded(store, &cfg, loaded, false, Some(&mut hook), clock)?;
    // What only the whole run knows.
    a.run = whole.run.clone();
    a.steps = whole.steps.clone();
    a.ranks = whole.ranks.clone();
    a.notes = whole.notes.clone();
    a.totals.ranges = whole.totals.ranges;
    a.totals.ops = whole.totals.ops;
    let tree = tree.unwrap_or(OpTree { nodes: Vec::new() });
    Ok(Scoped::Done(Box::new((a, tree))))
}
