//! A chain's evidence as a timeline: the worst call of the chain (with the gap before it, for a
//! chain of gaps between GPU calls) with some time on each side, one row per thread of its process
//! (the call's thread first) holding its calls above and its off-CPU intervals below, coloured by
//! cause, and one row per CPU a traced thread was preempted on, showing the task that took it;
//! when the trace holds the device's own timeline, a lane per device of the process under them,
//! busy or idle ([`crate::device_lane`]). Read from the trace, drawn with the `svg` crate.

use std::collections::{BTreeMap, HashMap};

use causeway_analysis::{Chain, ChainKind, ThreadNesting};
use causeway_model::codes::{self, op, GpuRole, OpCode, OpKind};
use causeway_model::time::fmt_ns;
use causeway_model::time::TimeWindow;
use causeway_model::PrevState;
use causeway_store::{EventFilter, StoredEvent, TraceStore};
use svg::node::element::{Group, Line, Rectangle, Text, Title};
use svg::Document;

use crate::device_lane::{device_lanes, draw_lane, DeviceLane, LANE_H};
use crate::palette;
use crate::scale::TimeScale;
use crate::RenderError;

/// Threads drawn at most (the call's own first, then the busiest).
const MAX_THREADS: usize = 6;
/// Page geometry, px.
const WIDTH: f64 = 960.0;
const LABEL_W: f64 = 200.0;
const RIGHT_PAD: f64 = 16.0;
const TOP: f64 = 46.0;
const THREAD_ROW_H: f64 = 34.0;
const CPU_ROW_H: f64 = 22.0;
const AXIS_H: f64 = 56.0;
/// Characters of a row label (no font metrics here: a label is cut to fit the column).
const LABEL_CHARS: usize = 30;

/// A chain's picture and what it shows.
#[derive(Debug, Clone)]
pub struct ChainPicture {
    /// The chain (`c1`).
    pub chain: String,
    /// The SVG document.
    pub svg: String,
    /// Calls, off-CPU intervals and culprit bars drawn.
    pub calls: usize,
    pub off_cpu: usize,
    pub culprits: usize,
    /// The device lane's busy spans and idle stretches drawn (0 without a device timeline).
    pub device_busy: usize,
    pub device_idle: usize,
    /// The window shown, unix ns.
    pub from_ns: i64,
    pub to_ns: i64,
}

/// One drawn interval.
struct Bar {
    start: i64,
    end: i64,
    class: String,
    color: &'static str,
    tip: String,
    label: Option<String>,
    event_id: String,
    evidence: bool,
    /// 0: a top-level call, 1: a call inside another (drawn thinner).
    depth: u8,
}

struct ThreadRow {
    tid: u32,
    comm: String,
    calls: Vec<Bar>,
    off_cpu: Vec<Bar>,
}

/// The picture of `chain`'s worst evidence event and what surrounds it; `None` when the chain
/// names no event this trace holds.
pub fn chain_picture(store: &dyn TraceStore, chain: &Chain) -> Result<Option<ChainPicture>, RenderError> {
    let Some(first) = chain.evidence.event_ids.first() else { return Ok(None) };
    let Some(worst) = store.events_by_id(std::slice::from_ref(first))?.into_iter().next() else { return Ok(None) };
    let (mut s, mut e) = worst.event.span();
    // a gap chain's worst event is the call that ended its worst gap: show the gap too
    if chain.kind == ChainKind::FeedingGap {
        if let Some(step) = chain.timeline.iter().find(|t| t.event_id.as_ref() == Some(first)) {
            (s, e) = (s.min(step.ts_ns), e.max(step.ts_ns + step.dur_ns));
        }
    }
    let pad = ((e - s) / 6).max(2_000);
    let (from, to) = (s - pad, e + pad);
    // off-CPU rows are stored at their switch-in: read past the window for those that begin in it
    let filter = EventFilter {
        window: TimeWindow { from_ns: Some(from), to_ns: Some(to + (to - from)) },
        pid: Some(worst.event.pid),
        ..Default::default()
    };
    let mut events = Vec::new();
    store.scan_events(&filter, &mut |ev| {
        let (a, b) = ev.event.span();
        if a <= to && b >= from {
            events.push(ev);
        }
    })?;
    let evidence: std::collections::HashSet<String> = chain.evidence.event_ids.iter().map(|i| i.to_string()).collect();
    let (threads, cpus) = rows(&events, worst.event.tid, &evidence, &|pid, tid| took_cpu_for(chain, pid, tid));
    let scale = TimeScale::new(from, to, LABEL_W, WIDTH - RIGHT_PAD);
    let lanes = device_lanes(store, worst.event.pid, scale.t0, scale.t1)?;
    Ok(Some(draw(chain, &threads, &cpus, &lanes, &scale)))
}

