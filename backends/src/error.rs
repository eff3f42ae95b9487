//! The one error type of the storage layer: every message is a sentence a user can act on.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: no such file", .0.display())]
    NotFound(PathBuf),
    #[error("{}: not a trace database: {reason}", path.display())]
    NotATrace { path: PathBuf, reason: String },
    #[error("{}: {what} is newer than this build reads ({supported}); upgrade causeway", path.display())]
    NewerSchema { path: PathBuf, what: String, supported: String },
    #[error("{}: damaged database: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error("query refused: {0}")]
    Refused(String),
    #[error("query failed: {0}")]
    Query(String),
    #[error("query interrupted after {0} ms (time limit); narrow the window or add a LIMIT")]
    Timeout(u64),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("storage error: {0}")]
    Engine(String),
    #[error("the writer has stopped: {0}")]
    WriterGone(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Engine(e.to_string())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
