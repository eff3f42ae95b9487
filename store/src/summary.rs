//! Duration summaries per (source, op) [and pid]: the one definition of nearest-rank, and the scan
//! that every engine can run. Engines that are faster at it override
//! [`TraceStore::duration_summary`](crate::TraceStore::duration_summary) (DuckDB computes the same
//! figures in SQL); the default here scans [`TraceStore::scan_durations`](crate::TraceStore::scan_durations)
//! and sorts in Rust.
//!
//! Nearest-rank: sort ascending, take the value at 1-based rank `ceil(per_mille * n / 1000)` (at
//! least 1), in integer arithmetic so that `0.95 * 20` is 19, not 19.000000000000004. DuckDB's
//! `quantile_disc(x, q)` computes the same rank in integer arithmetic when `q` is a DECIMAL
//! (the DuckDB engine relies on that, see `duckdb/summary.rs`); with a DOUBLE fraction it would use
//! floating point, so no query of ours passes one. `backends/tests/conformance_guard.rs` and the
//! conformance suite compare DuckDB's figures with this definition.

use std::collections::HashMap;

use causeway_model::codes::OpCode;

use crate::error::Result;
use crate::traits::{EventFilter, TraceStore};

/// Nearest-rank percentile of an ascending slice: the value at 1-based rank `ceil(per_mille * n / 1000)`
/// (rank at least 1). `None` for an empty slice.
pub fn nearest_rank(sorted: &[i64], per_mille: u32) -> Option<i64> {
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    Some(sorted[(nearest_rank_index(n, per_mille) - 1) as usize])
}

/// Nearest-rank values of every percentile in `per_mille` (any order) among unsorted `values`, in
/// the order asked; `values` is reordered. Linear time: successive selections narrow the slice
/// instead of a full sort, with the same result as [`nearest_rank`] on the sorted values.
pub fn nearest_ranks_unsorted(values: &mut [i64], per_mille: &[u32]) -> Option<Vec<i64>> {
    let n = values.len() as u64;
    if n == 0 {
        return None;
    }
    let mut asked: Vec<(u64, usize)> =
        per_mille.iter().enumerate().map(|(i, &p)| (nearest_rank_index(n, p) - 1, i)).collect();
    asked.sort_unstable();
    let mut out = vec![0; per_mille.len()];
    let mut lo = 0usize;
    let mut last: Option<(u64, i64)> = None;
    for (k, i) in asked {
        out[i] = match last {
            Some((pk, v)) if pk == k => v,
            _ => {
                let k = k as usize;
                let (_, v, _) = values[lo..].select_nth_unstable(k - lo);
                let v = *v;
                lo = k + 1;
                v
            }
        };
        last = Some((k, out[i]));
    }
    Some(out)
}

/// The 1-based nearest rank of percentile `per_mille` among `n > 0` values.
pub fn nearest_rank_index(n: u64, per_mille: u32) -> u64 {
    (u64::from(per_mille) * n).div_ceil(1000).clamp(1, n.max(1))
}

/// The SQL expression of the same definition (SQLite and DuckDB alike): the 1-based rank of
/// percentile `per_mille` among `n_expr` rows, `ceil(per_mille * n / 1000)` in integer arithmetic.
pub fn nearest_rank_sql(per_mille: u32, n_expr: &str) -> String {
    format!("MAX(1, ({per_mille} * ({n_expr}) + 999) / 1000)")
}

/// Exact figures of the durations of one (source, op), optionally of one pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSummary {
    /// The (source, op).
    pub op: OpCode,
    /// `Some` in per-process summaries.
    pub pid: Option<u32>,
    /// Events.
    pub count: u64,
    /// Sum of their durations.
    pub sum_ns: i128,
    /// Shortest duration.
    pub min_ns: i64,
    /// Longest duration.
    pub max_ns: i64,
    /// Nearest-rank values, one per requested per-mille, in the order asked.
    pub percentiles: Vec<i64>,
}

