//! The GPUs' own state from the trace's NVML samples (`gpu_samples`): per GPU a summary for the
//! statistics (clocks, temperature, power, utilization, time throttled by reason, ECC, Xid, the
//! links: [`crate::gpu_link`]), and the throttled windows explain matches slow GPU-bound calls
//! against.
//!
//! A call is matched to the GPUs its process used when the trace knows them (the device timeline's
//! `gpu_devices` map each CUDA device of a process to its NVML index): a throttle on another GPU of
//! the node says nothing about it. Without that map, any GPU of the node may be the one.
//!
//! A sample describes its GPU from its own timestamp to the next sample of that GPU (the last one
//! to the median sampling period after it). A GPU is **throttled** over the samples whose clock
//! event reasons include a slowing one ([`SLOWING_REASONS`]: power cap, thermal and hardware
//! slowdowns, sync boost; not idle or a clock setting). Figures are exact over the samples held:
//! medians are nearest-rank.

use std::collections::BTreeMap;

use causeway_model::{throttle_reason_names, GpuDevice, GpuSample, SLOWING_REASONS};

use crate::attribution::overlap;
use crate::stats::nearest_ranks_unsorted;
use crate::trace_data::merge_intervals;

/// One GPU's state over the trace (or window).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct GpuSummary {
    /// NVML device index.
    pub gpu: i32,
    pub samples: u64,
    /// SM clock: median (nearest rank), lowest, and the device's maximum, MHz (-1: not reported).
    pub sm_clock_p50_mhz: i32,
    pub sm_clock_min_mhz: i32,
    pub sm_clock_max_mhz: i32,
    /// Highest temperature, °C; highest power draw and the power limit, mW (-1: not reported).
    pub temperature_max_c: i32,
    pub power_max_mw: i64,
    pub power_limit_mw: i64,
    /// Median GPU utilization, percent.
    pub util_gpu_p50_pct: i32,
    /// Time throttled by a slowing reason, in all and per reason name.
    pub throttled_ns: i64,
    pub throttled_by_reason: BTreeMap<String, i64>,
    /// ECC errors counted during the trace (last sample minus first), corrected / uncorrected.
    pub ecc_corrected: i64,
    pub ecc_uncorrected: i64,
    /// The PCIe link: its maximum, the lowest it ran at while the GPU was busy, and how long it ran
    /// below its maximum while busy; NVLink errors counted during the trace (-1: not reported).
    #[serde(flatten)]
    pub link: crate::gpu_link::LinkSummary,
}

/// One sample with the span it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) sample: GpuSample,
}

/// The samples of every GPU as spans, and where the GPUs were throttled.
#[derive(Debug, Clone, Default)]
pub struct GpuState {
    spans: BTreeMap<i32, Vec<Span>>,
    /// Throttled intervals per GPU, merged.
    throttled: BTreeMap<i32, Vec<(i64, i64)>>,
    /// The NVML indexes of the GPUs each process used (from the device timeline), when known.
    used_by: BTreeMap<u32, Vec<i32>>,
}

/// What the samples say about the GPUs during some intervals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleFacts {
    /// ns of the intervals spent while a GPU was throttled.
    pub throttled_ns: i64,
    /// The reasons seen (bitmask), the lowest SM clock and the maximum clock, MHz.
    pub reasons: i64,
    pub sm_clock_min_mhz: i32,
    pub sm_clock_max_mhz: i32,
    pub temperature_max_c: i32,
    pub power_max_mw: i64,
    pub power_limit_mw: i64,
    /// The SM clock's median outside the throttled spans, MHz (-1: none).
    pub sm_clock_normal_mhz: i32,
    /// The GPUs throttled.
    pub gpus: Vec<i32>,
    /// First and last throttled instant within the intervals.
    pub first_ns: i64,
    pub last_ns: i64,
}

/// The nearest-rank median of `v`, -1 for none.
fn median(mut v: Vec<i64>) -> i64 {
    nearest_ranks_unsorted(&mut v, &[500]).map_or(-1, |p| p[0])
}

