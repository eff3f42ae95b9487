//! What each tool does: resolve the trace and the arguments, call the library function that the
//! CLI calls too (`causeway_analysis`, `causeway_backends`, `causeway_probes`), and bound the answer
//! (default limits, `truncated`, a `hint` to narrow). No analysis happens here.

use causeway_analysis::{compute_stats, judged_by, resolve_window, step_window, StatsRequest};
use causeway_analysis::{timeline, TimelineRequest, DEFAULT_AROUND_NS};
use causeway_analysis::{top_stacks, StacksRequest};
use causeway_backends::QueryCancel;
use causeway_backends::{EventId, QueryLimits, TraceStore};
use causeway_model::codes::{self, OpCode};
use causeway_model::time::{fmt_ns, parse_duration_ns, TimeWindow};

use crate::args::*;
pub use crate::chains::get_causal_chains;
use crate::compare::{self, CompareOutput};
use crate::outputs::*;
use crate::sanitize::{sanitize_json, MAX_CELL_CHARS, UNTRUSTED_NOTE};
use crate::traces::{TraceEntry, TraceSet};

/// Sessions listed per trace.
const SESSIONS_SHOWN: usize = 2;
/// Traces listed by a default `list_traces`.
const TRACES_LISTED: usize = 5;
/// Row bytes of a `run_sql` answer without an explicit `limit` (keeps a default answer within
/// about 6,000 characters).
const DEFAULT_SQL_BYTES: usize = 4_000;
/// Characters a default answer aims at (text and structured content alike).
pub const ANSWER_BUDGET: usize = 5_800;
/// Row bytes when the caller raised `limit`.
const RAISED_SQL_BYTES: usize = 512 * 1024;
/// Time limit of one query.
pub const SQL_TIMEOUT_MS: u64 = 30_000;

pub(crate) fn untrusted() -> String {
    UNTRUSTED_NOTE.to_string()
}

/// The window of `since`/`from`/`to`, resolved against the trace's own clock, or of `steps` (whose
/// numbers count `pid`'s steps; every process's when `None`).
pub fn window_of(
    store: &dyn TraceStore,
    since: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
    steps: Option<&str>,
    pid: Option<u32>,
) -> Result<TimeWindow, String> {
    if let Some(spec) = steps {
        if since.is_some() || from.is_some() || to.is_some() {
            return Err("give either steps or since/from/to, not both".into());
        }
        return step_window(store, spec, pid).map_err(|e| e.to_string());
    }
    let info = store.info();
    let since =
        since.map(parse_duration_ns).transpose().map_err(|e| format!("invalid since: {e} (e.g. \"30s\", \"5m\")"))?;
    resolve_window(info, since, from, to).map_err(|e| e.to_string().replace("--", ""))
}

/// Op names to codes, with an error that shows valid names.
pub fn parse_op(name: &str) -> Result<OpCode, String> {
    codes::op_by_name(name.trim()).ok_or_else(|| {
        format!("unknown op '{name}': use a name as get_trace_stats shows it, e.g. cudaLaunchKernel, cudaStreamSync, sched_switch")
    })
}

fn parse_ops(names: &Option<Vec<String>>) -> Result<Option<Vec<OpCode>>, String> {
    names.as_ref().map(|v| v.iter().map(|n| parse_op(n)).collect()).transpose()
}

/// The opened store of a trace, or why it cannot be opened.
pub fn store_of(entry: &TraceEntry) -> Result<std::sync::Arc<dyn causeway_backends::TraceStore>, String> {
    entry.store().map_err(|e| format!("trace {} cannot be opened: {e}", entry.name))
}

fn us(v: f64) -> String {
    format!("{v:.3} us")
}

