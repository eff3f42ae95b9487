//! Every event's duration, sorted per (source, op) and per (pid, source, op): what an engine
//! stores in [`TABLE`] at finish and reads for `duration_summary` of a whole trace.
//!
//! `stats` of a whole trace wants exact nearest-rank percentiles of every op, which otherwise
//! means reading the duration of every row (2 s at 10 million events in SQLite) and selecting
//! ranks. At finish the durations are sorted once and stored as byte strings of variable-length
//! integers (the first value, then the differences: a sorted list's are small); a summary then
//! decodes them and reads each rank by index, with the same figures as
//! [`summarize_by_scan`](causeway_store::summary::summarize_by_scan) (the conformance suite
//! compares them).

use std::collections::HashMap;

use causeway_model::codes::OpCode;
use causeway_store::summary::{nearest_rank_index, DurationSummary, OpSummary};

use super::varint::{put_signed, put_unsigned, Reader};
use crate::{Result, StoreError};

/// The table's name (in both engines).
pub(crate) const TABLE: &str = "op_durations";

/// `pid` of the rows that hold every process's durations of an op.
const ALL_PROCESSES: i64 = -1;

/// The query, in both engines' SQL, of what the table is built from.
pub(crate) const SOURCE_SQL: &str = "SELECT pid, source, op, duration FROM events";

/// One row of the table: (pid or -1, op, count, sum as decimal text, sorted durations packed).
pub(crate) type DurationsRow = (i64, OpCode, i64, String, Vec<u8>);

/// The durations of a trace's events, grouped while they are read.
#[derive(Default)]
pub(crate) struct Grouper {
    by_pid_op: HashMap<(u32, OpCode), Vec<i64>>,
}

impl Grouper {
    pub(crate) fn add(&mut self, pid: u32, op: OpCode, dur: i64) {
        self.by_pid_op.entry((pid, op)).or_default().push(dur);
    }

    /// The table's rows: every process's durations of each op (pid -1), then each process's.
    pub(crate) fn rows(self) -> impl Iterator<Item = DurationsRow> {
        let mut ops: Vec<OpCode> = self.by_pid_op.keys().map(|k| k.1).collect();
        ops.sort_unstable();
        ops.dedup();
        let all: Vec<DurationsRow> = ops
            .into_iter()
            .map(|op| {
                let mut v: Vec<i64> =
                    self.by_pid_op.iter().filter(|(k, _)| k.1 == op).flat_map(|(_, v)| v.iter().copied()).collect();
                v.sort_unstable();
                row(ALL_PROCESSES, op, &v)
            })
            .collect();
        all.into_iter().chain(self.by_pid_op.into_iter().map(|((pid, op), mut v)| {
            v.sort_unstable();
            row(i64::from(pid), op, &v)
        }))
    }
}

fn row(pid: i64, op: OpCode, sorted: &[i64]) -> DurationsRow {
    let sum: i128 = sorted.iter().map(|&d| i128::from(d)).sum();
    (pid, op, sorted.len() as i64, sum.to_string(), encode(sorted))
}

/// The table, in both engines' SQL (SQLite takes the type names by affinity).
pub(crate) fn create_sql() -> String {
    format!(
        "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (pid BIGINT NOT NULL, source BIGINT NOT NULL, \
         op BIGINT NOT NULL, count BIGINT NOT NULL, sum_ns VARCHAR NOT NULL, data BLOB NOT NULL, \
         PRIMARY KEY (pid, source, op))"
    )
}

/// One [`DurationsRow`] into the table: pid, source, op, count, sum, data.
pub(crate) fn insert_sql() -> String {
    format!("INSERT INTO {TABLE} (pid, source, op, count, sum_ns, data) VALUES (?, ?, ?, ?, ?, ?)")
}

/// The rows a summary reads (every process's only, unless `per_process`), without their data, as
/// [`summary`] wants them: pid, source, op, count, sum, ordered by pid, source, op. Each row's data
/// is read on its own ([`data_sql`]) as the summary reaches it: one op's sorted durations are held
/// at a time (at 100M events one op's are tens of MiB).
pub(crate) fn keys_sql(per_process: bool) -> String {
    let which = if per_process { "" } else { " WHERE pid = -1" };
    format!("SELECT pid, source, op, count, sum_ns FROM {TABLE}{which} ORDER BY pid, source, op")
}

/// The data of one row, by its key: pid, source, op.
pub(crate) fn data_sql() -> String {
    format!("SELECT data FROM {TABLE} WHERE pid = ? AND source = ? AND op = ?")
}

/// A row of [`keys_sql`]: pid, op, count, sum.
pub(crate) type DurationsKey = (i64, OpCode, i64, String);

