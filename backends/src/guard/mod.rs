//! The SQL guard: the one gate every piece of user SQL goes through (`causeway query`, MCP `run_sql`).
//!
//! Two independent layers, each enough on its own for the cases it covers:
//!
//! 1. [`check`]: parse with the engine's sqlparser dialect and walk the AST with allow-lists. Exactly one
//!    statement, and it must be `SELECT`, `WITH ... SELECT`, `VALUES` or `EXPLAIN [QUERY PLAN]` of one,
//!    built only from read-only nodes, plain table names and allow-listed functions. Writable CTEs,
//!    stacked statements, PRAGMA, ATTACH, VACUUM, file readers and extension loading are refused with a
//!    message that names what was refused and what is allowed.
//! 2. The engine ([`run_sqlite`]): a fresh read-only connection per query, `query_only`, defensive mode,
//!    no extension loading, tight `SQLITE_LIMIT_*`, and an authorizer that denies every action except
//!    reads of the trace's own tables and calls of allow-listed functions. Limits hold at run time: a
//!    wall-clock timeout and cancellation interrupt the engine, rows and bytes are capped (`truncated`),
//!    values are capped at 1 MB, big sorts and recursive-CTE queues spill to temp files instead of
//!    growing the heap, and a memory safety net stops what still grows.
//!
//! DuckDB traces (feature `duckdb`) go through the same [`check`] with [`Engine::DuckDb`], then
//! `run_duckdb`: a fresh read-only DuckDB instance per query with external access, extension
//! autoloading and configuration changes off, a memory limit, streaming results under the same row,
//! byte and time limits (see `duckdb_engine`).

mod allow;
mod ast;
#[cfg(feature = "duckdb")]
mod duckdb_engine;
mod limits;
mod rewrite;
mod sqlite_engine;

use std::fmt;

use crate::sqlite::ReadTarget;
use crate::StoreError;
use crate::{QueryLimits, QueryResult};

pub use crate::QueryCancel;

/// Longest SQL text accepted, in bytes (also SQLite's `SQLITE_LIMIT_SQL_LENGTH` for user queries).
pub const MAX_SQL_BYTES: usize = 100_000;
/// Most calls of value-amplifying functions (printf, format, replace, hex, quote, ...) in one query.
pub const MAX_AMPLIFIER_CALLS: usize = 32;
/// Deepest expression nesting accepted by the AST check.
pub const MAX_EXPR_DEPTH: usize = 1000;
/// Longest string or blob a user query may build (`SQLITE_LIMIT_LENGTH`).
pub const MAX_VALUE_BYTES: usize = 1_000_000;
/// Safety net: a query is stopped when SQLite's heap (process-wide) grew this much since it started.
pub const MAX_QUERY_MEMORY: i64 = 256 << 20;
/// Longest wall-clock limit a caller may ask for, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 300_000;

/// Stack of the thread that parses and checks: deep left-leaning operator chains recurse per node.
const CHECK_STACK_BYTES: usize = 64 << 20;

/// Which SQL engine (and so which sqlparser dialect and allow-lists) a query is checked for: the
/// storage engines' one enum.
pub use causeway_store::Engine;

/// Why a query was refused: what was refused and what is allowed instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was refused, e.g. "the function readfile() (it reads files from the server's disk)".
    pub refused: String,
    /// What the caller may do instead.
    pub allowed: String,
}

/// What every refusal tells the caller is allowed.
pub const ALLOWED: &str = "Only one read-only statement is allowed: SELECT, WITH ... SELECT, VALUES, or \
EXPLAIN [QUERY PLAN] of one, reading this trace's tables by plain name (see sqlite_schema) and calling \
allow-listed functions. Rewrite the query and try again.";

impl Refusal {
    pub(crate) fn new(refused: String) -> Refusal {
        Refusal { refused, allowed: ALLOWED.to_string() }
    }

    pub(crate) fn with_allowed(refused: String, extra: String) -> Refusal {
        Refusal { refused, allowed: format!("{ALLOWED} {extra}") }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused {}. {}", self.refused, self.allowed)
    }
}

impl std::error::Error for Refusal {}

impl From<Refusal> for StoreError {
    /// `StoreError::Refused` prints as "query refused: <what>. <allowed>".
    fn from(r: Refusal) -> StoreError {
        StoreError::Refused(format!("{}. {}", r.refused, r.allowed))
    }
}

/// The functions a query may call on `engine` (for tool descriptions and schema docs).
pub fn allowed_functions(engine: Engine) -> &'static [&'static str] {
    allow::functions(engine)
}

/// The table-valued functions a query may read from on `engine`.
pub fn allowed_table_functions(engine: Engine) -> &'static [&'static str] {
    allow::table_functions(engine)
}

