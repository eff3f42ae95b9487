//! Writing a trace as a [`super::series`] of files: rollover by size and by age, retention of the
//! oldest parts by the series' total size and age.
//!
//! [`RollingWriter`] is an [`EngineWriter`], so the queued sink, its back-pressure and its
//! full-disk handling are the same as for one file. Before each commit it checks the live part
//! (file plus WAL size, age since it opened); when one is reached it creates the next part (the
//! session's id, the next event id, the side tables carried over) and goes on writing there at
//! once. The part it leaves is finished (session end, indexes, out of WAL mode) on a thread of
//! its own, so a rollover never holds the writer for the index build, and retention then removes
//! the oldest finished parts while the series is over its size or they are over its age (never
//! the live part). Each part stores its own share of the loss counters (the tally since it
//! opened), so their sum is the session's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, LossCounter, LossKind, NcclCall,
    NetPeer, ProcessCgroup, ProcessRank, ServingSample, SessionInfo,
};

use super::series::{has_events_table, list_parts, part_path, part_seq};
use super::SqliteWriter;
use crate::sink::{EngineWriter, QueuedSink, QUEUE_BATCHES};
use crate::{EventSink, GpuTimelinePart, StackRecord};
use crate::{Result, StoreError};

/// When a series rolls over to a new part, and which old parts it removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollPolicy {
    /// The live part is closed once its file (with its WAL) holds this many bytes.
    pub max_part_bytes: u64,
    /// The live part is closed once it has been written this long.
    pub max_part_age: Duration,
    /// The oldest finished parts are removed while the series holds more bytes than this.
    pub max_total_bytes: Option<u64>,
    /// Finished parts last written longer ago than this are removed.
    pub max_total_age: Option<Duration>,
}

impl Default for RollPolicy {
    /// Parts of 256 MiB or one hour, nothing removed.
    fn default() -> Self {
        RollPolicy {
            max_part_bytes: 256 << 20,
            max_part_age: Duration::from_secs(3600),
            max_total_bytes: None,
            max_total_age: None,
        }
    }
}

impl RollPolicy {
    /// Refuse a policy that cannot keep even the live part.
    pub fn check(&self) -> Result<()> {
        if self.max_part_bytes == 0 || self.max_part_age.is_zero() {
            return Err(StoreError::InvalidArgument("a part's largest size and age must be above zero".into()));
        }
        if let Some(total) = self.max_total_bytes {
            if total < self.max_part_bytes {
                return Err(StoreError::InvalidArgument(format!(
                    "the series' largest size ({total} bytes) is below one part's ({} bytes): the series could \
                     not keep the part being written",
                    self.max_part_bytes
                )));
            }
        }
        Ok(())
    }
}

/// Loss counts per (source, kind), absolute values.
type LossTally = BTreeMap<(u8, LossKind), u64>;

/// Writes a series: the live part's [`SqliteWriter`], and the rollover and retention around it.
pub struct RollingWriter {
    dir: PathBuf,
    policy: RollPolicy,
    session: SessionInfo,
    part: SqliteWriter,
    seq: u64,
    part_opened: Instant,
    /// The session's loss tally when the live part opened, and the latest one.
    losses_at_part_start: LossTally,
    losses_now: LossTally,
    /// Events in the parts this writer closed.
    earlier_parts_written: u64,
    /// Threads finishing closed parts (and applying retention after them).
    finishing: Vec<JoinHandle<()>>,
}

/// The (largest session id, largest event id) of a part, read without writing it.
fn last_ids(path: &Path) -> Result<(i64, i64)> {
    let read = || -> rusqlite::Result<(i64, i64)> {
        let conn = super::target::open_read_only(path)?;
        let session = conn.query_row("SELECT coalesce(max(id), 0) FROM sessions", [], |r| r.get(0))?;
        let event = conn.query_row("SELECT coalesce(max(id), 0) FROM events", [], |r| r.get(0))?;
        Ok((session, event))
    };
    read().map_err(|e| {
        StoreError::InvalidArgument(format!(
            "{}: the newest part of the series cannot be read ({e}): move it out of the series to start a new one",
            path.display()
        ))
    })
}

/// Remove what a part's creation cut short (a kill, a full disk) left: empty part files, and a
/// newest part without its tables.
fn remove_unborn_parts(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if part_seq(&path).is_some() && entry.metadata().is_ok_and(|m| m.len() == 0) {
            remove_part(&path);
        }
    }
    if let Some((_, newest)) = list_parts(dir).ok().and_then(|p| p.last().cloned()) {
        if !has_events_table(&newest) {
            tracing::warn!("{}: a part whose creation never finished, removed", newest.display());
            remove_part(&newest);
        }
    }
}

