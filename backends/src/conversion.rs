//! `causeway convert`: any readable trace (an Ingero DB, a native SQLite or DuckDB trace) into a
//! native SQLite or DuckDB trace, losslessly for what the native schema holds.
//!
//! What carries over: every event with every native column the original has (`node`, `rank`,
//! `local_rank`, `world_size`, `stack_ips`, `launch_config` included), sessions with their ids,
//! stacks, process names with `seen_at`, launch configurations, kernel names, library attachments
//! with their sessions, loss counters per session, Ingero's `event_aggregates` (so a sampled
//! trace keeps its true totals), what the original does not record and which `events` columns it
//! has (`schema_info.source_missing` / `source_columns`: readers report only those columns, so the
//! analysis treats the converted trace exactly as its original). Ingero-only tables (`causal_chains`,
//! `system_snapshots`, `cgroup_*`) and Ingero-only session columns have no place in the native
//! schema and are not copied.
//!
//! Event ids: integer ids (native traces, Ingero v0.8) are kept. Ingero v0.9+ ids are text
//! (`"node:seq"`, unique only per node) and the native `id` is an integer, so a trace with any text
//! id gets new ids `1..n` in (timestamp, original insertion) order — the order every reader returns
//! events in, so ties keep their order; the node stays in the `node` column. Evidence SQL that names
//! ids is therefore specific to each file; the figures are the same.
//!
//! The target is written to `<target>.partial` and renamed when complete, so an interrupted
//! conversion never leaves a half-written trace under the target name.
//!
//! [`cut`] is the same copy limited to a [`Scope`] (a window, a process): the incident cut out of a
//! long trace as a standalone file to share. It keeps every event whose time span overlaps the
//! window (a slow call that began before it, an off-CPU interval that ended in it), the event ids
//! (so evidence SQL naming them still works), the stacks those events carry, and the side tables
//! within the window; the loss counters stay whole-session figures and the file says so. The device
//! timeline is kept as [`timeline`] says (the ops that started in the window), and its ops are tied
//! to their launching calls again when the target is finished.

use std::path::{Path, PathBuf};

use causeway_model::time::TimeWindow;
use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, LossCounter, NcclCall, NetPeer,
    ProcessCgroup, ProcessRank, ServingSample, SessionInfo,
};

use crate::Engine;
use crate::{AggregateRow, GpuTimelinePart, StackRecord, TraceStore};
use crate::{Result, StoreError};

mod sqlite_side;
mod timeline;

pub use sqlite_side::{SqliteSource, SqliteTarget};

/// What a native row holds beyond an [`Event`] (the tracer leaves the defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowExtra {
    pub node: String,
    pub rank: Option<i64>,
    pub local_rank: Option<i64>,
    pub world_size: Option<i64>,
    pub stack_ips: String,
}

/// One `events` row of a native trace, whatever the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRow {
    pub id: i64,
    pub session_id: i64,
    pub extra: RowExtra,
    pub event: Event,
}

/// A loss counter as stored, with the id of its session.
pub type LossRow = (i64, LossCounter);

/// A trace being read for conversion.
pub trait ConvertSource {
    fn store(&self) -> &dyn TraceStore;
    /// Every event in (timestamp, insertion) order, in chunks of about `chunk` rows.
    fn rows(&self, chunk: usize, f: &mut dyn FnMut(Vec<NativeRow>) -> Result<()>) -> Result<()>;
    /// Whether the event ids were renumbered (text ids).
    fn renumbers_ids(&self) -> bool;
    fn stacks(&self) -> Result<Vec<StackRecord>>;
    fn loss_rows(&self) -> Result<Vec<LossRow>>;
    /// (pid, name, seen_at)
    fn process_rows(&self) -> Result<Vec<(u32, String, i64)>>;
    /// Every library attachment with the id of its session (empty when the original has none).
    fn attachment_rows(&self) -> Result<Vec<(i64, LibraryAttach)>>;
}

