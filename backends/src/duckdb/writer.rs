//! Writing native traces to DuckDB.
//!
//! [`DuckDbWriter`] is the synchronous core: one read-write connection; events are turned into Arrow
//! record batches (columnar, no per-value calls) and handed to DuckDB's Appender, one commit per
//! batch group. [`DuckDbSink`] is [`crate::sink::QueuedSink`] over it, like the SQLite sink: the
//! writer on its own thread behind a bounded queue, so the tracer never waits on disk, and a full
//! queue makes `try_write_batch` drop the batch and count it as back-pressure loss.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use duckdb::arrow::array::{ArrayRef, Int64Builder, StringBuilder};
use duckdb::arrow::datatypes::{DataType, Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::{params, Connection};

use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, LossCounter, NcclCall, NetPeer,
    ProcessCgroup, ProcessRank, ServingSample, SessionInfo,
};

use super::{base_config, engine_err, init_native_schema, EVENT_COLUMNS};
use crate::conversion::{NativeRow, RowExtra};
use crate::cuda_tables::{self, AttachmentJson};
use crate::nvml_tables;
use crate::sink::{EngineWriter, QueuedSink};
use crate::under_way;
use crate::{GpuTimelinePart, Result, StoreError};
use crate::{StackRecord, TraceStore};

enum Builder {
    I(Int64Builder),
    S(StringBuilder),
}

/// Columnar buffers for the `events` table, in [`EVENT_COLUMNS`] order.
struct EventColumns {
    cols: Vec<Builder>,
    rows: usize,
}

const STRING_COLUMNS: [&str; 4] = ["stack_ips", "node", "comm", "next_comm"];

impl EventColumns {
    fn new(capacity: usize) -> EventColumns {
        let cols = EVENT_COLUMNS
            .iter()
            .map(|c| {
                if STRING_COLUMNS.contains(c) {
                    Builder::S(StringBuilder::with_capacity(capacity, capacity * 8))
                } else {
                    Builder::I(Int64Builder::with_capacity(capacity))
                }
            })
            .collect();
        EventColumns { cols, rows: 0 }
    }

    fn push(&mut self, id: i64, session_id: i64, e: &Event, x: Option<&RowExtra>) {
        let s = e.sched.as_ref();
        let int = |v: i64| Some(v);
        let ints: [Option<i64>; 26] = [
            int(id),
            int(e.ts_ns),
            int(e.pid.into()),
            int(e.tid.into()),
            int(e.source.into()),
            int(e.op.into()),
            int(e.dur_ns),
            int(e.gpu_id.into()),
            int(e.arg0),
            int(e.arg1),
            int(e.ret_code.into()),
            int(e.stack_hash),
            int(e.cgroup_id),
            x.and_then(|x| x.rank),
            x.and_then(|x| x.local_rank),
            x.and_then(|x| x.world_size),
            int(session_id),
            int(e.cpu.into()),
            int(e.arg2),
            s.map(|s| i64::from(s.prev_state.code())),
            s.map(|s| s.next_pid.into()),
            s.map(|s| s.next_tid.into()),
            s.map(|s| s.wake_ts_ns),
            s.map(|s| s.waker_pid.into()),
            s.map(|s| s.waker_tid.into()),
            // 0 (no configuration) is stored as NULL.
            (e.launch_config != 0).then_some(e.launch_config),
        ];
        let strs: [Option<&str>; 4] = [
            Some(x.map_or("", |x| x.stack_ips.as_str())),
            Some(x.map_or("", |x| x.node.as_str())),
            Some(e.comm.as_str()),
            s.map(|s| s.next_comm.as_str()),
        ];
        let (mut i, mut j) = (0, 0);
        for b in &mut self.cols {
            match b {
                Builder::I(b) => {
                    b.append_option(ints[i]);
                    i += 1;
                }
                Builder::S(b) => {
                    b.append_option(strs[j]);
                    j += 1;
                }
            }
        }
        self.rows += 1;
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        let mut fields = Vec::with_capacity(EVENT_COLUMNS.len());
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(EVENT_COLUMNS.len());
        for (name, b) in EVENT_COLUMNS.iter().zip(&mut self.cols) {
            match b {
                Builder::I(b) => {
                    fields.push(Field::new(*name, DataType::Int64, true));
                    arrays.push(Arc::new(b.finish()));
                }
                Builder::S(b) => {
                    fields.push(Field::new(*name, DataType::Utf8, true));
                    arrays.push(Arc::new(b.finish()));
                }
            }
        }
        self.rows = 0;
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .map_err(|e| StoreError::Engine(format!("building an Arrow batch: {e}")))
    }
}

