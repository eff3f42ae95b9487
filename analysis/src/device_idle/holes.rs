//! The holes of a device view: while another CUPTI client (torch.profiler, Nsight) held the
//! activity records, the injection library stepped aside and recorded nothing. A hole starts at
//! the other client's call (the tracer's `foreign_client` note) and ends when the library resumed
//! (its next `resumed` note), or never. Time between ops that lies in a hole is neither busy nor
//! idle: it is unseen, no gap is found there and no host cause is charged with it.

use std::collections::BTreeMap;

use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::TraceStore;

use crate::AnalysisError;

/// The note kinds that open and close a hole (`GpuTimelineNote::KINDS`).
pub(super) const OPENS: &str = "foreign_client";
pub(super) const CLOSES: &str = "resumed";

/// One hole of one process's device view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hole {
    pub start_ns: i64,
    /// `i64::MAX`: it never closed.
    pub end_ns: i64,
    /// What the other client did (the `foreign_client` note's detail).
    pub reason: String,
}

/// Every process's holes, in time order.
pub(super) fn holes(store: &dyn TraceStore) -> Result<BTreeMap<u32, Vec<Hole>>, AnalysisError> {
    Ok(holes_of(&store.gpu_timeline_notes()?))
}

/// The holes the device-timeline notes `notes` say.
pub(super) fn holes_of(notes: &[causeway_model::GpuTimelineNote]) -> BTreeMap<u32, Vec<Hole>> {
    let mut notes: Vec<&causeway_model::GpuTimelineNote> = notes.iter().collect();
    notes.sort_by_key(|n| (n.pid, n.ts_ns));
    let mut out: BTreeMap<u32, Vec<Hole>> = BTreeMap::new();
    for n in notes {
        let list = out.entry(n.pid).or_default();
        let open = list.last().is_some_and(|h| h.end_ns == i64::MAX);
        match n.kind.as_str() {
            OPENS if !open => {
                list.push(Hole { start_ns: n.ts_ns, end_ns: i64::MAX, reason: n.detail.clone() });
            }
            CLOSES if open => {
                if let Some(h) = list.last_mut() {
                    h.end_ns = n.ts_ns;
                }
            }
            _ => {}
        }
    }
    out.retain(|_, v| !v.is_empty());
    out
}

/// The spans of `holes` as (start, end) pairs.
pub(super) fn spans(holes: Option<&Vec<Hole>>) -> Vec<(i64, i64)> {
    holes.map(|v| v.iter().map(|h| (h.start_ns, h.end_ns)).collect()).unwrap_or_default()
}

/// Whether `(a, b)` meets a hole.
pub(super) fn meets(spans: &[(i64, i64)], a: i64, b: i64) -> bool {
    spans.iter().any(|&(s, e)| s < b && e > a)
}

/// One line per hole in `window`: when, how long, why, and how many traced kernel launches it
/// hid.
pub(super) fn describe(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    holes: &BTreeMap<u32, Vec<Hole>>,
) -> Result<Vec<String>, AnalysisError> {
    let launches = crate::detectors::ops_with_role(causeway_model::codes::GpuRole::Launch);
    let mut lines = Vec::new();
    for (&p, list) in holes {
        if pid.is_some_and(|q| q != p) {
            continue;
        }
        for h in list {
            if window.to_ns.is_some_and(|to| h.start_ns > to) || window.from_ns.is_some_and(|from| h.end_ns < from) {
                continue;
            }
            let end = (h.end_ns != i64::MAX).then_some(h.end_ns);
            let filter = causeway_store::EventFilter {
                window: TimeWindow { from_ns: Some(h.start_ns), to_ns: end },
                pid: Some(p),
                ops: Some(launches.clone()),
                ..Default::default()
            };
            let n = super::scope::count_launches(store, &filter)?;
            let until = match end {
                Some(e) => format!("to {} ({})", super::fmt_clock(e), fmt_ns(e - h.start_ns)),
                None => "to the end of the trace".to_string(),
            };
            lines.push(format!(
                "pid {p}: the device view has a hole from {} {until}: {}. {n} kernel launches traced in it are not in the device view, and none of its time counts as busy or idle",
                super::fmt_clock(h.start_ns),
                h.reason.trim_end_matches('.'),
            ));
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_meets_a_hole_only_when_they_overlap() {
        let s = [(10, 20), (30, i64::MAX)];
        assert!(meets(&s, 5, 11) && meets(&s, 19, 25) && meets(&s, 12, 13) && meets(&s, 100, 200));
        assert!(!meets(&s, 0, 10) && !meets(&s, 20, 30) && !meets(&[], 0, 100));
    }
}
