//! The explain stage for GPU faults: the Xid errors the NVIDIA driver reported while tracing
//! (`gpu_xid` events, read through NVML) become chains ranked with the hangs and errors. Each names
//! the GPU, the Xid and what it means ([`codes::xid_meaning`]), the traced processes that used that
//! GPU (the device timeline maps a process's devices to NVML indexes; without it every traced
//! process with GPU calls then may be one, and the chain says so), and their calls that failed
//! from a second before it on, or were under way across it. The driver's own line in the kernel
//! log (`nvrm_xid` events, read from `/dev/kmsg`) names the process it blamed: it is matched to the
//! NVML event of the same Xid within [`KMSG_MATCH_NS`] (and the same GPU where both know it), or
//! stands alone when NVML reported none.

use std::collections::BTreeMap;

use causeway_model::codes::{self, op, OpCode};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::{EventFilter, StoredEvent, TraceStore};

use crate::chains::{Chain, ChainKind, Evidence, Severity, TimelineStep};
use crate::AnalysisError;

/// How far before a GPU fault (an Xid, an ECC error) a failed call may be (the driver reports it
/// after the fact, NVML's counters are sampled) and how far after it a call that fails is still
/// its effect.
pub(super) const BEFORE_NS: i64 = 1_000_000_000;
pub(super) const AFTER_NS: i64 = 10_000_000_000;
/// A call under way across the Xid at least this long is named (it waited on the GPU then).
const ACROSS_NS: i64 = 100_000_000;

/// Whether `e` is a call that failed from [`BEFORE_NS`] before a fault at `at` on.
fn failed_near(e: &StoredEvent, at: i64) -> bool {
    let ev = &e.event;
    codes::is_call_failure(ev.source, ev.ret_code) && ev.ts_ns + ev.dur_ns >= at - BEFORE_NS
}

/// The first call of each process among `events` (in time order) that failed from
/// [`BEFORE_NS`] before a fault at `at` on: what the fault did to them.
pub(super) fn first_failures(events: &[StoredEvent], at: i64) -> BTreeMap<u32, StoredEvent> {
    let mut failed: BTreeMap<u32, StoredEvent> = BTreeMap::new();
    for e in events.iter().filter(|e| failed_near(e, at)) {
        failed.entry(e.event.pid).or_insert_with(|| e.clone());
    }
    failed
}

/// Process `p`'s failed call `e` beside a fault at `at`: in words and as a timeline step.
pub(super) fn failure_said(p: u32, e: &StoredEvent, at: i64) -> (String, TimelineStep) {
    let ev = &e.event;
    let op = OpCode::new(ev.source, ev.op).name();
    let words = format!(
        "pid {p}'s {op} failed with {} {} {} it",
        codes::error_name(ev.source, i64::from(ev.ret_code)),
        fmt_ns((ev.ts_ns - at).abs()),
        if ev.ts_ns >= at { "after" } else { "before" }
    );
    let step = TimelineStep {
        ts_ns: ev.ts_ns,
        dur_ns: ev.dur_ns,
        layer: "CUDA".into(),
        what: format!("pid {p}: {op} failed"),
        event_id: Some(e.id.clone()),
    };
    (words, step)
}

/// How far apart the driver's log line and NVML's event of the same Xid may be.
const KMSG_MATCH_NS: i64 = 5_000_000_000;

