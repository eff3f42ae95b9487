//! Sharing CUPTI with the process's other clients (torch.profiler's Kineto, Nsight, a team's own
//! profiler). CUPTI's v1 Activity API keeps one pair of buffer callbacks and one set of enabled
//! kinds per process: the last client to call `cuptiActivityRegisterCallbacks` gets every record,
//! and anyone's `cuptiActivityDisable` or `cuptiFinalize` turns kinds off for all. Fighting over
//! them breaks the user's profiler, so the injection library gives way.
//!
//! The probes on libcupti (`ProbeLib::Cupti`) report those calls with the caller's return address;
//! a call from outside the injection library's mapping is another client's. Then:
//! - the trace gets a `foreign_client` note at the call's time, naming the thread and the library
//!   that called (the device view's hole starts there), and the injection library is told to step
//!   aside (it stops flushing: the other client gets every record);
//! - once the other client has turned off every kind it turned on (or finalized CUPTI) and made
//!   no control call for [`QUIET_NS`] (its own last flush goes to it, not to us), the library is
//!   told to resume: it registers again, re-enables its kinds and says `resumed` (the hole ends).
//!
//! It also reads the environment of each process that calls CUDA while it has not connected: one
//! whose `CUDA_INJECTION64_PATH` names another library (Nsight Systems sets it) gets an
//! `other_tool` note: its device view belongs to that tool.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use causeway_gpu_wire::{note, Control};
use causeway_model::codes::{op, OpCode};
use causeway_model::{Event, GpuTimelineNote};

/// How long the other client must have made no CUPTI control call before the library resumes.
pub const QUIET_NS: i64 = 1_000_000_000;

/// `CUPTI_ACTIVITY_KIND_*` names of the kinds a note may mention.
fn kind_name(kind: u64) -> String {
    match kind {
        1 => "MEMCPY".into(),
        2 => "MEMSET".into(),
        3 => "KERNEL".into(),
        4 => "DRIVER".into(),
        5 => "RUNTIME".into(),
        8 => "DEVICE".into(),
        10 => "CONCURRENT_KERNEL".into(),
        38 => "SYNCHRONIZATION".into(),
        k => format!("kind {k}"),
    }
}

/// What the trace loop tells the device-timeline thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// A probed CUPTI control call.
    Cupti(CuptiCall),
    /// A process calls CUDA (sent once per process), with the `CUDA_INJECTION64_PATH` its
    /// environment holds (read while it ran: [`injection_of`]).
    CudaProcess { pid: u32, injection: Option<String> },
}

/// One probed CUPTI control call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuptiCall {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Entry, unix ns (the trace's clock).
    pub ts_ns: i64,
    pub op: OpCode,
    /// The caller's return address.
    pub caller: u64,
    /// The activity kind (enable, disable).
    pub kind: u64,
}

impl CuptiCall {
    /// The call an event records, when it is one of CUPTI's controls.
    pub fn of_event(e: &Event) -> Option<CuptiCall> {
        let code = OpCode::new(e.source, e.op);
        [op::CUPTI_REGISTER_CALLBACKS, op::CUPTI_ACTIVITY_ENABLE, op::CUPTI_ACTIVITY_DISABLE, op::CUPTI_FINALIZE]
            .contains(&code)
            .then(|| CuptiCall {
                pid: e.pid,
                tid: e.tid,
                comm: e.comm.clone(),
                ts_ns: e.ts_ns,
                op: code,
                caller: e.arg0 as u64,
                kind: e.arg1 as u64,
            })
    }
}

/// What the thread must do: send a control to a process, store a note.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Control(u32, Control),
    Note(GpuTimelineNote),
}

/// Another client holding the records of one process.
#[derive(Debug, Default)]
struct Holder {
    /// Its last control call, unix ns.
    last_ns: i64,
    /// The kinds it turned on and has not turned off.
    enabled: BTreeSet<u64>,
    /// It turned a kind off, or finalized CUPTI.
    stopping: bool,
}

/// One process's state.
#[derive(Debug, Default)]
struct Proc {
    holder: Option<Holder>,
    /// Its environment was read (`other_tool`).
    env_checked: bool,
}

/// The coexistence rules of every traced process (owned by the device-timeline thread).
pub struct Coexist {
    /// The injection library the trace set (its file name identifies its mappings).
    library: PathBuf,
    procs: HashMap<u32, Proc>,
    /// Where `/proc` is (tests point it at a fake one).
    proc_root: PathBuf,
}

