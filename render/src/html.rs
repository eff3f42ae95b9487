//! The incident report a person opens: one self-contained HTML file (inline CSS and SVG, no script,
//! nothing fetched) with the verdict, the device's own view when the trace holds it
//! ([`crate::device_section`]), the ranked chains (each with its summary, steps,
//! recommendations, the SQL that proves its figure and its timeline picture), the per-op
//! percentile table and the latency histogram of each op a chain is about.

use std::fmt::Write as _;

use causeway_analysis::{compute_stats, explain, Chain, ExplainRequest, Explanation, StatsRequest};
use causeway_model::codes::OpCode;
use causeway_model::time::{fmt_ns, fmt_utc};
use causeway_store::{EventFilter, TraceStore};

use crate::chain_picture::chain_picture;
use crate::device_section::device_section;
use crate::histogram::latency_histogram;
use crate::RenderError;

/// Histograms drawn at most (one per op a chain is about, in chain order).
const MAX_HISTOGRAMS: usize = 4;

/// A rendered report and what it holds.
#[derive(Debug, Clone)]
pub struct HtmlReport {
    pub html: String,
    pub chains: usize,
    /// Chains drawn as a timeline.
    pub pictures: usize,
    pub histograms: usize,
    /// Whether it holds the device section (the trace has the device's own timeline).
    pub device: bool,
}

