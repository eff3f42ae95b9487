//! Windows on the device timeline of attached processes: a library the tracer loaded into a running
//! process records only while a window is open. The listener thread keeps, per attached process,
//! the window the trace asked for (opened once the library said hello), the windows asked for by
//! `causeway gpu-window` and the MCP server ([`WindowRequest`] on the tracer's own socket,
//! answered with a `WindowReply`), the windows the trace's triggers open ([`Command::Trigger`],
//! each stored as a `trigger` note), and closes every open window when the trace stops, waiting up
//! to [`CLOSE_WAIT`] for each library's `window_closed` note (its last records come before it).
//!
//! With a pre-trigger buffer (`--gpu-pre-trigger`) the library's own window is open from the
//! attach on and every window is a span of what the tracer keeps ([`Armed`]): the records of the
//! seconds before it opened are stored with it.

use std::collections::HashMap;
use std::os::fd::RawFd;

use causeway_gpu_wire::{note, Control, Message, WindowRequest};
use causeway_model::GpuTimelineNote;
use causeway_store::GpuTimelinePart;

use super::coexist::Action;
use super::pretrigger::Armed;
use super::triggers::Fired;

/// A window "for the whole trace": closed when the trace stops.
pub const WHOLE_TRACE_MS: u64 = 100 * 365 * 24 * 3600 * 1000;
/// The longest window a request may open (an hour): every window is bounded.
pub const MAX_REQUEST_MS: u64 = 3600 * 1000;
/// How long the stop waits for the open windows' last records.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What the trace loop tells the listener thread.
pub enum Command {
    /// The library was loaded into `pid`: open a window of `window_ms` (`None`: stay dormant) once
    /// it says hello; `reason` is who and why. With `pre_ms` > 0 the library records from its hello
    /// on into a pre-trigger buffer of that many ms, and windows are spans of it.
    Attached { pid: u32, window_ms: Option<u64>, reason: String, pre_ms: u64 },
    /// Listen at this socket too (the path, removed at the end).
    Listen(std::os::fd::OwnedFd, std::path::PathBuf),
    /// A trigger fired: a window on the attached processes it concerns (every attached one when
    /// it names none of them).
    Trigger(Fired),
}

/// One attached process.
#[derive(Default)]
struct AttachedProcess {
    /// A window to open once the library is connected.
    pending: Option<(u64, String)>,
    /// A window is open (its `window_opened` note came, or it was asked).
    open: bool,
    /// Until when the open window was asked for (unix ns).
    until: i64,
    /// The stop's `CloseWindow` was sent.
    close_sent: bool,
    /// Its pre-trigger buffer, and the window the trace asked for to open on it at the hello.
    armed: Option<Armed>,
    armed_window: Option<(u64, String)>,
}

/// How [`AttachedProcess::open_window`] opened a window, and whether one was open already.
enum Opened {
    /// A span of the pre-trigger buffer.
    Armed { extended: bool },
    /// An `OpenWindow` control to the library.
    Asked { extended: bool },
}

/// A window asked for: from `span_start` (of a pre-trigger buffer) or `now` (unix ns), `for_ms` long.
struct WindowAsk<'a> {
    span_start: i64,
    now: i64,
    for_ms: u64,
    reason: &'a str,
}

impl AttachedProcess {
    /// Opens a window on `pid`, the one way triggers and requests both do: a span of its
    /// pre-trigger buffer from `ask.span_start` when it is armed (`out` takes the span's notes),
    /// else an `OpenWindow` control to its library ([`Self::ask_library`]), queued on `queued`.
    fn open_window(
        &mut self,
        pid: u32,
        ask: WindowAsk<'_>,
        queued: &mut Vec<Action>,
        out: &mut GpuTimelinePart,
    ) -> Opened {
        if let Some(a) = self.armed.as_mut() {
            let extended = a.is_open(ask.span_start);
            a.open(ask.span_start, ask.for_ms, ask.reason, out);
            return Opened::Armed { extended };
        }
        let extended = self.open;
        queued.push(self.ask_library(pid, ask.now, ask.for_ms, ask.reason.to_string()));
        Opened::Asked { extended }
    }

    /// The `OpenWindow` control that opens the library's own window on `pid` for `for_ms` from
    /// `now` (unix ns), the window then taken as open until its end.
    fn ask_library(&mut self, pid: u32, now: i64, for_ms: u64, reason: String) -> Action {
        self.open = true;
        self.until = now.saturating_add(ms_to_ns(for_ms));
        Action::Control(pid, Control::OpenWindow { for_ms, reason })
    }
}

