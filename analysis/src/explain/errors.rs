//! The explain stage for CUDA errors: a process whose CUDA, driver or NCCL calls failed
//! ([`codes::is_call_failure`]) gets one chain, ranked with the hangs before any slowness, that
//! tells its story from the first failure:
//! - the first failing call and its error, and how many calls failed after it;
//! - a device fault (an illegal address, a device-side assert, a launch failure) surfaces at a
//!   later call, so the kernels launched since the process's last call that succeeded in waiting
//!   for the GPU are named: one of them faulted;
//! - an out-of-memory names the request, what the process held by its own allocations then (its
//!   largest ones), and the device memory in use in the NVML sample before it;
//! - the process's exit status closes the story (an exit code or a signal), or it was still running.

use std::collections::BTreeMap;

use causeway_model::codes::{self, gpu_role, op, GpuRole, OpCode};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::{EventFilter, StoredEvent, TraceStore};

use crate::chains::{Chain, ChainKind, Evidence, Severity, TimelineStep};
use crate::detectors::ops_with_role;
use crate::kernels::{kernel_label, KernelIndex};
use crate::trace_data::{program_launches, Names};
use crate::AnalysisError;

/// Kernels named in a device fault's story.
const KERNELS_NAMED: usize = 5;

/// The process's events of `ops` in `[from, to]`.
fn events_of(
    store: &dyn TraceStore,
    pid: u32,
    from: i64,
    to: i64,
    ops: Vec<OpCode>,
) -> Result<Vec<StoredEvent>, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(from), to_ns: Some(to) },
        pid: Some(pid),
        ops: Some(ops),
        ..Default::default()
    };
    Ok(store.events(&filter)?)
}

/// The kernels launched since the process's last successful wait for the GPU before `at`:
/// (count, the last few as words, their events).
fn launches_since_last_wait(
    store: &dyn TraceStore,
    kernels: &KernelIndex,
    pid: u32,
    at: i64,
) -> Result<(usize, Vec<String>, Vec<StoredEvent>), AnalysisError> {
    let mut waits = ops_with_role(GpuRole::Sync);
    waits.extend(ops_with_role(GpuRole::SyncCopy));
    let since = events_of(store, pid, at - 600_000_000_000, at - 1, waits)?
        .into_iter()
        .filter(|w| w.event.ret_code == 0)
        .map(|w| w.event.ts_ns + w.event.dur_ns)
        .max()
        .unwrap_or(at - 600_000_000_000);
    let mut launches = program_launches(events_of(store, pid, since, at, ops_with_role(GpuRole::Launch))?);
    launches.sort_by_key(|l| l.event.ts_ns);
    let n = launches.len();
    let last: Vec<StoredEvent> = launches.into_iter().rev().take(KERNELS_NAMED).collect();
    let words = last
        .iter()
        .map(|l| {
            format!("{} (stream {:#x}, tid {})", kernel_label(kernels, pid, l.event.arg0), l.event.arg2, l.event.tid)
        })
        .collect();
    Ok((n, words, last))
}

/// A live allocation, with where it was made when its stack was recorded.
type Held = (StoredEvent, Option<String>);

/// What the process held by its own allocations at `at`: (bytes, its three largest live
/// allocations).
fn held_at(store: &dyn TraceStore, pid: u32, at: i64) -> Result<(i64, Vec<Held>), AnalysisError> {
    let mut live = crate::trace_data::live_allocations(store, pid, i64::MIN / 2, at - 1)?;
    live.sort_unstable_by(|a, b| b.event.arg0.cmp(&a.event.arg0).then(a.event.ts_ns.cmp(&b.event.ts_ns)));
    let total = live.iter().map(|e| e.event.arg0).sum();
    live.truncate(3);
    let hashes: Vec<i64> = live.iter().map(|e| e.event.stack_hash).filter(|h| *h != 0).collect();
    let stacks = if hashes.is_empty() { Default::default() } else { store.stacks(&hashes)? };
    let largest = live
        .into_iter()
        .map(|e| {
            let site = stacks
                .get(&e.event.stack_hash)
                .and_then(|r| crate::stacks::call_site(&crate::stacks::parse_frames(&r.frames), 1).into_iter().next());
            (e, site)
        })
        .collect();
    Ok((total, largest))
}

