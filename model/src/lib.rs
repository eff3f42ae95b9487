//! The event model shared by every Causeway crate.
//!
//! One [`Event`] type carries everything the tracer records: CUDA runtime and driver calls, scheduler
//! switches and wake-ups, block I/O, memory and process lifecycle. Source and op codes are those of
//! Ingero's trace databases (so their SQL and their DBs carry over), extended where Causeway records
//! more; [`codes`] names and describes every code, and the backends write those descriptions into
//! lookup tables so that an agent reading the database sees what each number means.

#![warn(missing_docs)]

mod cgroup;
pub mod codes;
pub mod demangle;
pub mod fnv;
pub mod footprint;
mod gpu_state;
mod gpu_timeline;
pub mod serving;
pub mod thresholds;
pub mod time;

pub use cgroup::ProcessCgroup;
pub use codes::{OpCode, PrevState, Source};
pub use footprint::{FootprintCpu, FootprintExec, FootprintFd, FootprintPart, FootprintRequest, FootprintSyscall};
pub use gpu_state::{throttle_reason_names, GpuProcessMemory, GpuSample, SLOWING_REASONS, THROTTLE_REASONS};
pub use gpu_timeline::{GpuClockSync, GpuDevice, GpuOp, GpuOpKind, GpuTimelineNote};

/// One recorded event. Times are nanoseconds on one clock for every source (unix epoch in stored
/// traces). A call spans `[ts_ns, ts_ns + dur_ns]`; a `sched_switch` row is written at switch-IN time
/// and its off-CPU interval is `[ts_ns - dur_ns, ts_ns]` (Ingero's convention, kept for compatibility).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Event {
    /// Entry time (calls, I/O issue) or switch-in time (sched_switch), ns.
    pub ts_ns: i64,
    /// Call duration, I/O latency, or off-CPU time for sched_switch, ns.
    pub dur_ns: i64,
    /// Process (thread group) id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU the event happened on (for sched_switch: the CPU the thread was switched out of); -1 unknown.
    pub cpu: i32,
    /// Event source ([`codes::Source`] code, the `events.source` column).
    pub source: u8,
    /// Op code within the source ([`codes::OPS`]).
    pub op: u16,
    /// Op-specific argument: bytes for alloc/memcpy, kernel function pointer for launches, bytes for block I/O.
    pub arg0: i64,
    /// Op-specific argument: memcpy kind, woken pid for sched_wakeup, pid for sched_switch, device for block I/O.
    pub arg1: i64,
    /// Op-specific argument: stream handle, device pointer, woken tid for sched_wakeup.
    pub arg2: i64,
    /// Return code of the call (CUDA error code; 0 = success). Host events: 0.
    pub ret_code: i32,
    /// FNV-64 hash of the user stack (0 = none); key into `stack_traces`.
    pub stack_hash: i64,
    /// GPU the call addressed, when known (Ingero's column; 0 otherwise).
    pub gpu_id: i32,
    /// cgroup v2 id of the event's process, as the tracer resolved it when it first saw the
    /// process (see [`ProcessCgroup`]; 0 when not recorded).
    pub cgroup_id: i64,
    /// Command name of the thread (`/proc/PID/task/TID/comm`), at most 15 bytes in the kernel.
    pub comm: String,
    /// Scheduler detail: only set on sched_switch events of traced threads.
    pub sched: Option<SchedDetail>,
    /// Kernel launches: key of the launch configuration in `launch_configs` ([`LaunchConfig::key`]);
    /// 0 for every other event (stored as NULL).
    #[serde(default)]
    pub launch_config: i64,
}

/// How a kernel was launched: grid and block dimensions, dynamic shared memory and the thread-block
/// cluster (1,1,1 when the launch set none). Stored once per distinct configuration in
/// `launch_configs`, keyed by [`LaunchConfig::key`]; launches carry the key.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct LaunchConfig {
    /// Grid dimensions in thread blocks (x, y, z).
    pub grid: [u32; 3],
    /// Block dimensions in threads (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
    /// Thread-block cluster dimensions (x, y, z; 0 when the launch set none).
    pub cluster: [u32; 3],
}

