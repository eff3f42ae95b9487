//! What each thread of a process did, in order, with the off-CPU intervals between: the view an agent
//! needs to check a chain. Centered on an event (`--around ID`, the process of that event) or over a
//! window; calls nested in another call of the thread are marked with depth 1.

use std::collections::{BTreeMap, HashMap};

use causeway_model::codes::{op, Source};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::PrevState;
use causeway_store::{EventFilter, EventId, SlimEvent, StoredEvent, TraceStore};

use crate::attribution::{self, is_gpu_call_source, Calls};
use crate::stacks::clean;
use crate::AnalysisError;

/// Default time shown on each side of `--around` (ns).
pub const DEFAULT_AROUND_NS: i64 = 50_000_000;
/// Off-CPU intervals that started this long before the window's end are still looked for.
const OFF_CPU_LOOKAHEAD_NS: i64 = 60_000_000_000;

#[derive(Debug, Clone)]
pub struct TimelineRequest {
    /// Center on this event (and its process).
    pub around: Option<EventId>,
    /// Time shown on each side of `around`.
    pub around_ns: i64,
    /// Or this window.
    pub window: TimeWindow,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    /// Entries per thread.
    pub limit: usize,
}

impl Default for TimelineRequest {
    fn default() -> Self {
        TimelineRequest {
            around: None,
            around_ns: DEFAULT_AROUND_NS,
            window: TimeWindow::ALL,
            pid: None,
            tid: None,
            limit: 500,
        }
    }
}

/// One thing a thread did.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TimelineEntry {
    pub ts_ns: i64,
    pub end_ns: i64,
    pub dur_ns: i64,
    /// `call`, `off_cpu`, `wakeup`, `socket` (a socket call), `tcp` (a retransmit or state change),
    /// `block_io`, `page_alloc`, `process`, `other`.
    pub kind: String,
    pub op: String,
    pub id: EventId,
    /// 1 for a call inside another GPU call of the thread.
    pub depth: u8,
    pub detail: String,
    /// Where a call was made (traces recorded with stacks), innermost first: the user's Python
    /// line and its callers as `file:line in function`, else the native frames outside the CUDA
    /// libraries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
    /// When `stack` is borrowed (a call of a thread without Python frames of its own), from which
    /// thread and how: `borrowed from thread 812 (blocked in backward() at /app/train.py:44 in
    /// <module>)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_borrowed: Option<String>,
}

/// Frames of a call's stack shown in a timeline entry.
const ENTRY_STACK_FRAMES: usize = 3;

#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ThreadTimeline {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub entries: Vec<TimelineEntry>,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TimelineReport {
    /// The window shown.
    pub from_ns: i64,
    pub to_ns: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub around: Option<EventId>,
    pub threads: Vec<ThreadTimeline>,
    /// The device's own timeline in the window (traces recorded with `--gpu-timeline`): one lane
    /// per (process, device, stream), each op with the call that launched it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceLane>,
    pub notes: Vec<String>,
}

/// One stream of one device: what it ran, in order.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceLane {
    pub pid: u32,
    pub device: i32,
    pub stream: u32,
    pub ops: Vec<DeviceEntry>,
    pub truncated: bool,
}

/// One op of a device lane.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceEntry {
    pub start_ns: i64,
    pub end_ns: i64,
    pub kind: causeway_model::GpuOpKind,
    /// A kernel's name (demangled), a copy's direction, a synchronization's type.
    pub name: String,
    pub bytes: i64,
    /// The thread that launched it and the `events.id` of its launching call (0: not traced).
    pub launch_tid: u32,
    pub launch_event_id: i64,
}

