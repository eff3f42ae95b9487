//! The engine half of the SQL guard for SQLite: a hardened, read-only, per-query connection.
//!
//! Each query gets a fresh connection opened `SQLITE_OPEN_READ_ONLY | URI | NO_MUTEX`, then:
//! `query_only`, defensive mode, untrusted schema, no ATTACH that creates or writes, a 16 MiB page
//! cache with temp storage in files (big sorts, DISTINCT, window partitions and recursive-CTE queues
//! spill to unlinked temp files instead of growing the heap), tight `SQLITE_LIMIT_*` (no attached
//! databases, no bind parameters, 1 MB per string or blob), and an authorizer that allows only
//! `SELECT`, recursive CTEs, reads of the trace's own tables (plus `sqlite_schema` and allow-listed
//! table functions) and calls of allow-listed functions. Extension loading is never enabled.
//! A prepared statement must also be read-only and return columns.
//!
//! Memory is bounded per connection by construction (page cache, spilling temp storage, value size,
//! and the AST check's cap on value-amplifying calls). As a safety net a progress handler stops the
//! query when its thread's SQLite heap grew more than [`MAX_QUERY_MEMORY`] since it began
//! ([`heap`]: a concurrent query's or the writer's growth is theirs, not this query's; the
//! process-wide counter only if SQLite was opened before the accounting allocator could be put in).
//! SQLite only calls the handler at jumps, so straight-line code (a statement's constant prologue)
//! runs to its end first; it is still better than `sqlite3_hard_heap_limit64`, which would fail the
//! trace writer's allocations.
//! The progress handler and a watchdog thread enforce the deadline; [`QueryCancel`] interrupts from
//! another thread; rows and JSON bytes are capped (sized cell by cell) and set `truncated`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::config::DbConfig;
use rusqlite::ffi;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode};

use super::limits::{
    cancelled, float_cell, hex_cell, json_len, out_of_memory, stop_for, Budget, ResultRows, StopReason, Watchdog,
    STOP_NONE, STOP_TIMEOUT,
};
use super::{allow, ALLOWED, MAX_QUERY_MEMORY, MAX_SQL_BYTES, MAX_VALUE_BYTES};
use crate::sqlite::{heap, ReadTarget};
use crate::StoreError;
use crate::{QueryCancel, QueryLimits, QueryResult};
/// Virtual-machine steps between two checks of the deadline, the memory budget and cancellation.
const PROGRESS_STEPS: i32 = 250;
/// Page cache of the per-query connection (negative: KiB).
const CACHE_KIB: i64 = 16 * 1024;

/// Stopped by the progress handler: cancelled by the client.
const STOP_CANCEL: u8 = 2;
/// Stopped by the progress handler: SQLite's heap grew past the budget.
const STOP_MEMORY: u8 = 3;
/// What the authorizer denied last, for the refusal message.
type Denied = Arc<Mutex<Option<String>>>;

/// Run `sql` (already checked, or deliberately not, in tests) on a hardened connection to `uri`.
pub(crate) fn execute(target: &ReadTarget, sql: &str, limits: &QueryLimits) -> Result<QueryResult, StoreError> {
    let budget = Budget::of(sql, limits)?;
    let conn = open(target)?;
    let denied: Denied = Arc::default();
    let preparing = Arc::new(AtomicBool::new(true));
    install_authorizer(&conn, target.clone(), own_tables(&conn)?, denied.clone(), preparing.clone());
    let stop: StopReason = Arc::new(AtomicU8::new(STOP_NONE));
    install_progress(&conn, budget.deadline, budget.cancel.clone(), stop.clone());
    let interrupt = || {
        let handle = conn.get_interrupt_handle();
        move || handle.interrupt()
    };
    let outcome = budget.cancellable(interrupt(), || {
        let _watchdog = Watchdog::start(&budget, interrupt(), stop.clone());
        collect(&conn, sql, &budget, &stop, &preparing)
    });
    outcome.map_err(|e| classify(e, &budget, &stop, &denied))
}

/// Open `target` read-only and harden the connection before any user SQL touches it (a series'
/// parts are attached and its views created first: the limits below then forbid any more).
fn open(target: &ReadTarget) -> Result<Connection, StoreError> {
    let conn = target.connect()?;
    let harden = || -> rusqlite::Result<()> {
        for (limit, value) in [
            (Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES as i32),
            (Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES as i32),
            (Limit::SQLITE_LIMIT_COLUMN, 1000),
            (Limit::SQLITE_LIMIT_EXPR_DEPTH, 1000),
            (Limit::SQLITE_LIMIT_COMPOUND_SELECT, 64),
            (Limit::SQLITE_LIMIT_FUNCTION_ARG, 64),
            (Limit::SQLITE_LIMIT_ATTACHED, 0),
            (Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000),
            (Limit::SQLITE_LIMIT_VARIABLE_NUMBER, 0),
            (Limit::SQLITE_LIMIT_TRIGGER_DEPTH, 0),
            (Limit::SQLITE_LIMIT_WORKER_THREADS, 0),
        ] {
            conn.set_limit(limit, value)?;
        }
        for (config, on) in [
            (DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true),
            (DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false),
            (DbConfig::SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, false),
            (DbConfig::SQLITE_DBCONFIG_WRITABLE_SCHEMA, false),
            (DbConfig::SQLITE_DBCONFIG_ENABLE_ATTACH_CREATE, false),
            (DbConfig::SQLITE_DBCONFIG_ENABLE_ATTACH_WRITE, false),
            (DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false),
        ] {
            conn.set_db_config(config, on)?;
        }
        // (a series' connection has temp_store = FILE already: a change would drop its views)
        conn.execute_batch(&format!(
            "PRAGMA query_only = 1; PRAGMA temp_store = FILE; PRAGMA cache_size = -{CACHE_KIB};"
        ))
    };
    harden().map_err(|e| StoreError::Engine(format!("cannot harden the query connection: {e}")))?;
    Ok(conn)
}

