//! Borrowed Python stacks end to end (root, eBPF): `tests/borrowed/train.py`, on CPython 3.12 with
//! stacks on, calls mock-cuda's `libengine.so` through ctypes, whose native worker thread launches
//! kernels while the Python thread that asked for them waits in `backward()` (as autograd's device
//! thread launches while the Python thread waits in `loss.backward()`). `causeway stacks`,
//! `explain` and `timeline` must show the worker's calls at the waiting thread's line, marked as
//! borrowed from it; a bystander Python thread asleep meanwhile changes nothing. When two Python
//! threads both wait for the worker, nothing is borrowed and the calls are said to be ambiguous.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{causeway, ok, query_u64, repo, require_root_to};
use serde_json::Value;

/// The line of each `# @tag` of the workload.
fn tags(script: &Path) -> BTreeMap<String, i64> {
    std::fs::read_to_string(script)
        .unwrap()
        .lines()
        .enumerate()
        .filter_map(|(i, l)| l.split("# @").nth(1).map(|t| (t.trim().to_string(), i as i64 + 1)))
        .collect()
}

/// Trace the workload in `mode` into `db`: the tids it printed, by thread name.
fn trace(db: &Path, mode: &str) -> BTreeMap<String, u32> {
    let python = causeway_testdata::cpythons()
        .into_iter()
        .find(|p| p.minor == 12)
        .expect("CPython 3.12 (pyenv's ~/.pyenv/versions/3.12.*) for the Python-frames tests");
    let build = causeway_testdata::mock_cuda_build();
    let out = causeway()
        .args(["trace", "--stacks", "--nvml-hz", "0", "--db"])
        .arg(db)
        .arg("--")
        .arg(&python.path)
        .arg(repo().join("tests/borrowed/train.py"))
        .arg(build.join("libcudart.so.12"))
        .arg(build.join("libengine.so"))
        .arg(mode)
        .output()
        .expect("causeway trace runs");
    let stdout = ok(out, "causeway trace");
    assert!(stdout.contains("DONE"), "the workload ran to its end: {stdout}");
    stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next()?, w.next()?, w.next()?.parse().ok()?) {
                ("PYTHREAD" | "THREAD", name, tid) => Some((name.to_string(), tid)),
                _ => None,
            }
        })
        .collect()
}

fn json(db: &Path, args: &[&str]) -> Value {
    let out = causeway().args(args).arg("--json").arg("--db").arg(db).output().unwrap();
    serde_json::from_str(&ok(out, &args.join(" "))).unwrap()
}

/// Every stack summary of a `stacks` answer (by count and by time, each once).
fn summaries(v: &Value) -> Vec<&Value> {
    let mut seen = std::collections::HashSet::new();
    ["by_count", "by_time"]
        .iter()
        .flat_map(|k| v[*k].as_array().unwrap())
        .filter(|s| seen.insert(s["stack_hash"].as_i64()))
        .collect()
}

