//! The explorer's state and what each key and mouse action does to it. Drawing is in
//! `ui.rs`; nothing here touches the terminal, so tests drive it with synthetic keys.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use fuseprof_analyzer::ops::{normalize_dims, step_family};
use fuseprof_analyzer::{Class, GroupBy, OpNodeKind};
use fuseprof_store::{parse_range_name, CopyKind, Direction, GpuKind, MemopKind, StrId};
use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::layout::Rect;

pub use crate::details::Details;
use crate::format::{demangle, dur};
pub use crate::model::Instances;
use crate::model::*;
use crate::run::{Loading, RunState};
use crate::Result;

/// What `fuseprof tui` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct TuiConfig {
    /// One run, or two (before, after) for the diff view.
    pub runs: Vec<PathBuf>,
    pub loading: Loading,
    /// Runs with more kernels than this are analysed only when a view needs the analysis
    /// (its memory grows with the run; the timeline's does not).
    pub auto_analyze_max_kernels: i64,
    /// Keep what the explorer derives (the timeline's summary, the whole-run analysis) in a
    /// run that lacks it, so that the next open reads it (`fuseprof tui` does; off here, so
    /// that a library caller's files are left as they are).
    pub keep_summaries: bool,
}

impl TuiConfig {
    pub fn new(runs: Vec<PathBuf>) -> Self {
        TuiConfig {
            runs,
            loading: Loading::Background,
            auto_analyze_max_kernels: 2_000_000,
            keep_summaries: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Timeline,
    Hotspots,
    Tree,
    Details,
    Diff,
    Advisor,
}

/// The selected record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    pub run: usize,
    pub track: usize,
    pub lane: Option<LaneKind>,
    pub span: Span,
}

/// A line of text being typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Search(String),
    Filter(String),
}

/// Store name ids by the names the analysis uses.
#[derive(Default)]
pub struct NameIndex {
    /// Exact text -> id.
    exact: HashMap<String, StrId>,
    /// Op type (as the analysis normalises it) -> raw range names.
    ops: HashMap<String, Vec<StrId>>,
    /// (op type, normalised shapes) -> raw names carrying those shapes (emit_nvtx).
    shaped: HashMap<(String, String), Vec<StrId>>,
    /// Normalised shapes -> `input_dims` texts.
    dims: HashMap<String, Vec<StrId>>,
}

impl NameIndex {
    fn build(names: &NameInfo) -> NameIndex {
        let mut ix = NameIndex::default();
        for id in 1..=names.strings.len() as i64 {
            let id = StrId(id);
            let text = names.get(id);
            ix.exact.insert(text.to_string(), id);
            let parsed = parse_range_name(text);
            let op = step_family(parsed.name).unwrap_or_else(|| parsed.name.to_string());
            ix.ops.entry(op.clone()).or_default().push(id);
            if let Some(sizes) = parsed.sizes {
                ix.shaped
                    .entry((op, normalize_dims(sizes)))
                    .or_default()
                    .push(id);
            }
            if text.starts_with('[') {
                ix.dims.entry(normalize_dims(text)).or_default().push(id);
            }
        }
        ix
    }
}

/// State of the hotspot tables.
#[derive(Clone, Debug)]
pub struct HotState {
    pub table: GroupBy,
    /// Sort column (index into the table's columns) and direction.
    pub sort: usize,
    pub ascending: bool,
    pub filter: String,
    pub cursor: usize,
}

/// State of the operator tree.
#[derive(Clone, Debug, Default)]
pub struct TreeState {
    pub expanded: HashSet<usize>,
    pub cursor: usize,
}

/// The settings the advisor view shows above the proposals, at most.
pub const ADVISOR_SETTINGS: usize = 5;

pub struct App {
    pub runs: Vec<RunState>,
    pub view: View,
    /// The visible time window of run 0; run r sees it shifted by `offsets[r]`.
    pub from_ns: i64,
    pub to_ns: i64,
    pub offsets: Vec<i64>,
    /// Row of the lane cursor and the first row shown.
    pub row: usize,
    pub scroll: usize,
    pub selection: Option<Selection>,
    pub details: Option<Details>,
    pub details_scroll: usize,
    pub hot: HotState,
    pub tree: TreeState,
    pub input: Option<Input>,
    pub instances: Option<Instances>,
    /// Step every table is scoped to (None: whole run).
    pub step: Option<usize>,
    /// The step the timeline was last moved to with [ and ].
    pub current_step: Option<usize>,
    /// Step selector open, with its cursor (0 = whole run, k + 1 = step k).
    pub step_popup: Option<usize>,
    pub help: bool,
    /// Which diff table the diff view shows: ops, shapes, kernels.
    pub diff_table: usize,
    /// The selected row in the advisor view: the settings shown (at most
    /// [`ADVISOR_SETTINGS`]) first, then the proposals.
    pub advisor_row: usize,
    pub message: String,
    pub quit: bool,
    /// Where the last frame drew the timeline's plot (mouse and pan steps use it).
    pub plot: Rect,
    /// A mouse drag under way: the column it started at and the window then.
    pub drag: Option<(u16, i64, i64)>,
    /// The number of the last details asked for (answers to older ones are dropped).
    details_seq: u64,
    /// The search under way: its number, label and direction.
    searching: Option<(u64, String, Direction)>,
    search_seq: u64,
    /// Whether the last frame drew columns not known yet (·), or estimated from samples.
    pub frame_unknown: bool,
    pub frame_sampled: bool,
    names: Vec<Option<NameIndex>>,
    pub(crate) cfg: TuiConfig,
}

