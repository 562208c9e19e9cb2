//! `fuseprof report`: gathers a run, its advice and bench results, a baseline and the history
//! into one [`ReportData`], renders the HTML page, the Markdown summary and the JUnit XML, and
//! writes them all or none.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use fuseprof_analyzer::{Analysis, AnalyzeConfig};
use fuseprof_fusion_advisor::AdviseConfig;
use fuseprof_store::Store;

pub use crate::data::{BaselineData, ReportData, StepTimeline, MIN_MATCH_PCT};
use crate::gate::{self, Baseline, Gate, GateResult};
use crate::history::HistoryRun;
use crate::{Error, Result};

/// What `fuseprof report` was asked for.
#[derive(Clone, Debug, Default)]
pub struct ReportConfig {
    pub run: PathBuf,
    /// The HTML page to write (replaced if it exists).
    pub output: PathBuf,
    /// A run file or an `analyze --json` document.
    pub baseline: Option<PathBuf>,
    pub gate: Option<Gate>,
    /// Markdown summary to write.
    pub summary: Option<PathBuf>,
    /// JUnit XML to write.
    pub junit: Option<PathBuf>,
    /// Earlier runs for the trend chart, oldest first (from [`crate::history`]).
    pub history: Option<Vec<HistoryRun>>,
}

/// What a report run found, for the binary's exit code and messages.
#[derive(Clone, Debug)]
pub struct ReportOutcome {
    pub gate: Option<GateResult>,
    pub warnings: Vec<String>,
    pub written: Vec<PathBuf>,
}

/// A run file, or a JSON document that `analyze --json` wrote.
pub fn load_analysis(path: &Path) -> Result<Analysis> {
    let text_start = {
        let mut head = [0u8; 1];
        let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let n = std::io::Read::read(&mut f, &mut head).map_err(|e| Error::io(path, e))?;
        n == 1 && head[0] == b'{'
    };
    if text_start {
        let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        return serde_json::from_slice(&text).map_err(|e| Error::BadInput {
            path: path.into(),
            reason: format!("not an analysis document from `fuseprof analyze --json` ({e})"),
        });
    }
    Ok(fuseprof_analyzer::analyze_file(
        path,
        &AnalyzeConfig::default(),
    )?)
}

/// Share of `base`'s GPU time in op types with input shapes that `run` also has (op types
/// alone where either run lacks shapes; kernel names where either lacks ops). Different models
/// share op types (every transformer calls `aten::addmm`) but hardly ever their shapes, so a low
/// share means the baseline is another model or another configuration of it.
pub fn matched_pct(base: &Analysis, run: &Analysis) -> f64 {
    let shapes = |a: &Analysis| -> Vec<(String, i64)> {
        a.by_shape
            .iter()
            .filter(|r| r.dims.is_some())
            .map(|r| {
                (
                    format!("{} {}", r.name, r.dims.as_deref().unwrap_or("")),
                    r.self_ns,
                )
            })
            .collect()
    };
    let ops = |a: &Analysis| -> Vec<(String, i64)> {
        a.by_op
            .iter()
            .filter(|r| r.role == Some(fuseprof_analyzer::Role::Op))
            .map(|r| (r.name.clone(), r.self_ns))
            .collect()
    };
    let kernels = |a: &Analysis| -> Vec<(String, i64)> {
        a.by_kernel
            .iter()
            .map(|k| (k.name.clone(), k.total_ns))
            .collect()
    };
    let (b, r) = match (shapes(base), shapes(run)) {
        (b, r) if !b.is_empty() && !r.is_empty() => (b, r),
        _ => match (ops(base), ops(run)) {
            (b, r) if !b.is_empty() && !r.is_empty() => (b, r),
            _ => (kernels(base), kernels(run)),
        },
    };
    let names: HashSet<String> = r.into_iter().map(|x| x.0).collect();
    let total: i64 = b.iter().map(|x| x.1).sum();
    if total == 0 {
        return 100.0;
    }
    let hit: i64 = b.iter().filter(|x| names.contains(&x.0)).map(|x| x.1).sum();
    hit as f64 * 100.0 / total as f64
}

/// Gathers everything the page shows.
pub fn gather(cfg: &ReportConfig) -> Result<ReportData> {
    let mut store = Store::open(&cfg.run)?;
    let info = store.info()?;
    let analysis = fuseprof_analyzer::analyze(&mut store, &AnalyzeConfig::default())?;
    let timeline = step_timeline(&mut store, &analysis)?;
    drop(store);
    let mut warnings = Vec::new();
    let advice = match fuseprof_fusion_advisor::advise_file(&cfg.run, &AdviseConfig::default()) {
        Ok(a) => Ok(a),
        Err(e) => {
            tracing::info!("no advice for {}: {e}", cfg.run.display());
            Err(e.to_string())
        }
    };
    let noise_sigmas = cfg.gate.as_ref().map_or(2.0, |g| g.noise_sigmas);
    let baseline = match &cfg.baseline {
        None => None,
        Some(path) => {
            let base = load_analysis(path)?;
            let diff = fuseprof_analyzer::diff(&base, &analysis);
            let steps = gate::compare_steps(
                &gate::step_values(&base, false),
                &gate::step_values(&analysis, false),
                noise_sigmas,
            );
            let matched = matched_pct(&base, &analysis);
            if matched < MIN_MATCH_PCT {
                warnings.push(format!(
                    "{}: only {matched:.0}% of the baseline's op time is in ops this run also \
                     has; is it a recording of another model?",
                    path.display()
                ));
            }
            Some(BaselineData {
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                analysis: base,
                diff,
                steps,
                matched_pct: matched,
            })
        }
    };
    let gate = match &cfg.gate {
        None => None,
        Some(g) => Some(gate::evaluate(
            g,
            &analysis,
            baseline
                .as_ref()
                .map(|b| Baseline {
                    analysis: &b.analysis,
                    diff: &b.diff,
                })
                .as_ref(),
        )?),
    };
    Ok(ReportData {
        file: cfg
            .run
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        run: info.run,
        devices: info.devices,
        meta: info.meta,
        analysis,
        timeline,
        advice,
        baseline,
        gate,
        noise_sigmas,
        history: cfg.history.clone(),
        warnings,
    })
}

