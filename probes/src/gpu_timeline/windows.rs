//! Windows on the device timeline of attached processes: a library the tracer loaded into a running
//! process records only while a window is open. The listener thread keeps, per attached process,
//! the window the trace asked for (opened once the library said hello), the windows asked for by
//! `causeway gpu-window` and the MCP server ([`WindowRequest`] on the tracer's own socket,
//! answered with a `WindowReply`), and closes every open window when the trace stops, waiting up to
//! [`CLOSE_WAIT`] for each library's `window_closed` note (its last records come before it).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use causeway_gpu_wire::{note, Control, Message, WindowRequest};
use causeway_store::GpuTimelinePart;

use super::coexist::Action;

/// A window "for the whole trace": closed when the trace stops.
pub const WHOLE_TRACE_MS: u64 = 100 * 365 * 24 * 3600 * 1000;
/// The longest window a request may open (an hour): every window is bounded.
pub const MAX_REQUEST_MS: u64 = 3600 * 1000;
/// How long the stop waits for the open windows' last records.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What the trace loop tells the listener thread.
pub enum Command {
    /// The library was loaded into `pid`: open a window of `window_ms` (`None`: stay dormant) once
    /// it says hello; `reason` is who and why.
    Attached { pid: u32, window_ms: Option<u64>, reason: String },
    /// Listen at this socket too (the path, removed at the end).
    Listen(OwnedFd, PathBuf),
}

/// One attached process.
#[derive(Default)]
struct AttachedProcess {
    /// A window to open once the library is connected.
    pending: Option<(u64, String)>,
    /// A window is open (its `window_opened` note came, or it was asked).
    open: bool,
    /// The stop's `CloseWindow` was sent.
    close_sent: bool,
}

/// The attached processes and their windows.
#[derive(Default)]
pub(super) struct Windows {
    attached: HashMap<u32, AttachedProcess>,
    queued: Vec<Action>,
    /// When the stop began waiting for the windows to close (monotonic ns).
    stop_began: Option<i64>,
}