/// One lane row of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub run: usize,
    pub track: usize,
    pub lane: LaneKind,
    /// Whether this is the first row of its track (it carries the track's label).
    pub first: bool,
}

impl App {
    /// The rows of the current hotspot table, or None while the analysis runs.
    pub(crate) fn hot_rows(&mut self) -> Option<crate::rows::HotTable> {
        let a = self.runs[0].analysis(self.step)?;
        let h = &self.hot;
        Some(crate::rows::hot_table(
            &a.analysis,
            h.table,
            &h.filter,
            h.sort,
            h.ascending,
        ))
    }

    pub fn new(cfg: TuiConfig) -> Result<App> {
        let mut runs = Vec::new();
        for p in &cfg.runs {
            runs.push(RunState::open(p, cfg.loading, cfg.keep_summaries)?);
        }
        let (from_ns, to_ns) = (runs[0].meta.first_ns, runs[0].meta.last_ns);
        let n = runs.len();
        let mut app = App {
            offsets: runs.iter().map(|r| r.meta.first_ns - from_ns).collect(),
            runs,
            view: if n > 1 { View::Diff } else { View::Timeline },
            from_ns,
            to_ns,
            row: 0,
            scroll: 0,
            selection: None,
            details: None,
            details_scroll: 0,
            hot: HotState {
                table: GroupBy::Op,
                sort: 0,
                ascending: false,
                filter: String::new(),
                cursor: 0,
            },
            tree: TreeState::default(),
            input: None,
            instances: None,
            step: None,
            current_step: None,
            step_popup: None,
            help: false,
            diff_table: 0,
            advisor_row: 0,
            message: String::new(),
            quit: false,
            plot: Rect::new(0, 0, 80, 10),
            drag: None,
            details_seq: 0,
            searching: None,
            search_seq: 0,
            frame_unknown: false,
            frame_sampled: false,
            names: (0..n).map(|_| None).collect(),
            cfg,
        };
        app.fit();
        let auto = app.cfg.auto_analyze_max_kernels;
        for r in &mut app.runs {
            if r.meta.rows.kernels <= auto {
                r.analysis(None);
            }
        }
        if n > 1 {
            app.align_runs();
        }
        Ok(app)
    }

    /// Takes what background work finished; true when the screen should be redrawn.
    pub fn poll(&mut self) -> bool {
        let mut changed = false;
        for r in &mut self.runs {
            changed |= r.poll();
        }
        if let Some((seq, found)) = self.runs[0].found.take() {
            self.found(seq, found);
            changed = true;
        }
        for r in &mut self.runs {
            if let Some((seq, d)) = r.details_read.take() {
                if seq == self.details_seq && self.selection.is_some() {
                    self.details = Some(d);
                }
                changed = true;
            }
        }
        if changed && self.runs.len() > 1 {
            self.align_runs();
        }
        changed
    }

    pub fn busy(&self) -> bool {
        self.searching.is_some()
            || self.details.as_ref().is_some_and(|d| d.title == "reading…")
            || self.runs.iter().any(|r| r.busy())
    }

    /// Every lane row, run by run, track by track.
    pub fn rows(&self) -> Vec<Row> {
        let mut out = Vec::new();
        for (ri, r) in self.runs.iter().enumerate() {
            for t in 0..r.meta.tracks.len() {
                for (i, lane) in r.lanes(t).into_iter().enumerate() {
                    out.push(Row {
                        run: ri,
                        track: t,
                        lane,
                        first: i == 0,
                    });
                }
            }
        }
        out
    }

    /// The window of run `r`.
    pub fn window(&self, r: usize) -> (i64, i64) {
        let o = self.offsets.get(r).copied().unwrap_or(0);
        (self.from_ns.saturating_add(o), self.to_ns.saturating_add(o))
    }

    pub fn fit(&mut self) {
        let (a, b) = (self.runs[0].meta.first_ns, self.runs[0].meta.last_ns);
        let mut end = b;
        for (i, r) in self.runs.iter().enumerate().skip(1) {
            end = end.max(r.meta.last_ns - self.offsets[i]);
        }
        let pad = ((end - a) / 100).max(1);
        self.from_ns = a - pad;
        self.to_ns = end + pad;
    }

    fn set_window(&mut self, from: i64, to: i64) {
        // Never narrower than 100 ns nor wider than 10x the run.
        let span = to.saturating_sub(from).clamp(
            100,
            10 * (self.runs[0].meta.last_ns - self.runs[0].meta.first_ns).max(100),
        );
        let mid = from / 2 + to / 2;
        self.from_ns = mid.saturating_sub(span / 2);
        self.to_ns = self.from_ns.saturating_add(span);
    }

