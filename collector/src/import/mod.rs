//! Importers: adapters that turn another tool's trace file into a fuseprof run.
//!
//! Each importer streams its source into one [`fuseprof_store::Writer`]; nothing downstream
//! ever reads the source formats.

pub mod kineto;
pub mod nsys;
pub mod ranks;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use fuseprof_store::{Counts, CreateOptions};
use serde::Serialize;

/// The trace formats `fuseprof import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip-compressed.
    Kineto,
    /// `nsys export --type sqlite`.
    Nsys,
}

impl Format {
    /// The format in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Format::Kineto => "a PyTorch-profiler trace",
            Format::Nsys => "an nsys export",
        }
    }
}

/// What an import did, for the user and for tests.
#[derive(Clone, Debug, Serialize)]
pub struct ImportReport {
    pub format: Format,
    /// Events the source holds (every element of Kineto's `traceEvents`, every row of the
    /// nsys tables read).
    pub source_events: u64,
    /// Rows written, by table.
    pub counts: Counts,
    /// Source events that carry no trace data fuseprof keeps (e.g. Kineto sort-index metadata,
    /// nsys domain registrations folded into names), by reason. Together with `counts` and
    /// `names`, these account for every source event.
    pub skipped: BTreeMap<String, u64>,
    /// Metadata events turned into process/thread names.
    pub names: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    Format { path: PathBuf, what: String },
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
}

impl ImportError {
    pub(crate) fn format(path: &Path, what: impl Into<String>) -> Self {
        ImportError::Format {
            path: path.into(),
            what: what.into(),
        }
    }
}

pub type Result<T, E = ImportError> = std::result::Result<T, E>;

/// Options for [`import`].
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Replace the output file if it exists.
    pub overwrite: bool,
    /// Read the file as this format instead of detecting it.
    pub format: Option<Format>,
    /// Counters the import advances (phase, bytes, events), for a progress display.
    pub progress: Option<std::sync::Arc<crate::progress::Progress>>,
    /// How many input files to read at once when several are merged (the ranks of one job);
    /// `None`: as many as the cores this process may use. The run is the same either way.
    pub jobs: Option<usize>,
}

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Tells a Kineto JSON (plain or gzip) from an nsys SQLite export by the file's first bytes.
pub fn detect(path: &Path) -> Result<Format> {
    let mut head = [0u8; 16];
    let mut f = std::fs::File::open(path).map_err(|source| ImportError::Io {
        path: path.into(),
        error: source,
    })?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(source) => {
                return Err(ImportError::Io {
                    path: path.into(),
                    error: source,
                })
            }
        }
    }
    let head = &head[..n];
    if n == 0 {
        return Err(ImportError::format(path, "the file is empty"));
    }
    if head.starts_with(SQLITE_MAGIC) {
        return Ok(Format::Nsys);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        return Ok(Format::Kineto);
    }
    let first = head.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') || first == Some(&b'[') {
        return Ok(Format::Kineto);
    }
    let hint = if path.extension().is_some_and(|e| e == "gz") {
        "named .gz but not gzip-compressed"
    } else {
        "neither a PyTorch-profiler JSON trace (plain or .gz) nor an nsys SQLite export"
    };
    Err(ImportError::format(path, hint))
}

/// Imports `input` into a new run at `output`. On any error no file is left at `output`.
pub fn import(input: &Path, output: &Path, options: &ImportOptions) -> Result<ImportReport> {
    import_to(input, output, options, CreateOptions::default())
}

/// [`import`] into a run created with `create`, whose `overwrite` is `options.overwrite`.
pub(crate) fn import_to(
    input: &Path,
    output: &Path,
    options: &ImportOptions,
    create: CreateOptions,
) -> Result<ImportReport> {
    let format = match options.format {
        Some(f) => f,
        None => detect(input)?,
    };
    // Open the source before creating the output, so a bad input leaves nothing behind.
    let create = CreateOptions {
        overwrite: options.overwrite,
        ..create
    };
    let progress = options.progress.as_deref();
    match format {
        Format::Kineto => kineto::import(input, output, create, progress),
        // One export may hold a whole job: its processes become the run's ranks.
        Format::Nsys => {
            ranks::import_nsys_labelled(input, output, create, progress).map(|(r, _)| r)
        }
    }
}

/// The nominal memory bandwidth (bytes/s) and dense fp16 tensor FLOP/s of GPUs whose name
/// contains the key. Used only when a source gives no measured figures.
pub(crate) fn nominal_peaks(name: &str) -> Option<(f64, f64)> {
    const TABLE: &[(&str, f64, f64)] = &[
        ("H200", 4.8e12, 989e12),
        ("H100 PCIe", 2.0e12, 756e12),
        ("H100", 3.35e12, 989e12),
        ("A100-SXM4-80GB", 2.039e12, 312e12),
        ("A100 80GB", 1.935e12, 312e12),
        ("A100", 1.555e12, 312e12),
        ("A10G", 0.6e12, 125e12),
        ("L4", 0.3e12, 121e12),
        ("V100", 0.9e12, 125e12),
        ("T4", 0.32e12, 65e12),
        ("RTX 4090", 1.008e12, 165e12),
        ("MI300X", 5.3e12, 1307e12),
        ("MI250", 1.6e12, 181e12),
    ];
    TABLE
        .iter()
        .find(|(k, _, _)| name.contains(k))
        .map(|&(_, bw, fl)| (bw, fl))
}
