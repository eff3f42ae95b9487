//! The SQL guard's memory bounds, alone in their own test process: the peaks measured here read
//! SQLite's process-wide heap counter, so a bomb here must not share a process with other tests.
//! (The guard's own safety net counts each query's thread alone: see the last test.)
//!
//! Big sorts and DISTINCTs spill to temp files instead of growing the heap; constant value
//! amplifiers are capped by the AST check; the engine's safety net stops what still grows.

mod guard_common;

use std::time::Duration;

use causeway_backends::guard;
use causeway_backends::{QueryLimits, StoreError};
use guard_common::{limits_ms, refusal, Fixture, DBS};

/// The tests here measure the process's heap: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// SQLite's heap growth while `f` runs, sampled every 2 ms.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, i64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // SAFETY: reading SQLite's global allocation counter has no preconditions.
    let used = || unsafe { rusqlite::ffi::sqlite3_memory_used() };
    let base = used();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let monitor = std::thread::spawn(move || {
        let mut peak = 0;
        while !d.load(Ordering::SeqCst) {
            peak = peak.max(used());
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    });
    let out = f();
    done.store(true, Ordering::SeqCst);
    (out, monitor.join().unwrap() - base)
}

#[test]
fn memory_stays_bounded_and_the_safety_net_holds() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let f = Fixture::immutable(DBS[2]);
    // 100k distinct 2 kB strings (200 MB) in a temp index: spills to a temp file, the heap stays small.
    let distinct = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 100000) \
                    SELECT count(DISTINCT printf('%.*c', 2000, 'x') || x) FROM r";
    let (r, grew) = peak_growth(|| guard::run_sqlite(&f.uri, distinct, &limits_ms(60_000)));
    assert_eq!(r.unwrap().rows, vec![vec![serde_json::json!(100_000)]]);
    assert!(grew < 96 << 20, "the heap grew {} MiB", grew >> 20);
    // 400 constant 1 MB values are all held at once: the AST check refuses that many amplifiers,
    // and the engine's safety net stops it on its own (after the straight-line prologue computed them).
    let wide = format!("SELECT {}", vec!["printf('%.*c', 999999, 'x')"; 400].join(", "));
    assert!(refusal(&wide).contains("more than 32 calls of printf"));
    let (r, grew) = peak_growth(|| guard::run_sqlite_engine_only(&f.uri, &wide, &limits_ms(60_000)));
    match &r {
        Err(StoreError::Query(m)) => assert!(m.contains("MiB of memory"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(grew < 2 << 30, "the heap grew {} MiB", grew >> 20);
    // Through the full guard, 32 of them are allowed, and the byte cap cuts the row before copying it.
    let under = format!("SELECT {}", vec!["printf('%.*c', 999999, 'x')"; 32].join(", "));
    let (r, grew) = peak_growth(|| guard::run_sqlite(&f.uri, &under, &QueryLimits::default()));
    assert_eq!(r.map(|q| (q.rows.len(), q.truncated)).unwrap(), (0, true));
    assert!(grew < 128 << 20, "the heap grew {} MiB", grew >> 20);
    // The memory came back: a normal query runs right after.
    assert!(guard::run_sqlite(&f.uri, "SELECT count(*) FROM events", &QueryLimits::default()).is_ok());
    // A wide row under the net but over the byte cap is cut before it is copied.
    let five = format!("SELECT {}", ["printf('%.*c', 900000, 'x')"; 5].join(", "));
    let q = guard::run_sqlite(&f.uri, &five, &QueryLimits::default()).unwrap();
    assert_eq!((q.rows.len(), q.truncated), (0, true));
    f.unchanged().unwrap();
}

#[test]
fn a_bomb_on_one_thread_does_not_stop_a_query_on_another() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        causeway_backends::sqlite::heap::install(),
        "SQLite was opened before the per-thread heap accounting could be installed"
    );
    let f = Fixture::immutable(DBS[2]);
    let uri = f.uri.clone();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bombs_done = done.clone();
    // Each bomb holds 400 constant 1 MB values at once before the net stops it.
    let bombs = std::thread::spawn(move || {
        let wide = format!("SELECT {}", vec!["printf('%.*c', 999999, 'x')"; 400].join(", "));
        let outcomes: Vec<_> = (0..4).map(|_| guard::run_sqlite_engine_only(&uri, &wide, &limits_ms(60_000))).collect();
        bombs_done.store(true, std::sync::atomic::Ordering::SeqCst);
        outcomes
    });
    // Meanwhile a legitimate query that steps millions of times (the progress handler sees every
    // bomb's peak) runs again and again: none of the bombs' memory is charged to it.
    let counting = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 300000) \
                    SELECT count(*) FROM r";
    let mut runs = 0;
    while !done.load(std::sync::atomic::Ordering::SeqCst) || runs < 3 {
        let q = guard::run_sqlite(&f.uri, counting, &limits_ms(60_000));
        assert_eq!(q.map(|q| q.rows).unwrap(), vec![vec![serde_json::json!(300_000)]], "run {runs}");
        runs += 1;
    }
    for bomb in bombs.join().unwrap() {
        match bomb {
            Err(StoreError::Query(m)) => assert!(m.contains("MiB of memory"), "{m}"),
            other => panic!("the bomb was not stopped: {other:?}"),
        }
    }
    f.unchanged().unwrap();
}
