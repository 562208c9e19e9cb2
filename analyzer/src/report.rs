//! Text tables for a terminal of 100 columns.

use std::fmt::Write;

use crate::{Analysis, AnalyzeConfig, GroupBy, StepSource};

pub(crate) const WIDTH: usize = 100;

/// Milliseconds with three decimals.
pub(crate) fn ms(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

pub(crate) fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

/// Thousands separators: 1,234,567.
pub(crate) fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Shortens `s` to `width` characters, keeping its start and end.
pub(crate) fn fit(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    let keep = width.saturating_sub(3);
    let head = keep * 2 / 3;
    let tail = keep - head;
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start}...{end}")
}

/// A C++ kernel name without what rarely tells kernels apart: `void`, the `at::native::` and
/// anonymous namespaces, and the trailing parameter list. Text output only; JSON keeps names.
pub(crate) fn short_kernel_name(name: &str) -> String {
    let mut s = name.strip_prefix("void ").unwrap_or(name).to_string();
    for noise in [
        "at::native::",
        "(anonymous namespace)::",
        "<unnamed>::",
        "at_cuda_detail::",
    ] {
        s = s.replace(noise, "");
    }
    // Drop the parameter list: the last top-level "(...)".
    if s.ends_with(')') {
        let mut depth = 0i32;
        for (i, c) in s.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        if i > 0 {
                            s.truncate(i);
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    s
}

/// Shortens `s` to `width` characters keeping its start: for op + shapes labels, whose first
/// dims tell rows apart.
pub(crate) fn fit_head(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let head: String = s.chars().take(width.saturating_sub(3)).collect();
    format!("{head}...")
}

fn rate(bytes_per_s: f64) -> String {
    if bytes_per_s >= 1e12 {
        format!("{:.2}T", bytes_per_s / 1e12)
    } else {
        format!("{:.0}G", bytes_per_s / 1e9)
    }
}

/// The tables `fuseprof analyze` prints: a summary, steps, the time between launches, the
/// `--by` table, the class table and the headroom table, each cut to `--top` rows.
pub fn render_text(a: &Analysis, cfg: &AnalyzeConfig) -> String {
    let mut o = String::new();
    let t = &a.totals;
    let top = cfg.top.max(1);
    let header = format!(
        "{} ({}{}), {} device{}",
        a.run.file,
        a.run.source_format,
        a.run
            .tool
            .as_deref()
            .map(|t| format!(", {t}"))
            .unwrap_or_default(),
        a.run.devices.len(),
        if a.run.devices.len() == 1 { "" } else { "s" }
    );
    wrap(&mut o, &header, "", "  ");
    match a.step {
        Some(k) => {
            let _ = writeln!(o, "scope: step {k} of {}", a.steps.steps.len());
        }
        None => {
            let _ = writeln!(o, "scope: whole run");
        }
    }
    let _ = writeln!(o, "GPU time {} ms", ms(t.gpu_ns));
    let _ = writeln!(
        o,
        "  kernels {} ms ({}), copies {} ms ({}), fills {} ms ({})",
        ms(t.kernel_ns),
        count(t.kernels),
        ms(t.memcpy_ns),
        count(t.memcpys),
        ms(t.memset_ns),
        count(t.memsets),
    );
    let _ = writeln!(
        o,
        "  launches {}; kernels in CUDA graphs {}",
        count(t.launches),
        count(t.graph_kernels)
    );
    let u = &a.unattributed;
    let _ = writeln!(
        o,
        "  attributed to ranges {} ms ({:.1}%)",
        ms(t.attributed_ns),
        crate::pct(t.attributed_ns, t.gpu_ns),
    );
    let _ = writeln!(
        o,
        "  outside any range {} ms in {} records ({} no launch record, {} outside ranges)",
        ms(u.ns),
        count(u.records),
        count(u.no_launch_record),
        count(u.outside_ranges),
    );

    // Steps.
    let s = &a.steps;
    o.push('\n');
    match (s.source, &s.gpu) {
        (StepSource::None, _) | (_, None) => {
            let _ = writeln!(
                o,
                "Steps: none found (no step annotation, no model call or optimizer step, no \
                 periodic op sequence)"
            );
        }
        (source, Some(g)) => {
            let what = match source {
                StepSource::Annotation => {
                    format!("annotation {}", s.name.as_deref().unwrap_or("?"))
                }
                StepSource::Calls => s.name.clone().unwrap_or_default(),
                _ => format!(
                    "period of {} top-level ops",
                    s.period_ops.unwrap_or_default()
                ),
            };
            let _ = writeln!(o, "Steps: {} ({what})", s.steps.len());
            let _ = writeln!(
                o,
                "  GPU ms per step: mean {}, median {}, min {}, max {}, cv {:.1}%",
                ms(g.mean_ns as i64),
                ms(g.median_ns as i64),
                ms(g.min_ns),
                ms(g.max_ns),
                g.cv_pct
            );
            let _ = writeln!(
                o,
                "  {:>5} {:>12} {:>12} {:>10} {:>10}",
                "step", "wall ms", "GPU ms", "records", "launches"
            );
            for r in s.steps.iter().take(top) {
                let _ = writeln!(
                    o,
                    "  {:>5} {:>12} {:>12} {:>10} {:>10}",
                    r.index,
                    ms(r.wall_ns),
                    ms(r.gpu_ns),
                    count(r.records),
                    count(r.launches)
                );
            }
            if s.steps.len() > top {
                let _ = writeln!(o, "  ... {} more", s.steps.len() - top);
            }
        }
    }

    // Between launches.
    o.push('\n');
    let _ = writeln!(
        o,
        "Between launches (idle GPU; lb = launch-bound runs: kernels shorter than a <100 us gap before)"
    );
    let _ = writeln!(
        o,
        "  {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>6} {:>9} {:>9}",
        "device",
        "span ms",
        "busy ms",
        "idle ms",
        "overlap",
        "<10us",
        "<100us",
        "<1ms",
        ">=1ms",
        "lb runs",
        "lb ms"
    );
    for d in &a.timeline {
        let _ = writeln!(
            o,
            "  {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>6} {:>9} {:>9}",
            d.device,
            ms(d.span_ns),
            ms(d.busy_ns),
            ms(d.idle_ns),
            ms(d.overlap_ns),
            count(d.gap_counts[0]),
            count(d.gap_counts[1]),
            count(d.gap_counts[2]),
            count(d.gap_counts[3]),
            count(d.launch_bound_stretches),
            ms(d.launch_bound_ns)
        );
    }

    if !a.host_copies.rows.is_empty() {
        o.push('\n');
        copies_table(&mut o, &a.host_copies);
    }

    o.push('\n');
    match cfg.by {
        GroupBy::Op => ops_table(&mut o, a, top),
        GroupBy::Shape => shape_table(&mut o, a, top),
        GroupBy::Module => module_table(&mut o, a, top),
        GroupBy::Kernel => {
            kernel_table(&mut o, a, top);
            measured_table(&mut o, a, top);
        }
        GroupBy::Class => {}
    }
    if cfg.by != GroupBy::Class {
        o.push('\n');
    }
    class_table(&mut o, a);
    o.push('\n');
    headroom_table(&mut o, a, top);
    if let Some(f) = &a.floor {
        o.push('\n');
        floor_table(&mut o, f, top);
    }
    if let Some(r) = &a.ranks {
        o.push('\n');
        ranks_tables(&mut o, r, top);
    }
    if !a.notes.is_empty() {
        o.push('\n');
        let _ = writeln!(o, "Notes");
        for n in &a.notes {
            wrap(&mut o, n, "  - ", "    ");
        }
    }
    o
}

fn copies_table(o: &mut String, c: &crate::copies::HostCopies) {
    let _ = writeln!(
        o,
        "Host<->device copies (by host memory; sync = the host waited for the copy)"
    );
    let per = if c.steps > 0 { "/step" } else { "" };
    let _ = writeln!(
        o,
        "  {:<5} {:<9} {:>8} {:>10} {:>11} {:>9} {:>9} {:>11} {:>7}",
        "dir",
        "host",
        "count",
        "ms",
        "bytes",
        "GB/s",
        "in steps",
        format!("us{per}"),
        "sync"
    );
    for r in &c.rows {
        let _ = writeln!(
            o,
            "  {:<5} {:<9} {:>8} {:>10} {:>11} {:>9.2} {:>9} {:>11} {:>7}{}",
            r.direction,
            r.host_memory,
            count(r.count),
            ms(r.ns),
            count(r.bytes.max(0) as u64),
            r.bytes_per_s / 1e9,
            count(r.in_steps),
            us(r.ns_per_step),
            r.synchronous.map_or("-".into(), count),
            if r.flagged { " *" } else { "" }
        );
    }
    if c.rows.iter().any(|r| r.flagged) {
        wrap(
            o,
            "* pageable host-to-device copies inside the step made the host wait: the driver \
             stages them through a pinned buffer. Pin the source (DataLoader(pin_memory=True) \
             or tensor.pin_memory()) and copy with non_blocking=True.",
            "  ",
            "  ",
        );
    }
}

/// Writes `text` word-wrapped to the terminal width.
pub(crate) fn wrap(o: &mut String, text: &str, first: &str, rest: &str) {
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            let _ = writeln!(o, "{line}");
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    let _ = writeln!(o, "{line}");
}

fn title(o: &mut String, what: &str, shown: usize, all: usize) {
    let _ = writeln!(o, "{what} (top {} of {})", shown.min(all), all);
}

fn ops_table(o: &mut String, a: &Analysis, top: usize) {
    title(o, "By op type, ranked by self GPU time", top, a.by_op.len());
    let name_w = WIDTH - 2 - 67;
    let _ = writeln!(
        o,
        "  {:<name_w$} {:>10} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9}",
        "op", "self ms", "%", "total ms", "inst", "kernels", "mean us", "gap ms"
    );
    for r in a.by_op.iter().take(top) {
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>10} {:>6.2} {:>10} {:>8} {:>8} {:>8} {:>9}",
            fit(&r.name, name_w),
            ms(r.self_ns),
            r.pct,
            ms(r.total_ns),
            count(r.instances),
            count(r.kernels),
            us(r.mean_self_ns),
            ms(r.gap_before_ns)
        );
    }
}

