//! get_serving and get_causal_chains' `serving` through the tool catalogue, on a native trace of a
//! serving engine: its engine thread launches and syncs every 2 ms, stops making GPU calls for
//! 1.5 s (host work), then goes on; its scraped TTFT histogram (one scrape a second) shows the
//! first tokens of the requests queued meanwhile at 1.4 s against 20 ms before.

use std::path::Path;

use causeway_backends::QueryCancel;
use causeway_backends::{EventSink, SqliteSink};
use causeway_model::codes::op;
use causeway_model::{Event, LibraryAttach, ServingSample, SessionInfo};
use causeway_server::tools::{call, catalogue};
use causeway_server::TraceSet;
use serde_json::{json, Value};

const T0: i64 = 1_774_015_573_000_000_000;
const MS: i64 = 1_000_000;
const S: i64 = 1_000 * MS;
const PID: u32 = 5100;

fn event(ts: i64, dur: i64, code: causeway_model::codes::OpCode) -> Event {
    Event {
        ts_ns: ts,
        dur_ns: dur,
        pid: PID,
        tid: PID,
        source: code.source,
        op: code.op,
        comm: "python3".into(),
        ..Default::default()
    }
}

fn ttft(ts: i64, count: f64, sum: f64) -> Vec<ServingSample> {
    let s = |metric: &str, value: f64| ServingSample {
        ts_ns: ts,
        pid: PID,
        engine: "vllm".into(),
        metric: metric.into(),
        labels: r#"{"engine":"0","model_name":"m"}"#.into(),
        le: None,
        value,
    };
    vec![s("vllm:time_to_first_token_seconds_count", count), s("vllm:time_to_first_token_seconds_sum", sum)]
}

fn write_trace(path: &Path) {
    let mut events = Vec::new();
    let mut t = T0;
    while t < T0 + 10 * S {
        if (T0 + 5 * S..T0 + 5 * S + 1_500 * MS).contains(&t) {
            t = T0 + 5 * S + 1_500 * MS; // the stall: no GPU call
        }
        events.push(event(t, 20_000, op::CUDA_LAUNCH_KERNEL));
        events.push(event(t + 100_000, 1_500_000, op::CUDA_STREAM_SYNC));
        t += 2 * MS;
    }
    // ten requests a second at 20 ms; the 15 queued in the stall served in the second after it
    let mut samples = Vec::new();
    let (mut n, mut sum) = (0.0, 0.0);
    for k in 0..=10 {
        let (served, each) = match k {
            6 => (0.0, 0.0),
            7 => (15.0, 1.4),
            _ if k == 0 => (0.0, 0.0),
            _ => (10.0, 0.02),
        };
        n += served;
        sum += served * each;
        samples.extend(ttft(T0 + k * S, n, sum));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let session = SessionInfo { started_at_ns: T0, tool_version: "test".into(), ..Default::default() };
        let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(path, session).unwrap());
        sink.write_batch(events).await.unwrap();
        sink.write_serving_samples(samples).await.unwrap();
        let endpoint = LibraryAttach {
            pid: PID,
            path: "http://127.0.0.1:8000/metrics".into(),
            kind: "serving".into(),
            how: "vllm".into(),
            attached_at_ns: T0,
            ..Default::default()
        };
        sink.write_attachments(vec![endpoint]).await.unwrap();
        sink.finish(T0 + 11 * S).await.unwrap();
    });
}

fn tool(set: &TraceSet, name: &str, args: Value) -> Result<Value, String> {
    call(&catalogue(), set, name, args, &QueryCancel::new()).map(|a| a.structured).map_err(|e| format!("{e:?}"))
}

#[test]
fn get_serving_ties_the_ttft_spike_to_the_engine_threads_stall() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("serving.db");
    write_trace(&db);
    let set = TraceSet::open(&[db]);
    let out = tool(&set, "get_serving", json!({})).unwrap();
    let engine = &out["serving"]["engines"][0];
    assert_eq!(engine["endpoint"], "http://127.0.0.1:8000/metrics");
    let spike = &engine["spikes"][0];
    assert_eq!(spike["kind"], "time_to_first_token");
    // the stalled second (5 to 6 s) and the late one (6 to 7 s)
    assert_eq!((spike["from_ns"].as_i64(), spike["to_ns"].as_i64()), (Some(T0 + 5 * S), Some(T0 + 7 * S)));
    assert!((spike["baseline_s"].as_f64().unwrap() - 0.02).abs() < 1e-9, "{spike}");
    assert!(spike["why"].as_str().unwrap().contains("made no GPU call"), "{spike}");
    assert!(out["summary"].as_str().unwrap().contains("TTFT went from 20.00 ms to 1.400 s"), "{}", out["summary"]);
    // the chains carry the same report
    let chains = tool(&set, "get_causal_chains", json!({})).unwrap();
    assert_eq!(chains["serving"]["engines"][0]["spikes"][0]["summary"], spike["summary"]);
    // a window before the stall: no spike, and said so
    let before = tool(&set, "get_serving", json!({"to": "+4s"})).unwrap();
    assert_eq!(before["serving"]["engines"][0]["spikes"], json!([]));
    assert!(before["summary"].as_str().unwrap().ends_with("no spike"), "{}", before["summary"]);
}
