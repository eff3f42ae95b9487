//! `explain` on native traces with planted off-CPU intervals and culprits, written through
//! `SqliteSink`: the attribution must be exact to the nanosecond, every chain's SQL must reproduce
//! its figure, and a clean trace must blame nobody.

mod common;

use causeway_analysis::Culprit;
use causeway_analysis::{explain, find_chain, ExplainRequest, Explanation};
use causeway_analysis::{ChainKind, Severity};
use causeway_backends::{QueryLimits, SqliteStore, TraceStore};
use causeway_model::codes::op;
use causeway_model::PrevState;
use common::*;

fn check_evidence(store: &dyn TraceStore, e: &Explanation) {
    for c in &e.chains {
        let r = store
            .query(&c.evidence.sql, &QueryLimits::default())
            .unwrap_or_else(|err| panic!("{}: {err}\n{}", c.id, c.evidence.sql));
        assert_eq!(r.rows[0][0].as_i64(), Some(c.evidence.value), "chain {} ({})\n{}", c.id, c.key, c.evidence.sql);
    }
}

fn explain_all(path: &std::path::Path) -> (SqliteStore, Explanation) {
    let store = SqliteStore::open(path).unwrap();
    let e = explain(&store, &ExplainRequest { top: 100, ..Default::default() }).unwrap();
    check_evidence(&store, &e);
    check_headlines(&e);
    (store, e)
}

/// Every planted fault's chains keep a headline a person reads in five seconds.
fn check_headlines(e: &Explanation) {
    for c in &e.chains {
        let h = c.headline();
        assert!(h.chars().count() <= causeway_analysis::HEADLINE_MAX, "{} chars: {h}", h.chars().count());
    }
}

