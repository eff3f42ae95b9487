//! Every figure in testdata/ingero-dbs/FACTS.json, reproduced by `causeway stats --json` to 0.001 us,
//! on the real Ingero DBs, and those DBs left byte-identical with no sidecar files.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn shared_dbs() -> PathBuf {
    causeway_testdata::ingero_dbs()
}

fn stats(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).arg("stats").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "stats {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stats --json prints one JSON object")
}

fn close(a: &Value, b: &Value) -> bool {
    (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 0.0005
}

fn digest(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn every_facts_figure_is_reproduced() {
    let dir = shared_dbs();
    let facts: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("FACTS.json")).unwrap()).unwrap();
    let dbs = facts["dbs"].as_object().unwrap();
    assert!(dbs.len() >= 5, "FACTS.json lists {} DBs", dbs.len());
    let mut checked = 0;
    for (name, f) in dbs {
        let path = dir.join(name);
        let before = digest(&path);
        let s = stats(&["--db", path.to_str().unwrap()]);
        assert_eq!(s["events"], f["events"]["count"], "{name}: events");
        assert_eq!(s["first_ns"], f["events"]["first_timestamp_ns"], "{name}: first_ns");
        assert_eq!(s["last_ns"], f["events"]["last_timestamp_ns"], "{name}: last_ns");
        let ops = s["ops"].as_array().unwrap();
        let want = f["ops"].as_array().unwrap();
        assert_eq!(ops.len(), want.len(), "{name}: number of (source, op) rows");
        for w in want {
            let got = ops
                .iter()
                .find(|o| o["source"] == w["source"] && o["op_code"] == w["op_code"])
                .unwrap_or_else(|| panic!("{name}: no row for {}", w["op"]));
            assert_eq!(got["op"], w["op"], "{name}: op name");
            assert_eq!(got["count"], w["count"], "{name} {}: count", w["op"]);
            for k in ["sum_us", "avg_us", "min_us", "max_us", "p50_us", "p90_us", "p95_us", "p99_us"] {
                assert!(close(&got[k], &w[k]), "{name} {}: {k} = {} want {}", w["op"], got[k], w[k]);
                checked += 1;
            }
        }
        // Per process: event counts per op and off-CPU seconds.
        let pp = stats(&["--db", path.to_str().unwrap(), "--per-process"]);
        let procs = pp["processes"].as_array().unwrap();
        for wp in f["processes"].as_array().unwrap() {
            let gp =
                procs.iter().find(|p| p["pid"] == wp["pid"]).unwrap_or_else(|| panic!("{name}: pid {}", wp["pid"]));
            assert_eq!(gp["name"], wp["name"], "{name}: name of pid {}", wp["pid"]);
            assert_eq!(gp["events"], wp["events"], "{name}: events of pid {}", wp["pid"]);
            for (op, n) in wp["by_op"].as_object().unwrap() {
                let row = gp["ops"].as_array().unwrap().iter().find(|o| o["op"] == *op).unwrap();
                assert_eq!(&row["count"], n, "{name}: pid {} {op}", wp["pid"]);
            }
            let off = gp["ops"].as_array().unwrap().iter().find(|o| o["op"] == "sched_switch");
            let off_s = off.map(|o| o["sum_us"].as_f64().unwrap() / 1e6).unwrap_or(0.0);
            assert!(
                (off_s - wp["sched_switch_off_cpu_s"].as_f64().unwrap()).abs() < 1e-6,
                "{name}: off-CPU of {}",
                wp["pid"]
            );
            checked += 1;
        }
        assert_eq!(before, digest(&path), "{name} changed on disk");
        for side in ["-wal", "-shm", "-journal"] {
            let mut p = path.clone().into_os_string();
            p.push(side);
            assert!(!Path::new(&p).exists(), "{name}{side} appeared");
        }
    }
    assert!(checked > 100, "only {checked} figures checked");
}

#[test]
fn since_is_relative_to_the_trace_not_to_now() {
    let dir = shared_dbs();
    let db = dir.join("pytorch-dataloader-starvation.db");
    // The trace ended months before this test runs: a window relative to now would be empty.
    let s = stats(&["--db", db.to_str().unwrap(), "--since", "10s"]);
    let last: i64 = 1_774_015_650_149_333_856;
    assert_eq!(s["last_ns"], last);
    assert!(s["first_ns"].as_i64().unwrap() >= last - 10_000_000_000);
    let n = s["events"].as_u64().unwrap();
    assert!(n > 0 && n < 3807, "10 s window holds {n} events");
}

#[test]
fn a_sampled_db_says_so_and_shows_true_totals() {
    let dir = shared_dbs();
    let s = stats(&["--db", dir.join("pytorch-dataloader-starvation.db").to_str().unwrap()]);
    let note = &s["sampled"];
    assert!(note["note"].as_str().unwrap().contains("sample"));
    let totals = note["true_totals"].as_array().unwrap();
    let launch = totals.iter().find(|t| t["op"] == "cuLaunchKernel").unwrap();
    // event_aggregates: 70 cuLaunchKernel happened in the first minute bucket, 41 stored (plus later buckets).
    assert!(launch["count"].as_u64().unwrap() > launch["stored"].as_u64().unwrap());
    assert_eq!(launch["stored"], 41);
    let unsampled = stats(&["--db", dir.join("sample-gpu-node-02.db").to_str().unwrap()]);
    assert!(unsampled.get("sampled").is_none());
}