/// The rows of `keys` with their data, read by `data_of` one at a time as they are reached.
pub(crate) fn with_data<'a>(
    keys: Vec<DurationsKey>,
    mut data_of: impl FnMut(i64, OpCode) -> Result<Vec<u8>> + 'a,
) -> impl Iterator<Item = Result<DurationsRow>> + 'a {
    keys.into_iter().map(move |(pid, op, count, sum)| Ok((pid, op, count, sum, data_of(pid, op)?)))
}

/// The summary of every event of the trace (`extent`: its events, first and last timestamp)
/// from the table's `rows` (those [`keys_sql`] selects, in its order, with their data).
pub(crate) fn summary(
    rows: &mut dyn Iterator<Item = Result<DurationsRow>>,
    extent: (u64, i64, i64),
    per_mille: &[u32],
) -> Result<DurationSummary> {
    let (events, first_ns, last_ns) = extent;
    let mut out = DurationSummary {
        events,
        first_ns: if events == 0 { 0 } else { first_ns },
        last_ns: if events == 0 { 0 } else { last_ns },
        ..Default::default()
    };
    for r in rows {
        let (pid, op, count, sum, data) = r?;
        let damaged = |e: &str| StoreError::Engine(format!("{TABLE}: ({pid}, {}, {}): {e}", op.source, op.op));
        let sum_ns: i128 = sum.parse().map_err(|_| damaged("a sum that is not a number"))?;
        let n = count.max(0) as u64;
        if n == 0 {
            continue;
        }
        // the ranks asked, read as the walk passes them: nothing is held but the figures
        let mut wanted: Vec<(u64, usize)> =
            per_mille.iter().enumerate().map(|(i, &p)| (nearest_rank_index(n, p) - 1, i)).collect();
        wanted.sort_unstable();
        let mut percentiles = vec![0; per_mille.len()];
        let (mut next, mut min_ns, mut max_ns) = (0, 0, 0);
        walk(n, &data, &mut |i, v| {
            if i == 0 {
                min_ns = v;
            }
            max_ns = v;
            while wanted.get(next).is_some_and(|w| w.0 == i) {
                percentiles[wanted[next].1] = v;
                next += 1;
            }
        })
        .map_err(damaged)?;
        let s = OpSummary {
            op,
            pid: (pid != ALL_PROCESSES).then_some(pid as u32),
            count: n,
            sum_ns,
            min_ns,
            max_ns,
            percentiles,
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

/// Calls `f` with the index and value of each of the `count` sorted values in `data`, checking
/// that they are all there, in order, and nothing else.
fn walk(count: u64, data: &[u8], f: &mut dyn FnMut(u64, i64)) -> std::result::Result<(), &'static str> {
    let mut r = Reader::new(data);
    let mut v = 0i64;
    for i in 0..count {
        let next = if i == 0 { r.signed()? } else { v.wrapping_add(r.unsigned()? as i64) };
        if i > 0 && next < v {
            return Err("durations out of order");
        }
        v = next;
        f(i, v);
    }
    if !r.at_end() {
        return Err("bytes left after its last duration");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(count: usize, data: &[u8]) -> std::result::Result<Vec<i64>, &'static str> {
        let mut out = Vec::new();
        walk(count as u64, data, &mut |_, v| out.push(v))?;
        Ok(out)
    }

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
        // a difference that wraps below the previous value is damage, not a duration
        let mut data = encode(&[5, 9]);
        data.truncate(1);
        put_unsigned(&mut data, u64::MAX);
        assert_eq!(decode(2, &data), Err("durations out of order"));
    }

    #[test]
    fn a_summary_reads_the_nearest_ranks_it_is_asked_for_in_any_order() {
        let op = causeway_model::codes::op::CUDA_STREAM_SYNC;
        let mut g = Grouper::default();
        for (pid, d) in [(1, 30), (2, 10), (1, 20), (2, 40), (1, 50), (1, 20), (2, 7)] {
            g.add(pid, op, d);
        }
        let mut rows: Vec<DurationsRow> = g.rows().collect();
        rows.sort_by_key(|r| (r.0, r.1)); // as the engines' SELECT orders them
        let asked = [990, 0, 500, 1000, 500];
        let s = summary(&mut rows.into_iter().map(Ok), (7, 1, 2), &asked).unwrap();
        let all = [7, 10, 20, 20, 30, 40, 50];
        let want: Vec<i64> = asked.iter().map(|&p| causeway_store::summary::nearest_rank(&all, p).unwrap()).collect();
        assert_eq!((s.ops.len(), s.per_process.len()), (1, 2));
        assert_eq!((s.ops[0].count, s.ops[0].sum_ns, s.ops[0].min_ns, s.ops[0].max_ns), (7, 177, 7, 50));
        assert_eq!(s.ops[0].percentiles, want);
        assert_eq!(
            s.per_process.iter().map(|p| (p.pid, p.count, p.max_ns)).collect::<Vec<_>>(),
            [(Some(1), 4, 50), (Some(2), 3, 40)]
        );
    }
}
