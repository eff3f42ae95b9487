//! Kernel names through a real native trace: stats per kernel (exact nearest-rank over the launch
//! calls, APIs, configurations), what the trace could not see (attachments), the kernel of a slow
//! launch in explain's chain, and stacks filtered by kernel name.

mod common;

use causeway_analysis::{compute_stats, StatsRequest};
use causeway_analysis::{explain, ExplainRequest};
use causeway_analysis::{kernel_filter_words, top_stacks, StacksRequest};
use causeway_analysis::{timeline, TimelineRequest};
use causeway_backends::{QueryLimits, SqliteStore, TraceStore};
use causeway_model::codes::op;
use common::kernel_trace::kernel_trace;
use common::*;

#[test]
fn stats_by_kernel_are_exact_and_say_what_the_trace_cannot_see() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.db");
    kernel_trace(&path);
    let store = SqliteStore::open(&path).unwrap();
    let s = compute_stats(&store, &StatsRequest { by_kernel: true, ..Default::default() }).unwrap();
    let k = s.kernels.as_ref().expect("kernel figures");
    assert_eq!(
        (k.launches, k.nested_launches, k.named_launches, k.kernels_total, k.names_recorded),
        (31, 20, 31, 2, 2)
    );
    assert!(k.note.contains("on the host") && k.note.contains("not of the kernels on the GPU"), "{}", k.note);
    let gemm = &k.kernels[0];
    assert_eq!(gemm.kernel, "gemm_sm90_tma");
    assert_eq!(
        (gemm.launches, gemm.p50_us, gemm.p99_us, gemm.max_us, gemm.sum_us),
        (11, 5.0, 30_000.0, 30_000.0, 30_050.0)
    );
    assert_eq!(gemm.apis.get("cuLaunchKernelEx"), Some(&11));
    assert_eq!(gemm.configs.len(), 2);
    assert_eq!(
        (gemm.configs[0].grid, gemm.configs[0].cluster, gemm.configs[0].shared_mem_bytes, gemm.configs[0].launches),
        ([132, 1, 1], [2, 1, 1], 232_448, 6)
    );
    assert_eq!((gemm.configs[1].block, gemm.configs[1].launches), ([256, 1, 1], 5));
    let va = &k.kernels[1];
    assert_eq!(
        (va.kernel.as_str(), va.mangled.as_deref()),
        ("vector_add(float*, float*, int)", Some("_Z10vector_addPfS_i"))
    );
    assert_eq!((va.launches, va.p50_us, va.p90_us, va.p95_us, va.p99_us), (20, 10.0, 18.0, 19.0, 20.0));
    assert_eq!(va.apis.keys().collect::<Vec<_>>(), vec!["cudaLaunchKernel"], "the driver call inside counts with it");
    assert_eq!((va.configs.len(), va.configs[0].launches, va.launches_without_config), (1, 20, 0));
    assert_eq!(
        s.coverage,
        vec![
            "pid 812: only driver calls are visible: the CUDA runtime is statically linked without symbols (in /opt/app/server)".to_string(),
            // From the trace's first event (the first launch, 10 ms after T0).
            "calls of pid 5000 through libcudart.so.12 before +1.200 s are unknown: its probes were attached then, after the process could call it".to_string(),
        ]
    );
    // Without group-by, no kernel figures, but the coverage is always said.
    let plain = compute_stats(&store, &StatsRequest { pid: Some(812), ..Default::default() }).unwrap();
    assert!(plain.kernels.is_none());
    assert_eq!(plain.coverage.len(), 1);
}