pub fn list_traces(set: &TraceSet, a: ListArgs, _: &QueryCancel) -> Result<ListTracesOutput, String> {
    let mut traces = Vec::new();
    let offset = a.offset.unwrap_or(0);
    let limit = a.limit.unwrap_or(TRACES_LISTED).clamp(1, 500);
    let entries = set.entries();
    let mut readable = 0;
    let mut names = Vec::new();
    for e in &entries {
        match e.store() {
            Ok(store) => {
                let info = store.info();
                readable += 1;
                let span_s = ((info.last_ns - info.first_ns) as f64 / 1e6).round() / 1e3;
                names.push(format!("{} ({} events, {span_s} s)", e.name, info.events));
            }
            Err(_) => names.push(format!("{} (unreadable)", e.name)),
        }
    }
    for e in entries.iter().skip(offset).take(limit) {
        let mut t = TraceListing {
            index: e.index,
            name: e.name.clone(),
            path: e.path.clone(),
            ok: false,
            error: None,
            format: None,
            events: 0,
            first_ns: 0,
            last_ns: 0,
            span_s: 0.0,
            sampled: false,
            sessions: Vec::new(),
            sessions_total: 0,
            missing: Vec::new(),
        };
        match e.store().and_then(|s| s.sessions().map(|ss| (s, ss)).map_err(|x| x.to_string())) {
            Ok((store, sessions)) => {
                let info = store.info();
                t.ok = true;
                t.format = Some(info.format.clone());
                t.events = info.events;
                t.first_ns = info.first_ns;
                t.last_ns = info.last_ns;
                t.span_s = ((info.last_ns - info.first_ns) as f64 / 1e6).round() / 1e3;
                t.sampled = info.sampled;
                t.sessions_total = sessions.len();
                t.sessions = sessions.into_iter().take(SESSIONS_SHOWN).collect();
                t.missing = info.missing.clone();
            }
            Err(err) => t.error = Some(err),
        }
        traces.push(t);
    }
    const NAMED: usize = 20;
    let more = names.len().saturating_sub(NAMED);
    names.truncate(NAMED);
    let summary = format!(
        "{} trace(s), {readable} readable: {}{}",
        entries.len(),
        names.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
    let mut omitted = Vec::new();
    let after = entries.len().saturating_sub(offset + traces.len());
    if offset > 0 || after > 0 {
        omitted.push(format!(
            "traces {}..{} of {} listed: page with offset (and limit, at most 500)",
            offset,
            offset + traces.len(),
            entries.len()
        ));
    }
    let cut: usize = traces.iter().map(|t| t.sessions_total - t.sessions.len()).sum();
    if cut > 0 {
        omitted.push(format!("{cut} sessions (the first {SESSIONS_SHOWN} of each trace are listed): read them with run_sql on the sessions table"));
    }
    Ok(ListTracesOutput { summary, omitted, traces, untrusted: untrusted() })
}

pub fn get_trace_stats(set: &TraceSet, a: StatsArgs, _: &QueryCancel) -> Result<StatsOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window =
        window_of(store.as_ref(), a.since.as_deref(), a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), a.pid)?;
    let by_kernel = a.group_by == Some(GroupBy::Kernel);
    let req = StatsRequest {
        window,
        pid: a.pid,
        ops: parse_ops(&a.ops)?,
        per_process: a.per_process.unwrap_or(false),
        by_kernel,
    };
    let mut stats = compute_stats(store.as_ref(), &req).map_err(|e| e.to_string())?;
    let limit = a.limit.unwrap_or(10).clamp(1, 200);
    let mut processes_total = None;
    let mut truncated = false;
    if let Some(p) = stats.processes.as_mut() {
        processes_total = Some(p.len());
        if p.len() > limit {
            p.truncate(limit);
            truncated = true;
        }
    }
    let mut kernels_cut = false;
    if let Some(k) = stats.kernels.as_mut() {
        if k.kernels.len() > limit {
            k.kernels.truncate(limit);
            kernels_cut = true;
        }
    }
    let lost: u64 = stats.losses.iter().map(|l| l.count).sum();
    let worst = stats
        .ops
        .iter()
        .filter(|o| codes::is_gpu_call(o.source, o.op_code))
        .max_by(|x, y| x.p99_us.total_cmp(&y.p99_us));
    let mut summary =
        format!("{} events over {} in {} ops", stats.events, fmt_ns(stats.last_ns - stats.first_ns), stats.ops.len());
    if let Some(w) = worst {
        summary.push_str(&format!(
            "; highest GPU-call p99: {} {} (p50 {}, {} calls)",
            w.op,
            us(w.p99_us),
            us(w.p50_us),
            w.count
        ));
    }
    summary.push_str(&if lost == 0 {
        "; no events counted lost".to_string()
    } else {
        format!("; {lost} events lost (see losses)")
    });
    if stats.sampled.is_some() {
        summary.push_str("; the events table is a sample: true totals in stats.sampled");
    }
    if let Some(k) = &stats.kernels {
        summary.push_str(&format!(
            "; {} kernel launches of {} kernels ({} named)",
            k.launches, k.kernels_total, k.named_launches
        ));
        if let Some(w) = k.kernels.iter().max_by(|x, y| x.p99_us.total_cmp(&y.p99_us)) {
            summary.push_str(&format!(
                ", highest launch-call p99: {} {} ({} launches; host-side launch time, not GPU time)",
                causeway_analysis::short_kernel_name(&w.kernel),
                us(w.p99_us),
                w.launches
            ));
        }
    }
    if !stats.coverage.is_empty() {
        summary.push_str(&format!("; coverage: {}", stats.coverage.join("; ")));
    }
    // the GPUs' own state beside the host's (NVML samples; see stats.gpus)
    for g in &stats.gpus {
        summary.push_str(&format!(
            "; GPU {}: SM clock p50 {} MHz (min {}), up to {} °C",
            g.gpu, g.sm_clock_p50_mhz, g.sm_clock_min_mhz, g.temperature_max_c
        ));
        if g.throttled_ns > 0 {
            let reasons: Vec<&str> = g.throttled_by_reason.keys().map(String::as_str).collect();
            summary.push_str(&format!(", throttled {} ({})", fmt_ns(g.throttled_ns), reasons.join(", ")));
        }
        if g.link.pcie_degraded_busy_ns > 0 {
            summary.push_str(&format!(
                ", PCIe link below its maximum while busy for {} (down to gen {})",
                fmt_ns(g.link.pcie_degraded_busy_ns),
                g.link.pcie_link_gen_busy_min
            ));
        }
        if g.link.nvlink_errors > 0 {
            summary.push_str(&format!(", {} NVLink errors", g.link.nvlink_errors));
        }
    }
    truncated |= kernels_cut;
    let hint = if kernels_cut {
        Some(format!(
            "{limit} of {} kernels shown (most launch time first): raise limit, or filter with pid or a window",
            stats.kernels.as_ref().map(|k| k.kernels_total).unwrap_or(0)
        ))
    } else if truncated {
        Some(format!("{} of {} processes shown: raise limit or filter with pid", limit, processes_total.unwrap_or(0)))
    } else if stats.events == 0 {
        Some("no events in this window: widen it (since/from/to) or drop the pid/ops filters".into())
    } else {
        None
    };
    let omitted = hint.iter().cloned().collect();
    Ok(StatsOutput {
        summary,
        omitted,
        trace: entry.name.clone(),
        stats,
        processes_total,
        truncated,
        hint,
        untrusted: untrusted(),
    })
}

