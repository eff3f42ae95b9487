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
use std::time::{Duration, Instant};

use duckdb::arrow::array::{Array, ArrayRef, AsArray};
use duckdb::arrow::datatypes::{self as dt, DataType};
use duckdb::arrow::util::display::{ArrayFormatter, FormatOptions};
use duckdb::{AccessMode, Config, Connection};
use serde_json::Value as J;

use super::{ALLOWED, MAX_QUERY_MEMORY, MAX_SQL_BYTES, MAX_TIMEOUT_MS};
use crate::StoreError;
use crate::{QueryCancel, QueryLimits, QueryResult};

/// Largest response a caller may ask for, in bytes of JSON rows.
const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// Worker threads of the per-query instance.
const QUERY_THREADS: i64 = 2;

const STOP_NONE: u8 = 0;
const STOP_TIMEOUT: u8 = 1;

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
    let timeout_ms = limits.timeout_ms.clamp(1, MAX_TIMEOUT_MS);
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let max_rows = limits.max_rows.clamp(1, QueryLimits::MAX_ROWS);
    let max_bytes = limits.max_bytes.clamp(1, MAX_RESPONSE_BYTES);
    if sql.len() > MAX_SQL_BYTES {
        return Err(StoreError::Refused(format!(
            "a query of {} bytes (at most {MAX_SQL_BYTES} are accepted). {ALLOWED}",
            sql.len()
        )));
    }
    if sql.contains('\0') {
        return Err(StoreError::Refused(format!("a query containing a NUL character. {ALLOWED}")));
    }
    let cancel = limits.cancel.clone();
    if cancel.as_ref().is_some_and(QueryCancel::is_cancelled) {
        return Err(cancelled());
    }
    let conn = open()?;
    let stop = Arc::new(AtomicU8::new(STOP_NONE));
    if let Some(c) = &cancel {
        let h = conn.interrupt_handle();
        c.set_interrupt(Some(Box::new(move || h.interrupt())));
    }
    let watchdog = Watchdog::start(&conn, deadline, stop.clone());
    let outcome = collect(&conn, sql, max_rows, max_bytes, deadline, &stop);
    drop(watchdog);
    if let Some(c) = &cancel {
        c.set_interrupt(None);
    }
    outcome.map_err(|e| classify(e, &stop, cancel.as_ref(), timeout_ms))
}

