//! The lake's tables.
//!
//! Two kinds. **Mirrored** tables have a local trace's shape plus the columns that place a row in
//! the fleet (`node`, `trace_uid`): they are created from the first shipped trace's own tables
//! (`CREATE TABLE ... AS SELECT ... LIMIT 0`), and a trace with a newer schema adds its new columns
//! (`ALTER TABLE ... ADD COLUMN`), so the native schema (`causeway-backends`' `schema.rs`) stays the
//! one definition; a node's slice of them reads exactly like its local trace. **Fleet** tables are
//! the lake's own: what was shipped up to where (the watermark), clock samples, per-window
//! aggregates, shipped windows, findings.
//!
//! DuckLake has no keys or unique constraints: exactly-once comes from the shipper writing rows
//! and their watermark in one transaction (see `ship.rs`), never from the table.

use duckdb::Connection;

use crate::lake::{lit, retry_conflicts, LAKE};
use crate::FleetError;

/// Local tables the lake mirrors, each with the column the shipper advances a watermark on (rows
/// beyond it are new), or `None` for the stacks (shipped with their events) and the small tables
/// (shipped whole when they change: `small_tables.rs`).
pub const MIRRORED: [(&str, Option<&str>); 24] = [
    ("events", Some("id")),
    ("nccl_calls", Some("rowid")),
    ("gpu_samples", Some("rowid")),
    ("gpu_process_memory", Some("rowid")),
    ("serving_samples", Some("rowid")),
    ("gpu_ops", Some("rowid")),
    ("gpu_clock_syncs", Some("rowid")),
    ("gpu_timeline_notes", Some("rowid")),
    ("footprint_syscalls", Some("rowid")),
    ("footprint_cpu", Some("rowid")),
    ("footprint_fds", Some("rowid")),
    ("footprint_requests", Some("rowid")),
    ("footprint_execs", Some("rowid")),
    ("gpu_devices", None),
    ("stack_traces", None),
    ("sessions", None),
    ("process_names", None),
    ("process_ranks", None),
    ("process_cgroups", None),
    ("loss_counters", None),
    ("kernel_names", None),
    ("net_peers", None),
    ("launch_configs", None),
    ("attachments", None),
];

