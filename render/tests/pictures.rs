//! The pictures against the traces they draw: every bundled investigation's report holds one
//! section per chain, a timeline per chain that names an event, the per-op table of `stats`, and
//! histograms whose bins hold every call; the CPU-contention chain's timeline shows exactly the
//! preemptions SQL finds in its window, each with the task that took the CPU.

use std::path::PathBuf;

use causeway_analysis::{explain, ExplainRequest};
use causeway_backends::{open_store, QueryLimits, TraceStore};
use causeway_render::{chain_picture, html_report};

fn investigation(name: &str) -> PathBuf {
    causeway_testdata::repo_root().join("investigations").join(name).join("trace.db")
}

fn sql_rows(store: &dyn TraceStore, sql: &str) -> Vec<Vec<serde_json::Value>> {
    store.query(sql, &QueryLimits::default()).unwrap().rows
}

#[test]
fn the_contention_chain_shows_each_preemption_and_who_took_the_cpu() {
    let store = open_store(&investigation("cpu-contention")).unwrap();
    let ex = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    let chain = ex.chains.iter().find(|c| c.cause == "preempted").expect("a preemption chain");
    let culprit = chain.culprit.as_ref().expect("a culprit");
    let p = chain_picture(store.as_ref(), chain).unwrap().expect("a picture");
    // the preemptions of the chain's process by its culprit inside the window, by SQL: the
    // chain's own evidence (another task that took a CPU is another chain's)
    let rows = sql_rows(
        store.as_ref(),
        &format!(
            "SELECT id, next_comm FROM events WHERE source = 3 AND op = 1 AND prev_state = 0 AND cpu >= 0 \
             AND next_tid IS NOT NULL AND next_tid != 0 AND next_tid != tid AND pid = {} \
             AND next_pid = {} AND next_tid = {} AND timestamp - duration <= {} AND timestamp >= {}",
            chain.pid, culprit.pid, culprit.tid, p.to_ns, p.from_ns
        ),
    );
    assert!(!rows.is_empty(), "the worst call was preempted");
    assert_eq!(p.culprits, rows.len(), "one culprit bar per preemption by the culprit in the window");
    assert_eq!(p.svg.matches("class=\"culprit\"").count(), rows.len());
    for r in &rows {
        let id = r[0].as_i64().unwrap();
        assert!(p.svg.contains(&format!("class=\"culprit\" data-event-id=\"{id}\"")), "no culprit bar for event {id}");
        assert!(
            p.svg.contains(&format!("class=\"off-cpu preempted\" data-event-id=\"{id}\"")),
            "no off-CPU bar for {id}"
        );
    }
    assert!(p.svg.contains(&culprit.comm), "the culprit {} is named", culprit.comm);
    let worst = chain.evidence.event_ids[0].to_string();
    assert!(p.svg.contains(&format!("evidence\" data-event-id=\"{worst}\"")), "the worst call is marked as evidence");
    assert!(p.svg.starts_with("<svg") && p.svg.trim_end().ends_with("</svg>"));
}

/// A chain with no host cause shows its own evidence: its calls and its thread's time, never the
/// task another chain blames (the hog drawn under "no host cause" read as a contradiction).
#[test]
fn a_chain_without_a_culprit_draws_no_one_taking_the_cpu() {
    let store = open_store(&investigation("cpu-contention")).unwrap();
    let ex = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    let hog = ex.chains.iter().find(|c| c.cause == "preempted").and_then(|c| c.culprit.clone()).expect("the hog");
    let none = ex.chains.iter().find(|c| c.cause == "on_cpu_or_gpu").expect("a no-host-cause chain");
    let p = chain_picture(store.as_ref(), none).unwrap().expect("a picture");
    assert_eq!(p.culprits, 0, "no culprit bar in the picture of {}", none.id);
    assert!(!p.svg.contains("class=\"culprit\""));
    assert!(
        !p.svg.contains(&format!("{} ({})", hog.comm, hog.pid)),
        "the hog is not drawn as a culprit of {}",
        none.id
    );
    assert!(p.svg.contains(&causeway_render_headline(none)), "the picture is titled by its own headline");
}