pub fn get_gpu_idle(set: &TraceSet, a: GpuIdleArgs, _: &QueryCancel) -> Result<GpuIdleOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window =
        window_of(store.as_ref(), a.since.as_deref(), a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), a.pid)?;
    let min_gap = a.min_gap_ms.unwrap_or(1.0);
    if !min_gap.is_finite() || min_gap < 0.01 {
        return Err(format!("min_gap_ms must be at least 0.01, not {min_gap}"));
    }
    let threshold = (min_gap * 1e6).round() as i64;
    let top = a.top_n.unwrap_or(10).clamp(1, 20);
    let device = causeway_analysis::device_view(store.as_ref(), window, a.pid, threshold).map_err(|e| e.to_string())?;
    let Some(mut d) = device else {
        return Ok(GpuIdleOutput {
            summary: format!("no device timeline in this trace: {}", causeway_analysis::DEVICE_VIEW_MISSING),
            omitted: Vec::new(),
            trace: entry.name.clone(),
            device: None,
            truncated: false,
            hint: Some("record one with `causeway trace --gpu-timeline -- CMD`".into()),
            untrusted: untrusted(),
        });
    };
    if !d.gaps.is_empty() {
        let steps = causeway_analysis::find_steps(store.as_ref(), window, a.pid).map_err(|e| e.to_string())?;
        causeway_analysis::place_gaps_in_steps(&mut d, &steps);
    }
    let truncated = d.gaps.len() > top;
    d.gaps.truncate(top);
    let summary = causeway_analysis::device_verdict(&d).unwrap_or_else(|| "no device work in this window".into());
    let omitted = if truncated {
        vec![format!(
            "{} of {} gaps over the threshold: raise top_n (max 20) or narrow the window",
            d.gaps_total - d.gaps.len(),
            d.gaps_total
        )]
    } else {
        Vec::new()
    };
    Ok(GpuIdleOutput {
        summary,
        omitted,
        trace: entry.name.clone(),
        truncated,
        hint: truncated
            .then(|| format!("{} gaps over the threshold; raise top_n (max 20) or narrow the window", d.gaps_total)),
        device: Some(d),
        untrusted: untrusted(),
    })
}

