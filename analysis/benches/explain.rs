//! `explain` over a generated 10,000,000-event trace: wall time and peak memory (VmHWM) of the
//! analysis alone (the peak is reset after the trace is written), and the time of the top chain's
//! evidence SQL, whose result must equal the chain's figure; and the scanning path of the steps.
//!
//! `cargo bench --workspace --bench explain` (env CAUSEWAY_BENCH_EVENTS overrides 10,000,000;
//! the trace is kept in the temp dir and reused by later runs of the same size).

use std::time::Instant;

use causeway_analysis::{explain, ExplainRequest};
use causeway_backends::{open_bench_trace, QueryLimits, TraceStore};

fn main() {
    let (_, store) = open_bench_trace();
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
    // explain of a whole trace finds the steps in the calls it read; a windowed explain, `steps`
    // and `--steps` scan for them (labels, else the synchronizing calls): that path alone
    let t = Instant::now();
    let steps = causeway_analysis::find_steps(&store, Default::default(), None).expect("steps");
    let steps_secs = t.elapsed().as_secs_f64();
    println!(
        "steps by scanning: {steps_secs:.2} s ({:.0}% of explain's time); {} series{}",
        steps_secs / secs * 100.0,
        steps.series.len(),
        steps.notes.first().map(|n| format!(" ({n})")).unwrap_or_default()
    );
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