impl Coexist {
    pub fn new(library: &Path) -> Coexist {
        Coexist { library: library.to_path_buf(), procs: HashMap::new(), proc_root: PathBuf::from("/proc") }
    }

    #[cfg(test)]
    fn with_proc_root(mut self, root: &Path) -> Coexist {
        self.proc_root = root.to_path_buf();
        self
    }

    /// Take in one report; `connected` says whether the process's injection library is connected.
    pub fn on(&mut self, w: Watch, connected: impl Fn(u32) -> bool) -> Vec<Action> {
        match w {
            Watch::Cupti(c) => self.on_cupti(c),
            Watch::CudaProcess { pid, injection } => {
                let p = self.procs.entry(pid).or_default();
                if p.env_checked || connected(pid) {
                    return Vec::new();
                }
                p.env_checked = true;
                self.other_tool(pid, injection).into_iter().map(Action::Note).collect()
            }
        }
    }

    /// The processes whose other client is done: resume them (`now_ns`: unix ns).
    pub fn tick(&mut self, now_ns: i64) -> Vec<Action> {
        let mut out = Vec::new();
        for (pid, p) in self.procs.iter_mut() {
            let done =
                p.holder.as_ref().is_some_and(|h| h.stopping && h.enabled.is_empty() && now_ns - h.last_ns >= QUIET_NS);
            if done {
                p.holder = None;
                out.push(Action::Control(*pid, Control::Resume));
            }
        }
        out.sort_by_key(|a| match a {
            Action::Control(pid, _) => *pid,
            Action::Note(n) => n.pid,
        });
        out
    }

    /// Whether the process's library is stepped aside (another client holds the records).
    #[cfg(test)]
    fn aside(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.holder.is_some())
    }

    fn on_cupti(&mut self, c: CuptiCall) -> Vec<Action> {
        let maps = std::fs::read_to_string(self.proc_root.join(c.pid.to_string()).join("maps")).unwrap_or_default();
        let caller = mapping_of(&maps, c.caller);
        if caller.as_deref().is_some_and(|path| self.is_ours(path)) {
            return Vec::new();
        }
        let who = caller.as_deref().map_or_else(
            || format!("{:#x} (no mapped file)", c.caller),
            |p| Path::new(p).file_name().map_or(p.to_string(), |f| f.to_string_lossy().into_owned()),
        );
        let p = self.procs.entry(c.pid).or_default();
        let what = match c.op {
            o if o == op::CUPTI_REGISTER_CALLBACKS => {
                "took CUPTI's activity records (cuptiActivityRegisterCallbacks)".to_string()
            }
            o if o == op::CUPTI_ACTIVITY_ENABLE => format!("turned CUPTI activity {} on", kind_name(c.kind)),
            o if o == op::CUPTI_ACTIVITY_DISABLE => {
                format!("turned CUPTI activity {} off for every client", kind_name(c.kind))
            }
            _ => "tore CUPTI down (cuptiFinalize)".to_string(),
        };
        let Some(h) = p.holder.as_mut() else {
            // an enable alone takes nothing from us (its records come to us as well)
            if c.op == op::CUPTI_ACTIVITY_ENABLE {
                return Vec::new();
            }
            let mut h = Holder { last_ns: c.ts_ns, ..Holder::default() };
            h.apply(&c);
            p.holder = Some(h);
            let detail = format!(
                "tid {} ({}) of pid {} {what}, called from {who}: another CUPTI client (a profiler such as torch.profiler or Nsight) holds the device view from here; the injection library steps aside until it is done",
                c.tid, c.comm, c.pid
            );
            let reason = format!("tid {} ({}) {what}, called from {who}", c.tid, c.comm);
            return vec![
                Action::Note(GpuTimelineNote {
                    pid: c.pid,
                    ts_ns: c.ts_ns,
                    kind: note::FOREIGN_CLIENT.into(),
                    count: 0,
                    detail,
                }),
                Action::Control(c.pid, Control::StepAside { reason }),
            ];
        };
        h.last_ns = h.last_ns.max(c.ts_ns);
        h.apply(&c);
        Vec::new()
    }

    fn is_ours(&self, mapped: &str) -> bool {
        let name = |p: &Path| p.file_name().map(|f| f.to_os_string());
        Path::new(mapped) == self.library || name(Path::new(mapped)) == name(&self.library)
    }

    /// An `other_tool` note when the process's environment names another injection library.
    fn other_tool(&self, pid: u32, injection: Option<String>) -> Option<GpuTimelineNote> {
        let value = injection?;
        if value.is_empty() || self.is_ours(&value) {
            return None;
        }
        let tool = if value.contains("nsight") || value.contains("ToolsInjection") { " (Nsight Systems)" } else { "" };
        Some(GpuTimelineNote {
            pid,
            ts_ns: crate::decode::now_ns(),
            kind: note::OTHER_TOOL.into(),
            count: 0,
            detail: format!(
                "pid {pid} loads another CUDA injection library, {}={value}{tool}: its device view belongs to that tool (this trace has its host view only)",
                super::INJECTION_ENV
            ),
        })
    }
}

