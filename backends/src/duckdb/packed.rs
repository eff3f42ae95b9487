//! The [`packed`](crate::packed) structures in a DuckDB trace: the sorted durations and the step
//! blocks, built by the writer's finish (which records the extent beside them), dropped when a
//! writer opens the trace again, read by `duration_summary` and `scan_slim` while
//! `DuckDbStore::finished` vouches for them.
//!
//! Not the packed calls: DuckDB's columns already compress a trace about fourfold, and at 10M
//! events the call blocks added 143 MB of byte strings and as much again of free blocks to a
//! 253 MB file (and 6 s to the finish) for 1.3 s of explain's load; the sorted durations add
//! 20 MB and make a whole trace's stats five times faster. The step blocks hold only the labels
//! and the calls that can end a step: a window's steps are numbered from the trace's start, and
//! DuckDB handed the 8M step rows of a 100M-event trace over through Arrow in 2.8 s (at 10M events:
//! 0.8M rows in 12 MB of blocks, the steps of a window 0.29 -> 0.04 s).

use causeway_model::codes::OpCode;
use causeway_store::summary::DurationSummary;
use causeway_store::{EventFilter, SlimEvent};
use duckdb::{params, params_from_iter, Connection};

use super::reader::{ints, slim_rows, val, where_clause, READER_MEMORY_MIB, SLIM_SELECT};
use crate::packed::{calls, durations};
use crate::schema::{extent_if_current, extent_value, RecordedExtent, EXTENT_SQL, FINISHED_EXTENT_KEY, LAST_ID_SQL};
use crate::{Result, StoreError};

/// (Re)builds the sorted durations from `events`, then records the extent that vouches for them.
pub(crate) fn build(conn: &Connection) -> Result<()> {
    build_op_durations(conn)?;
    build_step_blocks(conn)?;
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

/// The step rows packed in (timestamp, id) order ([`calls::STEP_TABLE`]).
fn build_step_blocks(conn: &Connection) -> Result<()> {
    let table = calls::STEP_TABLE;
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (block BIGINT NOT NULL, min_ts BIGINT NOT NULL, \
         max_ts BIGINT NOT NULL, calls BIGINT NOT NULL, data BLOB NOT NULL)"
    ))
    .map_err(engine)?;
    let mut insert = conn
        .prepare(&format!("INSERT INTO {table} (block, min_ts, max_ts, calls, data) VALUES (?, ?, ?, ?, ?)"))
        .map_err(engine)?;
    let mut packer = calls::Packer::default();
    let mut put = |b: calls::Block| {
        insert.execute(params![b.index, b.min_ts, b.max_ts, b.calls, b.data]).map(|_| ()).map_err(engine)
    };
    // the step rows in the order the blocks hold them, as `scan_slim` reads rows
    let filter = EventFilter { ops: Some(causeway_model::codes::step_ops()), ..Default::default() };
    let (clause, params) = where_clause(&filter);
    let mut select = conn.prepare(&format!("{SLIM_SELECT}{clause} ORDER BY timestamp, id")).map_err(engine)?;
    let mut rows = Vec::new();
    for b in select.query_arrow(params_from_iter(params)).map_err(engine)? {
        slim_rows(&b, &mut rows)?;
        for row in rows.drain(..) {
            if let Some(block) = packer.push(&row) {
                put(block)?;
            }
        }
    }
    packer.finish().map_or(Ok(()), put)
}