/// Whether a task that took a CPU from the chain's threads is this chain's evidence, drawn on the
/// CPU rows: the culprit of a preemption chain, whoever held the CPU of a spinning wait while the
/// GPU worked; no one for any other cause (a chain with no host cause never shows a culprit
/// another chain names).
fn took_cpu_for(chain: &Chain, pid: u32, tid: u32) -> bool {
    match chain.cause.as_str() {
        "preempted" => chain.culprit.as_ref().is_some_and(|c| c.pid == pid && c.tid == tid),
        "spin_gpu_busy" => true,
        _ => false,
    }
}

/// The thread rows (the worst call's thread first, then by busy time) and the CPU rows (only the
/// tasks `shown` says are the chain's own evidence).
fn rows(
    events: &[StoredEvent],
    focus_tid: u32,
    evidence: &std::collections::HashSet<String>,
    shown: &dyn Fn(u32, u32) -> bool,
) -> (Vec<ThreadRow>, BTreeMap<i32, Vec<Bar>>) {
    let mut threads: HashMap<u32, ThreadRow> = HashMap::new();
    let mut cpus: BTreeMap<i32, Vec<Bar>> = BTreeMap::new();
    let mut sorted: Vec<&StoredEvent> = events.iter().collect();
    sorted.sort_by_key(|e| (e.event.span().0, std::cmp::Reverse(e.event.span().1)));
    // a call inside another call of its thread is drawn thinner, inside it
    let mut nesting: HashMap<u32, ThreadNesting> = HashMap::new();
    for se in sorted {
        let ev = &se.event;
        let (start, end) = ev.span();
        let code = OpCode::new(ev.source, ev.op);
        let id = se.id.to_string();
        let row = threads.entry(ev.tid).or_insert_with(|| ThreadRow {
            tid: ev.tid,
            comm: ev.comm.clone(),
            calls: vec![],
            off_cpu: vec![],
        });
        match codes::op_kind(ev.source, ev.op) {
            OpKind::GpuCall => {
                let depth = u8::from(nesting.entry(ev.tid).or_default().nested(end));
                let role = codes::gpu_role(code);
                row.calls.push(Bar {
                    start,
                    end,
                    class: format!("call {}", palette::role_class(role)),
                    color: palette::call(role),
                    tip: format!("{} on tid {}: {} (event {id})", code.name(), ev.tid, fmt_ns(ev.dur_ns)),
                    // a nested call is drawn inside its parent, which carries the label
                    label: (depth == 0).then(|| code.name().into_owned()),
                    evidence: evidence.contains(&id),
                    event_id: id,
                    depth,
                });
            }
            OpKind::OffCpu if code == op::SCHED_SWITCH => {
                let state = ev.sched.as_ref().map_or(PrevState::Unknown, |s| s.prev_state);
                let who = ev.sched.as_ref().filter(|s| s.next_tid != 0 || s.next_pid != 0);
                let took = who
                    .map(|s| format!(", {} (pid {}) took CPU {}", s.next_comm, s.next_pid, ev.cpu))
                    .unwrap_or_default();
                row.off_cpu.push(Bar {
                    start,
                    end,
                    class: format!("off-cpu {}", state.as_str()),
                    color: palette::off_cpu(state),
                    tip: format!("tid {} off-CPU {}: {}{took} (event {id})", ev.tid, fmt_ns(ev.dur_ns), state.as_str()),
                    label: None,
                    evidence: evidence.contains(&id),
                    event_id: id.clone(),
                    depth: 0,
                });
                if let Some(s) = who.filter(|s| {
                    state == PrevState::Preempted
                        && s.next_tid != ev.tid
                        && ev.cpu >= 0
                        && shown(s.next_pid, s.next_tid)
                }) {
                    cpus.entry(ev.cpu).or_default().push(Bar {
                        start,
                        end,
                        class: "culprit".into(),
                        color: palette::CULPRIT,
                        tip: format!(
                            "{} (pid {}, tid {}) took CPU {} from tid {} for {}",
                            s.next_comm,
                            s.next_pid,
                            s.next_tid,
                            ev.cpu,
                            ev.tid,
                            fmt_ns(end - start)
                        ),
                        label: Some(format!("{} ({})", s.next_comm, s.next_pid)),
                        evidence: false,
                        event_id: id,
                        depth: 0,
                    });
                }
            }
            _ => {}
        }
    }
    let mut rows: Vec<ThreadRow> =
        threads.into_values().filter(|r| !r.calls.is_empty() || !r.off_cpu.is_empty()).collect();
    let busy = |r: &ThreadRow| -> i64 { r.calls.iter().chain(&r.off_cpu).map(|b| b.end - b.start).sum() };
    rows.sort_by_key(|r| (r.tid != focus_tid, std::cmp::Reverse(busy(r)), r.tid));
    rows.truncate(MAX_THREADS);
    (rows, cpus)
}