#[test]
fn planted_preemption_io_and_sleep_are_attributed_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planted.db");
    let mut t = Trace {
        names: vec![
            (4242, "train".into()),
            (9912, "backup-rsync".into()),
            (5001, "pt_data_worker".into()),
            (7777, "nightly-backup".into()),
        ],
        // the culprit runs in a container; the workload in a plain cgroup (not named in chains)
        cgroups: vec![
            causeway_model::ProcessCgroup {
                container: "backup".into(),
                ..causeway_model::ProcessCgroup::from_path(
                    9912,
                    77,
                    &format!("/system.slice/docker-{}.scope", "ab".repeat(32)),
                )
            },
            causeway_model::ProcessCgroup::from_path(4242, 5, "/user.slice/train.scope"),
        ],
        ..Default::default()
    };
    let syncs = training_loop(&mut t, 4242, 4242, T0, 100, 1_800 * US, 10, &|i| match i {
        50 => 48 * MS,
        70 => 20 * MS,
        _ => 8 * MS,
    });
    // The 48 ms sync: 41 ms preempted by backup-rsync on CPU 1, then 2 ms asleep (a blocking sync:
    // GPU time, whoever woke it) and 1 ms in the run queue; 4 ms left on-CPU or in the GPU.
    let s50 = syncs[50];
    t.preempted(4242, 4242, s50 + 2 * MS, s50 + 43 * MS, 1, (9912, 9912, "backup-rsync"));
    t.off_cpu(
        4242,
        4242,
        s50 + 44 * MS,
        s50 + 47 * MS,
        1,
        PrevState::Sleeping,
        (0, 0, "swapper/1"),
        s50 + 46 * MS,
        (5001, 5001),
    );
    // The 20 ms sync: 14 ms in D state while a 1 MiB block read of the process was in flight.
    let s70 = syncs[70];
    t.off_cpu(
        4242,
        4242,
        s70 + 2 * MS,
        s70 + 17 * MS,
        2,
        PrevState::Uninterruptible,
        (0, 0, "swapper/2"),
        s70 + 16 * MS,
        (0, 0),
    );
    t.block(4242, op::BLOCK_READ, s70 + MS, 15 * MS, 1 << 20, 259 << 20);
    // ... while nightly-backup's write was in flight for 9 ms of those 14 ms (7..16 of the D-state 2..16).
    t.block(7777, op::BLOCK_WRITE, s70 + 7 * MS, 10 * MS, 4 << 20, 259 << 20);
    t.write(&path);
    let (store, e) = explain_all(&path);

    assert_eq!(e.slow_calls, 2);
    assert_eq!(e.slow_time_ns, 68 * MS);
    let c1 = &e.chains[0];
    assert_eq!((c1.id.as_str(), c1.severity, c1.kind), ("c1", Severity::High, ChainKind::SlowCalls));
    assert_eq!((c1.op.as_str(), c1.cause.as_str()), ("cudaStreamSync", "preempted"));
    assert_eq!(
        c1.culprit,
        Some(Culprit {
            pid: 9912,
            tid: 9912,
            comm: "backup-rsync".into(),
            role: "took_cpu".into(),
            place: "container backup (docker abababababab)".into()
        })
    );
    assert!(
        c1.details
            .iter()
            .any(|d| d == "culprit: backup-rsync (pid 9912, tid 9912, in container backup (docker abababababab))"),
        "the chain names the culprit's container: {:?}",
        c1.details
    );
    assert_eq!((c1.calls, c1.stall_ns), (1, 41 * MS));
    assert!((c1.share - 41.0 / 68.0).abs() < 1e-12);
    assert!(c1.summary.contains("on CPU 1"), "{}", c1.summary);
    assert_eq!(c1.cpus, vec![causeway_analysis::CpuTime { cpu: 1, ns: 41 * MS }]);
    assert_eq!((c1.op_p50_ns, c1.op_p99_ns), (Some(8 * MS), Some(20 * MS)));
    // The worst call is the 48 ms sync itself; the timeline has its real timestamps.
    let worst = store.events_by_id(&c1.evidence.event_ids[..1]).unwrap();
    assert_eq!((worst[0].event.ts_ns, worst[0].event.dur_ns), (s50, 48 * MS));
    assert_eq!(c1.timeline[0].ts_ns, s50);
    assert_eq!((c1.timeline[1].ts_ns, c1.timeline[1].dur_ns), (s50 + 2 * MS, 41 * MS));
    assert!(c1.recommendations.iter().any(|r| r.contains("renice +19 -p 9912")), "{:?}", c1.recommendations);
    assert!(c1.details.iter().all(|d| !d.contains("Causeway itself")), "{:?}", c1.details);
    assert!(find_chain(&e, &c1.key).is_some_and(|c| c.id == "c1"));

    let by = |cause: &str| {
        e.chains
            .iter()
            .find(|c| c.kind == ChainKind::SlowCalls && c.cause == cause)
            .unwrap_or_else(|| panic!("no {cause} chain"))
    };
    let io = by("uninterruptible");
    assert_eq!((io.stall_ns, io.severity), (14 * MS, Severity::Medium));
    assert_eq!(
        io.culprit,
        Some(Culprit {
            pid: 7777,
            tid: 7777,
            comm: "nightly-backup".into(),
            role: "issued_io".into(),
            place: String::new()
        })
    );
    assert!(io.summary.contains("nightly-backup (pid 7777) kept the disk busy"), "{}", io.summary);
    assert!(
        io.details.iter().any(|d| d.contains("block_read of 1024 KiB on device 259:0 by pid 4242")),
        "{:?}",
        io.details
    );
    assert!(
        io.details.iter().any(|d| d.contains(
            "pid 7777 (nightly-backup) had block requests in flight for 9.00 ms of these waits (1 requests, 4096 KiB)"
        )),
        "{:?}",
        io.details
    );
    // Asleep inside a synchronize is the blocking-sync wait for the GPU: no host cause, no culprit.
    let gpu = by("gpu_wait");
    assert_eq!((gpu.stall_ns, gpu.severity, gpu.culprit.clone()), (2 * MS, Severity::Low, None));
    assert!(e.chains.iter().all(|c| c.cause != "sleep"));
    assert_eq!(by("runqueue_wait").stall_ns, 2 * MS);
    assert_eq!((by("on_cpu_or_gpu").stall_ns, by("on_cpu_or_gpu").severity), (9 * MS, Severity::Low));
    // Nested driver calls are part of their runtime call: never attributed on their own.
    assert!(e.chains.iter().all(|c| c.op != "cuStreamSynchronize"));
    // The slow-call chains partition the slow time exactly.
    let total: i64 = e.chains.iter().filter(|c| c.kind == ChainKind::SlowCalls).map(|c| c.stall_ns).sum();
    assert_eq!(total, e.slow_time_ns);
}