/// Interrupts the instance at the deadline; stopped and joined on drop.
struct Watchdog {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(conn: &Connection, deadline: Instant, stop: Arc<AtomicU8>) -> Watchdog {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let handle = conn.interrupt_handle();
        let thread = std::thread::Builder::new()
            .name("sql-guard-duckdb-watchdog".into())
            .spawn(move || {
                let left = deadline.saturating_duration_since(Instant::now());
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(left) {
                    let _ = stop.compare_exchange(STOP_NONE, STOP_TIMEOUT, Ordering::SeqCst, Ordering::SeqCst);
                    handle.interrupt();
                }
            })
            .ok();
        Watchdog { done: Some(done), thread }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Failure {
    Duck(duckdb::Error),
    NoColumns,
    Stopped,
}

/// Prepare and stream the statement, converting rows to JSON under the row and byte caps.
fn collect(
    conn: &Connection,
    sql: &str,
    max_rows: usize,
    max_bytes: usize,
    deadline: Instant,
    stop: &AtomicU8,
) -> Result<QueryResult, Failure> {
    let mut stmt = conn.prepare(sql).map_err(Failure::Duck)?;
    // Started streaming, then stepped below: the crate's own iterator panics on a failed fetch
    // (an interrupt at the deadline is one), where a query must fail with its reason.
    drop(stmt.stream_arrow([]).map_err(Failure::Duck)?);
    let schema = stmt.schema();
    let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    if columns.is_empty() {
        return Err(Failure::NoColumns);
    }
    let mut bytes = serde_json::to_string(&columns).map_or(0, |s| s.len());
    let mut out = QueryResult { columns, rows: Vec::new(), truncated: false };
    'batches: while let Some(chunk) = stmt.step().map_err(Failure::Duck)? {
        let batch = duckdb::arrow::record_batch::RecordBatch::from(&chunk);
        let cols: Vec<Column> = batch.columns().iter().map(Column::new).collect();
        for r in 0..batch.num_rows() {
            if out.rows.len() == max_rows {
                out.truncated = true;
                break 'batches;
            }
            let mut cells = Vec::with_capacity(cols.len());
            let mut row_bytes = 2;
            for c in &cols {
                let v = c.cell(r);
                row_bytes += json_len(&v) + 1;
                if bytes + row_bytes > max_bytes {
                    out.truncated = true;
                    break 'batches;
                }
                cells.push(v);
            }
            bytes += row_bytes;
            out.rows.push(cells);
        }
        if Instant::now() >= deadline {
            let _ = stop.compare_exchange(STOP_NONE, STOP_TIMEOUT, Ordering::SeqCst, Ordering::SeqCst);
            return Err(Failure::Stopped);
        }
    }
    Ok(out)
}

fn json_len(v: &J) -> usize {
    match v {
        J::Null => 4,
        J::String(s) => s.len() + 2,
        other => other.to_string().len(),
    }
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
            DataType::Float32 => float(f64::from(a.as_primitive::<dt::Float32Type>().value(r))),
            DataType::Float64 => float(a.as_primitive::<dt::Float64Type>().value(r)),
            DataType::Utf8 => J::String(a.as_string::<i32>().value(r).to_string()),
            DataType::LargeUtf8 => J::String(a.as_string::<i64>().value(r).to_string()),
            DataType::Utf8View => J::String(a.as_string_view().value(r).to_string()),
            DataType::Binary => hex(a.as_binary::<i32>().value(r)),
            DataType::LargeBinary => hex(a.as_binary::<i64>().value(r)),
            DataType::Decimal128(_, 0) => {
                let v = a.as_primitive::<dt::Decimal128Type>().value(r);
                i64::try_from(v).map_or_else(|_| J::String(v.to_string()), J::from)
            }
            DataType::Decimal128(..) | DataType::Decimal256(..) => {
                let s = self.text(r);
                s.parse::<f64>().ok().map_or(J::String(s), float)
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

fn float(f: f64) -> J {
    serde_json::Number::from_f64(f).map_or_else(|| J::String(f.to_string()), J::Number)
}

fn hex(b: &[u8]) -> J {
    J::String(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn cancelled() -> StoreError {
    StoreError::Query("the query was cancelled by the client".into())
}

/// Turn an engine failure into the error the caller sees, with what to do about it.
fn classify(f: Failure, stop: &AtomicU8, cancel: Option<&QueryCancel>, timeout_ms: u64) -> StoreError {
    let stopped = || {
        if cancel.is_some_and(QueryCancel::is_cancelled) {
            cancelled()
        } else {
            StoreError::Timeout(timeout_ms)
        }
    };
    let e = match f {
        Failure::NoColumns => {
            return StoreError::Refused(format!("a statement that is not a query (it returns no rows). {ALLOWED}"))
        }
        Failure::Stopped => return stopped(),
        Failure::Duck(e) => e,
    };
    let msg = e.to_string();
    let lower = msg.to_ascii_lowercase();
    if lower.contains("interrupt") {
        if stop.load(Ordering::SeqCst) == STOP_TIMEOUT || !cancel.is_some_and(QueryCancel::is_cancelled) {
            return StoreError::Timeout(timeout_ms);
        }
        return cancelled();
    }
    if lower.contains("out of memory") || lower.contains("memory limit") {
        return StoreError::Query(format!(
            "the query was stopped after it used more than {} MiB of memory; aggregate in SQL (GROUP BY, LIMIT) or \
             narrow the time window ({msg})",
            MAX_QUERY_MEMORY >> 20
        ));
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
