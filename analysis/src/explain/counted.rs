//! The time an explanation counts. A whole scope counts all of its time; a window explained for a
//! symptom (a serving spike) counts only the intervals that hurt: those where work waited and was
//! not served. A slow call or a long gap is still found by its whole length (judged by the scope's
//! thresholds), but only its pieces inside those intervals are split by cause and summed into the
//! chains: an engine's idle sleeps beside the stall, when no request waited, are no cause of it.

use super::Found;
use crate::attribution::{Calls, Part};
use crate::trace_data::merge_intervals;

/// Sorted, disjoint, non-empty `[start, end)` ranges of time that count.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Counted {
    ranges: Vec<(i64, i64)>,
}

impl Counted {
    /// The union of `ranges` (empty ones dropped, overlapping and touching ones merged).
    pub(crate) fn of(mut ranges: Vec<(i64, i64)>) -> Counted {
        ranges.retain(|r| r.1 > r.0);
        Counted { ranges: merge_intervals(ranges) }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The counted time.
    pub(crate) fn total_ns(&self) -> i64 {
        self.ranges.iter().map(|r| r.1 - r.0).sum()
    }

    /// The pieces of `[a, b]` that count, in time order.
    pub(crate) fn pieces(&self, a: i64, b: i64) -> Vec<(i64, i64)> {
        let first = self.ranges.partition_point(|r| r.1 <= a);
        self.ranges[first..]
            .iter()
            .take_while(|r| r.0 < b)
            .map(|r| (r.0.max(a), r.1.min(b)))
            .filter(|p| p.1 > p.0)
            .collect()
    }

    pub(crate) fn overlaps(&self, a: i64, b: i64) -> bool {
        !self.pieces(a, b).is_empty()
    }
}

impl Found {
    /// Keep the slow calls and long gaps that touch `k`, whose pieces inside it are counted.
    pub(super) fn count_only(&mut self, calls: &Calls, k: &Counted) {
        self.slow.retain(|&i| k.overlaps(calls[i].ts, calls[i].end()));
        self.gaps.retain(|g| k.overlaps(g.start, g.end));
        self.slow_pids = self.slow.iter().map(|&i| calls[i].pid).collect();
        self.counted = Some(k.clone());
    }
}

/// `[a, b]` split by cause with `split`: whole when nothing restricts the time (`None`), else
/// piece by counted piece. Returns the parts and the time counted.
pub(super) fn split_counted(
    counted: Option<&Counted>,
    a: i64,
    b: i64,
    mut split: impl FnMut(i64, i64) -> Vec<Part>,
) -> (Vec<Part>, i64) {
    match counted {
        None => (split(a, b), b - a),
        Some(k) => {
            let mut parts = Vec::new();
            let mut ns = 0;
            for (pa, pb) in k.pieces(a, b) {
                parts.extend(split(pa, pb));
                ns += pb - pa;
            }
            (parts, ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_pieces_clip() {
        let k = Counted::of(vec![(50, 60), (10, 20), (15, 30), (40, 40)]);
        assert_eq!(k.ranges, vec![(10, 30), (50, 60)]);
        assert_eq!(k.total_ns(), 30);
        assert_eq!(k.pieces(0, 100), vec![(10, 30), (50, 60)]);
        assert_eq!(k.pieces(25, 55), vec![(25, 30), (50, 55)]);
        assert!(k.pieces(30, 50).is_empty());
        assert!(!k.overlaps(60, 70) && k.overlaps(59, 70));
        let (parts, ns) = split_counted(Some(&k), 0, 100, |_, _| Vec::new());
        assert_eq!((parts.len(), ns), (0, 30));
        assert_eq!(split_counted(None, 0, 100, |_, _| Vec::new()).1, 100);
    }
}
