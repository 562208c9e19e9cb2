use std::path::PathBuf;

/// Everything that can go wrong reading or writing a store. Messages name the file and say
/// what was expected, so a binary can print them as they are.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: already exists; refusing to overwrite it", path.display())]
    OutputExists { path: PathBuf },
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not a fuseprof run file ({reason})", path.display())]
    NotAStore { path: PathBuf, reason: String },
    #[error(
        "{}: written by a newer fuseprof (store schema {found}; this build reads up to {supported})",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("{}: not a valid SQLite file: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("{}: the run is incomplete (its writer never finished)", path.display())]
    Incomplete { path: PathBuf },
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrating the store schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("sqlite: {0}")]
    Sqlite(String),
    #[error("the store writer stopped: {0}")]
    WriterGone(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
