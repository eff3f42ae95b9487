//! The explain stage for calls that never returned: a CUDA, driver or NCCL call still in flight
//! when the trace ended (`ret_code` [`RET_IN_FLIGHT`], written by the tracer from the probes'
//! in-flight slots, its duration up to the end) is a hang, and a hang outranks any slowness. One
//! chain per thread, for its outermost call in flight (a runtime call wraps the driver call it
//! makes): how long, since which step, what the thread was doing at the end (asleep, in
//! uninterruptible sleep, waiting for a CPU, or on a CPU) and, for a call that waits for the GPU,
//! the last work it queued before it (the kernel and the stream), with the SQL that finds it.
//!
//! A job whose ranks hang in a collective gets one more chain, first of all: from `nccl_calls`
//! ((communicator, sequence) per rank), the collective some ranks entered and waited in (their
//! call still in flight at the end, begun after they entered it) and the ranks of that communicator
//! that never entered it, each with what it was doing instead (its own call in flight, or its
//! thread's state at the end and its last call). Without a rank waiting, ranks out of step at the
//! end of a trace (or all idle at a checkpoint) are not a hang and say nothing.

use causeway_model::codes::{self, gpu_role, op, GpuRole, OpCode, RET_IN_FLIGHT};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::PrevState;
use causeway_store::{EventFilter, EventId, StoredEvent, TraceStore};

use crate::chains::{Chain, ChainKind, Evidence, Severity, TimelineStep};
use crate::detectors::ops_with_role;
use crate::kernels::KernelIndex;
use crate::trace_data::{program_launches, Names};
use crate::AnalysisError;

/// The chain's cause.
pub(super) const HANG: &str = "never_returned";
use crate::chains::RANK_NEVER_ARRIVED as NEVER_ARRIVED;

/// How long a call must have been in flight at the end to be a hang: a second, and a hundred
/// times its op's median (a trace cut in the middle of a step leaves a call of a few ms in flight,
/// and a job whose synchronizations take seconds is slow, not hung, a second into one).
pub(super) const HANG_MIN_NS: i64 = codes::LONG_IN_FLIGHT_NS;
const HANG_MEDIANS: i64 = 100;

/// The calls of `unsuccessful` (the scope's GPU calls that did not return success) in flight at
/// the end of the trace for long enough (`p50`: the op's median), outermost per thread.
fn hung_calls(unsuccessful: &[StoredEvent], p50: &dyn Fn(OpCode) -> i64) -> Vec<StoredEvent> {
    let long_enough = |e: &StoredEvent| {
        let median = p50(OpCode::new(e.event.source, e.event.op));
        e.event.dur_ns >= HANG_MIN_NS.max(median.saturating_mul(HANG_MEDIANS))
    };
    let mut hung: Vec<StoredEvent> =
        unsuccessful.iter().filter(|e| e.event.ret_code == RET_IN_FLIGHT && long_enough(e)).cloned().collect();
    hung.sort_by_key(|e| (e.event.tid, e.event.ts_ns));
    // the first of a thread wraps the rest (they all run to the end)
    hung.dedup_by_key(|e| e.event.tid);
    hung
}

/// What a call's thread was doing at the end of the trace (the call's end).
fn thread_state(store: &dyn TraceStore, e: &StoredEvent) -> Result<String, AnalysisError> {
    state_at(store, e.event.tid, e.event.ts_ns + e.event.dur_ns, e.event.dur_ns)
}

