//! `under_way`: what the tracer's last look found still going on in the traced processes (calls
//! that had not returned, threads off the CPU since long ago), rewritten every few seconds while
//! a trace runs. Events are written when they end, so without it a hang is in the trace only once
//! the tracer stops cleanly (then the calls in flight become `events` rows with `ret_code` -1);
//! a tracer killed, or a trace read while it is still being written, would show nothing of a call
//! that never returned. Each look replaces the session's rows; a session that finished has none
//! (its last look went to `events`). The rows have the `events` columns they need, so a reader
//! decodes them as events, plus `seen_at`, when that look was taken (the calls' durations run to it).
//!
//! Held here, once for both engines: the SQL, its parameters and the decoding of a row.

use std::path::Path;

use causeway_model::codes::PrevState;
use causeway_model::{Event, SchedDetail};

use crate::cuda_tables::{damaged, fits_i32, fits_u32};
use crate::schema::SqlParam;
use crate::{Result, UnderWayRow};

/// The columns, in table order: the integers, then the two texts.
const INT_COLUMNS: [&str; 22] = [
    "seen_at",
    "session_id",
    "timestamp",
    "duration",
    "pid",
    "tid",
    "cpu",
    "source",
    "op",
    "arg0",
    "arg1",
    "arg2",
    "ret_code",
    "stack_hash",
    "gpu_id",
    "cgroup_id",
    "prev_state",
    "next_pid",
    "next_tid",
    "wake_ts",
    "waker_pid",
    "waker_tid",
];
const TEXT_COLUMNS: [&str; 2] = ["comm", "next_comm"];

/// Replaces a session's rows: this, then one [`insert_sql`] per row, in one transaction.
pub(crate) const CLEAR_SESSION_SQL: &str = "DELETE FROM under_way WHERE session_id = ?";

/// Appends one row.
pub(crate) fn insert_sql() -> String {
    let n = INT_COLUMNS.len() + TEXT_COLUMNS.len();
    format!(
        "INSERT INTO under_way ({}, {}) VALUES ({})",
        INT_COLUMNS.join(", "),
        TEXT_COLUMNS.join(", "),
        vec!["?"; n].join(", ")
    )
}

/// Every row, oldest look first (a finished session has none; a series keeps its parts' rows).
pub(crate) fn select_sql() -> String {
    format!(
        "SELECT {}, {} FROM under_way ORDER BY seen_at, pid, tid, timestamp",
        INT_COLUMNS.join(", "),
        TEXT_COLUMNS.join(", ")
    )
}

/// The parameters of [`insert_sql`] for event `e` seen at `seen_at` (unix ns) by session `session_id`.
/// An event without scheduler detail stores `prev_state` -1 (the `events` table's NULL).
pub(crate) fn params(seen_at: i64, session_id: i64, e: &Event) -> [SqlParam<'_>; 24] {
    let i = SqlParam::Int;
    let s = e.sched.as_ref();
    [
        i(seen_at),
        i(session_id),
        i(e.ts_ns),
        i(e.dur_ns),
        i(i64::from(e.pid)),
        i(i64::from(e.tid)),
        i(i64::from(e.cpu)),
        i(i64::from(e.source)),
        i(i64::from(e.op)),
        i(e.arg0),
        i(e.arg1),
        i(e.arg2),
        i(i64::from(e.ret_code)),
        i(e.stack_hash),
        i(i64::from(e.gpu_id)),
        i(e.cgroup_id),
        i(s.map_or(-1, |s| i64::from(s.prev_state.code()))),
        i(s.map_or(0, |s| i64::from(s.next_pid))),
        i(s.map_or(0, |s| i64::from(s.next_tid))),
        i(s.map_or(0, |s| s.wake_ts_ns)),
        i(s.map_or(0, |s| i64::from(s.waker_pid))),
        i(s.map_or(0, |s| i64::from(s.waker_tid))),
        SqlParam::Text(&e.comm),
        SqlParam::Text(s.map_or("", |s| s.next_comm.as_str())),
    ]
}

