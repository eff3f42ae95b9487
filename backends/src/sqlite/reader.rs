//! Reading traces from SQLite files: native Causeway traces and Ingero DBs (schema v0.8 to v0.10).
//!
//! Every file is opened read-only. Ingero DBs and finished native traces are opened `immutable=1`,
//! so the file stays byte-identical and no `-wal`/`-shm` sidecar appears (Ingero leaves its DBs in
//! WAL mode, where a plain read-only open would create them). A native trace still being written
//! (its `-wal` exists) is opened `mode=ro` so the reader sees the writer's latest commits.
//! Columns and tables a DB lacks are read as defaults, never as errors.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, Row};

use causeway_model::codes::{OpCode, PrevState};
use causeway_model::time::TimeWindow;
use causeway_model::{Event, LossCounter, LossKind, SchedDetail, SessionInfo};

use crate::error::{Result, StoreError};
use crate::query::{QueryLimits, QueryResult};
use crate::schema::NATIVE_SCHEMA_VERSION;
use crate::store::*;

/// Newest Ingero schema this reader understands.
const INGERO_NEWEST: (u32, u32) = (0, 10);

/// A read-only SQLite trace.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    uri: String,
    info: TraceInfo,
}

/// The SQLite URI for a path with the given query parameters (path characters escaped).
fn uri_for(path: &Path, params: &str) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut s = String::from("file:");
    for b in abs.to_string_lossy().bytes() {
        match b {
            b'%' | b'?' | b'#' => s.push_str(&format!("%{b:02X}")),
            _ => s.push(b as char),
        }
    }
    format!("{s}?{params}")
}

fn open_ro(uri: &str) -> rusqlite::Result<Connection> {
    let c = Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    c.execute_batch("PRAGMA query_only=1;")?;
    Ok(c)
}

impl SqliteStore {
    /// Open a trace read-only. Errors say what is wrong with the file in one line.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let meta = std::fs::metadata(path).map_err(|_| StoreError::NotFound(path.to_path_buf()))?;
        let not_trace = |reason: &str| StoreError::NotATrace { path: path.to_path_buf(), reason: reason.into() };
        if meta.is_dir() {
            return Err(not_trace("it is a directory"));
        }
        if meta.len() == 0 {
            return Err(not_trace("the file is empty"));
        }
        let mut magic = [0u8; 16];
        let n = std::fs::File::open(path)?.read(&mut magic)?;
        if n < 16 || &magic != b"SQLite format 3\0" {
            return Err(not_trace("not a SQLite database"));
        }
        let corrupt = |e: rusqlite::Error| StoreError::Corrupt { path: path.to_path_buf(), detail: e.to_string() };
        let mut uri = uri_for(path, "immutable=1");
        let mut conn = open_ro(&uri).map_err(corrupt)?;
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
            let v: u32 = schema_info.get("schema_version").and_then(|v| v.parse().ok()).unwrap_or(0);
            if v > NATIVE_SCHEMA_VERSION {
                return Err(StoreError::NewerSchema {
                    path: path.to_path_buf(),
                    what: format!("native schema v{v}"),
                    supported: format!("up to v{NATIVE_SCHEMA_VERSION}"),
                });
            }
            // A trace still being written: read through the WAL.
            if wal_path(path).exists() {
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
        for required in ["timestamp", "pid", "tid", "source", "op", "duration"] {
            if !columns.iter().any(|c| c == required) {
                return Err(not_trace(&format!("its events table has no {required} column")));
            }
        }
        let (events, first_ns, last_ns): (i64, Option<i64>, Option<i64>) = conn
            .query_row("SELECT count(*), min(timestamp), max(timestamp) FROM events", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(corrupt)?;
        let sampled = tables.iter().any(|t| t == "event_aggregates")
            && conn
                .query_row("SELECT EXISTS (SELECT 1 FROM event_aggregates WHERE count != stored)", [], |r| r.get(0))
                .map_err(corrupt)?;
        let columns = crate::schema::restrict_columns(columns, schema_info.get(crate::schema::SOURCE_COLUMNS_KEY));
        let has = |c: &str| columns.iter().any(|x| x == c);
        let mut missing = Vec::new();
        if !has("next_tid") {
            missing.push("who took the CPU at each switch (the preempting task is not recorded)".into());
        }
        if !has("prev_state") {
            missing.push("why a thread left the CPU (preempted vs sleep vs I/O wait)".into());
        }
        if !has("wake_ts") {
            missing.push("wake-up times and wakers (run-queue wait cannot be separated from sleep)".into());
        }
        if !has("cpu") {
            missing.push("CPU numbers".into());
        }
        if !has("comm") {
            missing.push("thread names (only process_names per pid)".into());
        }
        if !tables.iter().any(|t| t == "loss_counters") {
            missing.push("loss counters (events dropped by the tracer are not counted)".into());
        }
        // A converted trace reports what its original did not record.
        crate::schema::extend_missing(&mut missing, schema_info.get(crate::schema::SOURCE_MISSING_KEY));
        let info = TraceInfo {
            path: path.to_path_buf(),
            format,
            events: events as u64,
            first_ns: first_ns.unwrap_or(0),
            last_ns: last_ns.unwrap_or(0),
            event_columns: columns,
            tables,
            sampled,
            missing,
        };
        Ok(SqliteStore { conn: Mutex::new(conn), uri, info })
    }

    /// The URI this store reads (for opening further read-only connections, e.g. the SQL guard's).
    pub fn uri(&self) -> &str {
        &self.uri
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
        if self.info.has_column(name) {
            name.to_string()
        } else {
            format!("{default} AS {name}")
        }
    }

    fn select_events_sql(&self) -> String {
        let cols = [
            "id".to_string(),
            "timestamp".into(),
            "duration".into(),
            "pid".into(),
            "tid".into(),
            self.col("cpu", "-1"),
            "source".into(),
            "op".into(),
            self.col("arg0", "0"),
            self.col("arg1", "0"),
            self.col("arg2", "0"),
            self.col("ret_code", "0"),
            self.col("stack_hash", "0"),
            self.col("gpu_id", "0"),
            self.col("cgroup_id", "0"),
            self.col("comm", "''"),
            self.col("prev_state", "NULL"),
            self.col("next_pid", "NULL"),
            self.col("next_tid", "NULL"),
            self.col("next_comm", "NULL"),
            self.col("wake_ts", "NULL"),
            self.col("waker_pid", "NULL"),
            self.col("waker_tid", "NULL"),
        ];
        format!("SELECT {} FROM events", cols.join(", "))
    }
}

fn wal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.trim().trim_start_matches('v').split_once('.')?;
    Some((a.parse().ok()?, b.split('.').next()?.parse().ok()?))
}

