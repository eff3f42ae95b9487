//! The explain stage for a GPU's links (NVML samples, [`crate::gpu_link`]): copies and collectives
//! that ran over a link that was not whole become `degraded_link` chains, one per GPU and link:
//!
//! - **PCIe**: the GPU's link ran below its maximum generation or width while the GPU was busy
//!   (an idle GPU lowering its link is never named), during slow synchronous copies or collectives
//!   of a process on that GPU (slow: [`slow_over`]);
//! - **NVLink**: the GPU's NVLink error counters rose while collectives of a process on that GPU
//!   ran, and those collectives were slower than the ones that ran while they did not.
//!
//! A copy's time is its call; a collective's is from its call to the end of the first wait for the
//! GPU its thread made after it (when the host saw it done: an NCCL call only queues its work). The
//! transfers that ran over the bad link are compared with those of the same processes that did not:
//! nearest-rank medians, exact over the calls in scope. A process is matched to the GPUs the device
//! timeline says it used (`gpu_devices`); without that map every process may have used any GPU,
//! and the chain says so. Every figure is the stored rows': the evidence SQL counts the samples.

use std::collections::{BTreeMap, HashMap};

use causeway_model::codes::{gpu_role, GpuRole, OpCode};
use causeway_model::time::fmt_ns;

use super::Found;
use crate::attribution::{self as attr, SLOW_P50_MULTIPLE};
use crate::chains::{Chain, ChainKind, Evidence, TimelineStep};
use crate::gpu_link::{self, busy_sql, degraded_sql, link_words, nvlink_errors_sql};
use crate::gpu_memory::fmt_bytes;
use crate::gpu_state::{GpuState, Span};
use crate::severity::GPU_HEALTH;
use crate::stats::nearest_ranks_unsorted;
use crate::trace_data::Names;

/// A link is named only over at least this many busy samples below its maximum (one is a
/// transition caught mid-way).
const MIN_DEGRADED_SAMPLES: usize = 2;
/// Transfers shown in a chain's timeline and evidence.
const WORST_SHOWN: usize = 5;

/// A copy or a collective, with the time it took as the host saw it.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    /// Index of its call in `calls`.
    idx: usize,
    pid: u32,
    op: OpCode,
    start: i64,
    end: i64,
    /// A copy's bytes (0 for a collective).
    bytes: i64,
    collective: bool,
}

impl Transfer {
    fn ns(&self) -> i64 {
        self.end - self.start
    }
    fn overlaps(&self, a: i64, b: i64) -> bool {
        self.start < b && self.end > a
    }
}

/// The top-level copies and collectives of `calls`.
fn transfers(calls: &attr::Calls, found: &Found) -> Vec<Transfer> {
    let mut waits: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
    for (i, c) in calls.iter().enumerate() {
        if !found.nested[i] && matches!(gpu_role(c.op), GpuRole::Sync | GpuRole::SyncCopy) {
            waits.entry(c.tid).or_default().push((c.ts, c.end()));
        }
    }
    for w in waits.values_mut() {
        w.sort_unstable();
    }
    let mut out = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        if found.nested[i] {
            continue;
        }
        let t = |end: i64, bytes: i64, collective: bool| Transfer {
            idx: i,
            pid: c.pid,
            op: c.op,
            start: c.ts,
            end,
            bytes,
            collective,
        };
        match gpu_role(c.op) {
            GpuRole::SyncCopy => out.push(t(c.end(), c.arg0.max(0), false)),
            GpuRole::Collective => {
                // done when the thread's next wait for the GPU returned
                let w = waits.get(&c.tid).and_then(|w| w.get(w.partition_point(|x| x.0 < c.ts)));
                out.push(t(w.map_or(c.end(), |w| w.1.max(c.end())), 0, true));
            }
            _ => {}
        }
    }
    out
}

fn median(v: impl Iterator<Item = i64>) -> i64 {
    let mut v: Vec<i64> = v.collect();
    nearest_ranks_unsorted(&mut v, &[500]).map_or(0, |p| p[0])
}

