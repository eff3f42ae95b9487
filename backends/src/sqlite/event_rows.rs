//! Inserting event rows into a native SQLite trace: many rows per statement
//! ([`ROWS_PER_INSERT`]), each value bound in place, so a statement's step (and its reset) is paid
//! once per chunk of rows instead of once per row. Rows go in their order (ids ascending: SQLite
//! appends to the end of the table's b-tree); a row without scheduler detail (most: GPU calls)
//! binds NULL for those seven columns. What is left at the end of a commit goes through the
//! one-row statement.

use std::sync::OnceLock;

use rusqlite::{CachedStatement, Transaction};

use causeway_model::Event;

/// Rows one multi-row INSERT carries.
pub(crate) const ROWS_PER_INSERT: usize = 32;

/// The columns every event row binds, in binding order. The id is bound too: a series of files
/// continues one id sequence (see `SqliteWriter::create_part`).
const EVENT_COLUMNS: [&str; 18] = [
    "id",
    "timestamp",
    "pid",
    "tid",
    "source",
    "op",
    "duration",
    "gpu_id",
    "arg0",
    "arg1",
    "arg2",
    "ret_code",
    "stack_hash",
    "cgroup_id",
    "comm",
    "session_id",
    "cpu",
    "launch_config",
];

/// The scheduler columns a `sched_switch` row binds after the event columns.
const SCHED_COLUMNS: [&str; 7] =
    ["prev_state", "next_pid", "next_tid", "next_comm", "wake_ts", "waker_pid", "waker_tid"];

/// Values one row binds.
const WIDTH: usize = EVENT_COLUMNS.len() + SCHED_COLUMNS.len();

/// `INSERT INTO events (...) VALUES (?, ...), ...` for `rows` rows.
fn insert_sql(rows: usize) -> String {
    let columns: Vec<&str> = EVENT_COLUMNS.iter().chain(&SCHED_COLUMNS).copied().collect();
    let tuple = format!("({})", vec!["?"; WIDTH].join(", "));
    format!("INSERT INTO events ({}) VALUES {}", columns.join(", "), vec![tuple; rows].join(", "))
}

/// The two statements: one row, and `ROWS_PER_INSERT` rows.
fn statements() -> &'static [String; 2] {
    static SQL: OnceLock<[String; 2]> = OnceLock::new();
    SQL.get_or_init(|| [insert_sql(1), insert_sql(ROWS_PER_INSERT)])
}

/// Bind one row's values from parameter `base + 1` on.
fn bind_row(st: &mut CachedStatement<'_>, base: usize, id: i64, session_id: i64, e: &Event) -> rusqlite::Result<()> {
    // 0 (no configuration) is stored as NULL.
    let launch_config = (e.launch_config != 0).then_some(e.launch_config);
    st.raw_bind_parameter(base + 1, id)?;
    st.raw_bind_parameter(base + 2, e.ts_ns)?;
    st.raw_bind_parameter(base + 3, e.pid)?;
    st.raw_bind_parameter(base + 4, e.tid)?;
    st.raw_bind_parameter(base + 5, e.source)?;
    st.raw_bind_parameter(base + 6, e.op)?;
    st.raw_bind_parameter(base + 7, e.dur_ns)?;
    st.raw_bind_parameter(base + 8, e.gpu_id)?;
    st.raw_bind_parameter(base + 9, e.arg0)?;
    st.raw_bind_parameter(base + 10, e.arg1)?;
    st.raw_bind_parameter(base + 11, e.arg2)?;
    st.raw_bind_parameter(base + 12, e.ret_code)?;
    st.raw_bind_parameter(base + 13, e.stack_hash)?;
    st.raw_bind_parameter(base + 14, e.cgroup_id)?;
    st.raw_bind_parameter(base + 15, e.comm.as_str())?;
    st.raw_bind_parameter(base + 16, session_id)?;
    st.raw_bind_parameter(base + 17, e.cpu)?;
    st.raw_bind_parameter(base + 18, launch_config)?;
    let b = base + EVENT_COLUMNS.len();
    match &e.sched {
        Some(s) => {
            st.raw_bind_parameter(b + 1, s.prev_state.code())?;
            st.raw_bind_parameter(b + 2, s.next_pid)?;
            st.raw_bind_parameter(b + 3, s.next_tid)?;
            st.raw_bind_parameter(b + 4, s.next_comm.as_str())?;
            st.raw_bind_parameter(b + 5, s.wake_ts_ns)?;
            st.raw_bind_parameter(b + 6, s.waker_pid)?;
            st.raw_bind_parameter(b + 7, s.waker_tid)?;
        }
        // bindings outlive an execution: a row without detail clears what the last one bound
        None => {
            for k in 1..=SCHED_COLUMNS.len() {
                st.raw_bind_parameter(b + k, rusqlite::types::Null)?;
            }
        }
    }
    Ok(())
}

/// Insert `rows` ((id, event)) through `st`, which takes exactly that many.
fn insert(st: &mut CachedStatement<'_>, session_id: i64, rows: &[(i64, &Event)]) -> rusqlite::Result<()> {
    for (i, (id, e)) in rows.iter().enumerate() {
        bind_row(st, i * WIDTH, *id, session_id, e)?;
    }
    st.raw_execute()?;
    Ok(())
}

/// Insert every event of `batches` in `tx`, numbered from `first_id` in order; returns how many.
pub(crate) fn insert_events<'a>(
    tx: &Transaction<'_>,
    session_id: i64,
    first_id: i64,
    batches: impl IntoIterator<Item = &'a [Event]>,
) -> rusqlite::Result<u64> {
    let [one_sql, many_sql] = statements();
    let mut many = tx.prepare_cached(many_sql)?;
    let mut pending: Vec<(i64, &Event)> = Vec::with_capacity(ROWS_PER_INSERT);
    let mut n = 0u64;
    for e in batches.into_iter().flatten() {
        pending.push((first_id + n as i64, e));
        n += 1;
        if pending.len() == ROWS_PER_INSERT {
            insert(&mut many, session_id, &pending)?;
            pending.clear();
        }
    }
    if !pending.is_empty() {
        let mut one = tx.prepare_cached(one_sql)?;
        for row in &pending {
            insert(&mut one, session_id, std::slice::from_ref(row))?;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_carry_one_placeholder_per_value() {
        let one = insert_sql(1);
        assert!(one.starts_with("INSERT INTO events (id, timestamp, pid,"), "{one}");
        assert!(one.contains("waker_tid) VALUES ("), "{one}");
        assert_eq!(one.matches('?').count(), 25);
        assert_eq!(insert_sql(ROWS_PER_INSERT).matches('?').count(), 25 * ROWS_PER_INSERT);
    }
}
