//! Every chain's headline is read in five seconds: at most `HEADLINE_MAX` (160) characters (what,
//! who, how much, the share; the caveats are in the chain's details), and it is the same headline
//! wherever a person or a model meets the chain: `explain` (JSON and text), the HTML report, the
//! Perfetto and Chrome exports, and MCP's `get_causal_chains` over a real stdio exchange. Checked
//! on every bundled investigation (the planted faults' own tests hold the limit too:
//! `analysis/tests/explain_planted.rs`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Stdio;

use causeway_analysis::HEADLINE_MAX;
use common::{causeway, ok, repo};
use serde_json::{json, Value};

fn investigations() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("investigations"))
        .unwrap()
        .map(|e| e.unwrap().path().join("trace.db"))
        .filter(|p| p.exists())
        .collect();
    v.sort();
    assert!(v.len() >= 6, "the bundled investigations: {v:?}");
    v
}

fn run(args: &[&str]) -> String {
    ok(causeway().args(args).output().unwrap(), &format!("causeway {args:?}"))
}

/// (id, headline) of every chain of `explain --json`.
fn explained(db: &str, top: usize) -> Vec<(String, String)> {
    let e: Value = serde_json::from_str(&run(&["explain", "--db", db, "--json", "--top", &top.to_string()])).unwrap();
    e["chains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let h = format!("{} {}", c["severity"].as_str().unwrap(), c["summary"].as_str().unwrap());
            (c["id"].as_str().unwrap().to_string(), h)
        })
        .collect()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

/// One MCP exchange over stdio with `causeway mcp --db DB`: the handshake, then `tools/call` of
/// `get_causal_chains` with `args`; its result.
fn mcp_chains(db: &str, args: Value) -> Value {
    let mut child = causeway()
        .args(["mcp", "--db", db])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").and_then(|_| stdin.flush()).unwrap();
    let mut answer = |id: i64| loop {
        let line = lines.next().expect("the server answers").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            break v;
        }
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "headlines", "version": "0"}}}));
    assert!(answer(1)["result"]["serverInfo"]["name"] == "causeway");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "get_causal_chains", "arguments": args}}));
    let r = answer(2);
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r["result"]["isError"], false, "{r}");
    r["result"].clone()
}

#[test]
fn every_headline_is_short_and_the_same_in_explain_report_exports_and_mcp() {
    let tmp = tempfile::tempdir().unwrap();
    let mut longest = (0, String::new());
    for path in investigations() {
        let db = path.to_str().unwrap();
        let name = path.parent().unwrap().file_name().unwrap().to_string_lossy().to_string();
        let all = explained(db, 1000);
        assert!(!all.is_empty(), "{name}: no chain");
        for (id, h) in &all {
            let n = h.chars().count();
            assert!(n <= HEADLINE_MAX, "{name} {id}: a headline of {n} chars (at most {HEADLINE_MAX}): {h}");
            if n > longest.0 {
                longest = (n, h.clone());
            }
        }

        // explain's text: the verdict and each chain shown in detail, `[c1] HIGH ...`
        let text = run(&["explain", "--db", db]);
        assert!(
            text.contains(&format!("[c1] {}\n", all[0].1)),
            "{name}: explain's text lacks the headline {:?}\n{text}",
            all[0].1
        );
        for (id, h) in all.iter().take(3) {
            assert!(text.contains(&format!("\n[{id}] {h}\n")), "{name}: explain's text lacks [{id}] {h}");
        }

        // the HTML report: each chain's section opens with its headline (the severity as a badge)
        let html_path = tmp.path().join(format!("{name}.html"));
        run(&["report", "--db", db, "--html", html_path.to_str().unwrap(), "--top", "10"]);
        let html = std::fs::read_to_string(&html_path).unwrap();
        for (id, h) in all.iter().take(10) {
            let (sev, summary) = h.split_once(' ').unwrap();
            let want = format!(">{id} <span class=\"sev {sev}\">{sev}</span> {}</h2>", esc(summary));
            assert!(html.contains(&want), "{name}: the report lacks {want}");
        }

        // the exports: each chain's slice carries the headline
        let chrome_path = tmp.path().join(format!("{name}.json"));
        run(&["export", "--db", db, "--format", "chrome", "--out", chrome_path.to_str().unwrap()]);
        let chrome: Value = serde_json::from_str(&std::fs::read_to_string(&chrome_path).unwrap()).unwrap();
        let events = chrome.get("traceEvents").unwrap_or(&chrome).as_array().unwrap();
        let exported: Vec<&str> = events.iter().filter_map(|e| e["args"]["headline"].as_str()).collect();
        assert!(!exported.is_empty(), "{name}: no chain in the Chrome export");
        for h in &exported {
            assert!(all.iter().any(|(_, x)| x == h), "{name}: the Chrome export's headline is explain's: {h}");
        }
        let perfetto_path = tmp.path().join(format!("{name}.perfetto-trace"));
        run(&["export", "--db", db, "--format", "perfetto", "--out", perfetto_path.to_str().unwrap()]);
        let perfetto = std::fs::read(&perfetto_path).unwrap();
        for h in &exported {
            assert!(contains(&perfetto, h.as_bytes()), "{name}: the Perfetto trace lacks the headline {h}");
        }

        // MCP: every chain of get_causal_chains is explain's severity and summary, and the answer
        // names the worst by its headline
        let r = mcp_chains(db, json!({"top_n": all.len().min(50)}));
        let out = &r["structuredContent"];
        for c in out["chains"].as_array().unwrap() {
            let id = c["id"].as_str().unwrap();
            let h = format!("{} {}", c["severity"].as_str().unwrap(), c["summary"].as_str().unwrap());
            let want = &all.iter().find(|(i, _)| i == id).unwrap().1;
            assert_eq!(&h, want, "{name} {id}: MCP's headline is explain's");
        }
        assert!(
            out["summary"].as_str().unwrap().ends_with(&format!("[c1] {}", all[0].1)),
            "{name}: {}",
            out["summary"]
        );
        let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text["summary"], out["summary"], "{name}: the text content says the same");
    }
    println!("longest headline: {} chars: {}", longest.0, longest.1);
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
