//! The GPU's idle time and the host cause behind each gap, from the device's own timeline
//! (`gpu_ops`, recorded with `trace --gpu-timeline`) joined with the host's story of the thread that
//! launched the work that ended the gap.
//!
//! Per (process, device): the device is busy while any kernel, copy or memset runs on it (the union
//! of their spans over every stream); the rest of its span is idle. Every idle gap at least
//! [`DEFAULT_GAP_NS`] long is explained by the op that ended it (the first to start after it):
//! - launched before the gap began: the device waited for something else (another stream's event,
//!   a host function): [`IdleCause::DeviceDependency`];
//! - launched by a thread whose call CUPTI did not report: [`IdleCause::LaunchUnknown`];
//! - otherwise the host was late. If a synchronizing call (CUPTI's `SYNCHRONIZATION` record) was
//!   waiting when the device went idle, the host asked for the drain: the gap up to that call's
//!   return is [`IdleCause::Drain`]. From then until the launching call began, the launching
//!   thread's own story splits the time by cause ([`crate::attribution::attribute_interval`] over
//!   its off-CPU intervals: preempted by whom, run-queue wait, sleep and who woke it, I/O, network);
//!   its on-CPU rest is host work ([`Cause::HostCompute`]), or, after a drain, the drain's price.
//!   From the launching call's start to the device's start is [`IdleCause::LaunchOverhead`].
//!
//! **Never more blame than the evidence allows:** every part lies inside the gap, so a host cause is
//! charged only with device idle time it overlapped; a preemption while the device stayed busy
//! costs nothing (and [`DeviceView::host_time_hidden_ns`] says how much such time there was).

use std::collections::{BTreeMap, HashMap};

use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::{GpuOp, GpuOpKind};
use causeway_store::TraceStore;

use crate::attribution::{attribute_interval, Cause, Culprit, OffCpu};
use crate::trace_data::{load_off_cpu, Names, Spans};
use crate::AnalysisError;

/// Idle gaps shorter than this are counted in the idle total, not explained one by one.
pub const DEFAULT_GAP_NS: i64 = 1_000_000;

/// How far a synchronizing call's return may precede the device's last end and still be the wait
/// that drained it (the two are stamped by one clock, CUPTI's; this absorbs its rounding).
pub(crate) const DRAIN_TOLERANCE_NS: i64 = 100_000;

/// Gaps listed one by one (the rest are counted in [`DeviceView::gaps_total`]).
const GAPS_LISTED: usize = 20;

/// Why the device sat idle for a part of a gap: what the launching thread went through (the host
/// causes of [`Cause`] that a gap can meet, named alike), or what the device and the launch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdleCause {
    /// Runnable, but another task had the CPU.
    Preempted,
    /// Woken, waiting in the run queue for a CPU.
    RunqueueWait,
    /// A voluntary sleep (futex, queue, poll, a timer).
    Sleep,
    /// Asleep inside a socket call.
    NetworkWait,
    /// Uninterruptible: block I/O, page faults.
    Uninterruptible,
    /// Stopped, traced, parked.
    StoppedOrOther,
    /// Off-CPU, the trace does not record why.
    OffCpuUnrecorded,
    /// On the CPU doing host work.
    HostCompute,
    /// A synchronizing call emptied the queue; the host then had nothing queued behind it.
    Drain,
    /// From the launching call's start to the device's start of the work.
    LaunchOverhead,
    /// The work was submitted before the device went idle: it waited on the device for something
    /// else (another stream's event, a host function).
    DeviceDependency,
    /// CUPTI's record of the launching call was not received: who launched it is unknown.
    LaunchUnknown,
}

impl IdleCause {
    /// The idle cause of what the launching thread went through.
    pub fn of_host(c: Cause) -> IdleCause {
        match c {
            Cause::Preempted => IdleCause::Preempted,
            Cause::RunqueueWait => IdleCause::RunqueueWait,
            Cause::Sleep => IdleCause::Sleep,
            Cause::NetworkWait => IdleCause::NetworkWait,
            Cause::Uninterruptible => IdleCause::Uninterruptible,
            Cause::StoppedOrOther => IdleCause::StoppedOrOther,
            Cause::OffCpuUnrecorded | Cause::NoSchedData => IdleCause::OffCpuUnrecorded,
            _ => IdleCause::HostCompute,
        }
    }