impl Windows {
    pub fn command(&mut self, c: Command) {
        if let Command::Attached { pid, window_ms, reason } = c {
            let p = self.attached.entry(pid).or_default();
            p.pending = window_ms.map(|ms| (ms, reason));
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

    /// The controls to send now: pending windows of connected libraries, requests, and at the stop
    /// a close for every open window.
    pub fn due(&mut self, connected: &[u32], stopping: bool) -> Vec<Action> {
        let mut out = std::mem::take(&mut self.queued);
        for (&pid, p) in &mut self.attached {
            if !connected.contains(&pid) {
                continue;
            }
            if !stopping {
                if let Some((for_ms, reason)) = p.pending.take() {
                    p.open = true;
                    out.push(Action::Control(pid, Control::OpenWindow { for_ms, reason }));
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

    /// Answers a request: whether it was taken, and the line for the asker.
    pub fn request(&mut self, r: &WindowRequest, connected: &[u32]) -> (bool, String) {
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
        let reason = format!("opened by {}: {}", r.who, if r.why.is_empty() { "no reason given" } else { &r.why });
        if r.for_ms == 0 {
            p.open = false;
            let reason = format!("closed by {}: {}", r.who, if r.why.is_empty() { "no reason given" } else { &r.why });
            self.queued.push(Action::Control(pid, Control::CloseWindow { reason }));
            return (true, format!("the window on pid {pid} is closing (its window_closed note is in the trace)"));
        }
        let for_ms = r.for_ms.min(MAX_REQUEST_MS);
        p.open = true;
        self.queued.push(Action::Control(pid, Control::OpenWindow { for_ms, reason }));
        let capped = if for_ms < r.for_ms { " (the longest a request may open)" } else { "" };
        (
            true,
            format!(
                "a window of {} s is opening on pid {pid}{capped}, traced by pid {} (its window_opened note is in the trace)",
                for_ms as f64 / 1000.0,
                std::process::id()
            ),
        )
    }
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

/// The tracers' sockets to ask: `explicit`, else every `gpu-*.sock` of the runtime directory.
fn sockets(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let dir = crate::labels::default_socket_path().parent().map(Path::to_path_buf).unwrap_or_default();
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| n.as_bytes().starts_with(b"gpu-") && n.as_bytes().ends_with(b".sock"))
        })
        .collect();
    out.sort();
    out
}

/// Asks the tracer that attached `request.pid` to open (or, `for_ms` 0, close) a window: its
/// answer, or why no tracer took it.
pub fn request_window(socket: Option<&Path>, request: &WindowRequest) -> Result<String, String> {
    let candidates = sockets(socket);
    if candidates.is_empty() {
        return Err(format!(
            "no tracer is running here with a device-timeline socket: attach first with `causeway trace --pid {} --gpu-timeline --gpu-dormant`",
            request.pid
        ));
    }
    let mut said = Vec::new();
    for path in candidates {
        match ask(&path, request) {
            Ok((true, detail)) => return Ok(detail),
            Ok((false, detail)) => said.push(detail),
            Err(e) => said.push(format!("{}: {e}", path.display())),
        }
    }
    Err(said.join("; "))
}

/// One request to one tracer socket, and its reply (3 s at most).
fn ask(path: &Path, request: &WindowRequest) -> Result<(bool, String), String> {
    let fd = connect(path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    causeway_gpu_wire::encode_all(0, &mut 0, &Message::WindowRequest(request.clone()), &mut out);
    for m in &out {
        // SAFETY: m is a live buffer; fd a connected socket.
        if unsafe { libc::send(fd.as_raw_fd(), m.as_ptr().cast(), m.len(), libc::MSG_NOSIGNAL) } < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    if unsafe { libc::poll(&mut pfd, 1, 3000) } <= 0 {
        return Err("no answer within 3 s".into());
    }
    let mut buf = vec![0u8; causeway_gpu_wire::MAX_MESSAGE];
    // SAFETY: buf is valid for writes of its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n <= 0 {
        return Err("the tracer closed the connection without answering".into());
    }
    match causeway_gpu_wire::decode(&buf[..n as usize]) {
        Ok((_, Message::WindowReply { ok, detail })) => Ok((ok, detail)),
        Ok(_) => Err("an unexpected answer".into()),
        Err(e) => Err(format!("a malformed answer: {e}")),
    }
}

fn connect(path: &Path) -> std::io::Result<OwnedFd> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(std::io::Error::other("socket path too long"));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain socket(2); owned right after.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len as libc::socklen_t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
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
        w.command(Command::Attached { pid: 7, window_ms: Some(WHOLE_TRACE_MS), reason: "the trace".into() });
        assert!(w.due(&[], false).is_empty(), "not connected yet");
        let a = w.due(&[7], false);
        assert!(matches!(&a[..], [Action::Control(7, Control::OpenWindow { .. })]), "{a:?}");
        assert!(w.due(&[7], false).is_empty(), "opened once");
        assert!(!w.closed_at_stop(0, &[7]), "an open window waits at the stop");
        let a = w.due(&[7], true);
        assert!(matches!(&a[..], [Action::Control(7, Control::CloseWindow { .. })]), "{a:?}");
        assert!(w.closed_at_stop(CLOSE_WAIT.as_nanos() as i64, &[7]), "not longer than CLOSE_WAIT");
    }

    #[test]
    fn requests_are_bounded_and_only_for_attached_connected_processes() {
        let mut w = Windows::default();
        assert!(!w.request(&req(9, 1000), &[9]).0, "a launched process records its whole run");
        assert!(!w.request(&req(8, 1000), &[]).0, "not ours");
        w.command(Command::Attached { pid: 8, window_ms: None, reason: String::new() });
        assert!(!w.request(&req(8, 1000), &[]).0, "not connected");
        let (ok, said) = w.request(&req(8, 10 * MAX_REQUEST_MS), &[8]);
        assert!(ok && said.contains("3600 s") && said.contains("longest"), "{said}");
        let a = w.due(&[8], false);
        assert!(
            matches!(&a[..], [Action::Control(8, Control::OpenWindow { for_ms, reason })] if *for_ms == MAX_REQUEST_MS && reason.contains("cli: a dip")),
            "{a:?}"
        );
        assert!(w.request(&req(8, 0), &[8]).0);
        assert!(matches!(&w.due(&[8], false)[..], [Action::Control(8, Control::CloseWindow { .. })]));
    }
}
