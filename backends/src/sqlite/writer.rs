//! Writing native traces to SQLite.
//!
//! [`SqliteWriter`] is the synchronous core: one connection, WAL, one prepared insert, one
//! transaction per batch group. [`SqliteSink`] is [`crate::sink::QueuedSink`] over it: the writer on
//! its own thread behind a bounded queue, so the tracer never waits on disk; when the queue is full,
//! `try_write_batch` drops the batch and counts it as back-pressure loss.

use std::path::{Path, PathBuf};

use rusqlite::{params, params_from_iter, Connection, OpenFlags, ToSql};

use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, LossCounter, NcclCall, NetPeer,
    ProcessCgroup, ProcessRank, ServingSample, SessionInfo,
};

use crate::cuda_tables::{self, AttachmentJson};
use crate::nvml_tables;
use crate::schema::{self, NATIVE_DDL};
use crate::sink::{EngineWriter, QueuedSink};
use crate::under_way;
use crate::{GpuTimelinePart, Result, StoreError};
use crate::{StackRecord, TraceStore};

/// The synchronous writer: owns the connection of one trace session.
pub struct SqliteWriter {
    conn: Connection,
    path: PathBuf,
    session_id: i64,
    /// The id the next event gets.
    next_id: i64,
    written: u64,
}

impl ToSql for crate::schema::SqlParam<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ValueRef;
        Ok(rusqlite::types::ToSqlOutput::Borrowed(match *self {
            Self::Null => ValueRef::Null,
            Self::Int(v) => ValueRef::Integer(v),
            Self::Real(v) => ValueRef::Real(v),
            Self::Text(t) => ValueRef::Text(t.as_bytes()),
        }))
    }
}

/// Add launch configurations (`INSERT OR IGNORE`: a key is stored once), in the caller's transaction.
pub(crate) fn insert_launch_configs(conn: &Connection, configs: &[LaunchConfig]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_LAUNCH_CONFIG_SQL)?;
    for c in configs {
        st.execute(params_from_iter(cuda_tables::launch_config_params(c)))?;
    }
    Ok(())
}

/// Record kernel names (a later name for the same (pid, handle) replaces the earlier one), in the
/// caller's transaction.
pub(crate) fn insert_kernel_names(conn: &Connection, names: &[KernelName]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_KERNEL_NAME_SQL)?;
    for k in cuda_tables::last_per_key(names, |k| (k.pid, k.handle)) {
        st.execute(params_from_iter(cuda_tables::kernel_name_params(k)))?;
    }
    Ok(())
}

/// Add socket peers (a known key is kept), in the caller's transaction.
pub(crate) fn insert_net_peers(conn: &Connection, peers: &[NetPeer]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_NET_PEER_SQL)?;
    for p in peers {
        st.execute(params_from_iter(cuda_tables::net_peer_params(p)))?;
    }
    Ok(())
}

/// Append NCCL call details, in the caller's transaction.
pub(crate) fn insert_nccl_calls(conn: &Connection, calls: &[NcclCall]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_NCCL_CALL_SQL)?;
    for c in calls {
        st.execute(params_from_iter(cuda_tables::nccl_call_params(c)))?;
    }
    Ok(())
}

/// Append GPU state samples and the processes' memory of the same samples, in the caller's
/// transaction.
pub(crate) fn insert_gpu_samples(
    conn: &Connection,
    samples: &[GpuSample],
    processes: &[GpuProcessMemory],
) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(&nvml_tables::insert_gpu_sample_sql())?;
    for s in samples {
        st.execute(params_from_iter(nvml_tables::gpu_sample_params(s)))?;
    }
    let mut st = conn.prepare_cached(nvml_tables::INSERT_GPU_PROCESS_MEMORY_SQL)?;
    for p in processes {
        st.execute(params_from_iter(nvml_tables::gpu_process_memory_params(p)))?;
    }
    Ok(())
}

/// Append serving engine samples, in the caller's transaction.
pub(crate) fn insert_serving_samples(conn: &Connection, samples: &[ServingSample]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_SERVING_SAMPLE_SQL)?;
    for s in samples {
        st.execute(params_from_iter(cuda_tables::serving_sample_params(s)))?;
    }
    Ok(())
}

