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
//! non-blocking copies) the next batch is ready when the step starts.
//!
//! A third sign, with or without the others: host-to-device copies from pageable memory inside
//! the step. The driver stages such a copy through a pinned buffer of its own, so the copy
//! runs at pageable speed and the host waits for it even with `non_blocking=True`. The model
//! of what pinning saves: each such copy would take `min(recorded, PINNED_LATENCY_NS + bytes /
//! pinned bandwidth)`, the pinned bandwidth being the run's own pinned host-to-device copies of
//! at least [`PINNED_MEASURE_MIN_BYTES`] (bytes over time) where it has them, else
//! [`NOMINAL_PINNED_BYTES_PER_S`]; the saving is the recorded time minus that, added to the
//! idle time above. It leaves out the host's wait that non-blocking copies also remove (the
//! copy then overlaps the host's work), so it is a lower bound on that side.

use fuseprof_analyzer::HostCopy;
use fuseprof_store::MemoryKind;

/// The shortest host gap before a step's first kernel that is taken for the input, where no
/// data loader range says so.
pub(super) const HOST_GAP_MIN_NS: i64 = 1_000_000;

/// Pinned host-to-device bandwidth where the run has no pinned copy large enough to measure
/// it: what a PCIe 4.0 x16 link sustains (PCIe 5.0 hosts reach about twice, so the saving is
/// then understated).
pub(super) const NOMINAL_PINNED_BYTES_PER_S: f64 = 20e9;

/// The smallest pinned copy whose rate is taken for the run's pinned bandwidth: smaller ones
/// are bound by their fixed cost, not by the link.
pub(super) const PINNED_MEASURE_MIN_BYTES: i64 = 256 << 10;

/// The fixed cost of a pinned copy (the copy engine's start), added to its bytes' time.
pub(super) const PINNED_LATENCY_NS: f64 = 2_000.0;

/// The step's pageable host-to-device copies and what pinning them would save.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Pageable {
    pub copies: usize,
    pub time_ns: i64,
    pub bytes: i64,
    /// The pinned bandwidth the model assumes, and whether the run measured it.
    pub pinned_bytes_per_s: f64,
    pub pinned_measured: bool,
    /// The copies' time at that bandwidth.
    pub expected_ns: f64,
}

impl Pageable {
    pub fn saving_ns(&self) -> f64 {
        (self.time_ns as f64 - self.expected_ns).max(0.0)
    }
}

/// The pageable host-to-device copies among `copies`, with the model's expected time.
pub(super) fn pageable(copies: &[HostCopy]) -> Pageable {
    let h2d = |kind| {
        copies
            .iter()
            .filter(move |c| c.to_device && c.host_memory == Some(kind))
    };
    let (mut pinned_bytes, mut pinned_ns) = (0i64, 0i64);
    for c in h2d(MemoryKind::Pinned) {
        if let Some(b) = c.bytes.filter(|&b| b >= PINNED_MEASURE_MIN_BYTES) {
            pinned_bytes += b;
            pinned_ns += c.dur_ns;
        }
    }
    let measured = pinned_bytes > 0 && pinned_ns > 0;
    let bw = if measured {
        pinned_bytes as f64 / (pinned_ns as f64 / 1e9)
    } else {
        NOMINAL_PINNED_BYTES_PER_S
    };
    let mut p = Pageable {
        pinned_bytes_per_s: bw,
        pinned_measured: measured,
        ..Default::default()
    };
    for c in h2d(MemoryKind::Pageable) {
        let bytes = c.bytes.unwrap_or(0).max(0);
        p.copies += 1;
        p.time_ns += c.dur_ns;
        p.bytes += bytes;
        // A copy without its bytes recorded keeps its time: nothing is claimed for it.
        let pinned = if c.bytes.is_some() {
            PINNED_LATENCY_NS + bytes as f64 / bw * 1e9
        } else {
            c.dur_ns as f64
        };
        p.expected_ns += pinned.min(c.dur_ns as f64);
    }
    p
}

