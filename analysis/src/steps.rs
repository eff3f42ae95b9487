//! Steps: the intervals a training loop (or a serving engine) repeats, as the workload labeled
//! them (source STEP: `causeway annotate`, the Python helper) or, without labels, inferred from
//! the trace itself (the period of one thread's synchronizing calls and collectives); which of
//! them were slow against the series' own median; and the window a step range names (`--steps`).
//!
//! Step numbers of inferred steps count boundaries from the start of the trace (of the process
//! asked for), so the same number names the same step whatever window a question looks at.

use std::collections::BTreeMap;

use causeway_model::codes::{self, OpCode, OPS};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::{EventFilter, SlimEvent, TraceStore};

use crate::attribution::Call;
use crate::stats::nearest_rank;

use crate::AnalysisError;

/// Two slow runs separated by at most this many normal steps are one range.
const MERGE_GAP: usize = 1;
/// Slow ranges reported per series, most excess time first.
pub const MAX_SLOW_RANGES: usize = 5;
/// Inference needs at least this many boundary candidates on one thread.
const MIN_CANDIDATES: usize = 8;
/// The longest period (synchronizing calls per step) inference tries.
const MAX_PERIOD: usize = 16;
/// Jitter allowed per interval on top of the relative rule: a host's timing noise on intervals of
/// microseconds (a copy-back right before a synchronize).
const JITTER_NS: i64 = 50_000;
/// A spacing score (see `infer_from`) at or above this is chance: intervals that follow no period
/// change by about their own size.
const NO_PERIOD: f64 = 0.9;
/// The most a period of one repeated op may score: with nothing but timing to go by, a loop's
/// steps must repeat clearly (a busy host's steps of a few milliseconds score about a third).
const LOOSE_PERIOD: f64 = 0.6;

/// One step (epoch, task).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Step {
    pub index: i64,
    pub pid: u32,
    pub tid: u32,
    pub start_ns: i64,
    pub dur_ns: i64,
}

impl Step {
    pub fn end_ns(&self) -> i64 {
        self.start_ns + self.dur_ns
    }
}

/// A run of slow steps.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct SlowSteps {
    /// First and last step number of the range.
    pub first: i64,
    pub last: i64,
    /// Steps in the range (a normal step between two slow ones is counted in).
    pub steps: usize,
    /// Nearest-rank median duration of the range's steps.
    pub median_ns: i64,
    /// The series' median step.
    pub baseline_ns: i64,
    /// Time over the baseline, summed over the range.
    pub excess_ns: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    /// "steps 80-119 took 380 ms instead of 90 ms", and why when `explain` found it.
    pub summary: String,
    /// What `explain` finds inside the range: its top chain's summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// That chain's key (the same chain in `explain` over the range's window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_key: Option<String>,
    /// With a device timeline: how long the GPU sat idle in the range (gaps over 1 ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_idle_ns: Option<i64>,
    /// What the range cost in GPU time ([`crate::cost`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::GpuCost>,
}

/// The steps of one process and kind.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct StepSeries {
    /// `step`, `epoch` or `task`.
    pub kind: String,
    /// `labeled` (by the workload) or `inferred` (from the trace).
    pub origin: String,
    /// How the steps were found, in words.
    pub how: String,
    pub pid: u32,
    /// Steps in scope.
    pub count: usize,
    /// Nearest-rank percentiles of the steps' durations.
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub max_ns: i64,
    pub slow: Vec<SlowSteps>,
    /// SQL listing the series' steps (labeled) or the boundary calls they were inferred from.
    pub sql: String,
    /// The steps, in order (omitted from answers that only summarize).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
}

impl StepSeries {
    /// A series as found, before [`summarize`] fills its figures for a window.
    fn found(kind: String, origin: &str, how: String, pid: u32, sql: String, steps: Vec<Step>) -> StepSeries {
        StepSeries {
            kind,
            origin: origin.into(),
            how,
            pid,
            count: 0,
            p50_ns: 0,
            p90_ns: 0,
            max_ns: 0,
            slow: Vec::new(),
            sql,
            steps,
        }
    }
}

