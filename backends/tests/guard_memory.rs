//! The SQL guard's memory bounds, alone in their own test process: the safety net reads SQLite's
//! process-wide heap counter, so a bomb here must not share a process with other queries under test.
//!
//! Big sorts and DISTINCTs spill to temp files instead of growing the heap; constant value
//! amplifiers are capped by the AST check; the engine's safety net stops what still grows.

mod guard_common;

use std::time::Duration;

use causeway_backends::guard;
use causeway_backends::{QueryLimits, StoreError};
use guard_common::{limits_ms, refusal, Fixture, DBS};

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
