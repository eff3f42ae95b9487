//! Serving engines end to end (root, eBPF): a mock vLLM (`tests/serving/vllm`, run as `python3 -m
//! vllm.entrypoints.openai.api_server` like the real one: a real HTTP server exposing vLLM's
//! metric names, an engine loop driving mock-cuda in prefill and decode steps, a planted stall of
//! on-CPU host work) is told from its command line, its endpoint found from its listening
//! socket and scraped into the trace; `causeway serving` finds the TTFT spike over the stall,
//! ties it to the engine thread's gap, and splits its steps into the prefill and decode steps it
//! made; the HTML report says so too. An endpoint given with `--serving-url` is scraped whatever
//! is traced.

mod common;

use std::process::{Command, Stdio};

use common::{causeway, query_rows, query_u64, repo, require_root_to};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The mock engine's command line (`python3 -m vllm...`), its module found through PYTHONPATH.
fn mock_vllm(cmd: &mut Command, port: u16, seconds: &str) {
    let build = causeway_testdata::mock_cuda_build();
    cmd.env("PYTHONPATH", repo().join("tests/serving"))
        .args(["python3", "-m", "vllm.entrypoints.openai.api_server", "--port", &port.to_string()])
        .arg("--libcudart")
        .arg(build.join("libcudart.so.12"))
        .args(["--seconds", seconds]);
}

