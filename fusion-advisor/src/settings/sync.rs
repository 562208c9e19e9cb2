//! Calls inside the step that make the host wait for the GPU (`cudaStreamSynchronize` under
//! `.item()`, `.cpu()`, `nonzero`, a blocking copy; `cudaDeviceSynchronize` from
//! `torch.cuda.synchronize()`). While the host waits, the GPU drains its queue; once the call
//! returns, the GPU stays idle until the host has launched the next kernel. That idle time,
//! from the call's end to the GPU's next work (within the call's step), is what the call costs;
//! a call that returns while the GPU still has work queued costs nothing here.

use std::collections::BTreeMap;

use super::{base, us, Ctx, Finder, Setting};

/// The change that removes a synchronising call made inside `op` (None: outside any op, a
/// direct `torch.cuda.synchronize()` or the like).
fn change_for(op: Option<&str>) -> &'static str {
    match op.map(base) {
        Some("item" | "_local_scalar_dense" | "is_nonzero") => {
            "keep the value on the GPU: no .item() / float(t) / if t: inside the step (log it \
             every N steps, or accumulate on the GPU)"
        }
        Some(
            "nonzero" | "masked_select" | "unique" | "_unique2" | "repeat_interleave" | "index"
            | "bincount",
        ) => {
            "an op with a shape known ahead (torch.where(mask, x, 0), masked_fill) instead of \
             nonzero / boolean indexing, whose output size the host must read back"
        }
        Some("to" | "_to_copy" | "copy_" | "cpu" | "contiguous") => {
            "x.to(\"cuda\", non_blocking=True) from pinned memory (DataLoader(pin_memory=True)); \
             read results back with .cpu() after the step, not inside it"
        }
        Some(_) => "move the call that reads a GPU value on the host out of the step",
        None => "remove torch.cuda.synchronize() (or stream/event .synchronize()) from the step",
    }
}

/// The synchronising calls inside the steps, by the call and the op that made it.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let c = &trace.context;
    let per = ctx.per();
    // (call, op) -> (calls, GPU idle after them).
    let mut groups: BTreeMap<(String, Option<String>), (usize, i64)> = BTreeMap::new();
    // The calls and the ops that made them, by step; the idle after each is its cost.
    let mut find = Finder::default();
    for s in &c.syncs {
        // Inside a step (or anywhere in a run without steps).
        let bound = if c.windows.is_empty() {
            i64::MAX
        } else {
            match c.window_at(s.end_ns) {
                Some((_, we)) => we,
                None => continue,
            }
        };
        let Some(next) = c.next_busy_from(s.end_ns) else {
            continue;
        };
        // Busy at the call's end: the GPU had work queued and did not wait on the host.
        let idle = next.min(bound) - s.end_ns;
        if idle <= 0 {
            continue;
        }
        let g = groups.entry((s.name.clone(), s.op.clone())).or_default();
        g.0 += 1;
        g.1 += idle;
        find.at_time(ctx, s.end_ns, idle as f64);
        find.op(&s.name, idle);
        if let Some(op) = &s.op {
            find.op(op, idle);
        }
    }
    let total: i64 = groups.values().map(|g| g.1).sum();
    if total <= 0 {
        return None;
    }
    let mut rows: Vec<_> = groups.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(&b.0)));
    let current = ctx.per_step(total as f64);
    let ((top_call, top_op), _) = &rows[0];
    let mut s = ctx.setting(
        "sync-in-step",
        &format!(
            "{top_call}{} inside the step leaves the GPU idle -> {}",
            top_op
                .as_deref()
                .map(|o| format!(" (in {o})"))
                .unwrap_or_default(),
            "take it out of the step"
        ),
        current,
        0.0,
    );
    // The GPU's idle time: a share of the step's wall time, which holds it.
    s.of_wall_time(ctx);
    s.evidence = rows
        .iter()
        .map(|((call, op), (n, idle))| {
            format!(
                "{call} in {}: {:.1} a {per}, the GPU idle {} us a {per} after them",
                op.as_deref().unwrap_or("no op (Python code)"),
                ctx.per_step(*n as f64),
                us(ctx.per_step(*idle as f64))
            )
        })
        .collect();
    s.estimate = "the GPU's idle time from each synchronising call's end to its next kernel, \
                  within the call's step: without the call the host would have queued that \
                  work while the GPU ran the work before it"
        .into();
    s.change = format!("{}: {}", top_call, change_for(top_op.as_deref()));
    find.fill(ctx, &mut s);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::HostSpan;

    fn sync(end_ns: i64, op: Option<&str>) -> HostSpan {
        HostSpan {
            thread: 0,
            start_ns: end_ns - 50_000,
            end_ns,
            name: "cudaStreamSynchronize".into(),
            op: op.map(Into::into),
        }
    }

    #[test]
    fn an_item_that_drains_the_queue_costs_the_idle_after_it() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 1, false);
        t.context.windows = vec![(0, 1_000_000)];
        // The GPU is busy to 400 us; .item() returns at 410 us; the next kernel at 480 us.
        t.context.busy = vec![(0, 400_000), (480_000, 900_000)];
        t.context.syncs = vec![sync(410_000, Some("aten::item"))];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 820_000.0,
            step_wall_ns: 1_000_000.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 70_000.0).abs() < 1e-6, "{s:?}");
        // Idle time, a share of the step's wall time (70 us of 1 ms), not of its GPU time.
        assert_eq!(s.pct_of, "wall_time");
        assert!((s.saving_pct_of_step - 7.0).abs() < 1e-9, "{s:?}");
        assert!(s
            .change
            .starts_with("cudaStreamSynchronize: keep the value on the GPU"));
        assert!(s.evidence[0].contains("aten::item"), "{:?}", s.evidence);
    }

    #[test]
    fn the_step_with_the_longest_idle_after_its_syncs_is_where_to_look() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.windows = vec![(0, 1_000_000), (1_000_000, 2_000_000)];
        // Step 0: .item() at 410 us, next kernel at 480 us (70 us idle); step 1: a device
        // synchronize at 1300 us, next kernel at 1420 us (120 us idle).
        t.context.busy = vec![(0, 400_000), (480_000, 1_250_000), (1_420_000, 1_900_000)];
        let mut device = sync(1_300_000, None);
        device.name = "cudaDeviceSynchronize".into();
        t.context.syncs = vec![sync(410_000, Some("aten::item")), device];
        t.context.origin_ns = 500_000;
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 1_000_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        let w = s.worst_step.as_ref().unwrap();
        assert_eq!((w.step, w.start_ns, w.end_ns), (1, 1_000_000, 2_000_000));
        assert!((w.start_ms - 0.5).abs() < 1e-12 && (w.end_ms - 1.5).abs() < 1e-12);
        assert!((w.symptom_ns - 120_000.0).abs() < 1e-9);
        // The calls and the op that made one, by the idle after them.
        assert_eq!(
            s.ops,
            [
                "cudaDeviceSynchronize",
                "aten::item",
                "cudaStreamSynchronize"
            ]
        );
    }

    #[test]
    fn a_sync_the_gpu_never_waits_after_or_outside_the_steps_says_nothing() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 1, false);
        t.context.windows = vec![(0, 1_000_000)];
        t.context.busy = vec![(0, 900_000)];
        // Returns while the GPU is busy; and one after the step.
        t.context.syncs = vec![sync(410_000, Some("aten::item")), sync(1_100_000, None)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 900_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
