//! Drawing: one function per view, all reading [`App`]. The timeline asks each visible lane
//! for one aggregate per column ([`RunState::cells`]), so a frame costs what the screen holds.

use fuseprof_analyzer::{Class, GroupBy, OpNodeKind};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span as TSpan};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::app::{App, Input, View, ADVISOR_SETTINGS};
use crate::format::{count, dur, fit, nice_step, short_kernel, tick};
use crate::model::*;
use crate::rows;
use crate::run::{AdviceState, AnalysisState};

/// Smallest terminal the explorer draws in.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 12;
const LABEL_WIDTH: u16 = 18;

/// The colour of a kernel class.
pub fn class_color(c: Class) -> Color {
    match c {
        Class::Gemm => Color::LightBlue,
        Class::Attention => Color::Magenta,
        Class::Conv => Color::Cyan,
        Class::Elementwise => Color::Green,
        Class::Reduction => Color::Yellow,
        Class::Normalization => Color::LightYellow,
        Class::Softmax => Color::LightMagenta,
        Class::CopyLayout => Color::LightGreen,
        Class::Memcpy => Color::Red,
        Class::Memset => Color::LightRed,
        Class::Communication => Color::LightCyan,
        Class::Other => Color::Gray,
    }
}

/// The colour of a host lane's record, from its name (a stable hash into a palette).
fn name_color(lane: LaneKind, key: u32) -> Color {
    const OPS: [Color; 6] = [
        Color::Green,
        Color::Yellow,
        Color::Cyan,
        Color::LightGreen,
        Color::LightYellow,
        Color::LightCyan,
    ];
    const MODULES: [Color; 3] = [Color::Blue, Color::LightBlue, Color::Magenta];
    let h = key.wrapping_mul(2_654_435_761) >> 16;
    match lane {
        LaneKind::Module(_) => MODULES[h as usize % MODULES.len()],
        LaneKind::Api => Color::Gray,
        LaneKind::Other => Color::DarkGray,
        _ => OPS[h as usize % OPS.len()],
    }
}

fn lane_label(lane: LaneKind) -> String {
    match lane {
        LaneKind::Gpu => "kernels".into(),
        LaneKind::GpuRanges => "gpu ranges".into(),
        LaneKind::Module(d) => format!("module {d}"),
        LaneKind::Range(d) => format!("range {d}"),
        LaneKind::Other => "other".into(),
        LaneKind::Api => "cuda api".into(),
    }
}

pub fn draw(f: &mut Frame, app: &mut App) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small: {}x{}, fuseprof tui needs at least {MIN_WIDTH}x{MIN_HEIGHT} (resize, or q to quit)",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let [tabs, main, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_tabs(f, app, tabs);
    match app.view {
        View::Timeline => draw_timeline(f, app, main),
        View::Hotspots => draw_hotspots(f, app, main),
        View::Tree => draw_tree(f, app, main),
        View::Details => draw_details(f, app, main, true),
        View::Advisor => draw_advisor(f, app, main),
        View::Diff => {
            let [top, bottom] =
                Layout::vertical([Constraint::Percentage(40), Constraint::Min(5)]).areas(main);
            draw_diff(f, app, top);
            draw_timeline(f, app, bottom);
        }
    }
    draw_status(f, app, status);
    if app.step_popup.is_some() {
        draw_step_popup(f, app, main);
    }
    if app.help {
        draw_help(f, main);
    }
}

