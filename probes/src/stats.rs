//! Live statistics while tracing: per op, count, p50/p99 of the duration (log-linear histogram) and
//! the off-CPU time of the calling thread inside the calls; plus events and losses so far. What the
//! terminal table and `--json` lines show each second.

use std::collections::{HashMap, VecDeque};

use causeway_model::codes::{is_gpu_call, op_name};
use causeway_model::Event;

/// A log-linear histogram: 16 sub-buckets per power of two (error under 7%).
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: vec![0; 64 * 16], count: 0 }
    }
}

impl Histogram {
    fn bucket(v: u64) -> u32 {
        if v < 16 {
            return v as u32;
        }
        let bits = 63 - v.leading_zeros();
        let sub = (v >> (bits - 4)) & 0xf;
        bits * 16 + sub as u32
    }
    fn lower(b: u32) -> u64 {
        if b < 16 {
            return b as u64;
        }
        let bits = b / 16;
        let sub = (b % 16) as u64;
        (1u64 << bits) | (sub << (bits - 4))
    }
    pub fn add(&mut self, v: u64) {
        self.buckets[Self::bucket(v) as usize] += 1;
        self.count += 1;
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The q-quantile (0..=1), as the lower bound of its bucket.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Self::lower(b as u32);
            }
        }
        0
    }
}

/// One row of the live table.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct OpStats {
    pub op: String,
    pub source: u8,
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Off-CPU time of the calling threads inside these calls.
    pub off_cpu_ns: u64,
}

/// What the tracer reports each second.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct LiveStats {
    pub elapsed_ns: i64,
    /// Events handed to the sink so far.
    pub events: u64,
    /// Events lost so far, all places together.
    pub lost: u64,
    pub traced_pids: Vec<u32>,
    pub ops: Vec<OpStats>,
}

#[derive(Default)]
pub struct StatsBuilder {
    ops: HashMap<(u8, u16), (Histogram, u64)>,
    /// recent off-CPU intervals per tid
    off: HashMap<u32, VecDeque<(i64, i64)>>,
}

impl StatsBuilder {
    /// Feed a batch: sched_switch intervals first, so calls see the intervals inside them.
    pub fn add_batch(&mut self, events: &[Event]) {
        for e in events.iter().filter(|e| e.sched.is_some()) {
            let q = self.off.entry(e.tid).or_default();
            q.push_back(e.off_cpu_interval());
            if q.len() > 4096 {
                q.pop_front();
            }
        }
        for e in events.iter().filter(|e| is_gpu_call(e.source, e.op)) {
            let (start, end) = (e.ts_ns, e.end_ns());
            // A thread's intervals arrive in time order (one sched ring, and a thread switches in on
            // one CPU at a time), so walking back from the newest, the first interval that ended
            // before the call started ends the walk: usually at once.
            let mut off = 0i64;
            for &(a, b) in self.off.get(&e.tid).into_iter().flatten().rev() {
                if b <= start {
                    break;
                }
                off += (b.min(end) - a.max(start)).max(0);
            }
            let s = self.ops.entry((e.source, e.op)).or_default();
            s.0.add(e.dur_ns.max(0) as u64);
            s.1 += off as u64;
        }
    }

    pub fn rows(&self) -> Vec<OpStats> {
        let mut v: Vec<OpStats> = self
            .ops
            .iter()
            .map(|(&(source, op), (h, off))| OpStats {
                op: op_name(source, op).into_owned(),
                source,
                count: h.count(),
                p50_ns: h.quantile(0.5),
                p99_ns: h.quantile(0.99),
                off_cpu_ns: *off,
            })
            .collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then(a.op.cmp(&b.op)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.add(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.07, "{p50}");
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.07, "{p99}");
    }

    #[test]
    fn off_cpu_inside_a_call_is_attributed() {
        let mut s = StatsBuilder::default();
        let sw = Event {
            ts_ns: 150,
            dur_ns: 30,
            tid: 5,
            source: 3,
            op: 1,
            sched: Some(Default::default()),
            ..Default::default()
        };
        let call = Event { ts_ns: 100, dur_ns: 100, tid: 5, source: 1, op: 5, ..Default::default() };
        s.add_batch(&[call, sw]);
        let r = s.rows();
        assert_eq!(r[0].op, "cudaStreamSync");
        assert_eq!(r[0].off_cpu_ns, 30);
    }

    #[test]
    fn off_cpu_walk_passes_later_intervals_and_stops_at_earlier_ones() {
        let mut s = StatsBuilder::default();
        let switch = |end: i64, dur: i64| Event {
            ts_ns: end,
            dur_ns: dur,
            tid: 5,
            source: 3,
            op: 1,
            sched: Some(Default::default()),
            ..Default::default()
        };
        // 1000 intervals long before the call, two inside it (10 + 20 ns), one straddling its
        // end (5 ns inside), one after it.
        let mut batch: Vec<Event> = (0..1000).map(|i| switch(i * 10 + 5, 5)).collect();
        batch.extend([switch(100_120, 10), switch(100_150, 20), switch(100_205, 10), switch(100_400, 50)]);
        batch.push(Event { ts_ns: 100_100, dur_ns: 100, tid: 5, source: 1, op: 5, ..Default::default() });
        s.add_batch(&batch);
        assert_eq!(s.rows()[0].off_cpu_ns, 35);
    }
}
