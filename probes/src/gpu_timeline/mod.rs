//! The tracer's end of the device timeline (`trace --gpu-timeline`): the injection library
//! (`inject/`, loaded by the CUDA driver through `CUDA_INJECTION64_PATH`) sends what CUPTI recorded
//! over a unix `SOCK_SEQPACKET` socket this module listens on (`CAUSEWAY_GPU_SOCKET`); one thread
//! receives every process's messages, [`convert::ProcessTimeline`] turns them into stored rows, and
//! the trace loop writes them (`EventSink::write_gpu_timeline`).
//!
//! The socket needs no eBPF, so the device view works where the probes cannot attach. It is
//! owner-only (0600), like the label socket: what arrives is data in the trace. The same thread
//! applies the coexistence rules ([`coexist`]): the trace loop reports the CUPTI control calls the
//! probes saw ([`GpuTimelineSocket::watch`]), and the thread tells a library to step aside or
//! resume over its connection.
//!
//! A process already running gets the library through ptrace ([`attach`]); such a library is
//! dormant until a window opens: the thread opens the window the trace asked for once the library
//! has said hello ([`Command::Attached`]), serves `causeway gpu-window` and the MCP server's
//! [`causeway_gpu_wire::WindowRequest`]s on the same socket ([`request_window`]), opens the windows
//! the trace's [`triggers`] ask for ([`Command::Trigger`]), keeps the pre-trigger buffer of a
//! process attached with one (`pretrigger.rs`), and closes every open window when the trace stops,
//! waiting up to two seconds for the records.

pub mod attach;
pub mod coexist;
pub mod convert;
mod pretrigger;
pub mod triggers;
mod window_client;
mod windows;

pub use window_client::request_window;
pub use windows::{Command, WHOLE_TRACE_MS};

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use causeway_store::GpuTimelinePart;
use tokio::sync::mpsc;

use convert::ProcessTimeline;

/// The variable the CUDA driver reads at `cuInit`: the injection library to load.
pub const INJECTION_ENV: &str = "CUDA_INJECTION64_PATH";
/// The variable that tells the injection library where the tracer listens.
pub const SOCKET_ENV: &str = "CAUSEWAY_GPU_SOCKET";
/// The variable naming the injection library when it is not beside the `causeway` binary.
pub const LIBRARY_ENV: &str = "CAUSEWAY_INJECT_LIB";
/// The injection library's file name.
pub const LIBRARY_FILE: &str = "libcauseway_inject.so";

/// `trace --gpu-timeline`.
#[derive(Debug, Clone, Default)]
pub struct GpuTimelineOptions {
    /// Record the device's own timeline of the launched command.
    pub enabled: bool,
    /// The injection library (`None`: [`find_library`]).
    pub library: Option<PathBuf>,
    /// Where to listen (`None`: a fresh path under the runtime directory).
    pub socket: Option<PathBuf>,
    /// For a running process (`--pid`, attached through ptrace): the window opened at the attach,
    /// ms (`None`: the whole trace); with `dormant`, none.
    pub window_ms: Option<u64>,
    /// Attach dormant: no window until `causeway gpu-window`, an MCP client or a trigger opens one.
    pub dormant: bool,
    /// `--gpu-trigger`: what opens windows on attached processes, how long, and the pre-trigger
    /// buffer.
    pub triggers: triggers::TriggerOptions,
}

/// The injection library: `explicit`, else `CAUSEWAY_INJECT_LIB`, else beside the running binary
/// (where `cargo build` and the install put it), else in `../lib/causeway/` of it.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else {
        if let Some(p) = std::env::var_os(LIBRARY_ENV).filter(|v| !v.is_empty()) {
            candidates.push(PathBuf::from(p));
        }
        if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
            candidates.push(dir.join(LIBRARY_FILE));
            candidates.push(dir.join("../lib/causeway").join(LIBRARY_FILE));
            // a test binary runs from target/release/deps
            candidates.push(dir.join("..").join(LIBRARY_FILE));
        }
    }
    for c in candidates {
        if c.is_file() {
            return Ok(std::fs::canonicalize(&c).unwrap_or(c));
        }
        tried.push(c.display().to_string());
    }
    Err(format!(
        "--gpu-timeline needs the injection library {LIBRARY_FILE} (build it with `cargo build --release --workspace`, or name it with --gpu-library or {LIBRARY_ENV}); looked at {}",
        tried.join(", ")
    ))
}