/// Every step series in scope.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct StepReport {
    pub series: Vec<StepSeries>,
    /// Why there are no steps, or what inference could not decide.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl StepReport {
    /// The slow ranges of every series, most excess first.
    pub fn slow_ranges(&self) -> Vec<(&StepSeries, &SlowSteps)> {
        let mut v: Vec<_> = self.series.iter().flat_map(|s| s.slow.iter().map(move |r| (s, r))).collect();
        v.sort_by_key(|(_, r)| std::cmp::Reverse(r.excess_ns));
        v
    }
}

/// The steps of the trace (of `pid`) that start in `window`: the workload's labels where it sent
/// any, else inferred (over the whole trace, so step numbers do not depend on the window); with
/// their slow ranges (`why` left empty: `explain` fills it).
pub fn find_steps(store: &dyn TraceStore, window: TimeWindow, pid: Option<u32>) -> Result<StepReport, AnalysisError> {
    Ok(report_of(scanned_series(store, pid)?, window))
}

/// [`find_steps`] over events already read: `labels` (source STEP) and `calls` (GPU calls); when
/// the labels are empty, `calls` must be the whole trace's (of a process), which inferred step
/// numbers count from. What `explain` passes, saving the scans.
pub fn steps_of(labels: &[SlimEvent], calls: &[Call], window: TimeWindow) -> StepReport {
    let ops = boundary_ops();
    let Ok(all) = series_from::<std::convert::Infallible, _>(labels, || {
        Ok(calls.iter().filter(|c| ops.contains(&c.op)).map(|c| (c.tid, c.ts, c.ts + c.dur, c.op, c.pid)))
    });
    report_of(all, window)
}

/// A call that can end a step: `(tid, start, end, op, pid)`.
type Boundary = (u32, i64, i64, OpCode, u32);

/// What a read of steps gives: a series per (process, kind), or why there is none.
type FoundSeries = Vec<Result<StepSeries, String>>;

/// The series the workload labeled in `labels`, else the one inferred from `boundaries()` (its
/// synchronizing calls and collectives), or why none was.
fn series_from<E, B: IntoIterator<Item = Boundary>>(
    labels: &[SlimEvent],
    boundaries: impl FnOnce() -> Result<B, E>,
) -> Result<FoundSeries, E> {
    let labeled = labeled_series(labels);
    if labeled.is_empty() {
        Ok(vec![infer_series(boundaries()?)])
    } else {
        Ok(labeled.into_iter().map(Ok).collect())
    }
}

/// [`series_from`] of the whole trace (of `pid`), read from the store in one pass over the rows of
/// [`codes::step_ops`]: the labels and the calls that can end a step, which a finished trace packs
/// apart from the other calls.
fn scanned_series(store: &dyn TraceStore, pid: Option<u32>) -> Result<FoundSeries, AnalysisError> {
    let step = codes::Source::Step.code();
    let ops = boundary_ops();
    // the labels' and the boundaries' ops only: a finished trace packs them apart, and DuckDB
    // filters them in its scan (a window's steps read these rows of the whole trace, not every call)
    let filter = EventFilter { pid, ops: Some(codes::step_ops()), ..Default::default() };
    let (mut labels, mut boundaries) = (Vec::new(), Vec::new());
    store.scan_slim(&filter, &mut |e| {
        if e.op.source == step {
            labels.push(e);
        } else if ops.contains(&e.op) {
            boundaries.push((e.tid, e.ts, e.ts + e.dur, e.op, e.pid));
        }
    })?;
    series_from(&labels, || Ok::<_, AnalysisError>(boundaries))
}

/// What a scope's slowness is judged by when its window is a step range (`--steps`): the whole
/// trace, since the range's steps are slow against the others; `None` (the scope itself) otherwise.
pub fn judged_by(steps: Option<&str>) -> Option<TimeWindow> {
    steps.map(|_| TimeWindow::ALL)
}

impl StepReport {
    /// Put back each series' steps (that start in `window`; `explain` keeps summaries only), at most
    /// `limit` per series; whether a list was cut.
    pub fn list_steps(
        &mut self,
        store: &dyn TraceStore,
        window: TimeWindow,
        pid: Option<u32>,
        limit: usize,
    ) -> Result<bool, AnalysisError> {
        let mut listed = find_steps(store, window, pid)?.series;
        let mut cut = false;
        for s in &mut self.series {
            if let Some(l) = listed.iter_mut().find(|l| l.pid == s.pid && l.kind == s.kind) {
                cut |= l.steps.len() > limit;
                l.steps.truncate(limit);
                s.steps = std::mem::take(&mut l.steps);
            }
        }
        Ok(cut)
    }
}