    /// The host cause it is, if it is one.
    pub fn host(self) -> Option<Cause> {
        Some(match self {
            IdleCause::Preempted => Cause::Preempted,
            IdleCause::RunqueueWait => Cause::RunqueueWait,
            IdleCause::Sleep => Cause::Sleep,
            IdleCause::NetworkWait => Cause::NetworkWait,
            IdleCause::Uninterruptible => Cause::Uninterruptible,
            IdleCause::StoppedOrOther => Cause::StoppedOrOther,
            IdleCause::OffCpuUnrecorded => Cause::OffCpuUnrecorded,
            IdleCause::HostCompute => Cause::HostCompute,
            _ => return None,
        })
    }

    /// Its name: a host cause's own name, `drain`, `launch_overhead`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            IdleCause::Drain => "drain",
            IdleCause::LaunchOverhead => "launch_overhead",
            IdleCause::DeviceDependency => "device_dependency",
            IdleCause::LaunchUnknown => "launch_unknown",
            c => c.host().map_or("", Cause::as_str),
        }
    }

    /// What it means, in words.
    pub fn describe(self) -> &'static str {
        match self {
            IdleCause::HostCompute => "the launching thread was on the CPU doing host work",
            IdleCause::Drain => "a synchronizing call drained the queue, and nothing was queued behind it",
            IdleCause::LaunchOverhead => "the launching call itself, until the device started the work",
            IdleCause::DeviceDependency => {
                "the work was queued in time; the device waited for another stream or a host function"
            }
            IdleCause::LaunchUnknown => "the call that launched the work was not recorded",
            c => c.host().map_or("", Cause::describe),
        }
    }

    /// Whether a host cause (a task or wait that can be named and fixed on the host).
    pub fn is_host(self) -> bool {
        self.host().is_some_and(Cause::is_host_cause)
    }
}

/// One cause's share of one gap.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct IdlePart {
    pub cause: IdleCause,
    pub ns: i64,
    /// Who took the CPU, or who woke the thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Culprit>,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// The work that ended a gap, and the call that launched it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct NextOp {
    pub kind: GpuOpKind,
    pub name: String,
    pub stream: u32,
    pub correlation: u32,
    pub launch_tid: u32,
    /// The launching thread's name.
    pub launch_thread: String,
    pub launch_start_ns: i64,
    /// `events.id` of the traced call that launched it (0: none matched).
    pub launch_event_id: i64,
}

/// One idle gap of a device, explained.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct IdleGap {
    pub pid: u32,
    pub device: i32,
    pub start_ns: i64,
    pub end_ns: i64,
    pub idle_ns: i64,
    /// The step (of the process's step series) the gap began in, when the trace has steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    pub next: NextOp,
    /// By cause, largest first; they sum to `idle_ns`.
    pub parts: Vec<IdlePart>,
    /// "the GPU sat idle 38 ms: the launching thread was preempted by backup-rsync (pid 9912) for 38 ms"
    pub summary: String,
}

/// One stream of a device.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct StreamFigures {
    pub stream: u32,
    pub ops: u64,
    /// The union of its ops' spans.
    pub busy_ns: i64,
}

/// One device of one process.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceFigures {
    pub pid: u32,
    pub device: i32,
    /// `GPU-...`, when CUPTI described the device.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub first_ns: i64,
    pub last_ns: i64,
    /// Kernels, copies and memsets.
    pub ops: u64,
    pub busy_ns: i64,
    pub idle_ns: i64,
    /// busy / (last - first).
    pub busy_share: f64,
    /// Idle in gaps shorter than the threshold (not explained one by one).
    pub idle_in_short_gaps_ns: i64,
    pub streams: Vec<StreamFigures>,
}

/// Idle time of one cause and culprit over every gap.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct IdleChain {
    pub id: String,
    pub cause: IdleCause,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Culprit>,
    /// Device idle time it explains, over every gap.
    pub idle_ns: i64,
    pub gaps: usize,
    /// Its share of the explained idle time.
    pub share: f64,
    pub summary: String,
    /// One read-only query that recomputes `idle_ns` from the stored rows (one row, column `value`).
    pub sql: String,
}