/// Lower-cased names of the tables and views of `main` and of a series' TEMP views, plus what the
/// authorizer reports for `sqlite_schema` and the allowed table-valued functions.
fn own_tables(conn: &Connection) -> Result<HashSet<String>, StoreError> {
    let mut stmt = conn
        .prepare(
            "SELECT lower(name) FROM main.sqlite_schema WHERE type IN ('table', 'view') \
             UNION SELECT lower(name) FROM temp.sqlite_schema WHERE type = 'view'",
        )
        .map_err(|e| StoreError::Engine(format!("cannot read the schema: {e}")))?;
    let mut names: HashSet<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| StoreError::Engine(format!("cannot read the schema: {e}")))?;
    names.extend(["sqlite_master", "sqlite_schema"].map(String::from));
    names.extend(allow::table_functions(super::Engine::Sqlite).iter().map(|s| s.to_string()));
    Ok(names)
}

/// Deny every action but reads of `tables` in the trace's schemas (`main`; a series' views and
/// parts), SELECT, recursive CTEs, allowed functions and the read-only pragmas behind allowed
/// `pragma_*` table functions. Those pragmas are prepared by the
/// table function while the query steps; while the user's statement is being prepared (`preparing`),
/// every PRAGMA is denied, so a top-level `PRAGMA` never runs.
fn install_authorizer(
    conn: &Connection,
    target: ReadTarget,
    tables: HashSet<String>,
    denied: Denied,
    preparing: Arc<AtomicBool>,
) {
    conn.authorizer(Some(move |ctx: AuthContext<'_>| {
        let in_main = ctx.database_name.is_none_or(|d| target.reads_schema(d));
        let verdict = match ctx.action {
            AuthAction::Select | AuthAction::Recursive => Ok(()),
            AuthAction::Read { table_name, .. } if in_main && tables.contains(&table_name.to_ascii_lowercase()) => {
                Ok(())
            }
            // `count(*)` over a CTE or subquery is reported as a column-less read without a schema.
            AuthAction::Read { table_name, column_name: "" }
                if ctx.database_name.is_none() && !is_internal(table_name) =>
            {
                Ok(())
            }
            AuthAction::Read { table_name, .. } => Err(format!("reading the table {table_name}")),
            AuthAction::Function { function_name } if allow::sqlite_engine_function_allowed(function_name) => Ok(()),
            AuthAction::Function { function_name } => Err(format!("calling the function {function_name}()")),
            AuthAction::Pragma { pragma_name, .. }
                if in_main && !preparing.load(Ordering::SeqCst) && allow::sqlite_pragma_allowed(pragma_name) =>
            {
                Ok(())
            }
            AuthAction::Pragma { pragma_name, .. } => Err(format!("PRAGMA {pragma_name}")),
            AuthAction::Attach { filename } => Err(format!("ATTACH of {filename:?}")),
            AuthAction::Insert { table_name }
            | AuthAction::Update { table_name, .. }
            | AuthAction::Delete { table_name } => Err(format!("writing to the table {table_name}")),
            other => Err(format!("the action {other:?}")),
        };
        match verdict {
            Ok(()) => Authorization::Allow,
            Err(what) => {
                *denied.lock().unwrap_or_else(|p| p.into_inner()) = Some(what);
                Authorization::Deny
            }
        }
    }));
}

/// Names of SQLite's built-in virtual tables and internal schema tables (never a CTE a user reads).
fn is_internal(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("sqlite_") || n.starts_with("pragma_") || n == "dbstat" || n.starts_with("fts")
}

/// The heap counter a query's growth is measured on: this thread's SQLite allocations when the
/// accounting allocator is in place (the progress handler runs on the thread stepping the query), or
/// else SQLite's process-wide counter.
fn heap_used_counter() -> fn() -> i64 {
    if heap::per_thread() {
        heap::thread_bytes as fn() -> i64
    } else {
        // SAFETY: reading SQLite's global allocation counter has no preconditions.
        || unsafe { ffi::sqlite3_memory_used() }
    }
}