/// The series (or why there is none) kept to the steps that start in `window`, summarized.
fn report_of(all: FoundSeries, window: TimeWindow) -> StepReport {
    let mut report = StepReport::default();
    for s in all {
        let mut s = match s {
            Ok(s) => s,
            Err(why) => {
                report.notes.push(why);
                continue;
            }
        };
        s.steps.retain(|st| window.contains(st.start_ns));
        if s.steps.is_empty() {
            continue;
        }
        summarize(&mut s);
        report.series.push(s);
    }
    if report.series.is_empty() && report.notes.is_empty() {
        report.notes.push("no step starts in this window".into());
    }
    report
}

/// The window of a step range: `812`, `80-119`, or with a kind, `epoch:3`, `task:2-5`; over every
/// process's series of that kind (all ranks' step 812 together) unless `pid` is given.
pub fn step_window(store: &dyn TraceStore, spec: &str, pid: Option<u32>) -> Result<TimeWindow, AnalysisError> {
    let bad = |why: &str| AnalysisError::BadArgument(format!("steps `{spec}`: {why}"));
    let (kind, range) = match spec.split_once(':') {
        Some((k, r)) => (k.trim(), r.trim()),
        None => ("step", spec.trim()),
    };
    if codes::label_op(kind).is_none() {
        return Err(bad("the kind is step, epoch or task"));
    }
    let (first, last) = match range.split_once('-') {
        Some((a, b)) => (a.trim().parse::<i64>(), b.trim().parse::<i64>()),
        None => (range.parse::<i64>(), range.parse::<i64>()),
    };
    let (Ok(first), Ok(last)) = (first, last) else {
        return Err(bad("give a number or a range, e.g. 812 or 80-119"));
    };
    if first > last {
        return Err(bad("the range ends before it starts"));
    }
    let series: Vec<StepSeries> =
        scanned_series(store, pid)?.into_iter().collect::<Result<_, _>>().map_err(|why| bad(&why))?;
    let picked: Vec<&Step> = series
        .iter()
        .filter(|s| s.kind == kind)
        .flat_map(|s| &s.steps)
        .filter(|st| (first..=last).contains(&st.index))
        .collect();
    let (Some(from), Some(to)) = (picked.iter().map(|s| s.start_ns).min(), picked.iter().map(|s| s.end_ns()).max())
    else {
        let have: Vec<String> = series
            .iter()
            .filter(|s| s.kind == kind && !s.steps.is_empty())
            .map(|s| {
                format!("pid {}: {}-{}", s.pid, s.steps[0].index, s.steps.iter().map(|x| x.index).max().unwrap_or(0))
            })
            .collect();
        return Err(bad(&if have.is_empty() {
            format!("the trace has no {kind}s")
        } else {
            format!("no such {kind} (the trace has {})", have.join(", "))
        }));
    };
    Ok(TimeWindow { from_ns: Some(from), to_ns: Some(to) })
}

/// The series the workload labeled (`labels`: events of source STEP), per (process, kind), steps in
/// start order.
fn labeled_series(labels: &[SlimEvent]) -> Vec<StepSeries> {
    let mut by: BTreeMap<(u32, OpCode), Vec<Step>> = BTreeMap::new();
    for e in labels {
        by.entry((e.pid, e.op)).or_default().push(Step {
            index: e.arg0,
            pid: e.pid,
            tid: e.tid,
            start_ns: e.ts,
            dur_ns: e.dur,
        });
    }
    by.into_iter()
        .map(|((pid, op), mut steps)| {
            steps.sort_by_key(|s| (s.start_ns, s.index));
            let kind = op.name().into_owned();
            let sql = format!(
                "SELECT arg0 AS {kind}, tid, timestamp AS start_ns, duration AS dur_ns FROM events \
                 WHERE {} AND pid = {pid} ORDER BY timestamp",
                op.sql("")
            );
            StepSeries::found(kind, "labeled", format!("labeled by the workload (pid {pid})"), pid, sql, steps)
        })
        .collect()
}

/// The ops that can end a step: calls that wait for the GPU, and collectives.
fn boundary_ops() -> Vec<OpCode> {
    OPS.iter().map(|e| OpCode::new(e.0, e.1)).filter(|&c| codes::is_step_boundary(c)).collect()
}