/// What thread `tid` was doing at `end` (the end of the trace), from its open off-CPU interval
/// (closed there by the tracer), counting at most the last `within` ns.
fn state_at(store: &dyn TraceStore, tid: u32, end: i64, within: i64) -> Result<String, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(end - 1_000_000), to_ns: None },
        tids: Some(vec![tid]),
        ops: Some(vec![op::SCHED_SWITCH]),
        ..Default::default()
    };
    let mut switches = store.events(&filter)?;
    switches.extend(crate::trace_data::under_way(store, &filter, true)?);
    let last = switches.into_iter().find(|s| s.event.ts_ns - s.event.dur_ns <= end);
    let Some(s) = last else {
        return Ok("it was on a CPU at the end (spinning on the GPU's completion, or computing)".into());
    };
    let off = fmt_ns(s.event.dur_ns.min(within));
    let detail = s.event.sched.as_ref();
    let state = detail.map_or(PrevState::Unknown, |d| d.prev_state);
    Ok(match state {
        PrevState::Sleeping => format!("it was asleep at the end, for the last {off} (a blocking wait: a futex, a condition variable, a poll; nothing woke it)"),
        PrevState::Uninterruptible => format!("it was in uninterruptible sleep at the end, for the last {off} (D state: I/O or the driver)"),
        PrevState::Preempted => {
            let by = detail.map_or(String::new(), |d| format!(" ({} took its CPU)", d.next_comm));
            format!("it was runnable but off the CPU at the end, for the last {off}{by}")
        }
        _ => format!("it was off the CPU at the end, for the last {off}"),
    })
}

/// The last kernel launch (or graph launch) of the process before `e`, on any thread.
fn last_launch(store: &dyn TraceStore, e: &StoredEvent) -> Result<Option<StoredEvent>, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(e.event.ts_ns - 60_000_000_000), to_ns: Some(e.event.ts_ns) },
        pid: Some(e.event.pid),
        ops: Some(ops_with_role(GpuRole::Launch)),
        ..Default::default()
    };
    let mut all = program_launches(store.events(&filter)?);
    all.sort_by_key(|l| l.event.ts_ns);
    Ok(all.into_iter().rev().find(|l| l.event.ret_code != RET_IN_FLIGHT))
}

/// Where the thread's code stood when call `e` began: the stack of the latest call of its thread
/// that has one, before `e` and at most a minute earlier (a call in flight carries no stack: it is
/// recorded at the return). The user's Python line (`file:line in function`) when there is one,
/// else the native call site outside the CUDA libraries; with how long before `e` that call began.
fn code_before(store: &dyn TraceStore, e: &StoredEvent) -> Result<Option<(String, i64)>, AnalysisError> {
    // the nearest first: a thread in a tight loop makes thousands of calls a second
    for back in [100_000_000, 10_000_000_000, 60_000_000_000] {
        let filter = EventFilter {
            window: TimeWindow { from_ns: Some(e.event.ts_ns - back), to_ns: Some(e.event.ts_ns) },
            tids: Some(vec![e.event.tid]),
            sources: Some(codes::GPU_CALL_SOURCES.to_vec()),
            ..Default::default()
        };
        let latest = store
            .events(&filter)?
            .into_iter()
            .filter(|c| c.event.stack_hash != 0 && c.event.ts_ns < e.event.ts_ns)
            .max_by_key(|c| c.event.ts_ns);
        if let Some(c) = latest {
            let stacks = store.stacks(&[c.event.stack_hash])?;
            let frames = stacks.get(&c.event.stack_hash).map(|r| crate::stacks::parse_frames(&r.frames));
            let site = frames.and_then(|f| crate::stacks::call_site(&f, 1).into_iter().next());
            return Ok(site.map(|s| (s, e.event.ts_ns - c.event.ts_ns)));
        }
    }
    Ok(None)
}

/// The step (of the process's labels) the call began in.
fn step_of(store: &dyn TraceStore, e: &StoredEvent) -> Result<Option<i64>, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(e.event.ts_ns - 3_600_000_000_000), to_ns: Some(e.event.ts_ns) },
        pid: Some(e.event.pid),
        ops: Some(vec![op::STEP]),
        ..Default::default()
    };
    // the latest step begun before the call (steps do not overlap): the call is in it, or in the
    // next one when it had ended
    let latest =
        store.events(&filter)?.into_iter().filter(|s| s.event.ts_ns <= e.event.ts_ns).max_by_key(|s| s.event.ts_ns);
    Ok(latest.map(|s| {
        let inside = e.event.ts_ns <= s.event.ts_ns + s.event.dur_ns;
        if inside {
            s.event.arg0
        } else {
            s.event.arg0 + 1
        }
    }))
}

