//! `explain`: the incident report, as named stages over one view of the trace
//! ([`view::TraceView`], the only place that reads the store):
//!
//! 1. load the GPU calls of the scope;
//! 2. [`find_slow_calls_and_gaps`] (pure): each op's exact distribution, nesting, the slow calls
//!    and the long gaps between calls, the threads' feeding spans;
//! 3. load what those need: off-CPU intervals, coverage, page allocations, kernel names;
//! 4. [`attribute_slow_calls`] (pure but for the scheduling policies, read only when a
//!    synchronizing call that may have spun was preempted): each slow call split by cause
//!    ([`crate::attribution`]), folded into its op's groups (sums and the worst calls only);
//! 5. [`slow_call_chains`] and [`gap_chains`]: each (cause, culprit) group becomes a chain
//!    ([`subject::attributed_chain`]) with the facts behind it; the detectors' findings
//!    ([`crate::detectors`]) add theirs;
//! 6. rank, keep the top, attach the stacks behind each kept chain, and [`assemble`] the report,
//!    every chain with a SQL query that reproduces its headline figure.

mod counted;
mod ecc;
mod errors;
mod gpu_time;
mod hang;
mod link;
mod memory;
mod serving;
mod steps;
mod straggler;
mod subject;
mod view;
mod xid;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{self, OpCode};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_store::{EventId, TraceFormat, TraceStore};

use crate::attribution::{self as attr, Cause, OpDistribution};
use crate::chains::{self, Chain, ChainAccumulator, ChainKind, Severity};
use crate::detector_chains;
use crate::detectors::{self, Gap};
use crate::few_keys::FewKeys;
use crate::kernels;
use crate::spin::{self, SchedPolicies};
use crate::trace_data::Spans;
use crate::AnalysisError;
use subject::{attributed_chain, stack_sample_ids, Item, Subject};
use view::{Context, TraceView};

pub(crate) use counted::Counted;

/// What to explain.
#[derive(Debug, Clone)]
pub struct ExplainRequest {
    pub window: TimeWindow,
    pub pid: Option<u32>,
    /// Chains returned (the rest are counted in `chains_total`).
    pub top: usize,
    /// Judge what is slow by this wider window's calls and gaps instead of the scope's own: a
    /// window of slow steps (`--steps 30-37`) is slow against the rest of the trace, and inside it
    /// every call and gap may be as slow as the next. `None`: the scope's own.
    pub judge_by: Option<TimeWindow>,
}

impl Default for ExplainRequest {
    fn default() -> Self {
        ExplainRequest { window: TimeWindow::ALL, pid: None, top: 10, judge_by: None }
    }
}

impl ExplainRequest {
    /// The scope `window` of `pid`, its `top` chains, judged by its own calls.
    pub fn new(window: TimeWindow, pid: Option<u32>, top: usize) -> ExplainRequest {
        ExplainRequest { window, pid, top, judge_by: None }
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
    /// The steps in scope (labeled by the workload, else inferred), the slow ranges and why.
    pub steps: crate::StepReport,
    /// The serving engines in scope (their own metrics), their latency spikes and why.
    pub serving: crate::ServingReport,
    /// The device's own view (`trace --gpu-timeline`): busy share, idle gaps and their host
    /// causes; `None` when the trace holds no device timeline (said in `missing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::DeviceView>,
    /// The run's GPU time, its GPU model and, once priced ([`crate::price`]), its rate and cost;
    /// each chain's `cost` is a share of it.
    pub cost: crate::RunCost,
}

/// Find a chain by id (`c3`) or key.
pub fn find_chain<'a>(e: &'a Explanation, id: &str) -> Option<&'a Chain> {
    e.chains.iter().find(|c| c.id == id || c.key == id)
}

