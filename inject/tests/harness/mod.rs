//! What the end-to-end tests share: the library built once, the mock's workloads, and a tracer's
//! end of the socket (listen, accept, read every message, answer with controls).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use causeway_gpu_wire::{decode, encode_all, Control, Header, Message, WireApi, WireNote, WireOp};

/// The library, built (`cargo build -p causeway-inject`, which does nothing when it is up to date)
/// once per test process into the target directory of this test binary.
pub fn inject_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
        let target = profile_dir.parent().expect("the target directory");
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.args(["build", "--locked", "-p", "causeway-inject"]).env("CARGO_TARGET_DIR", target);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build -p causeway-inject");
        assert!(status.success(), "cargo build -p causeway-inject failed");
        let so = profile_dir.join("libcauseway_inject.so");
        assert!(so.is_file(), "{} not built", so.display());
        so
    })
}

/// The mock's training loop against its CUDA 12 runtime (or, `cu13`, its CUDA 13 one).
pub fn gpuloop(cu13: bool) -> PathBuf {
    let build = causeway_testdata::mock_cuda_build();
    let p = if cu13 { build.join("cu13/gpuloop") } else { build.join("gpuloop") };
    assert!(p.is_file(), "{} missing after make -C mock-cuda", p.display());
    p
}

/// One workload run as the tracer sees it.
pub struct Run {
    pub pid: u32,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub msgs: Vec<(Header, Message)>,
    pub elapsed: Duration,
}

impl Run {
    /// The ops of one kind (`GpuOpKind::code`) received.
    pub fn ops(&self, kind: u8) -> Vec<&WireOp> {
        self.msgs
            .iter()
            .filter_map(|(_, m)| if let Message::Ops(v) = m { Some(v) } else { None })
            .flatten()
            .filter(|o| o.kind == kind)
            .collect()
    }
    /// The API records received.
    pub fn apis(&self) -> Vec<&WireApi> {
        self.msgs.iter().filter_map(|(_, m)| if let Message::Apis(v) = m { Some(v) } else { None }).flatten().collect()
    }
    /// The notes of one kind received.
    pub fn notes(&self, kind: &str) -> Vec<&WireNote> {
        self.msgs
            .iter()
            .filter_map(|(_, m)| if let Message::Note(n) = m { Some(n) } else { None })
            .filter(|n| n.kind == kind)
            .collect()
    }
    /// Every note, a line each (for assertion messages).
    pub fn all_notes(&self) -> String {
        let notes: Vec<String> = self
            .msgs
            .iter()
            .filter_map(
                |(_, m)| if let Message::Note(n) = m { Some(format!("{}: {}", n.kind, n.detail)) } else { None },
            )
            .collect();
        notes.join("\n")
    }
}

/// What the test does with the connection while the workload runs: sees each message (and the
/// workload's stdout so far), may answer.
pub type Tracer<'a> = &'a mut dyn FnMut(&Message, &OwnedFd, &str);

/// Runs `bin args` with the library (when `inject`) and a listening socket, reading every message
/// until the library's end of the connection closes.
pub fn run(bin: &Path, args: &[&str], env: &[(&str, &str)], inject: bool, tracer: Option<Tracer>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("gpu.sock");
    let listener = listen(&sock);
    let mut cmd = Command::new(bin);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if inject {
        cmd.env("CUDA_INJECTION64_PATH", inject_so()).env("CAUSEWAY_GPU_SOCKET", &sock);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let stdout = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (stdout, mut pipe) = (stdout.clone(), child.stdout.take().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buf) {
                stdout.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let mut msgs = Vec::new();
    let mut tracer = tracer;
    if inject {
        let deadline = Instant::now() + Duration::from_secs(60);
        if let Some(conn) = accept(&listener, deadline, &mut child) {
            let mut buf = vec![0u8; 65536];
            while let Some(n) = recv(&conn, &mut buf, deadline) {
                let (h, m) = decode(&buf[..n]).unwrap_or_else(|e| panic!("message {}: {e}", msgs.len()));
                if let Some(t) = tracer.as_mut() {
                    let so_far = stdout.lock().unwrap().clone();
                    t(&m, &conn, &so_far);
                }
                msgs.push((h, m));
            }
        }
    }
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let stdout = stdout.lock().unwrap().clone();
    Run {
        pid,
        code: out.status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        msgs,
        elapsed: start.elapsed(),
    }
}

/// A listening `SOCK_SEQPACKET` socket at `path`.
pub fn listen(path: &Path) -> OwnedFd {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain socket calls on a sockaddr_un filled here.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len), 0, "bind");
        assert_eq!(libc::listen(fd, 4), 0);
        OwnedFd::from_raw_fd(fd)
    }
}

/// Whether `fd` becomes readable within `ms`.
fn poll_in(fd: &OwnedFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// The library's connection, or `None` when the workload ended without one.
pub fn accept(listener: &OwnedFd, deadline: Instant, child: &mut std::process::Child) -> Option<OwnedFd> {
    while Instant::now() < deadline {
        if poll_in(listener, 100) {
            // SAFETY: accepting on a listening socket.
            let fd = unsafe { libc::accept4(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), 0) };
            assert!(fd >= 0, "accept");
            // SAFETY: a new fd of ours.
            return Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if child.try_wait().unwrap().is_some() && !poll_in(listener, 100) {
            return None;
        }
    }
    panic!("no connection before the deadline");
}

/// The next message's length, `None` at the end of the connection.
pub fn recv(conn: &OwnedFd, buf: &mut [u8], deadline: Instant) -> Option<usize> {
    while Instant::now() < deadline {
        if !poll_in(conn, 100) {
            continue;
        }
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(conn.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return None;
        }
        return Some(n as usize);
    }
    panic!("the connection did not end before the deadline");
}

/// Sends a control message to the library.
pub fn send_control(conn: &OwnedFd, c: Control) {
    let mut out = Vec::new();
    encode_all(0, &mut 0, &Message::Control(c), &mut out);
    // SAFETY: a live buffer.
    let n = unsafe { libc::send(conn.as_raw_fd(), out[0].as_ptr().cast(), out[0].len(), libc::MSG_NOSIGNAL) };
    assert_eq!(n as usize, out[0].len());
}