/// The device view of a scope.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceView {
    pub devices: Vec<DeviceFigures>,
    pub gap_threshold_ns: i64,
    /// Gaps at least the threshold long, over every device.
    pub gaps_total: usize,
    /// Their idle time.
    pub gaps_idle_ns: i64,
    /// The longest gaps, explained (at most 20).
    pub gaps: Vec<IdleGap>,
    /// Idle time by cause and culprit, most first.
    pub chains: Vec<IdleChain>,
    /// Time the launching threads were runnable but off the CPU while their devices stayed busy:
    /// host trouble that cost the GPU nothing (it is blamed for nothing).
    pub host_time_hidden_ns: i64,
    /// The largest error bound of the clock mapping (CUPTI to the trace's clock).
    pub clock_error_ns: i64,
    /// Holes, losses, refusals of the device view, and how many ops had no launching call.
    pub notes: Vec<String>,
}

/// An op as the idle analysis keeps it.
struct Op {
    stream: u32,
    kind: GpuOpKind,
    start: i64,
    end: i64,
    correlation: u32,
    name: u32,
    launch_tid: u32,
    launch_start: i64,
    launch_event_id: i64,
}

/// The ops of one (process, device), and the synchronizations of the process.
#[derive(Default)]
struct DeviceOps {
    ops: Vec<Op>,
}

/// A gap found, before attribution.
struct RawGap {
    pid: u32,
    device: i32,
    start: i64,
    end: i64,
    next: usize,
    /// Where the drain ended (the synchronizing call's return), when one drained the device.
    drain_end: Option<i64>,
}

/// The device view of `window` (of `pid`), or `None` when the trace holds no device timeline.
pub fn device_view(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    gap_threshold_ns: i64,
) -> Result<Option<DeviceView>, AnalysisError> {
    let mut names: Vec<String> = Vec::new();
    let mut name_ids: HashMap<String, u32> = HashMap::new();
    let mut by_device: BTreeMap<(u32, i32), DeviceOps> = BTreeMap::new();
    let mut syncs: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
    let mut unmatched = 0u64;
    let mut seen = 0u64;
    store.scan_gpu_ops(&window, &mut |g: GpuOp| {
        if pid.is_some_and(|p| p != g.pid) {
            return;
        }
        seen += 1;
        if g.kind == GpuOpKind::Sync {
            syncs.entry(g.pid).or_default().push((g.start_ns, g.end_ns));
            return;
        }
        if g.launch_tid == 0 {
            unmatched += 1;
        }
        let name = match name_ids.get(&g.name) {
            Some(&i) => i,
            None => {
                let i = names.len() as u32;
                names.push(g.name.clone());
                name_ids.insert(g.name, i);
                i
            }
        };
        by_device.entry((g.pid, g.device)).or_default().ops.push(Op {
            stream: g.stream,
            kind: g.kind,
            start: g.start_ns,
            end: g.end_ns.max(g.start_ns),
            correlation: g.correlation,
            name,
            launch_tid: g.launch_tid,
            launch_start: g.launch_start_ns,
            launch_event_id: g.launch_event_id,
        });
    })?;
    if seen == 0 {
        return Ok(None);
    }
    for v in syncs.values_mut() {
        v.sort_unstable();
    }
    let described: HashMap<(u32, i32), (String, String)> =
        store.gpu_devices()?.into_iter().map(|d| ((d.pid, d.device), (d.uuid, d.name))).collect();

    let mut devices = Vec::new();
    let mut raw = Vec::new();
    for ((p, d), dev) in by_device.iter_mut() {
        dev.ops.sort_by_key(|o| (o.start, o.end, o.stream, o.correlation));
        let (fig, gaps) = busy_and_gaps(*p, *d, &dev.ops, gap_threshold_ns, syncs.get(p).map(Vec::as_slice));
        let (uuid, name) = described.get(&(*p, *d)).cloned().unwrap_or_default();
        devices.push(DeviceFigures { uuid, name, ..fig });
        raw.extend(gaps);
    }

    // the launching threads' stories over the host part of every gap
    let mut spans = Spans::default();
    for g in &raw {
        let op = &by_device[&(g.pid, g.device)].ops[g.next];
        if let Some((a, b)) = host_window(g, op) {
            spans.add(op.launch_tid, a, b);
        }
    }
    // and the launching threads over their devices' busy span, for the time that cost nothing
    for ((_, _), d) in &by_device {
        let (Some(first), Some(last)) = (d.ops.first(), d.ops.iter().map(|o| o.end).max()) else { continue };
        let mut tids: Vec<u32> = d.ops.iter().map(|o| o.launch_tid).filter(|t| *t != 0).collect();
        tids.sort_unstable();
        tids.dedup();
        for tid in tids {
            spans.add(tid, first.start, last);
        }
    }
    spans.finish();
    let mut names_of = Names::of_store(store)?;
    let socket = !names_of.peers.is_empty();
    let off = load_off_cpu(store, &spans, socket)?;
    let tids: Vec<u32> = raw.iter().map(|g| by_device[&(g.pid, g.device)].ops[g.next].launch_tid).collect();
    let culprit_tids: Vec<u32> =
        off.values().flatten().filter_map(|o| o.sched.as_ref().map(|s| [s.next_tid, s.waker_tid])).flatten().collect();
    names_of.resolve_threads(store, tids.into_iter().chain(culprit_tids))?;

    let hidden = hidden_host_time(&by_device, &off);
    let mut gaps: Vec<IdleGap> = raw
        .iter()
        .map(|g| {
            let op = &by_device[&(g.pid, g.device)].ops[g.next];
            explain_gap(g, op, &names[op.name as usize], off.get(&op.launch_tid).map(Vec::as_slice), &names_of)
        })
        .collect();
    let chains = chains_of(&gaps, window, pid, gap_threshold_ns);
    let gaps_total = gaps.len();
    let gaps_idle_ns = gaps.iter().map(|g| g.idle_ns).sum();
    gaps.sort_by_key(|g| (std::cmp::Reverse(g.idle_ns), g.start_ns));
    gaps.truncate(GAPS_LISTED);

    let syncs_all = store.gpu_clock_syncs()?;
    let clock_error_ns =
        syncs_all.iter().filter(|s| pid.is_none_or(|p| p == s.pid)).map(|s| s.error_ns).max().unwrap_or(0);
    let mut notes: Vec<String> = store
        .gpu_timeline_notes()?
        .into_iter()
        .filter(|n| pid.is_none_or(|p| p == n.pid) && n.kind != "started" && n.kind != "stopped")
        .map(|n| format!("{} (pid {}): {}", fmt_clock(n.ts_ns), n.pid, n.detail))
        .collect();
    notes.extend(holes_at_the_end(store, window, &by_device)?);
    if unmatched > 0 {
        notes.push(format!(
            "{unmatched} device ops had no record of the call that launched them: their gaps are not charged to a thread"
        ));
    }
    Ok(Some(DeviceView {
        devices,
        gap_threshold_ns,
        gaps_total,
        gaps_idle_ns,
        gaps,
        chains,
        host_time_hidden_ns: hidden,
        clock_error_ns,
        notes,
    }))
}

