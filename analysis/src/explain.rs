//! `explain`: the incident report. Loads the GPU calls of the scope, finds the slow calls and the long
//! gaps between calls, attributes each to what its thread went through ([`crate::attribution`]),
//! aggregates into chains ([`crate::chains`]), adds the detectors' findings ([`crate::detectors`]),
//! ranks them, and attaches to every chain a SQL query that reproduces its headline figure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{self, OpCode};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::{EventId, StoredEvent, TraceFormat, TraceStore};

use crate::attribution::{self as attr, CallAttribution, Cause, Coverage, OffCpu, OpDistribution, Part};
use crate::chains::{self, Chain, ChainAccumulator, ChainKind, Evidence, Group, Severity, TimelineStep};
use crate::detector_chains;
use crate::detectors::{self, Gap};
use crate::evidence::{self, CulpritKey, SqlScope};
use crate::few_keys::FewKeys;
use crate::kernels::{self, KernelIndex};
use crate::spin::{self, SchedPolicies, WaitMode};
use crate::trace_data::{self, Names, Spans};
use crate::trace_facts;
use crate::AnalysisError;

/// Kernels a slow-launch chain names in its summary (its JSON lists them all).
const KERNELS_IN_SUMMARY: usize = 3;

/// What to explain.
#[derive(Debug, Clone)]
pub struct ExplainRequest {
    pub window: TimeWindow,
    pub pid: Option<u32>,
    /// Chains returned (the rest are counted in `chains_total`).
    pub top: usize,
}

impl Default for ExplainRequest {
    fn default() -> Self {
        ExplainRequest { window: TimeWindow::ALL, pid: None, top: 10 }
    }
}

/// Figures of one GPU op in scope.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct OpFigures {
    pub op: String,
    pub source: u8,
    pub op_code: u16,
    /// All calls, nested ones included (the distribution).
    pub calls: u64,
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
    /// `max(p90, 2 * p50, 100 us)`.
    pub slow_threshold_ns: i64,
    /// Top-level calls at or above the threshold.
    pub slow_calls: u64,
    pub slow_ns: i64,
}

/// The incident report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Explanation {
    pub db: String,
    pub format: TraceFormat,
    /// The window asked for (`null` = unbounded) and the first/last event in scope.
    pub window: TimeWindow,
    pub first_ns: i64,
    pub last_ns: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// One sentence: the worst finding.
    pub verdict: String,
    pub slow_call_rule: String,
    pub severity_rules: Vec<String>,
    /// Top-level slow calls and their total duration.
    pub slow_calls: u64,
    pub slow_time_ns: i64,
    pub gpu_calls: u64,
    pub ops: Vec<OpFigures>,
    pub chains: Vec<Chain>,
    /// Chains found (more than `chains` when `truncated`).
    pub chains_total: usize,
    pub truncated: bool,
    /// What this DB does not record.
    pub missing: Vec<String>,
    pub notes: Vec<String>,
}

/// Find a chain by id (`c3`) or key.
pub fn find_chain<'a>(e: &'a Explanation, id: &str) -> Option<&'a Chain> {
    e.chains.iter().find(|c| c.id == id || c.key == id)
}

/// Everything one attributed subject (an op, or a thread's gaps) needs to become chains.
struct Subject<'a> {
    kind: ChainKind,
    op_name: String,
    op: Option<OpCode>,
    tid: Option<u32>,
    dist: Option<OpDistribution>,
    /// Denominator of `share`.
    total_ns: i64,
    share_of: String,
    /// Attributions by interval id.
    items: &'a HashMap<EventId, Item>,
}

/// One attributed interval: a slow call, or a gap (keyed by the call that ends it).
struct Item {
    ts: i64,
    dur: i64,
    pid: u32,
    tid: u32,
    label: String,
    parts: Vec<Part>,
    /// How a slow synchronizing call that was preempted waited for the GPU ([`crate::spin`]).
    wait: Option<WaitMode>,
    /// The kernel a slow kernel launch ran ([`crate::kernels::launch_kernel`]).
    kernel: Option<String>,
}