/// The fleet's own tables.
pub const FLEET_DDL: &str = "
CREATE TABLE IF NOT EXISTS lake.ship_traces (
    node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL, tier VARCHAR NOT NULL, hostname VARCHAR NOT NULL,
    local_path VARCHAR NOT NULL, engine VARCHAR NOT NULL, tool_version VARCHAR NOT NULL, first_shipped_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.ship_watermarks (
    node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL, flush_id BIGINT NOT NULL,
    events_hi BIGINT NOT NULL, nccl_calls_hi BIGINT NOT NULL, gpu_samples_hi BIGINT NOT NULL,
    rows BIGINT NOT NULL, finished BOOLEAN NOT NULL, shipped_at_ns BIGINT NOT NULL, serving_samples_hi BIGINT,
    local_events_hi BIGINT, local_nccl_calls_hi BIGINT, gpu_ops_hi BIGINT, gpu_clock_syncs_hi BIGINT,
    gpu_timeline_notes_hi BIGINT, gpu_process_memory_hi BIGINT, footprint_syscalls_hi BIGINT, footprint_cpu_hi BIGINT,
    footprint_fds_hi BIGINT, footprint_requests_hi BIGINT, footprint_execs_hi BIGINT);
CREATE TABLE IF NOT EXISTS lake.clock_samples (
    node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL, flush_id BIGINT NOT NULL, sample INTEGER NOT NULL,
    local_send_ns BIGINT NOT NULL, server_ns BIGINT NOT NULL, local_recv_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.clock_state (
    node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL, flush_id BIGINT NOT NULL, sampled_at_ns BIGINT NOT NULL,
    sync_status BIGINT NOT NULL, esterror_us BIGINT NOT NULL, maxerror_us BIGINT NOT NULL,
    mono_to_realtime_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.op_windows (
    node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL, flush_id BIGINT NOT NULL, bucket_ns BIGINT NOT NULL,
    source BIGINT NOT NULL, op BIGINT NOT NULL, pid BIGINT NOT NULL, calls BIGINT NOT NULL,
    sum_dur BIGINT NOT NULL, min_dur BIGINT NOT NULL, max_dur BIGINT NOT NULL, sum_arg0 BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.ship_windows (
    node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL, from_ns BIGINT NOT NULL, to_ns BIGINT NOT NULL,
    rows BIGINT NOT NULL, shipped_at_ns BIGINT NOT NULL);
";

/// One-line descriptions of the lake's tables, for `describe` answers and the docs.
pub const TABLE_DOCS: [(&str, &str); 12] = [
    (
        "events",
        "the shipped events of every node (the local `events` columns; `node` set, `trace_uid` names the local trace)",
    ),
    ("nccl_calls", "every node's NCCL calls: (comm_hash, seq) names one collective on every rank of every node"),
    ("ship_traces", "one row per shipped local trace: node, tier (summary/all), where it came from"),
    (
        "ship_watermarks",
        "one row per flush: how far each table of a trace is shipped (rows and watermark in one transaction), \
         and how far the local trace went then (local_events_hi, local_nccl_calls_hi)",
    ),
    (
        "clock_samples",
        "NTP-style samples against the catalog server's clock at each flush (offset = server - (send+recv)/2)",
    ),
    ("clock_state", "the kernel's clock discipline at each flush (adjtimex status, estimated and maximum error)"),
    ("op_windows", "per-second per-op aggregates of every shipped event range (all events, whatever the tier)"),
    ("ship_windows", "raw-event windows shipped on request for a drill-down"),
    ("process_ranks", "each traced process's rank, local rank and world size, per node"),
    ("process_cgroups", "each traced process's cgroup and the container or pod it stands for, per node"),
    (
        "gpu_ops",
        "every node's device timeline (kernels, copies, memsets, syncs on the node's own clock), shipped once the \
         trace is finished and each op names its launching call (launch_event_id = events.id of the same trace)",
    ),
    (
        "collective_summaries",
        "per collective (comm_hash, seq): ranks in, first and last entry on aligned clocks, gap to the one before; \
         kept by `fleet maintain` for the straggler query, with collective_spread_entries, collective_last_entries, \
         collective_summary_state and collective_summary_clocks (the rows and alignment summarized)",
    ),
];

/// Every table's columns in the `main` schema of an attached database, in order, with DuckDB
/// types: (table, column, type). One query for the whole database.
pub(crate) fn all_columns(conn: &Connection, db: &str) -> Result<Vec<(String, String, String)>, FleetError> {
    let sql = format!(
        "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_catalog = {} \
         AND table_schema = 'main' ORDER BY table_name, ordinal_position",
        lit(db)
    );
    let mut st = conn.prepare(&sql)?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The columns of `ship_watermarks` added after its first version (nullable), in order.
const WATERMARK_COLUMNS_ADDED: [&str; 12] = [
    "serving_samples_hi",
    "local_events_hi",
    "local_nccl_calls_hi",
    "gpu_ops_hi",
    "gpu_clock_syncs_hi",
    "gpu_timeline_notes_hi",
    "gpu_process_memory_hi",
    "footprint_syscalls_hi",
    "footprint_cpu_hi",
    "footprint_fds_hi",
    "footprint_requests_hi",
    "footprint_execs_hi",
];

/// Tables of an attached database.
pub(crate) fn tables(conn: &Connection, db: &str) -> Result<Vec<String>, FleetError> {
    let sql = format!("SELECT table_name FROM information_schema.tables WHERE table_catalog = {}", lit(db));
    let mut st = conn.prepare(&sql)?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The fleet tables [`FLEET_DDL`] creates, by name.
fn fleet_tables() -> impl Iterator<Item = &'static str> {
    FLEET_DDL.split("CREATE TABLE IF NOT EXISTS lake.").skip(1).filter_map(|s| s.split([' ', '(']).next())
}

/// The statements that make the lake able to take the local trace attached as `local`, given both
/// databases' columns: none when the lake has every table and column already (every shipper after
/// the first, every restart).
fn missing_ddl(
    lake_cols: &[(String, String, String)],
    local_cols: &[(String, String, String)],
    local: &str,
) -> Vec<String> {
    let in_lake = |t: &str| lake_cols.iter().any(|(lt, _, _)| lt == t);
    let has_col = |t: &str, c: &str| lake_cols.iter().any(|(lt, lc, _)| lt == t && lc == c);
    let mut ddl = Vec::new();
    if fleet_tables().any(|t| !in_lake(t)) {
        ddl.push(FLEET_DDL.to_string());
    }
    // a lake made before serving_samples or the device timeline were shipped, or before the flushes
    // recorded how far the local trace went: those columns, NULL in the rows before
    for col in WATERMARK_COLUMNS_ADDED {
        if in_lake("ship_watermarks") && !has_col("ship_watermarks", col) {
            ddl.push(format!("ALTER TABLE {LAKE}.ship_watermarks ADD COLUMN IF NOT EXISTS {col} BIGINT"));
        }
    }
    for (table, _) in MIRRORED {
        let cols: Vec<_> = local_cols.iter().filter(|(t, _, _)| t == table).collect();
        if cols.is_empty() {
            continue;
        }
        if !in_lake(table) {
            let node_col = if cols.iter().any(|(_, c, _)| c == "node") { "" } else { "''::VARCHAR AS node, " };
            ddl.push(format!(
                "CREATE TABLE IF NOT EXISTS {LAKE}.{table} AS SELECT ''::VARCHAR AS trace_uid, {node_col}* FROM {local}.{table} LIMIT 0"
            ));
            continue;
        }
        for (_, c, ty) in cols {
            if !has_col(table, c) {
                ddl.push(format!("ALTER TABLE {LAKE}.{table} ADD COLUMN IF NOT EXISTS \"{c}\" {ty}"));
            }
        }
    }
    ddl
}

/// Make the lake able to take the local trace attached as `local`: the fleet tables, and each
/// mirrored table the trace has, with every column it has. What is missing is made in one
/// transaction; nothing is written when nothing is missing. Safe to run from many shippers at once:
/// a commit conflict with another shipper making the same tables is retried, and the retry finds
/// them made.
pub fn ensure(conn: &Connection, local: &str) -> Result<(), FleetError> {
    let local_cols = all_columns(conn, local)?;
    retry_conflicts(8, || {
        let ddl = missing_ddl(&all_columns(conn, LAKE)?, &local_cols, local);
        if ddl.is_empty() {
            return Ok(());
        }
        conn.execute_batch("BEGIN TRANSACTION")?;
        let made = conn.execute_batch(&ddl.join(";\n")).and_then(|()| conn.execute_batch("COMMIT"));
        if let Err(e) = made {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e.into());
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(rows: &[(&str, &str)]) -> Vec<(String, String, String)> {
        rows.iter().map(|(t, c)| (t.to_string(), c.to_string(), "BIGINT".to_string())).collect()
    }

    #[test]
    fn the_fleet_tables_are_read_from_their_ddl() {
        let t: Vec<_> = fleet_tables().collect();
        assert_eq!(t, ["ship_traces", "ship_watermarks", "clock_samples", "clock_state", "op_windows", "ship_windows"]);
    }

    #[test]
    fn only_what_the_lake_lacks_is_made() {
        let local = cols(&[("events", "id"), ("events", "cpu"), ("sessions", "id"), ("sessions", "node")]);
        // a new lake: every fleet table, both mirrored tables, the events with a node column
        let ddl = missing_ddl(&[], &local, "local");
        assert_eq!(ddl.len(), 3, "{ddl:?}");
        assert!(ddl[0].contains("ship_watermarks"));
        assert!(ddl[1].contains("lake.events AS SELECT ''::VARCHAR AS trace_uid, ''::VARCHAR AS node, *"));
        assert!(ddl[2].contains("lake.sessions AS SELECT ''::VARCHAR AS trace_uid, * FROM local.sessions"));
        // a lake with everything: nothing to do
        let mut lake: Vec<_> = fleet_tables().map(|t| (t, "node")).collect();
        lake.extend(WATERMARK_COLUMNS_ADDED.map(|c| ("ship_watermarks", c)));
        lake.extend([("events", "id"), ("events", "cpu")]);
        lake.extend([("sessions", "id"), ("sessions", "node")]);
        assert!(missing_ddl(&cols(&lake), &local, "local").is_empty());
        // a trace with a newer column, a lake from before serving_samples were shipped
        lake.retain(|r| *r != ("ship_watermarks", "serving_samples_hi") && *r != ("events", "cpu"));
        let ddl = missing_ddl(&cols(&lake), &local, "local");
        assert_eq!(ddl.len(), 2, "{ddl:?}");
        assert!(ddl[0].contains("ADD COLUMN IF NOT EXISTS serving_samples_hi"));
        assert_eq!(ddl[1], "ALTER TABLE lake.events ADD COLUMN IF NOT EXISTS \"cpu\" BIGINT");
        // a lake from before the flushes recorded the local trace's extent
        lake.retain(|r| r.0 != "ship_watermarks" || !r.1.starts_with("local_"));
        lake.extend([("ship_watermarks", "serving_samples_hi"), ("events", "cpu")]);
        let ddl = missing_ddl(&cols(&lake), &local, "local");
        assert_eq!(ddl.len(), 2, "{ddl:?}");
        assert!(ddl[0].ends_with("local_events_hi BIGINT") && ddl[1].ends_with("local_nccl_calls_hi BIGINT"));
        // a lake made before the GPU samples' link columns and the processes' memory: it gains them
        lake.extend([("ship_watermarks", "local_events_hi"), ("ship_watermarks", "local_nccl_calls_hi")]);
        lake.extend([("gpu_samples", "timestamp")]);
        let newer = [&local[..], &cols(&[("gpu_samples", "timestamp"), ("gpu_samples", "pcie_link_gen")])[..]].concat();
        let newer = [&newer[..], &cols(&[("gpu_process_memory", "pid")])[..]].concat();
        let ddl = missing_ddl(&cols(&lake), &newer, "local");
        assert_eq!(ddl.len(), 2, "{ddl:?}");
        assert_eq!(ddl[0], "ALTER TABLE lake.gpu_samples ADD COLUMN IF NOT EXISTS \"pcie_link_gen\" BIGINT");
        assert!(ddl[1].starts_with("CREATE TABLE IF NOT EXISTS lake.gpu_process_memory AS SELECT"), "{ddl:?}");
    }
}
