//! What stops a trace, typed: a caller (the CLI, the MCP server's `capture_trace`) says what to do
//! about each case without probing the host again. Messages name what the caller passed (process
//! ids, a command, a library path), never a CLI flag: the library does not know how it was asked.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Neither process ids nor a command were given.
    #[error("nothing to trace: give process ids or a command")]
    NothingToTrace,
    /// A process id to trace names no running process.
    #[error("no process {0}")]
    NoSuchProcess(u32),
    /// The kernel refused the BPF programs to this user.
    #[error(
        "loading the BPF programs was not permitted (uid {uid}): tracing needs root, or CAP_BPF, CAP_PERFMON \
         and CAP_SYS_RESOURCE ({detail})"
    )]
    NotPermitted { uid: u32, detail: String },
    /// The running kernel exposes no BTF, which the programs are relocated against.
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux is missing; needs CONFIG_DEBUG_INFO_BTF): {detail}")]
    NoBtf { detail: String },
    /// Loading or attaching the BPF programs failed for another reason.
    #[error("loading the BPF programs: {0}")]
    Load(String),
    /// A CUDA library (or directory of them) the caller named cannot be probed.
    #[error("CUDA library {}: {detail}", path.display())]
    Library { path: PathBuf, detail: String },
    /// The command to trace could not be started.
    #[error("starting `{command}`: {detail}")]
    Command { command: String, detail: String },
    /// A process could not be added to the traced set.
    #[error("following process {pid}: {detail}")]
    Follow { pid: u32, detail: String },
    /// The label socket the caller named could not be opened.
    #[error("the label socket: {0}")]
    Labels(String),
    /// `--gpu-timeline` could not be set up (no injection library, no socket).
    #[error("the device timeline: {0}")]
    GpuTimeline(String),
    /// The trace's storage failed (creating, flushing or finishing it).
    #[error("trace storage: {0}")]
    Storage(#[from] causeway_store::StoreError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ProbeError {
    /// Why loading the BPF object failed, from the effective uid, whether the kernel has BTF, and
    /// the loader's message (the kernel's refusal reads EPERM / EACCES).
    pub fn from_load_failure(uid: u32, btf_present: bool, detail: String) -> ProbeError {
        let lower = detail.to_ascii_lowercase();
        let refused = ["not permitted", "permission denied", "eperm", "eacces"].iter().any(|w| lower.contains(w));
        if refused || (uid != 0 && !lower.contains("btf")) {
            ProbeError::NotPermitted { uid, detail }
        } else if !btf_present {
            ProbeError::NoBtf { detail }
        } else {
            ProbeError::Load(detail)
        }
    }

    /// [`ProbeError::from_load_failure`] on this process and host.
    pub(crate) fn load_failure(e: &anyhow::Error) -> ProbeError {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
        ProbeError::from_load_failure(uid, btf, format!("{e:#}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_failures_are_told_apart() {
        let perm =
            ProbeError::from_load_failure(1000, true, "map cw_rb_cuda: Operation not permitted (os error 1)".into());
        assert!(matches!(perm, ProbeError::NotPermitted { uid: 1000, .. }), "{perm:?}");
        assert!(perm.to_string().contains("CAP_BPF"), "{perm}");
        let root_refused = ProbeError::from_load_failure(0, true, "program rt_ret: EPERM (lockdown)".into());
        assert!(matches!(root_refused, ProbeError::NotPermitted { uid: 0, .. }));
        let no_btf = ProbeError::from_load_failure(0, false, "error parsing BTF: no such file".into());
        assert!(matches!(no_btf, ProbeError::NoBtf { .. }), "{no_btf:?}");
        let other = ProbeError::from_load_failure(0, true, "verifier: invalid access to map value".into());
        assert!(matches!(other, ProbeError::Load(_)), "{other:?}");
    }

    #[test]
    fn messages_name_parameters_not_flags() {
        for e in [ProbeError::NothingToTrace, ProbeError::NoSuchProcess(7)] {
            assert!(!e.to_string().contains("--"), "{e}");
        }
    }
}
