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