/// The device lanes of `[from, to]` (of `pid`), at most `limit` ops each.
fn device_lanes(
    store: &dyn TraceStore,
    from: i64,
    to: i64,
    pid: Option<u32>,
    limit: usize,
) -> Result<Vec<DeviceLane>, AnalysisError> {
    let mut lanes: BTreeMap<(u32, i32, u32), DeviceLane> = BTreeMap::new();
    let window = TimeWindow { from_ns: Some(from), to_ns: Some(to) };
    store.scan_gpu_ops(&window, &mut |g| {
        if pid.is_some_and(|p| p != g.pid) {
            return;
        }
        let lane = lanes.entry((g.pid, g.device, g.stream)).or_insert_with(|| DeviceLane {
            pid: g.pid,
            device: g.device,
            stream: g.stream,
            ops: Vec::new(),
            truncated: false,
        });
        if lane.ops.len() >= limit {
            lane.truncated = true;
            return;
        }
        let name = match g.kind {
            causeway_model::GpuOpKind::Kernel => causeway_model::demangle::demangle(&g.name),
            _ => g.name.clone(),
        };
        lane.ops.push(DeviceEntry {
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            kind: g.kind,
            name,
            bytes: g.bytes,
            launch_tid: g.launch_tid,
            launch_event_id: g.launch_event_id,
        });
    })?;
    Ok(lanes.into_values().collect())
}

fn off_cpu_detail(e: &causeway_model::Event) -> String {
    let Some(s) = &e.sched else {
        return format!("off-CPU {} (this DB does not record why, nor who took the CPU)", fmt_ns(e.dur_ns));
    };
    let cpu = if e.cpu >= 0 { format!(" on CPU {}", e.cpu) } else { String::new() };
    match s.prev_state {
        PrevState::Preempted => format!(
            "off-CPU {}: preempted, {} (pid {}, tid {}) took the CPU{cpu}",
            fmt_ns(e.dur_ns),
            clean(&s.next_comm),
            s.next_pid,
            s.next_tid
        ),
        state => {
            let (start, end) = e.off_cpu_interval();
            let w = attribution::wake_point(start, end, s.wake_ts_ns);
            let waker = if s.waker_pid != 0 || s.waker_tid != 0 {
                format!(", woken by pid {} tid {}", s.waker_pid, s.waker_tid)
            } else {
                String::new()
            };
            format!(
                "off-CPU {}: {} {}{waker}, then run-queue wait {}{cpu}; next task {} ({})",
                fmt_ns(e.dur_ns),
                state.as_str(),
                fmt_ns(w - start),
                fmt_ns(end - w),
                clean(&s.next_comm),
                s.next_pid
            )
        }
    }
}

fn entry_of(s: &StoredEvent, peers: &HashMap<i64, String>) -> TimelineEntry {
    let e = &s.event;
    let code = e.code();
    let (kind, ts, end, detail) = if code == op::SCHED_SWITCH {
        let (a, b) = e.off_cpu_interval();
        ("off_cpu", a, b, off_cpu_detail(e))
    } else if code == op::SCHED_WAKEUP {
        ("wakeup", e.ts_ns, e.ts_ns, format!("woke pid {} tid {}", e.arg1, e.arg2))
    } else if is_gpu_call_source(e.source) {
        let ret = if e.ret_code != 0 { format!(", returned {}", e.ret_code) } else { String::new() };
        ("call", e.ts_ns, e.end_ns(), format!("{} {}{ret}", e.op_name(), fmt_ns(e.dur_ns)))
    } else if e.source == Source::Net.code() && e.dur_ns > 0 {
        let peer = peers.get(&e.arg2).map_or_else(|| "an unknown peer".to_string(), |p| p.clone());
        let ret = if e.ret_code < 0 { format!(", error {}", e.ret_code) } else { format!(", {} bytes", e.arg0) };
        (
            "socket",
            e.ts_ns,
            e.end_ns(),
            format!("{} with {peer} (fd {}){ret}, {}", e.op_name(), e.arg1, fmt_ns(e.dur_ns)),
        )
    } else if e.source == Source::Tcp.code() {
        let peer = peers.get(&e.arg2).map_or_else(|| "an unknown peer".to_string(), |p| p.clone());
        let what = if code == op::TCP_STATE {
            format!("state {} -> {}", e.arg0, e.arg1)
        } else {
            format!("socket state {}", e.arg0)
        };
        ("tcp", e.ts_ns, e.ts_ns, format!("{} with {peer} ({what})", e.op_name()))
    } else if e.source == Source::Io.code() {
        ("block_io", e.ts_ns, e.end_ns(), format!("{} {} KiB, {}", e.op_name(), e.arg0 >> 10, fmt_ns(e.dur_ns)))
    } else if code == op::MM_PAGE_ALLOC || code == op::MM_PAGE_ALLOC_SUMMARY {
        ("page_alloc", e.ts_ns, e.ts_ns, format!("{} {} KiB", e.op_name(), e.arg0 >> 10))
    } else if matches!(code, op::PROCESS_EXEC | op::PROCESS_EXIT | op::PROCESS_FORK | op::OOM_KILL) {
        ("process", e.ts_ns, e.end_ns(), format!("{} arg0={} arg1={}", e.op_name(), e.arg0, e.arg1))
    } else {
        ("other", e.ts_ns, e.end_ns(), format!("{} {}", e.op_name(), fmt_ns(e.dur_ns)))
    };
    TimelineEntry {
        ts_ns: ts,
        end_ns: end,
        dur_ns: end - ts,
        kind: kind.into(),
        op: e.op_name().into_owned(),
        id: s.id.clone(),
        depth: 0,
        detail,
        stack: Vec::new(),
        stack_borrowed: None,
    }
}

