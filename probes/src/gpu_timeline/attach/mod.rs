//! Loading the injection library into a CUDA process that is already running (`trace --pid P
//! --gpu-timeline`): `CUDA_INJECTION64_PATH` is read once, at `cuInit`, so a job started without it
//! gets the library through ptrace instead: its main thread is taken at a system call
//! ([`remote`]), runs `dlopen(library)` and the library's `causeway_attach(socket)` (which only
//! starts a thread and returns), and is put back. The library then connects, dormant, and records
//! only while a window is open (the tracer's `OpenWindow` control).
//!
//! Never harm the target: a process that is stopped, already traced, under a seccomp filter, not
//! (yet) a CUDA process, or that ptrace may not touch (Yama, no `CAP_SYS_PTRACE`) is refused before
//! anything is done, with the reason; a process that exits meanwhile is reported as such. What the
//! attach cost the process (how long its main thread was held) is measured and stored (the
//! `attached` note). A process in another mount namespace gets a copy of the library and a socket
//! in its own root (`/proc/PID/root`).

pub mod remote;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::symbols::{read_maps, ElfSymbols, Mapping};
use remote::RemoteError;

/// How long the attach waits for the main thread's next system call that is safe to take.
const PATIENCE: Duration = Duration::from_secs(3);
/// How long `trace --all --gpu-timeline` waits for a CUDA process to load libcuda (the runtime
/// loads it at its first call) before it leaves the process without a device view.
pub const WAIT_FOR_LIBCUDA: Duration = Duration::from_secs(30);

/// `RTLD_NOW`.
const RTLD_NOW: u64 = 2;
/// glibc's `__RTLD_DLOPEN`, which `__libc_dlopen_mode` callers add.
const RTLD_DLOPEN_FLAG: u64 = 0x8000_0000;

/// A finished attach.
#[derive(Debug, Clone)]
pub struct Attached {
    /// How long the main thread was held (taken at a system call to put back).
    pub held: Duration,
    /// Of that, the `dlopen` of the library.
    pub dlopen: Duration,
    /// How long the attach waited for a system call to take.
    pub waited: Duration,
    /// The system call it took (the thread made it once put back).
    pub syscall_nr: i64,
    /// The library's path as the process sees it.
    pub library: String,
    /// `causeway_attach` said the library already records for a live tracer.
    pub busy: bool,
}

impl Attached {
    /// The `attached` note's line.
    pub fn describe(&self) -> String {
        format!(
            "the injection library ({}) was loaded into the running process through ptrace: its main thread was held {} us (the dlopen {} us) at system call {} and then made that call; other threads ran throughout; waited {} ms for the call",
            self.library,
            self.held.as_micros(),
            self.dlopen.as_micros(),
            self.syscall_nr,
            self.waited.as_millis()
        )
    }
}

/// Where the library and the socket are for a process (its own mount namespace, or ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPaths {
    /// The library's path as the process opens it.
    pub library: PathBuf,
    /// The socket's path as the process connects to it.
    pub socket: PathBuf,
    /// Where the tracer must also listen (through `/proc/PID/root`) when the process has a mount
    /// namespace of its own.
    pub listen_also: Option<PathBuf>,
}

/// Whether `pid` shares the tracer's mount namespace.
pub fn same_mount_namespace(pid: u32) -> bool {
    let ours = std::fs::read_link("/proc/self/ns/mnt");
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/mnt"));
    match (ours, theirs) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    }
}

/// The library and socket paths for `pid`: ours in our mount namespace; otherwise a copy of the
/// library and a socket under `/tmp/causeway-attach-<tracer pid>/` of the process's root.
pub fn target_paths(pid: u32, library: &Path, socket: &Path) -> Result<TargetPaths, String> {
    if same_mount_namespace(pid) {
        return Ok(TargetPaths { library: library.to_path_buf(), socket: socket.to_path_buf(), listen_also: None });
    }
    let inside = PathBuf::from(format!("/tmp/causeway-attach-{}", std::process::id()));
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let dir = root.join(inside.strip_prefix("/").unwrap_or(&inside));
    std::fs::create_dir_all(&dir).map_err(|e| {
        format!("pid {pid} has a mount namespace of its own and {} cannot be made there: {e}", dir.display())
    })?;
    let file = library.file_name().unwrap_or_else(|| std::ffi::OsStr::new(super::LIBRARY_FILE));
    std::fs::copy(library, dir.join(file))
        .map_err(|e| format!("copying the injection library into pid {pid}'s root ({}): {e}", dir.display()))?;
    Ok(TargetPaths {
        library: inside.join(file),
        socket: inside.join("gpu.sock"),
        listen_also: Some(dir.join("gpu.sock")),
    })
}