fn draw_tabs(f: &mut Frame, app: &App, area: Rect) {
    let mut views = vec![
        (View::Timeline, "1 Timeline"),
        (View::Hotspots, "2 Hotspots"),
        (View::Tree, "3 Tree"),
        (View::Details, "4 Details"),
    ];
    if app.runs.len() > 1 {
        views.push((View::Diff, "5 Diff"));
    }
    views.push((View::Advisor, "6 Advisor"));
    let mut spans = vec![TSpan::styled(
        " fuseprof ",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    for (v, name) in views {
        let style = if v == app.view {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        spans.push(TSpan::styled(format!(" {name} "), style));
    }
    let files: Vec<String> = app.runs.iter().map(|r| r.file_name()).collect();
    spans.push(TSpan::raw(format!("  {}", files.join(" vs "))));
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_timeline(f: &mut Frame, app: &mut App, area: Rect) {
    // The details of a selection take the rows the lanes leave free, at least 6 of them.
    let lanes_h = app.rows().len() as u16 + 1;
    let details_h = match app.details {
        Some(_) if area.height >= 18 => area
            .height
            .saturating_sub(lanes_h)
            .clamp(6, area.height / 2),
        _ => 0,
    };
    let [plot_area, details_area] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(details_h)]).areas(area);
    let [axis, lanes] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(plot_area);
    let plot_w = axis.width.saturating_sub(LABEL_WIDTH);
    app.plot = Rect::new(lanes.x + LABEL_WIDTH, lanes.y, plot_w, lanes.height);
    draw_axis(f, app, Rect::new(axis.x + LABEL_WIDTH, axis.y, plot_w, 1));
    f.render_widget(
        Paragraph::new(fit(
            &format!(
                "{} /col",
                dur((app.to_ns - app.from_ns) / plot_w.max(1) as i64)
            ),
            LABEL_WIDTH as usize,
        )),
        Rect::new(axis.x, axis.y, LABEL_WIDTH, 1),
    );

    let rows = app.rows();
    let height = lanes.height as usize;
    if app.row >= rows.len() {
        app.row = rows.len().saturating_sub(1);
    }
    if app.row < app.scroll {
        app.scroll = app.row;
    }
    if app.row >= app.scroll + height {
        app.scroll = app.row + 1 - height;
    }
    let sel = app.selection;
    let flow = app.details.as_ref().and_then(|d| d.flow);
    app.frame_unknown = false;
    app.frame_sampled = false;
    let cursor_col = plot_w / 2;
    for (i, row) in rows.iter().enumerate().skip(app.scroll).take(height) {
        let y = lanes.y + (i - app.scroll) as u16;
        let (from, to) = app.window(row.run);
        let prefix = if app.runs.len() > 1 {
            ["A ", "B "][row.run.min(1)]
        } else {
            ""
        };
        let run = &mut app.runs[row.run];
        let label = if row.first {
            format!("{prefix}{}", run.meta.tracks[row.track].label)
        } else {
            format!("{prefix} {}", lane_label(row.lane))
        };
        let label_style = if i == app.row {
            Style::new().add_modifier(Modifier::REVERSED)
        } else if row.first {
            Style::new().add_modifier(Modifier::BOLD)
        } else {
            Style::new().fg(Color::DarkGray)
        };
        f.render_widget(
            Paragraph::new(TSpan::styled(
                fit(&label, LABEL_WIDTH as usize - 1),
                label_style,
            )),
            Rect::new(lanes.x, y, LABEL_WIDTH - 1, 1),
        );
        let cells = run.cells(row.track, row.lane, from, to, plot_w as usize);
        app.frame_unknown |= cells.iter().any(|c| !c.known);
        app.frame_sampled |= cells.iter().any(|c| c.sampled);
        let names = &run.names;
        let buf = f.buffer_mut();
        let mut x = 0usize;
        while x < cells.len() {
            let c = cells[x];
            let px = app.plot.x + x as u16;
            // A record that fills several columns is drawn as a bar with its name in it.
            if let Some(sp) = c.span.filter(|s| covers(s, from, to, plot_w, x)) {
                let mut end = x + 1;
                while end < cells.len()
                    && cells[end].span == Some(sp)
                    && covers(&sp, from, to, plot_w, end)
                {
                    end += 1;
                }
                let color = cell_color(row.lane, c.key);
                let selected = is_selected(sel, row, &sp)
                    || flow.is_some_and(|(t, fs)| t == row.track && fs.item == sp.item);
                let style = if selected {
                    Style::new()
                        .bg(Color::White)
                        .fg(Color::Black)
                        .add_modifier(Modifier::BOLD)
                } else {
                    Style::new().bg(color).fg(Color::Black)
                };
                let text = span_name(names, row.lane, &sp);
                let mut chars = text.chars();
                for cx in x..end {
                    let ch = if cx == x && end - x > 1 {
                        '▏'
                    } else {
                        chars.next().unwrap_or(' ')
                    };
                    if let Some(cell) = buf.cell_mut((app.plot.x + cx as u16, y)) {
                        cell.set_char(ch).set_style(style);
                    }
                }
                x = end;
                continue;
            }
            let (ch, style) = if !c.known {
                ('·', Style::new().fg(Color::DarkGray))
            } else if c.busy <= 0.0 {
                (' ', Style::new())
            } else {
                let color = cell_color(row.lane, c.key);
                let ch = match c.busy {
                    b if b >= 0.75 => '█',
                    b if b >= 0.5 => '▓',
                    b if b >= 0.25 => '▒',
                    _ => '░',
                };
                let selected = c.span.is_some_and(|sp| {
                    is_selected(sel, row, &sp)
                        || flow.is_some_and(|(t, fs)| t == row.track && fs.item == sp.item)
                });
                if selected {
                    (
                        ch,
                        Style::new().fg(Color::White).add_modifier(Modifier::BOLD),
                    )
                } else {
                    (ch, Style::new().fg(color))
                }
            };
            if let Some(cell) = buf.cell_mut((px, y)) {
                cell.set_char(ch).set_style(style);
            }
            x += 1;
        }
        // The cursor column.
        if let Some(cell) = buf.cell_mut((app.plot.x + cursor_col, y)) {
            if cell.symbol() == " " {
                cell.set_char('┊').set_fg(Color::DarkGray);
            }
        }
    }
    if details_h > 0 {
        draw_details(f, app, details_area, false);
    }
}

/// Whether `sp` covers column `x` fully enough to be drawn as a bar there (the record
/// spans at least two columns).
fn covers(sp: &Span, from: i64, to: i64, w: u16, x: usize) -> bool {
    let col = (to - from) as f64 / w.max(1) as f64;
    let a = from as f64 + x as f64 * col;
    sp.dur_ns() as f64 >= 2.0 * col
        && sp.start_ns as f64 <= a + col * 0.5
        && sp.end_ns as f64 >= a + col * 0.5
}

fn is_selected(sel: Option<crate::app::Selection>, row: &crate::app::Row, sp: &Span) -> bool {
    sel.is_some_and(|s| {
        s.run == row.run
            && s.track == row.track
            && (s.span.item == sp.item
                || (matches!(sp.item, ItemRef::At(..))
                    && sp.start_ns == s.span.start_ns
                    && sp.name == s.span.name))
    })
}

fn cell_color(lane: LaneKind, key: u32) -> Color {
    match lane {
        LaneKind::Gpu => class_color(class_of_index(key)),
        _ => name_color(lane, key),
    }
}

fn span_name(names: &NameInfo, lane: LaneKind, sp: &Span) -> String {
    match lane {
        // Copies and fills have no name: their class says what they are.
        LaneKind::Gpu if sp.name.0 == 0 => class_of_index(sp.key).as_str().to_string(),
        LaneKind::Gpu => short_kernel(names.get(sp.name)),
        _ => fuseprof_store::parse_range_name(names.get(sp.name))
            .name
            .to_string(),
    }
}

fn draw_axis(f: &mut Frame, app: &App, area: Rect) {
    let w = area.width.max(1) as f64;
    let span = (app.to_ns - app.from_ns) as f64;
    let step = nice_step(span / w * 14.0);
    let t0 = app.runs[0].meta.first_ns;
    let first = (app.from_ns - t0).div_euclid(step) * step + step;
    // Far into a run, full labels get long: the first tick then says where the view is, the
    // others how far after it they are.
    let relative = tick(first + step, step).chars().count() > 9;
    let buf = f.buffer_mut();
    let mut t = first;
    let mut last_end = 0u16;
    while ((t + t0 - app.from_ns) as f64) < span {
        let x = ((t + t0 - app.from_ns) as f64 / span * w) as u16;
        let label = if relative && t != first {
            format!("|+{}", tick(t - first, step))
        } else if relative {
            format!("|{}", crate::format::at(t, step))
        } else {
            format!("|{}", tick(t, step))
        };
        if x >= last_end && x + label.chars().count() as u16 <= area.width {
            buf.set_string(area.x + x, area.y, &label, Style::new().fg(Color::Gray));
            last_end = x + label.chars().count() as u16 + 1;
        }
        t += step;
    }
}

fn draw_status(f: &mut Frame, app: &App, area: Rect) {
    if let Some(input) = &app.input {
        let text = match input {
            Input::Search(t) => {
                format!("/{t}▏  (Enter: find in kernel and range names, Esc: cancel)")
            }
            Input::Filter(t) => format!("filter: {t}▏  (Enter: apply, Esc: cancel)"),
        };
        f.render_widget(
            Paragraph::new(text).style(Style::new().add_modifier(Modifier::REVERSED)),
            area,
        );
        return;
    }
    let r0 = &app.runs[0];
    let mut parts = vec![format!(
        "cursor {}",
        dur(app.cursor_ns() - r0.meta.first_ns)
    )];
    parts.push(format!("view {}", dur(app.to_ns - app.from_ns)));
    if let Some(sel) = app.selection {
        let r = &app.runs[sel.run];
        let name = match sel.span.item {
            ItemRef::Kernel(_) => short_kernel(r.names.get(sel.span.name)),
            ItemRef::Memop(_) => class_of_index(sel.span.key).as_str().into(),
            ItemRef::Api(_) | ItemRef::Range(_) | ItemRef::At(..) => {
                fuseprof_store::parse_range_name(r.names.get(sel.span.name))
                    .name
                    .to_string()
            }
        };
        parts.push(format!("sel {} {}", fit(&name, 40), dur(sel.span.dur_ns())));
    }
    if let Some(s) = app.step {
        parts.push(format!("scope step {s}"));
    }
    if let Some(s) = app.current_step {
        parts.push(format!("at step {s}"));
    }
    let loading: Vec<String> = app
        .runs
        .iter()
        .filter(|r| !r.summary_complete())
        .map(|r| format!("summarising {}/3", r.parts_done.len()))
        .collect();
    parts.extend(loading);
    if app.frame_sampled {
        parts.push("≈ sampled".into());
    }
    if app.runs.iter().any(|r| {
        r.analyses
            .values()
            .any(|a| matches!(a, AnalysisState::Running(_)))
    }) {
        parts.push("analysing…".into());
    }
    if !app.message.is_empty() {
        parts.push(app.message.clone());
    }
    if let Some(e) = app.runs.iter().flat_map(|r| r.errors.last()).next() {
        parts.push(format!("error: {e}"));
    }
    parts.push("? help".into());
    f.render_widget(
        Paragraph::new(parts.join(" │ ")).style(Style::new().bg(Color::DarkGray).fg(Color::White)),
        area,
    );
}

fn draw_details(f: &mut Frame, app: &App, area: Rect, full: bool) {
    let block = Block::default().borders(Borders::TOP).title(" details ");
    let Some(d) = &app.details else {
        f.render_widget(
            Paragraph::new("Nothing selected: on the timeline, move to a lane (j/k) and press Enter, or click a record.").block(block),
            area,
        );
        return;
    };
    let mut lines = vec![Line::from(TSpan::styled(
        d.title.clone(),
        Style::new().add_modifier(Modifier::BOLD),
    ))];
    // Under the timeline each value keeps to one line (the Details view wraps them whole).
    let width = (area.width as usize).saturating_sub(21).max(10);
    for (k, v) in &d.lines {
        let v = if full { v.clone() } else { fit(v, width) };
        lines.push(Line::from(vec![
            TSpan::styled(format!("{k:>18}  "), Style::new().fg(Color::Gray)),
            TSpan::raw(v),
        ]));
    }
    if d.flow.is_some() {
        lines.push(Line::from(TSpan::styled(
            "                    f: follow the launch flow to the other end",
            Style::new().fg(Color::DarkGray),
        )));
    }
    let skip = if full { app.details_scroll } else { 0 };
    f.render_widget(
        Paragraph::new(lines.into_iter().skip(skip).collect::<Vec<_>>())
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// `fuseprof advise` on the first run: the settings that come before kernels (each with its
/// place among settings and proposals by saving, and its one-line change), then the proposals
/// ranked by saving, with what `bench` measured, and the selected one's chain, estimate and
/// call.
fn draw_advisor(f: &mut Frame, app: &mut App, area: Rect) {
    let settings_h = match app.runs[0].advice() {
        AdviceState::Ready(a) if !a.settings.is_empty() => {
            // A border, a header, and two lines per setting (figures, then the change).
            2 + 2 * a.settings.len().min(ADVISOR_SETTINGS) as u16
        }
        _ => 0,
    };
    let [head, settings, table, detail] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(settings_h),
        Constraint::Percentage(45),
        Constraint::Min(3),
    ])
    .areas(area);
    let advice = match app.runs[0].advice() {
        AdviceState::Ready(a) => a.clone(),
        AdviceState::Running => {
            f.render_widget(Paragraph::new("matching fusable chains…"), area);
            return;
        }
        AdviceState::Failed(e) => {
            f.render_widget(
                Paragraph::new(format!("no advice: {e}")).wrap(Wrap { trim: true }),
                area,
            );
            return;
        }
    };
    let per = if advice.run.steps == 0 { "run" } else { "step" };
    let t = &advice.totals;
    // One cursor over the settings shown, then the proposals.
    let shown = advice.settings.len().min(ADVISOR_SETTINGS);
    let rows_n = shown + advice.proposals.len();
    app.advisor_row = app.advisor_row.min(rows_n.saturating_sub(1));
    f.render_widget(
        Paragraph::new(vec![
            Line::from(format!(
                " {} proposals cover {:.1}% of the {per}'s GPU time; expected saving {} per {per} \
                 ({:.1}%){}",
                t.proposals,
                t.coverage_pct_of_step,
                dur(t.saving_ns_per_step as i64),
                t.saving_pct_of_step,
                t.measured_saving_ns_per_step
                    .map(|m| format!("; measured {}", dur(m as i64)))
                    .unwrap_or_default()
            )),
            Line::from(TSpan::styled(
                format!(
                    " j/k select  Enter: show it on the timeline (n/N: instances)   {} matched \
                     but not proposed, {} fusable without a bundled kernel (fuseprof advise lists them)",
                    advice.not_proposed.len(),
                    advice.unbundled.len()
                ),
                Style::new().fg(Color::DarkGray),
            )),
        ]),
        head,
    );
    if !advice.settings.is_empty() {
        let w = settings.width as usize;
        let id_w = w.saturating_sub(4 + 10 * 2 + 8 + 3).clamp(12, 48);
        let mut lines = vec![Line::from(TSpan::styled(
            format!(
                "{:>3} {:<id_w$} {:>9} {:>9} {:>7}  before kernels: the program's own settings (# ranks them with the proposals)",
                "#", "setting", "now", "saving", "%"
            ),
            Style::new().add_modifier(Modifier::BOLD),
        ))];
        for (i, st) in advice.settings.iter().take(ADVISOR_SETTINGS).enumerate() {
            let style = if i == app.advisor_row {
                Style::new().add_modifier(Modifier::REVERSED)
            } else {
                Style::new()
            };
            lines.push(Line::from(TSpan::styled(
                format!(
                    "{:>3} {:<id_w$} {:>9} {:>9} {:>7.2}  {}",
                    st.rank,
                    fit(&st.id, id_w),
                    dur(st.current_ns_per_step as i64),
                    dur(st.saving_ns_per_step as i64),
                    st.saving_pct_of_step,
                    st.title
                ),
                style,
            )));
            lines.push(Line::from(TSpan::styled(
                format!("    change: {}", st.change),
                Style::new().fg(Color::DarkGray),
            )));
        }
        f.render_widget(
            Paragraph::new(lines).block(Block::default().borders(Borders::TOP)),
            settings,
        );
    }
    if advice.proposals.is_empty() {
        f.render_widget(
            Paragraph::new("no proposals for this run")
                .block(Block::default().borders(Borders::TOP)),
            table,
        );
        if app.advisor_row < shown {
            setting_details(f, &advice.settings[app.advisor_row], detail);
        }
        return;
    }
    // The selected proposal (None while a setting is selected).
    let selected = app.advisor_row.checked_sub(shown);
    let w = table.width as usize;
    let id_w = w.saturating_sub(8 + 10 * 4 + 8 + 12).max(12);
    let mut lines = vec![Line::from(TSpan::styled(
        format!(
            "{:>3} {:<id_w$} {:>8} {:>9} {:>9} {:>9} {:>7} {:<7} {}",
            "#", "proposal", "n/step", "now", "expected", "saving", "%", "conf", "measured"
        ),
        Style::new().add_modifier(Modifier::BOLD),
    ))];
    let rows = table.height.saturating_sub(2) as usize;
    let first = selected.unwrap_or(0).saturating_sub(rows.saturating_sub(1));
    for (i, p) in advice.proposals.iter().enumerate().skip(first).take(rows) {
        let measured = match &p.measured {
            Some(m) if m.status == "passed" => {
                let saving = fuseprof_fusion_advisor::measured_saving(p, m);
                format!(
                    "{} ({:.2}x)",
                    dur(saving.ns_per_step as i64),
                    saving.eager_ns / m.ours_ns
                )
            }
            Some(m) => m.status.to_uppercase(),
            None => "-".into(),
        };
        let style = if Some(i) == selected {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        lines.push(Line::from(TSpan::styled(
            format!(
                "{:>3} {:<id_w$} {:>8.1} {:>9} {:>9} {:>9} {:>7.2} {:<7} {}",
                p.rank,
                fit(&p.id, id_w),
                p.instances_per_step,
                dur(p.current_ns_per_step as i64),
                dur(p.expected_ns_per_step as i64),
                dur(p.saving_ns_per_step as i64),
                p.saving_pct_of_step,
                p.confidence,
                measured
            ),
            style,
        )));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::TOP)),
        table,
    );
    let Some(selected) = selected else {
        setting_details(f, &advice.settings[app.advisor_row], detail);
        return;
    };
    let p = &advice.proposals[selected];
    let mut text = vec![
        Line::from(TSpan::styled(
            format!(" {}  [{} {}]", p.title, p.shape, p.dtype),
            Style::new().add_modifier(Modifier::BOLD),
        )),
        Line::from(format!(" where: {}", p.modules.join(", "))),
        Line::from(format!(" chain: {}", p.ops.join(" -> "))),
        Line::from(format!(
            " estimate: {:.1} MB, {:.2} GFLOP, {} at the ceilings / {:.0}% ({})",
            p.estimate.bytes / 1e6,
            p.estimate.flops / 1e9,
            dur(p.estimate.floor_ns as i64),
            p.estimate.efficiency * 100.0,
            p.estimate.calibrated_on
        )),
    ];
    for a in &p.assumptions {
        text.push(Line::from(format!(" assumes: {a}")));
    }
    for l in p.call.lines() {
        text.push(Line::from(format!(" call: {l}")));
    }
    f.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::TOP)),
        detail,
    );
}