/// Fill the `stack` of the entries shown whose call was recorded with a stack: its own, or the one
/// it borrowed.
fn add_call_sites(
    store: &dyn TraceStore,
    threads: &mut [ThreadTimeline],
    stack_of: &BTreeMap<&EventId, i64>,
) -> Result<(), AnalysisError> {
    let mut hashes: Vec<i64> =
        threads.iter().flat_map(|t| &t.entries).filter_map(|e| stack_of.get(&e.id).copied()).collect();
    if hashes.is_empty() {
        return Ok(());
    }
    let calls: Vec<(usize, usize, causeway_model::Event)> = threads
        .iter()
        .enumerate()
        .flat_map(|(i, t)| t.entries.iter().enumerate().map(move |(j, e)| (i, j, t, e)))
        .filter_map(|(i, j, t, e)| {
            let stack_hash = *stack_of.get(&e.id)?;
            let ev = causeway_model::Event {
                ts_ns: e.ts_ns,
                dur_ns: e.dur_ns,
                pid: t.pid,
                tid: t.tid,
                stack_hash,
                ..Default::default()
            };
            Some((i, j, ev))
        })
        .collect();
    let events: Vec<&causeway_model::Event> = calls.iter().map(|c| &c.2).collect();
    for (k, lend) in crate::borrowed::Lends::default().of(store, &events)? {
        if let crate::borrowed::CallLend::Borrowed(_, b) = lend {
            let e = &mut threads[calls[k].0].entries[calls[k].1];
            e.stack = crate::stacks::call_site(&b.frames, ENTRY_STACK_FRAMES);
            e.stack_borrowed = Some(b.words);
        }
    }
    hashes.sort_unstable();
    hashes.dedup();
    let records = store.stacks(&hashes)?;
    let sites: BTreeMap<i64, Vec<String>> = records
        .iter()
        .map(|(h, r)| (*h, crate::stacks::call_site(&crate::stacks::parse_frames(&r.frames), ENTRY_STACK_FRAMES)))
        .collect();
    for e in threads.iter_mut().flat_map(|t| &mut t.entries).filter(|e| e.stack_borrowed.is_none()) {
        if let Some(site) = stack_of.get(&e.id).and_then(|h| sites.get(h)) {
            e.stack = site.clone();
        }
    }
    Ok(())
}