/// Stop the query past `deadline`, when cancelled, or when SQLite's heap grew past the budget.
fn install_progress(conn: &Connection, deadline: Instant, cancel: Option<QueryCancel>, stop: StopReason) {
    let used = heap_used_counter();
    let baseline = used();
    conn.progress_handler(
        PROGRESS_STEPS,
        Some(move || {
            let reason = if cancel.as_ref().is_some_and(QueryCancel::is_cancelled) {
                STOP_CANCEL
            } else if Instant::now() >= deadline {
                STOP_TIMEOUT
            } else if used() - baseline > MAX_QUERY_MEMORY {
                STOP_MEMORY
            } else {
                return false;
            };
            stop_for(&stop, reason);
            true
        }),
    );
}

/// Prepare, check and step the statement, converting rows to JSON under the row and byte caps.
fn collect(
    conn: &Connection,
    sql: &str,
    budget: &Budget,
    stop: &StopReason,
    preparing: &AtomicBool,
) -> Result<QueryResult, Failure> {
    let mut stmt = conn.prepare(sql).map_err(Failure::Sqlite)?;
    preparing.store(false, Ordering::SeqCst);
    // Reads return columns; VACUUM, ATTACH, DETACH, BEGIN and friends return none (and some of them
    // count as "read-only" to SQLite).
    if !stmt.readonly() || stmt.column_count() == 0 {
        return Err(Failure::Writes);
    }
    let columns: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
    let mut out = ResultRows::new(columns, budget);
    let width = out.width();
    let mut rows = stmt.raw_query();
    'rows: while let Some(row) = rows.next().map_err(Failure::Sqlite)? {
        if out.full() {
            break;
        }
        // Sized cell by cell, before converting, so one wide row of big values never gets copied.
        let mut cells = Vec::with_capacity(width);
        let mut row_bytes = 2;
        for i in 0..width {
            let v = row.get_ref(i).map_err(Failure::Sqlite)?;
            let at_least = match v {
                ValueRef::Null | ValueRef::Integer(_) | ValueRef::Real(_) => 1,
                ValueRef::Text(t) => t.len() + 2,
                ValueRef::Blob(b) => 2 * b.len() + 2,
            };
            if !out.fits(row_bytes + at_least) {
                break 'rows;
            }
            let c = cell(v);
            row_bytes += json_len(&c) + 1;
            cells.push(c);
        }
        if !out.fits(row_bytes) {
            break;
        }
        out.push(cells, row_bytes);
        if budget.past_deadline(stop) {
            return Err(Failure::Stopped);
        }
    }
    Ok(out.finish())
}

/// One cell as JSON: integers, finite floats, text, null; blobs as hex; infinities as text.
fn cell(v: ValueRef<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        ValueRef::Null => J::Null,
        ValueRef::Integer(i) => J::from(i),
        ValueRef::Real(f) => float_cell(f),
        ValueRef::Text(t) => J::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => hex_cell(b),
    }
}

enum Failure {
    Sqlite(rusqlite::Error),
    Writes,
    Stopped,
}

/// Turn an engine failure into the error the caller sees, with what to do about it.
fn classify(f: Failure, budget: &Budget, stop: &StopReason, denied: &Denied) -> StoreError {
    let stopped = || match stop.load(Ordering::SeqCst) {
        STOP_MEMORY => out_of_memory(None),
        STOP_CANCEL => cancelled(),
        _ => budget.stopped(),
    };
    let e = match f {
        Failure::Writes => {
            return StoreError::Refused(format!(
                "a statement that is not a query (it would write, or returns no rows). {ALLOWED}"
            ))
        }
        Failure::Stopped => return stopped(),
        Failure::Sqlite(e) => e,
    };
    if matches!(e, rusqlite::Error::MultipleStatement) {
        return StoreError::Refused(format!("stacked statements (more than one statement). {ALLOWED}"));
    }
    let code = e.sqlite_error_code();
    let what = denied.lock().unwrap_or_else(|p| p.into_inner()).take();
    match code {
        Some(ErrorCode::OperationInterrupted) => stopped(),
        Some(ErrorCode::AuthorizationForStatementDenied) => StoreError::Refused(format!(
            "{} (denied by the database engine). {ALLOWED}",
            what.unwrap_or_else(|| "an action of this query".into())
        )),
        Some(ErrorCode::TooBig) => StoreError::Query(format!(
            "a value grew past {MAX_VALUE_BYTES} bytes (the limit for one string or blob): {e}"
        )),
        Some(ErrorCode::OutOfMemory) => StoreError::Query(format!("the query ran out of memory: {e}")),
        Some(ErrorCode::ReadOnly) | Some(ErrorCode::CannotOpen) | Some(ErrorCode::PermissionDenied) => {
            StoreError::Refused(format!("a write: the database is read-only here ({e}). {ALLOWED}"))
        }
        _ if what.is_some() => {
            StoreError::Refused(format!("{} (denied by the database engine: {e}). {ALLOWED}", what.unwrap_or_default()))
        }
        _ => StoreError::Query(e.to_string()),
    }
}
