//! `causeway merge` as a user runs it: four nodes' traces of one job into one lake file with no
//! server, asked with the fleet's own commands (`--lake ducklake:FILE`): every event kept under its
//! node, the planted straggler named, the clocks said to be unmeasured and cross-checked with the
//! collectives (a node whose clock runs 40 ms ahead is caught), a second merge adding nothing, and
//! bad inputs refused before anything is written; two hosts that recorded one node name refused until
//! `--node TRACE=NODE` files one under a name of its own.

use std::path::{Path, PathBuf};
use std::process::Output;

use causeway_backends::SyntheticJob;
use common::ok;

mod common;

const MS: i64 = 1_000_000;

fn job() -> SyntheticJob {
    SyntheticJob {
        world: 4,
        steps: 120,
        period_ns: 10 * MS,
        start_ns: 1_790_000_000_000_000_000,
        comm_hash: 0x3e_12e,
        launches_per_step: 5,
        transfer_ns: 2 * MS,
        straggler: Some((2, 40, 59, 25 * MS)),
    }
}

/// One trace per node (`node-R` holds rank R), node `skewed` with its clock `skew_ns` ahead.
fn node_traces(dir: &Path, skewed: Option<(u32, i64)>) -> Vec<PathBuf> {
    (0..4u32)
        .map(|r| {
            let path = dir.join(format!("node-{r}.db"));
            let skew = skewed.filter(|s| s.0 == r).map_or(0, |s| s.1);
            job().write_node(&path, &format!("node-{r}"), &[(r, skew, None)], 0).unwrap();
            path
        })
        .collect()
}

fn causeway(args: &[&str]) -> Output {
    common::causeway().env_remove("CAUSEWAY_LAKE").args(args).output().unwrap()
}