fn shape_table(o: &mut String, a: &Analysis, top: usize) {
    title(
        o,
        "By op type and input shapes, ranked by self GPU time",
        top,
        a.by_shape.len(),
    );
    let name_w = WIDTH - 2 - 48;
    let _ = writeln!(
        o,
        "  {:<name_w$} {:>10} {:>6} {:>8} {:>8} {:>11}",
        "op [shapes] (dtypes)", "self ms", "%", "inst", "kernels", "mean us"
    );
    for r in a.by_shape.iter().take(top) {
        let mut label = r.name.clone();
        if let Some(d) = &r.dims {
            label.push(' ');
            label.push_str(d);
        }
        if let Some(t) = &r.dtypes {
            label.push(' ');
            label.push_str(&t.replace("c10::", "").replace('"', ""));
        }
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>10} {:>6.2} {:>8} {:>8} {:>11}",
            fit_head(&label, name_w),
            ms(r.self_ns),
            r.pct,
            count(r.instances),
            count(r.kernels),
            us(r.mean_self_ns)
        );
    }
}

fn module_table(o: &mut String, a: &Analysis, top: usize) {
    title(
        o,
        "By module, ranked by total GPU time",
        top,
        a.by_module.len(),
    );
    let name_w = WIDTH - 2 - 50;
    let _ = writeln!(
        o,
        "  {:<name_w$} {:>11} {:>11} {:>6} {:>8} {:>8}",
        "module path", "total ms", "self ms", "%", "kernels", "launches"
    );
    for r in a.by_module.iter().take(top) {
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>11} {:>11} {:>6.2} {:>8} {:>8}",
            fit(&r.path, name_w),
            ms(r.total_ns),
            ms(r.self_ns),
            r.pct,
            count(r.kernels),
            count(r.launches)
        );
    }
}

