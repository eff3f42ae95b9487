//! Loading what attribution needs from a [`TraceStore`], in bounded memory: the GPU calls of the
//! window, then only the scheduler rows, page allocations and block requests that touch a slow call
//! or a long gap. GPU calls and page allocations are read as
//! [`SlimEvent`](causeway_store::SlimEvent)s (integers only) and the calls kept as the analysis's
//! 48-byte [`Call`](crate::calls::Call)s; other events are streamed from the engine, so a
//! ten-million-event trace never sits in memory as full events.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{self, op, OpCode};
use causeway_model::time::TimeWindow;
use causeway_store::{EventFilter, EventId, QueryLimits, SlimEvent, StoredEvent, TraceStore};

use crate::attribution::{gpu_call_sources, is_gpu_call_source, Calls, Coverage, OffCpu};
use crate::calls::CallsBuilder;
use crate::few_keys::FewKeys;
use crate::AnalysisError;

/// Calls `f` for every event matching `filter`, in time order, streamed from the store.
pub fn for_each_event(
    store: &dyn TraceStore,
    filter: &EventFilter,
    f: &mut dyn FnMut(StoredEvent),
) -> Result<(), AnalysisError> {
    store.scan_events(filter, f)?;
    Ok(())
}

/// Names of processes and threads, from `process_names` and the events' `comm`.
#[derive(Debug, Default, Clone)]
pub struct Names {
    pub processes: BTreeMap<u32, String>,
    pub threads: HashMap<u32, String>,
    /// pids of the Causeway processes that recorded the trace's sessions.
    pub tracers: BTreeSet<u32>,
    /// Where processes ran, when a container or pod (`process_cgroups`): pid -> its words.
    pub places: HashMap<u32, String>,
    /// Socket peers (`net_peers`): key -> `10.0.0.2:29500`.
    pub peers: HashMap<i64, String>,
}

impl Names {
    /// Process names and tracer pids of a trace; thread names are added as they are needed.
    pub fn of_store(store: &dyn TraceStore) -> Result<Names, AnalysisError> {
        Ok(Names {
            processes: store.process_names()?,
            threads: HashMap::new(),
            tracers: store.sessions()?.iter().map(|s| s.tracer_pid).filter(|&p| p != 0).collect(),
            places: store
                .process_cgroups()?
                .into_iter()
                .filter(|c| c.is_container())
                .map(|c| (c.pid, c.words()))
                .collect(),
            peers: store.net_peers()?.into_iter().map(|p| (p.peer, p.label())).collect(),
        })
    }

    /// How a network peer reads (`peer 0x...` when the trace does not name it).
    pub fn peer(&self, key: i64) -> String {
        self.peers.get(&key).cloned().unwrap_or_else(|| format!("peer {key:#x}"))
    }

    /// The container or pod a process ran in (empty: none known).
    pub fn place_of(&self, pid: u32) -> String {
        self.places.get(&pid).cloned().unwrap_or_default()
    }

    /// `pid 4242 (train)`, or `pid 4242` for a process without a recorded name.
    pub fn process(&self, pid: u32) -> String {
        match self.processes.get(&pid) {
            Some(n) => format!("pid {pid} ({n})"),
            None => format!("pid {pid}"),
        }
    }

    /// The best name for a task: its thread comm, else its process name.
    pub fn of(&self, pid: u32, tid: u32) -> String {
        self.threads
            .get(&tid)
            .filter(|s| !s.is_empty())
            .or_else(|| self.processes.get(&pid))
            .or_else(|| self.processes.get(&tid))
            .cloned()
            .unwrap_or_default()
    }
}

impl Names {
    /// Name the threads in `tids` that have no name yet from what the trace records (`events.comm`
    /// of the thread's latest event: threads are often renamed right after they start).
    pub fn resolve_threads(
        &mut self,
        store: &dyn TraceStore,
        tids: impl IntoIterator<Item = u32>,
    ) -> Result<(), AnalysisError> {
        let missing: BTreeSet<u32> = tids.into_iter().filter(|t| *t != 0 && !self.threads.contains_key(t)).collect();
        let missing: Vec<u32> = missing.into_iter().collect();
        for chunk in missing.chunks(500) {
            let filter = EventFilter { tids: Some(chunk.to_vec()), ..Default::default() };
            self.threads.extend(store.thread_comms(&filter, true)?);
        }
        Ok(())
    }
}