impl LaunchConfig {
    /// FNV-1a 64 over the ten fields (little-endian), never 0 (0 means "no configuration").
    pub fn key(&self) -> i64 {
        let mut h = fnv::Fnv1a64::new();
        let fields =
            self.grid.iter().chain(&self.block).chain(std::iter::once(&self.shared_mem_bytes)).chain(&self.cluster);
        for v in fields {
            h.write(&v.to_le_bytes());
        }
        match h.finish() {
            0 => 1,
            k => k as i64,
        }
    }

    /// Thread blocks in the grid (the `arg1` of a launch).
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| u64::from(d)).product()
    }
}

/// A kernel's name as one traced process knows it: `handle` is what that process's launches carry
/// in `arg0` (a host stub address or `cudaKernel_t` for runtime launches, a `CUfunction` or
/// `CUkernel` for driver launches). Stored in `kernel_names`, keyed by (pid, handle).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct KernelName {
    /// The process whose launches carry `handle`.
    pub pid: u32,
    /// What the launches carry in `arg0` for this kernel.
    pub handle: i64,
    /// Demangled (`vector_add(float*, float*, int)`); the mangled name when it does not demangle.
    pub name: String,
    /// As the binary spells it (`_Z10vector_addPfS_i`); equal to `name` for C names.
    pub mangled: String,
    /// Where the name came from: `register` (`__cudaRegisterFunction`), `module` (`cuModuleGetFunction`),
    /// `library` (`cuLibraryGetKernel`), `elf` (the host stub's symbol).
    pub how: String,
}

/// One CUDA library as attached for one traced process, or the note that a process's runtime cannot
/// be attached (statically linked without symbols). Stored in `attachments`: what a trace covers.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct LibraryAttach {
    /// The traced process.
    pub pid: u32,
    /// The file as the process maps it (empty for a note about a library that could not be found).
    pub path: String,
    /// `runtime`, `driver`, `runtime_static` (the runtime linked into an executable or library).
    pub kind: String,
    /// How it was found: `explicit`, `maps`, `loaded` (attached when the process mapped it), ...
    pub how: String,
    /// When the probes were in place (unix ns).
    pub attached_at_ns: i64,
    /// The probes were in place before the process could make a call through this library: no call
    /// is missing. False: calls before `attached_at_ns` are unknown (not zero).
    pub complete: bool,
    /// Symbols with a probe.
    pub symbols: Vec<String>,
    /// Symbols this library does not export.
    pub missing: Vec<String>,
    /// What a reader must know (e.g. "runtime statically linked without symbols: only driver calls are visible").
    pub note: String,
}

/// What an NCCL call did, beside its `events` row (source 9): the communicator as every rank knows
/// it, this rank's place in it, and the collective's sequence number on it. Stored in `nccl_calls`,
/// keyed like its event by (pid, tid, ts_ns). Every rank calls a communicator's collectives in the
/// same order, so (`comm_hash`, `seq`) of a collective names the same collective on every rank.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct NcclCall {
    /// The calling process.
    pub pid: u32,
    /// The calling thread.
    pub tid: u32,
    /// The call's entry time (its event's `ts_ns`).
    pub ts_ns: i64,
    /// The NCCL op ([`codes::op`] `NCCL_*`, source 9).
    pub op: u16,
    /// A stable hash of the communicator's unique id, the same on every rank (0: the communicator
    /// was created before the trace saw it, so it cannot be matched across ranks).
    pub comm_hash: i64,
    /// The `ncclComm_t` handle in this process.
    pub comm: i64,
    /// This process's rank in the communicator (-1 unknown).
    pub rank: i32,
    /// Ranks in the communicator (-1 unknown).
    pub nranks: i32,
    /// The collective's sequence number on this communicator in this process, from 1 (point to point:
    /// the transfer's number between this rank and `peer` in its direction); 0 for other calls.
    pub seq: i64,
    /// Elements (send count for all-gather, receive count for reduce-scatter).
    pub count: i64,
    /// `ncclDataType_t` (-1 for calls without data).
    pub datatype: i32,
    /// `ncclRedOp_t` (-1 for calls without a reduction).
    pub redop: i32,
    /// The peer (send / receive), the root (broadcast / reduce), the color (split); -1 otherwise.
    pub peer: i32,
    /// The CUDA device of the communicator (-1 unknown).
    pub device: i32,
}

