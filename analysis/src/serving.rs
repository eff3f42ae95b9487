//! A serving engine's own figures, from the metrics scraped while tracing (`serving_samples`):
//! per scrape interval, each latency's requests, exact mean (the interval's sum over its count)
//! and bucket bounds (the p50 / p99 of a histogram are the smallest bucket bound holding that
//! nearest rank: an upper bound, said so), the queue and the KV cache; each latency's baseline
//! (the median interval mean) and its spikes, which [`crate::explain`] ties to the per-call
//! causes in the same window (`explain/serving.rs`).
//!
//! A spike is a run of intervals whose mean is at least [`SPIKE_RATIO`] times the baseline and
//! [`SPIKE_MIN_S`] above it, together with the intervals in front and between that served
//! nothing while its requests waited (a stalled engine serves nothing, so its latency shows only
//! when it serves again: the stall is the front of the spike; see [`find_spikes`]). What explains
//! a spike is the time that hurt (`Spike::waited`): the intervals where requests waited and none
//! was served, never the engine's idle time beside them.

use std::collections::BTreeMap;

use causeway_model::serving::{LatencyKind, LatencyMetric, ServingEngine};
use causeway_model::time::TimeWindow;
use causeway_store::TraceStore;

use crate::engine_steps::EngineSteps;
use crate::AnalysisError;

mod scrapes;

use scrapes::{bound_of_rank, by_engine, latencies_held, Interval, Scrapes};
pub use scrapes::{serving_series, ServingSeries};

use causeway_model::thresholds::{latency_baseline_s, spike_threshold_s};
pub use causeway_model::thresholds::{SPIKE_MIN_S, SPIKE_RATIO};

/// Every serving engine of a trace scope.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ServingReport {
    pub engines: Vec<EngineServing>,
    /// The engine's thread and its steps, prefill-heavy or decode-heavy (`None`: no GPU launches
    /// in scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_steps: Option<EngineSteps>,
    /// The rule a spike follows (when the scope has a serving engine).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub spike_rule: String,
    pub notes: Vec<String>,
}

/// One engine's endpoint and what it said.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct EngineServing {
    /// `vllm`, `sglang`, `tgi` or `triton`.
    pub engine: String,
    pub title: String,
    /// The process that served the metrics.
    pub pid: u32,
    /// Where they were read (from `attachments`; empty if the trace does not say).
    pub endpoint: String,
    pub scrapes: u64,
    pub first_ns: i64,
    pub last_ns: i64,
    pub latencies: Vec<LatencyFigures>,
    /// The most requests running / waiting at one scrape, and the most KV cache in use (0..1).
    pub running_max: Option<f64>,
    pub waiting_max: Option<f64>,
    pub kv_cache_max: Option<f64>,
    /// The spikes, worst first.
    pub spikes: Vec<Spike>,
    pub summary: String,
}

/// One latency of an engine over the scope.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct LatencyFigures {
    pub kind: LatencyKind,
    /// The metric family (or sum counter) it is read from.
    pub metric: String,
    /// Requests it measured in scope.
    pub requests: u64,
    /// Their exact mean, seconds.
    pub mean_s: f64,
    /// The median of the interval means, seconds (`None`: fewer than [`causeway_model::thresholds::MIN_INTERVALS`]
    /// intervals with requests).
    pub baseline_s: Option<f64>,
    /// Scrape intervals with requests.
    pub intervals: u64,
    /// The scope's p99 as a bucket bound, seconds (`None`: not a histogram, or beyond its last
    /// finite bound).
    pub p99_le_s: Option<f64>,
}

/// A latency spike and what the trace says about its window.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Spike {
    pub kind: LatencyKind,
    pub metric: String,
    /// The intervals of the spike (the stalled ones in front included).
    pub from_ns: i64,
    pub to_ns: i64,
    /// The window explained: from the spike, or from as far back as its first served requests
    /// may have waited if that is earlier, and one scrape interval more.
    pub cause_from_ns: i64,
    pub baseline_s: f64,
    /// The worst interval's mean, and its p99 as a bucket bound (`None`: beyond the last bound).
    pub peak_mean_s: f64,
    pub peak_p99_le_s: Option<f64>,
    /// Requests served in the spike's intervals.
    pub requests: u64,
    /// Time in the spike when requests waited and none was served.
    pub stalled_ns: i64,
    /// The time that hurt, what explains the spike: its intervals where requests waited and none
    /// was served; without such an interval, its high intervals the engine said requests waited
    /// in; empty when the scrapes cannot tell (`explain/serving.rs` then says so).
    #[serde(skip)]
    #[schemars(skip)]
    pub(crate) waited: Vec<(i64, i64)>,
    /// The most requests waiting at a scrape of the spike.
    pub waiting_max: Option<f64>,
    /// The cause found by `explain` in the window (its top chain), if explained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_key: Option<String>,
    /// The engine's steps in the window against their baselines, if its launches are traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<String>,
    /// With a device timeline: how long the GPU sat idle from the cause's start to the spike's end
    /// (gaps over 1 ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_idle_ns: Option<i64>,
    /// What the spike cost in GPU time ([`crate::cost`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::GpuCost>,
    pub summary: String,
    /// SQL that recomputes the spike's interval means from the stored samples.
    pub sql: String,
}