fn unix_now_ns() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// A part's files: the database, its WAL and its shared-memory file.
fn part_files(path: &Path) -> [PathBuf; 3] {
    let beside = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    [path.to_path_buf(), beside("-wal"), beside("-shm")]
}

/// Bytes a part takes on disk (with its WAL and shared-memory files).
fn part_bytes(path: &Path) -> u64 {
    part_files(path).iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum()
}

/// Remove a part's files, the database last.
fn remove_part(path: &Path) {
    for p in part_files(path).iter().rev() {
        let _ = std::fs::remove_file(p);
    }
}

/// One retention pass at a time per process (finishing threads may overlap).
static RETENTION: Mutex<()> = Mutex::new(());

/// Remove the oldest parts before `live_seq` while the series is over `policy`'s total size or
/// they are older than its age (each removal logged).
fn apply_retention(dir: &Path, policy: &RollPolicy, live_seq: u64) {
    if policy.max_total_bytes.is_none() && policy.max_total_age.is_none() {
        return;
    }
    let _one = RETENTION.lock().unwrap_or_else(|p| p.into_inner());
    let Ok(parts) = list_parts(dir) else { return };
    let mut total: u64 = parts.iter().map(|(_, p)| part_bytes(p)).sum();
    let now = SystemTime::now();
    for (seq, path) in parts.iter().filter(|(seq, _)| *seq < live_seq) {
        let last_write = std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or(now);
        let too_old = policy.max_total_age.is_some_and(|age| now.duration_since(last_write).unwrap_or_default() > age);
        let too_big = policy.max_total_bytes.is_some_and(|max| total > max);
        if !too_old && !too_big {
            break;
        }
        let bytes = part_bytes(path);
        remove_part(path);
        total = total.saturating_sub(bytes);
        tracing::info!(part = seq, bytes, "retention removed {}", path.display());
    }
}

