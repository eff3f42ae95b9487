//! A mock training loop attached while it runs (`gpu_attach.rs`, `gpu_triggers.rs`): mock-cuda's
//! `gpuloop` started without the injection variables, then traced by pid with `--gpu-timeline`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{causeway, query_rows};

/// One traced loop at a time (two on two CPUs would preempt each other's launch threads).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `gpuloop ARGS` started untraced (1 ms kernels), stdout piped; waits until it has loaded libcuda.
pub fn start_loop(args: &[&str]) -> Child {
    start_loop_with(args, &[])
}

/// `gpuloop ARGS` with `env` added, as [`start_loop`].
pub fn start_loop_with(args: &[&str], env: &[(&str, &str)]) -> Child {
    let build = causeway_testdata::mock_cuda_build();
    let mut child = Command::new(build.join("gpuloop"))
        .args(args)
        .env("MOCK_CUDA_KERNEL_US", "1000")
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("CAUSEWAY_GPU_SOCKET")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpuloop starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap_or_default();
        if maps.contains("libcuda.so") {
            return child;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("gpuloop never loaded libcuda");
}

/// `causeway trace --pid P --gpu-timeline --nvml-hz 0 EXTRA --db DB`, run to its end; (stdout,
/// stderr).
pub fn trace_pid(db: &Path, pid: u32, extra: &[&str]) -> (String, String) {
    let args: Vec<&str> = ["--nvml-hz", "0"].iter().chain(extra).copied().collect();
    trace_pid_with(db, pid, &args, &[])
}

/// `causeway trace --pid P --gpu-timeline ARGS --db DB` with `env` added (NVML sampled at the
/// tracer's default rate unless `args` say otherwise), run to its end; (stdout, stderr).
pub fn trace_pid_with(db: &Path, pid: u32, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = causeway()
        .args(["trace", "--gpu-timeline", "--gpu-library"])
        .arg(causeway_testdata::inject_library())
        .arg("--pid")
        .arg(pid.to_string())
        .args(args)
        .envs(env.iter().copied())
        .arg("--db")
        .arg(db)
        .output()
        .expect("causeway trace runs");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "trace failed: {o}\n{e}");
    (o, e)
}

/// The workload's end: its exit status was 0 and it printed what it prints untraced.
pub fn finished_as_untraced(child: Child, steps: u32) {
    let out = child.wait_with_output().expect("gpuloop ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "gpuloop failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.trim(), format!("gpuloop: {steps} steps, 4 kernels each, done"));
}

pub fn notes(db: &Path, kind: &str) -> Vec<(i64, i64, String)> {
    let sql = format!("SELECT ts_ns, count, detail FROM gpu_timeline_notes WHERE kind = '{kind}' ORDER BY ts_ns");
    query_rows(db, &sql)
        .into_iter()
        .map(|r| (r[0].as_i64().unwrap_or(0), r[1].as_i64().unwrap_or(0), r[2].as_str().unwrap_or("").to_string()))
        .collect()
}
