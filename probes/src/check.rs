//! `causeway check`: what this host can trace and what is missing, each item with its fix. It
//! really loads the BPF object and attaches the host tracepoints (then detaches), so "ok" means the
//! tracer will start.

use std::path::Path;

use crate::cuda_table::{Reads, CUDA_PROBES};
use crate::discovery::{self, DiscoveryOptions, FoundLibrary};
use crate::loader::{LoadOptions, Probes};
use crate::symbols::ElfSymbols;

/// What Causeway would record from one library: the probed symbols it exports and those it lacks.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct LibraryCoverage {
    pub path: String,
    /// The kernel launch paths this library exports (`cudaLaunchKernel`, `cuLaunchKernelEx`, ...).
    pub launch_symbols: Vec<String>,
    /// Every probed symbol it exports.
    pub probed: Vec<String>,
    /// Probed symbols it does not export (twins of other builds, functions of newer versions).
    pub missing: Vec<String>,
    /// The file could not be read as an ELF library.
    pub error: Option<String>,
}

/// The probe table against one library file.
pub fn library_coverage(lib: &FoundLibrary) -> LibraryCoverage {
    let want = lib.kind.probes();
    let mut c = LibraryCoverage {
        path: lib.path.display().to_string(),
        launch_symbols: Vec::new(),
        probed: Vec::new(),
        missing: Vec::new(),
        error: None,
    };
    let syms = match ElfSymbols::load(&lib.path) {
        Ok(s) => s,
        Err(e) => {
            c.error = Some(format!("{e:#}"));
            return c;
        }
    };
    for p in CUDA_PROBES.iter().filter(|p| p.lib == want) {
        for name in p.symbols {
            if syms.has(name) {
                c.probed.push(name.to_string());
                if matches!(p.reads, Reads::Launch { .. }) {
                    c.launch_symbols.push(name.to_string());
                }
            } else {
                c.missing.push(name.to_string());
            }
        }
    }
    c
}

/// One checked capability.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct CheckItem {
    pub name: String,
    pub ok: bool,
    /// Required for `causeway trace` to start (otherwise the trace runs without it).
    pub required: bool,
    pub detail: String,
    /// What to do when not ok.
    pub fix: Option<String>,
}

/// Everything `check` found.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct CheckReport {
    pub kernel: String,
    /// True when every required item is ok.
    pub can_trace: bool,
    pub items: Vec<CheckItem>,
    pub cuda_libraries: Vec<FoundLibrary>,
    /// For each library found on this host, which of the probed functions it exports.
    pub coverage: Vec<LibraryCoverage>,
    /// Host tracepoints that attached in the live test.
    pub host_probes: Vec<String>,
}

fn item(name: &str, ok: bool, required: bool, detail: String, fix: &str) -> CheckItem {
    CheckItem { name: name.into(), ok, required, detail, fix: (!ok).then(|| fix.to_string()) }
}

/// Effective capabilities of this process, from /proc/self/status.
fn cap_eff() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("CapEff:").map(|v| u64::from_str_radix(v.trim(), 16).unwrap_or(0)))
        })
        .unwrap_or(0)
}

pub fn tracefs_mounted() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (_, dir, fs) = (it.next()?, it.next()?, it.next()?);
        (fs == "tracefs").then(|| dir.to_string())
    })
}

/// Mount tracefs at /sys/kernel/tracing if it is not mounted (needs CAP_SYS_ADMIN). Causeway itself
/// does not need it (perf uprobes and tp_btf work without), but bpftrace and the uprobe listing do.
pub fn mount_tracefs() -> Result<String, String> {
    if let Some(d) = tracefs_mounted() {
        return Ok(d);
    }
    let st = std::process::Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).status();
    match st {
        Ok(s) if s.success() => Ok("/sys/kernel/tracing".into()),
        Ok(s) => Err(format!("mount exited with {s}")),
        Err(e) => Err(e.to_string()),
    }
}