impl Holder {
    fn apply(&mut self, c: &CuptiCall) {
        match c.op {
            o if o == op::CUPTI_REGISTER_CALLBACKS => self.stopping = false,
            o if o == op::CUPTI_ACTIVITY_ENABLE => {
                self.enabled.insert(c.kind);
                self.stopping = false;
            }
            o if o == op::CUPTI_ACTIVITY_DISABLE => {
                self.enabled.remove(&c.kind);
                self.stopping = true;
            }
            _ => {
                // finalize: every kind and callback is gone
                self.enabled.clear();
                self.stopping = true;
            }
        }
    }
}

/// The `CUDA_INJECTION64_PATH` of a `/proc/PID/environ` text (NUL-separated).
pub fn injection_of(environ: &[u8]) -> Option<String> {
    causeway_model::environ_var(environ, super::INJECTION_ENV).map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The file mapped at `addr` in a `/proc/PID/maps` text.
fn mapping_of(maps: &str, addr: u64) -> Option<String> {
    maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let (lo, hi) = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
        if !(lo..hi).contains(&addr) {
            return None;
        }
        let path = f.nth(4)?;
        path.starts_with('/').then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f0000000000-7f0000100000 r-xp 00000000 08:01 11 /opt/causeway/libcauseway_inject.so
7f1000000000-7f1000100000 r-xp 00000000 08:01 12 /usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so
7f2000000000-7f2000001000 rw-p 00000000 00:00 0
";

    fn call(op: OpCode, ts_ns: i64, caller: u64, kind: u64) -> Watch {
        Watch::Cupti(CuptiCall { pid: 42, tid: 43, comm: "python".into(), ts_ns, op, caller, kind })
    }

    fn fake_proc() -> (tempfile::TempDir, Coexist) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("42")).unwrap();
        std::fs::write(dir.path().join("42/maps"), MAPS).unwrap();
        let c = Coexist::new(Path::new("/tmp/build/libcauseway_inject.so")).with_proc_root(dir.path());
        (dir, c)
    }

    fn cuda_process(env: &str) -> Watch {
        Watch::CudaProcess { pid: 42, injection: injection_of(env.replace('\n', "\0").as_bytes()) }
    }

    const OURS: u64 = 0x7f00_0000_1000;
    const TORCH: u64 = 0x7f10_0000_2000;
    const S: i64 = 1_000_000_000;

    #[test]
    fn the_librarys_own_calls_change_nothing() {
        let (_d, mut c) = fake_proc();
        for o in
            [op::CUPTI_REGISTER_CALLBACKS, op::CUPTI_ACTIVITY_ENABLE, op::CUPTI_ACTIVITY_DISABLE, op::CUPTI_FINALIZE]
        {
            assert!(c.on(call(o, S, OURS, 10), |_| true).is_empty());
        }
        assert!(!c.aside(42));
    }

    #[test]
    fn a_profiler_takes_the_records_and_the_library_resumes_only_after_it_is_done() {
        let (_d, mut c) = fake_proc();
        let a = c.on(call(op::CUPTI_REGISTER_CALLBACKS, 10 * S, TORCH, 0), |_| true);
        assert_eq!(a.len(), 2, "{a:?}");
        let Action::Note(n) = &a[0] else { panic!("{a:?}") };
        assert_eq!((n.kind.as_str(), n.ts_ns), ("foreign_client", 10 * S));
        assert!(n.detail.contains("tid 43 (python)") && n.detail.contains("libtorch_cuda.so"), "{}", n.detail);
        assert!(
            matches!(&a[1], Action::Control(42, Control::StepAside { reason }) if reason.contains("libtorch_cuda.so"))
        );
        assert!(c.aside(42));
        // it turns two kinds on and records for a while: no resume however long it runs
        c.on(call(op::CUPTI_ACTIVITY_ENABLE, 10 * S, TORCH, 10), |_| true);
        c.on(call(op::CUPTI_ACTIVITY_ENABLE, 10 * S, TORCH, 1), |_| true);
        assert!(c.tick(100 * S).is_empty());
        // one kind off: still recording the other
        c.on(call(op::CUPTI_ACTIVITY_DISABLE, 101 * S, TORCH, 10), |_| true);
        assert!(c.tick(105 * S).is_empty());
        // the last off; its flush may follow: resume only after a quiet second
        c.on(call(op::CUPTI_ACTIVITY_DISABLE, 106 * S, TORCH, 1), |_| true);
        assert!(c.tick(106 * S + QUIET_NS - 1).is_empty());
        assert_eq!(c.tick(106 * S + QUIET_NS), vec![Action::Control(42, Control::Resume)]);
        assert!(!c.aside(42));
        assert!(c.tick(200 * S).is_empty(), "once");
        // it starts again: aside again
        let a = c.on(call(op::CUPTI_REGISTER_CALLBACKS, 300 * S, TORCH, 0), |_| true);
        assert!(matches!(&a[1], Action::Control(42, Control::StepAside { .. })));
    }

    #[test]
    fn a_foreign_disable_or_finalize_is_a_hole_too_and_an_enable_alone_is_not() {
        let (_d, mut c) = fake_proc();
        assert!(c.on(call(op::CUPTI_ACTIVITY_ENABLE, S, TORCH, 10), |_| true).is_empty());
        assert!(!c.aside(42));
        let a = c.on(call(op::CUPTI_ACTIVITY_DISABLE, 2 * S, TORCH, 10), |_| true);
        let Action::Note(n) = &a[0] else { panic!("{a:?}") };
        assert!(n.detail.contains("CONCURRENT_KERNEL off for every client"), "{}", n.detail);
        assert_eq!(c.tick(3 * S), vec![Action::Control(42, Control::Resume)]);
        let a = c.on(call(op::CUPTI_FINALIZE, 4 * S, 0x1234, 0), |_| true);
        let Action::Note(n) = &a[0] else { panic!("{a:?}") };
        assert!(n.detail.contains("cuptiFinalize") && n.detail.contains("0x1234 (no mapped file)"), "{}", n.detail);
        assert_eq!(c.tick(5 * S), vec![Action::Control(42, Control::Resume)]);
    }

    #[test]
    fn another_injection_library_in_the_environment_is_said_once() {
        let (_d, mut c) = fake_proc();
        let nsys = cuda_process(
            "PATH=/usr/bin\nCUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/2025.1/target-linux-x64/libToolsInjection64.so\n",
        );
        assert!(c.on(nsys.clone(), |_| true).is_empty(), "connected: the view is ours");
        let a = c.on(nsys.clone(), |_| false);
        let [Action::Note(n)] = a.as_slice() else { panic!("{a:?}") };
        assert_eq!(n.kind, "other_tool");
        assert!(n.detail.contains("libToolsInjection64.so (Nsight Systems)"), "{}", n.detail);
        assert!(c.on(nsys, |_| false).is_empty(), "once");
        let (_d, mut c) = fake_proc();
        let ours = cuda_process("CUDA_INJECTION64_PATH=/elsewhere/libcauseway_inject.so\n");
        assert!(c.on(ours, |_| false).is_empty(), "our own library, another path");
        let (_d, mut c) = fake_proc();
        assert!(c.on(cuda_process("HOME=/root\n"), |_| false).is_empty(), "no variable: nothing to say here");
        assert_eq!(injection_of(b"A=1\0CUDA_INJECTION64_PATH=/x.so\0B=2"), Some("/x.so".into()));
        assert_eq!(injection_of(b"XCUDA_INJECTION64_PATH=/x.so"), None);
    }

    #[test]
    fn a_mapping_is_found_by_address() {
        assert_eq!(mapping_of(MAPS, OURS).as_deref(), Some("/opt/causeway/libcauseway_inject.so"));
        assert_eq!(mapping_of(MAPS, 0x7f20_0000_0010), None, "anonymous");
        assert_eq!(mapping_of(MAPS, 0x10), None);
        assert_eq!(mapping_of("garbage\n-\n", 5), None);
    }
}
