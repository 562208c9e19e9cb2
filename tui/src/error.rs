use std::path::PathBuf;

/// Everything that stops the explorer. Messages name the file and say what was expected, so
/// the binary prints them as they are.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
    #[error(transparent)]
    Analyzer(#[from] fuseprof_analyzer::Error),
    #[error(
        "{}: the run holds no kernels, copies or fills: nothing to draw on a GPU timeline \
         (record with CUDA activity enabled)",
        path.display()
    )]
    NoGpuWork { path: PathBuf },
    #[error("fuseprof tui needs a terminal: standard input and output must be a TTY")]
    NoTty,
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
