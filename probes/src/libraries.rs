//! Which CUDA libraries a trace probes, and when. Causeway attaches exactly what the traced
//! processes map (a library no traced process maps is wasted attach work and confusing output),
//! plus every library named with `--cuda-lib`. The libraries are found:
//! - at the start, in the maps of the pids given to trace (`maps`), and in the program of a command
//!   (a runtime linked into it, `static`);
//! - when a traced process finishes a dlopen (`loaded`): the dynamic loader's debugger hook
//!   `_dl_debug_state` is probed, and a command Causeway launched is held (SIGSTOP) until its new
//!   libraries are attached, so its first call through them is recorded;
//! - on a slow poll of the maps, for what the hook cannot see (`poll`: calls between the mapping
//!   and the attach are unknown).
//!
//! Every attach is a [`LibraryAttach`] row of the trace (`attachments`): what the trace covers for
//! each process, and from when. A process that calls the driver but maps no runtime and carries no
//! runtime symbols gets a row saying its runtime is statically linked without symbols, so every
//! answer can say that only its driver calls are visible.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use causeway_model::LibraryAttach;

use crate::decode::now_ns;
use crate::discovery::{self, FoundLibrary, LibKind, StaticRuntime};
use crate::error::ProbeError;
use crate::loader::Probes;

/// What one traced process has, as far as the trace knows.
#[derive(Debug, Default)]
struct ProcessLibs {
    runtime: bool,
    driver: bool,
    /// the runtime is linked into the program without symbols
    stripped_runtime: Option<PathBuf>,
    /// (device, inode) of the files attached for this process
    files: BTreeSet<(u64, u64)>,
    /// the program was checked for a linked-in runtime
    program_checked: bool,
    /// files the poll saw mapped once and left to the loader hook's notice
    poll_seen: BTreeSet<(u64, u64)>,
}

/// Tracks the libraries of every traced process and attaches new ones.
pub struct LibraryTracker {
    procs: HashMap<u32, ProcessLibs>,
    /// `--cuda-lib` files by (device, inode), with whether a traced process mapped them
    explicit: BTreeMap<(u64, u64), (PathBuf, bool)>,
    /// rows not yet written to the trace
    rows: Vec<LibraryAttach>,
    pub notes: Vec<String>,
    /// Leave a library the poll finds to the loader hook's notice for one poll round, and leave
    /// an exec'd process stopped at the hook to its notice (set when processes are stopped at
    /// the hook, which makes the notice's attach complete).
    pub defer_polled: bool,
}

