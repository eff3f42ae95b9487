//! The explain stage for calls that never returned: a CUDA, driver or NCCL call still in flight
//! when the trace ended (`ret_code` [`RET_IN_FLIGHT`], written by the tracer from the probes'
//! in-flight slots, its duration up to the end) is a hang, and a hang outranks any slowness. One
//! chain per thread, for its outermost call in flight (a runtime call wraps the driver call it
//! makes): how long, since which step, what the thread was doing at the end (asleep, in
//! uninterruptible sleep, waiting for a CPU, or on a CPU) and, for a call that waits for the GPU,
//! the last work it queued before it (the kernel and the stream), with the SQL that finds it.

use causeway_model::codes::{self, gpu_role, op, GpuRole, OpCode, RET_IN_FLIGHT};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::PrevState;
use causeway_store::{EventFilter, StoredEvent, TraceStore};

use crate::chains::{Chain, ChainKind, Evidence, Severity, TimelineStep};
use crate::kernels::KernelIndex;
use crate::trace_data::Names;
use crate::AnalysisError;

/// The chain's cause.
pub(super) const HANG: &str = "never_returned";

/// The calls of scope still in flight at the end of the trace, outermost per thread.
fn hung_calls(store: &dyn TraceStore, window: TimeWindow, pid: Option<u32>) -> Result<Vec<StoredEvent>, AnalysisError> {
    let filter = EventFilter {
        window,
        pid,
        sources: Some(codes::GPU_CALL_SOURCES.to_vec()),
        failed: true,
        ..Default::default()
    };
    let mut hung: Vec<StoredEvent> =
        store.events(&filter)?.into_iter().filter(|e| e.event.ret_code == RET_IN_FLIGHT).collect();
    hung.sort_by_key(|e| (e.event.tid, e.event.ts_ns));
    // the first of a thread wraps the rest (they all run to the end)
    hung.dedup_by_key(|e| e.event.tid);
    Ok(hung)
}

/// What a thread was doing at `at` (the end of the trace), from its open off-CPU interval.
fn thread_state(store: &dyn TraceStore, e: &StoredEvent) -> Result<String, AnalysisError> {
    let end = e.event.ts_ns + e.event.dur_ns;
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(end - 1), to_ns: None },
        tids: Some(vec![e.event.tid]),
        ops: Some(vec![op::SCHED_SWITCH]),
        ..Default::default()
    };
    let last = store.events(&filter)?.into_iter().find(|s| s.event.ts_ns - s.event.dur_ns <= end);
    let Some(s) = last else {
        return Ok("it was on a CPU at the end (spinning on the GPU's completion, or computing)".into());
    };
    let off = fmt_ns(s.event.dur_ns.min(e.event.dur_ns));
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
    let launches: Vec<OpCode> =
        codes::OPS.iter().map(|o| OpCode::new(o.0, o.1)).filter(|c| gpu_role(*c) == GpuRole::Launch).collect();
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(e.event.ts_ns - 60_000_000_000), to_ns: Some(e.event.ts_ns) },
        pid: Some(e.event.pid),
        ops: Some(launches),
        ..Default::default()
    };
    // a runtime launch wraps its driver launch: the driver's only where the runtime is not traced
    let mut all = store.events(&filter)?;
    let driver = codes::Source::Driver.code();
    if all.iter().any(|l| l.event.source != driver) {
        all.retain(|l| l.event.source != driver);
    }
    all.sort_by_key(|l| l.event.ts_ns);
    Ok(all.into_iter().rev().find(|l| l.event.ret_code != RET_IN_FLIGHT))
}

/// The step (of the process's labels) the call began in.
fn step_of(store: &dyn TraceStore, e: &StoredEvent) -> Result<Option<i64>, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(e.event.ts_ns - 3_600_000_000_000), to_ns: Some(e.event.ts_ns) },
        pid: Some(e.event.pid),
        ops: Some(vec![op::STEP]),
        ..Default::default()
    };
    let steps = store.events(&filter)?;
    Ok(steps.iter().rev().find(|s| s.event.ts_ns <= e.event.ts_ns).map(|s| s.event.arg0 + 1).map(|next| {
        // inside a labelled step, or after the last one ended: the next step had begun
        steps
            .iter()
            .rev()
            .find(|s| s.event.ts_ns <= e.event.ts_ns && e.event.ts_ns <= s.event.ts_ns + s.event.dur_ns)
            .map_or(next, |s| s.event.arg0)
    }))
}

/// One chain per thread whose call never returned.
pub(super) fn hang_chains(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    names: &Names,
) -> Result<Vec<Chain>, AnalysisError> {
    let hung = hung_calls(store, window, pid)?;
    if hung.is_empty() {
        return Ok(Vec::new());
    }
    let kernels = KernelIndex::load(store)?;
    let mut out = Vec::new();
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
        let mut summary = format!(
            "{who} had been in {op_name} for {}{since} and had not returned when the trace ended: {state}",
            fmt_ns(ev.dur_ns)
        );
        let mut timeline = Vec::new();
        let mut details = Vec::new();
        let mut event_ids = vec![e.id.clone()];
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
            event_id: Some(e.id.clone()),
        });
        let sql = format!(
            "SELECT duration AS value FROM events WHERE ret_code = {RET_IN_FLIGHT} AND tid = {} AND source = {} AND op = {} AND timestamp = {}",
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
            cause_text: "the call had not returned when the trace ended".into(),
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
        });
    }
    Ok(out)
}
