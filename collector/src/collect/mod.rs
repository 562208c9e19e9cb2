//! `fuseprof collect`: run a command with the tracer injected and write one run into the store.
//!
//! The tracer (`collector/tracer`, a cdylib) is loaded into the program by the CUDA driver
//! (`CUDA_INJECTION64_PATH`) and by NVTX (`NVTX_INJECTION64_PATH`). Every traced process —
//! the command, its children, DataLoader workers, `torchrun` ranks — writes its own spool file
//! into a private folder; once the command has ended, [`run`] reads them all into one run.
//! Nothing in the traced process waits on SQLite.
//!
//! ```no_run
//! use fuseprof_collector::collect::{run, Capture, CollectConfig, PytorchMode};
//! let cfg = CollectConfig {
//!     output: "run.sqlite".into(),
//!     overwrite: false,
//!     pytorch: PytorchMode::Auto,
//!     capture: Capture::All,
//!     command: vec!["python".into(), "train.py".into()],
//!     tracer_path: None,
//!     all_api: false,
//!     python_path: Vec::new(),
//!     env: Vec::new(),
//!     progress: None,
//!     metrics: None,
//! };
//! let outcome = run(&cfg)?;
//! for w in &outcome.warnings {
//!     eprintln!("warning: {w}");
//! }
//! std::process::exit(outcome.exit_code);
//! # Ok::<(), fuseprof_collector::collect::CollectError>(())
//! ```

mod env;
mod ingest;
mod signals;
#[path = "../../tracer/src/spool.rs"]
mod spool;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use fuseprof_store::{Counts, CreateOptions, RunInfo, Writer};

pub use env::{beside_executable, find_libcupti_dir, find_tracer, TRACER_ENV, TRACER_FILE_NAME};

/// How PyTorch is made to annotate itself (through `collector/python/sitecustomize.py`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PytorchMode {
    /// `shapes` in every Python process that imports torch; nothing elsewhere.
    #[default]
    Auto,
    None,
    /// One NVTX range per operator (`emit_nvtx`).
    Ops,
    /// Operators with their input shapes (`emit_nvtx(record_shapes=True)`).
    Shapes,
    /// Shapes, plus one range per `nn.Module` call named by its path in the model.
    Modules,
}

impl PytorchMode {
    fn env_value(self) -> Option<&'static str> {
        match self {
            PytorchMode::None => None,
            PytorchMode::Ops => Some("ops"),
            PytorchMode::Auto | PytorchMode::Shapes => Some("shapes"),
            PytorchMode::Modules => Some("modules"),
        }
    }
}

impl FromStr for PytorchMode {
    type Err = CollectError;
    fn from_str(s: &str) -> Result<Self, CollectError> {
        match s {
            "auto" => Ok(PytorchMode::Auto),
            "none" => Ok(PytorchMode::None),
            "ops" => Ok(PytorchMode::Ops),
            "shapes" => Ok(PytorchMode::Shapes),
            "modules" => Ok(PytorchMode::Modules),
            other => Err(CollectError::BadOption(format!(
                "--pytorch {other}: expected none, ops, shapes or modules"
            ))),
        }
    }
}

/// Which part of the program is recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Capture {
    /// Everything from CUDA initialisation to exit.
    #[default]
    All,
    /// Between `cudaProfilerStart` and `cudaProfilerStop` (e.g. `torch.cuda.profiler.start()`).
    CudaProfilerApi,
    /// Inside NVTX ranges (push/pop or start/end, any domain) whose message is this text.
    Nvtx(String),
}

impl Capture {
    fn env_value(&self) -> Option<String> {
        match self {
            Capture::All => None,
            Capture::CudaProfilerApi => Some("cudaProfilerApi".into()),
            Capture::Nvtx(name) => Some(format!("nvtx:{name}")),
        }
    }
}

