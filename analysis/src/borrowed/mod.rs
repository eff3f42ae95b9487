//! Borrowed Python stacks. Most of a PyTorch training step's launches come from autograd's device
//! threads, which run no Python, while the Python thread that asked for them waits in
//! `loss.backward()`; a DataLoader's pin-memory thread or a serving engine's loop launch on a
//! Python thread's behalf the same way. A GPU call of a thread with no Python frames of its own,
//! in a process that runs Python, gets the Python stack of the thread it ran for, marked as
//! borrowed, with the evidence: the rule is `rule.rs`; this module reads what the rule needs from
//! the store (`Lending`) and words what it found for `stacks`, explain's chain stacks and the
//! timeline.

mod rule;
mod tally;

use std::collections::HashMap;

use causeway_model::codes::{op, PrevState};
use causeway_model::time::TimeWindow;
use causeway_store::{EventFilter, TraceStore};

use crate::attribution::gpu_call_sources;
use crate::stacks::{parse_frames, python_parts, user_frame, Frame};
use crate::AnalysisError;

pub use rule::{LendEvidence, Lender, Requester, REACH_NS};
use rule::{OffCpu, ProcessRecord, PyCall};
pub use tally::{tally_over, BorrowedShare, CallLend, Lends};

/// The Python stack a GPU call of a thread without Python frames of its own borrowed from the
/// Python thread of its process it ran for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct BorrowedStack {
    /// The Python thread (same process) the call ran for.
    pub from_tid: u32,
    /// How that thread was seen over the call: `in_call` (inside a traced call of its own, whose
    /// frames these are), `bracketed` (asleep over the call and linked to the launching thread by
    /// a wake-up, one woke the other, while it waited; its last call before and its first call
    /// after both carry these frames), `last_call` (the same, its next call elsewhere or none:
    /// these are the frames of its last call before the wait).
    pub evidence: LendEvidence,
    /// The lender's call whose frames these are (`events.id`; of the first call that borrowed
    /// them, when several did).
    pub from_event: causeway_store::EventId,
    /// That call's op.
    pub from_op: String,
    /// A wake-up links the two threads around the call (the lender woke the launching thread or
    /// was woken by it).
    pub woken: bool,
    /// The Python frames, innermost first.
    pub frames: Vec<Frame>,
    /// The user's own frame among them (`file:line in function`, see `stacks::user_frame`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_frame: Option<String>,
    /// In words: `borrowed from thread 812 (blocked in backward() at /app/train.py:44 in <module>)`.
    pub words: String,
}

impl BorrowedStack {
    fn of(l: &Lender, frames: &[Frame]) -> Option<BorrowedStack> {
        let call = l.call.as_ref()?;
        let user = user_frame(frames).map(|f| f.text.clone());
        let at = user.clone().unwrap_or_else(|| "?".into());
        let op = call.op.name().into_owned();
        let words = match (l.evidence, callee(frames)) {
            (LendEvidence::InCall, _) => format!("borrowed from thread {} (in {op} at {at})", l.tid),
            (_, Some(f)) => format!("borrowed from thread {} (blocked in {f}() at {at})", l.tid),
            (_, None) => format!("borrowed from thread {} (blocked at {at})", l.tid),
        };
        Some(BorrowedStack {
            from_tid: l.tid,
            evidence: l.evidence,
            from_event: call.id.clone(),
            from_op: op,
            woken: l.woken,
            frames: frames.to_vec(),
            user_frame: user,
            words,
        })
    }

    /// The mark a call site shown at the user's line carries: `borrowed from thread 812, blocked
    /// in backward() there`.
    pub fn mark(&self) -> String {
        match (self.evidence, callee(&self.frames)) {
            (LendEvidence::InCall, _) => {
                format!("borrowed from thread {}, in its {} there", self.from_tid, self.from_op)
            }
            (_, Some(f)) => format!("borrowed from thread {}, blocked in {f}() there", self.from_tid),
            (_, None) => format!("borrowed from thread {}, blocked there", self.from_tid),
        }
    }
}

/// The function called at the user's line, when it is Python (`backward` of torch's `_tensor.py`
/// under `loss.backward()`): the frame just inside the user's own.
fn callee(frames: &[Frame]) -> Option<&str> {
    let u = user_frame(frames)?;
    let at = frames.iter().position(|f| std::ptr::eq(f, u))?;
    let inner = frames[..at].iter().rev().find(|f| f.kind == "python")?;
    python_parts(&inner.text).map(|(_, func)| func)
}

/// What groups the calls that borrowed the same thing: the lender, its frames and the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LendKey {
    pub tid: u32,
    pub python: u32,
    pub evidence: LendEvidence,
}

impl LendKey {
    pub fn of(l: &Lender) -> Option<LendKey> {
        Some(LendKey { tid: l.tid, python: l.call.as_ref()?.python, evidence: l.evidence })
    }
}