/// Events per part below which a group is appended on one thread (about one DuckDB row group).
pub const PARALLEL_PART_ROWS: usize = 131_072;

/// Append one Arrow batch to `events` (its own commit when no transaction is open).
fn append_to(conn: &Connection, batch: RecordBatch) -> duckdb::Result<()> {
    let mut app = conn.appender("events")?;
    app.append_record_batch(batch)?;
    app.flush()
}

/// Columns for `len` events with ids from `first_id` on.
fn columns_of<'a>(
    first_id: i64,
    session_id: i64,
    len: usize,
    events: impl IntoIterator<Item = &'a Event>,
) -> EventColumns {
    let mut cols = EventColumns::new(len);
    for (i, e) in events.into_iter().enumerate() {
        cols.push(first_id + i as i64, session_id, e, None);
    }
    cols
}

impl duckdb::ToSql for crate::schema::SqlParam<'_> {
    fn to_sql(&self) -> duckdb::Result<duckdb::types::ToSqlOutput<'_>> {
        use duckdb::types::ValueRef;
        Ok(duckdb::types::ToSqlOutput::Borrowed(match *self {
            Self::Null => ValueRef::Null,
            Self::Int(v) => ValueRef::BigInt(v),
            Self::Real(v) => ValueRef::Double(v),
            Self::Text(t) => ValueRef::Text(t.as_bytes()),
        }))
    }
}

/// The synchronous writer: owns the connections of one trace session.
pub struct DuckDbWriter {
    conn: Connection,
    /// More connections to the same database, for groups appended in parallel parts.
    extra_conns: Vec<Connection>,
    /// Most parts a group is split into (the host's cores, at most 4).
    parallelism: usize,
    path: PathBuf,
    session_id: i64,
    next_id: i64,
    written: u64,
}

impl DuckDbWriter {
    /// Create (or open) a native DuckDB trace without starting a session (`causeway convert` writes
    /// the original's sessions itself).
    pub fn create_empty(path: &Path) -> Result<DuckDbWriter> {
        if path.exists() {
            let store = super::DuckDbStore::open(path)?;
            if !matches!(store.info().format, crate::TraceFormat::Native { .. }) {
                return Err(StoreError::InvalidArgument(format!(
                    "{} is not a Causeway trace; convert it or choose another --db",
                    path.display()
                )));
            }
        }
        let err = engine_err(path);
        let config = base_config(false).map_err(&err)?;
        let conn = Connection::open_with_flags(path, config).map_err(&err)?;
        init_native_schema(&conn).map_err(&err)?;
        // events are about to be added: what the last finish packed no longer holds them all
        super::packed::forget(&conn).map_err(&err)?;
        let next_id: i64 =
            conn.query_row("SELECT coalesce(max(id), 0) + 1 FROM events", [], |r| r.get(0)).map_err(&err)?;
        let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        Ok(DuckDbWriter {
            conn,
            extra_conns: Vec::new(),
            parallelism,
            path: path.to_path_buf(),
            session_id: 0,
            next_id,
            written: 0,
        })
    }

    fn next_session_id(&self) -> Result<i64> {
        self.conn
            .query_row("SELECT coalesce(max(id), 0) + 1 FROM sessions", [], |r| r.get(0))
            .map_err(engine_err(&self.path))
    }

