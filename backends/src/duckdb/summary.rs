//! Statistics computed inside DuckDB: per (source, op) [and pid] count, sum, min, max and
//! nearest-rank percentiles, with the crate's one definition of the rank (`ceil(per_mille * n /
//! 1000)`, at least 1; see [`crate::summary`]). What `causeway stats` uses on DuckDB traces:
//! measured side by side (`analysis/benches/engines.rs`) it is faster than the Arrow scan with
//! selections in Rust that SQLite traces use, because the values never leave the engine.
//!
//! The percentiles are DuckDB's `quantile_disc` with each fraction written as a DECIMAL literal
//! (`0.990`). For a DECIMAL fraction `q = k / 1000` DuckDB picks the 0-based index
//! `max(1, n - floor(n - n * q)) - 1` in integer arithmetic (`QuantileInterpolator<true>::Index`,
//! "integer arithmetic for accuracy"), which is `max(1, ceil(k * n / 1000)) - 1`: exactly
//! nearest-rank. A DOUBLE fraction would take a floating-point path instead, so the SQL never
//! passes one. The conformance suite holds this to the Rust definition on every engine.

use causeway_model::codes::OpCode;

use duckdb::arrow::array::AsArray;
use duckdb::arrow::compute::cast;
use duckdb::arrow::datatypes::{DataType, Int64Type};

use super::reader::{ints, texts, where_clause, DuckDbStore};
use crate::summary::{DurationSummary, OpSummary};
use crate::EventFilter;
use crate::{Result, StoreError};

/// `per_mille` as an exact DECIMAL fraction literal (`990` -> `0.990`), the form that makes
/// `quantile_disc` use integer arithmetic.
pub fn decimal_fraction(per_mille: u32) -> String {
    let p = per_mille.min(1000);
    format!("CAST({}.{:03} AS DECIMAL(4, 3))", p / 1000, p % 1000)
}

fn groups_sql(clause: &str, keys: &str, per_mille: &[u32]) -> String {
    let fractions: Vec<String> = per_mille.iter().map(|&p| decimal_fraction(p)).collect();
    let picks = if per_mille.is_empty() {
        String::new()
    } else {
        format!(", quantile_disc(duration, [{}])", fractions.join(", "))
    };
    format!(
        "SELECT {keys}, count(*) AS n, CAST(sum(duration) AS VARCHAR) AS s, min(duration) AS mn, \
         max(duration) AS mx{picks} FROM events{clause} GROUP BY {keys} ORDER BY {keys}"
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
        let ps = if k > 0 { Some(b.column(off + 6).as_list::<i32>().clone()) } else { None };
        for r in 0..b.num_rows() {
            let percentiles = match &ps {
                Some(l) => {
                    let v = cast(&l.value(r), &DataType::Int64)
                        .map_err(|e| StoreError::Engine(format!("quantiles: {e}")))?;
                    let v = v.as_primitive::<Int64Type>();
                    if v.len() != k {
                        return Err(StoreError::Engine(format!(
                            "quantile_disc gave {} values for {k} fractions",
                            v.len()
                        )));
                    }
                    v.values().to_vec()
                }
                None => Vec::new(),
            };
            out.push(OpSummary {
                op: OpCode::new(s.value(r) as u8, o.value(r) as u16),
                pid: pid.as_ref().map(|p| p.value(r) as u32),
                count: n.value(r).max(0) as u64,
                sum_ns: sum.value(r).parse().map_err(|e| StoreError::Engine(format!("sum {:?}: {e}", sum.value(r))))?,
                min_ns: mn.value(r),
                max_ns: mx.value(r),
                percentiles,
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
