//! Exact trace statistics: per (source, op), and optionally per process, the count, sum, mean,
//! min, max and nearest-rank percentiles of every event in the window, whatever the size of the
//! trace. Nearest-rank: sort ascending, take the value at 1-based rank `ceil(p * n)`, computed in
//! integers so that `0.95 * 20` is 19, not 19.000000000000004.

use std::collections::BTreeMap;

use causeway_model::codes::{self, OpCode};
use causeway_model::time::{ns_to_us, round_us, TimeWindow};
use causeway_model::LossCounter;
use causeway_store::{EventFilter, TraceInfo, TraceStore};

use crate::coverage::coverage_notes;
use crate::kernels::{kernel_report, KernelReport};
use crate::AnalysisError;

/// The percentiles every stats answer carries, in per-mille.
pub const PERCENTILES: [u32; 4] = [500, 900, 950, 990];

/// Nearest-rank percentile of an ascending slice: the value at 1-based rank `ceil(per_mille * n / 1000)`
/// (rank at least 1). `None` for an empty slice. The one definition lives in the storage layer, so
/// engines that compute percentiles themselves (DuckDB) use the same one.
pub use causeway_store::summary::{nearest_rank, nearest_rank_sql, nearest_ranks_unsorted};

/// Figures for one (source, op) [and pid]. `*_us` are ns / 1000, exact to 0.001.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct OpStats {
    pub source: u8,
    pub op: String,
    pub op_code: u16,
    pub count: u64,
    pub sum_us: f64,
    pub avg_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
}

impl OpStats {
    /// Figures of one op from its durations (sorted in place).
    pub fn from_durations(op: OpCode, durations: &mut [i64]) -> OpStats {
        durations.sort_unstable();
        let count = durations.len() as u64;
        let sum: i128 = durations.iter().map(|&d| d as i128).sum();
        let p = |pm| ns_to_us(nearest_rank(durations, pm).unwrap_or(0));
        OpStats {
            source: op.source,
            op: op.name().into_owned(),
            op_code: op.op,
            count,
            sum_us: round_us(sum as f64 / 1000.0),
            avg_us: if count == 0 { 0.0 } else { round_us(sum as f64 / count as f64 / 1000.0) },
            min_us: ns_to_us(durations.first().copied().unwrap_or(0)),
            max_us: ns_to_us(durations.last().copied().unwrap_or(0)),
            p50_us: p(500),
            p90_us: p(900),
            p95_us: p(950),
            p99_us: p(990),
        }
    }

    /// Figures of one op from an engine's summary (percentiles in [`PERCENTILES`] order).
    pub fn from_summary(s: &causeway_store::summary::OpSummary) -> OpStats {
        let p = |i: usize| ns_to_us(s.percentiles.get(i).copied().unwrap_or(0));
        OpStats {
            source: s.op.source,
            op: s.op.name().into_owned(),
            op_code: s.op.op,
            count: s.count,
            sum_us: round_us(s.sum_ns as f64 / 1000.0),
            avg_us: if s.count == 0 { 0.0 } else { round_us(s.sum_ns as f64 / s.count as f64 / 1000.0) },
            min_us: ns_to_us(s.min_ns),
            max_us: ns_to_us(s.max_ns),
            p50_us: p(0),
            p90_us: p(1),
            p95_us: p(2),
            p99_us: p(3),
        }
    }

    pub fn code(&self) -> OpCode {
        OpCode::new(self.source, self.op_code)
    }
}

/// The same figures for one process.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ProcessStats {
    pub pid: u32,
    pub name: String,
    /// Where it ran: its container or pod, else its cgroup (`process_cgroups`; empty when the
    /// trace does not record it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup: String,
    pub events: u64,
    pub ops: Vec<OpStats>,
}

/// True totals from Ingero's `event_aggregates` for one (source, op), when `events` is a sample.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TrueTotal {
    pub source: u8,
    pub op: String,
    pub op_code: u16,
    /// Events that happened.
    pub count: u64,
    /// Of which stored in `events`.
    pub stored: u64,
    pub sum_us: f64,
    pub avg_us: f64,
    pub min_us: f64,
    pub max_us: f64,
}

/// Said when the `events` table is a sample.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct SampleNote {
    pub note: String,
    pub true_totals: Vec<TrueTotal>,
}