/// Record processes' ranks (the last per pid wins), in the caller's transaction.
pub(crate) fn insert_process_ranks(conn: &Connection, ranks: &[ProcessRank]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_PROCESS_RANK_SQL)?;
    for r in cuda_tables::last_per_key(ranks, |r| r.pid) {
        st.execute(params_from_iter(cuda_tables::process_rank_params(r)))?;
    }
    Ok(())
}

/// Record processes' cgroups (the last per pid wins), in the caller's transaction.
pub(crate) fn insert_process_cgroups(conn: &Connection, cgroups: &[ProcessCgroup]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_PROCESS_CGROUP_SQL)?;
    for c in cuda_tables::last_per_key(cgroups, |c| c.pid) {
        st.execute(params_from_iter(cuda_tables::process_cgroup_params(c)))?;
    }
    Ok(())
}

/// Append a part of the device timeline (devices: the last per (pid, device) wins), in the
/// caller's transaction.
pub(crate) fn insert_gpu_timeline(conn: &Connection, part: &GpuTimelinePart) -> rusqlite::Result<()> {
    for (_, sql, rows) in crate::gpu_tables::part_rows(part) {
        if rows.is_empty() {
            continue;
        }
        let mut st = conn.prepare_cached(sql)?;
        for r in rows {
            st.execute(params_from_iter(r))?;
        }
    }
    Ok(())
}

/// Append what the traced processes touched (`footprint_*`), in the caller's transaction.
pub(crate) fn insert_footprint(conn: &Connection, part: &causeway_model::FootprintPart) -> rusqlite::Result<()> {
    for (table, rows) in crate::footprint_tables::part_rows(part) {
        if rows.is_empty() {
            continue;
        }
        let mut st = conn.prepare_cached(&table.insert_sql())?;
        for r in rows {
            st.execute(params_from_iter(r))?;
        }
    }
    Ok(())
}

/// Tie every device op to its launching call ([`crate::gpu_tables::resolve_launches_sql`]), after
/// the events' indexes and `gpu_ops`' own are built; nothing to do in a trace without ops (or
/// one written before the table existed).
fn resolve_launches(conn: &Connection) -> rusqlite::Result<()> {
    let has_table: bool =
        conn.query_row("SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'gpu_ops'", [], |r| {
            r.get(0)
        })?;
    if !has_table {
        return Ok(());
    }
    conn.execute_batch(crate::gpu_tables::SQLITE_INDEXES)?;
    if !conn.query_row(crate::gpu_tables::HAS_OPS_SQL, [], |r| r.get::<_, bool>(0))? {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    let [reset, best] = crate::gpu_tables::resolve_launches_sql(crate::Engine::Sqlite);
    tx.execute(&reset, [])?;
    tx.execute(&crate::gpu_tables::apply_launches_sql(&format!("({best})")), [])?;
    tx.commit()
}

/// Append attachments, each with its session id, in the caller's transaction.
pub(crate) fn insert_attachments<'a>(
    conn: &Connection,
    rows: impl IntoIterator<Item = (i64, &'a LibraryAttach)>,
) -> Result<()> {
    let mut st = conn.prepare_cached(cuda_tables::INSERT_ATTACHMENT_SQL)?;
    for (session_id, a) in rows {
        let json = AttachmentJson::of(a)?;
        st.execute(params_from_iter(cuda_tables::attachment_params(session_id, a, &json)))?;
    }
    Ok(())
}

/// Write one `sessions` row (native SQLite trace); `id: None` lets SQLite assign it. Returns the id.
pub(crate) fn insert_session(conn: &Connection, id: Option<i64>, s: &SessionInfo) -> rusqlite::Result<i64> {
    conn.execute(crate::schema::INSERT_SESSION_SQL, params_from_iter(crate::schema::session_params(id, s)))?;
    Ok(conn.last_insert_rowid())
}

/// The tables a part of a series carries over from the part before it, so that each part is a
/// standalone trace: the events of a later part name stacks, launch configurations and kernels
/// first seen in an earlier one, and its device ops the devices described in an earlier one.
const CARRIED_TABLES: [&str; 9] = [
    "stack_traces",
    "process_names",
    "launch_configs",
    "kernel_names",
    "net_peers",
    "process_ranks",
    "process_cgroups",
    "attachments",
    "gpu_devices",
];

/// Open a new or existing native trace for writing: WAL, the native schema (added columns
/// included) and the lookup tables, in one transaction with `then`.
fn open_for_writing(path: &Path, then: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<()>) -> Result<Connection> {
    let mut conn = crate::sqlite::heap::open(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StoreError::Engine(format!("{}: {e}", path.display())))?;
    // A reader of the live trace (`ship --follow`, `mcp`) can hold a lock for a moment (the
    // WAL index's recovery when it opens first): wait for it instead of failing a commit.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA temp_store=MEMORY; \
         PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=10000;",
    )?;
    let tx = conn.transaction()?;
    tx.execute_batch(NATIVE_DDL)?;
    schema::add_missing_columns(&tx)?;
    schema::fill_lookup_tables(&tx)?;
    // events are about to be added: the extent and the packed structures of the last finish are stale
    tx.execute("DELETE FROM schema_info WHERE key = ?1", [schema::FINISHED_EXTENT_KEY])?;
    for table in crate::packed::TABLES {
        tx.execute_batch(&format!("DROP TABLE IF EXISTS {table};"))?;
    }
    then(&tx)?;
    tx.commit()?;
    Ok(conn)
}

