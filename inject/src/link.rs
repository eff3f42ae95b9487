//! The socket to the tracer: a unix `SOCK_SEQPACKET` connection, non-blocking both ways, so that no
//! thread of the application ever waits on the tracer. A message the socket cannot take now waits
//! in the outbox's queue (at most [`PENDING_MAX_BYTES`], in order, sent before anything newer at
//! the next send or flush); beyond that the oldest waiting message is dropped and its records counted
//! (sent later as a `dropped` note). A peer that is gone is reported to the caller, which turns the
//! library off without a word (nobody listens).
//!
//! The fd is never closed while the process lives (a callback may be sending on another thread: a
//! closed and reused fd would send our bytes into someone else's file); turning off shuts it down
//! instead, which the tracer reads as the end.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use causeway_gpu_wire::{decode, Control, Encoder, Message, WireApi, WireDevice, WireOp};

/// How a send went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Every part was taken.
    All,
    /// Some parts were refused (the socket full): their records (this many) are counted in
    /// `Link::send_dropped` too.
    Partly(u64),
    /// The peer is gone (or the socket broke): nothing more can be sent.
    Gone,
    /// Another error (`errno`).
    Failed(i32),
}

/// What the encoder reuses: the lists being filled from a buffer, and the encoded messages.
pub struct Outbox {
    encoder: Encoder,
    /// Ops read from the current buffer, not sent yet.
    pub ops: Vec<WireOp>,
    /// API records read, not sent yet.
    pub apis: Vec<WireApi>,
    /// Devices read, not sent yet.
    pub devices: Vec<WireDevice>,
    /// Encoded messages the socket could not take yet, oldest first, and their bytes.
    pending: std::collections::VecDeque<Vec<u8>>,
    pending_bytes: usize,
}

/// The most encoded bytes kept waiting for the socket: a burst of records (a flush of a busy
/// launch loop) larger than the socket's buffer is sent as the tracer reads, not dropped.
pub const PENDING_MAX_BYTES: usize = 8 << 20;

/// The connection.
pub struct Link {
    fd: RawFd,
    /// The peer went away (or the socket broke).
    pub gone: AtomicBool,
    /// Records in messages the socket refused, not yet noted.
    pub send_dropped: AtomicU64,
}

impl Link {
    /// Connects to the listening socket at `path`, without waiting.
    pub fn connect(path: &std::ffi::OsStr) -> std::io::Result<Link> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = path.as_bytes();
        // SAFETY: a zeroed sockaddr_un is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
            return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: plain socket creation.
        let fd =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: `addr` is a filled sockaddr_un of `len` bytes.
        if unsafe { libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: our own fd, not shared with anyone yet.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        Ok(Link { fd, gone: AtomicBool::new(false), send_dropped: AtomicU64::new(0) })
    }

    /// The socket, for `poll`.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// A fresh outbox for this process.
    pub fn outbox(pid: u32) -> Outbox {
        Outbox {
            encoder: Encoder::new(pid),
            ops: Vec::new(),
            apis: Vec::new(),
            devices: Vec::new(),
            pending: std::collections::VecDeque::new(),
            pending_bytes: 0,
        }
    }

