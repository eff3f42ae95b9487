//! Loading `causeway.bpf.o` with aya and attaching it: uprobe + uretprobe pairs on every CUDA
//! runtime and driver symbol of each library (by file offset, so versioned symbols and `_ptsz`
//! twins resolve; a missing symbol is a note, never an error), and the host tracepoints (tp_btf).
//! Dropping [`Probes`] detaches every link and unloads the programs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aya::maps::{
    Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap,
};
use aya::programs::uprobe::UProbeLink;
use aya::programs::{BtfTracePoint, UProbe};
use aya::{Btf, Ebpf, EbpfLoader};

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use aya::maps::Map;

use crate::discovery::{FoundLibrary, LibKind};
use crate::symbols::ElfSymbols;
use crate::wire::cnt;

/// The compiled BPF object (built by build.rs from `ebpf/`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/causeway.bpf.o"));

/// (entry program, uprobe_multi cookie of `cw_entry` in ebpf/cuda_multi.bpf.c, symbols it attaches
/// to). The first symbol of each row is the primary one; the others are the per-thread-default-stream
/// twins that only some builds export.
pub const RUNTIME_PROBES: &[(&str, u64, &[&str])] = &[
    (
        "rt_launch",
        1,
        &["cudaLaunchKernel", "cudaLaunchKernel_ptsz"],
    ),
    ("rt_memcpy", 2, &["cudaMemcpy", "cudaMemcpy_ptds"]),
    (
        "rt_memcpy_async",
        3,
        &["cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"],
    ),
    ("rt_memcpy2d", 4, &["cudaMemcpy2D", "cudaMemcpy2D_ptds"]),
    (
        "rt_memcpy2d_as",
        5,
        &["cudaMemcpy2DAsync", "cudaMemcpy2DAsync_ptsz"],
    ),
    ("rt_peer", 6, &["cudaMemcpyPeer"]),
    ("rt_peer_async", 7, &["cudaMemcpyPeerAsync"]),
    ("rt_malloc", 8, &["cudaMalloc"]),
    ("rt_malloc_mgd", 9, &["cudaMallocManaged"]),
    ("rt_free", 10, &["cudaFree"]),
    (
        "rt_stream_sync",
        11,
        &["cudaStreamSynchronize", "cudaStreamSynchronize_ptsz"],
    ),
    ("rt_device_sync", 12, &["cudaDeviceSynchronize"]),
    ("rt_event_sync", 13, &["cudaEventSynchronize"]),
    (
        "rt_graph_launch",
        14,
        &["cudaGraphLaunch", "cudaGraphLaunch_ptsz"],
    ),
];

pub const DRIVER_PROBES: &[(&str, u64, &[&str])] = &[
    (
        "drv_launch",
        101,
        &["cuLaunchKernel", "cuLaunchKernel_ptsz"],
    ),
    ("drv_memcpy", 102, &["cuMemcpy", "cuMemcpy_ptds"]),
    (
        "drv_htod",
        103,
        &["cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"],
    ),
    (
        "drv_dtoh",
        104,
        &["cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"],
    ),
    (
        "drv_dtod",
        105,
        &["cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"],
    ),
    (
        "drv_memcpy_as",
        106,
        &["cuMemcpyAsync", "cuMemcpyAsync_ptsz"],
    ),
    (
        "drv_htod_as",
        107,
        &["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"],
    ),
    (
        "drv_dtoh_as",
        108,
        &["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"],
    ),
    (
        "drv_memcpy2d",
        109,
        &["cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds"],
    ),
    (
        "drv_memcpy2d_as",
        110,
        &["cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz"],
    ),
    ("drv_peer", 111, &["cuMemcpyPeer", "cuMemcpyPeer_ptds"]),
    (
        "drv_peer_as",
        112,
        &["cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz"],
    ),
    ("drv_alloc", 113, &["cuMemAlloc_v2"]),
    ("drv_alloc_mgd", 114, &["cuMemAllocManaged"]),
    ("drv_free", 115, &["cuMemFree_v2"]),
    ("drv_ctx_sync", 116, &["cuCtxSynchronize"]),
    (
        "drv_stream_sync",
        117,
        &["cuStreamSynchronize", "cuStreamSynchronize_ptsz"],
    ),
];