impl LibraryTracker {
    /// Attach every `--cuda-lib` file (a directory: the CUDA libraries in it). A file that is not a
    /// CUDA library, or cannot be read, is an error: a library the user named is never dropped.
    pub fn with_explicit(probes: &mut Probes, libs: &[PathBuf]) -> Result<LibraryTracker, ProbeError> {
        let mut t = LibraryTracker {
            procs: HashMap::new(),
            explicit: BTreeMap::new(),
            rows: Vec::new(),
            notes: Vec::new(),
            defer_polled: false,
        };
        for path in libs {
            // absolute (symlinks kept: errors name the path as given): the perf-event uprobe path
            // resolves a relative name through the loader's cache, not the working directory
            let path = &std::path::absolute(path)
                .map_err(|e| ProbeError::Library { path: path.clone(), detail: format!("{e}") })?;
            let files: Vec<PathBuf> = if path.is_dir() {
                let mut v: Vec<PathBuf> = std::fs::read_dir(path)
                    .map_err(|e| ProbeError::Library {
                        path: path.clone(),
                        detail: format!("reading the directory: {e}"),
                    })?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| discovery::classify(p).is_some())
                    .collect();
                v.sort();
                if v.is_empty() {
                    return Err(ProbeError::Library {
                        path: path.clone(),
                        detail: "the directory holds no libcudart or libcuda".into(),
                    });
                }
                v
            } else {
                vec![path.clone()]
            };
            for f in files {
                let kind = discovery::classify_file(&f)
                    .map_err(|e| ProbeError::Library { path: f.clone(), detail: format!("{e:#}") })?;
                let found = FoundLibrary { path: f.clone(), kind, how: "explicit".into() };
                probes
                    .attach_library(&found)
                    .map_err(|e| ProbeError::Library { path: f.clone(), detail: format!("attaching: {e:#}") })?;
                if let Some(id) = crate::loader::file_id(&f) {
                    t.explicit.insert(id, (f, false));
                }
            }
        }
        Ok(t)
    }

    /// Probe the dynamic loader the program will run under (its PT_INTERP, else the host's), so
    /// the libraries it loads are attached as they are mapped.
    pub fn attach_loader_of_program(&mut self, probes: &mut Probes, program: &Path) {
        let interp = program_interpreter(program).unwrap_or_else(|| PathBuf::from("/lib64/ld-linux-x86-64.so.2"));
        self.attach_loader(probes, &interp);
    }

    /// Probe a dynamic loader's hook (once per file), or note why not.
    pub fn attach_loader(&mut self, probes: &mut Probes, ld_so: &Path) {
        if let Err(e) = probes.attach_loader(ld_so) {
            self.notes.push(format!(
                "{}: the dynamic loader's hook is not probed ({e:#}): libraries loaded later are found by polling, and their first calls may be missed",
                ld_so.display()
            ));
        }
    }

    /// A runtime linked into the program a command runs, attached before the command starts.
    pub fn attach_program(&mut self, probes: &mut Probes, pid: u32, program: &Path) {
        let p = self.procs.entry(pid).or_default();
        p.program_checked = true;
        match discovery::static_runtime_in_file(program) {
            Some(StaticRuntime::Symbols(file)) => {
                self.attach(probes, pid, &file, &file, LibKind::Runtime, "static", true)
            }
            Some(StaticRuntime::Stripped(file)) => {
                self.procs.entry(pid).or_default().stripped_runtime = Some(file);
            }
            None => {}
        }
    }

    /// The libraries a process maps now (at the start, or found by the poll), its loader and, once,
    /// a runtime linked into its program. `complete`: nothing it did through them can have been
    /// missed (the process had not run yet, or the trace starts now).
    pub fn scan(&mut self, probes: &mut Probes, pid: u32, how: &str, complete: bool) {
        if let Some(ld) = mapped_loader(pid) {
            self.attach_loader(probes, &ld);
        }
        let (libs, notes) = discovery::mapped_cuda_libs(pid);
        self.notes.extend(notes);
        for lib in libs {
            if (how == "poll" || how == "exec") && self.defer_polled {
                // mapped by a dlopen whose loader-hook notice is due (the loader maps and relocates
                // the library, then stops the process in the hook before any of its code runs;
                // relocation from a cold page cache takes a while): the notice attaches it as
                // complete; the poll attaches it only if it is still unattached on its next round
                let Some(id) = crate::loader::file_id(&lib.open_path) else { continue };
                let p = self.procs.entry(pid).or_default();
                if !p.files.contains(&id) && p.poll_seen.insert(id) {
                    continue;
                }
            }
            self.attach(probes, pid, &lib.path_in_process, &lib.open_path, lib.kind, how, complete);
        }
        let p = self.procs.entry(pid).or_default();
        if !p.program_checked && !p.runtime {
            p.program_checked = true;
            match discovery::static_runtime_of(pid) {
                Some(StaticRuntime::Symbols(file)) => {
                    let shown = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_else(|_| file.clone());
                    self.attach(probes, pid, &shown, &file, LibKind::Runtime, "static", complete);
                }
                Some(StaticRuntime::Stripped(file)) => p.stripped_runtime = Some(file),
                None => {}
            }
        }
        self.quiet_if_done(probes, pid);
    }

    /// Whether the process has the CUDA runtime or driver attached.
    pub fn uses_cuda(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.runtime || p.driver)
    }

    /// A traced process exec'd a new program: its program may carry a runtime of its own. (What
    /// it knew before is kept: the exec notice can arrive after the new program's loader already
    /// reported its libraries.)
    pub fn exec(&mut self, probes: &mut Probes, pid: u32) {
        self.procs.entry(pid).or_default().program_checked = false;
        // Stopped by the loader hook: its notice is on the way and scans the new program and what
        // it loaded as complete (none of it ran yet). Scanning here first would attach the same
        // libraries as incomplete; the exec event and the notice travel on separate channels, so
        // either may be handled first.
        if self.defer_polled && crate::process::stopped(pid) {
            return;
        }
        self.scan(probes, pid, "exec", false);
    }

    #[allow(clippy::too_many_arguments)]
    fn attach(
        &mut self,
        probes: &mut Probes,
        pid: u32,
        shown: &Path,
        open: &Path,
        kind: LibKind,
        how: &str,
        complete: bool,
    ) {
        let Some(id) = crate::loader::file_id(open) else { return };
        let p = self.procs.entry(pid).or_default();
        if p.files.contains(&id) {
            return;
        }
        let attached_before = probes.attached.contains_key(&id);
        let found = FoundLibrary { path: open.to_path_buf(), kind, how: format!("{how}:{pid}") };
        if let Err(e) = probes.attach_library(&found) {
            self.notes.push(format!("{}: {e:#}", shown.display()));
            return;
        }
        let p = self.procs.entry(pid).or_default();
        p.files.insert(id);
        match kind {
            LibKind::Runtime => p.runtime = true,
            LibKind::Driver => p.driver = true,
            LibKind::Nccl | LibKind::Cupti => {}
        }
        if let Some(e) = self.explicit.get_mut(&id) {
            e.1 = true;
        }
        let Some(lib) = probes.attached.get(&id) else { return };
        self.rows.push(LibraryAttach {
            pid,
            path: shown.display().to_string(),
            kind: if how == "static" { "runtime_static".into() } else { kind.name().into() },
            how: if attached_before { format!("{how} (probes already in place)") } else { how.to_string() },
            attached_at_ns: now_ns(),
            // probes placed earlier for another process cover this one from its first call
            complete: complete || attached_before,
            symbols: lib.symbols.clone(),
            missing: lib.missing.clone(),
            note: String::new(),
        });
    }

    /// Once a process has its runtime and driver probed, its dlopens need not stop it any more.
    fn quiet_if_done(&mut self, probes: &mut Probes, pid: u32) {
        if let Some(p) = self.procs.get(&pid) {
            if p.runtime && p.driver {
                probes.quiet_loads(pid);
            }
        }
    }

    /// Whether the poll should still read the maps of `pid`: until its runtime and driver are both
    /// probed (reading maps takes the process's mmap lock).
    pub fn needs_poll(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_none_or(|p| !(p.runtime && p.driver))
    }

    /// The rows to write to the trace since the last call.
    pub fn take_rows(&mut self) -> Vec<LibraryAttach> {
        std::mem::take(&mut self.rows)
    }

    /// At the end of the trace: the rows and notes about what the trace could not see, for every
    /// process the trace met (exited ones included: they leave the traced map when they exit).
    pub fn finish(&mut self) -> Vec<LibraryAttach> {
        for (path, mapped) in self.explicit.values() {
            if !*mapped {
                self.notes.push(format!(
                    "{}: named with --cuda-lib and probed, but no traced process mapped it",
                    path.display()
                ));
            }
        }
        let mut pids: Vec<u32> = self.procs.keys().copied().collect();
        pids.sort_unstable();
        for pid in &pids {
            let Some(p) = self.procs.get(pid) else { continue };
            if p.driver && !p.runtime {
                let (path, note) = match &p.stripped_runtime {
                    Some(f) => (
                        f.display().to_string(),
                        "the CUDA runtime is statically linked into this program without symbols: only its driver calls are visible".to_string(),
                    ),
                    None => (
                        String::new(),
                        "no CUDA runtime found for this process (statically linked without symbols, or not used): only its driver calls are visible".to_string(),
                    ),
                };
                self.notes.push(format!("pid {pid}: {note}"));
                self.rows.push(LibraryAttach {
                    pid: *pid,
                    path,
                    kind: "runtime_static".into(),
                    how: "none".into(),
                    attached_at_ns: now_ns(),
                    complete: false,
                    symbols: Vec::new(),
                    missing: Vec::new(),
                    note,
                });
            }
        }
        self.take_rows()
    }
}