impl RollingWriter {
    /// Start writing the series in `dir` (created if needed): a new part after the newest one
    /// there, a new session, ids going on from it.
    pub fn open(dir: &Path, session: &SessionInfo, policy: RollPolicy) -> Result<RollingWriter> {
        policy.check()?;
        if dir.exists() && !dir.is_dir() {
            return Err(StoreError::InvalidArgument(format!(
                "{} is a file: a series is written into a directory",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Engine(format!("{}: {e}", dir.display())))?;
        remove_unborn_parts(dir);
        let parts = list_parts(dir).map_err(|e| StoreError::Engine(format!("{}: {e}", dir.display())))?;
        let seq = parts.last().map_or(1, |p| p.0 + 1);
        let (previous, (session_id, event_id)) = match parts.last() {
            Some((_, path)) => (Some(path.clone()), last_ids(path)?),
            None => (None, (0, 0)),
        };
        let part = SqliteWriter::create_part(
            &part_path(dir, seq),
            session,
            session_id + 1,
            event_id + 1,
            previous.as_deref(),
        )?;
        Ok(RollingWriter {
            dir: dir.to_path_buf(),
            policy,
            session: session.clone(),
            part,
            seq,
            part_opened: Instant::now(),
            losses_at_part_start: LossTally::new(),
            losses_now: LossTally::new(),
            earlier_parts_written: 0,
            finishing: Vec::new(),
        })
    }

    /// The live part's file.
    pub fn live_part(&self) -> &Path {
        self.part.path()
    }

    /// Whether the live part is due to be closed (never an empty one).
    fn due(&self) -> bool {
        self.part.written() > 0
            && (part_bytes(self.part.path()) >= self.policy.max_part_bytes
                || self.part_opened.elapsed() >= self.policy.max_part_age)
    }

    /// The live part's share of the loss counters: what was lost since it opened.
    fn part_losses(&self) -> Vec<LossCounter> {
        self.losses_now
            .iter()
            .map(|(&(source, kind), &count)| LossCounter {
                source,
                kind,
                count: count - self.losses_at_part_start.get(&(source, kind)).copied().unwrap_or(0),
            })
            .filter(|l| l.count > 0)
            .collect()
    }

    /// Close the live part and go on in the next one. When the next part cannot be created (a
    /// full disk), what was begun of it is removed and the live part stays the live part.
    fn roll(&mut self) -> Result<()> {
        let next_seq = self.seq + 1;
        let next_path = part_path(&self.dir, next_seq);
        let next = SqliteWriter::create_part(
            &next_path,
            &self.session,
            self.part.session_id(),
            self.part.next_event_id(),
            Some(self.part.path()),
        )
        .inspect_err(|_| remove_part(&next_path))?;
        let mut closed = std::mem::replace(&mut self.part, next);
        if let Err(e) = closed.write_losses(&self.part_losses()) {
            tracing::warn!("{}: its loss counters could not be stored: {e}", closed.path().display());
        }
        self.losses_at_part_start = self.losses_now.clone();
        self.earlier_parts_written += closed.written();
        self.seq = next_seq;
        self.part_opened = Instant::now();
        let (dir, policy) = (self.dir.clone(), self.policy);
        let finisher = std::thread::Builder::new().name("causeway-part-finish".into()).spawn(move || {
            let path = closed.path().to_path_buf();
            if let Err(e) = closed.finish(unix_now_ns()) {
                tracing::warn!("{}: closing the part failed ({e}); it stays readable through its WAL", path.display());
            }
            apply_retention(&dir, &policy, next_seq);
        })?;
        self.finishing.retain(|h| !h.is_finished());
        self.finishing.push(finisher);
        Ok(())
    }
}

impl EngineWriter for RollingWriter {
    const THREAD_NAME: &'static str = "causeway-series-writer";
    const GROUP_BATCHES: usize = SqliteWriter::GROUP_BATCHES;

    /// A series in the directory `path` with the default [`RollPolicy`].
    fn create(path: &Path, session: &SessionInfo) -> Result<Self> {
        RollingWriter::open(path, session, RollPolicy::default())
    }

    /// The series directory.
    fn path(&self) -> &Path {
        &self.dir
    }

    /// Roll over first when the live part is due (so a failed rollover loses no committed
    /// event), then commit into the live part.
    fn write_batches<'a>(&mut self, batches: impl IntoIterator<Item = &'a [Event]>) -> Result<u64> {
        if self.due() {
            self.roll()?;
        }
        self.part.write_batches(batches)
    }

    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()> {
        self.part.write_stacks(stacks)
    }

    fn write_process_name(&mut self, pid: u32, name: &str, seen_at_ns: i64) -> Result<()> {
        self.part.write_process_name(pid, name, seen_at_ns)
    }

    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()> {
        self.part.write_launch_configs(configs)
    }

    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()> {
        self.part.write_kernel_names(names)
    }

    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()> {
        self.part.write_net_peers(peers)
    }

    fn write_attachments(&mut self, attachments: &[LibraryAttach]) -> Result<()> {
        self.part.write_attachments(attachments)
    }

    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()> {
        self.part.write_nccl_calls(calls)
    }

    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()> {
        self.part.write_gpu_samples(samples, processes)
    }

    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()> {
        self.part.write_serving_samples(samples)
    }

    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()> {
        self.part.write_process_ranks(ranks)
    }

    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()> {
        self.part.write_process_cgroups(cgroups)
    }

    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()> {
        self.part.write_gpu_timeline(part)
    }

    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()> {
        self.part.write_footprint(part)
    }

    /// The live part holds the last look (a finished part has none).
    fn write_under_way(&mut self, seen_at_ns: i64, events: &[Event]) -> Result<()> {
        self.part.write_under_way(seen_at_ns, events)
    }

    /// The session's tally: the live part stores its share.
    fn write_losses(&mut self, losses: &[LossCounter]) -> Result<()> {
        self.losses_now = losses.iter().map(|l| ((l.source, l.kind), l.count)).collect();
        let share = self.part_losses();
        self.part.write_losses(&share)
    }

    /// Finish the live part, wait for the parts still being finished, apply retention.
    fn finish(self, stopped_at_ns: i64) -> Result<u64> {
        let live = self.part.finish(stopped_at_ns)?;
        for handle in self.finishing {
            let _ = handle.join();
        }
        apply_retention(&self.dir, &self.policy, self.seq);
        Ok(self.earlier_parts_written + live)
    }

    fn written(&self) -> u64 {
        self.earlier_parts_written + self.part.written()
    }
}

/// A sink writing a series into the directory `dir` under `policy`.
pub fn create_series_sink(dir: &Path, session: SessionInfo, policy: RollPolicy) -> Result<Box<dyn EventSink>> {
    let writer = RollingWriter::open(dir, &session, policy)?;
    Ok(Box::new(QueuedSink::from_writer(writer, QUEUE_BATCHES)?))
}