/// What a finished trace holds beyond its rows, built once its last row is in (by the writer's
/// finish and by `convert`): the indexes, each device op's launching call, the
/// [`packed`](crate::packed) structures, then the extent that vouches for them (so a reader that
/// finds the extent finds the launches resolved: the fleet's shipper waits for it).
pub(crate) fn build_finished_structures(conn: &Connection) -> rusqlite::Result<()> {
    let t = std::time::Instant::now();
    conn.execute_batch("PRAGMA threads=2;")?;
    conn.execute_batch(&schema::indexes())?;
    let indexes = t.elapsed();
    resolve_launches(conn)?;
    let launches = t.elapsed() - indexes;
    super::packed::build(conn)?;
    let packed = t.elapsed() - indexes - launches;
    schema::record_finished_extent(conn)?;
    tracing::debug!(?indexes, ?launches, ?packed, "finished trace structures built");
    Ok(())
}

/// [`build_finished_structures`] for a trace finished by an older build: the indexes it lacks,
/// and the packed structures with the extent when it has none.
pub(crate) fn build_finished_structures_missing(conn: &Connection) -> rusqlite::Result<()> {
    let has_packed: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [crate::packed::durations::TABLE],
        |r| r.get(0),
    )?;
    if has_packed {
        conn.execute_batch(&schema::indexes())
    } else {
        build_finished_structures(conn)
    }
}

/// Copy `table`'s rows from the attached `prev` into `main` (the columns both have; rows already
/// there are kept).
fn copy_carried_table(conn: &Connection, table: &str) -> rusqlite::Result<()> {
    let columns = |schema: &str| -> rusqlite::Result<Vec<String>> {
        conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}', '{schema}')"))?
            .query_map([], |r| r.get(0))?
            .collect()
    };
    let theirs = columns("prev")?;
    let shared: Vec<String> = columns("main")?.into_iter().filter(|c| theirs.contains(c)).collect();
    if shared.is_empty() {
        return Ok(());
    }
    let list = shared.join(", ");
    conn.execute(&format!("INSERT OR IGNORE INTO main.{table} ({list}) SELECT {list} FROM prev.{table}"), [])?;
    Ok(())
}

impl SqliteWriter {
    /// The id of the session this writer appends (`sessions.id`).
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The id the next event written gets.
    pub fn next_event_id(&self) -> i64 {
        self.next_id
    }