/// The timeline of a process around an event or over a window.
pub fn timeline(store: &dyn TraceStore, req: &TimelineRequest) -> Result<TimelineReport, AnalysisError> {
    let info = store.info();
    let (from, to, pid) = match &req.around {
        Some(id) => {
            let ev = store.events_by_id(std::slice::from_ref(id))?;
            let e = ev.first().ok_or_else(|| AnalysisError::BadArgument(format!("no event with id {id}")))?;
            let (a, b) = if e.event.code() == op::SCHED_SWITCH {
                e.event.off_cpu_interval()
            } else {
                (e.event.ts_ns, e.event.end_ns())
            };
            (a - req.around_ns, b + req.around_ns, Some(req.pid.unwrap_or(e.event.pid)))
        }
        None => {
            if req.window.from_ns.is_none() || req.window.to_ns.is_none() {
                return Err(AnalysisError::BadArgument("give --around EVENT_ID, or both --from and --to".into()));
            }
            (req.window.from_ns.unwrap_or(info.first_ns), req.window.to_ns.unwrap_or(info.last_ns), req.pid)
        }
    };
    let tids = req.tid.map(|t| vec![t]);
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(from), to_ns: Some(to) },
        pid,
        tids: tids.clone(),
        ..Default::default()
    };
    let mut events = store.events(&filter)?;
    let peers: HashMap<i64, String> = store.net_peers()?.into_iter().map(|p| (p.peer, p.label())).collect();
    // Off-CPU intervals that began inside the window but ended after it.
    let later = EventFilter {
        window: TimeWindow { from_ns: Some(to + 1), to_ns: Some(to + OFF_CPU_LOOKAHEAD_NS) },
        pid,
        tids,
        ops: Some(vec![op::SCHED_SWITCH]),
        ..Default::default()
    };
    let mut seen_tid = std::collections::HashSet::new();
    for s in store.events(&later)? {
        if seen_tid.insert(s.event.tid) && s.event.off_cpu_interval().0 <= to {
            events.push(s);
        }
    }
    let names = store.process_names()?;
    let stack_of: BTreeMap<&EventId, i64> =
        events.iter().filter(|s| s.event.stack_hash != 0).map(|s| (&s.id, s.event.stack_hash)).collect();
    let mut threads: BTreeMap<u32, ThreadTimeline> = BTreeMap::new();
    let mut calls_of: BTreeMap<u32, Vec<(usize, SlimEvent)>> = BTreeMap::new();
    for s in &events {
        let e = &s.event;
        let t = threads.entry(e.tid).or_insert_with(|| ThreadTimeline {
            pid: e.pid,
            tid: e.tid,
            comm: String::new(),
            entries: Vec::new(),
            truncated: false,
        });
        if t.comm.is_empty() && !e.comm.is_empty() {
            t.comm = clean(&e.comm);
        }
        if is_gpu_call_source(e.source) {
            let call = SlimEvent::of(s);
            calls_of.entry(e.tid).or_default().push((t.entries.len(), call));
        }
        t.entries.push(entry_of(s, &peers));
    }
    for (tid, calls) in calls_of {
        let only = Calls::of(calls.iter().map(|c| c.1.clone()));
        let nested = attribution::nested_flags(&only, &attribution::ThreadOrder::of(&only));
        let t = threads.get_mut(&tid).expect("thread exists");
        for ((i, _), n) in calls.iter().zip(nested.iter().copied()) {
            t.entries[*i].depth = u8::from(n);
        }
    }
    let mut out: Vec<ThreadTimeline> = threads.into_values().collect();
    for t in &mut out {
        if t.comm.is_empty() {
            t.comm = names.get(&t.tid).or_else(|| names.get(&t.pid)).map(|s| clean(s)).unwrap_or_default();
        }
        t.entries.sort_by(|a, b| (a.ts_ns, a.depth, &a.id).cmp(&(b.ts_ns, b.depth, &b.id)));
        if t.entries.len() > req.limit {
            t.entries.truncate(req.limit);
            t.truncated = true;
        }
    }
    add_call_sites(store, &mut out, &stack_of)?;
    // Threads with GPU calls first, then by tid.
    out.sort_by_key(|t| (!t.entries.iter().any(|e| e.kind == "call"), t.tid));
    let mut notes = Vec::new();
    if !info.has_column("prev_state") {
        notes.push(
            "this DB does not record why a thread left the CPU nor who took it: off-CPU intervals carry no culprit"
                .into(),
        );
    }
    if out.iter().any(|t| t.truncated) {
        notes.push(format!("threads are cut at {} entries: narrow the window or pass --tid", req.limit));
    }
    let devices = device_lanes(store, from, to, pid, req.limit)?;
    if devices.iter().any(|d| d.truncated) {
        notes.push(format!("device lanes are cut at {} ops: narrow the window", req.limit));
    }
    Ok(TimelineReport { from_ns: from, to_ns: to, pid, around: req.around.clone(), threads: out, devices, notes })
}
