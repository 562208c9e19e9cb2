//! `fuseprof bench`: each proposal measured on its recorded shapes and dtype. The chain is
//! rebuilt as eager PyTorch from the pattern's semantics and the recorded shapes, and timed
//! against the bundled kernel (and against the chain under torch.compile), interleaved, with a
//! numerics gate against a float32 reference; times are GPU time per call from CUDA-graph
//! replays, as a trace counts it. The work runs in `python/fuseprof_bench.py`
//! (embedded, with the kernels' Python module) under the python3 that has torch; results go
//! back into the run's store.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::{advise_file, Advice, AdviseConfig, Error, Proposal, Result};

pub use fuseprof_store::BenchResult as Measured;

const DRIVER: &str = include_str!("../python/fuseprof_bench.py");
const KERNELS_PY: &str = include_str!("../../kernels/python/fuseprof_kernels.py");

/// The bench results of a run.
pub fn read_results(store: &mut fuseprof_store::Store) -> Result<Vec<Measured>> {
    Ok(store.bench_results()?)
}

/// Which proposals to measure.
#[derive(Clone, Debug, PartialEq)]
pub enum Selection {
    All,
    Ids(Vec<String>),
}

/// What `fuseprof bench RUN` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    pub selection: Selection,
    /// The python with torch; None: $FUSEPROF_PYTHON, else `python3` on PATH.
    pub python: Option<PathBuf>,
    /// libfuseprof_kernels.so; None: $FUSEPROF_KERNELS_LIB, else next to the executable.
    pub kernels_lib: Option<PathBuf>,
    /// Interleaved rounds (ours, eager, compiled), each a median of many calls.
    pub rounds: u32,
    /// Also time each chain under torch.compile.
    pub compile: bool,
    /// Also write the results as JSON here.
    pub output: Option<PathBuf>,
    pub advise: AdviseConfig,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            selection: Selection::All,
            python: None,
            kernels_lib: None,
            rounds: 3,
            compile: true,
            output: None,
            advise: AdviseConfig::default(),
        }
    }
}

/// The job the driver runs: one entry per proposal.
#[derive(Serialize)]
struct Job<'a> {
    rounds: u32,
    compile: bool,
    progress: bool,
    proposals: Vec<JobEntry<'a>>,
}

#[derive(Serialize)]
struct JobEntry<'a> {
    id: &'a str,
    pattern: &'a str,
    dtype: &'a str,
    params: &'a std::collections::BTreeMap<String, i64>,
}

/// What the driver writes per proposal.
#[derive(Deserialize)]
struct DriverResult {
    id: String,
    status: String,
    ours_us: Option<f64>,
    eager_us: Option<f64>,
    compiled_us: Option<f64>,
    rel_error: Option<f64>,
    tolerance: Option<f64>,
    #[serde(default)]
    detail: serde_json::Value,
}

#[derive(Deserialize)]
struct DriverOutput {
    device: String,
    driver: Option<String>,
    torch: String,
    results: Vec<DriverResult>,
}

/// A measured proposal next to what advise expected.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchRow {
    pub proposal: Proposal,
    pub measured: Measured,
    /// Measured saving per step (eager chain - ours, times instances per step; see
    /// [`crate::measured_saving`]).
    pub measured_saving_ns_per_step: f64,
    /// Where the replayed and the recorded eager chain disagree: both, and which one the saving
    /// uses.
    pub saving_note: Option<String>,
    /// (measured - expected) / expected saving, percent.
    pub saving_error_pct: f64,
}

/// The result of one `bench` call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport {
    pub run: String,
    pub device: String,
    pub driver: Option<String>,
    pub torch: String,
    pub step_gpu_ns: f64,
    pub rows: Vec<BenchRow>,
}

/// libfuseprof_kernels.so: `given`, else $FUSEPROF_KERNELS_LIB, else next to the executable,
/// else in `../lib` or `../lib/fuseprof` beside it (where the pip wheel installs it).
pub(crate) fn find_kernels_lib(given: Option<&Path>) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("FUSEPROF_KERNELS_LIB").map(PathBuf::from))
        .into_iter()
        .chain(fuseprof_collector::collect::beside_executable(
            "libfuseprof_kernels.so",
        ))
        .collect();
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        Error::Bench(
            "libfuseprof_kernels.so not found: build it with `cargo build --release -p \
                 fuseprof-kernels` (it lands next to fuseprof) or set FUSEPROF_KERNELS_LIB"
                .into(),
        )
    })
}

