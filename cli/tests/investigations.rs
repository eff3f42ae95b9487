//! The bundled investigations (traces Causeway recorded on planted faults) still explain their
//! planted cause as the first chain, with the right culprit, and their evidence SQL reproduces the
//! figure; `causeway demo` shows them without root or a GPU.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn dir() -> PathBuf {
    causeway_testdata::repo_root().join("investigations")
}

fn causeway(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn explain(name: &str) -> Value {
    let db = dir().join(name).join("trace.db");
    serde_json::from_str(&causeway(&["explain", "--db", db.to_str().unwrap(), "--json"])).unwrap()
}

fn first(name: &str) -> Value {
    explain(name)["chains"][0].clone()
}

#[test]
fn every_investigation_names_its_planted_cause_first() {
    let c = first("cpu-contention");
    assert_eq!((c["severity"].as_str(), c["cause"].as_str()), (Some("HIGH"), Some("preempted")));
    assert_eq!(c["culprit"]["comm"], "backup-rsync");
    assert_eq!(c["cpus"][0]["cpu"], 0);

    let c = first("io-storm");
    assert_eq!((c["cause"].as_str(), c["culprit"]["role"].as_str()), (Some("uninterruptible"), Some("issued_io")));
    assert_eq!(c["culprit"]["comm"], "nightly-backup");

    let c = first("dataloader-starvation");
    assert_eq!((c["kind"].as_str(), c["cause"].as_str()), (Some("feeding_gap"), Some("sleep")));
    assert!(c["culprit"]["comm"].as_str().unwrap().starts_with("dataloader"), "{}", c["culprit"]);

    let e = explain("allocator-churn");
    assert_eq!(e["chains"][0]["cause"], "allocation_latency_growth");
    // the allocations are said in the headline's details
    assert!(e["chains"][0]["details"].to_string().contains("MiB not freed"), "{}", e["chains"][0]);
    assert!(e["chains"].as_array().unwrap().iter().any(|c| c["cause"] == "unfreed_allocations"));

    assert_eq!(first("sync-storm")["cause"], "sync_after_launch");

    let e = explain("clean");
    for c in e["chains"].as_array().unwrap() {
        assert_ne!(c["severity"], "HIGH", "{}", c["summary"]);
        assert_ne!(c["culprit"]["comm"], "log-shipper", "the bystander was blamed: {}", c["summary"]);
    }
}

#[test]
fn every_first_chain_is_reproduced_by_its_evidence_sql() {
    for name in ["cpu-contention", "io-storm", "dataloader-starvation", "allocator-churn", "sync-storm"] {
        let c = first(name);
        let db = dir().join(name).join("trace.db");
        let out: Value = serde_json::from_str(&causeway(&[
            "query",
            "--db",
            db.to_str().unwrap(),
            "--json",
            c["evidence"]["sql"].as_str().unwrap(),
        ]))
        .unwrap();
        assert_eq!(out["rows"][0][0], c["evidence"]["value"], "{name}: evidence SQL disagrees with the chain");
    }
}

#[test]
fn demo_explains_a_bundled_investigation_and_says_how_to_open_it() {
    let out = causeway(&["demo"]);
    assert!(out.contains("[c1] HIGH"), "{out}");
    assert!(out.contains("preempted by backup-rsync"), "{out}");
    assert!(out.contains("causeway mcp --db"), "{out}");
    let list = causeway(&["demo", "--list"]);
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(
        names,
        ["allocator-churn", "clean", "cpu-contention", "dataloader-starvation", "io-storm", "sync-storm"]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(["demo", "no-such-thing"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there are: allocator-churn"));
}

#[test]
fn bundled_traces_stay_small() {
    for name in ["allocator-churn", "clean", "cpu-contention", "dataloader-starvation", "io-storm", "sync-storm"] {
        let size = std::fs::metadata(dir().join(name).join("trace.db")).unwrap().len();
        assert!(size < 8 << 20, "{name}: {size} bytes");
    }
}

#[test]
fn calls_in_a_mapped_file_explain_every_investigation_as_calls_in_memory() {
    // a budget of 0 MiB puts every scope's calls in a mapped temporary file: the report is the same,
    // on SQLite (calls read in order) and on DuckDB (read unsorted: sorted in place in the file)
    let tmp = tempfile::tempdir().unwrap();
    let mut traces: Vec<PathBuf> =
        ["cpu-contention", "io-storm", "dataloader-starvation", "allocator-churn", "sync-storm", "clean"]
            .iter()
            .map(|name| dir().join(name).join("trace.db"))
            .collect();
    for name in ["cpu-contention", "allocator-churn"] {
        let to = tmp.path().join(format!("{name}.duckdb"));
        let from = dir().join(name).join("trace.db");
        causeway(&["convert", "--from", from.to_str().unwrap(), "--to", to.to_str().unwrap()]);
        traces.push(to);
    }
    for db in &traces {
        let args = ["explain", "--db", db.to_str().unwrap(), "--json"];
        let mapped = Command::new(env!("CARGO_BIN_EXE_causeway"))
            .args(args)
            .env("CAUSEWAY_CALLS_MEMORY_MIB", "0")
            .env("CAUSEWAY_LOG", "causeway_analysis=debug")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&mapped.stderr);
        assert!(mapped.status.success(), "{}: {log}", db.display());
        assert!(
            log.contains("calls are in a mapped temporary file"),
            "{}: the calls stayed in memory: {log}",
            db.display()
        );
        assert_eq!(String::from_utf8(mapped.stdout).unwrap(), causeway(&args), "{}", db.display());
    }
}
