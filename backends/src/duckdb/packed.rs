//! The [`packed`](crate::packed) structures in a DuckDB trace: the sorted durations, built by the
//! writer's finish (which records the extent beside them), dropped when a writer opens the trace
//! again, read by `duration_summary` while `DuckDbStore::finished` vouches for them.
//!
//! Not the packed calls: DuckDB's columns already compress a trace about fourfold, and at 10M
//! events the call blocks added 143 MB of byte strings and as much again of free blocks to a
//! 253 MB file (and 6 s to the finish) for 1.3 s of explain's load; the sorted durations add
//! 20 MB and make a whole trace's stats five times faster.

use causeway_model::codes::OpCode;
use causeway_store::summary::DurationSummary;
use duckdb::{params, Connection};

use super::reader::{ints, val};
use crate::packed::durations;
use crate::schema::{extent_if_current, extent_value, RecordedExtent, EXTENT_SQL, FINISHED_EXTENT_KEY, LAST_ID_SQL};
use crate::{Result, StoreError};

/// (Re)builds the sorted durations from `events`, then records the extent that vouches for them.
pub(crate) fn build(conn: &Connection) -> Result<()> {
    build_op_durations(conn)?;
    let extent: RecordedExtent =
        conn.query_row(EXTENT_SQL, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).map_err(engine)?;
    conn.execute(
        "INSERT OR REPLACE INTO schema_info (key, value) VALUES (?, ?)",
        params![FINISHED_EXTENT_KEY, extent_value(extent)],
    )
    .map_err(engine)?;
    Ok(())
}

/// Drops what the last finish built (a writer is about to add events).
pub(crate) fn forget(conn: &Connection) -> duckdb::Result<()> {
    for table in crate::packed::TABLES {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS {table};"))?;
    }
    conn.execute("DELETE FROM schema_info WHERE key = ?", params![FINISHED_EXTENT_KEY]).map(|_| ())
}

/// Whether the extent the last finish recorded still ends at the trace's last id, and the
/// sorted durations are there.
pub(crate) fn believed(conn: &Connection, tables: &[String], recorded: Option<&String>) -> duckdb::Result<bool> {
    if recorded.is_none() || !tables.iter().any(|t| t == durations::TABLE) {
        return Ok(false);
    }
    let now: Option<i64> = conn.query_row(LAST_ID_SQL, [], |r| r.get(0))?;
    Ok(extent_if_current(recorded.map(String::as_str), now).is_some())
}

fn build_op_durations(conn: &Connection) -> Result<()> {
    conn.execute_batch(&durations::create_sql()).map_err(engine)?;
    let mut grouper = durations::Grouper::default();
    let mut select = conn.prepare(durations::SOURCE_SQL).map_err(engine)?;
    for b in select.query_arrow([]).map_err(engine)? {
        let (p, s, o, d) = (ints(&b, 0)?, ints(&b, 1)?, ints(&b, 2)?, ints(&b, 3)?);
        for r in 0..b.num_rows() {
            grouper.add(val(&p, r) as u32, OpCode::new(val(&s, r) as u8, val(&o, r) as u16), val(&d, r));
        }
    }
    let mut insert = conn.prepare(&durations::insert_sql()).map_err(engine)?;
    for (pid, op, count, sum, data) in grouper.rows() {
        insert.execute(params![pid, op.source, op.op, count, sum, data]).map_err(engine)?;
    }
    Ok(())
}

/// [`durations::summary`] of the trace of `conn` (`extent`: its events, first and last timestamp).
pub(crate) fn summarize(
    conn: &Connection,
    extent: (u64, i64, i64),
    per_mille: &[u32],
    per_process: bool,
) -> Result<DurationSummary> {
    let mut st = conn.prepare(&durations::select_sql(per_process)).map_err(engine)?;
    let rows: Vec<durations::DurationsRow> = st
        .query_map([], |r| {
            let op = OpCode::new(r.get::<_, i64>(1)? as u8, r.get::<_, i64>(2)? as u16);
            Ok((r.get(0)?, op, r.get(3)?, r.get(4)?, r.get(5)?))
        })
        .and_then(|rows| rows.collect())
        .map_err(engine)?;
    durations::summary(&mut rows.into_iter().map(Ok), extent, per_mille)
}

fn engine(e: duckdb::Error) -> StoreError {
    StoreError::Engine(format!("packed structures: {e}"))
}
