//! Borrowed Python stacks through a real native trace: a PyTorch-like backward pass whose kernels
//! an autograd thread without Python frames launches while the main thread sleeps in
//! `loss.backward()` (its last call the seed's launch in torch's `_make_grads`, woken by the
//! autograd thread at the end), beside a pin-memory thread asleep on its queue (woken by a timer)
//! and a process that runs no Python. `stacks`, explain's chain stacks and the timeline show the
//! autograd thread's calls at `train.py:44`, marked as borrowed from the main thread.

mod common;

use causeway_analysis::{explain, timeline, top_stacks, ExplainRequest, StacksRequest, TimelineRequest};
use causeway_backends::{SqliteStore, StackRecord};
use causeway_model::codes::op;
use causeway_model::PrevState;
use common::*;

const PID: u32 = 5000; // the main thread
const AUTOGRAD: u32 = 5001;
const PIN: u32 = 5002;
const NATIVE: u32 = 6000; // a process that runs no Python

fn stack(hash: i64, frames: &str) -> StackRecord {
    StackRecord { hash, ips: "[]".into(), frames: frames.into() }
}

fn backward_trace(path: &std::path::Path) {
    let mut t = Trace {
        names: vec![(PID, "python3".into()), (NATIVE, "server".into()), (9912, "hog".into())],
        stacks: vec![
            stack(
                0xa1,
                r#"[{"s":"cudaLaunchKernel+0x10","f":"libcudart.so.12"},
                {"pf":"/venv/lib/python3.12/site-packages/torch/autograd/__init__.py","pfn":"_make_grads","pl":88},
                {"pf":"/venv/lib/python3.12/site-packages/torch/autograd/__init__.py","pfn":"backward","pl":340},
                {"pf":"/venv/lib/python3.12/site-packages/torch/_tensor.py","pfn":"backward","pl":581},
                {"pf":"/app/train.py","pfn":"<module>","pl":44}]"#,
            ),
            stack(
                0xa2,
                r#"[{"s":"cudaLaunchKernel+0x10","f":"libcudart.so.12"},
                {"pf":"/venv/lib/python3.12/site-packages/torch/optim/adam.py","pfn":"step","pl":200},
                {"pf":"/app/train.py","pfn":"<module>","pl":45}]"#,
            ),
            stack(
                0xb1,
                r#"[{"s":"cudaLaunchKernel+0x10","f":"libcudart.so.12"},
                {"s":"_ZN5torch8autograd6Engine11thread_mainEv+0x90","f":"libtorch_cpu.so"}]"#,
            ),
            stack(
                0xc1,
                r#"[{"s":"cudaHostAlloc+0x10","f":"libcudart.so.12"},
                {"pf":"/venv/lib/python3.12/site-packages/torch/utils/data/_utils/pin_memory.py","pfn":"_pin_memory_loop","pl":55}]"#,
            ),
            stack(0xd1, r#"[{"s":"cudaLaunchKernel+0x10","f":"libcudart.so.12"},{"s":"serve+0x4","f":"server"}]"#),
        ],
        ..Default::default()
    };
    let sleep = |t: &mut Trace, tid: u32, out: i64, inn: i64, waker: u32| {
        let wake = if waker == 0 { 0 } else { inn - 10 * US };
        t.off_cpu(PID, tid, out, inn, 0, PrevState::Sleeping, (0, 0, "swapper/0"), wake, (PID, waker));
    };
    // the pin-memory thread: a call of its own, then asleep on its queue until a timer wakes it
    t.call(PID, PIN, op::CUDA_HOST_ALLOC, T0 + 5 * MS, 20 * US).stack_hash = 0xc1;
    sleep(&mut t, PIN, T0 + 6 * MS, T0 + 200 * MS, 0);
    // the main thread: the seed's launch, asleep in the engine, woken by the autograd thread
    t.call(PID, PID, op::CUDA_LAUNCH_KERNEL, T0 + 10 * MS, 8 * US).stack_hash = 0xa1;
    sleep(&mut t, PID, T0 + 11 * MS, T0 + 80 * MS, AUTOGRAD);
    t.call(PID, PID, op::CUDA_LAUNCH_KERNEL, T0 + 81 * MS, 8 * US).stack_hash = 0xa2;
    // the autograd thread: woken by the main thread's request, launches, one launch preempted
    sleep(&mut t, AUTOGRAD, T0 + 2 * MS, T0 + 11 * MS + 50 * US, PID);
    for i in 0..10 {
        t.call(PID, AUTOGRAD, op::CUDA_LAUNCH_KERNEL, T0 + 15 * MS + i * MS, 6 * US).stack_hash = 0xb1;
    }
    t.call(PID, AUTOGRAD, op::CUDA_LAUNCH_KERNEL, T0 + 30 * MS, 28 * MS).stack_hash = 0xb1;
    t.preempted(PID, AUTOGRAD, T0 + 31 * MS, T0 + 57 * MS, 1, (9912, 9912, "hog"));
    // a process without Python: nothing to borrow, however its threads sleep
    t.call(NATIVE, NATIVE, op::CUDA_LAUNCH_KERNEL, T0 + 10 * MS, 8 * US).stack_hash = 0xd1;
    t.off_cpu(
        NATIVE,
        NATIVE + 1,
        T0 + 11 * MS,
        T0 + 80 * MS,
        0,
        PrevState::Sleeping,
        (0, 0, "swapper/0"),
        0,
        (NATIVE, NATIVE),
    );
    t.call(NATIVE, NATIVE + 1, op::CUDA_LAUNCH_KERNEL, T0 + 20 * MS, 8 * US).stack_hash = 0xd1;
    t.write(path);
}