fn label(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS {
        text.to_string()
    } else {
        let cut: String = text.chars().take(LABEL_CHARS - 1).collect();
        format!("{cut}…")
    }
}

/// A bar as an element group, and its label.
fn bar(b: &Bar, scale: &TimeScale, y: f64, h: f64) -> (Group, Option<Text>) {
    let (x, w) = scale.extent(b.start, b.end);
    let mut rect = Rectangle::new()
        .set("x", x)
        .set("y", y)
        .set("width", w)
        .set("height", h)
        .set("fill", b.color)
        .add(Title::new(b.tip.clone()));
    if b.evidence {
        rect = rect.set("stroke", palette::EVIDENCE).set("stroke-width", 2);
    } else if b.depth > 0 {
        rect = rect.set("stroke", palette::BACKGROUND).set("stroke-width", 0.5);
    }
    let mut class = b.class.clone();
    if b.evidence {
        class.push_str(" evidence");
    }
    let g = Group::new().set("class", class).set("data-event-id", b.event_id.clone()).add(rect);
    // a label inside the bar where it fits (about 6 px a character at 10 px)
    let label = b.label.as_ref().and_then(|l| {
        let fits = (w / 6.0) as usize;
        (fits >= 4).then(|| {
            let text: String =
                if l.chars().count() > fits { l.chars().take(fits - 1).collect::<String>() + "…" } else { l.clone() };
            Text::new(text)
                .set("x", x + 3.0)
                .set("y", y + h / 2.0 + 3.5)
                .set("font-size", 10)
                .set("fill", palette::BAR_TEXT)
                .set("pointer-events", "none")
        })
    });
    (g, label)
}

/// Adds `bars` to `row`, each at the (y, height) `place` gives it, then their labels (after every
/// bar, so that a nested call drawn over its parent never hides the parent's name).
fn add_bars(mut row: Group, bars: &[Bar], scale: &TimeScale, place: impl Fn(&Bar) -> (f64, f64)) -> Group {
    let mut labels = Vec::new();
    for b in bars {
        let (y, h) = place(b);
        let (g, label) = bar(b, scale, y, h);
        row = row.add(g);
        labels.extend(label);
    }
    for l in labels {
        row = row.add(l);
    }
    row
}

