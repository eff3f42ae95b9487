//! End to end: the injection library loaded by the mock CUDA driver into `gpuloop` (mock-cuda), the
//! mock libcupti feeding it, this test as the tracer on the other end of the socket. Every message
//! decoded; the kernels, their launching calls and thread, the devices, the clock pairs and the
//! notes checked, under the mock's faults too; and the workload's exit code and stdout are always
//! those of a run without the library.

mod harness;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use causeway_gpu_wire::{decode, note, Control, Message, WireApi, WireOp};
use harness::{accept, gpuloop, inject_so, listen, recv, run, send_control, Run};

const GPULOOP_50X2: [&str; 4] = ["--steps", "50", "--kernels", "2"];

/// The workload's own output and exit code, without the library.
fn baseline(bin: &Path, args: &[&str]) -> (Option<i32>, String) {
    let r = run(bin, args, &[], false, None);
    assert_eq!(r.code, Some(0), "gpuloop without the library: {}", r.stderr);
    (r.code, r.stdout)
}

fn assert_unharmed(r: &Run, base: &(Option<i32>, String)) {
    assert_eq!((&r.code, &r.stdout), (&base.0, &base.1), "the workload changed; stderr: {}", r.stderr);
    assert!(r.stderr.is_empty(), "the library printed: {}", r.stderr);
}

/// Every kernel once, each tied by its correlation id to the driver call that launched it, on the
/// workload's launching thread (its main thread).
fn assert_complete(r: &Run, kernels: usize, cupti_file: &str) {
    let Some((h, Message::Hello(hello))) = r.msgs.first() else { panic!("no Hello first: {:?}", r.msgs.first()) };
    assert_eq!((h.seq, h.pid), (0, r.pid));
    assert!(hello.cupti_path.ends_with(cupti_file), "{}", hello.cupti_path);
    assert_eq!(hello.thread_id_type, 1);
    assert!(hello.driver_version > 0);
    let seqs: Vec<u32> = r.msgs.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(seqs, (0..r.msgs.len() as u32).collect::<Vec<_>>(), "messages lost");
    assert!(r.msgs.iter().all(|(h, _)| h.pid == r.pid));
    assert_eq!(r.notes(note::OFF).len(), 0, "{}", r.all_notes());
    assert_eq!(r.notes(note::STARTED).len(), 1, "{}", r.all_notes());
    assert_eq!(r.notes(note::STOPPED).len(), 1, "{}", r.all_notes());

    let devices: Vec<_> =
        r.msgs.iter().filter_map(|(_, m)| if let Message::Devices(v) = m { Some(v) } else { None }).flatten().collect();
    assert!(devices.iter().any(|d| d.device == 0 && d.uuid != [0; 16] && d.name == "Mock H100"), "{devices:?}");

    let clock: Vec<_> =
        r.msgs.iter().filter_map(|(_, m)| if let Message::Clock(v) = m { Some(v) } else { None }).flatten().collect();
    assert!(!clock.is_empty());
    let realtime_minus_mono = {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let mut mono = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes two timespecs.
        unsafe {
            libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut mono);
        }
        (ts.tv_sec - mono.tv_sec) * 1_000_000_000 + (ts.tv_nsec - mono.tv_nsec)
    };
    for p in &clock {
        // the mock's CUPTI clock is CLOCK_REALTIME: its offset to the pair's monotonic time is ours
        let off = p.cupti_ns as i64 - p.mono_ns as i64;
        assert!((off - realtime_minus_mono).abs() < 50_000_000, "{p:?}");
        assert!(p.half_width_ns < 10_000_000, "{p:?}");
    }

    let ks = r.ops(1);
    let mut by_corr: HashMap<u32, &WireOp> = HashMap::new();
    for k in &ks {
        assert!(by_corr.insert(k.correlation, k).is_none(), "kernel {} twice", k.correlation);
        assert!(k.start > 0 && k.start <= k.end, "{k:?}");
        assert!(k.name.starts_with("_Z") && k.name.contains("gpuloop_"), "{k:?}");
        assert_eq!((k.device, k.stream), (0, 13), "{k:?}");
    }
    assert_eq!(ks.len(), kernels, "kernels received");
    let apis: HashMap<u32, &WireApi> = r.apis().into_iter().map(|a| (a.correlation, a)).collect();
    for k in &ks {
        let a = apis.get(&k.correlation).unwrap_or_else(|| panic!("no API record for kernel {k:?}"));
        assert_eq!(a.tid, r.pid, "launched on the main thread: {a:?}");
        assert_eq!(a.domain, 4);
        assert!(a.start <= a.end && a.start <= k.start, "the launch starts before its kernel: {a:?} {k:?}");
    }
    let syncs = r.ops(4);
    assert!(syncs.len() >= 50, "{} synchronizations", syncs.len());
    assert!(syncs.iter().all(|s| s.subkind == 3 && s.stream == 13), "{:?}", syncs.first());
}

