//! The planted-fault scenario suite, run for real (root, eBPF): every scenario of
//! tests/scenarios/run.py in both variants, twice, each required to put its planted cause first
//! with the right culprit. The runner prints one line per run and 'N passed, M failed'; each run
//! starts on a settled host, and a failed run is retried once with a `RETRY` line (host noise on a
//! 2-core VM): a fault not found first twice in a row fails the suite.

use std::process::Command;

#[test]
fn every_planted_fault_is_the_first_chain_in_every_run() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the scenario suite traces with eBPF and must run as root (CI does)");
    let root = causeway_testdata::repo_root();
    let runs = std::env::var("CAUSEWAY_SCENARIO_RUNS").unwrap_or_else(|_| "2".into());
    let out = Command::new("python3")
        .arg(root.join("tests/scenarios/run.py"))
        .args(["--runs", &runs, "--causeway", env!("CARGO_BIN_EXE_causeway")])
        .output()
        .expect("python3 runs the scenario suite");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(out.status.success(), "scenario suite failed: {summary}");
    assert!(summary.ends_with(" 0 failed") && !summary.starts_with("0 passed"), "{summary}");
}
