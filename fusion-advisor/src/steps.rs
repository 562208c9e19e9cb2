//! The program's steps, found without annotation, from the step clock that `fuseprof bench`
//! runs inside it (`python/patch/fuseprof_steps.py`): each outermost `nn.Module` call and
//! each optimizer step with its host time and, through CUDA events, the time the GPU reached
//! it, and the host times at which `torch.cuda.synchronize` returned.
//!
//! A step is an optimizer step when the program takes them (training), else the group of
//! outermost module calls that starts with the same model each time (one forward, or the
//! models a step calls in turn). Its time is the steady period between consecutive steps: on
//! the GPU's clock and on the host's, and the larger one bounds the step, so an unsynchronized
//! loop (whose host runs ahead of the GPU) is timed by the GPU, and a launch-bound one by the
//! host. The timed loop is the longest run of steps between two points where the program's own
//! clock can see the GPU's progress (synchronize calls, the exit), and its wall time on that
//! clock is reported beside the per-step figures, so a figure that disagrees with the program's
//! own clock shows.
//!
//! ```
//! use fuseprof_fusion_advisor::steps::{find, StepReport};
//! // Five forwards of one model, 10 ms apart on the GPU, the host 2 ms ahead of each.
//! let report: StepReport = serde_json::from_str(
//!     r#"{"version": 1, "models": ["Net"], "optimizer_steps": [], "syncs": [],
//!         "exit_sync_ns": 60000000,
//!         "calls": [[0, 0, 1000, 2000000, 10000000], [0, 10000000, 11000, 12000000, 20000000],
//!                   [0, 20000000, 21000, 22000000, 30000000], [0, 30000000, 31000, 32000000, 40000000],
//!                   [0, 40000000, 41000, 42000000, 50000000]]}"#,
//! ).unwrap();
//! let steps = find(&report).unwrap();
//! assert_eq!(steps.count, 5);
//! assert!((steps.step_ms - 10.0).abs() < 1e-9);
//! ```

use serde::{Deserialize, Serialize};

/// One outermost module call: `[model, host_start, host_end, gpu_start, gpu_end]`.
pub type Call = (usize, i64, i64, Option<i64>, Option<i64>);

/// What the step clock wrote (all times host-clock nanoseconds; a GPU time is `None` where no
/// event was recorded).
#[derive(Clone, Debug, Deserialize)]
pub struct StepReport {
    pub version: u32,
    pub models: Vec<String>,
    /// Each outermost module call.
    pub calls: Vec<Call>,
    /// `[host, gpu]` at the end of each optimizer step.
    pub optimizer_steps: Vec<(i64, Option<i64>)>,
    /// When each `torch.cuda.synchronize` (or `.item()` of a GPU tensor) returned.
    pub syncs: Vec<i64>,
    /// When the GPU was idle at exit (the step clock's own synchronize, which puts the events
    /// on the host clock).
    pub exit_sync_ns: Option<i64>,
    /// The value of each one-element tensor the program called `.backward()` on, in order: a
    /// number, `"nan"`, `"inf"` or `"-inf"`, or null where it could not be read.
    #[serde(default)]
    pub losses: Vec<serde_json::Value>,
}

impl StepReport {
    /// The losses as numbers; NaN for one that is not finite or could not be read.
    pub fn loss_values(&self) -> Vec<f64> {
        self.losses
            .iter()
            .map(|v| match v {
                serde_json::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
                serde_json::Value::String(s) if s == "inf" => f64::INFINITY,
                serde_json::Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
                _ => f64::NAN,
            })
            .collect()
    }
}

/// Which clock bounds the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The GPU's: the host launches ahead of it.
    Gpu,
    /// The host's: the GPU waits for its launches (or no GPU time was recorded).
    Host,
}

/// The steps of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Steps {
    /// What a step is, in words ("optimizer steps", "calls of SwinTransformer").
    pub what: String,
    /// Steps found in the whole run.
    pub count: usize,
    /// Median period of the timed loop's steps, ms, on the bounding clock.
    pub step_ms: f64,
    pub clock: Clock,
    pub gpu_step_ms: Option<f64>,
    pub host_step_ms: f64,
    /// Steps in the timed loop.
    pub loop_steps: usize,
    /// The timed loop's wall time on the program's clock, ms.
    pub loop_wall_ms: f64,
    /// What bounds the timed loop, in words.
    pub loop_bounds: String,
    /// The program's losses, in the order it trained on them (empty: it called no backward).
    pub losses: Vec<f64>,
}

impl Steps {
    /// The loop's wall time per step, ms.
    pub fn wall_per_step_ms(&self) -> f64 {
        self.loop_wall_ms / self.loop_steps as f64
    }
}

