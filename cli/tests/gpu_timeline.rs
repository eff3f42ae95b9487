//! The device view end to end, as a user meets it (root, eBPF): `causeway trace --gpu-timeline` on
//! mock-cuda's `gpuloop` (a training loop whose mock GPU runs each 1 ms kernel on a thread of its
//! own, so a late launch leaves a real idle gap) with one planted stall at step 812, then
//! `explain --json`: the GPU idle gap at that step, its size and its cause by name; a stall while
//! the queue stays deep costs no idle time and is blamed for nothing; every kernel stored once,
//! tied to the call that launched it; every fault of the mock CUPTI leaves a clear line, the rest of
//! the trace and the workload unharmed.

mod common;

use std::path::Path;

use common::{causeway, query_u64, require_root_to};
use serde_json::Value;

const MS: i64 = 1_000_000;

/// One traced loop at a time: the planted stalls are measured to the millisecond, and a second
/// trace running beside one on two CPUs would preempt its launch thread (which the analysis then
/// rightly names, and the test did not plant).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Trace `gpuloop ARGS` (1 ms kernels) with the device timeline into `db`; (stdout, stderr).
fn trace(db: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let build = causeway_testdata::mock_cuda_build();
    let mut cmd = causeway();
    cmd.env("MOCK_CUDA_KERNEL_US", "1000").env_remove("MOCK_CUPTI_FAULT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    // NVML from the mock library (the hog test samples it: CAUSEWAY_NVML_HZ in `env`)
    let hz = env.iter().find(|(k, _)| *k == "CAUSEWAY_NVML_HZ").map_or("0", |(_, v)| *v);
    let out = cmd
        .args(["trace", "--nvml-hz", hz, "--nvml-lib"])
        .arg(build.join("libnvidia-ml.so.1"))
        .args(["--gpu-timeline", "--gpu-library"])
        .arg(causeway_testdata::inject_library())
        .arg("--db")
        .arg(db)
        .arg("--")
        .arg(build.join("gpuloop"))
        .args(args)
        .output()
        .expect("causeway trace runs");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "trace failed: {stdout}\n{stderr}");
    (stdout, stderr)
}

