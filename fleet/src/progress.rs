//! How far each trace is shipped, as the lake knows it: the traces not shipped to their end (no
//! final flush committed) and what they lack.
//!
//! A shipper that gives up cannot tell the lake (the lake is what failed), so the lake knows a trace
//! is behind by what it did get: its watermark rows. Each flush records how far the local trace
//! went when it was made (`local_events_hi`, `local_nccl_calls_hi`) beside how far it shipped; a
//! trace whose flushes never said `finished` is behind by at least the difference of its latest
//! ones, and by whatever its tracer wrote after. A tracer still running ships the rest itself; the
//! lake cannot tell the two apart, so the answer names the trace's file and host, where
//! `causeway ship --db FILE` ships what the lake lacks.

use duckdb::Connection;
use serde::Serialize;

use crate::lake::LAKE;
use crate::FleetError;

/// A trace the lake does not have to its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TraceBehind {
    pub trace_uid: String,
    /// The host that recorded the trace.
    pub hostname: String,
    /// The trace's path on that host (`causeway ship --db PATH` there ships what the lake lacks).
    pub local_path: String,
    /// Flushes of the trace committed to the lake (0: nothing shipped yet).
    pub flushes: i64,
    /// When the last of them committed (none: nothing shipped yet).
    pub last_shipped_ns: Option<i64>,
    /// The highest event id the lake has of the trace.
    pub events_shipped: i64,
    /// The highest NCCL call row the lake has of the trace.
    pub nccl_calls_shipped: i64,
    /// Events the local trace held at the latest flush that the lake lacks: the least it is behind
    /// (0 where the lake's flushes predate this record).
    pub events_missing: i64,
    /// NCCL calls the local trace held at the latest flush that the lake lacks (the least).
    pub nccl_calls_missing: i64,
}

/// Every trace of the lake without a final flush, by node.
pub(crate) fn traces_behind(conn: &Connection) -> Result<Vec<(String, TraceBehind)>, FleetError> {
    let recorded: bool = conn.query_row(
        &format!(
            "SELECT count(*) = 2 FROM information_schema.columns WHERE table_catalog = '{LAKE}' \
             AND table_name = 'ship_watermarks' AND column_name IN ('local_events_hi', 'local_nccl_calls_hi')"
        ),
        [],
        |r| r.get(0),
    )?;
    let (local_events, local_nccl) = if recorded {
        ("arg_max(local_events_hi, flush_id)", "arg_max(local_nccl_calls_hi, flush_id)")
    } else {
        ("NULL::BIGINT", "NULL::BIGINT")
    };
    let sql = format!(
        "WITH w AS (
  SELECT node, trace_uid, count(*) AS flushes, max(shipped_at_ns) AS last_ns, bool_or(finished) AS finished,
         max(events_hi) AS events_hi, max(nccl_calls_hi) AS nccl_hi,
         {local_events} AS local_events, {local_nccl} AS local_nccl
  FROM {LAKE}.ship_watermarks GROUP BY node, trace_uid)
SELECT t.node, t.trace_uid, t.hostname, t.local_path, coalesce(w.flushes, 0), w.last_ns,
       coalesce(w.events_hi, 0), coalesce(w.nccl_hi, 0),
       greatest(coalesce(w.local_events, 0) - coalesce(w.events_hi, 0), 0),
       greatest(coalesce(w.local_nccl, 0) - coalesce(w.nccl_hi, 0), 0)
FROM {LAKE}.ship_traces t LEFT JOIN w ON w.node = t.node AND w.trace_uid = t.trace_uid
WHERE NOT coalesce(w.finished, false)
ORDER BY t.node, t.trace_uid"
    );
    let mut st = conn.prepare(&sql)?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            TraceBehind {
                trace_uid: r.get(1)?,
                hostname: r.get(2)?,
                local_path: r.get(3)?,
                flushes: r.get(4)?,
                last_shipped_ns: r.get(5)?,
                events_shipped: r.get(6)?,
                nccl_calls_shipped: r.get(7)?,
                events_missing: r.get(8)?,
                nccl_calls_missing: r.get(9)?,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
