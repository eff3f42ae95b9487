//! Plain-text rendering of an [`Explanation`]: an incident report a person reads in one screen (the
//! chain table, then the top chains' timelines and what to do), and the full text of one chain with
//! its evidence SQL.

use std::fmt::Write;

use causeway_model::time::{fmt_ns, fmt_since};

use causeway_analysis::{culprit_words, Chain, DeviceView, Explanation, IdleChain, StackShare};

/// Chains shown in detail in the one-screen report.
const DETAILED: usize = 3;

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The one-screen report.
pub fn render(e: &Explanation, db_arg: &str) -> String {
    let mut o = String::new();
    let span = e.last_ns - e.first_ns;
    let _ = writeln!(
        o,
        "causeway explain {db_arg}: {} GPU calls over {}, {} slow ({} in all)",
        e.gpu_calls,
        fmt_ns(span),
        e.slow_calls,
        fmt_ns(e.slow_time_ns)
    );
    let _ = writeln!(o, "\n{}\n", e.verdict);
    let _ = writeln!(o, "{}\n", e.cost.words());
    if let Some(d) = &e.device {
        render_device(&mut o, d, e.first_ns, db_arg);
    }
    if e.chains.is_empty() {
        let _ = writeln!(o, "no chains: {}", e.slow_call_rule);
    } else {
        let _ = writeln!(
            o,
            "{:<4} {:<6} {:>10} {:>6} {:>6} {:>11}  op · cause · culprit",
            "id", "sev", "stall", "share", "calls", "GPU cost"
        );
        for c in &e.chains {
            let _ = writeln!(
                o,
                "{:<4} {:<6} {:>10} {:>5.1}% {:>6} {:>11}  {}",
                c.id,
                c.severity.as_str(),
                fmt_ns(c.stall_ns),
                c.share * 100.0,
                c.calls,
                c.cost.as_ref().map_or_else(
                    || "-".to_string(),
                    |k| k.dollars.map_or_else(|| fmt_ns(k.gpu_ns), causeway_analysis::dollars)
                ),
                cut(&format!("{} · {} · {}", c.op, c.cause, culprit_words(&c.culprit)), 70)
            );
        }
        if e.truncated {
            let _ = writeln!(o, "… {} chains in all (--top N for more)", e.chains_total);
        }
    }
    render_slow_steps(&mut o, &e.steps, e.first_ns);
    render_serving_spikes(&mut o, &e.serving, e.first_ns);
    for c in e.chains.iter().take(DETAILED) {
        let _ = writeln!(o, "\n[{}] {}", c.id, c.headline());
        for s in c.timeline.iter().take(4) {
            let id = s.event_id.as_ref().map(|i| format!(" (event {i})")).unwrap_or_default();
            let _ = writeln!(o, "   {}  {:<6} {}{id}", fmt_since(s.ts_ns, e.first_ns), s.layer, cut(&s.what, 90));
        }
        if let Some(at) = c.stacks.first().and_then(stack_line) {
            let _ = writeln!(o, "   at: {}", cut(&at, 200));
        }
        if let Some(k) = &c.cost {
            let _ = writeln!(o, "   cost: {}, {:.1}% of the run's GPU time", k.words(), k.share * 100.0);
        }
        // the headline's caveats and bounds come first among the details: said whole
        for d in c.details.iter().take(2) {
            let _ = writeln!(o, "   note: {d}");
        }
        for r in c.recommendations.iter().take(2) {
            let _ = writeln!(o, "   do: {}", cut(r, 110));
        }
        let _ = writeln!(
            o,
            "   evidence: {} {} reproduced by SQL (causeway explain --db {db_arg} --chain {})",
            c.evidence.value, c.evidence.unit, c.id
        );
    }
    let _ = writeln!(o);
    for n in &e.notes {
        let _ = writeln!(o, "note: {}", cut(n, 220));
    }
    if !e.missing.is_empty() {
        let _ = writeln!(o, "this DB lacks: {}", cut(&e.missing.join("; "), 400));
    }
    o
}

