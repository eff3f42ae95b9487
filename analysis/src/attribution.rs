//! Per-call attribution: for every slow CUDA runtime/driver call, what its own thread went through
//! during `[ts, ts + dur]`.
//!
//! The method (DESIGN.md section 5), as pure functions over compact rows so that it can be tested
//! without a database and run over ten million events:
//!
//! 1. **Top-level calls.** A GPU call (source 1 runtime, 4 driver, 8 graphs) that lies inside another
//!    GPU call of the same thread (the runtime call around its driver call) is *nested*: only the
//!    outer call is attributed, so no stall is counted twice. Order: `(ts, dur desc, source, id)`; a
//!    call is nested when an earlier call in that order ends at or after it ends.
//! 2. **Slow calls.** A top-level call is slow when its duration is at least the nearest-rank p90 of
//!    its op (all calls of the op in the window, nested ones included), at least twice the op's p50,
//!    and at least [`SLOW_FLOOR_NS`]. The p50 rule keeps a flat distribution from blaming anyone.
//! 3. **Off-CPU segments.** Each `sched_switch` row of the thread is an off-CPU interval
//!    `[ts - dur, ts]` (intervals of one thread never overlap, so nothing is summed twice). With
//!    scheduler detail it splits into: preempted (runnable, the next task took the CPU), or sleep /
//!    uninterruptible wait from leaving the CPU until the wake-up, then run-queue wait from the
//!    wake-up until switch-in (the wake time clamped into the interval). Without detail (Ingero DBs)
//!    it is one `off_cpu_unrecorded` segment.
//! 4. **Per call.** The overlap of each segment with the call; the rest of the call is on-CPU or
//!    waiting on the GPU, or page-allocation pressure when the process allocated at least
//!    [`PAGE_ALLOC_PRESSURE_BYTES`] of pages during the call. On Ingero DBs, the part of a call
//!    outside the thread's scheduler coverage (first to last recorded switch) is `no_sched_data`.

use causeway_model::codes::{self, gpu_role, GpuRole, OpCode};
use causeway_model::{PrevState, SchedDetail};
use causeway_store::EventId;

use crate::few_keys::FewKeys;
use crate::spill_vec::SpillVec;
use crate::stats::nearest_ranks_unsorted;

/// Calls shorter than this are never slow (launches take microseconds; only stalls matter).
pub const SLOW_FLOOR_NS: i64 = 100_000;
/// The percentile (per mille) a slow call must reach.
pub const SLOW_PER_MILLE: u32 = 900;
/// A slow call must also take at least this multiple of its op's p50.
pub const SLOW_P50_MULTIPLE: i64 = 2;
/// Page allocations by the call's process during the call that turn the on-CPU remainder into
/// page-allocation pressure.
pub const PAGE_ALLOC_PRESSURE_BYTES: i64 = 64 << 20;

/// The GPU API sources, defined once in the model ([`codes::Source::is_gpu_api`]).
pub use causeway_model::codes::is_gpu_call_source;

/// The stored codes of the GPU API sources, ascending.
pub fn gpu_call_sources() -> &'static [u8] {
    &codes::GPU_CALL_SOURCES
}

/// One GPU API call, the columns attribution needs ([`crate::calls`]).
pub use crate::calls::{Call, CallId, Calls};

/// One off-CPU interval of a thread (a `sched_switch` row).
#[derive(Debug, Clone, PartialEq)]
pub struct OffCpu {
    pub id: EventId,
    pub pid: u32,
    pub tid: u32,
    pub start: i64,
    pub end: i64,
    pub cpu: i32,
    pub sched: Option<SchedDetail>,
    /// The peer (`net_peers` key; 0: not known) of the socket call of the same thread this
    /// interval lies in, if any (`net_send`, `net_recv`, `net_connect`, `net_accept`). An
    /// off-CPU interval lies wholly inside one syscall or outside all: a thread enters and leaves
    /// a syscall on a CPU.
    pub socket_peer: Option<i64>,
}

