//! Reading native traces from DuckDB files, read-only.
//!
//! The file is opened `access_mode=READ_ONLY` with extension autoload and autoinstall off, so it
//! stays byte-identical. Bulk reads (`scan_durations`, `events`) stream Arrow record batches and read
//! the columns directly, without a per-value call. Ties in time are ordered by id, as the SQLite
//! engine's rowid order gives them.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

use duckdb::arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use duckdb::arrow::compute::cast;
use duckdb::arrow::datatypes::DataType;
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::{params_from_iter, Connection};

use causeway_model::codes::{OpCode, PrevState};
use causeway_model::{Event, SchedDetail, SessionInfo};

use super::{base_config, is_duckdb_file};
use crate::describe::EngineNotes;
use crate::reader_common::{check_trace_file, native_schema_version, not_a_trace, require_event_columns, trace_info};
use crate::{QueryLimits, QueryResult};
use crate::{Result, StoreError};
use causeway_store::*;

/// A read-only DuckDB trace.
pub struct DuckDbStore {
    conn: Mutex<Connection>,
    info: TraceInfo,
    /// [`select_events`] for this trace's columns.
    select_events: String,
    /// For a store over views ([`DuckDbStore::from_connection`]): how to make the hardened
    /// connection a guarded query runs on (a file's store opens the file instead).
    reopen: Option<Reopen>,
    /// Whether what the trace's last finish packed is believed ([`super::packed`]).
    finished: bool,
}

/// Makes a fresh, hardened connection showing the same trace (see `guard::run_duckdb_on`).
pub type Reopen = std::sync::Arc<dyn Fn() -> Result<Connection> + Send + Sync>;

/// The event columns the store reads, in this order, then `launch_config` (see [`select_events`]).
const EVENT_SELECT_LIST: &str = "id, timestamp, duration, pid, tid, cpu, source, op, arg0, arg1, arg2, ret_code, \
    stack_hash, gpu_id, cgroup_id, comm, prev_state, next_pid, next_tid, next_comm, wake_ts, waker_pid, waker_tid";

/// `launch_config`, or NULL for a trace recorded before the column existed (read as 0).
pub(super) fn launch_config_column(info: &TraceInfo) -> &'static str {
    if info.has_column("launch_config") {
        "launch_config"
    } else {
        "CAST(NULL AS BIGINT) AS launch_config"
    }
}

/// `SELECT` of the columns [`batch_rows_to_events`] reads, `FROM events`.
fn select_events(info: &TraceInfo) -> String {
    format!("SELECT {EVENT_SELECT_LIST}, {} FROM events", launch_config_column(info))
}

/// How a DuckDB trace's schema description differs.
const DUCKDB_NOTES: EngineNotes = EngineNotes {
    engine: Engine::DuckDb,
    ordering: "then id",
    dialect: &["engine DuckDB: integer division is //, percentiles: quantile_disc takes a float fraction and is not \
                guaranteed to be nearest-rank; use list_sort(list(x))[greatest(1, (p * count(*) + 99) // 100)] for \
                nearest-rank p (percent)"],
    columns_sql: "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? AND \
                  table_schema = 'main' AND table_catalog = current_database() ORDER BY ordinal_position",
    internal_prefix: None,
};

// `attachment_rows` and the schema description's catalog reads: the code both engines share.
crate::shared_reads::impl_shared_reads!(DuckDbStore, DUCKDB_NOTES);

/// DuckDB's own memory (buffers, sorts, hash tables) in a trace reader, MiB. Left at its default
/// (80% of the machine), the sort behind explain's time-ordered read of 8 million calls held
/// several hundred MiB beside the calls explain keeps. At 10M events, back to back on one file:
/// peak 1246 -> 892 MiB for 1.17x the time (at 512 MiB: 1228 -> 1118 MiB, 1.06x). At 100M events
/// the default would hold gigabytes for that sort; bounded, it spills. Since explain sorts its calls
/// itself, 128 MiB (from 256) lowered the peak at 10M events from 708-728 to 632-650 MiB in the
/// same time; 64 MiB gave 575 MiB for 1.18x the time (the packed durations and the off-CPU reads
/// slowed).
pub const READER_MEMORY_MIB: u64 = 128;