#[test]
fn the_tracer_taking_the_cpu_is_named_as_the_tracer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tracer.db");
    let mut t = Trace {
        names: vec![(4242, "train".into()), (31337, "causeway".into())],
        tracer_pid: 31337,
        ..Default::default()
    };
    let syncs = training_loop(&mut t, 4242, 4242, T0, 100, 1_800 * US, 10, &|i| if i == 50 { 48 * MS } else { 8 * MS });
    // The sync spins (no flags recorded: auto, 1 context on 1 CPU); the tracer's preemption ends
    // 50 us before the return, so it can have delayed it.
    t.preempted(4242, 4242, syncs[50] + 2 * MS, syncs[50] + 48 * MS - 50 * US, 1, (31337, 31340, "causeway-sqlite"));
    t.write(&path);
    let (_store, e) = explain_all(&path);
    let c1 = &e.chains[0];
    assert_eq!((c1.cause.as_str(), c1.culprit.as_ref().map(|c| c.pid)), ("preempted", Some(31337)));
    assert!(c1.details.iter().any(|d| d.contains("pid 31337 is Causeway itself")), "{:?}", c1.details);
    assert!(c1.recommendations[0].contains("effect of tracing"), "{:?}", c1.recommendations);
}

#[test]
fn clean_trace_blames_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clean.db");
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    let syncs = training_loop(&mut t, 4242, 4242, T0, 300, MS, 20, &|i| MS + (i as i64 * 37 % 500) * US);
    for (i, &sync) in syncs.iter().enumerate() {
        // Every sync sleeps while the GPU drains; every 10th is briefly preempted by a kworker.
        t.off_cpu(
            4242,
            4242,
            sync + 100 * US,
            sync + 900 * US,
            0,
            PrevState::Sleeping,
            (0, 0, "swapper/0"),
            sync + 880 * US,
            (0, 0),
        );
        if i % 10 == 0 {
            t.preempted(4242, 4242, sync + 910 * US, sync + 960 * US, 0, (77, 77, "kworker/0:1"));
        }
    }
    // Bursts of launches separated by syncs are not a throughput drop.
    t.write(&path);
    let (_, e) = explain_all(&path);
    assert!(e.chains.iter().all(|c| c.kind != ChainKind::ThroughputDrop), "{:#?}", e.chains);
    assert_eq!(e.slow_calls, 0);
    assert!(e.chains.iter().all(|c| c.severity != Severity::High), "{:#?}", e.chains);
    assert!(e.chains.iter().all(|c| c.culprit.is_none()), "{:#?}", e.chains);
    assert!(e.verdict.contains("no slow GPU calls") || e.verdict.contains("no HIGH"), "{}", e.verdict);
}

#[test]
fn feeding_thread_sleeping_on_a_dataloader_worker_is_starvation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("starved.db");
    let mut t = Trace { names: vec![(4300, "train".into()), (4301, "pt_data_worker".into())], ..Default::default() };
    let fast = training_loop(&mut t, 4300, 4300, T0, 50, 9 * MS, 5, &|_| MS);
    let slow_start = fast[49] + MS + 199 * MS;
    let slow = training_loop(&mut t, 4300, 4300, slow_start, 20, 199 * MS, 5, &|_| MS);
    // Between slow iterations the feeding thread sleeps until the worker hands it a batch.
    let mut expected_sleep = 0;
    let mut prev_end = fast[49] + MS;
    for s in &slow {
        let first_launch = s - 100 * US;
        let (out, wake, inn) = (prev_end + MS, first_launch - 3 * MS, first_launch - 2 * MS);
        t.off_cpu(4300, 4300, out, inn, 3, PrevState::Sleeping, (0, 0, "swapper/3"), wake, (4301, 4301));
        expected_sleep += wake - out;
        prev_end = s + MS;
    }
    t.write(&path);
    let (_, e) = explain_all(&path);
    let c1 = &e.chains[0];
    assert_eq!((c1.kind, c1.cause.as_str(), c1.severity), (ChainKind::FeedingGap, "sleep", Severity::High));
    assert_eq!(
        c1.culprit,
        Some(Culprit {
            pid: 4301,
            tid: 4301,
            comm: "pt_data_worker".into(),
            role: "woke_thread".into(),
            place: String::new()
        })
    );
    assert_eq!((c1.calls, c1.stall_ns, c1.tid), (20, expected_sleep, Some(4300)));
    assert!(c1.recommendations.iter().any(|r| r.contains("num_workers")));
    let drop = e.chains.iter().find(|c| c.kind == ChainKind::ThroughputDrop).expect("throughput drop");
    assert_eq!(drop.severity, Severity::High);
    assert_eq!(drop.evidence.event_ids.len(), 2);
}

