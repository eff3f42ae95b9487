//! What the CLI tests share: the binary as a user runs it, the repository, the root check of the
//! tests that trace, and reading a trace back through `causeway query --json`, as a user does.

#![allow(dead_code)]

pub mod attached_loop;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The tests that trace with eBPF (and do `what` besides) run as root, as CI does.
pub fn require_root_to(what: &str) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests {what}: they must run as root (CI does)");
}

/// The `causeway` binary, without the caller's log filter or label socket in its environment.
pub fn causeway() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_causeway"));
    c.env_remove("CAUSEWAY_LOG").env_remove("CAUSEWAY_LABELS");
    c
}

/// The stdout of a command that must have succeeded (`what` names it; its stdout and stderr are
/// shown when it did not).
pub fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The rows `causeway query --json --db DB SQL` prints (`{"columns": [..], "rows": [[..]]}`); the
/// query must succeed.
pub fn query_rows(db: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .env_remove("CAUSEWAY_LOG")
        .args(["query", "--json", "--db"])
        .arg(db)
        .arg(sql)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {sql}: {}", db.display(), String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    serde_json::from_value(v["rows"].clone()).unwrap_or_else(|e| panic!("{sql}: no rows in {v}: {e}"))
}

/// The one figure (the first cell, an unsigned integer) of a query.
pub fn query_u64(db: &Path, sql: &str) -> u64 {
    let rows = query_rows(db, sql);
    rows.first()
        .and_then(|r| r.first())
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("{sql}: no count in {rows:?}"))
}

/// A chain's words as `explain --json` gives them: its headline (`summary`) and its details (the
/// whole story, the caveats and bounds the headline leaves out), one per line.
pub fn chain_words(c: &serde_json::Value) -> String {
    let mut s = c["summary"].as_str().unwrap_or_default().to_string();
    for d in c["details"].as_array().into_iter().flatten() {
        s.push('\n');
        s.push_str(d.as_str().unwrap_or_default());
    }
    s
}

/// A TCP peer for a traced server to ask (the footprint tests): accepts one connection, answers
/// each line with "pong\n"; its port, and the thread that returns the lines it read.
pub fn pong_peer() -> (u16, std::thread::JoinHandle<Vec<String>>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        use std::io::{BufRead, Write};
        let mut r = std::io::BufReader::new(s.try_clone().unwrap());
        let mut got = Vec::new();
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            got.push(line.trim().to_string());
            (&s).write_all(b"pong\n").unwrap();
            line.clear();
        }
        got
    });
    (port, h)
}