#[test]
fn every_kernel_reaches_the_tracer_once_with_its_launching_thread() {
    let bin = gpuloop(false);
    let base = baseline(&bin, &GPULOOP_50X2);
    let r = run(&bin, &GPULOOP_50X2, &[], true, None);
    assert_unharmed(&r, &base);
    assert_complete(&r, 100, "/libcupti.so.12");
}

#[test]
fn cuda_13_records_read_the_same() {
    let bin = gpuloop(true);
    let base = baseline(&bin, &GPULOOP_50X2);
    let r = run(&bin, &GPULOOP_50X2, &[], true, None);
    assert_unharmed(&r, &base);
    assert_complete(&r, 100, "/libcupti.so.13");
    assert!(r.notes(note::STARTED)[0].detail.contains("CUPTI 13.5"), "{}", r.all_notes());
}

#[test]
fn refusals_turn_the_library_off_with_the_reason_and_the_workload_goes_on() {
    let bin = gpuloop(false);
    let base = baseline(&bin, &GPULOOP_50X2);
    for (fault, error) in [
        ("old_driver", "CUPTI_ERROR_NOT_INITIALIZED"),
        ("busy", "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"),
        ("v2only", "CUPTI_ERROR_NOT_COMPATIBLE"),
    ] {
        let r = run(&bin, &GPULOOP_50X2, &[("MOCK_CUPTI_FAULT", fault)], true, None);
        assert_unharmed(&r, &base);
        assert!(matches!(r.msgs.first(), Some((_, Message::Hello(_)))), "{fault}");
        let off = r.notes(note::OFF);
        assert_eq!(off.len(), 1, "{fault}: {}", r.all_notes());
        assert!(off[0].detail.contains(error), "{fault}: {}", off[0].detail);
        assert!(r.ops(1).is_empty(), "{fault}");
        assert!(r.notes(note::STARTED).is_empty(), "{fault}");
    }
    // CUDA 13's library in v2-only mode
    let bin13 = gpuloop(true);
    let base13 = baseline(&bin13, &GPULOOP_50X2);
    let r = run(&bin13, &GPULOOP_50X2, &[("MOCK_CUPTI_FAULT", "v2only")], true, None);
    assert_unharmed(&r, &base13);
    let off = r.notes(note::OFF);
    assert!(off.len() == 1 && off[0].detail.contains("CUPTI 13.5"), "{}", r.all_notes());
}

/// Ops and API records received, by kind.
fn received(r: &Run) -> BTreeMap<&'static str, usize> {
    BTreeMap::from([("kernels", r.ops(1).len()), ("syncs", r.ops(4).len()), ("apis", r.apis().len())])
}

#[test]
fn dropped_and_timestampless_records_are_counted_in_notes() {
    let bin = gpuloop(false);
    let base = baseline(&bin, &GPULOOP_50X2);
    let clean = run(&bin, &GPULOOP_50X2, &[], true, None);
    let total: usize = received(&clean).values().sum::<usize>() + 1; // + the device record

    let r = run(&bin, &GPULOOP_50X2, &[("MOCK_CUPTI_FAULT", "drop=10")], true, None);
    assert_unharmed(&r, &base);
    let dropped: u64 = r.notes(note::DROPPED).iter().map(|n| n.count).sum();
    let got: usize = received(&r).values().sum::<usize>() + 1;
    assert!(dropped > 0, "{}", r.all_notes());
    assert_eq!(got + dropped as usize, total, "received {:?} + dropped {dropped}", received(&r));
    assert!(r.notes(note::DROPPED)[0].detail.contains("CUPTI dropped"), "{}", r.all_notes());

    let r = run(&bin, &GPULOOP_50X2, &[("MOCK_CUPTI_FAULT", "zero_ts=5")], true, None);
    assert_unharmed(&r, &base);
    let zero: u64 = r.notes(note::ZERO_TIMESTAMPS).iter().map(|n| n.count).sum();
    assert_eq!(zero, 20, "{}", r.all_notes());
    assert_eq!(r.ops(1).len(), 80);
    assert!(r.ops(1).iter().all(|k| k.start > 0));
}

