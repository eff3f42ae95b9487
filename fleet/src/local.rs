//! The local trace as the shipper reads it: attached read-only in the lake's DuckDB connection
//! (a SQLite trace through `sqlite_scanner`, a DuckDB trace directly), a native trace only, and
//! its identity in the fleet.

use std::path::Path;

use duckdb::Connection;

use crate::lake::lit;
use crate::schema;
use crate::FleetError;

/// The alias of the local trace in the shipper's connection.
pub(crate) const LOCAL: &str = "local";

/// Attach the trace at `path` read-only as [`LOCAL`]: a native trace only (an Ingero DB is
/// converted first).
pub(crate) fn attach_local(conn: &Connection, path: &Path) -> Result<(), FleetError> {
    let p = lit(&path.to_string_lossy());
    let meta = std::fs::metadata(path).map_err(|e| FleetError::Local(format!("{}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(FleetError::Local(format!("{}: not a file", path.display())));
    }
    let sql = if causeway_backends::duckdb::is_duckdb_file(path) {
        format!("ATTACH {p} AS {LOCAL} (READ_ONLY)")
    } else {
        format!("ATTACH {p} AS {LOCAL} (TYPE sqlite, READ_ONLY)")
    };
    conn.execute_batch(&sql)
        .map_err(|e| FleetError::Local(format!("{}: cannot open it as a trace: {e}", path.display())))?;
    let tables = schema::tables(conn, LOCAL)?;
    let native = tables.iter().any(|t| t == "schema_info")
        && conn
            .query_row(
                &format!("SELECT count(*) FROM {LOCAL}.schema_info WHERE key = 'format' AND value = 'causeway'"),
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
            > 0;
    if !native {
        let _ = conn.execute_batch(&format!("DETACH {LOCAL}"));
        let what = if tables.iter().any(|t| t == "events") {
            "not a Causeway trace (an Ingero DB? `causeway convert` it to a native trace first)"
        } else {
            "not a trace (no events table)"
        };
        return Err(FleetError::Local(format!("{}: {what}", path.display())));
    }
    Ok(())
}

/// The trace's identity: a uid stable across shipper restarts (its first session's start and
/// tracer pid), the node and host name it recorded (either may be empty: see [`node_and_host`]) and
/// its tool version.
pub(crate) fn identity(conn: &Connection, path: &Path) -> Result<(String, String, String, String), FleetError> {
    // traces written before the column existed have no tracer_pid
    let has_tracer: bool = conn.query_row(
        &format!(
            "SELECT count(*) > 0 FROM information_schema.columns WHERE table_catalog = '{LOCAL}' AND table_name = 'sessions' \
             AND column_name = 'tracer_pid'"
        ),
        [],
        |r| r.get(0),
    )?;
    let tracer = if has_tracer { "tracer_pid" } else { "0" };
    let row = conn
        .query_row(
            &format!(
                "SELECT started_at, {tracer}, node, hostname, tool_version FROM {LOCAL}.sessions ORDER BY id LIMIT 1"
            ),
            [],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            },
        )
        .map_err(|e| {
            FleetError::Local(format!("{}: no session recorded, so no identity to ship under: {e}", path.display()))
        })?;
    let (started, tracer, node, hostname, version) = row;
    Ok((format!("{started:x}-{tracer}"), node, hostname, version))
}

/// The node and host a trace is filed under: the host name it recorded, else this host's (a trace
/// written before the column was filled); the node `given` (`--node`), else the one it recorded,
/// else its host. The one rule for `ship` and `merge`.
pub fn node_and_host(given: Option<&str>, recorded_node: &str, recorded_host: &str) -> (String, String) {
    let host = if recorded_host.is_empty() {
        std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
    } else {
        recorded_host.to_string()
    };
    let node = [given.unwrap_or(""), recorded_node]
        .into_iter()
        .find(|n| !n.is_empty())
        .map_or_else(|| host.clone(), str::to_string);
    (node, host)
}
