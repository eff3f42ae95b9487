//! The pre-trigger buffer of an attached process (`trace --pid P --gpu-timeline --gpu-trigger ...
//! --gpu-pre-trigger 5s`): its library records from the attach on, and this keeps what arrives in
//! the tracer's memory for the last seconds only. A window (a trigger's, `causeway gpu-window`'s,
//! an MCP client's) stores the span from `pre` before it opened to its end: the held records of
//! that span and every later one that falls in it. The tracer writes the span's
//! `window_opened` / `window_closed` notes itself, so everything outside the spans is a hole of the
//! device view (`holes::PAIRS`), never idle time; the library's own window notes become one
//! `armed` note.
//!
//! Records wait at most `pre` plus [`LATE_NS`] (a record arrives after its work ended, a CUPTI
//! buffer later); at most [`MAX_HELD`] are held (the oldest go first, counted, and a window
//! reaching back over them gets a `dropped` note).

use std::collections::VecDeque;

use causeway_gpu_wire::note;
use causeway_model::{GpuOp, GpuTimelineNote};
use causeway_store::GpuTimelinePart;

/// How long after its start a record may still arrive: held this long beyond `pre`.
pub const LATE_NS: i64 = 3_000_000_000;
/// The most records held per process.
pub const MAX_HELD: usize = 500_000;

/// One stored span, unix ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    from: i64,
    to: i64,
    /// Its `window_closed` note was written.
    closed: bool,
}

/// One armed process's buffer and spans.
#[derive(Debug)]
pub(super) struct Armed {
    pid: u32,
    pre_ns: i64,
    held: VecDeque<GpuOp>,
    spans: Vec<Span>,
    /// Records the cap pushed out, and the latest start among them.
    dropped: u64,
    dropped_until: i64,
    /// When the library began recording (its `window_opened`, which became the `armed` note).
    recording_since: Option<i64>,
    /// When every held record was last checked against the time it may be held (unix ns).
    swept_at: i64,
}

/// How often every held record is checked against the time it may be held; in between only the
/// oldest are let go (records arrive nearly in time order: one held behind a newer one waits for
/// the next sweep, which only holds it a little longer, never stores it outside a window).
const SWEEP_EVERY_NS: i64 = 1_000_000_000;

impl Armed {
    pub fn new(pid: u32, pre_ms: u64) -> Armed {
        Armed {
            pid,
            pre_ns: i64::try_from(pre_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX),
            held: VecDeque::new(),
            spans: Vec::new(),
            dropped: 0,
            dropped_until: i64::MIN,
            recording_since: None,
            swept_at: i64::MIN,
        }
    }

    fn note(&self, ts_ns: i64, kind: &str, count: i64, detail: String) -> GpuTimelineNote {
        GpuTimelineNote { pid: self.pid, ts_ns, kind: kind.into(), count, detail }
    }

    /// Whether a span is open at `now`.
    pub fn is_open(&self, now: i64) -> bool {
        self.spans.last().is_some_and(|s| !s.closed && s.to > now)
    }

    /// A window of `for_ms` opening at `now` (unix ns): the span from `pre` before it, or the open
    /// span extended. Its notes, and the held records it takes, go to `out`.
    pub fn open(&mut self, now: i64, for_ms: u64, reason: &str, out: &mut GpuTimelinePart) {
        let to = now.saturating_add(i64::try_from(for_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX));
        let secs = |ns: i64| ns as f64 / 1e9;
        if let Some(s) = self.spans.last_mut().filter(|s| !s.closed && s.to > now) {
            s.to = s.to.max(to);
            out.notes.push(self.note(
                now,
                note::WINDOW_OPENED,
                for_ms as i64,
                format!("the open window was extended to {} s from now: {reason}", secs(to - now)),
            ));
            return;
        }
        // never back over a span already stored (its records went out with it), nor before the
        // library recorded
        let earliest = self.spans.last().map_or(now - self.pre_ns, |s| s.to.max(now - self.pre_ns));
        let from = earliest.max(self.recording_since.unwrap_or(now)).min(now);
        self.spans.push(Span { from, to, closed: false });
        out.notes.push(self.note(
            from,
            note::WINDOW_OPENED,
            for_ms as i64,
            format!(
                "window of {} s opened at the trigger's time, stored with the {} s before it from the pre-trigger buffer: {reason}",
                secs(to - now),
                secs(now - from)
            ),
        ));
        if self.dropped > 0 && self.dropped_until >= from {
            out.notes.push(self.note(
                from,
                note::DROPPED,
                self.dropped as i64,
                format!(
                    "{} records left the pre-trigger buffer before this window opened (it holds at most {MAX_HELD}): the view from {} s before the window may miss some",
                    self.dropped,
                    secs(now - from)
                ),
            ));
        }
        let (take, keep): (Vec<GpuOp>, Vec<GpuOp>) =
            self.held.drain(..).partition(|o| o.start_ns >= from && o.start_ns < to);
        out.ops.extend(take);
        self.held = keep.into();
    }

