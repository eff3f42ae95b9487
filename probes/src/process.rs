//! Launching the command to trace, gated: the child is forked and waits on a pipe until the tracer
//! has put its pid in the traced-process map, then execs, so not one of its calls is missed.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::Path;

pub struct GatedChild {
    pub pid: u32,
    gate: RawFd,
}

impl GatedChild {
    /// Fork `argv` with our environment plus `env` (which wins over a variable of the same name);
    /// stdout goes to `stdout` when given, stdin comes from /dev/null when `null_stdin` (a server
    /// whose stdin is a protocol must not share it). The child execs after [`GatedChild::release`].
    pub fn spawn(
        argv: &[String],
        env: &[(String, String)],
        stdout: Option<&Path>,
        null_stdin: bool,
    ) -> anyhow::Result<GatedChild> {
        anyhow::ensure!(!argv.is_empty(), "no command to run");
        let cargs: Vec<CString> = argv.iter().map(|a| CString::new(a.as_bytes())).collect::<Result<_, _>>()?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        // the environment is built before the fork: the child only execs
        let mut vars: Vec<CString> = std::env::vars_os()
            .filter(|(k, _)| !env.iter().any(|(name, _)| k.as_encoded_bytes() == name.as_bytes()))
            .map(|(k, v)| CString::new([k.as_encoded_bytes(), b"=", v.as_encoded_bytes()].concat()))
            .collect::<Result<_, _>>()?;
        for (k, v) in env {
            vars.push(CString::new(format!("{k}={v}"))?);
        }
        let mut envp: Vec<*const libc::c_char> = vars.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let out_fd = match stdout {
            Some(p) => {
                let c = CString::new(p.as_os_str().as_encoded_bytes())?;
                // SAFETY: valid C string.
                let fd = unsafe {
                    libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC, 0o644)
                };
                anyhow::ensure!(fd >= 0, "cannot open {}: {}", p.display(), std::io::Error::last_os_error());
                fd
            }
            None => -1,
        };
        let in_fd = if null_stdin {
            // SAFETY: a constant, valid C string.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            anyhow::ensure!(fd >= 0, "cannot open /dev/null: {}", std::io::Error::last_os_error());
            fd
        } else {
            -1
        };
        let mut fds = [0 as RawFd; 2];
        // SAFETY: fds has room for two descriptors.
        anyhow::ensure!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0, "pipe2 failed");
        // SAFETY: the child only calls async-signal-safe functions before exec.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            anyhow::bail!("fork failed: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: child side: read the gate, redirect, exec, or exit.
            unsafe {
                libc::close(fds[1]);
                let mut b = 0u8;
                libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1);
                if b != b'g' {
                    libc::_exit(126); // the tracer went away before releasing us
                }
                if out_fd >= 0 {
                    libc::dup2(out_fd, 1);
                }
                if in_fd >= 0 {
                    libc::dup2(in_fd, 0);
                }
                libc::execvpe(ptrs[0], ptrs.as_ptr(), envp.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: parent closes the ends it does not use.
        unsafe {
            libc::close(fds[0]);
            if out_fd >= 0 {
                libc::close(out_fd);
            }
            if in_fd >= 0 {
                libc::close(in_fd);
            }
        }
        Ok(GatedChild { pid: pid as u32, gate: fds[1] })
    }

    /// Let the child exec.
    pub fn release(&mut self) {
        if self.gate >= 0 {
            // SAFETY: our end of the pipe.
            unsafe {
                libc::write(self.gate, b"g".as_ptr() as *const libc::c_void, 1);
                libc::close(self.gate);
            }
            self.gate = -1;
        }
    }

    /// The exit status if the child has ended (reaped), without blocking.
    pub fn try_wait(&mut self) -> Option<i32> {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
        if r == self.pid as i32 {
            Some(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) })
        } else if r < 0 {
            Some(-1)
        } else {
            None
        }
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        // closing the gate unreleased makes the child exit 126 instead of running untraced
        if self.gate >= 0 {
            // SAFETY: our end of the pipe.
            unsafe { libc::close(self.gate) };
        }
    }
}

/// Whether a process exists.
pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether a process is stopped by a signal (state `T` in `/proc/PID/stat`), as the loader hook
/// stops a launched command after a dlopen until its new libraries are attached.
pub fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('T')))
        .unwrap_or(false)
}

/// Continue a process (SIGCONT), as after the loader hook stopped it; a stop signal still pending
/// is discarded with it.
pub fn resume(pid: u32) {
    // SAFETY: kill(2) with a pid and a signal number.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_stopped_by_a_signal_reads_as_stopped() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = child.id();
        let wait_for = |want: bool| {
            (0..200).any(|_| {
                stopped(pid) == want || {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    false
                }
            })
        };
        assert!(wait_for(false), "a sleeping process is not stopped");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        assert!(wait_for(true), "SIGSTOP did not show as state T");
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        assert!(wait_for(false), "SIGCONT did not clear state T");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!stopped(u32::MAX), "no such process");
    }
}