fn merge(out: &Path, traces: &[PathBuf]) -> Output {
    let mut args = vec!["merge".to_string(), "--out".into(), out.display().to_string()];
    args.extend(traces.iter().map(|p| p.display().to_string()));
    causeway(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn fleet_json(lake: &str, what: &str) -> serde_json::Value {
    let out = causeway(&["fleet", what, "--json", "--lake", lake]);
    serde_json::from_str(&ok(out, &format!("fleet {what}"))).unwrap()
}

fn local_events(path: &Path) -> i64 {
    let store = causeway_backends::open_store(path).unwrap();
    store.info().events as i64
}

#[test]
fn node_traces_merge_into_one_lake_file_that_the_fleet_commands_answer() {
    let dir = tempfile::tempdir().unwrap();
    let traces = node_traces(dir.path(), None);
    let file = dir.path().join("job.ducklake");
    let text = ok(merge(&file, &traces), "merge");
    assert!(text.contains("merged 4 trace(s) of 4 node(s)") && text.contains("clocks: not measured"), "{text}");
    let lake = format!("ducklake:{}", file.display());

    // every node, with every event of its trace (tier all), nothing collapsed
    let nodes = fleet_json(&lake, "nodes");
    let nodes = nodes.as_array().unwrap();
    assert_eq!(nodes.len(), 4, "{nodes:?}");
    for (r, path) in traces.iter().enumerate() {
        let n = nodes.iter().find(|n| n["node"] == format!("node-{r}")).unwrap();
        assert_eq!(n["events"].as_i64(), Some(local_events(path)), "{n}");
        assert_eq!(n["ranks"], r.to_string(), "{n}");
        assert_eq!(n["finished"], true, "{n}");
    }

    // the planted straggler: rank 2 on node-2, late at its 20 planted collectives
    let s = fleet_json(&lake, "stragglers");
    let top = &s["stragglers"][0];
    assert_eq!((top["node"].as_str(), top["rank"].as_i64()), (Some("node-2"), Some(2)), "{s}");
    assert_eq!(top["late_collectives"], 20, "{s}");
    assert_eq!(s["stragglers"].as_array().unwrap().len(), 1, "{s}");

    // the clocks: not measured, and the collectives agree with taking them as equal
    let clocks = fleet_json(&lake, "clock");
    let clocks = clocks.as_array().unwrap();
    assert_eq!(clocks.len(), 4, "{clocks:?}");
    for c in clocks {
        assert_eq!((c["measured"].as_bool(), c["flushes"].as_i64()), (Some(false), Some(0)), "{c}");
        assert!(c["residual_collectives"].as_i64().unwrap() > 100, "{c}");
        assert_eq!(c["disagrees"], false, "{c}");
    }
    let text = ok(causeway(&["fleet", "clock", "--lake", &lake]), "fleet clock");
    assert!(text.contains("node-0: not measured"), "{text}");

    // the drill-down: node-2's own report, read from the merged lake, is its local trace's
    let remote: serde_json::Value = serde_json::from_str(&ok(
        causeway(&["fleet", "explain", "--json", "--node", "node-2", "--lake", &lake]),
        "fleet explain",
    ))
    .unwrap();
    let local: serde_json::Value =
        serde_json::from_str(&ok(causeway(&["explain", "--json", "--db", traces[2].to_str().unwrap()]), "explain"))
            .unwrap();
    for k in ["gpu_calls", "slow_calls", "slow_time_ns", "verdict", "chains_total"] {
        assert_eq!(remote[k], local[k], "{k}: lake {} vs local {}", remote[k], local[k]);
    }
    assert!(remote["gpu_calls"].as_u64().unwrap() > 0, "{remote}");

    // guarded SQL over the merged lake: every event of every node, and the lake's files refused
    let total: i64 = traces.iter().map(|p| local_events(p)).sum();
    let out = ok(causeway(&["fleet", "query", "--json", "--lake", &lake, "SELECT count(*) AS n FROM events"]), "query");
    assert!(out.contains(&total.to_string()), "{out} (want {total})");
    let refused = causeway(&["fleet", "query", "--lake", &lake, "SELECT * FROM read_parquet('/etc/passwd')"]);
    assert!(!refused.status.success(), "read_parquet was not refused");

    // merged again: exactly once, nothing added
    let again = ok(merge(&file, &traces), "merge again");
    assert_eq!(again.matches("nothing new (merged before)").count(), 4, "{again}");
    let nodes = fleet_json(&lake, "nodes");
    let events: i64 = nodes.as_array().unwrap().iter().map(|n| n["events"].as_i64().unwrap()).sum();
    assert_eq!(events, total);
}

#[test]
fn a_node_whose_clock_runs_ahead_is_caught_by_the_collectives() {
    let dir = tempfile::tempdir().unwrap();
    let traces = node_traces(dir.path(), Some((3, 40 * MS)));
    let file = dir.path().join("skewed.ducklake");
    ok(merge(&file, &traces), "merge");
    let clocks = fleet_json(&format!("ducklake:{}", file.display()), "clock");
    let skewed = clocks.as_array().unwrap().iter().find(|c| c["node"] == "node-3").unwrap().clone();
    assert_eq!(skewed["disagrees"], true, "{clocks}");
    let residual = skewed["residual_ns"].as_i64().unwrap();
    assert!((residual - 40 * MS).abs() < MS, "node-3's completions sit {residual} ns from the fleet's, want ~40 ms");
    for c in clocks.as_array().unwrap().iter().filter(|c| c["node"] != "node-3") {
        assert_eq!(c["disagrees"], false, "{c}");
    }
}

#[test]
fn bad_inputs_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let traces = node_traces(dir.path(), None);
    let file = dir.path().join("never.ducklake");
    let ingero = causeway_testdata::ingero_db("sample-gpu-node-01.db");
    for (bad, says) in [
        (ingero, "causeway convert"),
        (dir.path().join("missing.db"), "missing.db"),
        (dir.path().to_path_buf(), "cannot be merged"),
    ] {
        let out = merge(&file, &[traces[0].clone(), bad.clone()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{}: {err}", bad.display());
        assert!(!file.exists(), "the lake was created although {} was refused", bad.display());
    }
    // and reading a lake file that was never written says so
    let out = causeway(&["fleet", "nodes", "--lake", &format!("ducklake:{}", file.display())]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no lake at"));
}

/// A copy of the job's trace of rank `r` recorded as node `node` on host `host`.
fn trace_on_host(dir: &Path, file: &str, r: u32, node: &str, host: &str) -> PathBuf {
    let path = dir.join(file);
    job().write_node(&path, node, &[(r, 0, None)], 0).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE sessions SET hostname = ?1", [host]).unwrap();
    path
}

#[test]
fn two_hosts_under_one_node_are_refused_and_told_apart_with_node() {
    let dir = tempfile::tempdir().unwrap();
    let a = trace_on_host(dir.path(), "a.db", 0, "gpu", "host-a");
    let twin = trace_on_host(dir.path(), "twin.db", 1, "gpu", "host-b");
    let file = dir.path().join("twins.ducklake");

    // two hosts that recorded one name: refused before anything is written, with the way out
    let out = merge(&file, &[a.clone(), twin.clone()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("two hosts") && err.contains("host-a") && err.contains("host-b"),
        "{err}"
    );
    assert!(err.contains(&format!("--node {}=NAME", twin.display())), "{err}");
    assert!(!file.exists(), "the lake was created although the merge was refused");

    // --node files one under a name of its own; both are then in the lake, each with its events
    let rename = format!("{}=gpu-b", twin.display());
    let mut args = vec!["merge", "--out", file.to_str().unwrap(), "--node", &rename];
    args.extend([a.to_str().unwrap(), twin.to_str().unwrap()]);
    let text = ok(causeway(&args), "merge --node");
    assert!(text.contains("merged 2 trace(s) of 2 node(s)"), "{text}");
    let lake = format!("ducklake:{}", file.display());
    let nodes = fleet_json(&lake, "nodes");
    let names: Vec<&str> = nodes.as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["gpu", "gpu-b"], "{nodes}");
    let b = nodes.as_array().unwrap().iter().find(|n| n["node"] == "gpu-b").unwrap();
    assert_eq!(b["events"].as_i64(), Some(local_events(&twin)), "{b}");

    // a third host's trace under a node the lake already has from another host: refused by the
    // lake's own record, the lake unchanged
    let third = trace_on_host(dir.path(), "third.db", 2, "gpu", "host-c");
    let out = merge(&file, std::slice::from_ref(&third));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("already in the lake from host `host-a`"), "{err}");
    assert_eq!(fleet_json(&lake, "nodes").as_array().unwrap().len(), 2);

    // a --node that names no input, or no node
    for (bad, says) in [
        (format!("{}=x", dir.path().join("other.db").display()), "is not one of the traces"),
        (format!("{}=", a.display()), "expected TRACE=NODE"),
    ] {
        let out = causeway(&["merge", "--out", file.to_str().unwrap(), "--node", &bad, a.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{bad}: {err}");
    }
}
