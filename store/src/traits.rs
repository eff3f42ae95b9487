//! The storage traits ([`EventSink`], [`TraceStore`]) and the plain data types that cross them.
//! Every engine and every reader of a trace goes through them: each public item says what it is.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use causeway_model::codes::OpCode;
use causeway_model::time::TimeWindow;
use causeway_model::{
    Event, GpuClockSync, GpuDevice, GpuOp, GpuProcessMemory, GpuSample, GpuTimelineNote, KernelName, LaunchConfig,
    LibraryAttach, LossCounter, LossKind, NcclCall, NetPeer, ProcessCgroup, ProcessRank, SchedDetail, ServingSample,
    SessionInfo,
};

use crate::error::Result;
use crate::query::{QueryLimits, QueryResult};
use crate::Engine;

/// Which tool wrote a trace and which schema it has.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceFormat {
    /// Written by Causeway; `schema_version` of the native schema.
    Native {
        /// The native schema's version (`schema_info.schema_version`).
        schema_version: u32,
    },
    /// Written by Ingero; `version` from its `schema_info` table (`0.8`, `0.9`, `0.10`).
    Ingero {
        /// Ingero's schema version.
        version: String,
    },
}

/// What a reader knows about a trace before any analysis.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct TraceInfo {
    /// The trace file.
    pub path: PathBuf,
    /// Who wrote it, with which schema.
    pub format: TraceFormat,
    /// Rows in `events`.
    pub events: u64,
    /// Earliest `events.timestamp` (0 when empty).
    pub first_ns: i64,
    /// Latest `events.timestamp` (0 when empty).
    pub last_ns: i64,
    /// Columns `events` has in this DB.
    pub event_columns: Vec<String>,
    /// Tables in this DB.
    pub tables: Vec<String>,
    /// True when the `events` table holds a sample and `event_aggregates` the true totals
    /// (Ingero's selective storage).
    pub sampled: bool,
    /// What this DB does not record that a native trace would (shown to users and agents).
    pub missing: Vec<String>,
}

impl TraceInfo {
    /// Whether `events` has the column `c` in this DB.
    pub fn has_column(&self, c: &str) -> bool {
        self.event_columns.iter().any(|x| x == c)
    }
    /// Whether this DB has the table `t`.
    pub fn has_table(&self, t: &str) -> bool {
        self.tables.iter().any(|x| x == t)
    }
}

/// Selects events: all filters are ANDed; `None` means no filter.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Events that start inside this window.
    pub window: TimeWindow,
    /// Events of this process.
    pub pid: Option<u32>,
    /// Events of these threads.
    pub tids: Option<Vec<u32>>,
    /// Events of these sources ([`causeway_model::codes::Source`] codes).
    pub sources: Option<Vec<u8>>,
    /// Events of these ops.
    pub ops: Option<Vec<OpCode>>,
    /// Only events whose `ret_code` is not 0: failed calls, and the calls still in flight when the
    /// trace ended ([`causeway_model::codes::RET_IN_FLIGHT`]). Rare rows: a finished SQLite trace
    /// reaches them through a partial index.
    pub failed: bool,
}

impl EventFilter {
    /// Every event in `window`.
    pub fn window(window: TimeWindow) -> EventFilter {
        EventFilter { window, ..Default::default() }
    }

    /// Whether the filter selects every event (no window, process, thread, source or op).
    pub fn is_everything(&self) -> bool {
        self.window.is_all()
            && self.pid.is_none()
            && self.tids.is_none()
            && self.sources.is_none()
            && self.ops.is_none()
            && !self.failed
    }

    /// Whether an event at `ts` of `pid`, `tid` and `op` matches: the engines' SQL condition, in
    /// Rust (an empty list matches nothing), for engines that read rows another way (and hold no
    /// `ret_code`: they never answer a [`EventFilter::failed`] filter).
    pub fn matches(&self, ts: i64, pid: u32, tid: u32, op: OpCode) -> bool {
        self.window.contains(ts)
            && self.pid.is_none_or(|p| p == pid)
            && self.tids.as_ref().is_none_or(|t| t.contains(&tid))
            && self.sources.as_ref().is_none_or(|s| s.contains(&op.source))
            && self.ops.as_ref().is_none_or(|o| o.contains(&op))
    }
}