/// Steps inferred from the thread with the most synchronizing calls and collectives (`boundaries`:
/// those calls): the smallest period of its calls whose ops repeat and whose spacing repeats; or
/// why none was found.
fn infer_series(boundaries: impl IntoIterator<Item = Boundary>) -> Result<StepSeries, String> {
    let ops = boundary_ops();
    let mut by_tid: BTreeMap<u32, Vec<(i64, i64, OpCode, u32)>> = BTreeMap::new();
    for (tid, start, end, op, pid) in boundaries {
        by_tid.entry(tid).or_default().push((start, end, op, pid));
    }
    // top-level calls only: a runtime call's own driver call inside it is the same wait
    let mut top_level: BTreeMap<u32, Vec<(i64, OpCode, u32)>> = BTreeMap::new();
    for (tid, mut v) in by_tid {
        v.sort_by_key(|c| (c.0, std::cmp::Reverse(c.1)));
        let mut open_until = i64::MIN;
        let kept = top_level.entry(tid).or_default();
        for (start, end, op, pid) in v {
            if start >= open_until || end > open_until {
                kept.push((end, op, pid));
                open_until = open_until.max(end);
            }
        }
        kept.sort_unstable();
    }
    let Some((&tid, calls)) = top_level.iter().max_by_key(|(tid, v)| (v.len(), std::cmp::Reverse(**tid))) else {
        return Err("no steps: the workload labeled none, and the trace has no synchronizing call or \
                    collective to infer them from"
            .into());
    };
    infer_from(calls).map(|found| {
        let pid = calls[0].2;
        let op_names: Vec<String> = {
            let mut v: Vec<String> =
                calls[found.phase..].iter().step_by(found.period).map(|c| c.1.name().into_owned()).collect();
            v.sort();
            v.dedup();
            v
        };
        let which = match found.period {
            1 => "every synchronizing call or collective".to_string(),
            k => format!("call {} of every {k} synchronizing calls or collectives", found.phase + 1),
        };
        let codes: Vec<String> = ops.iter().map(|c| format!("({}, {})", c.source, c.op)).collect();
        let how = format!(
            "inferred: {which} of thread {tid} ({}) ends a step; the calls repeat with period {} in {:.0}% of places",
            op_names.join(", "),
            found.period,
            found.regular * 100.0
        );
        let sql = format!(
            "SELECT timestamp + duration AS end_ns, source, op FROM events WHERE tid = {tid} \
             AND (source, op) IN ({}) ORDER BY end_ns",
            codes.join(", ")
        );
        let steps = found
            .boundaries
            .windows(2)
            .enumerate()
            .map(|(i, w)| Step { index: i as i64, pid, tid, start_ns: w[0], dur_ns: w[1] - w[0] })
            .collect();
        StepSeries::found("step".into(), "inferred", how, pid, sql, steps)
    })
}

/// What period inference found.
#[derive(Debug, PartialEq)]
struct Period {
    period: usize,
    phase: usize,
    /// Fraction of places where the ops repeat.
    regular: f64,
    /// The ends of the calls that end steps.
    boundaries: Vec<i64>,
}

