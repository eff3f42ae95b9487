//! Triggers that open windows on the device timeline of attached processes (`trace --pid P
//! --gpu-timeline --gpu-trigger util,step,serving`): the trace loop hands every NVML sample, step
//! label and serving scrape to [`Triggers`], which says when one of them shows trouble: a GPU's
//! utilization falling to half its recent median or less ([`UtilWatch`]), a labeled step slower
//! than its series' median by the analysis's own rule (`causeway_model::thresholds`), a serving
//! latency spike by the same rule as `causeway serving`, or requests waiting while none is served.
//! Each [`Fired`] says what was seen, in numbers; the listener thread opens the window
//! (`windows.rs`) and stores the trigger as a `trigger` note, so a trace says who opened each
//! window and why.
//!
//! A trigger fires once per episode: a drop is [`UTIL_LOW_SAMPLES`] samples in a row and a GPU
//! must stay back above half its median for [`UTIL_MIN_SAMPLES`] samples before it drops again,
//! an engine must serve again, before the same watch fires again. A step fires only when it is
//! also the slowest of its series' last [`STEP_HISTORY`]: on a busy host a step of 1.5 times the
//! median comes every few hundred steps, and the window is for what is unusual, not for the
//! host's routine noise. A trigger that comes while its process's window is open extends it
//! when it would end sooner than the trigger's own window, and says so.

use std::collections::{HashMap, VecDeque};

use causeway_model::codes::Source;
use causeway_model::serving::ServingEngine;
use causeway_model::thresholds::{
    interval_served, latency_baseline_s, slow_step_threshold, spike_threshold_s, IntervalServed,
};
use causeway_model::time::fmt_ns;
use causeway_model::{Event, GpuProcessMemory, GpuSample, ServingSample};
use causeway_store::summary::nearest_rank;

/// A GPU is watched for drops once the median of its recent utilization is at least this (%).
pub const UTIL_BUSY_PCT: i32 = 50;
/// How many of a GPU's last samples make its median.
pub const UTIL_HISTORY: usize = 10;
/// Samples a GPU needs before its median counts.
pub const UTIL_MIN_SAMPLES: usize = 3;
/// Samples in a row at half the median or less that make a drop (one is a busy host's noise:
/// the workload's thread descheduled for half a sample period).
pub const UTIL_LOW_SAMPLES: usize = 2;
/// Steps a series needs before its median counts.
pub const STEP_MIN_STEPS: usize = 5;
/// How many of a series' last steps make its median, and the step that fires must be slower than
/// each of them.
pub const STEP_HISTORY: usize = 256;
/// How many of a serving latency's last interval means make its baseline.
pub const SERVING_HISTORY: usize = 32;

/// What may open a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TriggerKind {
    /// A GPU's utilization (NVML, sampled at `--nvml-hz`) dropped to half its median or less.
    UtilDrop,
    /// A labeled step was slow against its series' median.
    SlowStep,
    /// A serving engine's latency spiked, or its requests waited while none was served.
    Serving,
}

impl TriggerKind {
    pub const ALL: [TriggerKind; 3] = [TriggerKind::UtilDrop, TriggerKind::SlowStep, TriggerKind::Serving];

    /// The name `--gpu-trigger` takes.
    pub fn name(self) -> &'static str {
        match self {
            TriggerKind::UtilDrop => "util",
            TriggerKind::SlowStep => "step",
            TriggerKind::Serving => "serving",
        }
    }

    /// `util,step,serving` (or `all`).
    pub fn parse_list(s: &str) -> Result<Vec<TriggerKind>, String> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                out.extend(TriggerKind::ALL);
                continue;
            }
            let k = TriggerKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
                format!("unknown trigger `{name}`: one of util (a GPU's utilization drops), step (a slow labeled step), serving (a latency spike or a stall), all")
            })?;
            out.push(k);
        }
        out.sort_by_key(|k| k.name());
        out.dedup();
        if out.is_empty() {
            return Err("--gpu-trigger needs at least one of util, step, serving".into());
        }
        Ok(out)
    }
}

/// `--gpu-trigger` and its window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerOptions {
    /// What may open a window; empty: no triggers.
    pub kinds: Vec<TriggerKind>,
    /// How long a window a trigger opens stays open, ms.
    pub window_ms: u64,
    /// `--gpu-pre-trigger`: the seconds before the trigger kept in the tracer's memory and stored
    /// with the window, ms (0: none; the library is then dormant until a window opens).
    pub pre_ms: u64,
}

/// A trigger that fired.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    pub kind: TriggerKind,
    /// When the tracer saw it, unix ns.
    pub ts_ns: i64,
    /// The processes it concerns (the GPU's processes NVML listed, the step's process, the
    /// engine's); empty: any attached process.
    pub pids: Vec<u32>,
    /// What was seen, in numbers.
    pub what: String,
    /// The window to open, ms (`--gpu-trigger-window`).
    pub window_ms: u64,
}