impl NcclCall {
    /// The bytes of one element of an `ncclDataType_t` (0 for an unknown type).
    pub fn element_bytes(datatype: i32) -> i64 {
        match datatype {
            0 | 1 | 10 | 11 => 1,
            6 | 9 => 2,
            2 | 3 | 7 => 4,
            4 | 5 | 8 => 8,
            _ => 0,
        }
    }

    /// The name of an `ncclDataType_t` (`float32`), `type_N` for unknown ones.
    pub fn datatype_name(datatype: i32) -> std::borrow::Cow<'static, str> {
        const NAMES: [&str; 12] = [
            "int8",
            "uint8",
            "int32",
            "uint32",
            "int64",
            "uint64",
            "float16",
            "float32",
            "float64",
            "bfloat16",
            "float8e4m3",
            "float8e5m2",
        ];
        match usize::try_from(datatype).ok().and_then(|i| NAMES.get(i)) {
            Some(n) => std::borrow::Cow::Borrowed(n),
            None => std::borrow::Cow::Owned(format!("type_{datatype}")),
        }
    }

    /// The name of an `ncclRedOp_t` (`sum`), `op_N` for unknown ones (user-defined ops included).
    pub fn redop_name(redop: i32) -> std::borrow::Cow<'static, str> {
        const NAMES: [&str; 5] = ["sum", "prod", "max", "min", "avg"];
        match usize::try_from(redop).ok().and_then(|i| NAMES.get(i)) {
            Some(n) => std::borrow::Cow::Borrowed(n),
            None => std::borrow::Cow::Owned(format!("op_{redop}")),
        }
    }
}

/// Where a traced process stands in a distributed job, from the environment its launcher gave it
/// (torchrun / torch.distributed `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`; Open MPI's
/// `OMPI_COMM_WORLD_*`; Slurm's `SLURM_PROCID` / `SLURM_LOCALID` / `SLURM_NTASKS`). Stored in
/// `process_ranks`, one row per process that has one; -1 = not given.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ProcessRank {
    /// The process.
    pub pid: u32,
    /// The process's rank in the job.
    pub rank: i32,
    /// Its rank among the job's processes on this node.
    pub local_rank: i32,
    /// Processes in the job.
    pub world_size: i32,
    /// The job's processes on this node.
    pub local_world_size: i32,
    /// Which variables said so: `torch` (RANK, ...), `openmpi`, `slurm`.
    pub launcher: String,
    /// The job's id where the launcher names it (`TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID`), else empty.
    pub job: String,
}

/// The value of variable `key` in `environ` (a process's `/proc/PID/environ`: NUL-separated
/// `KEY=VALUE`), as bytes.
pub fn environ_var<'a>(environ: &'a [u8], key: &str) -> Option<&'a [u8]> {
    environ.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(key.as_bytes()).and_then(|r| r.strip_prefix(b"=")))
}

