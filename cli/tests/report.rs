//! The report `causeway explain` prints for people (`cli/src/report.rs`), on the kernel trace of
//! the analysis tests: the user's Python line behind a chain in the one-screen report, and every
//! frame of the chain's stack in `--chain`.

#[path = "../../analysis/tests/common/mod.rs"]
mod common;

use std::process::Command;

fn causeway(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_report_names_the_python_line_and_the_chain_shows_its_stack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.db");
    common::kernel_trace::kernel_trace(&path);
    let db = path.to_str().unwrap();
    let e: serde_json::Value =
        serde_json::from_str(&causeway(&["explain", "--db", db, "--json", "--top", "50"])).unwrap();
    let chains = e["chains"].as_array().unwrap();
    let c = chains.iter().find(|c| c["op"] == "cuLaunchKernelEx" && c["cause"] == "preempted").expect("launch chain");
    let id = c["id"].as_str().unwrap();

    let brief = causeway(&["explain", "--db", db, "--top", "50"]);
    assert!(
        brief.contains(
            "at: /app/model.py:9 in matmul ← /app/train.py:30 in step ← /app/train.py:51 in <module> (behind 1 of the worst calls)"
        ),
        "{brief}"
    );
    let full = causeway(&["explain", "--db", db, "--chain", id]);
    assert!(full.contains("stack 1 (0x0000000000000077), behind 1 of the worst calls:"), "{full}");
    assert!(full.contains("    at::native::gemm()+0x3a  [libtorch_cuda.so]"), "{full}");
}
