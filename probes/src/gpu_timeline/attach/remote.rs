//! Running a function call inside another process's main thread (x86_64, ptrace): how the
//! injection library gets into a process that is already running.
//!
//! The thread is taken at a system call's entry, never at an arbitrary instruction: seized
//! (`PTRACE_SEIZE`, which sends no signal), interrupted, then let run to its next system call
//! (`PTRACE_SYSCALL`). At that entry it is in no user-space critical section of its own making,
//! and a call the allocator or the loader makes while holding their locks (`mmap`, `munmap`,
//! `brk`, `mprotect`, `madvise`, `mremap`, `openat`, ...) is let through, not taken ([`is_safe_to_take`]).
//! The call is cancelled (`orig_rax = -1`), its registers and its whole extended FPU state kept, and
//! the thread then runs what the tracer asks: system calls (on its own `syscall` instruction) to map
//! a scratch page, and function calls through a three-byte trampoline there (`call *%rax; int3`).
//! At the end the registers go back with the instruction pointer on that `syscall` instruction and
//! the call's number in `rax`: detached, the thread makes the system call it was about to make.
//!
//! Every other thread of the process runs throughout. A signal that arrives for the thread while
//! it runs the tracer's call is delivered to it (its handler runs on top of that call), as a
//! debugger's would be.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Why running code in the thread failed.
#[derive(Debug)]
pub enum RemoteError {
    /// ptrace refused (EPERM): Yama, no CAP_SYS_PTRACE, or another tracer.
    Refused(Errno),
    /// The process exited (or was killed) meanwhile.
    Gone,
    /// Its main thread made no system call it is safe to take within the time allowed.
    NoSyscall(Duration),
    /// Something unexpected; the thread was put back as it was where that was possible.
    Failed(String),
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteError::Refused(e) => write!(f, "ptrace refused: {e}"),
            RemoteError::Gone => write!(f, "the process exited during the attach"),
            RemoteError::NoSyscall(d) => write!(
                f,
                "its main thread made no system call that is safe to take over within {} ms (busy on the CPU, or only allocating and opening files)",
                d.as_millis()
            ),
            RemoteError::Failed(s) => f.write_str(s),
        }
    }
}

fn failed(what: &str, e: Errno) -> RemoteError {
    match e {
        Errno::ESRCH => RemoteError::Gone,
        e => RemoteError::Failed(format!("{what}: {e}")),
    }
}

/// The system calls a thread may be inside of while the C library holds one of its own locks
/// (the allocator's arenas, the loader's lock) or that end the process: never taken, let through.
const UNSAFE_TO_TAKE: [i64; 16] = [
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_brk,
    libc::SYS_madvise,
    libc::SYS_mremap,
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_close,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_execve,
    libc::SYS_rt_sigreturn,
];

/// Whether a thread at the entry of system call `nr` may be taken over.
pub fn is_safe_to_take(nr: i64) -> bool {
    nr >= 0 && !UNSAFE_TO_TAKE.contains(&nr)
}

/// `NT_X86_XSTATE`: the whole extended state (x87, SSE, AVX, AVX-512, AMX).
const NT_X86_XSTATE: libc::c_int = 0x202;
/// `PTRACE_SYSCALL_INFO_ENTRY`.
const SYSCALL_INFO_ENTRY: u8 = 1;
/// The trampoline: `call *%rax; int3`.
const TRAMPOLINE: [u8; 3] = [0xff, 0xd0, 0xcc];
/// The scratch mapping: a code page and a data page.
const PAGE: u64 = 4096;

/// A main thread held at a system call's entry, its call cancelled, ready to run the tracer's
/// calls; [`Held::release`] puts it back (always call it: dropping detaches without restoring only
/// when the process is gone).
pub struct Held {
    pid: Pid,
    mem: File,
    /// The registers to put back: `rip` on the `syscall` instruction, `rax` its number.
    saved: libc::user_regs_struct,
    xstate: Vec<u8>,
    /// A `syscall` instruction of the process (the one it was about to run).
    syscall_at: u64,
    /// The scratch mapping (code page, then data page), once made.
    scratch: Option<u64>,
    /// When the thread was taken.
    pub taken_at: Instant,
    /// The system call it was about to make.
    pub syscall_nr: i64,
    /// Signals that arrived while it made the tracer's system calls: sent again once it is put back.
    deferred: Vec<Signal>,
    released: bool,
}