/// The selected setting's details: where to see it in a timeline (its worst step's window on
/// the run's clock and in ms from the run's start, the names to search for), how its saving
/// was estimated and the evidence.
fn setting_details(f: &mut Frame, st: &fuseprof_fusion_advisor::Setting, area: Rect) {
    let mut text = vec![Line::from(TSpan::styled(
        format!(" {}", st.title),
        Style::new().add_modifier(Modifier::BOLD),
    ))];
    text.push(Line::from(match &st.worst_step {
        Some(w) => format!(
            " worst: {} from the run's start ({} of it)  Enter: show it on the timeline",
            w.describe(),
            dur(w.symptom_ns as i64)
        ),
        None => " worst: the run has no steps".into(),
    }));
    for (label, names) in [("kernels", &st.kernels), ("ops", &st.ops)] {
        // One line each, long templates cut: their start is what a timeline search needs.
        for n in names {
            let w = (area.width as usize).saturating_sub(label.len() + 3);
            text.push(Line::from(format!(
                " {label}: {}",
                fit(n.trim_start_matches("void "), w)
            )));
        }
    }
    text.push(Line::from(format!(" estimate: {}", st.estimate)));
    for e in &st.evidence {
        text.push(Line::from(format!(" evidence: {e}")));
    }
    f.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::TOP)),
        area,
    );
}

