//! The GPU calls as the analysis holds them: 48 bytes each, because explain holds every call of its
//! scope (8.1 million of a ten-million-event trace). [`Calls`] builds them from the store's rows
//! ([`SlimEvent`], 64 bytes): the event id becomes an integer ([`CallId`]; the texts of a trace with
//! text ids are kept once, beside the calls) and `arg2` is kept only where the analysis reads it,
//! the pointer of allocator calls (matching frees to allocations). Past a budget the calls live in
//! a mapped temporary file ([`SpillVec`]): a scope of any size leaves the process's own memory
//! bounded.

use std::collections::HashMap;
use std::ops::Deref;

use causeway_model::codes::{gpu_role, GpuRole, OpCode};
use causeway_store::{EventId, SlimEvent};

use crate::spill_vec::{calls_memory_budget, SpillVec, SpillVecBuilder};

/// A call's event id as an integer that orders as the event ids do: a native trace's (or Ingero
/// v0.8's) integer id itself; for a text id (Ingero v0.9+: `node:seq`), a number above every
/// integer id of the scope, by the text's rank among the scope's texts. [`Calls::event_id`] gives
/// the event id back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub i64);

/// One GPU API call: the integer columns attribution and the detectors read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub id: CallId,
    /// Unix ns.
    pub ts: i64,
    /// ns.
    pub dur: i64,
    /// Op-specific argument 0 (bytes, kernel handle, ...), as in `Event::arg0`.
    pub arg0: i64,
    pub pid: u32,
    pub tid: u32,
    pub op: OpCode,
}

// explain holds one per GPU call in scope: 48 bytes is 389 MB for 8.1 million calls (the store's
// 64-byte rows made them 518 MB).
const _: () = assert!(std::mem::size_of::<Call>() <= 48);

impl Call {
    /// `ts + dur` (saturating).
    pub fn end(&self) -> i64 {
        self.ts.saturating_add(self.dur)
    }
}

/// Whether the analysis reads a call's `arg2`: the pointer an allocation returned or a free gave
/// back.
fn keeps_pointer(op: OpCode) -> bool {
    matches!(gpu_role(op), GpuRole::Alloc | GpuRole::Free)
}

/// GPU calls with what turns their ids back into event ids, and the allocator calls' pointers.
#[derive(Debug, Default)]
pub struct Calls {
    calls: SpillVec<Call>,
    /// `CallId`s from `text_base` (at least 1) on are text ids: `texts[id - text_base]`.
    text_base: i64,
    texts: Vec<Box<str>>,
    /// `arg2` of the allocator calls ([`keeps_pointer`]).
    pointers: HashMap<CallId, i64>,
}

impl Deref for Calls {
    type Target = [Call];

    fn deref(&self) -> &[Call] {
        &self.calls
    }
}

impl Calls {
    /// The calls of `rows`, in their order.
    pub fn of(rows: impl IntoIterator<Item = SlimEvent>) -> Calls {
        let mut b = CallsBuilder::with_capacity(0);
        rows.into_iter().for_each(|r| b.push(r));
        b.finish()
    }

    /// The event id of a call.
    pub fn event_id(&self, c: &Call) -> EventId {
        self.event_id_of(c.id)
    }

    /// The event id that `id` stands for.
    pub fn event_id_of(&self, id: CallId) -> EventId {
        if !self.texts.is_empty() && id.0 >= self.text_base {
            EventId::Text(self.texts[(id.0 - self.text_base) as usize].clone())
        } else {
            EventId::Int(id.0)
        }
    }

    /// Integer-id calls as they are (the tests' calls).
    #[cfg(test)]
    pub fn from_calls(calls: Vec<Call>) -> Calls {
        Calls { calls: SpillVec::Heap(calls), ..Default::default() }
    }

    /// Whether the calls are in a mapped temporary file (more than the memory budget's worth).
    pub fn is_mapped(&self) -> bool {
        self.calls.is_mapped()
    }

