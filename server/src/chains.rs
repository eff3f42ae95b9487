//! `get_causal_chains`: the explanation's chains, filtered, and sized for the model. A default list
//! is brief (each chain's figures, culprit, summary and evidence, the first chain's SQL) and keeps
//! the chains that fit [`ANSWER_BUDGET`]; `chain_id` or `detail: "full"` gives chains whole, and
//! `omitted` says what a brief answer left out. No analysis happens here.

use causeway_analysis::{judged_by, Severity};
use causeway_backends::QueryCancel;

use crate::answers::{parse_op, store_of, untrusted, window_of, ANSWER_BUDGET};
use crate::args::*;
use crate::outputs::ChainsOutput;
use crate::traces::TraceSet;

/// Event ids kept in a brief chain's evidence.
const BRIEF_EVENT_IDS: usize = 3;

/// Keep the first `steps` steps of every chain's timeline; true when one was cut.
pub fn cut_timelines(chains: &mut [causeway_analysis::Chain], steps: usize) -> bool {
    let mut cut = false;
    for c in chains {
        if c.timeline.len() > steps {
            c.timeline.truncate(steps);
            cut = true;
        }
    }
    cut
}

fn parse_severity(s: &str) -> Result<Severity, String> {
    match s.trim().to_ascii_uppercase().as_str() {
        "HIGH" => Ok(Severity::High),
        "MEDIUM" => Ok(Severity::Medium),
        "LOW" => Ok(Severity::Low),
        _ => Err(format!("invalid min_severity '{s}': use HIGH, MEDIUM or LOW")),
    }
}

/// Device idle gaps a chains answer carries (get_gpu_idle has them all).
const DEVICE_GAPS_SHOWN: usize = 3;

/// A chain cut to its figures, culprit, CPUs, summary and evidence (its first event ids; its SQL
/// only when `with_sql`); true when something was left out.
fn brief_chain(c: &mut causeway_analysis::Chain, with_sql: bool) -> bool {
    let cut = !c.timeline.is_empty()
        || !with_sql
        || !c.stacks.is_empty()
        || !c.kernels.is_empty()
        || !c.details.is_empty()
        || !c.recommendations.is_empty()
        || c.evidence.event_ids.len() > BRIEF_EVENT_IDS;
    c.timeline.clear();
    c.stacks.clear();
    c.kernels.clear();
    c.details.clear();
    c.recommendations.clear();
    c.evidence.event_ids.truncate(BRIEF_EVENT_IDS);
    if !with_sql {
        c.evidence.sql.clear();
    }
    cut
}

