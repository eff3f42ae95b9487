//! The [`EventSink`] machinery every engine shares: a synchronous [`EngineWriter`] runs on its own
//! thread behind a bounded queue ([`QueuedSink`]), so the tracer never waits on disk.
//!
//! The writer thread groups whatever is queued into one commit, counts the events of a failed commit
//! as [`LossKind::Write`], and stores the loss counters at every flush and at the end. When the queue
//! is full, `try_write_batch` drops the batch and counts its events as
//! [`LossKind::SinkBackpressure`]. When the disk fills up, the writer stops writing (one error
//! line), counts every later event as [`LossKind::Write`] and keeps taking batches, so the tracer
//! goes on and its report says how many events were written and how many lost; what was committed
//! stays readable (through the WAL when the session could not be closed). Each engine keeps only
//! its writer (`sqlite::SqliteWriter`, `duckdb::DuckDbWriter`) and names its sink as
//! `QueuedSink<ItsWriter>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};

use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, LossCounter, LossKind, NcclCall,
    NetPeer, ProcessCgroup, ProcessRank, ServingSample, SessionInfo,
};

use crate::{EventSink, GpuTimelinePart, SinkSummary, StackRecord};
use crate::{Result, StoreError};

/// Loss counters per (source, kind), absolute values: the running tally a sink keeps.
type LossCounts = BTreeMap<(u8, LossKind), u64>;

/// The tally as the [`LossCounter`]s it stands for, by (source, kind).
fn counters(losses: &LossCounts) -> Vec<LossCounter> {
    losses.iter().map(|(&(source, kind), &count)| LossCounter { source, kind, count }).collect()
}

/// The synchronous writer of one engine: owns the connection of one trace session. Its methods
/// are the engine's whole write API (tests and `convert` call them too), named like
/// [`EventSink`]'s.
pub trait EngineWriter: Sized + Send + 'static {
    /// The writer thread's name.
    const THREAD_NAME: &'static str;
    /// Most batches grouped into one commit.
    const GROUP_BATCHES: usize;

    /// Create a native trace at `path`, or append a new session to an existing native trace.
    fn create(path: &Path, session: &SessionInfo) -> Result<Self>;
    /// The trace file.
    fn path(&self) -> &Path;
    /// Write batches of events in one commit; returns how many events were written.
    fn write_batches<'a>(&mut self, batches: impl IntoIterator<Item = &'a [Event]>) -> Result<u64>;
    /// Add stacks (deduplicated by hash).
    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()>;
    /// Record or update a process name.
    fn write_process_name(&mut self, pid: u32, name: &str, seen_at_ns: i64) -> Result<()>;
    /// Add launch configurations (deduplicated by key).
    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()>;
    /// Record kernel names; a later name for the same (pid, handle) replaces the earlier one.
    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()>;
    /// Add socket peers (deduplicated by key).
    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()>;
    /// Append library attachments, tagged with this session's id.
    fn write_attachments(&mut self, attachments: &[LibraryAttach]) -> Result<()>;
    /// Append what NCCL calls did (`nccl_calls`).
    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()>;
    /// Append GPU state samples (`gpu_samples`) and the processes' memory of the same samples
    /// (`gpu_process_memory`), in one commit.
    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()>;
    /// Append serving engine samples (`serving_samples`).
    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()>;
    /// Record processes' ranks (a later row for a pid replaces the earlier one).
    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()>;
    /// Record processes' cgroups (a later row for a pid replaces the earlier one).
    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()>;
    /// Append what the device-timeline library delivered (`gpu_ops`, `gpu_clock_syncs`,
    /// `gpu_timeline_notes`; `gpu_devices` a later row per (pid, device) replacing), in one commit.
    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()>;
    /// Replace this session's `under_way` rows with what a look at `seen_at_ns` found (see
    /// `under_way.rs`), in one commit; `finish` clears them.
    fn write_under_way(&mut self, seen_at_ns: i64, events: &[Event]) -> Result<()>;
    /// Append what the traced processes touched (the `footprint_*` tables, see
    /// `footprint_tables.rs`), in one commit.
    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()>;
    /// Store the session's loss counters (absolute values).
    fn write_losses(&mut self, losses: &[LossCounter]) -> Result<()>;
    /// Close the session (stopped_at) and leave a self-contained file; returns the events written.
    fn finish(self, stopped_at_ns: i64) -> Result<u64>;
    /// Events committed so far.
    fn written(&self) -> u64;
}