impl ProcessRank {
    /// The identity in `environ` (a process's `/proc/PID/environ`: NUL-separated `KEY=VALUE`),
    /// None when no launcher's rank variable is set. torchrun's variables win over MPI's, MPI's over
    /// Slurm's (a torchrun inside a Slurm allocation sets its own).
    pub fn from_environ(pid: u32, environ: &[u8]) -> Option<ProcessRank> {
        let vars: std::collections::HashMap<&str, &str> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let num = |k: &str| vars.get(k).and_then(|v| v.trim().parse::<i32>().ok());
        let schemes: [(&str, [&str; 4], &str); 3] = [
            ("torch", ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"], "TORCHELASTIC_RUN_ID"),
            (
                "openmpi",
                [
                    "OMPI_COMM_WORLD_RANK",
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                ],
                "",
            ),
            ("slurm", ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"], "SLURM_JOB_ID"),
        ];
        schemes.iter().find_map(|(launcher, keys, job)| {
            let rank = num(keys[0])?;
            Some(ProcessRank {
                pid,
                rank,
                local_rank: num(keys[1]).unwrap_or(-1),
                world_size: num(keys[2]).unwrap_or(-1),
                local_world_size: num(keys[3]).unwrap_or(-1),
                launcher: launcher.to_string(),
                job: vars.get(job).map(|s| s.to_string()).unwrap_or_default(),
            })
        })
    }

    /// `RANK 1 of 8 (local 1 of 4)`.
    pub fn words(&self) -> String {
        let of = |n: i32| if n > 0 { format!(" of {n}") } else { String::new() };
        let mut w = format!("RANK {}{}", self.rank, of(self.world_size));
        if self.local_rank >= 0 {
            w.push_str(&format!(" (local {}{})", self.local_rank, of(self.local_world_size)));
        }
        w
    }
}

/// One value a serving engine (vLLM, SGLang, TGI, Triton) exposed on its Prometheus endpoint,
/// scraped while tracing (`serving_samples`): a gauge, a counter, or one part of a histogram
/// (`_bucket` with its bound `le`, `_sum`, `_count`; the `+Inf` bucket is the `_count` row).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ServingSample {
    /// When the endpoint was read, unix ns.
    pub ts_ns: i64,
    /// The engine's process (the one listening on the endpoint).
    pub pid: u32,
    /// The engine: `vllm`, `sglang`, `tgi` or `triton`.
    pub engine: String,
    /// The sample's name as exposed (`vllm:time_to_first_token_seconds_bucket`).
    pub metric: String,
    /// Its labels but `le`, as a JSON object with sorted keys (`{"model_name":"m"}`).
    pub labels: String,
    /// A histogram bucket's upper bound; `None` for every other sample.
    pub le: Option<f64>,
    /// The value.
    pub value: f64,
}

/// A socket peer of a traced thread (`net_peers`): the remote end a socket call, a retransmit or a
/// state change names by `peer` (their `arg2`). The key is a hash of the rest ([`NetPeer::key_of`]),
/// the same in every file and on every host, so parts of a series and a fleet's hosts agree on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct NetPeer {
    /// The key events carry in `arg2` (positive, never 0).
    pub peer: i64,
    /// The address family: 2 IPv4, 10 IPv6, 1 a Unix socket.
    pub family: u16,
    /// `127.0.0.1`, `::1`, the path of a Unix socket's peer when it has one, or empty.
    pub address: String,
    /// The peer's port (0 for Unix sockets and unconnected sockets).
    pub port: u16,
}

impl NetPeer {
    /// The peer of `family` at raw `addr` (network order: IPv4 in the first 4 bytes) and `port`.
    pub fn of_raw(family: u16, addr: &[u8; 16], port: u16) -> NetPeer {
        let (family, address) = match family {
            2 => (2, std::net::Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string()),
            10 => {
                let v6 = std::net::Ipv6Addr::from(*addr);
                // an IPv4 peer of a dual-stack socket is that IPv4 peer
                match v6.to_ipv4_mapped() {
                    Some(v4) => (2, v4.to_string()),
                    None => (10, v6.to_string()),
                }
            }
            f => (f, String::new()),
        };
        NetPeer { peer: NetPeer::key_of(family, &address, port), family, address, port }
    }

    /// The key of a peer: FNV-1a 64 over family, address and port, positive and never 0.
    pub fn key_of(family: u16, address: &str, port: u16) -> i64 {
        let mut h = fnv::Fnv1a64::new();
        h.write(&family.to_le_bytes());
        h.write(address.as_bytes());
        h.write(&port.to_le_bytes());
        ((h.finish() & i64::MAX as u64) as i64).max(1)
    }

    /// How a person reads it: `10.0.0.2:29500`, `[::1]:8000`, `unix socket`.
    pub fn label(&self) -> String {
        match self.family {
            2 => format!("{}:{}", self.address, self.port),
            10 => format!("[{}]:{}", self.address, self.port),
            1 if self.address.is_empty() => "unix socket".into(),
            1 => format!("unix socket {}", self.address),
            f => format!("socket family {f}"),
        }
    }
}

