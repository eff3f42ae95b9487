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

use super::reader::{ints, val, READER_MEMORY_MIB};
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
}
