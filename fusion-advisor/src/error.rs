use std::path::PathBuf;

/// Everything `advise` and `bench` can refuse; each message is one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Analyzer(#[from] fuseprof_analyzer::Error),
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
    #[error(
        "{file}: the run has no PyTorch op ranges, so there are no chains to match; record them \
         with `fuseprof collect --pytorch shapes -- python SCRIPT`, or import a PyTorch-profiler \
         trace"
    )]
    NoOps { file: String },
    #[error(
        "{file}: none of its {ops} ops carries input shapes, which the advisor needs; record them \
         with `fuseprof collect --pytorch shapes` (or `modules`), or the PyTorch profiler with \
         record_shapes=True"
    )]
    NoShapes { file: String, ops: u64 },
    #[error("no proposal {id:?} in {file}; its proposals: {known}")]
    NoSuchProposal {
        id: String,
        file: String,
        known: String,
    },
    #[error("{file}: nothing to bench: advise makes no proposal for this run")]
    NothingToBench { file: String },
    #[error("bench: {0}")]
    Bench(String),
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("built-in advisor data: {0}")]
    Rules(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