/// Why part of a call (or of a gap between calls) was lost.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Runnable, but another task had the CPU.
    Preempted,
    /// Woken up, waiting in the run queue for a CPU.
    RunqueueWait,
    /// Voluntary sleep (futex, poll, a queue): waiting for another thread.
    Sleep,
    /// Asleep inside a socket call (a blocking receive, send, connect or accept): waiting on the
    /// network peer the call talks to.
    NetworkWait,
    /// Uninterruptible wait: block I/O, page faults.
    Uninterruptible,
    /// Stopped, traced, parked.
    StoppedOrOther,
    /// Off-CPU, but the DB does not record why or who took the CPU (Ingero).
    OffCpuUnrecorded,
    /// On-CPU while the process allocated many pages.
    PageAllocPressure,
    /// The rest of a call: on-CPU in the library or waiting on the GPU.
    OnCpuOrGpu,
    /// Between two GPU calls, on-CPU: the feeding thread was busy with host work.
    HostCompute,
    /// The DB holds no scheduler events for this thread at that time.
    NoSchedData,
    /// Asleep inside a synchronizing call (a blocking sync or copy) until the GPU finished: GPU
    /// time, not a host cause. Whoever woke the thread is the driver's completion path.
    GpuWait,
    /// Preempted while spinning in a synchronizing call, before the GPU finished: the GPU was still
    /// busy, so the preemption did not delay the return (see [`crate::spin`]). Not a host cause.
    SpinGpuBusy,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Preempted => "preempted",
            Cause::RunqueueWait => "runqueue_wait",
            Cause::Sleep => "sleep",
            Cause::NetworkWait => "network_wait",
            Cause::Uninterruptible => "uninterruptible",
            Cause::StoppedOrOther => "stopped_or_other",
            Cause::OffCpuUnrecorded => "off_cpu_unrecorded",
            Cause::PageAllocPressure => "page_alloc_pressure",
            Cause::OnCpuOrGpu => "on_cpu_or_gpu",
            Cause::HostCompute => "host_compute",
            Cause::NoSchedData => "no_sched_data",
            Cause::GpuWait => "gpu_wait",
            Cause::SpinGpuBusy => "spin_gpu_busy",
        }
    }

    /// A cause found in what the host did (as opposed to "no host cause found").
    pub fn is_host_cause(self) -> bool {
        !matches!(self, Cause::OnCpuOrGpu | Cause::NoSchedData | Cause::GpuWait | Cause::SpinGpuBusy)
    }

    /// The cause as a headline says it (a few words; [`Cause::describe`] says it whole).
    pub fn short(self) -> &'static str {
        match self {
            Cause::Preempted => "preempted",
            Cause::RunqueueWait => "waiting for a CPU after a wake-up",
            Cause::Sleep => "asleep (futex, queue, poll)",
            Cause::NetworkWait => "asleep in socket calls",
            Cause::Uninterruptible => "in D state (block I/O or page faults)",
            Cause::StoppedOrOther => "stopped, traced or parked",
            Cause::OffCpuUnrecorded => "off-CPU, why not recorded",
            Cause::PageAllocPressure => "allocating pages (memory pressure)",
            Cause::OnCpuOrGpu => "no host cause: on-CPU in the library or GPU wait",
            Cause::HostCompute => "host work between GPU calls",
            Cause::NoSchedData => "no scheduler events recorded",
            Cause::GpuWait => "asleep until the GPU finished (GPU time)",
            Cause::SpinGpuBusy => "spinning while the GPU was busy: preemption did not delay it",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Cause::Preempted => "preempted while runnable: another task took the CPU",
            Cause::RunqueueWait => "run-queue wait after a wake-up: woken, but no CPU free",
            Cause::Sleep => "voluntary sleep: waiting on another thread (futex, queue, poll)",
            Cause::NetworkWait => "waiting on the network: asleep inside a socket call (receive, send, connect, accept)",
            Cause::Uninterruptible => "uninterruptible wait (D state): block I/O or page faults",
            Cause::StoppedOrOther => "stopped, traced or parked",
            Cause::OffCpuUnrecorded => "off-CPU; this DB does not record why, nor who took the CPU",
            Cause::PageAllocPressure => "on-CPU while the process allocated pages (memory pressure)",
            Cause::OnCpuOrGpu => "no host cause: on-CPU inside the library or waiting on the GPU",
            Cause::HostCompute => "on-CPU between GPU calls: the feeding thread was busy with host work",
            Cause::NoSchedData => "no scheduler events recorded for this thread at that time",
            Cause::GpuWait => "asleep in a synchronizing call until the GPU finished (blocking sync): GPU time, not a host cause",
            Cause::SpinGpuBusy => "spinning: the GPU was still busy; preempted while spinning in a synchronizing call before the GPU finished, so the preemption did not delay the return",
        }
    }
}