pub fn explain(store: &dyn TraceStore, req: &ExplainRequest) -> Result<Explanation, AnalysisError> {
    let judged_by = match req.judge_by.filter(|w| *w != req.window) {
        Some(wider) => Some(baseline_of(store, &ExplainRequest { window: wider, ..req.clone() })?),
        None => None,
    };
    let (mut e, baseline) = explain_calls(store, req, judged_by.as_ref(), None, true)?;
    // (the gaps are placed in their steps before the step list is dropped from the answer)
    e.device = crate::device_idle::device_view(store, req.window, req.pid, crate::DEFAULT_GAP_NS)?;
    if let Some(d) = &mut e.device {
        crate::device_idle::place_in_steps(d, &e.steps);
    }
    steps::explain_slow_ranges(store, &mut e.steps, &baseline)?;
    e.serving = serving::explain_serving(store, req.window, &baseline)?;
    match &mut e.device {
        Some(d) => {
            if let Some(v) = crate::device_idle::verdict(d) {
                // a host stall that cost the GPU no idle time is no part of the first sentence
                let top_cost_nothing = e.chains.first().is_some_and(|c| c.gpu_idle_ns == Some(0));
                e.verdict = if top_cost_nothing {
                    format!("{v} The host stalls found overlapped no GPU idle time: they cost the GPU nothing.")
                } else {
                    format!("{v} {}", e.verdict)
                };
            }
        }
        None => e.missing.push(crate::device_idle::MISSING.to_string()),
    }
    if let Some(d) = &e.device {
        crate::device_idle::say_in_ranges(store, req.window, req.pid, d, &mut e.steps, &mut e.serving)?;
    }
    e.cost.gpu_models = crate::cost::gpu_models(store)?;
    crate::cost::measure(&mut e);
    // the built-in list prices: `price` again with `--gpu-rate` or the config file
    crate::cost::price(&mut e, &crate::cost::Rates::builtin());
    Ok(e)
}

/// The thresholds a scope's own calls and gaps give (its calls read, nothing attributed).
fn baseline_of(store: &dyn TraceStore, req: &ExplainRequest) -> Result<Baseline, AnalysisError> {
    let mut view = TraceView::open(store, req)?;
    let calls = view.load_calls(None)?;
    let packed = view.packed_distributions(calls.len())?;
    Ok(find_slow_calls_and_gaps(&calls, None, packed).baseline)
}

/// What "slow" meant in a scope: each op's slow-call threshold and each thread's long-gap
/// threshold. A slow step range is judged by its whole scope's (inside the range every call and
/// gap may be as slow as the next).
#[derive(Debug, Clone, Default)]
struct Baseline {
    ops: BTreeMap<OpCode, i64>,
    gaps: BTreeMap<u32, i64>,
}