use super::{us, Ctx, Finder, Setting};

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
    let copies = pageable(&c.host_copies);
    let copy_saving = copies.saving_ns();
    // The loader's ranges (or the steps' idle starts) and the pageable copies, by step.
    let mut find = Finder::default();
    let (idle, how) = match loader_idle(ctx, &loader, &mut evidence, &mut find) {
        Some(found) => found,
        None if copy_saving > 0.0 => (0, String::new()),
        None => return None,
    };
    if idle <= 0 && copy_saving <= 0.0 {
        return None;
    }
    if copies.copies > 0 {
        let gb_s = |bytes: i64, ns: i64| {
            if ns > 0 {
                bytes as f64 / ns as f64
            } else {
                0.0
            }
        };
        evidence.push(format!(
            "{:.1} host-to-device copies from pageable memory a {per}: {} us, {}, {:.2} GB/s \
             achieved (staged by the driver; the host waits for each)",
            ctx.per_step(copies.copies as f64),
            us(ctx.per_step(copies.time_ns as f64)),
            size(ctx.per_step(copies.bytes as f64)),
            gb_s(copies.bytes, copies.time_ns)
        ));
    }
    let (mut pinned, mut pinned_ns, mut unknown, mut unknown_ns) = (0usize, 0i64, 0usize, 0i64);
    for h in c.host_copies.iter().filter(|h| h.to_device) {
        match h.host_memory {
            Some(MemoryKind::Pinned) => (pinned, pinned_ns) = (pinned + 1, pinned_ns + h.dur_ns),
            Some(_) => {}
            None => (unknown, unknown_ns) = (unknown + 1, unknown_ns + h.dur_ns),
        }
    }
    if pinned > 0 {
        evidence.push(format!(
            "{:.1} host-to-device copies from pinned memory a {per}: {} us",
            ctx.per_step(pinned as f64),
            us(ctx.per_step(pinned_ns as f64))
        ));
    }
    if unknown > 0 {
        evidence.push(format!(
            "{:.1} host-to-device copies a {per}, {} us (pageable or pinned is not recorded)",
            ctx.per_step(unknown as f64),
            us(ctx.per_step(unknown_ns as f64))
        ));
    }
    let multi = loader.iter().any(|a| a.name.contains("MultiProcessing"));
    let saving = ctx.per_step(idle as f64 + copy_saving);
    let copy_model = format!(
        "the pageable copies at {:.1} GB/s pinned ({}) plus {} us each: {} us a {per} instead \
         of {} us (the host's wait that non-blocking copies also remove is not counted)",
        copies.pinned_bytes_per_s / 1e9,
        if copies.pinned_measured {
            "the run's own pinned copies"
        } else {
            "nominal, PCIe 4.0 x16; the run has no pinned copy to measure"
        },
        PINNED_LATENCY_NS / 1e3,
        us(ctx.per_step(copies.expected_ns)),
        us(ctx.per_step(copies.time_ns as f64))
    );
    let title = if idle > 0 {
        "the GPU waits on the input at the start of the step -> loader workers, pinned memory"
    } else {
        "host-to-device copies from pageable memory -> pin_memory=True, non_blocking=True"
    };
    // The copies count in the current time only where pinning them would save something.
    let copies_now = if copy_saving > 0.0 { copies.time_ns } else { 0 };
    if copies_now > 0 {
        for h in c
            .host_copies
            .iter()
            .filter(|h| h.to_device && h.host_memory == Some(MemoryKind::Pageable))
        {
            find.at_time(ctx, h.start_ns, h.dur_ns as f64);
            find.kernel(PAGEABLE_COPY, h.dur_ns);
        }
    }
    let current = ctx.per_step((idle + copies_now) as f64);
    let mut s = ctx.setting("input-pipeline", title, current, current - saving);
    // Idle time and host-blocking copies: a share of the step's wall time, which holds them.
    s.of_wall_time(ctx);
    s.estimate = match (idle > 0, copy_saving > 0.0) {
        (true, false) => format!(
            "{how}, all of it: with the next batch loaded ahead by workers (and copied from \
             pinned memory without blocking) the step's first kernel need not wait; at most this \
             much, as the workers must keep up with the step"
        ),
        (true, true) => format!(
            "{how}, all of it (at most this much, as the workers must keep up with the step), \
             and {copy_model}"
        ),
        _ => format!("{copy_model}; pinned memory makes them direct DMA"),
    };
    s.evidence = evidence;
    s.change = if idle <= 0 {
        "DataLoader(..., pin_memory=True); batch.to(\"cuda\", non_blocking=True)  # or \
         tensor.pin_memory() for tensors made outside a DataLoader"
            .into()
    } else if multi {
        "DataLoader(..., num_workers=<more>, prefetch_factor=4, pin_memory=True, \
         persistent_workers=True); batch.to(\"cuda\", non_blocking=True)"
            .into()
    } else {
        "DataLoader(..., num_workers=8, pin_memory=True, persistent_workers=True); \
         batch.to(\"cuda\", non_blocking=True)"
            .into()
    };
    find.fill(ctx, &mut s);
    Some(s)
}

