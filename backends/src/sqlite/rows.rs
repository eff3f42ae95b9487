//! Reading SQLite rows of any trace the SQLite engine opens (native, Ingero, converted): integers
//! whatever their storage class, the select list of full events with defaults for the columns a DB
//! lacks, and the decoding of those rows into [`Event`]s. Shared by the reader and by `convert`.

use rusqlite::types::ValueRef;
use rusqlite::Row;

use causeway_model::codes::PrevState;
use causeway_model::{Event, SchedDetail};

use crate::TraceInfo;

/// An integer column, whatever its storage class (Ingero stores some numbers as text); 0 when unreadable.
pub(crate) fn int(r: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    Ok(match r.get_ref(i)? {
        ValueRef::Integer(v) => v,
        ValueRef::Real(f) => f as i64,
        ValueRef::Text(t) => std::str::from_utf8(t).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0),
        _ => 0,
    })
}

/// Like [`int`], with NULL as `None`.
pub(crate) fn opt_int(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<i64>> {
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        _ => Some(int(r, i)?),
    })
}

/// `events` column expression, or `default AS name` when this DB lacks the column.
pub(crate) fn column_or_default(info: &TraceInfo, name: &str, default: &str) -> String {
    if info.has_column(name) {
        name.to_string()
    } else {
        format!("{default} AS {name}")
    }
}

/// The columns [`decode_event`] reads after the id, in order, each with the value read when a DB
/// lacks it (`None`: every trace has it).
const EVENT_COLUMNS: [(&str, Option<&str>); 23] = [
    ("timestamp", None),
    ("duration", None),
    ("pid", None),
    ("tid", None),
    ("cpu", Some("-1")),
    ("source", None),
    ("op", None),
    ("arg0", Some("0")),
    ("arg1", Some("0")),
    ("arg2", Some("0")),
    ("ret_code", Some("0")),
    ("stack_hash", Some("0")),
    ("gpu_id", Some("0")),
    ("cgroup_id", Some("0")),
    ("comm", Some("''")),
    ("prev_state", Some("NULL")),
    ("next_pid", Some("NULL")),
    ("next_tid", Some("NULL")),
    ("next_comm", Some("NULL")),
    ("wake_ts", Some("NULL")),
    ("waker_pid", Some("NULL")),
    ("waker_tid", Some("NULL")),
    ("launch_config", Some("NULL")),
];

/// Columns of [`event_select_list`] (the id and the event): what a caller selects after them starts here.
pub(crate) const EVENT_SELECT_WIDTH: usize = 1 + EVENT_COLUMNS.len();

/// The select list of a full event: the id column first (`id_expr`), then what [`decode_event`] reads.
pub(crate) fn event_select_list(info: &TraceInfo, id_expr: String) -> Vec<String> {
    let mut cols = vec![id_expr];
    cols.extend(EVENT_COLUMNS.iter().map(|(name, default)| select_expr(info, name, *default)));
    cols
}

/// The select expression of the event column `name` (one of [`EVENT_COLUMNS`]), with the value
/// read when this DB lacks it.
pub(crate) fn event_column(info: &TraceInfo, name: &str) -> String {
    let (name, default) = EVENT_COLUMNS.iter().find(|(n, _)| *n == name).expect("an events column");
    select_expr(info, name, *default)
}

fn select_expr(info: &TraceInfo, name: &str, default: Option<&str>) -> String {
    match default {
        Some(d) => column_or_default(info, name, d),
        None => name.to_string(),
    }
}

/// The scheduler detail in the seven columns from `first` on (`prev_state`, `next_pid`,
/// `next_tid`, `next_comm`, `wake_ts`, `waker_pid`, `waker_tid`); `None` when `prev_state` is NULL
/// (a row without it, or a DB that does not record it).
pub(crate) fn sched_detail(
    r: &Row<'_>,
    first: usize,
    text: fn(&Row<'_>, usize) -> rusqlite::Result<String>,
) -> rusqlite::Result<Option<SchedDetail>> {
    let Some(ps) = opt_int(r, first)? else { return Ok(None) };
    Ok(Some(SchedDetail {
        prev_state: PrevState::from_code(ps),
        next_pid: opt_int(r, first + 1)?.unwrap_or(0) as u32,
        next_tid: opt_int(r, first + 2)?.unwrap_or(0) as u32,
        next_comm: text(r, first + 3)?,
        wake_ts_ns: opt_int(r, first + 4)?.unwrap_or(0),
        waker_pid: opt_int(r, first + 5)?.unwrap_or(0) as u32,
        waker_tid: opt_int(r, first + 6)?.unwrap_or(0) as u32,
    }))
}

/// The event in columns 1 to 23 of a row selected with [`event_select_list`]; `text` reads the
/// string columns.
pub(crate) fn decode_event(
    r: &Row<'_>,
    text: fn(&Row<'_>, usize) -> rusqlite::Result<String>,
) -> rusqlite::Result<Event> {
    let sched = sched_detail(r, 16, text)?;
    Ok(Event {
        ts_ns: int(r, 1)?,
        dur_ns: int(r, 2)?,
        pid: int(r, 3)? as u32,
        tid: int(r, 4)? as u32,
        cpu: int(r, 5)? as i32,
        source: int(r, 6)? as u8,
        op: int(r, 7)? as u16,
        arg0: int(r, 8)?,
        arg1: int(r, 9)?,
        arg2: int(r, 10)?,
        ret_code: int(r, 11)? as i32,
        stack_hash: int(r, 12)?,
        gpu_id: int(r, 13)? as i32,
        cgroup_id: int(r, 14)?,
        comm: text(r, 15)?,
        sched,
        // NULL (no configuration, or a trace without the column) is 0.
        launch_config: opt_int(r, 23)?.unwrap_or(0),
    })
}