fn python(cfg: &BenchConfig) -> PathBuf {
    cfg.python
        .clone()
        .or_else(|| std::env::var_os("FUSEPROF_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |error| Error::Io {
        path: path.into(),
        error,
    }
}

/// The proposals `cfg` selects, or an error naming the ones that exist.
pub fn select<'a>(advice: &'a Advice, cfg: &BenchConfig) -> Result<Vec<&'a Proposal>> {
    if advice.proposals.is_empty() {
        return Err(Error::NothingToBench {
            file: advice.run.file.clone(),
        });
    }
    match &cfg.selection {
        Selection::All => Ok(advice.proposals.iter().collect()),
        Selection::Ids(ids) => ids
            .iter()
            .map(|id| {
                advice
                    .proposals
                    .iter()
                    .find(|p| &p.id == id)
                    .ok_or_else(|| Error::NoSuchProposal {
                        id: id.clone(),
                        file: advice.run.file.clone(),
                        known: advice
                            .proposals
                            .iter()
                            .map(|p| p.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            })
            .collect(),
    }
}

/// Measures the selected proposals of the run at `run` and records the results in it.
pub fn bench(run: &Path, cfg: &BenchConfig) -> Result<BenchReport> {
    bench_advice(run, &advise_file(run, &cfg.advise)?, cfg)
}

/// Measures the selected proposals of `advice`, the advice on the run at `run` (made with
/// `cfg.advise`), and records the results in the run.
pub fn bench_advice(run: &Path, advice: &Advice, cfg: &BenchConfig) -> Result<BenchReport> {
    let chosen = select(advice, cfg)?;
    let lib = find_kernels_lib(cfg.kernels_lib.as_deref())?;
    let dir = tempdir()?;
    let job = Job {
        rounds: cfg.rounds.max(1),
        compile: cfg.compile,
        progress: std::io::stderr().is_terminal(),
        proposals: chosen
            .iter()
            .map(|p| JobEntry {
                id: &p.id,
                pattern: &p.pattern,
                dtype: &p.dtype,
                params: &p.params,
            })
            .collect(),
    };
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(io(&p))?;
        Ok(p)
    };
    let driver = write("fuseprof_bench.py", DRIVER)?;
    write("fuseprof_kernels.py", KERNELS_PY)?;
    let spec = write(
        "job.json",
        &serde_json::to_string(&job).map_err(|e| Error::Bench(e.to_string()))?,
    )?;
    let out = dir.join("results.json");
    let py = python(cfg);
    let mut child = Command::new(&py)
        .arg(&driver)
        .arg(&spec)
        .arg(&out)
        .env("FUSEPROF_KERNELS_LIB", &lib)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Error::Bench(format!(
                "cannot run {} ({e}): bench needs python3 with PyTorch on a GPU machine; pass \
                 --python or set FUSEPROF_PYTHON",
                py.display()
            ))
        })?;
    // The driver's progress lines (`[3/20] id: passed (4.1 s)`, only on a terminal) pass
    // through as they come; its last line says what failed when it fails.
    let mut last = String::new();
    if let Some(err) = child.stderr.take() {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(|l| l.ok()) {
            if job.progress && line.starts_with('[') {
                eprintln!("{line}");
            }
            if !line.trim().is_empty() {
                last = line;
            }
        }
    }
    let status = child.wait().map_err(|e| Error::Bench(e.to_string()))?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        let last = if last.is_empty() {
            "the driver failed without a message".to_string()
        } else {
            last
        };
        return Err(Error::Bench(
            last.trim_start_matches("fuseprof bench: ").to_string(),
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(io(&out))?;
    let _ = std::fs::remove_dir_all(&dir);
    let parsed: DriverOutput = serde_json::from_str(&text)
        .map_err(|e| Error::Bench(format!("the driver's results do not parse: {e}")))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let mut rows = Vec::new();
    for r in parsed.results {
        let Some(p) = chosen.iter().find(|p| p.id == r.id) else {
            continue;
        };
        let measured = Measured {
            proposal_id: p.id.clone(),
            pattern: p.pattern.clone(),
            shape: p.shape.clone(),
            status: r.status,
            ours_ns: r.ours_us.map_or(f64::NAN, |u| u * 1e3),
            baseline_ns: r.eager_us.map_or(f64::NAN, |u| u * 1e3),
            compiled_ns: r.compiled_us.map(|u| u * 1e3),
            expected_ns: Some(p.estimate.ns),
            max_rel_error: r.rel_error,
            tolerance: r.tolerance,
            device: Some(parsed.device.clone()),
            driver: parsed.driver.clone(),
            torch_version: Some(parsed.torch.clone()),
            measured_unix_ns: now,
            detail: Some(r.detail.to_string()),
        };
        let saving = crate::measured_saving(p, &measured);
        let measured_saving = saving.ns_per_step;
        rows.push(BenchRow {
            saving_error_pct: (measured_saving - p.saving_ns_per_step) * 100.0
                / p.saving_ns_per_step,
            measured_saving_ns_per_step: measured_saving,
            saving_note: saving.note,
            proposal: (*p).clone(),
            measured,
        });
    }
    let results: Vec<Measured> = rows.iter().map(|r| r.measured.clone()).collect();
    fuseprof_store::record_bench_results(run, &results)?;
    let report = BenchReport {
        run: advice.run.file.clone(),
        device: parsed.device,
        driver: parsed.driver,
        torch: parsed.torch,
        step_gpu_ns: advice.step_gpu_ns,
        rows,
    };
    if let Some(path) = &cfg.output {
        let tmp = path.with_extension("fuseprof-tmp");
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| Error::Bench(e.to_string()))?;
        std::fs::write(&tmp, text + "\n").map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))?;
    }
    Ok(report)
}

