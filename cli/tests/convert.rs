//! `causeway convert` on every DB in testdata/ingero-dbs, into native SQLite and (with the `duckdb`
//! feature) DuckDB: `causeway stats --json` (also per process) and `causeway explain --json` give
//! the same figures on the original and the converted file, and the original is left byte-identical.
//!
//! What may differ, and is normalised before comparing: the path and format of the file, the
//! evidence SQL (engine-specific), and event ids of Ingero v0.9+ DBs, whose text ids `node:seq`
//! become integers `1..n` in (timestamp, insertion) order: the original's ids are mapped that way.
//! Converting the converted file again (native to native, across engines) keeps everything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn shared_dbs() -> Vec<PathBuf> {
    let dir = causeway_testdata::ingero_dbs();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "db"))
        .collect();
    v.sort();
    assert!(v.len() >= 5, "expected the 5 Ingero DBs in {}", dir.display());
    v
}

fn causeway(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    assert!(out.status.success(), "causeway {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"))
}

/// The original's text ids, mapped to the integers the conversion gives them.
fn id_map(db: &Path) -> HashMap<String, i64> {
    let uri = format!("file:{}?immutable=1", db.display());
    let c = rusqlite::Connection::open_with_flags(
        uri,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let text: bool =
        c.query_row("SELECT EXISTS (SELECT 1 FROM events WHERE typeof(id) != 'integer')", [], |r| r.get(0)).unwrap();
    if !text {
        return HashMap::new();
    }
    let mut st = c.prepare("SELECT CAST(id AS TEXT) FROM events ORDER BY timestamp, rowid").unwrap();
    let ids: Vec<String> = st.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
    ids.into_iter().enumerate().map(|(i, id)| (id, i as i64 + 1)).collect()
}

/// Drop what is file- or engine-specific and map text ids to their converted integers.
fn normalise(v: &Value, ids: &HashMap<String, i64>) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "db" | "path" | "format" | "sql" | "engine"))
                .map(|(k, x)| (k.clone(), normalise(x, ids)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| normalise(x, ids)).collect()),
        Value::String(s) if ids.contains_key(s) => Value::from(ids[s]),
        Value::String(s) if !ids.is_empty() => Value::String(map_ids_in_text(s, ids)),
        other => other.clone(),
    }
}

fn map_ids_in_text(s: &str, ids: &HashMap<String, i64>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match ids.get(word.as_str()) {
            Some(n) => out.push_str(&n.to_string()),
            None => out.push_str(word),
        }
        word.clear();
    };
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() || matches!(ch, ':' | '-' | '_' | '.') {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

fn figures(db: &Path) -> Vec<(String, Value)> {
    let p = db.to_str().unwrap();
    vec![
        ("stats".into(), causeway(&["stats", "--db", p, "--json"])),
        ("stats --per-process".into(), causeway(&["stats", "--db", p, "--json", "--per-process"])),
        ("explain".into(), causeway(&["explain", "--db", p, "--json", "--top", "50"])),
    ]
}

fn targets() -> Vec<&'static str> {
    let mut t = vec!["db"];
    if cfg!(feature = "duckdb") {
        t.push("duckdb");
    }
    t
}

fn assert_same(what: &str, a: &[(String, Value)], b: &[(String, Value)], ids: &HashMap<String, i64>) {
    for ((name, x), (_, y)) in a.iter().zip(b) {
        let (x, y) = (normalise(x, ids), normalise(y, &HashMap::new()));
        if x != y {
            let (xs, ys) = (serde_json::to_string_pretty(&x).unwrap(), serde_json::to_string_pretty(&y).unwrap());
            let line = xs.lines().zip(ys.lines()).position(|(l, r)| l != r).unwrap_or(0);
            panic!(
                "{what}: `{name}` differs at line {line}:\n  original:  {}\n  converted: {}",
                xs.lines().nth(line).unwrap_or(""),
                ys.lines().nth(line).unwrap_or("")
            );
        }
    }
}

#[test]
fn convert_keeps_stats_and_explain_figures_on_every_shared_db() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for db in shared_dbs() {
        let before = std::fs::read(&db).unwrap();
        let name = db.file_stem().unwrap().to_string_lossy().to_string();
        let ids = id_map(&db);
        let original = figures(&db);
        assert!(original[0].1["events"].as_u64().unwrap() > 0);
        for ext in targets() {
            let out = tmp.path().join(format!("{name}.{ext}"));
            let r = causeway(&["convert", "--from", db.to_str().unwrap(), "--to", out.to_str().unwrap(), "--json"]);
            assert_eq!(r["events"], original[0].1["events"], "{name} -> {ext}: events written");
            assert_eq!(r["ids_renumbered"], Value::Bool(!ids.is_empty()));
            assert!(!tmp.path().join(format!("{name}.{ext}.partial")).exists());
            let converted = figures(&out);
            assert_same(&format!("{name} -> .{ext}"), &original, &converted, &ids);
            // And across engines, native to native: nothing changes at all.
            for ext2 in targets() {
                let again = tmp.path().join(format!("{name}.{ext}.again.{ext2}"));
                causeway(&["convert", "--from", out.to_str().unwrap(), "--to", again.to_str().unwrap(), "--json"]);
                let twice = figures(&again);
                assert_same(&format!("{name} -> .{ext} -> .{ext2}"), &converted, &twice, &HashMap::new());
            }
            checked += 1;
        }
        assert_eq!(std::fs::read(&db).unwrap(), before, "{name}: the original is byte-identical");
        for side in ["-wal", "-shm", "-journal"] {
            let mut p = db.as_os_str().to_owned();
            p.push(side);
            assert!(!PathBuf::from(p).exists(), "{name}: {side} appeared");
        }
    }
    println!("convert: {checked} conversions with identical stats, per-process stats and explain figures");
}

#[test]
fn convert_refuses_what_it_cannot_do() {
    let tmp = tempfile::tempdir().unwrap();
    let db = &shared_dbs()[0];
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    let existing = tmp.path().join("exists.db");
    std::fs::write(&existing, b"keep me").unwrap();
    let out = run(&["convert", "--from", db.to_str().unwrap(), "--to", existing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    let missing = tmp.path().join("missing.db");
    let out = run(&["convert", "--from", missing.to_str().unwrap(), "--to", tmp.path().join("x.db").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such file") && err.lines().count() == 1, "{err}");
    assert!(!tmp.path().join("x.db").exists() && !tmp.path().join("x.db.partial").exists());
}