    /// A builder for an array beside the calls (a value per call, per thread's call, ...), room
    /// for `n`: it goes to a mapped file when the calls did, and stays on the heap when they did.
    pub fn array_beside<T: Copy>(&self, n: usize) -> SpillVecBuilder<T> {
        SpillVecBuilder::with_capacity(n, if self.is_mapped() { 0 } else { usize::MAX })
    }

    /// `arg2` of an allocator call (the pointer); 0 for any other call.
    pub fn pointer(&self, c: &Call) -> i64 {
        self.pointers.get(&c.id).copied().unwrap_or(0)
    }

    /// Sorts the calls by (ts, id), in place (no key array beside millions of calls; (ts, id)
    /// is unique, so an unstable sort is deterministic); already ordered input (a finished
    /// trace's packed calls) is left as it is. Millions of calls (a DuckDB trace's scan, a trace
    /// still being written) are sorted on two cores.
    pub fn sort_by_time_and_id(&mut self) {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        sort_in_place(&mut self.calls, if threads >= 2 { PARALLEL_SORT_MIN } else { usize::MAX });
    }
}

/// Calls from which [`Calls::sort_by_time_and_id`] splits the sort across two threads.
const PARALLEL_SORT_MIN: usize = 1 << 20;

/// Sorts `calls` by (ts, id) in place; from `parallel_min` calls on, one partition around the
/// median key (linear, in place) and then each half on its own thread: no buffer beside the calls
/// (a merge of two sorted halves would need one as large as the calls).
fn sort_in_place(calls: &mut [Call], parallel_min: usize) {
    let key = |c: &Call| (c.ts, c.id);
    if calls.is_sorted_by_key(key) {
        return;
    }
    if calls.len() < parallel_min.max(2) {
        calls.sort_unstable_by_key(key);
        return;
    }
    let mid = calls.len() / 2;
    calls.select_nth_unstable_by_key(mid, key);
    let (low, high) = calls.split_at_mut(mid);
    std::thread::scope(|s| {
        s.spawn(|| low.sort_unstable_by_key(key));
        high.sort_unstable_by_key(key);
    });
}

/// Builds [`Calls`] from store rows as they are scanned.
#[derive(Debug, Default)]
pub struct CallsBuilder {
    calls: SpillVecBuilder<Call>,
    /// The text ids seen, with the index of their call.
    texts: Vec<(Box<str>, u32)>,
    /// The largest integer id seen, or 0: text ids are numbered above it.
    max_int: i64,
    pointers: Vec<(u32, i64)>,
}

impl CallsBuilder {
    /// Room for `n` calls up front (address space only: pages are touched as calls arrive), in a
    /// mapped file when `n` calls are over the budget ([`calls_memory_budget`]).
    pub fn with_capacity(n: usize) -> CallsBuilder {
        CallsBuilder { calls: SpillVecBuilder::with_capacity(n, calls_memory_budget()), ..Default::default() }
    }

    pub fn push(&mut self, r: SlimEvent) {
        let idx = self.calls.len() as u32;
        let id = match r.id {
            EventId::Int(i) => {
                self.max_int = self.max_int.max(i);
                CallId(i)
            }
            EventId::Text(t) => {
                self.texts.push((t, idx));
                CallId(0) // numbered in finish, once every integer id is known
            }
        };
        if keeps_pointer(r.op) {
            self.pointers.push((idx, r.arg2));
        }
        self.calls.push(Call { id, ts: r.ts, dur: r.dur, arg0: r.arg0, pid: r.pid, tid: r.tid, op: r.op });
    }