/// The transfers over a GPU's bad intervals and the others of the same processes.
struct Split<'a> {
    during: Vec<&'a Transfer>,
    clean: Vec<&'a Transfer>,
}

fn split<'a>(
    all: &'a [Transfer],
    gpu: &GpuState,
    g: i32,
    bad: &[(i64, i64)],
    keep: impl Fn(&Transfer) -> bool,
) -> Split<'a> {
    let mut s = Split { during: Vec::new(), clean: Vec::new() };
    for t in all.iter().filter(|t| keep(t) && gpu.may_use(t.pid, g)) {
        let i = bad.partition_point(|b| b.1 <= t.start);
        if bad.get(i).is_some_and(|b| t.overlaps(b.0, b.1)) {
            s.during.push(t);
        } else {
            s.clean.push(t);
        }
    }
    s
}

/// `412 cudaMemcpy (1.6 GiB, 2.1 GB/s), 30 ncclAllReduce` of the transfers, by op.
fn by_op_words(during: &[&Transfer]) -> String {
    let mut by: BTreeMap<OpCode, (usize, i64, i64)> = BTreeMap::new();
    for t in during {
        let e = by.entry(t.op).or_default();
        *e = (e.0 + 1, e.1 + t.ns(), e.2 + t.bytes);
    }
    let words: Vec<String> = by
        .iter()
        .map(|(op, (n, ns, bytes))| {
            let mut w = format!("{n} {} ({} in all", op.name(), fmt_ns(*ns));
            if *bytes > 0 && *ns > 0 {
                w.push_str(&format!(", {}, {:.2} GB/s", fmt_bytes(*bytes), *bytes as f64 / *ns as f64));
            }
            w + ")"
        })
        .collect();
    words.join(", ")
}

/// What the processes were, for the details.
fn who_words(during: &[&Transfer], names: &Names) -> (u32, String) {
    let mut per: BTreeMap<u32, i64> = BTreeMap::new();
    for t in during {
        *per.entry(t.pid).or_default() += t.ns();
    }
    let top = per.iter().max_by_key(|(p, ns)| (**ns, std::cmp::Reverse(**p))).map_or(0, |(p, _)| *p);
    let words: Vec<String> = per
        .keys()
        .map(|p| match names.processes.get(p) {
            Some(n) => format!("{n} (pid {p})"),
            None => format!("pid {p}"),
        })
        .collect();
    (top, words.join(", "))
}

/// The comparison with the transfers that ran over a whole link, and what the bad link can have
/// cost: (words, cost ns, slower by at least [`SLOW_P50_MULTIPLE`]).
fn compared(s: &Split) -> (String, i64, Option<bool>) {
    let during = median(s.during.iter().map(|t| t.ns()));
    if s.clean.is_empty() {
        return (format!("median {}; none of them ran without it to compare", fmt_ns(during)), 0, None);
    }
    let clean = median(s.clean.iter().map(|t| t.ns()));
    let cost: i64 = s.during.iter().map(|t| (t.ns() - clean).max(0)).sum();
    let slower = during >= clean.saturating_mul(SLOW_P50_MULTIPLE);
    (
        format!("median {} against {} for the {} others", fmt_ns(during), fmt_ns(clean), s.clean.len()),
        cost,
        Some(slower),
    )
}

/// The worst transfers as timeline steps and evidence ids.
fn worst(calls: &attr::Calls, during: &[&Transfer], layer: &str) -> (Vec<TimelineStep>, Vec<causeway_store::EventId>) {
    let mut w: Vec<&&Transfer> = during.iter().collect();
    w.sort_by_key(|t| (std::cmp::Reverse(t.ns()), t.start));
    w.truncate(WORST_SHOWN);
    let steps = w
        .iter()
        .map(|t| TimelineStep {
            ts_ns: t.start,
            dur_ns: t.ns(),
            layer: layer.into(),
            what: format!("pid {}: {} took {}", t.pid, t.op.name(), fmt_ns(t.ns())),
            event_id: Some(calls.event_id(&calls[t.idx])),
        })
        .collect();
    let ids = w.iter().map(|t| calls.event_id(&calls[t.idx])).collect();
    (steps, ids)
}