/// A native trace being written by a conversion.
pub trait ConvertTarget {
    fn write_sessions(&mut self, sessions: &[SessionInfo]) -> Result<()>;
    fn write_rows(&mut self, rows: &[NativeRow]) -> Result<()>;
    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()>;
    fn write_process_names(&mut self, names: &[(u32, String, i64)]) -> Result<()>;
    fn write_losses(&mut self, losses: &[LossRow]) -> Result<()>;
    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()>;
    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()>;
    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()>;
    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()>;
    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()>;
    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()>;
    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()>;
    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()>;
    /// A part of the device timeline (its `launch_event_id`s are filled again at `finish`).
    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()>;
    /// What the traced processes touched (`footprint_*`).
    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()>;
    /// Attachments with their own session ids.
    fn write_attachments(&mut self, rows: &[(i64, LibraryAttach)]) -> Result<()>;
    fn write_aggregates(&mut self, rows: &[AggregateRow]) -> Result<()>;
    /// Record what the original does not record and which `events` columns it has
    /// (`schema_info.source_missing`, `schema_info.source_columns`).
    fn write_provenance(&mut self, missing: &[String], columns: &[String]) -> Result<()>;
    /// Indexes, the device ops' launching calls, checkpoint, close.
    fn finish(self: Box<Self>) -> Result<()>;
}

/// Open any readable trace as a conversion source (engine by file magic, like `open_store`).
pub fn open_source(path: &Path) -> Result<Box<dyn ConvertSource>> {
    #[cfg(feature = "duckdb")]
    if crate::duckdb::is_duckdb_file(path) {
        return Ok(Box::new(crate::duckdb::DuckDbSource::open(path)?));
    }
    // Fails with the same one-line errors as open_store (missing, empty, not a DB, DuckDB without the feature).
    let _ = crate::open_store(path)?;
    Ok(Box::new(SqliteSource::open(path)?))
}

fn create_target(path: &Path, engine: Engine) -> Result<Box<dyn ConvertTarget>> {
    match engine {
        Engine::Sqlite => Ok(Box::new(SqliteTarget::create(path)?)),
        #[cfg(feature = "duckdb")]
        Engine::DuckDb => Ok(Box::new(crate::duckdb::DuckDbTarget::create(path)?)),
        #[cfg(not(feature = "duckdb"))]
        Engine::DuckDb => Err(StoreError::InvalidArgument(format!(
            "{}: writing DuckDB needs a causeway built with the `duckdb` feature",
            path.display()
        ))),
    }
}

/// Which part of a trace [`cut`] keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Events whose time span overlaps this window.
    pub window: TimeWindow,
    /// Only this process's events (and its names, ranks, kernels, attachments, NCCL calls).
    pub pid: Option<u32>,
}

impl Scope {
    /// The whole trace.
    pub fn is_all(&self) -> bool {
        self.window.is_all() && self.pid.is_none()
    }

    fn keeps_pid(&self, pid: u32) -> bool {
        self.pid.is_none_or(|p| p == pid)
    }

    /// Whether `e` is in scope: its process, and its span (an off-CPU row: the interval before
    /// its switch-in; anything else: `[ts, ts + dur]`) overlapping the window.
    pub fn keeps(&self, e: &Event) -> bool {
        let (start, end) = e.span();
        self.keeps_pid(e.pid)
            && self.window.from_ns.is_none_or(|f| end >= f)
            && self.window.to_ns.is_none_or(|t| start <= t)
    }

    /// The sentence a cut file carries about where it comes from.
    fn provenance(&self, from: &Path) -> String {
        let mut s = format!("cut from {}: the events overlapping ", from.display());
        match (self.window.from_ns, self.window.to_ns) {
            (Some(a), Some(b)) => s.push_str(&format!("[{a}, {b}] (unix ns)")),
            (Some(a), None) => s.push_str(&format!("[{a}, end]")),
            (None, Some(b)) => s.push_str(&format!("[start, {b}]")),
            (None, None) => s.push_str("the whole trace"),
        }
        if let Some(p) = self.pid {
            s.push_str(&format!(" of pid {p}"));
        }
        s.push_str("; loss counters are those of the whole original sessions");
        s
    }
}

/// What a conversion wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConvertReport {
    pub from: PathBuf,
    pub to: PathBuf,
    pub backend: Engine,
    pub events: u64,
    pub sessions: u64,
    pub stacks: u64,
    pub process_names: u64,
    pub loss_rows: u64,
    pub aggregate_rows: u64,
    pub launch_configs: u64,
    pub kernel_names: u64,
    pub net_peers: u64,
    pub nccl_calls: u64,
    pub gpu_samples: u64,
    /// Rows of `gpu_process_memory` copied.
    pub gpu_process_memory: u64,
    pub serving_samples: u64,
    pub process_ranks: u64,
    pub process_cgroups: u64,
    pub attachments: u64,
    /// The device timeline's rows: ops, calibrations, devices, notes.
    pub gpu_ops: u64,
    pub gpu_clock_syncs: u64,
    pub gpu_devices: u64,
    pub gpu_timeline_notes: u64,
    /// Rows of the five `footprint_*` tables.
    pub footprint_rows: u64,
    /// True when text ids were replaced by integers (see the module docs).
    pub ids_renumbered: bool,
}