fn kernel_table(o: &mut String, a: &Analysis, top: usize) {
    title(o, "By kernel, ranked by GPU time", top, a.by_kernel.len());
    let name_w = WIDTH - 2 - 62;
    let _ = writeln!(
        o,
        "  {:<name_w$} {:>13} {:>10} {:>6} {:>8} {:>9} {:>9}",
        "kernel", "class", "total ms", "%", "count", "mean us", "max us"
    );
    for r in a.by_kernel.iter().take(top) {
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>13} {:>10} {:>6.2} {:>8} {:>9} {:>9}",
            fit(&short_kernel_name(&r.name), name_w),
            r.class.as_str(),
            ms(r.total_ns),
            r.pct,
            count(r.count),
            us(r.mean_ns),
            us(r.max_ns as f64)
        );
    }
}

/// The kernels' measured DRAM traffic and tensor-pipe activity (`collect --metrics`).
fn measured_table(o: &mut String, a: &Analysis, top: usize) {
    let Some(m) = &a.measured else { return };
    let _ = writeln!(
        o,
        "\nMeasured by hardware counters ({}; {} kernels, {} shared with concurrent work, {} \
         estimated from samples longer than the kernel)",
        m.quantities.join(", "),
        m.kernels,
        m.shared,
        m.estimated
    );
    let name_w = WIDTH - 2 - 52;
    let _ = writeln!(
        o,
        "  {:<name_w$} {:>10} {:>10} {:>10} {:>8} {:>9}",
        "kernel", "total ms", "DRAM MB", "GB/s", "% peak", "tensor %"
    );
    let opt = |v: Option<f64>, scale: f64, prec: usize| {
        v.map_or("-".to_string(), |x| format!("{:.prec$}", x / scale))
    };
    for r in m.by_kernel.iter().take(top) {
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>10} {:>10} {:>10} {:>8} {:>9}",
            fit(&short_kernel_name(&r.name), name_w),
            ms(r.gpu_ns),
            opt(r.dram_bytes, 1e6, 1),
            opt(r.achieved_bytes_per_s, 1e9, 1),
            opt(r.bandwidth_pct_of_peak, 1.0, 1),
            opt(r.tensor_pipe_pct, 1.0, 1)
        );
    }
}

