//! `stats` of the device's own timeline: per device, kind and name (a kernel's, a copy's
//! direction), the device time of every op with exact nearest-rank percentiles; the launch latency
//! (from the launching call's start to the device's start of the work) the same way; and each
//! device's busy share. Absent without a device timeline (`trace --gpu-timeline`).

use std::collections::BTreeMap;

use causeway_model::time::TimeWindow;
use causeway_model::{GpuOp, GpuOpKind};
use causeway_store::summary::nearest_ranks_unsorted;
use causeway_store::TraceStore;

use crate::stats::PERCENTILES;
use crate::AnalysisError;

/// Rows of device time per name kept (the most device time first); the rest are summed.
const NAMES_LISTED: usize = 50;

/// One (device, kind, name)'s device time.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceOpStats {
    pub pid: u32,
    pub device: i32,
    pub kind: GpuOpKind,
    /// A kernel's name (demangled where it is C++), a copy's direction; empty for memsets.
    pub name: String,
    pub count: u64,
    pub total_ns: i64,
    /// Exact nearest-rank percentiles of the device time, ns.
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p95_ns: i64,
    pub p99_ns: i64,
    pub max_ns: i64,
    /// Of the launch latency (launching call's start to device start), where the call is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_latency: Option<LatencyStats>,
}

/// Exact nearest-rank figures of a latency.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct LatencyStats {
    pub count: u64,
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
    pub max_ns: i64,
}

/// The device section of `stats`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceStats {
    /// Per (pid, device): ops, busy time (the union of its ops' spans), its share of the device's
    /// span.
    pub devices: Vec<DeviceBusy>,
    /// The most device time first (at most 50 rows).
    pub ops: Vec<DeviceOpStats>,
    /// Rows beyond the 50 listed, and their device time.
    pub ops_not_listed: u64,
    pub ns_not_listed: i64,
    /// The launch latency of every op whose launching call is known, per kind.
    pub launch_latency: BTreeMap<String, LatencyStats>,
    /// How each process's device view was recorded: launched with the library, or attached to the
    /// running process (when, its main thread's pause) with its windows and the time they covered.
    pub recording: Vec<String>,
}

/// A device's busy time.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DeviceBusy {
    pub pid: u32,
    pub device: i32,
    pub ops: u64,
    pub busy_ns: i64,
    pub span_ns: i64,
    pub busy_share: f64,
}

fn latency(mut v: Vec<i64>) -> Option<LatencyStats> {
    let p = nearest_ranks_unsorted(&mut v, &[500, 900, 990, 1000])?;
    Some(LatencyStats { count: v.len() as u64, p50_ns: p[0], p90_ns: p[1], p99_ns: p[2], max_ns: p[3] })
}