/// Whether `maps` (a `/proc/PID/maps`) maps libcuda: the process is a CUDA process the library can
/// record.
fn maps_libcuda(maps: &str) -> bool {
    maps.lines().any(|l| l.contains("/libcuda.so"))
}

/// Whether `pid` has loaded libcuda yet (a process that loaded the runtime only has not: the
/// runtime loads the driver at its first call).
pub fn has_libcuda(pid: u32) -> bool {
    maps_libcuda(&std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default())
}

/// Why `pid` must be left alone, before anything is done to it.
pub fn refusal(pid: u32) -> Option<String> {
    let status = match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) => s,
        Err(_) => return Some(format!("pid {pid} is not running")),
    };
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string())).unwrap_or_default()
    };
    let tracer: u32 = field("TracerPid:").parse().unwrap_or(0);
    if tracer != 0 {
        let comm = std::fs::read_to_string(format!("/proc/{tracer}/comm")).unwrap_or_default();
        return Some(format!(
            "pid {pid} is already traced by pid {tracer} ({}): a process has one tracer; left as it is",
            comm.trim()
        ));
    }
    let state = field("State:");
    match state.chars().next() {
        Some('T') | Some('t') => {
            return Some(format!(
                "pid {pid} is stopped ({state}: SIGSTOP or a debugger): left as it is; attach once it runs again"
            ))
        }
        Some('Z') | Some('X') => return Some(format!("pid {pid} has exited")),
        _ => {}
    }
    if field("Seccomp:") == "2" {
        return Some(format!(
            "pid {pid} runs under a seccomp filter (Seccomp: 2 in /proc/{pid}/status): the system calls a remote dlopen makes could be refused or kill it, so it is left as it is; start it with {}=<the library> and {}=<a socket> to record its device timeline",
            super::INJECTION_ENV,
            super::SOCKET_ENV
        ));
    }
    if let Some(why) = ptrace_forbidden() {
        return Some(format!("pid {pid} cannot be attached: {why}; left as it is"));
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    if !maps_libcuda(&maps) {
        return Some(format!(
            "pid {pid} has not loaded libcuda (not a CUDA process, or not yet): no device timeline to record; left as it is"
        ));
    }
    None
}

/// Why this process may not ptrace others, when it may not (Yama, capabilities).
fn ptrace_forbidden() -> Option<String> {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?.trim().parse::<u32>().ok()?;
    let cap_sys_ptrace = has_capability(19);
    match scope {
        3 => Some("Yama forbids ptrace on this host (kernel.yama.ptrace_scope = 3, until reboot)".into()),
        1 | 2 if !cap_sys_ptrace => Some(format!(
            "Yama allows ptrace only to {} (kernel.yama.ptrace_scope = {scope}) and the tracer lacks CAP_SYS_PTRACE",
            if scope == 1 { "a process's ancestors" } else { "holders of CAP_SYS_PTRACE" }
        )),
        _ => None,
    }
}

