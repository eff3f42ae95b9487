//! The [`packed`](crate::packed) structures in a SQLite trace: built by the finish that records
//! the extent (`build_finished_structures`), read by `scan_slim` and `duration_summary` while
//! `SqliteStore::finished` vouches for them.

use causeway_model::codes::OpCode;
use causeway_store::summary::DurationSummary;
use causeway_store::{EventFilter, SlimEvent};
use rusqlite::types::Value;
use rusqlite::{params, Connection};

use crate::packed::{calls, durations};
use crate::Result;

/// (Re)builds both tables from `events` (at finish, after the indexes: the calls are read in
/// the timestamp index's order).
pub(crate) fn build(conn: &Connection) -> rusqlite::Result<()> {
    build_call_blocks(conn)?;
    build_op_durations(conn)
}

/// The call blocks and, from the same rows, the step blocks ([`calls::STEP_TABLE`]).
fn build_call_blocks(conn: &Connection) -> rusqlite::Result<()> {
    let mut inserts = Vec::new();
    for table in [calls::TABLE, calls::STEP_TABLE] {
        conn.execute_batch(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (block INTEGER PRIMARY KEY, \
             min_ts INTEGER NOT NULL, max_ts INTEGER NOT NULL, calls INTEGER NOT NULL, data BLOB NOT NULL)"
        ))?;
        inserts.push(conn.prepare(&format!(
            "INSERT INTO {table} (block, min_ts, max_ts, calls, data) VALUES (?1, ?2, ?3, ?4, ?5)"
        ))?);
    }
    let put = |insert: &mut rusqlite::Statement<'_>, b: calls::Block| {
        insert.execute(params![b.index, b.min_ts, b.max_ts, b.calls, b.data]).map(|_| ())
    };
    let mut select = conn.prepare(&calls::select_sql())?;
    let (mut all, mut steps) = (calls::Packer::default(), calls::Packer::default());
    let mut rows = select.query([])?;
    while let Some(r) = rows.next()? {
        let row = super::reader::slim_row(r)?;
        if causeway_model::codes::is_step_op(row.op) {
            if let Some(b) = steps.push(&row) {
                put(&mut inserts[1], b)?;
            }
        }
        if let Some(b) = all.push(&row) {
            put(&mut inserts[0], b)?;
        }
    }
    for (i, packer) in [all, steps].into_iter().enumerate() {
        if let Some(b) = packer.finish() {
            put(&mut inserts[i], b)?;
        }
    }
    Ok(())
}

fn build_op_durations(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&durations::create_sql())?;
    let mut grouper = durations::Grouper::default();
    let mut st = conn.prepare(durations::SOURCE_SQL)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let op = OpCode::new(r.get::<_, i64>(1)? as u8, r.get::<_, i64>(2)? as u16);
        grouper.add(r.get::<_, i64>(0)? as u32, op, r.get::<_, Option<i64>>(3)?.unwrap_or(0));
    }
    let mut insert = conn.prepare(&durations::insert_sql())?;
    for (pid, op, count, sum, data) in grouper.rows() {
        insert.execute(params![pid, op.source, op.op, count, sum, data])?;
    }
    Ok(())
}

/// [`calls::scan`] of the blocks of `table` (the call blocks or the step blocks) of `conn` that
/// `filter`'s window meets.
pub(crate) fn scan_calls(
    conn: &Connection,
    table: &str,
    filter: &EventFilter,
    f: &mut dyn FnMut(SlimEvent),
) -> Result<u64> {
    let (from, to) = (filter.window.from_ns.unwrap_or(i64::MIN), filter.window.to_ns.unwrap_or(i64::MAX));
    let mut st = conn.prepare_cached(&format!(
        "SELECT block, calls, data FROM {table} WHERE max_ts >= ?1 AND min_ts <= ?2 ORDER BY block"
    ))?;
    let mut rows = st.query(params![Value::Integer(from), Value::Integer(to)])?;
    let mut blocks = std::iter::from_fn(|| -> Option<Result<calls::StoredBlock>> {
        let block = (|| -> Result<Option<calls::StoredBlock>> {
            let Some(r) = rows.next()? else { return Ok(None) };
            let (block, count): (i64, i64) = (r.get(0)?, r.get(1)?);
            let data = r.get_ref(2)?.as_blob().map_err(|e| calls::damaged(table, block, &e.to_string()))?;
            Ok(Some((block, count.max(0) as usize, data.to_vec())))
        })();
        block.transpose()
    });
    calls::scan(table, &mut blocks, filter, f)
}

/// [`durations::summary`] of the trace of `conn` (`extent`: its events, first and last timestamp).
pub(crate) fn summarize(
    conn: &Connection,
    extent: (u64, i64, i64),
    per_mille: &[u32],
    per_process: bool,
) -> Result<DurationSummary> {
    let keys: Vec<durations::DurationsKey> = conn
        .prepare(&durations::keys_sql(per_process))?
        .query_map([], |r| {
            let op = OpCode::new(r.get::<_, i64>(1)? as u8, r.get::<_, i64>(2)? as u16);
            Ok((r.get(0)?, op, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut data = conn.prepare(&durations::data_sql())?;
    let mut rows = durations::with_data(keys, |pid, op| {
        Ok(data.query_row(rusqlite::params![pid, op.source, op.op], |r| r.get(0))?)
    });
    durations::summary(&mut rows, extent, per_mille)
}
