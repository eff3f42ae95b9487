//! From an attributed subject (an op's slow calls, or one thread's gaps between GPU calls) to
//! its chains: one per (cause, culprit) group, with the worst intervals as a timeline, the facts
//! that back the cause (block requests, I/O contenders, how a synchronizing call waited, the
//! kernels), the recommendations and the SQL that reproduces the figure.

use std::collections::HashMap;

use causeway_model::codes::OpCode;
use causeway_model::time::fmt_ns;
use causeway_store::EventId;

use super::view::TraceView;
use crate::attribution::{self as attr, Cause, OpDistribution, Part};
use crate::chains::{self, Chain, ChainKind, Evidence, Group, Severity, TimelineStep};
use crate::evidence::{self, CulpritKey};
use crate::kernels;
use crate::spin::{self, WaitMode};
use crate::trace_data::Names;
use crate::AnalysisError;

/// Kernels a slow-launch chain names in its summary (its JSON lists them all).
const KERNELS_IN_SUMMARY: usize = 3;

/// Everything one attributed subject (an op, or a thread's gaps) needs to become chains.
pub(super) struct Subject<'a> {
    pub(super) kind: ChainKind,
    pub(super) op_name: String,
    pub(super) op: Option<OpCode>,
    pub(super) tid: Option<u32>,
    pub(super) dist: Option<OpDistribution>,
    /// Denominator of `share`.
    pub(super) total_ns: i64,
    pub(super) share_of: String,
    /// Attributions by interval id: at least those of every group's worst intervals.
    pub(super) items: &'a HashMap<EventId, Item>,
    /// What spinning did to the subject's calls (an op's slow calls).
    pub(super) spin: Option<&'a spin::OpSpinFacts>,
}

/// One attributed interval: a slow call, or a gap (keyed by the call that ends it).
pub(super) struct Item {
    pub(super) ts: i64,
    pub(super) dur: i64,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) label: String,
    pub(super) parts: Vec<Part>,
    /// How a slow synchronizing call that was preempted waited for the GPU ([`crate::spin`]).
    pub(super) wait: Option<WaitMode>,
    /// The kernel a slow kernel launch ran ([`crate::kernels::launch_kernel`]).
    pub(super) kernel: Option<String>,
}

/// Calls of a chain whose stacks it shows: its worst (they come first in a group).
pub(super) const STACK_SAMPLE_CALLS: usize = 64;

pub(super) fn stack_sample_ids(g: &Group) -> Vec<EventId> {
    g.worst.iter().take(STACK_SAMPLE_CALLS).map(|i| i.1.clone()).collect()
}

fn subject_words(names: &Names, pid: u32, tid: Option<u32>) -> String {
    let name = names.of(pid, tid.unwrap_or(pid));
    let name = if name.is_empty() { String::new() } else { format!(" ({})", crate::stacks::clean(&name)) };
    match tid {
        Some(t) => format!("tid {t}{name} of pid {pid}"),
        None => format!("pid {pid}{name}"),
    }
}

fn layer(source: u8) -> &'static str {
    match source {
        1 => "CUDA",
        4 => "DRIVER",
        8 => "CUDA_GRAPH",
        5 => "IO",
        _ => "HOST",
    }
}