fn fmt_clock(ts: i64) -> String {
    causeway_model::time::fmt_utc(ts)
}

/// Busy time, streams and the long gaps of one device's ops (sorted by start, end, stream,
/// correlation: the order the evidence SQL numbers them in).
fn busy_and_gaps(
    pid: u32,
    device: i32,
    ops: &[Op],
    threshold: i64,
    syncs: Option<&[(i64, i64)]>,
) -> (DeviceFigures, Vec<RawGap>) {
    let mut busy = 0i64;
    let mut short = 0i64;
    let mut gaps = Vec::new();
    let mut until: Option<i64> = None;
    let mut streams: BTreeMap<u32, (u64, i64, i64)> = BTreeMap::new(); // ops, busy, until
    for (i, o) in ops.iter().enumerate() {
        match until {
            Some(u) if o.start > u => {
                let idle = o.start - u;
                if idle >= threshold {
                    gaps.push(RawGap {
                        pid,
                        device,
                        start: u,
                        end: o.start,
                        next: i,
                        drain_end: drain_end(syncs, u, o.start),
                    });
                } else {
                    short += idle;
                }
                busy += o.end - o.start;
            }
            Some(u) => busy += (o.end - u).max(0),
            None => busy += o.end - o.start,
        }
        until = Some(until.map_or(o.end, |u| u.max(o.end)));
        let s = streams.entry(o.stream).or_insert((0, 0, i64::MIN));
        s.0 += 1;
        s.1 += (o.end - o.start.max(s.2)).max(0);
        s.2 = s.2.max(o.end);
    }
    let first = ops.first().map_or(0, |o| o.start);
    let last = until.unwrap_or(first);
    let span = (last - first).max(0);
    let fig = DeviceFigures {
        pid,
        device,
        uuid: String::new(),
        name: String::new(),
        first_ns: first,
        last_ns: last,
        ops: ops.len() as u64,
        busy_ns: busy,
        idle_ns: span - busy,
        busy_share: if span > 0 { busy as f64 / span as f64 } else { 1.0 },
        idle_in_short_gaps_ns: short,
        streams: streams
            .into_iter()
            .map(|(stream, (ops, busy_ns, _))| StreamFigures { stream, ops, busy_ns })
            .collect(),
    };
    (fig, gaps)
}