/// Each stack's Python frames, interned: equal frames, equal index.
#[derive(Debug, Default)]
struct PythonStacks {
    of_hash: HashMap<i64, Option<u32>>,
    frames: Vec<Vec<Frame>>,
    index: HashMap<Vec<Frame>, u32>,
}

impl PythonStacks {
    /// Read the stacks of `hashes` not read yet.
    fn learn(&mut self, store: &dyn TraceStore, hashes: impl IntoIterator<Item = i64>) -> Result<(), AnalysisError> {
        let mut new: Vec<i64> = hashes.into_iter().filter(|h| *h != 0 && !self.of_hash.contains_key(h)).collect();
        new.sort_unstable();
        new.dedup();
        for chunk in new.chunks(4096) {
            let records = store.stacks(chunk)?;
            for h in chunk {
                let python: Vec<Frame> = records
                    .get(h)
                    .map(|r| parse_frames(&r.frames).into_iter().filter(|f| f.kind == "python").collect())
                    .unwrap_or_default();
                let idx = (!python.is_empty()).then(|| {
                    let next = self.frames.len() as u32;
                    *self.index.entry(python.clone()).or_insert_with(|| {
                        self.frames.push(python);
                        next
                    })
                });
                self.of_hash.insert(*h, idx);
            }
        }
        Ok(())
    }

    fn python(&self, hash: i64) -> Option<u32> {
        self.of_hash.get(&hash).copied().flatten()
    }
}

/// What the rule needs, read from a store window by window: per process, each thread's calls
/// with Python frames and its off-CPU intervals.
#[derive(Debug, Default)]
pub struct Lending {
    processes: HashMap<u32, ProcessRecord>,
    stacks: PythonStacks,
    /// Per process, the time ranges read (disjoint, in order).
    read: HashMap<u32, Vec<(i64, i64)>>,
}

impl Lending {
    /// Whether the stack `hash` carries Python frames, for stacks already read (`None`: not read).
    pub fn has_python(&self, hash: i64) -> Option<bool> {
        self.stacks.of_hash.get(&hash).map(Option::is_some)
    }

    /// Read the stacks of `hashes` (to ask [`Lending::has_python`]).
    pub fn learn_stacks(&mut self, store: &dyn TraceStore, hashes: &[i64]) -> Result<(), AnalysisError> {
        self.stacks.learn(store, hashes.iter().copied())
    }

    /// Read what the rule needs for the calls `(pid, ts, end)`: within [`REACH_NS`] of each.
    pub fn read_around(&mut self, store: &dyn TraceStore, calls: &[(u32, i64, i64)]) -> Result<(), AnalysisError> {
        let mut per: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
        for &(pid, ts, end) in calls {
            per.entry(pid).or_default().push((ts.saturating_sub(REACH_NS), end.max(ts).saturating_add(REACH_NS)));
        }
        for (pid, spans) in per {
            for (a, b) in crate::trace_data::merge_intervals(spans) {
                self.read_range(store, pid, a, b)?;
            }
        }
        Ok(())
    }

    /// Read what the rule needs for the calls of `pid` starting in `[from, to]`.
    pub fn read_over(&mut self, store: &dyn TraceStore, pid: u32, from: i64, to: i64) -> Result<(), AnalysisError> {
        self.read_range(store, pid, from.saturating_sub(REACH_NS), to.saturating_add(REACH_NS))
    }

    /// Read `pid`'s GPU calls and off-CPU intervals recorded in `[a, b]` that were not read yet.
    fn read_range(&mut self, store: &dyn TraceStore, pid: u32, a: i64, b: i64) -> Result<(), AnalysisError> {
        let done = self.read.entry(pid).or_default();
        let missing = uncovered(done, a, b);
        if missing.is_empty() {
            return Ok(());
        }
        done.extend(missing.iter().copied());
        *done = crate::trace_data::merge_intervals(std::mem::take(done));
        let process = self.processes.entry(pid).or_default();
        for (x, y) in missing {
            let window = TimeWindow { from_ns: Some(x), to_ns: Some(y) };
            let calls = EventFilter {
                window,
                pid: Some(pid),
                sources: Some(gpu_call_sources().to_vec()),
                ..Default::default()
            };
            // the calls of stacks already read are kept as they come (in time order; a call inside
            // the last one kept of its thread is dropped); the others wait for their stacks
            let mut unknown: Vec<(u32, PyCall, i64)> = Vec::new();
            let stacks = &self.stacks;
            store.scan_events(&calls, &mut |s| {
                let e = &s.event;
                process.gpu_threads.insert(e.tid);
                if e.stack_hash == 0 {
                    return;
                }
                let c = PyCall { ts: e.ts_ns, end: e.end_ns(), python: 0, op: e.code(), id: s.id };
                match stacks.of_hash.get(&e.stack_hash) {
                    None => unknown.push((e.tid, c, e.stack_hash)),
                    Some(None) => {}
                    Some(Some(python)) => {
                        let t = process.threads.entry(e.tid).or_default();
                        if t.calls.last().is_none_or(|l| c.end > l.end) {
                            t.calls.push(PyCall { python: *python, ..c });
                        }
                    }
                }
            })?;
            self.stacks.learn(store, unknown.iter().map(|c| c.2))?;
            for (tid, mut c, hash) in unknown {
                if let Some(python) = self.stacks.python(hash) {
                    c.python = python;
                    process.threads.entry(tid).or_default().calls.push(c);
                }
            }
            // the off-CPU intervals that matter: the sleeps, and the wake-ups, of the threads that
            // make GPU calls
            let switches = EventFilter {
                window,
                pid: Some(pid),
                tids: Some(process.gpu_threads.iter().copied().collect()),
                ops: Some(vec![op::SCHED_SWITCH]),
                ..Default::default()
            };
            store.scan_switches_kept(&switches, &|_, _, _| true, &mut |r| {
                let (out, inn) = r.off_cpu_interval();
                let Some(d) = r.sched.as_ref() else { return };
                let asleep = d.prev_state == PrevState::Sleeping;
                if asleep || d.waker_tid != 0 {
                    let o = OffCpu { out, inn, asleep, wake_ts: d.wake_ts_ns, waker_tid: d.waker_tid };
                    process.threads.entry(r.tid).or_default().off_cpu.push(o);
                }
            })?;
        }
        process.threads.values_mut().for_each(rule::ThreadRecord::normalize);
        Ok(())
    }

