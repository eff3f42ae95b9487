//! The detectors' findings as chains: a throughput drop, sync storms, allocator latency growth,
//! unfreed allocations and cudaFree storms, each with its own figure, severity, recommendations and
//! evidence SQL (see [`crate::detectors`] for the rules and [`crate::chains`] for the severities).

use std::collections::BTreeMap;

use causeway_model::codes::{gpu_role, op, GpuRole, OpCode};
use causeway_model::time::{fmt_ns, fmt_since};
use causeway_store::EventId;

use crate::attribution::{Call, Calls};
use crate::chains::{Chain, ChainKind, Evidence, Severity, TimelineStep};
use crate::detectors::{self, ops_with_role};
use crate::evidence::{self, SqlScope};
use crate::trace_data::Names;
use crate::AnalysisError;

#[allow(clippy::too_many_arguments)]
fn chain(
    kind: ChainKind,
    op: &str,
    cause: &str,
    cause_text: &str,
    pid: u32,
    tid: Option<u32>,
    calls: u64,
    stall_ns: i64,
    share: f64,
    share_of: String,
    severity: Severity,
    summary: String,
    timeline: Vec<TimelineStep>,
    recommendations: Vec<String>,
    evidence: Evidence,
) -> Chain {
    let key = format!(
        "{}/{op}/{cause}/pid:{pid}{}",
        serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        tid.map(|t| format!("/tid:{t}")).unwrap_or_default()
    );
    Chain {
        id: String::new(),
        key,
        severity,
        kind,
        op: op.into(),
        cause: cause.into(),
        cause_text: cause_text.into(),
        culprit: None,
        pid,
        tid,
        calls,
        stall_ns,
        share,
        share_of,
        op_p50_ns: None,
        op_p99_ns: None,
        summary,
        details: Vec::new(),
        cpus: Vec::new(),
        kernels: Vec::new(),
        timeline,
        stacks: Vec::new(),
        recommendations,
        evidence,
        gpu_idle_ns: None,
        cost: None,
    }
}

fn step(ts: i64, dur: i64, layer: &str, what: String, id: Option<EventId>) -> TimelineStep {
    TimelineStep { ts_ns: ts, dur_ns: dur, layer: layer.into(), what, event_id: id }
}

/// A launch beside a change point, with its event id.
type Launch = (Call, EventId);

/// What the detectors found over the calls of a scope: the passes over every call, apart from the
/// wording (which needs the thread names) and free of the store.
pub struct DetectorFindings {
    /// `bounds` of the scope: first and last event.
    bounds: Option<(i64, i64)>,
    /// The launch rate drop, with the last launch before its change point and the first after.
    drop: Option<(detectors::ThroughputDrop, Option<Launch>, Option<Launch>)>,
    storms: Vec<detectors::SyncStorm>,
    allocators: Vec<detectors::AllocatorFindings>,
    has_ptr: bool,
}

/// Runs the detectors over `calls` (in (ts, id) order; `nested` flags the calls inside another GPU
/// call of their thread). `bounds`: first and last event in scope.
pub fn detector_findings(
    calls: &Calls,
    nested: &[bool],
    bounds: Option<(i64, i64)>,
    has_ptr: bool,
) -> DetectorFindings {
    let mut found = DetectorFindings { bounds, drop: None, storms: Vec::new(), allocators: Vec::new(), has_ptr };
    let Some((_, end)) = bounds else { return found };
    let top = detectors::top_level_findings(calls, nested, has_ptr);
    // Throughput drop over the top-level launches of the scope.
    let launch_ts = detectors::top_level_launch_ts(calls, nested);
    found.drop = detectors::throughput_drop(launch_ts, top.launches, end).map(|d| {
        // Calls are in time order: the launches on each side of the split are next to it.
        let at = calls.partition_point(|c| c.ts < d.split);
        let is_launch = |i: &usize| !nested[*i] && gpu_role(calls[*i].op) == GpuRole::Launch;
        let with_id = |i: usize| (calls[i], calls.event_id(&calls[i]));
        let last_before = (0..at).rev().find(is_launch).map(with_id);
        let first_after = (at..calls.len()).find(is_launch).map(with_id);
        (d, last_before, first_after)
    });
    found.storms = top.storms;
    found.allocators = top.allocators;
    found
}