fn class_table(o: &mut String, a: &Analysis) {
    let _ = writeln!(o, "By kernel class");
    let _ = writeln!(
        o,
        "  {:<14} {:>12} {:>7} {:>10} {:>10} {:>12}",
        "class", "total ms", "%", "count", "mean us", "gap ms"
    );
    for r in &a.by_class {
        let _ = writeln!(
            o,
            "  {:<14} {:>12} {:>7.2} {:>10} {:>10} {:>12}",
            r.class.as_str(),
            ms(r.total_ns),
            r.pct,
            count(r.count),
            us(r.mean_ns),
            ms(r.gap_before_ns)
        );
    }
}

fn headroom_table(o: &mut String, a: &Analysis, top: usize) {
    let h = &a.headroom;
    if h.ceilings.is_empty() {
        let _ = writeln!(o, "Headroom: no device ceilings known (see notes)");
        return;
    }
    let _ = writeln!(
        o,
        "Headroom: {} ms of GPU time has estimates from shapes; at the ceilings it would take {} ms",
        ms(h.covered_ns),
        ms(h.floor_ns),
    );
    let _ = writeln!(o, "  time above the ceilings: {} ms", ms(h.headroom_ns));
    for c in &h.ceilings {
        let line = format!(
            "device {}: {} B/s, {:.0} TFLOP/s 16-bit ({})",
            c.device,
            rate(c.mem_bytes_per_s),
            c.flops_16bit_per_s / 1e12,
            c.source
        );
        wrap(o, &line, "  ", "    ");
    }
    if h.rows.is_empty() {
        return;
    }
    title(
        o,
        "  Ops ranked by time above the ceiling",
        top,
        h.rows.len(),
    );
    let name_w = WIDTH - 2 - 57;
    let _ = writeln!(
        o,
        "  {:<name_w$} {:>10} {:>9} {:>10} {:>6} {:>6} {:>7}",
        "op [shapes]", "GPU ms", "floor ms", "above ms", "BW %", "FLOP%", "bound"
    );
    for r in h.rows.iter().take(top) {
        let label = match &r.dims {
            Some(d) => format!("{} {d}", r.name),
            None => r.name.clone(),
        };
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>10} {:>9} {:>10} {:>6.1} {:>6} {:>7}",
            fit_head(&label, name_w),
            ms(r.gpu_ns),
            ms(r.floor_ns),
            ms(r.headroom_ns),
            r.bandwidth_pct,
            r.flops_pct.map_or("-".into(), |f| format!("{f:.1}")),
            r.bound
        );
    }
}