/// The GPU calls of the scope, sorted by (ts, id), and the thread names seen on them.
pub fn load_calls(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    names: &mut Names,
    mut labels: Option<&mut Vec<SlimEvent>>,
) -> Result<Calls, AnalysisError> {
    let step = causeway_model::codes::Source::Step.code();
    let mut sources = gpu_call_sources().to_vec();
    if labels.is_some() {
        sources.push(step); // the workload's step labels come along in the same scan
    }
    let filter = EventFilter { window, pid, sources: Some(sources), ..Default::default() };
    // Room for every event up front (address space only; pages are touched as calls arrive): growing
    // a vector of millions of calls by doubling costs more than reading them.
    let mut calls = CallsBuilder::with_capacity(store.info().events as usize);
    store.scan_slim(&filter, &mut |r| {
        if is_gpu_call_source(r.op.source) {
            calls.push(r);
        } else if let (Some(l), true) = (labels.as_deref_mut(), r.op.source == step) {
            l.push(r);
        }
    })?;
    let mut calls = calls.finish();
    if calls.is_mapped() {
        tracing::debug!(
            calls = calls.len(),
            "the scope's calls are in a mapped temporary file (over {} MiB)",
            crate::spill_vec::calls_memory_budget() >> 20
        );
    }
    let sorting = std::time::Instant::now();
    calls.sort_by_time_and_id();
    tracing::debug!(calls = calls.len(), ms = sorting.elapsed().as_secs_f64() * 1e3, "load calls: sorted by time");
    let filter = EventFilter { sources: Some(gpu_call_sources().to_vec()), ..filter };
    name_threads_from_first_calls(store, &filter, &calls, names)?;
    Ok(calls)
}

/// Names the threads of `calls` (in (ts, id) order) that have none yet: each thread's first
/// non-empty `comm` in scope. That is the comm of its first call unless that one is empty, so the
/// first calls are read by id (a handful of rows) and only threads whose first call has no comm
/// are looked up over the whole scope.
fn name_threads_from_first_calls(
    store: &dyn TraceStore,
    scope: &EventFilter,
    calls: &Calls,
    names: &mut Names,
) -> Result<(), AnalysisError> {
    let mut first_call: FewKeys<u32, usize> = FewKeys::default();
    for (i, c) in calls.iter().enumerate() {
        first_call.entry(c.tid, || i);
    }
    let mut first = first_call.into_sorted();
    first.retain(|(tid, _)| !names.threads.contains_key(tid));
    let ids: Vec<EventId> = first.iter().map(|&(_, i)| calls.event_id(&calls[i])).collect();
    let mut comm_of: HashMap<EventId, String> = HashMap::new();
    for chunk in ids.chunks(500) {
        comm_of.extend(store.events_by_id(chunk)?.into_iter().map(|s| (s.id, s.event.comm)));
    }
    let mut unnamed: Vec<u32> = Vec::new();
    for (&(tid, _), id) in first.iter().zip(&ids) {
        match comm_of.remove(id) {
            Some(comm) if !comm.is_empty() => {
                names.threads.insert(tid, comm);
            }
            _ => unnamed.push(tid),
        }
    }
    for chunk in unnamed.chunks(500) {
        let of_chunk = EventFilter { tids: Some(chunk.to_vec()), ..scope.clone() };
        for (tid, comm) in store.thread_comms(&of_chunk, false)? {
            names.threads.entry(tid).or_insert(comm);
        }
    }
    Ok(())
}

/// Sorted, merged intervals per thread: where attribution needs scheduler data.
#[derive(Debug, Default, Clone)]
pub struct Spans {
    pub by_tid: BTreeMap<u32, Vec<(i64, i64)>>,
}

impl Spans {
    pub fn add(&mut self, tid: u32, a: i64, b: i64) {
        self.by_tid.entry(tid).or_default().push((a, b));
    }