pub fn host_check() -> CheckReport {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let mut items = Vec::new();
    let caps = cap_eff();
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    let (sys_admin, perfmon, bpf) = (has(21), has(38), has(39));
    items.push(item(
        "privileges",
        sys_admin || (bpf && perfmon),
        true,
        format!("uid {} CAP_SYS_ADMIN={sys_admin} CAP_BPF={bpf} CAP_PERFMON={perfmon}", unsafe { libc::geteuid() }),
        "run as root, or grant CAP_SYS_ADMIN (perf uprobes need it since CVE-2025-38466): sudo setcap cap_sys_admin,cap_bpf,cap_perfmon+ep $(which causeway)",
    ));
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    items.push(item(
        "kernel BTF",
        btf,
        true,
        "/sys/kernel/btf/vmlinux".into(),
        "use a kernel built with CONFIG_DEBUG_INFO_BTF=y",
    ));
    let uprobe_pmu = Path::new("/sys/bus/event_source/devices/uprobe/type").exists();
    items.push(item(
        "uprobe PMU",
        uprobe_pmu,
        true,
        "/sys/bus/event_source/devices/uprobe/type (uprobes without tracefs)".into(),
        "kernel needs CONFIG_UPROBE_EVENTS=y; or mount tracefs: mount -t tracefs nodev /sys/kernel/tracing",
    ));
    let tfs = tracefs_mounted();
    items.push(item(
        "tracefs",
        tfs.is_some(),
        false,
        match &tfs {
            Some(d) => format!("mounted at {d}"),
            None => "not mounted: Causeway does not need it (perf uprobes, tp_btf); bpftrace and the uprobe_events listing do".into(),
        },
        "mount -t tracefs nodev /sys/kernel/tracing",
    ));
    let memlock_ok = {
        let lim = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
        // SAFETY: valid rlimit struct.
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0 }
    };
    items.push(item(
        "RLIMIT_MEMLOCK",
        true,
        false,
        if memlock_ok {
            "raised".into()
        } else {
            "cannot be raised (no CAP_SYS_RESOURCE); harmless: kernels >= 5.11 charge BPF memory to the cgroup".into()
        },
        "",
    ));
    let mut host_probes = Vec::new();
    let load = Probes::load(&LoadOptions {
        ring_cuda_bytes: 4096,
        ring_sched_bytes: 4096,
        ring_host_bytes: 4096,
        stacks: false,
        host_probes: true,
        network: true,
        // so that `check` says whether `trace --footprint` can attach its tracepoints
        footprint: true,
        perf_uprobes: false,
        stop_on_load: false,
        adopt_callers: false,
    });
    match load {
        Ok(mut p) => {
            let ld = Path::new("/lib64/ld-linux-x86-64.so.2");
            let hook = p.attach_loader(ld);
            items.push(item(
                "dynamic loader hook",
                hook.is_ok(),
                false,
                match &hook {
                    Ok(_) => format!("{}: _dl_debug_state probed: libraries a traced process loads later are attached as they are mapped", ld.display()),
                    Err(e) => format!("{e:#}"),
                },
                "libraries loaded late are then found by polling /proc/PID/maps, and their first calls may be missed",
            ));
            host_probes = p.host_attached.clone();
            let why_not = p.notes.iter().find(|n| n.contains("uprobe_multi unavailable")).cloned();
            items.push(item(
                "uprobe_multi",
                p.uses_uprobe_multi(),
                false,
                match why_not {
                    None => "three BPF links per library, the programs relocated against this kernel's BTF (CO-RE): attach in ms, detach in one synchronization".into(),
                    Some(n) => format!("{n}: each of ~100 symbols is its own perf-event uprobe, which take seconds to detach (uprobe bench, part attach: 20.9 s against 64 ms for 97 symbols on a 2-core VM)"),
                },
                "a kernel >= 6.6 with CONFIG_UPROBES; the trace works without it",
            ));
            items.push(item(
                "BPF load",
                true,
                true,
                format!("programs loaded; tracepoints attached: {}", host_probes.join(", ")),
                "",
            ));
            for n in &p.notes {
                items.push(item(
                    "tracepoint",
                    false,
                    false,
                    n.clone(),
                    "this kernel lacks the tracepoint; the trace runs without it",
                ));
            }
        }
        Err(e) => items.push(item(
            "BPF load",
            false,
            true,
            format!("{e:#}"),
            "run as root on a kernel with BTF and BPF ring buffers (>= 5.8)",
        )),
    }
    items.extend(fault_signals());
    let libs = discovery::discover(&DiscoveryOptions::default());
    items.push(item(
        "CUDA libraries",
        !libs.is_empty(),
        false,
        format!(
            "{} found on this host (ldconfig, CUDA install paths, pip nvidia-* wheels); a trace probes what each traced process maps, wherever it comes from",
            libs.len()
        ),
        "trace a process that maps libcudart/libcuda (found through /proc/PID/maps), or pass --cuda-lib PATH",
    ));
    let probes = CUDA_PROBES.iter().filter(|p| !matches!(p.reads, Reads::Name(_))).count();
    items.push(item(
        "what is recorded",
        true,
        false,
        format!(
            "{probes} CUDA functions (runtime and driver, with their _v2/_ptsz twins): launches through cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx (grid, block, shared memory, cluster) and graph launches; copies, memsets, allocations (incl. cudaMallocAsync, cuMemCreate/Map), synchronizations, event polls, context scheduling flags; kernel names from __cudaRegisterFunction, __cudaGetKernel, cuModuleGetFunction, cuLibraryGetKernel. A runtime linked into a program is probed by symbol; one linked without symbols leaves only driver calls visible (said per process)."
        ),
        "",
    ));
    let coverage = libs.iter().map(library_coverage).collect();
    let can_trace = items.iter().all(|i| i.ok || !i.required);
    CheckReport { kernel, can_trace, items, cuda_libraries: libs, coverage, host_probes }
}