/// A host-to-device copy from pageable memory as PyTorch's profiler names it (Perfetto finds
/// fuseprof's export and Nsight's `Memcpy HtoD` by its start).
const PAGEABLE_COPY: &str = "Memcpy HtoD (Pageable -> Device)";

/// Bytes in MB from one, else in KB.
fn size(bytes: f64) -> String {
    if bytes >= 1e6 {
        format!("{:.2} MB", bytes / 1e6)
    } else {
        format!("{:.1} KB", bytes / 1e3)
    }
}

/// The GPU's idle time the data loader accounts for (run-wide), and how it was found; `None`
/// where neither sign is in the trace. Pushes its evidence.
fn loader_idle(
    ctx: &Ctx,
    loader: &[&fuseprof_analyzer::HostSpan],
    evidence: &mut Vec<String>,
    find: &mut Finder,
) -> Option<(i64, String)> {
    let trace = ctx.trace;
    let c = &trace.context;
    let per = ctx.per();
    let idle: i64;
    let how: String;
    if !loader.is_empty() {
        let spans = merge(loader.iter().map(|a| (a.start_ns, a.end_ns)).collect());
        idle = spans.iter().map(|&(s, e)| c.idle_between(s, e)).sum();
        for &(s, e) in &spans {
            find.at_time(ctx, s, c.idle_between(s, e) as f64);
        }
        for a in loader {
            find.op(&a.name, a.end_ns - a.start_ns);
        }
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
        let mut idle_starts = Vec::new();
        for &(ws, we) in &c.windows {
            let Some(first) = c.next_busy_from(ws).filter(|&t| t < we) else {
                continue;
            };
            let idle_host_free = uncovered(&ops, ws, first).min(c.idle_between(ws, first));
            if idle_host_free >= HOST_GAP_MIN_NS {
                total += idle_host_free;
                steps += 1;
                idle_starts.push((ws, idle_host_free));
            }
        }
        if steps == 0 || 2 * steps < c.windows.len() {
            return None;
        }
        idle = total;
        for (ws, ns) in idle_starts {
            find.at_time(ctx, ws, ns as f64);
        }
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
    (idle > 0).then_some((idle, how))
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
            step_wall_ns: 1_000_000.0,
            ceiling: Some(&c),
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 200_000.0).abs() < 1e-6, "{s:?}");
        // The loader's idle time: 20% of the step's 1 ms of wall time (29% of its GPU time).
        assert_eq!(s.pct_of, "wall_time");
        assert!((s.saving_pct_of_step - 20.0).abs() < 1e-9, "{s:?}");
        assert!(s.change.contains("num_workers") && s.change.contains("pin_memory=True"));
    }

    #[test]
    fn the_step_whose_loader_leaves_the_gpu_idle_longest_is_where_to_look() {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 3, false);
        // Three steps of 1 ms; the GPU starts 200, 450 and 100 us into them, the loader
        // running 500 us at each start: step 1 waits longest, 450 us.
        t.context.windows = vec![
            (0, 1_000_000),
            (1_000_000, 2_000_000),
            (2_000_000, 3_000_000),
        ];
        t.context.busy = vec![
            (200_000, 900_000),
            (1_450_000, 1_900_000),
            (2_100_000, 2_900_000),
        ];
        t.context.annotations = vec![
            loader_span(0, 500_000),
            loader_span(1_000_000, 1_500_000),
            loader_span(2_000_000, 2_500_000),
        ];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 700_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        let w = s.worst_step.unwrap();
        assert_eq!((w.step, w.start_ns, w.end_ns), (1, 1_000_000, 2_000_000));
        assert!((w.start_ms - 1.0).abs() < 1e-12 && (w.end_ms - 2.0).abs() < 1e-12);
        assert!((w.symptom_ns - 450_000.0).abs() < 1e-9);
        assert_eq!(
            s.ops,
            ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
        );
        assert!(s.kernels.is_empty(), "{:?}", s.kernels);
    }

    fn copy(start_ns: i64, dur_ns: i64, bytes: i64, host: MemoryKind) -> HostCopy {
        HostCopy {
            start_ns,
            dur_ns,
            bytes: Some(bytes),
            to_device: true,
            host_memory: Some(host),
        }
    }

    /// Two steps, each copying a 48 MB batch from pageable memory at 6 GB/s (8 ms), the GPU
    /// busy the whole step: no idle time, only the copies.
    fn pageable_steps(host: MemoryKind) -> fuseprof_analyzer::OpTrace {
        let mut t = trace(&[Op("aten::relu", "[[8]]", "", vec![])], 2, false);
        t.context.windows = vec![(0, 20_000_000), (20_000_000, 40_000_000)];
        t.context.busy = vec![(0, 40_000_000)];
        t.context.host_copies = vec![
            copy(1_000_000, 8_000_000, 48_000_000, host),
            copy(21_000_000, 8_000_000, 48_000_000, host),
        ];
        t
    }

    #[test]
    fn pageable_copies_in_the_step_are_priced_at_pinned_bandwidth() {
        let t = pageable_steps(MemoryKind::Pageable);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 20e6,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        // Nominal 20 GB/s: 48 MB in 2.4 ms, plus 2 us; 8 ms recorded.
        let expected = 2_400_000.0 + PINNED_LATENCY_NS;
        assert!((s.current_ns_per_step - 8e6).abs() < 1e-6, "{s:?}");
        assert!((s.expected_ns_per_step - expected).abs() < 1e-3, "{s:?}");
        assert!((s.saving_ns_per_step - (8e6 - expected)).abs() < 1e-3);
        assert!(s.title.contains("pageable"), "{}", s.title);
        assert!(s.change.contains("pin_memory=True") && s.change.contains("non_blocking=True"));
        assert!(
            !s.change.contains("num_workers"),
            "no loader idle: {}",
            s.change
        );
        let ev = s.evidence.join("\n");
        assert!(ev.contains("48.00 MB") && ev.contains("6.00 GB/s"), "{ev}");
        assert!(s.estimate.contains("nominal"), "{}", s.estimate);
    }

    #[test]
    fn pinned_copies_say_nothing() {
        let t = pageable_steps(MemoryKind::Pinned);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 20e6,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }

    #[test]
    fn the_runs_own_pinned_copies_give_the_bandwidth_and_small_ones_do_not() {
        let mut copies = vec![
            // 1 MB pinned in 100 us: 10 GB/s measured.
            copy(0, 100_000, 1_000_000, MemoryKind::Pinned),
            // A small pinned copy is latency-bound: left out of the measure.
            copy(0, 50_000, 1_000, MemoryKind::Pinned),
            // 10 MB pageable in 4 ms: 1 ms + 2 us at 10 GB/s.
            copy(0, 4_000_000, 10_000_000, MemoryKind::Pageable),
            // 8 bytes in 1 us: faster than the model's fixed cost, kept as recorded.
            copy(0, 1_000, 8, MemoryKind::Pageable),
        ];
        // Device-to-host copies from pageable memory are not the input's.
        copies.push(HostCopy {
            to_device: false,
            ..copy(0, 9_000_000, 10_000_000, MemoryKind::Pageable)
        });
        let p = pageable(&copies);
        assert!(p.pinned_measured);
        assert!((p.pinned_bytes_per_s - 10e9).abs() < 1.0);
        assert_eq!((p.copies, p.time_ns, p.bytes), (2, 4_001_000, 10_000_008));
        assert!(
            (p.expected_ns - (1_002_000.0 + 1_000.0)).abs() < 1e-3,
            "{p:?}"
        );
        assert!((p.saving_ns() - 2_998_000.0).abs() < 1e-3);
        // A copy whose bytes are not recorded claims nothing.
        let p = pageable(&[HostCopy {
            bytes: None,
            ..copy(0, 4_000_000, 0, MemoryKind::Pageable)
        }]);
        assert_eq!(p.saving_ns(), 0.0);
    }

    #[test]
    fn loader_idle_and_pageable_copies_add_up() {
        let mut t = pageable_steps(MemoryKind::Pageable);
        // The loader runs 300 us at each step's start with the GPU idle.
        t.context.busy = vec![(300_000, 20_000_000), (20_300_000, 40_000_000)];
        t.context.annotations = vec![loader_span(0, 300_000), loader_span(20_000_000, 20_300_000)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 19.7e6,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        let copies = 8e6 - (2_400_000.0 + PINNED_LATENCY_NS);
        assert!(
            (s.saving_ns_per_step - (300_000.0 + copies)).abs() < 1e-3,
            "{s:?}"
        );
        assert!(s.change.contains("num_workers"));
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
            step_wall_ns: 0.0,
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
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 1_495_000.0).abs() < 1e-6, "{s:?}");
        // A first kernel 500 us in is the host's own work between steps, not the input.
        t.context.busy = vec![(500_000, 2_900_000)];
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 2_400_000.0,
            step_wall_ns: 0.0,
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
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