/// The chains of a scope judged by `given` where it has a threshold, with the thresholds used; with
/// `counted`, only the time of the slow calls and long gaps inside those ranges is split by cause
/// and counted ([`counted`]); with `with_steps`, its steps too (their slow ranges not yet explained).
fn explain_calls(
    store: &dyn TraceStore,
    req: &ExplainRequest,
    given: Option<&Baseline>,
    counted: Option<&Counted>,
    with_steps: bool,
) -> Result<(Explanation, Baseline), AnalysisError> {
    let mut phase = PhaseClock::start();
    let mut view = TraceView::open(store, req)?;
    let mut labels = Vec::new();
    let calls = view.load_calls(with_steps.then_some(&mut labels))?;
    phase.lap("load calls");
    let step_report = if !with_steps {
        crate::StepReport::default()
    } else if req.window.is_all() || !labels.is_empty() {
        // the labels in scope, or the whole trace's calls, are at hand: no scan of its own
        crate::steps_of(&labels, &calls, req.window)
    } else {
        // inferred step numbers count from the trace's start, whatever the window
        crate::find_steps(store, req.window, req.pid)?
    };
    phase.lap("steps");
    let packed = view.packed_distributions(calls.len())?;
    let mut found = find_slow_calls_and_gaps(&calls, given, packed);
    if let Some(k) = counted {
        found.count_only(&calls, k);
    }
    phase.lap("distributions, nesting, gaps");
    let bounds = view.scope_bounds()?;
    let has_pointers = view.info.has_column("arg2");
    // The detectors read only the calls: their passes run beside the reads of the slow calls'
    // context and the attribution.
    let (attributed, findings) = std::thread::scope(|s| {
        let findings = s.spawn(|| detector_chains::detector_findings(&calls, &found.nested, bounds, has_pointers));
        let attributed = (|| -> Result<_, AnalysisError> {
            let ctx = view.load_context(&calls, &found, bounds)?;
            phase.lap("off-CPU intervals, names, coverage, page allocations");
            let mut slow = attribute_slow_calls(&view, &calls, &found, &ctx)?;
            phase.lap("attribute slow calls");
            // per attributed chain (by key): the calls whose stacks it shows, its worst first
            let mut stack_sample: HashMap<String, Vec<EventId>> = HashMap::new();
            let mut chains_out = slow_call_chains(&view, &found, &ctx, &mut slow, &mut stack_sample)?;
            chains_out.extend(gap_chains(&view, &found, &ctx, &mut stack_sample)?);
            phase.lap("slow-call and gap chains");
            Ok((ctx, slow, stack_sample, chains_out))
        })();
        (attributed, findings.join().expect("detector passes"))
    });
    let (ctx, slow, mut stack_sample, mut chains_out) = attributed?;
    phase.lap("detector passes: the wait for them after the three above");
    chains_out.extend(detector_chains::detector_chains(&view.scope, findings, &found.spans_by_tid, &view.names)?);
    phase.lap("detector chains");
    chains_out.extend(straggler::straggler_chains(&mut view, &ctx)?);
    phase.lap("stragglers at NCCL collectives");
    // the calls that did not return success, read once for the hangs and the errors
    let unsuccessful = crate::trace_data::unsuccessful_gpu_calls(store, req.window, req.pid)?;
    let p50 = |op: OpCode| found.dists.get(&op).map_or(0, |d| d.p50);
    chains_out.extend(hang::hang_chains(store, req.window, &unsuccessful, &view.names, &p50)?);
    phase.lap("calls that never returned");
    chains_out.extend(errors::error_chains(store, &unsuccessful, &view.names)?);
    phase.lap("failed calls");
    chains_out.extend(xid::xid_chains(store, req.window, req.pid)?);
    chains_out.extend(ecc::ecc_chains(store, req.window, req.pid, &ctx.gpu, &view.names)?);
    phase.lap("GPU faults (Xid, ECC)");
    chains_out.extend(link::link_chains(&calls, &found, &ctx.gpu, &view.names));
    chains_out.extend(memory::memory_chains(store, req.window, req.pid, &ctx.gpu, &view.names)?);
    phase.lap("GPU links and memory");
    gpu_time::grade(&mut chains_out, slow.time_ns());

    if let Some(n) = &ctx.sample_note {
        for c in &mut chains_out {
            c.details.push(format!("{n}: figures cover the stored events only"));
        }
    }
    chains::rank(&mut chains_out);
    let chains_total = chains_out.len();
    let truncated = chains_total > req.top;
    chains_out.truncate(req.top);
    // without a stack in the trace, the chains' calls are not read again
    if view.holds_stacks()? {
        for c in &mut chains_out {
            let ids = stack_sample.remove(&c.key).unwrap_or_else(|| c.evidence.event_ids.clone());
            view.add_call_stacks(c, &ids)?;
        }
    }
    phase.lap("chain stacks");
    let baseline = found.baseline.clone();
    let mut e = assemble(&view, calls.len(), &found, &ctx, &slow, chains_out, chains_total, truncated);
    e.cost = crate::cost::run_gpu_time(&calls, &view.scope);
    e.steps = step_report;
    Ok((e, baseline))
}

/// What the calls alone say: each op's distribution, which calls are nested in another GPU call of
/// their thread, the slow top-level calls, the long gaps, each thread's feeding span.
struct Found {
    dists: BTreeMap<OpCode, OpDistribution>,
    nested: crate::spill_vec::SpillVec<bool>,
    gaps: Vec<Gap>,
    /// tid -> (first call start, last call end).
    spans_by_tid: BTreeMap<u32, (i64, i64)>,
    /// Indexes of the slow top-level calls.
    slow: Vec<usize>,
    /// Processes with a slow call.
    slow_pids: BTreeSet<u32>,
    /// Per thread, the intervals of its slow calls and gaps (what off-CPU rows to read).
    spans: Spans,
    /// The thresholds that made calls slow and gaps long.
    baseline: Baseline,
    /// The time counted (`None`: all of it), see [`counted`].
    counted: Option<Counted>,
}

