//! Every event's duration, sorted per (source, op) and per (pid, source, op): built once at
//! `finish` (a derived structure, like the indexes), read by `duration_summary` of a whole trace.
//!
//! `stats` of a whole trace wants exact nearest-rank percentiles of every op, which otherwise
//! means reading the duration of every row (2 s at 10 million events) and selecting ranks. At
//! finish the durations are sorted once and stored as byte strings of variable-length integers
//! (the first value, then the differences: a sorted list's are small); a summary then decodes
//! them and reads each rank by index, with the same figures as
//! [`summarize_by_scan`](causeway_store::summary::summarize_by_scan). Believed, like the call
//! blocks, only with the extent recorded at the same finish.

use std::collections::HashMap;

use causeway_model::codes::OpCode;
use causeway_store::summary::{nearest_rank, DurationSummary, OpSummary};
use rusqlite::{params, Connection};

use super::varint::{put_signed, put_unsigned, Reader};
use crate::{Result, StoreError};

/// The table's name.
pub(crate) const TABLE: &str = "op_durations";

/// `pid` of the rows that hold every process's durations of an op.
const ALL_PROCESSES: i64 = -1;

/// (Re)builds the table from `events` (at finish).
pub(crate) fn build(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (pid INTEGER NOT NULL, source INTEGER NOT NULL, \
         op INTEGER NOT NULL, count INTEGER NOT NULL, sum_ns TEXT NOT NULL, data BLOB NOT NULL, \
         PRIMARY KEY (pid, source, op))"
    ))?;
    let mut by_pid_op: HashMap<(u32, OpCode), Vec<i64>> = HashMap::new();
    let mut st = conn.prepare("SELECT pid, source, op, duration FROM events")?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let op = OpCode::new(r.get::<_, i64>(1)? as u8, r.get::<_, i64>(2)? as u16);
        let dur: Option<i64> = r.get(3)?;
        by_pid_op.entry((r.get::<_, i64>(0)? as u32, op)).or_default().push(dur.unwrap_or(0));
    }
    let mut insert = conn.prepare(&format!(
        "INSERT INTO {TABLE} (pid, source, op, count, sum_ns, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    ))?;
    let mut put = |pid: i64, op: OpCode, sorted: &[i64]| {
        let sum: i128 = sorted.iter().map(|&d| i128::from(d)).sum();
        insert.execute(params![pid, op.source, op.op, sorted.len() as i64, sum.to_string(), encode(sorted)])
    };
    let mut ops: Vec<OpCode> = by_pid_op.keys().map(|k| k.1).collect();
    ops.sort_unstable();
    ops.dedup();
    for op in ops {
        // every process's durations of the op, then each process's own (sorted once, on its own)
        let mut all: Vec<i64> =
            by_pid_op.iter().filter(|(k, _)| k.1 == op).flat_map(|(_, v)| v.iter().copied()).collect();
        all.sort_unstable();
        put(ALL_PROCESSES, op, &all)?;
    }
    for ((pid, op), mut v) in by_pid_op {
        v.sort_unstable();
        put(i64::from(pid), op, &v)?;
    }
    Ok(())
}

/// The summary of every event of the trace (`events`, `first_ns`, `last_ns`: its recorded
/// extent) from the table.
pub(crate) fn summary(
    conn: &Connection,
    extent: (u64, i64, i64),
    per_mille: &[u32],
    per_process: bool,
) -> Result<DurationSummary> {
    let (events, first_ns, last_ns) = extent;
    let mut out = DurationSummary {
        events,
        first_ns: if events == 0 { 0 } else { first_ns },
        last_ns: if events == 0 { 0 } else { last_ns },
        ..Default::default()
    };
    let which = if per_process { "" } else { " WHERE pid = -1" };
    let mut st = conn.prepare(&format!(
        "SELECT pid, source, op, count, sum_ns, data FROM {TABLE}{which} ORDER BY pid, source, op"
    ))?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let pid: i64 = r.get(0)?;
        let op = OpCode::new(r.get::<_, i64>(1)? as u8, r.get::<_, i64>(2)? as u16);
        let count: i64 = r.get(3)?;
        let damaged = |e: &str| StoreError::Engine(format!("{TABLE}: ({pid}, {}, {}): {e}", op.source, op.op));
        let sum_ns: i128 = r.get::<_, String>(4)?.parse().map_err(|_| damaged("a sum that is not a number"))?;
        let data = r.get_ref(5)?.as_blob().map_err(|e| damaged(&e.to_string()))?;
        let sorted = decode(count.max(0) as usize, data).map_err(damaged)?;
        let (Some(&min_ns), Some(&max_ns)) = (sorted.first(), sorted.last()) else { continue };
        let s = OpSummary {
            op,
            pid: (pid != ALL_PROCESSES).then_some(pid as u32),
            count: sorted.len() as u64,
            sum_ns,
            min_ns,
            max_ns,
            percentiles: per_mille.iter().map(|&p| nearest_rank(&sorted, p).unwrap_or(0)).collect(),
        };
        if s.pid.is_some() {
            out.per_process.push(s)
        } else {
            out.ops.push(s)
        }
    }
    Ok(out)
}

/// Sorted values as the first, then the (non-negative) differences.
fn encode(sorted: &[i64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sorted.len() + 8);
    let mut last = None;
    for &v in sorted {
        match last {
            None => put_signed(&mut out, v),
            Some(l) => put_unsigned(&mut out, v.wrapping_sub(l) as u64),
        }
        last = Some(v);
    }
    out
}

fn decode(count: usize, data: &[u8]) -> std::result::Result<Vec<i64>, &'static str> {
    let mut r = Reader::new(data);
    let mut out = Vec::with_capacity(count);
    if count > 0 {
        let mut v = r.signed()?;
        out.push(v);
        for _ in 1..count {
            v = v.wrapping_add(r.unsigned()? as i64);
            out.push(v);
        }
    }
    if !r.at_end() {
        return Err("bytes left after its last duration");
    }
    if out.windows(2).any(|w| w[0] > w[1]) {
        return Err("durations out of order");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_durations_round_trip_and_damage_is_refused() {
        for v in [vec![], vec![-5], vec![i64::MIN, -1, 0, 0, 7, 1 << 40, i64::MAX], (0..1000).map(|i| i * i).collect()]
        {
            let data = encode(&v);
            assert_eq!(decode(v.len(), &data), Ok(v.clone()));
            if !v.is_empty() {
                assert!(decode(v.len() + 1, &data).is_err());
                assert_eq!(decode(v.len() - 1, &data), Err("bytes left after its last duration"));
            }
        }
    }
}
