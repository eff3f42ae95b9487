//! The scrapes of a serving engine as figures per scrape interval: the samples of each scrape
//! summed over their label sets ([`Scrapes`]), each latency's requests, exact mean and p99 bucket
//! bound between two consecutive scrapes ([`latency_intervals`]), and the series a timeline draws
//! ([`serving_series`]).

use std::collections::BTreeMap;

use causeway_model::serving::{LatencyMetric, ServingEngine};
use causeway_model::thresholds::interval_served;
use causeway_model::ServingSample;

/// One scrape interval of one latency.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Interval {
    pub from_ns: i64,
    pub to_ns: i64,
    pub requests: u64,
    pub mean_s: Option<f64>,
    pub p99_le_s: Option<f64>,
    pub waiting: Option<f64>,
}

/// One series of an engine for a timeline's counter track: a gauge at each scrape, or a latency's
/// mean over each scrape interval (at the interval's start; 0 where none was served).
#[derive(Debug, Clone, PartialEq)]
pub struct ServingSeries {
    pub pid: u32,
    /// "vLLM TTFT, mean per scrape interval".
    pub name: String,
    pub unit: &'static str,
    pub points: Vec<(i64, f64)>,
}

/// The engines' series of a scope: requests running and waiting, KV-cache use (%), and each
/// latency's interval mean (ms).
pub fn serving_series(samples: &[ServingSample]) -> Vec<ServingSeries> {
    let mut out = Vec::new();
    for ((name, pid), scrapes) in by_engine(samples) {
        let Some(engine) = ServingEngine::named(&name) else { continue };
        let times = &scrapes.times;
        for (label, names, unit, scale) in [
            ("requests running", engine.running, "requests", 1.0),
            ("requests waiting", engine.waiting, "requests", 1.0),
            ("KV cache in use", engine.kv_cache, "%", 100.0),
        ] {
            let points: Vec<(i64, f64)> =
                times.iter().filter_map(|&t| scrapes.gauge(t, names).map(|v| (t, v * scale))).collect();
            if !points.is_empty() {
                out.push(ServingSeries { pid, name: format!("{} {label}", engine.title), unit, points });
            }
        }
        for (metric, intervals) in latencies_held(engine, &scrapes) {
            let points = intervals.iter().map(|i| (i.from_ns, i.mean_s.unwrap_or(0.0) * 1e3)).collect();
            out.push(ServingSeries {
                pid,
                name: format!("{} {}, mean per scrape interval (0: none served)", engine.title, metric.kind.label()),
                unit: "ms",
                points,
            });
        }
    }
    out
}

/// A scope's samples by engine process ((engine name, pid), ascending), each one's scrapes.
pub(super) fn by_engine(samples: &[ServingSample]) -> BTreeMap<(String, u32), Scrapes> {
    let mut grouped: BTreeMap<(String, u32), Vec<&ServingSample>> = BTreeMap::new();
    for s in samples {
        grouped.entry((s.engine.clone(), s.pid)).or_default().push(s);
    }
    grouped.into_iter().map(|(k, rows)| (k, Scrapes::of(rows))).collect()
}

