//! The advice as text for people.

use std::fmt::Write;

use crate::Advice;

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn wrap(o: &mut String, text: &str, indent: &str, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            let _ = writeln!(o, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(o, "{indent}{line}");
    }
}

/// Renders `a`; `top` limits the rows of the not-proposed and unbundled lists.
pub fn render_text(a: &Advice, top: usize) -> String {
    let mut o = String::new();
    let per = if a.run.steps == 0 { "run" } else { "step" };
    let _ = writeln!(
        o,
        "{} ({}), {}: GPU time {} ms per {per}{}",
        a.run.file,
        a.run.source_format,
        a.run.device.as_deref().unwrap_or("unnamed device"),
        format_args!("{:.3}", a.step_gpu_ns / 1e6),
        match (a.run.step, a.run.steps) {
            (Some(k), _) => format!(" (step {k})"),
            (None, 0) => String::new(),
            (None, n) => format!(" (mean of {n} steps)"),
        }
    );
    for n in &a.notes {
        wrap(&mut o, &format!("note: {n}"), "", 100);
    }
    if !a.settings.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "By saving per {per}, settings and kernel proposals together:"
        );
        for r in &a.ranking {
            let _ = writeln!(
                o,
                "{:>3}  {:<8}  {:>10} us  {:>6.2}%  {}{}",
                r.rank,
                r.kind,
                us(r.saving_ns_per_step),
                r.saving_pct_of_step,
                r.id,
                if r.pct_of == "wall_time" {
                    " (% of the wall time)"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "Before kernels, the program's own settings:");
        for s in &a.settings {
            wrap(
                &mut o,
                &format!(
                    "#{} {}: {}: {} -> {} us per {per}, saving {} us ({:.1}% of {})",
                    s.rank,
                    s.id,
                    s.title,
                    us(s.current_ns_per_step),
                    us(s.expected_ns_per_step),
                    us(s.saving_ns_per_step),
                    s.saving_pct_of_step,
                    s.pct_basis(per)
                ),
                "  ",
                100,
            );
            wrap(&mut o, &format!("change: {}", s.change), "    ", 100);
            wrap(&mut o, &format!("estimate: {}", s.estimate), "    ", 100);
            wrap(
                &mut o,
                &format!("evidence: {}", s.evidence.join("; ")),
                "    ",
                100,
            );
            if let Some(see) = s.where_to_look(2, 48) {
                wrap(&mut o, &format!("see {see}"), "    ", 100);
            }
        }
    }
    let t = &a.totals;
    let _ = writeln!(o);
    if a.proposals.is_empty() {
        let _ = writeln!(o, "No proposals.");
    } else {
        let _ = writeln!(
            o,
            "{} proposals cover {:.1}% of the {per}'s GPU time ({} of {} ms); expected saving \
             {} ms per {per} ({:.1}%){}",
            t.proposals,
            t.coverage_pct_of_step,
            format_args!("{:.3}", t.current_ns_per_step / 1e6),
            format_args!("{:.3}", a.step_gpu_ns / 1e6),
            format_args!("{:.3}", t.saving_ns_per_step / 1e6),
            t.saving_pct_of_step,
            match t.measured_saving_ns_per_step {
                Some(m) => format!("; measured by bench: {:.3} ms", m / 1e6),
                None => String::new(),
            }
        );
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "  #  id                                            inst/{per:<4} now us  expected  saving us      %  conf    measured"
        );
        for p in &a.proposals {
            let measured = match &p.measured {
                Some(m) if m.status == "passed" => format!(
                    "{} us ({:.2}x)",
                    us((m.baseline_ns - m.ours_ns) * p.instances_per_step),
                    m.baseline_ns / m.ours_ns
                ),
                Some(m) => m.status.to_uppercase(),
                None => "-".into(),
            };
            let _ = writeln!(
                o,
                "{:>3}  {:<45} {:>9.1} {:>7} {:>9} {:>10} {:>6.2}  {:<6}  {}",
                p.rank,
                p.id,
                p.instances_per_step,
                us(p.current_ns_per_step),
                us(p.expected_ns_per_step),
                us(p.saving_ns_per_step),
                p.saving_pct_of_step,
                p.confidence,
                measured
            );
        }
        let _ = writeln!(o);
        for p in &a.proposals {
            let _ = writeln!(o, "{}. {}  [{}]", p.rank, p.title, p.id);
            let _ = writeln!(
                o,
                "   {} {}, {} instance(s) per {per}: {} us now -> {} us expected per {per}",
                p.shape,
                p.dtype,
                p.instances_per_step,
                us(p.current_ns_per_step),
                us(p.expected_ns_per_step)
            );
            let mods = if p.modules.len() > 3 {
                format!(
                    "{}, ... ({} in all)",
                    p.modules[..3].join(", "),
                    p.modules.len()
                )
            } else {
                p.modules.join(", ")
            };
            wrap(&mut o, &format!("where: {mods}"), "   ", 100);
            wrap(
                &mut o,
                &format!("chain: {}", p.ops.join(" -> ")),
                "   ",
                100,
            );
            wrap(
                &mut o,
                &format!(
                    "estimate: {:.1} MB, {:.2} GFLOP per call, {} us at the ceilings / {:.0}% \
                     efficiency ({}) = {} us per call",
                    p.estimate.bytes / 1e6,
                    p.estimate.flops / 1e9,
                    us(p.estimate.floor_ns),
                    p.estimate.efficiency * 100.0,
                    p.estimate.calibrated_on,
                    us(p.estimate.ns)
                ),
                "   ",
                100,
            );
            let conf = if p.confidence_notes.is_empty() {
                p.confidence.clone()
            } else {
                format!("{} ({})", p.confidence, p.confidence_notes.join("; "))
            };
            wrap(&mut o, &format!("confidence: {conf}"), "   ", 100);
            if let Some(c) = &p.counters {
                let moved = c
                    .confidence_before
                    .as_ref()
                    .map(|b| format!(", confidence {b} -> {}", p.confidence))
                    .unwrap_or_default();
                let pipe = c
                    .tensor_pipe_pct
                    .map(|t| format!(", tensor pipe {t:.0}%"))
                    .unwrap_or_default();
                wrap(
                    &mut o,
                    &format!(
                        "counters ({}{moved}): {}{pipe}; {} kernels, {} shared, {} estimated",
                        c.verdict, c.note, c.kernels, c.shared, c.estimated
                    ),
                    "   ",
                    100,
                );
            }
            for a in &p.assumptions {
                wrap(&mut o, &format!("assumes: {a}"), "   ", 100);
            }
            for line in p.call.lines() {
                let _ = writeln!(o, "   call: {line}");
            }
            if let Some(m) = &p.measured {
                let _ = writeln!(
                    o,
                    "   measured ({}, {}): ours {} us, eager {} us{}, error {} -> {}",
                    m.device.as_deref().unwrap_or("?"),
                    m.torch_version.as_deref().unwrap_or("?"),
                    us(m.ours_ns),
                    us(m.baseline_ns),
                    m.compiled_ns
                        .map(|c| format!(", torch.compile {} us", us(c)))
                        .unwrap_or_default(),
                    m.max_rel_error
                        .map(|e| format!("{e:.1e}"))
                        .unwrap_or_else(|| "-".into()),
                    m.status.to_uppercase()
                );
            }
            let _ = writeln!(o);
        }
    }
    if !a.not_proposed.is_empty() {
        let _ = writeln!(
            o,
            "Matched but not proposed ({}, by GPU time):",
            a.not_proposed.len()
        );
        for n in a.not_proposed.iter().take(top) {
            let _ = writeln!(
                o,
                "  {} x{:.1}/{per}, {} us/{per}: {}",
                n.pattern,
                n.instances_per_step,
                us(n.current_ns_per_step),
                n.modules.first().map(String::as_str).unwrap_or("")
            );
            wrap(&mut o, &format!("why: {}", n.reason), "    ", 100);
        }
        if a.not_proposed.len() > top {
            let _ = writeln!(
                o,
                "  ... {} more (--json has all)",
                a.not_proposed.len() - top
            );
        }
        let _ = writeln!(o);
    }
    if !a.unbundled.is_empty() {
        let _ = writeln!(
            o,
            "Fusable, no bundled kernel (torch.compile or a custom kernel could win at least {} us per {per}):",
            us(t.unbundled_saving_ns_per_step)
        );
        for u in a.unbundled.iter().take(top) {
            let names: Vec<&str> = u
                .ops
                .iter()
                .map(|s| s.split(' ').next().unwrap_or(s))
                .collect();
            let _ = writeln!(
                o,
                "  {:<50} x{:.1}/{per}  now {} us, saves >= {} us ({:.1} MB)",
                names.join(" + "),
                u.instances_per_step,
                us(u.current_ns_per_step),
                us(u.saving_ns_per_step),
                u.bytes_saved_per_step / 1e6
            );
        }
        if a.unbundled.len() > top {
            let _ = writeln!(o, "  ... {} more (--json has all)", a.unbundled.len() - top);
        }
    }
    o
}