/// The return of the synchronizing call that was waiting when the device went idle at `idle_from`
/// (it began before and returned no earlier than [`DRAIN_TOLERANCE_NS`] before), clamped into the
/// gap; the latest such return when several threads waited.
fn drain_end(syncs: Option<&[(i64, i64)]>, idle_from: i64, idle_to: i64) -> Option<i64> {
    let syncs = syncs?;
    let hi = syncs.partition_point(|s| s.0 < idle_from);
    syncs[..hi].iter().filter(|s| s.1 >= idle_from - DRAIN_TOLERANCE_NS).map(|s| s.1.clamp(idle_from, idle_to)).max()
}

/// The part of a gap the launching thread's story explains: from the device going idle (or the
/// drain's end) to the launching call's start; `None` when the work was launched before the gap or
/// by an unknown thread.
fn host_window(g: &RawGap, op: &Op) -> Option<(i64, i64)> {
    if op.launch_tid == 0 || op.launch_start <= 0 || op.launch_start <= g.start {
        return None;
    }
    let a = g.drain_end.unwrap_or(g.start).clamp(g.start, g.end);
    let b = op.launch_start.clamp(a, g.end);
    (b > a).then_some((a, b))
}

/// Split one gap by cause.
fn explain_gap(g: &RawGap, op: &Op, name: &str, offs: Option<&[OffCpu]>, names: &Names) -> IdleGap {
    let mut parts: Vec<IdlePart> = Vec::new();
    let whole = |cause, a: i64, b: i64| IdlePart { cause, ns: b - a, culprit: None, start_ns: a, end_ns: b };
    if op.launch_tid == 0 || op.launch_start <= 0 {
        parts.push(whole(IdleCause::LaunchUnknown, g.start, g.end));
    } else if op.launch_start <= g.start {
        parts.push(whole(IdleCause::DeviceDependency, g.start, g.end));
    } else {
        let host_from = g.drain_end.unwrap_or(g.start).clamp(g.start, g.end);
        if host_from > g.start {
            parts.push(whole(IdleCause::Drain, g.start, host_from));
        }
        let host_to = op.launch_start.clamp(host_from, g.end);
        if host_to > host_from {
            for p in attribute_interval(host_from, host_to, offs.unwrap_or(&[]), None, Cause::HostCompute) {
                let cause = match p.cause {
                    Cause::HostCompute if g.drain_end.is_some() => IdleCause::Drain,
                    c => IdleCause::of_host(c),
                };
                // who took the CPU keeps the name its switch row gives (the evidence SQL matches it);
                // a waker is named from the trace's names
                let culprit = p.culprit.map(|(pid, tid, comm)| {
                    let (role, comm) = match p.cause {
                        Cause::Preempted => ("took_cpu", comm),
                        _ => ("woke_thread", names.of(pid, tid)),
                    };
                    Culprit { pid, tid, comm, role: role.into(), place: names.place_of(pid) }
                });
                parts.push(IdlePart { cause, ns: p.ns, culprit, start_ns: p.start, end_ns: p.end });
            }
        }
        if g.end > host_to {
            parts.push(whole(IdleCause::LaunchOverhead, host_to, g.end));
        }
    }
    let parts = merge_parts(parts);
    let launch_thread = names.of(g.pid, op.launch_tid);
    let summary = gap_summary(g, &parts, &launch_thread);
    IdleGap {
        pid: g.pid,
        device: g.device,
        start_ns: g.start,
        end_ns: g.end,
        idle_ns: g.end - g.start,
        step: None,
        next: NextOp {
            kind: op.kind,
            name: name.to_string(),
            stream: op.stream,
            correlation: op.correlation,
            launch_tid: op.launch_tid,
            launch_thread,
            launch_start_ns: op.launch_start,
            launch_event_id: op.launch_event_id,
        },
        parts,
        summary,
    }
}