/// Stage 2, pure. Independent passes over the calls, side by side: the ops' distributions (unless
/// `packed`, what the finished trace holds, gives them), the long gaps in each thread's order, and
/// the nesting and spans in the same order.
fn find_slow_calls_and_gaps(
    calls: &attr::Calls,
    given: Option<&Baseline>,
    packed: Option<BTreeMap<OpCode, OpDistribution>>,
) -> Found {
    let by_thread = attr::ThreadOrder::of(calls);
    let (dists, (nested, (gaps, gap_thresholds), spans_by_tid)) = std::thread::scope(|s| {
        let dists = s.spawn(|| packed.unwrap_or_else(|| op_distributions(calls)));
        let gaps = s.spawn(|| detectors::long_gaps(calls, &by_thread, given.map(|g| &g.gaps)));
        let nested = attr::nested_flags(calls, &by_thread);
        let spans = detectors::thread_spans(&by_thread);
        let gaps = gaps.join().expect("long gaps");
        (dists.join().expect("op distributions"), (nested, gaps, spans))
    });
    let baseline = Baseline {
        ops: dists
            .iter()
            .map(|(op, d)| (*op, given.and_then(|g| g.ops.get(op).copied()).unwrap_or_else(|| d.slow_threshold())))
            .collect(),
        gaps: gap_thresholds,
    };
    let slow: Vec<usize> =
        (0..calls.len()).filter(|&i| !nested[i] && calls[i].dur >= baseline.ops[&calls[i].op]).collect();
    let mut spans = Spans::default();
    for &i in &slow {
        spans.add(calls[i].tid, calls[i].ts, calls[i].end());
    }
    for g in &gaps {
        spans.add(g.tid, g.start, g.end);
    }
    spans.finish();
    let slow_pids = slow.iter().map(|&i| calls[i].pid).collect();
    Found { dists, nested, gaps, spans_by_tid, slow, slow_pids, spans, baseline, counted: None }
}

/// The slow calls attributed, per op.
struct SlowCalls {
    per_op: BTreeMap<OpCode, OpSlowCalls>,
    /// (slow calls, their total duration) per op.
    op_slow: BTreeMap<OpCode, (u64, i64)>,
    /// Pages allocated during slow calls under page-allocation pressure, per op.
    page_bytes: BTreeMap<OpCode, i64>,
    /// Read when a slow synchronizing call was preempted: the flags and the host's CPUs.
    policies: Option<SchedPolicies>,
    /// Whether a preempted synchronizing call spun on the CPU.
    any_spun: bool,
}

/// One op's slow calls: their (cause, culprit) groups, the attributions of each group's worst
/// calls, and what spinning did to them.
struct OpSlowCalls {
    acc: ChainAccumulator,
    items: HashMap<EventId, Item>,
    spin: spin::OpSpinFacts,
}

/// One slow call as explain keeps it: its parts (a spinning wait's bounded to what can have
/// delayed it), how it waited, the kernel it launched.
struct SlowCall {
    parts: Vec<attr::Part>,
    /// The call's time counted (all of it unless the scope counts only some, [`counted`]).
    counted_ns: i64,
    wait: Option<spin::WaitMode>,
    kernel: Option<String>,
    page_alloc_bytes: i64,
}