/// The engine memory of a reader while it streams rows it does not sort (explain's scans of the
/// calls and of the switches), MiB. DuckDB keeps the blocks a scan read cached up to its bound,
/// and at [`READER_MEMORY_MIB`] those were 128 MiB of explain's peak beside its calls; a scan
/// needs a few blocks at a time. At 10M events: explain's peak 672 -> 532-547 MiB (whole process,
/// 16 and 32 MiB alike), its time within the spread.
const SCAN_MEMORY_MIB: u64 = 16;

/// Bound a reader connection's engine memory ([`READER_MEMORY_MIB`]); what does not fit spills to a
/// directory of this process's own under the system's temporary directory (DuckDB's default is
/// beside the trace, which a reader must not write to, and which two readers would share).
fn bound_reader_memory(conn: &Connection) -> duckdb::Result<()> {
    let spill = std::env::temp_dir().join(format!("causeway-duckdb-{}", std::process::id()));
    let spill = spill.to_string_lossy().replace('\'', "''");
    conn.execute_batch(&format!("SET memory_limit = '{READER_MEMORY_MIB}MiB'; SET temp_directory = '{spill}';"))
}

impl DuckDbStore {
    /// Open a DuckDB trace read-only. Errors say what is wrong with the file in one line.
    pub fn open(path: &Path) -> Result<DuckDbStore> {
        check_trace_file(path)?;
        let not_trace = |reason: &str| not_a_trace(path, reason);
        if !is_duckdb_file(path) {
            return Err(not_trace("not a DuckDB database"));
        }
        let corrupt = |e: duckdb::Error| StoreError::Corrupt { path: path.to_path_buf(), detail: e.to_string() };
        let config = base_config(true).map_err(corrupt)?;
        let conn = Connection::open_with_flags(path, config).map_err(|e| {
            let msg = e.to_string();
            if msg.contains("lock") {
                StoreError::Engine(format!(
                    "{}: the trace is open for writing by another process (DuckDB allows one writer and no \
                     readers meanwhile); wait until it finishes: {msg}",
                    path.display()
                ))
            } else {
                corrupt(e)
            }
        })?;
        bound_reader_memory(&conn).map_err(corrupt)?;
        Self::from_connection(conn, path.to_path_buf(), None)
    }