/// Everything `causeway stats` prints.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TraceStats {
    /// Events in the window (after the pid filter).
    pub events: u64,
    /// Earliest and latest timestamp among them (0 when none).
    pub first_ns: i64,
    pub last_ns: i64,
    /// The window asked for, resolved to absolute ns (`null` = unbounded).
    pub window: TimeWindow,
    pub ops: Vec<OpStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<ProcessStats>>,
    /// Present when `events` is a sample (Ingero selective storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampleNote>,
    /// Events lost on the way to storage, per source and place. Empty = nothing lost (or the DB does not count).
    pub losses: Vec<LossCounter>,
    /// What this DB does not record.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// What the trace could not see of the CUDA calls (from `attachments`): runtimes linked without
    /// symbols, calls before a late attach ([`crate::coverage`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<String>,
    /// Per-kernel figures of the launches, when asked for ([`StatsRequest::by_kernel`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelReport>,
    /// The GPUs' own state over the window, from the NVML samples (empty: recorded without NVML).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::gpu_state::GpuSummary>,
    /// The memory each process NVML listed used on each GPU: its peak, first and last, and how
    /// many samples found it gone (empty: recorded without NVML, or no process listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_memory: Vec<crate::gpu_memory::ProcessGpuMemory>,
    /// The traced threads' socket calls per peer, TCP retransmits and state changes, and the
    /// untraced processes' traffic (absent: the window holds no network event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkReport>,
    /// Per process, the GPU calls that failed (by error) and those still in flight when the trace
    /// ended: what `explain` ranks first (errors and hangs). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ProcessFailures>,
    /// The device's own timeline (`trace --gpu-timeline`): device time per kernel and launch
    /// latency, exact nearest-rank; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::device_stats::DeviceStats>,
}

/// One process's failed calls and calls in flight at the end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ProcessFailures {
    pub pid: u32,
    /// Failed calls per (op, error): (op name, error name, return code, calls), most first.
    pub errors: Vec<FailureCount>,
    /// Calls that had not returned when the trace ended (`ret_code` -1): op, thread, how long.
    pub in_flight: Vec<InFlightCall>,
}

/// Failed calls of one op with one error.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct FailureCount {
    pub op: String,
    pub error: String,
    pub ret_code: i32,
    pub calls: u64,
    /// The first one, unix ns.
    pub first_ns: i64,
}

/// A call still in flight when the trace ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct InFlightCall {
    pub op: String,
    pub tid: u32,
    pub start_ns: i64,
    /// From its start to the end of the trace (at least this long).
    pub dur_ns: i64,
}

/// The failed calls and calls in flight in scope, per process (one read of the rows that did not
/// return success).
fn failures(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<Vec<ProcessFailures>, AnalysisError> {
    /// (calls, first) per (op, code), and the calls in flight.
    type Of = (BTreeMap<(OpCode, i32), (u64, i64)>, Vec<InFlightCall>);
    let mut by_pid: BTreeMap<u32, Of> = BTreeMap::new();
    for e in crate::trace_data::unsuccessful_gpu_calls(store, window, pid)? {
        let ev = e.event;
        let code = OpCode::new(ev.source, ev.op);
        let p = by_pid.entry(ev.pid).or_default();
        if ev.ret_code == codes::RET_IN_FLIGHT {
            p.1.push(InFlightCall { op: code.name().into_owned(), tid: ev.tid, start_ns: ev.ts_ns, dur_ns: ev.dur_ns });
        } else if codes::is_call_failure(ev.source, ev.ret_code) {
            let c = p.0.entry((code, ev.ret_code)).or_insert((0, ev.ts_ns));
            c.0 += 1;
            c.1 = c.1.min(ev.ts_ns);
        }
    }
    Ok(by_pid
        .into_iter()
        .filter(|(_, (e, f))| !e.is_empty() || !f.is_empty())
        .map(|(pid, (errors, mut in_flight))| {
            let mut errors: Vec<FailureCount> = errors
                .into_iter()
                .map(|((code, ret), (calls, first_ns))| FailureCount {
                    op: code.name().into_owned(),
                    error: codes::error_name(code.source, i64::from(ret)).into_owned(),
                    ret_code: ret,
                    calls,
                    first_ns,
                })
                .collect();
            errors.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.first_ns.cmp(&b.first_ns)));
            in_flight.sort_by_key(|c| (c.tid, c.start_ns));
            ProcessFailures { pid, errors, in_flight }
        })
        .collect())
}