    /// Insert a session row with a chosen id.
    pub fn insert_session(&mut self, id: i64, s: &SessionInfo) -> Result<()> {
        self.conn
            .execute(
                crate::schema::INSERT_SESSION_SQL,
                duckdb::params_from_iter(crate::schema::session_params(Some(id), s)),
            )
            .map_err(engine_err(&self.path))?;
        Ok(())
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Split large groups into at most `parts` parallel parts (default: the host's cores, at most 4;
    /// 1 appends every group on the writer's own thread).
    pub fn set_parallelism(&mut self, parts: usize) {
        self.parallelism = parts.max(1);
    }

    fn append(&mut self, mut cols: EventColumns) -> Result<u64> {
        let n = cols.rows as u64;
        if n == 0 {
            return Ok(0);
        }
        append_to(&self.conn, cols.finish()?).map_err(engine_err(&self.path))?;
        self.written += n;
        Ok(n)
    }

    /// Build and append `parts` slices of `events` on as many threads and connections. DuckDB's
    /// Appender is single-threaded and compresses full row groups as they are appended, so this is
    /// what lets a writer that fell behind use more than one core. One part failing deletes the
    /// parts that committed again (by id range), so that a failed group is lost whole and the sink's
    /// loss count stays exact.
    fn append_parts(&mut self, first_id: i64, events: &[&Event], parts: usize) -> Result<u64> {
        let err = engine_err(&self.path);
        while self.extra_conns.len() < parts - 1 {
            self.extra_conns.push(self.conn.try_clone().map_err(&err)?);
        }
        let per = events.len().div_ceil(parts);
        // (first id, events) of each part
        let chunks: Vec<(i64, &[&Event])> =
            events.chunks(per).enumerate().map(|(k, c)| (first_id + (k * per) as i64, c)).collect();
        let session_id = self.session_id;
        // part 0 on this thread and connection, the others on their own thread with a connection of
        // their own (a Connection is Send, not Sync)
        let build_and_append =
            |(start, chunk): (i64, &[&Event]), conn: &Connection| -> std::result::Result<(), String> {
                let batch = columns_of(start, session_id, chunk.len(), chunk.iter().copied())
                    .finish()
                    .map_err(|e| e.to_string())?;
                append_to(conn, batch).map_err(|e| e.to_string())
            };
        let extra = std::mem::take(&mut self.extra_conns);
        let (first, others) = std::thread::scope(|scope| {
            let handles: Vec<_> = chunks[1..]
                .iter()
                .zip(extra)
                .map(|(&part, conn)| {
                    let f = &build_and_append;
                    scope.spawn(move || {
                        let r = f(part, &conn);
                        (conn, r)
                    })
                })
                .collect();
            let first = build_and_append(chunks[0], &self.conn);
            let others: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            (first, others)
        });
        let mut outcomes = vec![first];
        for o in others {
            match o {
                Ok((conn, r)) => {
                    self.extra_conns.push(conn);
                    outcomes.push(r);
                }
                Err(_) => outcomes.push(Err("a writer part panicked".into())),
            }
        }
        // (first id, end id, outcome) of each part
        let results: Vec<(i64, i64, std::result::Result<(), String>)> =
            chunks.iter().zip(outcomes).map(|(&(start, c), r)| (start, start + c.len() as i64, r)).collect();
        if let Some(e) = results.iter().find_map(|r| r.2.as_ref().err()) {
            let msg = format!("{}: appending part of a group of {} events: {e}", self.path.display(), events.len());
            for (lo, hi, r) in &results {
                if r.is_ok() {
                    self.conn.execute("DELETE FROM events WHERE id >= ? AND id < ?", params![lo, hi]).map_err(|d| {
                        StoreError::Engine(format!("{msg}; removing the parts that did commit also failed: {d}"))
                    })?;
                }
            }
            return Err(StoreError::Engine(msg));
        }
        self.written += events.len() as u64;
        Ok(events.len() as u64)
    }

    /// Append full native rows with their own ids and sessions (conversion).
    pub fn insert_rows(&mut self, rows: &[NativeRow]) -> Result<u64> {
        let mut cols = EventColumns::new(rows.len());
        for r in rows {
            cols.push(r.id, r.session_id, &r.event, Some(&r.extra));
            self.next_id = self.next_id.max(r.id + 1);
        }
        self.append(cols)
    }

    /// Run `f` in one transaction: committed when it succeeds, rolled back when it fails.
    fn in_transaction(&self, f: impl FnOnce(&Connection) -> Result<()>) -> Result<()> {
        let err = engine_err(&self.path);
        self.conn.execute_batch("BEGIN").map_err(&err)?;
        match f(&self.conn) {
            Ok(()) => self.conn.execute_batch("COMMIT").map_err(&err),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Append library attachments, each with its own session id (conversion), in one transaction.
    pub fn insert_attachments_of<'a>(
        &mut self,
        rows: impl IntoIterator<Item = (i64, &'a LibraryAttach)>,
    ) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_ATTACHMENT_SQL).map_err(&err)?;
            for (session_id, a) in rows {
                let json = AttachmentJson::of(a)?;
                st.execute(duckdb::params_from_iter(cuda_tables::attachment_params(session_id, a, &json)))
                    .map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Store loss counters of a session (absolute values).
    pub fn store_losses_of<'a>(&mut self, rows: impl IntoIterator<Item = (i64, &'a LossCounter)>) -> Result<()> {
        let err = engine_err(&self.path);
        self.conn.execute_batch("BEGIN").map_err(&err)?;
        {
            let mut st = self
                .conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO loss_counters (session_id, source, kind, count) VALUES (?, ?, ?, ?)",
                )
                .map_err(&err)?;
            for (session_id, l) in rows {
                st.execute(params![session_id, l.source, l.kind.as_str(), l.count as i64]).map_err(&err)?;
            }
        }
        self.conn.execute_batch("COMMIT").map_err(&err)
    }
}

impl EngineWriter for DuckDbWriter {
    const THREAD_NAME: &'static str = "causeway-duckdb-writer";
    const GROUP_BATCHES: usize = 256;

