//! The steps part of `explain`: the scope's step series, and for each of the worst slow ranges
//! what the chains inside the range's own window say: the calls-only explanation of that window,
//! judged by the whole scope's thresholds (each op's slow call, each thread's long gap: inside a
//! slow range every call and gap may be as slow as the next), so the cause is found the same way
//! as everywhere else.

use causeway_model::time::TimeWindow;
use causeway_store::TraceStore;

use super::{explain_calls, Baseline, ExplainRequest};
use crate::{AnalysisError, StepReport};

/// Slow ranges given a cause (each is one more explanation of a narrower window).
const EXPLAINED_RANGES: usize = 3;

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
        // from one median step before: the call that opens the first slow step's leading gap (a
        // stalled loader, say) ends the step before it
        let window = TimeWindow { from_ns: Some(range.start_ns - range.baseline_ns), to_ns: Some(range.end_ns) };
        let (inner, _) = explain_calls(store, &ExplainRequest::new(window, Some(pid), 1), Some(scope), false)?;
        let range = &mut report.series[si].slow[ri];
        if let Some(top) = inner.chains.first() {
            range.why = Some(top.summary.clone());
            range.chain_key = Some(top.key.clone());
            range.summary = format!("{}: {}", range.summary, top.summary);
        } else {
            range.summary = format!(
                "{}: no GPU call or gap of pid {pid} in those steps was slow against its own op (the time went \
                 elsewhere: see timeline)",
                range.summary
            );
        }
    }
    // the answer summarizes; the steps themselves are one `steps` call away
    for s in &mut report.series {
        s.steps.clear();
    }
    Ok(())
}