pub fn get_steps(set: &TraceSet, a: StepsArgs, _: &QueryCancel) -> Result<StepsOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window =
        window_of(store.as_ref(), a.since.as_deref(), a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), a.pid)?;
    let e = set.explanation_judged(&entry, window, a.pid, judged_by(a.steps.as_deref()))?;
    let mut report = e.steps.clone();
    let limit = a.limit.unwrap_or(200).clamp(1, 5000);
    let truncated =
        a.list == Some(true) && report.list_steps(store.as_ref(), window, a.pid, limit).map_err(|e| e.to_string())?;
    let slow = report.slow_ranges();
    let summary = match (report.series.first(), slow.first()) {
        (None, _) => report.notes.first().cloned().unwrap_or_else(|| "no steps in scope".into()),
        (Some(s), None) => format!(
            "{} series; pid {}: {} {}s ({}), median {}, none slow",
            report.series.len(),
            s.pid,
            s.count,
            s.kind,
            s.origin,
            fmt_ns(s.p50_ns)
        ),
        (Some(_), Some((s, r))) => {
            format!("{} slow range(s); worst, pid {} ({}): {}", slow.len(), s.pid, s.origin, r.summary)
        }
    };
    let hint = truncated.then(|| format!("step lists cut to {limit}: raise limit (max 5000) or narrow with steps"));
    let omitted = hint.iter().cloned().collect();
    Ok(StepsOutput {
        summary,
        omitted,
        trace: entry.name.clone(),
        steps: report,
        truncated,
        hint,
        untrusted: untrusted(),
    })
}

pub fn get_serving(set: &TraceSet, a: ServingArgs, _: &QueryCancel) -> Result<ServingOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window =
        window_of(store.as_ref(), a.since.as_deref(), a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), None)?;
    let e = set.explanation_judged(&entry, window, None, judged_by(a.steps.as_deref()))?;
    let serving = e.serving.clone();
    let summary = match serving.engines.first() {
        None => serving.notes.first().cloned().unwrap_or_else(|| "no serving engine in scope".into()),
        Some(en) => match en.spikes.first() {
            Some(s) => format!("{}; worst spike: {}", en.summary, s.summary),
            None => en.summary.clone(),
        },
    };
    Ok(ServingOutput { summary, trace: entry.name.clone(), serving, untrusted: untrusted() })
}

/// Stacks per ranking and frames per stack of a default `get_stacks`.
const DEFAULT_STACKS: usize = 3;
const DEFAULT_FRAMES: usize = 10;