pub fn get_causal_chains(set: &TraceSet, a: ChainsArgs, _: &QueryCancel) -> Result<ChainsOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window =
        window_of(store.as_ref(), a.since.as_deref(), a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), a.pid)?;
    let min = a.min_severity.as_deref().map(parse_severity).transpose()?.unwrap_or(Severity::Low);
    if let Some(op) = &a.op {
        parse_op(op)?;
    }
    let e = set.explanation_judged(&entry, window, a.pid, judged_by(a.steps.as_deref()))?;
    let matching: Vec<&causeway_analysis::Chain> = e
        .chains
        .iter()
        .filter(|c| c.severity <= min)
        .filter(|c| a.op.as_deref().is_none_or(|op| c.op.eq_ignore_ascii_case(op.trim())))
        .filter(|c| a.chain_id.as_deref().is_none_or(|id| c.id == id.trim() || c.key == id.trim()))
        .collect();
    if let Some(id) = &a.chain_id {
        if matching.is_empty() {
            return Err(format!(
                "no chain '{id}' in this scope ({} chains: c1..c{}); chain ids depend on the window and pid they were listed with",
                e.chains.len(),
                e.chains.len()
            ));
        }
    }
    let top = top(a.top_n);
    let full = a.detail.unwrap_or(if a.chain_id.is_some() { Detail::Full } else { Detail::Brief }) == Detail::Full;
    let steps = a.timeline_steps.unwrap_or(12).clamp(1, 2000);
    let mut chains: Vec<_> = matching.iter().take(top).map(|c| (*c).clone()).collect();
    let timelines_cut = full && cut_timelines(&mut chains, steps);
    let briefed = !full && chains.iter_mut().enumerate().fold(false, |cut, (i, c)| brief_chain(c, i == 0) | cut);
    let summary = match chains.first() {
        Some(c) => format!(
            "{} chain(s) match ({} in scope), {} shown; worst: [{}] {}",
            matching.len(),
            e.chains.len(),
            chains.len(),
            c.id,
            c.headline()
        ),
        None => format!("no chain matches ({} in scope); verdict: {}", e.chains.len(), e.verdict),
    };
    let mut hints = Vec::new();
    if timelines_cut {
        hints.push(format!("timelines cut to {steps} steps: raise timeline_steps for one chain (chain_id), or call get_timeline around an evidence event"));
    }
    if briefed {
        hints.push(format!("each chain's timeline, stacks, kernels, details, recommendations, evidence event ids past the first {BRIEF_EVENT_IDS} and evidence SQL (but the first chain's), and the severity rules: pass chain_id (\"c1\") for one chain in full, or detail \"full\""));
    }
    let device_gaps = e.device.as_ref().map_or(0, |d| d.gaps.len());
    if device_gaps > DEVICE_GAPS_SHOWN {
        hints.push(format!(
            "{} of {device_gaps} device idle gaps: get_gpu_idle lists them",
            device_gaps - DEVICE_GAPS_SHOWN
        ));
    }
    let mut steps_report = e.steps.clone();
    if !full {
        let cut: usize = steps_report.series.iter_mut().map(|s| s.slow.drain(s.slow.len().min(1)..).count()).sum();
        if cut > 0 {
            hints.push(format!("{cut} slow step ranges past the first of each series: get_steps lists them"));
        }
    }
    let mut pictures = Vec::new();
    if a.picture == Some(true) {
        if let Some(c) = chains.first() {
            let p =
                causeway_render::chain_picture(store.as_ref(), c).map_err(|e| format!("picture of {}: {e}", c.id))?;
            pictures.extend(p.map(|p| p.svg));
        }
    }
    let mut out = ChainsOutput {
        summary,
        trace: entry.name.clone(),
        verdict: e.verdict.clone(),
        chains,
        chains_matching: matching.len(),
        chains_total: e.chains.len(),
        truncated: false,
        hint: None,
        omitted: hints,
        slow_call_rule: e.slow_call_rule.clone(),
        severity_rules: if full { e.severity_rules.clone() } else { Vec::new() },
        gpu_calls: e.gpu_calls,
        slow_calls: e.slow_calls,
        slow_time_ns: e.slow_time_ns,
        missing: e.missing.clone(),
        notes: e.notes.clone(),
        steps: steps_report,
        serving: e.serving.clone(),
        device: e.device.clone().map(|mut d| {
            d.gaps.truncate(DEVICE_GAPS_SHOWN);
            d
        }),
        untrusted: untrusted(),
        pictures,
    };
    let more = |listed: usize| {
        format!(
            "{} more chains ({listed} of {} listed): raise top_n (max {MAX_TOP}), pass chain_id, or filter with min_severity, op, pid or a window",
            matching.len() - listed,
            matching.len()
        )
    };
    // a brief list without an explicit top_n keeps the chains that fit the answer's budget, the
    // line saying what was left out included
    if !full && a.top_n.is_none() {
        let size = |o: &ChainsOutput| serde_json::to_string(o).map_or(0, |t| t.chars().count());
        let said = |listed: usize| if matching.len() > listed { more(listed).chars().count() + 4 } else { 0 };
        while out.chains.len() > 1 && size(&out) + said(out.chains.len()) > ANSWER_BUDGET {
            out.chains.pop();
        }
    }
    if matching.len() > out.chains.len() {
        out.omitted.insert(0, more(out.chains.len()));
    }
    out.truncated = !out.omitted.is_empty();
    Ok(out)
}