/// What [`TraceStore::duration_summary`](crate::TraceStore::duration_summary) returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DurationSummary {
    /// Events matching the filter.
    pub events: u64,
    /// Earliest timestamp among them (0 when none).
    pub first_ns: i64,
    /// Latest timestamp among them (0 when none).
    pub last_ns: i64,
    /// Per (source, op), sorted by (source, op).
    pub ops: Vec<OpSummary>,
    /// Per (pid, source, op) when asked, sorted by (pid, source, op).
    pub per_process: Vec<OpSummary>,
}

fn summarize(op: OpCode, pid: Option<u32>, d: &mut [i64], per_mille: &[u32]) -> OpSummary {
    OpSummary {
        op,
        pid,
        count: d.len() as u64,
        sum_ns: d.iter().map(|&x| x as i128).sum(),
        min_ns: d.iter().copied().min().unwrap_or(0),
        max_ns: d.iter().copied().max().unwrap_or(0),
        percentiles: nearest_ranks_unsorted(d, per_mille).unwrap_or_else(|| vec![0; per_mille.len()]),
    }
}

/// The default implementation: one scan, per-op vectors, sort, nearest rank.
pub fn summarize_by_scan<S: TraceStore + ?Sized>(
    store: &S,
    filter: &EventFilter,
    per_mille: &[u32],
    per_process: bool,
) -> Result<DurationSummary> {
    let mut by_op: HashMap<OpCode, Vec<i64>> = HashMap::new();
    let mut by_pid_op: HashMap<(u32, OpCode), Vec<i64>> = HashMap::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let events = store.scan_durations(filter, &mut |row| {
        first = first.min(row.ts_ns);
        last = last.max(row.ts_ns);
        by_op.entry(row.op).or_default().push(row.dur_ns);
        if per_process {
            by_pid_op.entry((row.pid, row.op)).or_default().push(row.dur_ns);
        }
    })?;
    let mut ops: Vec<OpSummary> = by_op.into_iter().map(|(op, mut d)| summarize(op, None, &mut d, per_mille)).collect();
    ops.sort_by_key(|o| (o.op.source, o.op.op));
    let mut procs: Vec<OpSummary> =
        by_pid_op.into_iter().map(|((pid, op), mut d)| summarize(op, Some(pid), &mut d, per_mille)).collect();
    procs.sort_by_key(|o| (o.pid, o.op.source, o.op.op));
    Ok(DurationSummary {
        events,
        first_ns: if events == 0 { 0 } else { first },
        last_ns: if events == 0 { 0 } else { last },
        ops,
        per_process: procs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_follows_the_definition() {
        let v: Vec<i64> = (1..=20).collect();
        // ceil(0.95 * 20) = 19 exactly: float arithmetic would give rank 20.
        assert_eq!(nearest_rank(&v, 950), Some(19));
        assert_eq!(nearest_rank(&v, 500), Some(10));
        assert_eq!(nearest_rank(&v, 990), Some(20));
        assert_eq!(nearest_rank(&[7], 10), Some(7));
        assert_eq!(nearest_rank(&[], 500), None);
        let v: Vec<i64> = (1..=7).collect();
        assert_eq!(nearest_rank(&v, 500), Some(4)); // ceil(3.5) = 4
        assert_eq!(nearest_rank(&v, 900), Some(7)); // ceil(6.3) = 7
        assert_eq!(nearest_rank_index(7, 500), 4);
        assert_eq!(nearest_rank_index(7, 900), 7);
        assert_eq!(nearest_rank_index(3, 0), 1);
    }

    #[test]
    fn selection_matches_the_sorted_definition() {
        // A fixed pseudo-random sequence with many duplicates, at every size up to 300.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for n in 0..300usize {
            let mut v: Vec<i64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 50) as i64
                })
                .collect();
            let asked = [990, 0, 500, 950, 500, 1000, 1, 750];
            let mut sorted = v.clone();
            sorted.sort_unstable();
            let want: Option<Vec<i64>> =
                (n > 0).then(|| asked.iter().map(|&p| nearest_rank(&sorted, p).unwrap()).collect());
            assert_eq!(nearest_ranks_unsorted(&mut v, &asked), want, "n = {n}");
        }
    }
}