/// The attached processes and their windows.
#[derive(Default)]
pub(super) struct Windows {
    attached: HashMap<u32, AttachedProcess>,
    queued: Vec<Action>,
    /// What the armed buffers released and the trigger notes, per process, to store.
    released: HashMap<u32, GpuTimelinePart>,
    /// When the stop began waiting for the windows to close (monotonic ns).
    stop_began: Option<i64>,
}

impl Windows {
    pub fn command(&mut self, c: Command, connected: &[u32], now: i64) {
        match c {
            Command::Attached { pid, window_ms, reason, pre_ms } => {
                let p = self.attached.entry(pid).or_default();
                if pre_ms > 0 {
                    p.armed = Some(Armed::new(pid, pre_ms));
                    p.armed_window = window_ms.map(|ms| (ms, reason));
                    p.pending = Some((
                        WHOLE_TRACE_MS,
                        format!("armed by the trace: a pre-trigger buffer of {} s", pre_ms as f64 / 1000.0),
                    ));
                } else {
                    p.pending = window_ms.map(|ms| (ms, reason));
                }
            }
            Command::Trigger(fired) => self.trigger(&fired, connected, now),
            Command::Listen(..) => {}
        }
    }

    /// A trigger: a window on each attached, connected process it concerns, and a `trigger` note
    /// saying what was seen and what it opened. `now`: unix ns.
    fn trigger(&mut self, fired: &Fired, connected: &[u32], now: i64) {
        let window_ms = fired.window_ms;
        let mut live: Vec<u32> = self.attached.keys().copied().filter(|p| connected.contains(p)).collect();
        live.sort_unstable();
        let mut targets: Vec<u32> = live.iter().copied().filter(|p| fired.pids.contains(p)).collect();
        let mut scope = String::new();
        if targets.is_empty() {
            targets = live;
            if !fired.pids.is_empty() {
                let named: Vec<String> = fired.pids.iter().map(u32::to_string).collect();
                scope = format!(" (pid {} not attached: on every attached process)", named.join(", "));
            }
        }
        let reason = GpuTimelineNote::trigger_reason(fired.kind.name(), &fired.what);
        let secs = window_ms as f64 / 1000.0;
        if targets.is_empty() {
            let pid = fired.pids.first().copied().unwrap_or(0);
            let n = GpuTimelineNote {
                pid,
                ts_ns: fired.ts_ns,
                kind: note::TRIGGER.into(),
                count: 0,
                detail: format!("{reason}: no attached process is connected, no window opened"),
            };
            self.released.entry(pid).or_default().notes.push(n);
            return;
        }
        for pid in targets {
            let Some(p) = self.attached.get_mut(&pid) else { continue };
            let out = self.released.entry(pid).or_default();
            let later = now.saturating_add(ms_to_ns(window_ms));
            let opened = if p.armed.is_none() && p.open && p.until >= later {
                format!("a window was already open on pid {pid}: left as it was")
            } else {
                // (an open window ending sooner is extended: the library's window runs to the later end)
                let ask = WindowAsk { span_start: fired.ts_ns.min(now), now, for_ms: window_ms, reason: &reason };
                match p.open_window(pid, ask, &mut self.queued, out) {
                    Opened::Armed { extended: true } => {
                        format!("the open window on pid {pid} was extended by {secs} s")
                    }
                    Opened::Armed { extended: false } => {
                        format!(
                            "a window of {secs} s opened on pid {pid}, with the pre-trigger buffer's seconds before it"
                        )
                    }
                    Opened::Asked { extended: true } => {
                        format!("the open window on pid {pid} was extended to {secs} s from now")
                    }
                    Opened::Asked { extended: false } => format!("a window of {secs} s opened on pid {pid}"),
                }
            };
            out.notes.push(GpuTimelineNote {
                pid,
                ts_ns: fired.ts_ns,
                kind: note::TRIGGER.into(),
                count: i64::try_from(window_ms).unwrap_or(i64::MAX),
                detail: format!("{reason}{scope}: {opened}"),
            });
        }
    }

