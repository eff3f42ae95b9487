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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::time::TimeWindow;
use causeway_model::{GpuOp, GpuOpKind};
use causeway_store::TraceStore;

use crate::attribution::{Cause, Culprit};
use crate::trace_data::{load_off_cpu, Names, Spans};
use crate::AnalysisError;

mod gaps;
pub(crate) mod holes;
mod scope;
pub(crate) mod sql;

use gaps::{busy_and_gaps, chains_of, explain_gap, hidden_host_time, host_window};
use scope::holes_at_the_end;
pub use scope::{idle_intervals, overlap_with, place_in_steps, say_in_ranges, verdict};

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
    /// Time between ops inside a hole of the device view (another CUPTI client held the records):
    /// neither busy nor idle.
    pub unseen_ns: i64,
    /// busy / (last - first - unseen).
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
    /// The longest gaps, explained (at most 20): for each cause the gap where it cost the most, then
    /// the longest.
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

/// The gaps listed one by one: for each cause, the gap where it cost the most idle time (a rare
/// cause, such as one 3 ms drain among many longer preemptions on a loaded host, is never crowded
/// out, even where a preemption in the same gap was its larger part), then the largest of the
/// rest, [`GAPS_LISTED`] in all, largest first.
fn listed_gaps(mut gaps: Vec<IdleGap>) -> Vec<IdleGap> {
    gaps.sort_by_key(|g| (std::cmp::Reverse(g.idle_ns), g.start_ns));
    // cause -> (its most idle time in one gap, that gap's index); the earliest largest gap wins ties
    let mut most: BTreeMap<IdleCause, (i64, usize)> = BTreeMap::new();
    for (i, g) in gaps.iter().enumerate() {
        for p in &g.parts {
            let best = most.entry(p.cause).or_insert((p.ns, i));
            if p.ns > best.0 {
                *best = (p.ns, i);
            }
        }
    }
    let mut chosen: BTreeSet<usize> = most.values().map(|&(_, i)| i).take(GAPS_LISTED).collect();
    for i in 0..gaps.len() {
        if chosen.len() >= GAPS_LISTED {
            break;
        }
        chosen.insert(i);
    }
    // in the sorted order: largest first
    gaps.into_iter().enumerate().filter(|(i, _)| chosen.contains(i)).map(|(_, g)| g).collect()
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
    let timeline_notes = store.gpu_timeline_notes()?;
    let holes = holes::holes_of(&timeline_notes);
    for ((p, d), dev) in by_device.iter_mut() {
        dev.ops.sort_by_key(|o| (o.start, o.end, o.stream, o.correlation));
        let unseen = holes::spans(holes.get(p));
        let (fig, gaps) = busy_and_gaps(*p, *d, &dev.ops, gap_threshold_ns, syncs.get(p).map(Vec::as_slice), &unseen);
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
    let gaps: Vec<IdleGap> = raw
        .iter()
        .map(|g| {
            let op = &by_device[&(g.pid, g.device)].ops[g.next];
            explain_gap(g, op, &names[op.name as usize], off.get(&op.launch_tid).map(Vec::as_slice), &names_of)
        })
        .collect();
    let chains = chains_of(&gaps, window, pid, gap_threshold_ns);
    let gaps_total = gaps.len();
    let gaps_idle_ns = gaps.iter().map(|g| g.idle_ns).sum();
    let gaps = listed_gaps(gaps);

    let syncs_all = store.gpu_clock_syncs()?;
    let clock_error_ns =
        syncs_all.iter().filter(|s| pid.is_none_or(|p| p == s.pid)).map(|s| s.error_ns).max().unwrap_or(0);
    let mut notes: Vec<String> = timeline_notes
        .into_iter()
        // the holes are said below, one line each
        .filter(|n| {
            pid.is_none_or(|p| p == n.pid)
                && !["started", "stopped", "stepped_aside"].contains(&n.kind.as_str())
                && !holes::is_hole_kind(&n.kind)
        })
        .map(|n| format!("{} (pid {}): {}", fmt_clock(n.ts_ns), n.pid, n.detail))
        .collect();
    notes.extend(holes::describe(store, window, pid, &holes)?);
    notes.extend(holes_at_the_end(store, window, &by_device, &holes)?);
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

/// What `explain` says a trace without a device timeline lacks.
pub const MISSING: &str = "the device's own timeline (when the GPU itself sat idle and why): trace with --gpu-timeline";

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(start_ns: i64, idle_ns: i64, cause: IdleCause) -> IdleGap {
        IdleGap {
            pid: 1,
            device: 0,
            start_ns,
            end_ns: start_ns + idle_ns,
            idle_ns,
            step: None,
            next: NextOp {
                kind: GpuOpKind::Kernel,
                name: String::new(),
                stream: 0,
                correlation: 0,
                launch_tid: 1,
                launch_thread: String::new(),
                launch_start_ns: 0,
                launch_event_id: 0,
            },
            parts: vec![IdlePart { cause, ns: idle_ns, culprit: None, start_ns, end_ns: start_ns + idle_ns }],
            summary: String::new(),
        }
    }

    #[test]
    fn a_rare_cause_is_listed_among_many_longer_gaps() {
        let mut gaps: Vec<IdleGap> = (0..30).map(|i| gap(i * 100, 20 + i, IdleCause::Preempted)).collect();
        gaps.push(gap(5_000, 3, IdleCause::Drain));
        let listed = listed_gaps(gaps);
        assert_eq!(listed.len(), GAPS_LISTED);
        assert!(listed.iter().any(|g| g.parts[0].cause == IdleCause::Drain), "the drain is listed");
        // the rest are the longest preemptions, and the list stays largest first
        assert_eq!(listed[0].idle_ns, 49);
        assert_eq!(
            listed.iter().filter(|g| g.parts[0].cause == IdleCause::Preempted).map(|g| g.idle_ns).min(),
            Some(31)
        );
        assert!(listed.windows(2).all(|w| w[0].idle_ns >= w[1].idle_ns));
    }

    #[test]
    fn a_cause_that_is_the_smaller_part_of_its_gap_is_listed() {
        let mut gaps: Vec<IdleGap> = (0..30).map(|i| gap(i * 100, 20 + i, IdleCause::Preempted)).collect();
        let mut mixed = gap(9_000, 8, IdleCause::Preempted);
        mixed.parts[0].ns = 5;
        mixed.parts.push(IdlePart { cause: IdleCause::Drain, ns: 3, culprit: None, start_ns: 9_000, end_ns: 9_003 });
        gaps.push(mixed);
        let listed = listed_gaps(gaps);
        assert_eq!(listed.len(), GAPS_LISTED);
        assert!(
            listed.iter().any(|g| g.parts.iter().any(|p| p.cause == IdleCause::Drain)),
            "the drain's gap is listed"
        );
    }

    #[test]
    fn fewer_gaps_than_the_list_holds_are_all_listed() {
        let gaps = vec![gap(0, 5, IdleCause::Sleep), gap(10, 7, IdleCause::Sleep), gap(20, 1, IdleCause::Drain)];
        let listed = listed_gaps(gaps);
        assert_eq!(listed.iter().map(|g| g.idle_ns).collect::<Vec<_>>(), vec![7, 5, 1]);
    }
}