fn int(r: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    Ok(match r.get_ref(i)? {
        ValueRef::Integer(v) => v,
        ValueRef::Real(f) => f as i64,
        ValueRef::Text(t) => std::str::from_utf8(t).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0),
        _ => 0,
    })
}

fn opt_int(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<i64>> {
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        _ => Some(int(r, i)?),
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
        ValueRef::Text(t) => EventId::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Real(f) => EventId::Int(f as i64),
        _ => EventId::Int(0),
    })
}

fn row_to_event(r: &Row<'_>) -> rusqlite::Result<StoredEvent> {
    let source = int(r, 6)? as u8;
    let op = int(r, 7)? as u16;
    let prev_state = opt_int(r, 16)?;
    let sched = match prev_state {
        Some(ps) => Some(SchedDetail {
            prev_state: PrevState::from_code(ps),
            next_pid: opt_int(r, 17)?.unwrap_or(0) as u32,
            next_tid: opt_int(r, 18)?.unwrap_or(0) as u32,
            next_comm: text(r, 19)?,
            wake_ts_ns: opt_int(r, 20)?.unwrap_or(0),
            waker_pid: opt_int(r, 21)?.unwrap_or(0) as u32,
            waker_tid: opt_int(r, 22)?.unwrap_or(0) as u32,
        }),
        None => None,
    };
    Ok(StoredEvent {
        id: event_id(r, 0)?,
        event: Event {
            ts_ns: int(r, 1)?,
            dur_ns: int(r, 2)?,
            pid: int(r, 3)? as u32,
            tid: int(r, 4)? as u32,
            cpu: int(r, 5)? as i32,
            source,
            op,
            arg0: int(r, 8)?,
            arg1: int(r, 9)?,
            arg2: int(r, 10)?,
            ret_code: int(r, 11)? as i32,
            stack_hash: int(r, 12)?,
            gpu_id: int(r, 13)? as i32,
            cgroup_id: int(r, 14)?,
            comm: text(r, 15)?,
            sched,
        },
    })
}

