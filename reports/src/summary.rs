//! The gate's verdict for CI: Markdown (a GitHub step summary or PR comment) and JUnit XML
//! (which every CI system shows as test results).

use std::fmt::Write;

use crate::data::ReportData;
use crate::text::short;

/// Escapes text for a Markdown table cell.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The verdict, the step time against the baseline, and the largest changes.
pub fn markdown(d: &ReportData) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## fuseprof report: `{}`\n", md(&d.file));
    if let Some(g) = &d.gate {
        if g.passed() {
            let _ = writeln!(o, "**PASS**: all {} gate rules hold.\n", g.outcomes.len());
        } else {
            let _ = writeln!(
                o,
                "**FAIL**: {} of {} gate rules broken.\n",
                g.failed().count(),
                g.outcomes.len()
            );
        }
        let _ = writeln!(o, "| rule | verdict | measured |\n|---|---|---|");
        for r in &g.outcomes {
            let _ = writeln!(
                o,
                "| `{}` | {} | {} |",
                md(&r.rule),
                if r.passed { "pass" } else { "**FAIL**" },
                md(&r.measured)
            );
        }
        o.push('\n');
    }
    for w in &d.warnings {
        let _ = writeln!(o, "> warning: {}\n", md(w));
    }
    let a = &d.analysis;
    if let Some(s) = &a.steps.gpu {
        let _ = writeln!(
            o,
            "Step GPU time: median {:.3} ms over {} steps (CV {:.2}%).",
            s.median_ns / 1e6,
            a.steps.steps.len(),
            s.cv_pct
        );
    }
    if let Some(b) = &d.baseline {
        let c = &b.steps;
        let _ = writeln!(
            o,
            "Against `{}`: {:+.2}% ({:.3} → {:.3} ms per step, noise ±{:.2}%){}.\n",
            md(&b.name),
            c.delta_pct,
            c.before_mean_ns / 1e6,
            c.after_mean_ns / 1e6,
            c.noise_pct,
            if c.significant {
                ""
            } else {
                ", inside the noise"
            }
        );
        let rows: Vec<_> = b
            .diff
            .ops
            .iter()
            .filter(|r| r.status != fuseprof_analyzer::DiffStatus::Same)
            .take(8)
            .collect();
        if !rows.is_empty() {
            let _ = writeln!(
                o,
                "| op | before µs | after µs | change µs | share of the change |\n|---|---:|---:|---:|---:|"
            );
            for r in rows {
                let share = if b.diff.delta_ns.abs() > 0.0 {
                    r.delta_ns * 100.0 / b.diff.delta_ns
                } else {
                    0.0
                };
                let _ = writeln!(
                    o,
                    "| `{}` | {:.1} | {:.1} | {:+.1} | {:.1}% |",
                    md(&short(&r.name, 60)),
                    r.before_ns / 1e3,
                    r.after_ns / 1e3,
                    r.delta_ns / 1e3,
                    share
                );
            }
            o.push('\n');
        }
    } else {
        o.push('\n');
    }
    o.push_str("The full report (charts, hotspots, roofline, proposals) is the HTML artifact.\n");
    o
}

fn xml(s: &str) -> String {
    crate::text::esc(s)
}

/// One test suite, one test case per gate rule (a failure per broken rule). Without a gate,
/// one passing case says the report was made.
pub fn junit(d: &ReportData) -> String {
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let outcomes = d
        .gate
        .as_ref()
        .map(|g| g.outcomes.as_slice())
        .unwrap_or(&[]);
    let failures = outcomes.iter().filter(|r| !r.passed).count();
    let tests = outcomes.len().max(1);
    let _ = writeln!(
        o,
        "<testsuites name=\"fuseprof\" tests=\"{tests}\" failures=\"{failures}\">\n  \
         <testsuite name=\"fuseprof gate: {}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\">",
        xml(&d.file)
    );
    if outcomes.is_empty() {
        let _ = writeln!(
            o,
            "    <testcase classname=\"fuseprof.report\" name=\"report written\"/>"
        );
    }
    for r in outcomes {
        if r.passed {
            let _ = writeln!(
                o,
                "    <testcase classname=\"fuseprof.gate\" name=\"{}\"><system-out>{}</system-out></testcase>",
                xml(&r.rule),
                xml(&r.measured)
            );
        } else {
            let _ = writeln!(
                o,
                "    <testcase classname=\"fuseprof.gate\" name=\"{}\"><failure message=\"{}\">{}</failure></testcase>",
                xml(&r.rule),
                xml(&format!("{}: {}", r.rule, r.measured)),
                xml(&r.measured)
            );
        }
    }
    o.push_str("  </testsuite>\n</testsuites>\n");
    o
}
