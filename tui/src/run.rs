//! One open run and the work done for it off the drawing thread: the summary pass, raw window
//! reads, analyses. With [`Loading::Background`] each runs on a thread of its own with its own
//! store connection and reports through a channel; with [`Loading::Blocking`] (tests, the
//! benchmark's reference) the same functions run inline, so a frame always has its data.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use fuseprof_analyzer::{Analysis, AnalyzeConfig, LongRange, OpTree, OpenRanges, Rules, Scoped};
use fuseprof_store::Store;

use crate::data::{self, Meta, PassPart};
use crate::details::Details;
use crate::model::*;
use crate::Result;

/// Whether loading runs on background threads or inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loading {
    Background,
    Blocking,
}

/// An analysis and its operator tree.
pub struct Analyzed {
    pub analysis: Analysis,
    pub tree: OpTree,
    pub seconds: f64,
    /// A step's analysis read from the step's records alone (not from the whole run's).
    pub step_alone: bool,
}

pub enum AnalysisState {
    Running(Instant),
    Ready(Arc<Analyzed>),
    Failed(String),
}

enum Msg {
    Advice(std::result::Result<Arc<fuseprof_fusion_advisor::Advice>, String>),
    Part(PassPart),
    PassDone(std::result::Result<f64, String>),
    Raw(usize, std::result::Result<RawWindow, String>),
    Probe(usize, std::result::Result<Probe, String>),
    Found(u64, std::result::Result<Option<Found>, String>),
    Details(u64, Details),
    Analysis(Option<usize>, std::result::Result<Arc<Analyzed>, String>),
}

/// What the window-reading thread is asked for.
enum Req {
    Raw(RawReq),
    Probe {
        track: usize,
        key: TrackKey,
        from_ns: i64,
        to_ns: i64,
        cols: usize,
    },
}

struct RawReq {
    track: usize,
    key: TrackKey,
    from_ns: i64,
    to_ns: i64,
    long: Option<Vec<(LaneKind, Span)>>,
    lookback_ns: i64,
}

/// Where the advisor's proposals for a run are.
pub enum AdviceState {
    Running,
    Ready(Arc<fuseprof_fusion_advisor::Advice>),
    /// The advisor's one-line reason (no op ranges, no shapes, ...).
    Failed(String),
}

pub struct RunState {
    pub meta: Meta,
    pub store: Store,
    pub names: NameInfo,
    pub summary: Summary,
    /// Tables whose summary is in.
    pub parts_done: Vec<&'static str>,
    pub pass_seconds: Option<f64>,
    pub raw: HashMap<usize, RawWindow>,
    /// Windows asked for and not yet back, per track.
    pending: HashMap<usize, (i64, i64)>,
    /// Windows known to hold more than a raw read takes, per track.
    dense: HashMap<usize, (i64, i64)>,
    pub analyses: HashMap<Option<usize>, AnalysisState>,
    /// `fuseprof advise` on this run: None until the advisor view first asks for it.
    pub advice: Option<AdviceState>,
    loading: Loading,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    raw_tx: Option<Sender<Req>>,
    details_tx: Option<Sender<(u64, usize, Span)>>,
    /// Sampled columns per track for the last view asked for, and probes under way.
    probes: HashMap<usize, Probe>,
    probe_pending: HashMap<usize, (i64, i64, usize)>,
    pub errors: Vec<String>,
    /// Where the timeline's summary came from: kept in the run (read at open) or derived
    /// by the pass.
    pub summary_kept: bool,
    /// Whether what this run's pass and analysis derive is kept in the run for next time.
    keep: bool,
    /// Per track, prefix sums of record counts over the summary's bins (for estimates).
    counts: HashMap<usize, Vec<u64>>,
    /// String ids that name a kernel, and a range, once the pass has read those tables.
    pub kernel_names: Option<Vec<bool>>,
    pub range_names: Option<Vec<bool>>,
    /// The answer of the last background search: (its number, the instance).
    pub found: Option<(u64, Option<Found>)>,
    /// The last details read in the background: (their number, the details).
    pub details_read: Option<(u64, Details)>,
}

