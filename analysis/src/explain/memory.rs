//! The explain stage for the processes' GPU memory (NVML's `gpu_process_memory`,
//! [`crate::gpu_memory`]): `gpu_memory` chains for
//!
//! - a context **left behind**: memory a GPU still held for a process that was gone (its exit in
//!   the trace for a traced process, `/proc/PID` absent at the sample for any): the GPU, the pid,
//!   the bytes held and how long after the process ended;
//! - memory that **kept rising** over the trace: the GPU, the pid, the rise as NVML saw it, and
//!   the process's allocation calls in scope that were never freed (their count, bytes, the
//!   largest, and their stacks where the trace recorded them: the evidence names the largest).
//!
//! A clean run (memory that levels off, every context gone with its process) names neither.

use std::collections::BTreeMap;

use causeway_model::codes::op;
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::GpuProcessMemory;
use causeway_store::{EventFilter, StoredEvent, TraceStore};

use crate::chains::{Chain, ChainKind, Evidence, TimelineStep};
use crate::gpu_memory::{fmt_bytes, growths, left_behind, Growth, LeftBehind};
use crate::gpu_state::GpuState;
use crate::severity::GPU_HEALTH;
use crate::trace_data::{live_allocations, Names};
use crate::AnalysisError;

/// Unfreed allocations named (their sizes, and their events as the evidence whose stacks are shown).
const ALLOCATIONS_NAMED: usize = 5;

/// The memory chains in scope.
pub(super) fn memory_chains(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    gpu: &GpuState,
    names: &Names,
) -> Result<Vec<Chain>, AnalysisError> {
    let mut rows = store.gpu_process_memory(&window)?;
    rows.retain(|r| pid.is_none_or(|p| p == r.pid));
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // when each traced process exited (a window may start after it)
    let filter = EventFilter { ops: Some(vec![op::PROCESS_EXIT]), ..Default::default() };
    let exits: BTreeMap<u32, StoredEvent> =
        store.events(&filter)?.into_iter().filter(|e| e.event.tid == e.event.pid).map(|e| (e.event.pid, e)).collect();
    let exit_ns: BTreeMap<u32, i64> = exits.iter().map(|(p, e)| (*p, e.event.ts_ns)).collect();
    let total = |g: i32| -> i64 {
        gpu.spans()
            .get(&g)
            .and_then(|s| s.iter().rev().find(|s| s.sample.mem_total_bytes > 0))
            .map_or(-1, |s| s.sample.mem_total_bytes)
    };
    let mut out = Vec::new();
    for lb in left_behind(&rows, &exit_ns) {
        out.push(left_behind_chain(&lb, exits.get(&lb.pid), total(lb.gpu), &rows, names));
    }
    for g in growths(&rows) {
        out.push(growth_chain(store, window, &g, names)?);
    }
    Ok(out)
}