#[test]
fn explain_names_the_kernel_of_a_slow_launch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.db");
    kernel_trace(&path);
    let store = SqliteStore::open(&path).unwrap();
    let e = explain(&store, &ExplainRequest { top: 50, ..Default::default() }).unwrap();
    let c = e
        .chains
        .iter()
        .find(|c| c.op == "cuLaunchKernelEx" && c.cause == "preempted")
        .expect("the slow launch's chain");
    assert_eq!(c.stall_ns, 26 * MS);
    assert_eq!(
        c.kernels,
        vec![causeway_analysis::ChainKernel { kernel: "gemm_sm90_tma".into(), calls: 1, ns: 26 * MS }]
    );
    assert!(c.details.iter().any(|d| d == "kernels: gemm_sm90_tma (1 calls, 26.00 ms)"), "{:?}", c.details);
    assert!(
        c.timeline[0].what.starts_with("cuLaunchKernelEx of gemm_sm90_tma on tid 5000 took 30.00 ms"),
        "{}",
        c.timeline[0].what
    );
    let r = store.query(&c.evidence.sql, &QueryLimits::default()).unwrap();
    assert_eq!(r.rows[0][0].as_i64(), Some(c.evidence.value));
    // Chains of other ops name no kernel.
    assert!(e.chains.iter().filter(|c| !c.op.starts_with("cuLaunchKernel")).all(|c| c.kernels.is_empty()));
    // The stack behind the slow launch, and the user's own line (not torch's) in the recommendation.
    assert_eq!(c.stacks.len(), 1);
    let s = &c.stacks[0];
    assert_eq!((s.stack_hash, s.calls, s.frames.len()), (0x77, 1, 6));
    assert_eq!(s.user_frame.as_deref(), Some("/app/model.py:9 in matmul"));
    assert_eq!(s.frames[1].text, "at::native::gemm()+0x3a", "native frames demangled");
    assert!(
        c.recommendations.iter().any(|r| r.starts_with(
            "Start in matmul (/app/model.py:9), the Python line behind 1 of this chain's 1 worst calls with a stack"
        )),
        "{:?}",
        c.recommendations
    );
    // The vector_add launches are not slow: no chain of theirs, so no stack of 0x55 in any chain.
    assert!(e.chains.iter().flat_map(|c| &c.stacks).all(|s| s.stack_hash != 0x55));
}

#[test]
fn the_timeline_says_where_each_call_was_made() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.db");
    kernel_trace(&path);
    let store = SqliteStore::open(&path).unwrap();
    let e = explain(&store, &ExplainRequest { top: 50, ..Default::default() }).unwrap();
    let c = e.chains.iter().find(|c| c.op == "cuLaunchKernelEx" && c.cause == "preempted").unwrap();
    let around = c.evidence.event_ids[0].clone();
    let req = TimelineRequest { around: Some(around.clone()), around_ns: 3 * MS, ..Default::default() };
    let r = timeline(&store, &req).unwrap();
    let entries: Vec<_> = r.threads.iter().flat_map(|t| &t.entries).collect();
    let slow = entries.iter().find(|e| e.id == around).expect("the slow launch");
    assert_eq!(
        slow.stack,
        vec!["/app/model.py:9 in matmul", "/app/train.py:30 in step", "/app/train.py:51 in <module>"]
    );
    // the driver calls under the runtime launches were recorded without a stack
    assert!(entries.iter().filter(|e| e.op == "cuLaunchKernel").all(|e| e.stack.is_empty()));
    assert!(entries.iter().filter(|e| e.kind == "off_cpu").all(|e| e.stack.is_empty()));
}

#[test]
fn stacks_filter_by_kernel_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.db");
    kernel_trace(&path);
    let store = SqliteStore::open(&path).unwrap();
    let r = top_stacks(&store, &StacksRequest { kernel: Some("GEMM".into()), ..Default::default() }).unwrap();
    assert_eq!((r.calls, r.calls_with_stack, r.distinct_stacks), (11, 11, 1));
    assert_eq!(r.by_count[0].stack_hash, 0x77);
    assert_eq!((r.kernels.clone(), r.kernels_matched), (vec!["gemm_sm90_tma".to_string()], Some(1)));
    assert!(kernel_filter_words(&r).unwrap().contains("1 kernel(s) whose name contains 'GEMM': gemm_sm90_tma"));
    // By mangled name, and only through the op asked for.
    let r = top_stacks(
        &store,
        &StacksRequest { kernel: Some("_z10vector".into()), op: Some(op::CUDA_LAUNCH_KERNEL), ..Default::default() },
    )
    .unwrap();
    assert_eq!((r.calls, r.by_count[0].stack_hash), (20, 0x55));
    let r = top_stacks(&store, &StacksRequest { kernel: Some("softmax".into()), ..Default::default() }).unwrap();
    assert_eq!((r.calls, r.kernels_matched), (0, Some(0)));
    assert!(kernel_filter_words(&r).unwrap().starts_with("no recorded kernel name contains 'softmax'"));
    // A kernel filter with an op that launches no kernel is refused.
    assert!(top_stacks(
        &store,
        &StacksRequest { kernel: Some("gemm".into()), op: Some(op::CUDA_MALLOC), ..Default::default() }
    )
    .is_err());
}
