//! The SQL guard on native Causeway traces written by `SqliteWriter`: a finished trace (rollback
//! journal, opened `mode=ro`) and a live one (WAL with its `-wal`/`-shm`, writer still open).
//! The hostile corpus leaves both byte-identical (main file and WAL); the legit corpus passes
//! wherever the native schema has the tables it reads, and native-only columns are queryable.

mod guard_common;

use causeway_backends::EngineWriter;
use std::path::Path;

use causeway_backends::guard;
use causeway_backends::sqlite::SqliteWriter;
use causeway_backends::SyntheticTrace;
use causeway_backends::{QueryLimits, StackRecord, StoreError};
use causeway_model::SessionInfo;
use guard_common::{corpus, corpus_limits};

fn write_trace(path: &Path, events: usize) -> SqliteWriter {
    let session = SessionInfo { started_at_ns: 1_700_000_000_000_000_000, ..SessionInfo::default() };
    let mut w = SqliteWriter::create(path, &session).expect("create native trace");
    let evs = SyntheticTrace::new(7, 1_700_000_000_000_000_000).take(events);
    w.write_batches([evs.as_slice()]).expect("insert events");
    w.write_stacks(&[StackRecord {
        hash: 42,
        ips: r#"["0x7f00"]"#.into(),
        frames: r#"[{"s":"cudaLaunchKernel+0x1f","f":"libcudart.so.12"}]"#.into(),
    }])
    .expect("insert stacks");
    w
}

/// Every file of the trace directory with its bytes; the `-shm` wal-index is shared memory that
/// readers legitimately write their read marks to, so only its presence is compared.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = if name.ends_with("-shm") { Vec::new() } else { std::fs::read(e.path()).unwrap_or_default() };
            (name, bytes)
        })
        .collect();
    v.sort();
    v
}

fn run_corpora(uri: &str, dir: &Path, out: &Path, label: &str) {
    let before = snapshot(dir);
    let limits = corpus_limits();
    let (mut tried, mut refused, mut stopped, mut unchanged) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for e in corpus("hostile.jsonl") {
        let sql = e
            .sql
            .replace("{OUT}", &out.display().to_string())
            .replace("{DB}", &dir.join("trace.db").display().to_string());
        tried += 1;
        match guard::run_sqlite(uri, &sql, &limits) {
            Err(StoreError::Refused(_)) => refused += 1,
            Err(_) => stopped += 1,
            Ok(q) if q.truncated || e.sqlite.as_deref() == Some("bounded") => stopped += 1,
            Ok(q) => failures.push(format!("{label}: ran {sql:?}: {} rows", q.rows.len())),
        }
        if snapshot(dir) == before && std::fs::read_dir(out).unwrap().count() == 0 {
            unchanged += 1;
        } else {
            failures.push(format!("{label}: {sql:?} changed the trace directory or created a file"));
        }
    }
    let (mut legit, mut passed, mut not_native) = (0, 0, 0);
    for e in corpus("legit.jsonl") {
        legit += 1;
        match guard::run_sqlite(uri, &e.sql, &QueryLimits::default()) {
            Ok(_) => passed += 1,
            Err(StoreError::Query(m)) if m.contains("no such table") || m.contains("no such column") => not_native += 1,
            Err(err) => failures.push(format!("{label}: legit {:?}: {err}", e.sql)),
        }
    }
    println!(
        "{label}: hostile tried {tried}, refused {refused}, stopped or inert {stopped}, unchanged {unchanged}/{tried}; \
         legit {legit}: passed {passed}, not applicable to the native schema {not_native}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(passed >= 50, "only {passed} legit queries ran on the native trace");
}

fn native_only_columns_are_readable(uri: &str) {
    let sql = "SELECT e.cpu, e.comm, e.prev_state, p.name AS state, e.next_tid, e.waker_tid, e.session_id \
               FROM events e LEFT JOIN prev_states p ON p.code = e.prev_state WHERE e.source = 3 LIMIT 5";
    let r = guard::run_sqlite(uri, sql, &QueryLimits::default()).expect("native columns");
    assert_eq!(r.columns.len(), 7);
    let r = guard::run_sqlite(uri, "SELECT count(*) FROM loss_counters", &QueryLimits::default());
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn finished_native_trace_survives_the_corpora() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, out) = (tmp.path().join("trace"), tmp.path().join("out"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let db = dir.join("trace.db");
    write_trace(&db, 20_000).finish(1_700_000_100_000_000_000).expect("finish");
    let uri = format!("file:{}?mode=ro", db.display());
    native_only_columns_are_readable(&uri);
    run_corpora(&uri, &dir, &out, "native finished (mode=ro)");
}

#[test]
fn live_native_trace_survives_the_corpora() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, out) = (tmp.path().join("trace"), tmp.path().join("out"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let db = dir.join("trace.db");
    let writer = write_trace(&db, 20_000);
    assert!(dir.join("trace.db-wal").exists(), "a live trace has its WAL");
    let uri = format!("file:{}?mode=ro", db.display());
    native_only_columns_are_readable(&uri);
    run_corpora(&uri, &dir, &out, "native live WAL (mode=ro)");
    drop(writer);
}
