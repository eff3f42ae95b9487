//! On every shared Ingero DB, every tool called with its default arguments answers in under about
//! 8,000 tokens (32 KB of JSON text), with the same JSON as text and structured content, and the
//! figures of get_trace_stats and list_traces match FACTS.json.

use std::path::{Path, PathBuf};

use causeway_backends::QueryCancel;
use causeway_server::tools::{call, catalogue};
use causeway_server::TraceSet;
use serde_json::{json, Value};

/// About 8,000 tokens.
const DEFAULT_ANSWER_BYTES: usize = 32_000;

fn shared_dbs() -> PathBuf {
    causeway_testdata::ingero_dbs()
}

fn facts(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("FACTS.json")).unwrap()).unwrap()
}

fn all_dbs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = facts(dir)["dbs"].as_object().unwrap().keys().map(|k| dir.join(k)).collect();
    v.sort();
    v
}

/// Equal JSON, floats to 1e-12 relative (serde_json's default float parser may differ by one ulp).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn default_answers_are_bounded_on_every_shared_db() {
    let dir = shared_dbs();
    let dbs = all_dbs(&dir);
    let set = TraceSet::open(&dbs);
    let tools = catalogue();
    let cancel = QueryCancel::new();
    let mut report = Vec::new();
    for e in set.entries() {
        for t in &tools {
            let name = t.tool.name.as_ref();
            let args = match name {
                "run_sql" => json!({"trace": e.index, "sql": "SELECT * FROM events ORDER BY timestamp"}),
                "list_traces" | "get_check" => json!({}),
                "compare_traces" => json!({"baseline": {"trace": e.index}}),
                _ => json!({"trace": e.index}),
            };
            let answer =
                call(&tools, &set, name, args, &cancel).unwrap_or_else(|err| panic!("{} {name}: {err:?}", e.name));
            report.push(format!("{} {name}: {} bytes", e.name, answer.text.len()));
            assert!(
                answer.text.len() <= DEFAULT_ANSWER_BYTES,
                "{} {name}: {} bytes by default",
                e.name,
                answer.text.len()
            );
            assert!(
                same_json(&serde_json::from_str::<Value>(&answer.text).unwrap(), &answer.structured),
                "{} {name}: text and structured content differ",
                e.name
            );
            assert!(answer.text.starts_with("{\"summary\":"), "{} {name}: summary first", e.name);
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn stats_and_listing_match_facts() {
    let dir = shared_dbs();
    let f = facts(&dir);
    let dbs = all_dbs(&dir);
    let set = TraceSet::open(&dbs);
    let tools = catalogue();
    let cancel = QueryCancel::new();
    let list = call(&tools, &set, "list_traces", json!({}), &cancel).unwrap().structured;
    for (i, path) in dbs.iter().enumerate() {
        let want = &f["dbs"][path.file_name().unwrap().to_str().unwrap()];
        let listed = &list["traces"][i];
        assert_eq!(listed["events"], want["events"]["count"]);
        assert_eq!(listed["first_ns"], want["events"]["first_timestamp_ns"]);
        assert_eq!(listed["sessions_total"].as_u64().unwrap() as usize, want["sessions"].as_array().unwrap().len());
        let s = call(&tools, &set, "get_trace_stats", json!({"trace": listed["name"]}), &cancel).unwrap().structured;
        let ops = s["stats"]["ops"].as_array().unwrap();
        assert_eq!(ops.len(), want["ops"].as_array().unwrap().len());
        for w in want["ops"].as_array().unwrap() {
            let got = ops.iter().find(|o| o["op"] == w["op"]).unwrap();
            for k in ["count", "p50_us", "p90_us", "p99_us", "max_us"] {
                assert_eq!(got[k].as_f64(), w[k].as_f64(), "{} {} {k}", listed["name"], w["op"]);
            }
        }
    }
}