    /// A store over a connection whose default database shows a native trace's tables (or views of
    /// the same shape: the fleet's node-scoped views over a lake). `label` names it in messages;
    /// guarded queries run on connections from `reopen` (None: the file at `label`).
    pub fn from_connection(conn: Connection, label: std::path::PathBuf, reopen: Option<Reopen>) -> Result<DuckDbStore> {
        let path = label.as_path();
        let not_trace = |reason: &str| not_a_trace(path, reason);
        let corrupt = |e: duckdb::Error| StoreError::Corrupt { path: path.to_path_buf(), detail: e.to_string() };
        let strings = |sql: &str| -> Result<Vec<String>> {
            conn.prepare(sql).and_then(|mut st| st.query_map([], |r| r.get(0))?.collect()).map_err(corrupt)
        };
        let tables = strings(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_catalog = \
             current_database() ORDER BY table_name",
        )?;
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
        if schema_info.get("format").map(String::as_str) != Some("causeway") {
            return Err(not_trace("a DuckDB file that is not a Causeway trace (no schema_info format=causeway)"));
        }
        let v = native_schema_version(path, &schema_info)?;
        let columns = strings(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'events' AND table_schema = \
             'main' AND table_catalog = current_database() ORDER BY ordinal_position",
        )?;
        require_event_columns(path, &columns)?;
        let extent = conn
            .query_row("SELECT count(*), min(timestamp), max(timestamp) FROM events", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(corrupt)?;
        let sampled = tables.iter().any(|t| t == "event_aggregates")
            && conn
                .query_row("SELECT EXISTS (SELECT 1 FROM event_aggregates WHERE count != stored)", [], |r| r.get(0))
                .map_err(corrupt)?;
        let format = TraceFormat::Native { schema_version: v };
        let has_ops = tables.iter().any(|t| t == "gpu_ops")
            && conn.query_row(crate::gpu_tables::HAS_OPS_SQL, [], |r| r.get(0)).map_err(corrupt)?;
        let mut info = trace_info(path, format, extent, columns, tables, sampled, &schema_info);
        crate::reader_common::note_device_timeline(&mut info, has_ops);
        let select_events = select_events(&info);
        let finished =
            super::packed::believed(&conn, &info.tables, schema_info.get(crate::schema::FINISHED_EXTENT_KEY))
                .map_err(corrupt)?;
        Ok(DuckDbStore { conn: Mutex::new(conn), info, select_events, reopen, finished })
    }

    pub(super) fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> duckdb::Result<T>) -> Result<T> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn).map_err(|e| StoreError::Engine(format!("{}: {e}", self.info.path.display())))
    }

    /// `read` with a trace file's engine memory bounded to [`SCAN_MEMORY_MIB`], put back to
    /// [`READER_MEMORY_MIB`] after (the bound is the database instance's: cloned connections share
    /// it). A store over another connection's views keeps that connection's bound.
    fn with_scan_memory<T>(&self, read: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.reopen.is_some() {
            return read();
        }
        let conn = self.with_conn(|c| c.try_clone())?;
        let set = |mib: u64| {
            conn.execute_batch(&format!("SET memory_limit = '{mib}MiB'"))
                .map_err(|e| StoreError::Engine(format!("bounding a scan's memory: {e}")))
        };
        set(SCAN_MEMORY_MIB)?;
        let r = read();
        set(READER_MEMORY_MIB)?;
        r
    }

    /// Run `sql` with integer parameters and hand every Arrow batch to `f`.
    pub(super) fn for_batches(
        &self,
        sql: &str,
        params: &[i64],
        f: &mut dyn FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let err = |e: duckdb::Error| StoreError::Engine(format!("{}: {e}", self.info.path.display()));
        let mut st = conn.prepare(sql).map_err(err)?;
        // Started streaming, then stepped here: the crate's own iterator panics on a failed fetch.
        drop(st.stream_arrow(params_from_iter(params.iter())).map_err(err)?);
        while let Some(chunk) = st.step().map_err(err)? {
            f(&RecordBatch::from(&chunk))?;
        }
        Ok(())
    }

    /// For a trace file of millions of events on a host with two cores or more: its ids split in
    /// two ranges of about as many events, which [`Self::scan_slim_split`] reads side by side.
    /// `None` for a small trace, one core, or a store over another connection's views (a cloned
    /// connection would not see them).
    fn id_halves(&self) -> Result<Option<[(i64, i64); 2]>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.reopen.is_some() || cores < 2 || self.info.events < SPLIT_SCAN_MIN_EVENTS {
            return Ok(None);
        }
        self.id_range_halves()
    }

    /// The trace's ids in two ranges (`None` with fewer than two ids).
    fn id_range_halves(&self) -> Result<Option<[(i64, i64); 2]>> {
        let (lo, hi): (Option<i64>, Option<i64>) =
            self.with_conn(|c| c.query_row("SELECT min(id), max(id) FROM events", [], |r| Ok((r.get(0)?, r.get(1)?))))?;
        Ok(match (lo, hi) {
            (Some(lo), Some(hi)) if hi > lo => {
                let mid = lo + (hi - lo) / 2;
                Some([(lo, mid), (mid + 1, hi)])
            }
            _ => None,
        })
    }

    /// [`TraceStore::scan_slim`] as two queries over the id ranges `halves`, each on its own
    /// connection and thread (DuckDB's scan and the conversion of its Arrow batches take most of
    /// a large scan, and one stream runs them on one core); `f` is called here, on the caller's
    /// thread, as the chunks arrive.
    fn scan_slim_split(
        &self,
        clause: &str,
        params: &[i64],
        halves: [(i64, i64); 2],
        f: &mut dyn FnMut(SlimEvent),
    ) -> Result<u64> {
        let path = self.info.path.display().to_string();
        let err = |e: duckdb::Error| StoreError::Engine(format!("{path}: {e}"));
        let conns = self.with_conn(|c| Ok([c.try_clone()?, c.try_clone()?]))?;
        std::thread::scope(|s| {
            // a few chunks in flight per reader: the memory of the scan stays a few batches
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<SlimEvent>>>(4);
            for (conn, (lo, hi)) in conns.into_iter().zip(halves) {
                let (tx, err) = (tx.clone(), &err);
                let range = format!("id BETWEEN {lo} AND {hi}");
                let sql = format!("{SLIM_SELECT}{}", crate::reader_common::and_where(clause, &range));
                s.spawn(move || {
                    let read = || -> Result<()> {
                        let mut st = conn.prepare(&sql).map_err(err)?;
                        drop(st.stream_arrow(params_from_iter(params.iter())).map_err(err)?);
                        while let Some(chunk) = st.step().map_err(err)? {
                            let mut rows = Vec::new();
                            slim_rows(&RecordBatch::from(&chunk), &mut rows)?;
                            // the receiver gone: the caller stopped on an error of the other half
                            if tx.send(Ok(rows)).is_err() {
                                return Ok(());
                            }
                        }
                        Ok(())
                    };
                    if let Err(e) = read() {
                        let _ = tx.send(Err(e));
                    }
                });
            }
            drop(tx);
            let mut n = 0u64;
            for rows in &rx {
                let rows = rows?;
                n += rows.len() as u64;
                rows.into_iter().for_each(&mut *f);
            }
            Ok(n)
        })
    }
}

