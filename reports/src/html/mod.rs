//! The HTML report: one self-contained page (inline CSS, inline SVG charts, a few lines of
//! inline JS that sort tables). It holds no URL, so it opens from disk with no network. The
//! document is also well-formed XML (void elements closed, script and style in CDATA), so
//! tests parse it strictly.

pub mod charts;

use std::fmt::Write;

use crate::data::{ReportData, MIN_MATCH_PCT};
use crate::gate::StepComparison;
use crate::text::{esc, short};
use crate::Result;
use charts::{MeasuredRoofPoint, RoofPoint, Span};

fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

const CSS: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:12px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
section{background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:4px 16px 14px;margin:14px 0}
table{border-collapse:collapse;width:100%;font-size:13px;margin:6px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#f0f2f5;cursor:pointer;user-select:none;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.verdict{padding:10px 14px;border-radius:6px;margin:12px 0;font-weight:600}
.pass{background:#e3f4e6;border:1px solid #8fcf9b}.fail{background:#fde6e6;border:1px solid #e79b9b}
.warn{background:#fff6dc;border:1px solid #e8cf7a;padding:8px 12px;border-radius:6px;margin:8px 0}
.muted{color:#68707d}.slower{color:#c0392b}.faster{color:#1e8449}
svg{max-width:100%;height:auto;display:block;margin:6px 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:6px 0}dt{color:#68707d}dd{margin:0}
"#;

/// Sorts a table by the clicked column: numbers by `data-v`, else by text.
const JS: &str = r#"
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table'), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var asc = th.getAttribute('data-asc') !== '1';
    th.setAttribute('data-asc', asc ? '1' : '0');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col], y = b.cells[col];
      var vx = x.getAttribute('data-v'), vy = y.getAttribute('data-v');
      var c = (vx !== null) ? (parseFloat(vx) - parseFloat(vy)) : x.textContent.localeCompare(y.textContent);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"#;

/// A sortable table. `cols`: header and whether it is numeric; cells: text and, for numeric
/// columns, the value to sort by.
struct Table {
    html: String,
    numeric: Vec<bool>,
}

impl Table {
    fn new(cols: &[(&str, bool)]) -> Table {
        let mut html = String::from("<table class=\"sortable\"><thead><tr>");
        for (c, n) in cols {
            let _ = write!(
                html,
                "<th{}>{}</th>",
                if *n { " class=\"n\"" } else { "" },
                esc(c)
            );
        }
        html.push_str("</tr></thead><tbody>");
        Table {
            html,
            numeric: cols.iter().map(|c| c.1).collect(),
        }
    }
    /// Cells as (shown text as HTML, sort value).
    fn row(&mut self, cells: &[(String, Option<f64>)]) {
        self.html.push_str("<tr>");
        for (i, (text, v)) in cells.iter().enumerate() {
            if self.numeric.get(i).copied().unwrap_or(false) {
                let _ = write!(
                    self.html,
                    "<td class=\"n\" data-v=\"{}\">{text}</td>",
                    v.filter(|x| x.is_finite()).unwrap_or(0.0)
                );
            } else {
                let _ = write!(self.html, "<td>{text}</td>");
            }
        }
        self.html.push_str("</tr>");
    }
    fn finish(mut self) -> String {
        self.html.push_str("</tbody></table>");
        self.html
    }
}

fn t(s: &str) -> (String, Option<f64>) {
    (esc(s), None)
}
fn code(s: &str) -> (String, Option<f64>) {
    (format!("<code>{}</code>", esc(s)), None)
}
fn num(text: String, v: f64) -> (String, Option<f64>) {
    (esc(&text), Some(v))
}

/// The whole page.
pub fn render(d: &ReportData) -> Result<String> {
    let a = &d.analysis;
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>");
    let _ = write!(h, "<title>fuseprof report: {}</title>", esc(&d.file));
    let _ = write!(
        h,
        "<style>/*<![CDATA[*/{CSS}/*]]>*/</style></head><body><main>"
    );
    let _ = write!(h, "<h1>fuseprof report: <code>{}</code></h1>", esc(&d.file));
    if let Some(b) = &d.baseline {
        let _ = write!(
            h,
            "<p class=\"muted\">compared with the baseline <code>{}</code></p>",
            esc(&b.name)
        );
    }
    for w in &d.warnings {
        let _ = write!(h, "<div class=\"warn\">warning: {}</div>", esc(w));
    }
    gate_section(&mut h, d);
    run_section(&mut h, d);
    steps_section(&mut h, d)?;
    gpu_time_section(&mut h, d)?;
    timeline_section(&mut h, d)?;
    hotspots_section(&mut h, d);
    floor_section(&mut h, d);
    roofline_section(&mut h, d)?;
    advice_section(&mut h, d);
    if d.baseline.is_some() {
        diff_section(&mut h, d)?;
    }
    if d.history.is_some() {
        history_section(&mut h, d)?;
    }
    if !a.notes.is_empty() {
        h.push_str("<section id=\"notes\"><h2>Notes on the input</h2><ul>");
        for n in &a.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul></section>");
    }
    let _ = write!(
        h,
        "<p class=\"muted\">written by fuseprof {}; every time is GPU time unless it says \
         otherwise.</p></main><script>//<![CDATA[\n{JS}//]]></script></body></html>\n",
        env!("CARGO_PKG_VERSION")
    );
    Ok(h)
}

fn gate_section(h: &mut String, d: &ReportData) {
    let Some(g) = &d.gate else { return };
    h.push_str("<section id=\"gate\"><h2>Gate</h2>");
    if g.passed() {
        let _ = write!(
            h,
            "<div class=\"verdict pass\">PASS: all {} rules hold</div>",
            g.outcomes.len()
        );
    } else {
        let failed: Vec<_> = g.failed().collect();
        let _ = write!(
            h,
            "<div class=\"verdict fail\">FAIL: {} of {} rules broken</div><ul>",
            failed.len(),
            g.outcomes.len()
        );
        for f in failed {
            let _ = write!(
                h,
                "<li><code>{}</code>: {}</li>",
                esc(&f.rule),
                esc(&f.measured)
            );
        }
        h.push_str("</ul>");
    }
    let mut tb = Table::new(&[("rule", false), ("verdict", false), ("measured", false)]);
    for o in &g.outcomes {
        tb.row(&[
            code(&o.rule),
            (
                if o.passed {
                    "<span class=\"faster\">pass</span>".into()
                } else {
                    "<span class=\"slower\">FAIL</span>".into()
                },
                None,
            ),
            t(&o.measured),
        ]);
    }
    h.push_str(&tb.finish());
    h.push_str("</section>");
}

fn unix_date(ns: i64) -> String {
    crate::text::utc_text(ns)
}

fn run_section(h: &mut String, d: &ReportData) {
    let r = &d.run;
    h.push_str("<section id=\"run\"><h2>The run</h2><dl>");
    let mut row = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = write!(h, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
        }
    };
    row("command", r.command.clone());
    row("host", r.host.clone());
    row("recorded", r.start_unix_ns.map(unix_date));
    row(
        "source",
        Some(format!(
            "{}{}",
            r.source_format,
            r.tool
                .as_deref()
                .map(|t| format!(" ({t} {})", r.tool_version.as_deref().unwrap_or("")))
                .unwrap_or_default()
        )),
    );
    for dev in &d.devices {
        let mut s = dev.name.clone().unwrap_or_else(|| "(unnamed)".into());
        if let Some(n) = dev.sm_count {
            s.push_str(&format!(", {n} SMs"));
        }
        if let Some(m) = dev.memory_bytes {
            s.push_str(&format!(", {:.0} GiB", m as f64 / (1u64 << 30) as f64));
        }
        row(&format!("GPU {}", dev.id), Some(s));
    }
    row("driver", r.cuda_driver_version.clone());
    row("CUDA runtime", r.cuda_runtime_version.clone());
    row("CUPTI", r.cupti_version.clone());
    let t = &d.analysis.totals;
    row(
        "GPU work",
        Some(format!(
            "{} kernels, {} copies, {} fills: {} ms",
            t.kernels,
            t.memcpys,
            t.memsets,
            ms(t.gpu_ns as f64)
        )),
    );
    h.push_str("</dl></section>");
}

fn spread_text(c: &StepComparison) -> String {
    format!(
        "{:+.2}% ({} → {} ms per step; noise ±{:.2}%){}",
        c.delta_pct,
        ms(c.before_mean_ns),
        ms(c.after_mean_ns),
        c.noise_pct,
        if c.significant {
            ""
        } else {
            ": inside the noise, not a change"
        }
    )
}

fn steps_section(h: &mut String, d: &ReportData) -> Result<()> {
    let a = &d.analysis;
    h.push_str("<section id=\"steps\"><h2>Step time</h2>");
    let current = crate::gate::step_values(a, false);
    let base = d
        .baseline
        .as_ref()
        .map(|b| crate::gate::step_values(&b.analysis, false));
    match &a.steps.gpu {
        Some(s) => {
            let _ = write!(
                h,
                "<p>{} steps ({}): GPU time per step median {} ms, mean {} ms, min {} ms, \
                 max {} ms, standard deviation {} ms (CV {:.2}%).{}</p>",
                a.steps.steps.len(),
                esc(a.steps.name.as_deref().unwrap_or(match a.steps.source {
                    fuseprof_analyzer::StepSource::Period => "found by the repeating op sequence",
                    _ => "annotated",
                })),
                ms(s.median_ns),
                ms(s.mean_ns),
                ms(s.min_ns as f64),
                ms(s.max_ns as f64),
                ms(s.stddev_ns),
                s.cv_pct,
                a.steps
                    .wall
                    .as_ref()
                    .map(|w| format!(" Wall time per step median {} ms.", ms(w.median_ns)))
                    .unwrap_or_default()
            );
        }
        None => h.push_str(
            "<p>No repeating step was found: the whole run counts as one step below.</p>",
        ),
    }
    if let Some(b) = &d.baseline {
        let _ = write!(
            h,
            "<p><b>Against the baseline:</b> {}</p><p class=\"muted\">How noise is judged: {}.</p>",
            esc(&spread_text(&b.steps)),
            esc(&b.steps.method)
        );
    }
    h.push_str(&charts::steps(&current, base.as_deref())?);
    h.push_str("</section>");
    Ok(())
}

fn per_step(a: &fuseprof_analyzer::Analysis) -> f64 {
    a.steps.steps.len().max(1) as f64
}

fn gpu_time_section(h: &mut String, d: &ReportData) -> Result<()> {
    let a = &d.analysis;
    let n = per_step(a);
    h.push_str("<section id=\"gpu-time\"><h2>GPU time by kernel class and by op</h2>");
    let rows: Vec<_> = a
        .by_class
        .iter()
        .filter(|c| c.total_ns > 0)
        .map(|c| {
            (
                format!("{} ({:.1}%)", c.class.as_str(), c.pct),
                c.total_ns as f64 / n / 1e6,
                charts::class_color(c.class.as_str()),
            )
        })
        .collect();
    h.push_str("<h3>By kernel class</h3>");
    h.push_str(&charts::hbars(&rows, "GPU ms per step")?);
    let ops: Vec<_> = a
        .by_op
        .iter()
        .filter(|r| r.self_ns > 0)
        .take(15)
        .map(|r| {
            (
                short(&format!("{} ({:.1}%)", r.name, r.pct), 44),
                r.self_ns as f64 / n / 1e6,
                charts::class_color("gemm"),
            )
        })
        .collect();
    h.push_str("<h3>By op (self time, top 15)</h3>");
    h.push_str(&charts::hbars(&ops, "GPU ms per step")?);
    let mut tb = Table::new(&[
        ("op", false),
        ("instances", true),
        ("self ms/step", true),
        ("% of GPU", true),
        ("kernels", true),
    ]);
    for r in a.by_op.iter().take(40) {
        tb.row(&[
            code(&r.name),
            num(r.instances.to_string(), r.instances as f64),
            num(ms(r.self_ns as f64 / n), r.self_ns as f64),
            num(format!("{:.2}", r.pct), r.pct),
            num(r.kernels.to_string(), r.kernels as f64),
        ]);
    }
    h.push_str(&tb.finish());
    h.push_str("</section>");
    Ok(())
}

fn timeline_section(h: &mut String, d: &ReportData) -> Result<()> {
    h.push_str("<section id=\"timeline\"><h2>Timeline of one step</h2>");
    match &d.timeline {
        None => h.push_str("<p>The run has no GPU records to draw.</p>"),
        Some(tl) => {
            let _ = write!(
                h,
                "<p>{}: {} GPU records on {} streams over {} ms (streams as rows, kernel classes \
                 as colours).</p>",
                match tl.step {
                    Some(s) => format!("Step {s}, the one with the median GPU time"),
                    None => "The first 50 ms of GPU work (the run has no steps)".into(),
                },
                tl.spans.len(),
                tl.rows.len(),
                ms(tl.window_ns as f64)
            );
            let spans: Vec<Span> = tl
                .spans
                .iter()
                .map(|(row, b, e, c)| Span {
                    row: *row,
                    start_ms: *b as f64 / 1e6,
                    end_ms: *e as f64 / 1e6,
                    class: c.clone(),
                })
                .collect();
            h.push_str(&charts::timeline(
                &tl.rows,
                &spans,
                tl.window_ns as f64 / 1e6,
            )?);
        }
    }
    h.push_str("</section>");
    Ok(())
}

fn hotspots_section(h: &mut String, d: &ReportData) {
    let a = &d.analysis;
    let n = per_step(a);
    h.push_str("<section id=\"hotspots\"><h2>Hotspots by op and shape, with headroom</h2>");
    let _ = write!(
        h,
        "<p>Headroom: GPU time above what the op's bytes and FLOPs need at the device's \
         ceilings. Ops with an estimate cover {} ms of {} ms; their headroom is {} ms per \
         step.</p>",
        ms(a.headroom.covered_ns as f64 / n),
        ms(a.totals.gpu_ns as f64 / n),
        ms(a.headroom.headroom_ns as f64 / n)
    );
    let mut tb = Table::new(&[
        ("op", false),
        ("input shapes", false),
        ("calls", true),
        ("GPU ms/step", true),
        ("% of GPU", true),
        ("bound", false),
        ("% of ceiling", true),
        ("headroom ms/step", true),
    ]);
    let head: std::collections::HashMap<(&str, Option<&str>), &fuseprof_analyzer::HeadroomRow> = a
        .headroom
        .rows
        .iter()
        .map(|r| ((r.name.as_str(), r.dims.as_deref()), r))
        .collect();
    for r in a.by_shape.iter().take(30) {
        let hr = head.get(&(r.name.as_str(), r.dims.as_deref()));
        let ceiling = hr.map(|x| {
            if x.bound == "compute" {
                x.flops_pct.unwrap_or(0.0)
            } else {
                x.bandwidth_pct
            }
        });
        tb.row(&[
            code(&r.name),
            code(&short(r.dims.as_deref().unwrap_or("–"), 80)),
            num(r.instances.to_string(), r.instances as f64),
            num(ms(r.self_ns as f64 / n), r.self_ns as f64),
            num(format!("{:.2}", r.pct), r.pct),
            t(hr.map(|x| x.bound.as_str()).unwrap_or("–")),
            match ceiling {
                Some(c) => num(format!("{c:.1}"), c),
                None => num("–".into(), -1.0),
            },
            match hr {
                Some(x) => num(ms(x.headroom_ns as f64 / n), x.headroom_ns as f64),
                None => num("–".into(), -1.0),
            },
        ]);
    }
    h.push_str(&tb.finish());
    h.push_str("</section>");
}

/// The step's floor against a fully fused model (`analyzer/JSON.md`, `floor`) and the op
/// types and modules that hold the gap to it.
fn floor_section(h: &mut String, d: &ReportData) {
    let Some(f) = &d.analysis.floor else {
        return;
    };
    let per = if f.steps == 0 { "per run" } else { "per step" };
    h.push_str("<section id=\"floor\"><h2>The step's floor</h2>");
    let _ = write!(
        h,
        "<p>If the step were fully fused (each activation written and read once, those that \
         pass straight to the next op kept on chip) and every op ran at the device's ceilings, \
         it would take {} ms {per} ({}-bound: FLOPs {} ms, {:.1} MB moved {} ms; unfused the \
         ops move {:.1} MB). ",
        ms(f.floor_ns),
        esc(&f.bound),
        ms(f.compute_ns),
        f.fused_bytes / 1e6,
        ms(f.memory_ns),
        f.unfused_bytes / 1e6,
    );
    let l = &f.left_out;
    match f.fraction {
        Some(x) => {
            let _ = write!(
                h,
                "It took {} ms: the floor is {:.1}% of it.</p>",
                ms(f.measured_ns),
                x * 100.0
            );
        }
        None => {
            let _ = write!(
                h,
                "It took {} ms, of which the floor covers {} ms; left out {per}: {} ops without \
                 shapes ({} ms), {} ops no model covers ({} ms{}), {} ms launched outside ops. \
                 The step's fraction is not known; for the covered ops the floor is {:.1}% of \
                 their time.</p>",
                ms(f.measured_ns),
                ms(f.covered_ns),
                l.no_shapes_ops,
                ms(l.no_shapes_ns),
                l.no_model_ops,
                ms(l.no_model_ns),
                if l.no_model_names.is_empty() {
                    String::new()
                } else {
                    format!(": {}", esc(&l.no_model_names.join(", ")))
                },
                ms(l.outside_ops_ns),
                f.covered_fraction * 100.0
            );
        }
    }
    for (what, rows) in [("op type", &f.by_op), ("module", &f.by_module)] {
        let mut tb = Table::new(&[
            (what, false),
            ("calls", true),
            ("GPU ms", true),
            ("floor ms", true),
            ("gap ms", true),
        ]);
        for r in rows.iter().take(15) {
            tb.row(&[
                code(&r.name),
                num(format!("{}", r.instances), r.instances),
                num(ms(r.measured_ns), r.measured_ns),
                num(ms(r.floor_ns), r.floor_ns),
                num(ms(r.gap_ns), r.gap_ns),
            ]);
        }
        let _ = write!(h, "<h3>Gap to the floor by {what}, {per}</h3>");
        h.push_str(&tb.finish());
    }
    h.push_str("</section>");
}

fn roofline_section(h: &mut String, d: &ReportData) -> Result<()> {
    let a = &d.analysis;
    h.push_str("<section id=\"roofline\"><h2>Roofline</h2>");
    let Some(c) = a.headroom.ceilings.first() else {
        h.push_str("<p>No ceilings are known for this device, so no roofline.</p></section>");
        return Ok(());
    };
    let rows: Vec<_> = a
        .headroom
        .rows
        .iter()
        .filter(|r| r.device == c.device && r.bytes > 0.0 && r.flops > 0.0)
        .collect();
    let total: i64 = rows.iter().map(|r| r.gpu_ns).sum::<i64>().max(1);
    let points: Vec<RoofPoint> = rows
        .iter()
        .map(|r| RoofPoint {
            label: short(&r.name.replace("aten::", ""), 24),
            intensity: r.flops / r.bytes,
            flops_per_s: r.achieved_flops_per_s,
            weight: r.gpu_ns as f64 / total as f64,
            memory_bound: r.bound == "memory",
        })
        .collect();
    // Where the run has counters: the same ops at their FLOPs over the DRAM bytes measured.
    let measured: Vec<(&&fuseprof_analyzer::HeadroomRow, MeasuredRoofPoint)> = rows
        .iter()
        .filter_map(|r| {
            let m = r.measured.as_ref()?;
            let bytes_per_s = m.achieved_bytes_per_s.filter(|b| *b > 0.0)?;
            Some((
                r,
                MeasuredRoofPoint {
                    intensity: r.achieved_flops_per_s / bytes_per_s,
                    flops_per_s: r.achieved_flops_per_s,
                    estimated_intensity: r.flops / r.bytes,
                    weight: r.gpu_ns as f64 / total as f64,
                    flagged: m.shared > 0 || m.estimated > 0,
                },
            ))
        })
        .collect();
    let _ = write!(
        h,
        "<p>Each dot is an op type and shape (size: its share of GPU time), at its FLOPs per \
         byte moved and the FLOP/s it reached, under {}'s ceilings ({}). {} ops with FLOPs \
         are drawn.</p>",
        esc(c.name.as_deref().unwrap_or("the device")),
        esc(&c.source),
        points.len()
    );
    if points.is_empty() {
        h.push_str(
            "<p>No op has both bytes and FLOPs from its shapes (the run records no shapes?).</p>",
        );
    } else {
        if !measured.is_empty() {
            let _ = write!(
                h,
                "<p>Triangles: {} of them again at the DRAM bytes the hardware counters \
                 measured for their kernels (CUPTI PM sampling; FLOPs still from shapes), \
                 joined to their estimated dot. Hollow: some of their kernels' values are \
                 shared with work that ran at the same time, or estimated from samples longer \
                 than the kernel.</p>",
                measured.len()
            );
        }
        let points_measured: Vec<MeasuredRoofPoint> =
            measured.iter().map(|(_, p)| p.clone()).collect();
        h.push_str(&charts::roofline(
            &points,
            &points_measured,
            c.mem_bytes_per_s,
            c.flops_16bit_per_s,
            c.flops_32bit_per_s,
        )?);
        if !measured.is_empty() {
            measured_table(h, &measured);
        }
    }
    h.push_str("</section>");
    Ok(())
}

/// The measured ops of the roofline, heaviest first: estimated against measured bytes.
fn measured_table(
    h: &mut String,
    measured: &[(&&fuseprof_analyzer::HeadroomRow, MeasuredRoofPoint)],
) {
    let mut sorted: Vec<_> = measured.iter().collect();
    sorted.sort_by(|a, b| b.0.gpu_ns.cmp(&a.0.gpu_ns).then(a.0.name.cmp(&b.0.name)));
    let mut tb = Table::new(&[
        ("op", false),
        ("shapes", false),
        ("GPU ms", true),
        ("estimated MB", true),
        ("measured DRAM MB", true),
        ("measured GB/s", true),
        ("% of peak", true),
        ("tensor pipe %", true),
        ("values", false),
    ]);
    for (r, _) in sorted.into_iter().take(20) {
        let Some(m) = r.measured.as_ref() else {
            continue;
        };
        // The estimate covers every instance; the measurement the kernels that had counters.
        let estimated = r.bytes * r.instances as f64;
        let dram = m.dram_bytes.unwrap_or(0.0);
        let gbs = m.achieved_bytes_per_s.unwrap_or(0.0) / 1e9;
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
        let mut flags = Vec::new();
        if m.shared > 0 {
            flags.push(format!("{} of {} shared", m.shared, m.kernels));
        }
        if m.estimated > 0 {
            flags.push(format!("{} of {} estimated", m.estimated, m.kernels));
        }
        tb.row(&[
            code(&r.name),
            code(r.dims.as_deref().unwrap_or("")),
            num(ms(r.gpu_ns as f64), r.gpu_ns as f64),
            num(format!("{:.2}", estimated / 1e6), estimated),
            num(format!("{:.2}", dram / 1e6), dram),
            num(format!("{gbs:.1}"), gbs),
            num(
                opt(m.bandwidth_pct_of_peak),
                m.bandwidth_pct_of_peak.unwrap_or(0.0),
            ),
            num(opt(m.tensor_pipe_pct), m.tensor_pipe_pct.unwrap_or(0.0)),
            t(&if flags.is_empty() {
                "measured".to_string()
            } else {
                flags.join(", ")
            }),
        ]);
    }
    h.push_str("<h3>Measured by hardware counters, against the estimate</h3>");
    h.push_str(&tb.finish());
}

fn advice_section(h: &mut String, d: &ReportData) {
    h.push_str("<section id=\"advice\"><h2>Fusion proposals</h2>");
    match &d.advice {
        Err(e) => {
            let _ = write!(h, "<p>No advice for this run: {}</p>", esc(e));
        }
        Ok(adv) if adv.proposals.is_empty() => {
            h.push_str("<p>The advisor found no chain that a bundled kernel replaces.</p>");
            for n in &adv.notes {
                let _ = write!(h, "<p class=\"muted\">{}</p>", esc(n));
            }
        }
        Ok(adv) => {
            let tot = &adv.totals;
            let _ = write!(
                h,
                "<p>{} proposals cover {:.1}% of the step; expected saving {} ms per step \
                 ({:.1}%){}. Measured by <code>fuseprof bench</code> where the column is \
                 filled.</p>",
                tot.proposals,
                tot.coverage_pct_of_step,
                ms(tot.saving_ns_per_step),
                tot.saving_pct_of_step,
                tot.measured_saving_ns_per_step
                    .map(|m| format!(", measured {} ms", ms(m)))
                    .unwrap_or_else(|| ", not measured yet".into())
            );
            let mut tb = Table::new(&[
                ("proposal", false),
                ("replaces", false),
                ("per step", true),
                ("now µs/step", true),
                ("expected saving µs/step", true),
                ("measured saving µs/step", true),
                ("confidence", false),
            ]);
            for p in &adv.proposals {
                let measured = p.measured.as_ref().map(|m| {
                    if m.status == "passed" {
                        let s = fuseprof_fusion_advisor::measured_saving(p, m).ns_per_step;
                        (us(s), s)
                    } else {
                        (m.status.clone(), f64::NAN)
                    }
                });
                tb.row(&[
                    code(&p.id),
                    t(&p.title),
                    num(format!("{:.1}", p.instances_per_step), p.instances_per_step),
                    num(us(p.current_ns_per_step), p.current_ns_per_step),
                    num(us(p.saving_ns_per_step), p.saving_ns_per_step),
                    match measured {
                        Some((text, v)) => num(text, v),
                        None => num("–".into(), -1.0),
                    },
                    t(&confidence_text(p)),
                ]);
            }
            h.push_str(&tb.finish());
        }
    }
    if let Ok(adv) = &d.advice {
        settings_table(h, &adv.settings);
    }
    h.push_str("</section>");
}

/// A proposal's confidence, with what the run's hardware counters said of its estimated bound
/// where it has them (the check that raised or lowered it, or left it).
fn confidence_text(p: &fuseprof_fusion_advisor::Proposal) -> String {
    match &p.counters {
        Some(c) => format!("{} (counters {}: {})", p.confidence, c.verdict, c.note),
        None => p.confidence.clone(),
    }
}

/// What the advisor says before kernels: changes to the program's own settings, each with its
/// place in the ranking of settings and kernel proposals together, how its saving was estimated
/// and the evidence, and where to see it in a timeline (its worst step's window, in ms from the
/// run's first record as Perfetto shows it, and the kernel and op names to search for).
fn settings_table(h: &mut String, settings: &[fuseprof_fusion_advisor::Setting]) {
    if settings.is_empty() {
        return;
    }
    h.push_str("<h3>Before kernels: the program's own settings</h3>");
    let mut tb = Table::new(&[
        ("rank", true),
        ("setting", false),
        ("change", false),
        ("now µs/step", true),
        ("expected µs/step", true),
        ("saving µs/step", true),
        ("saving % of step", true),
        ("how estimated", false),
        ("evidence", false),
        ("where to look", false),
    ]);
    for s in settings {
        tb.row(&[
            num(s.rank.to_string(), s.rank as f64),
            t(&format!("{}: {}", s.id, s.title)),
            code(&s.change),
            num(us(s.current_ns_per_step), s.current_ns_per_step),
            num(us(s.expected_ns_per_step), s.expected_ns_per_step),
            num(us(s.saving_ns_per_step), s.saving_ns_per_step),
            num(
                if s.pct_of == "wall_time" {
                    format!("{:.2} of wall time", s.saving_pct_of_step)
                } else {
                    format!("{:.2}", s.saving_pct_of_step)
                },
                s.saving_pct_of_step,
            ),
            t(&s.estimate),
            t(&s.evidence.join("; ")),
            // Long template names cut: their start is what a timeline search needs.
            t(
                &s.where_to_look(fuseprof_fusion_advisor::SETTING_MAX_NAMES, 120)
                    .unwrap_or_default(),
            ),
        ]);
    }
    h.push_str(&tb.finish());
}

fn diff_section(h: &mut String, d: &ReportData) -> Result<()> {
    let Some(b) = &d.baseline else { return Ok(()) };
    let diff = &b.diff;
    h.push_str("<section id=\"diff\"><h2>Against the baseline</h2>");
    let _ = write!(
        h,
        "<p>GPU time {} → {} ms {} ({:+.2}%, {:+.3} ms). Share of the change: each row's \
         change over the total change. {:.0}% of the baseline's op time is in ops this run \
         also has{}.</p>",
        ms(diff.before_gpu_ns),
        ms(diff.after_gpu_ns),
        if diff.unit == "per_step" {
            "per step"
        } else {
            "per run"
        },
        diff.delta_pct,
        diff.delta_ns / 1e6,
        b.matched_pct,
        if b.matched_pct < MIN_MATCH_PCT {
            ": few ops match, so the rows below compare different models"
        } else {
            ""
        }
    );
    let share = |delta: f64| {
        if diff.delta_ns.abs() > 0.0 {
            delta * 100.0 / diff.delta_ns
        } else {
            0.0
        }
    };
    let bars: Vec<(String, f64)> = diff
        .ops
        .iter()
        .filter(|r| r.status != fuseprof_analyzer::DiffStatus::Same)
        .take(12)
        .map(|r| (short(&r.name, 44), r.delta_ns / 1e6))
        .collect();
    if !bars.is_empty() {
        h.push_str("<h3>Largest changes by op</h3>");
        h.push_str(&charts::delta_bars(&bars, "change, GPU ms per step")?);
    }
    let table = |h: &mut String, title: &str, rows: &[&fuseprof_analyzer::DiffRow]| {
        let _ = write!(h, "<h3>{}</h3>", esc(title));
        if rows.is_empty() {
            h.push_str("<p class=\"muted\">none</p>");
            return;
        }
        let mut tb = Table::new(&[
            ("name", false),
            ("before µs", true),
            ("after µs", true),
            ("change µs", true),
            ("change %", true),
            ("share of the change %", true),
        ]);
        for r in rows.iter().take(25) {
            let pct = if r.before_ns > 0.0 {
                r.delta_ns * 100.0 / r.before_ns
            } else {
                f64::NAN
            };
            let name = match &r.detail {
                Some(dt) => format!("{} {}", r.name, short(dt, 60)),
                None => r.name.clone(),
            };
            tb.row(&[
                code(&short(&name, 140)),
                num(us(r.before_ns), r.before_ns),
                num(us(r.after_ns), r.after_ns),
                num(format!("{:+.1}", r.delta_ns / 1e3), r.delta_ns),
                if pct.is_finite() {
                    num(format!("{pct:+.1}"), pct)
                } else {
                    num("new".into(), f64::MAX)
                },
                num(format!("{:.1}", share(r.delta_ns)), share(r.delta_ns)),
            ]);
        }
        h.push_str(&tb.finish());
    };
    use fuseprof_analyzer::DiffStatus as S;
    fn pick(rows: &[fuseprof_analyzer::DiffRow], s: S) -> Vec<&fuseprof_analyzer::DiffRow> {
        rows.iter().filter(|r| r.status == s).collect()
    }
    table(h, "Ops that got slower", &pick(&diff.ops, S::Slower));
    table(h, "Ops that got faster", &pick(&diff.ops, S::Faster));
    table(h, "Kernels added", &pick(&diff.kernels, S::Added));
    table(h, "Kernels removed", &pick(&diff.kernels, S::Removed));
    table(
        h,
        "Kernels that got slower",
        &pick(&diff.kernels, S::Slower),
    );
    h.push_str("</section>");
    Ok(())
}

fn history_section(h: &mut String, d: &ReportData) -> Result<()> {
    let Some(runs) = &d.history else {
        return Ok(());
    };
    h.push_str("<section id=\"history\"><h2>History</h2>");
    let mut points: Vec<(String, f64)> = runs
        .iter()
        .map(|r| {
            (
                r.labels
                    .get("commit")
                    .map(|c| short(c, 10))
                    .unwrap_or_else(|| unix_date(r.recorded_unix_ns).chars().take(10).collect()),
                r.step_gpu_median_ns,
            )
        })
        .collect();
    let this = d
        .analysis
        .steps
        .gpu
        .as_ref()
        .map(|s| s.median_ns)
        .unwrap_or(d.analysis.totals.gpu_ns as f64);
    points.push(("this run".into(), this));
    let _ = write!(
        h,
        "<p>{} earlier runs from the history database, and this run last.</p>",
        runs.len()
    );
    h.push_str(&charts::trend(&points)?);
    h.push_str("</section>");
    Ok(())
}