/// An event id as the DB spells it: an integer (native, Ingero v0.8) or `"node:seq"` text (Ingero v0.9+).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(untagged)]
pub enum EventId {
    /// An integer id (native traces, Ingero v0.8).
    Int(i64),
    /// A `node:seq` id (Ingero v0.9+).
    // Boxed, not a `String`: an id is 16 bytes instead of 24, and `explain` holds one per GPU call
    // of the trace (8 MB per million calls).
    Text(Box<str>),
}

impl EventId {
    /// The id of an event read from `under_way` (what a look of a running tracer found), which is
    /// no `events` row: evidence lists it nowhere and names the table instead.
    pub const UNDER_WAY: EventId = EventId::Int(-1);
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventId::Int(i) => write!(f, "{i}"),
            EventId::Text(s) => f.write_str(s),
        }
    }
}

impl EventId {
    /// SQL literal for this id (quoted when text).
    pub fn sql_literal(&self) -> String {
        match self {
            EventId::Int(i) => i.to_string(),
            EventId::Text(s) => format!("'{}'", s.replace('\'', "''")),
        }
    }
}

/// The columns statistics need, read without touching strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationRow {
    /// The call's op.
    pub op: OpCode,
    /// Its process.
    pub pid: u32,
    /// Entry time, Unix ns.
    pub ts_ns: i64,
    /// Duration, ns.
    pub dur_ns: i64,
}

/// A `sched_switch` row as an off-CPU interval needs it: the times, the thread, the CPU and the
/// scheduler detail (no `comm`, no arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchRow {
    /// The row's id.
    pub id: EventId,
    /// The switch back in (Unix ns); the thread was off the CPU for `dur` before it.
    pub ts: i64,
    /// How long the thread was off the CPU, ns.
    pub dur: i64,
    /// The thread's process.
    pub pid: u32,
    /// The thread that was off the CPU.
    pub tid: u32,
    /// The CPU it was switched out of; -1 unknown.
    pub cpu: i32,
    /// Why it left the CPU and who took it, when the DB records it.
    pub sched: Option<SchedDetail>,
}

impl SwitchRow {
    /// The row of a full event.
    pub fn of(s: StoredEvent) -> SwitchRow {
        let e = s.event;
        SwitchRow { id: s.id, ts: e.ts_ns, dur: e.dur_ns, pid: e.pid, tid: e.tid, cpu: e.cpu, sched: e.sched }
    }

    /// `[ts - dur, ts]` ([`causeway_model::off_cpu_interval`]).
    pub fn off_cpu_interval(&self) -> (i64, i64) {
        causeway_model::off_cpu_interval(self.ts, self.dur)
    }
}

/// The integer columns the analysis passes read (GPU calls, page allocations): no strings, no
/// scheduler detail. The analysis uses it as its GPU call (`analysis::attribution::Call`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlimEvent {
    /// The row's id.
    pub id: EventId,
    /// Unix ns.
    pub ts: i64,
    /// ns.
    pub dur: i64,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// The call's op.
    pub op: OpCode,
    /// Op-specific argument 0 (bytes, kernel handle, ...), as in [`Event::arg0`].
    pub arg0: i64,
    /// Op-specific argument 2 (stream, pointer, ...), as in [`Event::arg2`].
    pub arg2: i64,
}

// `explain` holds one per GPU call of the trace: 64 bytes at most (8.1M calls of a 10M-event trace
// are 518 MB at 64 bytes; a `String` id made them 72)
const _: () = assert!(std::mem::size_of::<SlimEvent>() <= 64);

impl SlimEvent {
    /// The integer columns of a full event.
    pub fn of(s: &StoredEvent) -> SlimEvent {
        let e = &s.event;
        SlimEvent {
            id: s.id.clone(),
            ts: e.ts_ns,
            dur: e.dur_ns,
            pid: e.pid,
            tid: e.tid,
            op: e.code(),
            arg0: e.arg0,
            arg2: e.arg2,
        }
    }

