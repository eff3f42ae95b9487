//! Which traced processes run CPython, and their layout in `cw_py_procs`: looked for when a process
//! is adopted, at each of its dlopens (the loader hook; the process is stopped, so the layout is in
//! place before its first CUDA call through a new library), on the library poll, and again after
//! an exec. Only with `--stacks`. The exec event reaches user space on another channel than the
//! loader's notices and the poll, often after them: by then the process may have been looked at
//! running its new program already (the kernel switches `/proc/PID/exe` and the maps before the
//! `sched_process_exec` tracepoint fires), so an exec looks again at what runs now rather than
//! forgetting what was found.

use std::collections::{BTreeSet, HashMap};

use crate::loader::Probes;
use crate::python::layout::{detect, LayoutError, PyLayout};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Python(Box<PyLayout>),
    /// No interpreter mapped (yet: a command before its exec, a program that embeds Python later).
    NotPython,
    /// An interpreter this build cannot walk (said once in the notes).
    Refused,
}

/// The Python processes among the traced ones.
#[derive(Default)]
pub struct PyProcs {
    seen: HashMap<u32, Seen>,
    /// Why some process gets native frames only (one line per interpreter file and reason).
    pub notes: BTreeSet<String>,
}

impl PyProcs {
    /// Look for an interpreter in `pid` unless one was found already (or refused); a process
    /// seen without one is looked at again only when `again` (a dlopen may have mapped it).
    pub fn check(&mut self, probes: &mut Probes, pid: u32, again: bool) {
        match self.seen.get(&pid) {
            Some(Seen::Python(_) | Seen::Refused) => return,
            Some(Seen::NotPython) if !again => return,
            _ => {}
        }
        // gone, or a zombie (no mappings left): nothing to look at
        let Ok(maps) = crate::symbols::read_maps(pid) else { return };
        if maps.is_empty() {
            return;
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        let seen = match detect(&maps, exe.as_deref()) {
            Ok(layout) => match probes.set_python(pid, &layout.raw) {
                Ok(()) => Seen::Python(Box::new(layout)),
                Err(e) => {
                    self.notes.insert(format!("Python frames off for pid {pid}: {e:#}"));
                    Seen::Refused
                }
            },
            Err(LayoutError::NotPython) => Seen::NotPython,
            Err(e) => {
                self.notes.insert(format!("Python frames off: {e}"));
                Seen::Refused
            }
        };
        self.seen.insert(pid, seen);
    }

    /// `pid` exec'd: what it runs now is looked for afresh, at once (its layout stays in place
    /// if it runs the interpreter that was found); not Python, its walk is forgotten. A process
    /// that exited before its exec was heard of keeps what was seen of it, for the report.
    pub fn exec(&mut self, probes: &mut Probes, pid: u32) {
        let Some(before) = self.seen.remove(&pid) else { return };
        self.check(probes, pid, true);
        match self.seen.get(&pid) {
            Some(Seen::Python(_)) => {}
            Some(_) => probes.forget_python(pid),
            None => {
                probes.forget_python(pid);
                self.seen.insert(pid, before);
            }
        }
    }

    /// Whether `pid` has not been looked at yet.
    pub fn unseen(&self, pid: u32) -> bool {
        !self.seen.contains_key(&pid)
    }

    /// The processes whose Python frames are walked: (pid, "CPython 3.N.M (file)").
    pub fn walked(&self) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = self
            .seen
            .iter()
            .filter_map(|(pid, s)| match s {
                Seen::Python(l) => Some((
                    *pid,
                    format!("CPython {}.{}.{} ({})", l.version.0, l.version.1, l.version.2, l.module.display()),
                )),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }
}