#[test]
fn launches_syncs_and_allocations_of_every_api_count_in_the_detectors() {
    // A thread that launches through cuLaunchKernelEx and cuGraphLaunch and synchronizes after each
    // launch with cuStreamSynchronize (the driver API alone: no runtime call around them), and
    // allocates through the stream-ordered allocator, never freeing.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every_api.db");
    let mut t = Trace { names: vec![(4400, "vllm".into())], ..Default::default() };
    let mut ts = T0;
    let mut sync_ns = 0;
    for i in 0..40i64 {
        let launch = if i % 2 == 0 { op::CU_LAUNCH_KERNEL_EX } else { op::CU_GRAPH_LAUNCH };
        t.call(4400, 4400, launch, ts, 10 * US);
        let d = 2 * MS + (i % 3) * 100 * US;
        t.call(4400, 4400, op::CU_STREAM_SYNCHRONIZE, ts + 20 * US, d);
        sync_ns += d;
        ts += 20 * US + d + 500 * US;
    }
    for i in 0..12i64 {
        // cudaMallocAsync around its driver call; later allocations take 10x longer.
        let d = if i < 6 { 20 * US } else { 200 * US };
        let a = t.call(4400, 4400, op::CUDA_MALLOC_ASYNC, ts, d);
        (a.arg0, a.arg2) = (256 << 20, 0x7000_0000 + i);
        t.call(4400, 4400, op::CU_MEM_ALLOC_ASYNC, ts + US, d - 2 * US);
        ts += MS;
    }
    t.write(&path);
    let (_, e) = explain_all(&path);
    let storm = e.chains.iter().find(|c| c.kind == ChainKind::SyncStorm).expect("sync storm");
    assert_eq!((storm.calls, storm.stall_ns, storm.tid), (40, sync_ns, Some(4400)));
    assert!(storm.summary.contains("synchronized 40 times for 40 launches"), "{}", storm.summary);
    let growth = e.chains.iter().find(|c| c.kind == ChainKind::AllocatorLatency).expect("allocation latency growth");
    assert_eq!(growth.stall_ns, 6 * 180 * US);
    assert!(
        growth.details.iter().any(|d| d.contains("allocations by cudaMallocAsync; frees by none")),
        "{:?}",
        growth.details
    );
    let unfreed = e.chains.iter().find(|c| c.kind == ChainKind::AllocatorImbalance).expect("unfreed allocations");
    assert_eq!(unfreed.evidence.value, 12 * (256 << 20));
}

/// A training loop whose syncs spin (or not), preempted by a CPU hog; a launch preempted too.
/// Returns the trace and the total slow-call time.
fn spinning_trace(flags: &[(i64, causeway_model::codes::OpCode, i64)]) -> (Trace, i64) {
    let hog = (9912, 9912, "backup-rsync");
    let mut t = Trace { names: vec![(4242, "train".into()), (9912, "backup-rsync".into())], ..Default::default() };
    let syncs = training_loop(&mut t, 4242, 4242, T0, 100, 1_800 * US, 10, &|i| {
        if matches!(i, 50 | 60 | 70) {
            48 * MS
        } else {
            8 * MS
        }
    });
    // s50: preempted 2..43 ms, then 5 ms more of spinning: the GPU was still busy when it ended.
    t.preempted(4242, 4242, syncs[50] + 2 * MS, syncs[50] + 43 * MS, 1, hog);
    // s60: preempted 2..20 ms, then 30..47.9 ms, 100 us before the return: at most 17.9 ms.
    t.preempted(4242, 4242, syncs[60] + 2 * MS, syncs[60] + 20 * MS, 1, hog);
    t.preempted(4242, 4242, syncs[60] + 30 * MS, syncs[60] + 47_900 * US, 1, hog);
    // s70: preempted 2..5 ms, then asleep 12..40 ms: it blocked, whatever the policy says.
    t.preempted(4242, 4242, syncs[70] + 2 * MS, syncs[70] + 5 * MS, 1, hog);
    t.off_cpu(
        4242,
        4242,
        syncs[70] + 12 * MS,
        syncs[70] + 40 * MS,
        1,
        PrevState::Sleeping,
        (0, 0, "swapper/1"),
        syncs[70] + 40 * MS,
        (0, 0),
    );
    // A 30 ms launch on another thread, preempted 3..28 ms: a launch does not wait for the GPU.
    let launch = syncs[80];
    t.nested_call(4242, 4243, op::CUDA_LAUNCH_KERNEL, op::CU_LAUNCH_KERNEL, launch, 30 * MS);
    t.preempted(4242, 4243, launch + 3 * MS, launch + 28 * MS, 1, hog);
    for &(ts, code, f) in flags {
        let at = if ts < 0 { T0 + ts } else { syncs[ts as usize] + 48 * MS + MS };
        t.call(4242, 4242, code, at, 5 * US).arg0 = f;
    }
    (t, 3 * 48 * MS + 30 * MS)
}

