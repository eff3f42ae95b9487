//! The live figures of a running trace as Prometheus metrics (`causeway trace --metrics`): GPU API
//! calls and their latency histogram per op, the off-CPU time of the traced threads per process
//! and cause, events written, losses per source and kind, the tracer's own CPU time, the traced
//! processes. Kept in a `prometheus-client` registry, updated by the trace loop at each batch and
//! each second, encoded as OpenMetrics text by [`TraceMetrics::encode`]; serving it over HTTP is
//! the command line's job.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use causeway_model::codes::{is_gpu_call_source, op, op_name, source_name};
use causeway_model::{Event, LossCounter, PrevState};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// The media type of [`TraceMetrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    source: String,
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OffCpuLabels {
    pid: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LossLabels {
    source: String,
    kind: String,
}

/// What a batch adds to the metrics, taken before the batch goes to the sink and counted once the
/// sink took it.
#[derive(Debug, Default)]
pub struct BatchTally {
    events: u64,
    /// (source, op, duration ns) of each GPU API call.
    calls: Vec<(u8, u16, i64)>,
    /// (pid, cause, ns) of each off-CPU interval.
    off_cpu: Vec<(u32, PrevState, i64)>,
}

impl BatchTally {
    pub fn of(events: &[Event]) -> BatchTally {
        let mut t = BatchTally { events: events.len() as u64, ..Default::default() };
        for e in events {
            if is_gpu_call_source(e.source) {
                t.calls.push((e.source, e.op, e.dur_ns));
            } else if op::SCHED_SWITCH.is(e.source, e.op) {
                t.off_cpu.push((e.pid, e.sched.as_ref().map_or(PrevState::Unknown, |s| s.prev_state), e.dur_ns));
            }
        }
        t
    }
}

/// The registry and its metrics. Shared (`Arc`) between the trace loop and the HTTP endpoint.
#[derive(Debug)]
pub struct TraceMetrics {
    registry: Registry,
    calls: Family<OpLabels, Counter>,
    durations: Family<OpLabels, Histogram>,
    off_cpu: Family<OffCpuLabels, Counter<f64, AtomicU64>>,
    events: Counter,
    lost: Family<LossLabels, Counter>,
    tracer_cpu: Counter<f64, AtomicU64>,
    traced: Gauge,
    /// What was already counted of the cumulative figures read at each tick.
    last: Mutex<(Vec<LossCounter>, f64)>,
}

impl Default for TraceMetrics {
    fn default() -> Self {
        TraceMetrics::new()
    }
}

impl TraceMetrics {
    pub fn new() -> TraceMetrics {
        let mut registry = Registry::with_prefix("causeway");
        let calls = Family::<OpLabels, Counter>::default();
        registry.register("gpu_calls", "GPU API calls traced (CUDA runtime, driver, NCCL), by op", calls.clone());
        // 1 us to about 4 s, a bucket per factor of 4
        let durations =
            Family::<OpLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(1e-6, 4.0, 12)));
        registry.register_with_unit(
            "gpu_call_duration",
            "Duration of the traced GPU API calls, by op",
            Unit::Seconds,
            durations.clone(),
        );
        let off_cpu = Family::<OffCpuLabels, Counter<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "off_cpu",
            "Time the traced threads spent off the CPU, by process and cause (preempted, sleeping, uninterruptible, other)",
            Unit::Seconds,
            off_cpu.clone(),
        );
        let events = Counter::default();
        registry.register("events_written", "Events written to the trace", events.clone());
        let lost = Family::<LossLabels, Counter>::default();
        registry.register(
            "events_lost",
            "Events lost, by source and kind (ring_reserve, decode, sink_backpressure)",
            lost.clone(),
        );
        let tracer_cpu = Counter::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "tracer_cpu",
            "CPU time of the tracer process itself (user + system)",
            Unit::Seconds,
            tracer_cpu.clone(),
        );
        let traced = Gauge::default();
        registry.register("traced_processes", "Processes being traced", traced.clone());
        TraceMetrics {
            registry,
            calls,
            durations,
            off_cpu,
            events,
            lost,
            tracer_cpu,
            traced,
            last: Mutex::new((Vec::new(), 0.0)),
        }
    }

    /// Counts the events of one batch the sink accepted.
    pub fn observe(&self, batch: BatchTally) {
        self.events.inc_by(batch.events);
        for (source, op, dur_ns) in batch.calls {
            let labels = OpLabels { source: source_name(source).into_owned(), op: op_name(source, op).into_owned() };
            self.calls.get_or_create(&labels).inc();
            self.durations.get_or_create(&labels).observe(dur_ns.max(0) as f64 / 1e9);
        }
        for (pid, cause, dur_ns) in batch.off_cpu {
            let labels = OffCpuLabels { pid: pid.to_string(), cause: cause.as_str().to_string() };
            self.off_cpu.get_or_create(&labels).inc_by(dur_ns.max(0) as f64 / 1e9);
        }
    }

    /// Each second: the losses so far (cumulative, as the trace's own counters), the processes
    /// traced, the tracer's CPU time.
    pub fn tick(&self, losses: &[LossCounter], traced_processes: usize) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        for l in losses {
            let before = last.0.iter().find(|p| p.source == l.source && p.kind == l.kind).map_or(0, |p| p.count);
            if l.count > before {
                let labels =
                    LossLabels { source: source_name(l.source).into_owned(), kind: l.kind.as_str().to_string() };
                self.lost.get_or_create(&labels).inc_by(l.count - before);
            }
        }
        last.0 = losses.to_vec();
        let cpu = own_cpu_seconds();
        if cpu > last.1 {
            self.tracer_cpu.inc_by(cpu - last.1);
            last.1 = cpu;
        }
        self.traced.set(traced_processes as i64);
    }

    /// The metrics as OpenMetrics text ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // writing into a String cannot fail
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// User + system CPU time of this process, seconds.
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::{LossKind, SchedDetail};

    fn call(source: u8, op: u16, dur_ns: i64) -> Event {
        Event { source, op, dur_ns, pid: 7, tid: 7, ..Default::default() }
    }

    #[test]
    fn counts_histograms_off_cpu_and_losses_are_encoded() {
        let m = TraceMetrics::new();
        let mut switch = call(3, 1, 2_000_000_000);
        switch.sched = Some(SchedDetail { prev_state: PrevState::Preempted, ..Default::default() });
        m.observe(BatchTally::of(&[call(1, 3, 5_000), call(1, 3, 3_000_000), call(1, 5, 50_000), switch]));
        m.tick(&[LossCounter { source: 1, kind: LossKind::RingReserve, count: 3 }], 2);
        m.tick(&[LossCounter { source: 1, kind: LossKind::RingReserve, count: 5 }], 2);
        let text = m.encode();
        assert!(text.contains("causeway_gpu_calls_total{source=\"CUDA\",op=\"cudaLaunchKernel\"} 2"), "{text}");
        assert!(text.contains("causeway_gpu_calls_total{source=\"CUDA\",op=\"cudaStreamSync\"} 1"), "{text}");
        assert!(
            text.contains("causeway_gpu_call_duration_seconds_count{source=\"CUDA\",op=\"cudaLaunchKernel\"} 2"),
            "{text}"
        );
        // 5 us falls in the bucket up to 16 us; 3 ms in the one up to 4.096 ms
        assert!(
            text.contains(
                "causeway_gpu_call_duration_seconds_bucket{le=\"+Inf\",source=\"CUDA\",op=\"cudaLaunchKernel\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("causeway_off_cpu_seconds_total{pid=\"7\",cause=\"preempted\"} 2.0"), "{text}");
        assert!(text.contains("causeway_events_written_total 4"), "{text}");
        assert!(text.contains("causeway_events_lost_total{source=\"CUDA\",kind=\"ring_reserve\"} 5"), "{text}");
        assert!(text.contains("causeway_traced_processes 2"), "{text}");
        assert!(text.contains("causeway_tracer_cpu_seconds_total"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }
}
