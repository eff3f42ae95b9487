//! Spine benchmarks, one run, figures and ratios printed:
//! 1. write path: sustained events/s from `Event` batches into SQLite through `EventSink`, the writer
//!    thread's own CPU per event (the tracer's cost a traced host pays), with memory;
//! 2. read path: `stats` over a generated 10,000,000-event trace, beside the `sqlite3` command-line
//!    tool running the plain window-function SQL that computes the same nearest-rank percentiles
//!    (the figures of both are compared, not just timed).
//!
//! `cargo bench --workspace --bench spine` (env CAUSEWAY_BENCH_EVENTS overrides 10,000,000).

use std::path::Path;
use std::time::Instant;

use causeway_analysis::{compute_stats, StatsRequest};
use causeway_backends::EngineWriter;
use causeway_backends::SyntheticTrace;
use causeway_backends::{EventSink, SqliteSink, SqliteStore, SqliteWriter, TraceStore};
use causeway_model::SessionInfo;

fn session() -> SessionInfo {
    SessionInfo { started_at_ns: 1_774_000_000_000_000_000, tool_version: "bench".into(), ..Default::default() }
}

/// The SQLite sink's writer thread, as the kernel names it (15 bytes).
const WRITER_THREAD: &str = "causeway-sqlite";

fn write_path(dir: &Path, n: usize) {
    let path = dir.join("write.db");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut synth = SyntheticTrace::new(7, 1_774_000_000_000_000_000);
    let batches: Vec<Vec<_>> = (0..n / 4096).map(|_| synth.take(4096)).collect();
    let total: usize = batches.iter().map(Vec::len).sum();
    let before = causeway_testdata::peak_rss_kib();
    let mut writer_cpu = 0;
    let t = Instant::now();
    let summary = rt.block_on(async {
        let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(&path, session()).unwrap());
        for b in batches {
            sink.write_batch(b).await.unwrap();
        }
        sink.flush().await.unwrap();
        let written_at = t.elapsed();
        // the writer thread is still there (it ends with `finish`)
        writer_cpu = causeway_testdata::thread_cpu_ns(WRITER_THREAD);
        let s = sink.finish(1).await.unwrap();
        (s, written_at)
    });
    let (s, written) = summary;
    let with_index = t.elapsed();
    assert_eq!(s.events_written as usize, total);
    let size = std::fs::metadata(&path).unwrap().len();
    println!("write path  : {total} events through EventSink into SQLite");
    let sustained = total as f64 / written.as_secs_f64();
    println!("              sustained {sustained:.0} events/s, every batch committed ({:.2} s)", written.as_secs_f64());
    println!(
        "              target >= 500,000 events/s sustained: {}",
        if sustained >= 500_000.0 { "met" } else { "MISSED" }
    );
    let cpu_us = writer_cpu as f64 / 1000.0 / total as f64;
    println!(
        "              the writer thread's CPU: {cpu_us:.2} us per event ({:.2} s; target <= 0.5 us: {:.2}x)",
        writer_cpu as f64 / 1e9,
        cpu_us / 0.5
    );
    println!("              finish (indexes, checkpoint, journal back to DELETE): {:.2} s once per trace; {:.0} events/s end to end",
        (with_index - written).as_secs_f64(), total as f64 / with_index.as_secs_f64());
    println!(
        "              file {:.1} MiB, peak RSS {:.1} MiB (before: {:.1} MiB, batches pre-generated)",
        size as f64 / 1048576.0,
        causeway_testdata::peak_rss_kib() as f64 / 1024.0,
        before as f64 / 1024.0
    );
}

fn ensure_big_trace(path: &Path, n: usize) {
    if let Ok(store) = SqliteStore::open(path) {
        if store.info().events == n as u64 {
            return;
        }
    }
    let _ = std::fs::remove_file(path);
    let mut w = SqliteWriter::create(path, &session()).unwrap();
    let mut synth = SyntheticTrace::new(42, 1_774_000_000_000_000_000);
    let mut left = n;
    while left > 0 {
        let b = synth.take(left.min(100_000));
        left -= b.len();
        w.write_batches([b.as_slice()]).unwrap();
    }
    w.finish(1).unwrap();
}

