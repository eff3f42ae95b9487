//! The borrowed stacks of many calls at once: per stack of `causeway stacks` (`tally_over`, every
//! call in scope of the threads that may borrow), per call of explain's chains and the timeline
//! (`Lends`, a few calls by id).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use causeway_model::Event;
use causeway_store::{EventFilter, TraceStore};

use super::{BorrowedStack, LendKey, Lending, Requester};
use crate::AnalysisError;

/// Calls of one stack that borrowed the same Python stack.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct BorrowedShare {
    pub calls: u64,
    pub stack: BorrowedStack,
}

/// What the calls of one stack borrowed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StackLends {
    /// Most calls first.
    pub shares: Vec<BorrowedShare>,
    /// Calls two or more Python threads could have asked for: nothing borrowed.
    pub ambiguous: u64,
}

/// What the calls in `filter` (those `keep` accepts) of threads without Python frames of their
/// own borrowed, per stack hash. `threads` holds every (pid, tid, stack hash) the calls in scope
/// carry; a trace without a Python frame is not read again, nor a thread all of whose calls in
/// scope carry Python frames. `bounds` is the scope's first and last timestamp.
pub fn tally_over(
    store: &dyn TraceStore,
    filter: &EventFilter,
    keep: &dyn Fn(&Event) -> bool,
    threads: &HashSet<(u32, u32, i64)>,
    bounds: (i64, i64),
) -> Result<HashMap<i64, StackLends>, AnalysisError> {
    let mut lending = Lending::default();
    let hashes: Vec<i64> = threads.iter().map(|t| t.2).collect();
    lending.learn_stacks(store, &hashes)?;
    let python = |h: i64| lending.has_python(h) == Some(true);
    // the calls in scope may all be of threads without Python (a kernel or op filter): whether
    // their processes run Python is for the rule to say, over what it reads around them
    if !threads.iter().any(|t| python(t.2)) && !crate::trace_data::holds_python_stacks(store)? {
        return Ok(HashMap::new());
    }
    let pids: BTreeSet<u32> = threads.iter().filter(|t| !python(t.2)).map(|t| t.0).collect();
    let tids: BTreeSet<u32> = threads.iter().filter(|t| !python(t.2)).map(|t| t.1).collect();
    if tids.is_empty() {
        return Ok(HashMap::new());
    }
    for &pid in &pids {
        lending.read_over(store, pid, bounds.0, bounds.1)?;
    }
    // per stack: (calls, what they borrowed) per lender's stack, and the ambiguous calls
    type Groups = (BTreeMap<LendKey, (u64, BorrowedStack)>, u64);
    let mut groups: HashMap<i64, Groups> = HashMap::new();
    let of_tids = EventFilter { tids: Some(tids.into_iter().collect()), ..filter.clone() };
    store.scan_events(&of_tids, &mut |s| {
        let e = &s.event;
        if e.stack_hash == 0 || !pids.contains(&e.pid) || !keep(e) {
            return;
        }
        match lending.requester(e.pid, e.tid, e.ts_ns, e.end_ns()) {
            Requester::One(l) => {
                let Some(key) = LendKey::of(&l) else { return };
                let g = &mut groups.entry(e.stack_hash).or_default().0;
                if let Some(share) = g.get_mut(&key) {
                    share.0 += 1;
                } else if let Some(b) = lending.borrowed(&l) {
                    g.insert(key, (1, b));
                }
            }
            Requester::Ambiguous(_) => groups.entry(e.stack_hash).or_default().1 += 1,
            Requester::NotBorrowing | Requester::Nobody => {}
        }
    })?;
    Ok(groups
        .into_iter()
        .map(|(hash, (shares, ambiguous))| {
            let mut shares: Vec<BorrowedShare> =
                shares.into_values().map(|(calls, stack)| BorrowedShare { calls, stack }).collect();
            shares.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.stack.words.cmp(&b.stack.words)));
            (hash, StackLends { shares, ambiguous })
        })
        .collect())
}

/// What one call borrowed.
#[derive(Debug, Clone, PartialEq)]
pub enum CallLend {
    Borrowed(LendKey, BorrowedStack),
    /// The Python threads that could have asked for it.
    Ambiguous(Vec<u32>),
}

/// The lends of a few calls (explain's worst calls, a timeline's), reading their surroundings as
/// needed; one per explain or timeline, so that what one chain read serves the next.
#[derive(Debug, Default)]
pub struct Lends {
    lending: Lending,
    /// Whether the trace holds a Python frame at all (asked once).
    python: Option<bool>,
}

impl Lends {
    /// What each of `calls` (full events with a stack) borrowed, by index; calls that borrow
    /// nothing are absent.
    pub fn of(&mut self, store: &dyn TraceStore, calls: &[&Event]) -> Result<HashMap<usize, CallLend>, AnalysisError> {
        if calls.is_empty() {
            return Ok(HashMap::new());
        }
        let python = match self.python {
            Some(p) => p,
            None => *self.python.insert(crate::trace_data::holds_python_stacks(store)?),
        };
        if !python {
            return Ok(HashMap::new());
        }
        let hashes: Vec<i64> = calls.iter().map(|e| e.stack_hash).collect();
        self.lending.learn_stacks(store, &hashes)?;
        let without: Vec<(usize, &&Event)> = calls
            .iter()
            .enumerate()
            .filter(|(_, e)| e.stack_hash != 0 && self.lending.has_python(e.stack_hash) == Some(false))
            .collect();
        let spans: Vec<(u32, i64, i64)> = without.iter().map(|(_, e)| (e.pid, e.ts_ns, e.end_ns())).collect();
        self.lending.read_around(store, &spans)?;
        let mut out = HashMap::new();
        for (i, e) in without {
            match self.lending.requester(e.pid, e.tid, e.ts_ns, e.end_ns()) {
                Requester::One(l) => {
                    if let (Some(key), Some(b)) = (LendKey::of(&l), self.lending.borrowed(&l)) {
                        out.insert(i, CallLend::Borrowed(key, b));
                    }
                }
                Requester::Ambiguous(tids) => {
                    out.insert(i, CallLend::Ambiguous(tids));
                }
                Requester::NotBorrowing | Requester::Nobody => {}
            }
        }
        Ok(out)
    }
}