fn left_behind_chain(
    lb: &LeftBehind,
    exit: Option<&StoredEvent>,
    total: i64,
    rows: &[GpuProcessMemory],
    names: &Names,
) -> Chain {
    let (g, p) = (lb.gpu, lb.pid);
    let last_of_gpu = rows.iter().filter(|r| r.gpu == g).map(|r| r.ts_ns).max().unwrap_or(0);
    let until = if lb.last_gone_ns >= last_of_gpu { ", still at the trace's last sample" } else { "" };
    let who = names.process(p);
    let summary = match (exit, lb.exit_ns) {
        (Some(e), Some(_)) => format!(
            "GPU {g} still held {} for {who} {} after it exited ({}){until}",
            fmt_bytes(lb.bytes),
            fmt_ns(lb.held_ns()),
            super::errors::exit_words(e.event.arg0).trim_start_matches("the process ")
        ),
        _ => format!(
            "GPU {g} held {} for {who}, a process that was gone (/proc/{p} absent), for {}{until}",
            fmt_bytes(lb.bytes),
            fmt_ns(lb.held_ns())
        ),
    };
    let mut details = vec![format!(
        "NVML listed pid {p}'s context on GPU {g} at {} samples after the process was gone; {}: SELECT timestamp, used_bytes, alive FROM gpu_process_memory WHERE gpu = {g} AND pid = {p} ORDER BY timestamp",
        lb.gone_samples,
        if lb.proc_absent {
            format!("/proc/{p} was absent at them (alive = 0)")
        } else {
            "the tracer could not look in /proc (another pid namespace): the trace's exit event says it ended".to_string()
        }
    )];
    if total > 0 {
        details.push(format!(
            "{} of GPU {g}'s {} ({:.1}%)",
            fmt_bytes(lb.bytes),
            fmt_bytes(total),
            100.0 * lb.bytes as f64 / total as f64
        ));
    }
    if exit.is_none() {
        details.push(format!("pid {p} was not traced (or its exit fell outside the trace): when it ended is not known, only that it was gone from the first of those samples"));
    }
    let mut timeline = Vec::new();
    let mut event_ids = Vec::new();
    if let Some(e) = exit {
        timeline.push(TimelineStep {
            ts_ns: e.event.ts_ns,
            dur_ns: 0,
            layer: "HOST".into(),
            what: format!("{who} exited"),
            event_id: Some(e.id.clone()),
        });
        event_ids.push(e.id.clone());
    }
    timeline.push(TimelineStep {
        ts_ns: lb.last_gone_ns,
        dur_ns: 0,
        layer: "GPU".into(),
        what: format!("NVML: pid {p} holds {} on GPU {g}", fmt_bytes(lb.bytes)),
        event_id: None,
    });
    let severity = GPU_HEALTH.held(lb.bytes, total);
    Chain {
        id: String::new(),
        key: format!("memory/left_behind/gpu:{g}/pid:{p}"),
        severity,
        kind: ChainKind::GpuMemory,
        op: format!("GPU {g} memory"),
        cause: "memory_left_behind".into(),
        cause_text: "a GPU context outlived its process: its memory stays taken".into(),
        culprit: None,
        pid: p,
        tid: None,
        calls: 0,
        stall_ns: lb.held_ns(),
        share: 0.0,
        share_of: "GPU memory (no time share)".into(),
        op_p50_ns: None,
        op_p99_ns: None,
        summary,
        details,
        cpus: Vec::new(),
        kernels: Vec::new(),
        timeline,
        stacks: Vec::new(),
        recommendations: vec![
            format!("See who holds GPU {g}: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv -i {g}` and `fuser -v /dev/nvidia*`; a process stuck in the driver (state D), a zombie its parent never reaped, or a child that kept the device open holds the context"),
            format!("When nothing else uses GPU {g}, end what holds it or reset the GPU (`nvidia-smi --gpu-reset -i {g}`); a job launcher that kills workers should wait for them to exit"),
        ],
        evidence: Evidence {
            event_ids,
            sql: format!(
                "SELECT used_bytes AS value FROM gpu_process_memory WHERE gpu = {g} AND pid = {p} AND timestamp = {}",
                lb.last_gone_ns
            ),
            value: lb.bytes,
            unit: "bytes".into(),
        },
        gpu_idle_ns: None,
        cost: None,
    }
}