/// The ranks that never entered the collective the others wait in, one chain per communicator.
fn never_arrived_chains(
    store: &dyn TraceStore,
    window: TimeWindow,
    hung: &[StoredEvent],
    names: &Names,
) -> Result<Vec<Chain>, AnalysisError> {
    use std::collections::BTreeMap;
    let calls = store.nccl_calls(&window)?;
    // per communicator, per process: its latest collective (sequence, op, entry, tid, rank)
    let mut latest: BTreeMap<i64, BTreeMap<u32, &causeway_model::NcclCall>> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.comm_hash != 0 && c.seq >= 0) {
        let e = latest.entry(c.comm_hash).or_default().entry(c.pid).or_insert(c);
        if (c.seq, c.ts_ns) > (e.seq, e.ts_ns) {
            *e = c;
        }
    }
    let mut out = Vec::new();
    for (comm, ranks) in latest {
        let Some(top) = ranks.values().map(|c| c.seq).max() else { continue };
        let entered: Vec<&causeway_model::NcclCall> = ranks.values().filter(|c| c.seq == top).copied().collect();
        let missing: Vec<&causeway_model::NcclCall> = ranks.values().filter(|c| c.seq < top).copied().collect();
        // the entered ranks still waiting at the end: a call in flight begun after they entered
        let waits: Vec<&StoredEvent> =
            hung.iter().filter(|h| entered.iter().any(|c| c.pid == h.event.pid && h.event.ts_ns >= c.ts_ns)).collect();
        if missing.is_empty() || waits.is_empty() {
            continue;
        }
        let coll = codes::op_name(codes::Source::Nccl.code(), entered[0].op).into_owned();
        let waited = waits.iter().map(|w| w.event.dur_ns).max().unwrap_or(0);
        let rank_list = |v: &[&causeway_model::NcclCall]| -> String {
            let mut r: Vec<String> = v.iter().map(|c| format!("rank {} (pid {})", c.rank, c.pid)).collect();
            r.sort();
            r.join(", ")
        };
        let end = waits.iter().map(|w| w.event.ts_ns + w.event.dur_ns).max().unwrap_or(0);
        let mut instead = Vec::new();
        for m in &missing {
            let own = hung.iter().find(|h| h.event.pid == m.pid);
            let what = match own {
                Some(h) => format!(
                    "it was in {} for {} (never returned)",
                    codes::op_name(h.event.source, h.event.op),
                    fmt_ns(h.event.dur_ns)
                ),
                None => state_at(store, m.tid, end, end - m.ts_ns)?,
            };
            let thread = crate::stacks::clean(&names.of(m.pid, m.tid));
            instead.push(format!(
                "rank {} (pid {}, tid {} {thread}) never entered it: its last was {coll} #{}, {} before the end; {what}",
                m.rank,
                m.pid,
                m.tid,
                m.seq,
                fmt_ns(end - m.ts_ns)
            ));
        }
        let first = missing.iter().min_by_key(|m| (m.rank, m.pid)).expect("missing ranks");
        let summary = format!(
            "{coll} #{top} of communicator {comm:#x}: {} entered it and waited {} without it completing (their {} had not returned when the trace ended); {}",
            rank_list(&entered),
            fmt_ns(waited),
            codes::op_name(waits[0].event.source, waits[0].event.op),
            instead.join("; ")
        );
        let sql =
            format!("SELECT count(DISTINCT pid) AS value FROM nccl_calls WHERE comm_hash = {comm} AND seq = {top}");
        let timeline = waits
            .iter()
            .map(|w| TimelineStep {
                ts_ns: w.event.ts_ns,
                dur_ns: w.event.dur_ns,
                layer: "CUDA".into(),
                what: format!(
                    "pid {} waits in {} (never returned)",
                    w.event.pid,
                    codes::op_name(w.event.source, w.event.op)
                ),
                event_id: (w.id != EventId::UNDER_WAY).then(|| w.id.clone()),
            })
            .collect();
        out.push(Chain {
            id: String::new(),
            key: format!("hang/{coll}/{comm:#x}/seq:{top}"),
            severity: Severity::High,
            kind: ChainKind::Hang,
            op: format!("{coll} #{top}"),
            cause: NEVER_ARRIVED.into(),
            cause_text: "a rank never entered the collective the others waited in".into(),
            culprit: None,
            pid: first.pid,
            tid: Some(first.tid),
            calls: missing.len() as u64,
            stall_ns: waited,
            share: 1.0,
            share_of: "of the waiting ranks' time from their entry to the end of the trace".into(),
            op_p50_ns: None,
            op_p99_ns: None,
            // the headline: which collective, who waited how long, who never came; the whole
            // story (each missing rank's last collective and state) is the first detail
            summary: format!(
                "{coll} #{top} hung: {} waited {} in it, {} never entered it",
                rank_list(&entered),
                fmt_ns(waited),
                rank_list(&missing)
            ),
            details: vec![
                summary,
                format!(
                    "every rank's latest collective on this communicator: SELECT pid, rank, max(seq) FROM nccl_calls WHERE comm_hash = {comm} GROUP BY pid, rank"
                ),
            ],
            cpus: Vec::new(),
            kernels: Vec::new(),
            timeline,
            stacks: Vec::new(),
            recommendations: vec![
                format!("The job waits for {}: what it does instead is where the hang is (its input pipeline, a rank-specific branch, an exception swallowed on that rank); `py-spy dump --pid {}` shows its stack", rank_list(&missing), first.pid),
                "Every rank must call the same collectives in the same order: a rank that skips or reorders one hangs all of them (set NCCL's and torch.distributed's timeouts to turn the hang into an error)".into(),
            ],
            evidence: Evidence {
                event_ids: waits.iter().map(|w| w.id.clone()).filter(|id| *id != EventId::UNDER_WAY).collect(),
                sql,
                value: entered.len() as i64,
                unit: "ranks".into(),
            },
            gpu_idle_ns: None,
            cost: None,
        });
    }
    Ok(out)
}