    pub fn finish(self) -> Calls {
        let CallsBuilder { calls, mut texts, max_int, pointers } = self;
        let mut calls = calls.finish();
        // every text id above every integer one (`EventId` orders `Int` before `Text`), by rank
        let text_base = max_int.saturating_add(1);
        texts.sort_unstable();
        let mut distinct: Vec<Box<str>> = Vec::new();
        for (t, idx) in texts {
            if distinct.last() != Some(&t) {
                distinct.push(t);
            }
            calls[idx as usize].id = CallId(text_base + distinct.len() as i64 - 1);
        }
        let pointers = pointers.into_iter().map(|(idx, p)| (calls[idx as usize].id, p)).collect();
        Calls { calls, text_base, texts: distinct, pointers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::op;

    fn row(id: EventId, ts: i64, op: OpCode, arg2: i64) -> SlimEvent {
        SlimEvent { id, ts, dur: 1, pid: 1, tid: 1, op, arg0: 0, arg2 }
    }

    #[test]
    fn ids_order_and_read_back_as_the_event_ids_do() {
        let ids = [
            EventId::Text("n:9".into()),
            EventId::Int(40),
            EventId::Text("n:10".into()),
            EventId::Int(-3),
            EventId::Text("m:1".into()),
        ];
        let calls = Calls::of(ids.iter().map(|id| row(id.clone(), 5, op::CUDA_LAUNCH_KERNEL, 0)));
        for (a, ia) in calls.iter().zip(&ids) {
            assert_eq!(&calls.event_id(a), ia);
            for (b, ib) in calls.iter().zip(&ids) {
                assert_eq!(a.id.cmp(&b.id), ia.cmp(ib), "{ia} vs {ib}");
            }
        }
    }

    #[test]
    fn only_allocator_calls_keep_their_pointer() {
        let calls = Calls::of([
            row(EventId::Int(1), 1, op::CUDA_MALLOC, 0x100),
            row(EventId::Text("n:1".into()), 2, op::CUDA_FREE, 0x200),
            row(EventId::Int(3), 3, op::CUDA_LAUNCH_KERNEL, 0x300),
        ]);
        let ptr: Vec<i64> = calls.iter().map(|c| calls.pointer(c)).collect();
        assert_eq!(ptr, [0x100, 0x200, 0]);
    }

    #[test]
    fn sorting_by_time_and_id_moves_the_calls_with_their_ids() {
        let mut calls = Calls::of([
            row(EventId::Text("n:2".into()), 7, op::CUDA_MALLOC, 0x2),
            row(EventId::Text("n:1".into()), 7, op::CUDA_MALLOC, 0x1),
            row(EventId::Text("n:3".into()), 3, op::CUDA_MALLOC, 0x3),
        ]);
        calls.sort_by_time_and_id();
        let got: Vec<(String, i64)> = calls.iter().map(|c| (calls.event_id(c).to_string(), calls.pointer(c))).collect();
        assert_eq!(got, [("n:3".to_string(), 3), ("n:1".to_string(), 1), ("n:2".to_string(), 2)]);
    }

    #[test]
    fn calls_sort_by_time_then_id_with_integer_and_text_ids() {
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
        for n in [0usize, 1, 2, 7, 100, 1000] {
            // Many equal timestamps, so the id decides often.
            let ints: Vec<SlimEvent> =
                (0..n).map(|_| row(EventId::Int(next(50)), next(20), op::CUDA_LAUNCH_KERNEL, 0)).collect();
            let texts: Vec<SlimEvent> = (0..n)
                .map(|_| {
                    row(EventId::Text(format!("n:{}", next(50)).into_boxed_str()), next(20), op::CUDA_LAUNCH_KERNEL, 0)
                })
                .collect();
            for rows in [ints, texts] {
                let mut want: Vec<(i64, EventId)> = rows.iter().map(|r| (r.ts, r.id.clone())).collect();
                want.sort();
                let mut calls = Calls::of(rows);
                // on one thread, and split across two from two calls on
                for parallel_min in [usize::MAX, 2] {
                    sort_in_place(&mut calls.calls, parallel_min);
                    let got: Vec<(i64, EventId)> = calls.iter().map(|c| (c.ts, calls.event_id(c))).collect();
                    assert_eq!(got, want, "n = {n}, parallel from {parallel_min}");
                    calls.calls.reverse();
                }
            }
        }
    }
}
