//! `compare_traces`: two traces, or two windows of one trace, side by side. The figures of each
//! side come from the library (`compute_stats`, `explain`) and are lined up by the library too
//! (`causeway_analysis::{join_ops, join_chains}`); this module resolves the two sides and bounds
//! the answer.

use causeway_analysis::{compute_stats, join_chains, join_ops, ChainChange, OpComparison, StatsRequest};
use causeway_model::time::TimeWindow;
use schemars::JsonSchema;
use serde::Serialize;

use crate::answers::{self, parse_op, window_of};
use crate::args::{CompareArgs, CompareSide, MAX_TOP};
use crate::sanitize::UNTRUSTED_NOTE;
use crate::traces::{TraceRef, TraceSet};

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
    /// The ops of either side, largest p99 change first (`limit` of them, default 6).
    pub ops: Vec<OpComparison>,
    /// Chain changes, largest stall change first (top_n of them, default 3).
    pub chain_changes: Vec<ChainChange>,
    pub chain_changes_total: usize,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub untrusted: String,
}

/// Ops compared in a default answer.
const DEFAULT_COMPARED_OPS: usize = 6;
/// Chain changes listed in a default answer.
const DEFAULT_CHAIN_CHANGES: usize = 3;

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
        let mut window = window_of(
            store.as_ref(),
            side.since.as_deref(),
            side.from.as_deref(),
            side.to.as_deref(),
            side.steps.as_deref(),
            a.pid,
        )?;
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
        let e = set.explanation_judged(&entry, window, a.pid, causeway_analysis::judged_by(side.steps.as_deref()))?;
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
    let mut ops_joined = join_ops(&figures[0].0.ops, &figures[1].0.ops);
    let ops_total = ops_joined.len();
    let ops_shown = a.limit.unwrap_or(DEFAULT_COMPARED_OPS).clamp(1, 500);
    ops_joined.truncate(ops_shown);
    let mut changes = join_chains(&figures[0].1.chains, &figures[1].1.chains);
    let total = changes.len();
    let top = a.top_n.unwrap_or(DEFAULT_CHAIN_CHANGES).clamp(1, MAX_TOP);
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
    let mut omitted = Vec::new();
    if ops_total > ops_joined.len() {
        omitted.push(format!(
            "{} of {ops_total} ops (smaller p99 changes): raise limit (max 500) or name them in ops",
            ops_total - ops_joined.len()
        ));
    }
    if total > changes.len() {
        omitted.push(format!(
            "{} of {total} chain changes: raise top_n (max 50) or filter with ops/pid",
            total - changes.len()
        ));
    }
    let truncated = !omitted.is_empty();

    Ok(CompareOutput {
        summary,
        baseline,
        candidate,
        ops: ops_joined,
        chain_changes: changes,
        chain_changes_total: total,
        truncated,
        hint: None,
        omitted,
        untrusted: UNTRUSTED_NOTE.into(),
    })
}
