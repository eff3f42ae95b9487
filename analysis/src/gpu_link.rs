//! The GPUs' links from the NVML samples (`gpu_samples`): the PCIe link's generation and width
//! against their maximum, and the NVLink error counters.
//!
//! An idle GPU lowers its PCIe link on purpose (power saving) and raises it again within
//! microseconds of work, so the link is judged only over **busy** samples: kernels ran for at
//! least [`BUSY_UTIL_PCT`] of the sample period, or PCIe moved at least [`BUSY_PCIE_KBPS`] (both
//! directions). A busy sample whose link ran below its maximum generation or width is
//! **degraded** ([`GpuSample::pcie_degraded`]). The NVLink counters are cumulative: the errors
//! counted between two samples of a GPU are the rise of their sum
//! ([`GpuSample::nvlink_errors`]). Each rule is written once in Rust and once in SQL
//! ([`busy_sql`], [`degraded_sql`], [`nvlink_errors_sql`]) for the chains' evidence;
//! `analysis/tests/gpu_links.rs` holds the two to the same rows.

use causeway_model::GpuSample;

use crate::gpu_state::Span;

/// A sample whose kernels ran at least this share of its period is busy.
pub const BUSY_UTIL_PCT: i32 = 10;
/// A sample whose PCIe traffic (transmit plus receive) is at least this, KB/s, is busy.
pub const BUSY_PCIE_KBPS: i64 = 100_000;

/// Whether the GPU was working during the sample (see the module doc).
pub fn is_busy(s: &GpuSample) -> bool {
    s.util_gpu_pct >= BUSY_UTIL_PCT || s.pcie_tx_kbps.max(0) + s.pcie_rx_kbps.max(0) >= BUSY_PCIE_KBPS
}

/// [`is_busy`] as a SQL condition over `gpu_samples`.
pub fn busy_sql() -> String {
    format!(
        "(util_gpu_pct >= {BUSY_UTIL_PCT} OR (CASE WHEN pcie_tx_kbps > 0 THEN pcie_tx_kbps ELSE 0 END) + \
         (CASE WHEN pcie_rx_kbps > 0 THEN pcie_rx_kbps ELSE 0 END) >= {BUSY_PCIE_KBPS})"
    )
}

/// [`GpuSample::pcie_degraded`] as a SQL condition over `gpu_samples`.
pub fn degraded_sql() -> &'static str {
    "((pcie_link_gen > 0 AND pcie_link_gen < pcie_link_gen_max) OR \
     (pcie_link_width > 0 AND pcie_link_width < pcie_link_width_max))"
}

/// [`GpuSample::nvlink_errors`] as a SQL expression over `gpu_samples` (NULL where no counter is
/// reported).
pub fn nvlink_errors_sql() -> &'static str {
    "(CASE WHEN nvlink_crc_flit_errors < 0 AND nvlink_crc_data_errors < 0 AND nvlink_replay_errors < 0 \
     AND nvlink_recovery_errors < 0 THEN NULL ELSE \
     (CASE WHEN nvlink_crc_flit_errors > 0 THEN nvlink_crc_flit_errors ELSE 0 END) + \
     (CASE WHEN nvlink_crc_data_errors > 0 THEN nvlink_crc_data_errors ELSE 0 END) + \
     (CASE WHEN nvlink_replay_errors > 0 THEN nvlink_replay_errors ELSE 0 END) + \
     (CASE WHEN nvlink_recovery_errors > 0 THEN nvlink_recovery_errors ELSE 0 END) END)"
}

/// One GPU's links over the samples held (for `stats`; -1: not reported).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct LinkSummary {
    /// The PCIe link's highest generation (the maximum NVML reports for this device and system).
    pub pcie_link_gen_max: i32,
    /// The PCIe link's widest width, lanes.
    pub pcie_link_width_max: i32,
    /// The lowest generation the link ran at while the GPU was busy (-1: never busy).
    pub pcie_link_gen_busy_min: i32,
    /// The narrowest width the link ran at while the GPU was busy (-1: never busy).
    pub pcie_link_width_busy_min: i32,
    /// Samples taken while the GPU was busy.
    pub busy_samples: u64,
    /// Of the busy samples, those with the link below its maximum generation or width.
    pub pcie_degraded_busy_samples: u64,
    /// The time those degraded busy samples describe, ns.
    pub pcie_degraded_busy_ns: i64,
    /// NVLink errors counted during the trace (the rise of the counters' sum), -1 when the GPU
    /// reports none of them.
    pub nvlink_errors: i64,
}

impl LinkSummary {
    /// The summary of one GPU's spans.
    pub(crate) fn of(spans: &[Span]) -> LinkSummary {
        let max_of = |f: fn(&GpuSample) -> i32| spans.iter().map(|s| f(&s.sample)).max().unwrap_or(-1).max(-1);
        let busy: Vec<&Span> = spans.iter().filter(|s| is_busy(&s.sample)).collect();
        let busy_min =
            |f: fn(&GpuSample) -> i32| busy.iter().map(|s| f(&s.sample)).filter(|v| *v > 0).min().unwrap_or(-1);
        let degraded: Vec<&&Span> = busy.iter().filter(|s| s.sample.pcie_degraded()).collect();
        LinkSummary {
            pcie_link_gen_max: max_of(|s| s.pcie_link_gen_max),
            pcie_link_width_max: max_of(|s| s.pcie_link_width_max),
            pcie_link_gen_busy_min: busy_min(|s| s.pcie_link_gen),
            pcie_link_width_busy_min: busy_min(|s| s.pcie_link_width),
            busy_samples: busy.len() as u64,
            pcie_degraded_busy_samples: degraded.len() as u64,
            pcie_degraded_busy_ns: degraded.iter().map(|s| s.end - s.start).sum(),
            nvlink_errors: nvlink_errors_counted(spans),
        }
    }
}