/// Turn one (cause, culprit) group of a subject into a chain.
pub(super) fn attributed_chain(
    view: &TraceView,
    s: &Subject,
    (cause, ckey): (Cause, CulpritKey),
    g: Group,
) -> Result<Chain, AnalysisError> {
    let (scope, names) = (&view.scope, &view.names);
    let mut culprit = chains::culprit_of(&ckey, &|p, t| names.of(p, t), &|k| names.peer(k));
    if let Some(c) = culprit.as_mut() {
        c.place = names.place_of(c.pid);
    }
    let calls = g.count;
    let share = g.stall_ns as f64 / s.total_ns.max(1) as f64;
    let worst: Vec<&(i64, EventId, i64, i64)> = g.worst.iter().take(5).collect();
    let pid = worst.first().and_then(|w| s.items.get(&w.1)).map(|it| it.pid).unwrap_or(0);
    let tid = s.tid;
    let mut timeline = Vec::new();
    let mut details = Vec::new();
    let mut io_window: Option<(i64, i64)> = None;
    for w in worst.iter().take(3) {
        let Some(Item { ts, dur, tid: itid, label, parts, wait, kernel, .. }) = s.items.get(&w.1) else { continue };
        let of_kernel = kernel.as_ref().map(|k| format!(" of {}", kernels::short_name(k))).unwrap_or_default();
        let mut what = match (s.kind, s.dist) {
            (ChainKind::SlowCalls, Some(d)) => {
                format!("{}{of_kernel} on tid {itid} took {} (op p50 {})", s.op_name, fmt_ns(*dur), fmt_ns(d.p50))
            }
            _ => format!("{label}: tid {itid} made no GPU call for {}", fmt_ns(*dur)),
        };
        if let Some(w) = wait.filter(|w| w.spins) {
            what.push_str(&format!("; spun on the CPU (scheduling: {})", w.policy_words()));
        }
        let lay = s.op.map(|o| layer(o.source)).unwrap_or("HOST");
        timeline.push(TimelineStep { ts_ns: *ts, dur_ns: *dur, layer: lay.into(), what, event_id: Some(w.1.clone()) });
        for p in parts.iter().filter(|p| p.cause == cause && chains::culprit_key(p) == ckey) {
            let cpu = if p.cpu >= 0 { format!(" on CPU {}", p.cpu) } else { String::new() };
            let who = match (&culprit, &p.culprit) {
                (Some(c), _) if c.role == "took_cpu" => format!(", {} ran", chains::culprit_words(&Some(c.clone()))),
                (Some(c), _) if c.role == "network_peer" => {
                    format!(" in a socket call to {}", chains::culprit_words(&Some(c.clone())))
                }
                (Some(c), _) => format!(", woken by {}", chains::culprit_words(&Some(c.clone()))),
                (None, Some((pid, tid, comm))) if cause == Cause::SpinGpuBusy => {
                    let comm = if comm.is_empty() { names.of(*pid, *tid) } else { comm.clone() };
                    format!(", {comm} (pid {pid}, tid {tid}) ran while the GPU was still busy")
                }
                (None, _) => String::new(),
            };
            timeline.push(TimelineStep {
                ts_ns: p.start,
                dur_ns: p.ns,
                layer: "HOST".into(),
                what: format!("{} {}{who}{cpu}", fmt_ns(p.ns), cause.as_str()),
                event_id: p.switch_id.clone(),
            });
            if cause == Cause::Uninterruptible {
                io_window = Some(io_window.map_or((p.start, p.end), |(a, b)| (a.min(p.start), b.max(p.end))));
            }
        }
    }
    if cause == Cause::Preempted && g.cpus.len() > 1 {
        let per: Vec<String> = g.cpus.iter().map(|(c, ns)| format!("CPU {c}: {}", fmt_ns(*ns))).collect();
        details.push(format!("preempted time by CPU: {}", per.join(", ")));
    }
    // the caveats and bounds of the headline's figure: first among the details, whole
    let mut notes = Vec::new();
    let kernels = kernels::chain_kernels(&g.kernels);
    if !kernels.is_empty() {
        let headline = kernels::by_short_name(&kernels);
        let named: Vec<String> = headline
            .iter()
            .take(KERNELS_IN_SUMMARY)
            .map(|k| format!("{} ({} calls, {})", k.kernel, k.calls, fmt_ns(k.ns)))
            .collect();
        let more = headline.len().saturating_sub(KERNELS_IN_SUMMARY);
        notes.push(format!(
            "kernels: {}{}",
            named.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
    }
    if let Some(op) = s.op.filter(|o| s.kind == ChainKind::SlowCalls && spin::is_spin_bounded_op(*o)) {
        let (bound, lines) = spin_facts(op, cause, &ckey, &culprit, s.spin, names);
        notes.extend(bound);
        details.extend(lines);
    }
    if cause == Cause::OffCpuUnrecorded {
        details.push(
            "this DB does not record who took the CPU nor why the thread left it (no prev_state / next task columns)"
                .into(),
        );
    }
    if let (Some((a, b)), true) = (io_window, pid != 0) {
        let reqs = view.block_requests(pid, a, b)?;
        for r in reqs.iter().take(5) {
            let e = &r.event;
            details.push(format!(
                "{} of {} KiB on device {}:{} by pid {}, {} (event {})",
                e.op_name(),
                e.arg0 >> 10,
                e.arg1 >> 20,
                e.arg1 & 0xfffff,
                e.pid,
                fmt_ns(e.dur_ns),
                r.id
            ));
        }
        if reqs.is_empty() {
            details.push(format!(
                "no block requests of pid {pid} recorded during the worst waits: likely page faults or swap"
            ));
        }
    }
    if cause == Cause::Uninterruptible {
        let (who, lines) = view.io_contenders(pid, &g.worst_parts)?;
        culprit = who;
        details.extend(lines);
    }
    let sql = match (s.kind, s.op, s.tid) {
        (ChainKind::FeedingGap, _, Some(t)) => evidence::gap_chain_sql(scope, t, cause, &ckey),
        (_, Some(op), _) => evidence::slow_call_chain_sql(scope, op, cause, &ckey),
        _ => return Err(AnalysisError::BadArgument("chain without subject".into())),
    };
    let op_label = s.op.map(|o| o.name().into_owned()).unwrap_or_else(|| "gap".into());
    let mut recommendations = chains::recommendations(s.kind, cause, &s.op_name, &culprit, pid);
    let tracer_effect = culprit.as_ref().is_some_and(|c| names.tracers.contains(&c.pid));
    if let Some(c) = culprit.as_ref().filter(|c| names.tracers.contains(&c.pid)) {
        details.push(format!(
            "pid {} is Causeway itself, the tracer that recorded this trace: its ring reader and writer threads ran on the workload's CPUs",
            c.pid
        ));
        recommendations.insert(
            0,
            format!("Keep the tracer off the workload's cores (taskset -c <free cores> causeway trace ...) or record fewer events (no --stacks); this chain is an effect of tracing, not of the workload (pid {})", c.pid),
        );
    }
    if let Some(c) = culprit.as_ref().filter(|c| !c.place.is_empty()) {
        notes.push(format!("culprit: {}", chains::culprit_words(&Some(c.clone()))));
    }
    details.splice(0..0, notes);
    match g.gpu_idle_ns {
        Some(0) if cause.is_host_cause() => details.insert(
            0,
            "the GPU stayed busy throughout (device timeline): this cost the GPU no idle time".to_string(),
        ),
        Some(idle) => details.insert(
            0,
            format!(
                "{} of its {} fell while the GPU sat idle in gaps over 1 ms (device timeline): at most that much GPU time was lost to it",
                fmt_ns(idle),
                fmt_ns(g.stall_ns)
            ),
        ),
        None => {}
    }
    Ok(Chain {
        id: String::new(),
        key: chains::chain_key(s.kind, &op_label, cause, &ckey)
            + &s.tid.map(|t| format!("/tid:{t}")).unwrap_or_default(),
        // an effect of tracing is said, never ranked HIGH as the workload's problem
        severity: match chains::attributed_severity(s.kind, cause, share, g.stall_ns) {
            sev if tracer_effect => sev.max(Severity::Medium),
            // the device view says the GPU never waited for it: said, never ranked as a stall
            _ if g.gpu_idle_ns == Some(0) && cause.is_host_cause() => Severity::Low,
            sev => sev,
        },
        kind: s.kind,
        op: s.op_name.clone(),
        cause: cause.as_str().into(),
        cause_text: cause.describe().into(),
        summary: chains::attributed_summary(
            s.kind,
            &s.op_name,
            &subject_words(names, pid, tid),
            pid,
            cause,
            &culprit,
            calls,
            g.stall_ns,
            share,
            &g.cpus,
        ),
        recommendations,
        culprit,
        pid,
        tid,
        calls,
        stall_ns: g.stall_ns,
        share,
        share_of: s.share_of.clone(),
        op_p50_ns: s.dist.map(|d| d.p50),
        op_p99_ns: s.dist.map(|d| d.p99),
        details,
        cpus: chains::cpu_times(&g.cpus),
        kernels,
        timeline,
        stacks: Vec::new(),
        evidence: Evidence {
            event_ids: worst.iter().map(|w| w.1.clone()).collect(),
            sql,
            value: g.stall_ns,
            unit: "ns".into(),
        },
        gpu_idle_ns: g.gpu_idle_ns,
        cost: None,
    })
}

/// What spinning did to a slow-call chain of a synchronizing op ([`crate::spin`]): for a
/// preemption chain, the text that bounds the culprit's share ("N of these calls spun ...") and
/// how each policy was found; for the `spin_gpu_busy` chain, who held the CPU while the GPU worked.
fn spin_facts(
    op: OpCode,
    cause: Cause,
    ckey: &CulpritKey,
    culprit: &Option<attr::Culprit>,
    facts: Option<&spin::OpSpinFacts>,
    names: &Names,
) -> (Option<String>, Vec<String>) {
    let mut lines = Vec::new();
    let Some(facts) = facts else { return (None, lines) };
    let mut bound = None;
    match (cause, ckey) {
        (Cause::Preempted, CulpritKey::TookCpu(p, t, comm)) => {
            let none = spin::SpinShare::default();
            let share = facts.shares.get(&(*p, *t, comm.clone())).unwrap_or(&none);
            if share.calls == 0 {
                return (bound, lines);
            }
            bound = Some(share.words(&op.name(), &chains::culprit_words(culprit)));
        }
        (Cause::SpinGpuBusy, _) => {
            let mut by: Vec<_> = facts.busy_by.iter().collect();
            by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let who: Vec<String> = by
                .iter()
                .take(5)
                .map(|((p, t, c), ns)| {
                    let c = if c.is_empty() { names.of(*p, *t) } else { c.clone() };
                    format!("{c} (pid {p}, tid {t}): {}", fmt_ns(**ns))
                })
                .collect();
            lines.push(format!(
                "who held the CPU while these calls spun and the GPU was still busy: {}",
                who.join(", ")
            ));
        }
        _ => return (bound, lines),
    }
    lines.extend(facts.reasons.iter().map(|r| format!("{}: {r}", op.name())));
    (bound, lines)
}
