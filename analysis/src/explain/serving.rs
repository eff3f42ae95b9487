//! The serving part of `explain`: a serving engine's latency spikes (`crate::serving`), each
//! tied to what the calls of its own window say (the calls-only explanation of the window, judged
//! by the whole scope's thresholds, as a slow step range is) and to the engine's steps there
//! against their phases' baselines.
//!
//! Only the time that hurt is counted (`Spike::waited`, [`Counted`]): the intervals where requests
//! waited and none was served. A real engine idles whenever load is light, and its idle sleeps in
//! the rest of the window (no request waiting) are no cause of the spike. When the scrapes cannot
//! tell which time hurt, the whole window counts and a sleep named there says it may be idle.

use causeway_model::time::TimeWindow;
use causeway_store::TraceStore;

use super::{explain_calls, Baseline, Counted, ExplainRequest};
use crate::attribution::Cause;
use crate::serving::{serving_report, spike_weight, spike_words, ServingReport};
use crate::{AnalysisError, ChainKind};

/// Spikes given a cause (each is one more explanation of a narrower window).
const EXPLAINED_SPIKES: usize = 3;
/// Chains of a spike's window looked at for its cause.
const CANDIDATES: usize = 10;

/// The scope's serving report with its worst spikes explained.
pub(crate) fn explain_serving(
    store: &dyn TraceStore,
    window: TimeWindow,
    scope: &Baseline,
) -> Result<ServingReport, AnalysisError> {
    let mut report = serving_report(store, window)?;
    if report.engines.is_empty() {
        return Ok(report);
    }
    let steps = crate::engine_steps::engine_steps(store, window)?;
    let mut worst: Vec<(usize, usize, f64)> = report
        .engines
        .iter()
        .enumerate()
        .flat_map(|(ei, e)| e.spikes.iter().enumerate().map(move |(si, s)| (ei, si, spike_weight(s))))
        .collect();
    worst.sort_by(|a, b| b.2.total_cmp(&a.2));
    for &(ei, si, _) in worst.iter().take(EXPLAINED_SPIKES) {
        let spike = &report.engines[ei].spikes[si];
        let inner_window = TimeWindow { from_ns: Some(spike.cause_from_ns), to_ns: Some(spike.to_ns) };
        let hurt = Counted::of(spike.waited.clone());
        let counted = (!hurt.is_empty()).then_some(&hurt);
        let req = ExplainRequest::new(inner_window, None, CANDIDATES);
        let (inner, _) = explain_calls(store, &req, Some(scope), counted, false)?;
        let words = steps
            .as_ref()
            .map(|(all, list)| crate::engine_steps::steps_in_window(all, list, spike.cause_from_ns, spike.to_ns));
        let spike = &mut report.engines[ei].spikes[si];
        spike.steps = words;
        // what was abnormal in the window against the scope (slow calls, long gaps: judged by the
        // scope's thresholds) before a pattern the workload has throughout (a sync after every
        // launch is how an engine steps, not why it stalled)
        let judged = |c: &&crate::Chain| matches!(c.kind, ChainKind::SlowCalls | ChainKind::FeedingGap);
        match inner.chains.iter().find(judged).or(inner.chains.first()) {
            Some(top) => {
                let mut why = top.summary.clone();
                if counted.is_none() && top.kind == ChainKind::FeedingGap && top.cause == Cause::Sleep.as_str() {
                    why.push_str(
                        " (the scrapes do not say when requests waited in this window: an idle engine sleeps \
                         too, so this sleep may be idle time rather than the cause)",
                    );
                }
                spike.why = Some(why);
                spike.chain_key = Some(top.key.clone());
            }
            None if counted.is_some() => {
                spike.why = Some(format!(
                    "no GPU call or gap in the {} when requests waited and none was served was slow against its \
                     own op (the engine's time went elsewhere: see the timeline)",
                    causeway_model::time::fmt_ns(hurt.total_ns())
                ))
            }
            None => {
                spike.why = Some(
                    "no GPU call or gap in that window was slow against its own op (the engine's time went \
                     elsewhere: see the timeline)"
                        .into(),
                )
            }
        }
        spike.summary = spike_words(spike);
    }
    report.engine_steps = steps.map(|(s, _)| s);
    Ok(report)
}
