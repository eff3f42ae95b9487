//! The engine half of the SQL guard for DuckDB: a hardened, read-only, per-query database instance.
//!
//! Each query opens the trace file in a fresh DuckDB instance with `access_mode=READ_ONLY`,
//! `enable_external_access=false` (no file readers or writers, no ATTACH, COPY, EXPORT, INSTALL or
//! LOAD), `autoload_known_extensions=false`, `autoinstall_known_extensions=false`,
//! `allow_community_extensions=false`, a `memory_limit` of [`MAX_QUERY_MEMORY`], two `threads`, no
//! `max_temp_directory_size=0B` (nothing spills to disk: a query that outgrows the limit fails), and finally
//! `lock_configuration=true`, so no `SET`/`PRAGMA` can undo any of it. The AST check
//! (`check(.., Engine::DuckDb)`) runs before this layer.
//!
//! Limits hold at run time: a watchdog thread calls `interrupt()` at the deadline, [`QueryCancel`]
//! interrupts from another thread, results are streamed (`execute_streaming`) and rows and JSON bytes
//! are capped (`truncated`) without materialising the rest, and a statement that returns no columns
//! is refused.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use duckdb::arrow::array::{Array, ArrayRef, AsArray};
use duckdb::arrow::datatypes::{self as dt, DataType};
use duckdb::arrow::util::display::{ArrayFormatter, FormatOptions};
use duckdb::{AccessMode, Config, Connection};
use serde_json::Value as J;

use super::limits::{
    float_cell, hex_cell, json_len, out_of_memory, Budget, ResultRows, StopReason, Watchdog, STOP_NONE, STOP_TIMEOUT,
};
use super::{ALLOWED, MAX_QUERY_MEMORY};
use crate::StoreError;
use crate::{QueryLimits, QueryResult};

/// Worker threads of the per-query instance.
const QUERY_THREADS: i64 = 2;

/// Open `path` in a new, locked-down, read-only DuckDB instance.
fn open(path: &Path) -> Result<Connection, StoreError> {
    let config = || -> duckdb::Result<Config> {
        Config::default()
            .access_mode(AccessMode::ReadOnly)?
            .enable_external_access(false)?
            .enable_autoload_extension(false)?
            .with("autoinstall_known_extensions", "false")?
            .with("allow_community_extensions", "false")?
            .max_memory(&format!("{}MB", MAX_QUERY_MEMORY >> 20))?
            .threads(QUERY_THREADS)?
            .with("max_temp_directory_size", "0B")?
            .with("lock_configuration", "true")
    };
    let config = config().map_err(|e| StoreError::Engine(format!("cannot configure the query engine: {e}")))?;
    Connection::open_with_flags(path, config)
        .map_err(|e| StoreError::Engine(format!("cannot open {} read-only: {e}", path.display())))
}

/// Run `sql` (already checked, or deliberately not, in tests) on a hardened instance over `path`.
pub(crate) fn execute(path: &Path, sql: &str, limits: &QueryLimits) -> Result<QueryResult, StoreError> {
    execute_with(|| open(path), sql, limits)
}

/// Run `sql` under `limits` on the connection `open` makes, which the caller hardened as [`open`]
/// does (read-only, no external access, locked configuration).
pub(crate) fn execute_with(
    open: impl FnOnce() -> Result<Connection, StoreError>,
    sql: &str,
    limits: &QueryLimits,
) -> Result<QueryResult, StoreError> {
    let budget = Budget::of(sql, limits)?;
    let conn = open()?;
    let stop: StopReason = Arc::new(AtomicU8::new(STOP_NONE));
    let interrupt = || {
        let handle = conn.interrupt_handle();
        move || handle.interrupt()
    };
    let outcome = budget.cancellable(interrupt(), || {
        let _watchdog = Watchdog::start(&budget, interrupt(), stop.clone());
        collect(&conn, sql, &budget, &stop)
    });
    outcome.map_err(|e| classify(e, &budget, &stop))
}

enum Failure {
    Duck(duckdb::Error),
    NoColumns,
    Stopped,
}

