//! Finding a device's idle gaps and splitting each by cause: the busy union of its ops, the drain a
//! synchronize asked for, the launching thread's story in the host window, the chains by cause.

use std::collections::{BTreeMap, HashMap};

use causeway_model::time::{fmt_ns, TimeWindow};

use super::*;
use crate::attribution::{attribute_interval, Cause, Culprit, OffCpu};
use crate::trace_data::Names;

/// Busy time, streams and the long gaps of one device's ops (sorted by start, end, stream,
/// correlation: the order the evidence SQL numbers them in). Time between ops that meets one of
/// the process's `holes` is unseen: neither a gap nor idle.
pub(super) fn busy_and_gaps(
    pid: u32,
    device: i32,
    ops: &[Op],
    threshold: i64,
    syncs: Option<&[(i64, i64)]>,
    holes: &[(i64, i64)],
) -> (DeviceFigures, Vec<RawGap>) {
    let mut busy = 0i64;
    let mut short = 0i64;
    let mut unseen = 0i64;
    let mut gaps = Vec::new();
    let mut until: Option<i64> = None;
    let mut streams: BTreeMap<u32, (u64, i64, i64)> = BTreeMap::new(); // ops, busy, until
    for (i, o) in ops.iter().enumerate() {
        match until {
            Some(u) if o.start > u => {
                let idle = o.start - u;
                if super::holes::meets(holes, u, o.start) {
                    unseen += idle;
                } else if idle >= threshold {
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
        idle_ns: span - busy - unseen,
        unseen_ns: unseen,
        busy_share: if span > unseen { busy as f64 / (span - unseen) as f64 } else { 1.0 },
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
pub(super) fn drain_end(syncs: Option<&[(i64, i64)]>, idle_from: i64, idle_to: i64) -> Option<i64> {
    let syncs = syncs?;
    let hi = syncs.partition_point(|s| s.0 < idle_from);
    syncs[..hi].iter().filter(|s| s.1 >= idle_from - DRAIN_TOLERANCE_NS).map(|s| s.1.clamp(idle_from, idle_to)).max()
}

/// The part of a gap the launching thread's story explains: from the device going idle (or the
/// drain's end) to the launching call's start; `None` when the work was launched before the gap or
/// by an unknown thread.
pub(super) fn host_window(g: &RawGap, op: &Op) -> Option<(i64, i64)> {
    if op.launch_tid == 0 || op.launch_start <= 0 || op.launch_start <= g.start {
        return None;
    }
    let a = g.drain_end.unwrap_or(g.start).clamp(g.start, g.end);
    let b = op.launch_start.clamp(a, g.end);
    (b > a).then_some((a, b))
}

/// Split one gap by cause.
pub(super) fn explain_gap(g: &RawGap, op: &Op, name: &str, offs: Option<&[OffCpu]>, names: &Names) -> IdleGap {
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
pub(super) fn merge_parts(parts: Vec<IdlePart>) -> Vec<IdlePart> {
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

pub(super) fn gap_summary(g: &RawGap, parts: &[IdlePart], thread: &str) -> String {
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
pub(super) fn hidden_host_time(by_device: &BTreeMap<(u32, i32), DeviceOps>, off: &HashMap<u32, Vec<OffCpu>>) -> i64 {
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
pub(super) fn chains_of(gaps: &[IdleGap], window: TimeWindow, pid: Option<u32>, threshold: i64) -> Vec<IdleChain> {
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
            sql: super::sql::chain_sql(window, pid, threshold, cause, culprit.as_ref()),
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
