//! The explain stage for a GPU's memory errors: NVML's volatile ECC counters (`gpu_samples`) that
//! rose while tracing become `gpu_fault` chains (cause `ecc_errors`), one per GPU: how many
//! uncorrected and corrected errors, when the first came, the traced processes on that GPU (by
//! `gpu_devices`; without the map every traced process may have used it, and the chain says so)
//! and their calls that failed from a second before the first uncorrected error on. An uncorrected
//! error corrupts what a kernel read (the driver reports Xid 48 or 94/95 and may kill the
//! contexts): HIGH. Corrected errors cost nothing measurable on their own, but counts that grow are
//! memory wearing out: LOW, with what to check.
//!
//! The figures are each counter's last value less its first within the scope (volatile counters
//! only grow until the driver reloads), as the evidence SQL computes them.

use std::collections::BTreeMap;

use causeway_model::codes;
use causeway_model::time::{fmt_utc, TimeWindow};
use causeway_store::{EventFilter, StoredEvent, TraceStore};

use super::xid::{failure_said, first_failures, AFTER_NS};
use crate::chains::{Chain, ChainKind, Evidence, Severity, TimelineStep};
use crate::gpu_state::GpuState;
use crate::trace_data::Names;
use crate::AnalysisError;

/// One GPU's counters over the scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Rise {
    corrected: i64,
    uncorrected: i64,
    /// The first sample showing a higher count than the one before (each counter).
    first_corrected_ns: Option<i64>,
    first_uncorrected_ns: Option<i64>,
}

/// The counters' rise on each GPU whose samples report them.
fn rises(gpu: &GpuState) -> BTreeMap<i32, Rise> {
    let mut out = BTreeMap::new();
    for (&g, spans) in gpu.spans() {
        let mut r = Rise::default();
        let (mut first_c, mut first_u): (Option<i64>, Option<i64>) = (None, None);
        let (mut prev_c, mut prev_u): (Option<i64>, Option<i64>) = (None, None);
        for s in spans {
            let (c, u, ts) = (s.sample.ecc_corrected, s.sample.ecc_uncorrected, s.sample.ts_ns);
            if c >= 0 {
                first_c.get_or_insert(c);
                if prev_c.is_some_and(|p| c > p) && r.first_corrected_ns.is_none() {
                    r.first_corrected_ns = Some(ts);
                }
                r.corrected = c - first_c.unwrap_or(c);
                prev_c = Some(c);
            }
            if u >= 0 {
                first_u.get_or_insert(u);
                if prev_u.is_some_and(|p| u > p) && r.first_uncorrected_ns.is_none() {
                    r.first_uncorrected_ns = Some(ts);
                }
                r.uncorrected = u - first_u.unwrap_or(u);
                prev_u = Some(u);
            }
        }
        if r.corrected > 0 || r.uncorrected > 0 {
            out.insert(g, r);
        }
    }
    out
}

