//! The cost of tracing always on: a rollover, disk growth, and the tracer over a long soak.
//!
//! 1. **Rollover** (no root): the same synthetic events written into one SQLite file and into a
//!    series of parts, side by side in one run: the streaming write rate of each and their ratio,
//!    the writer's pause at a rollover (the call that creates the next part, against a plain
//!    call), the time to finish a closed part (what its own thread does), and the disk taken per
//!    million events. `CAUSEWAY_BENCH_EVENTS` (default 2,000,000), `CAUSEWAY_BENCH_PART_MIB` (32).
//! 2. **Soak** (root, eBPF): `causeway trace --all` into a series with retention for
//!    `CAUSEWAY_SOAK_MINUTES` (default 30) beside a steady mock CUDA workload (a launch loop paced
//!    at `CAUSEWAY_SOAK_RATE` launches/s, default 5000, and a process that synchronizes every few
//!    milliseconds); each minute the tracer's CPU (share of one core), its resident memory, the
//!    series' bytes on disk and its parts; at the end the events written and lost, and the disk
//!    per million events.
//!
//! `cargo bench --workspace --bench always_on` (as root for the soak; `CAUSEWAY_BIN` names a copy
//! of the `causeway` binary to run instead of the one cargo built).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use causeway_backends::sqlite::series::list_parts;
use causeway_backends::{EngineWriter, RollPolicy, RollingWriter, SqliteWriter, SyntheticTrace};
use causeway_model::SessionInfo;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum()).unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn rollover() {
    let n = env_num("CAUSEWAY_BENCH_EVENTS", 2_000_000) as usize;
    let part_mib = env_num("CAUSEWAY_BENCH_PART_MIB", 32);
    let batch = 4096;
    let dir = tempfile::tempdir().unwrap();
    let session = SessionInfo { started_at_ns: 1, ..Default::default() };
    let mut synth = SyntheticTrace::new(11, 1_000_000_000);
    let events = synth.take(n);
    println!("== rollover: {n} synthetic events in batches of {batch}, parts of {part_mib} MiB");

    let one = dir.path().join("one.db");
    let mut w = SqliteWriter::create(&one, &session).unwrap();
    let t = Instant::now();
    for chunk in events.chunks(batch) {
        w.write_batches([chunk]).unwrap();
    }
    let one_write = t.elapsed();
    let t = Instant::now();
    w.finish(2).unwrap();
    let one_finish = t.elapsed();
    let one_bytes = std::fs::metadata(&one).unwrap().len();

    let series = dir.path().join("series");
    let policy = RollPolicy { max_part_bytes: part_mib << 20, ..RollPolicy::default() };
    let mut w = RollingWriter::open(&series, &session, policy).unwrap();
    let (mut plain, mut rolls) = (Vec::new(), Vec::new());
    let t = Instant::now();
    for chunk in events.chunks(batch) {
        let before = list_parts(&series).unwrap().len();
        let c = Instant::now();
        w.write_batches([chunk]).unwrap();
        let ms = c.elapsed().as_secs_f64() * 1e3;
        if list_parts(&series).unwrap().len() > before {
            rolls.push(ms);
        } else {
            plain.push(ms);
        }
    }
    let series_write = t.elapsed();
    let t = Instant::now();
    w.finish(2).unwrap();
    let series_finish = t.elapsed();
    let series_bytes = dir_bytes(&series);
    plain.sort_by(f64::total_cmp);
    rolls.sort_by(f64::total_cmp);

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!("| figure | one file | series | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| streaming write, events/s | {:.0} | {:.0} | {:.2}x |",
        rate(one_write),
        rate(series_write),
        rate(series_write) / rate(one_write)
    );
    println!(
        "| finish at the end (live part + waiting for closed parts), s | {:.2} | {:.2} | - |",
        one_finish.as_secs_f64(),
        series_finish.as_secs_f64()
    );
    println!(
        "| bytes on disk per million events | {:.1} MiB | {:.1} MiB | {:.2}x |",
        one_bytes as f64 / n as f64 * 1e6 / 1048576.0,
        series_bytes as f64 / n as f64 * 1e6 / 1048576.0,
        series_bytes as f64 / one_bytes as f64
    );
    println!(
        "rollovers: {} (parts: {}); the writer's call that rolled: p50 {:.1} ms, max {:.1} ms; a plain call: p50 {:.2} ms, p99 {:.2} ms",
        rolls.len(),
        list_parts(&series).unwrap().len(),
        percentile(&rolls, 0.5),
        rolls.last().copied().unwrap_or(0.0),
        percentile(&plain, 0.5),
        percentile(&plain, 0.99)
    );
    // what the finishing thread of each closed part does, off the writer's path: one part's worth
    let per_part = (n as f64 * (part_mib << 20) as f64 / one_bytes as f64) as usize;
    let part = dir.path().join("part.db");
    let mut w = SqliteWriter::create(&part, &session).unwrap();
    for chunk in events[..per_part.min(n)].chunks(batch) {
        w.write_batches([chunk]).unwrap();
    }
    let t = Instant::now();
    w.finish(2).unwrap();
    println!(
        "finishing one closed part ({} events: indexes, out of WAL), on its own thread: {:.2} s",
        per_part.min(n),
        t.elapsed().as_secs_f64()
    );
}