const WORDS: &str = "borrowed from thread 5000 (blocked in backward() at /app/train.py:44 in <module>)";

#[test]
fn the_autograd_threads_launches_borrow_the_line_the_main_thread_waits_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backward.db");
    backward_trace(&path);
    let store = SqliteStore::open(&path).unwrap();

    let r = top_stacks(&store, &StacksRequest::default()).unwrap();
    assert_eq!((r.calls_borrowed, r.calls_ambiguous), (11, 0), "{r:#?}");
    let autograd = r.by_count.iter().find(|s| s.stack_hash == 0xb1).unwrap();
    assert_eq!(autograd.borrowed.len(), 1);
    let b = &autograd.borrowed[0];
    assert_eq!((b.calls, b.stack.from_tid, b.stack.woken), (11, PID, true));
    assert_eq!(b.stack.evidence, causeway_analysis::LendEvidence::LastCall);
    assert_eq!(b.stack.words, WORDS);
    assert_eq!(b.stack.frames.len(), 4, "the seed's Python frames");
    assert_eq!(b.stack.user_frame.as_deref(), Some("/app/train.py:44 in <module>"));
    // the other stacks are their threads' own, and the process without Python borrows nothing
    assert!(r.by_count.iter().filter(|s| s.stack_hash != 0xb1).all(|s| s.borrowed.is_empty()));
    // a window holding only the autograd thread's calls: the main thread's are read around them
    let window = causeway_model::time::TimeWindow { from_ns: Some(T0 + 14 * MS), to_ns: Some(T0 + 70 * MS) };
    let r = top_stacks(&store, &StacksRequest { window, ..Default::default() }).unwrap();
    assert_eq!((r.calls, r.calls_borrowed), (12, 11), "{r:#?}");

    // explain: the preempted launch's chain stands at the borrowed line
    let e = explain(&store, &ExplainRequest { top: 50, ..Default::default() }).unwrap();
    let c = e.chains.iter().find(|c| c.cause == "preempted").expect("the preempted launch's chain");
    let s = &c.stacks[0];
    assert_eq!(s.stack_hash, 0xb1);
    assert_eq!(s.borrowed.as_ref().map(|b| b.words.as_str()), Some(WORDS));
    assert_eq!(s.user_frame.as_deref(), Some("/app/train.py:44 in <module>"));
    assert!(
        c.recommendations.iter().any(|r| r.starts_with("Start in <module> (/app/train.py:44)")
            && r.ends_with("(borrowed from the Python thread they ran for)")),
        "{:?}",
        c.recommendations
    );

    // the timeline says it under the call
    let slow = c.evidence.event_ids[0].clone();
    let r =
        timeline(&store, &TimelineRequest { around: Some(slow.clone()), around_ns: MS, ..Default::default() }).unwrap();
    let entry = r.threads.iter().flat_map(|t| &t.entries).find(|e| e.id == slow).unwrap();
    assert_eq!(entry.stack, vec!["/app/train.py:44 in <module>"]);
    assert_eq!(entry.stack_borrowed.as_deref(), Some(WORDS));
}
