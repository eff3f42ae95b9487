//! `compare_traces`: two traces, or two windows of one trace, side by side. The figures of each
//! side come from the library (`compute_stats`, `explain`); this module only lines them up: per op
//! the count and percentiles of both sides with their change in percent, and per chain key whether
//! the chain appeared, disappeared or changed. [`join_ops`] and [`join_chains`] are pure functions,
//! usable by a CLI `compare` as they are.

use std::collections::BTreeMap;

use causeway_analysis::chains::{Chain, Severity};
use causeway_analysis::stats::{compute_stats, OpStats, StatsRequest};
use causeway_model::time::TimeWindow;
use schemars::JsonSchema;
use serde::Serialize;

use crate::answers::{self, parse_op, window_of};
use crate::args::{top, CompareArgs, CompareSide};
use crate::sanitize::UNTRUSTED_NOTE;
use crate::traces::{TraceRef, TraceSet};

/// Figures of one op on one side (`*_us` as in get_trace_stats).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct OpSide {
    pub count: u64,
    pub avg_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// One op on both sides; a side is `null` when the op does not occur there.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct OpComparison {
    pub op: String,
    pub source: u8,
    pub op_code: u16,
    pub baseline: Option<OpSide>,
    pub candidate: Option<OpSide>,
    /// `(candidate - baseline) / baseline * 100`, one decimal; `null` when a side lacks the op or the baseline is 0.
    pub count_change_pct: Option<f64>,
    pub p50_change_pct: Option<f64>,
    pub p99_change_pct: Option<f64>,
}

/// A chain (matched by its key) that appeared, disappeared or changed.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ChainChange {
    pub key: String,
    /// `new` (only in the candidate), `gone` (only in the baseline) or `changed`.
    pub change: String,
    pub baseline_id: Option<String>,
    pub candidate_id: Option<String>,
    pub baseline_severity: Option<Severity>,
    pub candidate_severity: Option<Severity>,
    pub baseline_stall_ns: i64,
    pub candidate_stall_ns: i64,
    /// The candidate's summary (the baseline's for a chain that is gone).
    pub summary: String,
}

