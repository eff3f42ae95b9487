//! The rule that says which Python thread a GPU call of a thread without Python frames ran for,
//! pure over what `borrowed/mod.rs` read: each thread's top-level GPU calls that carry Python
//! frames, and its off-CPU intervals with who woke it.
//!
//! A call `[s, e]` of thread W in process P borrows only when W made no call with Python frames of
//! its own within [`REACH_NS`] of it. Each other thread T of P that did is looked at:
//! - **in a call**: one of T's own calls spans `[s, e]`: T was in that call, at its Python frames;
//! - **waiting**: T made no call overlapping `[s, e]`, was asleep (a voluntary sleep, not a
//!   preemption) over the whole of it, and a wake-up links the two threads during T's wait (T woke
//!   W, or W woke T, between T's last call before and its first call after): T was blocked on W's
//!   work. Its frames are those of its last call before (`bracketed` when its next call after has
//!   the same Python frames: no Python progress shows across the wait; `last_call` otherwise).
//!
//! A thread asleep over the call that no wake-up links to W (a thread in `time.sleep`, a pin-memory
//! loop waiting on its queue) is not a candidate. When threads linked by a wake-up are among the
//! candidates, only they are kept (the one W worked for shows in the wake-ups); the call borrows when
//! exactly one candidate is left, and from nobody when two or more could have asked for it
//! (ambiguous: nothing is guessed).

use std::collections::BTreeMap;

use causeway_model::codes::OpCode;
use causeway_store::EventId;

/// How far from a call the threads' calls are looked for (each side): a Python thread is a
/// candidate when it made a call with Python frames this close, and the launching thread has
/// frames of its own when it did. A backward pass or a wait longer than this borrows nothing.
pub const REACH_NS: i64 = 30_000_000_000;

/// A top-level GPU call of a thread that carries Python frames.
#[derive(Debug, Clone, PartialEq)]
pub struct PyCall {
    pub ts: i64,
    pub end: i64,
    /// Its Python frames (an index into the loader's interned frame lists: equal frames, equal index).
    pub python: u32,
    pub op: OpCode,
    pub id: EventId,
}

/// An off-CPU interval of a thread `[out, inn]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OffCpu {
    pub out: i64,
    pub inn: i64,
    /// A voluntary sleep (`S`), not a preemption or an uninterruptible wait.
    pub asleep: bool,
    /// When it was woken and by which thread (0: unknown, or preempted).
    pub wake_ts: i64,
    pub waker_tid: u32,
}

/// One thread as the rule reads it.
#[derive(Debug, Default, Clone)]
pub struct ThreadRecord {
    /// Its calls with Python frames, in time order, none inside another.
    pub calls: Vec<PyCall>,
    /// Its off-CPU intervals, in time order.
    pub off_cpu: Vec<OffCpu>,
}

impl ThreadRecord {
    /// Sort the calls and off-CPU intervals, dropping the calls nested in another call of the
    /// thread (a driver call inside its runtime call has the same Python frames) and repeated rows.
    pub fn normalize(&mut self) {
        self.calls.sort_by(|a, b| a.ts.cmp(&b.ts).then(b.end.cmp(&a.end)).then(a.id.cmp(&b.id)));
        let mut reach = i64::MIN;
        self.calls.retain(|c| {
            if c.end <= reach && reach != i64::MIN {
                return false;
            }
            reach = reach.max(c.end);
            true
        });
        self.off_cpu.sort_by(|a, b| a.out.cmp(&b.out).then(a.inn.cmp(&b.inn)));
        self.off_cpu.dedup();
    }

    /// Whether it made a call with Python frames in `[a, b]` (any overlap).
    fn called_within(&self, a: i64, b: i64) -> bool {
        // disjoint calls in time order: their ends are in order too
        let j = self.calls.partition_point(|c| c.ts <= b);
        self.calls[..j].last().is_some_and(|c| c.end >= a)
    }