    /// Create `path` (which must not exist) as the next part of a series: the session `session_id`
    /// continues in it, its events are numbered from `next_id` on (ids stay unique across the
    /// series), and the side tables later events refer to are copied from `previous`, the part
    /// before it (a part that cannot be read is skipped with a warning: the series still reads
    /// them there).
    pub fn create_part(
        path: &Path,
        session: &SessionInfo,
        session_id: i64,
        next_id: i64,
        previous: Option<&Path>,
    ) -> Result<SqliteWriter> {
        if path.exists() {
            return Err(StoreError::InvalidArgument(format!("{} exists: a new part needs a new file", path.display())));
        }
        let conn = open_for_writing(path, |tx| {
            insert_session(tx, Some(session_id), &SessionInfo { stopped_at_ns: 0, ..session.clone() })?;
            Ok(())
        })?;
        if let Some(prev) = previous {
            let copied = (|| -> rusqlite::Result<()> {
                conn.execute("ATTACH DATABASE ?1 AS prev", [prev.to_string_lossy()])?;
                let tx = conn.unchecked_transaction()?;
                for table in CARRIED_TABLES {
                    copy_carried_table(&tx, table)?;
                }
                tx.commit()?;
                conn.execute_batch("DETACH DATABASE prev")
            })();
            if let Err(e) = copied {
                let _ = conn.execute_batch("DETACH DATABASE prev");
                if matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DiskFull)) {
                    return Err(e.into());
                }
                tracing::warn!(
                    "{}: the side tables of {} could not be carried over ({e}): the series still reads them there",
                    path.display(),
                    prev.display()
                );
            }
        }
        Ok(SqliteWriter { conn, path: path.to_path_buf(), session_id, next_id, written: 0 })
    }

    /// [`EngineWriter::finish`] waiting at most `patience` for readers before leaving WAL mode.
    pub fn finish_within(self, stopped_at_ns: i64, patience: std::time::Duration) -> Result<u64> {
        self.conn
            .execute("UPDATE sessions SET stopped_at = ?1 WHERE id = ?2", params![stopped_at_ns, self.session_id])?;
        // the last look went to `events`
        self.conn.execute(under_way::CLEAR_SESSION_SQL, params![self.session_id])?;
        build_finished_structures(&self.conn)?;
        leave_wal_mode(&self.conn, patience);
        Ok(self.written)
    }
}

impl EngineWriter for SqliteWriter {
    const THREAD_NAME: &'static str = "causeway-sqlite-writer";
    const GROUP_BATCHES: usize = 64;

    /// Create a native trace at `path`, or append a new session to an existing native trace.
    fn create(path: &Path, session: &SessionInfo) -> Result<SqliteWriter> {
        if path.exists() {
            // Refuse to write into anything that is not one of ours (an Ingero DB, a random file).
            let store = super::SqliteStore::open(path)?;
            if !matches!(store.info().format, crate::TraceFormat::Native { .. }) {
                return Err(StoreError::InvalidArgument(format!(
                    "{} is not a Causeway trace; convert it or choose another file",
                    path.display()
                )));
            }
        }
        let mut ids = (0, 0);
        let conn = open_for_writing(path, |tx| {
            // A new session is open: stopped_at is set when it finishes.
            let session_id = insert_session(tx, None, &SessionInfo { stopped_at_ns: 0, ..session.clone() })?;
            let next_id = tx.query_row("SELECT coalesce(max(id), 0) + 1 FROM events", [], |r| r.get(0))?;
            ids = (session_id, next_id);
            Ok(())
        })?;
        let (session_id, next_id) = ids;
        Ok(SqliteWriter { conn, path: path.to_path_buf(), session_id, next_id, written: 0 })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Insert batches of events in one transaction.
    fn write_batches<'a>(&mut self, batches: impl IntoIterator<Item = &'a [Event]>) -> Result<u64> {
        let tx = self.conn.transaction()?;
        let n = super::event_rows::insert_events(&tx, self.session_id, self.next_id, batches)?;
        tx.commit()?;
        self.written += n;
        self.next_id += n as i64;
        Ok(n)
    }

    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st =
                tx.prepare_cached("INSERT OR IGNORE INTO stack_traces (hash, ips, frames) VALUES (?1, ?2, ?3)")?;
            for s in stacks {
                st.execute(params![s.hash, s.ips, s.frames])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_process_name(&mut self, pid: u32, name: &str, seen_at_ns: i64) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO process_names (pid, name, seen_at) VALUES (?1, ?2, ?3)")?
            .execute(params![pid, name, seen_at_ns])?;
        Ok(())
    }