/// What per-call attribution needs to know about one off-CPU interval of a traced thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SchedDetail {
    /// Why the thread left the CPU.
    pub prev_state: PrevState,
    /// The task that took the CPU when this thread left it.
    pub next_pid: u32,
    /// Thread id of that task.
    pub next_tid: u32,
    /// Its command name.
    pub next_comm: String,
    /// When the thread was woken (0 when it was preempted: it never slept).
    pub wake_ts_ns: i64,
    /// Who woke it (0 when unknown or preempted).
    pub waker_pid: u32,
    /// Thread id of the waker.
    pub waker_tid: u32,
}

/// The off-CPU interval `[out, in]` of a sched_switch row: it records the switch back in at `ts`
/// after `dur` off the CPU.
pub fn off_cpu_interval(ts: i64, dur: i64) -> (i64, i64) {
    (ts.saturating_sub(dur), ts)
}

#[cfg(test)]
mod peer_tests {
    use super::NetPeer;

    #[test]
    fn peers_read_as_addresses_and_their_keys_do_not_depend_on_the_socket() {
        let v4 = NetPeer::of_raw(2, &[127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8000);
        assert_eq!((v4.address.as_str(), v4.label()), ("127.0.0.1", "127.0.0.1:8000".to_string()));
        let mut mapped = [0u8; 16];
        mapped[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
        assert_eq!(NetPeer::of_raw(10, &mapped, 8000), v4, "a dual-stack socket's IPv4 peer is the same peer");
        let mut v6 = [0u8; 16];
        v6[..2].copy_from_slice(&[0xfe, 0x80]);
        v6[15] = 7;
        let p = NetPeer::of_raw(10, &v6, 443);
        assert_eq!(p.label(), "[fe80::7]:443");
        assert_ne!(p.peer, NetPeer::of_raw(10, &v6, 444).peer, "the port is part of the peer");
        assert_eq!(NetPeer::of_raw(1, &[0; 16], 0).label(), "unix socket");
        assert!(v4.peer > 0 && p.peer > 0);
    }
}

#[cfg(test)]
mod rank_tests {
    use super::ProcessRank;

    #[test]
    fn launcher_variables_give_the_rank_torchrun_first() {
        let env = b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0LOCAL_WORLD_SIZE=4\0TORCHELASTIC_RUN_ID=job7\0SLURM_PROCID=0\0";
        let r = ProcessRank::from_environ(42, env).unwrap();
        assert_eq!((r.rank, r.local_rank, r.world_size, r.local_world_size), (3, 1, 8, 4));
        assert_eq!((r.launcher.as_str(), r.job.as_str(), r.pid), ("torch", "job7", 42));
        assert_eq!(r.words(), "RANK 3 of 8 (local 1 of 4)");
        let mpi = ProcessRank::from_environ(1, b"OMPI_COMM_WORLD_RANK=5\0OMPI_COMM_WORLD_SIZE=16\0").unwrap();
        assert_eq!((mpi.rank, mpi.local_rank, mpi.world_size, mpi.launcher.as_str()), (5, -1, 16, "openmpi"));
        assert_eq!(mpi.words(), "RANK 5 of 16");
        let slurm = ProcessRank::from_environ(1, b"SLURM_PROCID=2\0SLURM_LOCALID=0\0SLURM_JOB_ID=991\0").unwrap();
        assert_eq!((slurm.rank, slurm.launcher.as_str(), slurm.job.as_str()), (2, "slurm", "991"));
        assert!(ProcessRank::from_environ(1, b"HOME=/root\0RANK=not-a-number\0").is_none());
        assert!(ProcessRank::from_environ(1, b"").is_none());
    }
}

impl Event {
    /// End of a call, `ts + dur`. For sched_switch rows use [`Event::off_cpu_interval`].
    pub fn end_ns(&self) -> i64 {
        self.ts_ns.saturating_add(self.dur_ns)
    }

    /// The off-CPU interval `[out, in]` of a sched_switch event.
    pub fn off_cpu_interval(&self) -> (i64, i64) {
        off_cpu_interval(self.ts_ns, self.dur_ns)
    }

    /// The time this event occupies: its off-CPU interval for a sched_switch row, else
    /// `[ts, ts + dur]` (a negative duration counts as none). What a timeline draws and what a
    /// window overlaps.
    pub fn span(&self) -> (i64, i64) {
        if codes::op::SCHED_SWITCH.is(self.source, self.op) {
            self.off_cpu_interval()
        } else {
            (self.ts_ns, self.ts_ns.saturating_add(self.dur_ns.max(0)))
        }
    }

    /// This event's (source, op).
    pub const fn code(&self) -> OpCode {
        OpCode::new(self.source, self.op)
    }

    /// Name of this event's op, e.g. `cudaLaunchKernel`.
    pub fn op_name(&self) -> std::borrow::Cow<'static, str> {
        codes::op_name(self.source, self.op)
    }
}

/// Counts of events lost on the way to storage, by the place they were lost. Serialized by its
/// stored name ([`LossKind::as_str`]), as the `loss_kinds` table spells it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    /// The BPF program could not reserve ring-buffer space.
    RingReserve,
    /// User space could not decode a record.
    Decode,
    /// The sink's queue was full and the batch was dropped.
    SinkBackpressure,
    /// The storage engine refused the write.
    Write,
}