pub fn get_stacks(set: &TraceSet, a: StacksArgs, _: &QueryCancel) -> Result<StacksOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window =
        window_of(store.as_ref(), a.since.as_deref(), a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), a.pid)?;
    let op = a.op.as_deref().map(parse_op).transpose()?;
    let top = a.top_n.unwrap_or(DEFAULT_STACKS).clamp(1, MAX_TOP);
    let req = StacksRequest { window, pid: a.pid, op, kernel: a.kernel.clone(), top };
    let mut stacks = top_stacks(store.as_ref(), &req).map_err(|e| e.to_string())?;
    let max_frames = a.max_frames.unwrap_or(DEFAULT_FRAMES).clamp(1, 128);
    let mut frames_cut = false;
    for s in stacks.by_count.iter_mut().chain(stacks.by_time.iter_mut()) {
        if s.frames.len() > max_frames {
            s.frames.truncate(max_frames);
            frames_cut = true;
        }
    }
    let summary = match stacks.by_time.first() {
        Some(s) => format!(
            "{} calls, {} with a stack, {} distinct stacks; most time: stack {} with {} calls, {} in total",
            stacks.calls,
            stacks.calls_with_stack,
            stacks.distinct_stacks,
            s.stack_hash,
            s.calls,
            fmt_ns(s.total_ns)
        ),
        None => format!("{} calls, none with a recorded stack (trace with stacks enabled to get them)", stacks.calls),
    };
    let summary = match causeway_analysis::kernel_filter_words(&stacks) {
        Some(k) => format!("{k}; {summary}"),
        None => summary,
    };
    let more = stacks.distinct_stacks as usize > stacks.by_count.len();
    let hint = (frames_cut || more).then(|| {
        "stacks are ranked top_n per list and cut to max_frames frames: raise them, or narrow with op, pid or a window".to_string()
    });
    let mut omitted = Vec::new();
    if more {
        omitted.push(format!(
            "{} of {} distinct stacks per ranking: raise top_n (max {MAX_TOP}) or narrow with op, kernel, pid or a window",
            stacks.distinct_stacks as usize - stacks.by_count.len(),
            stacks.distinct_stacks
        ));
    }
    if frames_cut {
        omitted.push(format!("frames past the innermost {max_frames} of longer stacks: raise max_frames (max 128)"));
    }
    Ok(StacksOutput { summary, omitted, trace: entry.name.clone(), stacks, frames_cut, hint, untrusted: untrusted() })
}

/// Entries per thread and threads of a default `get_timeline`.
const DEFAULT_TIMELINE_ENTRIES: usize = 8;
const DEFAULT_TIMELINE_THREADS: usize = 3;