fn mib(bytes: i64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The device memory in use in the last NVML sample before `at` (of the process's GPUs when the
/// device timeline maps them).
fn device_memory_at(store: &dyn TraceStore, pid: u32, at: i64) -> Result<Option<String>, AnalysisError> {
    let window = TimeWindow { from_ns: Some(at - 10_000_000_000), to_ns: Some(at) };
    let mine: Vec<i32> =
        store.gpu_devices()?.iter().filter(|d| d.pid == pid && d.nvml_index >= 0).map(|d| d.nvml_index).collect();
    let mut last: BTreeMap<i32, causeway_model::GpuSample> = BTreeMap::new();
    for s in store.gpu_samples(&window)? {
        if (mine.is_empty() || mine.contains(&s.gpu)) && s.mem_total_bytes > 0 {
            last.insert(s.gpu, s);
        }
    }
    if last.is_empty() {
        return Ok(None);
    }
    let words: Vec<String> = last
        .values()
        .map(|s| format!("GPU {}: {} of {} in use", s.gpu, mib(s.mem_used_bytes), mib(s.mem_total_bytes)))
        .collect();
    Ok(Some(words.join(", ")))
}

/// How the process ended, from its exit event (`arg0`: the wait status).
fn exit_of(store: &dyn TraceStore, pid: u32, after: i64) -> Result<Option<(i64, String)>, AnalysisError> {
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(after), to_ns: None },
        pid: Some(pid),
        ops: Some(vec![op::PROCESS_EXIT]),
        ..Default::default()
    };
    let exit = store.events(&filter)?.into_iter().find(|e| e.event.tid == pid);
    Ok(exit.map(|e| (e.event.ts_ns, exit_words(e.event.arg0))))
}

/// How a process ended, from its exit event's wait status (`arg0`).
pub(super) fn exit_words(status: i64) -> String {
    match (status & 0x7f, (status >> 8) & 0xff) {
        (0, code) => format!("the process exited with code {code}"),
        (sig, _) => format!("the process was killed by signal {sig}"),
    }
}