fn growth_chain(
    store: &dyn TraceStore,
    window: TimeWindow,
    gr: &Growth,
    names: &Names,
) -> Result<Chain, AnalysisError> {
    let (g, p) = (gr.gpu, gr.pid);
    let from = window.from_ns.unwrap_or(i64::MIN / 2);
    let to = window.to_ns.unwrap_or(gr.last.0);
    let mut live = live_allocations(store, p, from, to)?;
    let unfreed: i64 = live.iter().map(|e| e.event.arg0.max(0)).sum();
    let count = live.len();
    live.sort_by(|a, b| b.event.arg0.cmp(&a.event.arg0).then(a.event.ts_ns.cmp(&b.event.ts_ns)));
    live.truncate(ALLOCATIONS_NAMED);
    let span = gr.last.0 - gr.first.0;
    let per_min = gr.rise() as f64 * 60e9 / span.max(1) as f64;
    let who = names.process(p);
    let mut summary = format!(
        "GPU {g}: {who}'s memory rose from {} to {} over {} (+{}/min)",
        fmt_bytes(gr.first.1),
        fmt_bytes(gr.last.1),
        fmt_ns(span),
        fmt_bytes(per_min as i64)
    );
    if count > 0 {
        summary.push_str(&format!(
            "; {count} of its allocations in the trace ({}) were never freed, the largest {}",
            fmt_bytes(unfreed),
            fmt_bytes(live[0].event.arg0)
        ));
    } else {
        summary.push_str("; none of its traced allocations was left unfreed");
    }
    let severity = GPU_HEALTH.growth(count > 0);
    let q: Vec<String> = gr.quarters.iter().map(|b| fmt_bytes(*b)).collect();
    let mut details = vec![format!(
        "NVML's figure for pid {p} on GPU {g} over {} samples, the median of each quarter: {}: SELECT timestamp, used_bytes FROM gpu_process_memory WHERE gpu = {g} AND pid = {p} ORDER BY timestamp",
        gr.samples,
        q.join(" -> ")
    )];
    if count > 0 {
        let sizes: Vec<String> = live.iter().map(|e| fmt_bytes(e.event.arg0)).collect();
        details.push(format!(
            "its allocations never freed in scope, the largest first: {} (their stacks below, where the trace recorded them)",
            sizes.join(", ")
        ));
    } else {
        details.push("the growth is not in its traced allocation calls: a caching allocator's pool, library workspaces, or calls the trace did not probe".into());
    }
    let timeline = live
        .iter()
        .map(|e| TimelineStep {
            ts_ns: e.event.ts_ns,
            dur_ns: e.event.dur_ns,
            layer: "CUDA".into(),
            what: format!("{} of {}, never freed", e.event.op_name(), fmt_bytes(e.event.arg0)),
            event_id: Some(e.id.clone()),
        })
        .collect();
    Ok(Chain {
        id: String::new(),
        key: format!("memory/growth/gpu:{g}/pid:{p}"),
        severity,
        kind: ChainKind::GpuMemory,
        op: format!("GPU {g} memory"),
        cause: "memory_growth".into(),
        cause_text: "the process's GPU memory kept rising over the trace".into(),
        culprit: None,
        pid: p,
        tid: None,
        calls: count as u64,
        stall_ns: 0,
        share: 0.0,
        share_of: "GPU memory (no time share)".into(),
        op_p50_ns: None,
        op_p99_ns: None,
        summary,
        details,
        cpus: Vec::new(),
        kernels: Vec::new(),
        timeline,
        stacks: Vec::new(),
        recommendations: vec![
            "Free what the loop allocates, or allocate it once outside the loop; in PyTorch look for tensors kept alive across steps (a list of losses that keeps their graphs, a growing cache) with torch.cuda.memory_summary() and torch.cuda.memory._record_memory_history()".into(),
            format!("At this rate GPU {g} runs out: trace a longer run, or compare two files of a series, to see whether it levels off"),
        ],
        evidence: Evidence {
            event_ids: live.iter().map(|e| e.id.clone()).collect(),
            sql: format!(
                "SELECT (SELECT used_bytes FROM gpu_process_memory WHERE gpu = {g} AND pid = {p} AND timestamp = {}) - (SELECT used_bytes FROM gpu_process_memory WHERE gpu = {g} AND pid = {p} AND timestamp = {}) AS value",
                gr.last.0, gr.first.0
            ),
            value: gr.rise(),
            unit: "bytes".into(),
        },
        gpu_idle_ns: None,
        cost: None,
    })
}