/// Rows per chunk read and written.
pub const CHUNK_ROWS: usize = 100_000;

fn partial_path(to: &Path) -> PathBuf {
    let mut p = to.as_os_str().to_owned();
    p.push(".partial");
    PathBuf::from(p)
}

/// Convert `from` into a new native trace at `to` with `engine` (`None`: by `to`'s extension).
/// `progress(done, total)` is called after every chunk of events. `to` must not exist.
pub fn convert(
    from: &Path,
    to: &Path,
    engine: Option<Engine>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ConvertReport> {
    cut(from, to, engine, &Scope::default(), progress)
}

/// [`convert`] limited to `scope`: a standalone trace of one window (and process) of `from`.
/// `progress(read, total)` counts the events read, kept or not.
pub fn cut(
    from: &Path,
    to: &Path,
    engine: Option<Engine>,
    scope: &Scope,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ConvertReport> {
    let engine = engine.unwrap_or_else(|| Engine::for_path(to));
    if to.exists() {
        return Err(StoreError::InvalidArgument(format!("{} exists; choose a new file name", to.display())));
    }
    if let (Ok(a), Ok(b)) = (std::fs::canonicalize(from), std::fs::canonicalize(to.parent().unwrap_or(Path::new("."))))
    {
        if Some(a.as_path()) == to.file_name().map(|n| b.join(n)).as_deref() {
            return Err(StoreError::InvalidArgument("the source and the target are the same file".into()));
        }
    }
    let source = open_source(from)?;
    let partial = partial_path(to);
    let _ = std::fs::remove_file(&partial);
    let result = (|| -> Result<ConvertReport> {
        let mut target = create_target(&partial, engine)?;
        let store = source.store();
        let info = store.info();
        let total = info.events;
        let sessions = store.sessions()?;
        target.write_sessions(&sessions)?;
        let (mut read, mut done) = (0u64, 0u64);
        let mut stack_hashes = std::collections::HashSet::new();
        progress(0, total);
        source.rows(CHUNK_ROWS, &mut |mut rows| {
            read += rows.len() as u64;
            if !scope.is_all() {
                rows.retain(|r| scope.keeps(&r.event));
                stack_hashes.extend(rows.iter().map(|r| r.event.stack_hash).filter(|h| *h != 0));
            }
            target.write_rows(&rows)?;
            done += rows.len() as u64;
            progress(read, total);
            Ok(())
        })?;
        let mut stacks = source.stacks()?;
        let mut names = source.process_rows()?;
        let losses = source.loss_rows()?;
        let configs = store.launch_configs()?;
        let mut kernels = store.kernel_names()?;
        let peers = store.net_peers()?;
        let mut nccl = store.nccl_calls(&scope.window)?;
        let gpu = store.gpu_samples(&scope.window)?;
        let mut gpu_processes = store.gpu_process_memory(&scope.window)?;
        // (kept whatever the pids kept: an engine's metrics describe the service its processes
        // serve together, and its endpoint may be another process than the one making the calls)
        let serving = store.serving_samples(&scope.window)?;
        let mut ranks = store.process_ranks()?;
        let mut cgroups = store.process_cgroups()?;
        let mut attachments = source.attachment_rows()?;
        let mut aggregates = store.aggregates(&scope.window)?;
        let mut footprint = store.footprint()?;
        // the target says it lacks a device timeline from its own rows, not as the original's gap
        let mut missing: Vec<String> =
            info.missing.iter().filter(|m| *m != crate::NO_DEVICE_TIMELINE).cloned().collect();
        if !scope.is_all() {
            stacks.retain(|s| stack_hashes.contains(&s.hash));
            names.retain(|n| scope.keeps_pid(n.0));
            kernels.retain(|k| scope.keeps_pid(k.pid));
            nccl.retain(|c| scope.keeps_pid(c.pid));
            gpu_processes.retain(|p| scope.keeps_pid(p.pid));
            ranks.retain(|r| scope.keeps_pid(r.pid));
            cgroups.retain(|c| scope.keeps_pid(c.pid));
            attachments.retain(|a| scope.keeps_pid(a.1.pid));
            aggregates.retain(|a| scope.keeps_pid(a.pid));
            footprint_in_scope(&mut footprint, scope);
            missing.push(scope.provenance(from));
        }
        target.write_stacks(&stacks)?;
        target.write_process_names(&names)?;
        target.write_losses(&losses)?;
        target.write_launch_configs(&configs)?;
        target.write_kernel_names(&kernels)?;
        target.write_net_peers(&peers)?;
        target.write_nccl_calls(&nccl)?;
        target.write_gpu_samples(&gpu, &gpu_processes)?;
        target.write_serving_samples(&serving)?;
        target.write_process_ranks(&ranks)?;
        target.write_process_cgroups(&cgroups)?;
        target.write_attachments(&attachments)?;
        target.write_aggregates(&aggregates)?;
        target.write_footprint(&footprint)?;
        let timeline = timeline::copy(store, scope, target.as_mut())?;
        target.write_provenance(&missing, &info.event_columns)?;
        target.finish()?;
        Ok(ConvertReport {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            backend: engine,
            events: done,
            sessions: sessions.len() as u64,
            stacks: stacks.len() as u64,
            process_names: names.len() as u64,
            loss_rows: losses.len() as u64,
            aggregate_rows: aggregates.len() as u64,
            launch_configs: configs.len() as u64,
            kernel_names: kernels.len() as u64,
            net_peers: peers.len() as u64,
            nccl_calls: nccl.len() as u64,
            gpu_samples: gpu.len() as u64,
            gpu_process_memory: gpu_processes.len() as u64,
            serving_samples: serving.len() as u64,
            process_ranks: ranks.len() as u64,
            process_cgroups: cgroups.len() as u64,
            attachments: attachments.len() as u64,
            gpu_ops: timeline.ops,
            gpu_clock_syncs: timeline.clock_syncs,
            gpu_devices: timeline.devices,
            gpu_timeline_notes: timeline.notes,
            footprint_rows: (footprint.syscalls.len()
                + footprint.cpu.len()
                + footprint.fds.len()
                + footprint.requests.len()
                + footprint.execs.len()) as u64,
            ids_renumbered: source.renumbers_ids(),
        })
    })();
    match result {
        Ok(r) => {
            std::fs::rename(&partial, to)?;
            Ok(r)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            let mut wal = partial.as_os_str().to_owned();
            wal.push(".wal");
            let _ = std::fs::remove_file(PathBuf::from(wal));
            Err(e)
        }
    }
}

/// What a cut keeps of the footprint: its processes' rows, and of those the counts read in the
/// window (each look's row covers the second before it), the descriptors open during it, the
/// requests that overlap it and the execs in it.
fn footprint_in_scope(f: &mut causeway_model::FootprintPart, scope: &Scope) {
    let w = &scope.window;
    let overlaps =
        |from: i64, to: i64| w.from_ns.is_none_or(|a| to == 0 || to >= a) && w.to_ns.is_none_or(|b| from <= b);
    f.syscalls.retain(|s| scope.keeps_pid(s.pid) && w.contains(s.seen_at_ns));
    f.cpu.retain(|c| scope.keeps_pid(c.pid) && w.contains(c.seen_at_ns));
    f.fds.retain(|d| scope.keeps_pid(d.pid) && overlaps(d.opened_ns, d.closed_ns));
    f.requests.retain(|q| scope.keeps_pid(q.pid) && overlaps(q.begin_ns, q.end_ns));
    f.execs.retain(|e| scope.keeps_pid(e.pid) && w.contains(e.ts_ns));
}

/// Process names of a source: its `process_names` rows, plus names the store knows from elsewhere
/// (Ingero v0.10 `comm`) for pids the table lacks (`seen_at` 0).
pub(crate) fn merge_names(
    mut rows: Vec<(u32, String, i64)>,
    store: &dyn TraceStore,
) -> Result<Vec<(u32, String, i64)>> {
    let known: std::collections::BTreeSet<u32> = rows.iter().map(|r| r.0).collect();
    for (pid, name) in store.process_names()? {
        if !known.contains(&pid) {
            rows.push((pid, name, 0));
        }
    }
    rows.sort_by_key(|r| r.0);
    Ok(rows)
}