/// Each latency the scrapes hold, one per kind (the first of the engine's metrics for the kind
/// that the scrapes hold), with its intervals.
pub(super) fn latencies_held(
    engine: &'static ServingEngine,
    scrapes: &Scrapes,
) -> Vec<(&'static LatencyMetric, Vec<Interval>)> {
    let mut held: Vec<(&'static LatencyMetric, Vec<Interval>)> = Vec::new();
    for metric in engine.latencies {
        if held.iter().any(|(m, _)| m.kind == metric.kind) {
            continue;
        }
        let intervals = latency_intervals(scrapes, metric, engine.waiting);
        if !intervals.is_empty() {
            held.push((metric, intervals));
        }
    }
    held
}

/// Per scrape: the summed value of each sample name (over label sets) and of each bucket bound.
pub(super) struct Scrapes {
    /// ts -> metric -> summed value.
    pub(super) plain: BTreeMap<i64, BTreeMap<String, f64>>,
    /// ts -> metric -> [(le, summed cumulative count)] ascending.
    pub(super) buckets: BTreeMap<i64, BTreeMap<String, Vec<(f64, f64)>>>,
    /// Every scrape's time, ascending.
    pub(super) times: Vec<i64>,
}

impl Scrapes {
    pub(super) fn of<'a>(samples: impl IntoIterator<Item = &'a ServingSample>) -> Scrapes {
        let mut plain: BTreeMap<i64, BTreeMap<String, f64>> = BTreeMap::new();
        let mut buckets: BTreeMap<i64, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
        for s in samples {
            match s.le {
                None => *plain.entry(s.ts_ns).or_default().entry(s.metric.clone()).or_default() += s.value,
                Some(le) => {
                    let v = buckets.entry(s.ts_ns).or_default().entry(s.metric.clone()).or_default();
                    match v.iter_mut().find(|(b, _)| b.to_bits() == le.to_bits()) {
                        Some((_, c)) => *c += s.value,
                        None => v.push((le, s.value)),
                    }
                }
            }
        }
        for per in buckets.values_mut() {
            for v in per.values_mut() {
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
        let times: std::collections::BTreeSet<i64> = plain.keys().chain(buckets.keys()).copied().collect();
        Scrapes { plain, buckets, times: times.into_iter().collect() }
    }

    /// The first of `names` the scrape at `ts` holds.
    pub(super) fn gauge(&self, ts: i64, names: &[&str]) -> Option<f64> {
        let m = self.plain.get(&ts)?;
        names.iter().find_map(|n| m.get(*n).copied())
    }

    pub(super) fn max_gauge(&self, names: &[&str]) -> Option<f64> {
        self.plain.keys().filter_map(|&ts| self.gauge(ts, names)).reduce(f64::max)
    }
}

/// The latency's intervals between consecutive scrapes that hold it (an interval over a counter
/// reset, an engine restarted, is left out).
fn latency_intervals(scrapes: &Scrapes, metric: &LatencyMetric, waiting: &[&str]) -> Vec<Interval> {
    let (sum_name, count_name, bucket_name) = (metric.sum_metric(), metric.count_metric(), metric.bucket_metric());
    let at = |ts: i64| -> Option<(f64, f64)> {
        let m = scrapes.plain.get(&ts)?;
        Some((*m.get(&sum_name)?, *m.get(&count_name)?))
    };
    let held: Vec<(i64, f64, f64)> = scrapes.times.iter().filter_map(|&t| at(t).map(|(s, c)| (t, s, c))).collect();
    let mut out = Vec::new();
    for w in held.windows(2) {
        let ((t0, s0, c0), (t1, s1, c1)) = (w[0], w[1]);
        let Some(served) = interval_served((s0, c0), (s1, c1), metric.seconds_per_unit) else { continue };
        let requests = served.requests;
        let p99_le_s = bucket_name.as_ref().and_then(|b| {
            let (Some(b0), Some(b1)) =
                (scrapes.buckets.get(&t0).and_then(|m| m.get(b)), scrapes.buckets.get(&t1).and_then(|m| m.get(b)))
            else {
                return None;
            };
            bound_of_rank(b0, b1, requests, 0.99).map(|le| le * metric.seconds_per_unit)
        });
        let waiting = [scrapes.gauge(t0, waiting), scrapes.gauge(t1, waiting)].into_iter().flatten().reduce(f64::max);
        out.push(Interval { from_ns: t0, to_ns: t1, requests, mean_s: served.mean_s, p99_le_s, waiting });
    }
    out
}

/// The smallest bucket bound whose count (of the interval: `b1 - b0`) reaches the nearest rank
/// `ceil(p * n)`; `None` when the rank lies beyond the last finite bound.
pub(super) fn bound_of_rank(b0: &[(f64, f64)], b1: &[(f64, f64)], n: u64, p: f64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let rank = (p * n as f64).ceil().max(1.0);
    b1.iter().find_map(|&(le, c1)| {
        let c0 = b0.iter().find(|(b, _)| b.to_bits() == le.to_bits()).map_or(0.0, |x| x.1);
        (c1 - c0 >= rank - 1e-9).then_some(le)
    })
}
