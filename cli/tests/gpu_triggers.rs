//! Windows the tracer opens itself (root, eBPF, ptrace): mock-cuda's `gpuloop` started untraced,
//! attached with `--gpu-trigger`. A host-side sleep in the loop leaves the mock GPU idle, so the
//! mock NVML's utilization (computed from the busy time the mock driver really ran,
//! `MOCK_NVML_UTIL=busy`) falls, the `util` trigger fires and the window stores, from the
//! pre-trigger buffer, the two seconds of kernels before the trigger; nothing outside the window.
//! The same sleep makes a labeled step slow, and the `step` trigger opens a window on the dormant
//! library at that step's end, and the mock vLLM's engine stall (its requests waiting, then
//! their first tokens' latency spike) opens one on the engine. Each trigger is a `trigger` note
//! saying what it saw.

mod common;

use std::time::Duration;

use common::attached_loop::{finished_as_untraced, notes, serial, start_loop_with, trace_pid_with};
use common::{causeway, query_u64, require_root_to};

#[test]
fn a_utilization_drop_opens_a_window_holding_the_seconds_before_it() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("util.db");
    let procs = dir.path().join("gpu-procs");
    std::fs::create_dir(&procs).unwrap();
    let procs_dir = procs.to_str().unwrap();
    // ~4.5 ms a step; the 1 s sleep comes some 5.5 s in, well after the attach (0.5 s)
    let child = start_loop_with(
        &["--steps", "2500", "--host-us", "200", "--sleep-at", "1200", "--sleep-ms", "1000"],
        &[("MOCK_GPU_PROCS_DIR", procs_dir)],
    );
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(500));
    let nvml = causeway_testdata::mock_cuda_build().join("libnvidia-ml.so.1");
    let (_, stderr) = trace_pid_with(
        &db,
        pid,
        &[
            "--nvml-hz",
            "10",
            "--nvml-lib",
            nvml.to_str().unwrap(),
            "--gpu-trigger",
            "util",
            "--gpu-trigger-window",
            "3s",
            "--gpu-pre-trigger",
            "2s",
            "--duration",
            "14s",
        ],
        &[("MOCK_NVML_UTIL", "busy"), ("MOCK_GPU_PROCS_DIR", procs_dir)],
    );
    finished_as_untraced(child, 2500);

    assert_eq!(notes(&db, "armed").len(), 1, "the buffer is armed at the hello: {stderr}");
    // the sleep's drop: a util trigger inside a pause of the kernels of 0.9 s or more (a busy host
    // may starve the loop now and then and fire one more)
    let triggers = notes(&db, "trigger");
    let pause_around = |t: i64| {
        query_u64(
            &db,
            &format!(
                "SELECT COALESCE((SELECT MIN(start_ns) FROM gpu_ops WHERE kind = 1 AND start_ns > {t}) - (SELECT MAX(end_ns) FROM gpu_ops WHERE kind = 1 AND end_ns <= {t}), 0)"
            ),
        )
    };
    let (fired_at, window_ms, said) = triggers
        .iter()
        .find(|t| t.2.starts_with("trigger util: ") && pause_around(t.0) >= 900_000_000)
        .unwrap_or_else(|| panic!("the sleep's utilization drop fired: {triggers:?}\n{stderr}"));
    let fired_at = *fired_at;
    assert!(said.starts_with("trigger util: GPU 0's utilization fell to "), "{said}");
    assert!(said.contains(&format!("opened on pid {pid}, with the pre-trigger buffer's seconds before it")), "{said}");
    assert_eq!(*window_ms, 3000);
    // its window: from (at most) 2 s before the trigger to (at least) 3 s after it
    let opened = notes(&db, "window_opened");
    let (from, _, why) = opened.iter().rev().find(|o| o.0 <= fired_at).expect("a window opened before the trigger");
    assert!(fired_at - from <= 2_000_000_000, "{opened:?}");
    assert!(why.contains("from the pre-trigger buffer: trigger util"), "{why}");
    let closed = notes(&db, "window_closed");
    let to = closed.iter().map(|c| c.0).find(|&c| c > fired_at).expect("the window closed");
    assert!(to >= fired_at + 3_000_000_000, "{closed:?}");
    let outside = query_u64(
        &db,
        "SELECT COUNT(*) FROM gpu_ops g WHERE NOT EXISTS (SELECT 1 FROM gpu_timeline_notes o WHERE o.kind = 'window_opened' AND o.ts_ns <= g.start_ns AND NOT EXISTS (SELECT 1 FROM gpu_timeline_notes c WHERE c.kind = 'window_closed' AND c.ts_ns > o.ts_ns AND c.ts_ns <= g.start_ns))",
    );
    assert_eq!(outside, 0, "nothing stored outside the windows");
    // the seconds before the trigger came from the buffer: the kernels before the sleep, tied
    let before = query_u64(
        &db,
        &format!("SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND start_ns >= {fired_at} - 2000000000 AND start_ns < {fired_at}"),
    );
    assert!(before >= 200, "kernels of the 2 s before the trigger: {before}");
    let tied = query_u64(
        &db,
        &format!(
            "SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND start_ns >= {fired_at} - 2000000000 AND start_ns < {fired_at} AND launch_tid = {pid} AND launch_start_ns > 0"
        ),
    );
    assert!(tied * 100 >= before * 95, "tied to their launches: {tied} of {before}");
    // the loop ran again within the window after its sleep
    let after = query_u64(
        &db,
        &format!("SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND start_ns > {fired_at} AND start_ns < {to}"),
    );
    assert!(after >= 100, "kernels after the sleep, in the window: {after}");

    // the answer states the state the trace was in
    let out = causeway().args(["stats", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "otherwise held 2 s in the tracer's memory (pre-trigger buffer) and not stored; triggers fired: util"
        ),
        "{text}"
    );
}

