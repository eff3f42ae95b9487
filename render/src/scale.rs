//! Where a time or a duration lands on the page: the one place that turns nanoseconds into
//! pixels, for the timeline (linear, relative to its first instant) and the histogram (log10).

use causeway_model::time::fmt_ns;

/// A window of time `[t0, t1]` laid over pixels `[x0, x1]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeScale {
    pub t0: i64,
    pub t1: i64,
    pub x0: f64,
    pub x1: f64,
}

impl TimeScale {
    pub fn new(t0: i64, t1: i64, x0: f64, x1: f64) -> TimeScale {
        TimeScale { t0, t1: t1.max(t0 + 1), x0, x1 }
    }

    /// The x of instant `t`, held inside the scale.
    pub fn x(&self, t: i64) -> f64 {
        let f = (t.clamp(self.t0, self.t1) - self.t0) as f64 / (self.t1 - self.t0) as f64;
        self.x0 + f * (self.x1 - self.x0)
    }

    /// The visible extent of `[a, b]`: at least half a pixel, so that a short call still shows.
    pub fn extent(&self, a: i64, b: i64) -> (f64, f64) {
        let (xa, xb) = (self.x(a), self.x(b));
        (xa, (xb - xa).max(0.5))
    }

    /// Tick instants at a round step (1, 2 or 5 times a power of ten ns), about `n` of them,
    /// labelled as the time since `t0`.
    pub fn ticks(&self, n: usize) -> Vec<(i64, String)> {
        let step = round_step((self.t1 - self.t0) as f64 / n.max(1) as f64);
        let first = (self.t0 - self.t0.rem_euclid(step)) + if self.t0.rem_euclid(step) == 0 { 0 } else { step };
        (0..)
            .map(|i| first + i * step)
            .take_while(|t| *t <= self.t1)
            .map(|t| (t, format!("+{}", fmt_ns(t - self.t0))))
            .collect()
    }
}

/// The smallest of 1, 2, 5 x 10^k ns at or above `raw`.
fn round_step(raw: f64) -> i64 {
    let raw = raw.max(1.0);
    let mut p = 1i64;
    loop {
        for m in [1, 2, 5] {
            if (m * p) as f64 >= raw {
                return m * p;
            }
        }
        p = p.saturating_mul(10);
    }
}

/// Durations `[lo, hi]` (ns, positive) on a log10 axis over pixels `[x0, x1]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogScale {
    lo: f64,
    hi: f64,
    pub x0: f64,
    pub x1: f64,
}

impl LogScale {
    pub fn new(lo_ns: i64, hi_ns: i64, x0: f64, x1: f64) -> LogScale {
        let lo = (lo_ns.max(1) as f64).log10();
        let hi = (hi_ns.max(lo_ns.max(1) + 1) as f64).log10();
        LogScale { lo, hi, x0, x1 }
    }

    /// The x of a duration, held inside the scale.
    pub fn x(&self, ns: f64) -> f64 {
        let f = ((ns.max(1.0).log10() - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0);
        self.x0 + f * (self.x1 - self.x0)
    }

    /// Bin `i` of `n` equal log-width bins: `[from, to)` in ns.
    pub fn bin(&self, i: usize, n: usize) -> (f64, f64) {
        let w = (self.hi - self.lo) / n as f64;
        (10f64.powf(self.lo + w * i as f64), 10f64.powf(self.lo + w * (i + 1) as f64))
    }

    /// The bin of `ns` among `n`.
    pub fn bin_of(&self, ns: i64, n: usize) -> usize {
        let f = ((ns.max(1) as f64).log10() - self.lo) / (self.hi - self.lo);
        ((f * n as f64) as usize).min(n - 1)
    }

    /// Powers of ten inside the scale, labelled.
    pub fn decades(&self) -> Vec<(f64, String)> {
        (self.lo.ceil() as i32..=self.hi.floor() as i32)
            .map(|k| {
                let ns = 10f64.powi(k);
                (ns, fmt_ns(ns as i64))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_maps_linearly_and_clamps() {
        let s = TimeScale::new(1000, 2000, 100.0, 300.0);
        assert_eq!(s.x(1000), 100.0);
        assert_eq!(s.x(1500), 200.0);
        assert_eq!(s.x(5000), 300.0);
        assert_eq!(s.x(0), 100.0);
        assert_eq!(s.extent(1500, 1500), (200.0, 0.5));
    }

    #[test]
    fn ticks_fall_on_round_steps_inside_the_window() {
        let s = TimeScale::new(1_000_000_000, 1_030_000_000, 0.0, 100.0);
        let t = s.ticks(6);
        assert_eq!(t.first().map(|x| x.0), Some(1_000_000_000));
        assert_eq!(t[1].0 - t[0].0, 5_000_000);
        assert!(t.iter().all(|(ts, _)| (1_000_000_000..=1_030_000_000).contains(ts)));
        assert_eq!(t[1].1, "+5.00 ms");
    }

    #[test]
    fn log_bins_cover_the_range_and_hold_their_values() {
        let s = LogScale::new(1_000, 1_000_000, 0.0, 300.0);
        assert_eq!(s.bin_of(1_000, 30), 0);
        assert_eq!(s.bin_of(1_000_000, 30), 29);
        let (a, b) = s.bin(10, 30);
        let mid = ((a * b).sqrt()) as i64;
        assert_eq!(s.bin_of(mid, 30), 10);
        assert_eq!(s.decades().len(), 4);
    }
}