/// The device section of `stats` over `window` (of `pid`); `None` without a device timeline.
pub fn device_stats(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Option<DeviceStats>, AnalysisError> {
    type Key = (u32, i32, GpuOpKind, String);
    let mut durs: BTreeMap<Key, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    let mut spans: BTreeMap<(u32, i32), Vec<(i64, i64)>> = BTreeMap::new();
    let mut by_kind: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    store.scan_gpu_ops(&window, &mut |g: GpuOp| {
        if pid.is_some_and(|p| p != g.pid) || !g.kind.occupies_device() {
            return;
        }
        let name =
            if g.kind == GpuOpKind::Kernel { causeway_model::demangle::demangle(&g.name) } else { g.name.clone() };
        let e = durs.entry((g.pid, g.device, g.kind, name)).or_default();
        e.0.push(g.dur_ns());
        if let Some(l) = g.launch_latency_ns() {
            e.1.push(l);
            by_kind.entry(g.kind.name().to_string()).or_default().push(l);
        }
        spans.entry((g.pid, g.device)).or_default().push((g.start_ns, g.end_ns.max(g.start_ns)));
    })?;
    if durs.is_empty() {
        return Ok(None);
    }
    let mut ops: Vec<DeviceOpStats> = durs
        .into_iter()
        .filter_map(|((pid, device, kind, name), (mut d, l))| {
            let total = d.iter().sum();
            let p = nearest_ranks_unsorted(
                &mut d,
                &[PERCENTILES[0], PERCENTILES[1], PERCENTILES[2], PERCENTILES[3], 1000],
            )?;
            Some(DeviceOpStats {
                pid,
                device,
                kind,
                name,
                count: d.len() as u64,
                total_ns: total,
                p50_ns: p[0],
                p90_ns: p[1],
                p95_ns: p[2],
                p99_ns: p[3],
                max_ns: p[4],
                launch_latency: latency(l),
            })
        })
        .collect();
    ops.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    let rest: Vec<DeviceOpStats> = ops.split_off(ops.len().min(NAMES_LISTED));
    let notes = store.gpu_timeline_notes()?;
    let holes = crate::device_idle::holes::holes_of(&notes);
    let devices = spans
        .into_iter()
        .map(|((pid, device), v)| {
            let n = v.len() as u64;
            let merged = crate::trace_data::merge_intervals(v);
            let busy: i64 = merged.iter().map(|(a, b)| b - a).sum();
            let (first, last) = (merged.first().map_or(0, |f| f.0), merged.last().map_or(0, |l| l.1));
            // time the view did not see (another client's, dormant between windows) is no span
            let unseen: i64 = holes
                .get(&pid)
                .into_iter()
                .flatten()
                .map(|h| (h.end_ns.min(last) - h.start_ns.max(first)).max(0))
                .sum();
            let span = last - first - unseen;
            DeviceBusy {
                pid,
                device,
                ops: n,
                busy_ns: busy,
                span_ns: span,
                busy_share: if span > 0 { busy as f64 / span as f64 } else { 1.0 },
            }
        })
        .collect();
    Ok(Some(DeviceStats {
        devices,
        ops,
        ops_not_listed: rest.iter().map(|r| r.count).sum(),
        ns_not_listed: rest.iter().map(|r| r.total_ns).sum(),
        launch_latency: by_kind.into_iter().filter_map(|(k, v)| Some((k, latency(v)?))).collect(),
        recording: recording(&notes, pid),
    }))
}

/// One line per process: how its device view was recorded (`attached`, `window_opened`,
/// `window_closed` notes), for a process attached while it ran.
fn recording(notes: &[causeway_model::GpuTimelineNote], pid: Option<u32>) -> Vec<String> {
    let mut by_pid: BTreeMap<u32, Vec<&causeway_model::GpuTimelineNote>> = BTreeMap::new();
    for n in notes.iter().filter(|n| pid.is_none_or(|p| p == n.pid)) {
        by_pid.entry(n.pid).or_default().push(n);
    }
    let mut out = Vec::new();
    for (pid, mut ns) in by_pid {
        ns.sort_by_key(|n| n.ts_ns);
        let Some(attached) = ns.iter().find(|n| n.kind == "attached") else { continue };
        let mut windows = 0;
        let mut covered = 0i64;
        let mut open_at: Option<i64> = None;
        let end = ns.last().map_or(attached.ts_ns, |n| n.ts_ns);
        for n in &ns {
            match n.kind.as_str() {
                "window_opened" if open_at.is_none() => {
                    windows += 1;
                    open_at = Some(n.ts_ns);
                }
                "window_closed" | "off" | "stopped" => {
                    if let Some(a) = open_at.take() {
                        covered += n.ts_ns - a;
                    }
                }
                _ => {}
            }
        }
        if let Some(a) = open_at {
            covered += end - a;
        }
        let otherwise = match ns.iter().find(|n| n.kind == "armed") {
            Some(a) => format!(
                "otherwise held {} s in the tracer's memory (pre-trigger buffer) and not stored",
                a.count as f64 / 1000.0
            ),
            None => "dormant otherwise".to_string(),
        };
        let mut triggers: BTreeMap<&str, usize> = BTreeMap::new();
        for n in ns.iter().filter(|n| n.kind == "trigger") {
            *triggers.entry(n.trigger_kind().unwrap_or("?")).or_default() += 1;
        }
        let fired = if triggers.is_empty() {
            String::new()
        } else {
            let each: Vec<String> = triggers.iter().map(|(k, n)| format!("{k} {n}")).collect();
            format!("; triggers fired: {}", each.join(", "))
        };
        out.push(format!(
            "pid {pid}: attached to the running process at {} (its main thread held {}); {windows} window(s) recorded {} of device time, {otherwise}{fired}",
            causeway_model::time::fmt_utc(attached.ts_ns),
            causeway_model::time::fmt_ns(attached.count),
            causeway_model::time::fmt_ns(covered)
        ));
    }
    out
}
