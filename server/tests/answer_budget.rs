//! Answers sized for a model with a small context (issue 47): on every bundled investigation's
//! trace and every carried Ingero DB, each tool called with its default arguments answers within
//! [`ANSWER_CHARS`] characters of text and as many of structured JSON, leads with its summary, and
//! says what it left out (`omitted`) whenever it left something out; `tools/list` stays within
//! [`TOOLS_LIST_CHARS`].

use std::path::PathBuf;

use causeway_backends::QueryCancel;
use causeway_server::tools::{call, catalogue};
use causeway_server::TraceSet;
use serde_json::{json, Value};

/// A default answer's budget, text and structured content alike.
const ANSWER_CHARS: usize = 6_000;
/// `tools/list` of the read-only catalogue, as JSON text: 114,008 characters before issue 47
/// (83,750 measured when it was filed), 41,479 after; 42,766 with `get_footprint` (1,275 of them,
/// its schemas cut to the bone: the 42,000 left it 509).
const TOOLS_LIST_CHARS: usize = 43_000;

fn traces() -> Vec<PathBuf> {
    let mut v = causeway_testdata::investigation_traces();
    let dir = causeway_testdata::ingero_dbs();
    let mut ingero: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "db"))
        .collect();
    ingero.sort();
    v.extend(ingero);
    v
}

/// The arguments a model sends when it gives none of its own (run_sql needs its statement).
fn default_args(tool: &str, trace: usize) -> Value {
    match tool {
        "run_sql" => json!({"trace": trace, "sql": "SELECT * FROM events ORDER BY timestamp"}),
        "list_traces" | "get_check" => json!({}),
        "compare_traces" => json!({"baseline": {"trace": trace}}),
        _ => json!({"trace": trace}),
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

#[test]
fn every_default_answer_fits_the_budget_on_every_bundled_trace() {
    let paths = traces();
    let set = TraceSet::open(&paths);
    let tools = catalogue();
    let cancel = QueryCancel::new();
    let mut report = Vec::new();
    let mut over = Vec::new();
    for e in set.entries() {
        for t in &tools {
            let name = t.tool.name.as_ref();
            let answer = call(&tools, &set, name, default_args(name, e.index), &cancel)
                .unwrap_or_else(|err| panic!("{} {name}: {err:?}", e.name));
            let (text, structured) = (chars(&answer.text), chars(&answer.structured.to_string()));
            report.push(format!("{:>2} {:<40} {name:<16} text {text:>6} structured {structured:>6}", e.index, e.name));
            if text > ANSWER_CHARS || structured > ANSWER_CHARS {
                over.push(format!("{} {name}: {text} / {structured}", e.name));
            }
            assert!(answer.text.starts_with("{\"summary\":"), "{} {name}: summary first", e.name);
            if answer.structured.get("truncated") == Some(&Value::Bool(true)) {
                let omitted = answer.structured.get("omitted").and_then(Value::as_array);
                assert!(
                    omitted.is_some_and(|o| !o.is_empty()),
                    "{} {name}: truncated, but no `omitted` says what was left out",
                    e.name
                );
            }
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(over.is_empty(), "over {ANSWER_CHARS} characters by default: {over:#?}");
}

#[test]
fn tools_list_fits_its_budget() {
    let tools: Vec<_> = catalogue().into_iter().map(|t| t.tool).collect();
    let text = serde_json::to_string(&json!({ "tools": tools })).unwrap();
    let mut sizes: Vec<(usize, String)> =
        tools.iter().map(|t| (serde_json::to_string(t).unwrap().len(), t.name.to_string())).collect();
    sizes.sort();
    eprintln!("tools/list: {} characters; per tool: {sizes:?}", chars(&text));
    assert!(chars(&text) <= TOOLS_LIST_CHARS, "tools/list is {} characters, over {TOOLS_LIST_CHARS}", chars(&text));
}