    /// Add launch configurations (deduplicated by key), in one transaction.
    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_launch_configs(&tx, configs)?;
        tx.commit()?;
        Ok(())
    }

    /// Record kernel names (a later one for the same (pid, handle) replaces it), in one transaction.
    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_kernel_names(&tx, names)?;
        tx.commit()?;
        Ok(())
    }

    /// Add socket peers, in one transaction.
    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_net_peers(&tx, peers)?;
        tx.commit()?;
        Ok(())
    }

    /// Append NCCL call details, in one transaction.
    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_nccl_calls(&tx, calls)?;
        tx.commit()?;
        Ok(())
    }

    /// Append GPU state samples and the processes' memory, in one transaction.
    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_gpu_samples(&tx, samples, processes)?;
        tx.commit()?;
        Ok(())
    }

    /// Append serving engine samples, in one transaction.
    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_serving_samples(&tx, samples)?;
        tx.commit()?;
        Ok(())
    }

    /// Record processes' ranks, in one transaction.
    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_process_ranks(&tx, ranks)?;
        tx.commit()?;
        Ok(())
    }

    /// Record processes' cgroups, in one transaction.
    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_process_cgroups(&tx, cgroups)?;
        tx.commit()?;
        Ok(())
    }

    /// Append a part of the device timeline, in one transaction.
    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_gpu_timeline(&tx, part)?;
        tx.commit()?;
        Ok(())
    }

    /// Append what the traced processes touched, in one transaction.
    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_footprint(&tx, part)?;
        tx.commit()?;
        Ok(())
    }

    /// Replace this session's `under_way` rows, in one transaction.
    fn write_under_way(&mut self, seen_at_ns: i64, events: &[Event]) -> Result<()> {
        let tx = self.conn.transaction()?;
        tx.execute(under_way::CLEAR_SESSION_SQL, params![self.session_id])?;
        {
            let mut st = tx.prepare_cached(&under_way::insert_sql())?;
            for e in events {
                st.execute(params_from_iter(under_way::params(seen_at_ns, self.session_id, e)))?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Append library attachments of this session, in one transaction.
    fn write_attachments(&mut self, attachments: &[LibraryAttach]) -> Result<()> {
        let tx = self.conn.transaction()?;
        insert_attachments(&tx, attachments.iter().map(|a| (self.session_id, a)))?;
        tx.commit()?;
        Ok(())
    }

    /// Store the session's loss counters (absolute values).
    fn write_losses(&mut self, losses: &[LossCounter]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT OR REPLACE INTO loss_counters (session_id, source, kind, count) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for l in losses {
                st.execute(params![self.session_id, l.source, l.kind.as_str(), l.count as i64])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Close the session: stopped_at, indexes, checkpoint, and back to a rollback journal so the file
    /// is self-contained (readable read-only, copyable, no sidecar files).
    fn finish(self, stopped_at_ns: i64) -> Result<u64> {
        self.finish_within(stopped_at_ns, LEAVE_WAL_PATIENCE)
    }

    fn written(&self) -> u64 {
        self.written
    }
}

/// How long a finishing writer keeps trying to leave WAL mode while readers hold the file.
const LEAVE_WAL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Checkpoint and switch back to a rollback journal, retrying while another connection holds the
/// file. Leaving WAL mode needs the only open connection, and SQLite answers `SQLITE_BUSY` at once
/// (no busy handler) while a reader is attached: the shipper of `trace --ship` between two polls,
/// or a live `causeway mcp` that may never let go. Every batch is already committed and the file
/// is readable in WAL mode too (readers open a file with a non-empty `-wal` read-only), so after
/// `patience` the trace stays in WAL mode with a warning instead of failing the whole trace.
fn leave_wal_mode(conn: &Connection, patience: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    let _ = conn.busy_timeout(std::time::Duration::from_millis(200));
    loop {
        let attempt = conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .and_then(|_| conn.query_row("PRAGMA journal_mode=DELETE", [], |r| r.get::<_, String>(0)));
        match attempt {
            Ok(mode) if mode.eq_ignore_ascii_case("delete") => return true,
            Ok(_) | Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Ok(mode) => {
                tracing::warn!(mode, "another connection held the trace at finish: it stays in WAL mode (readable)");
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "another connection held the trace at finish: it stays in WAL mode (readable)");
                return false;
            }
        }
    }
}

/// [`EventSink`](crate::EventSink) over SQLite: a [`SqliteWriter`] on its own thread behind a bounded queue.
pub type SqliteSink = QueuedSink<SqliteWriter>;