#[test]
fn a_slow_labeled_step_opens_a_window_on_the_dormant_library() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("step.db");
    let labels = dir.path().join("labels.sock");
    let labels_path = labels.to_str().unwrap();
    // the loop labels its steps once the tracer's label socket is there; step 900 sleeps 300 ms
    let child = start_loop_with(
        &["--steps", "2000", "--host-us", "200", "--sleep-at", "900", "--sleep-ms", "300"],
        &[("CAUSEWAY_LABELS", labels_path)],
    );
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(500));
    let (_, stderr) = trace_pid_with(
        &db,
        pid,
        &[
            "--nvml-hz",
            "0",
            "--labels-socket",
            labels_path,
            "--gpu-trigger",
            "step",
            "--gpu-trigger-window",
            "1s",
            "--duration",
            "9s",
        ],
        &[],
    );
    finished_as_untraced(child, 2000);

    assert_eq!(notes(&db, "dormant").len(), 1, "attached dormant: {stderr}");
    // (a step the host's noise made 1.5 times the median fires too, by the same rule as `steps`)
    let triggers = notes(&db, "trigger");
    let (fired_at, _, said) = triggers
        .iter()
        .find(|t| t.2.starts_with(&format!("trigger step: step 900 of pid {pid} took ")))
        .unwrap_or_else(|| panic!("the slept step fired: {triggers:?}"));
    // (a busy host's noise may have opened a window just before: then it was extended)
    assert!(
        said.ends_with(&format!("a window of 1 s opened on pid {pid}"))
            || said.ends_with(&format!("the open window on pid {pid} was extended to 1 s from now")),
        "{said}"
    );
    // the library opened it after the trigger, for 1 s, and closed it
    let opened = notes(&db, "window_opened");
    let (open_at, _, why) = opened
        .iter()
        .find(|o| o.2.contains("trigger step: step 900"))
        .unwrap_or_else(|| panic!("the library's window_opened names the trigger: {opened:?}"));
    assert!(open_at >= fired_at, "{opened:?}");
    assert!(
        why.starts_with("window of 1000 ms opened")
            || why.starts_with("the open window was extended to 1000 ms from now"),
        "{why}"
    );
    let closed = notes(&db, "window_closed");
    let close_at = closed.iter().map(|c| c.0).find(|c| c > open_at).expect("the window closed");
    assert!(close_at - open_at >= 900_000_000, "{opened:?} {closed:?}");
    let before = query_u64(&db, &format!("SELECT COUNT(*) FROM gpu_ops WHERE start_ns < {}", opened[0].0));
    assert_eq!(before, 0, "dormant before the first trigger");
    let inside = query_u64(
        &db,
        &format!("SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND start_ns >= {open_at} AND start_ns < {close_at}"),
    );
    assert!(inside >= 100, "the window's kernels: {inside}");
    let steps = query_u64(&db, &format!("SELECT COUNT(*) FROM events WHERE source = 10 AND pid = {pid}"));
    assert!(steps >= 100, "the loop's step labels reached the tracer that came later: {steps}");
}