/// The WHERE clause of a filter in DuckDB (several ops as an IN list of keys: see
/// [`OpsCondition::Keys`]).
pub(super) fn where_clause(f: &EventFilter) -> (String, Vec<i64>) {
    crate::reader_common::where_clause_with(f, crate::reader_common::OpsCondition::Keys)
}

/// Events from which [`DuckDbStore::id_halves`] splits a scan in two.
const SPLIT_SCAN_MIN_EVENTS: u64 = 1_000_000;

/// What [`TraceStore::scan_slim`] reads of each event, in [`slim_rows`]'s column order.
pub(super) const SLIM_SELECT: &str = "SELECT id, timestamp, duration, pid, tid, source, op, arg0, arg2 FROM events";

/// The rows of a batch of [`SLIM_SELECT`], appended to `out`.
pub(super) fn slim_rows(b: &RecordBatch, out: &mut Vec<SlimEvent>) -> Result<()> {
    let c: Vec<Int64Array> = (0..9).map(|i| ints(b, i)).collect::<Result<_>>()?;
    out.extend((0..b.num_rows()).map(|r| SlimEvent {
        id: EventId::Int(val(&c[0], r)),
        ts: val(&c[1], r),
        dur: val(&c[2], r),
        pid: val(&c[3], r) as u32,
        tid: val(&c[4], r) as u32,
        op: OpCode::new(val(&c[5], r) as u8, val(&c[6], r) as u16),
        arg0: val(&c[7], r),
        arg2: val(&c[8], r),
    }));
    Ok(())
}

/// Column `i` of a batch as BIGINT values (cast when DuckDB chose a narrower type).
pub(super) fn ints(b: &RecordBatch, i: usize) -> Result<Int64Array> {
    let col: &ArrayRef = b.column(i);
    let c = if col.data_type() == &DataType::Int64 {
        col.clone()
    } else {
        cast(col, &DataType::Int64).map_err(arrow_err)?
    };
    Ok(c.as_primitive::<duckdb::arrow::datatypes::Int64Type>().clone())
}

/// Column `i` of a batch as text.
pub(super) fn texts(b: &RecordBatch, i: usize) -> Result<StringArray> {
    let col: &ArrayRef = b.column(i);
    let c =
        if col.data_type() == &DataType::Utf8 { col.clone() } else { cast(col, &DataType::Utf8).map_err(arrow_err)? };
    Ok(c.as_string::<i32>().clone())
}