/// `NAME N...` lines the mock printed.
fn fact(stdout: &str, name: &str) -> Vec<i64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no `{name}` in {stdout}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn a_traced_vllm_is_scraped_and_its_ttft_spike_is_tied_to_the_engine_threads_stall() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("serve.db");
    let port = free_port();
    let mut trace = causeway();
    trace.args(["trace", "--nvml-hz", "0", "--no-labels", "--serving-scrape-ms", "250", "--db"]).arg(&db).arg("--");
    mock_vllm(&mut trace, port, "7");
    let out = trace.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let (prefill, decode) = (fact(&stdout, "prefill_steps")[0], fact(&stdout, "decode_steps")[0]);
    let first_tokens = fact(&stdout, "first_tokens")[0];
    let stall = fact(&stdout, "stall_ns");

    // the endpoint, found from the command line and the listening socket
    let rows = query_rows(&db, "SELECT pid, path, how FROM attachments WHERE kind = 'serving'");
    assert_eq!(rows.len(), 1, "{rows:?}\n{stderr}");
    assert_eq!(rows[0][1], format!("http://127.0.0.1:{port}/metrics"));
    assert_eq!(rows[0][2], "vllm");
    // every first token the engine served is counted by its last scrape (it serves 0.6 s more)
    let counted = query_u64(
        &db,
        "SELECT CAST(max(value) AS INTEGER) FROM serving_samples WHERE metric = 'vllm:time_to_first_token_seconds_count'",
    );
    assert_eq!(counted as i64, first_tokens, "{stderr}");
    assert_eq!(
        query_u64(&db, "SELECT count(*) FROM serving_samples WHERE metric LIKE '%cache_config_info%'"),
        0,
        "only the table's metrics are kept"
    );

    let serving = causeway().args(["serving", "--json", "--db"]).arg(&db).output().unwrap();
    assert!(serving.status.success(), "{}", String::from_utf8_lossy(&serving.stderr));
    let v: serde_json::Value = serde_json::from_slice(&serving.stdout).unwrap();
    let engine = &v["engines"][0];
    assert_eq!(engine["engine"], "vllm");
    let ttft = engine["spikes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "time_to_first_token")
        .unwrap_or_else(|| panic!("a TTFT spike: {}", serde_json::to_string_pretty(engine).unwrap()));
    // the spike's window holds the planted stall, and the stall is its cause
    let (cause_from, to) = (ttft["cause_from_ns"].as_i64().unwrap(), ttft["to_ns"].as_i64().unwrap());
    assert!(cause_from <= stall[0] && to >= stall[1], "window {cause_from}..{to} against the stall {stall:?}");
    assert!(ttft["peak_mean_s"].as_f64().unwrap() > 10.0 * ttft["baseline_s"].as_f64().unwrap(), "{ttft}");
    let why = ttft["why"].as_str().unwrap();
    assert!(why.contains("made no GPU call") && why.contains("host work"), "{why}");
    assert!(ttft["chain_key"].as_str().unwrap().starts_with("feeding_gap/"), "{ttft}");
    assert!(ttft["stalled_ns"].as_i64().unwrap() >= 500_000_000, "the stall served nothing: {ttft}");
    // the SQL given recomputes the interval means
    let sql = ttft["sql"].as_str().unwrap();
    let peak = query_rows(&db, &format!("SELECT max(mean_s) FROM ({sql})"))[0][0].as_f64().unwrap();
    assert!((peak - ttft["peak_mean_s"].as_f64().unwrap()).abs() < 1e-6, "{peak} vs {ttft}");

    // the engine thread's steps, split as the engine made them
    let steps = &v["engine_steps"];
    let phase = |name: &str| {
        steps["phases"].as_array().unwrap().iter().find(|p| p["phase"] == name).map(|p| p["steps"].as_i64().unwrap())
    };
    assert_eq!((phase("prefill_heavy"), phase("decode_heavy")), (Some(prefill), Some(decode)), "{steps}");

    // explain carries the same answer; the plain text says it in words
    let text = causeway().args(["serving", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("TTFT went from") && text.contains("made no GPU call"), "{text}");
    // the HTML report has its serving section
    let html = dir.path().join("serve.html");
    let r = causeway().args(["report", "--db"]).arg(&db).arg("--html").arg(&html).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Serving</h2>") && page.contains("TTFT went from"), "no serving section");
}

#[test]
fn a_vllm_started_by_its_own_script_is_told_by_the_extension_it_maps() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("script.db");
    let port = free_port();
    let build = causeway_testdata::mock_cuda_build();
    // by its file path, not `-m vllm...`: the command line says nothing of vLLM
    let out = causeway()
        .args(["trace", "--nvml-hz", "0", "--no-labels", "--serving-scrape-ms", "250", "--db"])
        .arg(&db)
        .args(["--", "python3"])
        .arg(repo().join("tests/serving/vllm/entrypoints/openai/api_server.py"))
        .args(["--port", &port.to_string(), "--seconds", "4", "--stall-at", "100", "--libcudart"])
        .arg(build.join("libcudart.so.12"))
        .arg("--extension-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = query_rows(&db, "SELECT path, how FROM attachments WHERE kind = 'serving'");
    assert_eq!(
        rows,
        vec![vec![serde_json::json!(format!("http://127.0.0.1:{port}/metrics")), serde_json::json!("vllm")]],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(query_u64(&db, "SELECT count(DISTINCT timestamp) FROM serving_samples") >= 4);
}

#[test]
fn an_endpoint_given_with_serving_url_is_scraped_whatever_is_traced() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("url.db");
    let port = free_port();
    // the engine runs untraced; the trace is of something else
    let mut engine = Command::new("env");
    mock_vllm(&mut engine, port, "4");
    let mut engine = engine.stdout(Stdio::null()).spawn().unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let out = causeway()
        .args(["trace", "--nvml-hz", "0", "--no-labels", "--serving-scrape-ms", "200", "--serving-url", &url])
        .arg("--db")
        .arg(&db)
        .args(["--", "sleep", "3"])
        .output()
        .unwrap();
    let _ = engine.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = query_rows(&db, "SELECT pid, how FROM attachments WHERE kind = 'serving'");
    assert_eq!(rows, vec![vec![serde_json::json!(0), serde_json::json!("vllm")]], "told by its metric names");
    let scrapes = query_u64(&db, "SELECT count(DISTINCT timestamp) FROM serving_samples WHERE engine = 'vllm'");
    assert!(scrapes >= 5, "{scrapes} scrapes in 3 s at 200 ms");
}