#[test]
fn a_serving_stall_opens_a_window_on_the_engine() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("serving.db");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // the mock vLLM (tests/serving) started untraced; its engine stalls 1.2 s from 4 s on
    let build = causeway_testdata::mock_cuda_build();
    let engine = std::process::Command::new("python3")
        .env("PYTHONPATH", common::repo().join("tests/serving"))
        .env("MOCK_CUDA_KERNEL_US", "1000")
        .env_remove("CUDA_INJECTION64_PATH")
        .args(["-m", "vllm.entrypoints.openai.api_server", "--port", &port.to_string(), "--libcudart"])
        .arg(build.join("libcudart.so.12"))
        .args(["--seconds", "9", "--stall-at", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = engine.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default().contains("libcuda.so") {
        assert!(std::time::Instant::now() < deadline, "the mock engine never loaded libcuda");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, stderr) = trace_pid_with(
        &db,
        pid,
        &[
            "--nvml-hz",
            "0",
            "--serving-scrape-ms",
            "250",
            "--gpu-trigger",
            "serving",
            "--gpu-trigger-window",
            "3s",
            "--duration",
            "7s",
        ],
        &[],
    );
    let out = engine.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the engine: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let stall: Vec<i64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("stall_ns "))
        .unwrap_or_else(|| panic!("no stall_ns in {stdout}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();

    assert_eq!(notes(&db, "dormant").len(), 1, "attached dormant: {stderr}");
    let triggers = notes(&db, "trigger");
    // the stall (requests waiting, none served) or the first tokens' spike as it ends
    let (fired_at, _, said) = triggers
        .iter()
        .find(|t| t.2.starts_with("trigger serving: "))
        .unwrap_or_else(|| panic!("the stall fired: {triggers:?}\n{stderr}"));
    assert!(
        said.contains("served no request since its last scrape while") || said.contains(" of vLLM averaged "),
        "{said}"
    );
    assert!(said.ends_with(&format!("a window of 3 s opened on pid {pid}")), "{said}");
    // during the stall or as it ends (a scrape reads it: at most a scrape and a second late)
    assert!(*fired_at >= stall[0] && *fired_at <= stall[1] + 1_250_000_000, "{fired_at} against {stall:?}");
    let opened = notes(&db, "window_opened");
    let (open_at, _, why) = opened
        .iter()
        .find(|o| o.2.contains("trigger serving"))
        .unwrap_or_else(|| panic!("the library's window names the trigger: {opened:?}"));
    assert!(why.starts_with("window of 3000 ms opened"), "{why}");
    let before = query_u64(&db, &format!("SELECT COUNT(*) FROM gpu_ops WHERE start_ns < {}", opened[0].0));
    assert_eq!(before, 0, "dormant before the first trigger");
    // the engine's work once the stall ended, in the window
    let after = query_u64(
        &db,
        &format!("SELECT COUNT(*) FROM gpu_ops WHERE start_ns >= {open_at} AND start_ns > {}", stall[1]),
    );
    assert!(after >= 10, "the engine's device work after the stall: {after}");
}
