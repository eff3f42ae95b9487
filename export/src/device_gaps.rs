//! The device's idle gaps in an export: found as the ops stream by (per process and device, the
//! busy union of kernels, copies and memsets, exactly as `causeway_analysis::device_view` forms
//! it), and explained by `device_view` itself over a window just wide enough for them, so every
//! gap over 1 ms is named (`device_view` lists only the longest gaps of its scope, and a view of
//! the whole trace holds every op of it).
//!
//! A gap `[u, s]` is explained the same by any window that holds the op whose end is `u` (every op
//! that starts between it and `u` ends inside it, so the union there has no other hole), the ops
//! that start at `s`, and every synchronization that may have drained the device at `u` (started
//! before `u`, returned no earlier than [`DRAIN_MARGIN_NS`] before it): the explanation reads only
//! the gap, the op that ended it, those synchronizations and the launching thread's own story. The
//! gaps of one device are explained [`BATCH`] at a time; a window whose view lists fewer than it
//! holds is halved until each gap is listed.

use std::collections::HashMap;

use causeway_analysis::{device_view, idle_part_words, IdleGap, DEFAULT_GAP_NS};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::{GpuOp, GpuOpKind};
use causeway_store::TraceStore;

use crate::writer::{Arg, Slice};
use crate::ExportError;

/// How far before a gap a synchronization's return may lie and still be kept for its window (a
/// superset of what the analysis accepts as the wait that drained the device: 100 us).
const DRAIN_MARGIN_NS: i64 = 1_000_000;
/// Gaps explained by one view (the analysis lists the 20 longest of its scope).
const BATCH: usize = 20;

/// A gap found, before it is explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundGap {
    pub pid: u32,
    pub device: i32,
    pub start: i64,
    pub end: i64,
    /// Where a window that explains it must begin.
    pub from: i64,
}

/// A gap and, when the view listed it, its explanation.
pub(crate) struct ExplainedGap {
    pub gap: FoundGap,
    pub why: Option<IdleGap>,
}

/// One device's busy union so far.
struct Busy {
    /// The latest end of any op so far.
    until: i64,
    /// The start of the op that ends there.
    holder: i64,
}

/// Finds the gaps as the ops come by device start.
#[derive(Default)]
pub(crate) struct GapFinder {
    devices: HashMap<(u32, i32), Busy>,
    /// Each process's synchronizations that may still have drained one of its devices.
    syncs: HashMap<u32, Vec<(i64, i64)>>,
}

impl GapFinder {
    /// Takes the next op (by device start); returns the gap it closes, if one over 1 ms.
    pub fn push(&mut self, op: &GpuOp) -> Option<FoundGap> {
        let (start, end) = (op.start_ns, op.end_ns.max(op.start_ns));
        if op.kind == GpuOpKind::Sync {
            // a later gap of a device begins where it is idle now, or after this instant: keep the
            // synchronizations that may have drained either
            let idle_from: Vec<i64> =
                self.devices.iter().filter(|((p, _), _)| *p == op.pid).map(|(_, b)| b.until).collect();
            let syncs = self.syncs.entry(op.pid).or_default();
            syncs.retain(|s| {
                s.1 >= start - DRAIN_MARGIN_NS || idle_from.iter().any(|&u| s.0 < u && s.1 >= u - DRAIN_MARGIN_NS)
            });
            syncs.push((start, end));
            return None;
        }
        let Some(busy) = self.devices.get_mut(&(op.pid, op.device)) else {
            self.devices.insert((op.pid, op.device), Busy { until: end, holder: start });
            return None;
        };
        let mut gap = None;
        if start > busy.until {
            let u = busy.until;
            if start - u >= DEFAULT_GAP_NS {
                let drains = self.syncs.get(&op.pid).into_iter().flatten();
                let from =
                    drains.filter(|s| s.0 < u && s.1 >= u - DRAIN_MARGIN_NS).map(|s| s.0).fold(busy.holder, i64::min);
                gap = Some(FoundGap { pid: op.pid, device: op.device, start: u, end: start, from });
            }
            *busy = Busy { until: end, holder: start };
        } else if end > busy.until {
            *busy = Busy { until: end, holder: start };
        }
        gap
    }
}

