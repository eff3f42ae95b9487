//! Reading traces from SQLite files: native Causeway traces and Ingero DBs (schema v0.8 to v0.10).
//!
//! Every file is opened read-only. Ingero DBs and finished native traces are opened `immutable=1`,
//! so the file stays byte-identical and no `-wal`/`-shm` sidecar appears (Ingero leaves its DBs in
//! WAL mode, where a plain read-only open would create them). A trace with pages in its `-wal` (one
//! being written, or one whose writer was killed or stopped by a full disk, which may hold even its
//! schema there) is opened `mode=ro` so the reader sees every commit.
//! Columns and tables a DB lacks are read as defaults, never as errors.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, Row};

use causeway_model::codes::OpCode;
use causeway_model::SessionInfo;

use super::access_paths::where_clause;
use super::parallel;
use super::rows::{column_or_default, decode_event, event_column, event_select_list, int, sched_detail};
use super::series::SeriesRead;
use super::target::{read_uri, uri_for, wal_path, ReadTarget};
use crate::describe::EngineNotes;
use crate::reader_common::{
    self, check_trace_file, native_schema_version, not_a_trace, require_event_columns, trace_info,
};
use crate::{QueryLimits, QueryResult};
use crate::{Result, StoreError};
use causeway_store::*;

/// Newest Ingero schema this reader understands.
const INGERO_NEWEST: (u32, u32) = (0, 10);

/// A read-only SQLite trace.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    target: ReadTarget,
    info: TraceInfo,
    /// Whether what the trace's finish built beyond its rows is believed: it recorded the extent
    /// and its events still end there ([`packed`](super::packed)).
    finished: bool,
}

