//! A job that dies of a CUDA error, as a user meets it (root, eBPF): mock-cuda's `gpuloop` whose 50th
//! kernel reads an illegal address (`MOCK_CUDA_FAULT_AT`: the error surfaces at the next
//! synchronize, and the program exits 2), and mock-cuda's `train` leaking half its allocations into
//! a 70 MiB device until `cudaMalloc` fails. `explain` names each first, with its story: the kernel
//! that faulted, the request that did not fit and what the process held, the exit. A clean run
//! names no error and no hang.

mod common;

use std::path::Path;

use common::{causeway, chain_words, query_u64, require_root_to};
use serde_json::Value;

fn traced(db: &Path, env: &[(&str, &str)], program: &str, args: &[&str], trace_args: &[&str]) -> Value {
    let build = causeway_testdata::mock_cuda_build();
    let mut cmd = causeway();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let nvml: &[&str] = if trace_args.is_empty() { &["--nvml-hz", "0"] } else { trace_args };
    let out =
        cmd.arg("trace").args(nvml).arg("--db").arg(db).arg("--").arg(build.join(program)).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = causeway().args(["explain", "--json", "--db"]).arg(db).output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The first chain, checked to be a CUDA error whose figure its SQL reproduces.
fn first_error<'a>(db: &Path, e: &'a Value) -> &'a Value {
    let c = &e["chains"][0];
    assert_eq!(c["kind"], "cuda_error", "{}", e["chains"]);
    let sql = c["evidence"]["sql"].as_str().unwrap();
    assert_eq!(query_u64(db, sql) as i64, c["evidence"]["value"].as_i64().unwrap(), "{sql}");
    c
}

#[test]
fn an_illegal_address_names_the_kernel_that_faulted_and_the_exit() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fault.db");
    let e = traced(
        &db,
        &[("MOCK_CUDA_FAULT_AT", "50"), ("MOCK_CUDA_KERNEL_US", "1000")],
        "gpuloop",
        &["--steps", "100", "--kernels", "1", "--host-us", "1000"],
        &[],
    );
    let c = first_error(&db, &e);
    assert_eq!(c["cause"], "device_fault", "{c}");
    let s = &chain_words(c);
    for want in [
        "first failing CUDA call was cudaStreamSync",
        "cudaErrorIllegalAddress (700)",
        "the one kernel launched since the process's last successful wait faulted: gpuloop_forward_gemm",
        "the process exited with code 2",
    ] {
        assert!(s.contains(want), "{want:?} in {s}");
    }
    // `stats` counts the failures per process and error
    let out = causeway().args(["stats", "--json", "--db"]).arg(&db).output().unwrap();
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = &stats["failures"][0]["errors"];
    let sync = errors.as_array().unwrap().iter().find(|e| e["op"] == "cudaStreamSync").expect("the failing sync");
    assert_eq!(
        (sync["error"].as_str(), sync["calls"].as_u64()),
        (Some("cudaErrorIllegalAddress"), Some(1)),
        "{errors}"
    );
}

#[test]
fn an_out_of_memory_names_the_request_and_what_the_process_held() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("oom.db");
    let e = traced(
        &db,
        &[("MOCK_CUDA_HEAP_MB", "70")],
        "train",
        &["--iters", "200", "--churn", "20"],
        &["--nvml-hz", "0", "--stacks"],
    );
    let c = first_error(&db, &e);
    assert_eq!((c["cause"].as_str(), c["op"].as_str()), (Some("out_of_memory"), Some("cudaMalloc")), "{c}");
    let s = &chain_words(c);
    // the largest allocation still held, with where it was made (its stack's call site)
    for want in [
        "cudaErrorMemoryAllocation (2)",
        "it asked for",
        "while holding",
        "the largest: 64.0 MiB at ",
        "exited with code",
    ] {
        assert!(s.contains(want), "{want:?} in {s}");
    }
    // what it held is its live allocations just before (within the 70 MiB device)
    let held: f64 = s.split("while holding ").nth(1).and_then(|r| r.split(" MiB").next()).unwrap().parse().unwrap();
    assert!((64.0..=70.0).contains(&held), "{held} MiB in {s}");
}

