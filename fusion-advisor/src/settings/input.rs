//! The GPU idle while the host loads the next batch. Two signs in the trace:
//!
//! - the data loader's ranges (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`,
//!   `..._MultiProcessingDataLoaderIter.__next__`, or a user range named `data_load`): the GPU's
//!   idle time inside them is time it waited on the input;
//! - without such ranges, the GPU idle from a step's start to its first kernel while the host
//!   ran no op on any thread (Python work no op records, such as loading a batch), where that
//!   is at least [`HOST_GAP_MIN_NS`] in at least half the steps: loading and collating a batch
//!   takes milliseconds, the Python between two steps (zero_grad, logging) well under one, and a
//!   lone slow step is a warm-up, not the input pipeline.
//!
//! The saving is that idle time per step: with workers loading ahead (and pinned memory with
//! non-blocking copies) the next batch is ready when the step starts. Whether the host-to-device
//! copies come from pageable or pinned memory is not in the store (its copies keep their
//! direction only), so the evidence lists them without saying which.

use fuseprof_analyzer::Class;

/// The shortest host gap before a step's first kernel that is taken for the input, where no
/// data loader range says so.
pub(super) const HOST_GAP_MIN_NS: i64 = 1_000_000;

use super::{us, Ctx, Setting};

/// Whether a user range is the data loader's.
fn is_loader(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    l.contains("dataloader") || l.contains("data_load")
}