/// Batches the writer queue holds before `try_write_batch` starts dropping.
pub const QUEUE_BATCHES: usize = 256;

/// Loss counters shared between a sink handle and its writer thread.
type SharedLosses = Arc<Mutex<LossCounts>>;

fn lock(losses: &SharedLosses) -> MutexGuard<'_, LossCounts> {
    losses.lock().unwrap_or_else(|p| p.into_inner())
}

enum Msg {
    Batch(Vec<Event>),
    Stacks(Vec<StackRecord>),
    ProcessName(u32, String, i64),
    LaunchConfigs(Vec<LaunchConfig>),
    KernelNames(Vec<KernelName>),
    NetPeers(Vec<NetPeer>),
    Attachments(Vec<LibraryAttach>),
    NcclCalls(Vec<NcclCall>),
    GpuSamples(Vec<GpuSample>, Vec<GpuProcessMemory>),
    ServingSamples(Vec<ServingSample>),
    ProcessRanks(Vec<ProcessRank>),
    ProcessCgroups(Vec<ProcessCgroup>),
    GpuTimeline(GpuTimelinePart),
    UnderWay(i64, Vec<Event>),
    Footprint(causeway_model::FootprintPart),
    Flush(oneshot::Sender<Result<()>>),
}

/// [`EventSink`] over any [`EngineWriter`]: a writer thread behind a bounded queue.
pub struct QueuedSink<W: EngineWriter> {
    tx: mpsc::Sender<Msg>,
    losses: SharedLosses,
    thread: Option<std::thread::JoinHandle<Result<Stopped<W>>>>,
    path: PathBuf,
}

impl<W: EngineWriter> QueuedSink<W> {
    pub fn create(path: &Path, session: SessionInfo) -> Result<QueuedSink<W>> {
        Self::with_queue(path, session, QUEUE_BATCHES)
    }

    /// Like [`QueuedSink::create`] with a chosen queue depth (in batches); tests use tiny queues to
    /// provoke back-pressure.
    pub fn with_queue(path: &Path, session: SessionInfo, batches: usize) -> Result<QueuedSink<W>> {
        Self::from_writer(W::create(path, &session)?, batches)
    }

    /// A sink over a writer created already (one with options of its own, like a series').
    pub fn from_writer(writer: W, batches: usize) -> Result<QueuedSink<W>> {
        let path = writer.path().to_path_buf();
        let (tx, rx) = mpsc::channel::<Msg>(batches.max(1));
        let losses = SharedLosses::default();
        let thread_losses = losses.clone();
        let thread = std::thread::Builder::new()
            .name(W::THREAD_NAME.into())
            .spawn(move || run_writer(writer, rx, thread_losses))?;
        Ok(QueuedSink { tx, losses, thread: Some(thread), path })
    }

    fn gone(&self) -> StoreError {
        StoreError::WriterGone(format!("writer thread for {} exited", self.path.display()))
    }
}

/// What the writer thread hands back: the writer, and why it stopped writing early (the disk).
struct Stopped<W> {
    writer: W,
    disk_full: Option<String>,
}

