//! The device timeline of a job already running (root, eBPF, ptrace): mock-cuda's `gpuloop` started
//! without `CUDA_INJECTION64_PATH`, then `causeway trace --pid P --gpu-timeline` loads the injection
//! library into it mid-run. Its device ops from the attach on are stored and tied to their launches,
//! its output and exit status are what they are untraced, the pause of its main thread is in the
//! trace; a dormant attach records only in the windows `causeway gpu-window` opens; every process
//! that must be left alone (stopped, already traced, under seccomp, not a CUDA process, exiting
//! during the attach) gets a clear line and runs on as it was; `trace --all --gpu-timeline`
//! attaches the CUDA processes it adopts, running before it or started later.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::attached_loop::{finished_as_untraced, notes, serial, start_loop, trace_pid};
use common::{causeway, query_rows, query_u64, require_root_to};

#[test]
fn a_running_loop_attached_mid_run_gets_its_device_timeline_from_the_attach_on() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("attach.db");
    // about 4.3 ms a step: 1500 steps run some 6.5 s, the trace takes 3 s of them
    let child = start_loop(&["--steps", "1500", "--host-us", "200"]);
    std::thread::sleep(Duration::from_millis(500));
    let (_, stderr) = trace_pid(&db, child.id(), &["--duration", "3s"]);
    finished_as_untraced(child, 1500);

    let attached = notes(&db, "attached");
    assert_eq!(attached.len(), 1, "{stderr}");
    let (attach_ts, held_ns, said) = &attached[0];
    assert!(*held_ns > 0 && *held_ns < 2_000_000_000, "the main thread's pause is measured: {held_ns} ns ({said})");
    assert!(said.contains("main thread was held") && said.contains("other threads ran throughout"), "{said}");
    assert_eq!(notes(&db, "dormant").len(), 1, "the library says it started dormant");
    let opened = notes(&db, "window_opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!(opened[0].2.contains("the whole trace"), "{opened:?}");
    assert_eq!(notes(&db, "window_closed").len(), 1, "the stop closes the window: its last records come first");

    // device ops only from the attach on, nearly all tied to the traced cudaLaunchKernel
    let kernels = query_u64(&db, "SELECT COUNT(*) FROM gpu_ops WHERE kind = 1");
    assert!(kernels >= 400, "3 s of 4 kernels a step should give many hundred kernels, got {kernels}");
    let before = query_u64(&db, &format!("SELECT COUNT(*) FROM gpu_ops WHERE start_ns < {attach_ts} - 5000000"));
    assert_eq!(before, 0, "nothing from before the attach");
    let tied =
        query_u64(&db, "SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND launch_tid <> 0 AND launch_start_ns > 0");
    assert!(tied * 100 >= kernels * 95, "kernels tied to their launches: {tied} of {kernels}");
    let names = query_u64(&db, "SELECT COUNT(DISTINCT name) FROM gpu_ops WHERE kind = 1");
    assert_eq!(names, 4, "gpuloop's four kernels");
    assert!(query_u64(&db, "SELECT COUNT(*) FROM gpu_devices") >= 1, "the device was dumped at the late enable");

    // the answer states the state the trace was in
    let out = causeway().args(["stats", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("attached"), "stats says the device view was attached: {text}");
}

/// Opens a window through `causeway gpu-window` (retried until the tracer serves the process); what
/// it printed.
fn cli_window(pid: u32, args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = causeway().args(["gpu-window", "--pid", &pid.to_string()]).args(args).output().unwrap();
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(Instant::now() < deadline, "no window: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One `tools/call` of `open_gpu_window` through `causeway mcp --allow-capture` over stdio (a real
/// MCP exchange: initialize, initialized, the call); the result object.
fn mcp_window(arguments: serde_json::Value) -> serde_json::Value {
    use std::io::{BufRead, Write};
    let mut server = causeway()
        .args(["mcp", "--allow-capture"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "open_gpu_window", "arguments": arguments}});
    for m in [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "gpu_attach test", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call,
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let reader = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut result = serde_json::Value::Null;
    for line in reader.lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["id"] == 2 {
            result = v["result"].clone();
            break;
        }
    }
    drop(stdin);
    let _ = server.wait();
    result
}

#[test]
fn a_dormant_attach_records_only_in_the_windows_the_cli_and_an_mcp_client_open() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("windows.db");
    let child = start_loop(&["--steps", "2500", "--host-us", "200"]);
    let pid = child.id();
    // the default device-timeline socket (the runtime directory), which gpu-window and the MCP
    // server find by themselves
    let trace = causeway()
        .args(["trace", "--nvml-hz", "0", "--gpu-timeline", "--gpu-dormant", "--gpu-library"])
        .arg(causeway_testdata::inject_library())
        .args(["--pid", &pid.to_string(), "--duration", "8s", "--db"])
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = cli_window(pid, &["--for", "1s", "--why", "the test's window"]);
    assert!(said.contains("window of 1 s is opening") && said.contains(&pid.to_string()), "{said}");
    std::thread::sleep(Duration::from_millis(1500));
    // an MCP client opens the second window and closes it early
    let opened = mcp_window(serde_json::json!({"pid": pid, "seconds": 30, "why": "the agent's window"}));
    assert_ne!(opened["isError"], true, "{opened}");
    assert!(
        opened["structuredContent"]["summary"].as_str().unwrap_or("").contains("window of 30 s is opening"),
        "{opened}"
    );
    std::thread::sleep(Duration::from_millis(800));
    let closed = mcp_window(serde_json::json!({"pid": pid, "close": true, "why": "enough seen"}));
    assert_ne!(closed["isError"], true, "{closed}");
    // a process nobody attached is refused, saying so
    let refused = mcp_window(serde_json::json!({"pid": 1, "seconds": 1}));
    assert_eq!(refused["isError"], true, "{refused}");
    let out = trace.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    finished_as_untraced(child, 2500);

    let opened = notes(&db, "window_opened");
    assert_eq!(opened.len(), 2, "{opened:?}");
    assert!(opened[0].2.contains("cli (causeway gpu-window): the test's window"), "who and why: {opened:?}");
    assert!(opened[1].2.contains("mcp (open_gpu_window): the agent's window"), "who and why: {opened:?}");
    let closed = notes(&db, "window_closed");
    assert_eq!(closed.len(), 2, "{closed:?}");
    assert!(closed[0].2.contains("its time ran out"), "{closed:?}");
    assert!(closed[1].2.contains("closed by mcp (open_gpu_window): enough seen"), "{closed:?}");
    let ops = query_u64(&db, "SELECT COUNT(*) FROM gpu_ops WHERE kind = 1");
    assert!(ops >= 100, "about two seconds of kernels: {ops}");
    let mut inside = 0;
    for (open, close) in opened.iter().zip(&closed) {
        inside += query_u64(
            &db,
            &format!(
                "SELECT COUNT(*) FROM gpu_ops WHERE start_ns >= {} - 5000000 AND start_ns <= {} + 5000000",
                open.0, close.0
            ),
        );
    }
    assert_eq!(inside, query_u64(&db, "SELECT COUNT(*) FROM gpu_ops"), "dormant outside the windows");
    // the dormant time between the windows is a hole: no idle gap there, nothing blamed for it
    let out = causeway().args(["explain", "--json", "--db"]).arg(&db).output().unwrap();
    let explain: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(explain["device"]["gaps"].is_array(), "explain has the device view: {}", explain["device"]);
    let gaps = explain["device"]["gaps"].as_array().cloned().unwrap_or_default();
    for g in &gaps {
        let (s, e) = (g["start_ns"].as_i64().unwrap_or(0), g["end_ns"].as_i64().unwrap_or(0));
        assert!(!(s < opened[1].0 && e > closed[0].0), "a gap over the dormant time: {g}");
    }
}

/// A trace of `pid` that must leave it alone: the trace succeeds and its note says `why`.
fn refused(pid: u32, why: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("refused.db");
    let (_, stderr) = trace_pid(&db, pid, &["--duration", "1s"]);
    assert!(stderr.contains(&format!("no device timeline for pid {pid}")) && stderr.contains(why), "{why}: {stderr}");
    assert_eq!(query_u64(&db, "SELECT COUNT(*) FROM gpu_timeline_notes WHERE kind = 'attached'"), 0);
}

#[test]
fn processes_that_must_be_left_alone_are_left_running_as_they_were() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();

    // stopped (SIGSTOP): refused, still stopped, runs on when continued
    let child = start_loop(&["--steps", "300", "--host-us", "200"]);
    let pid = child.id();
    unsafe_kill(pid, libc::SIGSTOP);
    refused(pid, "is stopped");
    let state = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(state.contains("State:\tT"), "still stopped: {state}");
    unsafe_kill(pid, libc::SIGCONT);
    finished_as_untraced(child, 300);

    // under a seccomp filter
    let child = start_loop(&["--steps", "300", "--host-us", "200", "--seccomp", "1"]);
    refused(child.id(), "seccomp filter");
    finished_as_untraced(child, 300);

    // already traced by another tracer (strace holds it)
    let child = start_loop(&["--steps", "600", "--host-us", "200"]);
    let pid = child.id();
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=none", "-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace (Debian's strace package, installed by scripts/install-test-deps.sh)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .contains(&format!("TracerPid:\t{}", strace.id()))
    {
        assert!(Instant::now() < deadline, "strace never attached");
        std::thread::sleep(Duration::from_millis(20));
    }
    refused(pid, "already traced by pid");
    let _ = strace.kill();
    let _ = strace.wait();
    finished_as_untraced(child, 600);

    // busy on the CPU with no system call for longer than the attach waits: given up, untouched
    let child = start_loop(&["--steps", "50", "--host-us", "200", "--spin-ms", "6000"]);
    refused(child.id(), "made no system call that is safe to take over");
    finished_as_untraced(child, 50);

    // not a CUDA process
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    refused(sleeper.id(), "has not loaded libcuda");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn a_process_that_dies_during_the_attach_is_reported_and_the_trace_ends_cleanly() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("dies.db");
    // 20 s on the CPU without a system call: the attach waits for one, and the process is killed
    let mut child = start_loop(&["--steps", "1", "--spin-ms", "20000"]);
    let pid = child.id();
    // killed once the tracer has seized it (its TracerPid set): the attach is under way
    let killer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            if status.lines().any(|l| l.starts_with("TracerPid:") && l.trim_end() != "TracerPid:\t0") {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        unsafe_kill(pid, libc::SIGKILL);
    });
    let (_, stderr) = trace_pid(&db, pid, &["--duration", "5s"]);
    killer.join().unwrap();
    let _ = child.wait();
    assert!(stderr.contains(&format!("pid {pid} exited during the attach")), "{stderr}");
}