const REFERENCE_SQL: &str = "WITH r AS (SELECT source, op, duration, \
  ROW_NUMBER() OVER (PARTITION BY source, op ORDER BY duration) AS rn, \
  COUNT(*) OVER (PARTITION BY source, op) AS n FROM events) \
SELECT source, op, COUNT(*), SUM(duration), MIN(duration), MAX(duration), \
  MAX(CASE WHEN rn = MAX(1, (500*n+999)/1000) THEN duration END), \
  MAX(CASE WHEN rn = MAX(1, (900*n+999)/1000) THEN duration END), \
  MAX(CASE WHEN rn = MAX(1, (950*n+999)/1000) THEN duration END), \
  MAX(CASE WHEN rn = MAX(1, (990*n+999)/1000) THEN duration END) \
FROM r GROUP BY source, op ORDER BY source, op;";

fn read_path(path: &Path, n: usize) {
    let t = Instant::now();
    ensure_big_trace(path, n);
    println!(
        "read path   : {n}-event trace ready in {:.1} s ({:.0} MiB)",
        t.elapsed().as_secs_f64(),
        std::fs::metadata(path).unwrap().len() as f64 / 1048576.0
    );
    // Warm the page cache for both contenders alike (in chunks: the bytes are not kept).
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while f.read(&mut buf).unwrap() > 0 {}
    }
    causeway_testdata::reset_peak_rss();
    let t = Instant::now();
    let store = SqliteStore::open(path).unwrap();
    let stats = compute_stats(&store, &StatsRequest::default()).unwrap();
    let ours = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = std::process::Command::new("sqlite3")
        .arg(format!("file:{}?immutable=1", path.display()))
        .arg(REFERENCE_SQL)
        .output();
    let theirs = t.elapsed().as_secs_f64();
    println!("              causeway stats: {ours:.2} s ({} ops, {} events)", stats.ops.len(), stats.events);
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let mut mismatches = 0;
            for line in text.lines() {
                let f: Vec<i64> = line.split('|').map(|x| x.parse().unwrap()).collect();
                let s = stats.ops.iter().find(|s| i64::from(s.source) == f[0] && i64::from(s.op_code) == f[1]).unwrap();
                let us = |v: i64| v as f64 / 1000.0;
                let same = s.count as i64 == f[2]
                    && s.min_us == us(f[4])
                    && s.max_us == us(f[5])
                    && s.p50_us == us(f[6])
                    && s.p90_us == us(f[7])
                    && s.p95_us == us(f[8])
                    && s.p99_us == us(f[9]);
                if !same {
                    mismatches += 1;
                }
            }
            println!(
                "              sqlite3 window-function SQL: {theirs:.2} s; figures {}",
                if mismatches == 0 { "identical".to_string() } else { format!("DIFFER on {mismatches} ops") }
            );
            println!(
                "              ratio sqlite3 / causeway = {:.1}x (target > 1: {})",
                theirs / ours,
                if theirs > ours { "met" } else { "MISSED" }
            );
        }
        Ok(o) => println!("              sqlite3 failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => println!("              sqlite3 command-line tool not found ({e}): install the sqlite3 package"),
    }
    println!(
        "              peak RSS during stats and the comparison: {:.0} MiB",
        causeway_testdata::peak_rss_kib() as f64 / 1024.0
    );
}

fn main() {
    let n = causeway_backends::bench_events();
    let tmp = tempfile::tempdir().unwrap();
    write_path(tmp.path(), 2_000_000.min(n));
    causeway_testdata::reset_peak_rss();
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target-bench");
    let dir = std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from).unwrap_or(cache);
    std::fs::create_dir_all(&dir).unwrap();
    read_path(&dir.join(format!("bench-{n}.db")), n);
}
