//! The severity rules of every chain, as named thresholds: the functions that grade a chain and the
//! rule text `explain` reports (`Explanation::severity_rules`) are both made from these values, so
//! the rules a user reads are the rules applied.

use crate::chains::Severity;

const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;

/// HIGH from `high_pct` percent of what the chain is measured against and `high_ns`; MEDIUM from
/// `medium_pct` percent and `medium_ns`; else LOW.
#[derive(Debug, Clone, Copy)]
pub struct ShareRule {
    /// The chains it grades.
    pub subject: &'static str,
    /// What the share is a share of, in words (`of slow-call time`).
    pub share_of: &'static str,
    /// `stall ` where the time is a stall, empty where it is a detector's own figure.
    pub measure: &'static str,
    pub high_pct: u32,
    pub high_ns: i64,
    pub medium_pct: u32,
    /// [`NO_FLOOR`]: MEDIUM by share alone.
    pub medium_ns: i64,
}

/// A MEDIUM threshold with no time floor.
pub const NO_FLOOR: i64 = i64::MIN;

/// Slow calls with a host cause; the share is of all slow-call time in scope.
pub const SLOW_CALLS: ShareRule = ShareRule {
    subject: "slow calls with a host cause",
    share_of: "of slow-call time",
    measure: "stall ",
    high_pct: 25,
    high_ns: 10 * MS,
    medium_pct: 5,
    medium_ns: MS,
};

/// Gaps between GPU calls with a host cause; the share is of the thread's GPU-feeding span.
pub const FEEDING_GAPS: ShareRule = ShareRule {
    subject: "gaps between GPU calls with a host cause",
    share_of: "of the thread's feeding span",
    measure: "stall ",
    high_pct: 25,
    high_ns: 100 * MS,
    medium_pct: 5,
    medium_ns: 10 * MS,
};

/// The detectors' findings (sync storm, allocator latency growth, cudaFree storm).
pub const DETECTORS: ShareRule = ShareRule {
    subject: "sync storm, allocator latency growth, cudaFree storm",
    share_of: "of the thread's or process's feeding span",
    measure: "",
    high_pct: 25,
    high_ns: 100 * MS,
    medium_pct: 10,
    medium_ns: NO_FLOOR,
};

/// A straggler rank at NCCL collectives; the share is of the other ranks' time from their first
/// collective to their last that they waited for it in its worst stretch (`Straggler::worst_stretch`:
/// the densest run of collectives it reached late), net of what it waited for them there. A busy
/// host makes every rank late now and then, scattered (two ranks sharing 2 cores with their
/// tracer: late at a tenth to a quarter of their collectives, up to a net 5.9% of the span over
/// the whole run): scattered lateness makes short stretches; a real slowdown, one long one.
pub const STRAGGLER: ShareRule = ShareRule {
    subject: "a straggler rank at NCCL collectives",
    share_of:
        "of the other ranks' collective span waited for it in its worst stretch net of what it waited for them there",
    measure: "net wait ",
    high_pct: 10,
    high_ns: 20 * MS,
    medium_pct: 3,
    medium_ns: 5 * MS,
};

/// When the GPU is the bottleneck: if the slow calls' GPU time (waits for the GPU, a throttled GPU)
/// is at least `majority_pct` percent of all slow-call time, the GPU-time chains are graded like a
/// cause ([`SLOW_CALLS`]), so the first line says the GPU was slower, and a host cause below
/// `host_medium_pct` percent is not MEDIUM on its own.
#[derive(Debug, Clone, Copy)]
pub struct GpuBoundRule {
    pub majority_pct: u32,
    pub host_medium_pct: u32,
}

pub const GPU_BOUND: GpuBoundRule = GpuBoundRule { majority_pct: 50, host_medium_pct: 10 };

impl GpuBoundRule {
    /// Whether `gpu_share` (0..1) of slow-call time is GPU time makes the GPU the bottleneck.
    pub fn gpu_bound(&self, gpu_share: f64) -> bool {
        gpu_share >= self.majority_pct as f64 / 100.0
    }

    pub fn describe(&self) -> String {
        format!(
            "when >= {}% of slow-call time is GPU time (gpu_wait, spin_gpu_busy, gpu_throttled): GPU-time chains are graded as slow calls with a cause (at most MEDIUM unless gpu_throttled), and a host cause under {}% of slow-call time is at most LOW",
            self.majority_pct, self.host_medium_pct
        )
    }
}