fn pending(f: &mut Frame, app: &App, area: Rect, what: &str) {
    let state = match app.runs[0].analyses.get(&app.step) {
        Some(AnalysisState::Failed(e)) => format!("the analysis failed: {e}"),
        Some(AnalysisState::Running(t)) => match app.step {
            Some(k) => format!(
                "analysing step {k} for the {what} ({:.1} s so far)…",
                t.elapsed().as_secs_f64()
            ),
            None => {
                let mut s = format!(
                    "analysing the run for the {what} ({:.0} s so far; {} kernels)…",
                    t.elapsed().as_secs_f64(),
                    count(app.runs[0].meta.rows.kernels as u64)
                );
                if app.runs[0].keeps_analysis() {
                    s.push_str(
                        "\nOnce: this run was written without the analysis kept in it (an \
                         older fuseprof); it is kept in the run now, and the next open shows \
                         the tables at once.",
                    );
                }
                s
            }
        },
        _ => format!("the {what} needs the analysis"),
    };
    f.render_widget(
        Paragraph::new(state).block(Block::default().borders(Borders::TOP)),
        area,
    );
}

fn scope(app: &App) -> String {
    match app.step {
        Some(s) => format!("step {s} (S: change)"),
        None => "whole run (S: pick a step)".into(),
    }
}

