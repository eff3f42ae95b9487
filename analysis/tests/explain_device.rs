//! The device view: GPU idle gaps found in the device's own timeline (`gpu_ops`) and explained by
//! what the launching thread went through, charged only with idle time it overlapped. Each test
//! plants one stall in a training loop whose host launches a 1 ms kernel every 1.1 ms: a hog's
//! preemption (named, 38 ms, reproduced by its SQL), a sleep woken by a DataLoader worker, a
//! synchronize that drains the queue before 5 ms of host work, and the same preemption while the
//! queue stays deep (no idle time, no blame).

mod common;

use causeway_analysis::{explain, ExplainRequest, Explanation, IdleCause};
use causeway_backends::{open_store, QueryLimits};
use causeway_model::codes::op;
use causeway_model::{Event, GpuOpKind, PrevState};
use common::{Trace, MS, T0, US};

const PID: u32 = 4000;
const TID: u32 = 4821;
const HOG: (u32, u32, &str) = (9912, 9912, "backup-rsync");
const PERIOD: i64 = 1100 * US;
const KERNEL: i64 = MS;
const STEPS: usize = 200;
const AT: usize = 120;

/// The loop: step `i` launches at `host(i)` (a 10 us `cudaLaunchKernel` wrapping `cuLaunchKernel`),
/// its kernel starts 15 us later or when the previous one ends. Returns each kernel's (start, end).
fn training(t: &mut Trace, host: impl Fn(usize) -> i64) -> Vec<(i64, i64)> {
    let mut free = 0;
    let mut kernels = Vec::new();
    for i in 0..STEPS {
        let h = host(i);
        t.nested_call(PID, TID, op::CUDA_LAUNCH_KERNEL, op::CU_LAUNCH_KERNEL, h, 10 * US);
        let start = (h + 15 * US).max(free);
        t.device_op(PID, TID, GpuOpKind::Kernel, 7, start, KERNEL, h, 10 * US);
        free = start + KERNEL;
        kernels.push((start, free));
    }
    kernels
}

/// Launch times of a loop that is late by `late` from step `AT` on.
fn late_from_at(late: i64) -> impl Fn(usize) -> i64 {
    move |i| T0 + i as i64 * PERIOD + if i >= AT { late } else { 0 }
}

fn explained(t: Trace) -> (Explanation, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    // every idle chain's figure is what its SQL recomputes from the stored rows
    for c in &e.device.as_ref().expect("a device view").chains {
        let r = store.query(&c.sql, &QueryLimits::default()).unwrap_or_else(|err| panic!("{}: {err}\n{}", c.id, c.sql));
        assert_eq!(r.rows[0][0].as_i64(), Some(c.idle_ns), "chain {} ({:?})\n{}", c.id, c.cause, c.sql);
    }
    (e, dir)
}

#[test]
fn a_preempted_launch_thread_is_charged_with_the_idle_gap_it_caused_and_named() {
    let mut t = Trace::default();
    let kernels = training(&mut t, late_from_at(38 * MS));
    // the hog takes the CPU 20 us after step AT-1's kernel ends
    let out = kernels[AT - 1].1 + 20 * US;
    t.preempted(PID, TID, out, out + 38 * MS, 1, HOG);
    let (e, _dir) = explained(t);
    let d = e.device.as_ref().unwrap();
    assert_eq!(d.gaps_total, 1, "{:#?}", d.gaps);
    let g = &d.gaps[0];
    assert_eq!((g.start_ns, g.end_ns), (kernels[AT - 1].1, kernels[AT].0));
    let top = &g.parts[0];
    assert_eq!(top.cause, IdleCause::Preempted);
    assert_eq!(top.ns, 38 * MS, "the whole preemption lay inside the gap");
    assert_eq!(top.culprit.as_ref().unwrap().comm, "backup-rsync");
    assert_eq!(g.parts.iter().map(|p| p.ns).sum::<i64>(), g.idle_ns, "the parts add up to the gap");
    let chain = &d.chains[0];
    assert_eq!((chain.cause, chain.idle_ns), (top.cause, 38 * MS));
    assert!(g.summary.contains("preempted by backup-rsync (pid 9912)"), "{}", g.summary);
    assert!(e.verdict.starts_with("The GPU was busy"), "{}", e.verdict);
    assert!(e.verdict.contains("backup-rsync"), "{}", e.verdict);
    let busy = &d.devices[0];
    assert_eq!(busy.ops, STEPS as u64);
    assert_eq!(busy.busy_ns, STEPS as i64 * KERNEL);
}