/// (program, tp_btf tracepoint, required for per-call attribution)
pub const HOST_PROBES: &[(&str, &str, bool)] = &[
    ("cw_sched_switch", "sched_switch", true),
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

/// Page allocation totals of one process (`struct cw_pages`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Pages {
    pub count: u64,
    pub bytes: u64,
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for Pages {}

/// The launch programs of RUNTIME_PROBES and DRIVER_PROBES: on the uprobe_multi path they take
/// their symbols on a link of their own instead of going through `cw_entry`.
const LAUNCH_PROGRAMS: [&str; 2] = ["rt_launch", "drv_launch"];

/// The uprobe programs of the uprobe_multi path: `cw_entry` dispatches every symbol by its cookie,
/// except the launches, whose own programs skip that helper call and switch; the return programs
/// are one per library kind (`rt_ret`, `drv_ret`), so they need no cookie either. Index 0 runtime,
/// 1 driver.
struct MultiPrograms {
    entry: OwnedFd,
    launch: [OwnedFd; 2],
    ret: [OwnedFd; 2],
}

impl MultiPrograms {
    fn load(fds: &std::collections::HashMap<String, RawFd>) -> anyhow::Result<MultiPrograms> {
        let load = |name| crate::multi::load_program(OBJECT, name, fds);
        Ok(MultiPrograms {
            entry: load("cw_entry")?,
            launch: [load(LAUNCH_PROGRAMS[0])?, load(LAUNCH_PROGRAMS[1])?],
            ret: [load("rt_ret")?, load("drv_ret")?],
        })
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
    /// Use one perf-event uprobe per symbol even where uprobe_multi links are available (also set by
    /// the environment variable CAUSEWAY_NO_UPROBE_MULTI).
    pub perf_uprobes: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            ring_cuda_bytes: 16 << 20,
            ring_sched_bytes: 8 << 20,
            ring_host_bytes: 2 << 20,
            stacks: false,
            host_probes: true,
            perf_uprobes: false,
        }
    }
}

/// What got attached to one library.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct AttachedLib {
    pub path: PathBuf,
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
}

pub struct Probes {
    ebpf: Ebpf,
    traced: BpfHashMap<MapData, u32, u8>,
    traced_bits: Array<MapData, u64>,
    counters: PerCpuArray<MapData, u64>,
    pages: PerCpuHashMap<MapData, u32, Pages>,
    pub attached: BTreeMap<PathBuf, AttachedLib>,
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
}