/// The pure AST check: `Ok` when `sql` is one read statement made only of allowed parts for `dialect`.
///
/// Runs on the checker thread, whose large stack no input can overflow (one thread for every
/// check: no thread to start and join per query); a panic inside the parser becomes a refusal.
pub fn check(sql: &str, dialect: Engine) -> Result<(), Refusal> {
    if sql.len() > MAX_SQL_BYTES {
        // Decided here, before copying the text to the checker thread.
        return ast::check(sql, dialect);
    }
    let (reply, answer) = std::sync::mpsc::sync_channel(1);
    let sent = checker().map(|tx| tx.send(CheckJob { sql: sql.to_string(), dialect, reply }));
    match sent {
        Some(Ok(())) => answer.recv().unwrap_or_else(|_| Err(Refusal::new(CHECK_FAILED.into()))),
        _ => Err(Refusal::new("the query for now: the SQL checker could not start; retry".into())),
    }
}

const CHECK_FAILED: &str = "a query the SQL parser could not handle (it failed on this input)";

/// One query for the checker thread, and where its verdict goes.
struct CheckJob {
    sql: String,
    dialect: Engine,
    reply: std::sync::mpsc::SyncSender<Result<(), Refusal>>,
}

/// The checker thread's queue (started on first use; None if it could not start).
fn checker() -> Option<&'static std::sync::mpsc::Sender<CheckJob>> {
    static CHECKER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<CheckJob>>> = std::sync::OnceLock::new();
    CHECKER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<CheckJob>();
            let spawned = std::thread::Builder::new()
                .name("sql-guard-check".into())
                .stack_size(CHECK_STACK_BYTES)
                .spawn(move || {
                    for job in rx {
                        let verdict = std::panic::catch_unwind(|| ast::check(&job.sql, job.dialect))
                            .unwrap_or_else(|_| Err(Refusal::new(CHECK_FAILED.into())));
                        let _ = job.reply.send(verdict);
                    }
                });
            spawned.ok().map(|_| tx)
        })
        .as_ref()
}

/// Run user SQL against the SQLite database at `uri` (a `file:` URI, e.g. `file:/x.db?immutable=1`)
/// under `limits`: the AST check, then the hardened engine. Guard refusals are
/// [`StoreError::Refused`], a timeout is [`StoreError::Timeout`], everything else [`StoreError::Query`].
/// `limits.cancel`, when set, stops the query from another thread.
pub fn run_sqlite(uri: &str, sql: &str, limits: &QueryLimits) -> Result<QueryResult, StoreError> {
    run_sqlite_target(&ReadTarget::File(uri.to_string()), sql, limits)
}

/// [`run_sqlite`] on what a store reads (one file, or a series of parts joined by views).
pub(crate) fn run_sqlite_target(
    target: &ReadTarget,
    sql: &str,
    limits: &QueryLimits,
) -> Result<QueryResult, StoreError> {
    check(sql, Engine::Sqlite)?;
    sqlite_engine::execute(target, sql, limits)
}

/// The same as [`run_sqlite`] with `cancel` as the cancellation handle.
pub fn run_sqlite_cancellable(
    uri: &str,
    sql: &str,
    limits: &QueryLimits,
    cancel: &QueryCancel,
) -> Result<QueryResult, StoreError> {
    run_sqlite(uri, sql, &limits.clone().cancellable(cancel))
}

/// The engine layer alone, without the AST check: only for tests that prove the second layer holds
/// by itself. Never call this with user SQL.
#[doc(hidden)]
pub fn run_sqlite_engine_only(uri: &str, sql: &str, limits: &QueryLimits) -> Result<QueryResult, StoreError> {
    sqlite_engine::execute(&ReadTarget::File(uri.to_string()), sql, limits)
}

/// Run user SQL against the DuckDB trace at `path` under `limits`: the AST check with the DuckDB
/// dialect, then the hardened read-only engine. Errors as for [`run_sqlite`].
#[cfg(feature = "duckdb")]
pub fn run_duckdb(path: &std::path::Path, sql: &str, limits: &QueryLimits) -> Result<QueryResult, StoreError> {
    check(sql, Engine::DuckDb)?;
    duckdb_engine::execute(path, sql, limits)
}

/// Run user SQL on a DuckDB connection that `open` makes (the fleet's lake, attached read-only):
/// the AST check with the DuckDB dialect, then the limits of [`run_duckdb`]. `open` must harden the
/// connection as the file engine does: read-only data, `enable_external_access=false`, no extension
/// autoloading, a memory limit and `lock_configuration=true`.
#[cfg(feature = "duckdb")]
pub fn run_duckdb_on(
    open: impl FnOnce() -> Result<duckdb::Connection, StoreError>,
    sql: &str,
    limits: &QueryLimits,
) -> Result<QueryResult, StoreError> {
    check(sql, Engine::DuckDb)?;
    duckdb_engine::execute_with(open, sql, limits)
}

/// The DuckDB engine layer alone, without the AST check: only for tests that prove the second layer
/// holds by itself. Never call this with user SQL.
#[cfg(feature = "duckdb")]
#[doc(hidden)]
pub fn run_duckdb_engine_only(
    path: &std::path::Path,
    sql: &str,
    limits: &QueryLimits,
) -> Result<QueryResult, StoreError> {
    duckdb_engine::execute(path, sql, limits)
}