impl LossKind {
    /// Every kind, in the order they are reported.
    pub const ALL: [LossKind; 4] =
        [LossKind::RingReserve, LossKind::Decode, LossKind::SinkBackpressure, LossKind::Write];

    /// The stored name (`loss_kinds.name`).
    pub fn as_str(self) -> &'static str {
        match self {
            LossKind::RingReserve => "ring_reserve",
            LossKind::Decode => "decode",
            LossKind::SinkBackpressure => "sink_backpressure",
            LossKind::Write => "write",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(s: &str) -> Option<LossKind> {
        LossKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// What a loss of this kind means, for the `loss_kinds` table.
    pub fn description(self) -> &'static str {
        match self {
            LossKind::RingReserve => "BPF ring buffer full: the kernel could not reserve space for the record",
            LossKind::Decode => "a ring-buffer record user space could not decode (wrong size or kind)",
            LossKind::SinkBackpressure => {
                "the storage queue was full and the batch was dropped rather than stall the tracer"
            }
            LossKind::Write => "the storage engine returned an error for the batch",
        }
    }
}

/// One loss counter: `count` events of `source` lost at `kind`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct LossCounter {
    /// The source of the lost events ([`codes::Source`] code).
    pub source: u8,
    /// Where the events were lost.
    pub kind: LossKind,
    /// How many events.
    pub count: u64,
}

/// One trace run (one `causeway trace` invocation, or one Ingero session).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SessionInfo {
    /// Session id (`sessions.id`; `events.session_id` refers to it).
    pub id: i64,
    /// When the trace started, unix ns.
    pub started_at_ns: i64,
    /// When it stopped, unix ns (0 while it runs).
    pub stopped_at_ns: i64,
    /// The tool and version that recorded it.
    pub tool_version: String,
    /// Kernel release of the traced host.
    pub kernel: String,
    /// Host name of the traced host.
    pub hostname: String,
    /// Node name in a fleet (Ingero's `node`; the host name by default).
    pub node: String,
    /// The process ids asked for (comma-separated; empty when a command was traced).
    pub pid_filter: String,
    /// The command traced, as given.
    pub command: String,
    /// The tracer's options, as `key=value` pairs.
    pub flags: String,
    /// GPU model of the host, when known.
    pub gpu_model: String,
    /// NVIDIA driver version, when known.
    pub gpu_driver: String,
    /// CUDA version of the driver, when known.
    pub cuda_version: String,
    /// pid of the Causeway process that recorded the session (0: unknown, e.g. Ingero DBs): its
    /// own reader and writer threads run on the same CPUs and may show up in the trace.
    #[serde(default)]
    pub tracer_pid: u32,
}
