//! Detectors for what stalls a GPU beyond one slow call: long gaps between the GPU calls of a feeding
//! thread (host-side starvation), a fall of the launch rate, a synchronization after nearly every
//! launch, allocation latency growing over the run, allocations never freed, and cudaFree storms.
//! Each works on the GPU calls of the window (sorted by time, with their nested flags) and states its
//! rule next to its constant; the evidence SQL in [`crate::evidence`] applies the same rules.

use std::collections::{BTreeMap, BTreeSet};

use causeway_model::codes::{self, gpu_role, op, GpuRole, OpCode};
use causeway_store::EventId;

use crate::attribution::{Call, CallId, CallSpan, Calls, ThreadOrder};
use crate::few_keys::FewKeys;
use crate::stats::nearest_rank;

/// A gap between GPU calls of one thread is long when it is at least this...
pub const GAP_FLOOR_NS: i64 = 10_000_000;
/// ...and at least this multiple of the thread's p50 gap...
pub const GAP_P50_MULTIPLE: i64 = 10;
/// ...and at least this multiple of its p75 gap (so that a loop's normal gap between iterations,
/// however long, is never "long": only gaps well beyond the thread's own rhythm are).
pub const GAP_P75_MULTIPLE: i64 = 3;
/// A throughput drop needs this many launches before the change point...
pub const DROP_MIN_BEFORE: usize = 10;
/// ...spread over at least this long (so that one burst of launches is not taken for a rate)...
pub const DROP_MIN_BEFORE_NS: i64 = 100_000_000;
/// ...a "during" period of at least this long...
pub const DROP_MIN_DURING_NS: i64 = 1_000_000_000;
/// ...and a launch rate during of at most half the rate before.
pub const DROP_MAX_RATE_RATIO: f64 = 0.5;
/// A sync storm: at least this many launches on the thread...
pub const SYNC_STORM_MIN_LAUNCHES: u64 = 20;
/// ...and at least 8 syncs per 10 launches.
pub const SYNC_STORM_PER_10_LAUNCHES: u64 = 8;
/// Allocation latency growth: at least this many allocations, the later half's p50 or mean at least
/// twice the earlier half's (fragmentation often slows a minority of calls: the p50 alone misses it),
/// and at least 1 ms extra in all.
pub const ALLOC_GROWTH_MIN_CALLS: usize = 8;
pub const ALLOC_GROWTH_MIN_EXTRA_NS: i64 = 1_000_000;
/// Unfreed memory: at least this many allocations and this many bytes never freed (matched by device
/// pointer; a DB without pointers also needs fewer than half as many frees as allocations).
pub const UNFREED_MIN_ALLOCS: usize = 5;
pub const UNFREED_MIN_BYTES: i64 = 1 << 30;
/// A cudaFree storm: at least this many frees taking at least 10 ms in all.
pub const FREE_STORM_MIN_CALLS: usize = 50;
pub const FREE_STORM_MIN_NS: i64 = 10_000_000;

/// Every known op whose [`gpu_role`] is `role`, in code order. What a detector reads is decided by
/// `causeway_model::codes::gpu_role`, the one definition; the evidence SQL lists these ops, so it
/// counts exactly the calls the detector counted. A sync storm counts [`GpuRole::Sync`] only (a
/// synchronous copy moves data the step needs: it is not the habit the storm names).
pub fn ops_with_role(role: GpuRole) -> Vec<OpCode> {
    codes::OPS.iter().map(|e| OpCode::new(e.0, e.1)).filter(|&c| gpu_role(c) == role).collect()
}

/// A gap between two GPU calls of a thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    pub pid: u32,
    pub tid: u32,
    pub start: i64,
    pub end: i64,
    /// The call whose end opens the gap, and the call that closes it.
    pub after: EventId,
    pub before: EventId,
}

