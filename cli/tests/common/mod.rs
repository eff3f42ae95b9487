//! What the CLI tests share: reading a trace back through `causeway query --json`, as a user does.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

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