fn draw_hotspots(f: &mut Frame, app: &mut App, area: Rect) {
    let floor = app.runs[0]
        .analysis(app.step)
        .and_then(|a| rows::floor_line(&a.analysis));
    let head_rows = 2 + u16::from(floor.is_some());
    let [head, body] =
        Layout::vertical([Constraint::Length(head_rows), Constraint::Min(1)]).areas(area);
    let mut spans = Vec::new();
    for (t, name) in [
        (GroupBy::Op, "op"),
        (GroupBy::Shape, "shape"),
        (GroupBy::Module, "module"),
        (GroupBy::Kernel, "kernel"),
        (GroupBy::Class, "class"),
    ] {
        let style = if t == app.hot.table {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        spans.push(TSpan::styled(format!(" by {name} "), style));
    }
    spans.push(TSpan::raw(format!(
        "   scope: {}   filter: {}",
        scope(app),
        if app.hot.filter.is_empty() {
            "-"
        } else {
            &app.hot.filter
        }
    )));
    let mut lines = vec![Line::from(spans)];
    if let Some(floor) = floor {
        lines.push(Line::from(format!(" {floor}")));
    }
    lines.push(Line::from(TSpan::styled(
        " h/l table  j/k row  s sort column  r reverse  f filter  Enter: instances on the timeline (n/N)",
        Style::new().fg(Color::DarkGray),
    )));
    f.render_widget(Paragraph::new(lines), head);
    let Some(table) = app.hot_rows() else {
        pending(f, app, body, "hotspot tables");
        return;
    };
    let cols = rows::hot_columns(app.hot.table);
    let numeric = cols.len()
        - if app.hot.table == GroupBy::Shape || app.hot.table == GroupBy::Kernel {
            2
        } else {
            1
        };
    let num_w = 11usize;
    let first_w = (body.width as usize)
        .saturating_sub(numeric * num_w + 2)
        .max(10);
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, _)| match (app.hot.table, i) {
            (_, 0) if cols.len() - numeric == 1 => first_w,
            (GroupBy::Shape, 0) => first_w / 2,
            (GroupBy::Shape, 1) => first_w - first_w / 2,
            (GroupBy::Kernel, 0) => first_w.saturating_sub(14),
            (GroupBy::Kernel, 1) => 14,
            _ => num_w,
        })
        .collect();
    let render_row = |cells: &[String], style: Style| -> Line {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths[i];
            if i >= cols.len() - numeric {
                s.push_str(&format!("{:>w$}", fit(c, w - 1)));
            } else {
                s.push_str(&format!("{:<w$}", fit(c, w - 1)));
            }
        }
        Line::from(TSpan::styled(s, style))
    };
    let header: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i == app.hot.sort {
                format!("{c}{}", if app.hot.ascending { "▲" } else { "▼" })
            } else {
                c.to_string()
            }
        })
        .collect();
    let mut lines = vec![render_row(
        &header,
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    )];
    let h = body.height.saturating_sub(1) as usize;
    if app.hot.cursor >= table.rows.len() {
        app.hot.cursor = table.rows.len().saturating_sub(1);
    }
    let first = app.hot.cursor.saturating_sub(h.saturating_sub(1));
    for (i, r) in table.rows.iter().enumerate().skip(first).take(h) {
        let style = if i == app.hot.cursor {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        lines.push(render_row(&r.cells, style));
    }
    if table.rows.is_empty() {
        lines.push(Line::from("(no rows)"));
    }
    f.render_widget(Paragraph::new(lines), body);
}

