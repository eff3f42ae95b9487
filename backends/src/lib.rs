//! Storage for Causeway traces: the two traits every engine implements, and the engines.
//!
//! - [`EventSink`] is the write side: the tracer hands it batches of [`Event`]s, loss counters and
//!   stacks; it never blocks the tracer for long and counts what it had to drop.
//! - [`TraceStore`] is the read side: trace metadata, the typed scans the analysis needs, guarded SQL
//!   with limits, and a schema description generated from the live database.
//!
//! Engines: [`sqlite`] (the embedded default, native schema, writer and reader) and the reader for
//! Ingero's trace databases (schema v0.8 to v0.10), which is the SQLite reader in a mode that knows
//! which columns and tables Ingero has. [`open_store`] picks the right one for a path.

pub mod error;
pub mod guard;
pub mod query;
pub mod schema;
pub mod sqlite;
pub mod store;
pub mod synth;

pub use error::StoreError;
pub use query::{QueryLimits, QueryResult};
pub use sqlite::{SqliteSink, SqliteStore, SqliteWriter};
pub use store::*;

use std::path::Path;

/// Open any trace this build can read (native SQLite or an Ingero DB), read-only.
pub fn open_store(path: &Path) -> Result<Box<dyn TraceStore>, StoreError> {
    Ok(Box::new(SqliteStore::open(path)?))
}
