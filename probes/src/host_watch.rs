//! `trace --all`: every process of the host that uses CUDA, those running now and those started
//! later, each traced from the moment the trace can know it uses CUDA.
//!
//! Three ways in, from the fastest:
//! 1. **Its first call.** With `cfg_adopt_callers` the CUDA entry programs trace any process that
//!    calls into a probed library file (`cw_adopt` in `ebpf/common.bpf.h`): a process started
//!    later that uses a library already probed (the host's driver, the same wheel as a running
//!    job) is traced from its first call, scheduling included. User space meets it on its next
//!    poll, as a traced pid it has not scanned, and attaches the rest of what it maps.
//! 2. **Its loader.** The dynamic loader (`_dl_debug_state`) of every process the watch has looked
//!    at is probed, and with `cfg_adopt_callers` it reports the loads of untraced processes too:
//!    a process that maps a CUDA library nothing probed yet (its own wheel, a container's copy)
//!    is checked when the load completes and adopted with its libraries.
//! 3. **The rescan.** Each `rescan` the watch lists `/proc` and looks once at every process it has
//!    not seen (and once more on the next round, for a process caught before its loader mapped
//!    its libraries): one that maps a CUDA library is adopted, any other gets its loader probed
//!    (2. covers it from then on). Reading a process's maps takes its mmap lock, so each process
//!    is read twice at most, never on every round.
//!
//! A process that exits leaves the traced set in BPF (`cw_proc_exit`) and the watch's memory on the
//! next rescan. The tracer itself is never adopted (its children are looked at like any process:
//! the shipper it starts uses no CUDA).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::discovery::{classify, mapped::parse_maps_line};

/// What the watch knows of the host's processes between rescans.
pub(crate) struct HostWatch {
    /// Processes looked at, with how many looks they had (at most [`LOOKS`]).
    seen: HashMap<u32, u8>,
    every: Duration,
    last: Option<Instant>,
    own_pid: u32,
    /// Loader files offered for probing, by (device, inode).
    loaders: std::collections::HashSet<(u64, u64)>,
}

/// Looks per process: the first may come before its loader mapped what it links.
const LOOKS: u8 = 2;

/// What one look at a process found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// It maps a CUDA library: adopt it.
    Cuda,
    /// It does not (yet); its loader, as a path this process can open, to probe.
    Other { loader: Option<PathBuf> },
    /// Gone, a kernel thread, or unreadable.
    Nothing,
}

impl HostWatch {
    pub(crate) fn new(every: Duration) -> HostWatch {
        HostWatch { seen: HashMap::new(), every, last: None, own_pid: std::process::id(), loaders: Default::default() }
    }

    /// Whether a rescan is due now.
    pub(crate) fn due(&self) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= self.every)
    }

    /// List `/proc` and look at the processes not looked at enough: `(pid, look)` for each, the
    /// traced ones and this process left out. Forgets the processes that are gone.
    pub(crate) fn rescan(&mut self, traced: &[u32]) -> Vec<(u32, Look)> {
        self.last = Some(Instant::now());
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut alive = Vec::new();
        let mut looks = Vec::new();
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            alive.push(pid);
            if pid == self.own_pid || traced.contains(&pid) {
                continue;
            }
            let n = self.seen.entry(pid).or_insert(0);
            if *n >= LOOKS {
                continue;
            }
            *n += 1;
            let look = look_at(pid);
            if look == Look::Cuda {
                *n = LOOKS;
            }
            looks.push((pid, look));
        }
        alive.sort_unstable();
        self.seen.retain(|p, _| alive.binary_search(p).is_ok());
        looks
    }

    /// Whether the loader at `path` was not offered before (one attach attempt per file, so a
    /// loader that cannot be probed is noted once, not once per process).
    pub(crate) fn first_loader(&mut self, path: &std::path::Path) -> bool {
        crate::loader::file_id(path).is_some_and(|id| self.loaders.insert(id))
    }

    /// Whether the watch remembers `pid` (it forgets processes that are gone).
    #[cfg(test)]
    fn remembers(&self, pid: u32) -> bool {
        self.seen.contains_key(&pid)
    }
}

/// One read of `pid`'s maps: whether it maps a CUDA library, else its loader.
pub(crate) fn look_at(pid: u32) -> Look {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return Look::Nothing };
    if text.is_empty() {
        return Look::Nothing; // a kernel thread
    }
    let mut loader = None;
    for m in text.lines().filter_map(parse_maps_line) {
        if classify(&m.path).is_some() && !m.deleted {
            return Look::Cuda;
        }
        if loader.is_none() && is_loader(&m.path) {
            loader = Some(PathBuf::from(format!("/proc/{pid}/root{}", m.path.display())));
        }
    }
    Look::Other { loader }
}

/// An ELF dynamic loader by its file name (glibc's `ld-linux*`, musl's `ld-musl*`).
pub(crate) fn is_loader(path: &std::path::Path) -> bool {
    path.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("ld-linux") || f.starts_with("ld-musl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_neither_cuda_nor_loaderless() {
        // the test binary is dynamically linked against glibc: its loader is found, no CUDA
        match look_at(std::process::id()) {
            Look::Other { loader: Some(l) } => assert!(l.to_string_lossy().contains("ld-linux"), "{}", l.display()),
            other => panic!("unexpected look at ourselves: {other:?}"),
        }
        assert_eq!(look_at(u32::MAX - 1), Look::Nothing, "no such process");
    }

    #[test]
    fn each_process_is_looked_at_twice_and_forgotten_when_gone() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let mut w = HostWatch::new(Duration::from_secs(1));
        assert!(w.due());
        let first = w.rescan(&[]);
        assert!(!w.due());
        assert!(first.iter().all(|(p, _)| *p != std::process::id()), "the tracer never looks at itself");
        assert!(first.iter().any(|(p, _)| *p == 1), "other processes are looked at");
        assert!(first.iter().any(|(p, _)| *p == child.id()));
        assert!(w.rescan(&[child.id()]).iter().all(|(p, _)| *p != child.id()), "a traced process is left alone");
        // two looks per process, then none
        assert!(w.rescan(&[]).iter().all(|(p, _)| *p != 1));
        child.kill().unwrap();
        child.wait().unwrap();
        // (by pid: the other tests of this binary start and end processes meanwhile)
        assert!(w.remembers(child.id()));
        w.rescan(&[]);
        assert!(!w.remembers(child.id()), "a process that is gone is forgotten");
    }
}