#[test]
fn the_workers_launches_borrow_the_line_the_python_thread_waits_in() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("single.db");
    let tids = trace(&db, "single");
    let (main, worker) = (tids["main"], tids["engine-worker"]);
    let t = tags(&repo().join("tests/borrowed/train.py"));
    let (backward, caller) = (
        format!("tests/borrowed/train.py:{} in backward", t["backward"]),
        format!("tests/borrowed/train.py:{} in single", t["main_backward"]),
    );
    let gpu_calls = |filter: &str| {
        query_u64(&db, &format!("SELECT count(*) FROM events WHERE tid = {worker} AND stack_hash <> 0 AND {filter}"))
    };
    let launches = gpu_calls("source = 1 AND op = 3");
    assert_eq!(launches, 21, "the worker's 20 rounds and its slow kernel");

    // stacks: every launch of the worker borrowed the main thread's line in backward()
    let v = json(&db, &["stacks", "--op", "cudaLaunchKernel", "--top", "10"]);
    assert_eq!((v["calls_borrowed"].as_u64(), v["calls_ambiguous"].as_u64()), (Some(launches), None), "{v}");
    let mut borrowed = 0;
    for s in summaries(&v) {
        for b in s["borrowed"].as_array().into_iter().flatten() {
            borrowed += b["calls"].as_u64().unwrap();
            let st = &b["stack"];
            assert_eq!(st["from_tid"].as_u64(), Some(main as u64), "{st}");
            assert_eq!((st["evidence"].as_str(), st["woken"].as_bool()), (Some("last_call"), Some(true)), "{st}");
            let frames: Vec<&str> =
                st["frames"].as_array().unwrap().iter().map(|f| f["text"].as_str().unwrap()).collect();
            assert!(frames[0].ends_with(&backward) && frames[1].ends_with(&caller), "{frames:?}");
            let words = st["words"].as_str().unwrap();
            assert!(words.starts_with(&format!("borrowed from thread {main} (blocked at /")), "{words}");
            assert!(words.ends_with(&format!("{backward})")), "{words}");
        }
    }
    assert_eq!(borrowed, launches, "{v}");
    // every GPU call of the worker (its syncs, the driver calls inside) borrowed it too
    let all = json(&db, &["stacks", "--top", "20"]);
    assert_eq!(all["calls_borrowed"].as_u64(), Some(gpu_calls("source IN (1, 4)")), "{all}");
    // the launches of one backward kernel alone (none of the main thread's calls in scope)
    let grad = json(&db, &["stacks", "--kernel", "grad_gemm"]);
    assert_eq!(grad["calls_borrowed"], grad["calls"], "{grad}");
    let text = ok(causeway().args(["stacks", "--op", "cudaLaunchKernel", "--db"]).arg(&db).output().unwrap(), "stacks");
    assert!(text.contains(&format!("of these calls: borrowed from thread {main} (blocked at ")), "{text}");

    // explain: the worker's slow synchronize is in a chain, whose line is the borrowed one
    let e = json(&db, &["explain", "--top", "50"]);
    let shares: Vec<&Value> = e["chains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["stacks"].as_array().into_iter().flatten())
        .filter(|s| !s["borrowed"].is_null())
        .collect();
    assert!(!shares.is_empty(), "a chain's calls borrowed a stack: {e}");
    for s in shares {
        assert_eq!(s["borrowed"]["from_tid"].as_u64(), Some(main as u64), "{s}");
        assert!(s["user_frame"].as_str().unwrap().ends_with(&backward), "{s}");
    }
    let report = ok(causeway().args(["explain", "--db"]).arg(&db).output().unwrap(), "explain");
    let at = report
        .lines()
        .find(|l| l.contains(&format!("in backward (borrowed from thread {main}, blocked there)")))
        .unwrap_or_else(|| panic!("an at: line marked borrowed: {report}"));
    assert!(at.trim_start().starts_with("at: /") && at.contains(&backward), "{at}");

    // timeline: the worker's launch shows the borrowed line, marked
    let id = query_u64(&db, &format!("SELECT min(id) FROM events WHERE tid = {worker} AND source = 1 AND op = 3"));
    let tl = json(&db, &["timeline", "--around", &id.to_string(), "--span", "1ms", "--tid", &worker.to_string()]);
    let entry = tl["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["entries"].as_array().unwrap())
        .find(|en| en["id"].as_u64() == Some(id))
        .unwrap_or_else(|| panic!("the launch in its timeline: {tl}"));
    assert!(entry["stack"][0].as_str().unwrap().ends_with(&backward), "{entry}");
    assert!(entry["stack_borrowed"].as_str().unwrap().starts_with(&format!("borrowed from thread {main} ")), "{entry}");
}

#[test]
fn two_python_threads_waiting_for_the_worker_lend_it_nothing() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let tids = trace(&db, "shared");
    let (w1, w2, worker) = (tids["waiter1"], tids["waiter2"], tids["engine-worker"]);
    let launches =
        query_u64(&db, &format!("SELECT count(*) FROM events WHERE tid = {worker} AND source = 1 AND op = 3"));
    assert_eq!(launches, 21);
    let v = json(&db, &["stacks", "--op", "cudaLaunchKernel", "--top", "10"]);
    assert_eq!((v["calls_borrowed"].as_u64(), v["calls_ambiguous"].as_u64()), (None, Some(launches)), "{v}");
    assert!(summaries(&v).iter().all(|s| s["borrowed"].is_null()), "{v}");
    let text = ok(causeway().args(["stacks", "--op", "cudaLaunchKernel", "--db"]).arg(&db).output().unwrap(), "stacks");
    assert!(text.contains("(ambiguous: nothing borrowed)"), "{text}");
    // explain names the two threads instead of borrowing either's line
    let e = json(&db, &["explain", "--top", "50"]);
    let stacks: Vec<&Value> =
        e["chains"].as_array().unwrap().iter().flat_map(|c| c["stacks"].as_array().into_iter().flatten()).collect();
    assert!(stacks.iter().all(|s| s["borrowed"].is_null()), "{e}");
    let mut pair = vec![w1 as u64, w2 as u64];
    pair.sort_unstable();
    let ambiguous: Vec<&&Value> = stacks.iter().filter(|s| !s["ambiguous_between"].is_null()).collect();
    assert!(!ambiguous.is_empty(), "the worker's slow synchronize is in a chain: {e}");
    for s in ambiguous {
        let between: Vec<u64> =
            s["ambiguous_between"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
        assert_eq!(between, pair, "{s}");
        assert!(s["user_frame"].is_null(), "no line of either thread: {s}");
    }
}