fn mapping_note(gpu: &GpuState, g: i32) -> Option<String> {
    (!gpu.maps_processes()).then(|| {
        format!("the trace does not map processes to GPUs (trace with --gpu-timeline): every traced process's copies and collectives are counted against GPU {g}")
    })
}

/// The chains of every GPU's links in scope.
pub(super) fn link_chains(calls: &attr::Calls, found: &Found, gpu: &GpuState, names: &Names) -> Vec<Chain> {
    if gpu.is_empty() {
        return Vec::new();
    }
    let all = transfers(calls, found);
    let mut out = Vec::new();
    for (&g, spans) in gpu.spans() {
        if let Some(c) = pcie_chain(calls, found, &all, gpu, g, spans, names) {
            out.push(c);
        }
        if let Some(c) = nvlink_chain(calls, &all, gpu, g, spans, names) {
            out.push(c);
        }
    }
    out
}

/// The SQL bounds of one GPU's samples in scope.
fn sample_bounds(spans: &[Span]) -> (i64, i64) {
    (spans.first().map_or(0, |s| s.start), spans.last().map_or(0, |s| s.start))
}

/// Whether a transfer over the degraded link was slow: a copy whose call explain holds slow (its
/// op's threshold), or that moved its bytes at half the degraded link's bandwidth or more (the link
/// was what held it); a collective at least [`SLOW_P50_MULTIPLE`] times the median of the same op's
/// collectives over the whole link (none to compare: not known, not slow).
fn slow_over(t: &Transfer, found: &Found, link_mbps: i64, clean: &BTreeMap<OpCode, i64>) -> bool {
    if t.collective {
        return clean.get(&t.op).is_some_and(|m| t.ns() >= m.saturating_mul(SLOW_P50_MULTIPLE));
    }
    let slow_call = found.baseline.ops.get(&t.op).is_some_and(|th| t.ns() >= *th);
    // bytes per ns is GB/s: at least half the link's MB/s / 1000
    let link_bound = link_mbps > 0 && t.ns() > 0 && t.bytes.saturating_mul(2_000) >= link_mbps.saturating_mul(t.ns());
    slow_call || link_bound
}