/// An integer cell of a row (a native trace's columns hold what its schema says).
fn cell_int(r: &duckdb::Row<'_>, i: usize) -> duckdb::Result<i64> {
    r.get(i)
}

fn arrow_err(e: duckdb::arrow::error::ArrowError) -> StoreError {
    StoreError::Engine(format!("reading Arrow results: {e}"))
}

fn opt(a: &Int64Array, r: usize) -> Option<i64> {
    (!a.is_null(r)).then(|| a.value(r))
}

pub(super) fn val(a: &Int64Array, r: usize) -> i64 {
    opt(a, r).unwrap_or(0)
}

fn text(a: &StringArray, r: usize) -> String {
    if a.is_null(r) {
        String::new()
    } else {
        a.value(r).to_string()
    }
}

/// Rows of [`select_events`] to events.
fn batch_to_events(b: &RecordBatch, out: &mut Vec<StoredEvent>) -> Result<()> {
    batch_rows_to_events(b, 0..b.num_rows(), out)
}

/// Row `r`'s scheduler detail (`None` when `prev_state` is NULL) from its columns: `prev_state,
/// next_pid, next_tid, wake_ts, waker_pid, waker_tid`, and `next_comm`.
fn sched_at(c: [&Int64Array; 6], next_comm: &StringArray, r: usize) -> Option<SchedDetail> {
    opt(c[0], r).map(|ps| SchedDetail {
        prev_state: PrevState::from_code(ps),
        next_pid: val(c[1], r) as u32,
        next_tid: val(c[2], r) as u32,
        next_comm: text(next_comm, r),
        wake_ts_ns: val(c[3], r),
        waker_pid: val(c[4], r) as u32,
        waker_tid: val(c[5], r) as u32,
    })
}

/// The given rows of a [`select_events`] batch to events.
fn batch_rows_to_events(b: &RecordBatch, rows: impl Iterator<Item = usize>, out: &mut Vec<StoredEvent>) -> Result<()> {
    let i: Vec<Option<Int64Array>> =
        (0..24).map(|c| if [15, 19].contains(&c) { Ok(None) } else { ints(b, c).map(Some) }).collect::<Result<_>>()?;
    let c = |k: usize| i[k].as_ref().expect("integer column");
    let (comm, next_comm) = (texts(b, 15)?, texts(b, 19)?);
    for r in rows {
        let sched = sched_at([c(16), c(17), c(18), c(20), c(21), c(22)], &next_comm, r);
        out.push(StoredEvent {
            id: EventId::Int(val(c(0), r)),
            event: Event {
                ts_ns: val(c(1), r),
                dur_ns: val(c(2), r),
                pid: val(c(3), r) as u32,
                tid: val(c(4), r) as u32,
                cpu: opt(c(5), r).unwrap_or(-1) as i32,
                source: val(c(6), r) as u8,
                op: val(c(7), r) as u16,
                arg0: val(c(8), r),
                arg1: val(c(9), r),
                arg2: val(c(10), r),
                ret_code: val(c(11), r) as i32,
                stack_hash: val(c(12), r),
                gpu_id: val(c(13), r) as i32,
                cgroup_id: val(c(14), r),
                comm: text(&comm, r),
                sched,
                // NULL (no configuration, or a trace without the column) is 0.
                launch_config: val(c(23), r),
            },
        });
    }
    Ok(())
}

impl TraceStore for DuckDbStore {
    fn engine(&self) -> Engine {
        Engine::DuckDb
    }

