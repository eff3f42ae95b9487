//! `explain` over a generated 10,000,000-event trace: wall time and peak memory (VmHWM) of the
//! analysis alone (the peak is reset after the trace is written), and the time of the top chain's
//! evidence SQL, whose result must equal the chain's figure.
//!
//! `cargo bench --workspace --bench explain` (env CAUSEWAY_BENCH_EVENTS overrides 10,000,000;
//! the trace is kept in the temp dir and reused by later runs of the same size).

use std::time::Instant;

use causeway_analysis::{explain, ExplainRequest};
use causeway_backends::{synthetic_sqlite_trace, QueryLimits, SqliteStore, TraceStore};

fn main() {
    let n: usize = std::env::var("CAUSEWAY_BENCH_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let (path, written) = synthetic_sqlite_trace(n).expect("the synthetic trace");
    if let Some(t) = written {
        println!("wrote {n} events to {} in {:.1} s", path.display(), t.as_secs_f64());
    }
    let store = SqliteStore::open(&path).expect("open");
    println!(
        "trace: {} events, {:.1} MiB",
        store.info().events,
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0
    );
    causeway_testdata::reset_peak_rss();
    let rss_before = causeway_testdata::rss_kib();
    let t = Instant::now();
    let e = explain(&store, &ExplainRequest::default()).expect("explain");
    let secs = t.elapsed().as_secs_f64();
    let peak = causeway_testdata::peak_rss_kib();
    println!(
        "explain: {secs:.2} s, peak RSS {:.1} MiB (RSS before {:.1} MiB); {} GPU calls, {} slow, {} chains",
        peak as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        e.gpu_calls,
        e.slow_calls,
        e.chains_total
    );
    println!("verdict: {}", e.verdict);
    if let Some(c) = e.chains.first() {
        let t = Instant::now();
        let r = store
            .query(&c.evidence.sql, &QueryLimits { timeout_ms: 600_000, ..Default::default() })
            .expect("evidence SQL");
        let v = r.rows[0][0].as_i64();
        println!(
            "evidence SQL of {}: {:.2} s, value {:?} (chain says {})",
            c.id,
            t.elapsed().as_secs_f64(),
            v,
            c.evidence.value
        );
        assert_eq!(v, Some(c.evidence.value), "evidence SQL disagrees with the chain");
    }
}