/// A folder of this call's own: the process id and a count, so that two benches of one process
/// (threads, tests) never share one and neither removes the other's files.
fn tempdir() -> Result<PathBuf> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir();
    let dir = base.join(format!("fuseprof-bench-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    Ok(dir)
}

/// The bench table for people.
pub fn render_report(r: &BenchReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} on {} (driver {}, torch {}); per call medians, us",
        r.run,
        r.device,
        r.driver.as_deref().unwrap_or("?"),
        r.torch
    );
    let _ = writeln!(
        o,
        "{:<44} {:>8} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10} {:>7} {:>8}  status",
        "proposal",
        "expected",
        "ours",
        "eager",
        "compiled",
        "x eag",
        "exp save",
        "meas save",
        "diff %",
        "error"
    );
    let f = |x: f64| {
        if x.is_finite() {
            format!("{:.1}", x / 1e3)
        } else {
            "-".into()
        }
    };
    for row in &r.rows {
        let m = &row.measured;
        let _ = writeln!(
            o,
            "{:<44} {:>8} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10} {:>7} {:>8}  {}",
            row.proposal.id,
            f(row.proposal.estimate.ns),
            f(m.ours_ns),
            f(m.baseline_ns),
            m.compiled_ns.map_or("-".into(), f),
            if m.ours_ns > 0.0 && m.baseline_ns.is_finite() {
                format!("{:.2}", m.baseline_ns / m.ours_ns)
            } else {
                "-".into()
            },
            f(row.proposal.saving_ns_per_step),
            f(row.measured_saving_ns_per_step),
            if row.saving_error_pct.is_finite() {
                format!("{:+.0}", row.saving_error_pct)
            } else {
                "-".into()
            },
            m.max_rel_error.map_or("-".into(), |e| format!("{e:.1e}")),
            m.status.to_uppercase()
        );
    }
    for row in &r.rows {
        if let Some(note) = &row.saving_note {
            let _ = writeln!(o, "  {}: {note}", row.proposal.id);
        }
    }
    let passed: Vec<&BenchRow> = r
        .rows
        .iter()
        .filter(|x| x.measured.status == "passed")
        .collect();
    let exp: f64 = passed.iter().map(|x| x.proposal.saving_ns_per_step).sum();
    let got: f64 = passed.iter().map(|x| x.measured_saving_ns_per_step).sum();
    let _ = writeln!(
        o,
        "{} of {} passed the numerics gate; their saving per step: expected {:.3} ms, measured {:.3} ms ({:.1}% of the step's {:.3} ms)",
        passed.len(),
        r.rows.len(),
        exp / 1e6,
        got / 1e6,
        got * 100.0 / r.step_gpu_ns.max(1.0),
        r.step_gpu_ns / 1e6
    );
    o
}
