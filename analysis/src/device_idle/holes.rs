//! The holes of a device view: while another CUPTI client (torch.profiler, Nsight) held the
//! activity records, the injection library stepped aside and recorded nothing. A hole starts at
//! the other client's call (the tracer's `foreign_client` note) and ends when the library resumed
//! (its next `resumed` note), or never. A library attached to a running process records only in
//! windows: from a `window_closed` note to the process's next `window_opened` is a hole too. Time
//! between ops that lies in a hole is neither busy nor idle: it is unseen, no gap is found there
//! and no host cause is charged with it.

use std::collections::BTreeMap;

use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::TraceStore;

use crate::AnalysisError;

/// The note kinds that open a hole and the kind that closes it (`GpuTimelineNote::KINDS`): another
/// client held the records; an attached library was dormant between two windows.
pub(crate) const PAIRS: [(&str, &str); 2] = [("foreign_client", "resumed"), ("window_closed", "window_opened")];

/// Whether notes of `kind` open or close holes (said once per hole, not as notes).
pub(super) fn is_hole_kind(kind: &str) -> bool {
    PAIRS.iter().any(|(o, c)| *o == kind || *c == kind)
}

/// One hole of one process's device view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hole {
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

/// The holes the device-timeline notes `notes` say, each process's in time order.
pub(crate) fn holes_of(notes: &[causeway_model::GpuTimelineNote]) -> BTreeMap<u32, Vec<Hole>> {
    let mut notes: Vec<&causeway_model::GpuTimelineNote> = notes.iter().collect();
    notes.sort_by_key(|n| (n.pid, n.ts_ns));
    let mut out: BTreeMap<u32, Vec<Hole>> = BTreeMap::new();
    for (opens, closes) in PAIRS {
        // the holes of this pair, per process: (holes, whether the last is open)
        let mut of_pair: BTreeMap<u32, Vec<Hole>> = BTreeMap::new();
        for n in &notes {
            let list = of_pair.entry(n.pid).or_default();
            let open = list.last().is_some_and(|h| h.end_ns == i64::MAX);
            if n.kind == opens && !open {
                list.push(Hole { start_ns: n.ts_ns, end_ns: i64::MAX, reason: n.detail.clone() });
            } else if n.kind == closes && open {
                if let Some(h) = list.last_mut() {
                    h.end_ns = n.ts_ns;
                }
            }
        }
        for (pid, list) in of_pair {
            out.entry(pid).or_default().extend(list);
        }
    }
    out.retain(|_, v| !v.is_empty());
    for list in out.values_mut() {
        list.sort_by_key(|h| (h.start_ns, h.end_ns));
    }
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

    fn note(pid: u32, ts_ns: i64, kind: &str) -> causeway_model::GpuTimelineNote {
        causeway_model::GpuTimelineNote { pid, ts_ns, kind: kind.into(), count: 0, detail: kind.into() }
    }

    #[test]
    fn a_dormant_time_between_windows_is_a_hole_like_another_clients() {
        let notes = [
            note(1, 10, "dormant"),
            note(1, 20, "window_opened"),
            note(1, 30, "foreign_client"),
            note(1, 35, "resumed"),
            note(1, 40, "window_closed"),
            note(1, 60, "window_opened"),
            note(1, 70, "window_closed"),
            note(2, 5, "window_closed"),
        ];
        let h = holes_of(&notes);
        let spans: Vec<(i64, i64)> = h[&1].iter().map(|h| (h.start_ns, h.end_ns)).collect();
        assert_eq!(spans, vec![(30, 35), (40, 60), (70, i64::MAX)]);
        assert_eq!(spans_of(&h, 2), vec![(5, i64::MAX)]);
    }

    fn spans_of(h: &BTreeMap<u32, Vec<Hole>>, pid: u32) -> Vec<(i64, i64)> {
        spans(h.get(&pid))
    }

    #[test]
    fn a_span_meets_a_hole_only_when_they_overlap() {
        let s = [(10, 20), (30, i64::MAX)];
        assert!(meets(&s, 5, 11) && meets(&s, 19, 25) && meets(&s, 12, 13) && meets(&s, 100, 200));
        assert!(!meets(&s, 0, 10) && !meets(&s, 20, 30) && !meets(&[], 0, 100));
    }
}