/// The serving report of a scope (the spikes not yet explained: [`crate::explain`] does that).
pub fn serving_report(store: &dyn TraceStore, window: TimeWindow) -> Result<ServingReport, AnalysisError> {
    let samples = store.serving_samples(&window)?;
    let mut report = ServingReport::default();
    if samples.is_empty() {
        report.notes.push(
            "no serving engine metrics in this scope (trace a vLLM, SGLang, TGI or Triton process, or give \
             --serving-url)"
                .into(),
        );
        return Ok(report);
    }
    report.spike_rule = format!(
        "a spike: scrape intervals whose mean is >= {SPIKE_RATIO}x the latency's baseline (the median interval \
         mean) and >= {} ms above it, with the intervals in front and between that served nothing while its \
         requests waited (the engine said so, or they lie within its worst wait)",
        SPIKE_MIN_S * 1e3
    );
    let endpoints: BTreeMap<u32, String> =
        store.attachments()?.into_iter().filter(|a| a.kind == "serving").map(|a| (a.pid, a.path)).collect();
    for ((name, pid), scrapes) in by_engine(&samples) {
        let Some(engine) = ServingEngine::named(&name) else {
            report.notes.push(format!("pid {pid}: metrics of an unknown engine `{name}` left out"));
            continue;
        };
        report.engines.push(engine_figures(engine, pid, endpoints.get(&pid).cloned().unwrap_or_default(), &scrapes));
    }
    Ok(report)
}

fn engine_figures(engine: &'static ServingEngine, pid: u32, endpoint: String, scrapes: &Scrapes) -> EngineServing {
    let times = &scrapes.times;
    let mut latencies = Vec::new();
    let mut spikes = Vec::new();
    for (metric, intervals) in latencies_held(engine, scrapes) {
        let (figures, found) = latency_figures(metric, &intervals, scrapes);
        spikes.extend(found.into_iter().map(|s| spike_with_sql(s, pid, metric)));
        latencies.push(figures);
    }
    // worst first: the most times its own baseline (a scale every latency shares)
    spikes.sort_by(|a, b| spike_weight(b).total_cmp(&spike_weight(a)));
    let summary = engine_summary(engine, pid, &latencies, &spikes);
    EngineServing {
        engine: engine.name.to_string(),
        title: engine.title.to_string(),
        pid,
        endpoint,
        scrapes: times.len() as u64,
        first_ns: times.first().copied().unwrap_or(0),
        last_ns: times.last().copied().unwrap_or(0),
        latencies,
        running_max: scrapes.max_gauge(engine.running),
        waiting_max: scrapes.max_gauge(engine.waiting),
        kv_cache_max: scrapes.max_gauge(engine.kv_cache),
        spikes,
        summary,
    }
}

/// A latency's figures over the scope and its spikes (without SQL and causes yet).
fn latency_figures(metric: &LatencyMetric, intervals: &[Interval], scrapes: &Scrapes) -> (LatencyFigures, Vec<Spike>) {
    let times = &scrapes.times;
    let served: Vec<&Interval> = intervals.iter().filter(|i| i.requests > 0).collect();
    let requests: u64 = served.iter().map(|i| i.requests).sum();
    let total_s: f64 = served.iter().map(|i| i.mean_s.unwrap_or(0.0) * i.requests as f64).sum();
    let mut means: Vec<f64> = served.iter().filter_map(|i| i.mean_s).collect();
    means.sort_by(f64::total_cmp);
    let baseline_s = latency_baseline_s(&means);
    // the scope's p99 from its first and last scrape's buckets
    let p99_le_s = metric.bucket_metric().and_then(|b| {
        let first = times.iter().find_map(|t| scrapes.buckets.get(t).and_then(|m| m.get(&b)))?;
        let last = times.iter().rev().find_map(|t| scrapes.buckets.get(t).and_then(|m| m.get(&b)))?;
        bound_of_rank(first, last, requests, 0.99).map(|le| le * metric.seconds_per_unit)
    });
    let figures = LatencyFigures {
        kind: metric.kind,
        metric: metric.family.to_string(),
        requests,
        mean_s: if requests > 0 { total_s / requests as f64 } else { 0.0 },
        baseline_s,
        intervals: served.len() as u64,
        p99_le_s,
    };
    let spikes = match baseline_s {
        Some(b) => find_spikes(metric, intervals, b),
        None => Vec::new(),
    };
    (figures, spikes)
}