/// One step's times, host clock, ns.
#[derive(Clone, Copy, Debug)]
struct Step {
    host_start: i64,
    host_end: i64,
    gpu_start: Option<i64>,
    gpu_end: Option<i64>,
}

impl Step {
    /// When the step's work was done, as far as the program could see: its GPU work's end.
    fn done(&self) -> i64 {
        self.gpu_end.unwrap_or(self.host_end).max(self.host_end)
    }
}

/// Fewest steps a timed loop needs for a period (two periods).
const MIN_LOOP: usize = 3;

/// The steps of `r`, or why none can be timed.
pub fn find(r: &StepReport) -> Result<Steps, String> {
    let (what, steps) = if r.optimizer_steps.len() > MIN_LOOP {
        // Step i runs from the end of optimizer step i - 1 to the end of optimizer step i.
        let steps = r
            .optimizer_steps
            .windows(2)
            .map(|w| Step {
                host_start: w[0].0,
                host_end: w[1].0,
                gpu_start: w[0].1,
                gpu_end: w[1].1,
            })
            .collect();
        ("optimizer steps".to_string(), steps)
    } else {
        by_model_calls(r)?
    };
    if steps.len() < MIN_LOOP {
        return Err(format!(
            "found {} {what}, too few to time: run the loop for more steps",
            steps.len()
        ));
    }
    // The program's own synchronizing calls: the exit's synchronize is the step clock's, and a
    // loop that ends without one ends, on the program's clock, when its last step's GPU work does.
    let mut points: Vec<i64> = r.syncs.clone();
    points.sort_unstable();
    let (range, bounds) = timed_loop(&steps, &points);
    let lp = &steps[range.clone()];
    let periods = |at: fn(&Step) -> Option<i64>| -> Option<Vec<f64>> {
        lp.windows(2)
            .map(|w| Some((at(&w[1])? - at(&w[0])?) as f64 / 1e6))
            .collect()
    };
    let host_step_ms = median(&periods(|s| Some(s.host_start)).expect("host times"));
    let gpu_step_ms = periods(|s| s.gpu_start).map(|p| median(&p));
    let (step_ms, clock) = match gpu_step_ms {
        Some(g) if g >= host_step_ms => (g, Clock::Gpu),
        _ => (host_step_ms, Clock::Host),
    };
    let first = &lp[0];
    let last = &lp[lp.len() - 1];
    let start = bounds.0.unwrap_or(first.host_start);
    let end = bounds.1.unwrap_or_else(|| last.done());
    let loop_bounds = match bounds {
        (Some(_), Some(_)) => "between two synchronizes",
        (None, Some(_)) => "from its first step to a synchronize",
        (Some(_), None) => "from a synchronize to its last step's end on the GPU",
        (None, None) => "from its first step to its last step's end on the GPU",
    };
    Ok(Steps {
        what,
        count: steps.len(),
        step_ms,
        clock,
        gpu_step_ms,
        host_step_ms,
        loop_steps: lp.len(),
        loop_wall_ms: (end - start) as f64 / 1e6,
        loop_bounds: loop_bounds.to_string(),
        losses: r.loss_values(),
    })
}