    /// The off-CPU interval holding `[s, e]` whole, if any.
    fn off_over(&self, s: i64, e: i64) -> Option<&OffCpu> {
        let j = self.off_cpu.partition_point(|o| o.out <= s);
        self.off_cpu[..j].last().filter(|o| o.inn >= e)
    }

    /// Whether `waker` woke this thread at a time in `[a, b]`.
    fn woken_by(&self, waker: u32, a: i64, b: i64) -> bool {
        let j = self.off_cpu.partition_point(|o| o.inn < a);
        self.off_cpu[j..]
            .iter()
            .take_while(|o| o.out <= b)
            .any(|o| o.waker_tid == waker && o.wake_ts >= a && o.wake_ts <= b)
    }
}

/// How the lender was seen over the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LendEvidence {
    /// Inside a traced call of its own over the whole call; the frames are that call's.
    InCall,
    /// Asleep over the call, linked to the launching thread by a wake-up; its last call before
    /// and its first call after carry these same Python frames.
    Bracketed,
    /// Asleep over the call, linked by a wake-up; the frames of its last call before the wait (its
    /// next call was elsewhere, or none was traced).
    LastCall,
}

/// The thread a call ran for, as the rule found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lender {
    pub tid: u32,
    pub evidence: LendEvidence,
    /// The lender's call whose frames are borrowed (`None`: it made no call before, nothing to lend).
    pub call: Option<PyCall>,
    /// A wake-up links the two threads around the call.
    pub woken: bool,
}

/// What the rule says of one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Requester {
    /// Not a borrower: the launching thread made calls with Python frames of its own near the
    /// call, or no thread of its process did.
    NotBorrowing,
    /// No Python thread of the process was in a call or blocked on it over the call.
    Nobody,
    /// Exactly one.
    One(Lender),
    /// Two or more could have asked for it (their tids): nothing is borrowed.
    Ambiguous(Vec<u32>),
}

/// The threads of one process.
#[derive(Debug, Default, Clone)]
pub struct ProcessRecord {
    /// The threads with a call with Python frames or an off-CPU interval that matters.
    pub threads: BTreeMap<u32, ThreadRecord>,
    /// Every thread seen making a GPU call (whose off-CPU intervals are read).
    pub gpu_threads: std::collections::BTreeSet<u32>,
}

impl ProcessRecord {
    /// Who the call `[s, e]` of thread `tid` ran for.
    pub fn requester(&self, tid: u32, s: i64, e: i64) -> Requester {
        let near = |t: &ThreadRecord| t.called_within(s.saturating_sub(REACH_NS), e.saturating_add(REACH_NS));
        if self.threads.get(&tid).is_some_and(near) {
            return Requester::NotBorrowing;
        }
        let mut candidates = Vec::new();
        for (&other, t) in &self.threads {
            if other == tid || !near(t) {
                continue;
            }
            if let Some(l) = self.as_lender(other, t, tid, s, e) {
                candidates.push(l);
            }
        }
        if candidates.is_empty() && !self.threads.values().any(near) {
            return Requester::NotBorrowing;
        }
        if candidates.iter().any(|c| c.woken) {
            candidates.retain(|c| c.woken);
        }
        match candidates.len() {
            0 => Requester::Nobody,
            1 => Requester::One(candidates.pop().expect("one")),
            _ => Requester::Ambiguous(candidates.iter().map(|c| c.tid).collect()),
        }
    }