/// One GPU's recent utilization.
#[derive(Debug, Default)]
struct UtilWatch {
    recent: VecDeque<i32>,
    /// The median when it fired: a drop is over once the GPU is back above half of it for
    /// [`UTIL_MIN_SAMPLES`] samples in a row (counted in `back`).
    low_since: Option<i32>,
    back: usize,
    /// The low samples so far of a drop not yet called one: (when the first was read, each %).
    low: Option<(i64, Vec<i32>)>,
}

impl UtilWatch {
    fn median(&self) -> i32 {
        let mut v: Vec<i64> = self.recent.iter().map(|&u| i64::from(u)).collect();
        v.sort_unstable();
        nearest_rank(&v, 500).unwrap_or(0) as i32
    }

    /// A sample of `pct` read at `ts`: when this makes a drop, the median it fell from, when the
    /// drop began and its samples.
    fn sample(&mut self, ts: i64, pct: i32) -> Option<(i32, i64, Vec<i32>)> {
        if let Some(was) = self.low_since {
            self.back = if pct * 2 > was { self.back + 1 } else { 0 };
            if self.back >= UTIL_MIN_SAMPLES {
                self.low_since = None;
                self.back = 0;
                self.push(pct);
            }
            return None;
        }
        let median = self.median();
        if self.recent.len() < UTIL_MIN_SAMPLES || median < UTIL_BUSY_PCT || pct * 2 > median {
            // a dip shorter than a drop was noise: its samples count in the median after all
            for p in self.low.take().map(|(_, v)| v).unwrap_or_default() {
                self.push(p);
            }
            self.push(pct);
            return None;
        }
        let (began, samples) = self.low.get_or_insert_with(|| (ts, Vec::new()));
        samples.push(pct);
        if samples.len() < UTIL_LOW_SAMPLES {
            return None;
        }
        let (began, samples) = (*began, std::mem::take(samples));
        self.low = None;
        self.low_since = Some(median);
        Some((median, began, samples))
    }

    fn push(&mut self, pct: i32) {
        self.recent.push_back(pct);
        if self.recent.len() > UTIL_HISTORY {
            self.recent.pop_front();
        }
    }
}

/// One series of labeled steps (a process's `step`, `epoch` or `task` labels).
#[derive(Debug, Default)]
struct StepWatch {
    recent: VecDeque<i64>,
}

/// One serving latency of one engine: its last cumulative sum and count.
#[derive(Debug, Default)]
struct LatencyWatch {
    last: Option<(f64, f64)>,
    /// The means of the intervals that served requests, seconds.
    means: VecDeque<f64>,
    spiking: bool,
}

/// One engine's stall: requests waiting while no latency counted a request.
#[derive(Debug, Default)]
struct EngineWatch {
    served_before: bool,
    stalled: bool,
}

/// Every watch of one trace.
#[derive(Debug, Default)]
pub struct Triggers {
    opts: TriggerOptions,
    util: HashMap<i32, UtilWatch>,
    steps: HashMap<(u32, u16), StepWatch>,
    latencies: HashMap<(u32, String, String), LatencyWatch>,
    engines: HashMap<u32, EngineWatch>,
}

impl Triggers {
    pub fn new(opts: TriggerOptions) -> Triggers {
        Triggers { opts, ..Default::default() }
    }

    fn wants(&self, kind: TriggerKind) -> bool {
        self.opts.kinds.contains(&kind)
    }

    /// One NVML sample of every GPU, with the processes listed on each.
    pub fn on_gpu(&mut self, samples: &[GpuSample], procs: &[GpuProcessMemory]) -> Vec<Fired> {
        if !self.wants(TriggerKind::UtilDrop) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for s in samples.iter().filter(|s| s.util_gpu_pct >= 0) {
            let Some((median, began, low)) = self.util.entry(s.gpu).or_default().sample(s.ts_ns, s.util_gpu_pct) else {
                continue;
            };
            let mut pids: Vec<u32> = procs.iter().filter(|p| p.gpu == s.gpu).map(|p| p.pid).collect();
            pids.sort_unstable();
            pids.dedup();
            let low: Vec<String> = low.iter().map(|p| format!("{p}%")).collect();
            out.push(Fired {
                kind: TriggerKind::UtilDrop,
                ts_ns: began,
                window_ms: self.opts.window_ms,
                pids,
                what: format!(
                    "GPU {}'s utilization fell to {} from a median of {}% over its last {} samples (NVML)",
                    s.gpu,
                    low.join(", then "),
                    median,
                    self.util[&s.gpu].recent.len()
                ),
            });
        }
        out
    }

