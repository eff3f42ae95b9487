//! Loading `causeway.bpf.o` with aya and attaching it: uprobe + uretprobe pairs on every CUDA
//! runtime and driver symbol of each library (by file offset, so versioned symbols and `_ptsz`
//! twins resolve; a missing symbol is a note, never an error), and the host tracepoints (tp_btf).
//! Dropping [`Probes`] detaches every link and unloads the programs.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap};
use aya::programs::uprobe::UProbeLink;
use aya::programs::{BtfTracePoint, UProbe};
use aya::{Btf, Ebpf, EbpfLoader};

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use aya::maps::Map;

use crate::cuda_table::CUDA_PROBES;
use crate::discovery::{FoundLibrary, LibKind};
use crate::symbols::ElfSymbols;
use crate::wire::cnt;

/// The compiled BPF object (built by build.rs from `ebpf/`).
pub(crate) static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/causeway.bpf.o"));

/// (program, tp_btf tracepoint, required for per-call attribution), attached in this order. The
/// interrupt exits go before their entries (an entry without its exit would leave a CPU counted as
/// in an interrupt until its next context switch), and both before `sched_waking`, which leaves
/// the waker of a wake-up issued from an interrupt unknown (`ebpf/sched.bpf.c`).
pub const HOST_PROBES: &[(&str, &str, bool)] = &[
    ("cw_sched_switch", "sched_switch", true),
    ("cw_irq_exit", "irq_handler_exit", false),
    ("cw_softirq_exit", "softirq_exit", false),
    ("cw_hrtimer_exit", "hrtimer_expire_exit", false),
    ("cw_irq_enter", "irq_handler_entry", false),
    ("cw_softirq_enter", "softirq_entry", false),
    ("cw_hrtimer_enter", "hrtimer_expire_entry", false),
    ("cw_sched_waking", "sched_waking", true),
    ("cw_sched_wakeup", "sched_wakeup", true),
    ("cw_proc_fork", "sched_process_fork", true),
    ("cw_proc_exec", "sched_process_exec", false),
    ("cw_proc_exit", "sched_process_exit", false),
    ("cw_oom_victim", "mark_victim", false),
    ("cw_bio_queue", "block_bio_queue", false),
    ("cw_block_insert", "block_rq_insert", false),
    ("cw_block_issue", "block_rq_issue", false),
    ("cw_block_complete", "block_rq_complete", false),
    ("cw_page_alloc", "mm_page_alloc", false),
];

/// (program, tp_btf tracepoint) of the network family (`ebpf/net.bpf.c`), attached with the host
/// probes unless `LoadOptions::network` is off. None is needed for per-call attribution.
pub const NETWORK_PROBES: &[(&str, &str)] = &[
    ("cw_sys_enter", "sys_enter"),
    ("cw_sys_exit", "sys_exit"),
    ("cw_tcp_retransmit", "tcp_retransmit_skb"),
    ("cw_sock_state", "inet_sock_set_state"),
    ("cw_sock_send_length", "sock_send_length"),
    ("cw_sock_recv_length", "sock_recv_length"),
];

/// (program, tp_btf tracepoint) of the footprint family (`ebpf/footprint.bpf.c`), attached with the
/// host probes only when `LoadOptions::footprint` is on (`trace --footprint`).
pub const FOOTPRINT_PROBES: &[(&str, &str)] = &[
    ("cw_fp_sys_enter", "sys_enter"),
    ("cw_fp_sys_exit", "sys_exit"),
    ("cw_fp_fork", "sched_process_fork"),
    ("cw_fp_exec", "sched_process_exec"),
];

