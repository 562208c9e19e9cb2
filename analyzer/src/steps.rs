//! The repeating unit of a run: a step annotation (ProfilerStep#N, NVTX `step`, ...), or failing
//! that the period of the top-level op sequence on the busiest launching thread.

use serde::{Deserialize, Serialize};

use crate::attribution::Item;
use crate::ops::{Names, Tree, NONE};

/// Where the steps came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Ranges named as steps (ProfilerStep#N, `step`, `iteration`, ...).
    Annotation,
    /// The period of the top-level op sequence.
    Period,
    /// No repeating unit was found.
    None,
}

/// A step's time window on the host clock: GPU work launched inside it belongs to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub start_ns: i64,
    pub end_ns: i64,
}

pub(crate) struct Found {
    pub source: StepSource,
    pub name: Option<String>,
    pub period_ops: Option<usize>,
    pub windows: Vec<Window>,
}

/// Most top-level ops looked at when searching for a period.
const MAX_PERIOD_SEQUENCE: usize = 200_000;
/// Share of positions allowed to differ between one period and the next (ops that only some
/// steps run, such as a periodic logging call).
const PERIOD_TOLERANCE: f64 = 0.01;

pub(crate) fn find(tree: &Tree, names: &Names, items: &[Item]) -> Found {
    find_in(tree, names, items, &|_| true)
}

/// [`find`] over the threads `keep` accepts (one rank's), with `items` that rank's records.
pub(crate) fn find_in(
    tree: &Tree,
    names: &Names,
    items: &[Item],
    keep: &dyn Fn(u32) -> bool,
) -> Found {
    if let Some(f) = from_annotations(tree, names, keep) {
        return f;
    }
    if let Some(f) = from_period(tree, items, keep) {
        return f;
    }
    Found {
        source: StepSource::None,
        name: None,
        period_ops: None,
        windows: Vec::new(),
    }
}

fn from_annotations(tree: &Tree, names: &Names, keep: &dyn Fn(u32) -> bool) -> Option<Found> {
    let mut families: std::collections::HashMap<u32, Vec<Window>> = Default::default();
    for r in tree.steps.iter().map(|&i| &tree.ranges[i as usize]) {
        if keep(r.thread()) {
            families.entry(r.name).or_default().push(Window {
                start_ns: r.start_ns,
                end_ns: r.end_ns,
            });
        }
    }
    let (name, mut windows) = families
        .into_iter()
        .max_by_key(|(name, w)| (w.len(), std::cmp::Reverse(*name)))?;
    windows.sort_unstable_by_key(|w| (w.start_ns, w.end_ns));
    // The same step annotated on two threads: keep the first.
    let mut kept: Vec<Window> = Vec::with_capacity(windows.len());
    for w in windows {
        if kept.last().is_none_or(|k| w.start_ns >= k.end_ns) {
            kept.push(w);
        }
    }
    Some(Found {
        source: StepSource::Annotation,
        name: Some(names.get(name).to_string()),
        period_ops: None,
        windows: kept,
    })
}

/// The smallest period of `seq` (ignoring its first quarter, where warm-up differs), allowing
/// [`PERIOD_TOLERANCE`] of positions to differ.
fn period_of(seq: &[u32]) -> Option<usize> {
    let n = seq.len().min(MAX_PERIOD_SEQUENCE);
    let s = &seq[n / 4..n];
    let m = s.len();
    (1..=m / 2).find(|&p| {
        let allowed = ((m - p) as f64 * PERIOD_TOLERANCE) as usize;
        let mut bad = 0;
        for i in 0..m - p {
            if s[i] != s[i + p] {
                bad += 1;
                if bad > allowed {
                    return false;
                }
            }
        }
        true
    })
}

fn from_period(tree: &Tree, items: &[Item], keep: &dyn Fn(u32) -> bool) -> Option<Found> {
    // Threads whose ranges own GPU time.
    let mut per_thread = vec![0i64; tree.threads.len()];
    for it in items {
        if it.owner != NONE {
            per_thread[tree.thread_of(it.owner) as usize] += it.dur_ns;
        }
    }
    // Of the threads with a periodic top-level sequence, the one that starts first drives the
    // loop (the main thread, not autograd's worker, which only runs backward).
    let mut best: Option<(i64, usize, Vec<usize>, usize)> = None;
    for (thread, &gpu) in per_thread.iter().enumerate() {
        if gpu == 0 || !keep(thread as u32) {
            continue;
        }
        let lo = tree.thread_start[thread] as usize;
        let hi = tree.thread_start[thread + 1] as usize;
        let top: Vec<usize> = (lo..hi).filter(|&i| tree.parent[i] == NONE).collect();
        let seq: Vec<u32> = top.iter().map(|&i| tree.ranges[i].name).collect();
        let Some(p) = period_of(&seq) else { continue };
        let first = tree.ranges[top[0]].start_ns;
        if best.as_ref().is_none_or(|b| first < b.0) {
            best = Some((first, thread, top, p));
        }
    }
    let (_, _, top, period) = best?;
    let seq: Vec<u32> = top.iter().map(|&i| tree.ranges[i].name).collect();
    let n = seq.len().min(MAX_PERIOD_SEQUENCE);
    let p = period;
    // Host pauses between top-level ops, by position in the period.
    let mut gap_by_phase = vec![0i64; p];
    for k in 1..n {
        let gap = tree.ranges[top[k]].start_ns - tree.ranges[top[k - 1]].end_ns;
        gap_by_phase[k % p] += gap.max(0);
    }
    // A recording that starts at a step boundary (a capture window, a profiler schedule)
    // repeats from its first op; else a step begins where the host paused longest.
    let from_start = seq.len() >= 2 * p
        && (0..p).filter(|&i| seq[i] != seq[i + p]).count() as f64 <= p as f64 * PERIOD_TOLERANCE;
    let phase = if from_start {
        0
    } else {
        (0..p).max_by_key(|&o| (gap_by_phase[o], std::cmp::Reverse(o)))?
    };
    let last_launch_ns = items
        .iter()
        .map(|it| it.launch_ns)
        .max()
        .unwrap_or(i64::MIN);
    let mut windows = Vec::new();
    let mut k = phase;
    while k + p <= top.len() {
        let start_ns = tree.ranges[top[k]].start_ns;
        let end_ns = if k + p < top.len() {
            tree.ranges[top[k + p]].start_ns
        } else {
            // The last step: other threads (autograd's) may still launch after its last
            // top-level op ends, so it runs to the last launch of the run.
            tree.ranges[top[k + p - 1]].end_ns.max(last_launch_ns + 1)
        };
        windows.push(Window { start_ns, end_ns });
        k += p;
    }
    if windows.len() < 2 {
        return None;
    }
    Some(Found {
        source: StepSource::Period,
        name: None,
        period_ops: Some(p),
        windows,
    })
}

/// The step window that holds `t_ns`, if any. `hint` is where the previous search ended:
/// records come nearly in launch order, so the search gallops from there.
pub(crate) fn window_of(windows: &[Window], t_ns: i64, hint: &mut usize) -> Option<usize> {
    let n = crate::ops::gallop(windows, *hint, |w| w.start_ns <= t_ns);
    *hint = n;
    (n > 0 && t_ns < windows[n - 1].end_ns).then(|| n - 1)
}