/// What the host can say when a job hangs or fails: the calls in flight at the end of a trace
/// (a pidfd of a thread), the GPUs' own state and Xid errors (NVML), and the driver's own Xid lines
/// in the kernel log (which name the offending process).
fn fault_signals() -> Vec<CheckItem> {
    let mut items = Vec::new();
    // the key the end of a trace reads a thread's calls in flight with (closed when dropped)
    // SAFETY: gettid has no preconditions.
    let pidfd = crate::in_flight::thread_pidfd(unsafe { libc::gettid() } as u32);
    let readable = pidfd.is_some();
    items.push(item(
        "calls in flight",
        readable,
        false,
        if readable {
            "a call that never returned is written when a trace stops (its thread read by a pidfd), so a hang is named"
                .into()
        } else {
            format!(
                "pidfd_open(PIDFD_THREAD) failed ({}): a call in flight when a trace stops is not written",
                std::io::Error::last_os_error()
            )
        },
        "Linux 6.9 or later (PIDFD_THREAD); without it a hang shows only as the thread's silence",
    ));
    let nvml = nvml_wrapper::Nvml::init();
    items.push(item(
        "NVML",
        nvml.is_ok(),
        false,
        match &nvml {
            Ok(n) => format!(
                "driver {}, {} GPU(s): clocks, throttle reasons, memory, ECC, PCIe and NVLink traffic are sampled, and Xid errors recorded as gpu_xid events",
                n.sys_driver_version().unwrap_or_default(),
                n.device_count().unwrap_or(0)
            ),
            Err(e) => format!("libnvidia-ml.so.1 could not be used ({e}): no GPU samples, throttles or Xid errors"),
        },
        "install the NVIDIA driver's NVML (libnvidia-ml.so.1), or pass --nvml-lib PATH",
    ));
    if let Ok(n) = &nvml {
        // which of the fields the hang, fault and link answers read this driver and GPU give
        if let Ok(d) = n.device_by_index(0) {
            use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
            let fields = [
                ("ECC counts", d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).is_ok()),
                ("PCIe link generation and width", d.current_pcie_link_gen().is_ok() && d.max_pcie_link_gen().is_ok()),
                ("per-process memory", d.running_compute_processes().is_ok()),
                (
                    "NVLink error counters",
                    d.link_wrapper_for(0)
                        .error_counter(nvml_wrapper::enum_wrappers::nv_link::ErrorCounter::DlCrcFlit)
                        .is_ok(),
                ),
            ];
            let (have, lack): (Vec<_>, Vec<_>) = fields.iter().partition(|(_, ok)| *ok);
            let names = |v: &[&(&str, bool)]| v.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
            items.push(item(
                "NVML fields",
                lack.is_empty(),
                false,
                if lack.is_empty() {
                    format!(
                        "GPU 0 reports {}: ECC and link chains, zombie contexts and memory growth can be named",
                        names(&have)
                    )
                } else {
                    format!(
                        "GPU 0 reports {}; not {} (recorded as -1: the answers that need them say nothing)",
                        if have.is_empty() { "none of them".into() } else { names(&have) },
                        names(&lack)
                    )
                },
                "NVLink counters need NVLink (SXM boards); ECC needs ECC enabled (nvidia-smi -e 1)",
            ));
        }
    }
    // non-blocking: a read of /dev/kmsg waits for the next record otherwise
    let kmsg = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg")
    };
    items.push(item(
        "/dev/kmsg",
        kmsg.is_ok(),
        false,
        match &kmsg {
            Ok(_) => "readable: the NVIDIA driver's own Xid lines (NVRM: Xid ..., with the offending pid when it knows it) are recorded while tracing as nvrm_xid events, beside NVML's gpu_xid".into(),
            Err(e) => format!("not readable ({e}): the driver's Xid lines, which name the offending pid, are not recorded"),
        },
        "run as root, or allow kernel log reads (kernel.dmesg_restrict=0)",
    ));
    items
}