fn pcie_chain(
    calls: &attr::Calls,
    found: &Found,
    all: &[Transfer],
    gpu: &GpuState,
    g: i32,
    spans: &[Span],
    names: &Names,
) -> Option<Chain> {
    let degraded = gpu_link::degraded_busy(spans);
    if degraded.len() < MIN_DEGRADED_SAMPLES {
        return None;
    }
    let bad: Vec<(i64, i64)> = crate::trace_data::merge_intervals(degraded.iter().map(|s| (s.start, s.end)).collect());
    let s = split(all, gpu, g, &bad, |_| true);
    let mut clean: BTreeMap<OpCode, Vec<i64>> = BTreeMap::new();
    for t in s.clean.iter().filter(|t| t.collective) {
        clean.entry(t.op).or_default().push(t.ns());
    }
    let clean: BTreeMap<OpCode, i64> = clean.into_iter().map(|(op, v)| (op, median(v.into_iter()))).collect();
    // each transfer against the link of the degraded sample it started in
    let link_at = |t: &Transfer| -> i64 {
        let i = degraded.partition_point(|d| d.end <= t.start);
        degraded.get(i).map_or(0, |d| gpu_link::pcie_mbps(d.sample.pcie_link_gen, d.sample.pcie_link_width))
    };
    let slow: Vec<&Transfer> = s.during.iter().copied().filter(|t| slow_over(t, found, link_at(t), &clean)).collect();
    if slow.is_empty() {
        return None;
    }
    let lowest =
        degraded.iter().min_by_key(|s| (s.sample.pcie_link_gen, s.sample.pcie_link_width)).map(|s| &s.sample)?;
    let (gen, width) = (lowest.pcie_link_gen, lowest.pcie_link_width);
    let (max_gen, max_width) = (lowest.pcie_link_gen_max, lowest.pcie_link_width_max);
    let (now_mbps, max_mbps) = (gpu_link::pcie_mbps(gen, width), gpu_link::pcie_mbps(max_gen, max_width));
    let degraded_ns: i64 = degraded.iter().map(|s| s.end - s.start).sum();
    let slow_ns: i64 = slow.iter().map(|t| t.ns()).sum();
    let kinds = match (slow.iter().any(|t| t.collective), slow.iter().any(|t| !t.collective)) {
        (true, true) => "copies and collectives",
        (true, false) => "collectives",
        _ => "copies",
    };
    let (cmp, _, slower) = compared(&Split { during: slow.clone(), clean: s.clean.clone() });
    let (pid, who) = who_words(&slow, names);
    let summary = format!(
        "GPU {g}'s PCIe link ran at {} (max {}) for {} while busy: {} slow {kinds} took {} over it",
        link_words(gen, width),
        link_words(max_gen, max_width),
        fmt_ns(degraded_ns),
        slow.len(),
        fmt_ns(slow_ns)
    );
    let mut details = vec![
        format!("slow over the degraded link: {} of {who}; {cmp}", by_op_words(&slow)),
        format!(
            "the link carries {now_mbps} MB/s each way at {}, {max_mbps} MB/s at {}; {} busy samples of GPU {g} ran below the maximum; the samples while the GPU was idle are not counted (an idle GPU lowers its link on purpose)",
            link_words(gen, width),
            link_words(max_gen, max_width),
            degraded.len()
        ),
        format!(
            "a transfer over the degraded link is slow when its call was slow for its op, or a copy moved its bytes at half the link's bandwidth or more (the link held it), or a collective took {SLOW_P50_MULTIPLE}x the median of those over the whole link; {} of the {} transfers over it were",
            slow.len(),
            s.during.len()
        ),
    ];
    details.extend(mapping_note(gpu, g));
    let severity = GPU_HEALTH.link(slower, now_mbps > 0 && now_mbps.saturating_mul(2) <= max_mbps, slow_ns);
    if slower == Some(false) {
        details.push(
            "the slow transfers over the degraded link were no slower than the others: it cost them little".into(),
        );
    }
    let (from, to) = sample_bounds(spans);
    let sql = format!(
        "SELECT count(*) AS value FROM gpu_samples WHERE gpu = {g} AND {} AND {} AND timestamp BETWEEN {from} AND {to}",
        busy_sql(),
        degraded_sql()
    );
    let (timeline, event_ids) = worst(calls, &slow, "CUDA");
    Some(Chain {
        id: String::new(),
        key: format!("link/pcie/gpu:{g}"),
        severity,
        kind: ChainKind::DegradedLink,
        op: "PCIe link".into(),
        cause: "pcie_link_degraded".into(),
        cause_text: "the GPU's PCIe link ran below its maximum generation or width while the GPU was busy".into(),
        culprit: None,
        pid,
        tid: None,
        calls: slow.len() as u64,
        stall_ns: slow_ns,
        share: 0.0,
        share_of: "slow copies and collectives over the degraded link (no time share)".into(),
        op_p50_ns: None,
        op_p99_ns: None,
        summary,
        details,
        cpus: Vec::new(),
        kernels: Vec::new(),
        timeline,
        stacks: Vec::new(),
        recommendations: vec![
            format!("Look at GPU {g}'s link under load: `nvidia-smi -q -d PCIE -i {g}` (current against max generation and width) and `lspci -vv` (LnkSta against LnkCap); a link that trains below its maximum while busy points at the slot, a riser or the card's seating, or a BIOS setting that caps the generation"),
            format!("Until it is fixed, keep copy-heavy work off GPU {g}, or overlap its copies with compute (pinned memory, cudaMemcpyAsync on their own stream)"),
        ],
        evidence: Evidence { event_ids, sql, value: degraded.len() as i64, unit: "samples".into() },
        gpu_idle_ns: None,
        cost: None,
    })
}