#[test]
fn a_preemption_while_the_queue_stays_deep_costs_no_idle_time_and_is_blamed_for_nothing() {
    let mut t = Trace::default();
    // the host runs 60 ms ahead: its first 60 launches go out at once
    // (the preempted thread launches late from step AT on, 38 ms later than it would have)
    let host = |i: usize| {
        let late = if i >= AT { 38 * MS } else { 0 };
        T0 + late + if i < 60 { i as i64 * 10 * US } else { (i as i64 - 60) * KERNEL + 600 * US }
    };
    training(&mut t, host);
    let out = host(AT - 1) + 50 * US;
    t.preempted(PID, TID, out, out + 38 * MS, 1, HOG);
    let (e, _dir) = explained(t);
    let d = e.device.as_ref().unwrap();
    assert_eq!(d.gaps_total, 0, "{:#?}", d.gaps);
    assert!(d.chains.is_empty());
    assert_eq!(d.devices[0].idle_ns, 0);
    assert_eq!(d.host_time_hidden_ns, 38 * MS, "the preemption is said to have cost nothing");
    assert!(!e.verdict.contains("backup-rsync"), "{}", e.verdict);
    let host = e.chains.iter().find(|c| c.culprit.as_ref().is_some_and(|k| k.comm == "backup-rsync")).unwrap();
    assert_eq!(host.gpu_idle_ns, Some(0));
    assert_eq!(host.severity, causeway_analysis::Severity::Low);
    assert!(host.details[0].contains("cost the GPU no idle time"), "{:?}", host.details);
}

#[test]
fn a_sleep_is_named_with_the_thread_that_ended_it() {
    let mut t = Trace::default();
    let kernels = training(&mut t, late_from_at(20 * MS));
    let out = kernels[AT - 1].1 + 20 * US;
    let woke = out + 20 * MS;
    t.off_cpu(PID, TID, out, woke + 30 * US, 1, PrevState::Sleeping, (0, 0, "swapper/1"), woke, (PID, 5001));
    t.events.push(Event {
        ts_ns: T0,
        dur_ns: 10 * US,
        pid: PID,
        tid: 5001,
        source: op::CUDA_MALLOC.source,
        op: op::CUDA_MALLOC.op,
        comm: "pt_data_worker".into(),
        ..Default::default()
    });
    let (e, _dir) = explained(t);
    let d = e.device.as_ref().unwrap();
    let g = &d.gaps[0];
    let top = &g.parts[0];
    assert_eq!(top.cause, IdleCause::Sleep);
    assert_eq!(top.ns, 20 * MS);
    assert_eq!(top.culprit.as_ref().unwrap().comm, "pt_data_worker");
    assert!(g.summary.contains("slept until pt_data_worker"), "{}", g.summary);
}

#[test]
fn a_synchronize_that_drains_the_queue_is_named_as_a_drain() {
    let mut t = Trace::default();
    let kernels = training(&mut t, late_from_at(5 * MS));
    // step AT-1's launch returns, then the host synchronizes: it returns 20 us after the kernel
    // ends, then 5 ms of host work on the CPU before step AT's launch
    let sync_start = T0 + (AT as i64 - 1) * PERIOD + 20 * US;
    let drained = kernels[AT - 1].1 + 20 * US;
    t.device_op(PID, TID, GpuOpKind::Sync, 7, sync_start, drained - sync_start, sync_start, drained - sync_start);
    let (e, _dir) = explained(t);
    let d = e.device.as_ref().unwrap();
    assert_eq!(d.gaps_total, 1);
    let g = &d.gaps[0];
    assert_eq!(g.parts[0].cause, IdleCause::Drain, "{:#?}", g.parts);
    assert_eq!(g.parts[0].ns, g.idle_ns - 15 * US, "all but the launch itself");
    assert!(g.summary.contains("drained the queue"), "{}", g.summary);
}