    pub fn finish(&mut self) {
        for v in self.by_tid.values_mut() {
            *v = merge_intervals(std::mem::take(v));
        }
    }

    /// Does `[a, b]` overlap (with positive length) a span of `tid`?
    pub fn touches(&self, tid: u32, a: i64, b: i64) -> bool {
        let Some(v) = self.by_tid.get(&tid) else { return false };
        let i = v.partition_point(|s| s.1 <= a);
        i < v.len() && v[i].0 < b
    }

    pub fn earliest(&self) -> Option<i64> {
        self.by_tid.values().filter_map(|v| v.first().map(|s| s.0)).min()
    }

    /// The latest end of a span.
    pub fn latest(&self) -> Option<i64> {
        self.by_tid.values().filter_map(|v| v.last().map(|s| s.1)).max()
    }
}

/// `[a, b]` intervals as a sorted list of disjoint ones (touching intervals merge).
pub fn merge_intervals(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Off-CPU intervals per thread that touch `spans`, sorted by start; with `socket_calls` (the
/// trace names socket peers: `Names::peers`), those inside a socket call tagged with its peer.
///
/// The read follows the spans, not the trace: an interval's row is written when it ends, so the
/// rows up to the spans' latest end are read, and past it only each thread's first row (a thread's
/// off-CPU intervals never overlap, so of those ending past that instant only the first can have
/// begun before it), found by [`switches_past`]'s widening look-ahead.
pub fn load_off_cpu(
    store: &dyn TraceStore,
    spans: &Spans,
    socket_calls: bool,
) -> Result<HashMap<u32, Vec<OffCpu>>, AnalysisError> {
    let mut out: HashMap<u32, Vec<OffCpu>> = HashMap::new();
    let (Some(from), Some(latest)) = (spans.earliest(), spans.latest()) else { return Ok(out) };
    let tids: Vec<u32> = spans.by_tid.keys().copied().collect();
    let keep = |tid: u32, ts: i64, dur: i64| {
        let (start, end) = causeway_model::off_cpu_interval(ts, dur);
        spans.touches(tid, start, end)
    };
    let mut add = |s: causeway_store::SwitchRow| {
        let (start, end) = s.off_cpu_interval();
        debug_assert!(spans.touches(s.tid, start, end));
        out.entry(s.tid).or_default().push(OffCpu {
            id: s.id,
            pid: s.pid,
            tid: s.tid,
            start,
            end,
            cpu: s.cpu,
            sched: s.sched,
            socket_peer: None,
        });
    };
    for chunk in tids.chunks(500) {
        let filter = EventFilter {
            window: TimeWindow { from_ns: Some(from), to_ns: Some(latest) },
            tids: Some(chunk.to_vec()),
            ops: Some(vec![op::SCHED_SWITCH]),
            ..Default::default()
        };
        store.scan_switches_kept(&filter, &keep, &mut add)?;
        switches_past(store, latest, chunk, &keep, &mut add)?;
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| (a.start, &a.id).cmp(&(b.start, &b.id)));
    }
    if socket_calls {
        mark_socket_waits(store, spans, &mut out)?;
    }
    Ok(out)
}

/// The first look-ahead past the spans' latest end (ns); each next one is 4 times as long.
const FIRST_LOOK_AHEAD_NS: i64 = 100_000_000;

/// The `sched_switch` rows of `tids` after `latest` that `keep` keeps, read until each thread has
/// shown one row past `latest` (its later rows begin after that row ends: none can touch a span)
/// or the trace ends: look-aheads of growing length, each over the threads still unseen.
fn switches_past(
    store: &dyn TraceStore,
    latest: i64,
    tids: &[u32],
    keep: &dyn Fn(u32, i64, i64) -> bool,
    add: &mut dyn FnMut(causeway_store::SwitchRow),
) -> Result<(), AnalysisError> {
    let trace_end = store.info().last_ns;
    let mut unseen: Vec<u32> = tids.to_vec();
    let (mut lo, mut length) = (latest.saturating_add(1), FIRST_LOOK_AHEAD_NS);
    while !unseen.is_empty() {
        let hi = lo.saturating_add(length);
        // the last look-ahead is open-ended: rows past the recorded end (a trace read while it
        // runs) are read too
        let last = hi >= trace_end;
        let filter = EventFilter {
            window: TimeWindow { from_ns: Some(lo), to_ns: (!last).then_some(hi) },
            tids: Some(unseen.clone()),
            ops: Some(vec![op::SCHED_SWITCH]),
            ..Default::default()
        };
        let seen = std::cell::RefCell::new(BTreeSet::new());
        let keep_and_see = |tid: u32, ts: i64, dur: i64| {
            seen.borrow_mut().insert(tid);
            keep(tid, ts, dur)
        };
        store.scan_switches_kept(&filter, &keep_and_see, add)?;
        let seen = seen.into_inner();
        unseen.retain(|t| !seen.contains(t));
        if last {
            break;
        }
        (lo, length) = (hi.saturating_add(1), length.saturating_mul(4));
    }
    Ok(())
}

/// Tag each off-CPU interval that lies inside a socket call of its thread with the call's peer
/// ([`OffCpu::socket_peer`]). The socket calls read are those of the threads in `spans` that
/// overlap their spans. A trace that names no peer (`net_peers` empty or absent: Ingero DBs,
/// traces without network probes) recorded no socket call: its callers do not ask.
fn mark_socket_waits(
    store: &dyn TraceStore,
    spans: &Spans,
    off: &mut HashMap<u32, Vec<OffCpu>>,
) -> Result<(), AnalysisError> {
    if off.is_empty() {
        return Ok(());
    }
    let to = spans.by_tid.values().filter_map(|v| v.last().map(|s| s.1)).max();
    let tids: Vec<u32> = off.keys().copied().collect();
    let mut calls: HashMap<u32, Vec<(i64, i64, i64)>> = HashMap::new();
    for chunk in tids.chunks(500) {
        // a socket call that began before the first span may still hold an interval in it
        let filter = EventFilter {
            window: TimeWindow { from_ns: None, to_ns: to },
            tids: Some(chunk.to_vec()),
            ops: Some(codes::ops_of_kind(codes::OpKind::SocketCall)),
            ..Default::default()
        };
        let keep = |tid: u32, ts: i64, dur: i64| spans.touches(tid, ts, ts.saturating_add(dur));
        store.scan_events_kept(&filter, &keep, &mut |s| {
            let e = &s.event;
            calls.entry(e.tid).or_default().push((e.ts_ns, e.end_ns(), e.arg2));
        })?;
    }
    for (tid, mut socket) in calls {
        socket.sort_unstable();
        let Some(intervals) = off.get_mut(&tid) else { continue };
        for o in intervals.iter_mut() {
            // the last call starting at or before the interval's start
            let i = socket.partition_point(|c| c.0 <= o.start);
            if let Some(&(_, end, peer)) = i.checked_sub(1).map(|i| &socket[i]) {
                if end >= o.end {
                    o.socket_peer = Some(peer);
                }
            }
        }
    }
    Ok(())
}

/// Whether the trace recorded any call stack (a `stack_traces` row).
pub fn holds_stacks(store: &dyn TraceStore) -> Result<bool, AnalysisError> {
    if !store.info().has_table("stack_traces") {
        return Ok(false);
    }
    let r = store.query("SELECT 1 FROM stack_traces LIMIT 1", &QueryLimits::with_rows(1))?;
    Ok(!r.rows.is_empty())
}

/// Whether any stack of the trace holds a Python frame (`{"pf": ...}`): else no call borrows one.
pub fn holds_python_stacks(store: &dyn TraceStore) -> Result<bool, AnalysisError> {
    if !holds_stacks(store)? {
        return Ok(false);
    }
    let r =
        store.query(r#"SELECT 1 FROM stack_traces WHERE frames LIKE '%"pf"%' LIMIT 1"#, &QueryLimits::with_rows(1))?;
    Ok(!r.rows.is_empty())
}

/// Each thread's recorded scheduler span over the whole DB, `MIN(timestamp - duration)` to
/// `MAX(timestamp)` (used where the DB did not record the scheduler for the whole run).
pub fn load_coverage(store: &dyn TraceStore) -> Result<HashMap<u32, Coverage>, AnalysisError> {
    let r = store.query(
        &format!(
            "SELECT tid, MIN(timestamp - duration), MAX(timestamp) FROM events WHERE {} GROUP BY tid",
            op::SCHED_SWITCH.sql("")
        ),
        &QueryLimits::with_rows(QueryLimits::MAX_ROWS),
    )?;
    let mut out = HashMap::new();
    for row in r.rows {
        let v: Vec<i64> = row.iter().map(|c| c.as_i64().unwrap_or(0)).collect();
        if v.len() == 3 {
            out.insert(v[0] as u32, Coverage { start: v[1], end: v[2] });
        }
    }
    Ok(out)
}

/// Page allocations `(ts, bytes)` per process in `window`, from `mm_page_alloc` rows and
/// in-kernel summaries.
pub fn load_page_allocs(
    store: &dyn TraceStore,
    pids: &BTreeSet<u32>,
    window: TimeWindow,
) -> Result<HashMap<u32, Vec<(i64, i64)>>, AnalysisError> {
    let mut out: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
    if pids.is_empty() {
        return Ok(out);
    }
    let filter =
        EventFilter { window, ops: Some(vec![op::MM_PAGE_ALLOC, op::MM_PAGE_ALLOC_SUMMARY]), ..Default::default() };
    store.scan_slim(&filter, &mut |s| {
        if pids.contains(&s.pid) {
            out.entry(s.pid).or_default().push((s.ts, s.arg0));
        }
    })?;
    for v in out.values_mut() {
        v.sort_unstable();
    }
    Ok(out)
}

/// Block requests of `pid` whose `[ts, ts + dur]` overlaps `[a, b]`.
pub fn block_requests(store: &dyn TraceStore, pid: u32, a: i64, b: i64) -> Result<Vec<StoredEvent>, AnalysisError> {
    // A request issued up to 10 s before the interval may still be in flight.
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(a - 10_000_000_000), to_ns: Some(b) },
        pid: Some(pid),
        sources: Some(vec![5]),
        ..Default::default()
    };
    Ok(store.events(&filter)?.into_iter().filter(|e| e.event.end_ns() > a && e.event.ts_ns < b).collect())
}