/// Parts of one cause and culprit summed (their span the first's start to the last's end), largest
/// first.
fn merge_parts(parts: Vec<IdlePart>) -> Vec<IdlePart> {
    let mut out: Vec<IdlePart> = Vec::new();
    for p in parts {
        match out.iter_mut().find(|q| q.cause == p.cause && q.culprit == p.culprit) {
            Some(q) => {
                q.ns += p.ns;
                q.start_ns = q.start_ns.min(p.start_ns);
                q.end_ns = q.end_ns.max(p.end_ns);
            }
            None => out.push(p),
        }
    }
    out.sort_by_key(|p| (std::cmp::Reverse(p.ns), p.start_ns));
    out
}

/// What a part says about the launching thread, in words.
pub fn part_words(cause: IdleCause, culprit: Option<&Culprit>) -> String {
    let who = |c: &Culprit| format!("{} (pid {})", if c.comm.is_empty() { "?" } else { &c.comm }, c.pid);
    match (cause, culprit) {
        (IdleCause::Preempted, Some(c)) => format!("the launching thread was preempted by {}", who(c)),
        (IdleCause::Sleep, Some(c)) => format!("the launching thread slept until {} woke it", who(c)),
        (IdleCause::Sleep, None) => "the launching thread slept (a timer or nothing recorded woke it)".into(),
        (IdleCause::RunqueueWait, _) => "the launching thread waited for a CPU after its wake-up".into(),
        (IdleCause::Uninterruptible, _) => "the launching thread waited on block I/O or page faults".into(),
        (IdleCause::NetworkWait, _) => "the launching thread waited on the network".into(),
        (IdleCause::HostCompute, _) => "the launching thread was on the CPU doing host work".into(),
        (IdleCause::Drain, _) => "a synchronize drained the queue and nothing was queued behind it".into(),
        (c, _) => c.describe().to_string(),
    }
}

fn gap_summary(g: &RawGap, parts: &[IdlePart], thread: &str) -> String {
    let Some(top) = parts.first() else { return String::new() };
    let mut s = format!(
        "the GPU (device {}) sat idle {}: {} for {}",
        g.device,
        fmt_ns(g.end - g.start),
        part_words(top.cause, top.culprit.as_ref()),
        fmt_ns(top.ns)
    );
    if top.cause.is_host() || top.cause == IdleCause::Drain {
        s.push_str(&format!(" (thread {thread})"));
    }
    s
}

/// Time the launching threads were runnable but off the CPU (preempted, waiting in the run queue)
/// while their process's device was busy: CPU contention that cost the GPU nothing.
fn hidden_host_time(by_device: &BTreeMap<(u32, i32), DeviceOps>, off: &HashMap<u32, Vec<OffCpu>>) -> i64 {
    let mut busy_by_pid: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
    for ((p, _), d) in by_device {
        busy_by_pid.entry(*p).or_default().extend(d.ops.iter().map(|o| (o.start, o.end)));
    }
    let busy_by_pid: HashMap<u32, Vec<(i64, i64)>> =
        busy_by_pid.into_iter().map(|(p, v)| (p, crate::trace_data::merge_intervals(v))).collect();
    let mut hidden = 0;
    for o in off.values().flatten() {
        let Some(busy) = busy_by_pid.get(&o.pid) else { continue };
        for s in crate::attribution::segments(o) {
            if !matches!(s.cause, Cause::Preempted | Cause::RunqueueWait) {
                continue;
            }
            let i = busy.partition_point(|b| b.1 <= s.start);
            for b in &busy[i..] {
                if b.0 >= s.end {
                    break;
                }
                hidden += crate::attribution::overlap(s.start, s.end, b.0, b.1);
            }
        }
    }
    hidden
}

