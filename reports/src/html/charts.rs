//! The report's charts, drawn with plotters into SVG strings that the page inlines.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{Error, Result};

/// A colour per kernel class, stable across charts and reports.
pub fn class_color(class: &str) -> RGBColor {
    match class {
        "gemm" => RGBColor(0x4e, 0x79, 0xa7),
        "attention" => RGBColor(0xf2, 0x8e, 0x2b),
        "conv" => RGBColor(0xe1, 0x57, 0x59),
        "elementwise" => RGBColor(0x76, 0xb7, 0xb2),
        "reduction" => RGBColor(0x59, 0xa1, 0x4f),
        "normalization" => RGBColor(0xed, 0xc9, 0x48),
        "softmax" => RGBColor(0xb0, 0x7a, 0xa1),
        "copy/layout" => RGBColor(0xff, 0x9d, 0xa7),
        "memcpy" => RGBColor(0x9c, 0x75, 0x5f),
        "memset" => RGBColor(0xba, 0xb0, 0xac),
        "communication" => RGBColor(0x17, 0xbe, 0xcf),
        _ => RGBColor(0x7f, 0x7f, 0x7f),
    }
}

const BLUE_: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
const GREY_: RGBColor = RGBColor(0xa0, 0xa0, 0xa0);
const RED_: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const GREEN_: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);

fn chart_err(e: impl std::fmt::Display) -> Error {
    Error::Chart(e.to_string())
}

/// Draws into an SVG string of `size` pixels and returns it ready to inline in HTML: the
/// namespace attribute is dropped (HTML does not need it, and the page holds no URL at all).
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        draw(&root)?;
        root.present().map_err(chart_err)?;
    }
    Ok(out.replace(" xmlns=\"http://www.w3.org/2000/svg\"", ""))
}

/// Per-step GPU time of the run (and of the baseline, grey, beside it), with each run's mean.
pub fn steps(current: &[f64], baseline: Option<&[f64]>) -> Result<String> {
    let n = current.len().max(baseline.map_or(0, |b| b.len())).max(1);
    let ymax = current
        .iter()
        .chain(baseline.unwrap_or(&[]))
        .fold(0.0f64, |a, &b| a.max(b))
        / 1e6
        * 1.15;
    svg((720, 300), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..ymax.max(1e-3))
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.min(30))
            .x_label_formatter(&|x| format!("{}", x.round() as i64))
            .x_desc("step")
            .y_desc("GPU ms per step")
            .draw()
            .map_err(chart_err)?;
        let width = if baseline.is_some() { 0.38 } else { 0.7 };
        let offset = if baseline.is_some() { 0.0 } else { -0.35 };
        if let Some(b) = baseline {
            chart
                .draw_series(b.iter().enumerate().map(|(i, &v)| {
                    let x = i as f64;
                    Rectangle::new([(x - width, 0.0), (x, v / 1e6)], GREY_.filled())
                }))
                .map_err(chart_err)?
                .label("baseline")
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], GREY_.filled()));
            let mean = b.iter().sum::<f64>() / b.len().max(1) as f64 / 1e6;
            chart
                .draw_series(LineSeries::new(
                    [(-0.5, mean), (n as f64 - 0.5, mean)],
                    GREY_.stroke_width(2),
                ))
                .map_err(chart_err)?;
        }
        chart
            .draw_series(current.iter().enumerate().map(|(i, &v)| {
                let x = i as f64 + offset;
                Rectangle::new([(x, 0.0), (x + width.max(0.38), v / 1e6)], BLUE_.filled())
            }))
            .map_err(chart_err)?
            .label("this run")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], BLUE_.filled()));
        let mean = current.iter().sum::<f64>() / current.len().max(1) as f64 / 1e6;
        chart
            .draw_series(LineSeries::new(
                [(-0.5, mean), (n as f64 - 0.5, mean)],
                BLUE_.stroke_width(2),
            ))
            .map_err(chart_err)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(chart_err)
    })
}

/// Horizontal bars: one per `(label, value in ms, colour)`, top to bottom.
pub fn hbars(rows: &[(String, f64, RGBColor)], x_desc: &str) -> Result<String> {
    let n = rows.len().max(1);
    let lo = rows.iter().fold(0.0f64, |a, r| a.min(r.1));
    let hi = rows.iter().fold(0.0f64, |a, r| a.max(r.1));
    let pad = (hi - lo).max(1e-6) * 0.08;
    let (lo, hi) = (if lo < 0.0 { lo - pad } else { 0.0 }, hi + pad);
    let height = 40 + 22 * n as u32 + 30;
    svg((760, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(300)
            .build_cartesian_2d(lo..hi, (0..n).into_segmented())
            .map_err(chart_err)?;
        let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    // Row 0 at the top.
                    n.checked_sub(1 + *i)
                        .and_then(|k| labels.get(k))
                        .cloned()
                        .unwrap_or_default()
                }
                SegmentValue::Last => String::new(),
            })
            .x_desc(x_desc)
            .draw()
            .map_err(chart_err)?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, (_, v, c))| {
                let row = n - 1 - i;
                let mut bar = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(row)),
                        (*v, SegmentValue::Exact(row + 1)),
                    ],
                    c.filled(),
                );
                bar.set_margin(3, 3, 0, 0);
                bar
            }))
            .map_err(chart_err)?;
        Ok(())
    })
}