/// One chain per thread whose call never returned.
/// `unsuccessful`: the scope's GPU calls that did not return success
/// ([`crate::trace_data::unsuccessful_gpu_calls`]).
pub(super) fn hang_chains(
    store: &dyn TraceStore,
    window: TimeWindow,
    unsuccessful: &[StoredEvent],
    names: &Names,
    p50: &dyn Fn(OpCode) -> i64,
) -> Result<Vec<Chain>, AnalysisError> {
    let hung = hung_calls(unsuccessful, p50);
    if hung.is_empty() {
        return Ok(Vec::new());
    }
    let kernels = KernelIndex::load(store)?;
    let mut out = never_arrived_chains(store, window, &hung, names)?;
    for e in hung {
        let ev = &e.event;
        let code = OpCode::new(ev.source, ev.op);
        let op_name = code.name().into_owned();
        let thread = crate::stacks::clean(&names.of(ev.pid, ev.tid));
        let who = format!("tid {} ({thread}) of pid {}", ev.tid, ev.pid);
        let step = step_of(store, &e)?;
        let since = step.map_or(String::new(), |s| format!(" (since step {s})"));
        let state = thread_state(store, &e)?;
        let waits = matches!(gpu_role(code), GpuRole::Sync | GpuRole::SyncCopy);
        let launch = if waits { last_launch(store, &e)? } else { None };
        // a call the tracer's last look found (`under_way`): the trace did not end
        let looked = e.id == EventId::UNDER_WAY;
        let when = if looked {
            "at the tracer's last look (the trace had not ended: it is being written, or its tracer was killed)"
        } else {
            "when the trace ended"
        };
        let mut summary = format!(
            "{who} had been in {op_name} for {}{since} and had not returned {when}: {state}",
            fmt_ns(ev.dur_ns)
        );
        if let Some((site, before)) = code_before(store, &e)? {
            summary.push_str(&format!(
                "; its code then: {site} (its thread's last call with a stack, {} before)",
                fmt_ns(before)
            ));
        }
        let mut timeline = Vec::new();
        let mut details = Vec::new();
        let mut event_ids: Vec<EventId> = if looked { Vec::new() } else { vec![e.id.clone()] };
        if let Some(l) = &launch {
            let kernel = crate::kernels::kernel_label(&kernels, l.event.pid, l.event.arg0);
            summary.push_str(&format!(
                "; the last work it queued before waiting: {kernel} (stream {:#x}), {} before the wait began",
                l.event.arg2,
                fmt_ns(ev.ts_ns - l.event.ts_ns)
            ));
            timeline.push(TimelineStep {
                ts_ns: l.event.ts_ns,
                dur_ns: l.event.dur_ns,
                layer: "CUDA".into(),
                what: format!("{} of {kernel} by tid {}", codes::op_name(l.event.source, l.event.op), l.event.tid),
                event_id: Some(l.id.clone()),
            });
            event_ids.push(l.id.clone());
            details.push(format!(
                "a synchronizing call that never returns waits for GPU work that never finished: a kernel that never ends (a deadlock or an endless loop on the device), or work waiting for another rank (an NCCL collective whose peer never arrived); the last launches: SELECT id, timestamp, tid, op, arg0, arg2 FROM events WHERE pid = {} AND timestamp <= {} AND source IN (1, 4, 8) ORDER BY timestamp DESC LIMIT 10",
                ev.pid, ev.ts_ns
            ));
        }
        timeline.push(TimelineStep {
            ts_ns: ev.ts_ns,
            dur_ns: ev.dur_ns,
            layer: if ev.source == 4 { "DRIVER".into() } else { "CUDA".into() },
            what: format!("{op_name} on tid {} began and never returned", ev.tid),
            event_id: (!looked).then(|| e.id.clone()),
        });
        // the headline: who, in what, for how long; the whole story (its state, its code, the work
        // it waited for) is the first detail
        details.insert(0, summary);
        let summary = format!(
            "{who} had been in {op_name} for {}{since} and had not returned {}",
            fmt_ns(ev.dur_ns),
            if looked { "at the tracer's last look" } else { "when the trace ended" }
        );
        let sql = format!(
            "SELECT duration AS value FROM {} WHERE ret_code = {RET_IN_FLIGHT} AND tid = {} AND source = {} AND op = {} AND timestamp = {}",
            if looked { "under_way" } else { "events" },
            ev.tid, ev.source, ev.op, ev.ts_ns
        );
        let mut recommendations = vec![format!(
            "Look at the live process: `py-spy dump --pid {}` for every thread's Python stack, `nvidia-smi` for whether its GPU is still busy; a hang in a collective shows on every rank",
            ev.pid
        )];
        if waits {
            recommendations.push(
                "Set a timeout where the job waits (NCCL_TIMEOUT / torch.distributed's timeout, CUDA_LAUNCH_BLOCKING=1 to find the kernel that does not end)".into(),
            );
        }
        out.push(Chain {
            id: String::new(),
            key: format!("hang/{op_name}/pid:{}/tid:{}", ev.pid, ev.tid),
            severity: Severity::High,
            kind: ChainKind::Hang,
            op: op_name,
            cause: HANG.into(),
            cause_text: format!(
                "the call had not returned {}",
                if looked { "at the tracer's last look" } else { "when the trace ended" }
            ),
            culprit: None,
            pid: ev.pid,
            tid: Some(ev.tid),
            calls: 1,
            stall_ns: ev.dur_ns,
            share: 1.0,
            share_of: "of the time from the call's start to the end of the trace".into(),
            op_p50_ns: None,
            op_p99_ns: None,
            summary,
            details,
            cpus: Vec::new(),
            kernels: Vec::new(),
            timeline,
            stacks: Vec::new(),
            recommendations,
            evidence: Evidence { event_ids, sql, value: ev.dur_ns, unit: "ns".into() },
            gpu_idle_ns: None,
            cost: None,
        });
    }
    Ok(out)
}
