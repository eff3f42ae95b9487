//! The steps part of `explain`: the scope's step series, and for each of the worst slow ranges
//! what the chains inside the range's own window say: the calls-only explanation of that window,
//! judged by the whole scope's thresholds (each op's slow call, each thread's long gap: inside a
//! slow range every call and gap may be as slow as the next), so the cause is found the same way
//! as everywhere else.
//!
//! A range is slow by its excess over the median step, and its cause is taken from that excess:
//! the same number of normal steps beside it are explained the same way, and the chain that grew
//! the most over what those steps went through is the range's cause. What every step has (a
//! loop that sleeps or waits each step, an idle thread) is no cause of the range being slow.

use std::collections::HashMap;

use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::TraceStore;

use super::{explain_calls, Baseline, ExplainRequest};
use crate::steps::{SlowSteps, Step};
use crate::{AnalysisError, Chain, ChainKind, StepReport};

/// Slow ranges given a cause (each is one more explanation of a narrower window).
const EXPLAINED_RANGES: usize = 3;
/// Chains of a window compared with the normal steps' (the rest are smaller than these).
const CANDIDATES: usize = 20;

/// The worst slow ranges of the scope's steps explained (the steps themselves then dropped: the
/// answer summarizes).
pub(super) fn explain_slow_ranges(
    store: &dyn TraceStore,
    report: &mut StepReport,
    scope: &Baseline,
) -> Result<(), AnalysisError> {
    let mut worst: Vec<(usize, usize, i64)> = report
        .series
        .iter()
        .enumerate()
        .flat_map(|(si, s)| s.slow.iter().enumerate().map(move |(ri, r)| (si, ri, r.excess_ns)))
        .collect();
    worst.sort_by_key(|w| std::cmp::Reverse(w.2));
    for &(si, ri, _) in worst.iter().take(EXPLAINED_RANGES) {
        let pid = report.series[si].pid;
        let range = &report.series[si].slow[ri];
        let explain_steps = |window: TimeWindow| -> Result<Vec<Chain>, AnalysisError> {
            let req = ExplainRequest::new(window, Some(pid), CANDIDATES);
            Ok(explain_calls(store, &req, Some(scope), None, false)?.0.chains)
        };
        let inner = explain_steps(range_window(range.start_ns, range.end_ns, range.baseline_ns))?;
        let normal = match normal_steps(&report.series[si].steps, range) {
            Some((from, to, n)) => Some((explain_steps(range_window(from, to, range.baseline_ns))?, n)),
            None => None,
        };
        let range = &mut report.series[si].slow[ri];
        let top = match &normal {
            Some((chains, n)) => grown_most(&inner, chains, range.steps as f64 / *n as f64),
            None => inner.first().map(|c| (c, None)),
        };
        match top {
            Some((top, normal_ns)) => {
                let mut why = top.summary.clone();
                if let Some(ns) = normal_ns {
                    why.push_str(&format!(
                        " (as many normal steps beside them: {}, so these steps had {} more)",
                        fmt_ns(ns),
                        fmt_ns(top.stall_ns - ns)
                    ));
                }
                range.summary = format!("{}: {why}", range.summary);
                range.why = Some(why);
                range.chain_key = Some(top.key.clone());
            }
            None if normal.is_some() => {
                range.summary = format!(
                    "{}: nothing of pid {pid} in those steps (no slow GPU call, no long gap by cause) went beyond \
                     what as many normal steps beside them went through (the time went elsewhere: see timeline)",
                    range.summary
                );
            }
            None => {
                range.summary = format!(
                    "{}: no GPU call or gap of pid {pid} in those steps was slow against its own op (the time went \
                     elsewhere: see timeline)",
                    range.summary
                );
            }
        }
    }
    // the answer summarizes; the steps themselves are one `steps` call away
    for s in &mut report.series {
        s.steps.clear();
    }
    Ok(())
}

/// The window explained for steps from `start` to `end`: from one median step before, since the
/// call that opens the first step's leading gap (a stalled loader, say) ends the step before it.
fn range_window(start: i64, end: i64, baseline: i64) -> TimeWindow {
    TimeWindow { from_ns: Some(start - baseline), to_ns: Some(end) }
}

/// As many steps as the range has (fewer where the series has fewer), just before it, else just
/// after it: their start, end and count. `None`: the series holds no other step.
fn normal_steps(steps: &[Step], range: &SlowSteps) -> Option<(i64, i64, usize)> {
    let first = steps.iter().position(|s| s.index == range.first)?;
    let last = steps.iter().rposition(|s| s.index == range.last)?;
    let span = |v: &[Step]| {
        let end = v.iter().map(Step::end_ns).max().unwrap_or(0);
        (!v.is_empty()).then(|| (v[0].start_ns, end, v.len()))
    };
    span(&steps[first.saturating_sub(range.steps)..first]).or_else(|| {
        let after = &steps[(last + 1).min(steps.len())..];
        span(&after[..range.steps.min(after.len())])
    })
}

/// The chain of the range that grew the most over the normal steps' same chain (scaled by
/// `per_normal`, the range's steps per normal step), with what the normal steps had of it; `None`
/// when none grew. A chain that names a cause comes before a throughput drop (a symptom), as
/// [`crate::chains::rank`] orders them.
fn grown_most<'a>(range: &'a [Chain], normal: &[Chain], per_normal: f64) -> Option<(&'a Chain, Option<i64>)> {
    let had: HashMap<&str, i64> = normal.iter().map(|c| (c.key.as_str(), c.stall_ns)).collect();
    let expected = |c: &Chain| (had.get(c.key.as_str()).copied().unwrap_or(0) as f64 * per_normal).round() as i64;
    range
        .iter()
        .map(|c| (c, expected(c)))
        .filter(|(c, e)| c.stall_ns > *e)
        .max_by_key(|(c, e)| (c.kind != ChainKind::ThroughputDrop, c.stall_ns - e))
        .map(|(c, e)| (c, Some(e).filter(|e| *e > 0)))
}
