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
use causeway_store::summary::{nearest_rank, DurationSummary, OpSummary};

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

/// The `WHERE` (with its leading space, or empty) of the rows a summary reads.
pub(crate) fn rows_wanted(per_process: bool) -> &'static str {
    if per_process {
        ""
    } else {
        " WHERE pid = -1"
    }
}

/// The summary of every event of the trace (`extent`: its events, first and last timestamp)
/// from the table's `rows` (those [`rows_wanted`] selects, ordered by pid, source, op).
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
        let sorted = decode(count.max(0) as usize, &data).map_err(damaged)?;
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