impl FromStr for Capture {
    type Err = CollectError;
    fn from_str(s: &str) -> Result<Self, CollectError> {
        match s {
            "all" | "none" => Ok(Capture::All),
            "cudaProfilerApi" => Ok(Capture::CudaProfilerApi),
            _ => match s.strip_prefix("nvtx:") {
                Some(name) if !name.is_empty() => Ok(Capture::Nvtx(name.to_string())),
                _ => Err(CollectError::BadOption(format!(
                    "--capture {s}: expected cudaProfilerApi or nvtx:NAME"
                ))),
            },
        }
    }
}

/// What `fuseprof collect` was asked to do.
#[derive(Clone, Debug)]
pub struct CollectConfig {
    /// The store file to write.
    pub output: PathBuf,
    /// Replace `output` if it exists.
    pub overwrite: bool,
    pub pytorch: PytorchMode,
    pub capture: Capture,
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// The tracer library; `None` looks in `FUSEPROF_TRACER`, then next to the running
    /// executable (see [`find_tracer`]).
    pub tracer_path: Option<PathBuf>,
    /// Also record the pure query calls (`cudaGetDevice`, `cuDevicePrimaryCtxGetState`, ...)
    /// that are skipped by default, as Nsight Systems skips them.
    pub all_api: bool,
    /// Folders put on the program's PYTHONPATH behind fuseprof's own PyTorch hook (whose
    /// sitecustomize runs the next one on the path), e.g. `bench`'s patch layer.
    pub python_path: Vec<PathBuf>,
    /// More environment for the program.
    pub env: Vec<(OsString, OsString)>,
    /// Counters the ingest of the recording advances, for a progress display.
    pub progress: Option<std::sync::Arc<crate::progress::Progress>>,
    /// Hardware counters to sample with the trace (`--metrics`).
    pub metrics: Option<Metrics>,
}

/// `--metrics SET`: which hardware counters the tracer samples (CUPTI PM sampling, device-wide
/// every `interval_ns` of GPU time), attributed to kernels once the run is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metrics {
    /// `memory` (DRAM read and write bytes, L2 hit rate), `compute` (tensor and FMA pipe
    /// activity, warps active), `all` (both, as far as one pass allows), or metric names
    /// separated by commas.
    pub set: String,
    /// The sampling interval; `None`: the tracer's default, 20 us.
    pub interval_ns: Option<u64>,
}

impl FromStr for Metrics {
    type Err = CollectError;
    fn from_str(s: &str) -> Result<Self, CollectError> {
        let named = s.split(',').all(|n| n.trim().contains("__"));
        // Ratio and pipe metrics (the compute set, percentages) crashed the traced process in
        // CUPTI's PM sampling decode on an H200 (driver 580.159.04, CUPTI 2025.3.1): a user's
        // program must never die of being traced, so only counts (`.sum`) are sampled until
        // that is understood.
        let counts = named && s.split(',').all(|n| n.trim().ends_with(".sum"));
        match s {
            "memory" => {}
            "compute" | "all" => {
                return Err(CollectError::BadOption(format!(
                    "--metrics {s}: the pipe and occupancy counters are not offered: sampling \
                     them crashed the traced process on an H200 (CUPTI 2025.3.1); use memory, \
                     or counts by name (dram__bytes_read.sum, ...)"
                )))
            }
            _ if counts => {}
            _ if named => {
                return Err(CollectError::BadOption(format!(
                    "--metrics {s}: only counts (names ending in .sum) are sampled: ratios \
                     and percentages crashed the traced process on an H200 (CUPTI 2025.3.1)"
                )))
            }
            _ => {
                return Err(CollectError::BadOption(format!(
                    "--metrics {s}: expected memory, or counter names such as \
                     dram__bytes_read.sum separated by commas"
                )))
            }
        }
        Ok(Metrics {
            set: s.to_string(),
            interval_ns: None,
        })
    }
}