/// The step's floor (`floor.rs`): the figures, what was left out, and the gap's holders.
fn floor_table(o: &mut String, f: &crate::floor::StepFloor, top: usize) {
    let per = if f.steps == 0 { "per run" } else { "per step" };
    let mb = |b: f64| format!("{:.1}", b / 1e6);
    let line = format!(
        "Step floor (fully fused, at the ceilings; model in analyzer/JSON.md), {per} over {} \
         step(s): {} ms ({}-bound: FLOPs {} ms, fused bytes {} ms); {:.1} GFLOP, {} MB fused of \
         {} MB unfused",
        f.steps,
        ms_f(f.floor_ns),
        f.bound,
        ms_f(f.compute_ns),
        ms_f(f.memory_ns),
        f.flops / 1e9,
        mb(f.fused_bytes),
        mb(f.unfused_bytes),
    );
    wrap(o, &line, "", "  ");
    let l = &f.left_out;
    match f.fraction {
        Some(x) => {
            let _ = writeln!(
                o,
                "  measured {} ms {per}: floor / measured = {:.1}%",
                ms_f(f.measured_ns),
                x * 100.0
            );
        }
        None => {
            let mut parts = Vec::new();
            if l.no_shapes_ops > 0.0 {
                parts.push(format!(
                    "{} ops without shapes ({} ms)",
                    count_f(l.no_shapes_ops),
                    ms_f(l.no_shapes_ns)
                ));
            }
            if l.no_model_ops > 0.0 {
                parts.push(format!(
                    "{} ops the model does not cover ({} ms: {})",
                    count_f(l.no_model_ops),
                    ms_f(l.no_model_ns),
                    l.no_model_names.join(", ")
                ));
            }
            if l.outside_ops_ns > 0.0 {
                parts.push(format!(
                    "{} ms launched outside ops",
                    ms_f(l.outside_ops_ns)
                ));
            }
            let line = format!(
                "  measured {} ms {per}, of which the floor covers {} ms; left out {per}: {}. \
                 floor / measured is not known for the step; for the covered ops it is {:.1}%",
                ms_f(f.measured_ns),
                ms_f(f.covered_ns),
                parts.join("; "),
                f.covered_fraction * 100.0
            );
            wrap(o, &line, "", "    ");
        }
    }
    for (what, rows) in [("op type", &f.by_op), ("module", &f.by_module)] {
        if rows.is_empty() {
            continue;
        }
        title(o, &format!("  Gap to the floor by {what}"), top, rows.len());
        let name_w = WIDTH - 2 - 44;
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>10} {:>10} {:>10} {:>10}",
            what, "instances", "GPU ms", "floor ms", "gap ms"
        );
        for r in rows.iter().take(top) {
            let _ = writeln!(
                o,
                "  {:<name_w$} {:>10} {:>10} {:>10} {:>10}",
                fit_head(&r.name, name_w),
                count_f(r.instances),
                ms_f(r.measured_ns),
                ms_f(r.floor_ns),
                ms_f(r.gap_ns)
            );
        }
    }
}

