//! Fuzzing the SQL guard with proptest strategies, for a bounded time.
//!
//! Four generators: arbitrary Unicode text, a soup of SQL fragments chosen for attacks (writable
//! CTEs, ATTACH, VACUUM INTO, PRAGMA, file functions, comments, odd whitespace), mutations of the
//! corpora, and well-formed SELECTs over random expressions, functions and tables. For every input: `check` returns on both dialects (no panic, no stack overflow); what
//! the SQLite check accepts runs through the full guard and is never refused by the engine layer
//! (the two layers agree); every fourth input also goes to the engine layer alone. After every input
//! the trace is byte-identical and no file appeared. A panic inside sqlparser is contained by `check`
//! (it becomes a refusal) and counted.
//!
//! Runs for `CAUSEWAY_FUZZ_SECS` seconds (default 3); `CAUSEWAY_FUZZ_SEED` replays a run. The
//! figures (inputs, accepted, ran, seconds) are printed for the issue note.

mod guard_common;

use std::time::{Duration, Instant};

use causeway_backends::guard::{self, Engine};
use causeway_backends::{QueryLimits, StoreError};
use guard_common::{corpus, Fixture, DBS};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const FRAGMENTS: &[&str] = &[
    "SELECT",
    "WITH",
    "x",
    "AS",
    "(",
    ")",
    "DELETE",
    "FROM",
    "events",
    "RETURNING",
    "*",
    "UPDATE",
    "SET",
    "pid",
    "=",
    "0",
    "INSERT",
    "INTO",
    "VALUES",
    "(1)",
    ";",
    "--",
    "/*",
    "*/",
    "\n",
    "\t",
    "\r",
    "\u{0b}",
    "\u{0c}",
    "\u{a0}",
    "\u{2028}",
    "\u{feff}",
    "\u{3000}",
    "ATTACH",
    "'{OUT}/f.db'",
    "DETACH",
    "VACUUM",
    "PRAGMA",
    "writable_schema",
    "query_only",
    "journal_mode",
    "load_extension('/tmp/evil.so')",
    "readfile('/etc/passwd')",
    "writefile('{OUT}/w', 'x')",
    "json_each(frames)",
    "stack_traces",
    "sources",
    "ops",
    "count(*)",
    "json_extract(frames, '$[0].s')",
    "UNION",
    "ALL",
    "WHERE",
    "GROUP BY",
    "ORDER BY",
    "LIMIT 5",
    "EXPLAIN",
    "QUERY PLAN",
    "RECURSIVE",
    "r(n)",
    "SELECT n + 1 FROM r",
    "printf('%.*c', 999999, 'x')",
    "pragma_table_info",
    "dbstat",
    "sqlite_master",
    "temp.",
    "main.",
    "'",
    "\"",
    "`",
    "[",
    "]",
    "?",
    ":p",
    "$v",
    "@a",
    ",",
    ".",
    "||",
    "CASE WHEN 1 THEN",
    "END",
    "OVER (ORDER BY pid)",
    "row_number()",
    "EXISTS",
    "IN",
    "NOT",
    "JOIN",
    "ON",
    "COPY",
    "TO",
    "INSTALL",
    "LOAD",
    "read_csv('/etc/passwd')",
    "duckdb_settings()",
    "'x.csv'",
    "zeroblob(1e9)",
    "D\u{0395}LETE",
    "\u{ff33}ELECT",
    "1e999",
    "-9223372036854775808",
    "X'00'",
    "NULL",
    "CAST(",
    "AS TEXT)",
];

/// Well-formed SELECTs over random expressions: functions from both engines' allow-lists and the
/// dangerous ones, tables of the trace and internal ones. Most of these parse, so they exercise the
/// agreement of the two layers (what the AST check allows, the authorizer must allow too).
fn structured() -> impl Strategy<Value = String> {
    let mut funcs: Vec<&'static str> = guard::allowed_functions(Engine::Sqlite).to_vec();
    funcs.extend(guard::allowed_functions(Engine::DuckDb));
    funcs.extend(["load_extension", "readfile", "writefile", "sqlite_offset", "random", "zeroblob", "sqrt", "changes"]);
    let cols =
        vec!["pid", "tid", "duration", "timestamp", "source", "op", "frames", "name", "id", "hash", "*", "value"];
    let ops = vec!["+", "-", "*", "/", "%", "||", "=", "<>", "<", "AND", "OR", "->", "->>", "LIKE", "IS", "IN"];
    let tables = vec![
        "events",
        "stack_traces",
        "sources",
        "ops",
        "process_names",
        "json_each('[1,2]')",
        "json_tree('{\"a\":1}')",
        "pragma_table_info('events')",
        "pragma_index_list('events')",
        "dbstat",
        "sqlite_master",
        "sqlite_schema",
        "temp.sqlite_master",
        "main.events",
        "(SELECT * FROM events)",
        "stack_traces, json_each(frames)",
    ];
    let leaf = prop_oneof![
        prop::sample::select(cols).prop_map(String::from),
        (0i64..100).prop_map(|i| i.to_string()),
        prop::sample::select(vec!["'a'", "NULL", "'[1,2]'", "1.5", "X'00'", "'$[0]'"]).prop_map(String::from),
    ];
    let expr = leaf.prop_recursive(4, 24, 3, move |inner| {
        prop_oneof![
            (prop::sample::select(funcs.clone()), prop::collection::vec(inner.clone(), 0..3))
                .prop_map(|(f, a)| format!("{f}({})", a.join(", "))),
            (inner.clone(), prop::sample::select(ops.clone()), inner.clone())
                .prop_map(|(a, o, b)| format!("({a} {o} {b})")),
            inner.clone().prop_map(|a| format!("(SELECT {a} FROM events LIMIT 1)")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("CASE WHEN {a} THEN {b} END")),
            inner.clone().prop_map(|a| format!("count({a}) OVER (PARTITION BY {a})")),
        ]
    });
    (expr.clone(), prop::sample::select(tables), prop::option::of(expr), any::<bool>()).prop_map(|(e, t, w, cte)| {
        let q = format!("SELECT {e} FROM {t}{}", w.map(|w| format!(" WHERE {w}")).unwrap_or_default());
        if cte {
            format!("WITH c AS ({q}) SELECT * FROM c LIMIT 20")
        } else {
            q
        }
    })
}