/// The `attachments` row (kind `network`) that says what a trace has of the network: the network
/// tracepoints in place (`symbols`) and those that are not (`missing`), and what is absent for it
/// (`note`). `wanted`: the network probes were asked for.
pub fn network_row(wanted: bool, attached: &[String], at_ns: i64) -> causeway_model::LibraryAttach {
    let (symbols, missing): (Vec<String>, Vec<String>) =
        NETWORK_PROBES.iter().map(|(_, tp)| tp.to_string()).partition(|tp| wanted && attached.contains(tp));
    let lacks = |tps: &[&str]| tps.iter().any(|tp| missing.iter().any(|m| m == tp));
    let mut absent = Vec::new();
    if lacks(&["sys_enter", "sys_exit"]) {
        absent.push("socket calls and network waits");
    }
    if lacks(&["tcp_retransmit_skb"]) {
        absent.push("TCP retransmits");
    }
    if lacks(&["inet_sock_set_state"]) {
        absent.push("TCP state changes");
    }
    if lacks(&["sock_send_length", "sock_recv_length"]) {
        absent.push("the untraced processes' socket traffic");
    }
    let note = match (wanted, absent.is_empty()) {
        (false, _) => "network not recorded: the network probes were off".to_string(),
        (true, true) => String::new(),
        (true, false) => format!("not recorded for want of their tracepoints: {}", absent.join(", ")),
    };
    causeway_model::LibraryAttach {
        kind: "network".into(),
        how: "tracepoints".into(),
        attached_at_ns: at_ns,
        // in place before the traced processes were let go: nothing before is missing
        complete: true,
        symbols,
        missing,
        note,
        ..Default::default()
    }
}

/// Page allocation totals of one process (`struct cw_pages`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Pages {
    pub count: u64,
    pub bytes: u64,
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for Pages {}

/// The return programs of `ebpf/cuda_probes.bpf.c` (see `CudaProbe::return_program`).
const RETURN_PROGRAMS: [&str; 7] =
    ["rt_ret", "drv_ret", "rt_launch_ret", "drv_launch_ret", "nm_ret", "nccl_ret", "cupti_ret"];

/// The programs of the uprobe_multi path: `cw_entry` dispatches most symbols by their cookie; the
/// rows with a link of their own (the launches) skip that helper call and switch; the return
/// programs know their record kind and slot, so they need no cookie either; `cw_dl_state` is the
/// dynamic loader's hook (its cookie is the distance to `_r_debug`).
struct MultiPrograms {
    entry: OwnedFd,
    own: HashMap<&'static str, OwnedFd>,
    ret: HashMap<&'static str, OwnedFd>,
    dl: OwnedFd,
}

impl MultiPrograms {
    /// Every program with the instructions the verifier went through to accept it.
    fn verified_insns(&self) -> Vec<(String, u32)> {
        let named = self.own.iter().chain(&self.ret).map(|(n, fd)| (n.to_string(), fd));
        let all = named.chain([("cw_entry".to_string(), &self.entry), ("cw_dl_state".to_string(), &self.dl)]);
        let mut v: Vec<(String, u32)> =
            all.filter_map(|(n, fd)| crate::multi::verified_insns(fd).ok().map(|i| (n, i))).collect();
        v.sort();
        v
    }

    fn load(fds: &HashMap<String, RawFd>) -> anyhow::Result<MultiPrograms> {
        let core = crate::multi::core_relocated(OBJECT)?;
        let load = |name| crate::multi::load_program(OBJECT, name, fds, &core);
        let mut own = HashMap::new();
        for p in CUDA_PROBES.iter().filter(|p| p.own_link) {
            own.insert(p.program, load(p.program)?);
        }
        let mut ret = HashMap::new();
        for r in RETURN_PROGRAMS {
            ret.insert(r, load(r)?);
        }
        Ok(MultiPrograms { entry: load("cw_entry")?, own, ret, dl: load("cw_dl_state")? })
    }
}