/// The step whose GPU time is the median (a typical one), or the first 50 ms of GPU work when
/// the run has no steps; at most 20,000 records are drawn.
fn step_timeline(store: &mut Store, a: &Analysis) -> Result<Option<StepTimeline>> {
    let class_of: HashMap<&str, &str> = a
        .by_kernel
        .iter()
        .map(|k| (k.name.as_str(), k.class.as_str()))
        .collect();
    let step = if a.steps.steps.is_empty() {
        None
    } else {
        let mut by_gpu: Vec<&fuseprof_analyzer::StepRow> = a.steps.steps.iter().collect();
        by_gpu.sort_by_key(|s| s.gpu_ns);
        Some(by_gpu[by_gpu.len() / 2].clone())
    };
    // Launch time of each correlation id: a record belongs to the step its launch fell in.
    let mut launch_at: HashMap<(i64, i64), i64> = HashMap::new();
    if step.is_some() {
        store.for_each_lean_launch(|l| {
            launch_at.insert((l.pid, l.correlation_id), l.start_ns);
        })?;
    }
    let in_step = |pid: Option<i64>, corr: Option<i64>, start: i64| -> bool {
        match &step {
            None => true,
            Some(s) => {
                let t = match (pid, corr) {
                    (Some(p), Some(c)) => launch_at.get(&(p, c)).copied().unwrap_or(start),
                    _ => start,
                };
                t >= s.start_ns && t < s.start_ns + s.wall_ns
            }
        }
    };
    let strings = store.strings()?;
    let mut recs: Vec<(i64, i64, i64, i64, String)> = Vec::new();
    store.for_each_kernel(|k| {
        if in_step(k.pid, k.correlation_id, k.start_ns) {
            let name = strings.get(k.name);
            let class = class_of.get(name).copied().unwrap_or("other");
            recs.push((
                k.device_id,
                k.stream_id,
                k.start_ns,
                k.end_ns,
                class.to_string(),
            ));
        }
    })?;
    store.for_each_memop(|m| {
        if in_step(m.pid, m.correlation_id, m.start_ns) {
            let class = match m.kind {
                fuseprof_store::MemopKind::Memset => "memset",
                _ => "memcpy",
            };
            recs.push((
                m.device_id,
                m.stream_id,
                m.start_ns,
                m.end_ns,
                class.to_string(),
            ));
        }
    })?;
    if recs.is_empty() {
        return Ok(None);
    }
    recs.sort_by_key(|r| r.2);
    let t0 = recs[0].2;
    if step.is_none() {
        recs.retain(|r| r.2 < t0 + 50_000_000);
    }
    recs.truncate(20_000);
    let t1 = recs.iter().map(|r| r.3).max().unwrap_or(t0);
    let mut streams: Vec<(i64, i64)> = recs.iter().map(|r| (r.0, r.1)).collect();
    streams.sort_unstable();
    streams.dedup();
    let rows = streams
        .iter()
        .map(|(d, s)| format!("GPU {d} stream {s}"))
        .collect();
    let spans = recs
        .into_iter()
        .map(|(d, s, b, e, c)| {
            let row = streams.binary_search(&(d, s)).unwrap_or(0);
            (row, b - t0, e - t0, c)
        })
        .collect();
    Ok(Some(StepTimeline {
        step: step.map(|s| s.index),
        rows,
        spans,
        window_ns: t1 - t0,
    }))
}

/// Writes `contents` under a temporary name beside `path`; [`commit`] renames it into place.
fn stage(path: &Path, contents: &[u8]) -> Result<tempfile::NamedTempFile> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".fuseprof-").suffix(".tmp");
    // Reports are for reading: the usual mode of a new file, not a temporary file's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let mut tmp = builder.tempfile_in(dir).map_err(|e| Error::io(path, e))?;
    tmp.write_all(contents).map_err(|e| Error::io(path, e))?;
    tmp.as_file().sync_all().map_err(|e| Error::io(path, e))?;
    Ok(tmp)
}

/// Builds the report and writes the page, summary and JUnit file: every output is written
/// under a temporary name first and renamed only when all were written, so a failure leaves
/// none of them half written.
pub fn generate(cfg: &ReportConfig) -> Result<ReportOutcome> {
    let data = gather(cfg)?;
    let mut outputs: Vec<(PathBuf, String)> =
        vec![(cfg.output.clone(), crate::html::render(&data)?)];
    if let Some(p) = &cfg.summary {
        outputs.push((p.clone(), crate::summary::markdown(&data)));
    }
    if let Some(p) = &cfg.junit {
        outputs.push((p.clone(), crate::summary::junit(&data)));
    }
    let mut staged = Vec::new();
    for (path, text) in &outputs {
        staged.push((path.clone(), stage(path, text.as_bytes())?));
    }
    let mut written = Vec::new();
    for (path, tmp) in staged {
        tmp.persist(&path).map_err(|e| Error::io(&path, e.error))?;
        written.push(path);
    }
    Ok(ReportOutcome {
        gate: data.gate,
        warnings: data.warnings,
        written,
    })
}
