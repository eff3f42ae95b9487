//! The device's own timeline in the pictures, against the synthetic trace they draw: the report's
//! device section holds each device's busy share, every idle chain with its figures and its SQL,
//! and the longest gaps, as `explain` computes them; a chain's picture has a device lane with one
//! busy rect per merged busy span of the device in its window (and the 38 ms gap the preemption
//! above it caused). A trace without a device timeline gets neither.

// the synthetic device-timeline trace of the export tests, shared (one builder for both crates)
#[path = "../../export/tests/gpu_trace/mod.rs"]
mod gpu_trace;

use causeway_analysis::{explain, ExplainRequest};
use causeway_backends::{open_store, TraceStore};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::GpuOpKind;
use causeway_render::{chain_picture, html_report};
use gpu_trace::{training, MS, PID};

fn written(timeline: bool) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.db");
    training(timeline).write(&path);
    (dir, path)
}

/// HTML text as the report escapes it.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

/// The device's merged busy spans (every op of `pid` but synchronizations) that overlap `[from, to]`.
fn busy_spans(store: &dyn TraceStore, from: i64, to: i64) -> Vec<(i64, i64)> {
    let mut ops = Vec::new();
    store
        .scan_gpu_ops(&TimeWindow::ALL, &mut |g| {
            if g.pid == PID && g.kind != GpuOpKind::Sync {
                ops.push((g.start_ns, g.end_ns));
            }
        })
        .unwrap();
    ops.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in ops {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged.into_iter().filter(|s| s.1 > from && s.0 < to).collect()
}

#[test]
fn the_report_holds_the_device_section_with_the_figures_explain_computes() {
    let (_dir, path) = written(true);
    let store = open_store(&path).unwrap();
    let req = ExplainRequest::default();
    let ex = explain(store.as_ref(), &req).unwrap();
    let d = ex.device.as_ref().expect("a device view");
    assert!(!d.chains.is_empty() && !d.gaps.is_empty());
    let r = html_report(store.as_ref(), &req).unwrap();
    let h = &r.html;
    let section = h.find("<section class=\"device\"").expect("the device section");
    assert!(h.find("class=\"verdict\"").unwrap() < section, "after the summary");
    if let Some(first_chain) = h.find("<section class=\"chain\"") {
        assert!(section < first_chain, "before the chains");
    }
    for g in &d.devices {
        let row = format!(
            "<td>pid {} GPU {}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            g.pid,
            g.device,
            g.busy_share * 100.0,
            fmt_ns(g.last_ns - g.first_ns),
            fmt_ns(g.idle_ns),
            fmt_ns(g.idle_in_short_gaps_ns),
            g.ops
        );
        assert!(h.contains(&row), "no row {row}");
    }
    for c in &d.chains {
        let row = format!(
            "<tr class=\"idle-chain\" id=\"{id}\"><td>{id}</td><td>{}</td><td>{:.1}%</td><td>{}</td>",
            fmt_ns(c.idle_ns),
            c.share * 100.0,
            c.gaps,
            id = c.id
        );
        assert!(h.contains(&row), "no row {row}");
        assert!(h.contains(&format!("{} ns of GPU idle time (SQL)</summary><pre>{}</pre>", c.idle_ns, esc(&c.sql))));
    }
    let top = &d.chains[0];
    assert!(h.contains("the launching thread was preempted by backup-rsync (pid 9912)"), "the top cause is named");
    assert_eq!(
        top.idle_ns,
        d.gaps.iter().flat_map(|g| &g.parts).filter(|p| p.cause == top.cause).map(|p| p.ns).sum::<i64>()
    );
    for g in d.gaps.iter().take(5) {
        assert!(h.contains(&format!("+{}: {}", fmt_ns(g.start_ns - ex.first_ns), esc(&g.summary))), "{}", g.summary);
    }
    // the per-op table keeps one row per op
    let stats = causeway_analysis::compute_stats(store.as_ref(), &Default::default()).unwrap();
    assert_eq!(h.matches("<tr><td>").count(), stats.ops.len());
}

#[test]
fn a_chain_picture_has_a_device_lane_with_each_busy_span_of_its_window() {
    let (_dir, path) = written(true);
    let store = open_store(&path).unwrap();
    let ex = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    let mut pictured = 0;
    for chain in &ex.chains {
        let Some(p) = chain_picture(store.as_ref(), chain).unwrap() else { continue };
        pictured += 1;
        let spans = busy_spans(store.as_ref(), p.from_ns, p.to_ns);
        assert_eq!(p.device_busy, spans.len(), "{}: one busy rect per merged busy span", chain.id);
        assert_eq!(p.svg.matches("class=\"device-busy\"").count(), spans.len(), "{}", chain.id);
        assert_eq!(p.svg.matches("class=\"device-row\"").count(), 1);
        assert_eq!(p.svg.matches("class=\"device-idle").count(), p.device_idle);
        // the idle stretches are the window less the busy spans
        let busy: i64 = spans.iter().map(|s| s.1.min(p.to_ns) - s.0.max(p.from_ns)).sum();
        assert!(p.device_idle >= spans.len().saturating_sub(1));
        assert!(busy <= p.to_ns - p.from_ns);
    }
    assert!(pictured > 0);
    // the preemption's chain sits above the 38 ms gap it caused
    let chain = ex
        .chains
        .iter()
        .find(|c| c.culprit.as_ref().is_some_and(|k| k.comm == "backup-rsync") && c.stall_ns >= 38 * MS)
        .expect("the hog's chain");
    let p = chain_picture(store.as_ref(), chain).unwrap().unwrap();
    let gap = ex.device.as_ref().unwrap().gaps.iter().find(|g| g.idle_ns > 38 * MS).unwrap();
    assert!(p.from_ns < gap.start_ns && gap.end_ns < p.to_ns, "the picture holds the gap the chain is about");
    assert!(p.svg.contains("class=\"off-cpu preempted\""), "the preemption on the thread's row");
    assert!(
        p.svg.contains(&format!("GPU 0 idle {} here, in a gap over 1 ms", fmt_ns(gap.idle_ns))),
        "the gap it caused, under it"
    );
    assert_eq!(p.svg.matches("class=\"device-idle gap\"").count(), 1);
}

#[test]
fn without_a_device_timeline_the_report_and_pictures_have_none() {
    let (_dir, path) = written(false);
    let store = open_store(&path).unwrap();
    let req = ExplainRequest::default();
    let r = html_report(store.as_ref(), &req).unwrap();
    assert!(!r.html.contains("class=\"device\""));
    assert!(r.pictures > 0);
    assert!(!r.html.contains("device-row") && !r.html.contains("GPU busy"));
    let ex = explain(store.as_ref(), &req).unwrap();
    for chain in &ex.chains {
        if let Some(p) = chain_picture(store.as_ref(), chain).unwrap() {
            assert_eq!((p.device_busy, p.device_idle), (0, 0));
        }
    }
}