/// Ring sizes and options fixed at load time.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub ring_cuda_bytes: u32,
    pub ring_sched_bytes: u32,
    pub ring_host_bytes: u32,
    pub stacks: bool,
    pub host_probes: bool,
    /// With `host_probes`: the network programs ([`NETWORK_PROBES`]).
    pub network: bool,
    /// With `host_probes`: the footprint programs ([`FOOTPRINT_PROBES`]).
    pub footprint: bool,
    /// Use one perf-event uprobe per symbol even where uprobe_multi links are available (also set by
    /// the environment variable CAUSEWAY_NO_UPROBE_MULTI).
    pub perf_uprobes: bool,
    /// Stop a traced process (SIGSTOP) when it finishes a dlopen until its new CUDA libraries are
    /// attached (only for processes Causeway launched: a stop is visible to the parent).
    pub stop_on_load: bool,
    /// `trace --all`: trace any process from its first call into a probed library, and hear of
    /// every process's library loads (`cfg_adopt_callers`).
    pub adopt_callers: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            ring_cuda_bytes: 16 << 20,
            ring_sched_bytes: 8 << 20,
            ring_host_bytes: 2 << 20,
            stacks: false,
            host_probes: true,
            network: true,
            footprint: false,
            perf_uprobes: false,
            stop_on_load: false,
            adopt_callers: false,
        }
    }
}

/// What got attached to one library file.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct AttachedLib {
    /// The file as it was opened (under `/proc/PID/root` for a library of another mount namespace).
    pub path: PathBuf,
    /// (device, inode) of the file: what a uprobe is attached to.
    #[serde(skip)]
    pub file_id: (u64, u64),
    pub kind: LibKind,
    pub how: String,
    /// Symbols with a uprobe + uretprobe.
    pub symbols: Vec<String>,
    /// Symbols this library does not export (twins many builds lack; never fatal).
    pub missing: Vec<String>,
}

/// The rings, taken out of the object for the reader thread.
pub struct Rings {
    pub cuda: RingBuf<MapData>,
    pub sched: RingBuf<MapData>,
    pub host: RingBuf<MapData>,
    pub stacks: Option<StackTraceMap<MapData>>,
    /// `cw_py_stacks`: the Python stacks, by the key a call carries (with `stacks` only).
    pub py_stacks: Option<BpfHashMap<MapData, u32, crate::python::PyStackRaw>>,
}

pub struct Probes {
    ebpf: Ebpf,
    traced: BpfHashMap<MapData, u32, u8>,
    traced_bits: Array<MapData, u64>,
    counters: PerCpuArray<MapData, u64>,
    pages: PerCpuHashMap<MapData, u32, Pages>,
    /// `cw_py_procs`: the frame-walk layout of each traced Python process.
    py_procs: BpfHashMap<MapData, u32, crate::python::layout::PyLayoutRaw>,
    /// `trace --footprint`: the kernel's aggregates of what the traced processes touched.
    pub(crate) footprint: Option<crate::footprint::FpMaps>,
    /// Attached files by (device, inode): the same file under two paths is attached once, and a
    /// different file at a known path is never taken for it.
    pub attached: BTreeMap<(u64, u64), AttachedLib>,
    /// Dynamic loaders (ld.so files) whose `_dl_debug_state` is probed.
    loaders: BTreeMap<(u64, u64), PathBuf>,
    dl_quiet: BpfHashMap<MapData, u32, u8>,
    pub host_attached: Vec<String>,
    pub notes: Vec<String>,
    rings: Option<Rings>,
    /// Uprobe links taken out of aya so they can be closed in parallel (see `detach_all`).
    links: Vec<UProbeLink>,
    /// The programs loaded for uprobe_multi (None: the perf-event path is used).
    multi: Option<MultiPrograms>,
    multi_links: Vec<OwnedFd>,
    /// Whether aya's per-symbol uprobe programs are loaded (the fallback path).
    perf_loaded: bool,
    /// Whether aya's `cw_dl_state` is loaded (the fallback path).
    dl_loaded: bool,
}