    /// Create a native DuckDB trace at `path`, or append a new session to an existing one.
    fn create(path: &Path, session: &SessionInfo) -> Result<DuckDbWriter> {
        let mut w = Self::create_empty(path)?;
        let id = w.next_session_id()?;
        w.insert_session(id, session)?;
        w.session_id = id;
        Ok(w)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Append batches of events (ids assigned in order) in one commit, or, for a large group (a
    /// writer that has fallen behind), in parallel parts of at least [`PARALLEL_PART_ROWS`] events,
    /// one connection and one commit each, all or nothing (see [`DuckDbWriter::append_parts`]).
    fn write_batches<'a>(&mut self, batches: impl IntoIterator<Item = &'a [Event]>) -> Result<u64> {
        let batches: Vec<&[Event]> = batches.into_iter().collect();
        let total: usize = batches.iter().map(|b| b.len()).sum();
        let first_id = self.next_id;
        self.next_id += total as i64;
        let parts = (total / PARALLEL_PART_ROWS).clamp(1, self.parallelism);
        if parts == 1 {
            return self.append(columns_of(first_id, self.session_id, total, batches.into_iter().flatten()));
        }
        let events: Vec<&Event> = batches.into_iter().flatten().collect();
        self.append_parts(first_id, &events, parts)
    }

    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()> {
        let err = engine_err(&self.path);
        self.conn.execute_batch("BEGIN").map_err(&err)?;
        {
            let mut st = self
                .conn
                .prepare_cached("INSERT OR IGNORE INTO stack_traces (hash, ips, frames) VALUES (?, ?, ?)")
                .map_err(&err)?;
            for s in stacks {
                st.execute(params![s.hash, s.ips, s.frames]).map_err(&err)?;
            }
        }
        self.conn.execute_batch("COMMIT").map_err(&err)
    }

    fn write_process_name(&mut self, pid: u32, name: &str, seen_at_ns: i64) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO process_names (pid, name, seen_at) VALUES (?, ?, ?)")
            .and_then(|mut st| st.execute(params![pid, name, seen_at_ns]))
            .map_err(engine_err(&self.path))?;
        Ok(())
    }