/// The task a cause names: who took the CPU, or who woke the thread.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Culprit {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// `took_cpu` (ran while the thread was runnable), `woke_thread` (the thread slept until it woke
    /// it) or `issued_io` (its block requests kept the device busy while the thread waited on I/O).
    pub role: String,
    /// The container or pod it ran in (`pod ml/job-0, container trainer (...)`), when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub place: String,
}

/// A piece of an off-CPU interval with one cause.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub cause: Cause,
    pub start: i64,
    pub end: i64,
    pub culprit: Option<(u32, u32, String)>,
    pub cpu: i32,
    /// A network wait's peer (`net_peers` key; 0: none or not known).
    pub peer: i64,
}

/// Split one off-CPU interval by cause (see the module doc). Culprit comms for wakers are filled in
/// later from the names the trace holds (the row records only the waker's ids).
pub fn segments(off: &OffCpu) -> Vec<Segment> {
    let seg = |cause, start, end, culprit| Segment { cause, start, end, culprit, cpu: off.cpu, peer: 0 };
    let Some(s) = &off.sched else {
        return vec![seg(Cause::OffCpuUnrecorded, off.start, off.end, None)];
    };
    let sleep_cause = match s.prev_state {
        PrevState::Preempted => {
            let culprit = (s.next_pid != 0 || s.next_tid != 0).then(|| (s.next_pid, s.next_tid, s.next_comm.clone()));
            return vec![seg(Cause::Preempted, off.start, off.end, culprit)];
        }
        PrevState::Sleeping if off.socket_peer.is_some() => Cause::NetworkWait,
        PrevState::Sleeping => Cause::Sleep,
        PrevState::Uninterruptible => Cause::Uninterruptible,
        PrevState::Other => Cause::StoppedOrOther,
        PrevState::Unknown => return vec![seg(Cause::OffCpuUnrecorded, off.start, off.end, None)],
    };
    let wake = wake_point(off.start, off.end, s.wake_ts_ns);
    let waker = (s.waker_pid != 0 || s.waker_tid != 0).then(|| (s.waker_pid, s.waker_tid, String::new()));
    let mut out = Vec::with_capacity(2);
    if wake > off.start {
        out.push(match sleep_cause {
            // the peer is what it waited on (the waker is the network stack's delivery)
            Cause::NetworkWait => {
                Segment { peer: off.socket_peer.unwrap_or(0), ..seg(sleep_cause, off.start, wake, None) }
            }
            _ => seg(sleep_cause, off.start, wake, waker),
        });
    }
    if off.end > wake {
        out.push(seg(Cause::RunqueueWait, wake, off.end, None));
    }
    out
}

/// The wake-up clamped into `[start, end]`; no recorded wake-up means it slept until switch-in.
pub fn wake_point(start: i64, end: i64, wake_ts: i64) -> i64 {
    if wake_ts > 0 {
        wake_ts.clamp(start, end)
    } else {
        end
    }
}

/// Overlap of `[a0, a1]` and `[b0, b1]`, 0 when disjoint.
pub fn overlap(a0: i64, a1: i64, b0: i64, b1: i64) -> i64 {
    (a1.min(b1) - a0.max(b0)).max(0)
}

/// The calls of each thread in the order in which a call's enclosing call comes first: by
/// timestamp, longest first, runtime before driver, then id. Shared by [`nested_flags`] and the gap
/// detector, which walk it with [`ThreadOrder::visit`]: every call once, threads interleaved in
/// time, each thread's calls in that order. Calls sorted by timestamp (explain's) cost nothing to
/// order but the few that share a timestamp; others are ordered once by an index (4 bytes a call).
/// Nothing per call is copied: explain holds one call per GPU call of the scope, millions.
pub struct ThreadOrder<'a> {
    calls: &'a [Call],
    /// The indexes of `calls` by timestamp, when `calls` are not in timestamp order.
    by_ts: Option<Vec<u32>>,
}

/// The times of one call, its thread and its index in the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSpan {
    pub ts: i64,
    pub dur: i64,
    pub idx: u32,
    pub tid: u32,
    pub source: u8,
}