    fn info(&self) -> &TraceInfo {
        &self.info
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        if !self.info.has_table("sessions") {
            return Ok(Vec::new());
        }
        self.with_conn(|c| {
            // Traces written before the column existed read as 0 (unknown).
            let has_tracer: bool = c.query_row(
                "SELECT count(*) > 0 FROM duckdb_columns() WHERE table_name = 'sessions' AND column_name = 'tracer_pid'",
                [],
                |r| r.get(0),
            )?;
            let tracer = if has_tracer { "coalesce(tracer_pid, 0)" } else { "0" };
            c.prepare(&format!(
                "SELECT id, started_at, stopped_at, tool_version, kernel, hostname, node, pid_filter, command, flags, \
                 gpu_model, gpu_driver, cuda_ver, {tracer} FROM sessions ORDER BY started_at, id"
            ))?
            .query_map([], |r| {
                Ok(SessionInfo {
                    id: r.get(0)?,
                    started_at_ns: r.get(1)?,
                    stopped_at_ns: r.get(2)?,
                    tool_version: r.get(3)?,
                    kernel: r.get(4)?,
                    hostname: r.get(5)?,
                    node: r.get(6)?,
                    pid_filter: r.get(7)?,
                    command: r.get(8)?,
                    flags: r.get(9)?,
                    gpu_model: r.get(10)?,
                    gpu_driver: r.get(11)?,
                    cuda_version: r.get(12)?,
                    tracer_pid: r.get::<_, i64>(13)? as u32,
                })
            })?
            .collect()
        })
    }

    fn process_names(&self) -> Result<BTreeMap<u32, String>> {
        if !self.info.has_table("process_names") {
            return Ok(BTreeMap::new());
        }
        let rows: Vec<(i64, String)> = self.with_conn(|c| {
            c.prepare("SELECT pid, name FROM process_names")?.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
        })?;
        Ok(rows.into_iter().map(|(p, n)| (p as u32, n)).collect())
    }