/// A throughput drop: HIGH when the launch rate fell to `high_rate_pct` percent or less and
/// `high_lost_ns` was lost; MEDIUM from `medium_lost_ns` lost; else LOW.
#[derive(Debug, Clone, Copy)]
pub struct DropRule {
    pub high_rate_pct: u32,
    pub high_lost_ns: i64,
    pub medium_lost_ns: i64,
}

pub const THROUGHPUT_DROP: DropRule = DropRule { high_rate_pct: 25, high_lost_ns: S, medium_lost_ns: 100 * MS };

/// The GPU's links and memory (NVML): a degraded link's chain is HIGH when its slow transfers
/// were at least twice as slow as the same processes' transfers over the whole link (or, with none
/// to compare, when the link ran at half its bandwidth or less) and took `link_high_ns` or more,
/// LOW when they were no slower than those, else MEDIUM; memory a context left behind is HIGH
/// from `held_high_pct` percent of the GPU's memory, else MEDIUM; memory that kept rising is
/// MEDIUM with allocations never freed in the trace, else LOW.
#[derive(Debug, Clone, Copy)]
pub struct GpuHealthRule {
    pub link_high_ns: i64,
    pub held_high_pct: u32,
}

pub const GPU_HEALTH: GpuHealthRule = GpuHealthRule { link_high_ns: 100 * MS, held_high_pct: 10 };

impl GpuHealthRule {
    /// A degraded link's chain: `slower` (against transfers over the whole link; None: none to
    /// compare), whether the link ran at half its bandwidth or less, the slow transfers' time.
    pub fn link(&self, slower: Option<bool>, half_bandwidth: bool, ns: i64) -> Severity {
        match slower {
            Some(false) => Severity::Low,
            Some(true) if ns >= self.link_high_ns => Severity::High,
            None if half_bandwidth && ns >= self.link_high_ns => Severity::High,
            _ => Severity::Medium,
        }
    }

    /// Memory a context left behind: `bytes` of the GPU's `total` (-1: not known).
    pub fn held(&self, bytes: i64, total: i64) -> Severity {
        if total > 0 && bytes.saturating_mul(100) >= total.saturating_mul(i64::from(self.held_high_pct)) {
            Severity::High
        } else {
            Severity::Medium
        }
    }

    /// Memory that kept rising, with or without allocations never freed.
    pub fn growth(&self, unfreed_allocations: bool) -> Severity {
        if unfreed_allocations {
            Severity::Medium
        } else {
            Severity::Low
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "GPU links and memory (NVML): a degraded PCIe link or NVLink is HIGH when its slow transfers were >= 2x as slow as the others (none to compare: the link at <= half its bandwidth) and took >= {}, LOW when no slower, else MEDIUM; memory left behind by a process that is gone is HIGH from {}% of the GPU's memory, else MEDIUM; memory that kept rising is MEDIUM with allocations never freed, else LOW",
            threshold(self.link_high_ns),
            self.held_high_pct
        )
    }
}

/// The chains that are always LOW, in words.
pub const ALWAYS_LOW: &str =
    "otherwise no host cause (on_cpu_or_gpu, gpu_wait, spin_gpu_busy), no_sched_data, unfreed allocations: always LOW";

/// `10 ms`, `1 s`: a threshold in its own unit.
fn threshold(ns: i64) -> String {
    if ns % S == 0 {
        format!("{} s", ns / S)
    } else {
        format!("{} ms", ns / MS)
    }
}

impl ShareRule {
    /// The severity of a chain with this `share` (0..1) and this much time.
    pub fn grade(&self, share: f64, ns: i64) -> Severity {
        if share >= self.high_pct as f64 / 100.0 && ns >= self.high_ns {
            Severity::High
        } else if share >= self.medium_pct as f64 / 100.0 && ns >= self.medium_ns {
            Severity::Medium
        } else {
            Severity::Low
        }
    }

    pub fn describe(&self) -> String {
        let medium_floor = if self.medium_ns != NO_FLOOR {
            format!(" and {}>= {}", self.measure, threshold(self.medium_ns))
        } else {
            String::new()
        };
        format!(
            "{}: HIGH if share >= {}% {} and {}>= {}; MEDIUM if share >= {}%{medium_floor}; else LOW",
            self.subject,
            self.high_pct,
            self.share_of,
            self.measure,
            threshold(self.high_ns),
            self.medium_pct
        )
    }
}