fn draw(
    chain: &Chain,
    threads: &[ThreadRow],
    cpus: &BTreeMap<i32, Vec<Bar>>,
    lanes: &[DeviceLane],
    scale: &TimeScale,
) -> ChainPicture {
    let height = TOP
        + threads.len() as f64 * THREAD_ROW_H
        + cpus.len() as f64 * CPU_ROW_H
        + lanes.len() as f64 * LANE_H
        + AXIS_H;
    let mut doc = Document::new()
        .set("xmlns", "http://www.w3.org/2000/svg")
        .set("class", "chain-timeline")
        .set("data-chain", chain.id.clone())
        .set("width", WIDTH)
        .set("height", height)
        .set("viewBox", (0, 0, WIDTH, height))
        .set("font-family", "DejaVu Sans, Verdana, sans-serif")
        .add(Rectangle::new().set("width", WIDTH).set("height", height).set("fill", palette::BACKGROUND));
    doc = doc.add(
        Text::new(label_wide(&chain.title(), 125))
            .set("x", 8)
            .set("y", 18)
            .set("font-size", 13)
            .set("font-weight", "bold"),
    );
    doc = doc.add(
        Text::new(label_wide(
            &format!("{} (the worst call and {} around it)", chain.headline(), fmt_ns(scale.t1 - scale.t0)),
            160,
        ))
        .set("x", 8)
        .set("y", 34)
        .set("font-size", 11)
        .set("fill", palette::MUTED),
    );
    let (mut calls, mut off_cpu, mut culprits) = (0, 0, 0);
    let mut y = TOP;
    for t in threads {
        let mut row = Group::new().set("class", "thread-row").set("data-tid", t.tid);
        row = row.add(
            Text::new(label(&format!("{} ({})", t.comm, t.tid))).set("x", 8).set("y", y + 15.0).set("font-size", 11),
        );
        row = row.add(
            Text::new("off-CPU")
                .set("x", LABEL_W - 44.0)
                .set("y", y + 28.0)
                .set("font-size", 8)
                .set("fill", palette::MUTED),
        );
        row = add_bars(row, &t.calls, scale, |b| if b.depth == 0 { (y + 2.0, 18.0) } else { (y + 7.0, 8.0) });
        row = add_bars(row, &t.off_cpu, scale, |_| (y + 22.0, 9.0));
        calls += t.calls.len();
        off_cpu += t.off_cpu.len();
        doc = doc.add(row);
        doc = doc.add(separator(y + THREAD_ROW_H - 1.0));
        y += THREAD_ROW_H;
    }
    for (cpu, bars) in cpus {
        let mut row = Group::new().set("class", "cpu-row").set("data-cpu", *cpu);
        row = row.add(Text::new(format!("CPU {cpu}: who took it")).set("x", 8).set("y", y + 14.0).set("font-size", 11));
        row = add_bars(row, bars, scale, |_| (y + 3.0, 15.0));
        culprits += bars.len();
        doc = doc.add(row);
        doc = doc.add(separator(y + CPU_ROW_H - 1.0));
        y += CPU_ROW_H;
    }
    let (mut device_busy, mut device_idle) = (0, 0);
    for lane in lanes {
        doc = doc.add(draw_lane(lane, scale, y));
        doc = doc.add(separator(y + LANE_H - 1.0));
        device_busy += lane.busy.len();
        device_idle += lane.idle.len();
        y += LANE_H;
    }
    doc = doc.add(axis(scale, y));
    doc = doc.add(legend(y + 38.0, !lanes.is_empty()));
    ChainPicture {
        chain: chain.id.clone(),
        svg: doc.to_string(),
        calls,
        off_cpu,
        culprits,
        device_busy,
        device_idle,
        from_ns: scale.t0,
        to_ns: scale.t1,
    }
}

fn label_wide(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        text.to_string()
    } else {
        text.chars().take(chars - 1).collect::<String>() + "…"
    }
}

fn separator(y: f64) -> Line {
    Line::new().set("x1", 0).set("x2", WIDTH).set("y1", y).set("y2", y).set("stroke", palette::GRID)
}

fn axis(scale: &TimeScale, y: f64) -> Group {
    let mut g = Group::new().set("class", "axis");
    g = g.add(
        Line::new()
            .set("x1", scale.x0)
            .set("x2", scale.x1)
            .set("y1", y + 4.0)
            .set("y2", y + 4.0)
            .set("stroke", palette::MUTED),
    );
    for (t, text) in scale.ticks(8) {
        let x = scale.x(t);
        g = g.add(
            Line::new().set("x1", x).set("x2", x).set("y1", y + 4.0).set("y2", y + 9.0).set("stroke", palette::MUTED),
        );
        g = g.add(
            Text::new(text)
                .set("x", x)
                .set("y", y + 20.0)
                .set("font-size", 9)
                .set("text-anchor", "middle")
                .set("fill", palette::MUTED),
        );
    }
    g
}

fn legend(y: f64, device: bool) -> Group {
    let mut items: Vec<(&str, &str)> = vec![
        ("launch", palette::call(GpuRole::Launch)),
        ("sync", palette::call(GpuRole::Sync)),
        ("copy", palette::call(GpuRole::SyncCopy)),
        ("other call", palette::call(GpuRole::Other)),
        ("preempted", palette::off_cpu(PrevState::Preempted)),
        ("sleeping", palette::off_cpu(PrevState::Sleeping)),
        ("I/O wait (D)", palette::off_cpu(PrevState::Uninterruptible)),
        ("took the CPU", palette::CULPRIT),
    ];
    if device {
        items.extend([("GPU busy", palette::DEVICE_BUSY), ("GPU idle over 1 ms", palette::DEVICE_GAP)]);
    }
    let mut g = Group::new().set("class", "legend");
    let mut x = 8.0;
    for (name, color) in items {
        g = g.add(Rectangle::new().set("x", x).set("y", y).set("width", 10).set("height", 10).set("fill", color));
        g = g.add(Text::new(name).set("x", x + 14.0).set("y", y + 9.0).set("font-size", 10));
        x += 22.0 + name.len() as f64 * 6.2;
    }
    g
}