/// Stage 4: each slow call split by cause over its thread's off-CPU intervals; a preempted
/// synchronizing call that spun keeps only the preemption that can have delayed it
/// ([`crate::spin`]); a slow launch names its kernel. The calls stream through their op's groups,
/// which keep sums and their worst calls; the worst calls' attributions are taken again at the end
/// (the attribution is pure): explain's memory does not grow with the slow calls.
fn attribute_slow_calls(
    view: &TraceView,
    calls: &attr::Calls,
    found: &Found,
    ctx: &Context,
) -> Result<SlowCalls, AnalysisError> {
    let mut out = SlowCalls {
        per_op: BTreeMap::new(),
        op_slow: BTreeMap::new(),
        page_bytes: BTreeMap::new(),
        policies: None,
        any_spun: false,
    };
    for &i in &found.slow {
        let c = &calls[i];
        let a = attribute_slow_call(view, calls, i, found, ctx, &mut out.policies)?;
        out.any_spun |= a.wait.is_some_and(|w| w.spins);
        let op = out.per_op.entry(c.op).or_insert_with(|| OpSlowCalls {
            acc: if gpu_time::keeps_spans(&ctx.gpu, c.op) {
                ChainAccumulator::keeping_spans()
            } else {
                ChainAccumulator::default()
            }
            .measuring_device_idle(ctx.device_idle.clone()),
            items: HashMap::new(),
            spin: spin::OpSpinFacts::default(),
        });
        op.acc.add(&calls.event_id(c), c.pid, c.ts, a.counted_ns, &a.parts, a.kernel.as_deref());
        if spin::is_spin_bounded_op(c.op) {
            op.spin.add(&a.parts, a.wait);
        }
        let s = out.op_slow.entry(c.op).or_default();
        s.0 += 1;
        s.1 += a.counted_ns;
        if a.page_alloc_bytes >= attr::PAGE_ALLOC_PRESSURE_BYTES {
            *out.page_bytes.entry(c.op).or_default() += a.page_alloc_bytes;
        }
    }
    let worst: BTreeMap<OpCode, BTreeSet<EventId>> =
        out.per_op.iter_mut().map(|(op, o)| (*op, o.acc.worst_ids())).collect();
    for &i in &found.slow {
        let c = &calls[i];
        let id = calls.event_id(c);
        if !worst.get(&c.op).is_some_and(|ids| ids.contains(&id)) {
            continue;
        }
        let a = attribute_slow_call(view, calls, i, found, ctx, &mut out.policies)?;
        let item = Item {
            ts: c.ts,
            dur: c.dur,
            pid: c.pid,
            tid: c.tid,
            label: c.op.name().into_owned(),
            parts: a.parts,
            wait: a.wait,
            kernel: a.kernel,
        };
        out.per_op.get_mut(&c.op).expect("the op of a slow call").items.insert(id, item);
    }
    Ok(out)
}

/// Attribute slow call `i` ([`attribute_slow_calls`]); the scheduling policies are read into
/// `policies` the first time a synchronizing call that may have spun was preempted.
fn attribute_slow_call(
    view: &TraceView,
    calls: &attr::Calls,
    i: usize,
    found: &Found,
    ctx: &Context,
    policies: &mut Option<SchedPolicies>,
) -> Result<SlowCall, AnalysisError> {
    let c = &calls[i];
    let mut page_alloc_bytes = 0;
    let (mut parts, counted_ns) = counted::split_counted(found.counted.as_ref(), c.ts, c.end(), |a, b| {
        let piece = attr::Call { ts: a, dur: b - a, ..*c };
        let at = attr::attribute_call(&piece, ctx.off_of(c.tid), ctx.coverage_of(c.tid), ctx.pages_of(c.pid));
        page_alloc_bytes += at.page_alloc_bytes;
        at.parts
    });
    let mut wait = None;
    if spin::is_spin_bounded_op(c.op) && parts.iter().any(|p| p.cause == Cause::Preempted) {
        if policies.is_none() {
            *policies = Some(view.sched_policies(&found.slow_pids)?);
        }
        let w = policies.as_ref().expect("read above").wait_mode(c, ctx.off_of(c.tid));
        if w.spins {
            spin::bound_spin_wait(&mut parts, c.end());
        }
        wait = Some(w);
    }
    let kernel = if codes::is_kernel_launch(c.op) {
        ctx.kernel_index.as_ref().filter(|k| !k.is_empty()).and_then(|k| kernels::launch_kernel(calls, i, k))
    } else {
        None
    };
    Ok(SlowCall { parts, counted_ns, wait, kernel, page_alloc_bytes })
}

impl SlowCalls {
    fn time_ns(&self) -> i64 {
        self.op_slow.values().map(|s| s.1).sum()
    }
}