    /// What the libraries said: windows opened and closed.
    pub fn saw(&mut self, parts: &HashMap<u32, GpuTimelinePart>) {
        for (pid, part) in parts {
            let Some(p) = self.attached.get_mut(pid) else { continue };
            for n in &part.notes {
                match n.kind.as_str() {
                    note::WINDOW_OPENED => p.open = true,
                    note::WINDOW_CLOSED | note::OFF | note::STOPPED => p.open = false,
                    _ => {}
                }
            }
        }
    }

    /// What to store of this round's `parts`: an armed process's records only in its windows'
    /// spans (the rest held), plus what the windows and triggers released. At the stop the armed
    /// windows still open close. `now`: unix ns.
    pub fn release(&mut self, parts: &mut HashMap<u32, GpuTimelinePart>, now: i64, stopping: bool) {
        for (pid, p) in &mut self.attached {
            let Some(a) = p.armed.as_mut() else { continue };
            let part = parts.remove(pid).unwrap_or_default();
            let out = self.released.entry(*pid).or_default();
            a.take(part, now, out);
            if stopping {
                a.close(now, "the trace ended", out);
            }
        }
        for (pid, r) in self.released.drain() {
            let to = parts.entry(pid).or_default();
            to.ops.extend(r.ops);
            to.clock_syncs.extend(r.clock_syncs);
            to.devices.extend(r.devices);
            to.notes.extend(r.notes);
        }
    }

    /// The controls to send now: pending windows of connected libraries, requests, and at the stop
    /// a close for every open window. `now`: unix ns.
    pub fn due(&mut self, connected: &[u32], stopping: bool, now: i64) -> Vec<Action> {
        let mut out = std::mem::take(&mut self.queued);
        for (&pid, p) in &mut self.attached {
            if !connected.contains(&pid) {
                continue;
            }
            if !stopping {
                if let Some((for_ms, reason)) = p.pending.take() {
                    // the library's own window (on an armed process, the one it records the
                    // pre-trigger buffer in), then the trace's window as a span of that buffer
                    out.push(p.ask_library(pid, now, for_ms, reason));
                    if let (Some(a), Some((ms, why))) = (p.armed.as_mut(), p.armed_window.take()) {
                        a.open(now, ms, &why, self.released.entry(pid).or_default());
                    }
                }
            } else if p.open && !p.close_sent {
                p.close_sent = true;
                out.push(Action::Control(pid, Control::CloseWindow { reason: "the trace ended".into() }));
            }
        }
        out
    }

    /// Whether the stop may finish: no attached library with a window open is still connected, or
    /// [`CLOSE_WAIT`] passed.
    pub fn closed_at_stop(&mut self, now: i64, connected: &[u32]) -> bool {
        let waiting = self.attached.iter().any(|(pid, p)| p.open && connected.contains(pid));
        if !waiting {
            return true;
        }
        let began = *self.stop_began.get_or_insert(now);
        now - began >= CLOSE_WAIT.as_nanos() as i64
    }

    /// Answers a request: whether it was taken, and the line for the asker. `now`: unix ns.
    pub fn request(&mut self, r: &WindowRequest, connected: &[u32], now: i64) -> (bool, String) {
        let pid = r.pid;
        let Some(p) = self.attached.get_mut(&pid) else {
            if connected.contains(&pid) {
                return (
                    false,
                    format!("pid {pid} records its whole run (launched with --gpu-timeline): no window needed"),
                );
            }
            return (false, format!("pid {pid} is not attached to the tracer pid {}", std::process::id()));
        };
        if !connected.contains(&pid) {
            return (
                false,
                format!(
                    "the injection library in pid {pid} is not connected to the tracer (not yet, or it turned off)"
                ),
            );
        }
        let who =
            |verb: &str| format!("{verb} by {}: {}", r.who, if r.why.is_empty() { "no reason given" } else { &r.why });
        if r.for_ms == 0 {
            let reason = who("closed");
            if let Some(a) = p.armed.as_mut() {
                a.close(now, &reason, self.released.entry(pid).or_default());
            } else {
                p.open = false;
                self.queued.push(Action::Control(pid, Control::CloseWindow { reason }));
            }
            return (true, format!("the window on pid {pid} is closing (its window_closed note is in the trace)"));
        }
        let reason = who("opened");
        let for_ms = r.for_ms.min(MAX_REQUEST_MS);
        let out = self.released.entry(pid).or_default();
        let ask = WindowAsk { span_start: now, now, for_ms, reason: &reason };
        let before = match p.open_window(pid, ask, &mut self.queued, out) {
            Opened::Armed { .. } => " with the pre-trigger buffer's seconds before it",
            Opened::Asked { .. } => "",
        };
        let capped = if for_ms < r.for_ms { " (the longest a request may open)" } else { "" };
        (
            true,
            format!(
                "a window of {} s is opening on pid {pid}{capped}{before}, traced by pid {} (its window_opened note is in the trace)",
                for_ms as f64 / 1000.0,
                std::process::id()
            ),
        )
    }
}