/// The spikes of one latency against its baseline: runs of high intervals (those between them
/// serving nothing), each with the intervals in front that served nothing while its requests
/// waited: those where the engine said requests were waiting, and those within the reach of
/// the run's worst wait (its p99 bound, else twice its mean: a stalled engine may stop updating
/// its gauges too).
fn find_spikes(metric: &LatencyMetric, intervals: &[Interval], baseline_s: f64) -> Vec<Spike> {
    let threshold = spike_threshold_s(baseline_s);
    let high = |i: &Interval| i.mean_s.is_some_and(|m| m >= threshold);
    let idle = |i: &Interval| i.requests == 0;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (k, iv) in intervals.iter().enumerate() {
        if !high(iv) {
            continue;
        }
        match runs.last_mut() {
            Some((_, last)) if intervals[*last + 1..k].iter().all(idle) => *last = k,
            _ => runs.push((k, k)),
        }
    }
    let mut spikes = Vec::new();
    let mut floor = 0;
    for (first_high, last) in runs {
        let run_high = &intervals[first_high..=last];
        let peak = run_high
            .iter()
            .filter(|x| high(x))
            .max_by(|a, b| a.mean_s.unwrap_or(0.0).total_cmp(&b.mean_s.unwrap_or(0.0)))
            .expect("a run holds a high interval");
        let first_served = &intervals[first_high];
        let reach_s = first_served.p99_le_s.unwrap_or(2.0 * first_served.mean_s.unwrap_or(0.0));
        let reach_ns = (reach_s * 1e9) as i64;
        let mut first = first_high;
        while first > floor && idle(&intervals[first - 1]) {
            let before = &intervals[first - 1];
            if before.waiting.is_some_and(|w| w > 0.0) || first_served.to_ns - before.from_ns <= reach_ns {
                first -= 1;
            } else {
                break;
            }
        }
        floor = last + 1;
        let run = &intervals[first..=last];
        let head = &run[0];
        let stalled: Vec<(i64, i64)> = run.iter().filter(|x| idle(x)).map(|x| (x.from_ns, x.to_ns)).collect();
        let waited = if stalled.is_empty() {
            run.iter().filter(|x| high(x) && x.waiting.is_some_and(|w| w > 0.0)).map(|x| (x.from_ns, x.to_ns)).collect()
        } else {
            stalled
        };
        spikes.push(Spike {
            kind: metric.kind,
            metric: metric.family.to_string(),
            from_ns: head.from_ns,
            to_ns: run[run.len() - 1].to_ns,
            // from where the first served requests may have arrived (a stall that began before the
            // intervals taken in is the cause), and one interval more for the calls before it
            cause_from_ns: head.from_ns.min(first_served.to_ns - reach_ns) - (head.to_ns - head.from_ns),
            baseline_s,
            peak_mean_s: peak.mean_s.unwrap_or(0.0),
            peak_p99_le_s: peak.p99_le_s,
            requests: run.iter().map(|x| x.requests).sum(),
            stalled_ns: run.iter().filter(|x| idle(x)).map(|x| x.to_ns - x.from_ns).sum(),
            waited,
            waiting_max: run.iter().filter_map(|x| x.waiting).reduce(f64::max).filter(|w| *w > 0.0),
            why: None,
            chain_key: None,
            steps: None,
            gpu_idle_ns: None,
            cost: None,
            summary: String::new(),
            sql: String::new(),
        });
    }
    spikes
}

/// How bad a spike is: how many times its baseline its worst interval's mean is.
pub(crate) fn spike_weight(s: &Spike) -> f64 {
    s.peak_mean_s / s.baseline_s.max(1e-9)
}