/// The listening socket and its receiving thread.
pub struct GpuTimelineSocket {
    /// Where it listens.
    pub path: PathBuf,
    /// The injection library.
    pub library: PathBuf,
    /// Attached processes, windows, more listeners ([`Command`]).
    pub commands: std::sync::mpsc::Sender<Command>,
    /// What arrived, ready to store.
    pub news: mpsc::UnboundedReceiver<GpuTimelinePart>,
    /// What the thread's coexistence rules must know (CUPTI control calls, processes calling CUDA).
    pub watch: std::sync::mpsc::Sender<coexist::Watch>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GpuTimelineSocket {
    /// Listen at `path` (`None`: `gpu-<pid>.sock` in the runtime directory of the label socket) for
    /// the injection library `library`.
    pub fn open(path: Option<&Path>, library: &Path) -> anyhow::Result<GpuTimelineSocket> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => crate::labels::default_socket_path().with_file_name(format!("gpu-{}.sock", std::process::id())),
        };
        let listener = listen(&path)?;
        let (tx, news) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let offset = crate::decode::mono_to_realtime_offset();
        let flag = stop.clone();
        let (watch, watched) = std::sync::mpsc::channel();
        let (commands, commanded) = std::sync::mpsc::channel();
        let rules = coexist::Coexist::new(library);
        let thread = std::thread::Builder::new()
            .name("cw-gpu-timeline".into())
            .spawn(move || serve(listener, &flag, &tx, offset, &watched, &commanded, rules))?;
        Ok(GpuTimelineSocket {
            path,
            library: library.to_path_buf(),
            commands,
            news,
            watch,
            stop,
            thread: Some(thread),
        })
    }

    /// Listen at `path` too (a socket in an attached process's own mount namespace).
    pub fn listen_also(&self, path: &Path) -> anyhow::Result<()> {
        let fd = listen(path)?;
        let _ = self.commands.send(Command::Listen(fd, path.to_path_buf()));
        Ok(())
    }

    /// Stop listening after taking in everything already sent (a process that exited has
    /// flushed before its socket closed), and hand over what remains.
    pub fn close(mut self) -> Vec<GpuTimelinePart> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut rest = Vec::new();
        while let Ok(p) = self.news.try_recv() {
            rest.push(p);
        }
        rest
    }
}

impl Drop for GpuTimelineSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn errno_err(what: &str) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", std::io::Error::last_os_error())
}

/// The address of the unix socket at `path`, and its length.
pub(crate) fn unix_addr(path: &Path) -> std::io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(std::io::Error::other(format!("{} is too long for a unix socket path", path.display())));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// A bound, listening, non-blocking `SOCK_SEQPACKET` socket at `path` (mode 0600; a stale file is
/// replaced).
pub(crate) fn listen(path: &Path) -> anyhow::Result<OwnedFd> {
    let (addr, len) = unix_addr(path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    // SAFETY: plain socket(2) call; the fd is owned right after.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(errno_err("cannot create the device-timeline socket"));
    }
    // SAFETY: fd was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: addr is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
        return Err(errno_err(&format!("cannot listen on {}", path.display())));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    // SAFETY: fd is a bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        return Err(errno_err(&format!("cannot listen on {}", path.display())));
    }
    Ok(fd)
}

/// One connected process.
struct Conn {
    fd: OwnedFd,
    /// The peer's pid (`SO_PEERCRED`), else the messages' own.
    pid: u32,
    timeline: Option<ProcessTimeline>,
    malformed: u64,
    first_error: String,
    /// A `gpu-window` client, not a library: answered and closed.
    client: bool,
}

fn peer_pid(fd: RawFd) -> u32 {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred is valid for writes of `len` bytes; fd is a connected unix socket.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len) };
    if rc == 0 {
        cred.pid as u32
    } else {
        0
    }
}

fn now_mono() -> i64 {
    crate::labels::monotonic_ns()
}

