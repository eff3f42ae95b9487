//! `explain` over a window reads the trace around the window only: the off-CPU intervals its slow
//! calls need are found even when their rows lie long after the window (an interval's row is
//! written when it ends), and the window's answer is the whole trace's for the same calls.

mod common;

use causeway_analysis::{explain, ExplainRequest, Explanation};
use causeway_model::time::TimeWindow;
use common::*;

/// The chain of `e` whose cause is `cause` (panics when none is).
fn chain_of<'a>(e: &'a Explanation, cause: &str) -> &'a causeway_analysis::Chain {
    e.chains
        .iter()
        .find(|c| c.cause == cause)
        .unwrap_or_else(|| panic!("no {cause} chain in {:?}", e.chains.iter().map(|c| &c.key).collect::<Vec<_>>()))
}

#[test]
fn a_windows_slow_call_finds_an_off_cpu_interval_that_ends_seconds_after_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("window.db");
    let mut t = Trace { names: vec![(4242, "train".into()), (9912, "backup-rsync".into())], ..Default::default() };
    let syncs = training_loop(&mut t, 4242, 4242, T0, 400, 1_800 * US, 10, &|i| if i == 50 { 48 * MS } else { 8 * MS });
    // Preempted inside the slow sync, and written back (its row) 3 s later, far past the window
    // and past the first look-aheads after it; another thread's rows go on meanwhile.
    let s50 = syncs[50];
    t.preempted(4242, 4242, s50 + 2 * MS, s50 + 3_000 * MS, 1, (9912, 9912, "backup-rsync"));
    for k in 1..400 {
        t.preempted(4242, 4243, s50 + k * 10 * MS, s50 + k * 10 * MS + MS, 0, (9912, 9912, "backup-rsync"));
    }
    t.write(&path);
    let duck = dir.path().join("window.duckdb");
    let engines = [causeway_backends::Engine::DuckDb].into_iter().filter(|&e| causeway_backends::is_built(e));
    for engine in engines {
        causeway_backends::convert(&path, &duck, Some(engine), &mut |_, _| {}).unwrap();
    }
    for store in std::iter::once(&path).chain(duck.exists().then_some(&duck)) {
        let store = causeway_backends::open_store(store).unwrap();
        check_window(store.as_ref(), s50);
    }
}

/// The window around the slow sync at `s50` says what the whole trace says of it.
fn check_window(store: &dyn causeway_backends::TraceStore, s50: i64) {
    let engine = store.engine();
    let whole = explain(store, &ExplainRequest { top: 100, ..Default::default() }).unwrap();
    let window = TimeWindow { from_ns: Some(s50 - MS), to_ns: Some(s50 + 50 * MS) };
    // judged by the whole trace's thresholds: alone in the window, the sync is its op's median
    let req = ExplainRequest { window, pid: None, top: 100, judge_by: Some(TimeWindow::ALL) };
    let windowed = explain(store, &req).unwrap();

    assert_eq!(windowed.slow_calls, 1, "{engine:?}: the slow sync, judged by the whole trace");
    let (w, a) = (chain_of(&windowed, "preempted"), chain_of(&whole, "preempted"));
    assert_eq!(w.culprit.as_ref().map(|c| c.comm.as_str()), Some("backup-rsync"));
    assert!(w.stall_ns > 40 * MS, "{engine:?}: most of the 48 ms sync was preempted: {} ns", w.stall_ns);
    assert_eq!((w.key.as_str(), w.stall_ns, w.calls), (a.key.as_str(), a.stall_ns, a.calls), "{engine:?}");
}