/// Idle time by (cause, culprit) over every gap, most first, with the SQL behind each.
fn chains_of(gaps: &[IdleGap], window: TimeWindow, pid: Option<u32>, threshold: i64) -> Vec<IdleChain> {
    let mut by: BTreeMap<(IdleCause, Option<Culprit>), (i64, usize)> = BTreeMap::new();
    for g in gaps {
        for p in &g.parts {
            let e = by.entry((p.cause, p.culprit.clone())).or_default();
            e.0 += p.ns;
            e.1 += 1;
        }
    }
    let total: i64 = by.values().map(|v| v.0).sum();
    let mut chains: Vec<IdleChain> = by
        .into_iter()
        .map(|((cause, culprit), (ns, n))| IdleChain {
            id: String::new(),
            cause,
            summary: format!(
                "{} of GPU idle time in {n} gap{}: {}",
                fmt_ns(ns),
                if n == 1 { "" } else { "s" },
                part_words(cause, culprit.as_ref())
            ),
            sql: crate::device_idle_sql::chain_sql(window, pid, threshold, cause, culprit.as_ref()),
            culprit,
            idle_ns: ns,
            gaps: n,
            share: if total > 0 { ns as f64 / total as f64 } else { 0.0 },
        })
        .collect();
    chains.sort_by(|a, b| b.idle_ns.cmp(&a.idle_ns).then_with(|| a.cause.cmp(&b.cause)));
    for (i, c) in chains.iter_mut().enumerate() {
        c.id = format!("g{}", i + 1);
    }
    chains
}

/// What `explain` says a trace without a device timeline lacks.
pub const MISSING: &str = "the device's own timeline (when the GPU itself sat idle and why): trace with --gpu-timeline";

/// Number each listed gap by the step of its process whose work came late: the step the launch
/// that ended the gap was made in (else the step the gap ended in), from the first series of that
/// pid. A gap opens when the previous step's work ends; the step that owes it is the next one.
pub fn place_in_steps(view: &mut DeviceView, steps: &crate::StepReport) {
    for g in &mut view.gaps {
        let Some(series) = steps.series.iter().find(|s| s.pid == g.pid && !s.steps.is_empty()) else { continue };
        let at = if g.next.launch_start_ns > 0 { g.next.launch_start_ns } else { g.end_ns };
        let i = series.steps.partition_point(|s| s.start_ns <= at);
        if let Some(step) = i.checked_sub(1).map(|i| &series.steps[i]).filter(|s| at <= s.end_ns()) {
            g.step = Some(step.index);
            g.summary = g.summary.replacen(": ", &format!(" at step {}: ", step.index), 1);
        }
    }
}

/// The sentence explain opens with: the busy share and the largest cause of idle time.
pub fn verdict(view: &DeviceView) -> Option<String> {
    let busy: i64 = view.devices.iter().map(|d| d.busy_ns).sum();
    let idle: i64 = view.devices.iter().map(|d| d.idle_ns).sum();
    if busy + idle == 0 {
        return None;
    }
    let share = busy as f64 * 100.0 / (busy + idle) as f64;
    let mut s = format!("The GPU was busy {share:.1}% of the time it was in use; idle {}", fmt_ns(idle));
    match view.chains.first() {
        Some(top) => s.push_str(&format!(
            ", {} of it in gaps over {}; most of that: {}.",
            fmt_ns(view.gaps_idle_ns),
            fmt_ns(view.gap_threshold_ns),
            top.summary
        )),
        None => s.push_str(&format!(", none of it in gaps over {}.", fmt_ns(view.gap_threshold_ns))),
    }
    if let Some(g) = view.gaps.first() {
        s.push_str(&format!(" Longest gap: {}.", g.summary));
    }
    Some(s)
}

/// The time of `[a, b]` inside `intervals` (sorted, disjoint).
pub fn overlap_with(intervals: &[(i64, i64)], a: i64, b: i64) -> i64 {
    let i = intervals.partition_point(|x| x.1 <= a);
    intervals[i..].iter().take_while(|x| x.0 < b).map(|x| crate::attribution::overlap(a, b, x.0, x.1)).sum()
}