/// The writer thread: until the queue closes, take what is queued, commit it, answer flushes.
fn run_writer<W: EngineWriter>(mut writer: W, mut rx: mpsc::Receiver<Msg>, losses: SharedLosses) -> Result<Stopped<W>> {
    let mut pending: Vec<Vec<Event>> = Vec::new();
    let mut disk_full: Option<String> = None;
    while let Some(first) = rx.blocking_recv() {
        let mut flushes = Vec::new();
        let full = disk_full.is_some();
        let mut handle = |m: Msg, w: &mut W, pending: &mut Vec<Vec<Event>>| -> Result<()> {
            match m {
                Msg::Batch(b) => pending.push(b),
                Msg::Flush(done) => flushes.push(done),
                // the disk is full: the side tables wait with the events (nothing more is written)
                _ if full => {}
                Msg::Stacks(s) => w.write_stacks(&s)?,
                Msg::ProcessName(pid, name, at) => w.write_process_name(pid, &name, at)?,
                Msg::LaunchConfigs(c) => w.write_launch_configs(&c)?,
                Msg::KernelNames(k) => w.write_kernel_names(&k)?,
                Msg::NetPeers(p) => w.write_net_peers(&p)?,
                Msg::Attachments(a) => w.write_attachments(&a)?,
                Msg::NcclCalls(c) => w.write_nccl_calls(&c)?,
                Msg::GpuSamples(s, p) => w.write_gpu_samples(&s, &p)?,
                Msg::ServingSamples(s) => w.write_serving_samples(&s)?,
                Msg::ProcessRanks(r) => w.write_process_ranks(&r)?,
                Msg::ProcessCgroups(c) => w.write_process_cgroups(&c)?,
                Msg::GpuTimeline(p) => w.write_gpu_timeline(&p)?,
                Msg::Footprint(p) => w.write_footprint(&p)?,
                Msg::UnderWay(at, e) => w.write_under_way(at, &e)?,
            }
            Ok(())
        };
        let mut result = handle(first, &mut writer, &mut pending);
        // Group whatever else is queued into the same commit.
        while pending.len() < W::GROUP_BATCHES {
            match rx.try_recv() {
                Ok(m) => result = result.and(handle(m, &mut writer, &mut pending)),
                Err(_) => break,
            }
        }
        if !pending.is_empty() {
            // once the disk is full nothing more is tried: the batch is lost like a failed commit
            let lost = disk_full.is_some()
                || match writer.write_batches(pending.iter().map(Vec::as_slice)) {
                    Ok(_) => false,
                    Err(e) => {
                        if !e.is_disk_full() {
                            tracing::error!("writing a batch to {} failed: {e}", writer.path().display());
                        }
                        result = result.and(Err(e));
                        true
                    }
                };
            if lost {
                let mut l = lock(&losses);
                for ev in pending.iter().flatten() {
                    *l.entry((ev.source, LossKind::Write)).or_default() += 1;
                }
            }
            pending.clear();
        }
        // a full disk stops the writing, not the trace: said once, then every error is expected
        if result.as_ref().is_err_and(|e| e.is_disk_full()) && disk_full.is_none() {
            tracing::error!(
                "{}: the disk is full after {} events: writing stopped; what was committed stays readable, \
                 later events are counted as lost (kind write)",
                writer.path().display(),
                writer.written()
            );
            disk_full = result.as_ref().err().map(|e| e.to_string());
        }
        if disk_full.is_some() {
            result = Ok(());
        }
        if !flushes.is_empty() {
            let r = if disk_full.is_some() {
                Ok(())
            } else {
                let snapshot = counters(&lock(&losses));
                result.and_then(|_| writer.write_losses(&snapshot))
            };
            for f in flushes {
                let _ = f.send(r.as_ref().map(|_| ()).map_err(|e| StoreError::Engine(e.to_string())));
            }
        }
    }
    Ok(Stopped { writer, disk_full })
}

#[async_trait::async_trait]
impl<W: EngineWriter> EventSink for QueuedSink<W> {
    async fn write_batch(&mut self, events: Vec<Event>) -> Result<()> {
        self.tx.send(Msg::Batch(events)).await.map_err(|_| self.gone())
    }