/// One chain per GPU whose ECC counters rose in scope (`gpu`: the scope's samples).
pub(super) fn ecc_chains(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    gpu: &GpuState,
    names: &Names,
) -> Result<Vec<Chain>, AnalysisError> {
    let rises = rises(gpu);
    if rises.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (g, r) in rises {
        let users: Vec<u32> = names.processes.keys().copied().filter(|&p| gpu.may_use(p, g)).collect();
        let who = if !gpu.maps_processes() {
            "the trace does not map processes to GPUs: every traced process then may have used it".to_string()
        } else if users.is_empty() {
            "no traced process used it".to_string()
        } else {
            let u: Vec<String> = users.iter().map(|&p| names.process(p)).collect();
            format!("the traced processes on it: {}", u.join(", "))
        };
        let first = r.first_uncorrected_ns.or(r.first_corrected_ns).unwrap_or(0);
        // the GPU calls of its processes that failed from just before the first uncorrected error
        let mut failed: BTreeMap<u32, StoredEvent> = BTreeMap::new();
        if let Some(t) = r.first_uncorrected_ns {
            let around = EventFilter {
                window: TimeWindow { from_ns: Some(t - AFTER_NS), to_ns: Some(t + AFTER_NS) },
                sources: Some(codes::GPU_CALL_SOURCES.to_vec()),
                pid,
                failed: true,
                ..Default::default()
            };
            let events: Vec<StoredEvent> = store
                .events(&around)?
                .into_iter()
                .filter(|e| !gpu.maps_processes() || users.contains(&e.event.pid))
                .collect();
            failed = first_failures(&events, t);
        }
        let mut summary = if r.uncorrected > 0 {
            format!(
                "GPU {g} counted {} uncorrected ECC error(s){} while tracing: the data a kernel read there was wrong; the first in the sample at {}",
                r.uncorrected,
                if r.corrected > 0 { format!(" and {} corrected", r.corrected) } else { String::new() },
                fmt_utc(first)
            )
        } else {
            format!(
                "GPU {g} corrected {} ECC error(s) while tracing: its memory is wearing where counts grow; the first in the sample at {}",
                r.corrected,
                fmt_utc(first)
            )
        };
        summary.push_str(&format!("; {who}"));
        let mut timeline = vec![TimelineStep {
            ts_ns: first,
            dur_ns: 0,
            layer: "GPU".into(),
            what: format!("GPU {g}: ECC counters rose ({} uncorrected, {} corrected)", r.uncorrected, r.corrected),
            event_id: None,
        }];
        let mut event_ids = Vec::new();
        for (&p, e) in &failed {
            let (words, step) = failure_said(p, e, first);
            summary.push_str(&format!("; {words}"));
            timeline.push(step);
            event_ids.push(e.id.clone());
        }
        let column = if r.uncorrected > 0 { "ecc_uncorrected" } else { "ecc_corrected" };
        let bounds = match (window.from_ns, window.to_ns) {
            (None, None) => String::new(),
            (f, t) => format!(" AND timestamp >= {} AND timestamp < {}", f.unwrap_or(i64::MIN), t.unwrap_or(i64::MAX)),
        };
        let sql = format!(
            "SELECT max({column}) - min({column}) AS value FROM gpu_samples WHERE gpu = {g} AND {column} >= 0{bounds}"
        );
        out.push(Chain {
            id: String::new(),
            key: format!("ecc/gpu:{g}"),
            severity: if r.uncorrected > 0 { Severity::High } else { Severity::Low },
            kind: ChainKind::GpuFault,
            op: "ECC".into(),
            cause: "ecc_errors".into(),
            cause_text: if r.uncorrected > 0 {
                "the GPU's memory returned data it could not correct".into()
            } else {
                "the GPU's memory corrected errors".into()
            },
            culprit: None,
            pid: failed.keys().next().copied().or(users.first().copied()).unwrap_or(0),
            tid: None,
            calls: failed.len() as u64,
            stall_ns: 0,
            share: 0.0,
            share_of: "GPU errors (no time share)".into(),
            op_p50_ns: None,
            op_p99_ns: None,
            summary,
            details: vec![format!(
                "the counters as sampled: SELECT timestamp, ecc_corrected, ecc_uncorrected FROM gpu_samples WHERE gpu = {g}{bounds} ORDER BY timestamp"
            )],
            cpus: Vec::new(),
            kernels: Vec::new(),
            timeline,
            stacks: Vec::new(),
            recommendations: vec![if r.uncorrected > 0 {
                format!("Treat GPU {g}'s results since {} as suspect; check `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` (a pending row remap needs a GPU reset) and drain the GPU if the counts keep growing", fmt_utc(first))
            } else {
                format!("Watch GPU {g}'s ECC counts (`nvidia-smi -q -d ECC,ROW_REMAPPER`): corrected errors that keep growing precede uncorrectable ones")
            }],
            evidence: Evidence {
                event_ids,
                sql,
                value: if r.uncorrected > 0 { r.uncorrected } else { r.corrected },
                unit: "errors".into(),
            },
            gpu_idle_ns: None,
            cost: None,
        });
    }
    Ok(out)
}
