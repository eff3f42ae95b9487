//! What the readers of every engine share: the checks made when a trace is opened (with the same
//! one-line errors), what a trace does not record (a device timeline included), and the SQL of an [`EventFilter`], of Ingero's
//! minute buckets and of the loss counters.

use std::collections::BTreeMap;
use std::path::Path;

use causeway_model::time::TimeWindow;
use causeway_model::{LossCounter, LossKind};

use crate::schema::NATIVE_SCHEMA_VERSION;
use crate::{EventFilter, TraceFormat, TraceInfo};
use crate::{Result, StoreError};

/// Columns every trace's `events` table must have.
const REQUIRED_EVENT_COLUMNS: [&str; 6] = ["timestamp", "pid", "tid", "source", "op", "duration"];

pub(crate) fn not_a_trace(path: &Path, reason: &str) -> StoreError {
    StoreError::NotATrace { path: path.to_path_buf(), reason: reason.into() }
}

/// The file exists, is not a directory and is not empty.
pub(crate) fn check_trace_file(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|_| StoreError::NotFound(path.to_path_buf()))?;
    if meta.is_dir() {
        return Err(not_a_trace(path, "it is a directory"));
    }
    if meta.len() == 0 {
        return Err(not_a_trace(path, "the file is empty"));
    }
    Ok(())
}

/// The native schema version a trace's `schema_info` names, refused when newer than this build reads.
pub(crate) fn native_schema_version(path: &Path, schema_info: &BTreeMap<String, String>) -> Result<u32> {
    let v: u32 = schema_info.get("schema_version").and_then(|v| v.parse().ok()).unwrap_or(0);
    if v > NATIVE_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            what: format!("native schema v{v}"),
            supported: format!("up to v{NATIVE_SCHEMA_VERSION}"),
        });
    }
    Ok(v)
}

/// Refuse an `events` table without the columns every reading needs.
pub(crate) fn require_event_columns(path: &Path, columns: &[String]) -> Result<()> {
    for required in REQUIRED_EVENT_COLUMNS {
        if !columns.iter().any(|c| c == required) {
            return Err(not_a_trace(path, &format!("its events table has no {required} column")));
        }
    }
    Ok(())
}

/// What a trace with these `events` columns and tables does not record (for users and agents),
/// plus what a converted trace's original did not record (`schema_info.source_missing`).
fn missing_features(columns: &[String], tables: &[String], schema_info: &BTreeMap<String, String>) -> Vec<String> {
    let has = |c: &str| columns.iter().any(|x| x == c);
    let mut missing = Vec::new();
    if !has("next_tid") {
        missing.push("who took the CPU at each switch (the preempting task is not recorded)".into());
    }
    if !has("prev_state") {
        missing.push("why a thread left the CPU (preempted vs sleep vs I/O wait)".into());
    }
    if !has("wake_ts") {
        missing.push("wake-up times and wakers (run-queue wait cannot be separated from sleep)".into());
    }
    if !has("cpu") {
        missing.push("CPU numbers".into());
    }
    if !has("comm") {
        missing.push("thread names (only process_names per pid)".into());
    }
    if !tables.iter().any(|t| t == "loss_counters") {
        missing.push("loss counters (events dropped by the tracer are not counted)".into());
    }
    crate::schema::extend_missing(&mut missing, schema_info.get(crate::schema::SOURCE_MISSING_KEY));
    missing
}

/// What [`TraceInfo::missing`] says of a trace without a device timeline (no `gpu_ops` rows: traced
/// without `--gpu-timeline`, recorded before the table existed, or an Ingero DB). `convert` does not
/// carry it as the original's gap: the converted trace says it from its own rows.
pub const NO_DEVICE_TIMELINE: &str = "the device's own timeline (gpu_ops: when each kernel, copy and memset ran on \
the GPU, recorded by `trace --gpu-timeline`): GPU time is seen only through the host's calls";

/// The [`NO_DEVICE_TIMELINE`] gap of a trace whose `gpu_ops` has no rows (`has_ops` false), said once.
pub(crate) fn note_device_timeline(info: &mut TraceInfo, has_ops: bool) {
    if !has_ops && !info.missing.iter().any(|m| m == NO_DEVICE_TIMELINE) {
        info.missing.push(NO_DEVICE_TIMELINE.to_string());
    }
}

/// Whether a native trace has the table (an Ingero DB never has ours, whatever its tables are named).
pub(crate) fn has_native_table(info: &TraceInfo, table: &str) -> bool {
    matches!(info.format, TraceFormat::Native { .. }) && info.has_table(table)
}

/// `clause` (from [`where_clause`]) with `cond` added: ` WHERE cond` or `clause AND cond`.
pub(crate) fn and_where(clause: &str, cond: &str) -> String {
    if clause.is_empty() {
        format!(" WHERE {cond}")
    } else {
        format!("{clause} AND {cond}")
    }
}

/// WHERE clause (empty, or starting with a space) and its integer parameters for a filter.
pub(crate) fn where_clause(f: &EventFilter) -> (String, Vec<i64>) {
    where_clause_with(f, OpsCondition::Pairs)
}