impl RunState {
    /// Opens a run; `keep`: keep what the pass and the whole-run analysis derive in the run
    /// (background loading only) when it has no summaries of its own.
    pub fn open(path: &Path, loading: Loading, keep: bool) -> Result<RunState> {
        let (mut store, meta) = data::open(path)?;
        let names = NameInfo::load(&mut store)?;
        let summary = Summary::new(meta.first_ns, meta.last_ns);
        let (tx, rx) = channel();
        let mut run = RunState {
            meta,
            store,
            names,
            summary,
            parts_done: Vec::new(),
            pass_seconds: None,
            raw: HashMap::new(),
            pending: HashMap::new(),
            dense: HashMap::new(),
            analyses: HashMap::new(),
            advice: None,
            loading,
            tx,
            rx,
            raw_tx: None,
            details_tx: None,
            probes: HashMap::new(),
            probe_pending: HashMap::new(),
            errors: Vec::new(),
            summary_kept: false,
            keep,
            counts: HashMap::new(),
            kernel_names: None,
            range_names: None,
            found: None,
            details_read: None,
        };
        // What an earlier open or the import kept in the run: the exact picture at once, and
        // the tables without analysing.
        let t = Instant::now();
        if let Some(parts) = crate::summary::read_lanes(
            &mut run.store,
            &run.meta,
            &run.summary,
            run.names.class.len(),
        ) {
            for p in parts {
                run.add_part(p);
            }
            run.summary_kept = true;
            run.pass_seconds = Some(t.elapsed().as_secs_f64());
        }
        if let Some((analysis, tree)) = crate::summary::read_analysis(&mut run.store) {
            run.analyses.insert(
                None,
                AnalysisState::Ready(Arc::new(Analyzed {
                    analysis,
                    tree,
                    seconds: t.elapsed().as_secs_f64(),
                    step_alone: false,
                })),
            );
        }
        match loading {
            Loading::Blocking if run.summary_kept => {}
            Loading::Blocking => {
                let t = Instant::now();
                let mut parts = Vec::new();
                data::summarize(&mut run.store, &run.names, &run.meta, &run.summary, |p| {
                    parts.push(p)
                })?;
                for p in parts {
                    run.add_part(p);
                }
                run.pass_seconds = Some(t.elapsed().as_secs_f64());
            }
            Loading::Background => run.start_threads(),
        }
        Ok(run)
    }

    fn start_threads(&mut self) {
        if !self.summary_kept {
            self.start_pass();
        }
        self.start_reader();
    }