    /// Zooms by `factor` (< 1 zooms in) keeping time `at` where it is on screen.
    pub fn zoom(&mut self, factor: f64, at: i64) {
        let span = (self.to_ns - self.from_ns) as f64;
        let new_span = (span * factor).max(100.0);
        let frac = (at - self.from_ns) as f64 / span;
        let from = at - (frac * new_span) as i64;
        self.set_window(from, from + new_span as i64);
    }

    pub fn pan(&mut self, fraction: f64) {
        let d = ((self.to_ns - self.from_ns) as f64 * fraction) as i64;
        // Saturating: panning on and on stops at the end of time instead of wrapping.
        self.from_ns = self.from_ns.saturating_add(d);
        self.to_ns = self.to_ns.saturating_add(d);
    }

    /// Time of the cursor: the middle of the view.
    pub fn cursor_ns(&self) -> i64 {
        self.from_ns / 2 + self.to_ns / 2
    }

    /// The time under screen column `x` of the plot.
    pub fn time_at(&self, x: u16) -> i64 {
        let w = self.plot.width.max(1) as f64;
        let f = (x.saturating_sub(self.plot.x)) as f64 / w;
        self.from_ns + ((self.to_ns - self.from_ns) as f64 * f) as i64
    }

    fn name_index(&mut self, run: usize) -> &NameIndex {
        if self.names[run].is_none() {
            self.names[run] = Some(NameIndex::build(&self.runs[run].names));
        }
        self.names[run].as_ref().expect("just built")
    }

    // ---- input -------------------------------------------------------------------------