fn causeway_render_headline(c: &causeway_analysis::Chain) -> String {
    // the SVG's text escapes what XML needs; a headline of the bundled traces has none of it
    c.headline().chars().take(60).collect()
}

#[test]
fn every_investigation_gives_a_report_with_its_chains_pictures_and_tables() {
    for path in causeway_testdata::investigation_traces() {
        let store = open_store(&path).unwrap();
        let req = ExplainRequest::default();
        let ex = explain(store.as_ref(), &req).unwrap();
        let r = html_report(store.as_ref(), &req).unwrap();
        let what = path.display();
        assert_eq!(r.chains, ex.chains.len(), "{what}");
        assert_eq!(r.html.matches("<section class=\"chain\"").count(), ex.chains.len(), "{what}");
        assert_eq!(r.html.matches("class=\"chain-timeline\"").count(), r.pictures, "{what}");
        for c in &ex.chains {
            assert!(r.html.contains(&format!("id=\"{}\"", c.id)), "{what}: {}", c.id);
        }
        let stats = causeway_analysis::compute_stats(store.as_ref(), &Default::default()).unwrap();
        assert_eq!(r.html.matches("<tr><td>").count(), stats.ops.len(), "{what}: one table row per op");
        // the GPU calls' table first; the host events (counts) apart, after it
        let gpu = r.html.find("<table class=\"ops\">").expect("the GPU calls' table");
        let gpu_table = &r.html[gpu..gpu + r.html[gpu..].find("</table>").unwrap()];
        for o in &stats.ops {
            let row = format!("<tr><td>{}</td>", o.op);
            let is_gpu = causeway_model::codes::is_gpu_call(o.source, o.op_code);
            assert_eq!(gpu_table.contains(&row), is_gpu, "{what}: {} in the GPU calls' table: {is_gpu}", o.op);
        }
        if let Some(host) = r.html.find("<table class=\"host-events\">") {
            assert!(host > gpu, "{what}: the host events come after the GPU calls");
        }
        assert_eq!(r.html.matches("class=\"latency-histogram\"").count(), r.histograms, "{what}");
        assert!(r.histograms >= 1 || stats.ops.is_empty(), "{what}: no histogram");
        assert!(!r.html.contains("<script"), "{what}: the report runs no script");
        assert!(
            !r.html.contains("http://")
                || r.html.matches("http://").count() == r.html.matches("http://www.w3.org/2000/svg").count(),
            "{what}: fetches nothing"
        );
    }
}

#[test]
fn a_histogram_holds_every_call_of_its_op() {
    let store = open_store(&investigation("sync-storm")).unwrap();
    let ex = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    let op = ex.ops.iter().max_by_key(|o| o.calls).unwrap();
    let mut durations = Vec::new();
    let filter = causeway_store::EventFilter {
        ops: Some(vec![causeway_model::codes::OpCode::new(op.source, op.op_code)]),
        ..Default::default()
    };
    store.scan_durations(&filter, &mut |r| durations.push(r.dur_ns)).unwrap();
    let n = sql_rows(
        store.as_ref(),
        &format!("SELECT count(*) FROM events WHERE source = {} AND op = {}", op.source, op.op_code),
    )[0][0]
        .as_u64()
        .unwrap();
    let h = causeway_render::latency_histogram(&op.op, durations, Some(op.slow_threshold_ns)).unwrap();
    assert_eq!(h.bins.iter().sum::<u64>(), n);
    assert_eq!(h.p50_ns, op.p50_ns, "the same nearest-rank p50 as explain");
    assert_eq!(h.p99_ns, op.p99_ns, "the same nearest-rank p99 as explain");
}
