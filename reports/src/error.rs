use std::path::PathBuf;

/// Everything that stops a report, a gate or a history command. Messages name the file, rule
/// or database and say what was expected, so a binary can print them as one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] fuseprof_store::Error),
    #[error(transparent)]
    Analyzer(#[from] fuseprof_analyzer::Error),
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    BadInput { path: PathBuf, reason: String },
    #[error("gate rule {rule:?}: {reason}")]
    BadRule { rule: String, reason: String },
    #[error("--label {0:?}: expected NAME=VALUE pairs separated by commas")]
    BadLabel(String),
    #[error("history database {url}: {reason}")]
    History { url: String, reason: String },
    #[error("drawing a chart: {0}")]
    Chart(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: &std::path::Path, error: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            error,
        }
    }
}
