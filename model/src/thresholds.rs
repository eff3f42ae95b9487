//! The rules the analysis and the live tracer share: what makes a step slow and a serving latency
//! spike. The analysis applies them to a stored trace (`causeway_analysis::steps`,
//! `causeway_analysis::serving`); the tracer's GPU-window triggers apply the same ones while
//! tracing (`causeway_probes::gpu_timeline::triggers`), so a window opens on what an answer later
//! calls slow.

/// A step is slow when it lasts at least this many times its series' median...
pub const SLOW_FACTOR: f64 = 1.5;
/// ... and at least this much longer than the median.
pub const SLOW_FLOOR_NS: i64 = 100_000;

/// The shortest slow step of a series whose median step is `baseline` ns.
pub fn slow_step_threshold(baseline: i64) -> i64 {
    ((baseline as f64 * SLOW_FACTOR) as i64).max(baseline + SLOW_FLOOR_NS)
}

/// A serving latency spike's intervals have a mean at least this many times the baseline...
pub const SPIKE_RATIO: f64 = 3.0;
/// ... and at least this much above it (seconds).
pub const SPIKE_MIN_S: f64 = 0.020;
/// Intervals with requests a latency needs before it has a baseline.
pub const MIN_INTERVALS: usize = 4;

/// The lowest interval mean (seconds) that spikes against a latency's `baseline_s`: [`SPIKE_RATIO`]
/// times it and [`SPIKE_MIN_S`] above it.
pub fn spike_threshold_s(baseline_s: f64) -> f64 {
    (baseline_s * SPIKE_RATIO).max(baseline_s + SPIKE_MIN_S)
}

/// A latency's baseline: the nearest-rank median of its interval means (`sorted_means`, ascending),
/// or `None` with fewer than [`MIN_INTERVALS`] of them.
pub fn latency_baseline_s(sorted_means: &[f64]) -> Option<f64> {
    (sorted_means.len() >= MIN_INTERVALS).then(|| sorted_means[sorted_means.len().div_ceil(2) - 1])
}

/// What one scrape interval of a cumulative latency served: its requests and their exact mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalServed {
    /// Requests it counted.
    pub requests: u64,
    /// Seconds; `None` when it served no request.
    pub mean_s: Option<f64>,
}

/// The interval between two scrapes of a latency's cumulative `(sum, count)`, the sum in units of
/// `seconds_per_unit`; `None` over a counter reset (an engine restarted: its counters went back).
pub fn interval_served(before: (f64, f64), after: (f64, f64), seconds_per_unit: f64) -> Option<IntervalServed> {
    let (ds, dc) = (after.0 - before.0, after.1 - before.1);
    if dc < 0.0 || ds < -1e-9 {
        return None;
    }
    let requests = dc.round() as u64;
    Some(IntervalServed { requests, mean_s: (requests > 0).then(|| ds / dc * seconds_per_unit) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_is_three_times_the_baseline_and_twenty_ms_above_it() {
        assert!((spike_threshold_s(0.1) - 0.3).abs() < 1e-12);
        // a fast latency: the floor decides
        assert!((spike_threshold_s(0.002) - 0.022).abs() < 1e-12);
    }

    #[test]
    fn a_baseline_is_the_nearest_rank_median_of_enough_intervals() {
        assert_eq!(latency_baseline_s(&[1.0, 2.0, 3.0]), None);
        assert_eq!(latency_baseline_s(&[1.0, 2.0, 3.0, 4.0]), Some(2.0));
        assert_eq!(latency_baseline_s(&[1.0, 2.0, 3.0, 4.0, 5.0]), Some(3.0));
    }

    #[test]
    fn an_interval_is_its_exact_mean_and_none_over_a_counter_reset() {
        let ms = 1e-3;
        let served = interval_served((100.0, 10.0), (160.0, 13.0), ms).unwrap();
        assert_eq!(served.requests, 3);
        assert!((served.mean_s.unwrap() - 0.020).abs() < 1e-12, "{served:?}");
        assert_eq!(
            interval_served((100.0, 10.0), (100.0, 10.0), 1.0),
            Some(IntervalServed { requests: 0, mean_s: None })
        );
        assert_eq!(interval_served((100.0, 10.0), (5.0, 1.0), 1.0), None, "restarted");
    }
}