/// A row of [`select_sql`]: the small columns must fit.
pub(crate) fn row_from(db: &Path, n: [i64; 22], [comm, next_comm]: [String; 2]) -> Result<UnderWayRow> {
    let u32_of = |column: &str, v: i64| fits_u32(db, "under_way", column, v);
    let small = |column: &str, v: i64, max: i64| {
        if (0..=max).contains(&v) {
            Ok(v)
        } else {
            Err(damaged(db, format!("under_way.{column} holds {v}, out of range")))
        }
    };
    let sched = (n[16] >= 0).then(|| -> Result<SchedDetail> {
        Ok(SchedDetail {
            prev_state: PrevState::from_code(n[16]),
            next_pid: u32_of("next_pid", n[17])?,
            next_tid: u32_of("next_tid", n[18])?,
            next_comm,
            wake_ts_ns: n[19],
            waker_pid: u32_of("waker_pid", n[20])?,
            waker_tid: u32_of("waker_tid", n[21])?,
        })
    });
    Ok(UnderWayRow {
        seen_at_ns: n[0],
        event: Event {
            ts_ns: n[2],
            dur_ns: n[3],
            pid: u32_of("pid", n[4])?,
            tid: u32_of("tid", n[5])?,
            cpu: fits_i32(db, "under_way", "cpu", n[6])?,
            source: small("source", n[7], 255)? as u8,
            op: small("op", n[8], 65_535)? as u16,
            arg0: n[9],
            arg1: n[10],
            arg2: n[11],
            ret_code: fits_i32(db, "under_way", "ret_code", n[12])?,
            stack_hash: n[13],
            gpu_id: fits_i32(db, "under_way", "gpu_id", n[14])?,
            cgroup_id: n[15],
            comm,
            sched: sched.transpose()?,
            ..Default::default()
        },
    })
}

/// What the table is for ([`crate::schema::table_meaning`]).
pub(crate) const TABLE_MEANING: &str = "what the tracer's last look (every few seconds) found still going on: calls in flight for a second or more (ret_code -1) and their threads' open off-CPU intervals, with durations up to seen_at; a session that finished has no rows (its last look is in events); rows here mean the trace was read while running, or its tracer was killed";

/// What a column means ([`crate::schema::column_meaning`]): `seen_at`, and the `events` column of
/// the same name for the rest.
pub(crate) fn column_meaning(column: &str) -> &'static str {
    match column {
        "seen_at" => "unix ns of the look that found it: durations run to it",
        "prev_state" => "why the thread left the CPU (prev_states); -1 for a call",
        _ => crate::schema::column_meaning("events", column),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_decodes_to_the_event_it_was_written_from() {
        let call = Event {
            ts_ns: 1_000,
            dur_ns: 5_000_000_000,
            pid: 7,
            tid: 8,
            cpu: -1,
            source: 1,
            op: 3,
            arg0: 11,
            arg1: 12,
            arg2: 13,
            ret_code: -1,
            gpu_id: 0,
            comm: "python".into(),
            ..Default::default()
        };
        let switch = Event {
            sched: Some(SchedDetail {
                prev_state: PrevState::Sleeping,
                next_pid: 9,
                next_tid: 10,
                next_comm: "rsync".into(),
                wake_ts_ns: 0,
                waker_pid: 0,
                waker_tid: 0,
            }),
            ..call.clone()
        };
        for e in [call, switch] {
            let p = params(42, 1, &e);
            let ints: Vec<i64> =
                p[..22].iter().map(|v| if let SqlParam::Int(x) = v { *x } else { panic!("an int") }).collect();
            let texts: Vec<String> = p[22..]
                .iter()
                .map(|v| if let SqlParam::Text(t) = v { t.to_string() } else { panic!("a text") })
                .collect();
            let row = row_from(Path::new("t.db"), ints.try_into().unwrap(), texts.try_into().unwrap()).unwrap();
            assert_eq!(row.seen_at_ns, 42);
            assert_eq!(row.event, e);
        }
    }

    #[test]
    fn the_insert_names_every_column_once() {
        let sql = insert_sql();
        assert_eq!(sql.matches('?').count(), INT_COLUMNS.len() + TEXT_COLUMNS.len());
        assert!(select_sql().contains("seen_at, session_id, timestamp"));
    }
}