fn ms_f(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

/// A count per step: whole where it is whole, else one decimal.
fn count_f(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// The per-rank and cross-rank tables of a distributed run.
fn ranks_tables(o: &mut String, r: &crate::ranks::RankAnalysis, top: usize) {
    wrap(
        o,
        &format!(
            "Ranks: {} (collectives matched against rank {}; wait = time a rank's collective \
             kernels waited for the last rank to arrive, xfer = the rest; overlap = share of \
             comm time with compute running on the same GPU)",
            r.ranks.len(),
            r.reference_rank
        ),
        "",
        "  ",
    );
    let shown = top.max(8);
    let _ = writeln!(
        o,
        "  {:>5} {:<12} {:>10} {:>10} {:>10}  from",
        "rank", "clock", "shift ms", "resid us", "matched"
    );
    for x in r.ranks.iter().take(shown) {
        let _ = writeln!(
            o,
            "  {:>5} {:<12} {:>10} {:>10} {:>10}  {}",
            x.rank,
            fit(&x.clock, 12),
            ms(x.clock_correction_ns),
            x.residual_ns
                .map_or("-".into(), |n| format!("{:.1}", n as f64 / 1e3)),
            x.matched_collectives
                .map_or("-".into(), |m| format!("{m}/{}", x.comm_kernels)),
            fit(
                &format!(
                    "{} ({})",
                    x.source_path
                        .as_deref()
                        .map(|p| std::path::Path::new(p)
                            .file_name()
                            .map_or(p.into(), |f| f.to_string_lossy()))
                        .unwrap_or("?".into()),
                    x.rank_source.replace('_', " ")
                ),
                WIDTH - 55
            )
        );
    }
    let _ = writeln!(
        o,
        "  {:>5} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "rank",
        "steps",
        "step ms",
        "compute ms",
        "comm ms",
        "wait ms",
        "xfer ms",
        "unmatch ms",
        "overlap"
    );
    for x in r.ranks.iter().take(shown) {
        let _ = writeln!(
            o,
            "  {:>5} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7.1}%",
            x.rank,
            x.steps,
            x.step_wall
                .as_ref()
                .map_or("-".into(), |s| ms(s.mean_ns as i64)),
            ms(x.compute_ns),
            ms(x.comm_ns),
            ms(x.comm_wait_ns),
            ms(x.comm_transfer_ns),
            ms(x.comm_unmatched_ns),
            x.overlap_pct
        );
    }
    if r.ranks.len() > shown {
        let _ = writeln!(o, "  ... {} more ranks", r.ranks.len() - shown);
    }
    if !r.steps.is_empty() {
        let per_rank = r.ranks.len() <= 4;
        let _ = write!(
            o,
            "\nSteps across ranks (wall ms; straggler = the rank that waited least in \
             collectives)\n  {:>5}",
            "step"
        );
        if per_rank {
            for x in &r.ranks {
                let _ = write!(o, " {:>10}", format!("rank {}", x.rank));
            }
        }
        let _ = writeln!(
            o,
            " {:>10} {:>10} {:>10}",
            "spread ms", "slowest", "straggler"
        );
        for s in r.steps.iter().take(top) {
            let _ = write!(o, "  {:>5}", s.index);
            if per_rank {
                for w in &s.wall_ns {
                    let _ = write!(o, " {:>10}", w.map_or("-".into(), ms));
                }
            }
            let _ = writeln!(
                o,
                " {:>10} {:>10} {:>10}",
                ms(s.spread_ns),
                format!("rank {}", s.slowest_rank),
                s.straggler_rank.map_or("-".into(), |k| format!("rank {k}"))
            );
        }
        if r.steps.len() > top {
            let _ = writeln!(o, "  ... {} more", r.steps.len() - top);
        }
    }
    if !r.collectives.is_empty() {
        let name_w = WIDTH - 2 - 60;
        let _ = writeln!(o, "\nCollectives, all ranks");
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10}",
            "kernel", "kernels", "groups", "total ms", "wait ms", "xfer ms", "unmatch ms"
        );
        for c in r.collectives.iter().take(top) {
            let _ = writeln!(
                o,
                "  {:<name_w$} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10}",
                fit(&short_kernel_name(&c.name), name_w),
                count(c.kernels),
                count(c.groups),
                ms(c.total_ns),
                ms(c.wait_ns),
                ms(c.transfer_ns),
                ms(c.unmatched_ns)
            );
        }
    }
    for n in &r.notes {
        wrap(o, n, "  - ", "    ");
    }
}