/// One chain per (GPU, Xid).
pub(super) fn xid_chains(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Vec<Chain>, AnalysisError> {
    let filter = EventFilter { window, ops: Some(vec![op::GPU_XID, op::NVRM_XID]), ..Default::default() };
    let (xids, lines): (Vec<StoredEvent>, Vec<StoredEvent>) =
        store.events(&filter)?.into_iter().partition(|x| op::GPU_XID.is(x.event.source, x.event.op));
    if xids.is_empty() && lines.is_empty() {
        return Ok(Vec::new());
    }
    let mut groups: BTreeMap<(i32, i64), Vec<StoredEvent>> = BTreeMap::new();
    for x in xids {
        groups.entry((x.event.gpu_id, x.event.arg0)).or_default().push(x);
    }
    // each driver line joins the group of its Xid and GPU near it in time, else its own
    let mut named: BTreeMap<(i32, i64), Vec<StoredEvent>> = BTreeMap::new();
    for l in lines {
        let (lg, code, at) = (l.event.gpu_id, l.event.arg0, l.event.ts_ns);
        let near = groups.iter().find(|((g, c), list)| {
            *c == code
                && (lg < 0 || *g < 0 || *g == lg)
                && list.iter().any(|x| (x.event.ts_ns - at).abs() <= KMSG_MATCH_NS)
        });
        let key = near.map_or((lg, code), |(k, _)| *k);
        named.entry(key).or_default().push(l);
    }
    for (key, lines) in &named {
        if !groups.contains_key(key) {
            groups.insert(*key, lines.clone());
        }
    }
    let devices = store.gpu_devices()?;
    let mapped = devices.iter().any(|d| d.nvml_index >= 0);
    let mut out = Vec::new();
    for ((gpu, code), list) in groups {
        let first = &list[0].event;
        // the processes the driver's lines named (pid 0: it did not know)
        let mut blamed: Vec<(u32, String)> = named
            .get(&(gpu, code))
            .into_iter()
            .flatten()
            .filter(|l| l.event.pid > 0)
            .map(|l| (l.event.pid, l.event.comm.clone()))
            .collect();
        blamed.sort();
        blamed.dedup();
        let from_log_only = op::NVRM_XID.is(first.source, first.op);
        let (meaning, lost) = codes::xid_meaning(code);
        let users: Vec<u32> = devices.iter().filter(|d| d.nvml_index == gpu).map(|d| d.pid).collect();
        // the GPU calls around it: failures from a second before, calls under way across it
        let around = EventFilter {
            window: TimeWindow { from_ns: Some(first.ts_ns - AFTER_NS), to_ns: Some(first.ts_ns + AFTER_NS) },
            sources: Some(codes::GPU_CALL_SOURCES.to_vec()),
            pid,
            ..Default::default()
        };
        let events: Vec<StoredEvent> =
            store.events(&around)?.into_iter().filter(|e| !mapped || users.contains(&e.event.pid)).collect();
        let failed = first_failures(&events, first.ts_ns);
        let mut across: BTreeMap<u32, StoredEvent> = BTreeMap::new();
        for e in events.into_iter().filter(|e| !failed_near(e, first.ts_ns)) {
            let ev = &e.event;
            if ev.ts_ns <= first.ts_ns && ev.ts_ns + ev.dur_ns >= first.ts_ns && ev.dur_ns >= ACROSS_NS {
                let keep = across.get(&ev.pid).is_none_or(|k| k.event.dur_ns < ev.dur_ns);
                if keep {
                    across.insert(ev.pid, e);
                }
            }
        }
        let mut who: Vec<String> = Vec::new();
        let mut timeline = vec![TimelineStep {
            ts_ns: first.ts_ns,
            dur_ns: 0,
            layer: "GPU".into(),
            what: format!("Xid {code} on GPU {gpu}: {meaning}"),
            event_id: Some(list[0].id.clone()),
        }];
        let mut event_ids = vec![list[0].id.clone()];
        for (&p, e) in &failed {
            let (words, step) = failure_said(p, e, first.ts_ns);
            who.push(words);
            timeline.push(step);
            event_ids.push(e.id.clone());
        }
        for (p, e) in across.iter().filter(|(p, _)| !failed.contains_key(p)) {
            let ev = &e.event;
            let how = if ev.ret_code == codes::RET_IN_FLIGHT { " (it never returned)" } else { "" };
            who.push(format!(
                "pid {p} was in {} for {} across it{how}",
                OpCode::new(ev.source, ev.op).name(),
                fmt_ns(ev.dur_ns)
            ));
            event_ids.push(e.id.clone());
        }
        let users_words = if mapped {
            if users.is_empty() {
                "no traced process used it (the device timeline maps none to it)".to_string()
            } else {
                let u: Vec<String> = users.iter().map(|p| p.to_string()).collect();
                format!("the traced processes on it: pid {}", u.join(", "))
            }
        } else {
            "the trace does not map processes to GPUs (trace with --gpu-timeline): every traced process with GPU calls then is considered".to_string()
        };
        let gpu_words = if gpu >= 0 { format!("GPU {gpu}") } else { "a GPU NVML does not list".to_string() };
        let mut summary = format!(
            "{gpu_words} reported Xid {code}{}{}: {meaning}",
            if list.len() > 1 { format!(" {} times", list.len()) } else { String::new() },
            if from_log_only { " (in the kernel log; NVML reported none)" } else { "" }
        );
        if !blamed.is_empty() {
            let b: Vec<String> = blamed
                .iter()
                .map(|(p, n)| if n.is_empty() { format!("pid {p}") } else { format!("pid {p} ({n})") })
                .collect();
            summary.push_str(&format!("; the driver's log line named {}", b.join(", ")));
        }
        summary.push_str(&format!("; {users_words}"));
        if who.is_empty() {
            summary.push_str("; no traced call failed or waited across it");
        } else {
            summary.push_str(&format!("; {}", who.join("; ")));
        }
        let severity = if lost || !failed.is_empty() { Severity::High } else { Severity::Medium };
        let sql = format!(
            "SELECT count(*) AS value FROM events WHERE {} AND gpu_id = {gpu} AND arg0 = {code}",
            if from_log_only { op::NVRM_XID.sql("") } else { op::GPU_XID.sql("") }
        );
        out.push(Chain {
            id: String::new(),
            key: format!("xid/{code}/gpu:{gpu}"),
            severity,
            kind: ChainKind::GpuFault,
            op: format!("Xid {code}"),
            cause: "gpu_xid".into(),
            cause_text: format!("the GPU reported an error: {meaning}"),
            culprit: None,
            pid: blamed.first().map(|b| b.0).or(failed.keys().next().copied()).or(across.keys().next().copied()).unwrap_or(0),
            tid: None,
            calls: failed.len() as u64,
            stall_ns: 0,
            share: 0.0,
            share_of: "GPU errors (no time share)".into(),
            op_p50_ns: None,
            op_p99_ns: None,
            summary,
            details: vec![format!(
                "the driver's own lines (NVRM: Xid ..., read from the kernel log while tracing): SELECT timestamp, pid, comm, arg0 AS xid FROM events WHERE {} AND arg0 = {code}; the samples of GPU {gpu}: SELECT * FROM gpu_samples WHERE gpu = {gpu} AND timestamp BETWEEN {} AND {}",
                op::NVRM_XID.sql(""),
                first.ts_ns - AFTER_NS,
                first.ts_ns + AFTER_NS
            )],
            cpus: Vec::new(),
            kernels: Vec::new(),
            timeline,
            stacks: Vec::new(),
            recommendations: vec![if lost {
                format!("Xid {code} loses the GPU or its contexts: drain the node's jobs from GPU {gpu}, check `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` and the cabling/power for bus errors, and restart the job elsewhere")
            } else {
                format!("Xid {code} is usually the application's: rerun the job that used GPU {gpu} with compute-sanitizer or CUDA_LAUNCH_BLOCKING=1 to find the faulting kernel")
            }],
            evidence: Evidence { event_ids, sql, value: list.len() as i64, unit: "xids".into() },
            gpu_idle_ns: None,
            cost: None,
        });
    }
    Ok(out)
}