impl CallSpan {
    /// The span of `calls[idx]`.
    pub fn of(calls: &[Call], idx: u32) -> CallSpan {
        let c = &calls[idx as usize];
        CallSpan { ts: c.ts, dur: c.dur, idx, tid: c.tid, source: c.op.source }
    }

    pub fn end(&self) -> i64 {
        self.ts.saturating_add(self.dur)
    }
}

impl<'a> ThreadOrder<'a> {
    pub fn of(calls: &'a [Call]) -> ThreadOrder<'a> {
        let by_ts = (!calls.windows(2).all(|w| w[0].ts <= w[1].ts)).then(|| {
            let mut idx: Vec<u32> = (0..calls.len() as u32).collect();
            idx.sort_by_key(|&i| calls[i as usize].ts);
            idx
        });
        ThreadOrder { calls, by_ts }
    }

    /// Calls `f` with every call once: in timestamp order, those sharing a timestamp by thread,
    /// longest first, runtime before driver, then id. Each thread's calls thus come in the
    /// thread's order.
    pub fn visit(&self, mut f: impl FnMut(CallSpan)) {
        let calls = self.calls;
        let at = |k: usize| self.by_ts.as_ref().map_or(k as u32, |v| v[k]);
        let ts = |k: usize| calls[at(k) as usize].ts;
        let mut tied: Vec<u32> = Vec::new();
        let mut k = 0;
        while k < calls.len() {
            let mut end = k + 1;
            while end < calls.len() && ts(end) == ts(k) {
                end += 1;
            }
            if end == k + 1 {
                f(CallSpan::of(calls, at(k)));
            } else {
                tied.clear();
                tied.extend((k..end).map(at));
                let key = |i: u32| {
                    let c = &calls[i as usize];
                    (c.tid, std::cmp::Reverse(c.dur), c.op.source, c.id)
                };
                tied.sort_by_key(|&i| key(i));
                for &i in &tied {
                    f(CallSpan::of(calls, i));
                }
            }
            k = end;
        }
    }
}

/// Marks nested calls: `nested[i]` is true when `calls[i]` lies inside another GPU call of the same
/// thread. `calls` must all come from the same window; `order` is [`ThreadOrder::of`] them. The
/// flags go to a mapped file when the calls are in one ([`crate::spill_vec`]).
pub fn nested_flags(calls: &Calls, order: &ThreadOrder) -> SpillVec<bool> {
    let mut nested = calls.array_beside(calls.len());
    (0..calls.len()).for_each(|_| nested.push(false));
    let mut nested = nested.finish();
    let mut threads: FewKeys<u32, ThreadNesting> = FewKeys::default();
    order.visit(|s| nested[s.idx as usize] = threads.entry(s.tid, ThreadNesting::default).nested(s.end()));
    nested
}

/// The nesting rule for one thread's GPU calls seen in order (by start, the longer first): a call
/// is nested when an earlier call of the thread ends at or after it ends. [`nested_flags`] applies
/// it to a window's calls; a caller that streams calls (an export, a picture) keeps one per thread.
#[derive(Debug, Clone, Copy)]
pub struct ThreadNesting {
    max_end: i64,
}

impl Default for ThreadNesting {
    fn default() -> Self {
        ThreadNesting { max_end: i64::MIN }
    }
}

impl ThreadNesting {
    /// Whether the next call, ending at `end`, is nested in an earlier one; records it.
    pub fn nested(&mut self, end: i64) -> bool {
        let nested = self.max_end >= end;
        self.max_end = self.max_end.max(end);
        nested
    }
}

/// Exact distribution figures of one op in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpDistribution {
    pub count: usize,
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
}

impl OpDistribution {
    /// The percentiles it holds (per mille): p50, p90 ([`SLOW_PER_MILLE`]), p99.
    pub const PER_MILLE: [u32; 3] = [500, SLOW_PER_MILLE, 990];

    /// The figures of unsorted durations (reordered in place).
    pub fn from_durations(durations: &mut [i64]) -> OpDistribution {
        let p = nearest_ranks_unsorted(durations, &Self::PER_MILLE).unwrap_or_else(|| vec![0; 3]);
        Self::of_percentiles(durations.len(), &p)
    }

    /// The figures of `count` durations whose nearest-rank values at [`Self::PER_MILLE`] are `p`.
    pub fn of_percentiles(count: usize, p: &[i64]) -> OpDistribution {
        OpDistribution { count, p50: p[0], p90: p[1], p99: p[2] }
    }