fn unsafe_kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

#[test]
fn a_process_in_its_own_mount_namespace_gets_the_library_through_its_root() {
    require_root_to("attach the injection library to a running process (ptrace, eBPF, unshare)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ns.db");
    let build = causeway_testdata::mock_cuda_build();
    // its own mount namespace (a mount of its own in it, so its table differs from ours; nothing
    // hidden: a clone and its build may live under /tmp)
    let script = format!(
        "mount -t tmpfs causeway-test /mnt && exec {} --steps 1500 --host-us 200",
        build.join("gpuloop").display()
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("MOCK_CUDA_KERNEL_US", "1000")
        .env_remove("CUDA_INJECTION64_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux)");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default().contains("libcuda.so") {
        assert!(Instant::now() < deadline, "gpuloop never loaded libcuda in its namespace");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_ne!(
        std::fs::read_link("/proc/self/ns/mnt").unwrap(),
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(),
        "the workload has its own mount namespace"
    );
    let (_, stderr) = trace_pid(&db, pid, &["--duration", "3s"]);
    finished_as_untraced(child, 1500);
    let attached = notes(&db, "attached");
    assert_eq!(attached.len(), 1, "{stderr}");
    assert!(attached[0].2.contains("(/tmp/causeway-attach-"), "the copy in its own /tmp: {}", attached[0].2);
    let kernels = query_u64(&db, "SELECT COUNT(*) FROM gpu_ops WHERE kind = 1");
    assert!(kernels >= 400, "its kernels reached the tracer through the socket in its root: {kernels}");
}

#[test]
fn trace_all_attaches_the_cuda_processes_it_adopts_running_or_started_later() {
    require_root_to("attach the injection library to the processes --all adopts (ptrace, eBPF)");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("all.db");
    // one loop running before the trace, one started 2 s into it; each runs some 6.5 s
    let before = start_loop(&["--steps", "1500", "--host-us", "200"]);
    let tracer = causeway()
        .args(["trace", "--all", "--nvml-hz", "0", "--gpu-timeline", "--gpu-library"])
        .arg(causeway_testdata::inject_library())
        .args(["--duration", "6s", "--db"])
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let later = start_loop(&["--steps", "1500", "--host-us", "200"]);
    let (a, b) = (before.id(), later.id());
    let out = tracer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    finished_as_untraced(before, 1500);
    finished_as_untraced(later, 1500);
    for pid in [a, b] {
        let attached = query_rows(
            &db,
            &format!("SELECT ts_ns, detail FROM gpu_timeline_notes WHERE kind = 'attached' AND pid = {pid}"),
        );
        assert_eq!(attached.len(), 1, "pid {pid} attached: {stderr}");
        let at = attached[0][0].as_i64().unwrap();
        let kernels = query_u64(&db, &format!("SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND pid = {pid}"));
        assert!(kernels >= 100, "pid {pid}'s kernels: {kernels}");
        let early =
            query_u64(&db, &format!("SELECT COUNT(*) FROM gpu_ops WHERE pid = {pid} AND start_ns < {at} - 5000000"));
        assert_eq!(early, 0, "pid {pid}: nothing from before its attach");
        let tied = query_u64(
            &db,
            &format!("SELECT COUNT(*) FROM gpu_ops WHERE kind = 1 AND pid = {pid} AND launch_tid = {pid} AND launch_start_ns > 0"),
        );
        assert!(tied * 100 >= kernels * 95, "pid {pid}: kernels tied to their launches: {tied} of {kernels}");
    }
}
