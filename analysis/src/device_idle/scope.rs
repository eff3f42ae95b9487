//! The device view in the rest of the answer: the verdict's first sentence, the step each gap
//! belongs to, how long the GPU sat idle in a slow step range or a serving spike, the idle
//! intervals a host chain is measured against, and the hole where device records stop.

use std::collections::BTreeMap;

use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::GpuOp;
use causeway_store::TraceStore;

use super::*;
use crate::AnalysisError;

/// Number each listed gap by the step of its process whose work came late: the step the launch
/// that ended the gap was made in (else the step the gap ended in), from the first series of that
/// pid. A gap opens when the previous step's work ends; the step that owes it is the next one.
pub fn place_in_steps(view: &mut DeviceView, steps: &crate::StepReport) {
    for g in &mut view.gaps {
        let Some(series) = steps.series.iter().find(|s| s.pid == g.pid && !s.steps.is_empty()) else { continue };
        let at = if g.next.launch_start_ns > 0 { g.next.launch_start_ns } else { g.end_ns };
        let i = series.steps.partition_point(|s| s.start_ns <= at);
        if let Some(step) = i.checked_sub(1).map(|i| &series.steps[i]).filter(|s| at <= s.end_ns()) {
            g.step = Some(step.index);
            g.summary = g.summary.replacen(": ", &format!(" at step {}: ", step.index), 1);
        }
    }
}

/// The sentence explain opens with: the busy share and the largest cause of idle time.
pub fn verdict(view: &DeviceView) -> Option<String> {
    let busy: i64 = view.devices.iter().map(|d| d.busy_ns).sum();
    let idle: i64 = view.devices.iter().map(|d| d.idle_ns).sum();
    if busy + idle == 0 {
        return None;
    }
    let share = busy as f64 * 100.0 / (busy + idle) as f64;
    let mut s = format!("The GPU was busy {share:.1}% of the time it was in use; idle {}", fmt_ns(idle));
    match view.chains.first() {
        Some(top) => s.push_str(&format!(
            ", {} of it in gaps over {}; most of that: {}.",
            fmt_ns(view.gaps_idle_ns),
            fmt_ns(view.gap_threshold_ns),
            top.summary
        )),
        None => s.push_str(&format!(", none of it in gaps over {}.", fmt_ns(view.gap_threshold_ns))),
    }
    if let Some(g) = view.gaps.first() {
        s.push_str(&format!(" Longest gap: {}.", g.summary));
    }
    Some(s)
}

/// The time of `[a, b]` inside `intervals` (sorted, disjoint).
pub fn overlap_with(intervals: &[(i64, i64)], a: i64, b: i64) -> i64 {
    let i = intervals.partition_point(|x| x.1 <= a);
    intervals[i..].iter().take_while(|x| x.0 < b).map(|x| crate::attribution::overlap(a, b, x.0, x.1)).sum()
}