/// How a collection went. The run file is valid (possibly empty) whenever this is returned.
#[derive(Clone, Debug)]
pub struct CollectOutcome {
    /// The exit code to leave with: the program's own, 128 + signal if it was killed, 127 if
    /// it could not be found, 126 if it could not be executed.
    pub exit_code: i32,
    /// The signal that killed the program, if one did.
    pub signal: Option<i32>,
    pub output: PathBuf,
    pub counts: Counts,
    /// Processes that left a spool file.
    pub processes: usize,
    /// Records CUPTI dropped (buffers full); 0 in a complete run.
    pub cupti_dropped: u64,
    /// NVTX records the tracer dropped because its writer fell behind; 0 in a complete run.
    pub nvtx_dropped: u64,
    /// Bytes of spool the processes wrote.
    pub spool_bytes: u64,
    /// Time the command ran, and time it took to turn the spools into the run.
    pub command_seconds: f64,
    pub ingest_seconds: f64,
    /// Things the user should know, one sentence each.
    pub warnings: Vec<String>,
    /// What was done with the hardware counters, when any were recorded.
    pub counters: Option<fuseprof_store::AttributionReport>,
}

impl CollectOutcome {
    /// Records written into the store per second of ingestion.
    pub fn records_per_second(&self) -> f64 {
        if self.ingest_seconds > 0.0 {
            self.counts.events() as f64 / self.ingest_seconds
        } else {
            0.0
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("no command given: put it after `--`, e.g. `fuseprof collect -- python train.py`")]
    EmptyCommand,
    #[error("{}: already exists; pass --force to replace it or choose another -o", path.display())]
    OutputExists { path: PathBuf },
    #[error("the tracer library {TRACER_FILE_NAME} was not found (looked in: {searched}); set {TRACER_ENV} to its path")]
    TracerNotFound { searched: String },
    #[error("{0}")]
    BadOption(String),
    #[error("could not create the spool folder {}: {error}", path.display())]
    SpoolDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("could not run `{program}`: {error}")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error("could not read spool file {}: {message}", path.display())]
    Spool { path: PathBuf, message: String },
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
}

pub type Result<T, E = CollectError> = std::result::Result<T, E>;