impl GpuState {
    /// The spans of `samples` (any order).
    pub fn of(samples: &[GpuSample]) -> GpuState {
        let mut by_gpu: BTreeMap<i32, Vec<&GpuSample>> = BTreeMap::new();
        for s in samples {
            by_gpu.entry(s.gpu).or_default().push(s);
        }
        let mut spans = BTreeMap::new();
        let mut throttled = BTreeMap::new();
        for (gpu, mut v) in by_gpu {
            v.sort_by_key(|s| s.ts_ns);
            let period = median(v.windows(2).map(|w| w[1].ts_ns - w[0].ts_ns).filter(|d| *d > 0).collect()).max(0);
            let list: Vec<Span> = v
                .iter()
                .enumerate()
                .map(|(i, s)| Span {
                    start: s.ts_ns,
                    end: v.get(i + 1).map_or(s.ts_ns + period, |n| n.ts_ns),
                    sample: (*s).clone(),
                })
                .collect();
            let hot =
                list.iter().filter(|s| s.sample.throttle_reasons & SLOWING_REASONS != 0).map(|s| (s.start, s.end));
            throttled.insert(gpu, merge_intervals(hot.collect()));
            spans.insert(gpu, list);
        }
        GpuState { spans, throttled, used_by: BTreeMap::new() }
    }

