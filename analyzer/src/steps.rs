//! The repeating unit of a run: a step annotation (ProfilerStep#N, NVTX `step`, ...); failing
//! that what the program repeats as a PyTorch program sees it: its optimizer steps, else its
//! outermost model calls (the `nn.Module` ranges of `--pytorch modules`); failing that the
//! period of the top-level op sequence on the busiest launching thread.

use serde::{Deserialize, Serialize};

use crate::attribution::Item;
use crate::ops::{Names, Role, Tree, NONE};

/// Where the steps came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Ranges named as steps (ProfilerStep#N, `step`, `iteration`, ...).
    Annotation,
    /// Optimizer steps (`Optimizer.step#...` ranges), else the outermost `nn.Module` calls.
    Calls,
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
    if let Some(f) = from_calls(tree, names, items, keep) {
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

/// Steps from what a PyTorch program repeats: each optimizer step (a training step runs from
/// the end of one to the end of the next, the first from the first model call before it, so
/// module ranges are needed), else
/// each group of outermost `nn.Module` calls that starts with the same model (of the models
/// called as often as any in the second half of the run, the one that takes the most time: a
/// model and its loss, or an encoder and a head, make one step). Of the threads that launch GPU
/// work, the one with the most such calls drives the loop.
fn from_calls(
    tree: &Tree,
    names: &Names,
    items: &[Item],
    keep: &dyn Fn(u32) -> bool,
) -> Option<Found> {
    let mut launches = vec![false; tree.threads.len()];
    for it in items {
        if it.owner != NONE {
            launches[tree.thread_of(it.owner) as usize] = true;
        }
    }
    let outermost_module = |i: usize| {
        if tree.ranges[i].role() != Role::Module {
            return false;
        }
        let mut p = tree.parent[i];
        while p != NONE {
            if tree.ranges[p as usize].role() == Role::Module {
                return false;
            }
            p = tree.parent[p as usize];
        }
        true
    };
    // (calls, thread, optimizer steps?, the calls' range indexes)
    let mut best: Option<(usize, bool, Vec<usize>, Vec<usize>)> = None;
    for (thread, &launched) in launches.iter().enumerate() {
        if !keep(thread as u32) || (!launched && !items.is_empty()) {
            continue;
        }
        let lo = tree.thread_start[thread] as usize;
        let hi = tree.thread_start[thread + 1] as usize;
        let optimizer: Vec<usize> = (lo..hi)
            .filter(|&i| {
                names
                    .get(tree.ranges[i].name)
                    .starts_with("Optimizer.step#")
            })
            .collect();
        let calls: Vec<usize> = (lo..hi).filter(|&i| outermost_module(i)).collect();
        let key = if optimizer.len() >= 2 {
            (true, optimizer.len())
        } else {
            (false, calls.len())
        };
        if key.1 >= 2
            && best
                .as_ref()
                .is_none_or(|b| (b.1, b.2.len()) < (key.0, key.1))
        {
            best = Some((
                thread,
                key.0,
                if key.0 { optimizer } else { calls.clone() },
                calls,
            ));
        }
    }
    let (_, by_optimizer, anchors, calls) = best?;
    let r = |i: usize| &tree.ranges[i];
    let (name, starts): (String, Vec<i64>) = if by_optimizer {
        // Each step ends where its optimizer step ends; the first starts at the first model
        // call before its optimizer step, where there is one.
        // Without module ranges (`--pytorch modules`) the first step's start is unknown: the
        // period of the op sequence finds all of them instead.
        let first = calls
            .iter()
            .map(|&i| r(i).start_ns)
            .find(|&t| t < r(anchors[0]).start_ns)?;
        let mut starts: Vec<i64> = vec![first];
        starts.extend(anchors[..anchors.len() - 1].iter().map(|&i| r(i).end_ns));
        (
            format!("optimizer steps ({})", names.get(r(anchors[0]).name)),
            starts,
        )
    } else {
        let half = &anchors[anchors.len() / 2..];
        let mut by_model: std::collections::HashMap<u32, (usize, i64)> = Default::default();
        for &i in half {
            let e = by_model.entry(r(i).name).or_default();
            e.0 += 1;
            e.1 += r(i).end_ns.saturating_sub(r(i).start_ns);
        }
        let most = by_model.values().map(|v| v.0).max()?;
        let (&model, _) = by_model
            .iter()
            .filter(|(_, v)| v.0 + 1 >= most)
            .max_by_key(|(&m, v)| (v.1, std::cmp::Reverse(m)))?;
        let starts: Vec<i64> = anchors
            .iter()
            .filter(|&&i| r(i).name == model)
            .map(|&i| r(i).start_ns)
            .collect();
        (format!("calls of {}", names.get(model)), starts)
    };
    if starts.len() < 2 {
        return None;
    }
    let mut windows: Vec<Window> = starts
        .windows(2)
        .map(|w| Window {
            start_ns: w[0],
            end_ns: w[1],
        })
        .collect();
    // The last step: to the end of its optimizer step, or of its group's last model call.
    let last_start = *starts.last().expect("two starts");
    let last_end = if by_optimizer {
        r(*anchors.last().expect("anchors")).end_ns
    } else {
        calls
            .iter()
            .map(|&i| r(i))
            .filter(|c| c.start_ns >= last_start)
            .map(|c| c.end_ns)
            .max()
            .unwrap_or(last_start)
    };
    windows.push(Window {
        start_ns: last_start,
        end_ns: last_end.max(last_start + 1),
    });
    Some(Found {
        source: StepSource::Calls,
        name: Some(name),
        period_ops: None,
        windows,
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