    /// Close the open span at `now` (a request to close, the end of the trace).
    pub fn close(&mut self, now: i64, reason: &str, out: &mut GpuTimelinePart) {
        if let Some(s) = self.spans.last_mut().filter(|s| !s.closed) {
            s.to = s.to.min(now);
            s.closed = true;
            let to = s.to;
            out.notes.push(self.note(
                to,
                note::WINDOW_CLOSED,
                0,
                format!(
                    "window closed ({reason}): back to the pre-trigger buffer, nothing stored until the next window"
                ),
            ));
        }
    }

    /// What `part` of this process's library carries, split at `now`: records in a span to `out`,
    /// the rest held (the oldest beyond `pre` + [`LATE_NS`] forgotten); the library's window notes
    /// turned into one `armed` note; spans whose time ran out closed.
    pub fn take(&mut self, part: GpuTimelinePart, now: i64, out: &mut GpuTimelinePart) {
        out.clock_syncs.extend(part.clock_syncs);
        out.devices.extend(part.devices);
        for n in part.notes {
            match n.kind.as_str() {
                note::WINDOW_OPENED if self.recording_since.is_none() => {
                    self.recording_since = Some(n.ts_ns);
                    out.notes.push(self.note(
                        n.ts_ns,
                        note::ARMED,
                        self.pre_ns / 1_000_000,
                        format!(
                            "pre-trigger buffer of {} s armed: the library records from here, the tracer keeps the last {} s in memory and stores only the windows (the library: {})",
                            self.pre_ns as f64 / 1e9,
                            self.pre_ns as f64 / 1e9,
                            n.detail
                        ),
                    ));
                }
                note::WINDOW_OPENED | note::WINDOW_CLOSED => {}
                _ => out.notes.push(n),
            }
        }
        for o in part.ops {
            if self.spans.iter().any(|s| o.start_ns >= s.from && o.start_ns < s.to) {
                out.ops.push(o);
            } else {
                self.held.push_back(o);
            }
        }
        let forget_before = now - self.pre_ns - LATE_NS;
        if now.saturating_sub(self.swept_at) >= SWEEP_EVERY_NS {
            self.held.retain(|o| o.start_ns >= forget_before);
            self.swept_at = now;
        } else {
            while self.held.front().is_some_and(|o| o.start_ns < forget_before) {
                self.held.pop_front();
            }
        }
        while self.held.len() > MAX_HELD {
            if let Some(o) = self.held.pop_front() {
                self.dropped += 1;
                self.dropped_until = self.dropped_until.max(o.start_ns);
            }
        }
        if let Some(s) = self.spans.last().copied().filter(|s| !s.closed && s.to <= now) {
            self.close(s.to, "its time ran out", out);
        }
    }

    /// How many records are held now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// A 1 ms kernel of pid 5 starting at `start_ns`.
    pub(in crate::gpu_timeline) fn kernel_at(start_ns: i64) -> GpuOp {
        GpuOp {
            pid: 5,
            device: 0,
            context: 1,
            stream: 13,
            kind: causeway_model::GpuOpKind::Kernel,
            start_ns,
            end_ns: start_ns + 1_000_000,
            correlation: 1,
            name: "k".into(),
            bytes: 0,
            launch_tid: 0,
            launch_start_ns: 0,
            launch_end_ns: 0,
            launch_cbid: 0,
            launch_event_id: 0,
        }
    }

    fn op(start_s: f64) -> GpuOp {
        kernel_at((start_s * 1e9) as i64)
    }

    /// The library's own window note at `ts`: it records from here.
    fn armed_at(ts: i64) -> GpuTimelinePart {
        let n = GpuTimelineNote { pid: 5, ts_ns: ts, kind: "window_opened".into(), count: 0, detail: "armed".into() };
        GpuTimelinePart { notes: vec![n], ..Default::default() }
    }

    fn part(ops: Vec<GpuOp>) -> GpuTimelinePart {
        GpuTimelinePart { ops, ..Default::default() }
    }

    fn starts(p: &GpuTimelinePart) -> Vec<i64> {
        p.ops.iter().map(|o| o.start_ns / (S / 10)).collect()
    }