/// The detectors' findings as chains, named with `names`.
pub fn detector_chains(
    scope: &SqlScope,
    found: DetectorFindings,
    spans_by_tid: &BTreeMap<u32, (i64, i64)>,
    names: &Names,
) -> Result<Vec<Chain>, AnalysisError> {
    let mut out = Vec::new();
    let Some((origin, end)) = found.bounds else { return Ok(out) };
    let scope_ns = (end - origin).max(1);
    let has_ptr = found.has_ptr;
    let (launch_ops, sync_ops) = (ops_with_role(GpuRole::Launch), ops_with_role(GpuRole::Sync));
    let (alloc_ops, free_ops) = (ops_with_role(GpuRole::Alloc), ops_with_role(GpuRole::Free));

    if let Some((d, last_before, first_after)) = found.drop {
        let before_rate = d.before as f64 * 1e9 / (d.split - d.first) as f64;
        let during_rate = d.during as f64 * 1e9 / (d.end - d.split) as f64;
        let ratio = during_rate / before_rate;
        let severity = crate::severity::THROUGHPUT_DROP.grade(ratio, d.lost_ns);
        let pid = last_before.as_ref().map(|(c, _)| c.pid).unwrap_or(0);
        let mut timeline = vec![step(
            d.first,
            d.split - d.first,
            "CUDA",
            format!("{} launches at {before_rate:.1}/s", d.before),
            None,
        )];
        let launch = |(c, id): &(Call, EventId), what: &str| {
            step(c.ts, c.dur, "CUDA", format!("{what}: {} on tid {}", c.op.name(), c.tid), Some(id.clone()))
        };
        timeline.extend(last_before.as_ref().map(|c| launch(c, "last launch at the old rate")));
        timeline.push(step(
            d.split,
            d.end - d.split,
            "CUDA",
            format!("{} launch(es) in {} ({during_rate:.2}/s)", d.during, fmt_ns(d.end - d.split)),
            None,
        ));
        timeline.extend(first_after.as_ref().map(|c| launch(c, "next launch")));
        let ids = last_before.iter().chain(first_after.iter()).map(|(_, id)| id.clone()).collect();
        out.push(chain(
            ChainKind::ThroughputDrop,
            "kernel launches",
            "launch_rate_drop",
            "the kernel launch rate fell: the GPU was fed less work",
            pid,
            None,
            d.during,
            d.lost_ns,
            d.lost_ns as f64 / (d.end - d.first).max(1) as f64,
            "the launch span (first launch to the last event in scope)".into(),
            severity,
            format!(
                "kernel launch rate fell from {before_rate:.1}/s to {during_rate:.2}/s at {} ({}): {} of GPU feeding lost over the following {}",
                fmt_since(d.split, origin),
                d.split,
                fmt_ns(d.lost_ns),
                fmt_ns(d.end - d.split)
            ),
            timeline,
            vec![
                "The gap and slow-call chains of the feeding thread say why; check them for the same period".into(),
                format!("Inspect the change point: causeway timeline --from {} --to {}", d.split.saturating_sub(100_000_000), d.split + 1_000_000_000),
            ],
            Evidence {
                event_ids: ids,
                sql: evidence::throughput_drop_sql(scope, &launch_ops, d.first, d.split, d.end),
                value: d.lost_ns,
                unit: "ns".into(),
            },
        ));
    }

    // Sync storms per thread.
    for s in found.storms {
        let span = spans_by_tid.get(&s.tid).map(|x| x.1 - x.0).unwrap_or(1).max(1);
        let share = s.sync_ns as f64 / span as f64;
        let comm = names.of(s.pid, s.tid);
        out.push(chain(
            ChainKind::SyncStorm,
            "synchronize",
            "sync_after_launch",
            "a synchronization after nearly every launch: the host waits for the GPU to drain, then the GPU waits for the host",
            s.pid,
            Some(s.tid),
            s.syncs,
            s.sync_ns,
            share,
            format!("the span tid {} fed the GPU ({})", s.tid, fmt_ns(span)),
            detector_severity(share, s.sync_ns),
            format!("tid {} ({comm}) synchronized {} times for {} launches: {} blocked in sync ({:.1}% of its span)", s.tid, s.syncs, s.launches, fmt_ns(s.sync_ns), share * 100.0),
            Vec::new(),
            vec![
                "Remove per-step synchronization: .item(), .cpu(), printing tensors, torch.cuda.synchronize() in the loop; use non_blocking copies and CUDA events".into(),
            ],
            Evidence { event_ids: s.worst.clone(), sql: evidence::call_time_sql(scope, &sync_ops, s.pid, Some(s.tid)), value: s.sync_ns, unit: "ns".into() },
        ));
    }

    // Allocator trouble per process.
    for a in found.allocators {
        if let (Some((early, late, extra)), Some((mean_early, mean_late))) = (a.growth, a.mean_growth) {
            if (late >= 2 * early || mean_late >= 2 * mean_early) && extra >= detectors::ALLOC_GROWTH_MIN_EXTRA_NS {
                let share = extra as f64 / scope_ns as f64;
                let mut growth = chain(
                    ChainKind::AllocatorLatency,
                    "device allocation",
                    "allocation_latency_growth",
                    "device allocations got slower over the run: fragmentation or memory pressure in the allocator",
                    a.pid,
                    None,
                    (a.allocs - a.allocs / 2) as u64,
                    extra,
                    share,
                    "the scope".into(),
                    detector_severity(share, extra),
                    format!(
                        "device allocations slowed down: mean {} over the first {} calls, {} over the last {} (p50 {} -> {}): {} extra; {} allocations ({} MiB), {} frees, {} MiB not freed in scope",
                        fmt_ns(mean_early), a.allocs / 2, fmt_ns(mean_late), a.allocs - a.allocs / 2, fmt_ns(early), fmt_ns(late), fmt_ns(extra),
                        a.allocs, a.alloc_bytes >> 20, a.frees, a.unfreed_bytes >> 20
                    ),
                    Vec::new(),
                    vec!["Fragmentation: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, reuse buffers, avoid torch.cuda.empty_cache() in the loop".into()],
                    Evidence { event_ids: a.worst_allocs.clone(), sql: evidence::alloc_growth_sql(scope, &alloc_ops, a.pid), value: extra, unit: "ns".into() },
                );
                growth.details.extend(allocation_op_facts(&a));
                out.push(growth);
            }
        }
        // With device pointers the unfreed bytes are exact; without, only a clear excess of
        // allocations over frees says memory was kept.
        if a.allocs >= detectors::UNFREED_MIN_ALLOCS
            && (has_ptr || a.frees * 2 < a.allocs)
            && a.unfreed_bytes >= detectors::UNFREED_MIN_BYTES
        {
            let how = if has_ptr {
                "matched by device pointer"
            } else {
                "this DB cannot match frees to allocations (no pointer column): all allocated bytes"
            };
            let mut imbalance = chain(
                ChainKind::AllocatorImbalance,
                "device allocation",
                "unfreed_allocations",
                "device memory allocated and not freed in scope",
                a.pid,
                None,
                a.allocs as u64,
                a.alloc_ns,
                a.alloc_ns as f64 / scope_ns as f64,
                "the scope".into(),
                Severity::Low,
                format!(
                    "pid {} made {} device allocations ({} MiB, {} in the calls) and {} frees: {} MiB not freed in scope ({how})",
                    a.pid, a.allocs, a.alloc_bytes >> 20, fmt_ns(a.alloc_ns), a.frees, a.unfreed_bytes >> 20
                ),
                Vec::new(),
                vec!["Memory that is never freed: check torch.cuda.memory_summary() for leaks or cache growth; free or reuse large buffers".into()],
                Evidence {
                    event_ids: a.worst_allocs.clone(),
                    sql: evidence::unfreed_bytes_sql(scope, &alloc_ops, &free_ops, a.pid, has_ptr),
                    value: a.unfreed_bytes,
                    unit: "bytes".into(),
                },
            );
            imbalance.details.extend(allocation_op_facts(&a));
            out.push(imbalance);
        }
        if a.frees >= detectors::FREE_STORM_MIN_CALLS && a.free_ns >= detectors::FREE_STORM_MIN_NS {
            let share = a.free_ns as f64 / scope_ns as f64;
            out.push(chain(
                ChainKind::FreeStorm,
                "cudaFree",
                "free_storm",
                free_storm_text(&a.free_ops),
                a.pid,
                None,
                a.frees as u64,
                a.free_ns,
                share,
                "the scope".into(),
                detector_severity(share, a.free_ns),
                format!("pid {} freed device memory {} times, {} in the calls", a.pid, a.frees, fmt_ns(a.free_ns)),
                Vec::new(),
                vec!["Avoid freeing in the loop (torch.cuda.empty_cache(), per-step buffers): let the caching allocator reuse blocks".into()],
                Evidence { event_ids: a.worst_frees.clone(), sql: evidence::call_time_sql(scope, &free_ops, a.pid, None), value: a.free_ns, unit: "ns".into() },
            ));
        }
    }
    Ok(out)
}