/// What each side is.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SideInfo {
    pub trace: String,
    pub window: TimeWindow,
    pub events: u64,
    pub first_ns: i64,
    pub last_ns: i64,
    pub chains: usize,
    pub verdict: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CompareOutput {
    pub summary: String,
    pub baseline: SideInfo,
    pub candidate: SideInfo,
    /// Every op of either side, largest p99 change first.
    pub ops: Vec<OpComparison>,
    /// Chain changes, largest stall change first (top_n of them).
    pub chain_changes: Vec<ChainChange>,
    pub chain_changes_total: usize,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

fn pct(base: f64, cand: f64) -> Option<f64> {
    (base != 0.0).then(|| ((cand - base) / base * 1000.0).round() / 10.0)
}

fn side_of(o: &OpStats) -> OpSide {
    OpSide { count: o.count, avg_us: o.avg_us, p50_us: o.p50_us, p90_us: o.p90_us, p99_us: o.p99_us, max_us: o.max_us }
}

/// An op's name and its figures on each side.
type OpPair = (String, Option<OpSide>, Option<OpSide>);

/// Line up the ops of two stats answers, largest absolute p99 change first (ops on one side only last).
pub fn join_ops(baseline: &[OpStats], candidate: &[OpStats]) -> Vec<OpComparison> {
    let mut by: BTreeMap<(u8, u16), OpPair> = BTreeMap::new();
    for o in baseline {
        by.entry((o.source, o.op_code)).or_insert_with(|| (o.op.clone(), None, None)).1 = Some(side_of(o));
    }
    for o in candidate {
        by.entry((o.source, o.op_code)).or_insert_with(|| (o.op.clone(), None, None)).2 = Some(side_of(o));
    }
    let mut out: Vec<OpComparison> = by
        .into_iter()
        .map(|((source, op_code), (op, b, c))| {
            let change = |f: fn(&OpSide) -> f64| match (&b, &c) {
                (Some(b), Some(c)) => pct(f(b), f(c)),
                _ => None,
            };
            OpComparison {
                op,
                source,
                op_code,
                count_change_pct: change(|s| s.count as f64),
                p50_change_pct: change(|s| s.p50_us),
                p99_change_pct: change(|s| s.p99_us),
                baseline: b,
                candidate: c,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        let k = |o: &OpComparison| o.p99_change_pct.map(f64::abs).unwrap_or(-1.0);
        k(y).total_cmp(&k(x)).then((x.source, x.op_code).cmp(&(y.source, y.op_code)))
    });
    out
}

/// Match chains by key: new, gone, or changed (severity or stall time differ), largest stall change first.
pub fn join_chains(baseline: &[Chain], candidate: &[Chain]) -> Vec<ChainChange> {
    let base: BTreeMap<&str, &Chain> = baseline.iter().map(|c| (c.key.as_str(), c)).collect();
    let cand: BTreeMap<&str, &Chain> = candidate.iter().map(|c| (c.key.as_str(), c)).collect();
    let mut keys: Vec<&str> = base.keys().chain(cand.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out: Vec<ChainChange> = keys
        .into_iter()
        .filter_map(|k| {
            let (b, c) = (base.get(k), cand.get(k));
            let change = match (b, c) {
                (None, Some(_)) => "new",
                (Some(_), None) => "gone",
                (Some(b), Some(c)) if b.severity != c.severity || b.stall_ns != c.stall_ns => "changed",
                _ => return None,
            };
            Some(ChainChange {
                key: k.to_string(),
                change: change.into(),
                baseline_id: b.map(|x| x.id.clone()),
                candidate_id: c.map(|x| x.id.clone()),
                baseline_severity: b.map(|x| x.severity),
                candidate_severity: c.map(|x| x.severity),
                baseline_stall_ns: b.map_or(0, |x| x.stall_ns),
                candidate_stall_ns: c.map_or(0, |x| x.stall_ns),
                summary: c.or(b).map(|x| x.summary.clone()).unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by(|x, y| {
        let d = |c: &ChainChange| (c.candidate_stall_ns - c.baseline_stall_ns).unsigned_abs();
        d(y).cmp(&d(x)).then(x.key.cmp(&y.key))
    });
    out
}

/// The two sides a request means (see [`CompareArgs`] for the defaults).
fn sides(set: &TraceSet, a: &CompareArgs) -> Result<(CompareSide, CompareSide, bool), String> {
    let mut b = a.baseline.clone().unwrap_or_default();
    let mut c = a.candidate.clone().unwrap_or_default();
    let windowed = |s: &CompareSide| s.since.is_some() || s.from.is_some() || s.to.is_some();
    let mut halves = false;
    if b.trace.is_none() && c.trace.is_none() && set.len() >= 2 {
        b.trace = Some(TraceRef::Index(0));
        c.trace = Some(TraceRef::Index(1));
    } else if !windowed(&b) && !windowed(&c) {
        let (eb, ec) = (set.resolve(b.trace.as_ref())?, set.resolve(c.trace.as_ref().or(b.trace.as_ref()))?);
        if eb.index == ec.index {
            halves = true;
        }
    }
    if c.trace.is_none() {
        c.trace = b.trace.clone();
    }
    Ok((b, c, halves))
}

pub fn compare(set: &TraceSet, a: &CompareArgs) -> Result<CompareOutput, String> {
    let (b, c, halves) = sides(set, a)?;
    let ops = a.ops.as_ref().map(|v| v.iter().map(|n| parse_op(n)).collect::<Result<Vec<_>, _>>()).transpose()?;
    let mut out_sides = Vec::new();
    let mut figures = Vec::new();
    for (i, side) in [&b, &c].into_iter().enumerate() {
        let entry = set.resolve(side.trace.as_ref())?;
        let store = answers::store_of(&entry)?;
        let info = store.info();
        let mut window = window_of(info, side.since.as_deref(), side.from.as_deref(), side.to.as_deref())?;
        if halves {
            let mid = info.first_ns + (info.last_ns - info.first_ns) / 2;
            window = if i == 0 {
                TimeWindow { from_ns: None, to_ns: Some(mid) }
            } else {
                TimeWindow { from_ns: Some(mid + 1), to_ns: None }
            };
        }
        let stats = compute_stats(
            store.as_ref(),
            &StatsRequest { window, pid: a.pid, ops: ops.clone(), per_process: false, by_kernel: false },
        )
        .map_err(|e| e.to_string())?;
        let e = set.explanation(&entry, window, a.pid)?;
        out_sides.push(SideInfo {
            trace: entry.name.clone(),
            window,
            events: stats.events,
            first_ns: stats.first_ns,
            last_ns: stats.last_ns,
            chains: e.chains.len(),
            verdict: e.verdict.clone(),
        });
        figures.push((stats, e));
    }
    let ops_joined = join_ops(&figures[0].0.ops, &figures[1].0.ops);
    let mut changes = join_chains(&figures[0].1.chains, &figures[1].1.chains);
    let total = changes.len();
    let top = top(a.top_n);
    changes.truncate(top);
    let candidate = out_sides.pop().expect("two sides");
    let baseline = out_sides.pop().expect("two sides");
    let biggest = ops_joined.iter().find(|o| o.p99_change_pct.is_some());
    let mut summary = format!(
        "{} ({} events{}) vs {} ({} events{})",
        baseline.trace,
        baseline.events,
        if halves { ", first half" } else { "" },
        candidate.trace,
        candidate.events,
        if halves { ", second half" } else { "" }
    );
    if let Some(o) = biggest {
        summary.push_str(&format!("; largest p99 change: {} {:+} %", o.op, o.p99_change_pct.unwrap_or(0.0)));
    }
    let (new, gone) =
        (changes.iter().filter(|c| c.change == "new").count(), changes.iter().filter(|c| c.change == "gone").count());
    summary.push_str(&format!("; {total} chain change(s) ({new} new, {gone} gone among those shown)"));
    let truncated = total > changes.len();
    let hint = truncated
        .then(|| format!("{} more chain changes: raise top_n (max 50) or filter with ops/pid", total - changes.len()));
    Ok(CompareOutput {
        summary,
        baseline,
        candidate,
        ops: ops_joined,
        chain_changes: changes,
        chain_changes_total: total,
        truncated,
        hint,
        untrusted: UNTRUSTED_NOTE.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::OpCode;

    fn stats(op: u16, d: &mut [i64]) -> OpStats {
        OpStats::from_durations(OpCode::new(1, op), d)
    }

    #[test]
    fn ops_are_joined_with_their_change() {
        let b = vec![stats(5, &mut [100_000, 200_000]), stats(1, &mut [1_000])];
        let c = vec![stats(5, &mut [100_000, 300_000]), stats(3, &mut [5_000])];
        let j = join_ops(&b, &c);
        assert_eq!(j[0].op, "cudaStreamSync");
        assert_eq!(j[0].p99_change_pct, Some(50.0));
        assert_eq!(j[0].count_change_pct, Some(0.0));
        let only_b = j.iter().find(|o| o.op == "cudaMalloc").unwrap();
        assert!(only_b.candidate.is_none() && only_b.p99_change_pct.is_none());
        assert_eq!(j.len(), 3);
    }
}