/// What the workload prints untraced (its output must not change under the tracer).
fn untraced(args: &[&str], env: &[(&str, &str)]) -> String {
    let build = causeway_testdata::mock_cuda_build();
    let mut cmd = std::process::Command::new(build.join("gpuloop"));
    cmd.env("MOCK_CUDA_KERNEL_US", "1000").env_remove("CUDA_INJECTION64_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.args(args).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn explain(db: &Path) -> Value {
    let out = causeway().args(["explain", "--json", "--db"]).arg(db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The details of the trace's device-timeline notes of `kind`, in time order.
fn notes_of(db: &Path, kind: &str) -> Vec<String> {
    let sql = format!("SELECT detail FROM gpu_timeline_notes WHERE kind = '{kind}' ORDER BY ts_ns");
    common::query_rows(db, &sql).into_iter().map(|r| r[0].as_str().unwrap_or_default().to_string()).collect()
}

/// The listed gap that began in `step`.
fn gap_at(e: &Value, step: i64) -> &Value {
    let gaps = e["device"]["gaps"].as_array().unwrap_or_else(|| panic!("no device view: {e}"));
    gaps.iter()
        .find(|g| g["step"].as_i64() == Some(step))
        .unwrap_or_else(|| panic!("no idle gap at step {step}: {}", serde_json::to_string_pretty(gaps).unwrap()))
}

const LOOP: [&str; 6] = ["--steps", "900", "--kernels", "1", "--host-us", "200"];

#[test]
fn a_hog_that_preempts_the_launch_thread_at_step_812_idles_the_gpu_38_ms_and_is_named() {
    require_root_to("trace with eBPF");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hog.db");
    let args: Vec<&str> = LOOP.iter().copied().chain(["--hog-at", "812", "--hog-ms", "38"]).collect();
    let (stdout, _) = trace(&db, &args, &[("CAUSEWAY_NVML_HZ", "10")]);
    assert_eq!(stdout, untraced(&args, &[]), "the workload's output is unchanged");
    let e = explain(&db);
    let g = gap_at(&e, 812);
    let idle = g["idle_ns"].as_i64().unwrap();
    // the hog's 38 ms, plus the step's own 200 us of host work and whatever else the parts name
    assert!((37 * MS..=41 * MS).contains(&idle), "a 38 ms gap (+ the step's host work): {g}");
    let parts: i64 = g["parts"].as_array().unwrap().iter().map(|p| p["ns"].as_i64().unwrap()).sum();
    assert_eq!(parts, idle, "the parts add up to the gap: {g}");
    let top = &g["parts"][0];
    assert_eq!(top["cause"], "preempted", "{g}");
    assert_eq!(top["culprit"]["comm"], "backup-rsync", "{g}");
    let ns = top["ns"].as_i64().unwrap();
    assert!((37 * MS..=39 * MS).contains(&ns), "38 +- 1 ms charged to the hog: {g}");
    assert!(e["verdict"].as_str().unwrap().contains("backup-rsync"), "{}", e["verdict"]);
    // the slow step says how long the GPU sat idle in it, and why
    let slow = e["steps"]["series"][0]["slow"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["first"] == 812)
        .unwrap_or_else(|| panic!("step 812 is slow: {}", e["steps"]));
    assert!(slow["gpu_idle_ns"].as_i64().unwrap() >= 37 * MS, "{slow}");
    assert!(slow["summary"].as_str().unwrap().contains("The GPU sat idle"), "{slow}");
    // every kernel stored once, tied to the cudaLaunchKernel that launched it
    assert_eq!(query_u64(&db, "SELECT count(*) FROM gpu_ops WHERE kind = 1"), 900);
    assert_eq!(query_u64(&db, "SELECT count(DISTINCT correlation) FROM gpu_ops WHERE kind = 1"), 900);
    assert_eq!(
        query_u64(
            &db,
            "SELECT count(DISTINCT g.launch_event_id) FROM gpu_ops g JOIN events e ON e.id = g.launch_event_id \
             WHERE g.kind = 1 AND e.source = 1 AND e.tid = g.launch_tid AND e.timestamp <= g.start_ns"
        ),
        900,
        "each kernel's launch_event_id is its own runtime launch call"
    );
    // the same trace in DuckDB ties every kernel to the same call (its range join: a plan DuckDB
    // refuses on a trace this size falls back to the hash join)
    let duck = dir.path().join("hog.duckdb");
    let out = causeway().args(["convert", "--quiet", "--from"]).arg(&db).arg("--to").arg(&duck).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ties = "SELECT sum(launch_event_id) FROM gpu_ops WHERE kind = 1";
    assert_eq!(query_u64(&duck, ties), query_u64(&db, ties), "the same launches in both engines");
    // the idle chain's SQL recomputes its figure
    let chain = &e["device"]["chains"][0];
    let sql = chain["sql"].as_str().unwrap();
    assert_eq!(query_u64(&db, sql) as i64, chain["idle_ns"].as_i64().unwrap(), "{sql}");
    // the device CUPTI described is the mock NVML's GPU 0, by its UUID (NVML was sampled in this run)
    let rows = common::query_rows(&db, "SELECT device, uuid, nvml_index FROM gpu_devices");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0][1].as_str().unwrap().starts_with("GPU-"), "{rows:?}");
    assert_eq!(rows[0][2], 0, "matched to NVML index 0 by UUID: {rows:?}");
    // the timeline around the late launch shows the device's lane with the kernel it launched
    let launch = g["next"]["launch_event_id"].as_i64().unwrap();
    let out = causeway()
        .args(["timeline", "--json", "--db"])
        .arg(&db)
        .args(["--around", &launch.to_string()])
        .output()
        .unwrap();
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lanes = t["devices"].as_array().unwrap();
    let lane = lanes.iter().find(|l| l["device"] == 0).unwrap_or_else(|| panic!("no lane of GPU 0: {t}"));
    assert_eq!(lane["stream"], 13, "{t}");
    assert!(lane["ops"].as_array().unwrap().iter().any(|o| o["launch_event_id"] == launch), "{lane}");
    // the report says it in words
    let out = causeway().args(["explain", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("at step 812: the launching thread was preempted by backup-rsync"), "{text}");
}

#[test]
fn a_sleep_and_a_drain_are_named_as_what_they_are() {
    require_root_to("trace with eBPF");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sleep.db");
    let args: Vec<&str> = LOOP.iter().copied().chain(["--sleep-at", "812", "--sleep-ms", "38"]).collect();
    trace(&db, &args, &[]);
    let e = explain(&db);
    let g = gap_at(&e, 812);
    let ns = part_ns(g, "sleep");
    assert!((37 * MS..=40 * MS).contains(&ns), "{g}");

    // the host runs 3 steps ahead of a GPU with 4 ms of kernels per step; at step 812 it
    // synchronizes: the queue empties and its 3 ms of host work become idle time (on a loaded
    // host a preemption may add to the same gap, and may even be its larger part)
    let db = dir.path().join("drain.db");
    trace(&db, &["--steps", "900", "--kernels", "4", "--host-us", "3000", "--depth", "3", "--drain-at", "812"], &[]);
    let e = explain(&db);
    let g = gap_at(&e, 812);
    let drained = part_ns(g, "drain");
    assert!((2 * MS..=5 * MS).contains(&drained), "the step's 3 ms of host work: {g}");
}

/// The idle time of a gap's part of `cause` (the gap must have one).
fn part_ns(gap: &Value, cause: &str) -> i64 {
    let parts = gap["parts"].as_array().unwrap();
    let part = parts.iter().find(|p| p["cause"] == cause).unwrap_or_else(|| panic!("no {cause} part in {gap}"));
    part["ns"].as_i64().unwrap()
}

#[test]
fn a_preemption_while_the_queue_stays_deep_costs_no_idle_time_and_no_blame() {
    require_root_to("trace with eBPF");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("deep.db");
    // 15 steps of 4 ms queued ahead: a 30 ms stall of the host leaves the GPU 30 ms of work
    trace(&db, &["--steps", "900", "--kernels", "4", "--depth", "15", "--hog-at", "812", "--hog-ms", "30"], &[]);
    let e = explain(&db);
    let d = &e["device"];
    let step_gaps: Vec<&Value> =
        d["gaps"].as_array().unwrap().iter().filter(|g| g["step"].as_i64() == Some(812)).collect();
    assert!(step_gaps.is_empty(), "no idle gap at step 812: {step_gaps:?}");
    assert!(!e["verdict"].as_str().unwrap().contains("backup-rsync"), "{}", e["verdict"]);
    for c in e["chains"].as_array().unwrap() {
        if c["culprit"]["comm"] == "backup-rsync" {
            assert_eq!(c["gpu_idle_ns"], 0, "the hog cost the GPU nothing: {c}");
            assert_eq!(c["severity"], "LOW", "{c}");
        }
    }
    assert!(d["host_time_hidden_ns"].as_i64().unwrap() >= 25 * MS, "the preemption is said to have cost nothing: {d}");
}

#[test]
fn every_fault_of_cupti_leaves_a_clear_line_the_rest_of_the_trace_and_the_workload_unharmed() {
    require_root_to("trace with eBPF");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--steps", "200", "--kernels", "1", "--host-us", "200"];
    let expected = untraced(&args, &[]);
    for (fault, words) in [
        ("busy", "MULTIPLE_SUBSCRIBERS"),
        ("v2only", "NOT_COMPATIBLE"),
        ("old_driver", "NOT_INITIALIZED"),
        ("drop=10", "dropped"),
        ("zero_ts=5", "without timestamps"),
        ("clock_step=100", "clock"),
        ("slow_flush=300", ""),
    ] {
        let db = dir.path().join(format!("{}.db", fault.replace('=', "-")));
        let (stdout, stderr) = trace(&db, &args, &[("MOCK_CUPTI_FAULT", fault)]);
        assert_eq!(stdout, expected, "{fault}: the workload's output is unchanged");
        let launches = query_u64(&db, "SELECT count(*) FROM events WHERE source = 1 AND op = 3");
        assert_eq!(launches, 200, "{fault}: the host trace is intact");
        let notes: Vec<String> = common::query_rows(&db, "SELECT kind || ': ' || detail FROM gpu_timeline_notes")
            .into_iter()
            .map(|r| r[0].as_str().unwrap_or_default().to_string())
            .collect();
        let all = notes.join("\n");
        assert!(all.contains(words), "{fault}: a note saying so ({words}) in\n{all}\n{stderr}");
        match fault {
            "busy" | "v2only" | "old_driver" => {
                assert!(notes.iter().any(|n| n.starts_with("off:")), "{fault}: {all}");
                assert!(stderr.contains("device timeline of pid"), "{fault}: said on the terminal: {stderr}");
            }
            "drop=10" => {
                let dropped =
                    query_u64(&db, "SELECT coalesce(sum(count), 0) FROM gpu_timeline_notes WHERE kind = 'dropped'");
                let kernels = query_u64(&db, "SELECT count(*) FROM gpu_ops WHERE kind = 1");
                assert!(
                    dropped > 0 && kernels <= 200,
                    "{fault}: {dropped} records said dropped, {kernels} kernels stored"
                );
            }
            "zero_ts=5" => {
                // every 5th kernel record has no timestamps: counted, not stored
                let zero = query_u64(
                    &db,
                    "SELECT coalesce(sum(count), 0) FROM gpu_timeline_notes WHERE kind = 'zero_timestamps'",
                );
                let kernels = query_u64(&db, "SELECT count(*) FROM gpu_ops WHERE kind = 1");
                assert_eq!((zero, kernels), (40, 160), "{fault}");
            }
            _ => assert_eq!(query_u64(&db, "SELECT count(*) FROM gpu_ops WHERE kind = 1"), 200, "{fault}"),
        }
    }
}

/// The program becomes a second CUPTI client at step 100 (like torch.profiler): the probes on
/// libcupti see its `cuptiActivityRegisterCallbacks` come from outside the injection library, the
/// trace says so (`foreign_client`, naming the caller), the library steps aside (the other client
/// gets every one of its kernels: the workload prints the same as untraced), and once the other
/// client has turned its kind off and kept quiet for a second, the library resumes: the device view
/// has one hole, said with its reason, in which no idle time is found or charged.
#[test]
fn a_foreign_cupti_client_keeps_its_records_and_the_device_view_resumes_after_it() {
    require_root_to("trace with eBPF");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foreign.db");
    let args =
        ["--steps", "900", "--kernels", "2", "--host-us", "1000", "--foreign-at", "100", "--foreign-steps", "10"];
    let (stdout, _) = trace(&db, &args, &[]);
    assert!(stdout.contains("foreign client received 20 kernels"), "{stdout}");
    assert_eq!(stdout, untraced(&args, &[]));
    let notes = |kind: &str| notes_of(&db, kind);
    let foreign = notes("foreign_client");
    assert_eq!(foreign.len(), 1, "{foreign:?}");
    assert!(
        foreign[0].contains("cuptiActivityRegisterCallbacks") && foreign[0].contains("called from gpuloop"),
        "{foreign:?}"
    );
    assert_eq!((notes("stepped_aside").len(), notes("resumed").len()), (1, 1), "{:?}", notes("resumed"));
    // the CUPTI calls are in the trace: the library's own and the other client's
    let calls = query_u64(&db, "SELECT count(*) FROM events WHERE source = 11 AND op = 1");
    assert!(calls >= 2, "gpuloop's, and the library's at the resume: {calls}");
    // the first 100 steps and the steps after the resume (about a second after step 110)
    let kernels = query_u64(&db, "SELECT count(*) FROM gpu_ops WHERE kind = 1");
    assert!((600..1780).contains(&kernels), "recorded before and after the other client: {kernels}");
    let e = explain(&db);
    let d = &e["device"];
    let said = d["notes"].to_string();
    assert!(said.contains("the device view has a hole from") && said.contains("called from gpuloop"), "{said}");
    let unseen = d["devices"][0]["unseen_ns"].as_i64().unwrap();
    assert!(unseen >= 900 * MS, "the hole is unseen time: {d}");
    for g in d["gaps"].as_array().unwrap() {
        assert!(g["idle_ns"].as_i64().unwrap() < 100 * MS, "no idle gap over the hole: {g}");
    }
}

/// A command under another CUDA tool (Nsight Systems runs its target with its own
/// `CUDA_INJECTION64_PATH`): the trace keeps the host view, and says the device view belongs to it.
#[test]
fn a_process_under_another_injection_library_is_said_to_belong_to_it() {
    require_root_to("trace with eBPF");
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nsys.db");
    let build = causeway_testdata::mock_cuda_build();
    let nsys = "/opt/nvidia/nsight-systems/2025.3.1/target-linux-x64/libToolsInjection64.so";
    let out = causeway()
        .env("MOCK_CUDA_KERNEL_US", "1000")
        .args(["trace", "--nvml-hz", "0", "--gpu-timeline", "--gpu-library"])
        .arg(causeway_testdata::inject_library())
        .arg("--db")
        .arg(&db)
        .args(["--", "env", &format!("CUDA_INJECTION64_PATH={nsys}")])
        .arg(build.join("gpuloop"))
        .args(["--steps", "50", "--kernels", "1", "--host-us", "200"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(query_u64(&db, "SELECT count(*) FROM gpu_ops"), 0, "no device view: the library was not loaded");
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE source = 1 AND op = 3"), 50, "the host view");
    let other = notes_of(&db, "other_tool");
    assert_eq!(other.len(), 1, "{other:?}");
    assert!(other[0].contains(nsys) && other[0].contains("(Nsight Systems)"), "{other:?}");
}