    /// The slow-call threshold: `max(p90, 2 * p50, floor)`.
    pub fn slow_threshold(&self) -> i64 {
        self.p90.max(self.p50.saturating_mul(SLOW_P50_MULTIPLE)).max(SLOW_FLOOR_NS)
    }
}

/// One piece of a call's attribution.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub cause: Cause,
    pub ns: i64,
    pub culprit: Option<(u32, u32, String)>,
    pub cpu: i32,
    /// The sched_switch row the piece comes from (none for remainders).
    pub switch_id: Option<EventId>,
    /// Where the piece lies: `[start, end]` clipped to the call.
    pub start: i64,
    pub end: i64,
    /// A network wait's peer (`net_peers` key; 0: none or not known).
    pub peer: i64,
}

/// What one call went through.
#[derive(Debug, Clone, PartialEq)]
pub struct CallAttribution {
    pub call: Call,
    pub parts: Vec<Part>,
    /// Bytes of pages the process allocated during the call.
    pub page_alloc_bytes: i64,
}

/// The span of a thread's recorded scheduler events (Ingero DBs start recording switches late).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub start: i64,
    pub end: i64,
}

/// Attribute one interval `[a, b]` (a call, or a gap between calls) of a thread: `offs` are that
/// thread's off-CPU intervals sorted by start; `coverage` is `None` when the trace records the
/// scheduler for the whole run (native traces), else the thread's recorded span (`Some(None)`
/// style absence = no switches at all is passed as an empty coverage). `remainder` names the
/// on-CPU rest.
pub fn attribute_interval(
    a: i64,
    b: i64,
    offs: &[OffCpu],
    coverage: Option<Option<Coverage>>,
    remainder: Cause,
) -> Vec<Part> {
    let mut parts = Vec::new();
    // First interval that can overlap: intervals are disjoint and sorted, so ends are sorted too.
    let first = offs.partition_point(|o| o.end <= a);
    for off in &offs[first..] {
        if off.start >= b {
            break;
        }
        for s in segments(off) {
            let ns = overlap(a, b, s.start, s.end);
            if ns > 0 {
                parts.push(Part {
                    cause: s.cause,
                    ns,
                    culprit: s.culprit,
                    cpu: s.cpu,
                    switch_id: Some(off.id.clone()),
                    start: a.max(s.start),
                    end: b.min(s.end),
                    peer: s.peer,
                });
            }
        }
    }
    let off_ns: i64 = parts.iter().map(|p| p.ns).sum();
    let covered = match coverage {
        None => b - a,
        Some(None) => 0,
        Some(Some(c)) => overlap(a, b, c.start, c.end),
    };
    // what no off-CPU interval explains: a piece of the whole interval, of no interval in particular
    let whole = |cause, ns| Part { cause, ns, culprit: None, cpu: -1, switch_id: None, start: a, end: b, peer: 0 };
    let uncovered = (b - a) - covered;
    if uncovered > 0 {
        parts.push(whole(Cause::NoSchedData, uncovered));
    }
    let rest = covered - off_ns;
    if rest > 0 {
        parts.push(whole(remainder, rest));
    }
    parts
}

/// Page allocations of a process: `(ts, bytes)` sorted by ts.
pub type PageAllocs = [(i64, i64)];

/// Bytes allocated in `[a, b]`.
pub fn page_bytes_between(allocs: &PageAllocs, a: i64, b: i64) -> i64 {
    let lo = allocs.partition_point(|x| x.0 < a);
    let hi = allocs.partition_point(|x| x.0 <= b);
    allocs[lo..hi].iter().map(|x| x.1).sum()
}

/// Ops that wait for the GPU by definition: synchronizations and synchronous copies
/// ([`GpuRole::Sync`] and [`GpuRole::SyncCopy`] of `causeway_model::codes::gpu_role`). A voluntary
/// sleep inside one is the blocking-sync wait for the GPU, not a host cause.
pub fn is_gpu_wait_op(code: OpCode) -> bool {
    matches!(gpu_role(code), GpuRole::Sync | GpuRole::SyncCopy)
}

