//! A launch-bound step: stretches of at least three kernels, each shorter than the idle gap
//! before it (gaps under `LAUNCH_GAP_MAX_NS`), the analyzer's measure of the GPU waiting on the
//! host's launches. Captured in a CUDA graph (by hand or by `torch.compile(mode=
//! "reduce-overhead")`) the stretch's kernels are launched at once and run back to back: the
//! saving is the stretches' gaps. Longer gaps (a sync, data loading) are other rules' business.
//!
//! A traced run launches more slowly than an untraced one (the tracer's activity records and
//! per-op ranges take host time), so the recorded gaps overstate what an untraced run waits.
//! The model:
//!
//! - the tracer's cost per launch is the median recorded duration of the run's kernel launch
//!   calls (`cudaLaunchKernel`, `cuLaunchKernel`) minus [`UNTRACED_LAUNCH_NS`], what one takes
//!   untraced; every kernel of a stretch had one launch, so the stretches' gaps shrink by that
//!   cost times their kernels (never below zero);
//! - the saving is then at most the GPU's idle time inside the steps (a graph cannot remove
//!   more idle time than there is).
//!
//! Where the run recorded no launch calls (nothing to discount) or the cap applies, the figure
//! is an upper bound, and the estimate says so.

use fuseprof_analyzer::hotspots::LAUNCH_GAP_MAX_NS;

use super::{us, Ctx, Setting};

/// What `cudaLaunchKernel` takes on the host untraced: 2 to 3 us on current drivers and CPUs
/// (the upper end, so the tracer's cost is not overstated).
pub(super) const UNTRACED_LAUNCH_NS: i64 = 3_000;

/// The saving of capturing the stretches, and how it was reached.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LaunchSaving {
    /// The recorded gaps inside the stretches.
    pub gaps_ns: i64,
    /// The tracer's cost per launch taken off, where the run recorded launch calls.
    pub tracer_per_launch_ns: Option<i64>,
    /// The gaps less the tracer's cost.
    pub discounted_ns: i64,
    /// The GPU's idle time the saving may not exceed.
    pub idle_cap_ns: i64,
    pub saving_ns: i64,
    /// Nothing was discounted, or the cap applied.
    pub upper_bound: bool,
}

/// The saving from `gaps_ns` inside stretches of `kernels` kernels, given the sorted
/// durations of the run's launch calls and the GPU's idle time in the steps.
pub(super) fn launch_saving(
    gaps_ns: i64,
    kernels: u64,
    launch_call_ns: &[i64],
    idle_cap_ns: i64,
) -> LaunchSaving {
    let tracer_per_launch_ns = (!launch_call_ns.is_empty())
        .then(|| (launch_call_ns[launch_call_ns.len() / 2] - UNTRACED_LAUNCH_NS).max(0));
    let discount = tracer_per_launch_ns
        .unwrap_or(0)
        .saturating_mul(i64::try_from(kernels).unwrap_or(i64::MAX));
    let discounted_ns = gaps_ns.saturating_sub(discount).max(0);
    let saving_ns = discounted_ns.min(idle_cap_ns.max(0));
    LaunchSaving {
        gaps_ns,
        tracer_per_launch_ns,
        discounted_ns,
        idle_cap_ns,
        saving_ns,
        upper_bound: tracer_per_launch_ns.is_none() || saving_ns < discounted_ns,
    }
}

