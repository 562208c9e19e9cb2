//! What a report shows, gathered (`report.rs`) before any output is rendered from it (`html/`,
//! `summary.rs`).

use fuseprof_analyzer::{Analysis, Diff};
use fuseprof_fusion_advisor::Advice;
use fuseprof_store::{Device, RunInfo};

use crate::gate::{GateResult, StepComparison};
use crate::history::HistoryRun;

/// The part of the baseline comparison the page shows.
#[derive(Clone, Debug)]
pub struct BaselineData {
    pub name: String,
    pub analysis: Analysis,
    pub diff: Diff,
    pub steps: StepComparison,
    /// Share of the baseline's op (or kernel) time whose names this run also has, percent.
    pub matched_pct: f64,
}

/// One step of the run on the GPU: which stream ran what, when.
#[derive(Clone, Debug)]
pub struct StepTimeline {
    pub step: Option<usize>,
    /// `GPU d stream s`, by row.
    pub rows: Vec<String>,
    /// (row, start ns from the window's start, end ns, class).
    pub spans: Vec<(usize, i64, i64, String)>,
    pub window_ns: i64,
}

/// Everything the page shows.
#[derive(Clone, Debug)]
pub struct ReportData {
    pub file: String,
    pub run: RunInfo,
    pub devices: Vec<Device>,
    pub meta: Vec<(String, String)>,
    pub analysis: Analysis,
    pub timeline: Option<StepTimeline>,
    /// The advice, or why there is none.
    pub advice: std::result::Result<Advice, String>,
    pub baseline: Option<BaselineData>,
    pub gate: Option<GateResult>,
    pub noise_sigmas: f64,
    pub history: Option<Vec<HistoryRun>>,
    pub warnings: Vec<String>,
}

/// Below this share of matching op time, the baseline is called another model.
pub const MIN_MATCH_PCT: f64 = 50.0;