/// Explains `gaps` (in the order found), each by the view of a window that holds what it needs.
pub(crate) fn explain_gaps(store: &dyn TraceStore, gaps: Vec<FoundGap>) -> Result<Vec<ExplainedGap>, ExportError> {
    let mut by_device: Vec<((u32, i32), Vec<FoundGap>)> = Vec::new();
    for g in gaps {
        match by_device.iter_mut().find(|(k, _)| *k == (g.pid, g.device)) {
            Some((_, v)) => v.push(g),
            None => by_device.push(((g.pid, g.device), vec![g])),
        }
    }
    let mut out = Vec::new();
    for (_, gaps) in by_device {
        for batch in gaps.chunks(BATCH) {
            let mut why = Vec::with_capacity(batch.len());
            explain_batch(store, batch, &mut why)?;
            out.extend(batch.iter().cloned().zip(why).map(|(gap, why)| ExplainedGap { gap, why }));
        }
    }
    Ok(out)
}

/// The explanations of `gaps` (one device's, in order), halving the window until the view lists
/// each one.
fn explain_batch(store: &dyn TraceStore, gaps: &[FoundGap], out: &mut Vec<Option<IdleGap>>) -> Result<(), ExportError> {
    let (Some(first), Some(last)) = (gaps.first(), gaps.last()) else { return Ok(()) };
    let from = gaps.iter().map(|g| g.from).min().unwrap_or(first.start);
    let window = TimeWindow { from_ns: Some(from), to_ns: Some(last.end) };
    let Some(view) = device_view(store, window, Some(first.pid), DEFAULT_GAP_NS)? else {
        out.extend(gaps.iter().map(|_| None));
        return Ok(());
    };
    let listed: Vec<Option<IdleGap>> = gaps
        .iter()
        .map(|g| view.gaps.iter().find(|v| v.device == g.device && v.start_ns == g.start && v.end_ns == g.end).cloned())
        .collect();
    if gaps.len() == 1 || listed.iter().all(Option::is_some) || view.gaps.len() >= view.gaps_total {
        out.extend(listed);
        return Ok(());
    }
    let (a, b) = gaps.split_at(gaps.len() / 2);
    explain_batch(store, a, out)?;
    explain_batch(store, b, out)
}

/// A gap's slice: named by its top cause (`the launching thread was preempted by backup-rsync
/// (pid 9912)`), its parts, the work that ended it and the call that launched that work as args.
pub(crate) fn gap_slice(gap: &FoundGap, why: Option<&IdleGap>) -> Slice {
    let idle = gap.end - gap.start;
    let mut args = vec![("idle", Arg::Str(fmt_ns(idle))), ("idle_ns", Arg::Int(idle))];
    let name = match why.and_then(|g| g.parts.first().map(|top| (g, top))) {
        Some((g, top)) => {
            args.push(("summary", Arg::Str(g.summary.clone())));
            args.push(("top_cause", Arg::Str(top.cause.as_str().to_string())));
            let parts: Vec<String> = g
                .parts
                .iter()
                .map(|p| {
                    format!("{} {}: {}", fmt_ns(p.ns), p.cause.as_str(), idle_part_words(p.cause, p.culprit.as_ref()))
                })
                .collect();
            args.push(("causes", Arg::Str(parts.join("; "))));
            args.push(("ended_by", Arg::Str(format!("{} {}", g.next.kind.name(), g.next.name))));
            args.push(("stream", Arg::Int(i64::from(g.next.stream))));
            if g.next.launch_tid != 0 {
                args.push(("launch_thread", Arg::Str(format!("{} ({})", g.next.launch_thread, g.next.launch_tid))));
            }
            if g.next.launch_event_id > 0 {
                args.push(("launch_event_id", Arg::Str(g.next.launch_event_id.to_string())));
            }
            idle_part_words(top.cause, top.culprit.as_ref())
        }
        None => {
            args.push(("cause", Arg::Str("not explained here: causeway explain names the longest gaps".into())));
            "GPU idle".to_string()
        }
    };
    Slice { name, category: "gpu_idle".into(), args, flows_out: Vec::new(), flows_in: Vec::new() }
}