fn draw_tree(f: &mut Frame, app: &mut App, area: Rect) {
    let [head, body] = Layout::vertical([Constraint::Length(2), Constraint::Min(1)]).areas(area);
    f.render_widget(
        Paragraph::new(vec![
            Line::from(format!(" modules > ops > kernels   scope: {}", scope(app))),
            Line::from(TSpan::styled(
                " j/k move  Enter/l expand  h collapse  g: instances on the timeline (n/N)",
                Style::new().fg(Color::DarkGray),
            )),
        ]),
        head,
    );
    let Some(a) = app.runs[0].analysis(app.step) else {
        pending(f, app, body, "operator tree");
        return;
    };
    let rows = rows::tree_rows(&a.tree, &app.tree.expanded);
    if app.tree.cursor >= rows.len() {
        app.tree.cursor = rows.len().saturating_sub(1);
    }
    let w = body.width as usize;
    let name_w = w.saturating_sub(4 * 11 + 1).max(10);
    let mut lines = vec![Line::from(TSpan::styled(
        format!(
            "{:<name_w$}{:>11}{:>11}{:>11}{:>11}",
            "name", "self", "total", "records", "instances"
        ),
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ))];
    let h = body.height.saturating_sub(1) as usize;
    let first = app.tree.cursor.saturating_sub(h.saturating_sub(1));
    for (i, &(n, d)) in rows.iter().enumerate().skip(first).take(h) {
        let node = &a.tree.nodes[n];
        let marker = if node.children.is_empty() {
            "  "
        } else if app.tree.expanded.contains(&n) {
            "▾ "
        } else {
            "▸ "
        };
        let name = match node.kind {
            OpNodeKind::Kernel => short_kernel(&node.name),
            _ => node.name.clone(),
        };
        let text = format!("{}{}{}", "  ".repeat(d), marker, name);
        let style = if i == app.tree.cursor {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            match node.kind {
                OpNodeKind::Module => Style::new().fg(Color::LightBlue),
                OpNodeKind::Kernel => Style::new().fg(node.class.map_or(Color::Gray, class_color)),
                _ => Style::new(),
            }
        };
        lines.push(Line::from(TSpan::styled(
            format!(
                "{:<name_w$}{:>11}{:>11}{:>11}{:>11}",
                fit(&text, name_w - 1),
                dur(node.self_ns),
                dur(node.total_ns),
                count(node.records),
                count(node.instances)
            ),
            style,
        )));
    }
    f.render_widget(Paragraph::new(lines), body);
}