/// Long gaps per thread (see [`GAP_FLOOR_NS`]): gaps are measured from the latest end of all earlier
/// GPU calls of the thread (order: ts, dur desc, source, id) to the next call's start. A thread's
/// threshold comes from its own rhythm in `calls`, or from `given` (a wider scope's, see
/// [`crate::explain`]'s slow steps); the thresholds used are returned beside the gaps.
pub fn long_gaps(
    calls: &Calls,
    order: &ThreadOrder,
    given: Option<&BTreeMap<u32, i64>>,
) -> (Vec<Gap>, BTreeMap<u32, i64>) {
    // The threads' rhythms first: the p50 and p75 of each thread's gap sizes, ranked exactly by
    // walking the calls again instead of holding every size (a thread has about as many gaps as
    // calls); then a last walk keeps the long gaps.
    let ranks = crate::rank_select::nearest_ranks_by_key(&[500, 750], |emit| {
        let mut walks: FewKeys<u32, GapWalk> = FewKeys::default();
        order.visit(|s| {
            if given.is_none_or(|g| !g.contains_key(&s.tid)) {
                if let Some((start, end, _, _)) = walks.entry(s.tid, GapWalk::default).next(s) {
                    emit(s.tid, end - start);
                }
            }
        });
    });
    let mut used: BTreeMap<u32, i64> = given.cloned().unwrap_or_default();
    for (tid, p) in ranks {
        let (p50, p75) = (p[0], p[1]);
        let threshold =
            GAP_FLOOR_NS.max(p50.saturating_mul(GAP_P50_MULTIPLE)).max(p75.saturating_mul(GAP_P75_MULTIPLE));
        used.insert(tid, threshold);
    }
    let mut out = Vec::new();
    let mut walks: FewKeys<u32, GapWalk> = FewKeys::default();
    order.visit(|s| {
        let Some(&threshold) = used.get(&s.tid) else { return };
        if let Some((start, end, a, b)) = walks.entry(s.tid, Default::default).next(s) {
            if end - start >= threshold {
                out.push(Gap {
                    pid: calls[b].pid,
                    tid: s.tid,
                    start,
                    end,
                    after: calls.event_id(&calls[a]),
                    before: calls.event_id(&calls[b]),
                });
            }
        }
    });
    // thread by thread, each in its order (the walk interleaves threads in time)
    out.sort_by_key(|g| g.tid);
    // only the threads of these calls (a wider scope's thresholds may name others)
    let seen: BTreeSet<u32> = walks.into_sorted().into_iter().map(|(t, _)| t).collect();
    used.retain(|t, _| seen.contains(t));
    (out, used)
}

/// One thread's gaps as its calls come in [`ThreadOrder`]: from the latest end of all its earlier
/// calls to the next call's start.
#[derive(Default)]
struct GapWalk {
    /// The latest end so far, and the index of the call that ends there.
    prev: Option<(i64, usize)>,
}

impl GapWalk {
    /// The gap the call `c` closes, if any: `(start, end, index of the call that opens it, index
    /// of the call that closes it)`.
    fn next(&mut self, c: CallSpan) -> Option<(i64, i64, usize, usize)> {
        let i = c.idx as usize;
        let Some((pe, pi)) = self.prev else {
            self.prev = Some((c.end(), i));
            return None;
        };
        if c.end() > pe {
            self.prev = Some((c.end(), i));
        }
        (c.ts > pe).then_some((pe, c.ts, pi, i))
    }
}

/// First call start and last call end of each thread: the span it fed the GPU.
pub fn thread_spans(order: &ThreadOrder) -> BTreeMap<u32, (i64, i64)> {
    let mut spans: FewKeys<u32, (i64, i64)> = FewKeys::default();
    order.visit(|s| {
        let span = spans.entry(s.tid, || (s.ts, s.end()));
        *span = (span.0.min(s.ts), span.1.max(s.end()));
    });
    spans.into_sorted().into_iter().collect()
}