pub fn get_timeline(set: &TraceSet, a: TimelineArgs, _: &QueryCancel) -> Result<TimelineOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let window = window_of(store.as_ref(), None, a.from.as_deref(), a.to.as_deref(), a.steps.as_deref(), a.pid)?;
    let mut around = a.around.clone();
    let mut centered_on = None;
    if around.is_none() && (window.from_ns.is_none() || window.to_ns.is_none()) {
        if a.from.is_some() || a.to.is_some() {
            return Err("give both from and to (or around: an event id)".into());
        }
        let e = set.explanation(&entry, TimeWindow::ALL, a.pid)?;
        match e.chains.iter().find(|c| !c.evidence.event_ids.is_empty()) {
            Some(c) => {
                around = c.evidence.event_ids.first().cloned();
                centered_on = Some(format!("the worst event of chain {}", c.id));
            }
            None => {
                around = Some(longest_call(store.as_ref(), a.pid)?);
                centered_on = Some("the longest GPU call, or event, of the trace (it has no causal chain)".into());
            }
        }
    }
    let around_ns = a.around_ms.map(|ms| (ms.clamp(0.001, 60_000.0) * 1e6) as i64).unwrap_or(DEFAULT_AROUND_NS);
    let limit = a.limit.unwrap_or(DEFAULT_TIMELINE_ENTRIES).clamp(1, 2000);
    let req = TimelineRequest { around: around.clone(), around_ns, window, pid: a.pid, tid: a.tid, limit };
    let mut report = timeline(store.as_ref(), &req).map_err(|e| e.to_string())?;
    let max_threads = a.max_threads.unwrap_or(DEFAULT_TIMELINE_THREADS).clamp(1, 64);
    let threads_total = report.threads.len();
    let entries_cut = report.threads.iter().any(|t| t.truncated);
    report.threads.truncate(max_threads);
    let truncated = entries_cut || threads_total > max_threads;
    let mut omitted = Vec::new();
    if threads_total > max_threads {
        omitted.push(format!(
            "{} of {threads_total} threads (those without GPU calls last): raise max_threads (max 64) or pass tid",
            threads_total - max_threads
        ));
    }
    if entries_cut {
        omitted.push(format!(
            "entries past the first {limit} of busier threads: raise limit (max 2000), pass tid, or shrink around_ms / the window"
        ));
    }
    let entries: usize = report.threads.iter().map(|t| t.entries.len()).sum();
    let mut summary = format!(
        "{} threads in {} around {}; {} shown with {} entries",
        threads_total,
        fmt_ns(report.to_ns - report.from_ns),
        around.as_ref().map(|i| format!("event {i}")).unwrap_or_else(|| "the window".into()),
        report.threads.len(),
        entries
    );
    if let Some(what) = centered_on {
        summary.push_str(&format!(" (centered on {what})"));
    }
    let hint = truncated.then(|| {
        format!("cut to {max_threads} threads and {limit} entries per thread: raise max_threads/limit, pass tid, or shrink around_ms / the window")
    });
    Ok(TimelineOutput {
        summary,
        omitted,
        trace: entry.name.clone(),
        timeline: report,
        threads_total,
        truncated,
        hint,
        untrusted: untrusted(),
    })
}

/// The id of the longest GPU call of `pid` (the longest event when there is none), where a default
/// timeline centers when the trace has no chain.
fn longest_call(store: &dyn causeway_backends::TraceStore, pid: Option<u32>) -> Result<EventId, String> {
    let filter = pid.map(|p| format!(" WHERE pid = {p}")).unwrap_or_default();
    let gpu: Vec<String> = causeway_analysis::gpu_call_sources().iter().map(u8::to_string).collect();
    let sql = format!(
        "SELECT id FROM events{filter} ORDER BY source IN ({}) DESC, duration DESC, timestamp LIMIT 1",
        gpu.join(", ")
    );
    let r = store.query(&sql, &QueryLimits::with_rows(1)).map_err(|e| e.to_string())?;
    let id = r
        .rows
        .first()
        .and_then(|row| row.first())
        .cloned()
        .ok_or("no event in scope: give from and to, or another pid")?;
    serde_json::from_value(id).map_err(|e| format!("unexpected event id: {e}"))
}

pub fn run_sql(set: &TraceSet, a: RunSqlArgs, cancel: &QueryCancel) -> Result<RunSqlOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    if a.sql.trim().is_empty() {
        return Err("sql is empty: give one SELECT statement (tables: describe_schema)".into());
    }
    let rows = a.limit.unwrap_or(DEFAULT_ROWS).clamp(1, MAX_ROWS);
    let max_bytes = if a.limit.is_some() { RAISED_SQL_BYTES } else { DEFAULT_SQL_BYTES };
    let limits = QueryLimits { max_rows: rows, timeout_ms: SQL_TIMEOUT_MS, max_bytes, cancel: Some(cancel.clone()) };
    let mut result = store.query(&a.sql, &limits).map_err(|e| {
        let msg = e.to_string();
        if cancel.is_cancelled() {
            "the query was cancelled".to_string()
        } else {
            format!("{msg} (run_sql takes one read-only SELECT; tables and columns: describe_schema)")
        }
    })?;
    for row in &mut result.rows {
        for cell in row.iter_mut() {
            sanitize_json(cell, MAX_CELL_CHARS);
        }
    }
    let n = result.rows.len();
    let summary = format!(
        "{n} row(s) of {} column(s){}",
        result.columns.len(),
        if result.truncated { ", truncated" } else { "" }
    );
    let hint = result.truncated.then(|| {
        format!("the result was cut at {n} rows (limit {rows}, {} KB of rows): aggregate (COUNT, GROUP BY), add WHERE/LIMIT, or raise limit (max {MAX_ROWS})", max_bytes / 1000)
    });
    let omitted = hint.iter().cloned().collect();
    Ok(RunSqlOutput {
        summary,
        omitted,
        trace: entry.name.clone(),
        columns: result.columns,
        rows: result.rows,
        row_count: n,
        truncated: result.truncated,
        hint,
        untrusted: untrusted(),
    })
}

