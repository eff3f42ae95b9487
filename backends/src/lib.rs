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
//!
//! The public modules are the engines' own namespaces ([`sqlite`], [`duckdb`]) and the SQL guard
//! ([`guard`]); everything else is re-exported here: the storage boundary of `causeway-store`,
//! [`convert`], the queued sink every engine shares ([`QueuedSink`] over an [`EngineWriter`]), and
//! [`SyntheticTrace`] for benches and tests.

mod conversion;
mod cuda_tables;
mod describe;
#[cfg(feature = "duckdb")]
pub mod duckdb;
mod footprint_tables;
mod gpu_tables;
pub mod guard;
mod nvml_tables;
mod packed;
mod reader_common;
mod schema;
mod shared_reads;
mod sink;
pub mod sqlite;
mod synth;
mod under_way;

// The storage boundary (traits, rows, engine names, the error type), defined in causeway-store and
// re-exported so that a user of the engines needs one crate.
pub use causeway_store::*;

/// The SQLite compiled into this binary (`3.50.2`).
pub fn sqlite_library_version() -> &'static str {
    rusqlite::version()
}
pub use conversion::{convert, cut, ConvertReport, Scope as CutScope};
pub use gpu_tables::LAUNCH_TOLERANCE_NS;
pub use reader_common::NO_DEVICE_TIMELINE;
pub use schema::FINISHED_EXTENT_KEY;
pub use sink::{EngineWriter, QueuedSink, QUEUE_BATCHES};
pub use sqlite::{create_series_sink, RollPolicy, RollingWriter, SqliteSink, SqliteStore, SqliteWriter};
pub use synth::{
    bench_events, open_bench_trace, synthetic_sqlite_trace, SyntheticJob, SyntheticRank, SyntheticTrace,
    SYNTHETIC_RANK_PID,
};

use std::path::Path;

/// Whether this build has `engine` (DuckDB is the cargo feature `duckdb`).
pub fn is_built(engine: Engine) -> bool {
    engine == Engine::Sqlite || cfg!(feature = "duckdb")
}

#[cfg_attr(feature = "duckdb", allow(dead_code))]
fn duckdb_missing(path: &Path) -> StoreError {
    StoreError::InvalidArgument(format!(
        "{}: DuckDB traces need a causeway built with the `duckdb` feature (cargo build --features duckdb)",
        path.display()
    ))
}

/// Open any trace this build can read (native SQLite, native DuckDB, an Ingero DB, or a series
/// directory of SQLite files), read-only.
/// The engine is chosen by the file's magic bytes, so a misnamed file still opens.
pub fn open_store(path: &Path) -> Result<Box<dyn TraceStore>, StoreError> {
    if path.is_dir() {
        // a series of SQLite files (`trace --max-file-size`), read as one trace
        return Ok(Box::new(SqliteStore::open(path)?));
    }
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
    if duck_magic || (!sqlite_magic && Engine::for_path(path) == Engine::DuckDb && path.exists()) {
        #[cfg(feature = "duckdb")]
        return Ok(Box::new(duckdb::DuckDbStore::open(path)?));
        #[cfg(not(feature = "duckdb"))]
        return Err(duckdb_missing(path));
    }
    Ok(Box::new(SqliteStore::open(path)?))
}

/// A sink writing a native trace at `path` with `engine` (`None`: chosen by the extension).
pub fn create_sink(
    path: &Path,
    session: causeway_model::SessionInfo,
    engine: Option<Engine>,
) -> Result<Box<dyn EventSink>, StoreError> {
    match engine.unwrap_or_else(|| Engine::for_path(path)) {
        Engine::Sqlite => Ok(Box::new(SqliteSink::create(path, session)?)),
        #[cfg(feature = "duckdb")]
        Engine::DuckDb => Ok(Box::new(duckdb::DuckDbSink::create(path, session)?)),
        #[cfg(not(feature = "duckdb"))]
        Engine::DuckDb => Err(duckdb_missing(path)),
    }
}