    pub fn on_key(&mut self, k: KeyEvent) {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return;
        }
        if let Some(input) = self.input.take() {
            self.on_input_key(input, k);
            return;
        }
        if self.help {
            self.help = false;
            if k.code != KeyCode::Char('q') {
                return;
            }
        }
        if let Some(cursor) = self.step_popup {
            self.on_step_popup_key(cursor, k);
            return;
        }
        self.message.clear();
        match k.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('?') => self.help = true,
            KeyCode::Tab => self.next_view(1),
            KeyCode::BackTab => self.next_view(-1),
            KeyCode::Char('1') => self.view = View::Timeline,
            KeyCode::Char('2') => self.view = View::Hotspots,
            KeyCode::Char('3') => self.view = View::Tree,
            KeyCode::Char('4') => self.view = View::Details,
            KeyCode::Char('5') if self.runs.len() > 1 => self.view = View::Diff,
            KeyCode::Char('6') => {
                self.view = View::Advisor;
                self.runs[0].advice();
            }
            KeyCode::Char('/') => self.input = Some(Input::Search(String::new())),
            KeyCode::Char('n') => self.jump_instance(Direction::Forward),
            KeyCode::Char('N') => self.jump_instance(Direction::Backward),
            KeyCode::Char('[') => self.goto_step(-1),
            KeyCode::Char(']') => self.goto_step(1),
            KeyCode::Char('S') => {
                self.step_popup = Some(self.step.map_or(0, |s| s + 1));
                self.runs[0].analysis(None);
            }
            _ => match self.view {
                View::Diff if k.code == KeyCode::Char('t') => self.diff_table += 1,
                View::Timeline | View::Diff => self.on_timeline_key(k),
                View::Hotspots => self.on_hotspots_key(k),
                View::Advisor => self.on_advisor_key(k),
                View::Tree => self.on_tree_key(k),
                View::Details => match k.code {
                    KeyCode::Char('j') | KeyCode::Down => self.details_scroll += 1,
                    KeyCode::Char('k') | KeyCode::Up => {
                        self.details_scroll = self.details_scroll.saturating_sub(1)
                    }
                    KeyCode::Char('f') => self.follow_flow(),
                    _ => {}
                },
            },
        }
    }

    fn next_view(&mut self, d: i32) {
        let mut views = vec![View::Timeline, View::Hotspots, View::Tree, View::Details];
        if self.runs.len() > 1 {
            views.push(View::Diff);
        }
        views.push(View::Advisor);
        let i = views.iter().position(|&v| v == self.view).unwrap_or(0) as i32;
        let n = views.len() as i32;
        self.view = views[((i + d) % n + n) as usize % views.len()];
    }

    fn on_input_key(&mut self, input: Input, k: KeyEvent) {
        let (mut text, search) = match input {
            Input::Search(t) => (t, true),
            Input::Filter(t) => (t, false),
        };
        match k.code {
            KeyCode::Esc => return,
            KeyCode::Enter => {
                if search {
                    self.search(&text);
                } else {
                    self.hot.filter = text;
                    self.hot.cursor = 0;
                }
                return;
            }
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) => text.push(c),
            _ => {}
        }
        self.input = Some(if search {
            Input::Search(text)
        } else {
            Input::Filter(text)
        });
    }

    fn on_step_popup_key(&mut self, cursor: usize, k: KeyEvent) {
        /// Entries a page key moves the step selector by.
        const STEP_PAGE: usize = 20;
        let steps = self.runs[0]
            .ready_analysis(None)
            .map_or(0, |a| a.analysis.steps.steps.len());
        match k.code {
            KeyCode::Esc | KeyCode::Char('S') | KeyCode::Char('q') => self.step_popup = None,
            KeyCode::Char('j') | KeyCode::Down => self.step_popup = Some((cursor + 1).min(steps)),
            KeyCode::Char('k') | KeyCode::Up => self.step_popup = Some(cursor.saturating_sub(1)),
            // A run of thousands of steps: a page at a time, or either end.
            KeyCode::PageDown => self.step_popup = Some((cursor + STEP_PAGE).min(steps)),
            KeyCode::PageUp => self.step_popup = Some(cursor.saturating_sub(STEP_PAGE)),
            KeyCode::Char('g') | KeyCode::Home => self.step_popup = Some(0),
            KeyCode::Char('G') | KeyCode::End => self.step_popup = Some(steps),
            KeyCode::Enter => {
                self.step_popup = None;
                self.step = cursor.checked_sub(1);
                self.hot.cursor = 0;
                self.tree = TreeState::default();
                if let Some(s) = self.step {
                    self.current_step = Some(s);
                    self.show_step(s);
                }
                for r in 0..self.runs.len() {
                    self.runs[r].analysis(self.step);
                }
            }
            _ => self.step_popup = Some(cursor),
        }
    }

    fn on_timeline_key(&mut self, k: KeyEvent) {
        let rows = self.rows().len();
        match k.code {
            KeyCode::Char('h') | KeyCode::Left => self.pan(-0.125),
            KeyCode::Char('l') | KeyCode::Right => self.pan(0.125),
            KeyCode::Char('H') => self.pan(-1.0),
            KeyCode::Char('L') => self.pan(1.0),
            KeyCode::Char('+') | KeyCode::Char('=') => self.zoom(0.5, self.cursor_ns()),
            KeyCode::Char('-') => self.zoom(2.0, self.cursor_ns()),
            KeyCode::Char('0') => self.fit(),
            KeyCode::Char('j') | KeyCode::Down => {
                self.row = (self.row + 1).min(rows.saturating_sub(1))
            }
            KeyCode::Char('k') | KeyCode::Up => self.row = self.row.saturating_sub(1),
            KeyCode::Enter | KeyCode::Char(' ') => self.select_at_cursor(),
            KeyCode::Char('.') => self.step_item(1),
            KeyCode::Char(',') => self.step_item(-1),
            KeyCode::Char('f') => self.follow_flow(),
            KeyCode::Char('z') => self.zoom_to_selection(),
            KeyCode::Esc => {
                self.selection = None;
                self.details = None;
            }
            _ => {}
        }
    }

    pub fn on_mouse(&mut self, m: MouseEvent) {
        let inside = m.column >= self.plot.x
            && m.column < self.plot.x + self.plot.width
            && m.row >= self.plot.y
            && m.row < self.plot.y + self.plot.height;
        if !matches!(self.view, View::Timeline | View::Diff) {
            return;
        }
        match m.kind {
            MouseEventKind::ScrollUp if inside => self.zoom(0.8, self.time_at(m.column)),
            MouseEventKind::ScrollDown if inside => self.zoom(1.25, self.time_at(m.column)),
            MouseEventKind::Down(MouseButton::Left) if inside => {
                self.drag = Some((m.column, self.from_ns, self.to_ns));
                let row = self.scroll + (m.row - self.plot.y) as usize;
                if row < self.rows().len() {
                    self.row = row;
                    self.select_at(self.time_at(m.column));
                }
            }
            MouseEventKind::Drag(MouseButton::Left) => {
                if let Some((x0, f, t)) = self.drag {
                    let per_col = (t - f) as f64 / self.plot.width.max(1) as f64;
                    let d = ((m.column as f64 - x0 as f64) * per_col) as i64;
                    self.from_ns = f - d;
                    self.to_ns = t - d;
                }
            }
            MouseEventKind::Up(_) => self.drag = None,
            _ => {}
        }
    }

    // ---- selection ---------------------------------------------------------------------

    /// Selects the record under the cursor on the cursor's lane (the nearest within two
    /// columns).
    pub fn select_at_cursor(&mut self) {
        self.select_at(self.cursor_ns());
    }

    fn select_at(&mut self, t: i64) {
        let Some(row) = self.rows().get(self.row).copied() else {
            return;
        };
        let (from, to) = self.window(row.run);
        let t = t + self.offsets[row.run];
        let slack = (to - from) / self.plot.width.max(1) as i64 * 2;
        let found = self.runs[row.run]
            .raw_for(row.track, from, to)
            .and_then(|w| {
                let spans = w.lanes.get(&row.lane)?;
                spans
                    .iter()
                    .filter(|s| s.start_ns <= t + slack && s.end_ns >= t - slack)
                    .min_by_key(|s| {
                        if s.start_ns <= t && s.end_ns >= t {
                            // Inside: the innermost (shortest) first.
                            (0, s.dur_ns().max(0) as u64)
                        } else {
                            (1, s.start_ns.abs_diff(t).min(s.end_ns.abs_diff(t)))
                        }
                    })
                    .copied()
            });
        match found {
            Some(span) => self.select(row.run, row.track, Some(row.lane), span),
            None => {
                let r = &self.runs[row.run];
                self.message = if r.raw.contains_key(&row.track) {
                    "nothing under the cursor on this lane".into()
                } else if r.reading(row.track) {
                    "this window is still being read: try again in a moment".into()
                } else {
                    "zoom in to select: this view is drawn from the summary".into()
                }
            }
        }
    }

    /// The previous or next record on the cursor's lane from the selection (or the cursor).
    fn step_item(&mut self, d: i32) {
        let Some(row) = self.rows().get(self.row).copied() else {
            return;
        };
        let (from, to) = self.window(row.run);
        let t = self
            .selection
            .map_or(self.cursor_ns() + self.offsets[row.run], |s| {
                s.span.start_ns
            });
        let found = self.runs[row.run]
            .raw_for(row.track, from, to)
            .and_then(|w| {
                let spans = w.lanes.get(&row.lane)?;
                if d > 0 {
                    spans.iter().find(|s| s.start_ns > t).copied()
                } else {
                    spans.iter().rev().find(|s| s.start_ns < t).copied()
                }
            });
        match found {
            Some(span) => {
                self.select(row.run, row.track, Some(row.lane), span);
                self.center_on(row.run, span.start_ns, span.end_ns, false);
            }
            None => self.message = "no further record in view on this lane (zoom in or pan)".into(),
        }
    }

    pub fn select(&mut self, run: usize, track: usize, lane: Option<LaneKind>, span: Span) {
        let span = self.resolve(run, track, span);
        self.selection = Some(Selection {
            run,
            track,
            lane,
            span,
        });
        self.details_scroll = 0;
        self.details_seq += 1;
        let seq = self.details_seq;
        // Until the details are read, what the selection itself says.
        self.details = Some(Details {
            title: "reading…".into(),
            ..Details::default()
        });
        if let Some(d) = self.runs[run].details(seq, track, span) {
            self.details = Some(d);
        }
    }

    /// A long record the summary kept by (start, name) gets its row id from the store.
    fn resolve(&mut self, run: usize, track: usize, span: Span) -> Span {
        let ItemRef::At(start, name) = span.item else {
            return span;
        };
        let r = &mut self.runs[run];
        let item = match r.meta.tracks[track].key {
            TrackKey::Stream { device, stream } => r
                .store
                .stream_window(device, stream, start, start + 1, 64)
                .ok()
                .and_then(|v| {
                    v.into_iter()
                        .find(|g| g.name == name)
                        .map(|g| match g.kind {
                            GpuKind::Kernel => ItemRef::Kernel(g.id),
                            _ => ItemRef::Memop(g.id),
                        })
                }),
            TrackKey::Thread { pid, tid } => r
                .store
                .thread_ranges_window(pid, tid, start, start + 1, 64)
                .ok()
                .and_then(|v| {
                    v.into_iter()
                        .find(|h| h.name == name)
                        .map(|h| ItemRef::Range(h.id))
                }),
        };
        Span {
            item: item.unwrap_or(span.item),
            ..span
        }
    }

    /// Moves the view so that `[s, e)` of run `run` is in the middle third (zooming in only
    /// when `zoom` or when the view is far wider than the record's context).
    fn center_on(&mut self, run: usize, s: i64, e: i64, zoom: bool) {
        let o = self.offsets[run];
        // Saturating throughout: a damaged run's record may start and end ages apart.
        let (s, e) = (s.saturating_sub(o), e.saturating_sub(o));
        let span = self.to_ns - self.from_ns;
        // The record and as much again each side; without `zoom`, the view keeps its width
        // unless it is so wide that the record would not show (then 1/64 of it at a time).
        let want = e.saturating_sub(s).saturating_mul(3).max(1_000);
        let new_span = if zoom {
            want
        } else if span > want.saturating_mul(2000) {
            want.max(span / 64)
        } else {
            span
        };
        let mid = s / 2 + e / 2;
        self.set_window(
            mid.saturating_sub(new_span / 2),
            mid.saturating_add(new_span / 2),
        );
        // Bring the selected track's lane into the cursor.
        if let Some(sel) = self.selection {
            let rows = self.rows();
            if let Some(i) = rows.iter().position(|r| {
                r.run == sel.run && r.track == sel.track && sel.lane.is_none_or(|l| l == r.lane)
            }) {
                self.row = i;
            }
        }
    }

    fn zoom_to_selection(&mut self) {
        if let Some(sel) = self.selection {
            self.center_on(sel.run, sel.span.start_ns, sel.span.end_ns, true);
        }
    }

    /// Selects the other end of the launch flow: the API call of a GPU record, or the first
    /// record an API call launched.
    pub fn follow_flow(&mut self) {
        let (Some(sel), Some(d)) = (self.selection, self.details.clone()) else {
            self.message = "select a kernel, copy, fill or API call first".into();
            return;
        };
        match d.flow {
            Some((track, span)) => {
                let lane = match span.item {
                    ItemRef::Api(_) => Some(LaneKind::Api),
                    _ => Some(LaneKind::Gpu),
                };
                self.select(sel.run, track, lane, span);
                self.center_on(sel.run, span.start_ns, span.end_ns, false);
            }
            None => self.message = "no launch flow recorded for this item".into(),
        }
    }

    // ---- steps -------------------------------------------------------------------------

    fn goto_step(&mut self, d: i32) {
        let Some(a) = self.runs[0].analysis(None) else {
            self.message = "finding the steps (analysis running)…".into();
            return;
        };
        let n = a.analysis.steps.steps.len();
        if n == 0 {
            self.message = "no repeating step was found in this run".into();
            return;
        }
        let next = match self.current_step {
            None if d > 0 => 0,
            None => n - 1,
            Some(s) => (s as i64 + d as i64).clamp(0, n as i64 - 1) as usize,
        };
        self.current_step = Some(next);
        self.show_step(next);
    }

    fn show_step(&mut self, k: usize) {
        if self.runs.len() > 1 {
            self.align_runs();
        }
        if let Some(a) = self.runs[0].ready_analysis(None) {
            if let Some(s) = a.analysis.steps.steps.get(k) {
                let pad = s.wall_ns / 50;
                self.set_window(s.start_ns - pad, s.start_ns + s.wall_ns + pad);
                self.message = format!(
                    "step {k} of {}: {} wall, {} on the GPU",
                    a.analysis.steps.steps.len(),
                    dur(s.wall_ns),
                    dur(s.gpu_ns)
                );
            }
        }
    }

    /// Diff mode: each run's window starts at the same step (the current one, else the
    /// first), so the two timelines line up step by step.
    pub fn align_runs(&mut self) {
        let k = self.current_step.unwrap_or(0);
        let anchor = |r: &RunState| {
            r.ready_analysis(None)
                .and_then(|a| a.analysis.steps.steps.get(k).map(|s| s.start_ns))
                .unwrap_or(r.meta.first_ns)
        };
        let a0 = anchor(&self.runs[0]);
        let offsets: Vec<i64> = self.runs.iter().map(|r| anchor(r) - a0).collect();
        self.offsets = offsets;
    }

    // ---- search and jumps --------------------------------------------------------------

    fn search(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let needle = text.to_lowercase();
        let names = &self.runs[0].names;
        let ids: Vec<StrId> = (1..=names.strings.len() as i64)
            .map(StrId)
            .filter(|&id| {
                names.get(id).to_lowercase().contains(&needle) || {
                    let d = names.get(id);
                    d.starts_with("_Z") && demangle(d).to_lowercase().contains(&needle)
                }
            })
            .collect();
        let inst = Instances {
            label: format!("/{text}"),
            kernels: ids.clone(),
            memops: Vec::new(),
            ranges: vec![(ids, None)],
        };
        if inst.is_empty() {
            self.message = format!("no kernel or range name contains {text:?}");
            return;
        }
        self.instances = Some(inst);
        self.selection = None;
        self.from_ns = self.from_ns.min(self.runs[0].meta.first_ns - 1);
        self.jump_instance(Direction::Forward);
    }

    /// Steps to the next or previous instance of the current search, hotspot row or tree
    /// node, from the selection (or the cursor), over every stream and thread of run 0.
    pub fn jump_instance(&mut self, dir: Direction) {
        let Some(inst) = self.instances.clone() else {
            self.message =
                "nothing to step through: search with / or press Enter on a hotspot row".into();
            return;
        };
        let from = match self.selection {
            Some(s) if s.run == 0 => (s.span.start_ns, item_id(s.span.item)),
            _ => match dir {
                Direction::Forward => (self.from_ns.max(self.runs[0].meta.first_ns - 1), i64::MIN),
                Direction::Backward => (self.to_ns, i64::MAX),
            },
        };
        let r = &mut self.runs[0];
        // Names a table never uses need no scan of it (known once the summary pass has read
        // the table).
        let mut inst = inst;
        let used = |set: &Option<Vec<bool>>, id: &StrId| {
            set.as_ref()
                .is_none_or(|s| s.get(id.0 as usize).copied().unwrap_or(false))
        };
        inst.kernels.retain(|id| used(&r.kernel_names, id));
        for (names, _) in &mut inst.ranges {
            names.retain(|id| used(&r.range_names, id));
        }
        self.search_seq += 1;
        self.searching = Some((self.search_seq, inst.label.clone(), dir));
        match r.find(self.search_seq, inst, from, dir) {
            Some(found) => self.found(self.search_seq, found),
            None => {
                self.message = format!(
                    "{}: searching…",
                    self.searching.as_ref().map_or("", |s| s.1.as_str())
                )
            }
        }
    }

    /// A search's answer: selects and shows the instance (if the search is still the
    /// latest one asked for).
    fn found(&mut self, seq: u64, found: Option<Found>) {
        let Some((want, label, dir)) = self.searching.clone() else {
            return;
        };
        if want != seq {
            return;
        }
        self.searching = None;
        match found {
            Some(Found { track, span, lane }) => {
                self.view = View::Timeline;
                self.select(0, track, lane, span);
                self.center_on(0, span.start_ns, span.end_ns, true);
                self.message = format!("{label}: {}", dur(span.dur_ns()));
            }
            None => {
                self.message = format!(
                    "{label}: no {} instance",
                    if dir == Direction::Forward {
                        "later"
                    } else {
                        "earlier"
                    }
                )
            }
        }
    }

    fn on_advisor_key(&mut self, k: KeyEvent) {
        let crate::run::AdviceState::Ready(advice) = self.runs[0].advice() else {
            return;
        };
        let advice = advice.clone();
        let settings = advice.settings.len().min(ADVISOR_SETTINGS);
        let n = settings + advice.proposals.len();
        match k.code {
            KeyCode::Char('j') | KeyCode::Down if self.advisor_row + 1 < n => self.advisor_row += 1,
            KeyCode::Char('k') | KeyCode::Up => {
                self.advisor_row = self.advisor_row.saturating_sub(1)
            }
            KeyCode::Enter if self.advisor_row < settings => {
                let st = &advice.settings[self.advisor_row];
                self.show_setting(st);
            }
            KeyCode::Enter => {
                let Some(p) = advice.proposals.get(self.advisor_row - settings) else {
                    return;
                };
                // The chain's instances are those of its first op with its shapes.
                let first = &p.ops[0];
                let (name, dims) = match first.split_once(' ') {
                    Some((n, d)) => (n, Some(d)),
                    None => (first.as_str(), None),
                };
                let mut inst = self.instances_for(GroupBy::Shape, name, dims);
                inst.label = p.id.clone();
                self.start_instances(inst);
            }
            _ => {}
        }
    }

    /// Shows a setting's worst step on the timeline: the step where its symptom costs most.
    fn show_setting(&mut self, st: &fuseprof_fusion_advisor::Setting) {
        let Some(w) = &st.worst_step else {
            self.message = format!("{}: the run has no steps to show", st.id);
            return;
        };
        let o = self.offsets[0];
        let pad = (w.end_ns - w.start_ns) / 50;
        self.set_window(w.start_ns - pad - o, w.end_ns + pad - o);
        self.selection = None;
        self.view = View::Timeline;
        self.message = format!(
            "{}: {}, {} of it",
            st.id,
            w.describe(),
            dur(w.symptom_ns as i64)
        );
    }

    /// The instances of a hotspot row (`key` is the row's name, `detail` its shapes).
    pub fn instances_for(&mut self, table: GroupBy, key: &str, detail: Option<&str>) -> Instances {
        let ix = self.name_index(0);
        let mut inst = Instances {
            label: key.to_string(),
            ..Instances::default()
        };
        match table {
            GroupBy::Op => {
                if let Some(v) = ix.ops.get(key) {
                    inst.ranges.push((v.clone(), None));
                }
            }
            GroupBy::Shape => {
                let dims = detail.map(normalize_dims).unwrap_or_default();
                if let Some(v) = ix.shaped.get(&(key.to_string(), dims.clone())) {
                    inst.ranges.push((v.clone(), None));
                }
                if let (Some(v), Some(d)) = (ix.ops.get(key), ix.dims.get(&dims)) {
                    inst.ranges.push((v.clone(), Some(d.clone())));
                }
            }
            GroupBy::Module => {
                let last = key.rsplit('/').next().unwrap_or(key);
                for n in [last.to_string(), format!("nn.Module: {last}")] {
                    if let Some(&id) = ix.exact.get(&n) {
                        inst.ranges.push((vec![id], None));
                    }
                }
            }
            GroupBy::Kernel => {
                if let Some(c) = key.strip_prefix("Memcpy ") {
                    inst.memops
                        .push((MemopKind::Memcpy, Some(CopyKind::parse(c))));
                } else if key == "Memset" {
                    inst.memops.push((MemopKind::Memset, None));
                } else if let Some(&id) = ix.exact.get(key) {
                    inst.kernels.push(id);
                }
            }
            GroupBy::Class => {
                let class = Class::parse(key).unwrap_or(Class::Other);
                match class {
                    Class::Memcpy => inst.memops.push((MemopKind::Memcpy, None)),
                    Class::Memset => inst.memops.push((MemopKind::Memset, None)),
                    _ => {
                        let names = &self.runs[0].names;
                        inst.kernels = (1..names.class.len() as i64)
                            .map(StrId)
                            .filter(|&id| names.class_of(id) == class)
                            .collect();
                    }
                }
            }
        }
        inst
    }

    /// Starts stepping through `inst` from the start of the run.
    pub fn start_instances(&mut self, inst: Instances) {
        if inst.is_empty() {
            self.message = format!("{}: no instance to show on the timeline", inst.label);
            return;
        }
        self.instances = Some(inst);
        self.selection = None;
        let (a, b) = (self.runs[0].meta.first_ns, self.runs[0].meta.last_ns);
        self.from_ns = a - 1;
        self.to_ns = self.to_ns.max(a).min(b.max(a + 1));
        self.jump_instance(Direction::Forward);
    }

    // ---- hotspots and tree -------------------------------------------------------------

    fn on_hotspots_key(&mut self, k: KeyEvent) {
        const TABLES: [GroupBy; 5] = [
            GroupBy::Op,
            GroupBy::Shape,
            GroupBy::Module,
            GroupBy::Kernel,
            GroupBy::Class,
        ];
        let i = TABLES
            .iter()
            .position(|&t| t == self.hot.table)
            .unwrap_or(0);
        let rows = self.hot_rows().map_or(0, |t| t.rows.len());
        let cols = crate::rows::hot_columns(self.hot.table).len();
        match k.code {
            KeyCode::Char('l') | KeyCode::Right => {
                self.hot.table = TABLES[(i + 1) % 5];
                self.hot.sort = 0;
                self.hot.cursor = 0;
            }
            KeyCode::Char('h') | KeyCode::Left => {
                self.hot.table = TABLES[(i + 4) % 5];
                self.hot.sort = 0;
                self.hot.cursor = 0;
            }
            KeyCode::Char('j') | KeyCode::Down => {
                self.hot.cursor = (self.hot.cursor + 1).min(rows.saturating_sub(1))
            }
            KeyCode::Char('k') | KeyCode::Up => self.hot.cursor = self.hot.cursor.saturating_sub(1),
            KeyCode::PageDown => {
                self.hot.cursor = (self.hot.cursor + 20).min(rows.saturating_sub(1))
            }
            KeyCode::PageUp => self.hot.cursor = self.hot.cursor.saturating_sub(20),
            KeyCode::Char('s') => {
                self.hot.sort = (self.hot.sort + 1) % cols;
                self.hot.cursor = 0;
            }
            KeyCode::Char('r') => self.hot.ascending = !self.hot.ascending,
            KeyCode::Char('f') => self.input = Some(Input::Filter(self.hot.filter.clone())),
            KeyCode::Enter => {
                let Some(t) = self.hot_rows() else {
                    self.message = "the analysis is not ready yet".into();
                    return;
                };
                if let Some(row) = t.rows.get(self.hot.cursor) {
                    let (key, detail) = (row.key.clone(), row.detail.clone());
                    let inst = self.instances_for(self.hot.table, &key, detail.as_deref());
                    self.start_instances(inst);
                }
            }
            _ => {}
        }
    }

    fn on_tree_key(&mut self, k: KeyEvent) {
        let Some(a) = self.runs[0].analysis(self.step) else {
            return;
        };
        let visible = crate::rows::tree_rows(&a.tree, &self.tree.expanded);
        let Some(&(node, _)) = visible.get(self.tree.cursor) else {
            self.tree.cursor = 0;
            return;
        };
        match k.code {
            KeyCode::Char('j') | KeyCode::Down => {
                self.tree.cursor = (self.tree.cursor + 1).min(visible.len() - 1)
            }
            KeyCode::Char('k') | KeyCode::Up => {
                self.tree.cursor = self.tree.cursor.saturating_sub(1)
            }
            KeyCode::PageDown => self.tree.cursor = (self.tree.cursor + 20).min(visible.len() - 1),
            KeyCode::PageUp => self.tree.cursor = self.tree.cursor.saturating_sub(20),
            KeyCode::Enter | KeyCode::Char(' ') if !self.tree.expanded.remove(&node) => {
                self.tree.expanded.insert(node);
            }
            KeyCode::Char('l') | KeyCode::Right => {
                self.tree.expanded.insert(node);
            }
            KeyCode::Char('h') | KeyCode::Left if !self.tree.expanded.remove(&node) => {
                // Collapsed already: go to the parent.
                if let Some(p) = a.tree.nodes[node].parent {
                    if let Some(i) = visible.iter().position(|&(n, _)| n == p) {
                        self.tree.cursor = i;
                    }
                }
            }
            KeyCode::Char('g') => {
                let n = &a.tree.nodes[node];
                let table = match n.kind {
                    OpNodeKind::Kernel => GroupBy::Kernel,
                    OpNodeKind::Op => GroupBy::Op,
                    OpNodeKind::Module => GroupBy::Module,
                    _ => return,
                };
                let inst = self.instances_for(table, &n.name.clone(), None);
                self.start_instances(inst);
            }
            _ => {}
        }
    }
}

fn item_id(i: ItemRef) -> i64 {
    match i {
        ItemRef::Kernel(id) | ItemRef::Memop(id) | ItemRef::Range(id) | ItemRef::Api(id) => id,
        ItemRef::At(..) => 0,
    }
}