impl Probes {
    /// Load the object and attach the host tracepoints. No CUDA library is attached yet.
    pub fn load(opts: &LoadOptions) -> anyhow::Result<Probes> {
        raise_memlock();
        let stacks: u32 = opts.stacks.into();
        let stop_on_load: u32 = opts.stop_on_load.into();
        let adopt_callers: u32 = opts.adopt_callers.into();
        let footprint: u32 = (opts.host_probes && opts.footprint).into();
        let ring = |bytes: u32| bytes.next_power_of_two().max(4096);
        // a submit wakes the reader once a ring is a quarter full (cw_submit in ebpf/common.bpf.h)
        let wake = |bytes: u32| u64::from(ring(bytes) / 4);
        let (wake_cuda, wake_sched, wake_host) =
            (wake(opts.ring_cuda_bytes), wake(opts.ring_sched_bytes), wake(opts.ring_host_bytes));
        let mut ebpf = EbpfLoader::new()
            .allow_unsupported_maps() // cw_inflight is task storage, created but not wrapped by aya 0.13
            .set_global("cfg_stacks", &stacks, true)
            .set_global("cfg_stop_on_load", &stop_on_load, true)
            .set_global("cfg_adopt_callers", &adopt_callers, true)
            .set_global("cfg_footprint", &footprint, true)
            .set_global("cfg_wake_cuda", &wake_cuda, true)
            .set_global("cfg_wake_sched", &wake_sched, true)
            .set_global("cfg_wake_host", &wake_host, true)
            .set_max_entries("cw_rb_cuda", ring(opts.ring_cuda_bytes))
            .set_max_entries("cw_rb_sched", ring(opts.ring_sched_bytes))
            .set_max_entries("cw_rb_host", ring(opts.ring_host_bytes))
            .load(OBJECT)
            .map_err(|e| {
                anyhow::anyhow!("loading the BPF object: {e} (is this root, with BTF at /sys/kernel/btf/vmlinux?)")
            })?;
        let mut notes = Vec::new();
        let mut multi = None;
        if !opts.perf_uprobes && std::env::var_os("CAUSEWAY_NO_UPROBE_MULTI").is_none() {
            let fds: std::collections::HashMap<String, RawFd> =
                ebpf.maps().filter_map(|(n, m)| map_fd(m).map(|fd| (n.to_string(), fd))).collect();
            match MultiPrograms::load(&fds) {
                Ok(p) => multi = Some(p),
                Err(e) => notes.push(format!(
                    "uprobe_multi unavailable, using one perf-event uprobe per symbol (slower to detach): {e:#}"
                )),
            }
        }
        let mut host_attached = Vec::new();
        if opts.host_probes {
            let btf = Btf::from_sys_fs()?;
            let network = NETWORK_PROBES.iter().filter(|_| opts.network).map(|(p, t)| (p, t, &false));
            let footprint = FOOTPRINT_PROBES.iter().filter(|_| opts.footprint).map(|(p, t)| (p, t, &false));
            for (prog, tp, required) in HOST_PROBES.iter().map(|(p, t, r)| (p, t, r)).chain(network).chain(footprint) {
                let r = (|| -> anyhow::Result<()> {
                    let p: &mut BtfTracePoint =
                        ebpf.program_mut(prog).ok_or_else(|| anyhow::anyhow!("no program {prog}"))?.try_into()?;
                    p.load(tp, &btf)?;
                    p.attach()?;
                    Ok(())
                })();
                match r {
                    Ok(()) if prog.starts_with("cw_fp_") => host_attached.push(format!("footprint:{tp}")),
                    Ok(()) => host_attached.push(tp.to_string()),
                    Err(e) => notes.push(format!(
                        "tracepoint {tp} not attached ({}): {e:#}",
                        if *required { "per-call attribution loses it" } else { "optional" }
                    )),
                }
            }
        }
        let take =
            |ebpf: &mut Ebpf, name: &str| ebpf.take_map(name).ok_or_else(|| anyhow::anyhow!("map {name} missing"));
        let traced = BpfHashMap::try_from(take(&mut ebpf, "cw_traced")?)?;
        let traced_bits = Array::try_from(take(&mut ebpf, "cw_traced_bits")?)?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "cw_counters")?)?;
        let dl_quiet = BpfHashMap::try_from(take(&mut ebpf, "cw_dl_quiet")?)?;
        let pages = PerCpuHashMap::try_from(take(&mut ebpf, "cw_pages")?)?;
        let py_procs = BpfHashMap::try_from(take(&mut ebpf, "cw_py_procs")?)?;
        let footprint = if footprint != 0 { Some(crate::footprint::FpMaps::take(&mut ebpf)?) } else { None };
        let rings = Rings {
            cuda: RingBuf::try_from(take(&mut ebpf, "cw_rb_cuda")?)?,
            sched: RingBuf::try_from(take(&mut ebpf, "cw_rb_sched")?)?,
            host: RingBuf::try_from(take(&mut ebpf, "cw_rb_host")?)?,
            stacks: if opts.stacks { Some(StackTraceMap::try_from(take(&mut ebpf, "cw_stacks")?)?) } else { None },
            py_stacks: if opts.stacks { Some(BpfHashMap::try_from(take(&mut ebpf, "cw_py_stacks")?)?) } else { None },
        };
        Ok(Probes {
            ebpf,
            traced,
            traced_bits,
            counters,
            pages,
            py_procs,
            footprint,
            attached: BTreeMap::new(),
            loaders: BTreeMap::new(),
            dl_quiet,
            host_attached,
            notes,
            rings: Some(rings),
            links: Vec::new(),
            multi,
            multi_links: Vec::new(),
            perf_loaded: false,
            dl_loaded: false,
        })
    }

    pub fn take_rings(&mut self) -> Option<Rings> {
        self.rings.take()
    }

    /// Start tracing a process (its threads, and the children it forks from now on).
    pub fn trace_pid(&mut self, tgid: u32) -> anyhow::Result<()> {
        self.traced.insert(tgid, 1u8, 0)?;
        let idx = tgid >> 6;
        let word = self.traced_bits.get(&idx, 0)?;
        self.traced_bits.set(idx, word | (1u64 << (tgid & 63)), 0)?;
        Ok(())
    }

    /// Walk the Python frames of `pid`'s calls with `layout` (replacing any earlier one: exec).
    pub fn set_python(&mut self, pid: u32, layout: &crate::python::layout::PyLayoutRaw) -> anyhow::Result<()> {
        self.py_procs.insert(pid, *layout, 0)?;
        Ok(())
    }

    /// Stop walking Python frames of `pid` (it exec'd another program).
    pub fn forget_python(&mut self, pid: u32) {
        let _ = self.py_procs.remove(&pid);
    }

    /// Whether `pid` is in the traced set (put there by user space, fork following or `--all`).
    pub fn is_traced(&self, pid: u32) -> bool {
        self.traced.get(&pid, 0).is_ok()
    }

    /// The traced set now (a process leaves it when it exits).
    pub fn traced_pids(&self) -> Vec<u32> {
        self.traced.keys().filter_map(|k| k.ok()).collect()
    }

    /// Whether the file at `path` (any path to it) is attached.
    pub fn is_attached(&self, path: &Path) -> bool {
        file_id(path).is_some_and(|id| self.attached.contains_key(&id))
    }

    /// Stop stopping `pid` at its dlopens (its CUDA libraries are all attached): the loader hook
    /// only tells user space from now on.
    pub fn quiet_loads(&mut self, pid: u32) {
        let _ = self.dl_quiet.insert(pid, 1u8, 0);
    }

    /// Attach every probe of the library's kind (a runtime linked into an executable is of kind
    /// Runtime too). Returns the number of symbols attached; 0 when the file was attached already.
    pub fn attach_library(&mut self, lib: &FoundLibrary) -> anyhow::Result<usize> {
        let id = file_id(&lib.path).ok_or_else(|| anyhow::anyhow!("{}: cannot stat the file", lib.path.display()))?;
        if self.attached.contains_key(&id) {
            return Ok(0);
        }
        let syms = ElfSymbols::load(&lib.path)?;
        let want = lib.kind.probes();
        let mut done = AttachedLib {
            path: lib.path.clone(),
            file_id: id,
            kind: lib.kind,
            how: lib.how.clone(),
            symbols: Vec::new(),
            missing: Vec::new(),
        };
        // (row, symbol, file offset)
        let mut points = Vec::new();
        for p in CUDA_PROBES.iter().filter(|p| p.lib == want) {
            for name in p.symbols {
                match syms.offset_of(name) {
                    Some(off) => points.push((p, *name, off)),
                    None => done.missing.push(name.to_string()),
                }
            }
        }
        if let Some(progs) = &self.multi {
            // one link per entry program (cw_entry with cookies, or a row's own program) and one
            // per return program
            let mut entries: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
            let mut returns: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
            for (p, _, off) in &points {
                let prog = if p.own_link { p.program } else { "cw_entry" };
                entries.entry(prog).or_default().push((*off, p.cookie()));
                returns.entry(p.return_program()).or_default().push((*off, 0));
            }
            for (prog, pts) in &entries {
                let fd = if *prog == "cw_entry" { &progs.entry } else { &progs.own[prog] };
                self.multi_links.push(crate::multi::attach(fd, &lib.path, pts, false)?);
            }
            for (prog, pts) in &returns {
                self.multi_links.push(crate::multi::attach(&progs.ret[prog], &lib.path, pts, true)?);
            }
            done.symbols.extend(points.iter().map(|p| p.1.to_string()));
        } else {
            self.load_perf_programs()?;
            for (p, name, off) in &points {
                let ebpf = &mut self.ebpf;
                let links = &mut self.links;
                let r = (|| -> anyhow::Result<()> {
                    for prog in [p.program, p.return_program()] {
                        let up = uprobe(ebpf, prog)?;
                        let link = up.attach(None, *off, &lib.path, None)?;
                        links.push(up.take_link(link)?);
                    }
                    Ok(())
                })();
                match r {
                    Ok(()) => done.symbols.push(name.to_string()),
                    Err(e) => self.notes.push(format!("{}: {name} not attached: {e:#}", lib.path.display())),
                }
            }
        }
        let n = done.symbols.len();
        if n == 0 {
            self.notes.push(format!("{}: no CUDA symbol found, nothing attached", lib.path.display()));
        }
        self.attached.insert(id, done);
        Ok(n)
    }

    /// The uprobe programs with the instructions the verifier processed to accept each (its limit
    /// is 1,000,000 per program); empty on the perf-event path (aya does not report them).
    pub fn verified_insns(&self) -> Vec<(String, u32)> {
        self.multi.as_ref().map(MultiPrograms::verified_insns).unwrap_or_default()
    }

    /// Probe the debugger hook `_dl_debug_state` of a dynamic loader (ld.so) file, once per file:
    /// every dlopen of a traced process is then reported (and, with `stop_on_load`, waited for).
    /// Returns false when the file was probed already.
    pub fn attach_loader(&mut self, ld_so: &Path) -> anyhow::Result<bool> {
        let id = file_id(ld_so).ok_or_else(|| anyhow::anyhow!("{}: cannot stat the file", ld_so.display()))?;
        if self.loaders.contains_key(&id) {
            return Ok(false);
        }
        let data = std::fs::read(ld_so)?;
        let (off, delta) = loader_hook(&data)
            .ok_or_else(|| anyhow::anyhow!("{}: no _dl_debug_state symbol with a file offset", ld_so.display()))?;
        match &self.multi {
            Some(progs) => {
                self.multi_links.push(crate::multi::attach(&progs.dl, ld_so, &[(off, delta)], false)?);
            }
            None => {
                let up = uprobe(&mut self.ebpf, "cw_dl_state")?;
                if !self.dl_loaded {
                    up.load()?;
                    self.dl_loaded = true;
                }
                let link = up.attach(None, off, ld_so, None)?;
                self.links.push(up.take_link(link)?);
            }
        }
        self.loaders.insert(id, ld_so.to_path_buf());
        Ok(true)
    }

    /// The fd of one of the object's maps (`cw_inflight`, `cw_offcpu`: read at the end of a trace).
    pub(crate) fn map_raw_fd(&self, name: &str) -> Option<RawFd> {
        self.ebpf.map(name).and_then(map_fd)
    }

    /// Sum over CPUs of counter `idx`.
    pub fn counter(&self, idx: u32) -> u64 {
        self.counters.get(&idx, 0).map(|v| v.iter().copied().fold(0u64, u64::wrapping_add)).unwrap_or(0)
    }

    pub fn counters(&self) -> Vec<u64> {
        (0..cnt::N).map(|i| self.counter(i)).collect()
    }

    /// Cumulative page allocations per traced process.
    pub fn pages(&self) -> Vec<(u32, Pages)> {
        self.pages
            .iter()
            .filter_map(|r| r.ok())
            .map(|(k, v)| {
                let t = v
                    .iter()
                    .fold(Pages::default(), |a, p| Pages { count: a.count + p.count, bytes: a.bytes + p.bytes });
                (k, t)
            })
            .collect()
    }
}

