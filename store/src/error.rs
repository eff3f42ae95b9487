//! The one error type of the storage layer: every message is a sentence a user can act on.

use std::path::PathBuf;

/// Why a storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The trace file does not exist.
    #[error("{}: no such file", .0.display())]
    NotFound(PathBuf),
    /// The file exists but is not a trace this build reads.
    #[error("{}: not a trace database: {reason}", path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The trace was written by a newer schema than this build reads.
    #[error("{}: {what} is newer than this build reads ({supported}); upgrade causeway", path.display())]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// The schema and version found.
        what: String,
        /// The versions this build reads.
        supported: String,
    },
    /// The database is damaged (the engine's integrity check or page reads failed).
    #[error("{}: damaged database: {detail}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The engine's words.
        detail: String,
    },
    /// The SQL guard refused a user query; the text says what is allowed instead.
    #[error("query refused: {0}")]
    Refused(String),
    /// A user query failed in the engine.
    #[error("query failed: {0}")]
    Query(String),
    /// A user query ran past its time limit (milliseconds) and was interrupted.
    #[error("query interrupted after {0} ms (time limit); narrow the window or add a LIMIT")]
    Timeout(u64),
    /// A caller's argument was out of range or malformed; the text names the parameter.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The engine failed on an operation of ours.
    #[error("storage error: {0}")]
    Engine(String),
    /// The file system holding the trace is full: nothing more can be written to it.
    #[error("the disk is full: {0}")]
    DiskFull(String),
    /// The writer thread of a sink stopped (its error, or a panic).
    #[error("the writer has stopped: {0}")]
    WriterGone(String),
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// Whether the error says the file system is full (SQLite's `SQLITE_FULL`, an I/O error of
    /// kind `StorageFull`, or an engine's words for it, as DuckDB reports it).
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::DiskFull(_) => true,
            StoreError::Io(e) => e.kind() == std::io::ErrorKind::StorageFull,
            StoreError::Engine(m) | StoreError::WriterGone(m) => {
                m.contains("No space left on device") || m.contains("database or disk is full")
            }
            _ => false,
        }
    }
}

#[cfg(feature = "rusqlite")]
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::DiskFull(e.to_string()),
            _ => StoreError::Engine(e.to_string()),
        }
    }
}

/// The storage layer's result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