/// One chain per process whose calls failed; `unsuccessful`: the scope's GPU calls that did not
/// return success ([`crate::trace_data::unsuccessful_gpu_calls`]).
pub(super) fn error_chains(
    store: &dyn TraceStore,
    unsuccessful: &[StoredEvent],
    names: &Names,
) -> Result<Vec<Chain>, AnalysisError> {
    let mut by_pid: BTreeMap<u32, Vec<StoredEvent>> = BTreeMap::new();
    for e in unsuccessful.iter().filter(|e| codes::is_call_failure(e.event.source, e.event.ret_code)) {
        by_pid.entry(e.event.pid).or_default().push(e.clone());
    }
    if by_pid.is_empty() {
        return Ok(Vec::new());
    }
    let kernels = KernelIndex::load(store)?;
    let mut out = Vec::new();
    for (p, mut failed) in by_pid {
        // the first failure; a runtime call's failure wraps its driver call's
        failed.sort_by_key(|e| (e.event.ts_ns, e.event.source == codes::Source::Driver.code()));
        let first = failed[0].clone();
        let ev = &first.event;
        let code = OpCode::new(ev.source, ev.op);
        let op_name = code.name().into_owned();
        let error = codes::error_name(ev.source, i64::from(ev.ret_code)).into_owned();
        let thread = crate::stacks::clean(&names.of(ev.pid, ev.tid));
        // the calls the program made (a failing runtime call's driver call is not another failure)
        let outer = failed.iter().filter(|f| f.event.source != codes::Source::Driver.code()).count();
        let after = if outer > 0 { outer - 1 } else { failed.len() - 1 };
        let mut summary = format!(
            "pid {p}: its first failing CUDA call was {op_name} on tid {} ({thread}): {error} ({}){}",
            ev.tid,
            ev.ret_code,
            if after > 0 { format!(", and {after} more calls failed after it") } else { String::new() }
        );
        let mut timeline = Vec::new();
        let mut details = Vec::new();
        let mut event_ids = vec![first.id.clone()];
        let mut cause = "cuda_error";
        let mut recommendations = Vec::new();
        if codes::is_device_fault(i64::from(ev.ret_code)) {
            cause = "device_fault";
            let (n, words, last) = launches_since_last_wait(store, &kernels, p, ev.ts_ns)?;
            if n > 0 {
                let which = if n == 1 {
                    "the one kernel launched since the process's last successful wait faulted".to_string()
                } else {
                    format!("one of the {n} kernels launched since the process's last successful wait faulted (the last {})", words.len())
                };
                summary.push_str(&format!(
                    "; a device fault surfaces at the next call that waits, so {which}: {}",
                    words.join(", ")
                ));
                for l in last.iter().rev() {
                    timeline.push(TimelineStep {
                        ts_ns: l.event.ts_ns,
                        dur_ns: l.event.dur_ns,
                        layer: "CUDA".into(),
                        what: format!("launch of {}", kernel_label(&kernels, p, l.event.arg0)),
                        event_id: Some(l.id.clone()),
                    });
                    event_ids.push(l.id.clone());
                }
            }
            recommendations.push(
                "Rerun with CUDA_LAUNCH_BLOCKING=1 (each launch waits, so the failing kernel reports itself) and compute-sanitizer to find the bad access".into(),
            );
        } else if gpu_role(code) == GpuRole::Alloc && ev.ret_code == 2 {
            cause = "out_of_memory";
            let (held, largest_live) = held_at(store, p, ev.ts_ns)?;
            let largest: Vec<String> = largest_live
                .iter()
                .map(|(e, site)| match site {
                    Some(at) => format!("{} at {at}", mib(e.event.arg0)),
                    None => mib(e.event.arg0),
                })
                .collect();
            let mut held_steps: Vec<&StoredEvent> = largest_live.iter().map(|(e, _)| e).collect();
            held_steps.sort_by_key(|e| e.event.ts_ns);
            for e in held_steps {
                timeline.push(TimelineStep {
                    ts_ns: e.event.ts_ns,
                    dur_ns: e.event.dur_ns,
                    layer: "CUDA".into(),
                    what: format!(
                        "{} of {}, still held",
                        codes::op_name(e.event.source, e.event.op),
                        mib(e.event.arg0)
                    ),
                    event_id: Some(e.id.clone()),
                });
                event_ids.push(e.id.clone());
            }
            summary.push_str(&format!(
                "; it asked for {} while holding {} by its own allocations (the largest: {})",
                mib(ev.arg0),
                mib(held),
                if largest.is_empty() { "none".to_string() } else { largest.join(", ") }
            ));
            if let Some(m) = device_memory_at(store, p, ev.ts_ns)? {
                summary.push_str(&format!("; device memory before it: {m}"));
            }
            recommendations.push(
                "Lower the batch size or the model's footprint (activation checkpointing, lower precision); look for allocations that are never freed (unfreed_allocations chains) and for another process on the same GPU".into(),
            );
        }
        timeline.push(TimelineStep {
            ts_ns: ev.ts_ns,
            dur_ns: ev.dur_ns,
            layer: if ev.source == codes::Source::Driver.code() { "DRIVER".into() } else { "CUDA".into() },
            what: format!("{op_name} failed: {error}"),
            event_id: Some(first.id.clone()),
        });
        match exit_of(store, p, ev.ts_ns)? {
            Some((ts, words)) => {
                summary.push_str(&format!("; {words}, {} later", fmt_ns(ts - ev.ts_ns)));
                timeline.push(TimelineStep { ts_ns: ts, dur_ns: 0, layer: "HOST".into(), what: words, event_id: None });
            }
            None => summary.push_str("; the process was still running when the trace ended"),
        }
        details.push(format!(
            "every failed call of the process: SELECT timestamp, tid, source, op, ret_code FROM events WHERE pid = {p} AND {} ORDER BY timestamp",
            codes::FAILURE_SQL
        ));
        let sql = format!("SELECT count(*) AS value FROM events WHERE pid = {p} AND {}", codes::FAILURE_SQL);
        out.push(Chain {
            id: String::new(),
            key: format!("error/{op_name}/pid:{p}"),
            severity: Severity::High,
            kind: ChainKind::CudaError,
            op: op_name,
            cause: cause.into(),
            cause_text: format!("the call failed: {error}"),
            culprit: None,
            pid: p,
            tid: Some(ev.tid),
            calls: failed.len() as u64,
            stall_ns: 0,
            share: 0.0,
            share_of: "failed calls (no time share)".into(),
            op_p50_ns: None,
            op_p99_ns: None,
            summary,
            details,
            cpus: Vec::new(),
            kernels: Vec::new(),
            timeline,
            stacks: Vec::new(),
            recommendations,
            evidence: Evidence { event_ids, sql, value: failed.len() as i64, unit: "calls".into() },
            gpu_idle_ns: None,
            cost: None,
        });
    }
    Ok(out)
}