#[test]
fn a_clock_step_is_noted() {
    let bin = gpuloop(false);
    let args = ["--steps", "40", "--kernels", "2", "--host-us", "25000"]; // 1 s
    let r = run(&bin, &args, &[("MOCK_CUPTI_FAULT", "clock_step=300"), ("CAUSEWAY_GPU_FLUSH_MS", "50")], true, None);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let steps = r.notes(note::CLOCK_STEP);
    assert_eq!(steps.len(), 1, "{}", r.all_notes());
    // the step is 2 s, measured through two calibrations (each good to a few us)
    let moved: i64 = steps[0]
        .detail
        .split("moved ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {}", steps[0].detail));
    assert!((moved - 2_000_000_000).abs() < 1_000_000, "{}", steps[0].detail);
    assert_eq!(r.ops(1).len(), 80);
}

#[test]
fn a_final_flush_that_hangs_is_given_up_after_2_s() {
    let bin = gpuloop(false);
    let base = baseline(&bin, &GPULOOP_50X2);
    let r = run(&bin, &GPULOOP_50X2, &[("MOCK_CUPTI_FAULT", "slow_flush=4000")], true, None);
    assert_unharmed(&r, &base);
    assert!(r.elapsed < Duration::from_millis(4000 + 2500), "took {:?}", r.elapsed);
    let stopped = r.notes(note::STOPPED);
    assert_eq!(stopped.len(), 1, "{}", r.all_notes());
    assert!(stopped[0].detail.contains("did not finish"), "{}", stopped[0].detail);
}

#[test]
fn step_aside_resume_and_flush_now_controls_are_obeyed() {
    let bin = gpuloop(false);
    let args = ["--steps", "50", "--kernels", "2", "--host-us", "8000"]; // 400 ms
    let mut tracer = |m: &Message, conn: &OwnedFd, _: &str| match m {
        Message::Hello(_) => send_control(conn, Control::StepAside { reason: "kineto registered".into() }),
        Message::Note(n) if n.kind == note::STEPPED_ASIDE => {
            send_control(conn, Control::FlushNow);
            send_control(conn, Control::Resume);
        }
        _ => {}
    };
    let r = run(&bin, &args, &[("CAUSEWAY_GPU_FLUSH_MS", "5000")], true, Some(&mut tracer));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let aside = r.notes(note::STEPPED_ASIDE);
    assert!(aside.len() == 1 && aside[0].detail.contains("kineto registered"), "{}", r.all_notes());
    assert_eq!(r.notes(note::RESUMED).len(), 1, "{}", r.all_notes());
    assert_eq!(r.ops(1).len(), 100, "{}", r.all_notes());
}

#[test]
fn without_a_tracer_the_library_stays_quiet_and_the_workload_unharmed() {
    let bin = gpuloop(false);
    let base = baseline(&bin, &GPULOOP_50X2);
    // no socket variable; a socket nobody listens on
    for env in [vec![], vec![("CAUSEWAY_GPU_SOCKET", "/nonexistent/gpu.sock")]] {
        let mut cmd = Command::new(&bin);
        cmd.args(GPULOOP_50X2).env("CUDA_INJECTION64_PATH", inject_so()).env_remove("CAUSEWAY_GPU_SOCKET");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned()), base);
        assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // a tracer that goes away after the Hello: the library turns off, silently
    let mut gone = false;
    let mut tracer = |m: &Message, conn: &OwnedFd, _: &str| {
        if matches!(m, Message::Hello(_)) && !gone {
            gone = true;
            // SAFETY: shutting down our own connection.
            unsafe { libc::shutdown(conn.as_raw_fd(), libc::SHUT_RDWR) };
        }
    };
    let r = run(&bin, &GPULOOP_50X2, &[], true, Some(&mut tracer));
    assert_unharmed(&r, &base);
}

