//! Two analyses side by side: the ops of two stats answers lined up with their change in percent,
//! and the chains of two explanations matched by key (new, gone, changed). Pure functions over the
//! library's own answers, used by the MCP tool `compare_traces` and usable by a CLI `compare` as
//! they are.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::chains::{Chain, Severity};
use crate::stats::OpStats;

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