/// Xid 79 (the GPU fell off the bus) on GPU 0 while the traced loop uses it, and its calls fail
/// after it: the GPU's fault is named first, with the process and the call that failed.
#[test]
fn an_xid_names_the_gpu_and_the_calls_that_failed_with_it() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("xid.db");
    let build = causeway_testdata::mock_cuda_build();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let xid = format!("{}:79:0", now_ms + 300);
    let nvml = build.join("libnvidia-ml.so.1");
    let e = traced(
        &db,
        &[("MOCK_NVML_XID", xid.as_str()), ("MOCK_CUDA_FAULT_AT", "150"), ("MOCK_CUDA_KERNEL_US", "1000")],
        "gpuloop",
        &["--steps", "300", "--kernels", "1", "--host-us", "1000"],
        &["--nvml-hz", "10", "--nvml-lib", nvml.to_str().unwrap()],
    );
    let c = &e["chains"][0];
    assert_eq!((c["kind"].as_str(), c["op"].as_str()), (Some("gpu_fault"), Some("Xid 79")), "{}", e["chains"]);
    let s = &chain_words(c);
    for want in
        ["GPU 0 reported Xid 79: GPU has fallen off the bus", "'s cudaStreamSync failed with cudaErrorIllegalAddress"]
    {
        assert!(s.contains(want), "{want:?} in {s}");
    }
    let sql = c["evidence"]["sql"].as_str().unwrap();
    assert_eq!(query_u64(&db, sql), 1, "{sql}");
    // the process's own error follows it
    assert_eq!(e["chains"][1]["kind"], "cuda_error", "{}", e["chains"]);
}

/// The NVIDIA driver's own Xid line in the kernel log names the process it blamed: written to
/// `/dev/kmsg` by the test (root; the line is NVRM's format, GPU 0's PCI address on the mock NVML)
/// while the trace runs, near the mock NVML's Xid 79 on GPU 0, the chain names that process.
#[test]
fn the_drivers_xid_line_names_the_process_it_blamed() {
    require_root_to("trace with eBPF and write the kernel log");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kmsg.db");
    let build = causeway_testdata::mock_cuda_build();
    let nvml = build.join("libnvidia-ml.so.1");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let mut tracer = causeway()
        .env("MOCK_NVML_XID", format!("{}:79:0", now_ms + 2500))
        .args(["trace", "--duration", "4s", "--kill-on-stop", "--quiet", "--nvml-hz", "10", "--nvml-lib"])
        .arg(&nvml)
        .arg("--db")
        .arg(&db)
        .arg("--")
        .arg(build.join("gpuloop"))
        .args(["--steps", "100000", "--kernels", "1", "--host-us", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // events written means the trace loop runs, and the kernel log is read from before it
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !db.exists() || common::query_rows(&db, "SELECT count(*) FROM events")[0][0].as_u64() == Some(0) {
        assert!(std::time::Instant::now() < deadline, "the trace never wrote an event");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    use std::io::Write;
    let mut kmsg = std::fs::OpenOptions::new().write(true).open("/dev/kmsg").unwrap();
    kmsg.write_all(b"<3>NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=culprit, GPU has fallen off the bus.\n")
        .unwrap();
    assert!(tracer.wait().unwrap().success());
    assert_eq!(
        query_u64(
            &db,
            "SELECT count(*) FROM events WHERE source = 2 AND op = 2 AND gpu_id = 0 AND pid = 4242 AND arg0 = 79"
        ),
        1,
        "the driver's line, its GPU found by PCI address"
    );
    let out = causeway().args(["explain", "--json", "--db"]).arg(&db).output().unwrap();
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = e["chains"].as_array().unwrap().iter().find(|c| c["kind"] == "gpu_fault").expect("a gpu_fault chain");
    let s = &chain_words(c);
    assert!(s.contains("GPU 0 reported Xid 79") && s.contains("the driver's log line named pid 4242 (culprit)"), "{s}");
    assert_eq!(c["pid"], 4242, "{c}");
}

#[test]
fn a_clean_run_names_no_error_and_no_hang() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("clean.db");
    let e = traced(&db, &[], "gpuloop", &["--steps", "100", "--kernels", "2", "--host-us", "200"], &[]);
    let named: Vec<&Value> =
        e["chains"].as_array().unwrap().iter().filter(|c| c["kind"] == "cuda_error" || c["kind"] == "hang").collect();
    assert!(named.is_empty(), "{named:?}");
}