/// The NVLink errors counted over `spans` (the largest sum minus the smallest, the counters only
/// rising), -1 when none is reported.
pub(crate) fn nvlink_errors_counted(spans: &[Span]) -> i64 {
    let v: Vec<i64> = spans.iter().map(|s| s.sample.nvlink_errors()).filter(|e| *e >= 0).collect();
    match (v.iter().min(), v.iter().max()) {
        (Some(a), Some(b)) => b - a,
        _ => -1,
    }
}

/// The intervals over which a GPU's NVLink error counters rose: from a sample to the next whose
/// sum is higher, with the errors counted then.
pub(crate) fn nvlink_rises(spans: &[Span]) -> Vec<(i64, i64, i64)> {
    let counted: Vec<(i64, i64)> =
        spans.iter().map(|s| (s.start, s.sample.nvlink_errors())).filter(|(_, e)| *e >= 0).collect();
    counted.windows(2).filter(|w| w[1].1 > w[0].1).map(|w| (w[0].0, w[1].0, w[1].1 - w[0].1)).collect()
}

/// The spans of a GPU whose link ran below its maximum while the GPU was busy.
pub(crate) fn degraded_busy(spans: &[Span]) -> Vec<&Span> {
    spans.iter().filter(|s| is_busy(&s.sample) && s.sample.pcie_degraded()).collect()
}

/// The PCIe bandwidth of a link, MB/s per direction (per-lane rates of generations 1 .. 6 times
/// the width); 0 when not known.
pub fn pcie_mbps(gen: i32, width: i32) -> i64 {
    const LANE: [i64; 7] = [0, 250, 500, 985, 1969, 3938, 7563];
    usize::try_from(gen).ok().and_then(|g| LANE.get(g)).map_or(0, |r| r * i64::from(width.max(0)))
}

/// `gen 1 x16`.
pub fn link_words(gen: i32, width: i32) -> String {
    let g = if gen > 0 { format!("gen {gen}") } else { "gen ?".to_string() };
    if width > 0 {
        format!("{g} x{width}")
    } else {
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_state::GpuState;

    const MS: i64 = 1_000_000;

    fn s(ts_ms: i64, util: i32, pcie_kbps: i64, gen: i32, errors: i64) -> GpuSample {
        GpuSample {
            ts_ns: ts_ms * MS,
            util_gpu_pct: util,
            pcie_tx_kbps: pcie_kbps,
            pcie_rx_kbps: -1,
            pcie_link_gen: gen,
            pcie_link_gen_max: 5,
            pcie_link_width: 16,
            pcie_link_width_max: 16,
            nvlink_crc_flit_errors: errors,
            nvlink_crc_data_errors: -1,
            nvlink_replay_errors: if errors < 0 { -1 } else { 1 },
            nvlink_recovery_errors: -1,
            ..Default::default()
        }
    }

    #[test]
    fn the_link_is_judged_only_while_busy() {
        // idle at gen 1 (power saving), then busy at gen 5, then busy at gen 1 (degraded), then a
        // copy at gen 2 with no kernel (busy by its PCIe traffic)
        let v = vec![
            s(0, 0, 0, 1, 0),
            s(100, 0, 50, 1, 0),
            s(200, 97, 0, 5, 0),
            s(300, 97, 0, 1, 4),
            s(400, 97, 0, 1, 4),
            s(500, 0, 2_000_000, 2, 9),
            s(600, 0, 0, 1, 9),
        ];
        let g = GpuState::of(&v);
        let l = LinkSummary::of(&g.spans()[&0]);
        assert_eq!((l.busy_samples, l.pcie_degraded_busy_samples, l.pcie_degraded_busy_ns), (4, 3, 300 * MS));
        assert_eq!((l.pcie_link_gen_max, l.pcie_link_gen_busy_min, l.pcie_link_width_busy_min), (5, 1, 16));
        assert_eq!(l.nvlink_errors, 9);
        assert_eq!(nvlink_rises(&g.spans()[&0]), vec![(200 * MS, 300 * MS, 4), (400 * MS, 500 * MS, 5)]);
        // an idle GPU at gen 1 all along: nothing degraded
        let idle: Vec<GpuSample> = (0..5).map(|i| s(i * 100, 0, 10, 1, -1)).collect();
        let l = LinkSummary::of(&GpuState::of(&idle).spans()[&0]);
        assert_eq!(
            (l.busy_samples, l.pcie_degraded_busy_samples, l.pcie_link_gen_busy_min, l.nvlink_errors),
            (0, 0, -1, -1)
        );
    }

    #[test]
    fn link_words_and_bandwidth() {
        assert_eq!((link_words(1, 16), link_words(5, -1)), ("gen 1 x16".to_string(), "gen 5".to_string()));
        assert_eq!((pcie_mbps(1, 16), pcie_mbps(5, 16), pcie_mbps(-1, 16), pcie_mbps(9, 16)), (4000, 63008, 0, 0));
    }
}