/// Block requests of every process in flight during `[a, b]` (the device's whole load then).
pub fn block_requests_all(store: &dyn TraceStore, a: i64, b: i64) -> Result<Vec<StoredEvent>, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(a - 10_000_000_000), to_ns: Some(b) },
        sources: Some(vec![5]),
        ..Default::default()
    };
    Ok(store.events(&filter)?.into_iter().filter(|e| e.event.end_ns() > a && e.event.ts_ns < b).collect())
}

/// First and last event timestamp in scope (all sources).
pub fn scope_bounds(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Option<(i64, i64)>, AnalysisError> {
    let mut conds = vec!["1 = 1".to_string()];
    if let Some(f) = window.from_ns {
        conds.push(format!("timestamp >= {f}"));
    }
    if let Some(t) = window.to_ns {
        conds.push(format!("timestamp <= {t}"));
    }
    if let Some(p) = pid {
        conds.push(format!("pid = {p}"));
    }
    // one aggregate per subquery: SQLite answers a lone MIN or MAX of the timestamp index's
    // column from the index's ends, but scans every row for the two together
    let cond = conds.join(" AND ");
    let r = store.query(
        &format!(
            "SELECT (SELECT MIN(timestamp) FROM events WHERE {cond}), (SELECT MAX(timestamp) FROM events WHERE {cond})"
        ),
        &QueryLimits::with_rows(1),
    )?;
    let row = r.rows.first();
    let get = |i: usize| row.and_then(|r| r.get(i)).and_then(|v| v.as_i64());
    Ok(get(0).zip(get(1)))
}

/// The GPU calls in scope that did not return success: failures and the calls still in flight
/// when the trace ended (`ret_code <> 0`: a finished SQLite trace reads them through an index).
/// What `explain`'s hang and error stages and `stats`' failures section read.
pub fn unsuccessful_gpu_calls(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Vec<StoredEvent>, AnalysisError> {
    let filter = EventFilter {
        window,
        pid,
        sources: Some(codes::GPU_CALL_SOURCES.to_vec()),
        failed: true,
        ..Default::default()
    };
    let mut calls = store.events(&filter)?;
    calls.extend(under_way(store, &filter, false)?);
    Ok(calls)
}

/// What the tracer's last look found under way (`under_way`: a trace read while it runs, or whose
/// tracer was killed) that `filter` keeps: the calls in flight (`switches` false) or the open
/// off-CPU intervals (`switches` true), as events with the id [`EventId::UNDER_WAY`]. A call whose
/// own row is in `events` (it returned, or the trace ended after the look) is left out.
pub fn under_way(
    store: &dyn TraceStore,
    filter: &EventFilter,
    switches: bool,
) -> Result<Vec<StoredEvent>, AnalysisError> {
    let mut out = Vec::new();
    for row in store.under_way()? {
        let e = &row.event;
        if e.sched.is_some() != switches || !filter.matches(e.ts_ns, e.pid, e.tid, OpCode::new(e.source, e.op)) {
            continue;
        }
        let own = EventFilter {
            window: TimeWindow { from_ns: Some(e.ts_ns), to_ns: Some(e.ts_ns) },
            tids: Some(vec![e.tid]),
            ops: Some(vec![OpCode::new(e.source, e.op)]),
            ..Default::default()
        };
        if switches || store.events(&own)?.is_empty() {
            out.push(row.stored());
        }
    }
    Ok(out)
}

/// The launches of `events` as the program made them: a runtime launch wraps the driver launch it
/// makes, so the driver's are kept only where no runtime (or graph) launch was traced.
pub fn program_launches(mut launches: Vec<StoredEvent>) -> Vec<StoredEvent> {
    let driver = codes::Source::Driver.code();
    if launches.iter().any(|l| l.event.source != driver) {
        launches.retain(|l| l.event.source != driver);
    }
    launches
}

/// The allocations of `pid` made in `[from, to]` that had not been freed by `to` (a successful
/// call of [`codes::GpuRole::Alloc`] whose pointer no later successful free gave back), one per
/// pointer (the runtime's call over the driver's it makes), in time order.
pub fn live_allocations(
    store: &dyn TraceStore,
    pid: u32,
    from: i64,
    to: i64,
) -> Result<Vec<StoredEvent>, AnalysisError> {
    use codes::GpuRole;
    let mut ops = crate::detectors::ops_with_role(GpuRole::Alloc);
    ops.extend(crate::detectors::ops_with_role(GpuRole::Free));
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(from), to_ns: Some(to) },
        pid: Some(pid),
        ops: Some(ops),
        ..Default::default()
    };
    let mut all = store.events(&filter)?;
    all.sort_by_key(|e| e.event.ts_ns);
    let driver = codes::Source::Driver.code();
    let mut live: HashMap<i64, StoredEvent> = HashMap::new();
    for e in all.into_iter().filter(|e| e.event.ret_code == 0) {
        match codes::gpu_role(OpCode::new(e.event.source, e.event.op)) {
            GpuRole::Alloc if e.event.arg2 != 0 => {
                let outer = live.get(&e.event.arg2).filter(|k| k.event.source != driver && e.event.source == driver);
                if outer.is_none() {
                    live.insert(e.event.arg2, e);
                }
            }
            GpuRole::Free => {
                live.remove(&e.event.arg2);
            }
            _ => {}
        }
    }
    let mut out: Vec<StoredEvent> = live.into_values().collect();
    out.sort_by(|a, b| a.event.ts_ns.cmp(&b.event.ts_ns).then(a.id.cmp(&b.id)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_merge_when_they_overlap_or_touch() {
        assert_eq!(merge_intervals(vec![(5, 9), (1, 3), (3, 4), (8, 12), (20, 21)]), vec![(1, 4), (5, 12), (20, 21)]);
        assert_eq!(merge_intervals(Vec::new()), Vec::new());
    }
}
