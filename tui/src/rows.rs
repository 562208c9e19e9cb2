//! The rows the views show, as data: the hotspot tables (filtered and sorted) and the visible
//! rows of the operator tree. The app moves its selection over them; the UI draws them.

use std::collections::HashSet;

use fuseprof_analyzer::{Analysis, GroupBy, OpTree};

use crate::format::{count, dur, short_kernel};

/// The step's floor in one line (`analyzer/src/floor.rs`: the model fully fused, at the GPU's
/// ceilings): the floor, what the step measures against it, and the op types holding most of
/// the gap; None where the analysis has no floor.
pub fn floor_line(a: &Analysis) -> Option<String> {
    let f = a.floor.as_ref()?;
    let ns = |v: f64| dur(v.round() as i64);
    let reach = match f.fraction {
        Some(x) => format!("{:.1}% of the {} measured", x * 100.0, ns(f.measured_ns)),
        None => format!(
            "{:.1}% of the {} its modelled ops take",
            f.covered_fraction * 100.0,
            ns(f.covered_ns)
        ),
    };
    let gaps: Vec<String> = f
        .by_op
        .iter()
        .take(3)
        .map(|g| {
            format!(
                "{} {}",
                g.name.rsplit("::").next().unwrap_or(&g.name),
                ns(g.gap_ns)
            )
        })
        .collect();
    Some(format!(
        "floor {}/step, {}-bound: {reach}; gap: {}",
        ns(f.floor_ns),
        f.bound,
        gaps.join(", ")
    ))
}

/// A hotspot table as drawn: rows filtered and sorted.
pub struct HotTable {
    pub rows: Vec<HotRow>,
}

pub struct HotRow {
    pub cells: Vec<String>,
    pub nums: Vec<f64>,
    /// The name the row's instances are found by, and its shapes (shape table).
    pub key: String,
    pub detail: Option<String>,
}

pub fn hot_columns(t: GroupBy) -> Vec<&'static str> {
    match t {
        GroupBy::Op => vec![
            "op",
            "self",
            "total",
            "%",
            "instances",
            "kernels",
            "mean self",
        ],
        GroupBy::Shape => vec![
            "op",
            "shapes",
            "self",
            "%",
            "instances",
            "kernels",
            "mean self",
        ],
        GroupBy::Module => vec!["module", "self", "total", "%", "kernels", "launches"],
        GroupBy::Kernel => vec!["kernel", "class", "total", "%", "count", "mean", "max"],
        GroupBy::Class => vec!["class", "total", "%", "count", "mean"],
    }
}

/// The rows of a hotspot table: `table`'s grouping of the analysis, the rows whose first two
/// cells or key contain `filter`, sorted by column `sort` (0: the analyzer's order).
pub fn hot_table(
    a: &Analysis,
    table: GroupBy,
    filter: &str,
    sort: usize,
    ascending: bool,
) -> HotTable {
    let ms = |ns: i64| dur(ns);
    let mut rows: Vec<HotRow> = match table {
        GroupBy::Op => a
            .by_op
            .iter()
            .map(|r| HotRow {
                cells: vec![
                    r.name.clone(),
                    ms(r.self_ns),
                    ms(r.total_ns),
                    format!("{:.1}", r.pct),
                    count(r.instances),
                    count(r.kernels),
                    dur(r.mean_self_ns as i64),
                ],
                nums: vec![
                    0.0,
                    r.self_ns as f64,
                    r.total_ns as f64,
                    r.pct,
                    r.instances as f64,
                    r.kernels as f64,
                    r.mean_self_ns,
                ],
                key: r.name.clone(),
                detail: None,
            })
            .collect(),
        GroupBy::Shape => a
            .by_shape
            .iter()
            .map(|r| HotRow {
                cells: vec![
                    r.name.clone(),
                    r.dims.clone().unwrap_or_default(),
                    ms(r.self_ns),
                    format!("{:.1}", r.pct),
                    count(r.instances),
                    count(r.kernels),
                    dur(r.mean_self_ns as i64),
                ],
                nums: vec![
                    0.0,
                    0.0,
                    r.self_ns as f64,
                    r.pct,
                    r.instances as f64,
                    r.kernels as f64,
                    r.mean_self_ns,
                ],
                key: r.name.clone(),
                detail: r.dims.clone(),
            })
            .collect(),
        GroupBy::Module => a
            .by_module
            .iter()
            .map(|r| HotRow {
                cells: vec![
                    r.path.clone(),
                    ms(r.self_ns),
                    ms(r.total_ns),
                    format!("{:.1}", r.pct),
                    count(r.kernels),
                    count(r.launches),
                ],
                nums: vec![
                    0.0,
                    r.self_ns as f64,
                    r.total_ns as f64,
                    r.pct,
                    r.kernels as f64,
                    r.launches as f64,
                ],
                key: r.path.clone(),
                detail: None,
            })
            .collect(),
        GroupBy::Kernel => a
            .by_kernel
            .iter()
            .map(|r| HotRow {
                cells: vec![
                    short_kernel(&r.name),
                    r.class.as_str().into(),
                    ms(r.total_ns),
                    format!("{:.1}", r.pct),
                    count(r.count),
                    dur(r.mean_ns as i64),
                    dur(r.max_ns),
                ],
                nums: vec![
                    0.0,
                    0.0,
                    r.total_ns as f64,
                    r.pct,
                    r.count as f64,
                    r.mean_ns,
                    r.max_ns as f64,
                ],
                key: r.name.clone(),
                detail: None,
            })
            .collect(),
        GroupBy::Class => a
            .by_class
            .iter()
            .map(|r| HotRow {
                cells: vec![
                    r.class.as_str().into(),
                    ms(r.total_ns),
                    format!("{:.1}", r.pct),
                    count(r.count),
                    dur(r.mean_ns as i64),
                ],
                nums: vec![0.0, r.total_ns as f64, r.pct, r.count as f64, r.mean_ns],
                key: r.class.as_str().into(),
                detail: None,
            })
            .collect(),
    };
    if !filter.is_empty() {
        let f = filter.to_lowercase();
        rows.retain(|r| {
            r.cells
                .iter()
                .take(2)
                .any(|c| c.to_lowercase().contains(&f))
                || r.key.to_lowercase().contains(&f)
        });
    }
    // Sort column 0 (the default) keeps the analyzer's order; others sort by value.
    let col = sort;
    if col > 0 {
        rows.sort_by(|a, b| {
            let o = if a.nums[col] == 0.0 && b.nums[col] == 0.0 {
                a.cells[col].cmp(&b.cells[col])
            } else {
                a.nums[col].total_cmp(&b.nums[col])
            };
            if ascending {
                o
            } else {
                o.reverse()
            }
        });
    } else if ascending {
        rows.reverse();
    }
    HotTable { rows }
}

/// The visible rows of the tree: (node, depth), depth-first through expanded nodes.
pub fn tree_rows(tree: &OpTree, expanded: &HashSet<usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if tree.nodes.is_empty() {
        return out;
    }
    let mut stack: Vec<(usize, usize)> = tree.nodes[0]
        .children
        .iter()
        .rev()
        .map(|&c| (c, 0))
        .collect();
    while let Some((n, d)) = stack.pop() {
        out.push((n, d));
        if expanded.contains(&n) {
            stack.extend(tree.nodes[n].children.iter().rev().map(|&c| (c, d + 1)));
        }
    }
    out
}
