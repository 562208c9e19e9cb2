use std::path::PathBuf;

/// Everything that stops an analysis. Messages name the file and say what was expected, so a
/// binary can print them as they are.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused the file (not a store, newer schema, incomplete run) or failed to read.
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
    #[error(
        "{}: the run holds no GPU work (no kernels, copies or fills); record with CUDA activity \
         enabled (PyTorch profiler: activities=[ProfilerActivity.CUDA]; nsys: --trace cuda)",
        path.display()
    )]
    EmptyRun { path: PathBuf },
    #[error("--step {requested}: the run has {available} steps (numbered from 0)")]
    NoSuchStep { requested: usize, available: usize },
    #[error(
        "--step {requested}: no repeating step was found in the run (no step annotation such as \
         ProfilerStep#N and no periodic top-level op sequence)"
    )]
    NoSteps { requested: usize },
    #[error("classification rules, line {line}: {what}")]
    Rules { line: usize, what: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