    fn scan_durations(&self, filter: &EventFilter, f: &mut dyn FnMut(&DurationRow)) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let sql = format!("SELECT source, op, pid, timestamp, duration FROM events{clause}");
        let mut n = 0u64;
        self.for_batches(&sql, &params, &mut |b| {
            let (s, o, p, t, d) = (ints(b, 0)?, ints(b, 1)?, ints(b, 2)?, ints(b, 3)?, ints(b, 4)?);
            for r in 0..b.num_rows() {
                f(&DurationRow {
                    op: OpCode::new(val(&s, r) as u8, val(&o, r) as u16),
                    pid: val(&p, r) as u32,
                    ts_ns: val(&t, r),
                    dur_ns: val(&d, r),
                });
            }
            n += b.num_rows() as u64;
            Ok(())
        })?;
        Ok(n)
    }

    fn scan_slim(&self, filter: &EventFilter, f: &mut dyn FnMut(SlimEvent)) -> Result<u64> {
        use crate::packed::calls;
        if self.finished && self.info.has_table(calls::STEP_TABLE) && calls::answers_steps(filter) {
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            return super::packed::scan_steps(&conn, filter, f);
        }
        let (clause, params) = where_clause(filter);
        // not sorted here (the trait promises no order): explain sorts its 48-byte calls in place,
        // which at 10M events loads in 2.5 s instead of 3.6-4.4 s behind DuckDB's ORDER BY, and
        // 110 MiB lower (DuckDB's sort held its runs beside the calls)
        let halves = self.id_halves()?;
        self.with_scan_memory(|| {
            if let Some(halves) = halves {
                return self.scan_slim_split(&clause, &params, halves, f);
            }
            let mut n = 0u64;
            let mut rows = Vec::new();
            self.for_batches(&format!("{SLIM_SELECT}{clause}"), &params, &mut |b| {
                slim_rows(b, &mut rows)?;
                n += rows.len() as u64;
                rows.drain(..).for_each(&mut *f);
                Ok(())
            })?;
            Ok(n)
        })
    }

    fn thread_comms(&self, filter: &EventFilter, latest: bool) -> Result<HashMap<u32, String>> {
        let (clause, params) = where_clause(filter);
        let clause = crate::reader_common::and_where(&clause, "comm != ''");
        let pick = if latest { "arg_max" } else { "arg_min" };
        let sql = format!("SELECT tid, {pick}(comm, (timestamp, id)) FROM events{clause} GROUP BY tid");
        let mut out = HashMap::new();
        self.for_batches(&sql, &params, &mut |b| {
            let (t, c) = (ints(b, 0)?, texts(b, 1)?);
            for r in 0..b.num_rows() {
                out.insert(val(&t, r) as u32, text(&c, r));
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn scan_events(&self, filter: &EventFilter, f: &mut dyn FnMut(StoredEvent)) -> Result<u64> {
        self.scan_events_kept(filter, &|_, _, _| true, f)
    }

    fn scan_events_kept(
        &self,
        filter: &EventFilter,
        keep: &dyn Fn(u32, i64, i64) -> bool,
        f: &mut dyn FnMut(StoredEvent),
    ) -> Result<u64> {
        let (clause, params) = where_clause(filter);
        let sql = format!("{}{clause} ORDER BY timestamp, id", self.select_events);
        let mut n = 0u64;
        let mut batch = Vec::new();
        self.for_batches(&sql, &params, &mut |b| {
            let (ts, dur, tid) = (ints(b, 1)?, ints(b, 2)?, ints(b, 4)?);
            let kept = (0..b.num_rows()).filter(|&r| keep(val(&tid, r) as u32, val(&ts, r), val(&dur, r)));
            batch_rows_to_events(b, kept, &mut batch)?;
            n += batch.len() as u64;
            batch.drain(..).for_each(&mut *f);
            Ok(())
        })?;
        Ok(n)
    }

    fn scan_switches_kept(
        &self,
        filter: &EventFilter,
        keep: &dyn Fn(u32, i64, i64) -> bool,
        f: &mut dyn FnMut(SwitchRow),
    ) -> Result<u64> {
        // Half of select_events' columns: the Arrow batches carry only these. Unordered (the trait
        // promises no order; explain sorts each thread's intervals): DuckDB's sort of the 1.4M
        // `sched_switch` rows of a 10M-event trace, under the reader's bounded memory, was most of
        // this read.
        let (clause, params) = where_clause(filter);
        let sql = format!(
            "SELECT id, timestamp, duration, pid, tid, cpu, prev_state, next_pid, next_tid, wake_ts, waker_pid, \
             waker_tid, next_comm FROM events{clause}"
        );
        let mut n = 0u64;
        self.with_scan_memory(|| {
            self.for_batches(&sql, &params, &mut |b| {
                let i: Vec<Int64Array> = (0..12).map(|c| ints(b, c)).collect::<Result<_>>()?;
                let next_comm = texts(b, 12)?;
                for r in 0..b.num_rows() {
                    let (ts, dur, tid) = (val(&i[1], r), val(&i[2], r), val(&i[4], r) as u32);
                    if !keep(tid, ts, dur) {
                        continue;
                    }
                    let sched = sched_at([&i[6], &i[7], &i[8], &i[9], &i[10], &i[11]], &next_comm, r);
                    let cpu = opt(&i[5], r).unwrap_or(-1) as i32;
                    f(SwitchRow {
                        id: EventId::Int(val(&i[0], r)),
                        ts,
                        dur,
                        pid: val(&i[3], r) as u32,
                        tid,
                        cpu,
                        sched,
                    });
                    n += 1;
                }
                Ok(())
            })
        })?;
        Ok(n)
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<StoredEvent>> {
        let (clause, params) = where_clause(filter);
        let sql = format!("{}{clause} ORDER BY timestamp, id", self.select_events);
        let mut out = Vec::new();
        self.for_batches(&sql, &params, &mut |b| batch_to_events(b, &mut out))?;
        Ok(out)
    }

    fn events_by_id(&self, ids: &[EventId]) -> Result<Vec<StoredEvent>> {
        // Native ids are integers: a text id names no event here.
        let ints: Vec<i64> = ids.iter().filter_map(|i| if let EventId::Int(v) = i { Some(*v) } else { None }).collect();
        let mut out = Vec::new();
        for chunk in ints.chunks(1000) {
            let sql = format!("{} WHERE id IN ({}) ORDER BY id", self.select_events, vec!["?"; chunk.len()].join(","));
            self.for_batches(&sql, chunk, &mut |b| batch_to_events(b, &mut out))?;
        }
        Ok(out)
    }

    crate::shared_reads::shared_trace_store_methods!(cell_int);

    fn query(&self, sql: &str, limits: &QueryLimits) -> Result<QueryResult> {
        match &self.reopen {
            Some(reopen) => crate::guard::run_duckdb_on(|| reopen(), sql, limits),
            None => crate::guard::run_duckdb(&self.info.path, sql, limits),
        }
    }

    /// Computed inside DuckDB (`quantile_disc` with exact DECIMAL fractions): faster than the
    /// default Arrow scan with selections in Rust, which the engines bench prints beside it.
    fn duration_summary(
        &self,
        filter: &EventFilter,
        per_mille: &[u32],
        per_process: bool,
    ) -> Result<crate::summary::DurationSummary> {
        if self.finished && filter.is_everything() {
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            let extent = (self.info.events, self.info.first_ns, self.info.last_ns);
            return super::packed::summarize(&conn, extent, per_mille, per_process);
        }
        super::summary::summarize_in_engine(self, filter, per_mille, per_process)
    }

    /// A finished DuckDB trace holds its sorted durations ([`super::packed::believed`]).
    fn summarizes_whole_trace_from_packed(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_split_in_two_id_ranges_reads_what_one_stream_reads() {
        use crate::{EngineWriter, SyntheticTrace};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("split.duckdb");
        let session = SessionInfo { started_at_ns: 1_000, tool_version: "test".into(), ..Default::default() };
        let mut w = super::super::DuckDbWriter::create(&path, &session).unwrap();
        let events = SyntheticTrace::new(11, 1_000_000_000).take(20_000);
        w.write_batches([events.as_slice()]).unwrap();
        w.finish(2_000).unwrap();
        let store = DuckDbStore::open(&path).unwrap();
        let halves = store.id_range_halves().unwrap().expect("20,000 ids split in two");
        assert_eq!((halves[0].0, halves[1].1), (1, 20_000));
        assert_eq!(halves[0].1 + 1, halves[1].0);
        let gpu = EventFilter { sources: Some(vec![1, 2]), ..Default::default() };
        let window = EventFilter {
            window: causeway_model::time::TimeWindow { from_ns: Some(events[5_000].ts_ns), to_ns: None },
            ..gpu.clone()
        };
        for filter in [EventFilter::default(), gpu, window] {
            let key = |e: &SlimEvent| (e.id.clone(), e.ts, e.dur, e.pid, e.tid, e.op, e.arg0, e.arg2);
            let (clause, params) = where_clause(&filter);
            let mut one = Vec::new();
            store.for_batches(&format!("{SLIM_SELECT}{clause}"), &params, &mut |b| slim_rows(b, &mut one)).unwrap();
            let mut split = Vec::new();
            let n = store.scan_slim_split(&clause, &params, halves, &mut |e| split.push(e)).unwrap();
            assert!(!one.is_empty());
            assert_eq!(n as usize, split.len());
            let (mut one, mut split): (Vec<_>, Vec<_>) =
                (one.iter().map(key).collect(), split.iter().map(key).collect());
            one.sort();
            split.sort();
            assert_eq!(one, split, "{filter:?}");
        }
    }

    #[test]
    fn a_reader_bounds_its_engine_memory_and_spills_into_its_own_directory() {
        let conn = Connection::open_in_memory().unwrap();
        bound_reader_memory(&conn).unwrap();
        let setting = |name: &str| -> String {
            conn.query_row(&format!("SELECT current_setting('{name}')"), [], |r| r.get(0)).unwrap()
        };
        // DuckDB reports the limit in its own units (128 MiB reads as "128.0 MiB")
        let limit = setting("memory_limit");
        assert!(limit.starts_with(&READER_MEMORY_MIB.to_string()) && limit.contains("MiB"), "{limit}");
        let spill = setting("temp_directory");
        assert!(spill.ends_with(&format!("causeway-duckdb-{}", std::process::id())), "{spill}");
        assert!(spill.starts_with(&*std::env::temp_dir().to_string_lossy()), "{spill}");
    }
}