impl Probes {
    /// Whether uprobes go through uprobe_multi links (else one perf event per symbol).
    pub fn uses_uprobe_multi(&self) -> bool {
        self.multi.is_some()
    }

    fn load_perf_programs(&mut self) -> anyhow::Result<()> {
        if self.perf_loaded {
            return Ok(());
        }
        let names = CUDA_PROBES.iter().map(|p| p.program).chain(RETURN_PROGRAMS);
        for name in names {
            // aya's error holds the whole verifier log (megabytes): its end says why
            uprobe(&mut self.ebpf, name)?
                .load()
                .map_err(|e| anyhow::anyhow!("loading {name}: {}", crate::multi::log_tail(&format!("{e:#}"))))?;
        }
        self.perf_loaded = true;
        Ok(())
    }

    /// Close every uprobe link, in parallel: each uprobe unregistration waits for an SRCU grace
    /// period (tens of ms in a VM), so closing a hundred one by one takes seconds; concurrent
    /// closes share grace periods. Called on drop.
    pub fn detach_all(&mut self) {
        let multi = std::mem::take(&mut self.multi_links);
        std::thread::scope(|s| {
            for l in multi {
                s.spawn(move || drop(l));
            }
        });
        let links = std::mem::take(&mut self.links);
        if links.is_empty() {
            return;
        }
        let per = links.len().div_ceil(32).max(1);
        let mut chunks: Vec<Vec<UProbeLink>> = Vec::new();
        let mut it = links.into_iter().peekable();
        while it.peek().is_some() {
            chunks.push(it.by_ref().take(per).collect());
        }
        std::thread::scope(|s| {
            for c in chunks {
                s.spawn(move || drop(c));
            }
        });
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.detach_all();
    }
}

