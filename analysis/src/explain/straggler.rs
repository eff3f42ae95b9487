//! The straggler stage of `explain`: each rank that reached a communicator's collectives late
//! (found by [`crate::collectives::find_stragglers`]) becomes a chain that says which rank, in
//! which collectives, by how much, how long the other ranks waited for it, and what its thread went
//! through before each late entry that the other ranks' threads did not.
//!
//! The time that hurt comes first: from the entry of the rank before it to its own (`late_ns`,
//! the others all in and waiting), the late rank's thread is split by cause over its off-CPU
//! intervals, and each other rank's over as long a time before its own entry; the host cause with
//! the largest excess over the other ranks' median is the chain's cause. What the late rank did
//! earlier in its step, before anyone waited for it (an idle sleep, say), is no cause of the wait.
//! Only when that time holds nothing beyond the others is the whole step (from its previous
//! collective's entry to this one's) compared the same way, and the answer says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{op_name, Source};
use causeway_model::time::fmt_ns;
use causeway_model::NcclCall;

use super::view::{Context, TraceView};
use crate::attribution::{self as attr, Cause, Culprit, Part};
use crate::chains::{self, Chain, ChainKind, Evidence, TimelineStep};
use crate::collectives::{self, Straggler};
use crate::severity;
use crate::trace_data::Spans;
use crate::AnalysisError;

/// Timeline steps shown: the worst late collectives, each with every rank's entry.
const TIMELINE_COLLECTIVES: usize = 3;

/// Per cause (and, for preemptions, the task that took the CPU): ns over a rank's steps.
type CauseTotals = BTreeMap<(Cause, Option<(u32, u32, String)>), i64>;

fn add_parts(totals: &mut CauseTotals, parts: &[Part]) {
    for p in parts {
        let who = if p.cause == Cause::Preempted { p.culprit.clone() } else { None };
        *totals.entry((p.cause, who)).or_default() += p.ns;
    }
}

/// ns per cause.
type ByCause = BTreeMap<Cause, i64>;

fn by_cause(t: &CauseTotals) -> ByCause {
    let mut m = BTreeMap::new();
    for ((c, _), ns) in t {
        *m.entry(*c).or_default() += ns;
    }
    m
}

/// The chains of every straggler in scope (none for traces without NCCL calls).
pub(super) fn straggler_chains(view: &mut TraceView, ctx: &Context) -> Result<Vec<Chain>, AnalysisError> {
    let calls = view.nccl_calls()?;
    let stragglers = collectives::find_stragglers(&calls);
    if stragglers.is_empty() {
        return Ok(Vec::new());
    }
    // every rank's step before each late collective
    let mut spans = Spans::default();
    for s in &stragglers {
        for l in &s.late {
            for a in std::iter::once(&l.late).chain(&l.others) {
                if let Some(prev) = a.prev_ts_ns {
                    spans.add(a.tid, prev, a.ts_ns);
                }
            }
        }
    }
    spans.finish();
    let off = view.off_cpu(&spans)?;
    let no_off = Vec::new();
    let mut keys = BTreeSet::new();
    for s in &stragglers {
        for l in worst(s) {
            keys.extend(std::iter::once(&l.late).chain(&l.others).map(|a| (a.pid, a.tid, a.ts_ns)));
        }
    }
    let ids = view.nccl_event_ids(&keys)?;
    let job_ranks = view.process_ranks()?;
    let mut out = Vec::new();
    for s in &stragglers {
        let step_parts = |tid: u32, a: i64, b: i64| {
            attr::attribute_interval(a, b, off.get(&tid).unwrap_or(&no_off), ctx.coverage_of(tid), Cause::HostCompute)
        };
        let (mut hurt, mut whole) = (Totals::default(), Totals::default());
        let mut steps = 0u64;
        for l in &s.late {
            let Some(prev) = l.late.prev_ts_ns else { continue };
            steps += 1;
            // the late rank's time while the others waited, and each other rank's as long before its
            // own entry (within each one's step)
            let before = |a: &collectives::Arrival, prev: i64| (a.ts_ns - l.late_ns).max(prev);
            add_parts(&mut hurt.late, &step_parts(l.late.tid, before(&l.late, prev), l.late.ts_ns));
            add_parts(&mut whole.late, &step_parts(l.late.tid, prev, l.late.ts_ns));
            for o in &l.others {
                if let Some(op) = o.prev_ts_ns {
                    add_parts(hurt.others.entry(o.pid).or_default(), &step_parts(o.tid, before(o, op), o.ts_ns));
                    add_parts(whole.others.entry(o.pid).or_default(), &step_parts(o.tid, op, o.ts_ns));
                }
            }
        }
        out.push(chain(view, s, &calls, &hurt, &whole, steps, &ids, &job_ranks));
    }
    Ok(out)
}