impl DropRule {
    /// The severity of a drop to `rate_ratio` (rate during / rate before) that lost `lost_ns`.
    pub fn grade(&self, rate_ratio: f64, lost_ns: i64) -> Severity {
        if rate_ratio <= self.high_rate_pct as f64 / 100.0 && lost_ns >= self.high_lost_ns {
            Severity::High
        } else if lost_ns >= self.medium_lost_ns {
            Severity::Medium
        } else {
            Severity::Low
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "throughput drop: HIGH if the launch rate fell to <= {}% and >= {} was lost; MEDIUM if >= {} was lost; else LOW",
            self.high_rate_pct,
            threshold(self.high_lost_ns),
            threshold(self.medium_lost_ns)
        )
    }
}

/// Every rule in words, as `explain` reports them.
pub fn rules() -> Vec<String> {
    vec![
        SLOW_CALLS.describe(),
        FEEDING_GAPS.describe(),
        THROUGHPUT_DROP.describe(),
        DETECTORS.describe(),
        STRAGGLER.describe(),
        GPU_BOUND.describe(),
        GPU_HEALTH.describe(),
        ALWAYS_LOW.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_read_as_they_grade() {
        assert_eq!(
            rules(),
            vec![
                "slow calls with a host cause: HIGH if share >= 25% of slow-call time and stall >= 10 ms; MEDIUM if share >= 5% and stall >= 1 ms; else LOW",
                "gaps between GPU calls with a host cause: HIGH if share >= 25% of the thread's feeding span and stall >= 100 ms; MEDIUM if share >= 5% and stall >= 10 ms; else LOW",
                "throughput drop: HIGH if the launch rate fell to <= 25% and >= 1 s was lost; MEDIUM if >= 100 ms was lost; else LOW",
                "sync storm, allocator latency growth, cudaFree storm: HIGH if share >= 25% of the thread's or process's feeding span and >= 100 ms; MEDIUM if share >= 10%; else LOW",
                "a straggler rank at NCCL collectives: HIGH if share >= 10% of the other ranks' collective span waited for it in its worst stretch net of what it waited for them there and net wait >= 20 ms; MEDIUM if share >= 3% and net wait >= 5 ms; else LOW",
                "when >= 50% of slow-call time is GPU time (gpu_wait, spin_gpu_busy, gpu_throttled): GPU-time chains are graded as slow calls with a cause (at most MEDIUM unless gpu_throttled), and a host cause under 10% of slow-call time is at most LOW",
                "GPU links and memory (NVML): a degraded PCIe link or NVLink is HIGH when its slow transfers were >= 2x as slow as the others (none to compare: the link at <= half its bandwidth) and took >= 100 ms, LOW when no slower, else MEDIUM; memory left behind by a process that is gone is HIGH from 10% of the GPU's memory, else MEDIUM; memory that kept rising is MEDIUM with allocations never freed, else LOW",
                "otherwise no host cause (on_cpu_or_gpu, gpu_wait, spin_gpu_busy), no_sched_data, unfreed allocations: always LOW",
            ]
        );
    }

    #[test]
    fn each_threshold_is_inclusive_and_both_conditions_count() {
        use Severity::*;
        let r = SLOW_CALLS;
        assert_eq!(r.grade(0.25, 10 * MS), High);
        assert_eq!(r.grade(0.2499, 10 * MS), Medium);
        assert_eq!(r.grade(0.9, 10 * MS - 1), Medium);
        assert_eq!(r.grade(0.05, MS), Medium);
        assert_eq!(r.grade(0.9, MS - 1), Low);
        assert_eq!(r.grade(0.0499, 5 * S), Low);
        assert_eq!(DETECTORS.grade(0.10, 0), Medium, "no floor for MEDIUM");
        assert_eq!(DETECTORS.grade(0.10, -1), Medium);
        assert_eq!(DETECTORS.grade(0.25, 100 * MS - 1), Medium);
        assert_eq!(THROUGHPUT_DROP.grade(0.25, S), High);
        assert_eq!(THROUGHPUT_DROP.grade(0.26, S), Medium);
        assert_eq!(THROUGHPUT_DROP.grade(0.0, 100 * MS - 1), Low);
    }
}