pub fn explain(store: &dyn TraceStore, req: &ExplainRequest) -> Result<Explanation, AnalysisError> {
    let info = store.info();
    let mut phase = PhaseClock::start();
    let scope = SqlScope {
        window: req.window,
        pid: req.pid,
        sched_detail: info.has_column("prev_state"),
        has_cpu: info.has_column("cpu"),
    };
    let mut names = Names::of_store(store)?;
    let calls = trace_data::load_calls(store, req.window, req.pid, &mut names)?;
    phase.lap("load calls");
    // Two independent passes over the calls, one per core: the ops' distributions, and each
    // thread's order with the nesting and gaps it gives.
    let (dists, (nested, gaps, spans_by_tid)) = std::thread::scope(|s| {
        let dists = s.spawn(|| op_distributions(&calls));
        let by_thread = attr::ThreadOrder::of(&calls);
        let nested = attr::nested_flags(&calls, &by_thread);
        let gaps = detectors::long_gaps(&calls, &by_thread);
        (dists.join().expect("op distributions"), (nested, gaps, detectors::thread_spans(&by_thread)))
    });
    phase.lap("distributions, nesting, gaps");
    let slow: Vec<usize> =
        (0..calls.len()).filter(|&i| !nested[i] && calls[i].dur >= dists[&calls[i].op].slow_threshold()).collect();

    let mut spans = Spans::default();
    for &i in &slow {
        spans.add(calls[i].tid, calls[i].ts, calls[i].end());
    }
    for g in &gaps {
        spans.add(g.tid, g.start, g.end);
    }
    spans.finish();
    let off = trace_data::load_off_cpu(store, &spans)?;
    phase.lap("load off-CPU intervals");
    let wakers = off.values().flatten().filter_map(|o| o.sched.as_ref()).map(|s| s.waker_tid);
    names.resolve_threads(store, wakers)?;
    let coverage: Option<HashMap<u32, Coverage>> =
        if scope.sched_detail { None } else { Some(trace_data::load_coverage(store)?) };
    let cov_of = |tid: u32| coverage.as_ref().map(|m| m.get(&tid).copied());
    let slow_pids: BTreeSet<u32> = slow.iter().map(|&i| calls[i].pid).collect();
    let pages = trace_data::load_page_allocs(store, &slow_pids, spans.earliest().unwrap_or(0))?;
    let no_off: Vec<OffCpu> = Vec::new();
    phase.lap("names, coverage, page allocations");

    // Slow calls, attributed, per op.
    let mut per_op: BTreeMap<OpCode, (ChainAccumulator, HashMap<EventId, Item>)> = BTreeMap::new();
    let mut op_slow: BTreeMap<OpCode, (u64, i64)> = BTreeMap::new();
    let mut page_bytes: BTreeMap<OpCode, i64> = BTreeMap::new();
    // Read only when a slow synchronizing call was preempted: the flags and the host's CPUs.
    let mut policies: Option<SchedPolicies> = None;
    let mut any_spun = false;
    // Read only when a kernel launch is slow.
    let mut kernel_index: Option<KernelIndex> = None;
    for &i in &slow {
        let c = &calls[i];
        let offs = off.get(&c.tid).unwrap_or(&no_off);
        let mut a: CallAttribution =
            attr::attribute_call(c, offs, cov_of(c.tid), pages.get(&c.pid).map(Vec::as_slice).unwrap_or(&[]));
        let mut wait = None;
        if spin::is_spin_bounded_op(c.op) && a.parts.iter().any(|p| p.cause == Cause::Preempted) {
            if policies.is_none() {
                policies = Some(SchedPolicies::load(store, &slow_pids)?);
            }
            let w = policies.as_ref().expect("loaded").wait_mode(c, offs);
            if w.spins {
                spin::bound_spin_wait(&mut a.parts, c.end());
                any_spun = true;
            }
            wait = Some(w);
        }
        let mut kernel = None;
        if codes::is_kernel_launch(c.op) {
            if kernel_index.is_none() {
                kernel_index = Some(KernelIndex::load(store)?);
            }
            // A trace that records no kernel name (older traces, Ingero DBs) has only raw handles to
            // offer: its launches name no kernel.
            kernel = kernel_index.as_ref().filter(|k| !k.is_empty()).and_then(|k| kernels::launch_kernel(&calls, i, k));
        }
        let (acc, items) = per_op.entry(c.op).or_default();
        acc.add(&c.id, c.ts, c.dur, &a.parts);
        items.insert(
            c.id.clone(),
            Item {
                ts: c.ts,
                dur: c.dur,
                pid: c.pid,
                tid: c.tid,
                label: c.op.name().into_owned(),
                parts: a.parts,
                wait,
                kernel,
            },
        );
        let s = op_slow.entry(c.op).or_default();
        s.0 += 1;
        s.1 += c.dur;
        if a.page_alloc_bytes >= attr::PAGE_ALLOC_PRESSURE_BYTES {
            *page_bytes.entry(c.op).or_default() += a.page_alloc_bytes;
        }
    }
    let slow_time_ns: i64 = op_slow.values().map(|s| s.1).sum();
    phase.lap("attribute slow calls");
    let mut chains_out = Vec::new();
    // per attributed chain (by key): the calls whose stacks it shows, its worst first
    let mut stack_sample: HashMap<String, Vec<EventId>> = HashMap::new();
    for (op, (acc, items)) in per_op {
        let subject = Subject {
            kind: ChainKind::SlowCalls,
            op_name: op.name().into_owned(),
            op: Some(op),
            tid: None,
            dist: dists.get(&op).copied(),
            total_ns: slow_time_ns,
            share_of: "all slow-call time in scope".into(),
            items: &items,
        };
        for (key, group) in acc.into_groups() {
            let sample = stack_sample_ids(&group);
            let mut chain = attributed_chain(store, &scope, &subject, key, group, &names)?;
            stack_sample.insert(chain.key.clone(), sample);
            if chain.cause == Cause::PageAllocPressure.as_str() {
                let b = page_bytes.get(&op).copied().unwrap_or(0);
                chain.details.push(format!("the process allocated {} MiB of pages during these calls", b >> 20));
            }
            chains_out.push(chain);
        }
    }

    // Long gaps between GPU calls, attributed, per thread.
    let mut per_tid: BTreeMap<u32, Vec<&Gap>> = BTreeMap::new();
    for g in &gaps {
        per_tid.entry(g.tid).or_default().push(g);
    }
    let sample_note = sampled_note(store, req)?;
    let bounds = trace_data::scope_bounds(store, req.window, req.pid)?;
    let mut forks: Option<Vec<StoredEvent>> = None; // read once, for every host-work chain
    for (tid, gs) in per_tid {
        let mut acc = ChainAccumulator::default();
        let mut items = HashMap::new();
        for g in gs {
            let parts = attr::attribute_interval(
                g.start,
                g.end,
                off.get(&tid).unwrap_or(&no_off),
                cov_of(tid),
                Cause::HostCompute,
            );
            acc.add(&g.before, g.start, g.end - g.start, &parts);
            let label = format!("gap from the end of event {} to event {}", g.after, g.before);
            items.insert(
                g.before.clone(),
                Item { ts: g.start, dur: g.end - g.start, pid: g.pid, tid, label, parts, wait: None, kernel: None },
            );
        }
        let span = spans_by_tid.get(&tid).map(|s| s.1 - s.0).unwrap_or(1).max(1);
        let subject = Subject {
            kind: ChainKind::FeedingGap,
            op_name: "gap between GPU calls".into(),
            op: None,
            tid: Some(tid),
            dist: None,
            total_ns: span,
            share_of: format!("the span tid {tid} fed the GPU (first call to last call end, {})", fmt_ns(span)),
            items: &items,
        };
        for (key, group) in acc.into_groups() {
            let sample = stack_sample_ids(&group);
            let mut chain = attributed_chain(store, &scope, &subject, key, group, &names)?;
            stack_sample.insert(chain.key.clone(), sample);
            if chain.cause == Cause::HostCompute.as_str() {
                let last_gap_end = items.values().map(|it| it.ts + it.dur).max().unwrap_or(0);
                let first_gap = items.values().map(|it| it.ts).min().unwrap_or(0);
                chain.details.extend(trace_facts::host_work_facts(
                    store,
                    req.window,
                    req.pid,
                    &mut forks,
                    chain.pid,
                    first_gap,
                    last_gap_end,
                    bounds,
                    &names,
                )?);
            }
            chain.details.push(format!(
                "a gap is long when it lasts at least max({}, {} x the thread's p50 gap, {} x its p75 gap)",
                fmt_ns(detectors::GAP_FLOOR_NS),
                detectors::GAP_P50_MULTIPLE,
                detectors::GAP_P75_MULTIPLE
            ));
            chains_out.push(chain);
        }
    }

    phase.lap("slow-call and gap chains");
    let found = detector_chains::detector_findings(&calls, &nested, bounds, info.has_column("arg2"));
    phase.lap("detector passes");
    chains_out.extend(detector_chains::detector_chains(&scope, found, &spans_by_tid, &names)?);
    phase.lap("detector chains");

    if let Some(n) = &sample_note {
        for c in &mut chains_out {
            c.details.push(format!("{n}: figures cover the stored events only"));
        }
    }
    chains::rank(&mut chains_out);
    let chains_total = chains_out.len();
    let truncated = chains_total > req.top;
    chains_out.truncate(req.top);
    // without a stack in the trace, the chains' calls are not read again
    if trace_data::holds_stacks(store)? {
        for c in &mut chains_out {
            let ids = stack_sample.remove(&c.key).unwrap_or_else(|| c.evidence.event_ids.clone());
            add_call_stacks(store, c, &ids)?;
        }
    }
    phase.lap("chain stacks");
    let verdict = verdict(&chains_out, slow.len());
    let ops = dists
        .iter()
        .map(|(op, d)| {
            let s = op_slow.get(op).copied().unwrap_or((0, 0));
            OpFigures {
                op: op.name().into_owned(),
                source: op.source,
                op_code: op.op,
                calls: d.count as u64,
                p50_ns: d.p50,
                p90_ns: d.p90,
                p99_ns: d.p99,
                slow_threshold_ns: d.slow_threshold(),
                slow_calls: s.0,
                slow_ns: s.1,
            }
        })
        .collect();
    let mut notes = Vec::new();
    if let Some(n) = sample_note {
        notes.push(n);
    }
    if let Some(p) = policies.as_ref().filter(|_| any_spun) {
        notes.push(format!(
            "synchronizing calls that spun on the CPU: only the last preemption, ending within {} of the return, can have delayed a call (the GPU kept working while the thread was preempted); the host's CPUs are counted as the {} distinct CPUs in this trace's sched_switch rows (the trace records no CPU count)",
            fmt_ns(spin::SPIN_RETURN_EPSILON_NS),
            p.cpus
        ));
    }
    if !scope.sched_detail {
        notes.push("this DB's sched_switch rows give each thread's off-CPU intervals but not why it left the CPU nor which task took it: such time is reported as off_cpu_unrecorded, with no culprit".into());
        notes.push("the part of a call or gap outside the thread's recorded sched_switch span is reported as no_sched_data, never as on-CPU time".into());
    }
    Ok(Explanation {
        db: info.path.display().to_string(),
        format: info.format.clone(),
        window: req.window,
        first_ns: bounds.map(|b| b.0).unwrap_or(0),
        last_ns: bounds.map(|b| b.1).unwrap_or(0),
        pid: req.pid,
        verdict,
        slow_call_rule: format!(
            "a top-level CUDA runtime/driver call (not inside another GPU call of its thread) whose duration is at least max(p{}, {} x p50, {}) of its op in scope (exact nearest-rank)",
            attr::SLOW_PER_MILLE / 10,
            attr::SLOW_P50_MULTIPLE,
            fmt_ns(attr::SLOW_FLOOR_NS)
        ),
        severity_rules: crate::severity::rules(),
        slow_calls: slow.len() as u64,
        slow_time_ns,
        gpu_calls: calls.len() as u64,
        ops,
        chains: chains_out,
        chains_total,
        truncated,
        missing: info.missing.clone(),
        notes,
    })
}