    /// The summary pass on a thread of its own, each table's part sent as it ends; with
    /// `keep`, the summary is then kept in the run.
    fn start_pass(&mut self) {
        let path = self.meta.path.clone();
        let meta = self.meta.clone();
        let summary = Summary {
            lanes: HashMap::new(),
            ..self.summary
        };
        let tx = self.tx.clone();
        let keep = self.keep;
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut enc = keep.then(|| crate::summary::LaneEncoder::new(&summary));
            let r = (|| -> Result<()> {
                let mut store = Store::open(&path)?;
                let names = NameInfo::load(&mut store)?;
                data::summarize(&mut store, &names, &meta, &summary, |p| {
                    if let Some(e) = enc.as_mut() {
                        e.part(&meta, &p);
                    }
                    let _ = tx.send(Msg::Part(p));
                })
            })();
            let ok = r.is_ok();
            let _ = tx.send(Msg::PassDone(
                r.map(|_| t.elapsed().as_secs_f64())
                    .map_err(|e| e.to_string()),
            ));
            if let (true, Some(e)) = (ok, enc) {
                let kept = crate::summary::keep(
                    &path,
                    crate::summary::LANES,
                    crate::summary::LANES_VERSION,
                    &e.finish(),
                );
                if let Err(e) = kept {
                    tracing::debug!("the timeline summary is not kept in the run: {e}");
                }
            }
        });
    }

    /// The thread that reads windows and samples, with its own store connection.
    fn start_reader(&mut self) {
        let (raw_tx, raw_rx) = channel::<Req>();
        self.raw_tx = Some(raw_tx);
        let path = self.meta.path.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let Ok(mut store) = Store::open(&path) else {
                return;
            };
            // Windows next to each other share pages: keep twice what SQLite keeps by default.
            let _ = store.set_cache_kib(16 * 1024);
            let Ok(names) = NameInfo::load(&mut store) else {
                return;
            };
            while let Ok(first) = raw_rx.recv() {
                // Only the newest request per track matters: the view has moved on. Probes
                // (the picture before the summary) go first.
                let mut raws: HashMap<usize, RawReq> = HashMap::new();
                let mut probes: HashMap<usize, (TrackKey, i64, i64, usize)> = HashMap::new();
                let mut take = |r: Req| match r {
                    Req::Raw(r) => {
                        raws.insert(r.track, r);
                    }
                    Req::Probe {
                        track,
                        key,
                        from_ns,
                        to_ns,
                        cols,
                    } => {
                        probes.insert(track, (key, from_ns, to_ns, cols));
                    }
                };
                take(first);
                while let Ok(r) = raw_rx.try_recv() {
                    take(r);
                }
                for (track, (key, from, to, cols)) in probes {
                    let p = data::probe(&mut store, &names, key, from, to, cols)
                        .map_err(|e| e.to_string());
                    if tx.send(Msg::Probe(track, p)).is_err() {
                        return;
                    }
                }
                for (_, r) in raws {
                    let w = data::read_raw(
                        &mut store,
                        &names,
                        r.key,
                        r.from_ns,
                        r.to_ns,
                        r.long.as_deref(),
                        r.lookback_ns,
                    )
                    .map_err(|e| e.to_string());
                    if tx.send(Msg::Raw(r.track, w)).is_err() {
                        return;
                    }
                }
            }
        });
    }

    fn add_part(&mut self, mut p: PassPart) {
        self.parts_done.push(p.table);
        match p.table {
            "kernels" => self.kernel_names = Some(std::mem::take(&mut p.names)),
            "ranges" => self.range_names = Some(std::mem::take(&mut p.names)),
            _ => {}
        }
        self.summary.lanes.extend(p.lanes);
        self.counts.clear();
        for ((t, _), bins) in &self.summary.lanes {
            let prefix = self
                .counts
                .entry(*t)
                .or_insert_with(|| vec![0; SUMMARY_BINS + 1]);
            let mut acc = 0u64;
            for (i, &c) in bins.levels[0].count.iter().enumerate() {
                acc += c as u64;
                prefix[i + 1] += acc;
            }
        }
        // Raw windows read before the summary had no long records: read them again.
        self.raw.clear();
        self.dense.clear();
    }

    /// Whether the summary has every table.
    pub fn summary_complete(&self) -> bool {
        self.parts_done.len() == 3
    }

    /// Takes what the background threads sent; true when anything changed.
    pub fn poll(&mut self) -> bool {
        let mut changed = false;
        while let Ok(m) = self.rx.try_recv() {
            changed = true;
            match m {
                Msg::Part(p) => self.add_part(p),
                Msg::PassDone(Ok(s)) => self.pass_seconds = Some(s),
                Msg::PassDone(Err(e)) => self.errors.push(format!("summary: {e}")),
                Msg::Raw(track, Ok(w)) => {
                    self.pending.remove(&track);
                    if w.complete {
                        self.raw.insert(track, w);
                    } else {
                        self.dense.insert(track, (w.from_ns, w.to_ns));
                    }
                }
                Msg::Probe(track, Ok(p)) => {
                    self.probe_pending.remove(&track);
                    self.probes.insert(track, p);
                }
                Msg::Probe(track, Err(e)) => {
                    self.probe_pending.remove(&track);
                    self.errors.push(format!("sampling a view: {e}"));
                }
                Msg::Found(seq, Ok(f)) => self.found = Some((seq, f)),
                Msg::Details(seq, d) => self.details_read = Some((seq, d)),
                Msg::Found(seq, Err(e)) => {
                    self.found = Some((seq, None));
                    self.errors.push(format!("searching: {e}"));
                }
                Msg::Raw(track, Err(e)) => {
                    self.pending.remove(&track);
                    self.errors.push(format!("reading a window: {e}"));
                }
                Msg::Advice(r) => {
                    self.advice = Some(match r {
                        Ok(a) => AdviceState::Ready(a),
                        Err(e) => AdviceState::Failed(e),
                    });
                }
                Msg::Analysis(step, r) => {
                    self.analyses.insert(
                        step,
                        match r {
                            Ok(a) => AnalysisState::Ready(a),
                            Err(e) => AnalysisState::Failed(e),
                        },
                    );
                }
            }
        }
        changed
    }

    /// Whether a raw window of `track` is being read.
    pub fn reading(&self, track: usize) -> bool {
        self.pending.contains_key(&track)
    }

    /// Whether the timeline has all it asked for: the summary of every table, and no raw
    /// window still being read.
    pub fn timeline_ready(&self) -> bool {
        self.summary_complete() && self.pending.is_empty()
    }

    /// Whether work is under way that will change what is drawn.
    pub fn busy(&self) -> bool {
        !self.summary_complete()
            || !self.pending.is_empty()
            || !self.probe_pending.is_empty()
            || self
                .analyses
                .values()
                .any(|a| matches!(a, AnalysisState::Running(_)))
    }

    /// The lanes of a track: what the summary and raw windows hold (a stream always has its
    /// GPU lane; a thread not yet summarised shows one lane).
    pub fn lanes(&self, track: usize) -> Vec<LaneKind> {
        let mut set = BTreeSet::new();
        for (t, l) in self.summary.lanes.keys() {
            if *t == track {
                set.insert(*l);
            }
        }
        if let Some(w) = self.raw.get(&track) {
            set.extend(w.lanes.keys().copied());
        }
        if !self.summary_complete() {
            if let Some(p) = self.probes.get(&track) {
                set.extend(p.lanes.keys().copied());
            }
        }
        match self.meta.tracks[track].key {
            TrackKey::Stream { .. } => {
                set.insert(LaneKind::Gpu);
            }
            TrackKey::Thread { .. } if set.is_empty() => {
                set.insert(LaneKind::Range(0));
            }
            _ => {}
        }
        set.into_iter().collect()
    }

    /// The raw window of `track` if it covers `[from, to)`; otherwise asks for one (a margin
    /// of half a view each side, so that small pans need no read) when the summary says it
    /// is small enough, or when there is no summary yet to say.
    pub fn raw_for(&mut self, track: usize, from: i64, to: i64) -> Option<&RawWindow> {
        let covers = |w: (i64, i64)| w.0 <= from && w.1 >= to;
        if self
            .raw
            .get(&track)
            .is_some_and(|w| covers((w.from_ns, w.to_ns)))
        {
            return self.raw.get(&track);
        }
        let span = to - from;
        let want = (from - span / 2, to + span / 2);
        if self
            .dense
            .get(&track)
            .is_some_and(|&d| d.0 >= want.0 - span && d.1 <= want.1 + span && d.1 - d.0 <= 3 * span)
        {
            return None;
        }
        match self.estimate(track, want.0, want.1) {
            Some(est) if est > RAW_LIMIT as f64 * 0.8 => return None,
            Some(_) => {}
            // Nothing known yet about this track and a wide view: its summary will come
            // sooner than a read that would stop at the limit.
            None if span > (self.meta.last_ns - self.meta.first_ns) / 64 => return None,
            None => {}
        }
        if self.pending.get(&track).is_some_and(|&p| covers(p)) {
            return None;
        }
        let key = self.meta.tracks[track].key;
        let lookback = LONG_BINS * self.summary.bin_ns;
        let long = self
            .summary_complete()
            .then(|| data::long_spans(&self.summary, track));
        match self.loading {
            Loading::Blocking => {
                match data::read_raw(
                    &mut self.store,
                    &self.names,
                    key,
                    want.0,
                    want.1,
                    long.as_deref(),
                    lookback,
                ) {
                    Ok(w) if w.complete => {
                        self.raw.insert(track, w);
                    }
                    Ok(w) => {
                        self.dense.insert(track, (w.from_ns, w.to_ns));
                    }
                    Err(e) => self.errors.push(e.to_string()),
                }
                self.raw
                    .get(&track)
                    .filter(|w| covers((w.from_ns, w.to_ns)))
            }
            Loading::Background => {
                self.pending.insert(track, want);
                if let Some(tx) = &self.raw_tx {
                    let _ = tx.send(Req::Raw(RawReq {
                        track,
                        key,
                        from_ns: want.0,
                        to_ns: want.1,
                        long,
                        lookback_ns: lookback,
                    }));
                }
                None
            }
        }
    }

    /// Records of a track in `[from, to)` by the summary's counts; None before its summary.
    fn estimate(&self, track: usize, from: i64, to: i64) -> Option<f64> {
        let s = &self.summary;
        let Some(prefix) = self.counts.get(&track) else {
            return self.summary_complete().then_some(0.0);
        };
        let b0 = ((from - s.t0_ns) / s.bin_ns).clamp(0, SUMMARY_BINS as i64 - 1) as usize;
        let b1 = ((to - s.t0_ns) / s.bin_ns).clamp(0, SUMMARY_BINS as i64 - 1) as usize;
        Some((prefix[b1 + 1] - prefix[b0]) as f64)
    }

    /// Whether the summary pass has read the table that `lane` draws.
    fn part_done(&self, lane: LaneKind) -> bool {
        let table = match lane {
            LaneKind::Gpu => "kernels",
            LaneKind::Api => "api_calls",
            _ => "ranges",
        };
        self.parts_done.contains(&table)
    }

    /// One lane's columns for `[from, to)`: from the raw window where it covers the view,
    /// else from the summary, else (before the summary has the lane's table) from index
    /// samples, else unknown.
    pub fn cells(
        &mut self,
        track: usize,
        lane: LaneKind,
        from: i64,
        to: i64,
        n: usize,
    ) -> Vec<Cell> {
        let by_class = lane == LaneKind::Gpu;
        if let Some(w) = self.raw_for(track, from, to) {
            return match w.lanes.get(&lane) {
                Some(spans) => cells_from_spans(spans, from, to, n, by_class),
                None => cells_from_spans(&[], from, to, n, by_class),
            };
        }
        if let Some(bins) = self.summary.lanes.get(&(track, lane)) {
            return cells_from_bins(&self.summary, bins, from, to, n);
        }
        let empty = Cell {
            known: true,
            ..Cell::default()
        };
        if self.part_done(lane) {
            return vec![empty; n];
        }
        match self.probe_for(track, from, to, n) {
            Some(p) => p.lanes.get(&lane).cloned().unwrap_or_else(|| {
                vec![
                    Cell {
                        sampled: true,
                        ..empty
                    };
                    n
                ]
            }),
            None => vec![Cell::default(); n],
        }
    }

    /// The sampled columns of `track` for exactly this view, asked for when missing.
    fn probe_for(&mut self, track: usize, from: i64, to: i64, n: usize) -> Option<&Probe> {
        let want = (from, to, n);
        if self
            .probes
            .get(&track)
            .is_some_and(|p| (p.from_ns, p.to_ns, p.cols) == want)
        {
            return self.probes.get(&track);
        }
        let key = self.meta.tracks[track].key;
        match self.loading {
            Loading::Blocking => {
                match data::probe(&mut self.store, &self.names, key, from, to, n) {
                    Ok(p) => {
                        self.probes.insert(track, p);
                    }
                    Err(e) => self.errors.push(e.to_string()),
                }
                self.probes.get(&track)
            }
            Loading::Background => {
                if self.probe_pending.get(&track) != Some(&want) {
                    self.probe_pending.insert(track, want);
                    if let Some(tx) = &self.raw_tx {
                        let _ = tx.send(Req::Probe {
                            track,
                            key,
                            from_ns: from,
                            to_ns: to,
                            cols: n,
                        });
                    }
                }
                None
            }
        }
    }

    /// The details of a record: inline when blocking (returned), else on a thread of its
    /// own (they come as [`RunState::details_read`]).
    pub fn details(&mut self, seq: u64, track: usize, span: Span) -> Option<Details> {
        match self.loading {
            Loading::Blocking => Some(crate::details::read(
                &mut self.store,
                &self.names,
                &self.meta,
                track,
                span,
            )),
            Loading::Background => {
                if self.details_tx.is_none() {
                    self.details_tx = Some(self.details_thread());
                }
                if let Some(tx) = &self.details_tx {
                    let _ = tx.send((seq, track, span));
                }
                None
            }
        }
    }

    /// The thread that reads details, newest request first (a selection that has moved on is
    /// not read), with its own store connection.
    fn details_thread(&self) -> Sender<(u64, usize, Span)> {
        let (req_tx, req_rx) = channel::<(u64, usize, Span)>();
        let meta = self.meta.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let mut opened =
                Store::open(&meta.path)
                    .map_err(|e| e.to_string())
                    .and_then(|mut s| {
                        NameInfo::load(&mut s)
                            .map(|n| (s, n))
                            .map_err(|e| e.to_string())
                    });
            while let Ok(mut req) = req_rx.recv() {
                while let Ok(newer) = req_rx.try_recv() {
                    req = newer;
                }
                let (seq, track, span) = req;
                let d = match &mut opened {
                    Ok((store, names)) => crate::details::read(store, names, &meta, track, span),
                    Err(e) => Details {
                        title: format!("cannot read the details: {e}"),
                        ..Details::default()
                    },
                };
                if tx.send(Msg::Details(seq, d)).is_err() {
                    return;
                }
            }
        });
        req_tx
    }

    /// Looks for the next (or previous) instance of `inst`: inline when blocking (the answer
    /// is returned), else on a thread of its own, so that a rare name on a large run does not
    /// freeze the screen (the answer comes as [`RunState::found`]).
    pub fn find(
        &mut self,
        seq: u64,
        inst: Instances,
        from: (i64, i64),
        dir: fuseprof_store::Direction,
    ) -> Option<Option<Found>> {
        match self.loading {
            Loading::Blocking => {
                let tracks = self.meta.tracks.clone();
                match data::find_instance(&mut self.store, &self.names, &tracks, &inst, from, dir) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        self.errors.push(e.to_string());
                        Some(None)
                    }
                }
            }
            Loading::Background => {
                let path = self.meta.path.clone();
                let tracks = self.meta.tracks.clone();
                let tx = self.tx.clone();
                std::thread::spawn(move || {
                    let r = (|| -> Result<Option<Found>> {
                        let mut store = Store::open(&path)?;
                        let names = NameInfo::load(&mut store)?;
                        data::find_instance(&mut store, &names, &tracks, &inst, from, dir)
                    })();
                    let _ = tx.send(Msg::Found(seq, r.map_err(|e| e.to_string())));
                });
                None
            }
        }
    }

    /// The analysis for `step` (None: whole run), started if it is not there.
    pub fn analysis(&mut self, step: Option<usize>) -> Option<Arc<Analyzed>> {
        match self.analyses.get(&step) {
            Some(AnalysisState::Ready(a)) => return Some(a.clone()),
            Some(_) => return None,
            None => {}
        }
        let path = self.meta.path.clone();
        let keep = self.keep && step.is_none() && self.loading == Loading::Background;
        // A step is analysed from its own records where the whole run's analysis and the
        // timeline's summary (which names the long ranges open at the step's start) are in.
        let alone = match (step, self.ready_analysis(None)) {
            (Some(k), Some(whole)) if self.summary_complete() => {
                let open = self.open_ranges_at(&whole.analysis, k);
                Some((k, whole, open))
            }
            _ => None,
        };
        let job = move || -> std::result::Result<Arc<Analyzed>, String> {
            let t = Instant::now();
            let mut store = Store::open(&path).map_err(|e| e.to_string())?;
            let rules = Rules::builtin();
            let scoped = match alone {
                Some((k, whole, open)) => fuseprof_analyzer::analyze_step_with_op_tree(
                    &mut store,
                    &whole.analysis,
                    k,
                    &rules,
                    &open,
                )
                .map_err(|e| e.to_string())?,
                None => Scoped::NeedsWholeRun("no whole-run analysis or summary yet".into()),
            };
            let step_alone = matches!(scoped, Scoped::Done(_));
            let (analysis, tree) = match scoped {
                Scoped::Done(done) => *done,
                Scoped::NeedsWholeRun(why) => {
                    if step.is_some() {
                        tracing::debug!("step {step:?} analysed with the whole run: {why}");
                    }
                    let cfg = AnalyzeConfig {
                        step,
                        ..AnalyzeConfig::default()
                    };
                    fuseprof_analyzer::analyze_with_op_tree(&mut store, &cfg, &rules)
                        .map_err(|e| e.to_string())?
                }
            };
            drop(store);
            if let Some(bytes) = keep
                .then(|| crate::summary::encode_analysis(&analysis, &tree))
                .flatten()
            {
                let kept = crate::summary::keep(
                    &path,
                    crate::summary::ANALYSIS,
                    &crate::summary::analysis_version(),
                    &bytes,
                );
                if let Err(e) = kept {
                    tracing::debug!("the analysis is not kept in the run: {e}");
                }
            }
            Ok(Arc::new(Analyzed {
                analysis,
                tree,
                seconds: t.elapsed().as_secs_f64(),
                step_alone,
            }))
        };
        match self.loading {
            Loading::Blocking => {
                let r = job();
                self.analyses.insert(
                    step,
                    match r {
                        Ok(a) => AnalysisState::Ready(a),
                        Err(e) => AnalysisState::Failed(e),
                    },
                );
                self.analysis(step)
            }
            Loading::Background => {
                self.analyses
                    .insert(step, AnalysisState::Running(Instant::now()));
                let tx = self.tx.clone();
                std::thread::spawn(move || {
                    let _ = tx.send(Msg::Analysis(step, job()));
                });
                None
            }
        }
    }

    /// The advisor's proposals (with `bench` results where the run has them), started if they
    /// are not there.
    pub fn advice(&mut self) -> &AdviceState {
        if self.advice.is_none() {
            let path = self.meta.path.clone();
            let job = move || {
                fuseprof_fusion_advisor::advise_file(
                    &path,
                    &fuseprof_fusion_advisor::AdviseConfig::default(),
                )
                .map(Arc::new)
                .map_err(|e| e.to_string())
            };
            match self.loading {
                Loading::Blocking => {
                    self.advice = Some(match job() {
                        Ok(a) => AdviceState::Ready(a),
                        Err(e) => AdviceState::Failed(e),
                    });
                }
                Loading::Background => {
                    self.advice = Some(AdviceState::Running);
                    let tx = self.tx.clone();
                    std::thread::spawn(move || {
                        let _ = tx.send(Msg::Advice(job()));
                    });
                }
            }
        }
        self.advice.as_ref().unwrap_or(&AdviceState::Running)
    }

    /// Where the ranges open at the start of step `k` are (for analysing the step alone):
    /// the summary keeps every range at least `LONG_BINS` bins long, so the others open
    /// there started at most that long before.
    fn open_ranges_at(&self, whole: &Analysis, k: usize) -> OpenRanges {
        let lookback_ns = LONG_BINS * self.summary.bin_ns;
        let Some(start) = whole.steps.steps.get(k).map(|s| s.start_ns) else {
            return OpenRanges::default();
        };
        let mut long = Vec::new();
        for ((track, lane), bins) in &self.summary.lanes {
            if matches!(lane, LaneKind::Gpu | LaneKind::Api) {
                continue;
            }
            let (pid, tid) = match self.meta.tracks[*track].key {
                TrackKey::Thread { pid, tid } => (pid, tid),
                TrackKey::Stream { device, stream } => (device, stream),
            };
            long.extend(
                bins.long
                    .iter()
                    .filter(|s| s.start_ns < start && s.end_ns > start)
                    .map(|s| LongRange {
                        pid,
                        tid,
                        start_ns: s.start_ns,
                        name: s.name,
                    }),
            );
        }
        OpenRanges { lookback_ns, long }
    }

    /// Whether the whole-run analysis this run derives is kept in it for the next open (a run
    /// without a kept one, opened by `fuseprof tui`).
    pub fn keeps_analysis(&self) -> bool {
        self.keep && self.loading == Loading::Background
    }

    /// The analysis of the whole run if it is ready, without starting one.
    pub fn ready_analysis(&self, step: Option<usize>) -> Option<Arc<Analyzed>> {
        match self.analyses.get(&step) {
            Some(AnalysisState::Ready(a)) => Some(a.clone()),
            _ => None,
        }
    }

    /// File name for titles.
    pub fn file_name(&self) -> String {
        self.meta.path.file_name().map_or_else(
            || self.meta.path.display().to_string(),
            |f| f.to_string_lossy().into(),
        )
    }
}