/// What to compute.
#[derive(Debug, Clone, Default)]
pub struct StatsRequest {
    pub window: TimeWindow,
    pub pid: Option<u32>,
    pub ops: Option<Vec<OpCode>>,
    pub per_process: bool,
    /// Also group the kernel launches by kernel name ([`crate::kernels`]).
    pub by_kernel: bool,
}

/// Resolve the command-line window: `since` is relative to the trace's own last event (a saved trace
/// stays analysable next year); `from`/`to` accept unix ns or `+DUR`/`-DUR` offsets from the first/last event.
pub fn resolve_window(
    info: &TraceInfo,
    since_ns: Option<i64>,
    from: Option<&str>,
    to: Option<&str>,
) -> Result<TimeWindow, AnalysisError> {
    use causeway_model::time::parse_time_point;
    if since_ns.is_some() && (from.is_some() || to.is_some()) {
        return Err(AnalysisError::BadArgument("give either --since or --from/--to, not both".into()));
    }
    if let Some(s) = since_ns {
        if s < 0 {
            return Err(AnalysisError::BadArgument("--since must be positive".into()));
        }
        return Ok(TimeWindow { from_ns: Some(info.last_ns.saturating_sub(s)), to_ns: None });
    }
    let parse = |t: Option<&str>| -> Result<Option<i64>, AnalysisError> {
        t.map(|t| parse_time_point(t, info.first_ns, info.last_ns).map_err(AnalysisError::BadArgument)).transpose()
    };
    let w = TimeWindow { from_ns: parse(from)?, to_ns: parse(to)? };
    if let (Some(f), Some(t)) = (w.from_ns, w.to_ns) {
        if f > t {
            return Err(AnalysisError::BadArgument(format!("--from ({f}) is after --to ({t})")));
        }
    }
    Ok(w)
}

/// Compute the statistics of a trace.
pub fn compute_stats(store: &dyn TraceStore, req: &StatsRequest) -> Result<TraceStats, AnalysisError> {
    let info = store.info();
    let filter = EventFilter { window: req.window, pid: req.pid, ops: req.ops.clone(), ..Default::default() };
    // Per-op figures come from the store: scanned in Rust by default, pushed down where the engine is faster.
    let summary = store.duration_summary(&filter, &PERCENTILES, req.per_process)?;
    let events = summary.events;
    let (first, last) = (summary.first_ns, summary.last_ns);
    let mut ops: Vec<OpStats> = summary.ops.iter().map(OpStats::from_summary).collect();
    ops.sort_by_key(|o| (o.source, o.op_code));
    let processes = req.per_process.then(|| -> Result<Vec<ProcessStats>, AnalysisError> {
        let names = store.process_names()?;
        let cgroups: BTreeMap<u32, String> = store.process_cgroups()?.into_iter().map(|c| (c.pid, c.words())).collect();
        let mut per: BTreeMap<u32, Vec<OpStats>> = BTreeMap::new();
        for s in &summary.per_process {
            per.entry(s.pid.unwrap_or(0)).or_default().push(OpStats::from_summary(s));
        }
        let mut out: Vec<ProcessStats> = per
            .into_iter()
            .map(|(pid, mut ops)| {
                ops.sort_by_key(|o| (o.source, o.op_code));
                ProcessStats {
                    pid,
                    name: names.get(&pid).cloned().unwrap_or_default(),
                    cgroup: cgroups.get(&pid).cloned().unwrap_or_default(),
                    events: ops.iter().map(|o| o.count).sum(),
                    ops,
                }
            })
            .collect();
        out.sort_by(|a, b| b.events.cmp(&a.events).then(a.pid.cmp(&b.pid)));
        Ok(out)
    });
    let sampled = if info.sampled { Some(sample_note(store, req)?) } else { None };
    // read only when the window holds network events (the summary says so without another scan)
    let network = if summary
        .ops
        .iter()
        .any(|o| matches!(codes::Source::from_code(o.op.source), Some(codes::Source::Tcp | codes::Source::Net)))
    {
        Some(crate::network::network_report(store, req.window, req.pid)?).filter(|n| !n.is_empty())
    } else {
        None
    };
    Ok(TraceStats {
        events,
        first_ns: if events == 0 { 0 } else { first },
        last_ns: if events == 0 { 0 } else { last },
        window: req.window,
        ops,
        processes: processes.transpose()?,
        sampled,
        losses: store.loss_counters()?,
        missing: info.missing.clone(),
        coverage: coverage_notes(store, req.window, req.pid, info.first_ns)?,
        kernels: if req.by_kernel { Some(kernel_report(store, req.window, req.pid)?) } else { None },
        gpus: crate::gpu_state::GpuState::of(&store.gpu_samples(&req.window)?).summaries(),
        gpu_memory: gpu_memory(store, req)?,
        network,
        failures: failures(store, req.window, req.pid)?,
        device: crate::device_stats::device_stats(store, req.window, req.pid)?,
    })
}

