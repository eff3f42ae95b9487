//! Bad input gets a one-line error and a non-zero exit, never a panic.

use std::path::Path;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn assert_one_line_error(args: &[&str], needle: &str) {
    let (code, _out, err) = run(args);
    assert_ne!(code, 0, "{args:?} exited 0");
    assert_ne!(code, 101, "{args:?} panicked: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.contains(needle), "{args:?}: '{err}' does not mention '{needle}'");
}

fn sqlite(path: &Path, sql: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(sql).unwrap();
}

#[test]
fn every_kind_of_bad_db_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n);
    std::fs::write(d("empty.db"), b"").unwrap();
    std::fs::write(d("text.db"), b"this is a text file, not a database\n".repeat(100)).unwrap();
    sqlite(&d("noevents.db"), "CREATE TABLE other (x INTEGER); INSERT INTO other VALUES (1);");
    sqlite(&d("newer.db"), "CREATE TABLE events (timestamp, pid, tid, source, op, duration); \
        CREATE TABLE schema_info (key TEXT PRIMARY KEY, value TEXT); INSERT INTO schema_info VALUES ('format','causeway'), ('schema_version','99');");
    sqlite(&d("newer-ingero.db"), "CREATE TABLE events (timestamp, pid, tid, source, op, duration); \
        CREATE TABLE schema_info (key TEXT PRIMARY KEY, value TEXT); INSERT INTO schema_info VALUES ('version','0.14');");
    for cmd in ["stats", "query"] {
        let extra: &[&str] = if cmd == "query" { &["SELECT 1"] } else { &[] };
        let go = |p: &Path, needle: &str| {
            let mut a = vec![cmd, "--db", p.to_str().unwrap()];
            a.extend_from_slice(extra);
            assert_one_line_error(&a, needle);
        };
        go(&d("missing.db"), "no such file");
        go(&d("empty.db"), "empty");
        go(&d("text.db"), "not a SQLite database");
        go(dir.path(), "directory");
        go(&d("noevents.db"), "no events table");
        go(&d("newer.db"), "newer");
        go(&d("newer-ingero.db"), "newer");
    }
}

#[test]
fn a_truncated_db_is_reported_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.db");
    let c = rusqlite::Connection::open(&full).unwrap();
    c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, timestamp INTEGER, pid INTEGER, tid INTEGER, source INTEGER, op INTEGER, duration INTEGER, pad TEXT);").unwrap();
    let tx = c.unchecked_transaction().unwrap();
    for i in 0..20_000 {
        tx.execute("INSERT INTO events (timestamp, pid, tid, source, op, duration, pad) VALUES (?1, 1, 1, 1, 3, ?2, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx')", [i, i * 10]).unwrap();
    }
    tx.commit().unwrap();
    drop(c);
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let (code, _, err) = run(&["stats", "--db", cut.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert_ne!(code, 101, "panicked: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("damaged") || err.contains("malformed"), "{err}");
}

#[test]
fn bad_arguments_are_one_line_too() {
    let db = causeway_testdata::ingero_db("sample-gpu-node-01.db");
    let db = db.to_str().unwrap();
    assert_one_line_error(&["stats", "--db", db, "--since", "ten minutes"], "not a duration");
    assert_one_line_error(&["stats", "--db", db, "--since", "5s", "--from", "+1s"], "either --since or --from");
    assert_one_line_error(&["stats", "--db", db, "--op", "cudaTeleport"], "unknown op");
    assert_one_line_error(&["stats", "--db", db, "--from", "-0s", "--to", "+0s"], "after --to");
    assert_one_line_error(&["query", "--db", db, "SELECT nope FROM nowhere"], "no such table");
}

#[test]
fn query_runs_the_sql_it_is_given() {
    let db = causeway_testdata::ingero_db("pytorch-dataloader-starvation.db");
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args([
            "query",
            "--db",
            db.to_str().unwrap(),
            "--json",
            "SELECT op, count(*) AS n FROM events WHERE source = 1 GROUP BY op ORDER BY op",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["columns"], serde_json::json!(["op", "n"]));
    assert_eq!(v["rows"], serde_json::json!([[1, 7], [3, 16], [5, 21], [6, 3], [7, 14]]));
    assert_eq!(v["truncated"], false);
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["query", "--db", db.to_str().unwrap(), "--json", "--limit", "5", "SELECT id FROM events"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 5);
    assert_eq!(v["truncated"], true);
}