/// (device, inode) of a file: what a uprobe attaches to.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Where to probe an ld.so, from one parse of the file: the file offset of `_dl_debug_state`, and
/// the distance from it to `_r_debug` (a data symbol, so [`ElfSymbols`] does not keep it), which the
/// BPF program reads the loader's state through.
fn loader_hook(elf: &[u8]) -> Option<(u64, u64)> {
    use crate::symbols::{symbol_address, Segments};
    let file = object::File::parse(elf).ok()?;
    let hook = symbol_address(&file, "_dl_debug_state")?;
    let offset = Segments::of(&file).file_offset(hook)?;
    // the distance from the hook to _r_debug (0: unknown, the program then acts on every call)
    Some((offset, symbol_address(&file, "_r_debug").map_or(0, |r| r.wrapping_sub(hook))))
}

/// The fd of any map aya created.
fn map_fd(m: &Map) -> Option<RawFd> {
    let d = match m {
        Map::Array(d)
        | Map::BloomFilter(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    };
    Some(d.fd().as_fd().as_raw_fd())
}

fn uprobe<'a>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut UProbe> {
    let p = ebpf.program_mut(name).ok_or_else(|| anyhow::anyhow!("BPF program {name} missing from the object"))?;
    Ok(p.try_into()?)
}

/// Kernels since 5.11 charge BPF memory to the cgroup; raising RLIMIT_MEMLOCK needs
/// CAP_SYS_RESOURCE, which this host may not grant. Best effort, never fatal.
fn raise_memlock() {
    let lim = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit with a valid struct.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}