/// [`calls::scan`] of the step blocks of `conn` that `filter`'s window meets: their numbers first,
/// then each block's bytes by its number. One query of every block `ORDER BY block` sorted the
/// blobs themselves under the reader's bounded engine memory, and at 100M events (8M step rows,
/// 120 blocks of about 1 MB) that ran out of it.
pub(crate) fn scan_steps(conn: &Connection, filter: &EventFilter, f: &mut dyn FnMut(SlimEvent)) -> Result<u64> {
    let (from, to) = (filter.window.from_ns.unwrap_or(i64::MIN), filter.window.to_ns.unwrap_or(i64::MAX));
    let table = calls::STEP_TABLE;
    let wanted: Vec<(i64, i64)> = conn
        .prepare(&format!("SELECT block, calls FROM {table} WHERE max_ts >= ? AND min_ts <= ? ORDER BY block"))
        .and_then(|mut st| st.query_map(params![from, to], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(engine)?;
    let mut data = conn.prepare(&format!("SELECT data FROM {table} WHERE block = ?")).map_err(engine)?;
    let mut blocks = wanted.into_iter().map(|(block, count)| -> Result<calls::StoredBlock> {
        let bytes: Vec<u8> = data.query_row(params![block], |r| r.get(0)).map_err(engine)?;
        Ok((block, count.max(0) as usize, bytes))
    });
    calls::scan(table, &mut blocks, filter, f)
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
    let keys: Vec<durations::DurationsKey> = conn
        .prepare(&durations::keys_sql(per_process))
        .and_then(|mut st| {
            st.query_map([], |r| {
                let op = OpCode::new(r.get::<_, i64>(1)? as u8, r.get::<_, i64>(2)? as u16);
                Ok((r.get(0)?, op, r.get(3)?, r.get(4)?))
            })?
            .collect()
        })
        .map_err(engine)?;
    let mut data = conn.prepare(&durations::data_sql()).map_err(engine)?;
    let mut rows = durations::with_data(keys, |pid, op| data_of(conn, &mut data, pid, op));
    durations::summary(&mut rows, extent, per_mille)
}

/// The most engine memory a reader is given to read one op's sorted durations.
const PACKED_READ_MAX_MIB: u64 = 16 << 10;

/// One op's sorted durations (`data`: [`durations::data_sql`] prepared). A reader's engine memory is bounded ([`READER_MEMORY_MIB`]) and
/// DuckDB reads a blob whole into its buffers: an op's blob that does not fit (tens of MiB at 100M
/// events) raises the bound for this read only ([`with_memory_for`]).
fn data_of(conn: &Connection, data: &mut duckdb::Statement, pid: i64, op: OpCode) -> Result<Vec<u8>> {
    let read = || data.query_row(params![pid, op.source, op.op], |r| r.get::<_, Vec<u8>>(0));
    with_memory_for(conn, READER_MEMORY_MIB, read).map(|(data, _)| data)
}

/// `read` on `conn`, whose engine memory is bounded to `bound_mib`: while it fails for want of
/// memory, again with twice the bound (up to [`PACKED_READ_MAX_MIB`]); the bound is put back after.
/// Returns what it read and the bound it took.
fn with_memory_for<T>(
    conn: &Connection,
    bound_mib: u64,
    mut read: impl FnMut() -> duckdb::Result<T>,
) -> Result<(T, u64)> {
    let set = |mib: u64| conn.execute_batch(&format!("SET memory_limit = '{mib}MiB'")).map_err(engine);
    let mut limit = bound_mib;
    let result = loop {
        match read() {
            Err(e) if e.to_string().contains("Out of Memory") && limit < PACKED_READ_MAX_MIB => {
                limit *= 2;
                tracing::debug!(limit_mib = limit, "reading packed durations, again with more memory: {e}");
                set(limit)?;
            }
            r => break r.map_err(engine),
        }
    };
    if limit != bound_mib {
        set(bound_mib)?;
    }
    Ok((result?, limit))
}

fn engine(e: duckdb::Error) -> StoreError {
    StoreError::Engine(format!("packed structures: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_larger_than_the_bound_is_read_with_more_memory_and_the_bound_put_back() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (data BLOB); \
             INSERT INTO t SELECT string_agg(chr(65 + (i % 26)::INTEGER), '')::BLOB FROM range(8000000) r(i); \
             SET memory_limit = '2MiB';",
        )
        .unwrap();
        let (data, took) =
            with_memory_for(&conn, 2, || conn.query_row("SELECT data FROM t", [], |r| r.get::<_, Vec<u8>>(0))).unwrap();
        assert_eq!(data.len(), 8_000_000);
        assert_eq!(&data[..3], b"ABC");
        assert!(took > 2, "the 8 MB blob was read within 2 MiB: the test reads nothing large");
        let limit: String = conn.query_row("SELECT current_setting('memory_limit')", [], |r| r.get(0)).unwrap();
        assert!(limit.starts_with("2.0 MiB") || limit.starts_with("2MiB") || limit.starts_with("2.0MiB"), "{limit}");
    }

    #[test]
    fn the_step_rows_come_from_their_blocks_as_sql_reads_them_and_a_writer_drops_the_blocks() {
        use crate::{EngineWriter, SyntheticTrace};
        use causeway_store::TraceStore;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.duckdb");
        let session =
            causeway_model::SessionInfo { started_at_ns: 1_000, tool_version: "test".into(), ..Default::default() };
        let mut w = super::super::DuckDbWriter::create(&path, &session).unwrap();
        let events = SyntheticTrace::new(5, 1_000_000_000).take(1_200_000);
        w.write_batches([events.as_slice()]).unwrap();
        w.finish(2_000).unwrap();
        let blocks = |path: &std::path::Path| -> Option<i64> {
            Connection::open(path)
                .unwrap()
                .query_row(&format!("SELECT sum(calls) FROM {}", calls::STEP_TABLE), [], |r| r.get(0))
                .ok()
        };
        let store = super::super::DuckDbStore::open(&path).unwrap();
        let window = causeway_model::time::TimeWindow { from_ns: Some(events[100_000].ts_ns), to_ns: None };
        for filter in [
            EventFilter { ops: Some(causeway_model::codes::step_ops()), ..Default::default() },
            EventFilter {
                ops: Some(causeway_model::codes::step_ops()),
                window,
                pid: Some(events[7].pid),
                ..Default::default()
            },
        ] {
            let mut from_blocks = Vec::new();
            store.scan_slim(&filter, &mut |e| from_blocks.push(e)).unwrap();
            let by_sql: Vec<SlimEvent> = store.events(&filter).unwrap().iter().map(SlimEvent::of).collect();
            assert!(!by_sql.is_empty() && from_blocks == by_sql, "{} vs {} rows", from_blocks.len(), by_sql.len());
        }
        let all = EventFilter { ops: Some(causeway_model::codes::step_ops()), ..Default::default() };
        assert_eq!(blocks(&path), Some(store.events(&all).unwrap().len() as i64), "more than one block, all rows");
        assert!(blocks(&path).unwrap() > 65_536, "{:?} step rows: one block only", blocks(&path));
        drop(store);
        let w = super::super::DuckDbWriter::create(&path, &session).unwrap();
        drop(w);
        assert_eq!(blocks(&path), None, "a writer that opens the trace drops them");
    }
}