fn draw_diff(f: &mut Frame, app: &mut App, area: Rect) {
    let a = app.runs[0].analysis(None);
    let b = app.runs[1].analysis(None);
    let (Some(a), Some(b)) = (a, b) else {
        pending(f, app, area, "diff");
        return;
    };
    let d = fuseprof_analyzer::diff(&a.analysis, &b.analysis);
    let mut lines = vec![Line::from(TSpan::styled(
        format!(
            " diff {} (t: next table)  {} -> {}: {} -> {} per {} ({:+.1}%)",
            ["by op", "by shape", "by kernel"][app.diff_table % 3],
            d.before,
            d.after,
            dur(d.before_gpu_ns as i64),
            dur(d.after_gpu_ns as i64),
            if d.unit == "per_step" { "step" } else { "run" },
            d.delta_pct,
        ),
        Style::new().add_modifier(Modifier::BOLD),
    ))];
    let w = area.width as usize;
    let name_w = w.saturating_sub(4 * 11 + 10).max(10);
    lines.push(Line::from(TSpan::styled(
        format!(
            "{:<name_w$}{:>10}{:>11}{:>11}{:>11}{:>11}",
            ["op", "op and shapes", "kernel"][app.diff_table % 3],
            "status",
            "before",
            "after",
            "delta",
            "count"
        ),
        Style::new().add_modifier(Modifier::UNDERLINED),
    )));
    let h = area.height.saturating_sub(2) as usize;
    let rows = match app.diff_table % 3 {
        0 => &d.ops,
        1 => &d.shapes,
        _ => &d.kernels,
    };
    for r in rows.iter().take(h) {
        let color = match r.delta_ns {
            x if x > 0.0 => Color::LightRed,
            x if x < 0.0 => Color::LightGreen,
            _ => Color::Gray,
        };
        lines.push(Line::from(TSpan::styled(
            format!(
                "{:<name_w$}{:>10}{:>11}{:>11}{:>11}{:>11}",
                fit(
                    &match app.diff_table % 3 {
                        1 => format!("{} {}", r.name, r.detail.clone().unwrap_or_default()),
                        2 => short_kernel(&r.name),
                        _ => r.name.clone(),
                    },
                    name_w - 1
                ),
                format!("{:?}", r.status).to_lowercase(),
                dur(r.before_ns as i64),
                dur(r.after_ns as i64),
                dur(r.delta_ns as i64),
                format!("{}>{}", r.before_count, r.after_count)
            ),
            Style::new().fg(color),
        )));
    }
    f.render_widget(Paragraph::new(lines), area);
}

