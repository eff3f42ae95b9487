//! A trace written as a series of files, live (root, eBPF): rollover under load loses no call
//! (every launch of the workload is in the series or counted lost), every file is a trace of its
//! own, the series answers while it is written, and a `kill -9` of the tracer mid-series leaves
//! every file readable with the series opening as one trace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{causeway, query_u64, require_root_to};

fn launchloop() -> PathBuf {
    causeway_testdata::mock_cuda_build().join("launchloop")
}

fn parts(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "db")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Wait (a minute at most) until the series being written has `n` files.
fn wait_for_parts(series: &Path, n: usize) {
    let start = Instant::now();
    while parts(series).len() < n {
        assert!(start.elapsed() < Duration::from_secs(60), "fewer than {n} files within a minute");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A part opened read-only as any reader that must not write it opens it: through its WAL when
/// that holds pages, else immutable (a kill while a finished part leaves WAL mode can leave a hot
/// rollback journal of its header, which a plain read-only open refuses to roll back).
fn open_part(part: &Path) -> rusqlite::Connection {
    let mut wal = part.as_os_str().to_owned();
    wal.push("-wal");
    let through_wal = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 32);
    let uri = format!("file:{}?{}", part.display(), if through_wal { "mode=ro" } else { "immutable=1" });
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    rusqlite::Connection::open_with_flags(&uri, flags).unwrap_or_else(|e| panic!("{uri}: {e}"))
}

/// A part opens on its own and passes SQLite's integrity check; its event count.
fn check_part(part: &Path) -> u64 {
    let conn = open_part(part);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{}: {e}", part.display()));
    assert_eq!(check, "ok", "{}", part.display());
    query_u64(part, "SELECT count(*) FROM events")
}

const LAUNCHES: &str =
    "SELECT count(*) FROM events e JOIN ops o ON o.source_id = e.source AND o.op_id = e.op WHERE o.name = 'cudaLaunchKernel'";

#[test]
fn a_series_rolls_over_under_load_without_losing_a_call() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("host");
    let iters = 120_000u64;
    let tracer = causeway()
        .args(["trace", "--json", "--nvml-hz", "0", "--max-file-size", "512K", "--db"])
        .arg(&series)
        .arg("--")
        .arg(launchloop())
        .args(["--iters", &iters.to_string(), "--work-ns", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // while it is written, the series answers as one trace, and its figures grow
    wait_for_parts(&series, 2);
    let early = query_u64(&series, "SELECT count(*) FROM events");
    std::thread::sleep(Duration::from_millis(700));
    let later = query_u64(&series, "SELECT count(*) FROM events");
    assert!(later > early && early > 0, "a live series answers with fresh figures: {early} then {later}");

    let out = tracer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let done: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["done"] == true)
        .expect("the final report line");
    let written = done["report"]["events_written"].as_u64().unwrap();
    let cuda_lost: u64 = done["report"]["losses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["source"] == 1)
        .map(|l| l["count"].as_u64().unwrap())
        .sum();

    let files = parts(&series);
    assert!(files.len() >= 3, "rollover under load: {files:?}\n{stderr}");
    let per_part: Vec<u64> = files.iter().map(|p| check_part(p)).collect();
    assert_eq!(per_part.iter().sum::<u64>(), written, "stored across the files = written: {per_part:?}");
    assert_eq!(query_u64(&series, "SELECT count(*) FROM events"), written);
    assert_eq!(query_u64(&series, "SELECT count(*) - count(DISTINCT id) FROM events"), 0, "ids unique across files");
    // the loop's launches and its one warm-up launch
    let made = iters + 1;
    let launches = query_u64(&series, LAUNCHES);
    assert!(
        launches <= made && launches + cuda_lost >= made,
        "every launch is stored or counted lost: {launches} stored + {cuda_lost} lost of {made}"
    );
    let spread = files.iter().filter(|p| query_u64(p, LAUNCHES) > 0).count();
    assert!(spread >= 2, "the workload's calls span the rollovers: {spread} files hold launches");

    // the series reads as one trace everywhere: stats, and a standalone cut of it
    let stats = causeway().args(["stats", "--db"]).arg(&series).output().unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    assert!(String::from_utf8_lossy(&stats.stdout).contains("cudaLaunchKernel"));
    let cut = dir.path().join("whole.db");
    let c = causeway().args(["cut", "--since", "1h", "--db"]).arg(&series).arg("--out").arg(&cut).output().unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert_eq!(query_u64(&cut, LAUNCHES), launches);
}

#[test]
fn killing_the_tracer_mid_series_leaves_every_file_readable() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("host");
    let mut tracer = causeway()
        .args(["trace", "--quiet", "--nvml-hz", "0", "--max-file-size", "256K", "--db"])
        .arg(&series)
        .arg("--")
        .arg(launchloop())
        .args(["--iters", "5000000", "--work-ns", "20000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_parts(&series, 3);
    std::thread::sleep(Duration::from_millis(300));
    // the workload: the tracer's child (killed after it, as a crash of the tracer would leave it)
    let children: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", tracer.id()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(String::from).collect::<Vec<_>>())
        .collect();
    tracer.kill().unwrap(); // SIGKILL
    tracer.wait().unwrap();
    for pid in &children {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }

    let mut files = parts(&series);
    // the kill may have come while the next file was being created: begun, without its tables
    // yet (the series reads the files before it, and the next start removes it)
    let newest = files.last().unwrap().clone();
    let conn = open_part(&newest);
    let born: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = 'events'", [], |r| r.get(0)).unwrap();
    if born == 0 {
        files.pop();
    }
    let per_part: Vec<u64> = files.iter().map(|p| check_part(p)).collect();
    // (the newest file may have been begun just before the kill, with nothing committed yet)
    let closed = &per_part[..per_part.len() - 1];
    assert!(closed.iter().all(|&n| n > 0), "every file holds its committed events: {per_part:?}");
    assert_eq!(query_u64(&series, "SELECT count(*) FROM events"), per_part.iter().sum::<u64>());
    let stats = causeway().args(["stats", "--db"]).arg(&series).output().unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
}
