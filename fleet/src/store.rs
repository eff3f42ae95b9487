//! One node's trace read back from the lake, as a [`TraceStore`]: every per-host analysis (`stats`,
//! `explain`, `timeline`, `stacks`, guarded SQL) runs on it unchanged.
//!
//! An in-memory DuckDB database gets the native schema (`causeway-backends`' DuckDB DDL, the one
//! definition), then each table the lake mirrors is replaced by a view of the same columns over the
//! lake, filtered on the node and the trace (`WHERE node = .. AND trace_uid = ..`); a column the
//! lake lacks (a trace shipped by an older version) reads as NULL. The DuckDB engine's reader runs
//! over those views as over a file. What a node's slice holds is what it shipped: the `summary` tier
//! has the collectives and synchronizing calls, `all` every event.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use causeway_backends::duckdb::{init_native_schema, DuckDbStore};
use causeway_backends::StoreError;
use duckdb::Connection;

use crate::lake::{self, lit, Access, LakeSpec, LAKE};
use crate::schema::{all_columns, MIRRORED};
use crate::FleetError;

/// The traces a node shipped, newest first (by first shipment).
pub fn node_traces(conn: &Connection, node: &str) -> Result<Vec<String>, FleetError> {
    let mut st = conn
        .prepare(&format!("SELECT trace_uid FROM {LAKE}.ship_traces WHERE node = ? ORDER BY first_shipped_ns DESC"))?;
    let rows = st.query_map([node], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A connection whose default database shows `(node, trace_uid)` of the lake as a native trace.
fn scoped_connection(lake: &LakeSpec, node: &str, trace_uid: &str) -> Result<Connection, FleetError> {
    let conn = lake::connect(lake, &Access::Read)?;
    scope(&conn, node, trace_uid)?;
    Ok(conn)
}

/// Make the default database of `conn` (the lake attached) show `(node, trace_uid)` as a native trace.
fn scope(conn: &Connection, node: &str, trace_uid: &str) -> Result<(), FleetError> {
    init_native_schema(conn)?;
    // both databases' columns in one query each (the lake's are asked of its catalog server)
    let default_db: String = conn.query_row("SELECT current_database()", [], |r| r.get(0))?;
    let native_cols = all_columns(conn, &default_db)?;
    let lake_cols = all_columns(conn, LAKE)?;
    let of = |cols: &'_ [(String, String, String)], table: &str| -> Vec<String> {
        cols.iter().filter(|(t, _, _)| t == table).map(|(_, c, _)| c.clone()).collect()
    };
    for (table, _) in MIRRORED {
        let shipped = of(&lake_cols, table);
        if shipped.is_empty() {
            continue;
        }
        let select: Vec<String> = of(&native_cols, table)
            .iter()
            .map(|c| if shipped.iter().any(|s| s == c) { format!("\"{c}\"") } else { format!("NULL AS \"{c}\"") })
            .collect();
        conn.execute_batch(&format!(
            "DROP TABLE main.{table}; CREATE VIEW main.{table} AS SELECT {} FROM {LAKE}.{table} WHERE node = {} AND trace_uid = {}",
            select.join(", "),
            lit(node),
            lit(trace_uid)
        ))?;
    }
    Ok(())
}

/// Open `node`'s trace in the lake as a [`TraceStore`](causeway_backends::TraceStore). With
/// `trace_uid` None the node must have shipped one trace (else the error lists them).
pub fn node_store(lake: &LakeSpec, node: &str, trace_uid: Option<&str>) -> Result<DuckDbStore, FleetError> {
    open_node(lake, node, |traces| pick_trace(node, trace_uid, traces))
}

/// Open `node`'s latest shipped trace in the lake (by first shipment) as a
/// [`TraceStore`](causeway_backends::TraceStore): what the MCP server serves as `node:NAME`.
pub fn latest_node_store(lake: &LakeSpec, node: &str) -> Result<DuckDbStore, FleetError> {
    open_node(lake, node, |traces| match traces.first() {
        Some(uid) => Ok(uid.clone()),
        None => pick_trace(node, None, traces),
    })
}

/// Which of `traces` (a node's, newest first) [`node_store`] opens.
fn pick_trace(node: &str, trace_uid: Option<&str>, traces: &[String]) -> Result<String, FleetError> {
    Ok(match (trace_uid, traces) {
        (Some(u), _) if traces.iter().any(|t| t == u) => u.to_string(),
        (Some(u), _) => {
            return Err(FleetError::Empty(format!(
                "node `{node}` shipped no trace `{u}` (it shipped: {})",
                traces.join(", ")
            )))
        }
        (None, [only]) => only.clone(),
        (None, []) => {
            return Err(FleetError::Empty(format!("no node `{node}` in the lake (causeway fleet nodes lists them)")))
        }
        (None, many) => {
            return Err(FleetError::BadLake(format!(
                "node `{node}` shipped {} traces: name one ({})",
                many.len(),
                many.join(", ")
            )))
        }
    })
}

/// Open the trace of `node` that `pick` chooses among its traces (newest first).
fn open_node(
    lake: &LakeSpec,
    node: &str,
    pick: impl FnOnce(&[String]) -> Result<String, FleetError>,
) -> Result<DuckDbStore, FleetError> {
    // one connection to find the trace and to read it (each connection loads the extensions and
    // checks their signatures: 0.5-0.8 s)
    let conn = lake::connect(lake, &Access::Read)?;
    let uid = pick(&node_traces(&conn, node)?)?;
    scope(&conn, node, &uid)?;
    let (lake2, node2, uid2) = (lake.clone(), node.to_string(), uid.clone());
    // Guarded queries (the user's SQL, and the analyses' own few: explain asks four) each get a
    // connection of their own to one hardened database, made on the first: attaching the lake
    // again per query (extensions loaded and their signatures checked) cost about a second each.
    // (Copying a node's slice into memory at open instead of reading through views was tried: on
    // the bench's 150,000-event node it cost more at open than it saved in one explain.)
    let hardened: Mutex<Option<Connection>> = Mutex::new(None);
    let reopen: causeway_backends::duckdb::Reopen = Arc::new(move || {
        let engine = |e: FleetError| StoreError::Engine(e.to_string());
        let mut base = hardened.lock().unwrap_or_else(|p| p.into_inner());
        if base.is_none() {
            let conn = scoped_connection(&lake2, &node2, &uid2).map_err(engine)?;
            lake::harden(&conn).map_err(engine)?;
            *base = Some(conn);
        }
        base.as_ref().expect("made above").try_clone().map_err(|e| StoreError::Engine(e.to_string()))
    });
    let label = PathBuf::from(format!("lake:{node}/{uid}"));
    DuckDbStore::from_connection(conn, label, Some(reopen)).map_err(|e| FleetError::Engine(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_picked_by_name_or_as_the_only_one() {
        let two = ["b".to_string(), "a".to_string()];
        assert_eq!(pick_trace("n", Some("a"), &two).unwrap(), "a");
        let e = pick_trace("n", Some("c"), &two).unwrap_err().to_string();
        assert!(e.contains("no trace `c`") && e.contains("b, a"), "{e}");
        let e = pick_trace("n", None, &two).unwrap_err().to_string();
        assert!(e.contains("shipped 2 traces: name one (b, a)"), "{e}");
        assert_eq!(pick_trace("n", None, &two[..1]).unwrap(), "b");
        assert!(pick_trace("n", None, &[]).unwrap_err().to_string().contains("no node `n`"));
    }
}