    /// Who the call `[ts, end]` of `pid`/`tid` ran for (read its surroundings first).
    pub fn requester(&self, pid: u32, tid: u32, ts: i64, end: i64) -> Requester {
        self.processes.get(&pid).map_or(Requester::NotBorrowing, |p| p.requester(tid, ts, end.max(ts)))
    }

    /// The stack a lender lends (`None` when it made no call before to lend the frames of).
    pub fn borrowed(&self, l: &Lender) -> Option<BorrowedStack> {
        let call = l.call.as_ref()?;
        BorrowedStack::of(l, self.stacks.frames.get(call.python as usize)?)
    }
}

/// The parts of `[a, b]` outside the sorted disjoint ranges `done`.
fn uncovered(done: &[(i64, i64)], a: i64, b: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut from = a;
    for &(x, y) in done {
        if y < from {
            continue;
        }
        if x > b {
            break;
        }
        if x > from {
            out.push((from, x - 1));
        }
        from = from.max(y.saturating_add(1));
        if from > b {
            return out;
        }
    }
    if from <= b {
        out.push((from, b));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_parts_not_read_are_read() {
        assert_eq!(uncovered(&[], 0, 10), vec![(0, 10)]);
        assert_eq!(uncovered(&[(3, 5)], 0, 10), vec![(0, 2), (6, 10)]);
        assert_eq!(uncovered(&[(0, 4), (8, 20)], 2, 10), vec![(5, 7)]);
        assert_eq!(uncovered(&[(0, 20)], 2, 10), vec![]);
    }

    fn py(file: &str, func: &str, line: i64) -> Frame {
        Frame { kind: "python".into(), text: format!("{file}:{line} in {func}"), lib: None }
    }

    #[test]
    fn the_words_name_the_line_and_the_function_called_there() {
        let lender = |evidence| Lender {
            tid: 812,
            evidence,
            call: Some(PyCall {
                ts: 0,
                end: 1,
                python: 0,
                op: op::CUDA_LAUNCH_KERNEL,
                id: causeway_store::EventId::Int(7),
            }),
            woken: true,
        };
        // PyTorch: the user's line calls torch's backward
        let torch = vec![
            py("/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", "_make_grads", 88),
            py("/venv/lib/python3.12/site-packages/torch/_tensor.py", "backward", 581),
            py("/app/train.py", "<module>", 44),
        ];
        let b = BorrowedStack::of(&lender(LendEvidence::LastCall), &torch).unwrap();
        assert_eq!(b.words, "borrowed from thread 812 (blocked in backward() at /app/train.py:44 in <module>)");
        assert_eq!(b.mark(), "borrowed from thread 812, blocked in backward() there");
        assert_eq!(b.user_frame.as_deref(), Some("/app/train.py:44 in <module>"));
        // the user's own function calls native code: no Python callee
        let own = vec![py("/w/train.py", "backward", 12), py("/w/train.py", "main", 20)];
        let b = BorrowedStack::of(&lender(LendEvidence::Bracketed), &own).unwrap();
        assert_eq!(b.words, "borrowed from thread 812 (blocked at /w/train.py:12 in backward)");
        let b = BorrowedStack::of(&lender(LendEvidence::InCall), &own).unwrap();
        assert_eq!(b.words, "borrowed from thread 812 (in cudaLaunchKernel at /w/train.py:12 in backward)");
        assert_eq!(b.mark(), "borrowed from thread 812, in its cudaLaunchKernel there");
    }
}