const STYLE: &str = r#"
body { font-family: "DejaVu Sans", Verdana, sans-serif; margin: 24px; color: #111827; max-width: 1000px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #e5e7eb; padding-bottom: 4px; }
.meta { color: #6b7280; font-size: 12px; }
.verdict { font-size: 15px; background: #f3f4f6; padding: 10px 12px; border-radius: 6px; }
.sev { display: inline-block; padding: 1px 6px; border-radius: 4px; color: #fff; font-size: 12px; font-weight: bold; }
.sev.HIGH { background: #dc2626; } .sev.MEDIUM { background: #d97706; } .sev.LOW { background: #6b7280; }
.steps li, .do li { font-size: 13px; margin: 2px 0; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: 8px; font-size: 11px; white-space: pre-wrap; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #e5e7eb; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.picture { margin: 10px 0; overflow-x: auto; }
h3 { font-size: 15px; margin-top: 18px; }
.idle-chains th:last-child, .idle-chains td:last-child { text-align: left; }
"#;

/// Runs explain and the statistics over `req`'s scope and renders the report.
pub fn html_report(store: &dyn TraceStore, req: &ExplainRequest) -> Result<HtmlReport, RenderError> {
    html_report_priced(store, req, &causeway_analysis::Rates::builtin())
}

/// [`html_report`] with GPU time priced at `rates` (`report --gpu-rate`, the config file).
pub fn html_report_priced(
    store: &dyn TraceStore,
    req: &ExplainRequest,
    rates: &causeway_analysis::Rates,
) -> Result<HtmlReport, RenderError> {
    let mut ex = explain(store, req)?;
    causeway_analysis::price(&mut ex, rates);
    let stats = compute_stats(store, &StatsRequest { window: req.window, pid: req.pid, ..Default::default() })?;
    let mut h = String::new();
    let mut pictures = 0;
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Causeway report: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&ex.db)
    );
    let _ = write!(
        h,
        "<h1>Why did the GPU stall?</h1>\n<p class=\"meta\">{} · {} to {} UTC ({}) · {} GPU calls, {} slow</p>\n<p class=\"verdict\">{}</p>\n",
        esc(&ex.db),
        fmt_utc(ex.first_ns),
        fmt_utc(ex.last_ns),
        fmt_ns(ex.last_ns - ex.first_ns),
        ex.gpu_calls,
        ex.slow_calls,
        esc(&ex.verdict)
    );
    let _ = writeln!(h, "<p class=\"meta cost\">{}</p>", esc(&ex.cost.words()));
    if let Some(d) = &ex.device {
        device_section(&mut h, d, ex.first_ns);
    }
    steps_section(&mut h, &ex.steps);
    serving_section(&mut h, &ex.serving);
    if ex.chains.is_empty() {
        h.push_str("<p>No causal chain: no slow call or gap had a cause this trace records.</p>\n");
    }
    for chain in &ex.chains {
        let picture = chain_picture(store, chain)?;
        chain_section(&mut h, chain, picture.as_ref().map(|p| p.svg.as_str()));
        pictures += usize::from(picture.is_some());
    }
    ops_tables(&mut h, &stats.ops, &ex);
    let histograms = histograms(store, req, &ex)?;
    if !histograms.is_empty() {
        h.push_str("<h2>Latency histograms</h2>\n");
        for svg in &histograms {
            let _ = writeln!(h, "<div class=\"picture\">{svg}</div>");
        }
    }
    if !ex.missing.is_empty() || !ex.notes.is_empty() {
        h.push_str("<h2>What this trace does not say</h2>\n<ul class=\"notes\">");
        for n in ex.missing.iter().chain(&ex.notes) {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<p class=\"meta\">Every figure above is computed from the trace; each chain's SQL reproduces its headline figure.</p>\n</body></html>\n");
    Ok(HtmlReport {
        html: h,
        chains: ex.chains.len(),
        pictures,
        histograms: histograms.len(),
        device: ex.device.is_some(),
    })
}

/// The workload's step series and their slow ranges, each with what explains it.
fn steps_section(h: &mut String, steps: &causeway_analysis::StepReport) {
    if steps.series.is_empty() {
        return;
    }
    h.push_str("<h2>Steps</h2>\n<ul class=\"notes\">");
    for s in &steps.series {
        let _ = write!(
            h,
            "<li>pid {}: {} {}s ({}), median {}, p90 {}, longest {}",
            s.pid,
            s.count,
            esc(&s.kind),
            esc(&s.origin),
            fmt_ns(s.p50_ns),
            fmt_ns(s.p90_ns),
            fmt_ns(s.max_ns)
        );
        if !s.slow.is_empty() {
            h.push_str("<ul>");
            for r in &s.slow {
                let _ = write!(h, "<li>{}</li>", esc(&r.summary));
            }
            h.push_str("</ul>");
        }
        h.push_str("</li>");
    }
    h.push_str("</ul>\n");
}

/// The serving engines: each one's latency baselines and its spikes, each with what explains it.
fn serving_section(h: &mut String, serving: &causeway_analysis::ServingReport) {
    if serving.engines.is_empty() {
        return;
    }
    h.push_str("<h2>Serving</h2>\n<ul class=\"notes\">");
    for e in &serving.engines {
        let _ = write!(h, "<li>{}", esc(&e.summary));
        if !e.spikes.is_empty() {
            h.push_str("<ul>");
            for s in &e.spikes {
                let _ = write!(h, "<li>{}</li>", esc(&s.summary));
            }
            h.push_str("</ul>");
        }
        h.push_str("</li>");
    }
    if let Some(st) = &serving.engine_steps {
        let _ = write!(h, "<li>{}</li>", esc(&st.summary));
    }
    h.push_str("</ul>\n");
}

fn chain_section(h: &mut String, chain: &Chain, svg: Option<&str>) {
    let sev = chain.severity.as_str();
    // the headline ([`Chain::headline`]: the severity, then the summary) and the cause in full
    let _ = write!(
        h,
        "<section class=\"chain\" id=\"{id}\"><h2>{id} <span class=\"sev {sev}\">{sev}</span> {}</h2>\n<p class=\"cause\">{}: {}</p>\n",
        esc(&chain.summary),
        esc(&chain.cause),
        esc(&chain.cause_text),
        id = esc(&chain.id),
    );
    if let Some(k) = &chain.cost {
        let _ = writeln!(
            h,
            "<p class=\"cost\">cost: {}, {:.1}% of the run's GPU time</p>",
            esc(&k.words()),
            k.share * 100.0
        );
    }
    if !chain.details.is_empty() {
        // the headline's caveats and bounds, whole
        h.push_str("<ul class=\"notes\">");
        for d in &chain.details {
            let _ = write!(h, "<li>note: {}</li>", esc(d));
        }
        h.push_str("</ul>\n");
    }
    if let Some(svg) = svg {
        let _ = writeln!(h, "<div class=\"picture\">{svg}</div>");
    }
    if !chain.timeline.is_empty() {
        h.push_str("<ul class=\"steps\">");
        for s in &chain.timeline {
            let _ = write!(h, "<li><b>{}</b> {}</li>", esc(&s.layer), esc(&s.what));
        }
        h.push_str("</ul>\n");
    }
    if !chain.recommendations.is_empty() {
        h.push_str("<ul class=\"do\">");
        for r in &chain.recommendations {
            let _ = write!(h, "<li>do: {}</li>", esc(r));
        }
        h.push_str("</ul>\n");
    }
    let _ = writeln!(
        h,
        "<details><summary>Evidence: {} {} (SQL)</summary><pre>{}</pre></details></section>",
        chain.evidence.value,
        esc(&chain.evidence.unit),
        esc(&chain.evidence.sql)
    );
}

/// The GPU calls' latency table first (what the reader came for), then the host events apart:
/// how many of each, with durations only for the events that have one (a `process_exec` has none).
fn ops_tables(h: &mut String, ops: &[causeway_analysis::OpStats], ex: &Explanation) {
    let us = |v: f64| fmt_ns((v * 1000.0).round() as i64);
    let (gpu, host): (Vec<_>, Vec<_>) =
        ops.iter().partition(|o| causeway_model::codes::is_gpu_call(o.source, o.op_code));
    h.push_str("<h2>GPU calls: latency (exact nearest-rank)</h2>\n<table class=\"ops\"><tr><th>op</th><th>calls</th><th>avg</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th><th>slow at</th><th>slow calls</th></tr>\n");
    for o in &gpu {
        let fig = ex.ops.iter().find(|f| f.source == o.source && f.op_code == o.op_code);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&o.op),
            o.count,
            us(o.avg_us),
            us(o.p50_us),
            us(o.p90_us),
            us(o.p95_us),
            us(o.p99_us),
            us(o.max_us),
            fig.map(|f| fmt_ns(f.slow_threshold_ns)).unwrap_or_default(),
            fig.map(|f| f.slow_calls.to_string()).unwrap_or_default(),
        );
    }
    h.push_str("</table>\n");
    if host.is_empty() {
        return;
    }
    h.push_str("<h3>Host events</h3>\n<table class=\"host-events\"><tr><th>event</th><th>count</th><th>p50</th><th>p99</th><th>max</th></tr>\n");
    for o in &host {
        let timed = o.max_us > 0.0;
        let fig = |v: f64| if timed { us(v) } else { "-".into() };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&o.op),
            o.count,
            fig(o.p50_us),
            fig(o.p99_us),
            fig(o.max_us),
        );
    }
    h.push_str("</table>\n");
}

/// The histograms of the ops the chains are about (the op with the most slow time when no chain).
fn histograms(store: &dyn TraceStore, req: &ExplainRequest, ex: &Explanation) -> Result<Vec<String>, RenderError> {
    let mut ops: Vec<&causeway_analysis::OpFigures> = Vec::new();
    for c in &ex.chains {
        if let Some(f) = ex.ops.iter().find(|f| f.op == c.op) {
            if !ops.iter().any(|o| o.op == f.op) {
                ops.push(f);
            }
        }
    }
    if ops.is_empty() {
        ops.extend(ex.ops.iter().max_by_key(|f| f.slow_ns));
    }
    let mut out = Vec::new();
    for f in ops.into_iter().take(MAX_HISTOGRAMS) {
        let filter = EventFilter {
            window: req.window,
            pid: req.pid,
            ops: Some(vec![OpCode::new(f.source, f.op_code)]),
            ..Default::default()
        };
        let mut durations = Vec::new();
        store.scan_durations(&filter, &mut |r| durations.push(r.dur_ns))?;
        if let Some(hist) = latency_histogram(&f.op, durations, Some(f.slow_threshold_ns)) {
            out.push(hist.svg);
        }
    }
    Ok(out)
}

/// Text for HTML element content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}