/// Debug-level timings of explain's phases (`CAUSEWAY_LOG=causeway_analysis=debug`).
struct PhaseClock(std::time::Instant);

impl PhaseClock {
    fn start() -> Self {
        PhaseClock(std::time::Instant::now())
    }

    fn lap(&mut self, phase: &str) {
        tracing::debug!(ms = self.0.elapsed().as_secs_f64() * 1e3, "explain: {phase}");
        self.0 = std::time::Instant::now();
    }
}

/// Each op's exact distribution over `calls` (nested calls included).
fn op_distributions(calls: &[attr::Call]) -> BTreeMap<OpCode, OpDistribution> {
    let mut by_op: FewKeys<OpCode, Vec<i64>> = FewKeys::default();
    for c in calls {
        by_op.entry(c.op, Vec::new).push(c.dur);
    }
    by_op.into_sorted().into_iter().map(|(op, mut d)| (op, OpDistribution::from_durations(&mut d))).collect()
}

fn verdict(chains: &[Chain], slow: usize) -> String {
    match chains.first() {
        Some(c) if c.severity != Severity::Low => format!("{} [{}]: {}", c.severity.as_str(), c.id, c.summary),
        Some(c) => format!("no HIGH or MEDIUM finding; the largest is LOW [{}]: {}", c.id, c.summary),
        None if slow == 0 => "no slow GPU calls and no long gaps between GPU calls in scope".into(),
        None => "no chain found".into(),
    }
}