/// Stage 5a: the chains of each op's slow calls, one per (cause, culprit).
fn slow_call_chains(
    view: &TraceView,
    found: &Found,
    ctx: &Context,
    slow: &mut SlowCalls,
    stack_sample: &mut HashMap<String, Vec<EventId>>,
) -> Result<Vec<Chain>, AnalysisError> {
    let mut out = Vec::new();
    let slow_time_ns = slow.time_ns();
    for (op, OpSlowCalls { acc, items, spin }) in std::mem::take(&mut slow.per_op) {
        let subject = Subject {
            kind: ChainKind::SlowCalls,
            op_name: op.name().into_owned(),
            op: Some(op),
            tid: None,
            dist: found.dists.get(&op).copied(),
            total_ns: slow_time_ns,
            share_of: "all slow-call time in scope".into(),
            items: &items,
            spin: Some(&spin),
        };
        // the op's largest GPU-time group on a throttled GPU is the throttle's chain
        let mut throttled: Option<(usize, i64, crate::gpu_state::ThrottleFacts)> = None;
        for (key, group) in acc.into_groups() {
            let sample = stack_sample_ids(&group);
            if let Some(facts) = gpu_time::throttle_of(&ctx.gpu, op, key.0, &group) {
                if throttled.as_ref().is_none_or(|t| group.stall_ns > t.1) {
                    throttled = Some((out.len(), group.stall_ns, facts));
                }
            }
            let mut chain = attributed_chain(view, &subject, key, group)?;
            stack_sample.insert(chain.key.clone(), sample);
            if chain.cause == Cause::PageAllocPressure.as_str() {
                let b = slow.page_bytes.get(&op).copied().unwrap_or(0);
                chain.details.push(format!("the process allocated {} MiB of pages during these calls", b >> 20));
            }
            out.push(chain);
        }
        if let Some((i, _, facts)) = throttled {
            gpu_time::name_throttle(&mut out[i], &facts);
        }
    }
    Ok(out)
}

/// Stage 5b: the chains of each thread's long gaps between GPU calls, one per (cause, culprit).
fn gap_chains(
    view: &TraceView,
    found: &Found,
    ctx: &Context,
    stack_sample: &mut HashMap<String, Vec<EventId>>,
) -> Result<Vec<Chain>, AnalysisError> {
    let mut out = Vec::new();
    let mut per_tid: BTreeMap<u32, Vec<&Gap>> = BTreeMap::new();
    for g in &found.gaps {
        per_tid.entry(g.tid).or_default().push(g);
    }
    for (tid, gs) in per_tid {
        // as the slow calls: every gap folded into its groups, the worst ones attributed again
        let attribute = |g: &Gap| {
            counted::split_counted(found.counted.as_ref(), g.start, g.end, |a, b| {
                attr::attribute_interval(a, b, ctx.off_of(tid), ctx.coverage_of(tid), Cause::HostCompute)
            })
        };
        let mut acc = ChainAccumulator::default().measuring_device_idle(ctx.device_idle.clone());
        for g in &gs {
            let (parts, counted_ns) = attribute(g);
            acc.add(&g.before, g.pid, g.start, counted_ns, &parts, None);
        }
        let worst = acc.worst_ids();
        let mut items = HashMap::new();
        for g in gs.iter().filter(|g| worst.contains(&g.before)) {
            let label = format!("gap from the end of event {} to event {}", g.after, g.before);
            let item = Item {
                ts: g.start,
                dur: g.end - g.start,
                pid: g.pid,
                tid,
                label,
                parts: attribute(g).0,
                wait: None,
                kernel: None,
            };
            items.insert(g.before.clone(), item);
        }
        let first_gap = gs.iter().map(|g| g.start).min().unwrap_or(0);
        let last_gap_end = gs.iter().map(|g| g.end).max().unwrap_or(0);
        let span = found.spans_by_tid.get(&tid).map(|s| s.1 - s.0).unwrap_or(1).max(1);
        let subject = Subject {
            kind: ChainKind::FeedingGap,
            op_name: "gap between GPU calls".into(),
            op: None,
            tid: Some(tid),
            dist: None,
            total_ns: span,
            share_of: format!("the span tid {tid} fed the GPU (first call to last call end, {})", fmt_ns(span)),
            items: &items,
            spin: None,
        };
        for (key, group) in acc.into_groups() {
            let sample = stack_sample_ids(&group);
            let mut chain = attributed_chain(view, &subject, key, group)?;
            stack_sample.insert(chain.key.clone(), sample);
            if chain.cause == Cause::HostCompute.as_str() {
                chain.details.extend(view.host_work_facts(chain.pid, first_gap, last_gap_end, ctx.bounds)?);
            }
            chain.details.push(format!(
                "a gap is long when it lasts at least max({}, {} x the thread's p50 gap, {} x its p75 gap)",
                fmt_ns(detectors::GAP_FLOOR_NS),
                detectors::GAP_P50_MULTIPLE,
                detectors::GAP_P75_MULTIPLE
            ));
            out.push(chain);
        }
    }
    Ok(out)
}