/// Arbitrary text, attack-fragment soup, a mutated corpus entry, or a well-formed SELECT.
fn inputs(seeds: Vec<String>) -> impl Strategy<Value = String> {
    let ws = prop::sample::select(vec![" ", "\t", "\n", "", "\u{a0}", "/**/", "\r\n"]);
    let soup = prop::collection::vec((prop::sample::select(FRAGMENTS), ws), 1..40)
        .prop_map(|parts| parts.into_iter().flat_map(|(f, w)| [f, w]).collect::<String>());
    let text = prop::collection::vec(any::<char>(), 0..300).prop_map(String::from_iter);
    let mutated = (
        prop::sample::select(seeds),
        prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, prop::sample::select(FRAGMENTS)), 1..4),
    )
        .prop_map(|(seed, edits)| {
            let mut chars: Vec<char> = seed.chars().collect();
            for (at, kind, frag) in edits {
                let i = at.index(chars.len() + 1);
                match kind {
                    0 => chars.splice(i..i, frag.chars()).for_each(drop),
                    1 if i < chars.len() => drop(chars.drain(i..(i + 3).min(chars.len()))),
                    2 => chars.splice(i..i, [' ', ';', ' ']).for_each(drop),
                    _ => chars.extend(frag.chars()),
                }
            }
            chars.into_iter().collect::<String>()
        });
    prop_oneof![2 => soup, 1 => text, 2 => mutated, 3 => structured()]
}

#[test]
fn fuzz_check_and_run_sqlite() {
    let secs: f64 = std::env::var("CAUSEWAY_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let seed: u64 = std::env::var("CAUSEWAY_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    let f = Fixture::immutable(DBS[2]);
    let seeds: Vec<String> = corpus("hostile.jsonl")
        .into_iter()
        .chain(corpus("legit.jsonl"))
        .map(|e| e.sql)
        .filter(|s| !s.is_empty())
        .collect();
    let strategy = inputs(seeds);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let limits = QueryLimits { timeout_ms: 250, ..QueryLimits::default() };
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (mut n, mut accepted, mut ran, mut engine_only, mut duck_accepted) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut contained_panics = 0u64;
    let started = Instant::now();
    while Instant::now() < deadline {
        let raw = strategy.new_tree(&mut runner).expect("generate").current();
        let sql = f.expand(&raw);
        n += 1;
        let ctx = || format!("seed {seed}, input #{n}: {sql:?}");
        if guard::check(&sql, Engine::DuckDb).is_ok() {
            duck_accepted += 1;
        }
        let checked = guard::check(&sql, Engine::Sqlite);
        if let Err(r) = &checked {
            if r.refused.contains("could not handle") {
                contained_panics += 1;
            }
        }
        if checked.is_ok() {
            accepted += 1;
            match guard::run_sqlite(&f.uri, &sql, &limits) {
                Ok(_) => ran += 1,
                Err(StoreError::Refused(m)) => {
                    panic!("the AST check accepted what the engine refused ({m}); {}", ctx())
                }
                Err(_) => {}
            }
        }
        if n % 4 == 0 {
            engine_only += 1;
            let _ = guard::run_sqlite_engine_only(&f.uri, &sql, &limits);
        }
        if let Err(why) = f.unchanged() {
            panic!("{why}; {}", ctx());
        }
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "fuzz: seed {seed}, {n} inputs in {took:.1} s ({:.0}/s), SQLite check accepted {accepted} (ran OK {ran}), \
         DuckDB check accepted {duck_accepted}, engine layer alone {engine_only}, parser panics contained as \
         refusals {contained_panics}, crashes 0, DB unchanged: yes",
        n as f64 / took
    );
    assert!(n > 0);
}
