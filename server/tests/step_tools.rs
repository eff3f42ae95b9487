//! Steps through the tool catalogue: get_steps on a native trace where two ranks of one job labeled
//! 40 steps each and steps 20-24 were slow on both (their synchronizing calls waited 40 ms instead
//! of 8, the ranks in lockstep as collectives keep them), and `steps` as the window of the other
//! tools, judged against the whole trace.

use std::path::Path;

use causeway_backends::QueryCancel;
use causeway_backends::{EventSink, SqliteSink};
use causeway_model::codes::op;
use causeway_model::{Event, SessionInfo};
use causeway_server::tools::{call, catalogue};
use causeway_server::TraceSet;
use serde_json::{json, Value};

const T0: i64 = 1_774_015_573_000_000_000;
const MS: i64 = 1_000_000;
const A: u32 = 4100;
const B: u32 = 4200;

fn event(pid: u32, ts: i64, dur: i64, code: causeway_model::codes::OpCode, arg0: i64) -> Event {
    Event {
        ts_ns: ts,
        dur_ns: dur,
        pid,
        tid: pid,
        source: code.source,
        op: code.op,
        arg0,
        comm: "train".into(),
        ..Default::default()
    }
}

fn write_trace(path: &Path) {
    let mut events = Vec::new();
    for pid in [A, B] {
        let mut t = T0 + if pid == B { 100_000 } else { 0 }; // rank B a hair behind
        for step in 0..40 {
            let wait = if (20..=24).contains(&step) { 40 * MS } else { 8 * MS };
            let start = t;
            events.push(event(pid, t, 50_000, op::CUDA_LAUNCH_KERNEL, 0x10));
            t += MS;
            events.push(event(pid, t, wait, op::CUDA_STREAM_SYNC, 0));
            t += wait + MS;
            events.push(event(pid, start, t - start, op::STEP, step));
        }
    }
    events.sort_by_key(|e| e.ts_ns);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let session = SessionInfo { started_at_ns: T0, tool_version: "test".into(), ..Default::default() };
        let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(path, session).unwrap());
        sink.write_batch(events).await.unwrap();
        sink.finish(T0 + 10_000 * MS).await.unwrap();
    });
}

fn tool(set: &TraceSet, name: &str, args: Value) -> Result<Value, String> {
    call(&catalogue(), set, name, args, &QueryCancel::new()).map(|a| a.structured).map_err(|e| format!("{e:?}"))
}

#[test]
fn steps_are_listed_and_slice_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("steps.db");
    write_trace(&db);
    let set = TraceSet::open(&[db]);

    let out = tool(&set, "get_steps", json!({})).unwrap();
    let series = out["steps"]["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "one series per rank: {out}");
    assert!(series.iter().all(|s| s["origin"] == "labeled" && s["count"] == 40), "{out}");
    let a = series.iter().find(|s| s["pid"] == A).unwrap();
    let slow = &a["slow"][0];
    assert_eq!((slow["first"].as_i64(), slow["last"].as_i64()), (Some(20), Some(24)), "{out}");
    assert_eq!(slow["median_ns"], 42 * MS);
    assert_eq!(slow["baseline_ns"], 10 * MS);
    let why = slow["why"].as_str().unwrap();
    assert!(why.contains("cudaStreamSync"), "the slow synchronizes explain the range: {why}");
    let b = series.iter().find(|s| s["pid"] == B).unwrap();
    assert_eq!((b["slow"][0]["first"].as_i64(), b["slow"][0]["last"].as_i64()), (Some(20), Some(24)));
    let summary = out["summary"].as_str().unwrap();
    assert!(summary.contains("steps 20-24 took a median 42.00 ms instead of 10.00 ms"), "{summary}");
    let listed = tool(&set, "get_steps", json!({"pid": A, "list": true, "limit": 10})).unwrap();
    assert_eq!(listed["steps"]["series"][0]["steps"].as_array().unwrap().len(), 10);
    assert_eq!(listed["truncated"], true);

    // `steps` as a window: rank A's steps 20-24 hold its 5 slow synchronizes
    let stats = tool(&set, "get_trace_stats", json!({"steps": "20-24", "pid": A})).unwrap();
    let sync = stats["stats"]["ops"].as_array().unwrap().iter().find(|o| o["op"] == "cudaStreamSync").unwrap().clone();
    assert_eq!(sync["count"], 5);
    // judged against the whole trace, they are slow; judged among themselves they would not be
    let chains = tool(&set, "get_causal_chains", json!({"steps": "20-24", "pid": A})).unwrap();
    assert_eq!(chains["slow_calls"], 5, "{chains}");
    let by_window = {
        let from = slow["start_ns"].as_i64().unwrap().to_string();
        let to = slow["end_ns"].as_i64().unwrap().to_string();
        tool(&set, "get_causal_chains", json!({"from": from, "to": to, "pid": A})).unwrap()
    };
    assert_eq!(by_window["slow_calls"], 0, "a plain window is judged by its own calls");
    // both ranks' step 22 together when no pid is given
    let both = tool(&set, "get_trace_stats", json!({"steps": "22"})).unwrap();
    let sync = both["stats"]["ops"].as_array().unwrap().iter().find(|o| o["op"] == "cudaStreamSync").unwrap().clone();
    assert_eq!(sync["count"], 2, "{both}");
    // two step ranges compared
    let cmp =
        tool(&set, "compare_traces", json!({"baseline": {"steps": "0-9"}, "candidate": {"steps": "20-24"}, "pid": A}))
            .unwrap();
    assert!(cmp.to_string().contains("cudaStreamSync"), "{cmp}");

    // bad step arguments are errors the model can act on
    let err = tool(&set, "get_trace_stats", json!({"steps": "90-99"})).unwrap_err();
    assert!(err.contains("no such step") && err.contains("0-39"), "{err}");
    let err = tool(&set, "get_trace_stats", json!({"steps": "20-24", "since": "1s"})).unwrap_err();
    assert!(err.contains("not both"), "{err}");
    let err = tool(&set, "get_steps", json!({"steps": "batch:3"})).unwrap_err();
    assert!(err.contains("step, epoch or task"), "{err}");
}