/// Sorted, merged intervals.
fn merge(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Length of `[from, to)` that no interval of `covered` (merged, sorted) covers.
fn uncovered(covered: &[(i64, i64)], from: i64, to: i64) -> i64 {
    let first = covered.partition_point(|&(_, e)| e <= from);
    let mut c = 0;
    for &(s, e) in &covered[first..] {
        if s >= to {
            break;
        }
        c += e.min(to) - s.max(from);
    }
    (to - from - c).max(0)
}

/// More loader workers, pinned memory and non-blocking copies where the GPU waits on the input.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let c = &trace.context;
    let per = ctx.per();
    let loader: Vec<_> = c
        .annotations
        .iter()
        .filter(|a| is_loader(&a.name))
        .collect();
    let mut evidence = Vec::new();
    let idle: i64;
    let how: String;
    if !loader.is_empty() {
        let spans = merge(loader.iter().map(|a| (a.start_ns, a.end_ns)).collect());
        idle = spans.iter().map(|&(s, e)| c.idle_between(s, e)).sum();
        let host: i64 = spans.iter().map(|&(s, e)| e - s).sum();
        let mut names: Vec<&str> = loader.iter().map(|a| a.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        evidence.push(format!(
            "{} ({:.1} a {per}): the host in them {} us a {per}, the GPU idle {} us of it",
            names.join(", "),
            ctx.per_step(loader.len() as f64),
            us(ctx.per_step(host as f64)),
            us(ctx.per_step(idle as f64))
        ));
        how = "the GPU's idle time inside the data loader's ranges".into();
    } else {
        if c.windows.is_empty() {
            return None;
        }
        let ops = merge(trace.ops.iter().map(|o| (o.start_ns, o.end_ns)).collect());
        let mut total = 0;
        let mut steps = 0;
        for &(ws, we) in &c.windows {
            let Some(first) = c.next_busy_from(ws).filter(|&t| t < we) else {
                continue;
            };
            let idle_host_free = uncovered(&ops, ws, first).min(c.idle_between(ws, first));
            if idle_host_free >= HOST_GAP_MIN_NS {
                total += idle_host_free;
                steps += 1;
            }
        }
        if steps == 0 || 2 * steps < c.windows.len() {
            return None;
        }
        idle = total;
        evidence.push(format!(
            "{steps} of {} steps start with the GPU idle while the host runs no op (no data \
             loader range recorded): {} us a {per}",
            c.windows.len(),
            us(ctx.per_step(total as f64))
        ));
        how = format!(
            "the GPU's idle time from each step's start to its first kernel while the host ran \
             no op, where at least {} ms (no data loader range was recorded, so this is the \
             host's unrecorded Python work, which loading a batch is the usual part of)",
            HOST_GAP_MIN_NS / 1_000_000
        );
    }
    if idle <= 0 {
        return None;
    }
    // The host-to-device copies of the step: the batch going to the GPU.
    let (mut copies, mut copy_ns) = (0usize, 0i64);
    for op in &trace.ops {
        for r in &op.records {
            if r.class == Class::Memcpy && trace.kernel_names[r.name as usize].contains("HtoD") {
                copies += 1;
                copy_ns += r.dur_ns;
            }
        }
    }
    if copies > 0 {
        evidence.push(format!(
            "{:.1} host-to-device copies a {per}, {} us (pageable or pinned is not recorded)",
            ctx.per_step(copies as f64),
            us(ctx.per_step(copy_ns as f64))
        ));
    }
    let multi = loader.iter().any(|a| a.name.contains("MultiProcessing"));
    let idle = ctx.per_step(idle as f64);
    let mut s = ctx.setting(
        "input-pipeline",
        "the GPU waits on the input at the start of the step -> loader workers, pinned memory",
        idle,
        0.0,
    );
    s.estimate = format!(
        "{how}, all of it: with the next batch loaded ahead by workers (and copied from pinned \
         memory without blocking) the step's first kernel need not wait; at most this much, as \
         the workers must keep up with the step"
    );
    s.evidence = evidence;
    s.change = if multi {
        "DataLoader(..., num_workers=<more>, prefetch_factor=4, pin_memory=True, \
         persistent_workers=True); batch.to(\"cuda\", non_blocking=True)"
            .into()
    } else {
        "DataLoader(..., num_workers=8, pin_memory=True, persistent_workers=True); \
         batch.to(\"cuda\", non_blocking=True)"
            .into()
    };
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{h100, trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::HostSpan;

    fn loader_span(start_ns: i64, end_ns: i64) -> HostSpan {
        HostSpan {
            thread: 0,
            start_ns,
            end_ns,
            name: "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__".into(),
            op: None,
        }
    }

    #[test]
    fn the_gpu_idle_inside_the_loader_is_the_saving() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        // Two steps of 1 ms; the loader runs 300 us at each start, the GPU busy from 200 us
        // into each step.
        t.context.windows = vec![(0, 1_000_000), (1_000_000, 2_000_000)];
        t.context.busy = vec![(200_000, 900_000), (1_200_000, 1_900_000)];
        t.context.annotations = vec![loader_span(0, 300_000), loader_span(1_000_000, 1_300_000)];
        let c = h100();
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 700_000.0,
            ceiling: Some(&c),
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 200_000.0).abs() < 1e-6, "{s:?}");
        assert!(s.change.contains("num_workers") && s.change.contains("pin_memory=True"));
    }

    #[test]
    fn a_loader_the_gpu_does_not_wait_on_says_nothing() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 1, false);
        t.context.windows = vec![(0, 1_000_000)];
        t.context.busy = vec![(0, 1_000_000)];
        t.context.annotations = vec![loader_span(0, 300_000)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 1e6,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }

    #[test]
    fn without_loader_ranges_a_step_start_with_no_host_op_counts_from_a_millisecond() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 1, false);
        // The op runs at 0..5 us; the first kernel starts 1.5 ms into the step.
        t.context.windows = vec![(0, 3_000_000)];
        t.context.busy = vec![(1_500_000, 2_900_000)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 1_400_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 1_495_000.0).abs() < 1e-6, "{s:?}");
        // A first kernel 500 us in is the host's own work between steps, not the input.
        t.context.busy = vec![(500_000, 2_900_000)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 2_400_000.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }

    #[test]
    fn one_slow_step_of_several_is_a_warm_up_not_the_input() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 3, false);
        t.context.windows = vec![
            (0, 3_000_000),
            (3_000_000, 4_000_000),
            (4_000_000, 5_000_000),
        ];
        t.context.busy = vec![
            (1_500_000, 2_900_000),
            (3_020_000, 3_900_000),
            (4_020_000, 4_900_000),
        ];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 1e6,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