/// Seize `pid`'s main thread and take it at its next system call that is safe to take, within
/// `patience`.
pub fn take(pid: u32, patience: Duration) -> Result<Held, RemoteError> {
    let p = Pid::from_raw(pid as i32);
    ptrace::seize(p, ptrace::Options::PTRACE_O_TRACESYSGOOD).map_err(|e| match e {
        Errno::EPERM => RemoteError::Refused(e),
        e => failed("PTRACE_SEIZE", e),
    })?;
    match take_seized(p, patience) {
        Ok(h) => Ok(h),
        Err(e) => {
            // not taken: let it go as it was. At a stop already reported (an error there) it
            // detaches at once; running, it is stopped first (an interrupt of a thread at a
            // reported stop would never be answered).
            if ptrace::detach(p, None).is_err() {
                let _ = stop_now(p).and_then(|_| ptrace::detach(p, None).map_err(|e| failed("detach", e)));
            }
            Err(e)
        }
    }
}

fn take_seized(p: Pid, patience: Duration) -> Result<Held, RemoteError> {
    let mem = File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{p}/mem"))
        .map_err(|e| RemoteError::Failed(format!("/proc/{p}/mem: {e}")))?;
    ptrace::interrupt(p).map_err(|e| failed("PTRACE_INTERRUPT", e))?;
    // a signal that was pending stops the thread first: delivered as it would have been
    let pending = match wait_stop(p)? {
        WaitStatus::Stopped(_, sig) => Some(sig),
        _ => None,
    };
    let deadline = Instant::now() + patience;
    ptrace::syscall(p, pending).map_err(|e| failed("PTRACE_SYSCALL", e))?;
    loop {
        match wait_until(p, deadline)? {
            Some(WaitStatus::PtraceSyscall(_)) => {
                let regs = ptrace::getregs(p).map_err(|e| failed("GETREGS", e))?;
                let nr = regs.orig_rax as i64;
                if at_entry(p) && is_safe_to_take(nr) {
                    return cancel_and_hold(p, mem, regs);
                }
                // an exit stop, or a call not safe to take: through it, to the next stop
                ptrace::syscall(p, None).map_err(|e| failed("PTRACE_SYSCALL", e))?;
            }
            Some(WaitStatus::Stopped(_, sig)) => {
                // a signal for the thread: delivered as it would have been
                ptrace::syscall(p, Some(sig)).map_err(|e| failed("PTRACE_SYSCALL", e))?;
            }
            Some(WaitStatus::PtraceEvent(..)) => {
                ptrace::syscall(p, None).map_err(|e| failed("PTRACE_SYSCALL", e))?;
            }
            Some(WaitStatus::Exited(..)) | Some(WaitStatus::Signaled(..)) => return Err(RemoteError::Gone),
            Some(_) => ptrace::syscall(p, None).map_err(|e| failed("PTRACE_SYSCALL", e))?,
            None => return Err(RemoteError::NoSyscall(patience)),
        }
    }
}

/// Whether the thread's syscall stop is an entry (`PTRACE_GET_SYSCALL_INFO`).
fn at_entry(p: Pid) -> bool {
    let mut info = [0u8; 128];
    // SAFETY: the kernel writes at most `info.len()` bytes into the live buffer.
    let n = unsafe {
        libc::ptrace(libc::PTRACE_GET_SYSCALL_INFO, p.as_raw(), info.len() as *mut libc::c_void, info.as_mut_ptr())
    };
    n > 0 && info[0] == SYSCALL_INFO_ENTRY
}

/// At a system call's entry: keep the registers (to make the call again later), cancel it, run to
/// its exit.
fn cancel_and_hold(p: Pid, mem: File, regs: libc::user_regs_struct) -> Result<Held, RemoteError> {
    let taken_at = Instant::now();
    let syscall_at = regs.rip - 2;
    let mut insn = [0u8; 2];
    mem.read_exact_at(&mut insn, syscall_at).map_err(|e| RemoteError::Failed(format!("reading its code: {e}")))?;
    let mut saved = regs;
    saved.rax = regs.orig_rax;
    saved.rip = syscall_at;
    saved.orig_rax = u64::MAX;
    let xstate = get_xstate(p)?;
    let mut cancel = regs;
    cancel.orig_rax = u64::MAX;
    ptrace::setregs(p, cancel).map_err(|e| failed("SETREGS", e))?;
    ptrace::syscall(p, None).map_err(|e| failed("PTRACE_SYSCALL", e))?;
    let mut deferred = Vec::new();
    loop {
        match wait_next(p)? {
            WaitStatus::PtraceSyscall(_) => break,
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(RemoteError::Gone),
            // a signal between the entry and the exit: held back until the thread is put back
            WaitStatus::Stopped(_, sig) => {
                deferred.push(sig);
                ptrace::syscall(p, None).map_err(|e| failed("PTRACE_SYSCALL", e))?;
            }
            _ => ptrace::syscall(p, None).map_err(|e| failed("PTRACE_SYSCALL", e))?,
        }
    }
    let held = Held {
        pid: p,
        mem,
        saved,
        xstate,
        syscall_at,
        scratch: None,
        taken_at,
        syscall_nr: regs.orig_rax as i64,
        deferred,
        released: false,
    };
    if insn != [0x0f, 0x05] {
        // not glibc's `syscall` (an int 0x80 or a vsyscall page): put back and say so
        let e = RemoteError::Failed(format!("its system call was not made with a `syscall` instruction ({insn:02x?})"));
        held.release()?;
        return Err(e);
    }
    Ok(held)
}