/// Attribute one slow call. `page_allocs` are the call's process's page allocations.
pub fn attribute_call(
    call: &Call,
    offs: &[OffCpu],
    coverage: Option<Option<Coverage>>,
    page_allocs: &PageAllocs,
) -> CallAttribution {
    let page_alloc_bytes = page_bytes_between(page_allocs, call.ts, call.end());
    let remainder =
        if page_alloc_bytes >= PAGE_ALLOC_PRESSURE_BYTES { Cause::PageAllocPressure } else { Cause::OnCpuOrGpu };
    let mut parts = attribute_interval(call.ts, call.end(), offs, coverage, remainder);
    if is_gpu_wait_op(call.op) {
        for p in parts.iter_mut().filter(|p| p.cause == Cause::Sleep) {
            p.cause = Cause::GpuWait;
            p.culprit = None;
        }
    }
    CallAttribution { call: *call, parts, page_alloc_bytes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: i64, tid: u32, source: u8, op: u16, ts: i64, dur: i64) -> Call {
        Call { id: CallId(id), ts, dur, pid: 1, tid, op: OpCode::new(source, op), arg0: 0 }
    }

    fn off(id: i64, start: i64, end: i64, sched: Option<SchedDetail>) -> OffCpu {
        OffCpu { id: EventId::Int(id), pid: 1, tid: 1, start, end, cpu: 1, sched, socket_peer: None }
    }

    #[test]
    fn runtime_call_contains_its_driver_call() {
        let calls = Calls::from_calls(vec![
            call(1, 1, 1, 5, 100, 50), // cudaStreamSync
            call(2, 1, 4, 8, 101, 40), // cuStreamSynchronize inside it
            call(3, 2, 4, 8, 101, 40), // same times, other thread: top-level
            call(4, 1, 1, 3, 200, 10), // later, top-level
            call(5, 1, 4, 1, 200, 10), // identical span, driver: nested (source order)
        ]);
        assert_eq!(*nested_flags(&calls, &ThreadOrder::of(&calls)), [false, true, false, false, true]);
    }

    /// The walk gives every call once and each thread's calls sorted by (ts, longest first,
    /// runtime before driver, id), whatever order the calls come in and however many share a
    /// timestamp.
    #[test]
    fn thread_order_visits_each_threads_calls_in_its_order() {
        // many ties on ts and dur, three threads, two sources
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        let calls: Vec<Call> = (0..2000)
            .map(|i| {
                let (tid, source) = (1 + next(3) as u32, if next(2) == 0 { 1 } else { 4 });
                call(1000 - i, tid, source, 1, next(50), next(4))
            })
            .collect();
        for input in [calls.clone(), {
            let mut sorted = calls.clone();
            sorted.sort_by_key(|c| c.ts);
            sorted
        }] {
            let mut seen: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
            ThreadOrder::of(&input).visit(|s| seen.entry(s.tid).or_default().push(s.idx));
            assert_eq!(seen.values().map(Vec::len).sum::<usize>(), input.len());
            for (tid, got) in seen {
                let mut want: Vec<u32> = (0..input.len() as u32).filter(|&i| input[i as usize].tid == tid).collect();
                want.sort_by_key(|&i| {
                    let c = &input[i as usize];
                    (c.ts, std::cmp::Reverse(c.dur), c.op.source, c.id)
                });
                assert_eq!(got, want, "thread {tid}");
            }
        }
    }

    /// Asleep from its switch-out until woken at 130 by pid 7 tid 8.
    fn slept_until_130() -> SchedDetail {
        SchedDetail {
            prev_state: PrevState::Sleeping,
            wake_ts_ns: 130,
            waker_pid: 7,
            waker_tid: 8,
            ..Default::default()
        }
    }

    #[test]
    fn sleep_splits_at_the_wake_up() {
        let s = segments(&off(1, 100, 150, Some(slept_until_130())));
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].cause, s[0].start, s[0].end), (Cause::Sleep, 100, 130));
        assert_eq!(s[0].culprit, Some((7, 8, String::new())));
        assert_eq!((s[1].cause, s[1].start, s[1].end), (Cause::RunqueueWait, 130, 150));
    }

    #[test]
    fn a_sleep_inside_a_socket_call_is_a_network_wait_on_its_peer() {
        let o = OffCpu { socket_peer: Some(42), ..off(1, 100, 150, Some(slept_until_130())) };
        let s = segments(&o);
        assert_eq!((s[0].cause, s[0].end, s[0].peer, &s[0].culprit), (Cause::NetworkWait, 130, 42, &None));
        assert_eq!(s[1].cause, Cause::RunqueueWait, "the run-queue wait after the data came is not the network's");
        // preempted inside a socket call: the CPU was taken, the network did not hold it
        let pre = SchedDetail { prev_state: PrevState::Preempted, ..Default::default() };
        assert_eq!(
            segments(&OffCpu { socket_peer: Some(42), ..off(2, 100, 150, Some(pre)) })[0].cause,
            Cause::Preempted
        );
        // a network wait in a synchronizing call stays one (only a plain sleep is the GPU's wait)
        let sync = call(3, 1, 1, 5, 90, 100);
        let a = attribute_call(&sync, &[o], None, &Vec::new());
        assert_eq!((a.parts[0].cause, a.parts[0].peer), (Cause::NetworkWait, 42));
        assert!(Cause::NetworkWait.is_host_cause());
    }

    #[test]
    fn interval_is_split_and_the_rest_is_the_remainder() {
        let pre = SchedDetail {
            prev_state: PrevState::Preempted,
            next_pid: 9912,
            next_tid: 9912,
            next_comm: "backup-rsync".into(),
            ..Default::default()
        };
        let offs = vec![off(10, 90, 120, Some(pre)), off(11, 140, 145, None)];
        let parts = attribute_interval(100, 200, &offs, None, Cause::OnCpuOrGpu);
        assert_eq!(parts.len(), 3);
        assert_eq!((parts[0].cause, parts[0].ns), (Cause::Preempted, 20));
        assert_eq!((parts[1].cause, parts[1].ns), (Cause::OffCpuUnrecorded, 5));
        assert_eq!((parts[2].cause, parts[2].ns), (Cause::OnCpuOrGpu, 75));
        // Coverage starting at 150: 50 ns have no scheduler data.
        let parts =
            attribute_interval(100, 200, &offs, Some(Some(Coverage { start: 150, end: 300 })), Cause::OnCpuOrGpu);
        let nosched: i64 = parts.iter().filter(|p| p.cause == Cause::NoSchedData).map(|p| p.ns).sum();
        assert_eq!(nosched, 50);
        assert_eq!(parts.iter().map(|p| p.ns).sum::<i64>(), 100);
    }

    #[test]
    fn slow_threshold_needs_p90_twice_p50_and_the_floor() {
        let mut flat = vec![1_000_000; 20];
        assert_eq!(OpDistribution::from_durations(&mut flat).slow_threshold(), 2_000_000);
        let mut tiny = vec![10; 20];
        assert_eq!(OpDistribution::from_durations(&mut tiny).slow_threshold(), SLOW_FLOOR_NS);
        let mut tail: Vec<i64> = (1..=10).map(|i| i * 1_000_000).collect();
        assert_eq!(OpDistribution::from_durations(&mut tail).slow_threshold(), 10_000_000);
    }

    #[test]
    fn gpu_calls_and_gpu_waits_come_from_the_model() {
        use causeway_model::codes::op;
        assert_eq!(gpu_call_sources(), &[1, 4, 8, 9]);
        // The ops that wait for the GPU: every sync and synchronous copy, and nothing that returns at once.
        let waits: Vec<OpCode> =
            codes::OPS.iter().map(|e| OpCode::new(e.0, e.1)).filter(|&c| is_gpu_wait_op(c)).collect();
        assert_eq!(
            waits,
            vec![
                op::CUDA_MEMCPY,
                op::CUDA_STREAM_SYNC,
                op::CUDA_DEVICE_SYNC,
                op::CUDA_MEMCPY_2D,
                op::CUDA_MEMCPY_PEER,
                op::CUDA_EVENT_SYNC,
                op::CU_MEMCPY,
                op::CU_CTX_SYNCHRONIZE,
                op::CU_STREAM_SYNCHRONIZE,
            ]
        );
        assert!(!is_gpu_wait_op(op::CUDA_EVENT_QUERY) && !is_gpu_wait_op(op::CUDA_STREAM_WAIT_EVENT));
    }

    #[test]
    fn page_bytes_are_counted_inside_the_call_only() {
        let allocs = [(5, 100), (10, 1), (20, 2), (21, 1000)];
        assert_eq!(page_bytes_between(&allocs, 10, 20), 3);
    }
}