/// The receiving loop: accept processes, read their packets, convert, apply the coexistence rules,
/// hand over; at `stop`, drain what is queued and finish every process.
fn serve(
    listener: OwnedFd,
    stop: &AtomicBool,
    tx: &mpsc::UnboundedSender<GpuTimelinePart>,
    offset: i64,
    watched: &std::sync::mpsc::Receiver<coexist::Watch>,
    commanded: &std::sync::mpsc::Receiver<Command>,
    mut rules: coexist::Coexist,
) {
    let mut listeners = vec![(listener, PathBuf::new())];
    let mut conns: Vec<Conn> = Vec::new();
    let mut buf = vec![0u8; causeway_gpu_wire::MAX_MESSAGE + 1024];
    let mut last_tick = now_mono();
    let mut windows = windows::Windows::default();
    loop {
        while let Ok(c) = commanded.try_recv() {
            match c {
                Command::Listen(fd, path) => listeners.push((fd, path)),
                c => windows.command(c, &conns_view(&conns), now_mono() + offset),
            }
        }
        // at the stop, the open windows are closed first and their last records waited for
        let stopping = stop.load(Ordering::Relaxed) && windows.closed_at_stop(now_mono(), &conns_view(&conns));
        let mut fds: Vec<libc::pollfd> = listeners
            .iter()
            .map(|(l, _)| l.as_raw_fd())
            .chain(conns.iter().map(|c| c.fd.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        let wait_ms = if stopping {
            0
        } else if stop.load(Ordering::Relaxed) {
            20
        } else {
            100
        };
        // SAFETY: fds is a valid array of pollfd of that length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
        for (l, _) in &listeners {
            accept_all(l, &mut conns);
        }
        let mut part_by_pid: HashMap<u32, GpuTimelinePart> = HashMap::new();
        let mut closed = Vec::new();
        let mut requests = Vec::new();
        for (i, c) in conns.iter_mut().enumerate() {
            if !read_all(c, &mut buf, offset, part_by_pid.entry(c.pid).or_default(), &mut requests) {
                closed.push(i);
            }
        }
        let now = now_mono();
        for (fd, request) in requests {
            let (ok, detail) = windows.request(&request, &conns_view(&conns), now + offset);
            windows::reply(fd, ok, &detail);
        }
        windows.saw(&part_by_pid);
        let mut actions = Vec::new();
        while let Ok(w) = watched.try_recv() {
            actions.extend(rules.on(w, |pid| conns.iter().any(|c| c.pid == pid)));
        }
        actions.extend(rules.tick(now + offset));
        actions.extend(windows.due(&conns_view(&conns), stop.load(Ordering::Relaxed), now + offset));
        for a in actions {
            match a {
                coexist::Action::Note(n) => part_by_pid.entry(n.pid).or_default().notes.push(n),
                coexist::Action::Control(pid, control) => {
                    for c in conns.iter().filter(|c| c.pid == pid) {
                        send_control(c.fd.as_raw_fd(), &control);
                    }
                }
            }
        }
        let tick = now - last_tick >= 500_000_000;
        if tick {
            last_tick = now;
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let out = part_by_pid.entry(c.pid).or_default();
            if let Some(t) = c.timeline.as_mut() {
                if stopping || closed.contains(&i) {
                    t.finish(now, out);
                } else if tick {
                    t.tick(now, out);
                }
            }
            if (stopping || closed.contains(&i)) && c.malformed > 0 {
                out.notes.push(causeway_model::GpuTimelineNote {
                    pid: c.pid,
                    ts_ns: now + offset,
                    kind: "dropped".into(),
                    count: c.malformed as i64,
                    detail: format!(
                        "{} malformed messages from the injection library, not stored (first: {})",
                        c.malformed, c.first_error
                    ),
                });
                c.malformed = 0;
            }
        }
        windows.release(&mut part_by_pid, now + offset, stopping);
        for p in part_by_pid.into_values().filter(|p| !p.is_empty()) {
            let _ = tx.send(p);
        }
        for i in closed.into_iter().rev() {
            conns.remove(i);
        }
        conns.retain(|c| !c.client);
        if stopping {
            for (_, path) in &listeners[1..] {
                let _ = std::fs::remove_file(path);
            }
            return;
        }
    }
}

/// Which pids have a connected library that said hello.
fn conns_view(conns: &[Conn]) -> Vec<u32> {
    conns.iter().filter(|c| c.timeline.is_some() && !c.client).map(|c| c.pid).collect()
}

/// Send a control to a library (non-blocking: a library whose socket is full misses it, and its
/// notes say what it did instead).
fn send_control(fd: RawFd, control: &causeway_gpu_wire::Control) {
    let mut out = Vec::new();
    causeway_gpu_wire::encode_all(0, &mut 0, &causeway_gpu_wire::Message::Control(control.clone()), &mut out);
    for m in out {
        // SAFETY: m is a live buffer of its length; fd is a connected socket.
        unsafe { libc::send(fd, m.as_ptr().cast(), m.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    }
}

fn accept_all(listener: &OwnedFd, conns: &mut Vec<Conn>) {
    loop {
        // SAFETY: accept4 on a listening socket; the peer address is not asked for.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return;
        }
        // SAFETY: fd was just returned by accept4 and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let pid = peer_pid(fd.as_raw_fd());
        conns.push(Conn { fd, pid, timeline: None, malformed: 0, first_error: String::new(), client: false });
    }
}

/// Read every queued packet of `c`; false when the process closed its end. A window request makes
/// `c` a client: the request goes to `requests` with its socket.
fn read_all(
    c: &mut Conn,
    buf: &mut [u8],
    offset: i64,
    out: &mut GpuTimelinePart,
    requests: &mut Vec<(RawFd, causeway_gpu_wire::WindowRequest)>,
) -> bool {
    loop {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::recv(c.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n == 0 {
            return false;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR));
        }
        match causeway_gpu_wire::decode(&buf[..n as usize]) {
            Ok((_, causeway_gpu_wire::Message::WindowRequest(r))) => {
                c.client = true;
                requests.push((c.fd.as_raw_fd(), r));
            }
            Ok((h, msg)) => {
                if c.pid == 0 {
                    c.pid = h.pid;
                }
                let pid = c.pid;
                c.timeline.get_or_insert_with(|| ProcessTimeline::new(pid, offset)).take(h.seq, msg, now_mono(), out);
            }
            Err(e) => {
                if c.malformed == 0 {
                    c.first_error = e.to_string();
                }
                c.malformed += 1;
            }
        }
    }
}
