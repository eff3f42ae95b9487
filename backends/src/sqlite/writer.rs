//! Writing native traces to SQLite.
//!
//! [`SqliteWriter`] is the synchronous core: one connection, WAL, one prepared insert, one
//! transaction per batch group. [`SqliteSink`] implements [`EventSink`] by running a writer on its
//! own thread behind a bounded queue, so the tracer never waits on disk; when the queue is full,
//! `try_write_batch` drops the batch and counts it as back-pressure loss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use causeway_model::{Event, LossKind, SessionInfo};

use crate::error::{Result, StoreError};
use crate::schema::{self, INDEXES, NATIVE_DDL};
use crate::store::{EventSink, SinkSummary, StackRecord, TraceStore};

const INSERT_EVENT: &str = "INSERT INTO events (timestamp, pid, tid, source, op, duration, gpu_id, arg0, arg1, arg2, \
     ret_code, stack_hash, cgroup_id, comm, session_id, cpu, prev_state, next_pid, next_tid, next_comm, wake_ts, \
     waker_pid, waker_tid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
     ?19, ?20, ?21, ?22, ?23)";

/// Loss counters shared between a sink handle and its writer thread.
type Losses = Arc<Mutex<BTreeMap<(u8, LossKind), u64>>>;

/// The synchronous writer: owns the connection of one trace session.
pub struct SqliteWriter {
    conn: Connection,
    path: PathBuf,
    session_id: i64,
    written: u64,
}

