//! `causeway trace` and `causeway check` as a user runs them (root, eBPF): a working setup prints no
//! warning (aya's "map cw_inflight ... unsupported" used to read as a fault), the trace ends with
//! the libraries it probed, and `check` says what is covered per library.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::require_root_to;

fn mock_build() -> PathBuf {
    causeway_testdata::mock_cuda_build()
}

#[test]
fn a_working_trace_prints_no_warning() {
    require_root_to("trace with eBPF");
    let build = mock_build();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .env_remove("CAUSEWAY_LOG")
        .args(["trace", "--db"])
        .arg(&db)
        .arg("--")
        .arg(build.join("train"))
        .args(["--iters", "20"])
        .output()
        .expect("causeway trace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace failed: {stderr}");
    for bad in ["WARN", "unsupported in Aya", "ERROR", "panicked"] {
        assert!(!stderr.contains(bad), "a working trace printed {bad:?}:\n{stderr}");
    }
    assert!(
        stderr.contains("probed ") && stderr.contains("libcudart.so.12"),
        "the trace names what it probed:\n{stderr}"
    );
    assert!(db.exists());
}

#[test]
fn the_node_name_is_the_one_given_and_a_blank_one_is_refused() {
    require_root_to("trace with eBPF");
    let build = mock_build();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("n.db");
    let trace = |node: &str| {
        Command::new(env!("CARGO_BIN_EXE_causeway"))
            .args(["trace", "--nvml-hz", "0", "--node", node, "--db"])
            .arg(&db)
            .arg("--")
            .arg(build.join("train"))
            .args(["--iters", "5"])
            .output()
            .expect("causeway trace runs")
    };
    let out = trace("rack7-gpu3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let q = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["query", "--json", "--db"])
        .arg(&db)
        .arg("SELECT node FROM sessions")
        .output()
        .expect("causeway query runs");
    let text = String::from_utf8_lossy(&q.stdout);
    assert!(text.contains("rack7-gpu3"), "{text}");
    let blank = trace("  ");
    assert!(!blank.status.success());
    assert!(String::from_utf8_lossy(&blank.stderr).contains("--node"), "{}", String::from_utf8_lossy(&blank.stderr));
}

#[test]
fn check_reports_the_loader_hook_and_coverage_per_library() {
    require_root_to("trace with eBPF");
    let out =
        Command::new(env!("CARGO_BIN_EXE_causeway")).args(["check", "--json"]).output().expect("causeway check runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("check --json is JSON ({e}): {text}"));
    let items = v["items"].as_array().expect("items");
    let hook = items.iter().find(|i| i["name"] == "dynamic loader hook").expect("a loader-hook item");
    assert_eq!(hook["ok"], true, "{hook}");
    // what the host can say when a job hangs or fails: calls in flight (Linux 6.9+: this kernel),
    // NVML (absent here: said, not required), the kernel log
    let named = |n: &str| items.iter().find(|i| i["name"] == n).unwrap_or_else(|| panic!("a {n} item: {items:?}"));
    assert_eq!(named("calls in flight")["ok"], true, "{}", named("calls in flight"));
    assert_eq!(named("NVML")["required"], false);
    assert!(named("/dev/kmsg")["detail"].as_str().unwrap().contains("Xid"), "{}", named("/dev/kmsg"));
    let libs = v["cuda_libraries"].as_array().expect("cuda_libraries");
    let cov = v["coverage"].as_array().expect("coverage");
    assert_eq!(libs.len(), cov.len(), "one coverage entry per library");
    // the test venv's CUDA 13 runtime wheel exports every launch path
    if let Some(c) =
        cov.iter().find(|c| c["path"].as_str().is_some_and(|p| p.ends_with("nvidia/cu13/lib/libcudart.so.13")))
    {
        let launch: Vec<&str> = c["launch_symbols"].as_array().unwrap().iter().filter_map(|s| s.as_str()).collect();
        for s in ["cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"] {
            assert!(launch.contains(&s), "{s} missing from {launch:?}");
        }
    } else {
        panic!("check did not find the CUDA 13 wheel of the test venv (scripts/install-test-deps.sh): {libs:?}");
    }
}