/// The period `k` (calls per step) of a thread's synchronizing calls. Each `k` is scored by how
/// much the spacing changes from one period to the next: per place in the period, the median
/// change of its interval, summed over the places, over the typical period (about 1 for intervals
/// that follow no period, a fraction for a loop, more than 1 where `k` cuts a period in two).
/// - Ops that differ (a copy-back and a synchronize) say the period themselves: the smallest `k`
///   at which they repeat in 90% of places, unless its spacing is no better than chance
///   ([`NO_PERIOD`]).
/// - One op throughout repeats at every `k`: the spacing decides, the smallest `k` scoring within
///   half again of the best, and under [`LOOSE_PERIOD`].
///
/// The boundary is the place followed by the longest typical interval (a heuristic: any place
/// gives steps of the same length, so a slow stretch shows in whichever step holds it).
fn infer_from(calls: &[(i64, OpCode, u32)]) -> Result<Period, String> {
    let n = calls.len();
    if n < MIN_CANDIDATES {
        return Err(format!(
            "no steps: the workload labeled none, and its busiest thread made {n} synchronizing calls or \
             collectives (inference needs {MIN_CANDIDATES})"
        ));
    }
    let gaps: Vec<i64> = calls.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let median = |mut v: Vec<i64>| -> i64 {
        v.sort_unstable();
        nearest_rank(&v, 500).unwrap_or(0)
    };
    // (k, share of places whose op repeats, spacing score, each place's typical interval)
    let mut candidates: Vec<(usize, f64, f64, Vec<i64>)> = Vec::new();
    for k in 1..=MAX_PERIOD.min(n / 4) {
        let same = (0..n - k).filter(|&i| calls[i].1 == calls[i + k].1).count();
        let regular = same as f64 / (n - k) as f64;
        if regular < 0.9 || gaps.len() <= 2 * k {
            continue;
        }
        let typical: Vec<i64> = (0..k).map(|p| median(gaps.iter().skip(p).step_by(k).copied().collect())).collect();
        let drift: i64 = (0..k)
            .map(|p| {
                let at: Vec<i64> = gaps.iter().skip(p).step_by(k).copied().collect();
                median(at.windows(2).map(|w| (w[1] - w[0]).abs()).collect())
            })
            .sum();
        let score = drift as f64 / (typical.iter().sum::<i64>() + JITTER_NS * k as i64).max(1) as f64;
        candidates.push((k, regular, score, typical));
    }
    let one_op = calls.iter().all(|c| c.1 == calls[0].1);
    let best = candidates.iter().map(|c| c.2).fold(f64::INFINITY, f64::min);
    let chosen = if one_op {
        candidates.iter().find(|c| c.2 <= LOOSE_PERIOD && c.2 <= best * 1.5)
    } else {
        candidates.iter().find(|c| c.2 <= NO_PERIOD)
    };
    if let Some((k, regular, _, typical)) = chosen {
        let phase = (0..*k).max_by_key(|&p| (typical[p], std::cmp::Reverse(p))).unwrap_or(0);
        let boundaries: Vec<i64> = calls[phase..].iter().step_by(*k).map(|c| c.0).collect();
        if boundaries.len() >= 3 {
            return Ok(Period { period: *k, phase, regular: *regular, boundaries });
        }
    }
    Err(format!(
        "no steps: the workload labeled none, and the {n} synchronizing calls or collectives of its busiest \
         thread repeat at no regular period (up to {MAX_PERIOD} per step)"
    ))
}

/// Count, percentiles and slow ranges of a series (steps in start order).
fn summarize(s: &mut StepSeries) {
    let mut durs: Vec<i64> = s.steps.iter().map(|x| x.dur_ns).collect();
    durs.sort_unstable();
    s.count = durs.len();
    s.p50_ns = nearest_rank(&durs, 500).unwrap_or(0);
    s.p90_ns = nearest_rank(&durs, 900).unwrap_or(0);
    s.max_ns = durs.last().copied().unwrap_or(0);
    s.slow = slow_ranges(&s.steps, s.p50_ns, &s.kind);
}

/// The shortest slow step of a series whose median step is `baseline`.
pub fn slow_threshold(baseline: i64) -> i64 {
    causeway_model::thresholds::slow_step_threshold(baseline)
}