impl SqliteWriter {
    /// Create a native trace at `path`, or append a new session to an existing native trace.
    pub fn create(path: &Path, session: &SessionInfo) -> Result<SqliteWriter> {
        if path.exists() {
            // Refuse to write into anything that is not one of ours (an Ingero DB, a random file).
            let store = super::SqliteStore::open(path)?;
            if !matches!(store.info().format, crate::TraceFormat::Native { .. }) {
                return Err(StoreError::InvalidArgument(format!(
                    "{} is not a Causeway trace; convert it or choose another --db",
                    path.display()
                )));
            }
        }
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::Engine(format!("{}: {e}", path.display())))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA temp_store=MEMORY; \
             PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=10000;",
        )?;
        let tx = conn.transaction()?;
        tx.execute_batch(NATIVE_DDL)?;
        schema::fill_lookup_tables(&tx)?;
        tx.execute(
            "INSERT INTO sessions (started_at, tool_version, kernel, hostname, node, pid_filter, command, flags, \
             gpu_model, gpu_driver, cuda_ver) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                session.started_at_ns,
                session.tool_version,
                session.kernel,
                session.hostname,
                session.node,
                session.pid_filter,
                session.command,
                session.flags,
                session.gpu_model,
                session.gpu_driver,
                session.cuda_version
            ],
        )?;
        let session_id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(SqliteWriter { conn, path: path.to_path_buf(), session_id, written: 0 })
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Insert batches of events in one transaction.
    pub fn insert_batches<'a>(&mut self, batches: impl IntoIterator<Item = &'a [Event]>) -> Result<u64> {
        let tx = self.conn.transaction()?;
        let mut n = 0u64;
        {
            let mut st = tx.prepare_cached(INSERT_EVENT)?;
            for batch in batches {
                for e in batch {
                    let s = e.sched.as_ref();
                    st.execute(params![
                        e.ts_ns,
                        e.pid,
                        e.tid,
                        e.source,
                        e.op,
                        e.dur_ns,
                        e.gpu_id,
                        e.arg0,
                        e.arg1,
                        e.arg2,
                        e.ret_code,
                        e.stack_hash,
                        e.cgroup_id,
                        e.comm,
                        self.session_id,
                        e.cpu,
                        s.map(|s| s.prev_state.code()),
                        s.map(|s| s.next_pid),
                        s.map(|s| s.next_tid),
                        s.map(|s| s.next_comm.as_str()),
                        s.map(|s| s.wake_ts_ns),
                        s.map(|s| s.waker_pid),
                        s.map(|s| s.waker_tid),
                    ])?;
                    n += 1;
                }
            }
        }
        tx.commit()?;
        self.written += n;
        Ok(n)
    }

    pub fn insert_stacks(&mut self, stacks: &[StackRecord]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare_cached("INSERT OR IGNORE INTO stack_traces (hash, ips, frames) VALUES (?1, ?2, ?3)")?;
            for s in stacks {
                st.execute(params![s.hash, s.ips, s.frames])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn set_process_name(&mut self, pid: u32, name: &str, seen_at_ns: i64) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO process_names (pid, name, seen_at) VALUES (?1, ?2, ?3)")?
            .execute(params![pid, name, seen_at_ns])?;
        Ok(())
    }

    /// Store the session's loss counters (absolute values).
    pub fn store_losses(&mut self, losses: &BTreeMap<(u8, LossKind), u64>) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT OR REPLACE INTO loss_counters (session_id, source, kind, count) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for ((source, kind), count) in losses {
                st.execute(params![self.session_id, source, kind.as_str(), *count as i64])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Close the session: stopped_at, indexes, checkpoint, and back to a rollback journal so the file
    /// is self-contained (readable read-only, copyable, no sidecar files).
    pub fn finish(self, stopped_at_ns: i64) -> Result<u64> {
        self.conn.execute("UPDATE sessions SET stopped_at = ?1 WHERE id = ?2", params![stopped_at_ns, self.session_id])?;
        self.conn.execute_batch("PRAGMA threads=2;")?;
        self.conn.execute_batch(INDEXES)?;
        self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")?;
        Ok(self.written)
    }
}

enum Msg {
    Batch(Vec<Event>),
    Stacks(Vec<StackRecord>),
    ProcessName(u32, String, i64),
    Flush(oneshot::Sender<Result<()>>),
}

/// [`EventSink`] over SQLite: a writer thread behind a bounded queue.
pub struct SqliteSink {
    tx: mpsc::Sender<Msg>,
    losses: Losses,
    thread: Option<std::thread::JoinHandle<Result<SqliteWriter>>>,
    path: PathBuf,
}

/// Batches the writer queue holds before `try_write_batch` starts dropping.
const QUEUE_BATCHES: usize = 256;

impl SqliteSink {
    pub fn create(path: &Path, session: SessionInfo) -> Result<SqliteSink> {
        Self::with_queue(path, session, QUEUE_BATCHES)
    }

    /// Like [`SqliteSink::create`] with a chosen queue depth (in batches); tests use tiny queues to
    /// provoke back-pressure.
    pub fn with_queue(path: &Path, session: SessionInfo, batches: usize) -> Result<SqliteSink> {
        let mut writer = SqliteWriter::create(path, &session)?;
        let (tx, mut rx) = mpsc::channel::<Msg>(batches.max(1));
        let losses: Losses = Arc::default();
        let thread_losses = losses.clone();
        let thread = std::thread::Builder::new().name("causeway-sqlite-writer".into()).spawn(move || {
            let mut pending: Vec<Vec<Event>> = Vec::new();
            while let Some(first) = rx.blocking_recv() {
                let mut flushes = Vec::new();
                let mut handle = |m: Msg, w: &mut SqliteWriter, pending: &mut Vec<Vec<Event>>| -> Result<()> {
                    match m {
                        Msg::Batch(b) => pending.push(b),
                        Msg::Stacks(s) => w.insert_stacks(&s)?,
                        Msg::ProcessName(pid, name, at) => w.set_process_name(pid, &name, at)?,
                        Msg::Flush(done) => flushes.push(done),
                    }
                    Ok(())
                };
                let mut result = handle(first, &mut writer, &mut pending);
                // Group whatever else is queued into the same transaction.
                while pending.len() < 64 {
                    match rx.try_recv() {
                        Ok(m) => result = result.and(handle(m, &mut writer, &mut pending)),
                        Err(_) => break,
                    }
                }
                if !pending.is_empty() {
                    if let Err(e) = writer.insert_batches(pending.iter().map(|b| b.as_slice())) {
                        let mut l = thread_losses.lock().unwrap();
                        for ev in pending.iter().flatten() {
                            *l.entry((ev.source, LossKind::Write)).or_default() += 1;
                        }
                        tracing::error!("writing a batch to {} failed: {e}", writer.path().display());
                        result = result.and(Err(e));
                    }
                    pending.clear();
                }
                if !flushes.is_empty() {
                    let snapshot = thread_losses.lock().unwrap().clone();
                    let r = result.and_then(|_| writer.store_losses(&snapshot));
                    for f in flushes {
                        let _ = f.send(r.as_ref().map(|_| ()).map_err(|e| StoreError::Engine(e.to_string())));
                    }
                }
            }
            Ok(writer)
        })?;
        Ok(SqliteSink { tx, losses, thread: Some(thread), path: path.to_path_buf() })
    }

    fn gone(&self) -> StoreError {
        StoreError::WriterGone(format!("writer thread for {} exited", self.path.display()))
    }
}

#[async_trait::async_trait]
impl EventSink for SqliteSink {
    async fn write_batch(&mut self, events: Vec<Event>) -> Result<()> {
        self.tx.send(Msg::Batch(events)).await.map_err(|_| self.gone())
    }

    fn try_write_batch(&mut self, events: Vec<Event>) -> bool {
        match self.tx.try_send(Msg::Batch(events)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(Msg::Batch(b)) | mpsc::error::TrySendError::Closed(Msg::Batch(b))) => {
                let mut l = self.losses.lock().unwrap();
                for e in &b {
                    *l.entry((e.source, LossKind::SinkBackpressure)).or_default() += 1;
                }
                false
            }
            Err(_) => false,
        }
    }

    async fn write_stacks(&mut self, stacks: Vec<StackRecord>) -> Result<()> {
        self.tx.send(Msg::Stacks(stacks)).await.map_err(|_| self.gone())
    }

    async fn write_process_name(&mut self, pid: u32, name: String, seen_at_ns: i64) -> Result<()> {
        self.tx.send(Msg::ProcessName(pid, name, seen_at_ns)).await.map_err(|_| self.gone())
    }

    fn add_loss(&mut self, source: u8, kind: LossKind, n: u64) {
        if n > 0 {
            *self.losses.lock().unwrap().entry((source, kind)).or_default() += n;
        }
    }

    async fn flush(&mut self) -> Result<()> {
        let (done, wait) = oneshot::channel();
        self.tx.send(Msg::Flush(done)).await.map_err(|_| self.gone())?;
        wait.await.map_err(|_| self.gone())?
    }

    async fn finish(mut self: Box<Self>, stopped_at_ns: i64) -> Result<SinkSummary> {
        self.flush().await?;
        let thread = self.thread.take().expect("finish runs once");
        let losses = self.losses.clone();
        drop(self); // closes the queue: the writer thread returns its writer
        tokio::task::spawn_blocking(move || -> Result<SinkSummary> {
            let mut writer = thread.join().map_err(|_| StoreError::WriterGone("writer thread panicked".into()))??;
            let snapshot = losses.lock().unwrap().clone();
            writer.store_losses(&snapshot)?;
            let events_written = writer.finish(stopped_at_ns)?;
            Ok(SinkSummary {
                events_written,
                losses: snapshot.into_iter().map(|((s, k), n)| (s, k.as_str().to_string(), n)).collect(),
            })
        })
        .await
        .map_err(|e| StoreError::WriterGone(e.to_string()))?
    }
}
