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
    #[error(
        "{}: its records run from {first_ns} to {last_ns} ns: more than the explorer draws \
         (times within {} years of 1970, a run of at most {} years); a corrupt clock, or the \
         ranks of a job left on clocks of their own?",
        path.display(),
        crate::data::MAX_ABS_NS / crate::data::NS_PER_YEAR,
        crate::data::MAX_SPAN_NS / crate::data::NS_PER_YEAR
    )]
    TimeRange {
        path: PathBuf,
        first_ns: i64,
        last_ns: i64,
    },
    #[error("fuseprof tui needs a terminal: standard input and output must be a TTY")]
    NoTty,
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