/// WHERE clause and parameters for a filter.
fn where_clause(f: &EventFilter) -> (String, Vec<Value>) {
    let mut conds = Vec::new();
    let mut params = Vec::new();
    let TimeWindow { from_ns, to_ns } = f.window;
    if let Some(from) = from_ns {
        conds.push("timestamp >= ?".to_string());
        params.push(Value::Integer(from));
    }
    if let Some(to) = to_ns {
        conds.push("timestamp <= ?".to_string());
        params.push(Value::Integer(to));
    }
    if let Some(pid) = f.pid {
        conds.push("pid = ?".into());
        params.push(Value::Integer(pid.into()));
    }
    if let Some(tids) = &f.tids {
        conds.push(format!("tid IN ({})", vec!["?"; tids.len()].join(",")));
        params.extend(tids.iter().map(|&t| Value::Integer(t.into())));
    }
    if let Some(sources) = &f.sources {
        conds.push(format!("source IN ({})", vec!["?"; sources.len()].join(",")));
        params.extend(sources.iter().map(|&s| Value::Integer(s.into())));
    }
    if let Some(ops) = &f.ops {
        let alts: Vec<&str> = ops.iter().map(|_| "(source = ? AND op = ?)").collect();
        conds.push(format!("({})", if alts.is_empty() { "0".to_string() } else { alts.join(" OR ") }));
        for o in ops {
            params.push(Value::Integer(o.source.into()));
            params.push(Value::Integer(o.op.into()));
        }
    }
    let clause = if conds.is_empty() { String::new() } else { format!(" WHERE {}", conds.join(" AND ")) };
    (clause, params)
}

impl TraceStore for SqliteStore {
    fn engine(&self) -> &'static str {
        "sqlite"
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
            "SELECT id, started_at, stopped_at, {}, {}, {}, {}, {}, {}, {}, {}, {}, {} FROM sessions ORDER BY started_at",
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

    fn loss_counters(&self) -> Result<Vec<LossCounter>> {
        if !self.info.has_table("loss_counters") {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, String, i64)> = self.with_conn(|c| {
            c.prepare("SELECT source, kind, SUM(count) FROM loss_counters GROUP BY source, kind ORDER BY source, kind")?
                .query_map([], |r| Ok((int(r, 0)?, text(r, 1)?, int(r, 2)?)))?
                .collect()
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|(s, k, n)| {
                Some(LossCounter { source: s as u8, kind: LossKind::parse(&k)?, count: n.max(0) as u64 })
            })
            .collect())
    }

    fn aggregates(&self, window: &TimeWindow) -> Result<Vec<AggregateRow>> {
        if !self.info.has_table("event_aggregates") {
            return Ok(Vec::new());
        }
        // A minute bucket overlaps the window when it starts before its end and ends after its start.
        let from = window.from_ns.map(|f| f - 60_000_000_000).unwrap_or(i64::MIN);
        let to = window.to_ns.unwrap_or(i64::MAX);
        self.with_conn(|c| {
            c.prepare(
                "SELECT bucket, source, op, pid, count, stored, sum_dur, min_dur, max_dur, sum_arg0 FROM event_aggregates \
                 WHERE bucket > ?1 AND bucket <= ?2 ORDER BY bucket, source, op, pid",
            )?
            .query_map([from, to], |r| {
                Ok(AggregateRow {
                    bucket_ns: int(r, 0)?,
                    source: int(r, 1)? as u8,
                    op: int(r, 2)? as u16,
                    pid: int(r, 3)? as u32,
                    count: int(r, 4)?.max(0) as u64,
                    stored: int(r, 5)?.max(0) as u64,
                    sum_dur_ns: int(r, 6)?,
                    min_dur_ns: int(r, 7)?,
                    max_dur_ns: int(r, 8)?,
                    sum_arg0: int(r, 9)?,
                })
            })?
            .collect()
        })
    }