impl Probes {
    /// Load the object and attach the host tracepoints. No CUDA library is attached yet.
    pub fn load(opts: &LoadOptions) -> anyhow::Result<Probes> {
        raise_memlock();
        let stacks: u32 = opts.stacks.into();
        let ring = |bytes: u32| bytes.next_power_of_two().max(4096);
        // a submit wakes the reader once a ring is a quarter full (cw_submit in ebpf/common.bpf.h)
        let wake = |bytes: u32| u64::from(ring(bytes) / 4);
        let (wake_cuda, wake_sched, wake_host) =
            (wake(opts.ring_cuda_bytes), wake(opts.ring_sched_bytes), wake(opts.ring_host_bytes));
        let mut ebpf = EbpfLoader::new()
            .allow_unsupported_maps() // cw_inflight is task storage, created but not wrapped by aya 0.13
            .set_global("cfg_stacks", &stacks, true)
            .set_global("cfg_wake_cuda", &wake_cuda, true)
            .set_global("cfg_wake_sched", &wake_sched, true)
            .set_global("cfg_wake_host", &wake_host, true)
            .set_max_entries("cw_rb_cuda", ring(opts.ring_cuda_bytes))
            .set_max_entries("cw_rb_sched", ring(opts.ring_sched_bytes))
            .set_max_entries("cw_rb_host", ring(opts.ring_host_bytes))
            .load(OBJECT)
            .map_err(|e| anyhow::anyhow!("loading the BPF object: {e} (is this root, with BTF at /sys/kernel/btf/vmlinux?)"))?;
        let mut notes = Vec::new();
        let mut multi = None;
        if !opts.perf_uprobes && std::env::var_os("CAUSEWAY_NO_UPROBE_MULTI").is_none() {
            let fds: std::collections::HashMap<String, RawFd> = ebpf
                .maps()
                .filter_map(|(n, m)| map_fd(m).map(|fd| (n.to_string(), fd)))
                .collect();
            match MultiPrograms::load(&fds) {
                Ok(p) => multi = Some(p),
                Err(e) => notes.push(format!("uprobe_multi unavailable, using one perf-event uprobe per symbol (slower to detach): {e:#}")),
            }
        }
        let mut host_attached = Vec::new();
        if opts.host_probes {
            let btf = Btf::from_sys_fs()?;
            for (prog, tp, required) in HOST_PROBES {
                let r = (|| -> anyhow::Result<()> {
                    let p: &mut BtfTracePoint = ebpf
                        .program_mut(prog)
                        .ok_or_else(|| anyhow::anyhow!("no program {prog}"))?
                        .try_into()?;
                    p.load(tp, &btf)?;
                    p.attach()?;
                    Ok(())
                })();
                match r {
                    Ok(()) => host_attached.push(tp.to_string()),
                    Err(e) => notes.push(format!(
                        "tracepoint {tp} not attached ({}): {e:#}",
                        if *required {
                            "per-call attribution loses it"
                        } else {
                            "optional"
                        }
                    )),
                }
            }
        }
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| anyhow::anyhow!("map {name} missing"))
        };
        let traced = BpfHashMap::try_from(take(&mut ebpf, "cw_traced")?)?;
        let traced_bits = Array::try_from(take(&mut ebpf, "cw_traced_bits")?)?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "cw_counters")?)?;
        let pages = PerCpuHashMap::try_from(take(&mut ebpf, "cw_pages")?)?;
        let rings = Rings {
            cuda: RingBuf::try_from(take(&mut ebpf, "cw_rb_cuda")?)?,
            sched: RingBuf::try_from(take(&mut ebpf, "cw_rb_sched")?)?,
            host: RingBuf::try_from(take(&mut ebpf, "cw_rb_host")?)?,
            stacks: if opts.stacks {
                Some(StackTraceMap::try_from(take(&mut ebpf, "cw_stacks")?)?)
            } else {
                None
            },
        };
        Ok(Probes {
            ebpf,
            traced,
            traced_bits,
            counters,
            pages,
            attached: BTreeMap::new(),
            host_attached,
            notes,
            rings: Some(rings),
            links: Vec::new(),
            multi,
            multi_links: Vec::new(),
            perf_loaded: false,
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

    pub fn traced_pids(&self) -> Vec<u32> {
        self.traced.keys().filter_map(|k| k.ok()).collect()
    }

    pub fn is_attached(&self, lib: &Path) -> bool {
        std::fs::canonicalize(lib)
            .map(|p| self.attached.contains_key(&p))
            .unwrap_or(false)
    }

    /// Attach every probe of the library's kind. Returns the number of symbols attached.
    pub fn attach_library(&mut self, lib: &FoundLibrary) -> anyhow::Result<usize> {
        let real = std::fs::canonicalize(&lib.path).unwrap_or_else(|_| lib.path.clone());
        if self.attached.contains_key(&real) {
            return Ok(0);
        }
        let syms = ElfSymbols::load(&real)?;
        let (table, ret) = match lib.kind {
            LibKind::Runtime => (RUNTIME_PROBES, "rt_ret"),
            LibKind::Driver => (DRIVER_PROBES, "drv_ret"),
        };
        let mut done = AttachedLib {
            path: real.clone(),
            kind: lib.kind,
            how: lib.how.clone(),
            symbols: Vec::new(),
            missing: Vec::new(),
        };
        let mut points = Vec::new();
        for (prog, cookie, names) in table {
            for name in *names {
                match syms.offset_of(name) {
                    Some(off) => points.push((*prog, *cookie, *name, off)),
                    None => done.missing.push(name.to_string()),
                }
            }
        }
        if let Some(progs) = &self.multi {
            if !points.is_empty() {
                let driver = usize::from(lib.kind == LibKind::Driver);
                // the launch symbols (the hot path of every workload) get their own program: no
                // cookie to ask, no dispatch
                let (launch, rest): (Vec<&(&str, u64, &str, u64)>, Vec<_>) =
                    points.iter().partition(|p| p.0 == LAUNCH_PROGRAMS[driver]);
                for (prog, set) in [(&progs.launch[driver], &launch), (&progs.entry, &rest)] {
                    if !set.is_empty() {
                        let pts: Vec<(u64, u64)> = set.iter().map(|p| (p.3, p.1)).collect();
                        self.multi_links.push(crate::multi::attach(prog, &real, &pts, false)?);
                    }
                }
                // rt_ret / drv_ret know their source: no cookie
                let r: Vec<(u64, u64)> = points.iter().map(|p| (p.3, 0)).collect();
                self.multi_links.push(crate::multi::attach(&progs.ret[driver], &real, &r, true)?);
                done.symbols.extend(points.iter().map(|p| p.2.to_string()));
            }
        } else {
            self.load_perf_programs()?;
            for (prog, _, name, off) in &points {
                let ebpf = &mut self.ebpf;
                let links = &mut self.links;
                let r = (|| -> anyhow::Result<()> {
                    for p in [*prog, ret] {
                        let up = uprobe(ebpf, p)?;
                        let id = up.attach(None, *off, &real, None)?;
                        links.push(up.take_link(id)?);
                    }
                    Ok(())
                })();
                match r {
                    Ok(()) => done.symbols.push(name.to_string()),
                    Err(e) => self
                        .notes
                        .push(format!("{}: {name} not attached: {e:#}", real.display())),
                }
            }
        }
        let n = done.symbols.len();
        if n == 0 {
            self.notes.push(format!(
                "{}: no CUDA symbol found, nothing attached",
                real.display()
            ));
        }
        self.attached.insert(real, done);
        Ok(n)
    }

    /// Sum over CPUs of counter `idx`.
    pub fn counter(&self, idx: u32) -> u64 {
        self.counters
            .get(&idx, 0)
            .map(|v| v.iter().copied().fold(0u64, u64::wrapping_add))
            .unwrap_or(0)
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
                let t = v.iter().fold(Pages::default(), |a, p| Pages {
                    count: a.count + p.count,
                    bytes: a.bytes + p.bytes,
                });
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
        for (prog, _, _) in RUNTIME_PROBES.iter().chain(DRIVER_PROBES) {
            uprobe(&mut self.ebpf, prog)?.load()?;
        }
        uprobe(&mut self.ebpf, "rt_ret")?.load()?;
        uprobe(&mut self.ebpf, "drv_ret")?.load()?;
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
    let p = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow::anyhow!("BPF program {name} missing from the object"))?;
    Ok(p.try_into()?)
}

/// Kernels since 5.11 charge BPF memory to the cgroup; raising RLIMIT_MEMLOCK needs
/// CAP_SYS_RESOURCE, which this host may not grant. Best effort, never fatal.
fn raise_memlock() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit with a valid struct.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}