/// Bars for a signed change: red where slower, green where faster.
pub fn delta_bars(rows: &[(String, f64)], x_desc: &str) -> Result<String> {
    let colored: Vec<(String, f64, RGBColor)> = rows
        .iter()
        .map(|(l, v)| (l.clone(), *v, if *v > 0.0 { RED_ } else { GREEN_ }))
        .collect();
    hbars(&colored, x_desc)
}

/// One GPU record on the timeline: its row, start and end in ms from the window's start, class.
pub struct Span {
    pub row: usize,
    pub start_ms: f64,
    pub end_ms: f64,
    pub class: String,
}

/// Streams as rows, records as boxes coloured by class.
pub fn timeline(rows: &[String], spans: &[Span], window_ms: f64) -> Result<String> {
    let n = rows.len().max(1);
    let height = 90 + 28 * n as u32;
    let mut classes: Vec<&str> = spans.iter().map(|s| s.class.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    svg((960, height.max(220)), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(130)
            .build_cartesian_2d(0f64..window_ms.max(1e-3), (0..n).into_segmented())
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => n
                    .checked_sub(1 + *i)
                    .and_then(|k| rows.get(k))
                    .cloned()
                    .unwrap_or_default(),
                SegmentValue::Last => String::new(),
            })
            .x_desc("ms from the step's first GPU record")
            .draw()
            .map_err(chart_err)?;
        for class in classes {
            let color = class_color(class);
            chart
                .draw_series(spans.iter().filter(|s| s.class == class).map(|s| {
                    let row = n - 1 - s.row;
                    // A record shorter than a pixel still shows.
                    let end = s.end_ms.max(s.start_ms + window_ms / 2000.0);
                    let mut r = Rectangle::new(
                        [
                            (s.start_ms, SegmentValue::Exact(row)),
                            (end, SegmentValue::Exact(row + 1)),
                        ],
                        color.filled(),
                    );
                    r.set_margin(4, 4, 0, 0);
                    r
                }))
                .map_err(chart_err)?
                .label(class)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(chart_err)
    })
}

/// One op on the roofline.
pub struct RoofPoint {
    pub label: String,
    /// FLOP per byte.
    pub intensity: f64,
    pub flops_per_s: f64,
    /// Share of the plotted ops' GPU time, 0..1: the dot's size.
    pub weight: f64,
    pub memory_bound: bool,
}

/// One op on the roofline at its measured intensity: its FLOPs (from shapes) over the DRAM
/// bytes the hardware counters measured for its kernels.
#[derive(Clone, Debug)]
pub struct MeasuredRoofPoint {
    /// FLOP per measured DRAM byte.
    pub intensity: f64,
    pub flops_per_s: f64,
    /// Where the same op sits estimated from shapes (FLOP per estimated byte).
    pub estimated_intensity: f64,
    /// Share of the plotted ops' GPU time, 0..1, as [`RoofPoint::weight`].
    pub weight: f64,
    /// Some of its kernels' values are shared with concurrent work or estimated from samples
    /// longer than the kernel: drawn hollow, under a legend entry of their own.
    pub flagged: bool,
}

const MEASURED_: RGBColor = RGBColor(0x6a, 0x3d, 0x9a);