/// Runs the command under the tracer and writes the run. Returns an error only when no valid
/// run could be written or the command could not be attempted; a program that fails, is
/// killed or does not exist still gives an outcome with its exit code.
pub fn run(cfg: &CollectConfig) -> Result<CollectOutcome> {
    let Some(program) = cfg.command.first() else {
        return Err(CollectError::EmptyCommand);
    };
    if !cfg.overwrite && cfg.output.exists() {
        return Err(CollectError::OutputExists {
            path: cfg.output.clone(),
        });
    }
    let tracer = match &cfg.tracer_path {
        Some(p) if p.is_file() => p.clone(),
        Some(p) => {
            return Err(CollectError::TracerNotFound {
                searched: p.display().to_string(),
            })
        }
        None => find_tracer()?,
    };
    // The run is written under a private name and published when complete, so a second
    // `collect` writing the same output at the same time cannot clobber it (see `publish`).
    // Creating it now also fails on an unwritable folder before the program runs.
    let staging = staging_path(&cfg.output);
    let mut writer = Writer::create(
        &staging,
        CreateOptions {
            overwrite: true,
            ..Default::default()
        },
    )?;
    let spool_dir = make_spool_dir()?;
    let mut warnings = Vec::new();

    let mut cmd = Command::new(program);
    cmd.args(&cfg.command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    env::prepare(&mut cmd, &tracer, &spool_dir, cfg, &mut warnings);

    let started = Instant::now();
    let forwarding = signals::Forwarding::install();
    let (exit_code, signal) = match cmd.spawn() {
        Ok(mut child) => {
            forwarding.set_child(child.id() as i32);
            let status = loop {
                match child.try_wait() {
                    Ok(Some(s)) => break Some(s),
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                    Err(_) => break child.wait().ok(),
                }
            };
            forwarding.set_child(0);
            exit_status(status, program, &mut warnings)
        }
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => {
                    drop(forwarding);
                    let _ = std::fs::remove_dir_all(&spool_dir);
                    return Err(CollectError::Spawn {
                        program: program.to_string_lossy().into_owned(),
                        error: e,
                    });
                }
            };
            warnings.push(format!(
                "could not run `{}`: {e}; the run is empty",
                program.to_string_lossy()
            ));
            (code, None)
        }
    };
    let command_seconds = started.elapsed().as_secs_f64();

    let ingest_started = Instant::now();
    let files = ingest::spool_files(&spool_dir);
    let report = match ingest::ingest(&files, &mut writer, cfg.progress.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            drop(forwarding);
            warnings.push(format!(
                "the spool files were kept in {}",
                spool_dir.display()
            ));
            return Err(e);
        }
    };
    warnings.extend(report.warnings.iter().cloned());
    if exit_code != 127 && exit_code != 126 && report.cupti_processes == 0 {
        warnings.push(
            "no CUDA activity was recorded: the program did not initialise CUDA (no GPU, no \
             driver, or no CUDA code)"
                .into(),
        );
    }
    if report.cupti_dropped > 0 {
        warnings.push(format!(
            "CUPTI dropped {} records: the run is incomplete",
            report.cupti_dropped
        ));
    }
    if report.nvtx_dropped > 0 {
        warnings.push(format!(
            "the tracer dropped {} NVTX records because its writer fell behind",
            report.nvtx_dropped
        ));
    }
    let info = RunInfo {
        source_format: "cupti".into(),
        source_path: None,
        command: Some(
            cfg.command
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        host: env::hostname(),
        start_unix_ns: report.start_unix_ns,
        tool: Some("fuseprof collect".into()),
        tool_version: Some(env!("CARGO_PKG_VERSION").into()),
        cuda_runtime_version: None,
        cuda_driver_version: env::driver_version(),
        cupti_version: report.cupti_version.map(|v| v.to_string()),
    };
    writer.meta("cupti_dropped_records", report.cupti_dropped);
    writer.meta("nvtx_dropped_records", report.nvtx_dropped);
    writer.meta(
        "capture",
        cfg.capture.env_value().unwrap_or_else(|| "all".into()),
    );
    let counts = writer.finish(info)?;
    let counters = if report.counter_metrics.is_empty() {
        None
    } else {
        match fuseprof_store::record_counters(
            &staging,
            &report.counter_metrics,
            &report.counter_samples,
        ) {
            Ok(r) => Some(r),
            Err(e) => {
                warnings.push(format!("the hardware counters could not be written: {e}"));
                None
            }
        }
    };
    if let (Some(m), None) = (&cfg.metrics, &counters) {
        if exit_code != 127 && exit_code != 126 && report.cupti_processes > 0 {
            warnings.push(format!(
                "--metrics {}: no counter was recorded (the reasons are above)",
                m.set
            ));
        }
    }
    // A torchrun job: one rank per process that drives a GPU of its own.
    if let Err(e) = crate::import::ranks::label_ranks_in_place(&staging, "fuseprof collect") {
        warnings.push(format!("the ranks of the job could not be labelled: {e}"));
    }
    let output = publish(&staging, &cfg.output, cfg.overwrite, &mut warnings)?;
    let ingest_seconds = ingest_started.elapsed().as_secs_f64();
    drop(forwarding);
    if std::env::var_os("FUSEPROF_KEEP_SPOOL").is_none() {
        let _ = std::fs::remove_dir_all(&spool_dir);
    } else {
        warnings.push(format!("spool files kept in {}", spool_dir.display()));
    }
    Ok(CollectOutcome {
        exit_code,
        signal,
        output,
        counts,
        processes: report.processes,
        cupti_dropped: report.cupti_dropped,
        nvtx_dropped: report.nvtx_dropped,
        spool_bytes: report.spool_bytes,
        command_seconds,
        ingest_seconds,
        warnings,
        counters,
    })
}

fn exit_status(
    status: Option<std::process::ExitStatus>,
    program: &std::ffi::OsStr,
    warnings: &mut Vec<String>,
) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    let name = program.to_string_lossy();
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => {
                if code != 0 {
                    warnings.push(format!("`{name}` exited with code {code}"));
                }
                (code, None)
            }
            (None, Some(sig)) => {
                warnings.push(format!(
                    "`{name}` was killed by signal {sig}; the run holds what its processes \
                     had written"
                ));
                (128 + sig, Some(sig))
            }
            _ => (1, None),
        },
        None => {
            warnings.push(format!("could not wait for `{name}`"));
            (1, None)
        }
    }
}