    /// Labeled intervals (source STEP events): a step slower than its series' median.
    pub fn on_labels(&mut self, events: &[Event]) -> Vec<Fired> {
        if !self.wants(TriggerKind::SlowStep) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for e in events.iter().filter(|e| e.source == Source::Step.code() && e.dur_ns > 0) {
            let w = self.steps.entry((e.pid, e.op)).or_default();
            let mut sorted: Vec<i64> = w.recent.iter().copied().collect();
            sorted.sort_unstable();
            let median = nearest_rank(&sorted, 500);
            w.recent.push_back(e.dur_ns);
            if w.recent.len() > STEP_HISTORY {
                w.recent.pop_front();
            }
            let Some(median) = median.filter(|_| sorted.len() >= STEP_MIN_STEPS) else { continue };
            let end = e.ts_ns + e.dur_ns;
            // slow, and the slowest of the series' recent steps: not the host's routine noise (a
            // run of slow steps fires again only as it gets worse)
            if e.dur_ns < slow_step_threshold(median) || sorted.last().is_some_and(|&max| e.dur_ns <= max) {
                continue;
            }
            out.push(Fired {
                kind: TriggerKind::SlowStep,
                ts_ns: end,
                window_ms: self.opts.window_ms,
                pids: vec![e.pid],
                what: format!(
                    "{} {} of pid {} took {} against a median of {} over its last {} (slow from {}; the slowest of them)",
                    e.op_name(),
                    e.arg0,
                    e.pid,
                    fmt_ns(e.dur_ns),
                    fmt_ns(median),
                    sorted.len(),
                    fmt_ns(slow_step_threshold(median))
                ),
            });
        }
        out
    }

    /// One scrape of a serving engine's endpoint: a latency's interval mean spiking against its
    /// baseline (the median of its earlier interval means), or requests waiting while none was
    /// served.
    pub fn on_serving(&mut self, samples: &[ServingSample]) -> Vec<Fired> {
        if !self.wants(TriggerKind::Serving) {
            return Vec::new();
        }
        let mut by_engine: HashMap<(u32, &str), Vec<&ServingSample>> = HashMap::new();
        for s in samples {
            by_engine.entry((s.pid, s.engine.as_str())).or_default().push(s);
        }
        let mut out = Vec::new();
        for ((pid, name), scrape) in by_engine {
            let Some(engine) = ServingEngine::named(name) else { continue };
            let ts = scrape.iter().map(|s| s.ts_ns).max().unwrap_or(0);
            // a metric's value summed over its label sets (one per model served)
            let value = |metric: &str| {
                let mut it = scrape.iter().filter(|s| s.le.is_none() && s.metric == metric).peekable();
                it.peek().is_some().then(|| it.map(|s| s.value).sum::<f64>())
            };
            let mut served = false;
            let mut spikes = Vec::new();
            for m in engine.latencies {
                let (Some(sum), Some(count)) = (value(&m.sum_metric()), value(&m.count_metric())) else { continue };
                let w = self.latencies.entry((pid, engine.name.to_string(), m.family.to_string())).or_default();
                let last = w.last.replace((sum, count));
                let Some(IntervalServed { requests, mean_s: Some(mean) }) =
                    last.and_then(|before| interval_served(before, (sum, count), m.seconds_per_unit))
                else {
                    continue;
                };
                served = true;
                let mut sorted: Vec<f64> = w.means.iter().copied().collect();
                sorted.sort_by(f64::total_cmp);
                w.means.push_back(mean);
                if w.means.len() > SERVING_HISTORY {
                    w.means.pop_front();
                }
                let Some(baseline) = latency_baseline_s(&sorted) else { continue };
                let spike = mean >= spike_threshold_s(baseline);
                if spike && !w.spiking {
                    spikes.push(format!(
                        "{} of {} averaged {:.3} s over {} requests against a baseline of {:.3} s",
                        m.family, engine.title, mean, requests, baseline
                    ));
                }
                w.spiking = spike;
            }
            let waiting: f64 = engine.waiting.iter().filter_map(|g| value(g)).sum();
            let e = self.engines.entry(pid).or_default();
            let stall = !served && waiting > 0.0 && e.served_before;
            let new_stall = stall && !e.stalled;
            e.stalled = stall;
            e.served_before |= served;
            let what = if let Some(s) = spikes.into_iter().next() {
                s
            } else if new_stall {
                format!("{} (pid {pid}) served no request since its last scrape while {waiting} waited", engine.title)
            } else {
                continue;
            };
            out.push(Fired {
                kind: TriggerKind::Serving,
                ts_ns: ts,
                pids: vec![pid],
                what,
                window_ms: self.opts.window_ms,
            });
        }
        out
    }
}

#[cfg(test)]
#[path = "triggers_tests.rs"]
mod tests;
