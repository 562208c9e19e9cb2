//! A launch-bound step: stretches of at least three kernels, each shorter than the idle gap
//! before it (gaps under `LAUNCH_GAP_MAX_NS`), the analyzer's measure of the GPU waiting on the
//! host's launches. Captured in a CUDA graph (by hand or by `torch.compile(mode=
//! "reduce-overhead")`) the stretch's kernels are launched at once and run back to back: the
//! saving is the stretches' gaps. Longer gaps (a sync, data loading) are other rules' business.
//!
//! A traced run launches more slowly than an untraced one (the tracer's per-op ranges and
//! activity records take host time), so the recorded gaps are an upper bound on the saving; the
//! estimate says so, with the share of the step's wall time the GPU was idle, which a run that
//! is launch-bound without the tracer keeps.

use fuseprof_analyzer::hotspots::LAUNCH_GAP_MAX_NS;

use super::{us, Ctx, Setting};

/// CUDA graphs for a step whose kernels wait on their launches.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let per = ctx.per();
    let tl = &trace.context.timeline;
    let gaps: i64 = tl.iter().map(|d| d.launch_bound_gap_ns).sum();
    if gaps <= 0 {
        return None;
    }
    let stretch_ns: i64 = tl.iter().map(|d| d.timeline.launch_bound_ns).sum();
    let stretches: u64 = tl.iter().map(|d| d.timeline.launch_bound_stretches).sum();
    let records: u64 = tl.iter().map(|d| d.timeline.launch_bound_records).sum();
    let idle: i64 = tl.iter().map(|d| d.timeline.idle_ns).sum();
    let current = ctx.per_step(stretch_ns as f64);
    let expected = ctx.per_step((stretch_ns - gaps) as f64);
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
            us(current - expected)
        ),
        format!(
            "the GPU idle {} us a {per} in all (gaps between steps included)",
            us(ctx.per_step(idle as f64))
        ),
    ];
    s.estimate = format!(
        "the stretches' time without their idle gaps (each under {} us): a graph launches the \
         stretch's kernels at once, so they run back to back; an upper bound, as a traced run \
         launches more slowly than an untraced one (the tracer's per-op work lengthens every \
         gap): profile without per-op ranges, or compare wall times, before relying on it; \
         needs static shapes and no host sync inside the captured region",
        LAUNCH_GAP_MAX_NS / 1000
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