/// A fall of the launch rate.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputDrop {
    pub first: i64,
    pub split: i64,
    pub end: i64,
    pub before: u64,
    pub during: u64,
    /// `(end - split) - during * (split - first) / before`: time lost at the rate before.
    pub lost_ns: i64,
}

/// The change point of the launch rate (launch timestamps sorted; `end` = last event in scope): the
/// split that best fits two constant rates, among those where the rate after is at most half the rate before.
/// Candidate splits lie just after a launch: `split = t[i-1] + 1`, `i >= DROP_MIN_BEFORE`.
///
/// `launch_ts` yields `n` timestamps in order, read once (a scope's launches are most of its calls:
/// they are not copied out of the calls).
pub fn throughput_drop(launch_ts: impl IntoIterator<Item = i64>, n: usize, end: i64) -> Option<ThroughputDrop> {
    let mut launch_ts = launch_ts.into_iter().peekable();
    let first = *launch_ts.peek()?;
    let mut best: Option<(ThroughputDrop, f64)> = None;
    for i in 1..=n {
        // launch i - 1 (0-based), then a look at launch i (none after the last)
        let Some(last_before) = launch_ts.next() else { break };
        if i < DROP_MIN_BEFORE || launch_ts.peek() == Some(&last_before) {
            continue;
        }
        let split = last_before + 1;
        let (before, during) = (i as i64, (n - i) as i64);
        let (before_ns, during_ns) = (split - first, end - split);
        let mean_gap = before_ns / before;
        if before_ns < DROP_MIN_BEFORE_NS || during_ns < DROP_MIN_DURING_NS.max(10 * mean_gap) {
            continue;
        }
        if (during as f64) * (before_ns as f64) > DROP_MAX_RATE_RATIO * (before as f64) * (during_ns as f64) {
            continue;
        }
        let lost_ns = during_ns - during * before_ns / before;
        // The split of the best two-rate Poisson fit: maximize k1 ln(k1/T1) + k2 ln(k2/T2).
        let fit = |k: i64, t: i64| if k == 0 { 0.0 } else { k as f64 * (k as f64 / t as f64).ln() };
        let score = fit(before, before_ns) + fit(during, during_ns);
        if best.as_ref().is_none_or(|b| score > b.1) {
            best = Some((
                ThroughputDrop { first, split, end, before: before as u64, during: during as u64, lost_ns },
                score,
            ));
        }
    }
    best.map(|b| b.0)
}

/// Per-thread sync storm figures.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncStorm {
    pub pid: u32,
    pub tid: u32,
    pub launches: u64,
    pub syncs: u64,
    pub sync_ns: i64,
    pub worst: Vec<EventId>,
}

/// What the detectors read from the top-level calls of a scope, gathered in one pass over them
/// (calls are the bulk of a trace: each pass over them costs more than the work it does).
#[derive(Debug, Clone, PartialEq)]
pub struct TopLevelFindings {
    /// Top-level launches ([`top_level_launch_ts`] yields their timestamps for [`throughput_drop`]).
    pub launches: usize,
    /// Threads that synchronize after nearly every launch.
    pub storms: Vec<SyncStorm>,
    /// Allocator figures per process with allocations or frees.
    pub allocators: Vec<AllocatorFindings>,
}