/// The spike worded and given the SQL of its interval means.
fn spike_with_sql(mut s: Spike, pid: u32, metric: &LatencyMetric) -> Spike {
    let (sum, count) = (metric.sum_metric(), metric.count_metric());
    s.sql = format!(
        "WITH per AS (SELECT timestamp, sum(CASE WHEN metric = '{sum}' THEN value END) AS s, \
         sum(CASE WHEN metric = '{count}' THEN value END) AS n FROM serving_samples WHERE pid = {pid} \
         AND metric IN ('{sum}', '{count}') AND timestamp BETWEEN {} AND {} GROUP BY timestamp) \
         SELECT timestamp, n - lag(n) OVER (ORDER BY timestamp) AS requests, \
         (s - lag(s) OVER (ORDER BY timestamp)) / nullif(n - lag(n) OVER (ORDER BY timestamp), 0) * {} AS mean_s \
         FROM per ORDER BY timestamp",
        s.from_ns, s.to_ns, metric.seconds_per_unit
    );
    s.summary = spike_words(&s);
    s
}

/// "TTFT went from 52 ms to 1.31 s (p99 <= 2.5 s) for 40 requests over +3.2 s..+5.1 s, 1.2 s of
/// it with 31 requests waiting and none served".
pub(crate) fn spike_words(s: &Spike) -> String {
    let p99 = match s.peak_p99_le_s {
        Some(b) => format!(" (p99 <= {})", secs(b)),
        None if s.metric.ends_with("_seconds") || s.metric.starts_with("tgi_") => {
            " (p99 beyond the last bucket)".into()
        }
        None => String::new(),
    };
    let mut w = format!(
        "{} went from {} to {}{p99} for {} request(s) over {} of scrapes",
        s.kind.label(),
        secs(s.baseline_s),
        secs(s.peak_mean_s),
        s.requests,
        causeway_model::time::fmt_ns(s.to_ns - s.from_ns)
    );
    if s.stalled_ns > 0 {
        w.push_str(&format!(
            ", {} of it serving none{}",
            causeway_model::time::fmt_ns(s.stalled_ns),
            s.waiting_max.map(|n| format!(" with up to {n:.0} request(s) waiting")).unwrap_or_default()
        ));
    }
    if let Some(steps) = &s.steps {
        w.push_str(&format!("; {steps}"));
    }
    if let Some(why) = &s.why {
        w.push_str(&format!("; in that window: {why}"));
    }
    w
}

fn engine_summary(engine: &ServingEngine, pid: u32, latencies: &[LatencyFigures], spikes: &[Spike]) -> String {
    let figures: Vec<String> = latencies
        .iter()
        .map(|l| match l.baseline_s {
            Some(b) => format!("{} baseline {} over {} request(s)", l.kind.label(), secs(b), l.requests),
            None => format!(
                "{} mean {} over {} request(s) (too few intervals for a baseline)",
                l.kind.label(),
                secs(l.mean_s),
                l.requests
            ),
        })
        .collect();
    let spikes = match spikes.len() {
        0 => "no spike".to_string(),
        1 => "1 spike".to_string(),
        n => format!("{n} spikes"),
    };
    format!("{} (pid {pid}): {}; {spikes}", engine.title, figures.join(", "))
}