    /// `ts + dur` (saturating).
    pub fn end(&self) -> i64 {
        self.ts.saturating_add(self.dur)
    }
}

/// An event read back from a store, with its id.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// The row's id in its DB.
    pub id: EventId,
    /// The event.
    pub event: Event,
}

/// One row of `under_way`: an event a look of the tracer found still going on, its duration
/// running to the look.
#[derive(Debug, Clone, PartialEq)]
pub struct UnderWayRow {
    /// Unix ns of the look.
    pub seen_at_ns: i64,
    /// What it found: a call in flight (`ret_code` -1) or an open off-CPU interval, ending at the look.
    pub event: Event,
}

impl UnderWayRow {
    /// The event as readers of `events` take it, with the id [`EventId::UNDER_WAY`].
    pub fn stored(self) -> StoredEvent {
        StoredEvent { id: EventId::UNDER_WAY, event: self.event }
    }
}

/// One row of Ingero's `event_aggregates`: the true totals per (bucket, source, op, pid) when
/// `events` holds only a sample.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct AggregateRow {
    /// Start of the bucket, Unix ns.
    pub bucket_ns: i64,
    /// Source code.
    pub source: u8,
    /// Op code within the source.
    pub op: u16,
    /// Process.
    pub pid: u32,
    /// Events that happened in the bucket.
    pub count: u64,
    /// Of them, how many `events` holds.
    pub stored: u64,
    /// Sum of their durations, ns.
    pub sum_dur_ns: i64,
    /// Shortest duration, ns.
    pub min_dur_ns: i64,
    /// Longest duration, ns.
    pub max_dur_ns: i64,
    /// Sum of their `arg0` (bytes for copies and allocations).
    pub sum_arg0: i64,
}

/// A stored user stack: frames innermost first, as Ingero's compact JSON or ours.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StackRecord {
    /// The stack's identity, the `stack_hash` of the events that carry it.
    pub hash: i64,
    /// JSON array of hex instruction pointers.
    pub ips: String,
    /// JSON array of frames: `{"s":"sym+0x1f","f":"lib.so"}`, `{"i":"0x7f..","f":"lib"}` or
    /// `{"pf":"file.py","pfn":"func","pl":12}`.
    pub frames: String,
}

/// A table of the live schema, for agents and for `describe_schema`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct TableDescription {
    /// Table name.
    pub name: String,
    /// Rows it holds.
    pub rows: u64,
    /// Its columns.
    pub columns: Vec<ColumnDescription>,
    /// What the table is for, when this build knows it.
    pub meaning: String,
}

/// A column of a table of the live schema.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ColumnDescription {
    /// Column name.
    pub name: String,
    #[serde(rename = "type")]
    /// Declared SQL type.
    pub sql_type: String,
    /// What it holds, when this build knows it.
    pub meaning: String,
}

/// The live schema plus the meaning of every code found in it.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SchemaDescription {
    /// Who wrote the trace, with which schema.
    pub format: TraceFormat,
    /// The engine that reads it (`sqlite`, `duckdb`).
    pub engine: String,
    /// Its tables.
    pub tables: Vec<TableDescription>,
    /// `(source, op, name, meaning)` for every code present in `events`, and those the lookup tables define.
    pub codes: Vec<CodeDescription>,
    /// Time semantics and other facts needed to write correct SQL.
    pub notes: Vec<String>,
}

/// One (source, op) code and its meaning.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct CodeDescription {
    /// Source code.
    pub source: u8,
    /// Source name (`CUDA`, `DRIVER`, `HOST`, ...).
    pub source_name: String,
    /// Op code within the source.
    pub op: u16,
    /// Op name.
    pub name: String,
    /// What the op is.
    pub meaning: String,
    /// Rows of this code in `events`.
    pub events: u64,
}

