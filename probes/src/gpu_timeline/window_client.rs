//! The asking end of GPU windows: `causeway gpu-window` and the MCP server send a
//! [`WindowRequest`] to the tracer that attached the process (its `gpu-*.sock` in the runtime
//! directory, or the socket named) and read its `WindowReply`; the tracer's end is `windows.rs`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use causeway_gpu_wire::{Message, WindowRequest};

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
    let (addr, len) = super::unix_addr(path)?;
    // SAFETY: plain socket(2); owned right after.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: addr is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}