    /// Match each process's calls to the GPUs it used (`gpu_devices` rows with an NVML index).
    pub fn with_devices(mut self, devices: &[GpuDevice]) -> GpuState {
        for d in devices.iter().filter(|d| d.nvml_index >= 0) {
            let v = self.used_by.entry(d.pid).or_default();
            if !v.contains(&d.nvml_index) {
                v.push(d.nvml_index);
                v.sort_unstable();
            }
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Every GPU's samples as spans, by time.
    pub(crate) fn spans(&self) -> &BTreeMap<i32, Vec<Span>> {
        &self.spans
    }

    /// Whether the device timeline mapped any process to its GPUs.
    pub(crate) fn maps_processes(&self) -> bool {
        !self.used_by.is_empty()
    }

    /// Whether a call of `pid` can have run on `gpu`.
    pub(crate) fn may_use(&self, pid: u32, gpu: i32) -> bool {
        self.used_by.get(&pid).is_none_or(|v| v.contains(&gpu))
    }

    /// ns of `[a, b]` while a GPU `pid` may have used was throttled (any GPU: pid 0 and a process
    /// the device timeline does not map).
    pub fn throttled_overlap(&self, pid: u32, a: i64, b: i64) -> i64 {
        let windows: Vec<(i64, i64)> = self
            .throttled
            .iter()
            .filter(|(g, _)| self.may_use(pid, **g))
            .flat_map(|(_, w)| w.iter().copied())
            .collect();
        let windows = merge_intervals(windows);
        let i = windows.partition_point(|w| w.1 <= a);
        windows[i..].iter().take_while(|w| w.0 < b).map(|w| overlap(a, b, w.0, w.1)).sum()
    }

    /// What the samples say about `intervals` (each of a process: `(pid, start, end)`), each
    /// matched to the GPUs its process used: None when no part of them was throttled.
    pub fn throttle_facts(&self, intervals: &[(u32, i64, i64)]) -> Option<ThrottleFacts> {
        let throttled_ns: i64 = intervals.iter().map(|&(p, a, b)| self.throttled_overlap(p, a, b)).sum();
        if throttled_ns == 0 {
            return None;
        }
        let mut f = ThrottleFacts {
            throttled_ns,
            reasons: 0,
            sm_clock_min_mhz: i32::MAX,
            sm_clock_max_mhz: -1,
            temperature_max_c: -1,
            power_max_mw: -1,
            power_limit_mw: -1,
            sm_clock_normal_mhz: -1,
            gpus: Vec::new(),
            first_ns: i64::MAX,
            last_ns: i64::MIN,
        };
        for (gpu, spans) in &self.spans {
            for s in spans {
                let slowing = s.sample.throttle_reasons & SLOWING_REASONS;
                if slowing == 0 {
                    continue;
                }
                let touched: Vec<(i64, i64)> = intervals
                    .iter()
                    .filter(|&&(p, a, b)| self.may_use(p, *gpu) && overlap(a, b, s.start, s.end) > 0)
                    .map(|&(_, a, b)| (a.max(s.start), b.min(s.end)))
                    .collect();
                if touched.is_empty() {
                    continue;
                }
                f.reasons |= slowing;
                if s.sample.sm_clock_mhz >= 0 {
                    f.sm_clock_min_mhz = f.sm_clock_min_mhz.min(s.sample.sm_clock_mhz);
                }
                f.sm_clock_max_mhz = f.sm_clock_max_mhz.max(s.sample.sm_clock_max_mhz);
                f.temperature_max_c = f.temperature_max_c.max(s.sample.temperature_c);
                f.power_max_mw = f.power_max_mw.max(s.sample.power_mw);
                f.power_limit_mw = f.power_limit_mw.max(s.sample.power_limit_mw);
                if !f.gpus.contains(gpu) {
                    f.gpus.push(*gpu);
                }
                for (a, b) in touched {
                    f.first_ns = f.first_ns.min(a);
                    f.last_ns = f.last_ns.max(b);
                }
            }
        }
        if f.sm_clock_min_mhz == i32::MAX {
            f.sm_clock_min_mhz = -1;
        }
        // the same GPUs' clock when neither throttled nor idle
        let normal: Vec<i64> = f
            .gpus
            .iter()
            .flat_map(|g| &self.spans[g])
            .filter(|s| s.sample.throttle_reasons & (SLOWING_REASONS | 0x1) == 0 && s.sample.sm_clock_mhz >= 0)
            .map(|s| i64::from(s.sample.sm_clock_mhz))
            .collect();
        f.sm_clock_normal_mhz = median(normal) as i32;
        Some(f)
    }

    /// Per GPU, its state over the samples held.
    pub fn summaries(&self) -> Vec<GpuSummary> {
        let mut out = Vec::new();
        for (gpu, spans) in &self.spans {
            let known = |f: fn(&GpuSample) -> i64| -> Vec<i64> {
                spans.iter().map(|s| f(&s.sample)).filter(|v| *v >= 0).collect()
            };
            let clocks = known(|s| i64::from(s.sm_clock_mhz));
            let mut by_reason: BTreeMap<String, i64> = BTreeMap::new();
            let mut throttled_ns = 0;
            for s in spans.iter().filter(|s| s.sample.throttle_reasons & SLOWING_REASONS != 0) {
                throttled_ns += s.end - s.start;
                for name in throttle_reason_names(s.sample.throttle_reasons & SLOWING_REASONS) {
                    *by_reason.entry(name).or_default() += s.end - s.start;
                }
            }
            let delta = |f: fn(&GpuSample) -> i64| -> i64 {
                let v = known(f);
                match (v.first(), v.last()) {
                    (Some(a), Some(b)) => b - a,
                    _ => -1,
                }
            };
            out.push(GpuSummary {
                gpu: *gpu,
                samples: spans.len() as u64,
                sm_clock_p50_mhz: median(clocks.clone()) as i32,
                sm_clock_min_mhz: clocks.iter().min().map_or(-1, |v| *v as i32),
                sm_clock_max_mhz: spans.iter().map(|s| s.sample.sm_clock_max_mhz).max().unwrap_or(-1),
                temperature_max_c: spans.iter().map(|s| s.sample.temperature_c).max().unwrap_or(-1),
                power_max_mw: spans.iter().map(|s| s.sample.power_mw).max().unwrap_or(-1),
                power_limit_mw: spans.iter().map(|s| s.sample.power_limit_mw).max().unwrap_or(-1),
                util_gpu_p50_pct: median(known(|s| i64::from(s.util_gpu_pct))) as i32,
                throttled_ns,
                throttled_by_reason: by_reason,
                ecc_corrected: delta(|s| s.ecc_corrected),
                ecc_uncorrected: delta(|s| s.ecc_uncorrected),
                link: crate::gpu_link::LinkSummary::of(spans),
            });
        }
        out
    }
}

impl ThrottleFacts {
    /// `GPU 0 throttled (hw_thermal_slowdown): SM clock 495 MHz (1980 MHz before, max 1980), 91 °C`.
    pub fn words(&self) -> String {
        let gpus: Vec<String> = self.gpus.iter().map(|g| g.to_string()).collect();
        let mut w = format!("GPU {} throttled ({})", gpus.join(", "), throttle_reason_names(self.reasons).join(", "));
        if self.sm_clock_min_mhz >= 0 {
            w.push_str(&format!(": SM clock down to {} MHz", self.sm_clock_min_mhz));
            if self.sm_clock_normal_mhz >= 0 {
                w.push_str(&format!(" from {} MHz", self.sm_clock_normal_mhz));
            }
            if self.sm_clock_max_mhz >= 0 {
                w.push_str(&format!(" (max {} MHz)", self.sm_clock_max_mhz));
            }
        }
        if self.temperature_max_c >= 0 {
            w.push_str(&format!(", {} °C", self.temperature_max_c));
        }
        if self.power_max_mw >= 0 && self.power_limit_mw > 0 {
            w.push_str(&format!(", {} of {} W", self.power_max_mw / 1000, self.power_limit_mw / 1000));
        }
        w
    }

    /// The SQL that lists the throttled samples behind these facts (of the GPUs named).
    pub fn sql(&self) -> String {
        let gpus: Vec<String> = self.gpus.iter().map(i32::to_string).collect();
        format!(
            "SELECT timestamp, gpu, sm_clock_mhz, sm_clock_max_mhz, throttle_reasons, temperature_c, power_mw FROM gpu_samples WHERE throttle_reasons & {SLOWING_REASONS} <> 0 AND gpu IN ({}) AND timestamp BETWEEN {} AND {} ORDER BY timestamp",
            gpus.join(", "),
            self.first_ns - 1_000_000_000,
            self.last_ns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn s(ts_ms: i64, gpu: i32, reasons: i64, clock: i32) -> GpuSample {
        GpuSample {
            ts_ns: ts_ms * MS,
            gpu,
            sm_clock_mhz: clock,
            sm_clock_max_mhz: 1980,
            throttle_reasons: reasons,
            temperature_c: if reasons & 0x40 != 0 { 91 } else { 55 },
            power_mw: 450_000,
            power_limit_mw: 700_000,
            util_gpu_pct: 97,
            ecc_corrected: 3,
            ..Default::default()
        }
    }

    /// GPU 0 sampled every 100 ms for 2 s, thermally throttled from 500 ms to 1100 ms; GPU 1 idle.
    fn run() -> Vec<GpuSample> {
        let mut v = Vec::new();
        for i in 0..20 {
            let hot = (5..11).contains(&i);
            v.push(s(i * 100, 0, if hot { 0x40 } else { 0 }, if hot { 495 } else { 1980 }));
            v.push(s(i * 100, 1, 0x1, 210));
        }
        v
    }

    #[test]
    fn throttled_windows_come_from_slowing_reasons_only() {
        let g = GpuState::of(&run());
        assert_eq!(g.throttled_overlap(7, 0, 2000 * MS), 600 * MS, "idle (0x1) is not throttling");
        assert_eq!(g.throttled_overlap(7, 1000 * MS, 1600 * MS), 100 * MS);
        assert_eq!(g.throttled_overlap(7, 0, 500 * MS), 0);
        let f = g.throttle_facts(&[(7, 900 * MS, 1200 * MS)]).unwrap();
        assert_eq!((f.throttled_ns, f.reasons, f.sm_clock_min_mhz, f.sm_clock_normal_mhz), (200 * MS, 0x40, 495, 1980));
        assert_eq!((f.gpus.clone(), f.temperature_max_c, f.first_ns, f.last_ns), (vec![0], 91, 900 * MS, 1100 * MS));
        assert!(
            f.words().starts_with("GPU 0 throttled (hw_thermal_slowdown): SM clock down to 495 MHz from 1980 MHz"),
            "{}",
            f.words()
        );
        assert!(g.throttle_facts(&[(7, 0, 400 * MS)]).is_none());
    }

    #[test]
    fn a_call_is_matched_to_the_gpus_its_process_used() {
        let device =
            |pid, nvml_index| GpuDevice { pid, device: 0, uuid: String::new(), name: String::new(), nvml_index };
        // pid 7 ran on GPU 1 (idle, never throttled), pid 8 on GPU 0 (throttled), pid 9 unmapped
        let g = GpuState::of(&run()).with_devices(&[device(7, 1), device(8, 0), device(9, -1)]);
        assert_eq!(g.throttled_overlap(7, 0, 2000 * MS), 0, "GPU 0's throttle is not pid 7's");
        assert!(g.throttle_facts(&[(7, 900 * MS, 1200 * MS)]).is_none());
        assert_eq!(g.throttled_overlap(8, 0, 2000 * MS), 600 * MS);
        assert_eq!(g.throttled_overlap(9, 0, 2000 * MS), 600 * MS, "unmapped: any GPU");
        let f = g.throttle_facts(&[(7, 900 * MS, 1200 * MS), (8, 1000 * MS, 1050 * MS)]).unwrap();
        assert_eq!((f.throttled_ns, f.gpus.clone()), (50 * MS, vec![0]));
        assert!(f.sql().contains("AND gpu IN (0) AND"), "{}", f.sql());
    }

    #[test]
    fn summaries_are_exact_per_gpu() {
        let g = GpuState::of(&run());
        let s = g.summaries();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].gpu, s[0].samples, s[0].sm_clock_min_mhz, s[0].sm_clock_p50_mhz), (0, 20, 495, 1980));
        assert_eq!(s[0].throttled_ns, 600 * MS);
        assert_eq!(s[0].throttled_by_reason.get("hw_thermal_slowdown"), Some(&(600 * MS)));
        assert_eq!((s[0].temperature_max_c, s[0].ecc_corrected), (91, 0));
        assert_eq!((s[1].throttled_ns, s[1].sm_clock_p50_mhz), (0, 210), "idle GPU 1: clocks down, not throttled");
    }
}
