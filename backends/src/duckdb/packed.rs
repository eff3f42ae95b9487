//! The [`packed`](crate::packed) structures in a DuckDB trace: built by the writer's finish
//! (which records the extent beside them), dropped when a writer opens the trace again, read by
//! `scan_slim` and `duration_summary` while `DuckDbStore::finished` vouches for them.

use causeway_model::codes::OpCode;
use causeway_store::summary::DurationSummary;
use causeway_store::{EventFilter, EventId, SlimEvent};
use duckdb::{params, Connection};

use super::reader::{ints, val};
use crate::packed::{calls, durations};
use crate::schema::{extent_value, parse_extent, FINISHED_EXTENT_KEY};
use crate::{Result, StoreError};

/// (Re)builds both tables from `events`, then records the extent that vouches for them.
pub(crate) fn build(conn: &Connection) -> Result<()> {
    build_call_blocks(conn)?;
    build_op_durations(conn)?;
    let (count, first, last, max_id): (i64, Option<i64>, Option<i64>, Option<i64>) = conn
        .query_row("SELECT count(*), min(timestamp), max(timestamp), max(id) FROM events", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .map_err(engine)?;
    conn.execute(
        "INSERT OR REPLACE INTO schema_info (key, value) VALUES (?, ?)",
        params![FINISHED_EXTENT_KEY, extent_value(count, first, last, max_id)],
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
/// packed tables are there.
pub(crate) fn believed(conn: &Connection, tables: &[String], recorded: Option<&String>) -> duckdb::Result<bool> {
    let has = |t: &str| tables.iter().any(|x| x == t);
    let Some((_, _, _, max_id)) = recorded.and_then(|v| parse_extent(v)) else { return Ok(false) };
    if !crate::packed::TABLES.iter().all(|t| has(t)) {
        return Ok(false);
    }
    let now: Option<i64> = conn.query_row("SELECT max(id) FROM events", [], |r| r.get(0))?;
    Ok(now == max_id)
}

fn build_call_blocks(conn: &Connection) -> Result<()> {
    let table = calls::TABLE;
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (block BIGINT PRIMARY KEY, min_ts BIGINT NOT NULL, \
         max_ts BIGINT NOT NULL, calls BIGINT NOT NULL, data BLOB NOT NULL)"
    ))
    .map_err(engine)?;
    let mut insert = conn
        .prepare(&format!("INSERT INTO {table} (block, min_ts, max_ts, calls, data) VALUES (?, ?, ?, ?, ?)"))
        .map_err(engine)?;
    let mut put = |b: calls::Block| {
        insert.execute(params![b.index, b.min_ts, b.max_ts, b.calls, b.data]).map(|_| ()).map_err(engine)
    };
    let mut packer = calls::Packer::default();
    let mut select = conn.prepare(&calls::select_sql()).map_err(engine)?;
    for b in select.query_arrow([]).map_err(engine)? {
        let c = (0..9).map(|i| ints(&b, i)).collect::<Result<Vec<_>>>()?;
        for r in 0..b.num_rows() {
            let call = SlimEvent {
                id: EventId::Int(val(&c[0], r)),
                ts: val(&c[1], r),
                dur: val(&c[2], r),
                pid: val(&c[3], r) as u32,
                tid: val(&c[4], r) as u32,
                op: OpCode::new(val(&c[5], r) as u8, val(&c[6], r) as u16),
                arg0: val(&c[7], r),
                arg2: val(&c[8], r),
            };
            if let Some(block) = packer.push(&call) {
                put(block)?;
            }
        }
    }
    packer.finish().map_or(Ok(()), put)
}

fn build_op_durations(conn: &Connection) -> Result<()> {
    let table = durations::TABLE;
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (pid BIGINT NOT NULL, source BIGINT NOT NULL, \
         op BIGINT NOT NULL, count BIGINT NOT NULL, sum_ns VARCHAR NOT NULL, data BLOB NOT NULL, \
         PRIMARY KEY (pid, source, op))"
    ))
    .map_err(engine)?;
    let mut grouper = durations::Grouper::default();
    let mut select = conn.prepare(durations::SOURCE_SQL).map_err(engine)?;
    for b in select.query_arrow([]).map_err(engine)? {
        let (p, s, o, d) = (ints(&b, 0)?, ints(&b, 1)?, ints(&b, 2)?, ints(&b, 3)?);
        for r in 0..b.num_rows() {
            grouper.add(val(&p, r) as u32, OpCode::new(val(&s, r) as u8, val(&o, r) as u16), val(&d, r));
        }
    }
    let mut insert = conn
        .prepare(&format!("INSERT INTO {table} (pid, source, op, count, sum_ns, data) VALUES (?, ?, ?, ?, ?, ?)"))
        .map_err(engine)?;
    for (pid, op, count, sum, data) in grouper.rows() {
        insert.execute(params![pid, op.source, op.op, count, sum, data]).map_err(engine)?;
    }
    Ok(())
}

/// [`calls::scan`] of the blocks of `conn` that `filter`'s window meets.
pub(crate) fn scan_calls(conn: &Connection, filter: &EventFilter, f: &mut dyn FnMut(SlimEvent)) -> Result<u64> {
    let (from, to) = (filter.window.from_ns.unwrap_or(i64::MIN), filter.window.to_ns.unwrap_or(i64::MAX));
    let mut st = conn
        .prepare(&format!(
            "SELECT block, calls, data FROM {} WHERE max_ts >= ? AND min_ts <= ? ORDER BY block",
            calls::TABLE
        ))
        .map_err(engine)?;
    let mut rows = st.query(params![from, to]).map_err(engine)?;
    let mut blocks = std::iter::from_fn(|| -> Option<Result<calls::StoredBlock>> {
        let block = (|| -> Result<Option<calls::StoredBlock>> {
            let Some(r) = rows.next().map_err(engine)? else { return Ok(None) };
            let (block, count, data): (i64, i64, Vec<u8>) =
                (r.get(0).map_err(engine)?, r.get(1).map_err(engine)?, r.get(2).map_err(engine)?);
            Ok(Some((block, count.max(0) as usize, data)))
        })();
        block.transpose()
    });
    calls::scan(&mut blocks, filter, f)
}

/// [`durations::summary`] of the trace of `conn` (`extent`: its events, first and last timestamp).
pub(crate) fn summarize(
    conn: &Connection,
    extent: (u64, i64, i64),
    per_mille: &[u32],
    per_process: bool,
) -> Result<DurationSummary> {
    let mut st = conn
        .prepare(&format!(
            "SELECT pid, source, op, count, sum_ns, data FROM {}{} ORDER BY pid, source, op",
            durations::TABLE,
            durations::rows_wanted(per_process)
        ))
        .map_err(engine)?;
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