/// When `events` is a sample, what `event_aggregates` says about the GPU calls in scope.
fn sampled_note(store: &dyn TraceStore, req: &ExplainRequest) -> Result<Option<String>, AnalysisError> {
    if !store.info().sampled {
        return Ok(None);
    }
    let (mut count, mut stored) = (0u64, 0u64);
    for r in store.aggregates(&req.window)? {
        if attr::is_gpu_call_source(r.source) && req.pid.is_none_or(|p| p == r.pid) {
            count += r.count;
            stored += r.stored;
        }
    }
    Ok(Some(format!(
        "events is a sample (selective storage): event_aggregates counts {count} GPU calls in the minute buckets of this scope, {stored} of them stored"
    )))
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

/// Calls of a chain whose stacks it shows: its worst (they come first in a group).
const STACK_SAMPLE_CALLS: usize = 64;
/// Stacks shown per chain, and frames per stack.
const CHAIN_STACKS: usize = 3;
const CHAIN_STACK_FRAMES: usize = 24;

fn stack_sample_ids(g: &Group) -> Vec<EventId> {
    g.items.iter().take(STACK_SAMPLE_CALLS).map(|i| i.1.clone()).collect()
}

/// The stacks behind a chain's calls `ids` (its worst first), and a recommendation naming the
/// user's own Python function behind most of them.
fn add_call_stacks(store: &dyn TraceStore, c: &mut Chain, ids: &[EventId]) -> Result<(), AnalysisError> {
    let mut stacks = crate::stacks::stacks_of_calls(store, ids, CHAIN_STACK_FRAMES)?;
    let with_stack: u64 = stacks.iter().map(|s| s.calls).sum();
    // one line of the user's code can be behind several stacks (other kernels, other callers)
    let mut by_line: BTreeMap<&str, u64> = BTreeMap::new();
    for s in &stacks {
        if let Some(u) = &s.user_frame {
            *by_line.entry(u.as_str()).or_default() += s.calls;
        }
    }
    if let Some((line, n)) = by_line.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))) {
        let (at, func) = crate::stacks::python_parts(line).unwrap_or((line, "?"));
        let rec = format!(
            "Start in {func} ({at}), the Python line behind {n} of this chain's {with_stack} worst calls with a stack"
        );
        c.recommendations.insert(c.recommendations.len().min(1), rec);
    }
    stacks.truncate(CHAIN_STACKS);
    c.stacks = stacks;
    Ok(())
}