/// The late rank's and the other ranks' totals over the same stretch of each late collective's step.
#[derive(Default)]
struct Totals {
    late: CauseTotals,
    others: BTreeMap<u32, CauseTotals>,
}

/// What the late rank went through beyond the other ranks' median in `t`: the host cause with the
/// largest excess, with the late rank's totals and the median by cause (`None`: no host cause
/// exceeds the others').
fn cause_beyond(t: &Totals) -> Option<(Cause, ByCause, ByCause)> {
    let mine = by_cause(&t.late);
    let median = others_median(&t.others);
    let excess = |c: Cause| mine.get(&c).copied().unwrap_or(0) - median.get(&c).copied().unwrap_or(0);
    let cause = mine
        .keys()
        .copied()
        .filter(|c| c.is_host_cause())
        .max_by_key(|c| (excess(*c), std::cmp::Reverse(*c)))
        .filter(|c| excess(*c) > 0)?;
    Some((cause, mine, median))
}

/// The late collectives shown in the timeline: the longest waits first.
fn worst(s: &Straggler) -> Vec<&collectives::LateCollective> {
    let mut v: Vec<_> = s.late.iter().collect();
    v.sort_by(|a, b| b.waited_ns.cmp(&a.waited_ns).then(a.seq.cmp(&b.seq)));
    v.truncate(TIMELINE_COLLECTIVES);
    v
}

/// The nearest-rank median of the other ranks' totals per cause (0 for a rank without it).
fn others_median(other_totals: &BTreeMap<u32, CauseTotals>) -> BTreeMap<Cause, i64> {
    let per_rank: Vec<BTreeMap<Cause, i64>> = other_totals.values().map(by_cause).collect();
    let causes: BTreeSet<Cause> = per_rank.iter().flat_map(|m| m.keys().copied()).collect();
    causes
        .into_iter()
        .map(|c| {
            let mut v: Vec<i64> = per_rank.iter().map(|m| m.get(&c).copied().unwrap_or(0)).collect();
            (c, attr::OpDistribution::from_durations(&mut v).p50)
        })
        .collect()
}

/// `rank 1 (pid 4711 train.py)`, with the launcher's rank when it says more (`; RANK 9 of 16 (local
/// 1 of 8)`): a communicator's rank is the job's rank only on the world communicator.
fn rank_words(rank: i32, pid: u32, name: &str, job: Option<&causeway_model::ProcessRank>) -> String {
    let mut who = if name.is_empty() { format!("pid {pid}") } else { format!("pid {pid} {name}") };
    if let Some(j) = job {
        who.push_str(&format!("; {}", j.words()));
    }
    if rank >= 0 {
        format!("rank {rank} ({who})")
    } else {
        who
    }
}

