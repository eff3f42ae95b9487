//! The storage boundary of Causeway: what the tracer writes through and what the analysis reads
//! through, with no engine in it. ripgrep's `grep-matcher` is the model: a small crate of traits
//! and plain types that the crates on either side depend on, so that Cargo itself keeps the probes
//! and the analysis from reaching into SQLite or DuckDB.
//!
//! - [`EventSink`]: the write side (batches of events, losses, stacks, names, launch configurations,
//!   attachments), implemented by every engine's queued writer.
//! - [`TraceStore`]: the read side (metadata, typed scans with defaults built on
//!   [`TraceStore::scan_events`], guarded SQL, the live schema).
//! - [`Engine`]: the engines of native traces, named once.
//! - [`StoreError`]: the one error type of storage; every message is a sentence a user can act on.
//! - [`summary`]: the one definition of nearest-rank percentiles, and the scan any engine can run.
//!
//! **Architecture invariant:** this crate depends on `causeway-model` and on serialization crates
//! only; the engines live in `causeway-backends`, which implements these traits.
#![warn(missing_docs)]

mod engine;
mod error;
mod query;
pub mod summary;
mod traits;

pub use engine::Engine;
pub use error::{Result, StoreError};
pub use query::{QueryCancel, QueryLimits, QueryResult};
pub use traits::{
    AggregateRow, CodeDescription, ColumnDescription, DurationRow, EventFilter, EventId, EventSink, GpuTimelinePart,
    SchemaDescription, SinkSummary, SlimEvent, StackRecord, StoredEvent, SwitchRow, TableDescription, TraceFormat,
    TraceInfo, TraceStore, UnderWayRow,
};