/// How a filter's list of ops is said in SQL.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpsCondition {
    /// `(source = ? AND op = ?) OR ...`: what SQLite's partial index on (source, op) is matched by.
    Pairs,
    /// One op as a pair; several as `source IN (?, ...) AND (source * 65536 + op) IN (?, ...)`:
    /// DuckDB evaluates a chain of ORs row by row (the 17 step ops over a 10M-event trace: 0.44 s),
    /// the IN lists at once (0.12 s), the sources' in its scan.
    Keys,
}

/// [`where_clause`], with the ops said as `ops` says.
pub(crate) fn where_clause_with(f: &EventFilter, ops_condition: OpsCondition) -> (String, Vec<i64>) {
    let mut conds = Vec::new();
    let mut params = Vec::new();
    let TimeWindow { from_ns, to_ns } = f.window;
    if let Some(from) = from_ns {
        conds.push("timestamp >= ?".to_string());
        params.push(from);
    }
    if let Some(to) = to_ns {
        conds.push("timestamp <= ?".to_string());
        params.push(to);
    }
    if let Some(pid) = f.pid {
        conds.push("pid = ?".into());
        params.push(pid.into());
    }
    if let Some(tids) = &f.tids {
        conds.push(in_list("tid", tids.len()));
        params.extend(tids.iter().map(|&t| i64::from(t)));
    }
    if let Some(sources) = &f.sources {
        conds.push(in_list("source", sources.len()));
        params.extend(sources.iter().map(|&s| i64::from(s)));
    }
    if let Some(ops) = f.ops.as_ref().filter(|ops| ops_condition == OpsCondition::Keys && ops.len() > 1) {
        // the sources first: a condition DuckDB applies in the scan, before it reads the other
        // columns (a few rare ops' rows read by the expression alone took 147 ms and 88 MiB more)
        let mut sources: Vec<u8> = ops.iter().map(|o| o.source).collect();
        sources.sort_unstable();
        sources.dedup();
        conds.push(in_list("source", sources.len()));
        params.extend(sources.iter().map(|&s| i64::from(s)));
        conds.push(format!("(source * 65536 + op) IN ({})", vec!["?"; ops.len()].join(",")));
        params.extend(ops.iter().map(|o| i64::from(o.source) * 65536 + i64::from(o.op)));
    } else if let Some(ops) = &f.ops {
        let alts: Vec<&str> = ops.iter().map(|_| "(source = ? AND op = ?)").collect();
        conds.push(format!("({})", if alts.is_empty() { "false".to_string() } else { alts.join(" OR ") }));
        for o in ops {
            params.push(o.source.into());
            params.push(o.op.into());
        }
    }
    if f.failed {
        // a literal, word for word the condition of SQLite's partial index (`schema::indexes`)
        conds.push(crate::schema::FAILED_ROWS_CONDITION.to_string());
    }
    let clause = if conds.is_empty() { String::new() } else { format!(" WHERE {}", conds.join(" AND ")) };
    (clause, params)
}

/// `column IN (?, ...)` with `n` placeholders; `false` for an empty list.
fn in_list(column: &str, n: usize) -> String {
    if n == 0 {
        "false".into()
    } else {
        format!("{column} IN ({})", vec!["?"; n].join(","))
    }
}

/// The `event_aggregates` rows of a window: `bucket > from AND bucket <= to`. A minute bucket
/// overlaps the window when it starts before its end and ends after its start.
pub(crate) fn aggregate_bucket_bounds(window: &TimeWindow) -> (i64, i64) {
    let from = window.from_ns.map(|f| f - 60_000_000_000).unwrap_or(i64::MIN);
    let to = window.to_ns.unwrap_or(i64::MAX);
    (from, to)
}

/// Loss counters from `(source, kind, count)` rows; kinds this build does not know are skipped.
pub(crate) fn loss_counters_from(rows: Vec<(i64, String, i64)>) -> Vec<LossCounter> {
    rows.into_iter().filter_map(|(s, k, n)| loss_counter(s, &k, n)).collect()
}

/// One stored `loss_counters` row as a [`LossCounter`]; `None` for a kind this build does not know.
pub(crate) fn loss_counter(source: i64, kind: &str, count: i64) -> Option<LossCounter> {
    Some(LossCounter { source: source as u8, kind: LossKind::parse(kind)?, count: count.max(0) as u64 })
}

/// The rows of `events`, its first and its last timestamp (`None`: no rows).
pub(crate) type EventExtent = (i64, Option<i64>, Option<i64>);

/// The [`TraceInfo`] of an opened trace from what its reader read: `extent` is `count(*)`,
/// `min(timestamp)`, `max(timestamp)` of `events` (or what a finished SQLite trace recorded of
/// them); a converted trace reports only its original's `events` columns and also what its
/// original did not record.
pub(crate) fn trace_info(
    path: &Path,
    format: TraceFormat,
    extent: EventExtent,
    columns: Vec<String>,
    tables: Vec<String>,
    sampled: bool,
    schema_info: &BTreeMap<String, String>,
) -> TraceInfo {
    let (events, first_ns, last_ns) = extent;
    let columns = crate::schema::restrict_columns(columns, schema_info.get(crate::schema::SOURCE_COLUMNS_KEY));
    let missing = missing_features(&columns, &tables, schema_info);
    TraceInfo {
        path: path.to_path_buf(),
        format,
        events: events as u64,
        first_ns: first_ns.unwrap_or(0),
        last_ns: last_ns.unwrap_or(0),
        event_columns: columns,
        tables,
        sampled,
        missing,
    }
}