/// Another CUPTI client (like torch.profiler) takes the records for steps 0 to 9: told to step
/// aside, the library leaves it every one of its kernels (the workload prints how many it got, the
/// same as without the library), and after `Resume` (sent when the workload says the other client
/// is done, as the tracer would when it sees that client disable its kinds) it records again.
#[test]
fn a_foreign_cupti_client_keeps_its_records_while_the_library_steps_aside() {
    let bin = gpuloop(false);
    let args = ["--steps", "40", "--kernels", "2", "--host-us", "20000", "--foreign-at", "0", "--foreign-steps", "10"];
    let base = baseline(&bin, &args);
    assert!(base.1.contains("foreign client received 20 kernels"), "{}", base.1);
    let mut resumed = false;
    let mut tracer = |m: &Message, conn: &OwnedFd, stdout: &str| {
        if matches!(m, Message::Hello(_)) {
            send_control(conn, Control::StepAside { reason: "gpuloop registered its own callbacks".into() });
        } else if !resumed && stdout.contains("foreign client received") {
            resumed = true;
            send_control(conn, Control::Resume);
        }
    };
    let r = run(&bin, &args, &[("CAUSEWAY_GPU_FLUSH_MS", "50")], true, Some(&mut tracer));
    assert_unharmed(&r, &base);
    assert_eq!(r.notes(note::STEPPED_ASIDE).len(), 1, "{}", r.all_notes());
    assert_eq!(r.notes(note::RESUMED).len(), 1, "{}", r.all_notes());
    let ks = r.ops(1);
    assert!(!ks.is_empty() && ks.len() <= 60, "{} kernels after the resume", ks.len());
    let mut corr: Vec<u32> = ks.iter().map(|k| k.correlation).collect();
    corr.sort();
    corr.dedup();
    assert_eq!(corr.len(), ks.len(), "a kernel twice");
}

/// A copy of the mock's gpuloop, runtime and driver in `dir`, and the mock libcupti where given.
fn install(dir: &Path, cupti: Option<&Path>) -> PathBuf {
    let build = causeway_testdata::mock_cuda_build();
    std::fs::create_dir_all(dir).unwrap();
    for f in ["gpuloop", "libcudart.so.12", "libcuda.so.1"] {
        std::fs::copy(build.join(f), dir.join(f)).unwrap();
    }
    if let Some(c) = cupti {
        std::fs::create_dir_all(c.parent().unwrap()).unwrap();
        std::fs::copy(build.join("libcupti.so.12"), c).unwrap();
    }
    dir.join("gpuloop")
}

#[test]
fn cupti_is_found_where_pip_puts_it_or_the_variable_says_and_its_absence_is_noted() {
    let base = baseline(&gpuloop(false), &GPULOOP_50X2);
    let tmp = tempfile::tempdir().unwrap();

    // pip's layout: .../nvidia/cuda_runtime/lib/libcudart.so.12 -> .../nvidia/cuda_cupti/lib/
    let nvidia = tmp.path().join("site-packages/nvidia");
    let cupti = nvidia.join("cuda_cupti/lib/libcupti.so.12");
    let bin = install(&nvidia.join("cuda_runtime/lib"), Some(&cupti));
    let r = run(&bin, &GPULOOP_50X2, &[], true, None);
    assert_unharmed(&r, &base);
    assert_complete(&r, 100, "/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12");

    // none anywhere: off, saying where it looked
    let bare = tmp.path().join("bare");
    let bin = install(&bare, None);
    let r = run(&bin, &GPULOOP_50X2, &[("LD_LIBRARY_PATH", "")], true, None);
    assert_unharmed(&r, &base);
    let Some((_, Message::Hello(hello))) = r.msgs.first() else { panic!("{:?}", r.msgs.first()) };
    assert_eq!((hello.cupti_version, hello.cupti_path.as_str()), (0, ""));
    let off = r.notes(note::OFF);
    assert_eq!(off.len(), 1, "{}", r.all_notes());
    assert!(off[0].detail.starts_with("no libcupti found"), "{}", off[0].detail);
    assert!(off[0].detail.contains(&bare.join("libcupti.so.12").display().to_string()), "{}", off[0].detail);
    assert_eq!(r.msgs.len(), 2, "Hello and the note only");

    // CAUSEWAY_CUPTI_PATH names one
    let named = tmp.path().join("elsewhere/libcupti.so.12");
    std::fs::create_dir_all(named.parent().unwrap()).unwrap();
    std::fs::copy(causeway_testdata::mock_cuda_build().join("libcupti.so.12"), &named).unwrap();
    let named_str = named.display().to_string();
    let r = run(&bin, &GPULOOP_50X2, &[("CAUSEWAY_CUPTI_PATH", named_str.as_str())], true, None);
    assert_unharmed(&r, &base);
    assert_complete(&r, 100, "/elsewhere/libcupti.so.12");
}