/// When the scope's devices sat idle in gaps at least [`DEFAULT_GAP_NS`] long (any device: a
/// thread feeds one, and which one is not known here), sorted and disjoint; `None` without a
/// device timeline. What the host chains are measured against: a host stall outside them cost the
/// GPU nothing the device view counts (the few microseconds between back-to-back kernels are the
/// device's own cadence, not a stall).
pub fn idle_intervals(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Option<Vec<(i64, i64)>>, AnalysisError> {
    let mut by_device: BTreeMap<(u32, i32), Vec<(i64, i64)>> = BTreeMap::new();
    store.scan_gpu_ops(&window, &mut |g: GpuOp| {
        if g.kind.occupies_device() && pid.is_none_or(|p| p == g.pid) {
            by_device.entry((g.pid, g.device)).or_default().push((g.start_ns, g.end_ns.max(g.start_ns)));
        }
    })?;
    if by_device.is_empty() {
        return Ok(None);
    }
    let holes = super::holes::holes(store)?;
    let mut idle = Vec::new();
    for ((p, _), busy) in by_device {
        let busy = crate::trace_data::merge_intervals(busy);
        let unseen = super::holes::spans(holes.get(&p));
        idle.extend(
            busy.windows(2)
                .map(|w| (w[0].1, w[1].0))
                .filter(|&(a, b)| b - a >= DEFAULT_GAP_NS && !super::holes::meets(&unseen, a, b)),
        );
    }
    Ok(Some(crate::trace_data::merge_intervals(idle)))
}

/// How long after a process's last device record traced launches mean the device view stopped
/// (the flush period is 200 ms: records may trail their launches by that much).
const HOLE_AFTER_NS: i64 = 500_000_000;

/// A process whose device records stop while its traced kernel launches go on has a hole at the
/// end of its device view (another CUPTI client, such as torch.profiler or Nsight, took the
/// records, or the library turned off): said with the count of launches it missed.
pub(super) fn holes_at_the_end(
    store: &dyn TraceStore,
    window: TimeWindow,
    by_device: &BTreeMap<(u32, i32), DeviceOps>,
    holes: &BTreeMap<u32, Vec<super::holes::Hole>>,
) -> Result<Vec<String>, AnalysisError> {
    let mut last: BTreeMap<u32, i64> = BTreeMap::new();
    for ((pid, _), d) in by_device {
        let end = d.ops.iter().map(|o| o.launch_start.max(o.start)).max().unwrap_or(0);
        let e = last.entry(*pid).or_insert(end);
        *e = (*e).max(end);
    }
    let launches = crate::detectors::ops_with_role(causeway_model::codes::GpuRole::Launch);
    let mut notes = Vec::new();
    for (pid, end) in last {
        if holes.get(&pid).and_then(|v| v.last()).is_some_and(|h| h.end_ns == i64::MAX) {
            continue; // its open hole says why already
        }
        let from = end + HOLE_AFTER_NS;
        if window.to_ns.is_some_and(|to| to < from) {
            continue;
        }
        let filter = causeway_store::EventFilter {
            window: TimeWindow { from_ns: Some(from), to_ns: window.to_ns },
            pid: Some(pid),
            ops: Some(launches.clone()),
            ..Default::default()
        };
        let n = count_launches(store, &filter)?;
        if n > 0 {
            notes.push(format!(
                "pid {pid}: {n} kernel launches were traced after the device view's last record at {} (+0.5 s): the device view has a hole from there (another CUPTI client such as torch.profiler or Nsight took the records, or the injection library stopped; see its notes)",
                fmt_clock(end)
            ));
        }
    }
    Ok(notes)
}

/// The kernel launches `filter` selects (its ops: the launches): a runtime launch wraps a driver
/// launch, so the driver's count only where no runtime call is.
pub(super) fn count_launches(
    store: &dyn TraceStore,
    filter: &causeway_store::EventFilter,
) -> Result<u64, AnalysisError> {
    let (mut runtime, mut driver) = (0u64, 0u64);
    store.scan_slim(filter, &mut |e| match e.op.source {
        4 => driver += 1,
        _ => runtime += 1,
    })?;
    Ok(if runtime > 0 { runtime } else { driver })
}

/// Say in each slow step range and each serving spike how long the GPU sat idle in it (gaps over
/// 1 ms) and, when the view lists one there, its longest gap and why.
pub fn say_in_ranges(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    view: &DeviceView,
    steps: &mut crate::StepReport,
    serving: &mut crate::ServingReport,
) -> Result<(), AnalysisError> {
    let Some(idle) = idle_intervals(store, window, pid)? else { return Ok(()) };
    let words = |a: i64, b: i64| -> (i64, String) {
        let ns = overlap_with(&idle, a, b);
        let longest = view.gaps.iter().filter(|g| g.start_ns < b && g.end_ns > a).max_by_key(|g| g.idle_ns);
        let text = match longest {
            _ if ns == 0 => " The GPU never sat idle over 1 ms in it.".to_string(),
            Some(g) => format!(" The GPU sat idle {} of it; the longest gap: {}.", fmt_ns(ns), g.summary),
            None => format!(" The GPU sat idle {} of it in gaps over 1 ms.", fmt_ns(ns)),
        };
        (ns, text)
    };
    for series in &mut steps.series {
        for r in &mut series.slow {
            let (ns, text) = words(r.start_ns, r.end_ns);
            r.gpu_idle_ns = Some(ns);
            r.summary.push_str(&text);
        }
    }
    for spike in serving.engines.iter_mut().flat_map(|e| e.spikes.iter_mut()) {
        let (ns, text) = words(spike.cause_from_ns, spike.to_ns);
        spike.gpu_idle_ns = Some(ns);
        spike.summary.push_str(&text);
    }
    Ok(())
}