/// `ms` in ns, saturating.
fn ms_to_ns(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX)
}

/// Sends a `WindowReply` on a client's socket (non-blocking).
pub(super) fn reply(fd: RawFd, ok: bool, detail: &str) {
    let mut out = Vec::new();
    causeway_gpu_wire::encode_all(0, &mut 0, &Message::WindowReply { ok, detail: detail.to_string() }, &mut out);
    for m in out {
        // SAFETY: m is a live buffer of its length; fd is a connected socket.
        unsafe { libc::send(fd, m.as_ptr().cast(), m.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pid: u32, for_ms: u64) -> WindowRequest {
        WindowRequest { pid, for_ms, who: "cli".into(), why: "a dip".into() }
    }

    #[test]
    fn a_window_opens_once_the_library_is_connected_and_closes_at_the_stop() {
        let mut w = Windows::default();
        w.command(
            Command::Attached { pid: 7, window_ms: Some(WHOLE_TRACE_MS), reason: "the trace".into(), pre_ms: 0 },
            &[],
            0,
        );
        assert!(w.due(&[], false, 0).is_empty(), "not connected yet");
        let a = w.due(&[7], false, 0);
        assert!(matches!(&a[..], [Action::Control(7, Control::OpenWindow { .. })]), "{a:?}");
        assert!(w.due(&[7], false, 0).is_empty(), "opened once");
        assert!(!w.closed_at_stop(0, &[7]), "an open window waits at the stop");
        let a = w.due(&[7], true, 0);
        assert!(matches!(&a[..], [Action::Control(7, Control::CloseWindow { .. })]), "{a:?}");
        assert!(w.closed_at_stop(CLOSE_WAIT.as_nanos() as i64, &[7]), "not longer than CLOSE_WAIT");
    }

    #[test]
    fn requests_are_bounded_and_only_for_attached_connected_processes() {
        let mut w = Windows::default();
        assert!(!w.request(&req(9, 1000), &[9], 0).0, "a launched process records its whole run");
        assert!(!w.request(&req(8, 1000), &[], 0).0, "not ours");
        w.command(Command::Attached { pid: 8, window_ms: None, reason: String::new(), pre_ms: 0 }, &[], 0);
        assert!(!w.request(&req(8, 1000), &[], 0).0, "not connected");
        let (ok, said) = w.request(&req(8, 10 * MAX_REQUEST_MS), &[8], 0);
        assert!(ok && said.contains("3600 s") && said.contains("longest"), "{said}");
        let a = w.due(&[8], false, 0);
        assert!(
            matches!(&a[..], [Action::Control(8, Control::OpenWindow { for_ms, reason })] if *for_ms == MAX_REQUEST_MS && reason.contains("cli: a dip")),
            "{a:?}"
        );
        assert!(w.request(&req(8, 0), &[8], 0).0);
        assert!(matches!(&w.due(&[8], false, 0)[..], [Action::Control(8, Control::CloseWindow { .. })]));
    }

    fn fired(pids: Vec<u32>) -> Fired {
        Fired {
            kind: super::super::triggers::TriggerKind::UtilDrop,
            ts_ns: 5_000_000_000,
            pids,
            what: "GPU 0 fell".into(),
            window_ms: 2000,
        }
    }

    fn notes_of(w: &mut Windows, pid: u32) -> Vec<GpuTimelineNote> {
        let mut parts = HashMap::new();
        w.release(&mut parts, 5_000_000_000, false);
        parts.remove(&pid).map(|p| p.notes).unwrap_or_default()
    }

    #[test]
    fn a_trigger_opens_a_window_on_the_processes_it_concerns_and_says_so() {
        let mut w = Windows::default();
        for pid in [3, 4] {
            w.command(Command::Attached { pid, window_ms: None, reason: String::new(), pre_ms: 0 }, &[], 0);
        }
        w.command(Command::Trigger(fired(vec![4])), &[3, 4], 0);
        let a = w.due(&[3, 4], false, 0);
        assert!(
            matches!(&a[..], [Action::Control(4, Control::OpenWindow { for_ms: 2000, reason })] if reason == "trigger util: GPU 0 fell"),
            "{a:?}"
        );
        let n = notes_of(&mut w, 4);
        assert_eq!((n[0].kind.as_str(), n[0].ts_ns, n[0].count), ("trigger", 5_000_000_000, 2000));
        assert_eq!(n[0].detail, "trigger util: GPU 0 fell: a window of 2 s opened on pid 4");
        // a second trigger while it is open leaves it; one naming no attached process goes to all
        w.command(Command::Trigger(fired(vec![99])), &[3, 4], 0);
        let a = w.due(&[3, 4], false, 0);
        assert!(matches!(&a[..], [Action::Control(3, Control::OpenWindow { .. })]), "{a:?}");
        let mut parts = HashMap::new();
        w.release(&mut parts, 0, false);
        assert!(
            parts[&4].notes[0].detail.ends_with(
                "(pid 99 not attached: on every attached process): a window was already open on pid 4: left as it was"
            ),
            "{:?}",
            parts[&4].notes
        );
        assert!(parts[&3].notes[0].detail.ends_with("a window of 2 s opened on pid 3"), "{:?}", parts[&3].notes);
        // 1 s later the window asked for at 0 ends sooner than a new one would: extended
        w.command(Command::Trigger(fired(vec![4])), &[3, 4], 1_000_000_000);
        let a = w.due(&[3, 4], false, 1_000_000_000);
        assert!(matches!(&a[..], [Action::Control(4, Control::OpenWindow { for_ms: 2000, .. })]), "{a:?}");
        let mut parts = HashMap::new();
        w.release(&mut parts, 0, false);
        assert!(
            parts[&4].notes[0].detail.ends_with("the open window on pid 4 was extended to 2 s from now"),
            "{:?}",
            parts[&4].notes
        );
    }

    #[test]
    fn an_armed_process_stores_only_its_windows_with_the_seconds_before() {
        let s = 1_000_000_000i64;
        let mut w = Windows::default();
        w.command(Command::Attached { pid: 5, window_ms: None, reason: String::new(), pre_ms: 1000 }, &[], 0);
        let a = w.due(&[5], false, 0);
        assert!(
            matches!(&a[..], [Action::Control(5, Control::OpenWindow { for_ms: WHOLE_TRACE_MS, reason })] if reason.contains("pre-trigger buffer of 1 s")),
            "the library records from the hello on: {a:?}"
        );
        let op = super::super::pretrigger::tests::kernel_at;
        let hello = GpuTimelineNote { pid: 5, ts_ns: s, kind: "window_opened".into(), count: 0, detail: String::new() };
        let mut parts: HashMap<u32, GpuTimelinePart> = HashMap::new();
        parts.insert(
            5,
            GpuTimelinePart { ops: vec![op(2 * s), op(4 * s + s / 2)], notes: vec![hello], ..Default::default() },
        );
        w.release(&mut parts, 4 * s + s / 2, false);
        assert!(parts[&5].ops.is_empty(), "held, not stored: {parts:?}");
        assert_eq!(parts[&5].notes[0].kind, "armed");
        w.command(Command::Trigger(Fired { window_ms: 500, ..fired(vec![]) }), &[5], 5 * s);
        let mut parts = HashMap::new();
        w.release(&mut parts, 5 * s, false);
        let p = &parts[&5];
        assert_eq!(p.ops.iter().map(|o| o.start_ns).collect::<Vec<_>>(), vec![4 * s + s / 2], "only the second before");
        let kinds: Vec<&str> = p.notes.iter().map(|n| n.kind.as_str()).collect();
        assert_eq!(kinds, vec!["window_opened", "trigger"]);
        assert_eq!(p.notes[0].ts_ns, 4 * s);
        assert!(w.due(&[5], false, 5 * s).is_empty(), "no control: the library records already");
        let mut parts = HashMap::new();
        w.release(&mut parts, 6 * s, true);
        assert_eq!((parts[&5].notes[0].kind.as_str(), parts[&5].notes[0].ts_ns), ("window_closed", 5 * s + s / 2));
    }
}