/// Where a chain's top stack was called from, in one line: the user's Python line and its
/// callers (borrowed from the thread the calls ran for, marked so, when their own thread has no
/// Python frames), else the native frames outside the CUDA libraries.
fn stack_line(s: &StackShare) -> Option<String> {
    let site = causeway_analysis::call_site(s.borrowed.as_ref().map_or(&s.frames, |b| &b.frames), 3);
    let first = s.user_frame.clone().or_else(|| site.first().cloned())?;
    let callers: Vec<&String> = site.iter().skip_while(|f| **f != first).skip(1).collect();
    let callers: String = callers.iter().map(|f| format!(" ← {f}")).collect();
    let mark = s.borrowed.as_ref().map(|b| format!(" ({})", b.mark())).unwrap_or_default();
    Some(format!("{first}{mark}{callers} (behind {} of the worst calls)", s.calls))
}

/// One chain in full, with its evidence SQL.
pub fn render_chain(c: &Chain, origin: i64, db_arg: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "[{}] {} ({})", c.id, c.headline(), c.key);
    let _ = writeln!(o, "cause: {} — {}", c.cause, c.cause_text);
    let _ = writeln!(o, "culprit: {}", culprit_words(&c.culprit));
    let _ = writeln!(
        o,
        "calls: {}  stall: {} ({} ns)  share: {:.2}% of {}",
        c.calls,
        fmt_ns(c.stall_ns),
        c.stall_ns,
        c.share * 100.0,
        c.share_of
    );
    match &c.cost {
        Some(k) => {
            let _ = writeln!(o, "cost: {}, {:.2}% of the run's GPU time; from {}", k.words(), k.share * 100.0, k.how);
        }
        None => {
            let _ = writeln!(o, "cost: none counted (its figure is {}, no time the GPU waited)", c.evidence.unit);
        }
    }
    if let (Some(p50), Some(p99)) = (c.op_p50_ns, c.op_p99_ns) {
        let _ = writeln!(o, "{} p50 {}  p99 {} (exact nearest-rank)", c.op, fmt_ns(p50), fmt_ns(p99));
    }
    let _ = writeln!(o, "timeline:");
    for s in &c.timeline {
        let id = s.event_id.as_ref().map(|i| format!(" (event {i})")).unwrap_or_default();
        let _ = writeln!(o, "   {} [{}]  {:<6} {}{id}", fmt_since(s.ts_ns, origin), s.ts_ns, s.layer, s.what);
    }
    for d in &c.details {
        let _ = writeln!(o, "note: {d}");
    }
    for (i, s) in c.stacks.iter().enumerate() {
        let _ = writeln!(o, "stack {} (0x{:016x}), behind {} of the worst calls:", i + 1, s.stack_hash as u64, s.calls);
        for f in &s.frames {
            let lib = f.lib.as_ref().map(|l| format!("  [{l}]")).unwrap_or_default();
            let _ = writeln!(o, "    {}{lib}", f.text);
        }
        if s.frames_cut > 0 {
            let _ = writeln!(o, "    … {} more frames (causeway stacks)", s.frames_cut);
        }
        if let Some(b) = &s.borrowed {
            let _ = writeln!(o, "  {}:", b.words);
            for f in &b.frames {
                let _ = writeln!(o, "    {}", f.text);
            }
        }
        if !s.ambiguous_between.is_empty() {
            let tids: Vec<String> = s.ambiguous_between.iter().map(|t| t.to_string()).collect();
            let _ =
                writeln!(o, "  made for one of the Python threads {} (ambiguous: nothing borrowed)", tids.join(", "));
        }
    }
    for r in &c.recommendations {
        let _ = writeln!(o, "do: {r}");
    }
    let ids: Vec<String> = c.evidence.event_ids.iter().map(|i| i.to_string()).collect();
    let _ = writeln!(o, "evidence: events {}", ids.join(", "));
    let _ = writeln!(o, "value: {} {}; reproduce with:", c.evidence.value, c.evidence.unit);
    let _ = writeln!(o, "causeway query --db {db_arg} \"{}\"", c.evidence.sql.replace('"', "\\\""));
    o
}