/// One pass over the top-level calls (`nested[i]` false) for the launch rate, the sync storms and
/// the allocator. `has_ptr`: frees can be matched to allocations by device pointer (`arg2`).
pub fn top_level_findings(calls: &Calls, nested: &[bool], has_ptr: bool) -> TopLevelFindings {
    let mut launches = 0;
    // Per thread: the storm figures and the indices of its syncs (the worst are named at the end).
    let mut per_thread: FewKeys<u32, (SyncStorm, Vec<usize>)> = FewKeys::default();
    let mut allocs: BTreeMap<u32, Vec<&Call>> = BTreeMap::new();
    let mut frees: BTreeMap<u32, Vec<&Call>> = BTreeMap::new();
    for (i, (c, &n)) in calls.iter().zip(nested).enumerate() {
        if n {
            continue;
        }
        let (s, syncs) = per_thread.entry(c.tid, || {
            (SyncStorm { pid: c.pid, tid: c.tid, launches: 0, syncs: 0, sync_ns: 0, worst: vec![] }, Vec::new())
        });
        match gpu_role(c.op) {
            GpuRole::Launch => {
                s.launches += 1;
                launches += 1;
            }
            GpuRole::Sync => {
                s.syncs += 1;
                s.sync_ns += c.dur;
                syncs.push(i);
            }
            GpuRole::Alloc => allocs.entry(c.pid).or_default().push(c),
            GpuRole::Free => frees.entry(c.pid).or_default().push(c),
            GpuRole::SyncCopy | GpuRole::Collective | GpuRole::Other => {}
        }
    }
    let storms = per_thread
        .into_sorted()
        .into_iter()
        .filter(|(_, (s, _))| {
            s.launches >= SYNC_STORM_MIN_LAUNCHES && s.syncs * 10 >= s.launches * SYNC_STORM_PER_10_LAUNCHES
        })
        .map(|(_, (mut s, syncs))| {
            let mut w: Vec<(i64, CallId)> = syncs.iter().map(|&i| (calls[i].dur, calls[i].id)).collect();
            w.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            s.worst = w.into_iter().take(5).map(|x| calls.event_id_of(x.1)).collect();
            s
        })
        .collect();
    TopLevelFindings { launches, storms, allocators: allocator_figures(calls, allocs, frees, has_ptr) }
}

/// The timestamps of the top-level launches (`nested[i]` false) of `calls`, in call order.
pub fn top_level_launch_ts<'a>(calls: &'a [Call], nested: &'a [bool]) -> impl Iterator<Item = i64> + 'a {
    calls.iter().zip(nested).filter(|(c, &n)| !n && gpu_role(c.op) == GpuRole::Launch).map(|(c, _)| c.ts)
}

/// Allocator figures of one process.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorFindings {
    pub pid: u32,
    pub allocs: usize,
    pub alloc_ns: i64,
    pub alloc_bytes: i64,
    pub frees: usize,
    pub free_ns: i64,
    /// p50 of the earlier and later half, and the later half's time above the earlier p50.
    pub growth: Option<(i64, i64, i64)>,
    /// Mean duration of the earlier and later half.
    pub mean_growth: Option<(i64, i64)>,
    /// Bytes never freed (by pointer when known, else all allocated bytes).
    pub unfreed_bytes: i64,
    /// Of `unfreed_bytes`, pinned host memory (`cudaHostAlloc`): its free, `cudaFreeHost`, is not
    /// a traced op, so these bytes are never matched by a free.
    pub unfreed_pinned_bytes: i64,
    /// The ops of the allocations and of the frees, in code order.
    pub alloc_ops: Vec<OpCode>,
    pub free_ops: Vec<OpCode>,
    pub worst_allocs: Vec<EventId>,
    pub worst_frees: Vec<EventId>,
}