fn get_xstate(p: Pid) -> Result<Vec<u8>, RemoteError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: the iovec describes the live buffer; the kernel shrinks iov_len to what it wrote.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGSET, p.as_raw(), NT_X86_XSTATE as usize, &mut iov) };
    if rc != 0 {
        return Err(failed("GETREGSET NT_X86_XSTATE", Errno::last()));
    }
    buf.truncate(iov.iov_len);
    Ok(buf)
}

fn set_xstate(p: Pid, state: &mut [u8]) -> Result<(), RemoteError> {
    let mut iov = libc::iovec { iov_base: state.as_mut_ptr().cast(), iov_len: state.len() };
    // SAFETY: the iovec describes a live buffer the kernel reads.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SETREGSET, p.as_raw(), NT_X86_XSTATE as usize, &mut iov) };
    if rc != 0 {
        return Err(failed("SETREGSET NT_X86_XSTATE", Errno::last()));
    }
    Ok(())
}

/// Interrupt a seized thread and wait for its stop (when it was not stopped already).
fn stop_now(p: Pid) -> Result<(), RemoteError> {
    ptrace::interrupt(p).map_err(|e| failed("PTRACE_INTERRUPT", e))?;
    wait_stop(p).map(|_| ())
}

/// The longest one wait for the thread's next stop may take: a stop that never comes (reported
/// already, or the thread blocked where it was sent) ends the attach with an error, never holds
/// the tracer.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The thread's next ptrace stop (or its exit), within [`STOP_WAIT`].
fn wait_next(p: Pid) -> Result<WaitStatus, RemoteError> {
    let deadline = Instant::now() + STOP_WAIT;
    loop {
        match waitpid(p, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)).map_err(|e| failed("waitpid", e))? {
            WaitStatus::StillAlive => {}
            s => return Ok(s),
        }
        if Instant::now() >= deadline {
            return Err(RemoteError::Failed(format!("the thread reported no stop within {} s", STOP_WAIT.as_secs())));
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// Waits for the thread's next ptrace stop of any kind.
fn wait_stop(p: Pid) -> Result<WaitStatus, RemoteError> {
    match wait_next(p)? {
        WaitStatus::Exited(..) | WaitStatus::Signaled(..) => Err(RemoteError::Gone),
        s => Ok(s),
    }
}

/// The thread's next stop, or `None` at `deadline` (then it is interrupted: stopped, held).
fn wait_until(p: Pid, deadline: Instant) -> Result<Option<WaitStatus>, RemoteError> {
    loop {
        match waitpid(p, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)).map_err(|e| failed("waitpid", e))? {
            WaitStatus::StillAlive => {}
            s => return Ok(Some(s)),
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

impl Held {
    /// Runs system call `nr` with `args` in the thread; its return value (negative: -errno).
    pub fn syscall(&mut self, nr: i64, args: [u64; 6]) -> Result<i64, RemoteError> {
        let mut r = self.saved;
        r.rip = self.syscall_at;
        r.rax = nr as u64;
        r.orig_rax = u64::MAX;
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
        ptrace::setregs(self.pid, r).map_err(|e| failed("SETREGS", e))?;
        let mut stops = 0;
        while stops < 2 {
            ptrace::syscall(self.pid, None).map_err(|e| failed("PTRACE_SYSCALL", e))?;
            match wait_next(self.pid)? {
                WaitStatus::PtraceSyscall(_) => stops += 1,
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(RemoteError::Gone),
                WaitStatus::Stopped(_, sig) => self.deferred.push(sig),
                _ => {}
            }
        }
        let r = ptrace::getregs(self.pid).map_err(|e| failed("GETREGS", e))?;
        Ok(r.rax as i64)
    }

    /// Maps the scratch pages (code, data) and writes the trampoline; their address.
    fn scratch(&mut self) -> Result<u64, RemoteError> {
        if let Some(a) = self.scratch {
            return Ok(a);
        }
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let a = self.syscall(libc::SYS_mmap, [0, 2 * PAGE, prot, flags, u64::MAX, 0])?;
        if (-4095..0).contains(&a) {
            return Err(RemoteError::Failed(format!("mmap in the process failed: {}", Errno::from_raw(-a as i32))));
        }
        let a = a as u64;
        self.scratch = Some(a);
        self.write(a, &TRAMPOLINE)?;
        let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let r = self.syscall(libc::SYS_mprotect, [a, PAGE, rx, 0, 0, 0])?;
        if r != 0 {
            return Err(RemoteError::Failed(format!("mprotect in the process failed: {}", Errno::from_raw(-r as i32))));
        }
        Ok(a)
    }

    /// Writes `bytes` at `addr` of the process.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), RemoteError> {
        self.mem.write_all_at(bytes, addr).map_err(|e| RemoteError::Failed(format!("writing its memory: {e}")))
    }

    /// Reads a NUL-terminated string of at most `max` bytes at `addr` of the process.
    pub fn read_c_string(&self, addr: u64, max: usize) -> String {
        let mut buf = vec![0u8; max];
        let n = self.mem.read_at(&mut buf, addr).unwrap_or(0);
        buf.truncate(n);
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    /// Puts `strings` (NUL-terminated each) in the data page; their addresses.
    pub fn put_strings(&mut self, strings: &[&[u8]]) -> Result<Vec<u64>, RemoteError> {
        let base = self.scratch()? + PAGE;
        let mut at = base;
        let mut out = Vec::new();
        for s in strings {
            if at + s.len() as u64 + 1 > base + PAGE {
                return Err(RemoteError::Failed("the strings do not fit in one page".into()));
            }
            let mut b = s.to_vec();
            b.push(0);
            self.write(at, &b)?;
            out.push(at);
            at += b.len() as u64;
        }
        Ok(out)
    }

    /// Calls the function at `func` with up to six integer arguments on the thread's stack (below
    /// its red zone), returning `rax`. Waits as long as the call takes; a signal for the thread
    /// meanwhile is delivered to it.
    pub fn call(&mut self, func: u64, args: &[u64]) -> Result<u64, RemoteError> {
        let code = self.scratch()?;
        let mut r = self.saved;
        r.rsp = (self.saved.rsp - 1024) & !0xf;
        r.rip = code;
        r.rax = func;
        r.orig_rax = u64::MAX;
        let mut a = [0u64; 6];
        a[..args.len().min(6)].copy_from_slice(&args[..args.len().min(6)]);
        (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        ptrace::setregs(self.pid, r).map_err(|e| failed("SETREGS", e))?;
        ptrace::cont(self.pid, None).map_err(|e| failed("PTRACE_CONT", e))?;
        let trap = code + TRAMPOLINE.len() as u64;
        loop {
            match wait_next(self.pid)? {
                WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                    let r = ptrace::getregs(self.pid).map_err(|e| failed("GETREGS", e))?;
                    if r.rip == trap {
                        return Ok(r.rax);
                    }
                    ptrace::cont(self.pid, Some(Signal::SIGTRAP)).map_err(|e| failed("PTRACE_CONT", e))?;
                }
                WaitStatus::Stopped(_, sig) => {
                    ptrace::cont(self.pid, Some(sig)).map_err(|e| failed("PTRACE_CONT", e))?;
                }
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(RemoteError::Gone),
                _ => ptrace::cont(self.pid, None).map_err(|e| failed("PTRACE_CONT", e))?,
            }
        }
    }

    /// Unmaps the scratch pages, puts the registers and the extended state back and detaches: the
    /// thread makes the system call it was about to make. How long it was held.
    pub fn release(mut self) -> Result<Duration, RemoteError> {
        self.released = true;
        if let Some(a) = self.scratch.take() {
            // best effort: a page left mapped costs 8 KiB, never correctness
            let _ = self.syscall(libc::SYS_munmap, [a, 2 * PAGE, 0, 0, 0, 0]);
        }
        set_xstate(self.pid, &mut self.xstate)?;
        ptrace::setregs(self.pid, self.saved).map_err(|e| failed("SETREGS", e))?;
        ptrace::detach(self.pid, None).map_err(|e| failed("PTRACE_DETACH", e))?;
        let held = self.taken_at.elapsed();
        self.send_deferred();
        Ok(held)
    }

    /// The signals held back, sent to the thread again (in arrival order).
    fn send_deferred(&mut self) {
        for sig in self.deferred.drain(..) {
            // SAFETY: tgkill with plain integers; the thread is the process's main thread.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid.as_raw(), self.pid.as_raw(), sig as libc::c_int) };
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.released {
            // an error path that did not release: restore what can be restored
            let _ = set_xstate(self.pid, &mut self.xstate);
            let _ = ptrace::setregs(self.pid, self.saved);
            let _ = ptrace::detach(self.pid, None);
            self.send_deferred();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_loader_and_exit_calls_are_never_taken() {
        for nr in [libc::SYS_mmap, libc::SYS_brk, libc::SYS_openat, libc::SYS_exit_group, libc::SYS_munmap, -1] {
            assert!(!is_safe_to_take(nr), "{nr}");
        }
        for nr in [libc::SYS_futex, libc::SYS_ioctl, libc::SYS_read, libc::SYS_nanosleep, libc::SYS_poll] {
            assert!(is_safe_to_take(nr), "{nr}");
        }
    }
}