/// The slow steps of a report, worst first (nothing when no step was slow).
pub fn render_slow_steps(o: &mut String, steps: &causeway_analysis::StepReport, first_ns: i64) {
    let slow = steps.slow_ranges();
    if slow.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nslow steps");
    for (series, r) in slow.iter().take(3) {
        let _ = writeln!(
            o,
            "   {}  pid {} ({}): {}",
            fmt_since(r.start_ns, first_ns),
            series.pid,
            series.origin,
            cut(&r.summary, 240)
        );
        if let Some(k) = &r.cost {
            let _ = writeln!(o, "      cost: {}", k.words());
        }
    }
    if slow.len() > 3 {
        let _ = writeln!(o, "   … {} slow ranges in all (causeway steps)", slow.len());
    }
}

/// The serving engines' latency spikes, worst first (their baselines when none spiked; nothing
/// without a serving engine).
pub fn render_serving_spikes(o: &mut String, serving: &causeway_analysis::ServingReport, first_ns: i64) {
    if serving.engines.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nserving");
    for en in &serving.engines {
        if en.spikes.is_empty() {
            let _ = writeln!(o, "   {}", cut(&en.summary, 240));
        }
        for s in en.spikes.iter().take(3) {
            let _ = writeln!(
                o,
                "   {}  {} (pid {}): {}",
                fmt_since(s.from_ns, first_ns),
                en.title,
                en.pid,
                cut(&s.summary, 400)
            );
            if let Some(k) = &s.cost {
                let _ = writeln!(o, "      cost: {}", k.words());
            }
        }
        if en.spikes.len() > 3 {
            let _ = writeln!(o, "   … {} spikes in all (causeway serving)", en.spikes.len());
        }
    }
}

/// The device view: each device's busy share, the idle chains ranked by GPU time lost, the longest
/// gaps.
pub fn render_device(o: &mut String, d: &DeviceView, first_ns: i64, db_arg: &str) {
    for g in &d.devices {
        let name = if g.name.is_empty() { String::new() } else { format!(" ({})", g.name) };
        let _ = writeln!(
            o,
            "device view: pid {} GPU {}{name}: busy {:.1}% of {}, idle {} ({} in gaps under {})",
            g.pid,
            g.device,
            g.busy_share * 100.0,
            fmt_ns(g.last_ns - g.first_ns),
            fmt_ns(g.idle_ns),
            fmt_ns(g.idle_in_short_gaps_ns),
            fmt_ns(d.gap_threshold_ns)
        );
    }
    if d.chains.is_empty() {
        let _ = writeln!(o, "no idle gap over {}", fmt_ns(d.gap_threshold_ns));
    } else {
        let _ = writeln!(o, "{:<4} {:>10} {:>6} {:>5}  GPU idle by cause · culprit", "id", "idle", "share", "gaps");
        for c in d.chains.iter().take(8) {
            let _ = writeln!(
                o,
                "{:<4} {:>10} {:>5.1}% {:>5}  {}",
                c.id,
                fmt_ns(c.idle_ns),
                c.share * 100.0,
                c.gaps,
                cut(&causeway_analysis::idle_part_words(c.cause, c.culprit.as_ref()), 80)
            );
        }
    }
    for g in d.gaps.iter().take(3) {
        let _ = writeln!(o, "   {}  {}", fmt_since(g.start_ns, first_ns), cut(&g.summary, 150));
    }
    if d.host_time_hidden_ns > 0 {
        let _ = writeln!(
            o,
            "   {} off-CPU time of the launching threads fell while the GPU stayed busy: it cost the GPU nothing",
            fmt_ns(d.host_time_hidden_ns)
        );
    }
    for n in d.notes.iter().take(4) {
        let _ = writeln!(o, "   device note: {}", cut(n, 200));
    }
    if let Some(c) = d.chains.first() {
        let _ = writeln!(
            o,
            "   evidence: causeway explain --db {db_arg} --chain {} prints the SQL behind each figure",
            c.id
        );
    }
    let _ = writeln!(o);
}

/// One idle chain in full, with its SQL.
pub fn render_idle_chain(c: &IdleChain, db_arg: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "[{}] {}", c.id, c.summary);
    let _ = writeln!(o, "   cause: {} ({})", c.cause.as_str(), c.cause.describe());
    let _ = writeln!(o, "   share of the explained GPU idle time: {:.1}%", c.share * 100.0);
    let _ = writeln!(o, "   evidence ({} ns): causeway query --db {db_arg} \"<SQL below>\"", c.idle_ns);
    let _ = writeln!(o, "{}", c.sql);
    o
}
