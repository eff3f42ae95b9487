//! The SQL guard's run-time limits and its messages: timeout, cancellation, row and byte caps, value
//! bombs, concurrency, and refusals an AI agent can act on. (Memory: `guard_memory.rs`.)

mod guard_common;

use std::time::{Duration, Instant};

use causeway_backends::guard::{self, Engine, QueryCancel};
use causeway_backends::{QueryLimits, StoreError};
use guard_common::{limits_ms, refusal, Fixture, DBS};

const RUNAWAY: &str = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r";

#[test]
fn timeout_interrupts_a_runaway_query() {
    let f = Fixture::immutable(DBS[2]);
    let t = Instant::now();
    let r = guard::run_sqlite(&f.uri, RUNAWAY, &limits_ms(300));
    let took = t.elapsed();
    assert!(matches!(r, Err(StoreError::Timeout(300))), "{r:?}");
    assert!(took >= Duration::from_millis(290) && took < Duration::from_millis(2500), "took {took:?}");
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("300 ms") && msg.contains("LIMIT"), "{msg}");
    f.unchanged().unwrap();
}

#[test]
fn cancel_interrupts_a_running_query_and_a_pending_one() {
    let f = Fixture::immutable(DBS[2]);
    let cancel = QueryCancel::new();
    let (uri, c) = (f.uri.clone(), cancel.clone());
    let worker = std::thread::spawn(move || guard::run_sqlite_cancellable(&uri, RUNAWAY, &limits_ms(60_000), &c));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    cancel.cancel();
    let r = worker.join().expect("the query thread survives");
    assert!(t.elapsed() < Duration::from_secs(2), "cancel took {:?}", t.elapsed());
    match r {
        Err(StoreError::Query(m)) => assert!(m.contains("cancelled"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Already cancelled: the next query with this handle stops before it starts.
    let t = Instant::now();
    let r = guard::run_sqlite(&f.uri, "SELECT 1", &QueryLimits::default().cancellable(&cancel));
    assert!(matches!(&r, Err(StoreError::Query(m)) if m.contains("cancelled")), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(1));
    // A fresh handle that is never cancelled changes nothing.
    let r = guard::run_sqlite_cancellable(
        &f.uri,
        "SELECT count(*) FROM events",
        &QueryLimits::default(),
        &QueryCancel::new(),
    );
    assert_eq!(r.unwrap().rows, vec![vec![serde_json::json!(200)]]);
    f.unchanged().unwrap();
}

#[test]
fn row_cap_defaults_to_1000_and_clamps_to_10000() {
    let f = Fixture::immutable(DBS[0]); // 3807 events
    let all = "SELECT * FROM events ORDER BY timestamp";
    let r = guard::run_sqlite(&f.uri, all, &QueryLimits::default()).unwrap();
    assert_eq!((r.rows.len(), r.truncated), (1000, true));
    let r = guard::run_sqlite(&f.uri, all, &QueryLimits::with_rows(5)).unwrap();
    assert_eq!((r.rows.len(), r.truncated), (5, true));
    let r = guard::run_sqlite(
        &f.uri,
        all,
        &QueryLimits { max_rows: 1_000_000, max_bytes: 16 << 20, ..QueryLimits::default() },
    )
    .unwrap();
    assert_eq!((r.rows.len(), r.truncated), (3807, false));
    let endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r";
    let r = guard::run_sqlite(&f.uri, endless, &QueryLimits { max_rows: 50_000, ..QueryLimits::default() }).unwrap();
    assert_eq!((r.rows.len(), r.truncated), (QueryLimits::MAX_ROWS, true));
    assert_eq!(r.rows.last().unwrap()[0], serde_json::json!(10_000));
    let r = guard::run_sqlite(&f.uri, "SELECT id FROM events LIMIT 10", &QueryLimits::default()).unwrap();
    assert_eq!((r.rows.len(), r.truncated), (10, false));
    f.unchanged().unwrap();
}

#[test]
fn byte_cap_truncates_under_the_cap() {
    let f = Fixture::immutable(DBS[0]);
    let limits = QueryLimits { max_bytes: 4096, ..QueryLimits::default() };
    let r = guard::run_sqlite(&f.uri, "SELECT * FROM stack_traces", &limits).unwrap();
    assert!(r.truncated);
    let size = serde_json::to_vec(&r.rows).unwrap().len() + serde_json::to_vec(&r.columns).unwrap().len();
    assert!(size <= 4096 && !r.rows.is_empty(), "{size} bytes in {} rows", r.rows.len());
    // One 900 kB cell per row: the default 1 MiB cap keeps one row.
    let r =
        guard::run_sqlite(&f.uri, "SELECT printf('%.*c', 900000, 'x') FROM events", &QueryLimits::default()).unwrap();
    assert_eq!((r.rows.len(), r.truncated), (1, true));
    f.unchanged().unwrap();
}

#[test]
fn value_bombs_fail_fast_without_taking_the_process_down() {
    let f = Fixture::immutable(DBS[2]);
    let bombs = [
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT length(s) FROM r",
        "SELECT printf('%.*c', 2000000000, 'x')",
        "SELECT length(printf('%.*c', 999999, 'x') || printf('%.*c', 999999, 'x'))",
        "SELECT json_array(printf('%.*c', 999999, 'x'), printf('%.*c', 999999, 'x'))",
    ];
    for sql in bombs {
        let t = Instant::now();
        let r = guard::run_sqlite(&f.uri, sql, &limits_ms(10_000));
        assert!(t.elapsed() < Duration::from_secs(8), "{sql}: {:?}", t.elapsed());
        match r {
            Err(StoreError::Query(m)) => assert!(m.contains("1000000 bytes"), "{sql}: {m}"),
            Ok(q) => assert_eq!(q.rows, vec![vec![serde_json::Value::Null]], "{sql}"),
            other => panic!("{sql}: {other:?}"),
        }
    }
    // The aggregate stops growing at 1 MB, and the endless recursion feeding it meets the timeout.
    let endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT group_concat(x) FROM r";
    let r = guard::run_sqlite(&f.uri, endless, &limits_ms(1000));
    assert!(matches!(r, Err(StoreError::Timeout(1000)) | Err(StoreError::Query(_))), "{r:?}");
    for sql in ["SELECT zeroblob(1000000000)", "SELECT randomblob(1000000000)"] {
        assert!(refusal(sql).contains("not on the allow-list"));
    }
    f.unchanged().unwrap();
}

#[test]
fn concurrent_queries_are_isolated() {
    let f = Fixture::immutable(DBS[0]);
    let cancel = QueryCancel::new();
    let runaway = {
        let (uri, c) = (f.uri.clone(), cancel.clone());
        std::thread::spawn(move || guard::run_sqlite_cancellable(&uri, RUNAWAY, &limits_ms(60_000), &c))
    };
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let uri = f.uri.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    let sql = format!("SELECT count(*) FROM events WHERE source = {}", i % 4 + 1);
                    guard::run_sqlite(&uri, &sql, &QueryLimits::default()).expect("legit query");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    cancel.cancel();
    assert!(runaway.join().unwrap().is_err());
    f.unchanged().unwrap();
}

#[test]
fn refusals_say_what_was_refused_and_what_is_allowed() {
    let cases: &[(&str, &[&str])] = &[
        ("WITH x AS (DELETE\tFROM events RETURNING *) SELECT 1", &["data-modifying", "DELETE FROM events"]),
        ("SELECT 1; DELETE FROM events", &["2 statements", "one statement per call"]),
        ("SELECT readfile('/etc/passwd')", &["readfile()", "reads files"]),
        ("SELECT sqrt(2)", &["sqrt() is not on the allow-list", "no math functions", "Allowed functions: abs, avg"]),
        ("SELECT median(duration) FROM events", &["median()", "ROW_NUMBER() OVER (ORDER BY x)"]),
        ("PRAGMA writable_schema = 1", &["PRAGMA writable_schema", "not a read-only query"]),
        ("ATTACH '/tmp/x.db' AS x", &["ATTACH", "not a read-only query"]),
        ("VACUUM INTO '/tmp/x.db'", &["starts with VACUUM, which is not a query"]),
        ("SELECT * FROM events WHERE pid = ?", &["bind parameter", "write the value into the query"]),
        ("SELECT * FROM '/etc/passwd'", &["plain identifiers"]),
        ("SELECT * FROM other.events", &["only this trace's own tables"]),
        ("SELECT * FROM dbstat", &["dbstat", "raw database pages"]),
        ("SELECT * FROM pragma_database_list", &["internal table", "sqlite_schema"]),
        ("SELECT x FROM t WHERE a REGEXP 'x'", &["REGEXP operator", "glob(pattern, text)"]),
        (
            "SELECT * FROM events WHERE pid IN process_names",
            &["could not be parsed", "x IN (SELECT column FROM table)"],
        ),
        ("SELECT 1 INTO t", &["creates a table"]),
    ];
    for (sql, needles) in cases {
        let msg = refusal(sql);
        for n in *needles {
            assert!(msg.contains(n), "{sql:?}: {msg:?} lacks {n:?}");
        }
        assert!(msg.contains("Only one read-only statement is allowed"), "{msg}");
        let store: StoreError = guard::check(sql, Engine::Sqlite).unwrap_err().into();
        let shown = store.to_string();
        assert!(shown.starts_with("query refused: ") && !shown.contains("refused refused"), "{shown}");
        assert!(matches!(store, StoreError::Refused(_)));
    }
}

#[test]
fn engine_layer_alone_refuses_with_the_action_named() {
    let f = Fixture::immutable(DBS[2]);
    let limits = QueryLimits::default();
    let cases = [
        (format!("ATTACH '{}/a.db' AS a", f.out.display()), "ATTACH"),
        ("SELECT readfile('/etc/passwd')".to_string(), ""),
        ("SELECT load_extension('/tmp/evil.so')".to_string(), "load_extension"),
        ("PRAGMA writable_schema = 1".to_string(), "PRAGMA writable_schema"),
        ("PRAGMA table_info(events)".to_string(), "PRAGMA table_info"),
        ("SELECT * FROM dbstat".to_string(), "dbstat"),
        ("SELECT * FROM sqlite_temp_master".to_string(), "sqlite_temp_master"),
        ("SELECT 1; DELETE FROM events".to_string(), "denied by the database engine"),
        (format!("VACUUM INTO '{}/v.db'", f.out.display()), "not a query"),
        ("SELECT count(*) FROM events WHERE pid = ?".to_string(), ""),
        ("SELECT count(*) FROM dbstat".to_string(), "dbstat"),
        ("SELECT count(*) FROM sqlite_temp_master".to_string(), "sqlite_temp_master"),
    ];
    for (sql, needle) in &cases {
        match guard::run_sqlite_engine_only(&f.uri, sql, &limits) {
            Err(StoreError::Refused(m)) => assert!(m.contains(needle), "{sql}: {m}"),
            Err(StoreError::Query(m)) if needle.is_empty() => assert!(!m.is_empty()),
            other => panic!("{sql}: {other:?}"),
        }
        f.unchanged().unwrap();
    }
    // The allowed pragma functions work through the engine (the pragma runs while stepping).
    let r = guard::run_sqlite(&f.uri, "SELECT name FROM pragma_table_info('events') WHERE pk = 1", &limits).unwrap();
    assert_eq!(r.rows, vec![vec![serde_json::json!("id")]]);
}

#[test]
fn a_missing_db_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("file:{}/absent.db?mode=ro", dir.path().display());
    let r = guard::run_sqlite(&uri, "SELECT 1", &QueryLimits::default());
    assert!(matches!(r, Err(StoreError::Engine(_))), "{r:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn duckdb_dialect_is_checked_with_its_own_lists() {
    let ok = [
        "FROM events SELECT count(*)",
        "SELECT quantile_cont(duration, 0.99) FROM events",
        "SELECT * FROM range(10)",
        "SELECT date_trunc('second', to_timestamp(timestamp / 1e9)) AS s, count(*) FROM events GROUP BY s",
        "SELECT json_extract_string(frames, '$[0].s') FROM stack_traces",
    ];
    for sql in ok {
        assert_eq!(guard::check(sql, Engine::DuckDb), Ok(()), "{sql}");
    }
    assert!(guard::check("FROM events SELECT count(*)", Engine::Sqlite).is_err());
    let refused = [
        ("SELECT * FROM read_csv('/etc/passwd')", "reads files"),
        ("SELECT * FROM 'data.csv'", "plain identifiers"),
        ("SELECT * FROM duckdb_settings()", "not on the allow-list"),
        ("SELECT * FROM glob('/*')", "lists files"),
        ("COPY events TO '/tmp/x.csv'", "not a read-only query"),
        ("INSTALL httpfs", "not a read-only query"),
        ("SET enable_external_access = true", "not a read-only query"),
        ("SELECT getenv('HOME')", "environment"),
    ];
    for (sql, needle) in refused {
        match guard::check(sql, Engine::DuckDb) {
            Err(r) => assert!(r.to_string().contains(needle), "{sql}: {r}"),
            Ok(()) => panic!("DuckDB check let through {sql}"),
        }
    }
}