/// CUDA graphs for a step whose kernels wait on their launches.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let c = &trace.context;
    let per = ctx.per();
    let tl = &c.timeline;
    let gaps: i64 = tl.iter().map(|d| d.launch_bound_gap_ns).sum();
    if gaps <= 0 {
        return None;
    }
    let stretch_ns: i64 = tl.iter().map(|d| d.timeline.launch_bound_ns).sum();
    let stretches: u64 = tl.iter().map(|d| d.timeline.launch_bound_stretches).sum();
    let records: u64 = tl.iter().map(|d| d.timeline.launch_bound_records).sum();
    let idle: i64 = tl.iter().map(|d| d.timeline.idle_ns).sum();
    // The idle time inside the steps where there are steps (gaps between steps are not the
    // stretches'), else the devices' idle time over the run.
    let idle_in_steps: i64 = if c.windows.is_empty() {
        idle
    } else {
        c.windows.iter().map(|&(s, e)| c.idle_between(s, e)).sum()
    };
    let m = launch_saving(gaps, records, &c.launch_call_ns, idle_in_steps);
    if m.saving_ns <= 0 {
        return None;
    }
    let current = ctx.per_step(stretch_ns as f64);
    let expected = ctx.per_step((stretch_ns - m.saving_ns) as f64);
    let mut s = ctx.setting(
        "launch-cuda-graphs",
        "kernels wait on their launches -> CUDA graphs (torch.compile mode=\"reduce-overhead\")",
        current,
        expected,
    );
    s.evidence = vec![
        format!(
            "{:.1} launch-bound stretches a {per} ({:.1} kernels, each shorter than the idle gap \
             before it): {} us a {per}, {} us of it idle",
            ctx.per_step(stretches as f64),
            ctx.per_step(records as f64),
            us(current),
            us(ctx.per_step(gaps as f64))
        ),
        format!(
            "the GPU idle {} us a {per} inside the steps, {} us in all (gaps between steps \
             included)",
            us(ctx.per_step(idle_in_steps as f64)),
            us(ctx.per_step(idle as f64))
        ),
    ];
    let tracer = match m.tracer_per_launch_ns {
        Some(t) => {
            s.evidence.push(format!(
                "kernel launch calls take a median {} us here ({} recorded), {} us an untraced \
                 launch",
                us(c.launch_call_ns[c.launch_call_ns.len() / 2] as f64),
                c.launch_call_ns.len(),
                us(UNTRACED_LAUNCH_NS as f64)
            ));
            format!(
                "less the tracer's {} us a launch (the run's median launch call minus an \
                 untraced one's {} us) for each of the stretches' kernels: {} us a {per}",
                us(t as f64),
                us(UNTRACED_LAUNCH_NS as f64),
                us(ctx.per_step(m.discounted_ns as f64))
            )
        }
        None => "with nothing taken off for the tracer (the run recorded no launch calls)".into(),
    };
    let capped = if m.saving_ns < m.discounted_ns {
        format!(
            ", capped at the GPU's idle time inside the steps ({} us a {per})",
            us(ctx.per_step(m.idle_cap_ns as f64))
        )
    } else {
        String::new()
    };
    s.estimate = format!(
        "the stretches' idle gaps (each under {} us) {tracer}{capped}: a graph launches the \
         stretch's kernels at once, so they run back to back{}; needs static shapes and no \
         host sync inside the captured region",
        LAUNCH_GAP_MAX_NS / 1000,
        if m.upper_bound {
            "; an upper bound: a traced run launches more slowly than an untraced one, so \
             compare wall times before relying on it"
        } else {
            ""
        }
    );
    s.change =
        "model = torch.compile(model, mode=\"reduce-overhead\")  # or torch.cuda.graphs around \
         a static step"
            .into();
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::{DeviceIdle, DeviceTimeline};

    fn idle(launch_bound_ns: i64, gap_ns: i64, stretches: u64) -> DeviceIdle {
        DeviceIdle {
            timeline: DeviceTimeline {
                device: 0,
                span_ns: 1_000_000,
                busy_ns: 600_000,
                idle_ns: 400_000,
                overlap_ns: 0,
                records: 100,
                gap_counts: [0; 4],
                gap_ns: [0; 4],
                launch_bound_stretches: stretches,
                launch_bound_records: stretches * 10,
                launch_bound_ns,
            },
            launch_bound_gap_ns: gap_ns,
        }
    }

    #[test]
    fn launch_gaps_are_the_saving() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.timeline = vec![idle(500_000, 300_000, 4)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 300_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.current_ns_per_step - 250_000.0).abs() < 1e-6);
        assert!((s.saving_ns_per_step - 150_000.0).abs() < 1e-6, "{s:?}");
        assert!(s.change.contains("reduce-overhead"));
    }

    #[test]
    fn the_tracers_launch_cost_comes_off_and_the_idle_time_caps_it() {
        // 100 kernels, 1 ms of gaps; launches a median 5 us traced: 2 us of tracer each.
        let calls = [4_000, 5_000, 9_000];
        let m = launch_saving(1_000_000, 100, &calls, 10_000_000);
        assert_eq!(m.tracer_per_launch_ns, Some(2_000));
        assert_eq!((m.discounted_ns, m.saving_ns), (800_000, 800_000));
        assert!(!m.upper_bound);
        // Capped by the idle time: an upper bound.
        let m = launch_saving(1_000_000, 100, &calls, 500_000);
        assert_eq!(m.saving_ns, 500_000);
        assert!(m.upper_bound);
        // Launch calls faster than an untraced one take nothing off.
        let m = launch_saving(1_000_000, 100, &[1_000], 10_000_000);
        assert_eq!((m.tracer_per_launch_ns, m.saving_ns), (Some(0), 1_000_000));
        // The tracer's cost can exceed the gaps: nothing is left.
        let m = launch_saving(100_000, 100, &[20_000], 10_000_000);
        assert_eq!(m.saving_ns, 0);
        // No launch calls recorded: the gaps as they are, an upper bound.
        let m = launch_saving(1_000_000, 100, &[], 10_000_000);
        assert_eq!(m.saving_ns, 1_000_000);
        assert!(m.upper_bound);
    }

    #[test]
    fn the_saving_never_exceeds_the_idle_time_inside_the_steps() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.timeline = vec![idle(500_000, 300_000, 4)];
        // Two steps of 1 ms, the GPU idle 50 us in each.
        t.context.windows = vec![(0, 1_000_000), (1_000_000, 2_000_000)];
        t.context.busy = vec![(50_000, 1_000_000), (1_050_000, 2_000_000)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 950_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 50_000.0).abs() < 1e-6, "{s:?}");
        assert!(s.estimate.contains("capped") && s.estimate.contains("upper bound"));
        // With launch calls recorded and no cap, the estimate is no upper bound.
        t.context.busy = vec![];
        t.context.launch_call_ns = vec![3_500; 40];
        let s = rule(&Ctx {
            trace: &t,
            step_gpu_ns: 950_000.0,
            ceiling: None,
        })
        .unwrap();
        // 300 us of gaps less 40 kernels x 0.5 us, over two steps.
        assert!((s.saving_ns_per_step - 140_000.0).abs() < 1e-6, "{s:?}");
        assert!(!s.estimate.contains("upper bound"), "{}", s.estimate);
    }

    #[test]
    fn no_launch_bound_stretch_says_nothing() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.timeline = vec![idle(0, 0, 0)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 300_000.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