fn draw_step_popup(f: &mut Frame, app: &mut App, area: Rect) {
    let cursor = app.step_popup.unwrap_or(0);
    let whole = app.runs[0].ready_analysis(None);
    let steps: &[fuseprof_analyzer::StepRow] =
        whole.as_ref().map_or(&[], |a| &a.analysis.steps.steps);
    let h = (steps.len() as u16 + 3)
        .min(area.height.saturating_sub(2))
        .max(4);
    let w = 44.min(area.width);
    let r = Rect::new(area.x + (area.width - w) / 2, area.y + 1, w, h);
    f.render_widget(Clear, r);
    let mut lines = vec![];
    // Entry 0 is the whole run, k + 1 step k; only the rows on screen are written (a long
    // run has tens of thousands of steps).
    let entry = |i: usize| match i.checked_sub(1).and_then(|k| steps.get(k)) {
        Some(s) => format!(
            "step {}: {} wall, {} GPU",
            s.index,
            dur(s.wall_ns),
            dur(s.gpu_ns)
        ),
        None => "whole run".to_string(),
    };
    let inner_h = h.saturating_sub(2) as usize;
    let first = cursor.saturating_sub(inner_h.saturating_sub(1));
    for i in (first..=steps.len()).take(inner_h) {
        let style = if i == cursor {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        lines.push(Line::from(TSpan::styled(entry(i), style)));
    }
    if steps.is_empty() {
        lines.push(Line::from("(no steps found, or the analysis is running)"));
    }
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" scope every table to "),
        ),
        r,
    );
}

fn draw_help(f: &mut Frame, area: Rect) {
    let text = [
        " Views      1 timeline  2 hotspots  3 operator tree  4 details  5 diff (t: its table)  6 advisor",
        " Timeline   h/l or ←/→ pan   H/L pan a screen   +/- zoom   0 fit   mouse: wheel zooms, drag pans",
        "            j/k or ↑/↓ lane   Enter/Space or click select   ,/. previous/next record on the lane",
        "            f follow the launch flow (kernel <-> API call)   z zoom to the selection   Esc clear",
        " Steps      [ / ] previous / next step   S scope every table to a step (j/k, PgUp/PgDn, g/G)",
        " Find       / search kernel and range names   n / N next / previous instance",
        " Hotspots   h/l table  j/k row  s sort column  r reverse  f filter  Enter: instances on the timeline",
        " Tree       Enter/l expand   h collapse   g instances on the timeline",
        " Advisor    j/k row   Enter: a setting's worst step, a proposal's instances   Tab cycles views",
        "            q quit   ? this help (any key closes it)",
        "",
        " Lanes with · are still being read; ≈ sampled in the status line: columns estimated from samples",
        " until the summary is in. Shades ░▒▓█ show how busy a column is when it holds many records, in",
        " the colour of the class (GPU) or name (host) with the most time there.",
    ]
    .join("\n");
    let mut lines: Vec<Line> = text.lines().map(Line::from).collect();
    // The kernel classes in their colours.
    let mut legend = vec![TSpan::raw(" Classes    ")];
    for c in Class::ALL {
        legend.push(TSpan::styled("█ ", Style::new().fg(class_color(c))));
        legend.push(TSpan::raw(format!("{}  ", c.as_str())));
    }
    lines.push(Line::from(legend));
    let h = 18.min(area.height);
    let w = 104.min(area.width);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(" keys ")),
        r,
    );
}