    fn try_write_batch(&mut self, events: Vec<Event>) -> bool {
        match self.tx.try_send(Msg::Batch(events)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(Msg::Batch(b)) | mpsc::error::TrySendError::Closed(Msg::Batch(b))) => {
                let mut l = lock(&self.losses);
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

    async fn write_launch_configs(&mut self, configs: Vec<LaunchConfig>) -> Result<()> {
        self.tx.send(Msg::LaunchConfigs(configs)).await.map_err(|_| self.gone())
    }

    async fn write_kernel_names(&mut self, names: Vec<KernelName>) -> Result<()> {
        self.tx.send(Msg::KernelNames(names)).await.map_err(|_| self.gone())
    }

    async fn write_net_peers(&mut self, peers: Vec<NetPeer>) -> Result<()> {
        self.tx.send(Msg::NetPeers(peers)).await.map_err(|_| self.gone())
    }

    async fn write_attachments(&mut self, attachments: Vec<LibraryAttach>) -> Result<()> {
        self.tx.send(Msg::Attachments(attachments)).await.map_err(|_| self.gone())
    }

    async fn write_nccl_calls(&mut self, calls: Vec<NcclCall>) -> Result<()> {
        self.tx.send(Msg::NcclCalls(calls)).await.map_err(|_| self.gone())
    }

    async fn write_gpu_samples(&mut self, samples: Vec<GpuSample>, processes: Vec<GpuProcessMemory>) -> Result<()> {
        self.tx.send(Msg::GpuSamples(samples, processes)).await.map_err(|_| self.gone())
    }

    async fn write_serving_samples(&mut self, samples: Vec<ServingSample>) -> Result<()> {
        self.tx.send(Msg::ServingSamples(samples)).await.map_err(|_| self.gone())
    }

    async fn write_process_ranks(&mut self, ranks: Vec<ProcessRank>) -> Result<()> {
        self.tx.send(Msg::ProcessRanks(ranks)).await.map_err(|_| self.gone())
    }

    async fn write_process_cgroups(&mut self, cgroups: Vec<ProcessCgroup>) -> Result<()> {
        self.tx.send(Msg::ProcessCgroups(cgroups)).await.map_err(|_| self.gone())
    }

    async fn write_gpu_timeline(&mut self, part: GpuTimelinePart) -> Result<()> {
        if part.is_empty() {
            return Ok(());
        }
        self.tx.send(Msg::GpuTimeline(part)).await.map_err(|_| self.gone())
    }

    async fn write_under_way(&mut self, seen_at_ns: i64, events: Vec<Event>) -> Result<()> {
        self.tx.send(Msg::UnderWay(seen_at_ns, events)).await.map_err(|_| self.gone())
    }

    async fn write_footprint(&mut self, part: causeway_model::FootprintPart) -> Result<()> {
        if part.is_empty() {
            return Ok(());
        }
        self.tx.send(Msg::Footprint(part)).await.map_err(|_| self.gone())
    }

    fn add_loss(&mut self, source: u8, kind: LossKind, n: u64) {
        if n > 0 {
            *lock(&self.losses).entry((source, kind)).or_default() += n;
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
            let Stopped { mut writer, disk_full } =
                thread.join().map_err(|_| StoreError::WriterGone("writer thread panicked".into()))??;
            let losses = counters(&lock(&losses));
            let path = writer.path().display().to_string();
            let mut notes = Vec::new();
            if let Some(why) = disk_full {
                notes.push(format!(
                    "{path}: the disk filled up ({why}): {} events were written before it, the events after it are counted as lost (kind write)",
                    writer.written()
                ));
            }
            // a disk that is full now keeps the session open: the file opens through its WAL
            let written = writer.written();
            let closed = writer.write_losses(&losses).and_then(|_| writer.finish(stopped_at_ns));
            let events_written = match closed {
                Ok(n) => n,
                Err(e) if e.is_disk_full() => {
                    notes.push(format!(
                        "{path}: the session could not be closed (the disk is full): the trace opens as it is, \
                         through its WAL; its loss counters are in this report only"
                    ));
                    written
                }
                Err(e) => return Err(e),
            };
            Ok(SinkSummary { events_written, losses, notes })
        })
        .await
        .map_err(|e| StoreError::WriterGone(e.to_string()))?
    }
}
