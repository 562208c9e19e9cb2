//! A launch-bound step: stretches of at least three kernels, each shorter than the idle gap
//! before it (gaps under `LAUNCH_GAP_MAX_NS`), the analyzer's measure of the GPU waiting on the
//! host's launches. Captured in a CUDA graph (by hand or by `torch.compile(mode=
//! "reduce-overhead")`) the stretch's kernels are launched at once and run back to back: the
//! saving is the stretches' gaps. Longer gaps (a sync, data loading) are other rules' business.
//!
//! A traced run launches more slowly than an untraced one: the tracer records every op and
//! module as a host range, and that host time lies between the launches, so the recorded gaps
//! overstate what an untraced run waits. The model, from the run's own clock:
//!
//! - the cost of one host range: the host time between consecutive kernel launch calls on one
//!   thread, with no range opened between them (the launch path alone) against with `n` opened
//!   (`launch_host_gaps`): the median of `(gap - gap with none) / n`. That is the tracer's cost
//!   per range and the program's own cost per op (Python, dispatch) together, which the run
//!   cannot tell apart;
//! - so the tracer took at most that cost times the step's host ranges, and the saving lies
//!   between the gaps less that (every range's cost the tracer's) and the gaps as recorded
//!   (none of it), both capped by the GPU's idle time inside the steps (a graph cannot remove
//!   more idle time than there is);
//! - where the two agree within [`POINT_SPREAD`] of the larger, the smaller is the figure;
//!   otherwise the figure is the larger, said to be an upper bound, with the lower one beside
//!   it.
//!
//! The percentage is of the step's wall time (the steps' host windows; the devices' span
//! without steps): a saving out of idle time is no part of the GPU's busy time.

use fuseprof_analyzer::hotspots::LAUNCH_GAP_MAX_NS;
use fuseprof_analyzer::LaunchGap;

use super::{us, Ctx, Finder, Setting};

/// How far apart the bounds may lie (as a share of the upper one) for the lower one to be
/// given as the figure.
pub(super) const POINT_SPREAD: f64 = 0.1;

/// What one host range adds to the host time between consecutive launches, measured from the
/// run, with the launch path alone beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct RangeCost {
    /// Median host time between consecutive launches with no range between them (0 where no
    /// such pair was recorded: then the whole gap counts against the ranges).
    pub bare_gap_ns: i64,
    /// Median of `(gap - bare_gap_ns) / ranges` over the pairs with ranges between them.
    pub per_range_ns: f64,
    /// Pairs without and with ranges between them.
    pub bare_pairs: usize,
    pub ranged_pairs: usize,
}

fn median_i64(v: &mut [i64]) -> Option<i64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// The cost of a host range from consecutive launches; None where no pair had a range
/// between its launches.
pub(super) fn range_cost(gaps: &[LaunchGap]) -> Option<RangeCost> {
    let mut bare: Vec<i64> = gaps
        .iter()
        .filter(|g| g.ranges == 0)
        .map(|g| g.host_ns)
        .collect();
    let bare_pairs = bare.len();
    let bare_gap_ns = median_i64(&mut bare).unwrap_or(0);
    let mut each: Vec<f64> = gaps
        .iter()
        .filter(|g| g.ranges > 0)
        .map(|g| ((g.host_ns - bare_gap_ns) as f64 / f64::from(g.ranges)).max(0.0))
        .collect();
    if each.is_empty() {
        return None;
    }
    each.sort_unstable_by(f64::total_cmp);
    Some(RangeCost {
        bare_gap_ns,
        per_range_ns: each[each.len() / 2],
        bare_pairs,
        ranged_pairs: each.len(),
    })
}

/// The saving of capturing the stretches, as bounds.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LaunchSaving {
    /// The recorded gaps inside the stretches.
    pub gaps_ns: i64,
    /// The most the tracer's ranges took: their count times the measured cost per range.
    pub tracer_max_ns: i64,
    /// The GPU's idle time the saving may not exceed.
    pub idle_cap_ns: i64,
    /// The gaps less `tracer_max_ns`, capped; and the gaps as recorded, capped.
    pub lower_ns: i64,
    pub upper_ns: i64,
    /// The figure given: `lower_ns` where the bounds agree, else `upper_ns`.
    pub saving_ns: i64,
    pub upper_bound: bool,
}