/// The read side of every engine. Implementations are `Send + Sync` so a server can share one between
/// requests; calls are blocking (the server runs them on a blocking thread pool).
///
/// A new engine implements the nine required methods; every projection of the events
/// (`scan_durations`, `scan_slim`, `thread_comms`, `events`, `events_by_id`, the kept scans and
/// `duration_summary`) has a default built on [`TraceStore::scan_events`] with the same result, which
/// the engine overrides with a fast path when it has one (the conformance suite runs every check
/// on the defaults too). The reads of the side tables (`launch_configs` ... `process_cgroups`)
/// default to empty: an engine that stores them overrides them.
pub trait TraceStore: Send + Sync {
    /// The engine that reads the trace (an Ingero DB is read by [`Engine::Sqlite`]).
    fn engine(&self) -> Engine;
    /// What a reader knows about the trace before any analysis.
    fn info(&self) -> &TraceInfo;
    /// The recording sessions (one per `trace` run; none in an Ingero DB without a sessions table).
    fn sessions(&self) -> Result<Vec<SessionInfo>>;
    /// pid -> process name, from `process_names` and from `comm` where the DB has it.
    fn process_names(&self) -> Result<BTreeMap<u32, String>>;
    /// Every loss counter the trace stored, per source and kind.
    fn loss_counters(&self) -> Result<Vec<LossCounter>>;
    /// Ingero's `event_aggregates` rows whose bucket lies in the window. Only a store that reads
    /// Ingero DBs has them: the default is none.
    fn aggregates(&self, _window: &TimeWindow) -> Result<Vec<AggregateRow>> {
        Ok(Vec::new())
    }
    /// Calls `f` for every event matching the filter; returns the count. The fast path for
    /// statistics: no strings are read.
    fn scan_durations(&self, filter: &EventFilter, f: &mut dyn FnMut(&DurationRow)) -> Result<u64> {
        self.scan_events(filter, &mut |s| {
            let e = &s.event;
            f(&DurationRow { op: e.code(), pid: e.pid, ts_ns: e.ts_ns, dur_ns: e.dur_ns })
        })
    }
    /// Calls `f` for every event matching the filter as a [`SlimEvent`], in no particular order;
    /// returns the count. The fast path for attribution: no strings are read (engines may return
    /// rows in time order; callers sort).
    fn scan_slim(&self, filter: &EventFilter, f: &mut dyn FnMut(SlimEvent)) -> Result<u64> {
        self.scan_events(filter, &mut |s| f(SlimEvent::of(&s)))
    }
    /// tid -> the `comm` of the thread's earliest (`latest`: latest) event with a non-empty `comm`
    /// among the events matching the filter, for the threads in `filter.tids` (all threads when
    /// `None`). Empty when the DB has no `comm` column. Threads are often renamed right after they
    /// start, so names of wakers and culprits use the latest, names seen on calls the earliest.
    fn thread_comms(&self, filter: &EventFilter, latest: bool) -> Result<HashMap<u32, String>> {
        let mut comms = HashMap::new();
        // scan_events goes in timestamp order: the first comm seen is the earliest
        self.scan_events(filter, &mut |s| {
            if s.event.comm.is_empty() {
                return;
            }
            if latest {
                comms.insert(s.event.tid, s.event.comm);
            } else {
                comms.entry(s.event.tid).or_insert(s.event.comm);
            }
        })?;
        Ok(comms)
    }
    /// Calls `f` for every full event matching the filter, in timestamp order, streaming (never
    /// holding them all); returns the count.
    fn scan_events(&self, filter: &EventFilter, f: &mut dyn FnMut(StoredEvent)) -> Result<u64>;
    /// [`TraceStore::scan_events`] for the rows `keep(tid, timestamp, duration)` accepts: engines
    /// that read columns ask `keep` before decoding a row (strings included), so a scan that keeps
    /// few of many rows costs little more than reading three integers. Returns the count kept.
    fn scan_events_kept(
        &self,
        filter: &EventFilter,
        keep: &dyn Fn(u32, i64, i64) -> bool,
        f: &mut dyn FnMut(StoredEvent),
    ) -> Result<u64> {
        let mut n = 0u64;
        self.scan_events(filter, &mut |s| {
            if keep(s.event.tid, s.event.ts_ns, s.event.dur_ns) {
                n += 1;
                f(s);
            }
        })?;
        Ok(n)
    }
    /// [`TraceStore::scan_events_kept`] read as [`SwitchRow`]s (for `sched_switch` filters), in no
    /// guaranteed order (callers sort): engines skip the columns an off-CPU interval does not need
    /// and read the rows in whatever order their access path gives.
    fn scan_switches_kept(
        &self,
        filter: &EventFilter,
        keep: &dyn Fn(u32, i64, i64) -> bool,
        f: &mut dyn FnMut(SwitchRow),
    ) -> Result<u64> {
        self.scan_events_kept(filter, keep, &mut |s| f(SwitchRow::of(s)))
    }
    /// Full events matching the filter, ordered by timestamp.
    fn events(&self, filter: &EventFilter) -> Result<Vec<StoredEvent>> {
        let mut events = Vec::new();
        self.scan_events(filter, &mut |s| events.push(s))?;
        Ok(events)
    }
    /// Events by id (evidence lookups), in the order found. The default reads every event once:
    /// engines with an id index override it.
    fn events_by_id(&self, ids: &[EventId]) -> Result<Vec<StoredEvent>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: std::collections::HashSet<&EventId> = ids.iter().collect();
        let mut found = Vec::new();
        self.scan_events(&EventFilter::default(), &mut |s| {
            if wanted.contains(&s.id) {
                found.push(s);
            }
        })?;
        Ok(found)
    }
    /// Stacks by hash (missing hashes are absent from the map).
    fn stacks(&self, hashes: &[i64]) -> Result<BTreeMap<i64, StackRecord>>;
    // The tables beside `events` that the probes fill. Each has a default for a store that holds
    // none of them (it reads none, as for an Ingero DB); both engines read them all
    // (backends/src/shared_reads.rs), which the conformance suite checks.

    /// Every launch configuration (`launch_configs`), by key: launches name theirs by
    /// [`LaunchConfig::key`] in `Event::launch_config`. Empty for traces without the table (Ingero
    /// DBs, native traces recorded before it).
    fn launch_configs(&self) -> Result<Vec<LaunchConfig>> {
        Ok(Vec::new())
    }
    /// Every kernel name (`kernel_names`), by (pid, handle); empty for traces without the table.
    fn kernel_names(&self) -> Result<Vec<KernelName>> {
        Ok(Vec::new())
    }
    /// Every socket peer (`net_peers`), by key: socket and TCP events name theirs in `arg2`.
    /// Empty for traces without the table.
    fn net_peers(&self) -> Result<Vec<NetPeer>> {
        Ok(Vec::new())
    }
    /// Every library attachment (`attachments`), by session and then by `attached_at`: what the
    /// trace covers. Empty for traces without the table.
    fn attachments(&self) -> Result<Vec<LibraryAttach>> {
        Ok(Vec::new())
    }
    /// The NCCL calls (`nccl_calls`) that started in `window`, in time order; empty for traces
    /// without the table (Ingero DBs, native traces recorded before it).
    fn nccl_calls(&self, _window: &TimeWindow) -> Result<Vec<NcclCall>> {
        Ok(Vec::new())
    }
    /// The GPU state samples (`gpu_samples`, read through NVML) taken in `window`, by time then
    /// GPU; empty for traces without the table or recorded without NVML.
    fn gpu_samples(&self, _window: &TimeWindow) -> Result<Vec<GpuSample>> {
        Ok(Vec::new())
    }
    /// The processes NVML listed on each GPU at the samples taken in `window`, with the memory
    /// each used (`gpu_process_memory`), by time, GPU and pid; empty for traces without the table
    /// or recorded without NVML.
    fn gpu_process_memory(&self, _window: &TimeWindow) -> Result<Vec<GpuProcessMemory>> {
        Ok(Vec::new())
    }
    /// The serving engines' own metrics scraped while tracing (`serving_samples`) in `window`, by
    /// time, pid, metric, labels and bucket bound; empty for traces without the table or without
    /// a serving engine.
    fn serving_samples(&self, _window: &TimeWindow) -> Result<Vec<ServingSample>> {
        Ok(Vec::new())
    }
    /// Where the traced processes stand in their distributed jobs (`process_ranks`), by pid; empty
    /// for traces without the table or processes without a launcher's rank.
    fn process_ranks(&self) -> Result<Vec<ProcessRank>> {
        Ok(Vec::new())
    }
    /// The cgroups of the traced processes and of those that took their CPUs
    /// (`process_cgroups`), with the container or pod each stands for, by pid; empty for traces
    /// without the table.
    fn process_cgroups(&self) -> Result<Vec<ProcessCgroup>> {
        Ok(Vec::new())
    }
    /// The device's own timeline (`gpu_ops`): every kernel, copy, memset and synchronization whose
    /// device start is in `window`, handed to `f` by start time (then pid, device, stream, end);
    /// returns how many. Nothing for traces recorded without `--gpu-timeline`.
    fn scan_gpu_ops(&self, _window: &TimeWindow, _f: &mut dyn FnMut(GpuOp)) -> Result<u64> {
        Ok(0)
    }
    /// The calibrations of CUPTI's clock against the trace's (`gpu_clock_syncs`), by pid then
    /// trace time; empty without a device timeline.
    fn gpu_clock_syncs(&self) -> Result<Vec<GpuClockSync>> {
        Ok(Vec::new())
    }
    /// The CUDA devices the traced processes used (`gpu_devices`), by pid then device; empty
    /// without a device timeline.
    fn gpu_devices(&self) -> Result<Vec<GpuDevice>> {
        Ok(Vec::new())
    }
    /// What a reader of the device view must know (`gpu_timeline_notes`): holes, losses, refusals,
    /// by time; empty without a device timeline.
    fn gpu_timeline_notes(&self) -> Result<Vec<GpuTimelineNote>> {
        Ok(Vec::new())
    }
    /// What the tracer's last look found still under way (`under_way`): calls in flight and their
    /// threads' open off-CPU intervals, by look, pid, tid and time. Empty for a session that
    /// finished (its last look is in `events`) and for traces without the table.
    fn under_way(&self) -> Result<Vec<UnderWayRow>> {
        Ok(Vec::new())
    }
    /// What the traced processes touched (`trace --footprint`: `footprint_syscalls`,
    /// `footprint_cpu`, `footprint_fds`, `footprint_requests`, `footprint_execs`), each table in
    /// its own order (syscalls and CPU by look, pid, request, nr; descriptors by pid, open time,
    /// fd, name; requests by pid and number; execs by time). Empty for traces without them.
    fn footprint(&self) -> Result<causeway_model::FootprintPart> {
        Ok(Default::default())
    }
    /// Run user SQL, read-only, with limits.
    fn query(&self, sql: &str, limits: &QueryLimits) -> Result<QueryResult>;
    /// The live schema, with the meaning of every code.
    fn describe_schema(&self) -> Result<SchemaDescription>;
    /// Exact per-op (and optionally per-pid) duration figures with nearest-rank percentiles
    /// (`per_mille`). The default scans in Rust; engines that are faster override it with the same
    /// definition (see [`crate::summary`]).
    fn duration_summary(
        &self,
        filter: &EventFilter,
        per_mille: &[u32],
        per_process: bool,
    ) -> Result<crate::summary::DurationSummary> {
        crate::summary::summarize_by_scan(self, filter, per_mille, per_process)
    }
    /// Whether [`duration_summary`](Self::duration_summary) of the whole trace reads figures the
    /// trace already holds (a finished trace's sorted durations per op) instead of going through
    /// every event: callers that hold the events anyway (explain) then ask it rather than sort
    /// durations of their own.
    fn summarizes_whole_trace_from_packed(&self) -> bool {
        false
    }
}