/// Steps as groups of outermost module calls, each starting with a call of the same model: of
/// the models the program calls most in its second half, the one that takes the most time, so
/// that a warm-up on another model or a step that calls several models in turn (a model and
/// its loss, an encoder and a head) still has one start.
fn by_model_calls(r: &StepReport) -> Result<(String, Vec<Step>), String> {
    if r.calls.is_empty() {
        return Err(
            "no step found: the program made no nn.Module call and no optimizer step \
                    (is it a PyTorch model loop?)"
                .into(),
        );
    }
    let half = &r.calls[r.calls.len() / 2..];
    let models = r
        .models
        .len()
        .max(1 + r.calls.iter().map(|c| c.0).max().unwrap_or(0));
    let mut counts = vec![0usize; models];
    let mut busy_ns = vec![0i64; models];
    for c in half {
        counts[c.0] += 1;
        busy_ns[c.0] += match (c.3, c.4) {
            (Some(a), Some(b)) => b - a,
            _ => c.2 - c.1,
        };
    }
    // The models called as often as any (a count one short is the same loop cut at another
    // phase); of those, the one that takes the most time starts a step.
    let most = *counts.iter().max().expect("a model");
    let start_model = (0..models)
        .filter(|&m| counts[m] + 1 >= most && counts[m] > 0)
        .max_by_key(|&m| (busy_ns[m], std::cmp::Reverse(m)))
        .expect("a model");
    let mut steps: Vec<Step> = Vec::new();
    // The models each step called, in order.
    let mut members: Vec<Vec<usize>> = Vec::new();
    for c in r.calls.iter() {
        let (model, host_start, host_end, gpu_start, gpu_end) = *c;
        if model == start_model {
            steps.push(Step {
                host_start,
                host_end,
                gpu_start,
                gpu_end,
            });
            members.push(vec![model]);
        } else if let (Some(s), Some(m)) = (steps.last_mut(), members.last_mut()) {
            s.host_end = host_end;
            s.gpu_end = gpu_end.or(s.gpu_end);
            if !m.contains(&model) {
                m.push(model);
            }
        }
    }
    let name = |m: usize| r.models.get(m).map_or("?", |s| s.as_str());
    let typical = members.get(members.len() / 2).cloned().unwrap_or_default();
    let what = if typical.len() <= 1 {
        format!("calls of {}", name(start_model))
    } else {
        format!(
            "groups of calls of {}",
            typical
                .iter()
                .map(|&m| name(m))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Ok((what, steps))
}

/// How far a step's GPU end, put on the host clock through the exit's last event, may lie past
/// a synchronize that it came before (the host reads its clock some microseconds after that
/// event completes, so every converted GPU time is late by as much).
const CLOCK_SLACK_NS: i64 = 200_000;
/// A leading step of a loop that synchronizes every step, longer than this many times the
/// loop's median step, is warm-up.
const WARM_UP_FACTOR: f64 = 1.5;

/// The timed loop, and the points where the program could read the GPU's progress around it
/// (`points`, sorted): of the runs of steps between two consecutive points, the one holding
/// the most steps; or, where the program synchronizes every step, the longest stretch of
/// consecutive one-step runs, when it holds more (a warm-up left unsynchronized before such a
/// loop is not the loop). The later of equal candidates. When no candidate holds `MIN_LOOP`
/// steps, the steady steps (all but the first fifth) with the points around them.
#[allow(clippy::type_complexity)]
fn timed_loop(
    steps: &[Step],
    points: &[i64],
) -> (std::ops::Range<usize>, (Option<i64>, Option<i64>)) {
    let mut runs: Vec<(std::ops::Range<usize>, (Option<i64>, Option<i64>))> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        // The points before step i starts and after it is done.
        let before = points.partition_point(|&p| p <= steps[i].host_start);
        let lo = before.checked_sub(1).map(|k| points[k]);
        let hi = points.get(before).copied();
        let mut j = i;
        while j < steps.len()
            && steps[j].host_start > lo.unwrap_or(i64::MIN)
            && hi.is_none_or(|h| steps[j].done() <= h.saturating_add(CLOCK_SLACK_NS))
        {
            j += 1;
        }
        let j = j.max(i + 1);
        runs.push((i..j, (lo, hi)));
        i = j;
    }
    let mut best = runs
        .iter()
        .rev()
        .max_by_key(|(r, _)| r.len())
        .cloned()
        .expect("at least one step");
    // Stretches of one-step runs, each ending where the next begins.
    let mut k = 0;
    while k < runs.len() {
        let mut e = k;
        while e < runs.len()
            && runs[e].0.len() == 1
            && runs[e].1 .0.is_some()
            && runs[e].1 .1.is_some()
        {
            e += 1;
        }
        if e > k + 1 {
            // Each step of such a stretch is timed on its own by the synchronizes around it, so
            // its warm-up shows: leading steps over WARM_UP_FACTOR x the stretch's median length
            // are the program's warm-up (first-call compiles, lazy initialisation), which its
            // own clock leaves out too.
            let walls: Vec<f64> = runs[k..e]
                .iter()
                .map(|(_, (lo, hi))| (hi.unwrap_or(0) - lo.unwrap_or(0)) as f64)
                .collect();
            let typical = median(&walls);
            let mut start = k;
            while e - start > MIN_LOOP && walls[start - k] > WARM_UP_FACTOR * typical {
                start += 1;
            }
            let range = runs[start].0.start..runs[e - 1].0.end;
            if range.len() >= best.0.len() {
                best = (range, (runs[start].1 .0, runs[e - 1].1 .1));
            }
        }
        k = e.max(k + 1);
    }
    let (range, bounds) = best;
    if range.len() >= MIN_LOOP {
        return (range, bounds);
    }
    let first = steps.len() / 5;
    let lo = points.partition_point(|&p| p <= steps[first].host_start);
    let done = steps[steps.len() - 1].done();
    let hi = points.partition_point(|&p| p < done.saturating_sub(CLOCK_SLACK_NS));
    (
        first..steps.len(),
        (
            lo.checked_sub(1).map(|k| points[k]),
            points.get(hi).copied(),
        ),
    )
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    (s[(n - 1) / 2] + s[n / 2]) / 2.0
}

/// The steps of the process that took the most of them, from the step clock's files
/// (`PREFIX.PID`, one per process that imported torch).
pub fn find_in_files(prefix: &std::path::Path) -> Result<Steps, String> {
    let dir = prefix.parent().unwrap_or(std::path::Path::new("."));
    let stem = prefix
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut best: Option<Steps> = None;
    let mut why = "the program never imported torch".to_string();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&format!("{stem}.")) else {
            continue;
        };
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).map_err(|e| e.to_string())?;
        let report: StepReport = serde_json::from_str(&text)
            .map_err(|e| format!("the step clock's report {name}: {e}"))?;
        match find(&report) {
            Ok(s) if best.as_ref().is_none_or(|b| s.count > b.count) => best = Some(s),
            Ok(_) => {}
            Err(e) => why = e,
        }
    }
    best.ok_or(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn call(model: usize, host: i64, gpu: i64, gpu_ms: i64) -> Call {
        (model, host, host + MS / 2, Some(gpu), Some(gpu + gpu_ms))
    }

    fn report(calls: Vec<Call>, syncs: Vec<i64>) -> StepReport {
        let exit = calls.iter().map(|c| c.4.unwrap_or(c.2)).max().unwrap_or(0) + MS;
        StepReport {
            version: 1,
            models: vec!["Swin".into(), "Head".into()],
            calls,
            optimizer_steps: Vec::new(),
            syncs,
            exit_sync_ns: Some(exit),
            losses: Vec::new(),
        }
    }

    /// An unsynchronized loop: the host launches each 8 ms forward in 0.5 ms until the queue
    /// is full, then at the GPU's pace. Host launch times say 0.5 ms; the step is 8 ms.
    #[test]
    fn an_unsynchronized_loop_is_timed_by_the_gpu_and_the_wall() {
        let mut calls = Vec::new();
        let t0 = 100 * MS;
        for i in 0..30i64 {
            let host = t0 + if i < 3 { i * MS / 2 } else { (i - 2) * 8 * MS };
            calls.push(call(0, host, t0 + i * 8 * MS + MS / 10, 8 * MS));
        }
        // Warm-up before with a synchronize; one synchronize after the loop.
        let before = t0 - MS;
        let after = t0 + 30 * 8 * MS + MS;
        let s = find(&report(calls, vec![before, after])).unwrap();
        assert_eq!(s.what, "calls of Swin");
        assert_eq!(s.count, 30);
        assert_eq!(s.clock, Clock::Gpu);
        assert!((s.step_ms - 8.0).abs() < 1e-6, "{s:?}");
        assert_eq!(s.loop_steps, 30);
        assert_eq!(s.loop_bounds, "between two synchronizes");
        assert!((s.wall_per_step_ms() - 8.0).abs() / 8.0 < 0.02, "{s:?}");
    }

    /// A launch-bound loop: the GPU waits for the host, whose period bounds the step.
    #[test]
    fn a_launch_bound_loop_is_timed_by_the_host() {
        let calls = (0..20i64)
            .map(|i| call(0, i * 3 * MS, i * 3 * MS + MS / 5, MS))
            .collect();
        let s = find(&report(calls, Vec::new())).unwrap();
        assert!((s.step_ms - 3.0).abs() < 1e-6, "{s:?}");
        assert_eq!(
            s.loop_bounds,
            "from its first step to its last step's end on the GPU"
        );
        assert!((s.wall_per_step_ms() - 3.0).abs() / 3.0 < 0.1, "{s:?}");
    }

    /// A step that calls two models in turn, after a warm-up of the second alone; and a loop
    /// that synchronizes every step.
    #[test]
    fn groups_of_models_and_a_synchronize_each_step() {
        let mut calls = vec![call(1, 0, MS, MS)];
        let mut syncs = Vec::new();
        for i in 0..12i64 {
            let t = 10 * MS + i * 10 * MS;
            calls.push(call(0, t, t + MS, 6 * MS));
            calls.push(call(1, t + MS, t + 7 * MS, 2 * MS));
            syncs.push(t + 9 * MS + MS / 2);
        }
        let s = find(&report(calls, syncs)).unwrap();
        assert_eq!(s.what, "groups of calls of Swin, Head");
        assert_eq!(s.count, 12);
        assert!((s.step_ms - 10.0).abs() < 1e-6, "{s:?}");
        // Every step is its own window: the loop is the steps between the first synchronize and
        // the last.
        assert_eq!(s.loop_steps, 11);
        assert_eq!(s.loop_bounds, "between two synchronizes");
        assert!((s.wall_per_step_ms() - 10.0).abs() / 10.0 < 0.1, "{s:?}");
    }

    /// A warm-up of five forwards with no synchronize, then a loop that synchronizes before and
    /// after every step (as a script that times each step does): the loop is the 30 timed
    /// steps, not the warm-up that runs longest between two synchronizes. The last step's GPU
    /// end, put on the host clock a little late, still counts as before the synchronize.
    #[test]
    fn a_loop_that_synchronizes_every_step_is_not_its_warm_up() {
        let mut calls = Vec::new();
        let mut syncs = Vec::new();
        for i in 0..5i64 {
            calls.push(call(0, i * MS, i * 60 * MS, 60 * MS));
        }
        syncs.push(300 * MS + MS / 10);
        for i in 0..30i64 {
            let t = 301 * MS + i * 7 * MS;
            calls.push(call(0, t, t + MS / 10, 6 * MS));
            syncs.push(t - MS / 20);
            syncs.push(t + 6 * MS + MS / 10 - CLOCK_SLACK_NS / 2);
        }
        let s = find(&report(calls, syncs)).unwrap();
        assert_eq!(s.loop_steps, 30, "{s:?}");
        assert_eq!(s.loop_bounds, "between two synchronizes");
        assert!((s.wall_per_step_ms() - 7.0).abs() / 7.0 < 0.05, "{s:?}");
    }

    /// A loop that synchronizes every step from its first, warm-up included: the slow first
    /// steps (compiles, lazy initialisation) are left out, as the program's own timing does.
    #[test]
    fn a_warm_up_synchronized_like_the_loop_is_left_out() {
        let mut calls = Vec::new();
        let mut syncs = Vec::new();
        let mut t = 0;
        for i in 0..25i64 {
            let len = if i < 2 { 400 * MS } else { 7 * MS };
            calls.push(call(0, t, t + MS / 10, len - MS));
            syncs.push(t - MS / 20);
            syncs.push(t + len - MS + MS / 10 - CLOCK_SLACK_NS / 2);
            t += len;
        }
        let s = find(&report(calls, syncs)).unwrap();
        assert_eq!(s.loop_steps, 23, "{s:?}");
        assert!((s.wall_per_step_ms() - 7.0).abs() / 7.0 < 0.05, "{s:?}");
    }

    /// A loop with no synchronize after it ends when its last step's GPU work does, not at the
    /// exit (which may come after other work), and a `.item()` bounds it like a synchronize.
    #[test]
    fn a_loop_without_a_synchronize_after_it_ends_with_its_last_step() {
        let calls: Vec<Call> = (0..10i64)
            .map(|i| call(0, i * 4 * MS, i * 4 * MS + MS, 3 * MS))
            .collect();
        let mut r = report(calls, Vec::new());
        // Half a second of other work before the exit.
        r.exit_sync_ns = Some(40 * MS + 500 * MS);
        let s = find(&r).unwrap();
        assert!(
            (s.loop_wall_ms - (9.0 * 4.0 + 1.0 + 3.0)).abs() < 1e-6,
            "{s:?}"
        );
        r.syncs = vec![39 * MS + MS / 2];
        let s = find(&r).unwrap();
        assert_eq!(s.loop_bounds, "from its first step to a synchronize");
        assert!((s.loop_wall_ms - 39.5).abs() < 1e-6, "{s:?}");
    }

    /// Training: optimizer steps are the steps, whatever the module calls are.
    #[test]
    fn optimizer_steps_are_the_steps_when_there_are_any() {
        let mut r = report(
            (0..40i64)
                .map(|i| call(i as usize % 2, i * 5 * MS, i * 5 * MS, MS))
                .collect(),
            Vec::new(),
        );
        r.optimizer_steps = (1..=10i64)
            .map(|i| (i * 20 * MS, Some(i * 20 * MS + MS)))
            .collect();
        let s = find(&r).unwrap();
        assert_eq!(s.what, "optimizer steps");
        assert_eq!(s.count, 9);
        assert!((s.step_ms - 20.0).abs() < 1e-6, "{s:?}");
    }

    #[test]
    fn too_few_steps_or_none_say_why() {
        let e = find(&report(vec![call(0, 0, 0, MS)], Vec::new())).unwrap_err();
        assert!(e.contains("too few"), "{e}");
        let e = find(&report(Vec::new(), Vec::new())).unwrap_err();
        assert!(e.contains("no nn.Module call"), "{e}");
    }
}