#[test]
fn a_spinning_sync_blames_the_hog_only_for_the_last_preemption() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spin.db");
    let (t, slow_ns) = spinning_trace(&[]);
    t.write(&path);
    let (_, e) = explain_all(&path);
    assert_eq!(e.slow_time_ns, slow_ns);
    // Most of the slow time is the GPU's (the syncs spun while the GPU was still busy): the first
    // chain says so. The launch's preemption is all the hog's and comes next; the syncs' only where
    // it can have delayed them.
    let c0 = &e.chains[0];
    assert_eq!((c0.cause.as_str(), c0.severity), ("spin_gpu_busy", Severity::Medium), "{:#?}", e.chains);
    assert!(c0.details.iter().any(|d| d.contains("of slow-call time is GPU time")), "{:?}", c0.details);
    let c1 = &e.chains[1];
    assert_eq!(
        (c1.op.as_str(), c1.cause.as_str(), c1.stall_ns, c1.severity),
        ("cudaLaunchKernel", "preempted", 25 * MS, Severity::Medium)
    );
    let c2 =
        e.chains.iter().find(|c| c.op == "cudaStreamSync" && c.cause == "preempted").expect("the syncs' preemption");
    assert_eq!(
        (c2.op.as_str(), c2.cause.as_str(), c2.culprit.as_ref().map(|c| c.pid)),
        ("cudaStreamSync", "preempted", Some(9912))
    );
    assert_eq!((c2.calls, c2.stall_ns), (2, 17_900 * US + 3 * MS));
    // the headline says who and how much; the bound of what spinning let the preemption delay is
    // the first detail, whole
    assert!(c2.summary.contains("preempted by backup-rsync (pid 9912)"), "{}", c2.summary);
    assert!(
        c2.details[0].starts_with("2 of these cudaStreamSync calls spun on the CPU (scheduling: auto -> spin); of 76.90 ms preempted by backup-rsync (pid 9912, tid 9912), at most 17.90 ms can have delayed the return"),
        "{:?}",
        c2.details
    );
    assert!(c2.details[0].ends_with("59.00 ms overlapped GPU work"), "{}", c2.details[0]);
    assert!(c2.details.iter().any(|d| d.contains("auto -> spin (no scheduling flags recorded: the default; 1 context(s), 1 CPU(s) seen")), "{:?}", c2.details);
    assert!(c2.details.iter().any(|d| d.contains("the thread slept inside the call: it blocked")), "{:?}", c2.details);
    let busy = e.chains.iter().find(|c| c.cause == "spin_gpu_busy").expect("spin_gpu_busy chain");
    assert_eq!((busy.stall_ns, busy.severity, busy.culprit.clone(), busy.calls), (59 * MS, Severity::Medium, None, 2));
    assert!(
        busy.details.iter().any(|d| d.contains("backup-rsync (pid 9912, tid 9912): 59.00 ms")),
        "{:?}",
        busy.details
    );
    assert_eq!(e.chains.iter().find(|c| c.cause == "gpu_wait").map(|c| c.stall_ns), Some(28 * MS));
    assert!(e.notes.iter().any(|n| n.contains("1 distinct CPUs in this trace's sched_switch rows")), "{:?}", e.notes);
    // Nothing is lost: the slow-call chains still partition the slow time.
    let total: i64 = e.chains.iter().filter(|c| c.kind == ChainKind::SlowCalls).map(|c| c.stall_ns).sum();
    assert_eq!(total, e.slow_time_ns);
}

#[test]
fn blocking_sync_flags_keep_the_hog_blamed_until_spin_flags_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flags.db");
    // cudaDeviceScheduleBlockingSync before the loop; CU_CTX_SCHED_SPIN (with another bit) after s50.
    let (t, _) = spinning_trace(&[(-MS, op::CUDA_SET_DEVICE_FLAGS, 4), (50, op::CU_CTX_SET_FLAGS, 0x1 | 0x10)]);
    t.write(&path);
    let (_, e) = explain_all(&path);
    let c1 = &e.chains[0];
    assert_eq!((c1.op.as_str(), c1.cause.as_str(), c1.severity), ("cudaStreamSync", "preempted", Severity::High));
    assert_eq!(c1.stall_ns, 41 * MS + 17_900 * US + 3 * MS);
    assert!(
        c1.details[0]
            .contains("1 of these cudaStreamSync calls spun on the CPU (scheduling: spin); of 35.90 ms preempted"),
        "{:?}",
        c1.details
    );
    assert_eq!(e.chains.iter().find(|c| c.cause == "spin_gpu_busy").map(|c| c.stall_ns), Some(18 * MS));
}