/// Allocator figures per process from its top-level allocations and frees (in call order).
fn allocator_figures(
    calls: &Calls,
    mut allocs: BTreeMap<u32, Vec<&Call>>,
    mut frees: BTreeMap<u32, Vec<&Call>>,
    has_ptr: bool,
) -> Vec<AllocatorFindings> {
    let pids: std::collections::BTreeSet<u32> = allocs.keys().chain(frees.keys()).copied().collect();
    let mut out = Vec::new();
    for pid in pids {
        let mut a = allocs.remove(&pid).unwrap_or_default();
        let f = frees.remove(&pid).unwrap_or_default();
        a.sort_by_key(|c| (c.ts, c.id));
        let half = a.len() / 2;
        let growth = (a.len() >= ALLOC_GROWTH_MIN_CALLS).then(|| {
            let mut early: Vec<i64> = a[..half].iter().map(|c| c.dur).collect();
            let mut late: Vec<i64> = a[half..].iter().map(|c| c.dur).collect();
            early.sort_unstable();
            late.sort_unstable();
            let p_early = nearest_rank(&early, 500).unwrap_or(0);
            let p_late = nearest_rank(&late, 500).unwrap_or(0);
            let extra: i64 = late.iter().map(|d| (d - p_early).max(0)).sum();
            (p_early, p_late, extra)
        });
        let mean = |v: &[&Call]| v.iter().map(|c| c.dur).sum::<i64>() / (v.len().max(1) as i64);
        let mean_growth = (a.len() >= ALLOC_GROWTH_MIN_CALLS).then(|| (mean(&a[..half]), mean(&a[half..])));
        let mut last_free: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
        for fr in &f {
            let t = last_free.entry(calls.pointer(fr)).or_insert(fr.ts);
            *t = (*t).max(fr.ts);
        }
        let unfreed: Vec<&&Call> =
            a.iter().filter(|c| !has_ptr || last_free.get(&calls.pointer(c)).is_none_or(|&t| t < c.ts)).collect();
        let unfreed_bytes = unfreed.iter().map(|c| c.arg0).sum();
        let unfreed_pinned_bytes = unfreed.iter().filter(|c| c.op == op::CUDA_HOST_ALLOC).map(|c| c.arg0).sum();
        let ops_of =
            |v: &[&Call]| v.iter().map(|c| c.op).collect::<std::collections::BTreeSet<OpCode>>().into_iter().collect();
        let worst = |v: &[&Call]| {
            let mut w: Vec<(i64, CallId)> = v.iter().map(|c| (c.dur, c.id)).collect();
            w.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
            w.into_iter().take(5).map(|x| calls.event_id_of(x.1)).collect()
        };
        out.push(AllocatorFindings {
            pid,
            allocs: a.len(),
            alloc_ns: a.iter().map(|c| c.dur).sum(),
            alloc_bytes: a.iter().map(|c| c.arg0).sum(),
            frees: f.len(),
            free_ns: f.iter().map(|c| c.dur).sum(),
            growth,
            mean_growth,
            unfreed_bytes,
            unfreed_pinned_bytes,
            alloc_ops: ops_of(&a),
            free_ops: ops_of(&f),
            worst_allocs: worst(&a),
            worst_frees: worst(&f),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::op;
    use causeway_store::SlimEvent;

    fn c(id: i64, tid: u32, op: OpCode, ts: i64, dur: i64) -> SlimEvent {
        SlimEvent { id: EventId::Int(id), ts, dur, pid: 1, tid, op, arg0: 0, arg2: 0 }
    }

    #[test]
    fn long_gaps_are_measured_from_the_latest_end() {
        let ms = 1_000_000;
        let mut calls = Vec::new();
        for i in 0..20 {
            calls.push(c(i, 1, op::CUDA_LAUNCH_KERNEL, i * ms, 10_000));
        }
        // A long call, then one nested in it, then a 50 ms gap.
        calls.push(c(100, 1, op::CUDA_STREAM_SYNC, 20 * ms, 5 * ms));
        calls.push(c(101, 1, op::CU_CTX_SYNCHRONIZE, 20 * ms + 10, ms));
        calls.push(c(102, 1, op::CUDA_LAUNCH_KERNEL, 75 * ms, 10_000));
        let calls = Calls::of(calls);
        let (gaps, used) = long_gaps(&calls, &ThreadOrder::of(&calls), None);
        assert_eq!(gaps.len(), 1);
        // a wider scope's threshold is taken as given
        let (more, _) = long_gaps(&calls, &ThreadOrder::of(&calls), Some(&BTreeMap::from([(1, 500_000)])));
        assert!(more.len() > gaps.len(), "{} gaps over 0.5 ms", more.len());
        assert_eq!(used[&1], GAP_FLOOR_NS.max(used[&1]));
        assert_eq!((gaps[0].start, gaps[0].end), (25 * ms, 75 * ms));
        assert_eq!(gaps[0].after, EventId::Int(100));
    }

    #[test]
    fn throughput_drop_finds_the_change_point() {
        let ms = 1_000_000;
        let mut ts: Vec<i64> = (0..200).map(|i| i * ms).collect(); // 1 kHz for 200 ms
        ts.extend((1..=10).map(|i| 200 * ms + i * 500 * ms)); // then 2 Hz for 5 s
        let drop = |ts: &[i64], end: i64| throughput_drop(ts.iter().copied(), ts.len(), end);
        let d = drop(&ts, 5_200 * ms).expect("drop");
        assert_eq!(d.before, 200);
        assert_eq!(d.split, 199 * ms + 1);
        assert!(d.lost_ns > 4_900 * ms, "{d:?}");
        // One burst of launches, then a steady rate: not a drop.
        let mut bursty: Vec<i64> = (0..20).map(|i| i * 1000).collect();
        bursty.extend((1..2000).map(|i| i * ms));
        assert_eq!(drop(&bursty, 2000 * ms), None);
        let steady: Vec<i64> = (0..1000).map(|i| i * ms).collect();
        assert_eq!(drop(&steady, 1000 * ms), None);
        assert_eq!(drop(&[], 1000 * ms), None);
    }

    #[test]
    fn sync_after_every_launch_is_a_storm() {
        let mut calls = Vec::new();
        for i in 0..30 {
            calls.push(c(2 * i, 1, op::CUDA_LAUNCH_KERNEL, i * 100, 5));
            calls.push(c(2 * i + 1, 1, op::CUDA_STREAM_SYNC, i * 100 + 10, 50));
        }
        let calls = Calls::of(calls);
        let nested = vec![false; calls.len()];
        let found = top_level_findings(&calls, &nested, false);
        assert_eq!(found.launches, 30);
        let ts: Vec<i64> = top_level_launch_ts(&calls, &nested).collect();
        assert_eq!(ts, (0..30).map(|i| i * 100).collect::<Vec<i64>>());
        let s = found.storms;
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].launches, s[0].syncs, s[0].sync_ns), (30, 30, 1500));
    }

    #[test]
    fn allocator_growth_and_unfreed_bytes() {
        let mut calls = Vec::new();
        for i in 0..10i64 {
            let mut a = c(i, 1, op::CUDA_MALLOC, i * 1000, if i < 5 { 100 } else { 100 * (i - 3) });
            a.arg0 = 1 << 28;
            a.arg2 = 0x1000 + i;
            calls.push(a);
        }
        let mut f = c(50, 1, op::CUDA_FREE, 99_999, 10);
        f.arg2 = 0x1000;
        calls.push(f);
        let calls = Calls::of(calls);
        let nested = vec![false; calls.len()];
        let found = top_level_findings(&calls, &nested, true);
        assert!(found.launches == 0 && found.storms.is_empty());
        let a = &found.allocators[0];
        assert_eq!((a.allocs, a.frees), (10, 1));
        assert_eq!(a.growth, Some((100, 400, 200 + 300 + 400 + 500 + 600 - 500)));
        assert_eq!(a.mean_growth, Some((100, 400)));
        assert_eq!(a.unfreed_bytes, 9 << 28);
    }

    #[test]
    fn the_launch_and_allocator_paths_of_every_api_count() {
        // One definition: the role lists hold the Ex, graph, stream-ordered and VMM paths.
        let launches = ops_with_role(GpuRole::Launch);
        for o in [
            op::CUDA_LAUNCH_KERNEL,
            op::CUDA_LAUNCH_KERNEL_EX,
            op::CU_LAUNCH_KERNEL,
            op::CU_LAUNCH_KERNEL_EX,
            op::GRAPH_LAUNCH,
            op::CU_GRAPH_LAUNCH,
        ] {
            assert!(launches.contains(&o), "{o:?}");
        }
        assert_eq!(launches.len(), 6);
        assert!(!ops_with_role(GpuRole::Sync).contains(&op::CUDA_MEMCPY), "a sync storm counts synchronizations only");
        assert!(
            ops_with_role(GpuRole::Alloc).contains(&op::CU_MEM_CREATE)
                && ops_with_role(GpuRole::Free).contains(&op::CU_MEM_RELEASE)
        );
        // A thread launching through cuLaunchKernelEx and cuGraphLaunch, syncing with cuStreamSynchronize.
        let mut calls = Vec::new();
        for i in 0..30 {
            let launch = if i % 2 == 0 { op::CU_LAUNCH_KERNEL_EX } else { op::CU_GRAPH_LAUNCH };
            calls.push(c(3 * i, 1, launch, i * 100, 5));
            calls.push(c(3 * i + 1, 1, op::CU_STREAM_SYNCHRONIZE, i * 100 + 10, 50));
            // A copy that waits is not counted as a sync of the storm.
            calls.push(c(3 * i + 2, 1, op::CUDA_MEMCPY, i * 100 + 70, 7));
        }
        // The stream-ordered allocator and the VMM: two blocks freed by pointer / handle, one kept.
        for (i, (alloc, free)) in [
            (op::CUDA_MALLOC_ASYNC, op::CUDA_FREE_ASYNC),
            (op::CU_MEM_CREATE, op::CU_MEM_RELEASE),
            (op::CUDA_MALLOC_ASYNC, op::CUDA_FREE_ASYNC),
        ]
        .into_iter()
        .enumerate()
        {
            let i = i as i64;
            let mut a = c(100 + i, 1, alloc, 5_000 + i * 10, 3);
            (a.arg0, a.arg2) = (1 << 20, 0x10 + i);
            calls.push(a);
            if i < 2 {
                let mut f = c(200 + i, 1, free, 6_000 + i * 10, 4);
                f.arg2 = 0x10 + i;
                calls.push(f);
            }
        }
        let calls = Calls::of(calls);
        let nested = vec![false; calls.len()];
        let found = top_level_findings(&calls, &nested, true);
        assert_eq!(found.launches, 30);
        assert_eq!((found.storms[0].launches, found.storms[0].syncs, found.storms[0].sync_ns), (30, 30, 1500));
        let a = &found.allocators[0];
        assert_eq!((a.allocs, a.frees, a.alloc_ns, a.free_ns), (3, 2, 9, 8));
        assert_eq!(a.unfreed_bytes, 1 << 20);
        assert_eq!(a.alloc_ops, vec![op::CUDA_MALLOC_ASYNC, op::CU_MEM_CREATE]);
        assert_eq!(a.free_ops, vec![op::CUDA_FREE_ASYNC, op::CU_MEM_RELEASE]);
    }

    #[test]
    fn pinned_host_allocations_are_named_among_the_unfreed_bytes() {
        let mut calls = Vec::new();
        for i in 0..4i64 {
            let mut a = c(i, 1, if i == 0 { op::CUDA_HOST_ALLOC } else { op::CUDA_MALLOC }, i * 10, 3);
            (a.arg0, a.arg2) = ((i + 1) << 20, 0x100 + i);
            calls.push(a);
        }
        let mut f = c(9, 1, op::CUDA_FREE, 100, 2);
        f.arg2 = 0x101;
        calls.push(f);
        let calls = Calls::of(calls);
        let found = top_level_findings(&calls, &vec![false; calls.len()], true);
        let a = &found.allocators[0];
        assert_eq!((a.unfreed_bytes, a.unfreed_pinned_bytes), ((1 + 3 + 4) << 20, 1 << 20));
    }
}