    #[test]
    fn a_window_stores_the_seconds_before_it_and_nothing_outside_its_span() {
        let mut a = Armed::new(5, 2000);
        let mut out = GpuTimelinePart::default();
        // the library records from 0.5 s; ops every second from 1 s to 10 s arrive by 10.5 s: none stored
        a.take(armed_at(S / 2), S / 2, &mut out);
        assert_eq!(out.notes.len(), 1);
        out.notes.clear();
        a.take(part((1..=10).map(|s| op(s as f64)).collect()), 10 * S + S / 2, &mut out);
        assert!(out.ops.is_empty() && out.notes.is_empty(), "{out:?}");
        assert_eq!(a.held(), 5, "6 s .. 10 s held (2 s before + 3 s late), the older forgotten");
        // a trigger at 10.5 s for 1 s: 8.5 .. 11.5 s stored
        a.open(10 * S + S / 2, 1000, "test", &mut out);
        assert_eq!(starts(&out), vec![90, 100]);
        assert_eq!(out.notes[0].kind, "window_opened");
        assert_eq!(out.notes[0].ts_ns, 8 * S + S / 2);
        assert!(out.notes[0].detail.contains("with the 2 s before it"), "{}", out.notes[0].detail);
        // later arrivals: those in the span stored, the rest held; the span closes at its end
        let mut later = GpuTimelinePart::default();
        a.take(part(vec![op(8.6), op(11.0), op(11.6), op(12.0)]), 12 * S, &mut later);
        assert_eq!(starts(&later), vec![86, 110]);
        assert_eq!(later.notes.len(), 1);
        assert_eq!((later.notes[0].kind.as_str(), later.notes[0].ts_ns), ("window_closed", 11 * S + S / 2));
        // a second window never reaches back over the first
        let mut second = GpuTimelinePart::default();
        a.open(12 * S, 1000, "again", &mut second);
        assert_eq!(second.notes[0].ts_ns, 11 * S + S / 2);
        assert_eq!(starts(&second), vec![116, 120]);
    }

    #[test]
    fn the_librarys_window_notes_become_one_armed_note_and_other_notes_pass() {
        let mut a = Armed::new(5, 1000);
        let n = |kind: &str| GpuTimelineNote { pid: 5, ts_ns: S, kind: kind.into(), count: 0, detail: "d".into() };
        let mut out = GpuTimelinePart::default();
        let p = GpuTimelinePart {
            notes: vec![n("window_opened"), n("dropped"), n("window_closed"), n("window_opened")],
            ..Default::default()
        };
        a.take(p, 2 * S, &mut out);
        let kinds: Vec<&str> = out.notes.iter().map(|n| n.kind.as_str()).collect();
        assert_eq!(kinds, vec!["armed", "dropped"]);
        assert_eq!(out.notes[0].count, 1000);
    }

    #[test]
    fn a_window_closed_early_and_an_extended_one() {
        let mut a = Armed::new(5, 1000);
        let mut out = GpuTimelinePart::default();
        // a window asked for before the library recorded starts when it was asked
        a.open(S, 1000, "early", &mut out);
        assert_eq!(out.notes[0].ts_ns, S);
        a.close(S + S / 2, "test", &mut out);
        a.take(armed_at(2 * S), 2 * S, &mut out);
        out.notes.clear();
        a.open(10 * S, 5000, "first", &mut out);
        assert!(a.is_open(11 * S));
        a.open(11 * S, 10_000, "more", &mut out);
        assert_eq!(out.notes[0].ts_ns, 9 * S, "1 s before, the library recording since 2 s");
        assert!(
            out.notes[1].detail.starts_with("the open window was extended to 10 s from now"),
            "{}",
            out.notes[1].detail
        );
        a.close(12 * S, "closed by test", &mut out);
        assert!(!a.is_open(12 * S));
        assert_eq!((out.notes[2].kind.as_str(), out.notes[2].ts_ns), ("window_closed", 12 * S));
        let mut after = GpuTimelinePart::default();
        a.take(part(vec![op(11.5), op(12.5)]), 13 * S, &mut after);
        assert_eq!(starts(&after), vec![115]);
    }

    #[test]
    fn between_sweeps_the_oldest_go_and_a_straggler_behind_a_newer_record_goes_at_the_next_sweep() {
        let mut a = Armed::new(5, 500);
        let mut out = GpuTimelinePart::default();
        a.take(armed_at(0), 0, &mut out);
        // at 10 s (a sweep): what started before 6.5 s goes (0.5 s before + 3 s late)
        a.take(part(vec![op(5.0), op(7.0), op(8.0), op(6.5)]), 10 * S, &mut out);
        assert_eq!(a.held(), 3);
        // at 10.6 s (no sweep): the oldest in front go, 6.5 s behind 8 s waits
        a.take(part(vec![]), 10 * S + 6 * S / 10, &mut out);
        assert_eq!(a.held(), 2, "7 s let go from the front; 6.5 s held behind 8 s");
        // a sweep a second after the last: the straggler goes too
        a.take(part(vec![]), 11 * S, &mut out);
        assert_eq!(a.held(), 1);
        assert!(out.ops.is_empty(), "nothing stored outside a window: {out:?}");
    }
}
