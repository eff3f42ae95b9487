//! `causeway trace --metrics` scraped by a real Prometheus server (Debian's `prometheus`, installed
//! by `scripts/install-test-deps.sh`) during a mock-CUDA trace (root, eBPF): what Prometheus
//! stored must be what the trace wrote.

use std::io::{Read, Write};
use std::net::TcpStream;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{query_rows, require_root_to};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET `path` on 127.0.0.1:`port`: (status, body); None when nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(dir: &Path, target_port: u16) -> Prometheus {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: causeway\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("prometheus runs (scripts/install-test-deps.sh installs Debian's prometheus)");
    let p = Prometheus { child, port };
    let t0 = Instant::now();
    while get(port, "/-/ready").map(|r| r.0) != Some(200) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // ready is not scraping: target discovery reaches the scrape loop a few seconds later (its
    // updates are sent every 5 s); wait for the first attempt (down: nothing listens yet)
    while !get(port, "/api/v1/targets")
        .is_some_and(|(_, b)| b.contains("\"health\":\"down\"") || b.contains("\"health\":\"up\""))
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "prometheus never scraped its target");
        std::thread::sleep(Duration::from_millis(200));
    }
    p
}

/// One number from Prometheus' query API.
fn query(p: &Prometheus, promql: &str) -> Option<f64> {
    let q: String = promql
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let (status, body) = get(p.port, &format!("/api/v1/query?query={q}"))?;
    assert_eq!(status, 200, "{promql}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let r = v["data"]["result"].as_array()?.first()?.clone();
    r["value"][1].as_str()?.parse().ok()
}

fn causeway_count(db: &Path, sql: &str) -> f64 {
    query_rows(db, sql)[0][0].as_f64().unwrap()
}

fn mock_train() -> PathBuf {
    causeway_testdata::mock_cuda_build().join("train")
}

#[test]
fn prometheus_scrapes_the_live_trace_and_holds_its_counts() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let prom = start_prometheus(dir.path(), metrics_port);
    let db = dir.path().join("t.db");
    // the calls, then a quiet stretch so that the last scrapes see the final counts
    let script = format!("{} --iters 60; sleep 4", mock_train().display());
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["trace", "--nvml-hz", "0", "--metrics", &format!("127.0.0.1:{metrics_port}"), "--db"])
        .arg(&db)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("metrics at http://127.0.0.1:{metrics_port}/metrics")), "{stderr}");

    let up = query(&prom, "max_over_time(up{job=\"causeway\"}[5m])");
    assert_eq!(
        up,
        Some(1.0),
        "prometheus never scraped the trace: {}",
        std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
    );
    // every GPU op the trace holds, by its stored name
    let ops = query_rows(
        &db,
        "SELECT o.name, count(*) FROM events e JOIN ops o ON o.source_id = e.source AND o.op_id = e.op \
         WHERE e.source IN (1, 4, 8, 9) GROUP BY o.name",
    );
    assert!(ops.len() >= 3, "the workload makes launches, copies and syncs: {ops:?}");
    for row in &ops {
        let (op, want) = (row[0].as_str().unwrap(), row[1].as_f64().unwrap());
        let calls = query(&prom, &format!("max_over_time(causeway_gpu_calls_total{{op=\"{op}\"}}[5m])"));
        assert_eq!(calls, Some(want), "{op}: calls scraped vs written");
        let hist = query(&prom, &format!("max_over_time(causeway_gpu_call_duration_seconds_count{{op=\"{op}\"}}[5m])"));
        assert_eq!(hist, Some(want), "{op}: histogram count");
    }
    let events = query(&prom, "max_over_time(causeway_events_written_total[5m])").unwrap();
    let written = causeway_count(&db, "SELECT count(*) FROM events");
    assert!(events > 0.0 && events <= written, "events scraped {events}, written {written}");
    let off_cpu = query(&prom, "sum(max_over_time(causeway_off_cpu_seconds_total[5m]))").unwrap();
    assert!(off_cpu > 0.0, "the DataLoader threads sleep: off-CPU time");
    assert!(query(&prom, "max_over_time(causeway_tracer_cpu_seconds_total[5m])").unwrap() > 0.0);
    assert!(query(&prom, "max_over_time(causeway_traced_processes[5m])").unwrap() >= 1.0);
}

#[test]
fn a_busy_metrics_port_fails_the_trace_at_once() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["trace", "--metrics", &format!("127.0.0.1:{port}"), "--db"])
        .arg(dir.path().join("t.db"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot listen on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