/// Achieved FLOP/s against arithmetic intensity, under the memory-bandwidth slope and the
/// 16-bit compute roof (and the 32-bit one where known). Ops measured by hardware counters
/// (`measured`, empty without counters) are drawn again at their measured intensity, as
/// triangles joined to their estimated dot; with none the chart is as it always was.
pub fn roofline(
    points: &[RoofPoint],
    measured: &[MeasuredRoofPoint],
    mem_bytes_per_s: f64,
    flops16: f64,
    flops32: Option<f64>,
) -> Result<String> {
    let xs = points
        .iter()
        .map(|p| p.intensity)
        .chain(measured.iter().map(|p| p.intensity))
        .filter(|x| *x > 0.0 && x.is_finite());
    let xmin = xs.clone().fold(f64::INFINITY, f64::min).min(0.1) / 2.0;
    let xmax = xs
        .fold(0.0f64, f64::max)
        .max(flops16 / mem_bytes_per_s * 4.0)
        * 2.0;
    let ymin = points
        .iter()
        .map(|p| p.flops_per_s)
        .filter(|y| *y > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(flops16 / 1e4)
        / 2.0;
    let ymax = flops16 * 2.0;
    svg((900, 480), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity, FLOP per byte (log)")
            .y_desc("achieved TFLOP/s (log)")
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_label_formatter(&|y| format!("{:.3}", y / 1e12))
            .draw()
            .map_err(chart_err)?;
        let grid: Vec<f64> = (0..=200)
            .map(|i| xmin * (xmax / xmin).powf(i as f64 / 200.0))
            .collect();
        chart
            .draw_series(LineSeries::new(
                grid.iter()
                    .map(|&x| (x, (x * mem_bytes_per_s).min(flops16))),
                BLACK.stroke_width(2),
            ))
            .map_err(chart_err)?
            .label(format!(
                "ceiling: {:.2} TB/s, {:.0} TFLOP/s (16-bit)",
                mem_bytes_per_s / 1e12,
                flops16 / 1e12
            ))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
        if let Some(f32roof) = flops32 {
            chart
                .draw_series(LineSeries::new(
                    grid.iter()
                        .map(|&x| (x, (x * mem_bytes_per_s).min(f32roof)))
                        .filter(|p| p.1 >= f32roof * 0.999),
                    GREY_.stroke_width(1),
                ))
                .map_err(chart_err)?
                .label(format!("32-bit roof {:.0} TFLOP/s", f32roof / 1e12))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], GREY_));
        }
        // With measured points beside them, the dots say where they come from.
        let (memory_name, compute_name) = if measured.is_empty() {
            ("memory-bound op", "compute-bound op")
        } else {
            (
                "estimated from shapes, memory-bound op",
                "estimated from shapes, compute-bound op",
            )
        };
        for (bound, color, name) in [
            (true, RGBColor(0x4e, 0x79, 0xa7), memory_name),
            (false, RGBColor(0xe1, 0x57, 0x59), compute_name),
        ] {
            chart
                .draw_series(
                    points
                        .iter()
                        .filter(|p| p.memory_bound == bound && p.intensity > 0.0)
                        .filter(|p| p.flops_per_s > 0.0)
                        .map(|p| {
                            let r = 3.0 + 14.0 * p.weight.sqrt();
                            Circle::new(
                                (p.intensity, p.flops_per_s),
                                r as i32,
                                color.mix(0.6).filled(),
                            )
                        }),
                )
                .map_err(chart_err)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 5, y), 4, color.filled()));
        }
        let drawn: Vec<&MeasuredRoofPoint> = measured
            .iter()
            .filter(|p| p.intensity > 0.0 && p.intensity.is_finite() && p.flops_per_s > 0.0)
            .collect();
        if !drawn.is_empty() {
            // Each measured triangle joined to its estimated dot: how far the shapes were off.
            for p in drawn.iter().filter(|p| p.estimated_intensity > 0.0) {
                chart
                    .draw_series(LineSeries::new(
                        [
                            (p.estimated_intensity, p.flops_per_s),
                            (p.intensity, p.flops_per_s),
                        ],
                        MEASURED_.mix(0.35).stroke_width(1),
                    ))
                    .map_err(chart_err)?;
            }
            for (flagged, name) in [
                (false, "measured (CUPTI PM sampling)"),
                (true, "measured, values shared or estimated"),
            ] {
                let style = if flagged {
                    MEASURED_.stroke_width(2)
                } else {
                    MEASURED_.mix(0.8).filled()
                };
                let these: Vec<&&MeasuredRoofPoint> =
                    drawn.iter().filter(|p| p.flagged == flagged).collect();
                if these.is_empty() {
                    continue;
                }
                chart
                    .draw_series(these.iter().map(|p| {
                        let r = 4.0 + 14.0 * p.weight.sqrt();
                        TriangleMarker::new((p.intensity, p.flops_per_s), r as i32, style)
                    }))
                    .map_err(chart_err)?
                    .label(name)
                    .legend(move |(x, y)| TriangleMarker::new((x + 5, y), 5, style));
            }
        }
        // Name the heaviest few, where a reader looks first.
        let mut heavy: Vec<&RoofPoint> = points
            .iter()
            .filter(|p| p.intensity > 0.0 && p.flops_per_s > 0.0)
            .collect();
        heavy.sort_by(|a, b| b.weight.total_cmp(&a.weight));
        chart
            .draw_series(heavy.iter().take(6).map(|p| {
                Text::new(
                    p.label.clone(),
                    (p.intensity * 1.12, p.flops_per_s),
                    ("sans-serif", 11).into_font(),
                )
            }))
            .map_err(chart_err)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(chart_err)
    })
}

/// Step time of the runs in the history, oldest first; the last point is this run when it is
/// appended by the caller.
pub fn trend(points: &[(String, f64)]) -> Result<String> {
    let n = points.len().max(1);
    let ymax = points.iter().fold(0.0f64, |a, p| a.max(p.1)) / 1e6 * 1.15;
    svg((900, 300), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..ymax.max(1e-3))
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .x_labels(n.min(20))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    points
                        .get(i as usize)
                        .map(|p| p.0.clone())
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc("run (oldest first)")
            .y_desc("GPU ms per step (median)")
            .draw()
            .map_err(chart_err)?;
        chart
            .draw_series(LineSeries::new(
                points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (i as f64, p.1 / 1e6)),
                BLUE_.stroke_width(2),
            ))
            .map_err(chart_err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| Circle::new((i as f64, p.1 / 1e6), 4, BLUE_.filled())),
            )
            .map_err(chart_err)?;
        Ok(())
    })
}