    /// Waits (at most `timeout`) for the socket to take what waits in the queue: the exit's last
    /// flush, which must not lose a burst the tracer has not read yet, nor hang. What is left is
    /// dropped and counted; returns whether nothing was left.
    pub fn drain_pending(&self, out: &mut Outbox, timeout: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        while !out.pending.is_empty() && !self.gone.load(Ordering::Relaxed) {
            if !matches!(self.send_pending(out), Sent::All) || out.pending.is_empty() {
                break;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fd = libc::pollfd { fd: self.fd, events: libc::POLLOUT, revents: 0 };
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut fd, 1, left.as_millis().clamp(1, 50) as libc::c_int) };
        }
        let left: u64 = out.pending.iter().map(|p| records_in(p)).sum();
        out.pending.clear();
        out.pending_bytes = 0;
        self.send_dropped.fetch_add(left, Ordering::Relaxed);
        left == 0
    }

    /// Sends what waits in the outbox's queue, oldest first, as far as the socket takes it now.
    pub fn send_pending(&self, out: &mut Outbox) -> Sent {
        while let Some(part) = out.pending.front() {
            match self.send_one(part) {
                Ok(()) => {
                    out.pending_bytes -= part.len();
                    out.pending.pop_front();
                }
                Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK || e == libc::ENOBUFS => return Sent::All,
                Err(e) if is_gone(e) => {
                    self.gone.store(true, Ordering::Relaxed);
                    return Sent::Gone;
                }
                Err(e) => return Sent::Failed(e),
            }
        }
        Sent::All
    }

    /// Encodes `msg` and sends every part without waiting: what the socket cannot take now (or
    /// what would pass older messages still waiting) joins the queue; beyond its bound the oldest
    /// waiting messages are dropped and counted.
    pub fn send(&self, out: &mut Outbox, msg: &Message) -> Sent {
        if self.gone.load(Ordering::Relaxed) {
            return Sent::Gone;
        }
        match self.send_pending(out) {
            Sent::All => {}
            other => return other,
        }
        let mut result = Sent::All;
        let parts = out.encoder.encode(msg);
        let n_parts = parts.len();
        let mut queued: Vec<Vec<u8>> = Vec::new();
        for part in parts {
            if !out.pending.is_empty() || !queued.is_empty() {
                queued.push(part.clone());
                continue;
            }
            match self.send_one(part) {
                Ok(()) => {}
                Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK || e == libc::ENOBUFS => {
                    queued.push(part.clone())
                }
                Err(e) if is_gone(e) => {
                    self.gone.store(true, Ordering::Relaxed);
                    return Sent::Gone;
                }
                Err(e) => return Sent::Failed(e),
            }
        }
        for part in queued {
            out.pending_bytes += part.len();
            out.pending.push_back(part);
        }
        while out.pending_bytes > PENDING_MAX_BYTES {
            let Some(old) = out.pending.pop_front() else { break };
            out.pending_bytes -= old.len();
            let n = records_in(&old);
            self.send_dropped.fetch_add(n, Ordering::Relaxed);
            result = match result {
                Sent::Partly(m) => Sent::Partly(m + n),
                _ => Sent::Partly(n),
            };
        }
        if n_parts > 4 {
            out.encoder.shrink(4); // keep the reused buffers to a steady sender's few
        }
        result
    }

    /// Sends the ops, API records and devices gathered in `out`, and empties the lists (keeping
    /// their room).
    pub fn send_gathered(&self, out: &mut Outbox) -> Sent {
        let mut worst = Sent::All;
        let devices = Message::Devices(std::mem::take(&mut out.devices));
        let apis = Message::Apis(std::mem::take(&mut out.apis));
        let ops = Message::Ops(std::mem::take(&mut out.ops));
        for msg in [&devices, &apis, &ops] {
            let empty = match msg {
                Message::Devices(v) => v.is_empty(),
                Message::Apis(v) => v.is_empty(),
                Message::Ops(v) => v.is_empty(),
                _ => true,
            };
            if empty || worst == Sent::Gone || matches!(worst, Sent::Failed(_)) {
                continue;
            }
            worst = match (self.send(out, msg), worst) {
                (Sent::All, w) => w,
                (Sent::Partly(n), Sent::Partly(m)) => Sent::Partly(n + m),
                (s, _) => s,
            };
        }
        if let Message::Devices(mut v) = devices {
            v.clear();
            out.devices = v;
        }
        if let Message::Apis(mut v) = apis {
            v.clear();
            out.apis = v;
        }
        if let Message::Ops(mut v) = ops {
            v.clear();
            out.ops = v;
        }
        worst
    }

    fn send_one(&self, part: &[u8]) -> Result<(), i32> {
        for _ in 0..3 {
            // SAFETY: `part` is a live slice; MSG_NOSIGNAL: a gone peer is EPIPE, never SIGPIPE.
            let r = unsafe {
                libc::send(self.fd, part.as_ptr().cast(), part.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            };
            if r >= 0 {
                return Ok(());
            }
            let e = errno();
            if e != libc::EINTR {
                return Err(e);
            }
        }
        Err(libc::EINTR)
    }

    /// The next control message, without waiting: `None` when there is none now. A malformed
    /// message is skipped; the peer gone sets `gone` and gives `None`.
    pub fn recv_control(&self, buf: &mut [u8]) -> Option<Control> {
        loop {
            if self.gone.load(Ordering::Relaxed) {
                return None;
            }
            // SAFETY: `buf` is a live, writable slice of its length.
            let r = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if r == 0 {
                self.gone.store(true, Ordering::Relaxed);
                return None;
            }
            if r < 0 {
                let e = errno();
                if e == libc::EINTR {
                    continue;
                }
                if e != libc::EAGAIN && e != libc::EWOULDBLOCK {
                    self.gone.store(true, Ordering::Relaxed);
                }
                return None;
            }
            if let Ok((_, Message::Control(c))) = decode(&buf[..r as usize]) {
                return Some(c);
            }
        }
    }

    /// Ends the connection (the tracer reads the end); the fd stays open (see the module's doc).
    pub fn shut_down(&self) {
        // SAFETY: our fd; shutdown changes no memory.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
    }

    /// Closes the fd: only where no thread of ours can use it any more (a forked child; an
    /// initialization that failed before anything else saw the link).
    pub fn close_unshared(&self) {
        // SAFETY: our fd, which (the caller's word) no other thread of ours uses.
        unsafe { libc::close(self.fd) };
    }
}

/// Errors that mean nobody is listening any more.
fn is_gone(e: i32) -> bool {
    matches!(e, libc::EPIPE | libc::ECONNREFUSED | libc::ECONNRESET | libc::ENOTCONN | libc::EBADF)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// How many records an encoded message holds (its list's length; 0 for a note or hello).
fn records_in(part: &[u8]) -> u64 {
    match decode(part) {
        Ok((_, Message::Ops(v))) => v.len() as u64,
        Ok((_, Message::Apis(v))) => v.len() as u64,
        Ok((_, Message::Devices(v))) => v.len() as u64,
        _ => 0,
    }
}