/// Turn one (cause, culprit) group of a subject into a chain.
fn attributed_chain(
    store: &dyn TraceStore,
    scope: &SqlScope,
    s: &Subject,
    (cause, ckey): (Cause, CulpritKey),
    g: Group,
    names: &Names,
) -> Result<Chain, AnalysisError> {
    let mut culprit = chains::culprit_of(&ckey, &|p, t| names.of(p, t));
    let calls = g.items.len() as u64;
    let share = g.stall_ns as f64 / s.total_ns.max(1) as f64;
    let worst: Vec<&(i64, EventId, i64, i64)> = g.items.iter().take(5).collect();
    let pid = worst.first().and_then(|w| s.items.get(&w.1)).map(|it| it.pid).unwrap_or(0);
    let tid = s.tid;
    let mut timeline = Vec::new();
    let mut details = Vec::new();
    let mut io_window: Option<(i64, i64)> = None;
    for w in worst.iter().take(3) {
        let Some(Item { ts, dur, tid: itid, label, parts, wait, kernel, .. }) = s.items.get(&w.1) else { continue };
        let of_kernel = kernel.as_ref().map(|k| format!(" of {k}")).unwrap_or_default();
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
    let mut summary_tail = String::new();
    let kernels =
        kernels::chain_kernels(g.items.iter().filter_map(|w| s.items.get(&w.1)?.kernel.as_deref().map(|k| (k, w.0))));
    if !kernels.is_empty() {
        let named: Vec<String> = kernels
            .iter()
            .take(KERNELS_IN_SUMMARY)
            .map(|k| format!("{} ({} calls, {})", k.kernel, k.calls, fmt_ns(k.ns)))
            .collect();
        let more = kernels.len().saturating_sub(KERNELS_IN_SUMMARY);
        summary_tail.push_str(&format!(
            "; kernels: {}{}",
            named.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
    }
    if let Some(op) = s.op.filter(|o| s.kind == ChainKind::SlowCalls && spin::is_spin_bounded_op(*o)) {
        let (tail, lines) = spin_facts(op, cause, &ckey, &culprit, s.items, names);
        summary_tail.push_str(&tail);
        details.extend(lines);
    }
    if cause == Cause::OffCpuUnrecorded {
        details.push(
            "this DB does not record who took the CPU nor why the thread left it (no prev_state / next task columns)"
                .into(),
        );
    }
    if let (Some((a, b)), true) = (io_window, pid != 0) {
        let reqs = trace_data::block_requests(store, pid, a, b)?;
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
        let (who, lines) = trace_facts::io_contenders(store, pid, &g.worst_parts)?;
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
    Ok(Chain {
        id: String::new(),
        key: chains::chain_key(s.kind, &op_label, cause, &ckey)
            + &s.tid.map(|t| format!("/tid:{t}")).unwrap_or_default(),
        // an effect of tracing is said, never ranked HIGH as the workload's problem
        severity: match chains::attributed_severity(s.kind, cause, share, g.stall_ns) {
            sev if tracer_effect => sev.max(Severity::Medium),
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
            cause,
            &culprit,
            calls,
            g.stall_ns,
            share,
            &g.cpus,
        ) + &summary_tail,
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
    })
}

/// What spinning did to a slow-call chain of a synchronizing op ([`crate::spin`]): for a
/// preemption chain, the text that bounds the culprit's share ("; N of these calls spun ...") and
/// how each policy was found; for the `spin_gpu_busy` chain, who held the CPU while the GPU worked.
fn spin_facts(
    op: OpCode,
    cause: Cause,
    ckey: &CulpritKey,
    culprit: &Option<attr::Culprit>,
    items: &HashMap<EventId, Item>,
    names: &Names,
) -> (String, Vec<String>) {
    let mut lines = Vec::new();
    let reasons: BTreeSet<String> =
        items.values().filter_map(|it| it.wait.filter(|w| w.spins || w.slept)).map(|w| w.reason()).collect();
    let mut tail = String::new();
    match (cause, ckey) {
        (Cause::Preempted, CulpritKey::TookCpu(p, t, comm)) => {
            let share =
                spin::spin_share(items.values().map(|it| (it.parts.as_slice(), it.wait)), &(*p, *t, comm.clone()));
            if share.calls == 0 {
                return (tail, lines);
            }
            tail = format!("; {}", share.words(&op.name(), &chains::culprit_words(culprit)));
        }
        (Cause::SpinGpuBusy, _) => {
            let mut by: BTreeMap<(u32, u32, String), i64> = BTreeMap::new();
            for p in items.values().flat_map(|it| &it.parts).filter(|p| p.cause == Cause::SpinGpuBusy) {
                *by.entry(p.culprit.clone().unwrap_or((0, 0, String::new()))).or_default() += p.ns;
            }
            let mut by: Vec<_> = by.into_iter().collect();
            by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let who: Vec<String> = by
                .iter()
                .take(5)
                .map(|((p, t, c), ns)| {
                    let c = if c.is_empty() { names.of(*p, *t) } else { c.clone() };
                    format!("{c} (pid {p}, tid {t}): {}", fmt_ns(*ns))
                })
                .collect();
            lines.push(format!(
                "who held the CPU while these calls spun and the GPU was still busy: {}",
                who.join(", ")
            ));
        }
        _ => return (tail, lines),
    }
    lines.extend(reasons.into_iter().map(|r| format!("{}: {r}", op.name())));
    (tail, lines)
}
