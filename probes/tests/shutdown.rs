//! Clean shutdown: after a trace no Causeway program or uprobe is left in the kernel, and a tracer
//! killed with SIGKILL mid-trace leaves the traced process running to a correct finish.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn loaded_causeway_programs() -> Vec<String> {
    let out = Command::new("bpftool").args(["prog", "show"]).output().expect("bpftool prog show");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            [
                "name rt_launch",
                "name rt_ret",
                "name drv_launch",
                "name drv_ret",
                "name cw_entry",
                "name cw_sched_switch",
            ]
            .iter()
            .any(|n| l.contains(n))
        })
        .map(String::from)
        .collect()
}

fn wait_no_programs() -> Vec<String> {
    let t = Instant::now();
    loop {
        let v = loaded_causeway_programs();
        if v.is_empty() || t.elapsed() > Duration::from_secs(5) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The two real tests both look at what is loaded kernel-wide: never at the same time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn uprobe_events() -> String {
    std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default()
}

#[test]
fn after_a_trace_no_probe_is_left_in_the_kernel() {
    common::require_root();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = uprobe_events();
    let (r, c, w) = common::run_traced(&["train", "--iters", "5"], |_| {});
    assert_eq!(r.command_exit, Some(0));
    assert!(common::count(&c.events, w.pid, 1, 3) > 0);
    let left = wait_no_programs();
    assert!(left.is_empty(), "BPF programs left loaded after the trace: {left:?}");
    assert_eq!(uprobe_events(), before, "uprobe_events changed");
}

/// Not a test on its own: the tracer process the next test kills (re-executed from this binary).
#[test]
fn helper_tracer_process() {
    let Ok(pid) = std::env::var("CW_HELPER_TRACE_PID") else {
        return;
    };
    let build = common::mock_build();
    let opts = causeway_probes::TraceOptions {
        pids: vec![pid.parse().unwrap()],
        cuda_libs: vec![build.join("libcudart.so.12")],
        duration_ns: Some(60_000_000_000),
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _ = rt.block_on(causeway_probes::trace(opts, Box::new(common::MemSink::default()), |s| {
        println!("TRACING events={}", s.events);
    }));
}

#[test]
fn killing_the_tracer_mid_trace_leaves_the_target_unharmed() {
    common::require_root();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let build = common::mock_build();
    let mut target = Command::new(build.join("train"))
        .args(["--iters", "1500", "--producer-us", "2000", "--kernel-us", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tracer = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper_tracer_process", "--nocapture", "--test-threads", "1"])
        .env("CW_HELPER_TRACE_PID", target.id().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(tracer.stdout.take().unwrap()).lines();
    let mut saw = 0;
    while let Some(Ok(l)) = lines.next() {
        if l.starts_with("TRACING") {
            saw += 1;
            if saw >= 2 {
                break; // a second tick: events are flowing
            }
        }
    }
    assert!(saw >= 2, "the helper tracer never started");
    tracer.kill().unwrap(); // SIGKILL: no cleanup code runs
    let _ = tracer.wait();
    let t = Instant::now();
    let status = target.wait().unwrap();
    let out = std::io::read_to_string(target.stdout.take().unwrap()).unwrap();
    assert!(status.success(), "target died: {status:?}");
    assert!(t.elapsed() < Duration::from_secs(30), "target stalled after the tracer died");
    let w = common::Workload::parse(&out);
    assert_eq!(w.calls(&["cudaLaunchKernel"]), 1500 * 4);
    assert_eq!(w.values.get("ERRORS").map(String::as_str), Some("0"));
    let left = wait_no_programs();
    assert!(left.is_empty(), "BPF programs left loaded after SIGKILL: {left:?}");
}