/// Runs of slow steps (a normal step between two slow ones joins them), most excess time first.
fn slow_ranges(steps: &[Step], baseline: i64, kind: &str) -> Vec<SlowSteps> {
    if steps.len() < 5 || baseline <= 0 {
        return Vec::new();
    }
    let threshold = slow_threshold(baseline);
    let slow: Vec<usize> = (0..steps.len()).filter(|&i| steps[i].dur_ns >= threshold).collect();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in slow {
        match runs.last_mut() {
            Some((_, last)) if i - *last <= MERGE_GAP + 1 => *last = i,
            _ => runs.push((i, i)),
        }
    }
    let mut out: Vec<SlowSteps> = runs
        .into_iter()
        .map(|(a, b)| {
            let range = &steps[a..=b];
            let mut durs: Vec<i64> = range.iter().map(|s| s.dur_ns).collect();
            durs.sort_unstable();
            let median_ns = nearest_rank(&durs, 500).unwrap_or(0);
            let (first, last) = (range[0].index, range[range.len() - 1].index);
            let name = if first == last { format!("{kind} {first}") } else { format!("{kind}s {first}-{last}") };
            let verb = if range.len() == 1 { "took" } else { "took a median" };
            SlowSteps {
                first,
                last,
                steps: range.len(),
                median_ns,
                baseline_ns: baseline,
                excess_ns: range.iter().map(|s| (s.dur_ns - baseline).max(0)).sum(),
                start_ns: range[0].start_ns,
                end_ns: range.iter().map(Step::end_ns).max().unwrap_or(0),
                summary: format!("{name} {verb} {} instead of {}", fmt_ns(median_ns), fmt_ns(baseline)),
                why: None,
                chain_key: None,
                gpu_idle_ns: None,
                cost: None,
            }
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.excess_ns));
    out.truncate(MAX_SLOW_RANGES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::op;

    fn steps(durs: &[i64]) -> Vec<Step> {
        let mut t = 0;
        durs.iter()
            .enumerate()
            .map(|(i, &d)| {
                let s = Step { index: i as i64, pid: 1, tid: 1, start_ns: t, dur_ns: d };
                t += d;
                s
            })
            .collect()
    }

    #[test]
    fn a_run_of_slow_steps_is_one_range_against_the_median() {
        let ms = 1_000_000;
        let mut durs = vec![90 * ms; 100];
        for d in &mut durs[40..60] {
            *d = 380 * ms;
        }
        durs[50] = 95 * ms; // one normal step inside the run does not split it
        durs[80] = 200 * ms; // a lone slow step elsewhere
        let r = slow_ranges(&steps(&durs), 90 * ms, "step");
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].first, r[0].last, r[0].steps, r[0].median_ns), (40, 59, 20, 380 * ms));
        assert_eq!(r[0].excess_ns, 19 * 290 * ms + 5 * ms);
        assert_eq!(r[0].summary, "steps 40-59 took a median 380.00 ms instead of 90.00 ms");
        assert_eq!((r[1].first, r[1].last), (80, 80));
        assert_eq!(r[1].summary, "step 80 took 200.00 ms instead of 90.00 ms");
        // nothing slow, nothing reported
        assert!(slow_ranges(&steps(&[90 * ms; 50]), 90 * ms, "step").is_empty());
    }

    #[test]
    fn the_period_of_a_loops_syncs_gives_its_steps() {
        // each step: a copy-back sync 20 ms after the step starts, a stream sync 70 ms later
        let ms = 1_000_000;
        let mut calls = Vec::new();
        let mut t = 0;
        for i in 0..30 {
            let slow = if (10..13).contains(&i) { 200 * ms } else { 0 };
            calls.push((t + 20 * ms, op::CUDA_MEMCPY, 7));
            calls.push((t + 90 * ms + slow, op::CUDA_STREAM_SYNC, 7));
            t += 100 * ms + slow;
        }
        let p = infer_from(&calls).unwrap();
        assert_eq!((p.period, p.phase), (2, 0), "the boundary is the call followed by the longest interval");
        assert_eq!(p.boundaries.len(), 30);
        let durs: Vec<i64> = p.boundaries.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(durs[0], 100 * ms);
        assert_eq!(durs.iter().filter(|&&d| d > 250 * ms).count(), 3, "{durs:?}");
        // one op twice a step (a short and a long interval): the spacing says the period is 2; one
        // op once a step, jittery: 1
        let twice: Vec<_> = (0..40i64)
            .map(|i| ((i / 2) * 100 * ms + if i % 2 == 0 { 5 * ms } else { 95 * ms }, op::CUDA_STREAM_SYNC, 7))
            .collect();
        assert_eq!(infer_from(&twice).unwrap().period, 2);
        let once: Vec<_> = (0..40i64).map(|i| (i * 100 * ms + (i * 7919 % 13) * ms, op::CUDA_STREAM_SYNC, 7)).collect();
        assert_eq!(infer_from(&once).unwrap().period, 1);
        // too few calls, or no period at all: said why
        assert!(infer_from(&calls[..5]).unwrap_err().contains("needs 8"));
        let noise: Vec<_> = (0..40).map(|i: i64| ((i * i * 7919) % 1000 * ms + i, op::CUDA_STREAM_SYNC, 7)).collect();
        let mut noise = noise;
        noise.sort();
        assert!(infer_from(&noise).unwrap_err().contains("no regular period"));
    }
}