#[allow(clippy::too_many_arguments)]
fn chain(
    view: &TraceView,
    s: &Straggler,
    calls: &[NcclCall],
    hurt: &Totals,
    whole: &Totals,
    steps: u64,
    ids: &HashMap<(u32, u32, i64), causeway_store::EventId>,
    job_ranks: &HashMap<u32, causeway_model::ProcessRank>,
) -> Chain {
    let names = &view.names;
    let op = op_name(Source::Nccl.code(), s.late[0].op).into_owned();
    let waited = s.waited_ns();
    let share = waited as f64 / s.others_span_ns as f64;
    let mut lates: Vec<i64> = s.late.iter().map(|l| l.late_ns).collect();
    let late_dist = attr::OpDistribution::from_durations(&mut lates);
    let max_late = s.late.iter().map(|l| l.late_ns).max().unwrap_or(0);
    let who = rank_words(s.rank, s.pid, &crate::stacks::clean(&names.of(s.pid, s.tid)), job_ranks.get(&s.pid));
    let comm = format!("{:016x}", s.comm_hash as u64);
    let ranks =
        if s.nranks > 0 { format!("{} ranks", s.nranks) } else { format!("{} ranks traced", s.other_ranks + 1) };
    // what the late rank's thread went through beyond the other ranks: while they waited for it,
    // else over its whole step
    let (found, late_totals, in_wait) = match cause_beyond(hurt) {
        Some(f) => (Some(f), &hurt.late, true),
        None => (cause_beyond(whole), &whole.late, false),
    };
    let (cause, mine, median) = match found {
        Some(f) => f,
        None => (Cause::OnCpuOrGpu, by_cause(&hurt.late), others_median(&hurt.others)),
    };
    let excess = |c: Cause| mine.get(&c).copied().unwrap_or(0) - median.get(&c).copied().unwrap_or(0);
    let culprit: Option<Culprit> = if cause == Cause::Preempted {
        late_totals
            .iter()
            .filter(|((c, who), _)| *c == Cause::Preempted && who.is_some())
            .max_by_key(|(_, ns)| **ns)
            .and_then(|((_, who), _)| who.clone())
            .map(|(pid, tid, comm)| Culprit {
                comm: if comm.is_empty() { names.of(pid, tid) } else { comm },
                place: names.place_of(pid),
                pid,
                tid,
                role: "took_cpu".into(),
            })
    } else {
        None
    };
    let cause_words = match (&culprit, cause) {
        (Some(c), Cause::Preempted) => format!("preempted by {}", chains::culprit_words(&Some(c.clone()))),
        _ => format!("in {} ({})", cause.as_str(), cause.describe()),
    };
    let per_step = |ns: i64| if steps > 0 { fmt_ns(ns / steps as i64) } else { fmt_ns(0) };
    let went_through = if cause == Cause::OnCpuOrGpu {
        "its thread went through nothing the other ranks' threads did not before those collectives".to_string()
    } else if in_wait {
        format!(
            "while the other ranks waited for it its thread spent {} ({} per collective more than the other ranks' median over as long before their own entry) {cause_words}",
            fmt_ns(mine.get(&cause).copied().unwrap_or(0)),
            per_step(excess(cause))
        )
    } else {
        format!(
            "while the other ranks waited for it its thread went through nothing they did not; over its whole step before those collectives it spent {} ({} per collective more than the other ranks' median) {cause_words}",
            fmt_ns(mine.get(&cause).copied().unwrap_or(0)),
            per_step(excess(cause))
        )
    };
    // on a jittery host every rank is late now and then: what it waited for the others is said
    let net = s.net_waited_ns();
    let stretch = s.worst_stretch();
    let net_words = if s.waited_for_others_ns > 0 {
        format!(
            ", and it waited {} for them at their own late entries (net {}, {:.1}%)",
            fmt_ns(s.waited_for_others_ns),
            fmt_ns(net),
            net as f64 / s.others_span_ns as f64 * 100.0
        )
    } else {
        String::new()
    };
    let stretch_words = format!(
        "; its worst stretch, #{}-#{} ({} late), cost them {} net",
        stretch.first_seq,
        stretch.last_seq,
        stretch.late,
        fmt_ns(stretch.net_ns)
    );
    // the headline: who, how often, what it cost the others, why; the whole story is the first detail
    let short_who = if s.rank >= 0 { format!("rank {} (pid {})", s.rank, s.pid) } else { format!("pid {}", s.pid) };
    let short_cause = match (&culprit, cause) {
        (_, Cause::OnCpuOrGpu) => String::new(),
        (Some(_), Cause::Preempted) => format!(": preempted by {}", chains::culprit_short(&culprit, s.pid)),
        _ => format!(": {}", cause.short()),
    };
    let headline = format!(
        "{short_who} was late at {} of {} {op} collectives, the other ranks waiting {} for it ({:.1}%){short_cause}",
        s.late.len(),
        s.collectives,
        fmt_ns(waited),
        share * 100.0,
    );
    let story = format!(
        "{who} reached {} of {} {op} collectives late on communicator {comm} ({ranks}), collectives {}: by {} median (max {}); the other ranks waited {} for it ({:.1}% of their time from the first collective to the last){net_words}{stretch_words}; {went_through}",
        s.late.len(),
        s.collectives,
        s.seq_ranges(),
        fmt_ns(late_dist.p50),
        fmt_ns(max_late),
        fmt_ns(waited),
        share * 100.0,
    );

    let mut details = vec![
        story,
        format!(
            "a collective is late when its last rank entered at least max({}, 1/{} of the communicator's median period {}) after the rank before it; entry times are the host calls' (ranks on one host share its clock)",
            fmt_ns(collectives::LATE_FLOOR_NS),
            collectives::LATE_PERIOD_DIVISOR,
            fmt_ns(s.period_ns)
        ),
        format!(
            "NCCL calls enqueue and return: the other ranks' wait is on the GPU and shows up in their next synchronizing call ({} for rank {})",
            op,
            s.rank
        ),
    ];
    let mut causes: Vec<(Cause, i64)> = mine.iter().map(|(c, ns)| (*c, *ns)).collect();
    causes.sort_by_key(|c| std::cmp::Reverse(c.1));
    let breakdown: Vec<String> = causes
        .iter()
        .map(|(c, ns)| {
            format!("{} {} (others' median {})", c.as_str(), fmt_ns(*ns), fmt_ns(median.get(c).copied().unwrap_or(0)))
        })
        .collect();
    if !breakdown.is_empty() {
        let what = if in_wait {
            "the time the other ranks waited before its late entries"
        } else {
            "steps before its late entries"
        };
        details.push(format!("the late rank's {steps} {what}, by cause: {}", breakdown.join(", ")));
    }
    if let Some(c) = calls.iter().find(|c| c.pid == s.pid && c.comm_hash == s.comm_hash && c.device >= 0) {
        details.push(format!("rank {} runs on CUDA device {}", s.rank, c.device));
    }
    let mut recommendations = Vec::new();
    if cause != Cause::OnCpuOrGpu {
        recommendations.extend(chains::recommendations(ChainKind::FeedingGap, cause, &op, &culprit, s.pid));
    }
    if cause == Cause::HostCompute {
        recommendations.push(format!(
            "{who} does more host work per step than the other ranks before the collective: check its input pipeline (DataLoader workers, pinned memory, its shard of the data) or what only that rank computes"
        ));
    }
    recommendations.push(format!(
        "Every rank waits for the slowest at each collective: fix {who} first; the other ranks' long synchronizing calls are its effect, not their own problem"
    ));
    let shown = worst(s);
    let mut timeline = Vec::new();
    for l in &shown {
        for a in l.others.iter().chain(std::iter::once(&l.late)) {
            let name = crate::stacks::clean(&names.of(a.pid, a.tid));
            timeline.push(TimelineStep {
                ts_ns: a.ts_ns,
                dur_ns: l.late.ts_ns - a.ts_ns,
                layer: "NCCL".into(),
                what: format!(
                    "{} entered {op} #{}{}",
                    rank_words(a.rank, a.pid, &name, job_ranks.get(&a.pid)),
                    l.seq,
                    if a.pid == s.pid { format!(" {} late", fmt_ns(l.late_ns)) } else { String::new() }
                ),
                event_id: ids.get(&(a.pid, a.tid, a.ts_ns)).cloned(),
            });
        }
    }
    let seqs: Vec<String> = s.late.iter().map(|l| l.seq.to_string()).collect();
    let sql = format!(
        "SELECT sum(l.timestamp - o.timestamp) AS value FROM nccl_calls l JOIN nccl_calls o ON o.comm_hash = l.comm_hash AND o.seq = l.seq AND o.op = l.op AND o.pid <> l.pid WHERE l.comm_hash = {} AND l.pid = {} AND l.op = {} AND l.seq IN ({})",
        s.comm_hash,
        s.pid,
        s.late[0].op,
        seqs.join(", ")
    );
    // graded on its worst stretch: a dense run of late collectives, not the jitter of a busy host
    let severity = severity::STRAGGLER.grade(stretch.net_ns as f64 / s.others_span_ns as f64, stretch.net_ns);
    Chain {
        id: String::new(),
        key: format!("straggler/{op}/{comm}/pid:{}", s.pid),
        severity,
        kind: ChainKind::Straggler,
        op,
        cause: cause.as_str().into(),
        cause_text: cause.describe().into(),
        culprit,
        pid: s.pid,
        tid: Some(s.tid),
        calls: s.late.len() as u64,
        stall_ns: waited,
        share,
        share_of: "of the other ranks' time from their first collective to their last".into(),
        op_p50_ns: Some(late_dist.p50),
        op_p99_ns: Some(late_dist.p99),
        summary: headline,
        details,
        cpus: Vec::new(),
        kernels: Vec::new(),
        timeline: {
            timeline.sort_by_key(|t| t.ts_ns);
            timeline
        },
        stacks: Vec::new(),
        recommendations,
        evidence: Evidence {
            event_ids: shown.iter().filter_map(|l| ids.get(&(l.late.pid, l.late.tid, l.late.ts_ns)).cloned()).collect(),
            sql,
            value: waited,
            unit: "ns".into(),
        },
        gpu_idle_ns: None,
        cost: Some(crate::cost::straggler_cost(waited, s.other_ranks)),
    }
}