fn open_ro(uri: &str) -> rusqlite::Result<Connection> {
    let c = crate::sqlite::heap::open(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    c.execute_batch("PRAGMA query_only=1;")?;
    Ok(c)
}

/// How a SQLite trace's schema description differs.
const SQLITE_NOTES: EngineNotes = EngineNotes {
    engine: Engine::Sqlite,
    ordering: "not id",
    dialect: &[],
    columns_sql: "SELECT name, type FROM pragma_table_info(?1)",
    internal_prefix: Some("sqlite_"),
};

// `attachment_rows` and the schema description's catalog reads: the code both engines share.
crate::shared_reads::impl_shared_reads!(SqliteStore, SQLITE_NOTES);

impl SqliteStore {
    /// Open a trace read-only: a file, or a series directory (see [`super::series`]). Errors say
    /// what is wrong with the file in one line.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        if path.is_dir() {
            return Self::open_series(path);
        }
        check_trace_file(path)?;
        let not_trace = |reason: &str| not_a_trace(path, reason);
        let mut magic = [0u8; 16];
        let n = std::fs::File::open(path)?.read(&mut magic)?;
        if n < 16 || &magic != b"SQLite format 3\0" {
            return Err(not_trace("not a SQLite database"));
        }
        let corrupt = |e: rusqlite::Error| StoreError::Corrupt { path: path.to_path_buf(), detail: e.to_string() };
        // A file whose writer never closed it (killed, or stopped by a full disk) may hold all of
        // it in its WAL, even the schema: read it through the WAL when there is one with pages in
        // it (an immutable open would see the empty main file).
        let wal_pages = wal_path(path).metadata().is_ok_and(|m| m.len() > 32);
        let through_wal = if wal_pages { open_ro(&uri_for(path, "mode=ro")).ok() } else { None };
        let mut uri = uri_for(path, if through_wal.is_some() { "mode=ro" } else { "immutable=1" });
        let mut conn = match through_wal {
            Some(c) => c,
            None => open_ro(&uri).map_err(corrupt)?,
        };
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .map_err(corrupt)?;
        if !tables.iter().any(|t| t == "events") {
            return Err(not_trace("it has no events table"));
        }
        let schema_info: BTreeMap<String, String> = if tables.iter().any(|t| t == "schema_info") {
            conn.prepare("SELECT key, value FROM schema_info")
                .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
                .map_err(corrupt)?
        } else {
            BTreeMap::new()
        };
        let format = if schema_info.get("format").map(String::as_str) == Some("causeway") {
            let v = native_schema_version(path, &schema_info)?;
            // A trace still being written: read through the WAL.
            if wal_path(path).exists() && !uri.ends_with("mode=ro") {
                uri = uri_for(path, "mode=ro");
                conn = open_ro(&uri).map_err(corrupt)?;
            }
            TraceFormat::Native { schema_version: v }
        } else {
            let version = schema_info.get("version").cloned().unwrap_or_else(|| "unknown".into());
            if let Some(v) = parse_version(&version) {
                if v > INGERO_NEWEST {
                    return Err(StoreError::NewerSchema {
                        path: path.to_path_buf(),
                        what: format!("Ingero schema v{version}"),
                        supported: "Ingero v0.8 to v0.10".into(),
                    });
                }
            }
            TraceFormat::Ingero { version }
        };
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('events')")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .map_err(corrupt)?;
        require_event_columns(path, &columns)?;
        // a finished native file recorded its extent (a trace being written did not, or not yet)
        let target = ReadTarget::File(uri);
        let finished = matches!(format, TraceFormat::Native { .. }) && target.is_finished_file();
        let recorded =
            if finished { crate::schema::finished_extent(&conn, &schema_info).map_err(corrupt)? } else { None };
        let info =
            Self::describe_trace(path, &conn, format, columns, tables, &schema_info, recorded).map_err(corrupt)?;
        Ok(SqliteStore { conn: Mutex::new(conn), target, info, finished: recorded.is_some() })
    }

    /// The extent (`recorded` at finish, else counted) and the sampling of a trace whose format
    /// and columns are known.
    fn describe_trace(
        path: &Path,
        conn: &Connection,
        format: TraceFormat,
        columns: Vec<String>,
        tables: Vec<String>,
        schema_info: &BTreeMap<String, String>,
        recorded: Option<reader_common::EventExtent>,
    ) -> rusqlite::Result<TraceInfo> {
        let extent = match recorded {
            Some(e) => e,
            None => conn.query_row("SELECT count(*), min(timestamp), max(timestamp) FROM events", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?,
        };
        let sampled = tables.iter().any(|t| t == "event_aggregates")
            && conn
                .query_row("SELECT EXISTS (SELECT 1 FROM event_aggregates WHERE count != stored)", [], |r| r.get(0))?;
        let has_ops = matches!(format, TraceFormat::Native { .. })
            && tables.iter().any(|t| t == "gpu_ops")
            && conn.query_row(crate::gpu_tables::HAS_OPS_SQL, [], |r| r.get(0))?;
        let mut info = trace_info(path, format, extent, columns, tables, sampled, schema_info);
        reader_common::note_device_timeline(&mut info, has_ops);
        Ok(info)
    }

    /// Open a series directory as one trace: its parts attached to one connection, joined by views.
    fn open_series(dir: &Path) -> Result<SqliteStore> {
        let (series, conn) = SeriesRead::plan(dir, &read_uri)?;
        let corrupt = |e: rusqlite::Error| StoreError::Corrupt { path: dir.to_path_buf(), detail: e.to_string() };
        conn.execute_batch("PRAGMA query_only=1;").map_err(corrupt)?;
        let newest = super::series::part_path(dir, series.seqs.1);
        let schema_info: BTreeMap<String, String> = conn
            .prepare("SELECT key, value FROM main.schema_info")
            .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(|_| not_a_trace(&newest, "a part of a series without schema_info"))?;
        if schema_info.get("format").map(String::as_str) != Some("causeway") {
            return Err(not_a_trace(&newest, "a part of a series that is not a Causeway trace"));
        }
        let format = TraceFormat::Native { schema_version: native_schema_version(&newest, &schema_info)? };
        let mut tables: Vec<String> = conn
            .prepare("SELECT name FROM main.sqlite_master WHERE type = 'table'")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .map_err(corrupt)?;
        // what one part's finish packed stands for that part alone, not the series
        tables.retain(|t| !crate::packed::TABLES.contains(&t.as_str()));
        tables.extend(series.view_names.iter().cloned());
        tables.sort();
        tables.dedup();
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('events', 'temp')")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .map_err(corrupt)?;
        require_event_columns(dir, &columns)?;
        let mut info =
            Self::describe_trace(dir, &conn, format, columns, tables, &schema_info, None).map_err(corrupt)?;
        info.missing.extend(series.notes());
        Ok(SqliteStore { conn: Mutex::new(conn), target: ReadTarget::Series(series), info, finished: false })
    }

    /// Whether this store reads a series of files (whose tables are views: no rowid).
    pub(crate) fn is_series(&self) -> bool {
        matches!(self.target, ReadTarget::Series(_))
    }

    /// A new read-only connection reading the same trace (a series' parts joined as this store
    /// joins them), for `convert` and other whole-table readers; `query_only` is set.
    pub(crate) fn connect(&self) -> Result<Connection> {
        let conn = self.target.connect()?;
        conn.execute_batch("PRAGMA query_only=1;")?;
        Ok(conn)
    }

    pub(super) fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn).map_err(|e| match e {
            rusqlite::Error::SqliteFailure(err, _) if err.code == rusqlite::ErrorCode::DatabaseCorrupt => {
                StoreError::Corrupt { path: self.info.path.clone(), detail: e.to_string() }
            }
            other => StoreError::Engine(other.to_string()),
        })
    }

    /// `events` column expression, or a default when this DB lacks the column.
    fn col(&self, name: &str, default: &str) -> String {
        column_or_default(&self.info, name, default)
    }

    /// Every row of `select` + `clause`, decoded, to `f` in no particular order: a finished
    /// native trace of many events is read in id ranges on parallel connections
    /// ([`parallel`](super::parallel)), anything else on the store's connection.
    fn scan_rows<T: Send>(
        &self,
        select: &str,
        clause: &str,
        params: &[Value],
        decode: fn(&Row<'_>) -> rusqlite::Result<T>,
        f: &mut dyn FnMut(T),
    ) -> Result<u64> {
        let threads = parallel::threads();
        let split = threads > 1
            && self.info.events >= parallel::MIN_EVENTS
            && self.target.is_finished_file()
            && matches!(self.info.format, TraceFormat::Native { .. });
        if split {
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            return parallel::scan_ranges(
                &conn,
                &|| self.connect(),
                threads,
                parallel::Scan { select, clause, params },
                decode,
                f,
            );
        }
        self.scan_on_own_connection(&format!("{select}{clause}"), params, decode, f)
    }

    /// Every row of `sql`, decoded, to `f` in the order SQLite gives, on the store's connection.
    fn scan_on_own_connection<T>(
        &self,
        sql: &str,
        params: &[Value],
        decode: fn(&Row<'_>) -> rusqlite::Result<T>,
        f: &mut dyn FnMut(T),
    ) -> Result<u64> {
        self.with_conn(|c| {
            let mut st = c.prepare(sql)?;
            let mut rows = st.query(rusqlite::params_from_iter(params))?;
            let mut n = 0u64;
            while let Some(r) = rows.next()? {
                f(decode(r)?);
                n += 1;
            }
            Ok(n)
        })
    }

    fn select_events_sql(&self) -> String {
        format!("SELECT {} FROM events", event_select_list(&self.info, "id".into()).join(", "))
    }
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.trim().trim_start_matches('v').split_once('.')?;
    Some((a.parse().ok()?, b.split('.').next()?.parse().ok()?))
}

/// A row of `scan_durations`' select.
fn duration_row(r: &Row<'_>) -> rusqlite::Result<DurationRow> {
    Ok(DurationRow {
        op: OpCode::new(int(r, 0)? as u8, int(r, 1)? as u16),
        pid: int(r, 2)? as u32,
        ts_ns: int(r, 3)?,
        dur_ns: int(r, 4)?,
    })
}

/// A row of `scan_slim`'s select.
pub(super) fn slim_row(r: &Row<'_>) -> rusqlite::Result<SlimEvent> {
    Ok(SlimEvent {
        id: event_id(r, 0)?,
        ts: int(r, 1)?,
        dur: int(r, 2)?,
        pid: int(r, 3)? as u32,
        tid: int(r, 4)? as u32,
        op: OpCode::new(int(r, 5)? as u8, int(r, 6)? as u16),
        arg0: int(r, 7)?,
        arg2: int(r, 8)?,
    })
}

fn text(r: &Row<'_>, i: usize) -> rusqlite::Result<String> {
    Ok(match r.get_ref(i)? {
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Null => String::new(),
        other => format!("{other:?}"),
    })
}

fn event_id(r: &Row<'_>, i: usize) -> rusqlite::Result<EventId> {
    Ok(match r.get_ref(i)? {
        ValueRef::Integer(v) => EventId::Int(v),
        ValueRef::Text(t) => EventId::Text(String::from_utf8_lossy(t).into()),
        ValueRef::Real(f) => EventId::Int(f as i64),
        _ => EventId::Int(0),
    })
}

fn row_to_event(r: &Row<'_>) -> rusqlite::Result<StoredEvent> {
    Ok(StoredEvent { id: event_id(r, 0)?, event: decode_event(r, text)? })
}

/// WHERE clause and parameters for a filter (SQLite values).
impl TraceStore for SqliteStore {
    fn engine(&self) -> Engine {
        Engine::Sqlite
    }

    fn info(&self) -> &TraceInfo {
        &self.info
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        if !self.info.has_table("sessions") {
            return Ok(Vec::new());
        }
        let cols: Vec<String> = self.with_conn(|c| {
            c.prepare("SELECT name FROM pragma_table_info('sessions')")?.query_map([], |r| r.get(0))?.collect()
        })?;
        let pick = |names: &[&str]| -> String {
            names
                .iter()
                .find(|n| cols.iter().any(|c| c == *n))
                .map(|n| format!("CAST({n} AS TEXT)"))
                .unwrap_or_else(|| "''".into())
        };
        let sql = format!(
            "SELECT id, started_at, stopped_at, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {} FROM sessions ORDER BY started_at",
            pick(&["tool_version", "ingero_ver"]),
            pick(&["kernel"]),
            pick(&["hostname"]),
            pick(&["node"]),
            pick(&["pid_filter"]),
            pick(&["command"]),
            pick(&["flags"]),
            pick(&["gpu_model"]),
            pick(&["gpu_driver"]),
            pick(&["cuda_ver"]),
            pick(&["tracer_pid"]),
        );
        self.with_conn(|c| {
            c.prepare(&sql)?
                .query_map([], |r| {
                    Ok(SessionInfo {
                        id: int(r, 0)?,
                        started_at_ns: int(r, 1)?,
                        stopped_at_ns: int(r, 2)?,
                        tool_version: text(r, 3)?,
                        kernel: text(r, 4)?,
                        hostname: text(r, 5)?,
                        node: text(r, 6)?,
                        pid_filter: text(r, 7)?,
                        command: text(r, 8)?,
                        flags: text(r, 9)?,
                        gpu_model: text(r, 10)?,
                        gpu_driver: text(r, 11)?,
                        cuda_version: text(r, 12)?,
                        tracer_pid: text(r, 13)?.parse().unwrap_or(0),
                    })
                })?
                .collect()
        })
    }

    fn process_names(&self) -> Result<BTreeMap<u32, String>> {
        let mut names = BTreeMap::new();
        if self.info.has_table("process_names") {
            let rows: Vec<(i64, String)> = self.with_conn(|c| {
                c.prepare("SELECT pid, name FROM process_names")?
                    .query_map([], |r| Ok((int(r, 0)?, text(r, 1)?)))?
                    .collect()
            })?;
            names.extend(rows.into_iter().map(|(p, n)| (p as u32, n)));
        }
        // Ingero v0.10 keeps names per event: fill the pids process_names lacks.
        if self.info.has_column("comm") && matches!(self.info.format, TraceFormat::Ingero { .. }) {
            let rows: Vec<(i64, String)> = self.with_conn(|c| {
                c.prepare("SELECT pid, comm FROM events WHERE comm != '' AND tid = pid GROUP BY pid")?
                    .query_map([], |r| Ok((int(r, 0)?, text(r, 1)?)))?
                    .collect()
            })?;
            for (p, n) in rows {
                names.entry(p as u32).or_insert(n);
            }
        }
        Ok(names)
    }

    fn scan_durations(&self, filter: &EventFilter, f: &mut dyn FnMut(&DurationRow)) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        self.scan_rows(
            "SELECT source, op, pid, timestamp, duration FROM events",
            &clause,
            &params,
            duration_row,
            &mut |r| f(&r),
        )
    }

    /// The whole of a finished trace is summed up from its packed durations ([`super::packed`]);
    /// a window, a process or a set of ops, and traces without them, by the scan.
    fn duration_summary(
        &self,
        filter: &EventFilter,
        per_mille: &[u32],
        per_process: bool,
    ) -> Result<causeway_store::summary::DurationSummary> {
        if filter.is_everything() && self.finished && self.info.has_table(crate::packed::durations::TABLE) {
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            let extent = (self.info.events, self.info.first_ns, self.info.last_ns);
            return super::packed::summarize(&conn, extent, per_mille, per_process);
        }
        causeway_store::summary::summarize_by_scan(self, filter, per_mille, per_process)
    }

    fn summarizes_whole_trace_from_packed(&self) -> bool {
        self.finished && self.info.has_table(crate::packed::durations::TABLE)
    }

    /// A finished trace's GPU calls come from its packed blocks ([`super::packed`]), in time
    /// order (the step rows alone from their own blocks, where the trace has them); other rows, and
    /// traces without blocks, through SQL.
    fn scan_slim(&self, filter: &EventFilter, f: &mut dyn FnMut(SlimEvent)) -> Result<u64> {
        use crate::packed::calls;
        let table = if !self.finished {
            None
        } else if self.info.has_table(calls::STEP_TABLE) && calls::answers_steps(filter) {
            Some(calls::STEP_TABLE)
        } else if self.info.has_table(calls::TABLE) && calls::answers(filter) {
            Some(calls::TABLE)
        } else {
            None
        };
        if let Some(table) = table {
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            return super::packed::scan_calls(&conn, table, filter, f);
        }
        let (clause, params) = where_clause(filter);
        let select = format!(
            "SELECT id, timestamp, duration, pid, tid, source, op, {}, {} FROM events",
            self.col("arg0", "0"),
            self.col("arg2", "0")
        );
        self.scan_rows(&select, &clause, &params, slim_row, f)
    }

    fn thread_comms(&self, filter: &EventFilter, latest: bool) -> Result<HashMap<u32, String>> {
        if !self.info.has_column("comm") {
            return Ok(HashMap::new());
        }
        let order = if latest { "DESC" } else { "ASC" };
        match (&filter.tids, &self.info.format) {
            // Native traces index (tid, timestamp): one short walk per thread from its first (last)
            // event, instead of grouping every row of the trace.
            (Some(tids), TraceFormat::Native { .. }) => {
                let one = EventFilter { tids: None, ..filter.clone() };
                let (clause, params) = where_clause(&one);
                let cond = reader_common::and_where(&clause, "tid = ? AND comm != ''");
                let sql = format!("SELECT comm FROM events{cond} ORDER BY timestamp {order} LIMIT 1");
                self.with_conn(|c| {
                    let mut st = c.prepare(&sql)?;
                    let mut out = HashMap::new();
                    for &tid in tids {
                        let p = params.iter().cloned().chain([Value::Integer(tid.into())]);
                        if let Some(r) = st.query(rusqlite::params_from_iter(p))?.next()? {
                            out.insert(tid, text(r, 0)?);
                        }
                    }
                    Ok(out)
                })
            }
            _ => {
                let (clause, params) = where_clause(filter);
                let clause = reader_common::and_where(&clause, "comm != ''");
                // SQLite gives the bare column of the row holding the MIN (MAX).
                let agg = if latest { "MAX" } else { "MIN" };
                let sql = format!("SELECT tid, comm, {agg}(timestamp) FROM events{clause} GROUP BY tid");
                self.with_conn(|c| {
                    c.prepare(&sql)?
                        .query_map(rusqlite::params_from_iter(params), |r| Ok((int(r, 0)? as u32, text(r, 1)?)))?
                        .collect()
                })
            }
        }
    }

    fn scan_events(&self, filter: &EventFilter, f: &mut dyn FnMut(StoredEvent)) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let sql = format!("{}{clause} ORDER BY timestamp", self.select_events_sql());
        self.scan_on_own_connection(&sql, &params, row_to_event, f)
    }

    /// The columns of an interval only, `keep` asked before the scheduler detail is decoded. A
    /// finished trace's switch index answers a `sched_switch` filter without reading the table
    /// (rows in thread, then time order); a trace still being written reads the table, with the
    /// same rows.
    fn scan_switches_kept(
        &self,
        filter: &EventFilter,
        keep: &dyn Fn(u32, i64, i64) -> bool,
        f: &mut dyn FnMut(SwitchRow),
    ) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let detail: Vec<String> =
            crate::schema::SWITCH_DETAIL_COLUMNS.iter().map(|c| event_column(&self.info, c)).collect();
        // id, timestamp, tid, then duration, pid, cpu and the seven of the scheduler detail
        let sql = format!("SELECT id, timestamp, tid, {} FROM events{clause}", detail.join(", "));
        self.with_conn(|c| {
            let mut st = c.prepare(&sql)?;
            let mut rows = st.query(rusqlite::params_from_iter(params))?;
            let mut n = 0u64;
            while let Some(r) = rows.next()? {
                let (ts, tid, dur) = (int(r, 1)?, int(r, 2)? as u32, int(r, 3)?);
                if !keep(tid, ts, dur) {
                    continue;
                }
                let (pid, cpu) = (int(r, 4)? as u32, int(r, 5)? as i32);
                f(SwitchRow { id: event_id(r, 0)?, ts, dur, pid, tid, cpu, sched: sched_detail(r, 6, text)? });
                n += 1;
            }
            Ok(n)
        })
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<StoredEvent>> {
        let (clause, params) = where_clause(filter);
        let sql = format!("{}{clause} ORDER BY timestamp", self.select_events_sql());
        self.with_conn(|c| c.prepare(&sql)?.query_map(rusqlite::params_from_iter(params), row_to_event)?.collect())
    }

    fn events_by_id(&self, ids: &[EventId]) -> Result<Vec<StoredEvent>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!("{} WHERE id IN ({})", self.select_events_sql(), vec!["?"; ids.len()].join(","));
        let params: Vec<Value> = ids
            .iter()
            .map(|i| match i {
                EventId::Int(v) => Value::Integer(*v),
                EventId::Text(s) => Value::Text(s.to_string()),
            })
            .collect();
        self.with_conn(|c| c.prepare(&sql)?.query_map(rusqlite::params_from_iter(params), row_to_event)?.collect())
    }

    crate::shared_reads::shared_trace_store_methods!(int);

    fn query(&self, sql: &str, limits: &QueryLimits) -> Result<QueryResult> {
        crate::guard::run_sqlite_target(&self.target, sql, limits)
    }
}