    /// Add launch configurations (`INSERT OR IGNORE`: a key is stored once), in one transaction.
    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_LAUNCH_CONFIG_SQL).map_err(&err)?;
            for cfg in configs {
                st.execute(duckdb::params_from_iter(cuda_tables::launch_config_params(cfg))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Record kernel names (a later name for the same (pid, handle) replaces the earlier one), in
    /// one transaction.
    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_KERNEL_NAME_SQL).map_err(&err)?;
            for k in cuda_tables::last_per_key(names, |k| (k.pid, k.handle)) {
                st.execute(duckdb::params_from_iter(cuda_tables::kernel_name_params(k))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Add socket peers (a known key is kept), in one transaction.
    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_NET_PEER_SQL).map_err(&err)?;
            for p in peers {
                st.execute(duckdb::params_from_iter(cuda_tables::net_peer_params(p))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Append library attachments of this session, in one transaction.
    fn write_attachments(&mut self, attachments: &[LibraryAttach]) -> Result<()> {
        let rows: Vec<(i64, &LibraryAttach)> = attachments.iter().map(|a| (self.session_id, a)).collect();
        self.insert_attachments_of(rows)
    }

    /// Append NCCL call details, in one transaction.
    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_NCCL_CALL_SQL).map_err(&err)?;
            for call in calls {
                st.execute(duckdb::params_from_iter(cuda_tables::nccl_call_params(call))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Append serving engine samples, in one transaction.
    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_SERVING_SAMPLE_SQL).map_err(&err)?;
            for s in samples {
                st.execute(duckdb::params_from_iter(cuda_tables::serving_sample_params(s))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Append GPU state samples and the processes' memory, in one transaction.
    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()> {
        let err = engine_err(&self.path);
        let sql = nvml_tables::insert_gpu_sample_sql();
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(&sql).map_err(&err)?;
            for s in samples {
                st.execute(duckdb::params_from_iter(nvml_tables::gpu_sample_params(s))).map_err(&err)?;
            }
            let mut st = c.prepare_cached(nvml_tables::INSERT_GPU_PROCESS_MEMORY_SQL).map_err(&err)?;
            for p in processes {
                st.execute(duckdb::params_from_iter(nvml_tables::gpu_process_memory_params(p))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Record processes' cgroups (the last per pid wins), in one transaction.
    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_PROCESS_CGROUP_SQL).map_err(&err)?;
            for g in cuda_tables::last_per_key(cgroups, |g| g.pid) {
                st.execute(duckdb::params_from_iter(cuda_tables::process_cgroup_params(g))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Record processes' ranks (the last per pid wins), in one transaction.
    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            let mut st = c.prepare_cached(cuda_tables::INSERT_PROCESS_RANK_SQL).map_err(&err)?;
            for r in cuda_tables::last_per_key(ranks, |r| r.pid) {
                st.execute(duckdb::params_from_iter(cuda_tables::process_rank_params(r))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Append a part of the device timeline, in one transaction: the ops through the Appender (a
    /// prepared INSERT per op cost 100 us each: 10 s for 100,000 kernels), the rest by INSERT.
    /// Replace this session's `under_way` rows, in one transaction.
    fn write_under_way(&mut self, seen_at_ns: i64, events: &[Event]) -> Result<()> {
        let err = engine_err(&self.path);
        let session = self.session_id;
        self.in_transaction(|c| {
            c.execute(under_way::CLEAR_SESSION_SQL, params![session]).map_err(&err)?;
            let mut st = c.prepare_cached(&under_way::insert_sql()).map_err(&err)?;
            for e in events {
                st.execute(duckdb::params_from_iter(under_way::params(seen_at_ns, session, e))).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// Append what the traced processes touched, in one transaction.
    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            for (table, rows) in crate::footprint_tables::part_rows(part) {
                if rows.is_empty() {
                    continue;
                }
                let mut st = c.prepare_cached(&table.insert_sql()).map_err(&err)?;
                for r in rows {
                    st.execute(duckdb::params_from_iter(r)).map_err(&err)?;
                }
            }
            Ok(())
        })
    }

    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()> {
        let err = engine_err(&self.path);
        self.in_transaction(|c| {
            for (table, sql, rows) in
                crate::gpu_tables::part_rows(part).into_iter().filter(|(.., rows)| !rows.is_empty())
            {
                if table == "gpu_ops" {
                    let mut app = c.appender(table).map_err(&err)?;
                    for r in rows {
                        app.append_row(duckdb::appender_params_from_iter(r)).map_err(&err)?;
                    }
                    app.flush().map_err(&err)?;
                    continue;
                }
                let mut st = c.prepare_cached(sql).map_err(&err)?;
                for r in rows {
                    st.execute(duckdb::params_from_iter(r)).map_err(&err)?;
                }
            }
            Ok(())
        })
    }

    /// Store this session's loss counters (absolute values).
    fn write_losses(&mut self, losses: &[LossCounter]) -> Result<()> {
        let session_id = self.session_id;
        self.store_losses_of(losses.iter().map(|l| (session_id, l)))
    }

    fn written(&self) -> u64 {
        self.written
    }

    /// Close the session (stopped_at), tie the device ops to their launching calls, pack what a
    /// finished trace holds ([`super::packed`]) and checkpoint, so the file is self-contained (no
    /// `.wal`).
    fn finish(self, stopped_at_ns: i64) -> Result<u64> {
        let err = engine_err(&self.path);
        if self.session_id > 0 {
            self.conn
                .execute("UPDATE sessions SET stopped_at = ? WHERE id = ?", params![stopped_at_ns, self.session_id])
                .map_err(&err)?;
            // the last look went to `events`
            self.conn.execute(under_way::CLEAR_SESSION_SQL, params![self.session_id]).map_err(&err)?;
        }
        super::resolve_launches(&self.conn).map_err(&err)?;
        super::packed::build(&self.conn)?;
        self.conn.execute_batch("CHECKPOINT").map_err(&err)?;
        let written = self.written;
        self.conn.close().map_err(|(_, e)| err(e))?;
        Ok(written)
    }
}

/// [`EventSink`](crate::EventSink) over DuckDB: a [`DuckDbWriter`] on its own thread behind a
/// bounded queue.
pub type DuckDbSink = QueuedSink<DuckDbWriter>;