/// What a free storm costs, by the frees it is made of: cudaFree and cuMemFree synchronize the
/// device; stream-ordered and VMM frees do not, but each is still a call into the allocator.
fn free_storm_text(ops: &[OpCode]) -> &'static str {
    if ops.iter().all(|o| matches!(*o, op::CUDA_FREE | op::CU_MEM_FREE)) {
        "many device frees: each cudaFree synchronizes the device"
    } else {
        "many device frees: cudaFree and cuMemFree synchronize the device, and every free (stream-ordered or VMM too) is a call into the allocator"
    }
}

/// The ops an allocator finding is made of, when they are more than the classic device allocator
/// (cudaMalloc[Managed], cuMemAlloc[Managed], cudaFree, cuMemFree), and what the trace cannot match
/// (pinned host memory is freed by cudaFreeHost, which is not traced).
fn allocation_op_facts(a: &detectors::AllocatorFindings) -> Vec<String> {
    let plain = [
        op::CUDA_MALLOC,
        op::CUDA_MALLOC_MANAGED,
        op::CU_MEM_ALLOC,
        op::CU_MEM_ALLOC_MANAGED,
        op::CUDA_FREE,
        op::CU_MEM_FREE,
    ];
    let mut out = Vec::new();
    if a.alloc_ops.iter().chain(&a.free_ops).any(|o| !plain.contains(o)) {
        let names = |v: &[OpCode]| v.iter().map(|o| o.name().into_owned()).collect::<Vec<_>>().join(", ");
        out.push(format!(
            "allocations by {}; frees by {}",
            names(&a.alloc_ops),
            if a.free_ops.is_empty() { "none".into() } else { names(&a.free_ops) }
        ));
    }
    if a.unfreed_pinned_bytes > 0 {
        out.push(format!(
            "{} MiB of the unfreed bytes are pinned host memory (cudaHostAlloc): its free, cudaFreeHost, is not traced, so they may have been freed",
            a.unfreed_pinned_bytes >> 20
        ));
    }
    out
}

/// Severity of a detector's finding ([`crate::severity::DETECTORS`]).
pub fn detector_severity(share: f64, ns: i64) -> Severity {
    crate::severity::DETECTORS.grade(share, ns)
}