/// A process that forks after `cuInit`: the child (whose copy of the flush thread does not exist)
/// exits at once and sends nothing; the parent goes on recording.
#[test]
fn a_forked_child_is_off_and_exits_without_waiting() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("forker.c");
    std::fs::write(
        &src,
        r#"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    void *cuda = dlopen(argv[1], RTLD_NOW);
    int (*cuInit)(unsigned) = cuda ? (int (*)(unsigned))dlsym(cuda, "cuInit") : NULL;
    if (!cuInit || cuInit(0) != 0) { puts("no driver"); return 2; }
    usleep(300000);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) { usleep(300000); exit(0); }
    double t0 = now();
    int st = 0;
    waitpid(p, &st, 0);
    double child_s = now() - t0;
    printf("child exit %d in %s\n", WEXITSTATUS(st), child_s < 1.9 ? "time" : "too long");
    usleep(300000);
    return 0;
}
"#,
    )
    .unwrap();
    let bin = tmp.path().join("forker");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc).arg("-o").arg(&bin).arg(&src).arg("-ldl").status().expect("a C compiler");
    assert!(status.success());
    let build = causeway_testdata::mock_cuda_build();
    let driver = build.join("libcuda.so.1").display().to_string();
    let cupti = build.join("libcupti.so.12").display().to_string();
    let r = run(
        &bin,
        &[driver.as_str()],
        &[("CAUSEWAY_CUPTI_PATH", cupti.as_str()), ("CAUSEWAY_GPU_FLUSH_MS", "50")],
        true,
        None,
    );
    assert_eq!(r.code, Some(0), "{} {}", r.stdout, r.stderr);
    assert_eq!(r.stdout, "child exit 0 in time\n");
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(r.msgs.iter().all(|(h, _)| h.pid == r.pid), "only the parent speaks");
    assert_eq!(r.notes(note::STOPPED).len(), 1, "{}", r.all_notes());
    assert!(r.notes(note::OFF).is_empty(), "{}", r.all_notes());
    let seqs: Vec<u32> = r.msgs.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(seqs, (0..r.msgs.len() as u32).collect::<Vec<_>>());
}

/// A tracer that stops reading: the library's sends fail instead of waiting (the workload ends on
/// time, unharmed, while nobody reads), and what did reach the tracer decodes, with the loss showing
/// as a gap in the sequence numbers.
#[test]
fn a_tracer_that_stops_reading_never_blocks_the_workload() {
    let bin = gpuloop(false);
    let args = ["--steps", "3000", "--kernels", "4", "--host-us", "0"];
    let base = baseline(&bin, &args);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("gpu.sock");
    let listener = listen(&sock);
    let mut child = Command::new(&bin)
        .args(args)
        .env("CUDA_INJECTION64_PATH", inject_so())
        .env("CAUSEWAY_GPU_SOCKET", &sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let conn = accept(&listener, deadline, &mut child).expect("the library connects");
    // not a byte read until the workload is done
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the workload hangs while the tracer does not read");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned()), base);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut buf = vec![0u8; 65536];
    let mut msgs = Vec::new();
    while let Some(n) = recv(&conn, &mut buf, deadline) {
        msgs.push(decode(&buf[..n]).unwrap());
    }
    let seqs: Vec<u32> = msgs.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(seqs, (0..msgs.len() as u32).collect::<Vec<_>>(), "what was queued arrived in order");
    // the socket filled (a reading tracer gets about 110 messages of this run), and the library
    // dropped the rest, the exit's `stopped` note included, rather than wait
    assert!(msgs.len() < 60, "{} messages: the socket never filled", msgs.len());
    assert!(!msgs.iter().any(|(_, m)| matches!(m, Message::Note(n) if n.kind == note::STOPPED)));
}
