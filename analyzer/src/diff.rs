//! Two analyses compared: per op type, op type + shapes and kernel, what was added, removed,
//! got faster or slower, and the change in GPU time per step.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::report::{fit, ms, short_kernel_name, WIDTH};
use crate::Analysis;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffStatus {
    Added,
    Removed,
    Faster,
    Slower,
    /// Within 2% or 1 us.
    Same,
}

/// One op type, shape or kernel in both runs. Times are per step when both runs have steps
/// (run total divided by the step count), else per run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffRow {
    pub name: String,
    /// Shapes and dtypes, for the shape table.
    pub detail: Option<String>,
    pub status: DiffStatus,
    pub before_ns: f64,
    pub after_ns: f64,
    pub delta_ns: f64,
    pub before_count: f64,
    pub after_count: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub before: String,
    pub after: String,
    /// `per_step` or `per_run`.
    pub unit: String,
    pub before_steps: usize,
    pub after_steps: usize,
    /// GPU time per unit.
    pub before_gpu_ns: f64,
    pub after_gpu_ns: f64,
    pub delta_ns: f64,
    pub delta_pct: f64,
    pub ops: Vec<DiffRow>,
    pub shapes: Vec<DiffRow>,
    pub kernels: Vec<DiffRow>,
}

fn status(before: Option<f64>, after: Option<f64>) -> DiffStatus {
    match (before, after) {
        (None, _) => DiffStatus::Added,
        (_, None) => DiffStatus::Removed,
        (Some(b), Some(a)) => {
            let d = a - b;
            if d.abs() <= (0.02 * b).max(1_000.0) {
                DiffStatus::Same
            } else if d < 0.0 {
                DiffStatus::Faster
            } else {
                DiffStatus::Slower
            }
        }
    }
}

type Side = BTreeMap<(String, Option<String>), (f64, f64)>;

