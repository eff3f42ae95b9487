//! The one view of a trace that `explain` reads through: the store, the scope, the names, and
//! every read the stages make (the calls; the off-CPU intervals, coverage and page allocations
//! the slow calls and gaps need; the scheduling policies and kernel names when a call needs them;
//! block requests, I/O contenders, forks and stacks behind a chain). The stages in between
//! (`super::find_slow_calls_and_gaps`, `super::attribute_slow_calls`, the detectors) are pure
//! functions over what this view loaded.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::OpCode;
use causeway_model::time::TimeWindow;
use causeway_store::{EventFilter, EventId, StoredEvent, TraceInfo, TraceStore};

use super::{ExplainRequest, Found};
use crate::attribution::{self as attr, Coverage, Culprit, OffCpu, Part};
use crate::chains::Chain;
use crate::evidence::SqlScope;
use crate::kernels::KernelIndex;
use crate::spin::SchedPolicies;
use crate::trace_data::{self, Names, Spans};
use crate::trace_facts;
use crate::AnalysisError;

/// Stacks shown per chain, and frames per stack.
const CHAIN_STACKS: usize = 3;
const CHAIN_STACK_FRAMES: usize = 24;

/// The store and request of one `explain`, with what every stage shares.
pub(super) struct TraceView<'s> {
    store: &'s dyn TraceStore,
    pub(super) req: &'s ExplainRequest,
    pub(super) info: &'s TraceInfo,
    /// The scope as the evidence SQL states it.
    pub(super) scope: SqlScope,
    /// Process and thread names (threads added as the stages meet them).
    pub(super) names: Names,
    /// Forks in scope, read once for every host-work chain.
    forks: std::cell::RefCell<Option<Vec<StoredEvent>>>,
    /// The Python stacks the chains' calls borrowed, and what was read to find them.
    lends: std::cell::RefCell<crate::borrowed::Lends>,
}

/// What the slow calls and gaps need beyond the calls, read once.
pub(super) struct Context {
    /// Off-CPU intervals per thread, those touching a slow call or a gap.
    pub(super) off: HashMap<u32, Vec<OffCpu>>,
    /// Each thread's recorded scheduler span, where the trace lacks scheduler detail.
    pub(super) coverage: Option<HashMap<u32, Coverage>>,
    /// Page allocations of the processes with slow calls.
    pub(super) pages: HashMap<u32, Vec<(i64, i64)>>,
    /// Kernel names, when a kernel launch is slow.
    pub(super) kernel_index: Option<KernelIndex>,
    /// First and last event in scope.
    pub(super) bounds: Option<(i64, i64)>,
    /// Set when `events` is a sample (Ingero's selective storage).
    pub(super) sample_note: Option<String>,
    /// The GPUs' own state from the NVML samples in scope (empty without them).
    pub(super) gpu: crate::gpu_state::GpuState,
    /// When the devices sat idle, from the device timeline (`None`: the trace has none).
    pub(super) device_idle: Option<std::sync::Arc<Vec<(i64, i64)>>>,
    no_off: Vec<OffCpu>,
}

impl Context {
    pub(super) fn off_of(&self, tid: u32) -> &[OffCpu] {
        self.off.get(&tid).unwrap_or(&self.no_off)
    }

    /// `None` with scheduler detail (no coverage needed), else the thread's span if recorded.
    pub(super) fn coverage_of(&self, tid: u32) -> Option<Option<Coverage>> {
        self.coverage.as_ref().map(|m| m.get(&tid).copied())
    }

    pub(super) fn pages_of(&self, pid: u32) -> &[(i64, i64)] {
        self.pages.get(&pid).map(Vec::as_slice).unwrap_or(&[])
    }
}