pub fn describe_schema(set: &TraceSet, a: SchemaArgs, _: &QueryCancel) -> Result<SchemaOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let mut schema = store.describe_schema().map_err(|e| e.to_string())?;
    let full = a.detail.unwrap_or(if a.table.is_some() { Detail::Full } else { Detail::Brief }) == Detail::Full;
    let mut omitted = Vec::new();
    let mut columns = std::collections::BTreeMap::new();
    if !full {
        let (codes, meanings) = (schema.codes.len(), schema.tables.iter().map(|t| t.columns.len()).sum::<usize>());
        schema.codes.retain(|c| c.events > 0);
        schema.codes.iter_mut().for_each(|c| c.meaning.clear());
        for t in &mut schema.tables {
            let cols: Vec<String> = t.columns.drain(..).map(|c| format!("{} {}", c.name, c.sql_type)).collect();
            columns.insert(t.name.clone(), cols.join(", "));
        }
        omitted.push(format!(
            "the meanings of {meanings} columns (each table's columns are in `columns` as \"name TYPE\") and of the codes, and {} codes defined but absent from events: pass table for one table in full, or detail \"full\"",
            codes - schema.codes.len()
        ));
    }
    if let Some(t) = &a.table {
        let names: Vec<String> = schema.tables.iter().map(|x| x.name.clone()).collect();
        schema.tables.retain(|x| x.name.eq_ignore_ascii_case(t.trim()));
        if schema.tables.is_empty() {
            return Err(format!("no table '{t}' in this trace: it has {}", names.join(", ")));
        }
        if !["events", "ops", "sources", "event_aggregates"].contains(&schema.tables[0].name.as_str()) {
            schema.codes.clear();
        }
    }
    let summary = format!(
        "{} table(s), {} code(s) present, format {}",
        schema.tables.len(),
        schema.codes.len(),
        serde_json::to_string(&schema.format).unwrap_or_default()
    );
    Ok(SchemaOutput { summary, omitted, columns, trace: entry.name.clone(), schema, untrusted: untrusted() })
}

pub fn compare_traces(set: &TraceSet, a: CompareArgs, _: &QueryCancel) -> Result<CompareOutput, String> {
    compare::compare(set, &a)
}

pub fn get_check(_: &TraceSet, a: CheckArgs, _: &QueryCancel) -> Result<CheckOutput, String> {
    let report = causeway_probes::host_check();
    let failing: Vec<&str> = report.items.iter().filter(|i| !i.ok).map(|i| i.name.as_str()).collect();
    let summary = format!(
        "{} on kernel {}; {} of {} checks ok{}; {} CUDA librar(y/ies) found",
        if report.can_trace { "this host can trace" } else { "this host cannot trace yet" },
        report.kernel,
        report.items.len() - failing.len(),
        report.items.len(),
        if failing.is_empty() { String::new() } else { format!(" (failing: {})", failing.join(", ")) },
        report.cuda_libraries.len()
    );
    let mut report = report;
    let mut omitted = Vec::new();
    if a.detail != Some(Detail::Full) && !report.coverage.is_empty() {
        omitted.push(format!(
            "which probed functions each of the {} libraries exports (coverage): pass detail \"full\"",
            report.coverage.len()
        ));
        report.coverage.clear();
    }
    Ok(CheckOutput { summary, omitted, report })
}
