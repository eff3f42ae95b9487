//! Statistics computed inside DuckDB: per (source, op) [and pid] count, sum, min, max and
//! nearest-rank percentiles, with the crate's one definition of the rank (`ceil(per_mille * n /
//! 1000)`, integer arithmetic, at least 1; see [`crate::summary`]).
//!
//! Not what `causeway stats` uses: measured side by side (`analysis/benches/engines.rs`), an Arrow
//! scan with selections in Rust (the default `TraceStore::duration_summary`) is 2-2.5x faster on
//! 10M events and needs a third of the memory, because DuckDB sorts each group's list on one
//! thread. It stays for that comparison, and the conformance suite holds both to the same figures.
//!
//! Each group's durations are collected and sorted by DuckDB (`list_sort(list(duration))`) and the
//! value at the nearest rank is read with 1-based list indexing. DuckDB's own `quantile_disc` is
//! not used: it takes a floating-point fraction and its definition is DuckDB's (it agreed with
//! nearest-rank on every case the tests compare, see `backends/tests/conformance_guard.rs`).

use causeway_model::codes::OpCode;

use super::reader::{ints, texts, where_clause, DuckDbStore};
use crate::error::{Result, StoreError};
use crate::store::EventFilter;
use crate::summary::{DurationSummary, OpSummary};

/// The DuckDB expression of the 1-based nearest rank of `per_mille` among `n` rows.
pub fn nearest_rank_duckdb(per_mille: u32, n: &str) -> String {
    format!("greatest(1, ({per_mille} * {n} + 999) // 1000)")
}

fn groups_sql(clause: &str, keys: &str, per_mille: &[u32]) -> String {
    let picks: String =
        per_mille.iter().map(|&p| format!(", l[{}]", nearest_rank_duckdb(p, "n"))).collect::<Vec<_>>().join("");
    format!(
        "WITH g AS (SELECT {keys}, count(*) AS n, CAST(sum(duration) AS VARCHAR) AS s, min(duration) AS mn, \
         max(duration) AS mx, list_sort(list(duration)) AS l FROM events{clause} GROUP BY {keys}) \
         SELECT {keys}, n, s, mn, mx{picks} FROM g ORDER BY {keys}"
    )
}

fn read_groups(store: &DuckDbStore, sql: &str, params: &[i64], with_pid: bool, k: usize) -> Result<Vec<OpSummary>> {
    let mut out = Vec::new();
    let off = usize::from(with_pid);
    store.for_batches(sql, params, &mut |b| {
        let pid = if with_pid { Some(ints(b, 0)?) } else { None };
        let (s, o, n) = (ints(b, off)?, ints(b, off + 1)?, ints(b, off + 2)?);
        let sum = texts(b, off + 3)?;
        let (mn, mx) = (ints(b, off + 4)?, ints(b, off + 5)?);
        let ps: Vec<_> = (0..k).map(|i| ints(b, off + 6 + i)).collect::<Result<_>>()?;
        for r in 0..b.num_rows() {
            out.push(OpSummary {
                op: OpCode::new(s.value(r) as u8, o.value(r) as u16),
                pid: pid.as_ref().map(|p| p.value(r) as u32),
                count: n.value(r).max(0) as u64,
                sum_ns: sum.value(r).parse().map_err(|e| StoreError::Engine(format!("sum {:?}: {e}", sum.value(r))))?,
                min_ns: mn.value(r),
                max_ns: mx.value(r),
                percentiles: ps.iter().map(|p| p.value(r)).collect(),
            });
        }
        Ok(())
    })?;
    Ok(out)
}

/// [`crate::TraceStore::duration_summary`] computed by DuckDB.
pub fn summarize_in_engine(
    store: &DuckDbStore,
    filter: &EventFilter,
    per_mille: &[u32],
    per_process: bool,
) -> Result<DurationSummary> {
    let (clause, params) = where_clause(filter);
    let (events, first, last): (i64, Option<i64>, Option<i64>) = store.with_conn(|c| {
        c.query_row(
            &format!("SELECT count(*), min(timestamp), max(timestamp) FROM events{clause}"),
            duckdb::params_from_iter(params.iter()),
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    })?;
    let ops = read_groups(store, &groups_sql(&clause, "source, op", per_mille), &params, false, per_mille.len())?;
    let per_process = if per_process {
        read_groups(store, &groups_sql(&clause, "pid, source, op", per_mille), &params, true, per_mille.len())?
    } else {
        Vec::new()
    };
    Ok(DurationSummary {
        events: events.max(0) as u64,
        first_ns: first.unwrap_or(0),
        last_ns: last.unwrap_or(0),
        ops,
        per_process,
    })
}