/// The dynamic loader a process runs under, as a path it can be opened at.
fn mapped_loader(pid: u32) -> Option<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| crate::host_watch::is_loader(Path::new(p)))
        .map(|p| PathBuf::from(format!("/proc/{pid}/root{p}")))
}

/// The PT_INTERP of an ELF program (None: static, not ELF, or unreadable).
fn program_interpreter(program: &Path) -> Option<PathBuf> {
    use object::read::elf::{ElfFile64, ProgramHeader};
    use object::Endianness;
    let data = std::fs::read(program).ok()?;
    let elf = ElfFile64::<Endianness>::parse(&*data).ok()?;
    let endian = elf.endian();
    for ph in elf.elf_program_headers() {
        if ph.p_type(endian) == object::elf::PT_INTERP {
            let bytes = ph.data(endian, &*data).ok()?;
            let s = std::str::from_utf8(bytes).ok()?.trim_end_matches('\0');
            return Some(PathBuf::from(s));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_names_its_interpreter() {
        let sh = Path::new("/bin/sh");
        let interp = program_interpreter(sh).expect("/bin/sh is dynamically linked");
        assert!(interp.to_string_lossy().contains("ld-linux"), "{interp:?}");
        assert!(program_interpreter(Path::new("/nonexistent")).is_none());
    }

    #[test]
    fn our_own_loader_is_found_in_our_maps() {
        let ld = mapped_loader(std::process::id()).expect("this test runs under ld.so");
        assert!(ld.starts_with(format!("/proc/{}/root", std::process::id())), "{ld:?}");
        assert!(ld.exists());
    }
}
