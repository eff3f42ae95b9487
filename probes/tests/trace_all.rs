//! `trace --all` live (root, eBPF): every process of the host that uses CUDA, whether it ran before
//! the tracer or started after it, and nothing else.
//!
//! One test in this binary on purpose: it traces the whole host, so a workload of a test running
//! beside it would be adopted too.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use causeway_model::codes::op;
use causeway_probes::TraceOptions;
use common::*;

fn spawn(program: &Path, args: &[&str], out: &Path) -> Child {
    Command::new(program)
        .args(args)
        .stdout(Stdio::from(std::fs::File::create(out).unwrap()))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

fn finish(mut c: Child, out: &Path) -> Workload {
    let status = c.wait().unwrap();
    assert!(status.success(), "workload failed: {status}");
    Workload::parse(&std::fs::read_to_string(out).unwrap())
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A copy of the mock libraries and one workload in a directory of their own: files the tracer has
/// never seen (new inodes), as a container's own CUDA libraries are.
fn private_copy(build: &Path, dir: &Path) -> PathBuf {
    for f in ["libcudart.so.12", "libcuda.so.1", "late_dlopen"] {
        std::fs::copy(build.join(f), dir.join(f)).unwrap();
    }
    dir.join("late_dlopen")
}

#[test]
fn every_cuda_process_is_traced_whenever_it_starts_and_nothing_else() {
    require_root();
    let build = mock_build();
    let dir = tempfile::tempdir().unwrap();
    let copy_dir = dir.path().join("container");
    std::fs::create_dir(&copy_dir).unwrap();
    let late_copy = private_copy(&build, &copy_dir);

    // before the tracer: a CUDA workload and a process that never touches CUDA
    let steady_out = dir.path().join("steady.txt");
    let steady = spawn(&build.join("steady"), &["--ms", "5000", "--launches", "2"], &steady_out);
    let bystander = Command::new("sleep").arg("30").spawn().unwrap();
    let steady_pid = steady.id();
    wait_for("the steady workload to map CUDA", Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{steady_pid}/maps")).is_ok_and(|m| m.contains("libcudart"))
    });

    let sink = MemSink::default();
    let opts = TraceOptions { all: true, all_rescan_ms: 200, ..Default::default() };
    let stop = opts.stop.clone();
    // every pid the traced set held, second by second
    let ever_traced = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let tracer = {
        let sink = sink.clone();
        let ever = ever_traced.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(causeway_probes::trace(opts, Box::new(sink), move |s| {
                ever.lock().unwrap().extend(s.traced_pids.iter().copied())
            }))
        })
    };
    // the running workload is adopted at the start
    wait_for("the running workload's libraries to be attached", Duration::from_secs(20), || {
        sink.0.lock().unwrap().attachments.iter().any(|a| a.pid == steady_pid)
    });

    // after the tracer: the same library files (probed already): traced from the first call
    let train_out = dir.path().join("train.txt");
    let train = spawn(&build.join("train"), &["--iters", "30", "--churn", "4"], &train_out);
    // after the tracer, libraries nobody probed yet, loaded late: found by the loader's notice
    let late_out = dir.path().join("late.txt");
    let late = spawn(&late_copy, &["--delay-us", "200000", "--settle-us", "1000000", "--iters", "12"], &late_out);

    let train_w = finish(train, &train_out);
    let late_w = finish(late, &late_out);
    let steady_w = finish(steady, &steady_out);
    std::thread::sleep(Duration::from_millis(600));
    stop.store(true, Ordering::Relaxed);
    let report = tracer.join().unwrap().expect("the --all trace ends cleanly");
    let mut bystander = bystander;
    let _ = bystander.kill();
    let _ = bystander.wait();
    let c = std::mem::take(&mut *sink.0.lock().unwrap());

    // started later, through probed files: every call from the first one, exactly
    assert_calls_exact(&train_w, &c.events);
    let train_rows: Vec<_> = c.attachments.iter().filter(|a| a.pid == train_w.pid).collect();
    assert!(!train_rows.is_empty() && train_rows.iter().all(|a| a.complete), "{train_rows:?}");

    // started later with its own copy of the libraries: adopted at the load, calls after it recorded
    let late_rows: Vec<_> = c.attachments.iter().filter(|a| a.pid == late_w.pid).collect();
    assert!(
        late_rows.iter().any(|a| a.path.starts_with(copy_dir.to_str().unwrap()) && a.kind == "runtime"),
        "the private runtime copy is attached for the late process: {late_rows:?}"
    );
    let late_frees = count(&c.events, late_w.pid, op::CUDA_FREE.source, op::CUDA_FREE.op);
    assert_eq!(late_frees, late_w.calls(&["cudaFree"]), "every free after the settle is recorded");
    assert_eq!(count(&c.events, late_w.pid, op::CUDA_DEVICE_SYNC.source, op::CUDA_DEVICE_SYNC.op), 1);

    // running before: traced from the start on, with its scheduling
    let steady_calls = c.events.iter().filter(|e| e.pid == steady_w.pid && e.source == 1).count();
    assert!(steady_calls > 0, "the workload running before the trace is traced");
    assert!(
        c.events
            .iter()
            .any(|e| e.pid == steady_w.pid && (e.source, e.op) == (op::SCHED_SWITCH.source, op::SCHED_SWITCH.op)),
        "its threads' scheduling is traced too"
    );

    // nothing else: not the bystander, not the tracer (they may appear in a traced thread's story,
    // as its waker or as a process whose block I/O ran beside it, never with calls or switches of
    // their own)
    let ever = ever_traced.lock().unwrap().clone();
    // (sampled once a second: the short workloads may start and end between two samples)
    assert!(ever.contains(&steady_w.pid), "the long workload never showed in the traced set: {ever:?}");
    for pid in [bystander.id(), std::process::id()] {
        assert!(!ever.contains(&pid), "pid {pid} never used CUDA and must not be traced");
        let own: Vec<_> = c
            .events
            .iter()
            .filter(|e| e.pid == pid)
            .filter(|e| {
                [1, 4, 8, 9].contains(&e.source) || (e.source, e.op) == (op::SCHED_SWITCH.source, op::SCHED_SWITCH.op)
            })
            .take(5)
            .collect();
        assert!(own.is_empty(), "pid {pid} never used CUDA and must not be traced: {own:?}");
    }
    // processes that exited were followed to their end and dropped
    for pid in [train_w.pid, late_w.pid, steady_w.pid] {
        assert!(count(&c.events, pid, op::PROCESS_EXIT.source, op::PROCESS_EXIT.op) >= 1, "pid {pid}: no exit");
        assert!(!report.traced_pids.contains(&pid), "pid {pid} exited but is still in the traced set");
    }
    assert!(report.losses.is_empty(), "{:?}", report.losses);
}