    /// Thread `other` (record `t`) as the one the call `[s, e]` of `tid` ran for, if the evidence
    /// allows.
    fn as_lender(&self, other: u32, t: &ThreadRecord, tid: u32, s: i64, e: i64) -> Option<Lender> {
        let linked =
            |a: i64, b: i64| t.woken_by(tid, a, b) || self.threads.get(&tid).is_some_and(|w| w.woken_by(other, a, b));
        let j = t.calls.partition_point(|c| c.ts < e);
        let before = j.checked_sub(1).map(|k| &t.calls[k]);
        if let Some(c) = before.filter(|c| c.end > s) {
            // a call of its own overlaps: it was in it (if it holds the whole call) or busy
            return (c.ts <= s && c.end >= e).then(|| Lender {
                tid: other,
                evidence: LendEvidence::InCall,
                call: Some(c.clone()),
                woken: linked(c.ts, c.end),
            });
        }
        let before = before.filter(|c| c.end >= s.saturating_sub(REACH_NS));
        let after = t.calls.get(j).filter(|c| c.ts <= e.saturating_add(REACH_NS));
        if !t.off_over(s, e).is_some_and(|o| o.asleep) {
            return None;
        }
        let (a, b) =
            (before.map_or(s.saturating_sub(REACH_NS), |c| c.end), after.map_or(e.saturating_add(REACH_NS), |c| c.ts));
        if !linked(a, b) {
            return None;
        }
        let evidence = match (before, after) {
            (Some(x), Some(y)) if x.python == y.python => LendEvidence::Bracketed,
            _ => LendEvidence::LastCall,
        };
        Some(Lender { tid: other, evidence, call: before.cloned(), woken: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::op;

    const MS: i64 = 1_000_000;
    const P: u32 = 100; // the Python thread
    const W: u32 = 200; // the engine thread, no Python frames
    const Q: u32 = 300; // another Python thread

    fn call(ts: i64, end: i64, python: u32, id: i64) -> PyCall {
        PyCall { ts, end, python, op: op::CUDA_LAUNCH_KERNEL, id: EventId::Int(id) }
    }

    fn sleep(out: i64, inn: i64, waker: u32) -> OffCpu {
        OffCpu { out, inn, asleep: true, wake_ts: inn - 1, waker_tid: waker }
    }

    fn process(threads: Vec<(u32, ThreadRecord)>) -> ProcessRecord {
        let mut p = ProcessRecord { threads: threads.into_iter().collect(), ..Default::default() };
        p.threads.values_mut().for_each(ThreadRecord::normalize);
        p
    }

    /// P launches a seed at 10 ms (frames 1), sleeps 11..50 ms woken by W, calls again at 60 ms
    /// (frames `after`); W runs 12..48 ms.
    fn backward(after: u32) -> ProcessRecord {
        process(vec![
            (
                P,
                ThreadRecord {
                    calls: vec![call(10 * MS, 10 * MS + 5_000, 1, 1), call(60 * MS, 60 * MS + 5_000, after, 9)],
                    off_cpu: vec![sleep(11 * MS, 50 * MS, W)],
                },
            ),
            (W, ThreadRecord::default()),
        ])
    }

    #[test]
    fn a_launch_of_an_engine_thread_borrows_the_line_its_python_thread_blocked_in() {
        let p = backward(2);
        let Requester::One(l) = p.requester(W, 20 * MS, 20 * MS + 8_000) else { panic!() };
        assert_eq!((l.tid, l.evidence, l.woken), (P, LendEvidence::LastCall, true));
        assert_eq!(l.call.unwrap().id, EventId::Int(1), "the frames of its last call before the wait");
        // the same frames after the wait: no Python progress shows
        let Requester::One(l) = backward(1).requester(W, 20 * MS, 20 * MS + 8_000) else { panic!() };
        assert_eq!(l.evidence, LendEvidence::Bracketed);
        // P's own calls, and a call of W while P was still on the CPU, borrow nothing
        assert_eq!(p.requester(P, 10 * MS, 10 * MS + 5_000), Requester::NotBorrowing);
        assert_eq!(p.requester(W, 10 * MS + 6_000, 10 * MS + 9_000), Requester::Nobody);
        // W woken by P instead (the request) links them as well
        let mut q = backward(2);
        q.threads.get_mut(&P).unwrap().off_cpu[0].waker_tid = 0;
        assert_eq!(q.requester(W, 20 * MS, 20 * MS + 8_000), Requester::Nobody, "no wake-up, no link");
        q.threads.get_mut(&W).unwrap().off_cpu.push(sleep(5 * MS, 12 * MS, P));
        assert!(matches!(q.requester(W, 20 * MS, 20 * MS + 8_000), Requester::One(l) if l.tid == P));
    }

    #[test]
    fn a_preempted_or_busy_python_thread_lends_nothing() {
        let mut p = backward(2);
        p.threads.get_mut(&P).unwrap().off_cpu[0].asleep = false;
        assert_eq!(p.requester(W, 20 * MS, 20 * MS + 8_000), Requester::Nobody);
        // a call of P that overlaps W's call without holding it: P was busy, not waiting
        let p = process(vec![
            (P, ThreadRecord { calls: vec![call(19 * MS, 20 * MS + 4_000, 1, 1)], off_cpu: vec![] }),
            (W, ThreadRecord::default()),
        ]);
        assert_eq!(p.requester(W, 20 * MS, 20 * MS + 8_000), Requester::Nobody);
    }

    #[test]
    fn a_python_thread_in_a_call_of_its_own_lends_that_calls_frames() {
        let sync = PyCall { op: op::CUDA_STREAM_SYNC, ..call(15 * MS, 40 * MS, 7, 3) };
        let mut t = ThreadRecord { calls: vec![sync.clone()], off_cpu: vec![] };
        // the driver call inside the runtime call is dropped
        t.calls.push(call(15 * MS + 1_000, 40 * MS - 1_000, 7, 4));
        let p = process(vec![(P, t), (W, ThreadRecord::default())]);
        assert_eq!(p.threads[&P].calls.len(), 1);
        let Requester::One(l) = p.requester(W, 20 * MS, 20 * MS + 8_000) else { panic!() };
        assert_eq!((l.evidence, l.woken, l.call), (LendEvidence::InCall, false, Some(sync)));
    }

    #[test]
    fn two_python_threads_waiting_on_it_make_it_ambiguous_and_a_bystander_does_not() {
        let q = |waker: u32| ThreadRecord {
            calls: vec![call(9 * MS, 9 * MS + 5_000, 5, 5)],
            off_cpu: vec![sleep(10 * MS, 50 * MS, waker)],
        };
        let mut p = backward(2);
        p.threads.insert(Q, q(W));
        p.threads.values_mut().for_each(ThreadRecord::normalize);
        assert_eq!(p.requester(W, 20 * MS, 20 * MS + 8_000), Requester::Ambiguous(vec![P, Q]));
        // Q asleep too, but woken by a timer (no waker): not a candidate
        p.threads.insert(Q, q(0));
        assert!(matches!(p.requester(W, 20 * MS, 20 * MS + 8_000), Requester::One(l) if l.tid == P));
        // a linked waiter beats a thread merely in a call of its own
        let mut p = backward(2);
        p.threads.insert(Q, ThreadRecord { calls: vec![call(15 * MS, 40 * MS, 6, 6)], off_cpu: vec![] });
        assert!(matches!(p.requester(W, 20 * MS, 20 * MS + 8_000), Requester::One(l) if l.tid == P));
        // two threads each in a call of its own, neither linked: ambiguous
        p.threads.get_mut(&P).unwrap().calls.push(call(19 * MS, 30 * MS, 1, 7));
        p.threads.get_mut(&P).unwrap().off_cpu.clear();
        p.threads.values_mut().for_each(ThreadRecord::normalize);
        assert_eq!(p.requester(W, 20 * MS, 20 * MS + 8_000), Requester::Ambiguous(vec![P, Q]));
    }

    #[test]
    fn only_calls_within_reach_count() {
        let p = backward(2);
        // far from any Python call of P: P is no candidate, and W has no frames of its own nearby
        let far = 60 * MS + 2 * REACH_NS;
        assert_eq!(p.requester(W, far, far + 1_000), Requester::NotBorrowing);
        // W made a Python call of its own within reach: its calls are its own
        let mut q = backward(2);
        q.threads.get_mut(&W).unwrap().calls.push(call(20 * MS + REACH_NS, 20 * MS + REACH_NS + 10, 3, 8));
        assert_eq!(q.requester(W, 20 * MS, 20 * MS + 8_000), Requester::NotBorrowing);
    }
}