impl<'s> TraceView<'s> {
    pub(super) fn open(store: &'s dyn TraceStore, req: &'s ExplainRequest) -> Result<TraceView<'s>, AnalysisError> {
        let info = store.info();
        let scope = SqlScope {
            window: req.window,
            pid: req.pid,
            sched_detail: info.has_column("prev_state"),
            has_cpu: info.has_column("cpu"),
        };
        Ok(TraceView {
            store,
            req,
            info,
            scope,
            names: Names::of_store(store)?,
            forks: Default::default(),
            lends: Default::default(),
        })
    }

    /// The GPU calls in scope (integer rows), naming their threads on the way; with `labels`, the
    /// workload's step labels in scope too (read in the same scan).
    pub(super) fn load_calls(
        &mut self,
        labels: Option<&mut Vec<causeway_store::SlimEvent>>,
    ) -> Result<attr::Calls, AnalysisError> {
        trace_data::load_calls(self.store, self.req.window, self.req.pid, &mut self.names, labels)
    }

    /// The first and last event in scope.
    pub(super) fn scope_bounds(&self) -> Result<Option<(i64, i64)>, AnalysisError> {
        trace_data::scope_bounds(self.store, self.req.window, self.req.pid)
    }

    /// What the attribution of `found` needs: off-CPU intervals (and their wakers' names),
    /// coverage, page allocations, kernel names, with the scope's `bounds` ([`Self::scope_bounds`]).
    pub(super) fn load_context(
        &mut self,
        calls: &[attr::Call],
        found: &Found,
        bounds: Option<(i64, i64)>,
    ) -> Result<Context, AnalysisError> {
        let off = trace_data::load_off_cpu(self.store, &found.spans, !self.names.peers.is_empty())?;
        let wakers = off.values().flatten().filter_map(|o| o.sched.as_ref()).map(|s| s.waker_tid);
        self.names.resolve_threads(self.store, wakers)?;
        let coverage = if self.scope.sched_detail { None } else { Some(trace_data::load_coverage(self.store)?) };
        // the pages allocated during a slow call: those in the spans' time
        let span_time = TimeWindow { from_ns: Some(found.spans.earliest().unwrap_or(0)), to_ns: found.spans.latest() };
        let pages = trace_data::load_page_allocs(self.store, &found.slow_pids, span_time)?;
        // A trace that records no kernel name (older traces, Ingero DBs) has only raw handles to
        // offer: its launches name no kernel.
        let slow_launch = found.slow.iter().any(|&i| causeway_model::codes::is_kernel_launch(calls[i].op));
        let kernel_index = if slow_launch { Some(KernelIndex::load(self.store)?) } else { None };
        Ok(Context {
            off,
            coverage,
            pages,
            kernel_index,
            gpu: crate::gpu_state::GpuState::of(&self.store.gpu_samples(&self.req.window)?)
                .with_devices(&self.store.gpu_devices()?),
            device_idle: crate::device_idle::idle_intervals(self.store, self.req.window, self.req.pid)?
                .map(std::sync::Arc::new),
            bounds,
            sample_note: sampled_note(self.store, self.req)?,
            no_off: Vec::new(),
        })
    }

    /// The NCCL calls in scope (`nccl_calls`), of the request's process only when it names one.
    pub(super) fn nccl_calls(&self) -> Result<Vec<causeway_model::NcclCall>, AnalysisError> {
        let mut v = self.store.nccl_calls(&self.req.window)?;
        // a straggler is found across ranks: a pid filter keeps the ranks that share a
        // communicator with that process
        if let Some(pid) = self.req.pid {
            let comms: BTreeSet<i64> = v.iter().filter(|c| c.pid == pid).map(|c| c.comm_hash).collect();
            v.retain(|c| comms.contains(&c.comm_hash));
        }
        Ok(v)
    }

    /// Where the traced processes stand in their jobs (the launcher's RANK, ...), by pid.
    pub(super) fn process_ranks(&self) -> Result<HashMap<u32, causeway_model::ProcessRank>, AnalysisError> {
        Ok(self.store.process_ranks()?.into_iter().map(|r| (r.pid, r)).collect())
    }

    /// The off-CPU intervals of `spans` (threads and their intervals), naming the threads in them.
    pub(super) fn off_cpu(&mut self, spans: &Spans) -> Result<HashMap<u32, Vec<OffCpu>>, AnalysisError> {
        let off = trace_data::load_off_cpu(self.store, spans, !self.names.peers.is_empty())?;
        self.names.resolve_threads(self.store, spans.by_tid.keys().copied())?;
        Ok(off)
    }

    /// The ids of the events of NCCL calls, by (pid, tid, ts).
    pub(super) fn nccl_event_ids(
        &self,
        keys: &BTreeSet<(u32, u32, i64)>,
    ) -> Result<HashMap<(u32, u32, i64), EventId>, AnalysisError> {
        let mut out = HashMap::new();
        let (Some(first), Some(last)) = (keys.iter().map(|k| k.2).min(), keys.iter().map(|k| k.2).max()) else {
            return Ok(out);
        };
        let filter = causeway_store::EventFilter {
            window: causeway_model::time::TimeWindow { from_ns: Some(first), to_ns: Some(last) },
            sources: Some(vec![causeway_model::codes::Source::Nccl.code()]),
            ..Default::default()
        };
        self.store.scan_events(&filter, &mut |s| {
            let k = (s.event.pid, s.event.tid, s.event.ts_ns);
            if keys.contains(&k) {
                out.insert(k, s.id);
            }
        })?;
        Ok(out)
    }

    /// Each GPU op's exact distribution, read from what a finished trace holds when the scope is the
    /// whole trace and the store answers without a scan ([`TraceStore::summarizes_whole_trace_from_packed`]):
    /// the same figures as the loaded calls give, without sorting their durations. `None`
    /// otherwise, or when the figures do not account for exactly the `calls` loaded.
    pub(super) fn packed_distributions(
        &self,
        calls: usize,
    ) -> Result<Option<BTreeMap<OpCode, attr::OpDistribution>>, AnalysisError> {
        if !(self.req.window.is_all() && self.req.pid.is_none() && self.store.summarizes_whole_trace_from_packed()) {
            return Ok(None);
        }
        let per_mille = attr::OpDistribution::PER_MILLE;
        let summary = self.store.duration_summary(&EventFilter::default(), &per_mille, false)?;
        let dists: BTreeMap<OpCode, attr::OpDistribution> = summary
            .ops
            .iter()
            .filter(|o| attr::is_gpu_call_source(o.op.source) && o.percentiles.len() == per_mille.len())
            .map(|o| (o.op, attr::OpDistribution::of_percentiles(o.count as usize, &o.percentiles)))
            .collect();
        let counted: usize = dists.values().map(|d| d.count).sum();
        if counted != calls {
            tracing::debug!(counted, calls, "explain: the packed durations do not match the calls; sorting the calls'");
            return Ok(None);
        }
        Ok(Some(dists))
    }

    /// The scheduling policies in force for `pids`, and the host's CPUs.
    pub(super) fn sched_policies(&self, pids: &BTreeSet<u32>) -> Result<SchedPolicies, AnalysisError> {
        SchedPolicies::load(self.store, pids)
    }

    /// Block requests of `pid` between `a` and `b`.
    pub(super) fn block_requests(&self, pid: u32, a: i64, b: i64) -> Result<Vec<StoredEvent>, AnalysisError> {
        trace_data::block_requests(self.store, pid, a, b)
    }

    /// Who else had block I/O in flight while `victim` waited in `parts`.
    pub(super) fn io_contenders(
        &self,
        victim: u32,
        parts: &[(i64, Part)],
    ) -> Result<(Option<Culprit>, Vec<String>), AnalysisError> {
        trace_facts::io_contenders(self.store, victim, parts)
    }

    /// What a process did on the CPU between GPU calls (forks, page work), for a host-work chain.
    pub(super) fn host_work_facts(
        &self,
        pid: u32,
        first_gap: i64,
        last_gap_end: i64,
        bounds: Option<(i64, i64)>,
    ) -> Result<Vec<String>, AnalysisError> {
        trace_facts::host_work_facts(
            self.store,
            self.req.window,
            self.req.pid,
            &mut self.forks.borrow_mut(),
            pid,
            first_gap,
            last_gap_end,
            bounds,
            &self.names,
        )
    }

    /// Whether the trace holds any stack (else the chains' calls are not read again).
    pub(super) fn holds_stacks(&self) -> Result<bool, AnalysisError> {
        trace_data::holds_stacks(self.store)
    }

    /// The stacks behind a chain's calls `ids` (its worst first), and a recommendation naming the
    /// user's own Python function behind most of them.
    pub(super) fn add_call_stacks(&self, c: &mut Chain, ids: &[EventId]) -> Result<(), AnalysisError> {
        let mut stacks =
            crate::stacks::stacks_of_calls(self.store, ids, CHAIN_STACK_FRAMES, &mut self.lends.borrow_mut())?;
        let with_stack: u64 = stacks.iter().map(|s| s.calls).sum();
        // one line of the user's code can be behind several stacks (other kernels, other callers);
        // (calls, of them borrowed) per line
        let mut by_line: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for s in &stacks {
            if let Some(u) = &s.user_frame {
                let n = by_line.entry(u.as_str()).or_default();
                n.0 += s.calls;
                n.1 += if s.borrowed.is_some() { s.calls } else { 0 };
            }
        }
        if let Some((line, (n, lent))) = by_line.iter().max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.0.cmp(a.0))) {
            let (at, func) = crate::stacks::python_parts(line).unwrap_or((line, "?"));
            let lent = match *lent {
                0 => String::new(),
                l if l == *n => " (borrowed from the Python thread they ran for)".to_string(),
                l => format!(" ({l} of them borrowed from the Python thread they ran for)"),
            };
            let rec = format!(
                "Start in {func} ({at}), the Python line behind {n} of this chain's {with_stack} worst calls with a stack{lent}"
            );
            c.recommendations.insert(c.recommendations.len().min(1), rec);
        }
        stacks.truncate(CHAIN_STACKS);
        c.stacks = stacks;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_backends::{create_sink, Engine, SyntheticTrace};
    use causeway_model::SessionInfo;

    /// A finished trace of synthetic events (GPU calls of several ops among the scheduler rows).
    fn finished_trace(path: &std::path::Path, engine: Engine) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let session = SessionInfo { started_at_ns: 1, tool_version: "test".into(), ..Default::default() };
            let mut sink = create_sink(path, session, Some(engine)).unwrap();
            let mut synth = SyntheticTrace::new(7, 1_000_000_000);
            for _ in 0..4 {
                sink.write_batch(synth.take(5_000)).await.unwrap();
            }
            sink.finish(2).await.unwrap();
        });
    }

    #[test]
    fn a_finished_traces_distributions_are_the_ones_its_calls_give() {
        for engine in [Engine::Sqlite, Engine::DuckDb].into_iter().filter(|&e| causeway_backends::is_built(e)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(format!("t.{}", engine.extension()));
            finished_trace(&path, engine);
            let store = causeway_backends::open_store(&path).unwrap();
            assert!(store.summarizes_whole_trace_from_packed(), "{engine:?}: a finished trace packs its durations");
            let req = ExplainRequest::default();
            let mut view = TraceView::open(store.as_ref(), &req).unwrap();
            let calls = view.load_calls(None).unwrap();
            let packed = view.packed_distributions(calls.len()).unwrap().expect("the whole trace: read, not sorted");
            assert!(packed.len() > 3, "{engine:?}: several GPU ops");
            assert_eq!(packed, super::super::op_distributions(&calls), "{engine:?}");
            // figures that do not account for the calls loaded are not used
            assert_eq!(view.packed_distributions(calls.len() - 1).unwrap(), None);
            // a scope narrower than the trace sorts its own calls' durations
            let one = ExplainRequest { pid: Some(calls[0].pid), ..Default::default() };
            let view = TraceView::open(store.as_ref(), &one).unwrap();
            assert_eq!(view.packed_distributions(calls.len()).unwrap(), None);
        }
    }
}