/// When the scope's devices sat idle in gaps at least [`DEFAULT_GAP_NS`] long (any device: a
/// thread feeds one, and which one is not known here), sorted and disjoint; `None` without a
/// device timeline. What the host chains are measured against: a host stall outside them cost the
/// GPU nothing the device view counts (the few microseconds between back-to-back kernels are the
/// device's own cadence, not a stall).
pub fn idle_intervals(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Option<Vec<(i64, i64)>>, AnalysisError> {
    let mut by_device: BTreeMap<(u32, i32), Vec<(i64, i64)>> = BTreeMap::new();
    store.scan_gpu_ops(&window, &mut |g: GpuOp| {
        if g.kind.occupies_device() && pid.is_none_or(|p| p == g.pid) {
            by_device.entry((g.pid, g.device)).or_default().push((g.start_ns, g.end_ns.max(g.start_ns)));
        }
    })?;
    if by_device.is_empty() {
        return Ok(None);
    }
    let mut idle = Vec::new();
    for busy in by_device.into_values() {
        let busy = crate::trace_data::merge_intervals(busy);
        idle.extend(busy.windows(2).map(|w| (w[0].1, w[1].0)).filter(|(a, b)| b - a >= DEFAULT_GAP_NS));
    }
    Ok(Some(crate::trace_data::merge_intervals(idle)))
}

/// How long after a process's last device record traced launches mean the device view stopped
/// (the flush period is 200 ms: records may trail their launches by that much).
const HOLE_AFTER_NS: i64 = 500_000_000;

/// A process whose device records stop while its traced kernel launches go on has a hole at the
/// end of its device view (another CUPTI client, such as torch.profiler or Nsight, took the
/// records, or the library turned off): said with the count of launches it missed.
fn holes_at_the_end(
    store: &dyn TraceStore,
    window: TimeWindow,
    by_device: &BTreeMap<(u32, i32), DeviceOps>,
) -> Result<Vec<String>, AnalysisError> {
    let mut last: BTreeMap<u32, i64> = BTreeMap::new();
    for ((pid, _), d) in by_device {
        let end = d.ops.iter().map(|o| o.launch_start.max(o.start)).max().unwrap_or(0);
        let e = last.entry(*pid).or_insert(end);
        *e = (*e).max(end);
    }
    let launches = crate::detectors::ops_with_role(causeway_model::codes::GpuRole::Launch);
    let mut notes = Vec::new();
    for (pid, end) in last {
        let from = end + HOLE_AFTER_NS;
        if window.to_ns.is_some_and(|to| to < from) {
            continue;
        }
        let filter = causeway_store::EventFilter {
            window: TimeWindow { from_ns: Some(from), to_ns: window.to_ns },
            pid: Some(pid),
            ops: Some(launches.clone()),
            ..Default::default()
        };
        // a runtime launch wraps a driver launch: count the driver's only where no runtime call is
        let (mut runtime, mut driver) = (0u64, 0u64);
        store.scan_slim(&filter, &mut |e| match e.op.source {
            4 => driver += 1,
            _ => runtime += 1,
        })?;
        let n = if runtime > 0 { runtime } else { driver };
        if n > 0 {
            notes.push(format!(
                "pid {pid}: {n} kernel launches were traced after the device view's last record at {} (+0.5 s): the device view has a hole from there (another CUPTI client such as torch.profiler or Nsight took the records, or the injection library stopped; see its notes)",
                fmt_clock(end)
            ));
        }
    }
    Ok(notes)
}

/// Say in each slow step range and each serving spike how long the GPU sat idle in it (gaps over
/// 1 ms) and, when the view lists one there, its longest gap and why.
pub fn say_in_ranges(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    view: &DeviceView,
    steps: &mut crate::StepReport,
    serving: &mut crate::ServingReport,
) -> Result<(), AnalysisError> {
    let Some(idle) = idle_intervals(store, window, pid)? else { return Ok(()) };
    let words = |a: i64, b: i64| -> (i64, String) {
        let ns = overlap_with(&idle, a, b);
        let longest = view.gaps.iter().filter(|g| g.start_ns < b && g.end_ns > a).max_by_key(|g| g.idle_ns);
        let text = match longest {
            _ if ns == 0 => " The GPU never sat idle over 1 ms in it.".to_string(),
            Some(g) => format!(" The GPU sat idle {} of it; the longest gap: {}.", fmt_ns(ns), g.summary),
            None => format!(" The GPU sat idle {} of it in gaps over 1 ms.", fmt_ns(ns)),
        };
        (ns, text)
    };
    for series in &mut steps.series {
        for r in &mut series.slow {
            let (ns, text) = words(r.start_ns, r.end_ns);
            r.gpu_idle_ns = Some(ns);
            r.summary.push_str(&text);
        }
    }
    for spike in serving.engines.iter_mut().flat_map(|e| e.spikes.iter_mut()) {
        let (ns, text) = words(spike.cause_from_ns, spike.to_ns);
        spike.gpu_idle_ns = Some(ns);
        spike.summary.push_str(&text);
    }
    Ok(())
}