/// What the device-timeline library delivered in one flush, as the sink takes it: the device ops
/// (times already on the trace's clock), the calibrations that mapped them, devices described,
/// notes (holes, losses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuTimelinePart {
    /// Kernels, copies, memsets and synchronizations.
    pub ops: Vec<GpuOp>,
    /// The calibration pairs of this flush.
    pub clock_syncs: Vec<GpuClockSync>,
    /// Devices described (usually only in the first part of a process).
    pub devices: Vec<GpuDevice>,
    /// Holes, losses and refusals.
    pub notes: Vec<GpuTimelineNote>,
}

impl GpuTimelinePart {
    /// Whether it carries nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.clock_syncs.is_empty() && self.devices.is_empty() && self.notes.is_empty()
    }
}

/// What a finished trace holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkSummary {
    /// Events the sink stored.
    pub events_written: u64,
    /// Every loss counted, per source and kind.
    pub losses: Vec<LossCounter>,
    /// What a reader of the trace must know about how it ended (the disk filled up, the session
    /// could not be closed).
    pub notes: Vec<String>,
}

/// The write side. A tracer owns one sink per trace; batches go to a writer that commits them in
/// transactions. `write_batch` waits for queue space; `try_write_batch` never waits and counts a
/// dropped batch as [`LossKind::SinkBackpressure`] against each event's source.
#[async_trait::async_trait]
pub trait EventSink: Send {
    /// Queue a batch, waiting while the writer's queue is full.
    async fn write_batch(&mut self, events: Vec<Event>) -> Result<()>;
    /// Queue a batch or, if the writer's queue is full, drop it and count the loss. Returns whether it was queued.
    fn try_write_batch(&mut self, events: Vec<Event>) -> bool;
    /// Add stacks (deduplicated by hash).
    async fn write_stacks(&mut self, stacks: Vec<StackRecord>) -> Result<()>;
    /// Record or update a process name.
    async fn write_process_name(&mut self, pid: u32, name: String, seen_at_ns: i64) -> Result<()>;
    /// Add launch configurations (deduplicated by [`LaunchConfig::key`]; the launches that use one
    /// carry its key in `Event::launch_config`).
    async fn write_launch_configs(&mut self, configs: Vec<LaunchConfig>) -> Result<()>;
    /// Record kernel names; a later name for the same (pid, handle) replaces the earlier one.
    async fn write_kernel_names(&mut self, names: Vec<KernelName>) -> Result<()>;
    /// Record socket peers (deduplicated by key).
    async fn write_net_peers(&mut self, peers: Vec<NetPeer>) -> Result<()>;
    /// Record library attachments of this session (appended, tagged with the session's id).
    async fn write_attachments(&mut self, attachments: Vec<LibraryAttach>) -> Result<()>;
    /// Record what NCCL calls did (their events go through `write_batch`).
    async fn write_nccl_calls(&mut self, calls: Vec<NcclCall>) -> Result<()>;
    /// Record GPU state samples and the processes NVML listed on the GPUs then, with their memory.
    async fn write_gpu_samples(&mut self, samples: Vec<GpuSample>, processes: Vec<GpuProcessMemory>) -> Result<()>;
    /// Record what a serving engine's metrics endpoint said.
    async fn write_serving_samples(&mut self, samples: Vec<ServingSample>) -> Result<()>;
    /// Record processes' ranks in their jobs (a later row for a pid replaces the earlier one).
    async fn write_process_ranks(&mut self, ranks: Vec<ProcessRank>) -> Result<()>;
    /// Record processes' cgroups (a later row for a pid replaces the earlier one).
    async fn write_process_cgroups(&mut self, cgroups: Vec<ProcessCgroup>) -> Result<()>;
    /// Record what the device-timeline library delivered (`gpu_ops`, `gpu_clock_syncs`,
    /// `gpu_devices`, `gpu_timeline_notes`); a later device row for the same (pid, device) replaces
    /// the earlier one. `launch_event_id` is filled when the trace is finished.
    async fn write_gpu_timeline(&mut self, part: GpuTimelinePart) -> Result<()>;
    /// Replace this session's `under_way` rows with `events`, what a look at `seen_at_ns` found
    /// under way (empty: nothing is). Finishing the session clears them.
    async fn write_under_way(&mut self, seen_at_ns: i64, events: Vec<Event>) -> Result<()>;
    /// Record what the traced processes touched (`trace --footprint`; every table appended).
    async fn write_footprint(&mut self, part: causeway_model::FootprintPart) -> Result<()>;
    /// Count `n` events of `source` lost at `kind`.
    fn add_loss(&mut self, source: u8, kind: LossKind, n: u64);
    /// Wait until everything queued so far is committed (loss counters included).
    async fn flush(&mut self) -> Result<()>;
    /// Flush, close the session (stopped_at), build indexes, and leave a self-contained file.
    async fn finish(self: Box<Self>, stopped_at_ns: i64) -> Result<SinkSummary>;
}