    fn scan_durations(&self, filter: &EventFilter, f: &mut dyn FnMut(&DurationRow)) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let sql = format!("SELECT source, op, pid, timestamp, duration FROM events{clause}");
        self.with_conn(|c| {
            let mut st = c.prepare(&sql)?;
            let mut rows = st.query(rusqlite::params_from_iter(params))?;
            let mut n = 0u64;
            while let Some(r) = rows.next()? {
                f(&DurationRow {
                    op: OpCode::new(int(r, 0)? as u8, int(r, 1)? as u16),
                    pid: int(r, 2)? as u32,
                    ts_ns: int(r, 3)?,
                    dur_ns: int(r, 4)?,
                });
                n += 1;
            }
            Ok(n)
        })
    }

    fn scan_slim(&self, filter: &EventFilter, f: &mut dyn FnMut(SlimEvent)) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let sql = format!(
            "SELECT id, timestamp, duration, pid, tid, source, op, {}, {}, {} FROM events{clause}",
            self.col("arg0", "0"),
            self.col("arg2", "0"),
            self.col("stack_hash", "0")
        );
        self.with_conn(|c| {
            let mut st = c.prepare(&sql)?;
            let mut rows = st.query(rusqlite::params_from_iter(params))?;
            let mut n = 0u64;
            while let Some(r) = rows.next()? {
                f(SlimEvent {
                    id: event_id(r, 0)?,
                    ts_ns: int(r, 1)?,
                    dur_ns: int(r, 2)?,
                    pid: int(r, 3)? as u32,
                    tid: int(r, 4)? as u32,
                    op: OpCode::new(int(r, 5)? as u8, int(r, 6)? as u16),
                    arg0: int(r, 7)?,
                    arg2: int(r, 8)?,
                    stack_hash: int(r, 9)?,
                });
                n += 1;
            }
            Ok(n)
        })
    }

    fn first_comms(&self, filter: &EventFilter) -> Result<HashMap<u32, String>> {
        if !self.info.has_column("comm") {
            return Ok(HashMap::new());
        }
        let (clause, params) = where_clause(filter);
        let clause = if clause.is_empty() { " WHERE comm != ''".to_string() } else { format!("{clause} AND comm != ''") };
        // SQLite gives the bare column of the row holding the MIN.
        let sql = format!("SELECT tid, comm, MIN(timestamp) FROM events{clause} GROUP BY tid");
        self.with_conn(|c| {
            c.prepare(&sql)?
                .query_map(rusqlite::params_from_iter(params), |r| Ok((int(r, 0)? as u32, text(r, 1)?)))?
                .collect()
        })
    }

    fn scan_events(&self, filter: &EventFilter, f: &mut dyn FnMut(StoredEvent)) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let sql = format!("{}{clause} ORDER BY timestamp", self.select_events_sql());
        self.with_conn(|c| {
            let mut st = c.prepare(&sql)?;
            let mut rows = st.query(rusqlite::params_from_iter(params))?;
            let mut n = 0u64;
            while let Some(r) = rows.next()? {
                f(row_to_event(r)?);
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
                EventId::Text(s) => Value::Text(s.clone()),
            })
            .collect();
        self.with_conn(|c| c.prepare(&sql)?.query_map(rusqlite::params_from_iter(params), row_to_event)?.collect())
    }

    fn stacks(&self, hashes: &[i64]) -> Result<BTreeMap<i64, StackRecord>> {
        if hashes.is_empty() || !self.info.has_table("stack_traces") {
            return Ok(BTreeMap::new());
        }
        let mut out = BTreeMap::new();
        for chunk in hashes.chunks(500) {
            let sql = format!(
                "SELECT hash, ips, frames FROM stack_traces WHERE hash IN ({})",
                vec!["?"; chunk.len()].join(",")
            );
            let rows: Vec<StackRecord> = self.with_conn(|c| {
                c.prepare(&sql)?
                    .query_map(rusqlite::params_from_iter(chunk.iter()), |r| {
                        Ok(StackRecord { hash: int(r, 0)?, ips: text(r, 1)?, frames: text(r, 2)? })
                    })?
                    .collect()
            })?;
            out.extend(rows.into_iter().map(|s| (s.hash, s)));
        }
        Ok(out)
    }

    fn query(&self, sql: &str, limits: &QueryLimits) -> Result<QueryResult> {
        crate::guard::run_sqlite(&self.uri, sql, limits)
    }

    fn describe_schema(&self) -> Result<SchemaDescription> {
        super::describe::describe(self)
    }
}
