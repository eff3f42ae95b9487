//! `explain` over one window of two synthetic traces of different lengths, side by side: the same
//! generator and seed make the shorter trace a prefix of the longer one, so a window inside the
//! shorter trace holds the same events in both, and its explanation must be the same. The time
//! of the windowed explain should follow the window, not the trace: the ratio printed is the
//! longer trace's time over the shorter's (1.0 when the cost does not grow with the trace).
//! Apart is printed the part that still reads the whole trace by design: the steps, inferred
//! over the whole trace so that their numbers do not depend on the window (`find_steps`), the
//! only part of the answers that may differ (its note counts the whole trace's calls).
//!
//! `cargo bench --workspace --bench explain_window` (env CAUSEWAY_BENCH_EVENTS: the longer
//! trace, 10,000,000; CAUSEWAY_BENCH_SMALL_EVENTS: the shorter, a fifth of it; the window is the
//! middle half of the shorter trace's span; the traces are kept in the temp dir and reused). With
//! DuckDB built in (`--features causeway-backends/duckdb`), each trace is also converted to DuckDB
//! (kept beside it) and measured the same way.

use std::time::Instant;

use causeway_analysis::{explain, ExplainRequest, Explanation};
use causeway_backends::{bench_events, synthetic_sqlite_trace, Engine, TraceStore};
use causeway_model::time::TimeWindow;

/// The trace of `n` events in `engine` (SQLite written first when the temp dir lacks it, DuckDB
/// converted from it), opened.
fn trace(n: usize, engine: Engine) -> Box<dyn TraceStore> {
    let (path, written) = synthetic_sqlite_trace(n).expect("the synthetic trace");
    if let Some(t) = written {
        println!("wrote {n} events to {} in {:.1} s", path.display(), t.as_secs_f64());
    }
    let path = match engine {
        Engine::Sqlite => path,
        Engine::DuckDb => {
            let duck = path.with_extension("duckdb");
            if !duck.exists() {
                let partial = path.with_extension("duckdb-partial");
                let _ = std::fs::remove_file(&partial);
                causeway_backends::convert(&path, &partial, Some(engine), &mut |_, _| {}).expect("convert to DuckDB");
                std::fs::rename(&partial, &duck).expect("keep the DuckDB trace");
            }
            duck
        }
    };
    causeway_backends::open_store(&path).expect("open the synthetic trace")
}

/// The best of two windowed explains of `store` (seconds) and the last answer.
fn timed_explain(store: &dyn TraceStore, window: TimeWindow) -> (f64, Explanation) {
    let req = ExplainRequest::new(window, None, 10);
    let mut best = f64::MAX;
    let mut answer = None;
    for _ in 0..2 {
        let t = Instant::now();
        let e = explain(store, &req).expect("explain");
        best = best.min(t.elapsed().as_secs_f64());
        answer = Some(e);
    }
    (best, answer.expect("two runs"))
}

/// The explanation as JSON without what names the file it was read from and without the steps
/// (inferred over the whole trace).
fn comparable(e: &Explanation) -> serde_json::Value {
    let mut e = e.clone();
    e.db.clear();
    e.steps = Default::default();
    serde_json::to_value(&e).expect("explanation as JSON")
}

/// The best of two step inferences over the whole of `store`, kept to `window` (seconds).
fn timed_steps(store: &dyn TraceStore, window: TimeWindow) -> f64 {
    (0..2)
        .map(|_| {
            let t = Instant::now();
            causeway_analysis::find_steps(store, window, None).expect("steps");
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let long_n = bench_events();
    let short_n = std::env::var("CAUSEWAY_BENCH_SMALL_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(long_n / 5);
    assert!(short_n < long_n, "the shorter trace must be shorter ({short_n} >= {long_n})");
    for engine in Engine::ALL.into_iter().filter(|&e| causeway_backends::is_built(e)) {
        println!("== {engine:?}");
        compare(engine, short_n, long_n);
    }
}

/// The windowed explain of the `short_n`- and `long_n`-event traces in `engine`, side by side.
fn compare(engine: Engine, short_n: usize, long_n: usize) {
    let short = trace(short_n, engine);
    let long = trace(long_n, engine);
    let (first, last) = (short.info().first_ns, short.info().last_ns);
    let span = last - first;
    let window = TimeWindow { from_ns: Some(first + span / 4), to_ns: Some(first + span / 4 * 3) };
    let in_window = |s: &dyn TraceStore| {
        let r = s
            .query(
                &format!(
                    "SELECT count(*) FROM events WHERE timestamp BETWEEN {} AND {}",
                    window.from_ns.unwrap_or(0),
                    window.to_ns.unwrap_or(0)
                ),
                &Default::default(),
            )
            .expect("count the window's events");
        r.rows[0][0].as_i64().unwrap_or(0)
    };
    let window_events = in_window(short.as_ref());
    assert_eq!(window_events, in_window(long.as_ref()), "the shorter trace is not a prefix of the longer");
    println!("window: the middle half of the shorter trace, {window_events} events");
    let (short_s, short_e) = timed_explain(short.as_ref(), window);
    let (long_s, long_e) = timed_explain(long.as_ref(), window);
    let (short_steps, long_steps) = (timed_steps(short.as_ref(), window), timed_steps(long.as_ref(), window));
    println!("{:>14}  {:>17}  {:>20}  {:>8}", "trace events", "windowed explain", "of it, steps (whole)", "chains");
    for (n, s, st, e) in [(short_n, short_s, short_steps, &short_e), (long_n, long_s, long_steps, &long_e)] {
        println!("{n:>14}  {s:>15.3} s  {st:>18.3} s  {:>8}", e.chains_total);
    }
    println!(
        "ratio (longer / shorter) for a trace {:.1}x as long: explain {:.2}, without the steps {:.2}, the steps {:.2}",
        long_n as f64 / short_n as f64,
        long_s / short_s,
        (long_s - long_steps) / (short_s - short_steps),
        long_steps / short_steps
    );
    assert_eq!(comparable(&short_e), comparable(&long_e), "one window, two answers");
    println!(
        "the window's explanation is the same in both traces{}",
        if short_e.steps == long_e.steps {
            ", steps included"
        } else {
            " but for its steps (inferred over each whole trace)"
        }
    );
}