/// Whether this process holds capability `bit` (effective set).
fn has_capability(bit: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

/// The loader functions of a glibc process: `dlopen`, `dlsym`, `dlerror` (glibc 2.34+, or
/// `libdl.so.2` mapped), else glibc's own `__libc_dlopen_mode` and `__libc_dlsym`.
#[derive(Debug, Clone, Copy)]
struct Loader {
    dlopen: u64,
    dlsym: u64,
    dlerror: Option<u64>,
    /// `__libc_dlopen_mode`: the mode needs `__RTLD_DLOPEN`.
    private: bool,
}

/// Runtime address of function `name` of the object mapped by `maps` at `path`.
fn address_in(maps: &[Mapping], path: &Path, syms: &ElfSymbols, name: &str) -> Option<u64> {
    let off = syms.offset_of(name)?;
    maps.iter()
        .filter(|m| m.path == path)
        .find(|m| off >= m.offset && off < m.offset + (m.end - m.start))
        .map(|m| m.start + off - m.offset)
}

/// The file behind a mapping, opened the way that works across mount namespaces.
fn mapped_file(pid: u32, m: &Mapping) -> PathBuf {
    let by_range = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
    if by_range.exists() {
        return by_range;
    }
    PathBuf::from(format!("/proc/{pid}/root")).join(m.path.strip_prefix("/").unwrap_or(&m.path))
}

fn find_loader(pid: u32) -> Result<Loader, String> {
    let maps = read_maps(pid).map_err(|e| format!("reading /proc/{pid}/maps: {e}"))?;
    let name_of = |m: &Mapping| m.path.file_name().map(|f| f.as_bytes().to_vec()).unwrap_or_default();
    let is_libc = |n: &[u8]| n.starts_with(b"libc.so") || (n.starts_with(b"libc-") && n.ends_with(b".so"));
    let mut libc_syms = None;
    let mut candidates: Vec<&Mapping> = maps.iter().filter(|m| is_libc(&name_of(m))).collect();
    candidates.extend(maps.iter().filter(|m| name_of(m).starts_with(b"libdl.so")));
    let mut seen = std::collections::HashSet::new();
    for m in candidates {
        if !seen.insert(m.path.clone()) {
            continue;
        }
        let Ok(syms) = ElfSymbols::load(&mapped_file(pid, m)) else { continue };
        let at = |name| address_in(&maps, &m.path, &syms, name);
        if let (Some(dlopen), Some(dlsym)) = (at("dlopen"), at("dlsym")) {
            return Ok(Loader { dlopen, dlsym, dlerror: at("dlerror"), private: false });
        }
        if is_libc(&name_of(m)) && libc_syms.is_none() {
            libc_syms = Some((m.path.clone(), syms));
        }
    }
    if let Some((path, syms)) = libc_syms {
        let at = |name| address_in(&maps, &path, &syms, name);
        if let (Some(dlopen), Some(dlsym)) = (at("__libc_dlopen_mode"), at("__libc_dlsym")) {
            return Ok(Loader { dlopen, dlsym, dlerror: None, private: true });
        }
    }
    Err(format!("pid {pid} has no glibc dlopen mapped (a static or musl program?): left as it is"))
}

/// Loads the library at `paths.library` into `pid` and has it connect to `paths.socket`.
pub fn attach(pid: u32, paths: &TargetPaths) -> Result<Attached, String> {
    if let Some(why) = refusal(pid) {
        return Err(why);
    }
    let loader = find_loader(pid)?;
    let started = std::time::Instant::now();
    let mut held = remote::take(pid, PATIENCE).map_err(|e| explain(pid, e))?;
    let waited = held.taken_at.duration_since(started);
    let syscall_nr = held.syscall_nr;
    let result = run_attach(&mut held, &loader, paths);
    let held_for = held.release().map_err(|e| explain(pid, e))?;
    let (dlopen, rc) = result.map_err(|e| explain(pid, e))?;
    let busy = match rc {
        0 => false,
        1 => true,
        -1 => return Err("the injection library refused the socket path".into()),
        -2 => return Err("the injection library could not start its thread in the process".into()),
        rc => return Err(format!("the injection library's causeway_attach failed ({rc})")),
    };
    Ok(Attached { held: held_for, dlopen, waited, syscall_nr, library: paths.library.display().to_string(), busy })
}

/// Inside the held thread: `dlopen`, `dlsym("causeway_attach")`, the call. How long the `dlopen`
/// took and what `causeway_attach` returned.
fn run_attach(held: &mut remote::Held, loader: &Loader, paths: &TargetPaths) -> Result<(Duration, i32), RemoteError> {
    let strings = held.put_strings(&[
        paths.library.as_os_str().as_bytes(),
        b"causeway_attach",
        paths.socket.as_os_str().as_bytes(),
    ])?;
    let mode = if loader.private { RTLD_NOW | RTLD_DLOPEN_FLAG } else { RTLD_NOW };
    let t = std::time::Instant::now();
    let handle = held.call(loader.dlopen, &[strings[0], mode])?;
    let dlopen = t.elapsed();
    if handle == 0 {
        let why = match loader.dlerror {
            Some(f) => {
                let msg = held.call(f, &[])?;
                if msg == 0 {
                    "no reason given".to_string()
                } else {
                    held.read_c_string(msg, 1024)
                }
            }
            None => "no reason given (glibc's private loader)".to_string(),
        };
        return Err(RemoteError::Failed(format!("dlopen of the injection library in the process failed: {why}")));
    }
    let entry = held.call(loader.dlsym, &[handle, strings[1]])?;
    if entry == 0 {
        return Err(RemoteError::Failed(
            "the injection library loaded in the process has no causeway_attach (an older build?)".into(),
        ));
    }
    let rc = held.call(entry, &[strings[2]])? as u32 as i32;
    Ok((dlopen, rc))
}

/// A remote failure, said for `pid`.
fn explain(pid: u32, e: RemoteError) -> String {
    match e {
        RemoteError::Refused(errno) => {
            let why = ptrace_forbidden()
                .unwrap_or_else(|| "another tracer, or a process of another user without CAP_SYS_PTRACE".into());
            format!("pid {pid} cannot be attached ({errno}): {why}; left as it is")
        }
        RemoteError::Gone => format!("pid {pid} exited during the attach"),
        e @ RemoteError::NoSyscall(_) => format!("pid {pid} was not attached: {e}; it runs on as it was, try again"),
        RemoteError::Failed(s) => format!("pid {pid}: {s}; it runs on as it was"),
    }
}
