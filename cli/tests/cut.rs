//! `causeway cut`: an incident cut out of a trace is a trace of its own, with every event that
//! overlaps the window (counted by SQL on the original), the same event ids, and the same
//! explanation of the incident.

use std::path::PathBuf;
use std::process::Command;

fn causeway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = causeway(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn one(db: &str, sql: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&ok(&["query", "--json", "--db", db, sql])).unwrap();
    v["rows"][0][0].clone()
}

fn demo() -> PathBuf {
    causeway_testdata::repo_root().join("investigations/cpu-contention/trace.db")
}

#[test]
fn a_cut_holds_the_incident_and_explains_it_alike() {
    let orig = demo();
    let orig = orig.to_str().unwrap();
    let e: serde_json::Value = serde_json::from_str(&ok(&["explain", "--db", orig, "--json"])).unwrap();
    let c1 = &e["chains"][0];
    let worst = c1["evidence"]["event_ids"][0].as_i64().unwrap();
    let ts = one(orig, &format!("SELECT timestamp FROM events WHERE id = {worst}")).as_i64().unwrap();
    let (from, to) = (ts - 100_000_000, ts + 100_000_000);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("incident.db");
    let cut = out.to_str().unwrap();
    let out = causeway(&["cut", "--db", orig, "--out", cut, "--from", &from.to_string(), "--to", &to.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // every event whose span overlaps the window, and nothing else
    let overlapping = format!(
        "SELECT count(*) FROM events WHERE \
         (CASE WHEN source = 3 AND op = 1 THEN timestamp - duration ELSE timestamp END) <= {to} AND \
         (CASE WHEN source = 3 AND op = 1 THEN timestamp ELSE timestamp + duration END) >= {from}"
    );
    let want = one(orig, &overlapping).as_u64().unwrap();
    let total = one(orig, "SELECT count(*) FROM events").as_u64().unwrap();
    assert!(want > 0 && want < total, "the window holds part of the trace: {want} of {total}");
    assert_eq!(one(cut, "SELECT count(*) FROM events").as_u64(), Some(want));
    // the same ids: the worst call is the same row
    assert_eq!(one(cut, &format!("SELECT timestamp FROM events WHERE id = {worst}")).as_i64(), Some(ts));

    // the incident reads the same: the first chain of the cut names the same culprit and op
    let ce: serde_json::Value = serde_json::from_str(&ok(&["explain", "--db", cut, "--json"])).unwrap();
    assert_eq!(ce["chains"][0]["culprit"]["comm"], c1["culprit"]["comm"]);
    assert_eq!(ce["chains"][0]["op"], c1["op"]);
    assert!(
        ce["missing"].as_array().unwrap().iter().any(|m| m.as_str().unwrap().starts_with("cut from ")),
        "the cut says where it comes from: {}",
        ce["missing"]
    );
}

#[test]
fn a_cut_by_process_keeps_that_process_and_an_empty_scope_is_refused() {
    let orig = demo();
    let orig = orig.to_str().unwrap();
    let pid = one(orig, "SELECT pid FROM events WHERE source IN (1, 4) GROUP BY pid ORDER BY count(*) DESC LIMIT 1")
        .as_u64()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.db");
    let cut = out.to_str().unwrap();
    ok(&["cut", "--db", orig, "--out", cut, "--pid", &pid.to_string()]);
    let want = one(orig, &format!("SELECT count(*) FROM events WHERE pid = {pid}")).as_u64();
    assert_eq!(one(cut, "SELECT count(*) FROM events").as_u64(), want);
    assert_eq!(one(cut, &format!("SELECT count(*) FROM events WHERE pid != {pid}")).as_u64(), Some(0));

    let refused = causeway(&["cut", "--db", orig, "--out", dir.path().join("x.db").to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("nothing to cut"));
    assert!(!dir.path().join("x.db").exists());
}