/// Stage 6: the report around the ranked chains.
#[allow(clippy::too_many_arguments)]
fn assemble(
    view: &TraceView,
    gpu_calls: usize,
    found: &Found,
    ctx: &Context,
    slow: &SlowCalls,
    chains_out: Vec<Chain>,
    chains_total: usize,
    truncated: bool,
) -> Explanation {
    let (info, req, bounds) = (view.info, view.req, ctx.bounds);
    let verdict = verdict(&chains_out, found.slow.len());
    let ops = found
        .dists
        .iter()
        .map(|(op, d)| {
            let s = slow.op_slow.get(op).copied().unwrap_or((0, 0));
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
    if let Some(n) = &ctx.sample_note {
        notes.push(n.clone());
    }
    if let Some(p) = slow.policies.as_ref().filter(|_| slow.any_spun) {
        notes.push(format!(
            "synchronizing calls that spun on the CPU: only the last preemption, ending within {} of the return, can have delayed a call (the GPU kept working while the thread was preempted); the host's CPUs are counted as the {} distinct CPUs in this trace's sched_switch rows (the trace records no CPU count)",
            fmt_ns(spin::SPIN_RETURN_EPSILON_NS),
            p.cpus
        ));
    }
    if !view.scope.sched_detail {
        notes.push("this DB's sched_switch rows give each thread's off-CPU intervals but not why it left the CPU nor which task took it: such time is reported as off_cpu_unrecorded, with no culprit".into());
        notes.push("the part of a call or gap outside the thread's recorded sched_switch span is reported as no_sched_data, never as on-CPU time".into());
    }
    Explanation {
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
        slow_calls: found.slow.len() as u64,
        slow_time_ns: slow.time_ns(),
        gpu_calls: gpu_calls as u64,
        ops,
        chains: chains_out,
        chains_total,
        truncated,
        missing: info.missing.clone(),
        notes,
        steps: crate::StepReport::default(),
        serving: crate::ServingReport::default(),
        device: None,
        cost: crate::RunCost::default(),
    }
}

/// Debug-level timings of explain's phases (`CAUSEWAY_LOG=causeway_analysis=debug`).
struct PhaseClock(std::time::Instant);

impl PhaseClock {
    fn start() -> Self {
        PhaseClock(std::time::Instant::now())
    }

    fn lap(&mut self, phase: &str) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let (rss_mib, anon_mib, peak_mib) = resident_mib();
            tracing::debug!(ms = self.0.elapsed().as_secs_f64() * 1e3, rss_mib, anon_mib, peak_mib, "explain: {phase}");
        }
        self.0 = std::time::Instant::now();
    }
}

/// This process's resident memory now, the anonymous part of it (not the calls in a mapped file)
/// and its peak so far, MiB (Linux; 0 elsewhere), for the phase timings.
fn resident_mib() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
            .unwrap_or(0)
    };
    (kib("VmRSS:") / 1024, kib("RssAnon:") / 1024, kib("VmHWM:") / 1024)
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
        Some(c) if c.severity != Severity::Low => format!("[{}] {}", c.id, c.headline()),
        Some(c) => format!("no HIGH or MEDIUM finding; the largest: [{}] {}", c.id, c.headline()),
        None if slow == 0 => "no slow GPU calls and no long gaps between GPU calls in scope".into(),
        None => "no chain found".into(),
    }
}