/// (user + system CPU seconds, resident MiB) of a process.
fn cpu_and_rss(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    Some((ticks / hz, rss_kib / 1024.0))
}

fn soak() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("== soak: SKIPPED (needs root for eBPF; run the bench as root)");
        return;
    }
    let minutes = env_num("CAUSEWAY_SOAK_MINUTES", 30);
    if minutes == 0 {
        println!("== soak: SKIPPED (CAUSEWAY_SOAK_MINUTES=0)");
        return;
    }
    let rate = env_num("CAUSEWAY_SOAK_RATE", 5000).max(1);
    let build = causeway_testdata::mock_cuda_build();
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("host");
    let report = dir.path().join("trace.jsonl");
    println!(
        "== soak: {minutes} min of `trace --all` into a series (64 MiB files, at most 512 MiB), {rate} launches/s"
    );
    let mut loop_ = Command::new(build.join("launchloop"))
        .args(["--iters", "1000000000000", "--work-ns", &(1_000_000_000 / rate).to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut steady = Command::new(build.join("steady"))
        .args(["--ms", &(minutes * 60_000 + 60_000).to_string(), "--launches", "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // CAUSEWAY_BIN: a copy of the binary, so that a build during a long soak does not touch it
    let bin = std::env::var("CAUSEWAY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_causeway").to_string());
    let mut tracer = Command::new(bin)
        .args(["trace", "--all", "--json", "--nvml-hz", "0", "--lock"])
        .arg(dir.path().join("lock"))
        .args(["--max-file-size", "64M", "--max-size", "512M", "--duration", &format!("{}s", minutes * 60), "--db"])
        .arg(&series)
        .env_remove("CAUSEWAY_LOG")
        // a file, not a pipe: a pipe nobody reads until the end would stop the tracer when full
        .stdout(Stdio::from(std::fs::File::create(&report).unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = tracer.id();
    println!("| minute | tracer CPU (% of a core) | RSS MiB | series MiB | parts |");
    println!("|---|---|---|---|---|");
    let start = Instant::now();
    let mut last = cpu_and_rss(pid).map_or(0.0, |c| c.0);
    for minute in 1..=minutes {
        std::thread::sleep((start + Duration::from_secs(minute * 60)).saturating_duration_since(Instant::now()));
        let Some((cpu, rss)) = cpu_and_rss(pid) else { break };
        println!(
            "| {minute} | {:.1} | {rss:.0} | {:.0} | {} |",
            (cpu - last) / 60.0 * 100.0,
            dir_bytes(&series) as f64 / 1048576.0,
            list_parts(&series).map_or(0, |p| p.len())
        );
        last = cpu;
    }
    let status = tracer.wait().unwrap();
    let _ = loop_.kill();
    let _ = steady.kill();
    let _ = (loop_.wait(), steady.wait());
    let done: Option<serde_json::Value> = std::fs::read_to_string(&report)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["done"] == true);
    let Some(done) = done else {
        println!("the tracer gave no final report (exit {status})");
        return;
    };
    let written = done["report"]["events_written"].as_u64().unwrap_or(0);
    let lost: u64 =
        done["report"]["losses"].as_array().map_or(0, |l| l.iter().filter_map(|x| x["count"].as_u64()).sum());
    let parts = list_parts(&series).unwrap_or_default();
    let kept_bytes = dir_bytes(&series);
    let kept_events = causeway_backends::open_store(&series).map_or(0, |s| s.info().events);
    println!(
        "events written {written} ({:.0}/s), lost {lost}; parts kept {} (from part {}), {:.0} MiB holding {kept_events} \
         events: {:.1} MiB per million events",
        written as f64 / (minutes * 60) as f64,
        parts.len(),
        parts.first().map_or(0, |p| p.0),
        kept_bytes as f64 / 1048576.0,
        kept_bytes as f64 / 1048576.0 / (kept_events.max(1) as f64 / 1e6)
    );
}

fn main() {
    rollover();
    soak();
}