#[test]
fn a_trace_without_the_device_timeline_says_the_device_view_is_missing() {
    let mut t = Trace::default();
    for i in 0..50 {
        t.call(PID, TID, op::CUDA_LAUNCH_KERNEL, T0 + i * MS, 10 * US);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host-only.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    assert!(e.device.is_none());
    assert!(e.missing.iter().any(|m| m.contains("--gpu-timeline")), "{:?}", e.missing);
}

#[test]
fn stats_give_device_time_per_kernel_and_launch_latency_by_nearest_rank() {
    let mut t = Trace::default();
    let kernels = training(&mut t, late_from_at(38 * MS));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    let s = causeway_analysis::compute_stats(store.as_ref(), &causeway_analysis::StatsRequest::default()).unwrap();
    let d = s.device.expect("a device section");
    assert_eq!(d.ops.len(), 1);
    let k = &d.ops[0];
    assert_eq!((k.count, k.p50_ns, k.max_ns, k.total_ns), (STEPS as u64, KERNEL, KERNEL, STEPS as i64 * KERNEL));
    assert_eq!(k.name, "step(float*)", "demangled");
    // every launch waits 15 us for the device here, as the loop never queues
    let mut latencies: Vec<i64> = (0..STEPS).map(|i| kernels[i].0 - late_from_at(38 * MS)(i)).collect();
    latencies.sort_unstable();
    let l = k.launch_latency.as_ref().unwrap();
    assert_eq!(l.p50_ns, latencies[STEPS.div_ceil(2) - 1]);
    assert_eq!(l.max_ns, *latencies.last().unwrap());
    assert_eq!(d.devices[0].busy_ns, STEPS as i64 * KERNEL);
}

/// torch.profiler takes CUPTI's records for 900 ms mid-run: the injection library steps aside and
/// the device view has a hole (from the tracer's `foreign_client` note to the library's `resumed`).
/// The hole is neither idle nor busy: no gap there, no host cause charged (not even the preemption
/// planted inside it), the busy share counts the seen time only, and the notes say when and why.
#[test]
fn a_hole_where_another_profiler_held_the_records_is_neither_idle_nor_blamed() {
    let mut t = Trace::default();
    // the device view has no kernel between steps 80 and 90 (the other client got those); step
    // AT is 5 ms late, preempted by the hog: the one gap, and its SQL must skip the hole too
    let kernels = training(&mut t, late_from_at(5 * MS));
    let out = kernels[AT - 1].1 + 20 * US;
    t.preempted(PID, TID, out, out + 5 * MS, 1, HOG);
    let (from, to) = (kernels[79].1, kernels[90].0);
    t.gpu.ops.retain(|o| o.end_ns <= from || o.start_ns >= to);
    let note = |ts: i64, kind: &str, detail: &str| causeway_model::GpuTimelineNote {
        pid: PID,
        ts_ns: ts,
        kind: kind.into(),
        count: 0,
        detail: detail.into(),
    };
    t.gpu.notes.push(note(from + 50 * US, "foreign_client", "tid 4821 (python) of pid 4000 took CUPTI's activity records (cuptiActivityRegisterCallbacks), called from libtorch_cuda.so: another CUPTI client holds the device view from here; the injection library steps aside until it is done"));
    t.gpu.notes.push(note(from + 200 * US, "stepped_aside", "another CUPTI client took over the activity records"));
    t.gpu.notes.push(note(to - 100 * US, "resumed", "the other client is done: recording again"));
    // a preemption inside the hole: the device view cannot say it cost the GPU anything
    t.preempted(PID, TID, kernels[84].0, kernels[84].0 + 3 * MS, 1, HOG);
    let (e, _dir) = explained(t);
    let d = e.device.as_ref().unwrap();
    assert_eq!(d.gaps_total, 1, "{:#?}", d.gaps);
    assert_eq!((d.gaps[0].start_ns, d.gaps[0].end_ns), (kernels[AT - 1].1, kernels[AT].0));
    assert_eq!((d.chains[0].cause, d.chains[0].idle_ns), (IdleCause::Preempted, 5 * MS), "{:#?}", d.chains);
    let dev = &d.devices[0];
    assert_eq!(dev.unseen_ns, to - from);
    assert_eq!(dev.busy_ns, (STEPS as i64 - 10) * KERNEL);
    let span = kernels[STEPS - 1].1 - kernels[0].0;
    assert_eq!(dev.idle_ns, span - dev.busy_ns - dev.unseen_ns);
    let notes = d.notes.join("\n");
    assert!(notes.contains("the device view has a hole from") && notes.contains("libtorch_cuda.so"), "{notes}");
    assert!(notes.contains(". 10 kernel launches traced in it are not in the device view"), "{notes}");
    assert!(!notes.contains("another CUPTI client took over"), "one line per hole: {notes}");
    // no host chain is charged with GPU idle time inside the hole (at most the 5 ms gap)
    for c in &e.chains {
        assert!(c.gpu_idle_ns.unwrap_or(0) <= 5 * MS + 20 * US, "{c:#?}");
    }
}