/// The saving from `gaps_ns` inside the stretches, given `ranges` host ranges costing at most
/// `per_range_ns` each and the GPU's idle time in the steps.
pub(super) fn launch_saving(
    gaps_ns: i64,
    ranges: u64,
    per_range_ns: f64,
    idle_cap_ns: i64,
) -> LaunchSaving {
    let cap = idle_cap_ns.max(0);
    let tracer_max_ns = (ranges as f64 * per_range_ns.max(0.0)).round() as i64;
    let upper_ns = gaps_ns.max(0).min(cap);
    let lower_ns = gaps_ns.saturating_sub(tracer_max_ns).max(0).min(cap);
    let agree = (upper_ns - lower_ns) as f64 <= POINT_SPREAD * upper_ns as f64;
    LaunchSaving {
        gaps_ns,
        tracer_max_ns,
        idle_cap_ns: cap,
        lower_ns,
        upper_ns,
        saving_ns: if agree { lower_ns } else { upper_ns },
        upper_bound: !agree,
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
    let cost = range_cost(&c.launch_host_gaps);
    // Without a measured cost per range nothing is taken off: the recorded gaps, an upper
    // bound unless the run recorded no host ranges at all.
    let per_range = match cost {
        Some(k) => k.per_range_ns,
        None if c.host_ranges == 0 => 0.0,
        None => f64::INFINITY,
    };
    let m = launch_saving(gaps, c.host_ranges, per_range, idle_in_steps);
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
    s.of_wall_time(ctx);
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
             included); the {per}'s wall time {} us",
            us(ctx.per_step(idle_in_steps as f64)),
            us(ctx.per_step(idle as f64)),
            us(ctx.step_wall_ns)
        ),
    ];
    let tracer = match cost {
        Some(k) => {
            s.evidence.push(format!(
                "{:.1} host ranges a {per} (ops and modules the tracer records); host time \
                 between consecutive kernel launches: a median {} us with no range between \
                 them ({} pairs), {} us more for each range opened between them ({} pairs)",
                ctx.per_step(c.host_ranges as f64),
                us(k.bare_gap_ns as f64),
                k.bare_pairs,
                us(k.per_range_ns),
                k.ranged_pairs
            ));
            format!(
                "less at most {} us a {per} for the tracer ({:.1} host ranges at {} us each, \
                 measured between the run's launches: the tracer's cost per range and the \
                 program's own per op, which the run cannot tell apart)",
                us(ctx.per_step(m.tracer_max_ns as f64)),
                ctx.per_step(c.host_ranges as f64),
                us(per_range)
            )
        }
        None if c.host_ranges == 0 => "(the run recorded no host ranges to discount)".into(),
        None => {
            "(no launches with a host range between them to measure the tracer's cost by)".into()
        }
    };
    let bounds = if m.upper_bound {
        format!(
            "; an upper bound: at most {} us a {per} ({:.1}% of its wall time), at least {} us \
             if all of the ranges' cost was the tracer's; compare untraced wall times before \
             relying on it",
            us(ctx.per_step(m.upper_ns as f64)),
            ctx.pct_of_wall(ctx.per_step(m.upper_ns as f64)),
            us(ctx.per_step(m.lower_ns as f64))
        )
    } else {
        String::new()
    };
    s.estimate = format!(
        "the stretches' idle gaps (each under {} us, {} us a {per}) {tracer}, at most the \
         GPU's idle time inside the steps ({} us a {per}): a graph launches the stretch's \
         kernels at once, so they run back to back{bounds}; needs static shapes and no host \
         sync inside the captured region",
        LAUNCH_GAP_MAX_NS / 1000,
        us(ctx.per_step(gaps as f64)),
        us(ctx.per_step(m.idle_cap_ns as f64)),
    );
    s.change =
        "model = torch.compile(model, mode=\"reduce-overhead\")  # or torch.cuda.graphs around \
         a static step"
            .into();
    // The stretches' gaps by step, and the kernels that waited on their launches in them.
    let mut find = Finder::default();
    for d in tl {
        for st in &d.stretches {
            find.at_time(ctx, st.start_ns, st.gap_ns as f64);
        }
        for (name, ns) in &d.launch_bound_kernels {
            find.kernel(name, *ns);
        }
    }
    find.fill(ctx, &mut s);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::{DeviceIdle, DeviceTimeline, LaunchGap, LaunchStretch};

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
            stretches: vec![],
            launch_bound_kernels: vec![],
        }
    }

    fn gap(ranges: u32, host_ns: i64) -> LaunchGap {
        LaunchGap { ranges, host_ns }
    }

    #[test]
    fn launch_gaps_are_the_saving() {
        // No host ranges recorded: nothing for the tracer to have cost, the gaps as they are.
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.timeline = vec![idle(500_000, 300_000, 4)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 300_000.0,
            step_wall_ns: 500_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.current_ns_per_step - 250_000.0).abs() < 1e-6);
        assert!((s.saving_ns_per_step - 150_000.0).abs() < 1e-6, "{s:?}");
        // Of the step's wall time, not of its GPU time.
        assert_eq!(s.pct_of, "wall_time");
        assert!((s.saving_pct_of_step - 30.0).abs() < 1e-9, "{s:?}");
        assert!(s.change.contains("reduce-overhead"));
    }

    #[test]
    fn the_step_with_the_most_launch_gaps_is_where_to_look() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.windows = vec![(0, 1_000_000), (1_000_000, 2_000_000)];
        let mut d = idle(500_000, 300_000, 3);
        // Step 0: one stretch with 100 us of gaps; step 1: two, 80 and 70 us; one more
        // between the steps' windows counts for neither.
        let stretch = |start_ns, gap_ns| LaunchStretch {
            start_ns,
            end_ns: start_ns + 2 * gap_ns,
            gap_ns,
        };
        d.stretches = vec![
            stretch(100_000, 100_000),
            stretch(1_100_000, 80_000),
            stretch(1_500_000, 70_000),
            stretch(2_100_000, 500_000),
        ];
        d.launch_bound_kernels = vec![
            ("vectorized_elementwise_kernel".into(), 200_000),
            ("reduce_kernel".into(), 50_000),
        ];
        t.context.timeline = vec![d];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 300_000.0,
            step_wall_ns: 1_000_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        let w = s.worst_step.as_ref().unwrap();
        assert_eq!((w.step, w.start_ns, w.end_ns), (1, 1_000_000, 2_000_000));
        assert!((w.symptom_ns - 150_000.0).abs() < 1e-9, "{w:?}");
        assert_eq!(
            s.kernels,
            ["vectorized_elementwise_kernel", "reduce_kernel"]
        );
        assert!(s.ops.is_empty());
    }

    #[test]
    fn the_cost_of_a_range_is_the_median_increment_over_the_bare_launch_path() {
        // Bare pairs: 4, 5, 6 us (median 5). With ranges: (5+2*3) = 3 us each, (5+8)/2 = 4,
        // (5+3*5)/3 = 5, and one slower than the bare path by nothing (0).
        let gaps = [
            gap(0, 4_000),
            gap(0, 6_000),
            gap(0, 5_000),
            gap(2, 11_000),
            gap(2, 13_000),
            gap(3, 20_000),
            gap(1, 4_000),
        ];
        let k = range_cost(&gaps).unwrap();
        assert_eq!((k.bare_gap_ns, k.bare_pairs, k.ranged_pairs), (5_000, 3, 4));
        // Sorted increments 0, 3000, 4000, 5000: the median (upper) is 4000.
        assert_eq!(k.per_range_ns, 4_000.0);
        // No bare pair: the whole gap counts against its ranges.
        let k = range_cost(&[gap(2, 10_000)]).unwrap();
        assert_eq!((k.bare_gap_ns, k.per_range_ns), (0, 5_000.0));
        // No pair with a range between: nothing to measure.
        assert_eq!(range_cost(&[gap(0, 4_000)]), None);
    }

    #[test]
    fn the_saving_lies_between_the_gaps_less_the_ranges_and_the_gaps_capped_by_idle() {
        // 1 ms of gaps, 100 ranges at 2 us: 0.8 to 1 ms apart by 20% -> an upper bound of 1 ms.
        let m = launch_saving(1_000_000, 100, 2_000.0, 10_000_000);
        assert_eq!(
            (m.tracer_max_ns, m.lower_ns, m.upper_ns),
            (200_000, 800_000, 1_000_000)
        );
        assert_eq!(m.saving_ns, 1_000_000);
        assert!(m.upper_bound);
        // 100 ranges at 0.5 us: 0.95 to 1 ms, within 10%: the lower one is the figure.
        let m = launch_saving(1_000_000, 100, 500.0, 10_000_000);
        assert_eq!((m.lower_ns, m.saving_ns), (950_000, 950_000));
        assert!(!m.upper_bound);
        // Both capped by 0.5 ms of idle time: they agree, the figure is the idle time.
        let m = launch_saving(1_000_000, 100, 2_000.0, 500_000);
        assert_eq!(
            (m.lower_ns, m.upper_ns, m.saving_ns),
            (500_000, 500_000, 500_000)
        );
        assert!(!m.upper_bound);
        // The ranges could have cost more than the gaps: at least nothing, at most the gaps.
        let m = launch_saving(100_000, 100, 20_000.0, 10_000_000);
        assert_eq!((m.lower_ns, m.upper_ns, m.saving_ns), (0, 100_000, 100_000));
        assert!(m.upper_bound);
        // An unmeasured cost per range (infinite): the same.
        let m = launch_saving(100_000, 10, f64::INFINITY, 10_000_000);
        assert_eq!((m.lower_ns, m.saving_ns), (0, 100_000));
        // No ranges: the gaps, a point figure.
        let m = launch_saving(1_000_000, 0, 2_000.0, 10_000_000);
        assert_eq!(m.saving_ns, 1_000_000);
        assert!(!m.upper_bound);
    }

    /// A launch-bound run worked by hand: two steps of 1 ms wall time, the GPU busy 600 us and
    /// idle 400 us in each; stretches holding 300 us of gaps a step. The host: 50 ranges a
    /// step; consecutive launches 4 us apart with no range between, 10 us with two (3 us a
    /// range).
    #[test]
    fn a_synthetic_launch_bound_run_saves_what_the_hand_count_says() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.timeline = vec![idle(1_000_000, 600_000, 8)];
        t.context.windows = vec![(0, 1_000_000), (1_000_000, 2_000_000)];
        t.context.busy = vec![(0, 600_000), (1_000_000, 1_600_000)];
        t.context.host_ranges = 100;
        t.context.launch_host_gaps = [gap(0, 4_000); 5]
            .into_iter()
            .chain([gap(2, 10_000); 5])
            .collect();
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 600_000.0,
            step_wall_ns: 1_000_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        // Per step: gaps 300 us, tracer at most 50 x 3 us = 150 us, idle 400 us. Bounds 150
        // and 300 us, 50% apart: the upper one, 300 us, 30% of the 1 ms wall time.
        assert!((s.saving_ns_per_step - 300_000.0).abs() < 1e-6, "{s:?}");
        assert!((s.saving_pct_of_step - 30.0).abs() < 1e-9, "{s:?}");
        assert!(s.estimate.contains("upper bound"), "{}", s.estimate);
        assert!(s.estimate.contains("at least 150.0 us"), "{}", s.estimate);
        assert!(
            s.estimate.contains("50.0 host ranges at 3.0 us"),
            "{}",
            s.estimate
        );
        // Idle 50 us a step: both bounds capped at it, a point figure of 50 us, 5% of the wall.
        t.context.busy = vec![(0, 950_000), (1_000_000, 1_950_000)];
        let s = rule(&Ctx {
            trace: &t,
            step_gpu_ns: 950_000.0,
            step_wall_ns: 1_000_000.0,
            ceiling: None,
        })
        .unwrap();
        assert!((s.saving_ns_per_step - 50_000.0).abs() < 1e-6, "{s:?}");
        assert!((s.saving_pct_of_step - 5.0).abs() < 1e-9, "{s:?}");
        assert!(!s.estimate.contains("upper bound"), "{}", s.estimate);
    }

    #[test]
    fn no_launch_bound_stretch_says_nothing() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.timeline = vec![idle(0, 0, 0)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 300_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