/// Seconds worded: "52 ms", "1.31 s".
pub(crate) fn secs(s: f64) -> String {
    causeway_model::time::fmt_ns((s * 1e9).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::ServingSample;

    fn sample(ts: i64, metric: &str, le: Option<f64>, value: f64) -> ServingSample {
        ServingSample {
            ts_ns: ts,
            pid: 9,
            engine: "vllm".into(),
            metric: metric.into(),
            labels: "{}".into(),
            le,
            value,
        }
    }

    /// Ten one-second scrapes: 10 requests a second at 50 ms, then a stall (requests waiting,
    /// none served) for two scrapes, then 20 requests at 1.2 s, then back to normal.
    fn scrapes() -> Vec<ServingSample> {
        let ttft = "vllm:time_to_first_token_seconds";
        let (mut n, mut sum) = (0.0, 0.0);
        let mut b = [0.0f64; 3]; // le 0.1, 1.0, 2.5
        let mut out = Vec::new();
        for i in 0..10i64 {
            let ts = 1_000_000_000 * (i + 1);
            let (served, each, waiting) = match i {
                4 | 5 => (0.0, 0.0, 15.0),
                6 => (20.0, 1.2, 2.0),
                _ => (10.0, 0.05, 0.0),
            };
            if i > 0 {
                n += served;
                sum += served * each;
                for (k, le) in [0.1, 1.0, 2.5].iter().enumerate() {
                    if each <= *le {
                        b[k] += served;
                    }
                }
            }
            out.push(sample(ts, &format!("{ttft}_count"), None, n));
            out.push(sample(ts, &format!("{ttft}_sum"), None, sum));
            for (k, le) in [0.1, 1.0, 2.5].iter().enumerate() {
                out.push(sample(ts, &format!("{ttft}_bucket"), Some(*le), b[k]));
            }
            out.push(sample(ts, "vllm:num_requests_waiting", None, waiting));
        }
        out
    }

    #[test]
    fn a_stall_and_the_late_first_tokens_after_it_are_one_spike() {
        let vllm = ServingEngine::named("vllm").unwrap();
        let e = engine_figures(vllm, 9, "http://x/metrics".into(), &Scrapes::of(&scrapes()));
        assert_eq!(e.scrapes, 10);
        let ttft = &e.latencies[0];
        assert_eq!(ttft.kind, LatencyKind::TimeToFirstToken);
        assert_eq!(ttft.requests, 80);
        assert_eq!(ttft.baseline_s, Some(0.05));
        assert!((ttft.mean_s - (60.0 * 0.05 + 20.0 * 1.2) / 80.0).abs() < 1e-9);
        assert_eq!(ttft.p99_le_s, Some(2.5), "rank 80 of 80 lies in the 2.5 s bucket");
        assert_eq!(e.spikes.len(), 1, "{:?}", e.spikes);
        let s = &e.spikes[0];
        // the two stalled intervals (4 to 6 s) and the late one (6 to 7 s)
        assert_eq!((s.from_ns, s.to_ns), (4_000_000_000, 7_000_000_000));
        assert_eq!(s.stalled_ns, 2_000_000_000);
        // the time that explains it: requests waiting and none served
        assert_eq!(s.waited, vec![(4_000_000_000, 5_000_000_000), (5_000_000_000, 6_000_000_000)]);
        assert_eq!(s.requests, 20);
        assert!((s.peak_mean_s - 1.2).abs() < 1e-9);
        assert_eq!(s.peak_p99_le_s, Some(2.5));
        assert_eq!(s.waiting_max, Some(15.0));
        assert!(s.summary.starts_with("TTFT went from 50.00 ms to 1.200 s (p99 <= 2.500 s) for 20"), "{}", s.summary);
        assert!(s.summary.contains("2.000 s of it serving none with up to 15 request(s) waiting"), "{}", s.summary);
        assert_eq!(e.waiting_max, Some(15.0));
    }

    #[test]
    fn a_stall_with_frozen_gauges_reaches_back_as_far_as_the_worst_wait() {
        let vllm = ServingEngine::named("vllm").unwrap();
        let mut s = scrapes();
        for x in s.iter_mut().filter(|x| x.metric == "vllm:num_requests_waiting") {
            x.value = 0.0;
        }
        let e = engine_figures(vllm, 9, String::new(), &Scrapes::of(&s));
        let spike = &e.spikes[0];
        // served at most 2.5 s (the p99 bound) before 7 s: the idle interval from 5 s is in, the
        // one from 4 s is not
        assert_eq!((spike.from_ns, spike.to_ns, spike.stalled_ns), (5_000_000_000, 7_000_000_000, 1_000_000_000));
        assert_eq!(spike.waiting_max, None);
        assert_eq!(spike.waited, vec![(5_000_000_000, 6_000_000_000)]);
        // explained from where its first served requests may have arrived (7 s - 2.5 s), one interval more
        assert_eq!(spike.cause_from_ns, 3_500_000_000);
    }

    #[test]
    fn nearest_rank_bound_and_counter_resets() {
        // 100 in the interval: 98 under 0.1, 2 under 1.0: rank 99 lies in the 1.0 bucket
        let b0 = [(0.1, 10.0), (1.0, 10.0)];
        let b1 = [(0.1, 108.0), (1.0, 110.0)];
        assert_eq!(bound_of_rank(&b0, &b1, 100, 0.99), Some(1.0));
        assert_eq!(bound_of_rank(&b0, &b1, 100, 0.98), Some(0.1));
        assert_eq!(bound_of_rank(&b0, &b1, 120, 0.99), None, "beyond the last bound");
        let vllm = ServingEngine::named("vllm").unwrap();
        let mut s = scrapes();
        // a restart between the 8th and 9th scrape: the counts start again
        for x in s.iter_mut().filter(|x| x.ts_ns >= 9_000_000_000 && x.metric.contains("time_to_first")) {
            x.value = 1.0;
        }
        let e = engine_figures(vllm, 9, String::new(), &Scrapes::of(&s));
        assert_eq!(e.latencies[0].intervals, 5, "the interval over the reset is left out");
    }
}