fn staging_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run.sqlite".into());
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    output.with_file_name(format!(
        ".{name}.fuseprof-collect-{}-{seq}",
        std::process::id()
    ))
}

/// Moves the finished run to `output`. If another process created `output` while the program
/// ran (and `overwrite` is off), the run goes next to it under a name with this process's id.
fn publish(
    staging: &Path,
    output: &Path,
    overwrite: bool,
    warnings: &mut Vec<String>,
) -> Result<PathBuf> {
    let io = |source| fuseprof_store::Error::Io {
        path: output.to_path_buf(),
        error: source,
    };
    if overwrite {
        std::fs::rename(staging, output).map_err(io)?;
        return Ok(output.to_path_buf());
    }
    match std::fs::hard_link(staging, output) {
        Ok(()) => {
            let _ = std::fs::remove_file(staging);
            Ok(output.to_path_buf())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let stem = output
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into());
            let ext = output
                .extension()
                .map(|e| format!(".{}", e.to_string_lossy()))
                .unwrap_or_default();
            let mut alt = output.with_file_name(format!("{stem}-{}{ext}", std::process::id()));
            let mut n = 1;
            while alt.exists() {
                alt = output.with_file_name(format!("{stem}-{}-{n}{ext}", std::process::id()));
                n += 1;
            }
            std::fs::rename(staging, &alt).map_err(io)?;
            warnings.push(format!(
                "{} appeared while the program ran (another `fuseprof collect`?); this run was \
                 written to {} instead",
                output.display(),
                alt.display()
            ));
            Ok(alt)
        }
        Err(_) => {
            std::fs::rename(staging, output).map_err(io)?;
            Ok(output.to_path_buf())
        }
    }
}

fn make_spool_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = base.join(format!("fuseprof-spool-{}-{nanos:09}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| CollectError::SpoolDir {
        path: dir.clone(),
        error: source,
    })?;
    Ok(dir)
}

/// Reads spool files straight into a new run: for tests and for recovering a kept spool.
pub fn ingest_spool_dir(spool_dir: &Path, output: &Path) -> Result<Counts> {
    Ok(ingest_spool_dir_with_warnings(spool_dir, output)?.0)
}

/// [`ingest_spool_dir`], also returning the warnings `collect` would print.
pub fn ingest_spool_dir_with_warnings(
    spool_dir: &Path,
    output: &Path,
) -> Result<(Counts, Vec<String>)> {
    let mut writer = Writer::create(
        output,
        CreateOptions {
            overwrite: false,
            ..Default::default()
        },
    )?;
    let report = ingest::ingest(&ingest::spool_files(spool_dir), &mut writer, None)?;
    writer.meta("cupti_dropped_records", report.cupti_dropped);
    writer.meta("nvtx_dropped_records", report.nvtx_dropped);
    let counts = writer.finish(RunInfo {
        source_format: "cupti".into(),
        start_unix_ns: report.start_unix_ns,
        cupti_version: report.cupti_version.map(|v| v.to_string()),
        tool: Some("fuseprof collect".into()),
        tool_version: Some(env!("CARGO_PKG_VERSION").into()),
        ..Default::default()
    })?;
    if !report.counter_metrics.is_empty() {
        fuseprof_store::record_counters(output, &report.counter_metrics, &report.counter_samples)?;
    }
    Ok((counts, report.warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_take_memory_and_counts_and_refuse_the_rest_by_name() {
        assert_eq!("memory".parse::<Metrics>().unwrap().set, "memory");
        let named: Metrics = "dram__bytes_read.sum, dram__bytes_write.sum"
            .parse()
            .unwrap();
        assert_eq!(named.set, "dram__bytes_read.sum, dram__bytes_write.sum");
        for refused in [
            "compute",
            "all",
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
        ] {
            let e = refused.parse::<Metrics>().unwrap_err().to_string();
            assert!(e.contains(refused) && e.contains("crashed"), "{e}");
        }
        let e = "bogus".parse::<Metrics>().unwrap_err().to_string();
        assert!(e.contains("expected memory"), "{e}");
    }
}
