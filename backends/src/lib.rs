//! Storage for Causeway traces: the two traits every engine implements, and the engines.
//!
//! - [`EventSink`] is the write side: the tracer hands it batches of [`Event`]s, loss counters,
//!   stacks, launch configurations, kernel names and library attachments; it never blocks the
//!   tracer for long and counts what it had to drop.
//! - [`TraceStore`] is the read side: trace metadata, the typed scans the analysis needs, guarded SQL
//!   with limits, and a schema description generated from the live database.
//!
//! Engines: [`sqlite`] (the embedded default, native schema, writer and reader) and the reader for
//! Ingero's trace databases (schema v0.8 to v0.10), which is the SQLite reader in a mode that knows
//! which columns and tables Ingero has. [`open_store`] picks the right one for a path.
//! With the cargo feature `duckdb`, [`duckdb`] is a second native engine (DuckDB files, `.duckdb`),
//! chosen by extension and file magic; [`create_sink`] picks the writer the same way.

pub mod convert;
mod cuda_tables;
mod describe;
#[cfg(feature = "duckdb")]
pub mod duckdb;
pub mod error;
pub mod guard;
pub mod query;
mod reader_common;
pub mod schema;
pub mod sink;
pub mod sqlite;
pub mod store;
pub mod summary;
pub mod synth;

pub use error::StoreError;
pub use query::{QueryLimits, QueryResult};
pub use sqlite::{SqliteSink, SqliteStore, SqliteWriter};
pub use store::*;

use std::path::Path;

/// The storage engines of native traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    DuckDb,
}

impl Backend {
    /// The engine a path names by its extension: `.duckdb` is DuckDB, anything else SQLite.
    pub fn for_path(path: &Path) -> Backend {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("duckdb") => Backend::DuckDb,
            _ => Backend::Sqlite,
        }
    }

    /// `sqlite` or `duckdb` (as `--backend` spells it).
    pub fn parse(s: &str) -> Result<Backend, StoreError> {
        match s.to_ascii_lowercase().as_str() {
            "sqlite" | "sqlite3" => Ok(Backend::Sqlite),
            "duckdb" => Ok(Backend::DuckDb),
            other => Err(StoreError::InvalidArgument(format!("unknown backend {other:?}: use sqlite or duckdb"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::DuckDb => "duckdb",
        }
    }

    /// Whether this build has the engine (DuckDB is the cargo feature `duckdb`).
    pub fn available(self) -> bool {
        self == Backend::Sqlite || cfg!(feature = "duckdb")
    }
}

#[cfg_attr(feature = "duckdb", allow(dead_code))]
fn duckdb_missing(path: &Path) -> StoreError {
    StoreError::InvalidArgument(format!(
        "{}: DuckDB traces need a causeway built with the `duckdb` feature (cargo build --features duckdb)",
        path.display()
    ))
}

/// Open any trace this build can read (native SQLite, native DuckDB, or an Ingero DB), read-only.
/// The engine is chosen by the file's magic bytes, so a misnamed file still opens.
pub fn open_store(path: &Path) -> Result<Box<dyn TraceStore>, StoreError> {
    let duck_magic = {
        use std::io::Read;
        let mut head = [0u8; 12];
        std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head[8..12] == b"DUCK"
    };
    let sqlite_magic = {
        use std::io::Read;
        let mut head = [0u8; 16];
        std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == b"SQLite format 3\0"
    };
    // DuckDB by its magic; a `.duckdb` name that is not SQLite either gets DuckDB's own verdict.
    if duck_magic || (!sqlite_magic && Backend::for_path(path) == Backend::DuckDb && path.exists()) {
        #[cfg(feature = "duckdb")]
        return Ok(Box::new(duckdb::DuckDbStore::open(path)?));
        #[cfg(not(feature = "duckdb"))]
        return Err(duckdb_missing(path));
    }
    Ok(Box::new(SqliteStore::open(path)?))
}

/// A sink writing a native trace at `path` with `backend` (`None`: chosen by the extension).
pub fn create_sink(
    path: &Path,
    session: causeway_model::SessionInfo,
    backend: Option<Backend>,
) -> Result<Box<dyn EventSink>, StoreError> {
    match backend.unwrap_or_else(|| Backend::for_path(path)) {
        Backend::Sqlite => Ok(Box::new(SqliteSink::create(path, session)?)),
        #[cfg(feature = "duckdb")]
        Backend::DuckDb => Ok(Box::new(duckdb::DuckDbSink::create(path, session)?)),
        #[cfg(not(feature = "duckdb"))]
        Backend::DuckDb => Err(duckdb_missing(path)),
    }
}
