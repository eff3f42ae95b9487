//! The WHERE clauses of the SQLite engine's event reads: a filter's conditions (shared with
//! DuckDB in `reader_common`) plus the terms that let SQLite's planner reach the indexes a
//! finished trace holds (`schema::indexes`). Every added term is implied by the filter, so a
//! trace without those indexes (still being written, older, an Ingero DB) returns the same rows.

use std::collections::BTreeSet;

use rusqlite::types::Value;

use causeway_model::codes::op;
use causeway_store::EventFilter;

use crate::reader_common::{self, and_where};
use crate::schema;

/// The filter's WHERE clause with the terms that let SQLite's planner find a finished trace's
/// access paths (`schema::indexes`), each implied by the filter, so the rows are the same with or
/// without the indexes: for an op filter, `source IN (..) AND op IN (..)` (an OR of (source, op)
/// pairs with bound values reads no index), then the literal condition of the partial index that
/// holds every row asked for (partial indexes are used only for their condition word for word).
pub(crate) fn where_clause(f: &EventFilter) -> (String, Vec<Value>) {
    let (mut clause, mut params) = reader_common::where_clause(f);
    let partial = match (&f.ops, &f.sources) {
        (Some(ops), _) if !ops.is_empty() => {
            let sources: BTreeSet<i64> = ops.iter().map(|o| i64::from(o.source)).collect();
            let codes: BTreeSet<i64> = ops.iter().map(|o| i64::from(o.op)).collect();
            clause = and_where(
                &clause,
                &format!("source IN ({}) AND op IN ({})", placeholders(sources.len()), placeholders(codes.len())),
            );
            params.extend(sources.into_iter().chain(codes));
            if ops.iter().all(|o| *o == op::SCHED_SWITCH) {
                Some(schema::switch_rows_condition())
            } else if ops.iter().all(|o| schema::is_other_row(*o)) {
                Some(schema::other_rows_condition())
            } else {
                None
            }
        }
        // a whole source outside the bulk classes
        (None, Some(sources)) if !sources.is_empty() && sources.iter().all(|&s| schema::is_other_source(s)) => {
            Some(schema::other_rows_condition())
        }
        _ => None,
    };
    if let Some(cond) = partial {
        clause = and_where(&clause, &cond);
    }
    (clause, params.into_iter().map(Value::Integer).collect())
}

/// `?, ?, ...` (`n` of them).
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::EngineWriter;
    use crate::{SqliteWriter, SyntheticTrace};
    use causeway_model::codes::{OpCode, Source, OPS};
    use causeway_model::time::TimeWindow;
    use causeway_model::SessionInfo;
    use rusqlite::Connection;

    /// A finished synthetic trace (switches, wakeups, block I/O among GPU calls) and a connection.
    fn finished_trace(dir: &std::path::Path) -> (Connection, Vec<causeway_model::Event>) {
        let path = dir.join("t.db");
        let events = SyntheticTrace::new(5, 1_000).take(20_000);
        let mut w = SqliteWriter::create(&path, &SessionInfo { started_at_ns: 1_000, ..Default::default() }).unwrap();
        w.write_batches([events.as_slice()]).unwrap();
        w.finish(2_000).unwrap();
        (Connection::open(&path).unwrap(), events)
    }

    /// The plan's words and the ids read with the access-path terms and with the filter's own
    /// conditions only.
    fn plan_and_rows(c: &Connection, f: &EventFilter) -> (String, Vec<i64>, Vec<i64>) {
        let (clause, params) = where_clause(f);
        let plan: Vec<String> = c
            .prepare(&format!("EXPLAIN QUERY PLAN SELECT id FROM events{clause}"))
            .unwrap()
            .query_map(rusqlite::params_from_iter(params.iter()), |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let ids = |clause: &str, params: Vec<Value>| -> Vec<i64> {
            let mut v: Vec<i64> = c
                .prepare(&format!("SELECT id FROM events{clause}"))
                .unwrap()
                .query_map(rusqlite::params_from_iter(params), |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            v.sort_unstable();
            v
        };
        let (plain, plain_params) = reader_common::where_clause(f);
        let with = ids(&clause, params);
        (plan.join("; "), with, ids(&plain, plain_params.into_iter().map(Value::Integer).collect()))
    }

    #[test]
    fn a_finished_trace_answers_switches_and_rare_rows_from_its_partial_indexes_with_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (c, events) = finished_trace(dir.path());
        let mid = events[events.len() / 2].ts_ns;
        let tids: Vec<u32> = events.iter().map(|e| e.tid).collect::<BTreeSet<_>>().into_iter().collect();
        let cases = [
            (
                EventFilter {
                    window: TimeWindow { from_ns: Some(mid), to_ns: None },
                    tids: Some(tids.clone()),
                    ops: Some(vec![op::SCHED_SWITCH]),
                    ..Default::default()
                },
                "idx_events_switches",
            ),
            (
                EventFilter { ops: Some(vec![op::SCHED_WAKEUP, op::PROCESS_FORK]), ..Default::default() },
                "idx_events_other",
            ),
            (
                EventFilter {
                    window: TimeWindow { from_ns: Some(mid), to_ns: None },
                    sources: Some(vec![Source::Io.code()]),
                    ..Default::default()
                },
                "idx_events_other",
            ),
        ];
        for (f, index) in cases {
            let (plan, with, plain) = plan_and_rows(&c, &f);
            assert!(plan.contains(index), "{f:?} reads {plan}, not {index}");
            assert!(!with.is_empty(), "{f:?} selects no row of the synthetic trace");
            assert_eq!(with, plain, "{f:?}: the added terms changed the rows");
        }
        // GPU calls are most of the rows: read from the table, never through an index
        let f = EventFilter { ops: Some(vec![op::CUDA_LAUNCH_KERNEL, op::SCHED_SWITCH]), ..Default::default() };
        let (plan, with, plain) = plan_and_rows(&c, &f);
        assert!(plan.starts_with("SCAN events") && !plan.contains("INDEX"), "{plan}");
        assert_eq!(with, plain);
    }

    #[test]
    fn the_partial_index_conditions_and_their_rust_tests_agree_on_every_op() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE events (source INTEGER, op INTEGER)").unwrap();
        for (source, code, ..) in OPS {
            c.execute("INSERT INTO events VALUES (?1, ?2)", (source, code)).unwrap();
        }
        let selected = |cond: String| -> BTreeSet<(u8, u16)> {
            c.prepare(&format!("SELECT source, op FROM events WHERE {cond}"))
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        let other: BTreeSet<(u8, u16)> =
            OPS.iter().filter(|o| schema::is_other_row(OpCode::new(o.0, o.1))).map(|o| (o.0, o.1)).collect();
        assert_eq!(selected(schema::other_rows_condition()), other);
        assert!(other.contains(&(op::PROCESS_FORK.source, op::PROCESS_FORK.op)));
        assert!(!other.contains(&(op::CUDA_LAUNCH_KERNEL.source, op::CUDA_LAUNCH_KERNEL.op)));
        let switch = op::SCHED_SWITCH;
        assert_eq!(selected(schema::switch_rows_condition()), BTreeSet::from([(switch.source, switch.op)]));
    }
}