/// The memory each process NVML listed used per GPU, named where the trace knows the process.
fn gpu_memory(
    store: &dyn TraceStore,
    req: &StatsRequest,
) -> Result<Vec<crate::gpu_memory::ProcessGpuMemory>, AnalysisError> {
    let mut m = crate::gpu_memory::per_process(&store.gpu_process_memory(&req.window)?);
    m.retain(|m| req.pid.is_none_or(|p| p == m.pid));
    if !m.is_empty() {
        let names = store.process_names()?;
        for p in &mut m {
            p.name = names.get(&p.pid).cloned().unwrap_or_default();
        }
    }
    Ok(m)
}

fn sample_note(store: &dyn TraceStore, req: &StatsRequest) -> Result<SampleNote, AnalysisError> {
    #[derive(Default)]
    struct Acc {
        count: u64,
        stored: u64,
        sum: i128,
        min: Option<i64>,
        max: i64,
    }
    let mut acc: BTreeMap<OpCode, Acc> = BTreeMap::new();
    for row in store.aggregates(&req.window)? {
        let code = OpCode::new(row.source, row.op);
        if req.pid.is_some_and(|p| p != row.pid) || req.ops.as_ref().is_some_and(|o| !o.contains(&code)) {
            continue;
        }
        let a = acc.entry(code).or_default();
        a.count += row.count;
        a.stored += row.stored;
        a.sum += row.sum_dur_ns as i128;
        // Buckets that stored nothing report min 0: they carry no duration information.
        if row.stored > 0 || row.sum_dur_ns > 0 {
            a.min = Some(a.min.map_or(row.min_dur_ns, |m| m.min(row.min_dur_ns)));
        }
        a.max = a.max.max(row.max_dur_ns);
    }
    let true_totals: Vec<TrueTotal> = acc
        .into_iter()
        .map(|(code, a)| TrueTotal {
            source: code.source,
            op: codes::op_name(code.source, code.op).into_owned(),
            op_code: code.op,
            count: a.count,
            stored: a.stored,
            sum_us: round_us(a.sum as f64 / 1000.0),
            avg_us: if a.count == 0 { 0.0 } else { round_us(a.sum as f64 / a.count as f64 / 1000.0) },
            min_us: ns_to_us(a.min.unwrap_or(0)),
            max_us: ns_to_us(a.max),
        })
        .collect();
    let happened: u64 = true_totals.iter().map(|t| t.count).sum();
    let stored: u64 = true_totals.iter().map(|t| t.stored).sum();
    Ok(SampleNote {
        note: format!(
            "this DB's events table is a sample (Ingero selective storage): event_aggregates counts {happened} events of which {stored} were stored; percentiles are over the stored events only, true counts and sums are in true_totals"
        ),
        true_totals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_stats_are_exact_to_the_nanosecond() {
        let mut d = vec![229_638, 765_181, 472_685, 323_784, 600_000, 400_000, 440_685];
        let s = OpStats::from_durations(OpCode::new(1, 1), &mut d);
        assert_eq!(s.op, "cudaMalloc");
        assert_eq!(s.count, 7);
        assert_eq!(s.min_us, 229.638);
        assert_eq!(s.max_us, 765.181);
        assert_eq!(s.p50_us, 440.685);
        assert_eq!(s.sum_us, 3231.973);
        assert_eq!(s.avg_us, 461.71);
    }
}