fn nvlink_chain(
    calls: &attr::Calls,
    all: &[Transfer],
    gpu: &GpuState,
    g: i32,
    spans: &[Span],
    names: &Names,
) -> Option<Chain> {
    let rises = gpu_link::nvlink_rises(spans);
    if rises.is_empty() {
        return None;
    }
    let bad: Vec<(i64, i64)> = rises.iter().map(|r| (r.0, r.1)).collect();
    let s = split(all, gpu, g, &bad, |t| t.collective);
    if s.during.is_empty() {
        return None;
    }
    let (cmp, cost, slower) = compared(&s);
    // the collectives are named only when they were slower (or nothing ran without errors)
    if slower == Some(false) {
        return None;
    }
    let counted = gpu_link::nvlink_errors_counted(spans);
    let during_errors: i64 = rises.iter().filter(|r| s.during.iter().any(|t| t.overlaps(r.0, r.1))).map(|r| r.2).sum();
    let (pid, who) = who_words(&s.during, names);
    let ops: Vec<String> = {
        let mut v: Vec<String> = s.during.iter().map(|t| t.op.name().into_owned()).collect();
        v.sort();
        v.dedup();
        v
    };
    let summary = format!(
        "GPU {g}'s NVLink counted {during_errors} errors (CRC, replay, recovery) while {} {} ran: {cmp}",
        s.during.len(),
        ops.join("/")
    );
    let mut details = vec![
        format!("the collectives while the errors rose: {} of {who}", by_op_words(&s.during)),
        format!(
            "GPU {g} counted {counted} NVLink errors in all over the samples in scope ({} intervals between samples with a rise); `nvidia-smi nvlink -e -i {g}` shows them per link",
            rises.len()
        ),
    ];
    details.extend(mapping_note(gpu, g));
    let (from, to) = sample_bounds(spans);
    let sql = format!(
        "SELECT max(e) - min(e) AS value FROM (SELECT {} AS e FROM gpu_samples WHERE gpu = {g} AND timestamp BETWEEN {from} AND {to}) AS t",
        nvlink_errors_sql()
    );
    let (timeline, event_ids) = worst(calls, &s.during, "NCCL");
    Some(Chain {
        id: String::new(),
        key: format!("link/nvlink/gpu:{g}"),
        severity: GPU_HEALTH.link(slower, false, s.during.iter().map(|t| t.ns()).sum()),
        kind: ChainKind::DegradedLink,
        op: "NVLink".into(),
        cause: "nvlink_errors".into(),
        cause_text: "the GPU's NVLink links counted CRC and replay errors while collectives ran over them".into(),
        culprit: None,
        pid,
        tid: None,
        calls: s.during.len() as u64,
        stall_ns: cost,
        share: 0.0,
        share_of: "collectives while the NVLink errors rose (no time share)".into(),
        op_p50_ns: None,
        op_p99_ns: None,
        summary,
        details,
        cpus: Vec::new(),
        kernels: Vec::new(),
        timeline,
        stacks: Vec::new(),
        recommendations: vec![
            format!("Check GPU {g}'s NVLink: `nvidia-smi nvlink -e -i {g}` (errors per link) and `nvidia-smi nvlink -s -i {g}`; a link whose CRC or replay errors keep rising is failing: drain the node and report it (the NVSwitch and cabling too)"),
            "Rerun with NCCL_DEBUG=INFO to see which transport NCCL picked, and compare a run with NCCL_P2P_DISABLE=1 (PCIe instead of NVLink) to confirm the link is the slow part".into(),
        ],
        evidence: Evidence { event_ids, sql, value: counted, unit: "errors".into() },
        gpu_idle_ns: None,
        cost: None,
    })
}