/// Prepare and stream the statement, converting rows to JSON under the row and byte caps.
fn collect(conn: &Connection, sql: &str, budget: &Budget, stop: &AtomicU8) -> Result<QueryResult, Failure> {
    let mut stmt = conn.prepare(sql).map_err(Failure::Duck)?;
    // Started streaming, then stepped below: the crate's own iterator panics on a failed fetch
    // (an interrupt at the deadline is one), where a query must fail with its reason.
    drop(stmt.stream_arrow([]).map_err(Failure::Duck)?);
    let schema = stmt.schema();
    let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    if columns.is_empty() {
        return Err(Failure::NoColumns);
    }
    let mut out = ResultRows::new(columns, budget);
    'batches: while let Some(chunk) = stmt.step().map_err(Failure::Duck)? {
        let batch = duckdb::arrow::record_batch::RecordBatch::from(&chunk);
        let cols: Vec<Column> = batch.columns().iter().map(Column::new).collect();
        for r in 0..batch.num_rows() {
            if out.full() {
                break 'batches;
            }
            let mut cells = Vec::with_capacity(cols.len());
            let mut row_bytes = 2;
            for c in &cols {
                let v = c.cell(r);
                row_bytes += json_len(&v) + 1;
                if !out.fits(row_bytes) {
                    break 'batches;
                }
                cells.push(v);
            }
            out.push(cells, row_bytes);
        }
        if budget.past_deadline(stop) {
            return Err(Failure::Stopped);
        }
    }
    Ok(out.finish())
}

/// One result column, ready to turn cells into JSON.
struct Column {
    array: ArrayRef,
}

impl Column {
    fn new(a: &ArrayRef) -> Column {
        Column { array: a.clone() }
    }

    fn cell(&self, r: usize) -> J {
        let a = &self.array;
        if a.is_null(r) {
            return J::Null;
        }
        macro_rules! int {
            ($t:ty) => {
                J::from(a.as_primitive::<$t>().value(r))
            };
        }
        match a.data_type() {
            DataType::Null => J::Null,
            DataType::Boolean => J::Bool(a.as_boolean().value(r)),
            DataType::Int8 => int!(dt::Int8Type),
            DataType::Int16 => int!(dt::Int16Type),
            DataType::Int32 => int!(dt::Int32Type),
            DataType::Int64 => int!(dt::Int64Type),
            DataType::UInt8 => int!(dt::UInt8Type),
            DataType::UInt16 => int!(dt::UInt16Type),
            DataType::UInt32 => int!(dt::UInt32Type),
            DataType::UInt64 => int!(dt::UInt64Type),
            DataType::Float32 => float_cell(f64::from(a.as_primitive::<dt::Float32Type>().value(r))),
            DataType::Float64 => float_cell(a.as_primitive::<dt::Float64Type>().value(r)),
            DataType::Utf8 => J::String(a.as_string::<i32>().value(r).to_string()),
            DataType::LargeUtf8 => J::String(a.as_string::<i64>().value(r).to_string()),
            DataType::Utf8View => J::String(a.as_string_view().value(r).to_string()),
            DataType::Binary => hex_cell(a.as_binary::<i32>().value(r)),
            DataType::LargeBinary => hex_cell(a.as_binary::<i64>().value(r)),
            DataType::Decimal128(_, 0) => {
                let v = a.as_primitive::<dt::Decimal128Type>().value(r);
                i64::try_from(v).map_or_else(|_| J::String(v.to_string()), J::from)
            }
            DataType::Decimal128(..) | DataType::Decimal256(..) => {
                let s = self.text(r);
                s.parse::<f64>().ok().map_or(J::String(s), float_cell)
            }
            _ => J::String(self.text(r)),
        }
    }

    /// DuckDB's own rendering (dates, intervals, lists, structs, decimals).
    fn text(&self, r: usize) -> String {
        ArrayFormatter::try_new(self.array.as_ref(), &FormatOptions::default())
            .map(|f| f.value(r).to_string())
            .unwrap_or_default()
    }
}

/// Turn an engine failure into the error the caller sees, with what to do about it.
fn classify(f: Failure, budget: &Budget, stop: &AtomicU8) -> StoreError {
    let e = match f {
        Failure::NoColumns => {
            return StoreError::Refused(format!("a statement that is not a query (it returns no rows). {ALLOWED}"))
        }
        Failure::Stopped => return budget.stopped(),
        Failure::Duck(e) => e,
    };
    let msg = e.to_string();
    let lower = msg.to_ascii_lowercase();
    if lower.contains("interrupt") {
        if stop.load(Ordering::SeqCst) == STOP_TIMEOUT {
            return StoreError::Timeout(budget.timeout_ms);
        }
        return budget.stopped();
    }
    if lower.contains("out of memory") || lower.contains("memory limit") {
        return out_of_memory(Some(&msg));
    }
    if lower.contains("permission error")
        || lower.contains("disabled by configuration")
        || lower.contains("read-only")
        || lower.contains("read only")
        || lower.contains("configuration has been locked")
        || lower.contains("external access")
    {
        return StoreError::Refused(format!("{msg} (denied by the database engine). {ALLOWED}"));
    }
    StoreError::Query(msg)
}