fn rows(before: &Side, after: &Side) -> Vec<DiffRow> {
    let mut keys: Vec<&(String, Option<String>)> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<DiffRow> = keys
        .into_iter()
        .map(|k| {
            let b = before.get(k);
            let a = after.get(k);
            let (bn, bc) = b.copied().unwrap_or((0.0, 0.0));
            let (an, ac) = a.copied().unwrap_or((0.0, 0.0));
            DiffRow {
                name: k.0.clone(),
                detail: k.1.clone(),
                status: status(b.map(|x| x.0), a.map(|x| x.0)),
                before_ns: bn,
                after_ns: an,
                delta_ns: an - bn,
                before_count: bc,
                after_count: ac,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        y.delta_ns
            .abs()
            .total_cmp(&x.delta_ns.abs())
            .then_with(|| (&x.name, &x.detail).cmp(&(&y.name, &y.detail)))
    });
    out
}

/// Compares `before` with `after` (both from [`crate::analyze`], typically whole-run).
pub fn diff(before: &Analysis, after: &Analysis) -> Diff {
    let (bs, as_) = (before.steps.steps.len(), after.steps.steps.len());
    let per_step = bs > 0 && as_ > 0 && before.step.is_none() && after.step.is_none();
    let (bd, ad) = if per_step {
        (bs as f64, as_ as f64)
    } else {
        (1.0, 1.0)
    };
    let side_ops = |a: &Analysis, d: f64| -> Side {
        a.by_op
            .iter()
            .filter(|r| r.self_ns > 0)
            .map(|r| {
                (
                    (r.name.clone(), None),
                    (r.self_ns as f64 / d, r.kernels as f64 / d),
                )
            })
            .collect()
    };
    let side_shapes = |a: &Analysis, d: f64| -> Side {
        a.by_shape
            .iter()
            .map(|r| {
                let detail = match (&r.dims, &r.dtypes) {
                    (None, None) => None,
                    (dims, types) => Some(
                        format!(
                            "{} {}",
                            dims.as_deref().unwrap_or("[]"),
                            types.as_deref().unwrap_or("")
                        )
                        .trim()
                        .to_string(),
                    ),
                };
                (
                    (r.name.clone(), detail),
                    (r.self_ns as f64 / d, r.kernels as f64 / d),
                )
            })
            .collect()
    };
    let side_kernels = |a: &Analysis, d: f64| -> Side {
        a.by_kernel
            .iter()
            .map(|r| {
                (
                    (r.name.clone(), None),
                    (r.total_ns as f64 / d, r.count as f64 / d),
                )
            })
            .collect()
    };
    let before_gpu = before.totals.gpu_ns as f64 / bd;
    let after_gpu = after.totals.gpu_ns as f64 / ad;
    Diff {
        before: before.run.file.clone(),
        after: after.run.file.clone(),
        unit: if per_step { "per_step" } else { "per_run" }.into(),
        before_steps: bs,
        after_steps: as_,
        before_gpu_ns: before_gpu,
        after_gpu_ns: after_gpu,
        delta_ns: after_gpu - before_gpu,
        delta_pct: if before_gpu > 0.0 {
            ((after_gpu - before_gpu) * 100.0 / before_gpu * 100.0).round() / 100.0
        } else {
            0.0
        },
        ops: rows(&side_ops(before, bd), &side_ops(after, ad)),
        shapes: rows(&side_shapes(before, bd), &side_shapes(after, ad)),
        kernels: rows(&side_kernels(before, bd), &side_kernels(after, ad)),
    }
}

/// The diff as text tables, `top` rows each, ranked by the size of the change.
pub fn render_diff_text(d: &Diff, top: usize) -> String {
    let mut o = String::new();
    let unit = if d.unit == "per_step" {
        format!("per step ({} vs {} steps)", d.before_steps, d.after_steps)
    } else {
        "per run (no steps in one of the runs)".to_string()
    };
    let _ = writeln!(o, "{} -> {}: GPU time {unit}", d.before, d.after);
    let _ = writeln!(
        o,
        "  {} ms -> {} ms: {:+.3} ms ({:+.2}%)",
        ms(d.before_gpu_ns as i64),
        ms(d.after_gpu_ns as i64),
        d.delta_ns / 1e6,
        d.delta_pct
    );
    for (what, rows) in [
        ("op type", &d.ops),
        ("op type + shapes", &d.shapes),
        ("kernel", &d.kernels),
    ] {
        let mut counts = BTreeMap::new();
        for r in rows.iter() {
            *counts.entry(r.status).or_insert(0usize) += 1;
        }
        let summary: Vec<String> = counts
            .iter()
            .map(|(s, n)| {
                format!(
                    "{n} {}",
                    serde_json::to_value(s)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                )
            })
            .collect();
        let _ = writeln!(o, "\nBy {what}: {}", summary.join(", "));
        let name_w = WIDTH - 2 - 49;
        let _ = writeln!(
            o,
            "  {:<name_w$} {:>8} {:>12} {:>12} {:>12}",
            what, "status", "before ms", "after ms", "change ms"
        );
        for r in rows
            .iter()
            .filter(|r| r.status != DiffStatus::Same)
            .take(top)
        {
            let label = match &r.detail {
                Some(d) => format!("{} {d}", r.name),
                None if what == "kernel" => short_kernel_name(&r.name),
                None => r.name.clone(),
            };
            let st = match r.status {
                DiffStatus::Added => "added",
                DiffStatus::Removed => "removed",
                DiffStatus::Faster => "faster",
                DiffStatus::Slower => "slower",
                DiffStatus::Same => "same",
            };
            let _ = writeln!(
                o,
                "  {:<name_w$} {:>8} {:>12} {:>12} {:>+12.3}",
                fit(&label, name_w),
                st,
                ms(r.before_ns as i64),
                ms(r.after_ns as i64),
                r.delta_ns / 1e6
            );
        }
    }
    o
}
