//! Stragglers at NCCL collectives, planted in synthetic two-rank traces: the late rank is named
//! first with its collectives, what the other rank waited, and the cause its own thread went
//! through (a CPU hog preempting it, or more host work of its own); a run without a late rank has
//! no straggler chain. The evidence SQL recomputes the wait.

mod common;

use causeway_analysis::{explain, ChainKind, ExplainRequest, Severity};
use causeway_backends::{open_store, QueryLimits};
use common::{Trace, MS, T0, US};

const STEPS: i64 = 40;
const LATE: std::ops::RangeInclusive<i64> = 11..=30;
const HOG: (u32, u32, &str) = (300, 300, "nccl-hog");

#[derive(Clone, Copy, PartialEq)]
enum Plant {
    Nothing,
    /// The late rank is preempted by a hog for `late` ms before the collective.
    Hog,
    /// The late rank computes `late` ms more itself.
    Input,
}

/// Two ranks (pids 100 and 200, rank 1 the planted one), a collective every 10 ms: per step host
/// work, an all-reduce, then a stream sync that waits until the other rank arrived and 1 ms of
/// transfer. In the late steps rank 1 arrives 4 ms after rank 0.
fn two_ranks(plant: Plant) -> Trace {
    let mut t = Trace {
        names: vec![(100, "nccl_ranks".into()), (200, "nccl_ranks".into()), (300, "nccl-hog".into())],
        ..Default::default()
    };
    let late_ns = 4 * MS;
    for step in 1..=STEPS {
        let base = T0 + step * 10 * MS;
        let late = plant != Plant::Nothing && LATE.contains(&step);
        let entry = [base, base + 50 * US + if late { late_ns } else { 0 }];
        let done = entry[1] + MS; // the collective ends when the last rank is in, plus the transfer
        for (r, pid) in [(0i32, 100u32), (1, 200)] {
            let i = r as usize;
            // before the entry: host work since the previous sync returned
            if r == 1 && late && plant == Plant::Hog {
                t.preempted(pid, pid, entry[i] - late_ns - MS, entry[i] - MS, 1, HOG);
            }
            // the sync sleeps until the collective is done: the GPU's time, woken by the driver
            t.allreduce_step(pid, r, step, entry[i], done);
        }
    }
    t
}

fn explained(
    plant: Plant,
) -> (tempfile::TempDir, Box<dyn causeway_backends::TraceStore>, causeway_analysis::Explanation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ranks.db");
    two_ranks(plant).write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    (dir, store, e)
}

#[test]
fn a_rank_preempted_by_a_hog_is_the_straggler_named_first() {
    let (_d, store, e) = explained(Plant::Hog);
    let c = &e.chains[0];
    assert_eq!(
        (c.kind, c.severity, c.pid, c.tid),
        (ChainKind::Straggler, Severity::High, 200, Some(200)),
        "{:#?}",
        e.chains
    );
    assert_eq!(c.calls, 20, "late in the 20 planted collectives");
    assert_eq!(c.op, "ncclAllReduce");
    assert_eq!(c.cause, "preempted");
    let culprit = c.culprit.as_ref().expect("the hog is named");
    assert_eq!((culprit.pid, culprit.comm.as_str()), (300, "nccl-hog"));
    // rank 0 waited (4 ms + 50 us) in each late collective
    assert_eq!(c.stall_ns, 20 * (4 * MS + 50 * US));
    assert!(c.summary.contains("rank 1 (pid 200"), "{}", c.summary);
    assert!(c.summary.contains("preempted by nccl-hog (pid 300"), "{}", c.summary);
    assert!(c.summary.chars().count() < causeway_analysis::HEADLINE_MAX, "{}", c.summary);
    // the whole story is the first detail
    assert!(c.details[0].contains("collectives #11-#30"), "{}", c.details[0]);
    assert!(c.details[0].contains("preempted by nccl-hog (pid 300"), "{}", c.details[0]);
    assert!(c.recommendations.iter().any(|r| r.contains("nccl-hog")), "{:?}", c.recommendations);
    assert!(!c.evidence.event_ids.is_empty(), "the late entries' events");
    assert!(c.timeline.iter().any(|s| s.what.contains("rank 1") && s.what.contains("late")), "{:?}", c.timeline);
    let r = store.query(&c.evidence.sql, &QueryLimits::default()).unwrap();
    assert_eq!(r.rows[0][0].as_i64(), Some(c.evidence.value), "{}", c.evidence.sql);
    assert_eq!(c.evidence.value, c.stall_ns);
}

#[test]
fn a_rank_with_more_host_work_is_the_straggler_with_host_compute() {
    let (_d, _store, e) = explained(Plant::Input);
    let c = &e.chains[0];
    assert_eq!((c.kind, c.severity, c.pid), (ChainKind::Straggler, Severity::High, 200), "{:#?}", e.chains);
    assert_eq!(c.cause, "host_compute", "{}", c.summary);
    assert!(c.culprit.is_none());
    assert!(c.recommendations.iter().any(|r| r.contains("input pipeline")), "{:?}", c.recommendations);
}

#[test]
fn ranks_arriving_together_have_no_straggler() {
    let (_d, _store, e) = explained(Plant::Nothing);
    assert!(e.chains.iter().all(|c| c.kind != ChainKind::Straggler), "{:#?}", e.chains);
    assert!(e.chains.iter().all(|c| c.severity != Severity::High), "{:#?}", e.chains);
}
