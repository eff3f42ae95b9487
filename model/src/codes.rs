//! Source and op codes, compatible with Ingero's (source 1 CUDA runtime, 3 host, 4 driver, 5 block
//! I/O, ...): Ingero's numbers are kept as they are and Causeway's additions take numbers Ingero does
//! not use. Every code has a name and a one-line meaning; the backends copy this table into the `sources`
//! and `ops` lookup tables of every native trace, and readers fall back to it for Ingero DBs whose own
//! lookup tables are stale.

use std::borrow::Cow;

/// Event sources (the `events.source` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Source {
    /// CUDA runtime API calls (libcudart).
    Cuda = 1,
    /// The NVIDIA kernel driver: its Xid error events, read through NVML.
    Nvidia = 2,
    /// Host kernel events: scheduler, memory, process lifecycle.
    Host = 3,
    /// CUDA driver API calls (libcuda).
    Driver = 4,
    /// Block I/O requests.
    Io = 5,
    /// TCP events.
    Tcp = 6,
    /// Network socket events.
    Net = 7,
    /// CUDA graph capture, instantiation and launch.
    CudaGraph = 8,
    /// NCCL collectives.
    Nccl = 9,
    /// Steps, epochs and tasks: intervals the workload labeled while it was traced.
    Step = 10,
    /// CUPTI calls that start or stop a profiler's activity records (torch.profiler, Nsight, the
    /// injection library itself): who held the device timeline, and when.
    Cupti = 11,
}

impl Source {
    /// Every source, in code order.
    pub const ALL: [Source; 11] = [
        Source::Cuda,
        Source::Nvidia,
        Source::Host,
        Source::Driver,
        Source::Io,
        Source::Tcp,
        Source::Net,
        Source::CudaGraph,
        Source::Nccl,
        Source::Step,
        Source::Cupti,
    ];

    /// The stored `events.source` value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The source a stored value stands for (`None` for codes this build does not know).
    pub const fn from_code(code: u8) -> Option<Source> {
        let mut i = 0;
        while i < Source::ALL.len() {
            if Source::ALL[i] as u8 == code {
                return Some(Source::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// Whether every event of this source is a host-side call into the GPU stack (CUDA runtime,
    /// driver, graphs, NCCL), unknown op codes included: the one definition of "a GPU call", the
    /// candidates for slow-call attribution. [`OpKind::GpuCall`] marks exactly their ops.
    pub const fn is_gpu_api(self) -> bool {
        matches!(self, Source::Cuda | Source::Driver | Source::CudaGraph | Source::Nccl)
    }
}

/// The stored codes of the GPU API sources ([`Source::is_gpu_api`]), ascending.
pub const GPU_CALL_SOURCES: [u8; 4] =
    [Source::Cuda.code(), Source::Driver.code(), Source::CudaGraph.code(), Source::Nccl.code()];

/// Whether events of stored source `source` are GPU API calls ([`Source::is_gpu_api`]).
pub const fn is_gpu_call_source(source: u8) -> bool {
    match Source::from_code(source) {
        Some(s) => s.is_gpu_api(),
        None => false,
    }
}

/// (code, name, meaning) of every source, written into the `sources` lookup table.
pub const SOURCES: &[(u8, &str, &str)] = &[
    (1, "CUDA", "CUDA Runtime API (libcudart) calls, uprobes + uretprobes"),
    (2, "NVIDIA", "NVIDIA kernel driver (nvidia.ko): Xid error events, read through NVML's event API"),
    (3, "HOST", "Host kernel events: scheduler, memory, process lifecycle (tracepoints)"),
    (4, "DRIVER", "CUDA Driver API (libcuda) calls, uprobes + uretprobes"),
    (5, "IO", "Block I/O requests, issue to completion (tracepoints)"),
    (6, "TCP", "TCP retransmits and state changes of traced processes' sockets (tcp / sock tracepoints); peers in net_peers"),
    (7, "NET", "Socket calls of traced threads with their latency (raw syscall tracepoints); peers in net_peers"),
    (8, "CUDA_GRAPH", "CUDA graph capture, instantiation and launch"),
    (9, "NCCL", "NCCL (libnccl) collectives, point-to-point and communicator calls, uprobes + uretprobes; per-call detail in nccl_calls"),
    (10, "STEP", "Steps, epochs and tasks the workload labeled while traced (`causeway annotate`, the Python helper): one interval each"),
    (11, "CUPTI", "CUPTI (libcupti) calls that take, start or stop the activity records (torch.profiler, Nsight, the injection library), uprobes + uretprobes: who held the device timeline, and when"),
];

/// A (source, op) pair.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct OpCode {
    /// The source ([`Source`] code).
    pub source: u8,
    /// The op within the source.
    pub op: u16,
}

impl OpCode {
    /// The code of (`source`, `op`).
    pub const fn new(source: u8, op: u16) -> OpCode {
        OpCode { source, op }
    }
    /// Its name ([`op_name`]).
    pub fn name(self) -> Cow<'static, str> {
        op_name(self.source, self.op)
    }

    /// Whether a stored (source, op) pair is this code.
    pub const fn is(self, source: u8, op: u16) -> bool {
        self.source == source && self.op == op
    }

    /// The SQL condition selecting this code in `events` under `alias` (`""` for no alias):
    /// `e.source = 3 AND e.op = 1`.
    pub fn sql(self, alias: &str) -> String {
        let dot = if alias.is_empty() { "" } else { "." };
        format!("{alias}{dot}source = {} AND {alias}{dot}op = {}", self.source, self.op)
    }
}

/// Named op codes used across the crates. Each constant is named after its op (its meaning is in
/// [`OPS`], the one table of codes).
#[allow(missing_docs)]
pub mod op {
    use super::OpCode;
    // source 1: CUDA runtime (Ingero 1-12, Causeway 13+)
    pub const CUDA_MALLOC: OpCode = OpCode::new(1, 1);
    pub const CUDA_FREE: OpCode = OpCode::new(1, 2);
    pub const CUDA_LAUNCH_KERNEL: OpCode = OpCode::new(1, 3);
    pub const CUDA_MEMCPY: OpCode = OpCode::new(1, 4);
    pub const CUDA_STREAM_SYNC: OpCode = OpCode::new(1, 5);
    pub const CUDA_DEVICE_SYNC: OpCode = OpCode::new(1, 6);
    pub const CUDA_MEMCPY_ASYNC: OpCode = OpCode::new(1, 7);
    pub const CUDA_MALLOC_MANAGED: OpCode = OpCode::new(1, 8);
    pub const CUDA_MEMCPY_2D: OpCode = OpCode::new(1, 9);
    pub const CUDA_MEMCPY_2D_ASYNC: OpCode = OpCode::new(1, 10);
    pub const CUDA_MEMCPY_PEER: OpCode = OpCode::new(1, 11);
    pub const CUDA_MEMCPY_PEER_ASYNC: OpCode = OpCode::new(1, 12);
    pub const CUDA_EVENT_SYNC: OpCode = OpCode::new(1, 13);
    pub const CUDA_LAUNCH_KERNEL_EX: OpCode = OpCode::new(1, 14);
    pub const CUDA_MEMSET_ASYNC: OpCode = OpCode::new(1, 15);
    pub const CUDA_MALLOC_ASYNC: OpCode = OpCode::new(1, 16);
    pub const CUDA_FREE_ASYNC: OpCode = OpCode::new(1, 17);
    pub const CUDA_HOST_ALLOC: OpCode = OpCode::new(1, 18);
    pub const CUDA_EVENT_QUERY: OpCode = OpCode::new(1, 19);
    pub const CUDA_STREAM_WAIT_EVENT: OpCode = OpCode::new(1, 20);
    pub const CUDA_SET_DEVICE_FLAGS: OpCode = OpCode::new(1, 21);
    pub const CUDA_SET_DEVICE: OpCode = OpCode::new(1, 22);
    // source 2: the NVIDIA kernel driver
    pub const GPU_XID: OpCode = OpCode::new(2, 1);
    pub const NVRM_XID: OpCode = OpCode::new(2, 2);
    // source 3: host
    pub const SCHED_SWITCH: OpCode = OpCode::new(3, 1);
    pub const SCHED_WAKEUP: OpCode = OpCode::new(3, 2);
    pub const MM_PAGE_ALLOC: OpCode = OpCode::new(3, 3);
    pub const OOM_KILL: OpCode = OpCode::new(3, 4);
    pub const PROCESS_EXEC: OpCode = OpCode::new(3, 5);
    pub const PROCESS_EXIT: OpCode = OpCode::new(3, 6);
    pub const PROCESS_FORK: OpCode = OpCode::new(3, 7);
    pub const MM_PAGE_ALLOC_SUMMARY: OpCode = OpCode::new(3, 20);
    pub const SCHED_SWITCH_SUMMARY: OpCode = OpCode::new(3, 21);
    pub const SCHED_WAKEUP_SUMMARY: OpCode = OpCode::new(3, 22);
    pub const BLOCK_SUMMARY: OpCode = OpCode::new(3, 23);
    // source 4: driver (Ingero 1-6, Causeway 7+)
    pub const CU_LAUNCH_KERNEL: OpCode = OpCode::new(4, 1);
    pub const CU_MEMCPY: OpCode = OpCode::new(4, 2);
    pub const CU_MEMCPY_ASYNC: OpCode = OpCode::new(4, 3);
    pub const CU_CTX_SYNCHRONIZE: OpCode = OpCode::new(4, 4);
    pub const CU_MEM_ALLOC: OpCode = OpCode::new(4, 5);
    pub const CU_MEM_ALLOC_MANAGED: OpCode = OpCode::new(4, 6);
    pub const CU_MEM_FREE: OpCode = OpCode::new(4, 7);
    pub const CU_STREAM_SYNCHRONIZE: OpCode = OpCode::new(4, 8);
    pub const CU_LAUNCH_KERNEL_EX: OpCode = OpCode::new(4, 9);
    pub const CU_MEMSET_ASYNC: OpCode = OpCode::new(4, 10);
    pub const CU_MEM_CREATE: OpCode = OpCode::new(4, 11);
    pub const CU_MEM_MAP: OpCode = OpCode::new(4, 12);
    pub const CU_MEM_UNMAP: OpCode = OpCode::new(4, 13);
    pub const CU_MEM_RELEASE: OpCode = OpCode::new(4, 14);
    pub const CU_MEM_ALLOC_ASYNC: OpCode = OpCode::new(4, 15);
    pub const CU_MEM_FREE_ASYNC: OpCode = OpCode::new(4, 16);
    pub const CU_CTX_CREATE: OpCode = OpCode::new(4, 17);
    pub const CU_PRIMARY_CTX_SET_FLAGS: OpCode = OpCode::new(4, 18);
    pub const CU_CTX_SET_FLAGS: OpCode = OpCode::new(4, 19);
    // source 5: block I/O
    pub const BLOCK_READ: OpCode = OpCode::new(5, 1);
    pub const BLOCK_WRITE: OpCode = OpCode::new(5, 2);
    pub const BLOCK_DISCARD: OpCode = OpCode::new(5, 3);
    // source 6: TCP, source 7: sockets
    pub const TCP_RETRANSMIT: OpCode = OpCode::new(6, 1);
    pub const TCP_STATE: OpCode = OpCode::new(6, 2);
    pub const TCP_RETRANSMIT_SUMMARY: OpCode = OpCode::new(6, 20);
    pub const NET_SEND: OpCode = OpCode::new(7, 1);
    pub const NET_RECV: OpCode = OpCode::new(7, 2);
    pub const NET_CONNECT: OpCode = OpCode::new(7, 3);
    pub const NET_ACCEPT: OpCode = OpCode::new(7, 4);
    pub const NET_SEND_SUMMARY: OpCode = OpCode::new(7, 20);
    pub const NET_RECV_SUMMARY: OpCode = OpCode::new(7, 21);
    // source 8: CUDA graphs
    pub const GRAPH_BEGIN_CAPTURE: OpCode = OpCode::new(8, 1);
    pub const GRAPH_END_CAPTURE: OpCode = OpCode::new(8, 2);
    pub const GRAPH_INSTANTIATE: OpCode = OpCode::new(8, 3);
    pub const GRAPH_LAUNCH: OpCode = OpCode::new(8, 4);
    pub const CU_GRAPH_LAUNCH: OpCode = OpCode::new(8, 5);
    // source 9: NCCL (Causeway's numbering: Ingero names the source only)
    pub const NCCL_ALL_REDUCE: OpCode = OpCode::new(9, 1);
    pub const NCCL_ALL_GATHER: OpCode = OpCode::new(9, 2);
    pub const NCCL_REDUCE_SCATTER: OpCode = OpCode::new(9, 3);
    pub const NCCL_BROADCAST: OpCode = OpCode::new(9, 4);
    pub const NCCL_REDUCE: OpCode = OpCode::new(9, 5);
    pub const NCCL_SEND: OpCode = OpCode::new(9, 6);
    pub const NCCL_RECV: OpCode = OpCode::new(9, 7);
    pub const NCCL_GROUP_START: OpCode = OpCode::new(9, 8);
    pub const NCCL_GROUP_END: OpCode = OpCode::new(9, 9);
    pub const NCCL_COMM_INIT_RANK: OpCode = OpCode::new(9, 10);
    pub const NCCL_COMM_INIT_ALL: OpCode = OpCode::new(9, 11);
    pub const NCCL_COMM_SPLIT: OpCode = OpCode::new(9, 12);
    pub const NCCL_COMM_DESTROY: OpCode = OpCode::new(9, 13);
    pub const NCCL_COMM_ABORT: OpCode = OpCode::new(9, 14);
    pub const NCCL_COMM_FINALIZE: OpCode = OpCode::new(9, 15);
    // source 10: labeled intervals
    pub const STEP: OpCode = OpCode::new(10, 1);
    pub const EPOCH: OpCode = OpCode::new(10, 2);
    pub const TASK: OpCode = OpCode::new(10, 3);
    // source 11: CUPTI's activity controls
    pub const CUPTI_REGISTER_CALLBACKS: OpCode = OpCode::new(11, 1);
    pub const CUPTI_ACTIVITY_ENABLE: OpCode = OpCode::new(11, 2);
    pub const CUPTI_ACTIVITY_DISABLE: OpCode = OpCode::new(11, 3);
    pub const CUPTI_FINALIZE: OpCode = OpCode::new(11, 4);
}

/// The NCCL ops that are collectives: every rank of a communicator calls them in the same order,
/// so (communicator, sequence number) names one collective on every rank.
pub const NCCL_COLLECTIVES: [OpCode; 5] =
    [op::NCCL_ALL_REDUCE, op::NCCL_ALL_GATHER, op::NCCL_REDUCE_SCATTER, op::NCCL_BROADCAST, op::NCCL_REDUCE];

/// Whether a stored (source, op) is an NCCL collective ([`NCCL_COLLECTIVES`]).
pub fn is_nccl_collective(source: u8, op: u16) -> bool {
    NCCL_COLLECTIVES.iter().any(|c| c.is(source, op))
}

/// What kind of thing an op is; drives which analysis applies to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A host-side API call into the GPU stack (CUDA runtime or driver): candidates for slow-call attribution.
    GpuCall,
    /// An off-CPU interval of a traced thread.
    OffCpu,
    /// A point event (wake-up, fork, exec, exit, OOM, page allocation).
    Point,
    /// A block I/O request with its latency.
    BlockIo,
    /// A socket call of a traced thread (send, receive, connect, accept) with its latency and peer.
    SocketCall,
    /// An in-kernel aggregate written periodically.
    Summary,
    /// An interval the workload labeled (a training step, an epoch, a task): `timestamp` is its
    /// start, `duration` its length.
    Label,
    /// Anything else.
    Other,
}

/// (source, op, name, kind, meaning). Ingero's names are kept (`cudaStreamSync`, `cuMemAlloc`), so
/// its users' queries and FACTS figures line up.
pub const OPS: &[(u8, u16, &str, OpKind, &str)] = &[
    (1, 1, "cudaMalloc", OpKind::GpuCall, "device memory allocation; arg0 = bytes, arg2 = returned device pointer"),
    (1, 2, "cudaFree", OpKind::GpuCall, "device memory free; arg2 = device pointer"),
    (1, 3, "cudaLaunchKernel", OpKind::GpuCall, "kernel launch; arg0 = kernel function pointer, arg1 = blocks (grid.x * grid.y * grid.z), arg2 = stream"),
    (1, 4, "cudaMemcpy", OpKind::GpuCall, "synchronous copy; arg0 = bytes, arg1 = cudaMemcpyKind"),
    (1, 5, "cudaStreamSync", OpKind::GpuCall, "cudaStreamSynchronize: wait for a stream to drain; arg2 = stream"),
    (1, 6, "cudaDeviceSync", OpKind::GpuCall, "cudaDeviceSynchronize: wait for all work on the device"),
    (1, 7, "cudaMemcpyAsync", OpKind::GpuCall, "asynchronous copy; arg0 = bytes, arg1 = cudaMemcpyKind, arg2 = stream"),
    (1, 8, "cudaMallocManaged", OpKind::GpuCall, "unified memory allocation; arg0 = bytes"),
    (1, 9, "cudaMemcpy2D", OpKind::GpuCall, "synchronous 2D copy; arg0 = width*height bytes, arg1 = kind"),
    (1, 10, "cudaMemcpy2DAsync", OpKind::GpuCall, "asynchronous 2D copy; arg0 = bytes, arg1 = kind, arg2 = stream"),
    (1, 11, "cudaMemcpyPeer", OpKind::GpuCall, "device-to-device copy across GPUs; arg0 = bytes"),
    (1, 12, "cudaMemcpyPeerAsync", OpKind::GpuCall, "asynchronous peer copy; arg0 = bytes, arg2 = stream"),
    (1, 13, "cudaEventSync", OpKind::GpuCall, "cudaEventSynchronize: wait for an event; arg2 = event handle"),
    (1, 14, "cudaLaunchKernelExC", OpKind::GpuCall, "kernel launch with a launch configuration (cudaLaunchKernelExC, CUTLASS cluster kernels); arg0 = kernel (host stub or cudaKernel_t), arg1 = blocks, arg2 = stream; grid, block, shared memory and cluster in launch_configs"),
    (1, 15, "cudaMemsetAsync", OpKind::GpuCall, "asynchronous memset; arg0 = bytes, arg1 = value, arg2 = stream"),
    (1, 16, "cudaMallocAsync", OpKind::GpuCall, "stream-ordered allocation (PyTorch's cudaMallocAsync backend); arg0 = bytes, arg1 = stream, arg2 = returned device pointer"),
    (1, 17, "cudaFreeAsync", OpKind::GpuCall, "stream-ordered free; arg1 = stream, arg2 = device pointer"),
    (1, 18, "cudaHostAlloc", OpKind::GpuCall, "pinned host allocation; arg0 = bytes, arg1 = flags, arg2 = returned host pointer"),
    (1, 19, "cudaEventQuery", OpKind::GpuCall, "non-blocking event poll (600 = cudaErrorNotReady: not yet); arg2 = event handle"),
    (1, 20, "cudaStreamWaitEvent", OpKind::GpuCall, "make a stream wait for an event on the GPU (returns at once); arg0 = event, arg1 = flags, arg2 = stream"),
    (1, 21, "cudaSetDeviceFlags", OpKind::GpuCall, "device flags; arg0 = flags (scheduling: 0 auto, 1 spin, 2 yield, 4 blocking sync)"),
    (1, 22, "cudaSetDevice", OpKind::GpuCall, "makes a device current for the calling thread (NCCL communicators created next use it); arg0 = device"),
    (2, 1, "gpu_xid", OpKind::Point, "an Xid error the NVIDIA driver reported for a GPU (NVML critical Xid event); arg0 = Xid code, gpu_id = the GPU"),
    (2, 2, "nvrm_xid", OpKind::Point, "the NVIDIA driver's own Xid line in the kernel log (NVRM: Xid ...): pid and comm = the process it named (0 and empty when it did not), arg0 = Xid code, arg1 = the GPU's PCI bus number, gpu_id = the GPU (-1 when NVML did not list that address)"),
    (3, 1, "sched_switch", OpKind::OffCpu, "off-CPU interval of a traced thread; timestamp = switch-in, interval = [timestamp - duration, timestamp]; arg1 = pid"),
    (3, 2, "sched_wakeup", OpKind::Point, "wake-up; pid/tid = waker, arg1 = woken pid, arg2 = woken tid, cpu = target CPU"),
    (3, 3, "mm_page_alloc", OpKind::Point, "page allocation; arg0 = bytes (4096 << order)"),
    (3, 4, "oom_kill", OpKind::Point, "OOM kill; pid = victim"),
    (3, 5, "process_exec", OpKind::Point, "exec of a new program"),
    (3, 6, "process_exit", OpKind::Point, "thread or process exit; arg0 = exit code"),
    (3, 7, "process_fork", OpKind::Point, "fork/clone; arg1 = child pid"),
    (3, 10, "pod_restart", OpKind::Point, "Kubernetes pod restart (Ingero)"),
    (3, 11, "pod_eviction", OpKind::Point, "Kubernetes pod eviction (Ingero)"),
    (3, 12, "pod_oom_kill", OpKind::Point, "Kubernetes pod OOM kill (Ingero)"),
    (3, 20, "mm_page_alloc_summary", OpKind::Summary, "page allocations aggregated in the kernel; arg0 = bytes, arg1 = count"),
    (3, 21, "sched_switch_summary", OpKind::Summary, "switches of untraced tasks aggregated in the kernel since the previous summary row; arg1 = count (idle included), duration = the CPU time the untraced non-idle tasks held before switching out"),
    (3, 22, "sched_wakeup_summary", OpKind::Summary, "wake-ups of untraced tasks aggregated in the kernel; arg1 = count"),
    (3, 23, "block_summary", OpKind::Summary, "block requests of untraced processes aggregated in the kernel; arg0 = bytes, arg1 = count"),
    (4, 1, "cuLaunchKernel", OpKind::GpuCall, "driver kernel launch; arg0 = CUfunction, arg1 = blocks (gridDimX * gridDimY * gridDimZ), arg2 = stream"),
    (4, 2, "cuMemcpy", OpKind::GpuCall, "driver synchronous copy (cuMemcpy, cuMemcpyHtoD/DtoH/DtoD); arg0 = bytes, arg1 = direction"),
    (4, 3, "cuMemcpyAsync", OpKind::GpuCall, "driver asynchronous copy; arg0 = bytes, arg1 = direction, arg2 = stream"),
    (4, 4, "cuCtxSynchronize", OpKind::GpuCall, "driver context synchronize"),
    (4, 5, "cuMemAlloc", OpKind::GpuCall, "cuMemAlloc_v2; arg0 = bytes"),
    (4, 6, "cuMemAllocManaged", OpKind::GpuCall, "driver managed allocation; arg0 = bytes"),
    (4, 7, "cuMemFree", OpKind::GpuCall, "cuMemFree_v2; arg2 = device pointer"),
    (4, 8, "cuStreamSynchronize", OpKind::GpuCall, "driver stream synchronize; arg2 = stream"),
    (4, 9, "cuLaunchKernelEx", OpKind::GpuCall, "driver kernel launch with a launch configuration (cuBLAS/CUTLASS on sm90, NCCL, Triton); arg0 = CUfunction, arg1 = blocks, arg2 = stream; grid, block, shared memory and cluster in launch_configs"),
    (4, 10, "cuMemsetAsync", OpKind::GpuCall, "driver asynchronous memset (cuMemsetD8/D16/D32Async); arg0 = bytes, arg1 = value, arg2 = stream"),
    (4, 11, "cuMemCreate", OpKind::GpuCall, "physical allocation of the virtual memory API (PyTorch expandable segments); arg0 = bytes, arg2 = returned allocation handle"),
    (4, 12, "cuMemMap", OpKind::GpuCall, "map a physical allocation into a virtual range; arg0 = bytes, arg1 = allocation handle, arg2 = device pointer"),
    (4, 13, "cuMemUnmap", OpKind::GpuCall, "unmap a virtual range; arg0 = bytes, arg2 = device pointer"),
    (4, 14, "cuMemRelease", OpKind::GpuCall, "release a physical allocation; arg2 = allocation handle"),
    (4, 15, "cuMemAllocAsync", OpKind::GpuCall, "driver stream-ordered allocation; arg0 = bytes, arg1 = stream, arg2 = returned device pointer"),
    (4, 16, "cuMemFreeAsync", OpKind::GpuCall, "driver stream-ordered free; arg1 = stream, arg2 = device pointer"),
    (4, 17, "cuCtxCreate", OpKind::GpuCall, "context creation; arg0 = flags (scheduling: 0 auto, 1 spin, 2 yield, 4 blocking sync), arg1 = device, arg2 = returned context"),
    (4, 18, "cuDevicePrimaryCtxSetFlags", OpKind::GpuCall, "primary context flags; arg0 = flags (scheduling: 0 auto, 1 spin, 2 yield, 4 blocking sync), arg1 = device"),
    (4, 19, "cuCtxSetFlags", OpKind::GpuCall, "current context flags; arg0 = flags"),
    (5, 1, "block_read", OpKind::BlockIo, "block read request, issue to completion; arg0 = bytes, arg1 = device (major<<20|minor)"),
    (5, 2, "block_write", OpKind::BlockIo, "block write request, issue to completion; arg0 = bytes, arg1 = device"),
    (5, 3, "block_discard", OpKind::BlockIo, "block discard request; arg0 = bytes, arg1 = device"),
    (6, 1, "tcp_retransmit", OpKind::Point, "TCP retransmission of a traced process's socket (tcp:tcp_retransmit_skb); pid/tid = the last thread that used the socket, arg0 = the socket's TCP state, arg2 = peer (net_peers)"),
    (6, 2, "tcp_state", OpKind::Point, "TCP state change of a traced process's socket (sock:inet_sock_set_state); arg0 = old state, arg1 = new state (1 ESTABLISHED, 2 SYN_SENT, 3 SYN_RECV, 4 FIN_WAIT1, 5 FIN_WAIT2, 6 TIME_WAIT, 7 CLOSE, 8 CLOSE_WAIT, 9 LAST_ACK, 10 LISTEN, 11 CLOSING), arg2 = peer (net_peers)"),
    (6, 20, "tcp_retransmit_summary", OpKind::Summary, "TCP retransmissions of untraced processes' sockets aggregated in the kernel; arg1 = count"),
    (7, 1, "net_send", OpKind::SocketCall, "socket send of a traced thread (send, sendto, sendmsg, sendmmsg, write, writev on a socket), entry to return; arg0 = bytes sent, arg1 = fd, arg2 = peer (net_peers), ret_code = -errno"),
    (7, 2, "net_recv", OpKind::SocketCall, "socket receive of a traced thread (recv, recvfrom, recvmsg, recvmmsg, read, readv on a socket), entry to return: a blocking receive waits here for the peer; arg0 = bytes received, arg1 = fd, arg2 = peer, ret_code = -errno"),
    (7, 3, "net_connect", OpKind::SocketCall, "connect of a traced thread; arg1 = fd, arg2 = peer, ret_code = -errno (-115 EINPROGRESS: non-blocking)"),
    (7, 4, "net_accept", OpKind::SocketCall, "accept / accept4 of a traced thread, entry to return (a blocking accept waits here for a client); arg1 = the new connection's fd, arg2 = its peer, ret_code = -errno"),
    (7, 20, "net_send_summary", OpKind::Summary, "socket sends of untraced processes aggregated in the kernel (sock:sock_send_length); arg0 = bytes, arg1 = count"),
    (7, 21, "net_recv_summary", OpKind::Summary, "socket receives of untraced processes aggregated in the kernel (sock:sock_recv_length); arg0 = bytes, arg1 = count"),
    (8, 1, "graph_begin_capture", OpKind::GpuCall, "cudaStreamBeginCapture"),
    (8, 2, "graph_end_capture", OpKind::GpuCall, "cudaStreamEndCapture"),
    (8, 3, "graph_instantiate", OpKind::GpuCall, "cudaGraphInstantiate"),
    (8, 4, "cudaGraphLaunch", OpKind::GpuCall, "cudaGraphLaunch; arg0 = graph exec handle, arg2 = stream"),
    (8, 5, "cuGraphLaunch", OpKind::GpuCall, "driver graph launch; arg0 = graph exec handle, arg2 = stream"),
    (9, 1, "ncclAllReduce", OpKind::GpuCall, "all-reduce enqueued on a stream (returns before the data moves: the wait shows in a later synchronize); arg0 = bytes, arg1 = elements, arg2 = stream; communicator, rank, sequence, datatype and op in nccl_calls"),
    (9, 2, "ncclAllGather", OpKind::GpuCall, "all-gather enqueued on a stream; arg0 = bytes received (send count * size * ranks), arg1 = elements sent, arg2 = stream"),
    (9, 3, "ncclReduceScatter", OpKind::GpuCall, "reduce-scatter enqueued on a stream; arg0 = bytes sent (receive count * size * ranks), arg1 = elements received, arg2 = stream"),
    (9, 4, "ncclBroadcast", OpKind::GpuCall, "broadcast enqueued on a stream; arg0 = bytes, arg1 = elements, arg2 = stream; root in nccl_calls.peer"),
    (9, 5, "ncclReduce", OpKind::GpuCall, "reduce enqueued on a stream; arg0 = bytes, arg1 = elements, arg2 = stream; root in nccl_calls.peer"),
    (9, 6, "ncclSend", OpKind::GpuCall, "point-to-point send enqueued on a stream; arg0 = bytes, arg1 = elements, arg2 = stream; peer in nccl_calls.peer"),
    (9, 7, "ncclRecv", OpKind::GpuCall, "point-to-point receive enqueued on a stream; arg0 = bytes, arg1 = elements, arg2 = stream; peer in nccl_calls.peer"),
    (9, 8, "ncclGroupStart", OpKind::GpuCall, "opens a group: the calls up to ncclGroupEnd are launched together"),
    (9, 9, "ncclGroupEnd", OpKind::GpuCall, "closes a group and launches its calls"),
    (9, 10, "ncclCommInitRank", OpKind::GpuCall, "communicator creation (ncclCommInitRank / ncclCommInitRankConfig), blocks until every rank joined; arg1 = ranks, arg2 = returned communicator; its hash, rank and device in nccl_calls"),
    (9, 11, "ncclCommInitAll", OpKind::GpuCall, "one process creates a communicator per device; arg1 = devices, arg2 = the array of returned communicators"),
    (9, 12, "ncclCommSplit", OpKind::GpuCall, "communicator split (collective over the parent); arg1 = parent communicator, arg2 = returned communicator; color and key in nccl_calls"),
    (9, 13, "ncclCommDestroy", OpKind::GpuCall, "communicator destruction; arg1 = communicator"),
    (9, 14, "ncclCommAbort", OpKind::GpuCall, "communicator abort; arg1 = communicator"),
    (9, 15, "ncclCommFinalize", OpKind::GpuCall, "communicator finalization (flushes outstanding work); arg1 = communicator"),
    (10, 1, "step", OpKind::Label, "a training step (or serving iteration) the workload labeled; timestamp = start, duration = length, arg0 = step number"),
    (10, 2, "epoch", OpKind::Label, "an epoch the workload labeled; timestamp = start, duration = length, arg0 = epoch number"),
    (10, 3, "task", OpKind::Label, "a task the workload labeled (a request, an evaluation, a checkpoint); timestamp = start, duration = length, arg0 = task number"),
    (11, 1, "cuptiActivityRegisterCallbacks", OpKind::Other, "a CUPTI client takes the activity records (the last one to register gets every buffer); arg0 = the caller's return address (which library called), arg1 = its buffer-completed callback"),
    (11, 2, "cuptiActivityEnable", OpKind::Other, "a CUPTI client turns an activity kind on (for every client); arg0 = the caller's return address, arg1 = the kind (10 concurrent kernels, 1 memcpy, ...)"),
    (11, 3, "cuptiActivityDisable", OpKind::Other, "a CUPTI client turns an activity kind off (for every client); arg0 = the caller's return address, arg1 = the kind"),
    (11, 4, "cuptiFinalize", OpKind::Other, "a CUPTI client tears CUPTI down (every client's callbacks and kinds go); arg0 = the caller's return address"),
];

fn find(source: u8, op: u16) -> Option<&'static (u8, u16, &'static str, OpKind, &'static str)> {
    OPS.iter().find(|e| e.0 == source && e.1 == op)
}

/// The name of an op; unknown codes get a stable synthetic name (`op_5_9`), never an error.
pub fn op_name(source: u8, op: u16) -> Cow<'static, str> {
    match find(source, op) {
        Some(e) => Cow::Borrowed(e.2),
        None => Cow::Owned(format!("op_{source}_{op}")),
    }
}

/// What kind of event a code is ([`OpKind::Other`] for unknown codes).
pub fn op_kind(source: u8, op: u16) -> OpKind {
    find(source, op).map(|e| e.3).unwrap_or(OpKind::Other)
}

/// Every known op of `kind`, in code order (the table is the one list: e.g. the socket calls an
/// off-CPU interval can lie in are the ops of [`OpKind::SocketCall`]).
pub fn ops_of_kind(kind: OpKind) -> Vec<OpCode> {
    OPS.iter().filter(|e| e.3 == kind).map(|e| OpCode::new(e.0, e.1)).collect()
}

/// What a code means ("unknown op code" for unknown codes).
pub fn op_description(source: u8, op: u16) -> &'static str {
    find(source, op).map(|e| e.4).unwrap_or("unknown op code")
}

/// A source's name (`source_N` for unknown codes).
pub fn source_name(source: u8) -> Cow<'static, str> {
    match SOURCES.iter().find(|s| s.0 == source) {
        Some(s) => Cow::Borrowed(s.1),
        None => Cow::Owned(format!("source_{source}")),
    }
}

/// The label kinds a workload may send (`step`, `epoch`, `task`): the names of source STEP's ops
/// in [`OPS`].
pub fn label_kinds() -> impl Iterator<Item = &'static str> {
    OPS.iter().filter(|e| e.0 == Source::Step.code()).map(|e| e.2)
}

/// The op of a label kind ([`label_kinds`]).
pub fn label_op(kind: &str) -> Option<OpCode> {
    OPS.iter().find(|e| e.0 == Source::Step.code() && e.2 == kind).map(|e| OpCode::new(e.0, e.1))
}

/// The ops a step is read from: every label kind's op ([`label_kinds`]) and the calls that can end
/// an inferred step (a synchronization, a synchronous copy, a collective: [`gpu_role`]). The
/// analysis reads only these to find a trace's steps, and a finished trace packs them apart
/// (`step_blocks`) so that a window's steps cost a read of them, not of every call.
pub fn step_ops() -> Vec<OpCode> {
    OPS.iter().map(|e| OpCode::new(e.0, e.1)).filter(|&c| is_step_op(c)).collect()
}

/// Whether rows of `op` are step rows ([`step_ops`]): a label, or a call that can end a step.
pub fn is_step_op(op: OpCode) -> bool {
    op.source == Source::Step.code() || is_step_boundary(op)
}

/// Whether a call of `op` can end an inferred step (see [`step_ops`]).
pub fn is_step_boundary(op: OpCode) -> bool {
    matches!(gpu_role(op), GpuRole::Sync | GpuRole::SyncCopy | GpuRole::Collective)
}

/// Look an op up by name, case-insensitively; accepts both Ingero's short names and the full CUDA
/// names (`cudaStreamSynchronize` finds `cudaStreamSync`), and `op_S_O` synthetic names.
pub fn op_by_name(name: &str) -> Option<OpCode> {
    let alias = match name.to_ascii_lowercase().as_str() {
        "cudastreamsynchronize" => "cudaStreamSync",
        "cudadevicesynchronize" => "cudaDeviceSync",
        "cudaeventsynchronize" => "cudaEventSync",
        "cumemalloc_v2" => "cuMemAlloc",
        "cumemfree_v2" => "cuMemFree",
        "cuctxsynchronize_v2" => "cuCtxSynchronize",
        "culaunchkernelex_ptsz" => "cuLaunchKernelEx",
        "cudalaunchkernelexc_ptsz" => "cudaLaunchKernelExC",
        _ => name,
    };
    if let Some(e) = OPS.iter().find(|e| e.2.eq_ignore_ascii_case(alias)) {
        return Some(OpCode::new(e.0, e.1));
    }
    let rest = name.strip_prefix("op_")?;
    let (s, o) = rest.split_once('_')?;
    Some(OpCode::new(s.parse().ok()?, o.parse().ok()?))
}

/// What a GPU API call does, for the analyses that treat calls by what they do (launch rates, sync
/// storms, the allocator, GPU waits). The one definition: analysis never lists op codes for a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuRole {
    /// Queues GPU work: a kernel launch (runtime, driver, Ex) or a graph launch.
    Launch,
    /// Waits until the GPU finished something (stream, device, context or event synchronize).
    Sync,
    /// A synchronous copy: returns when the data has moved, so it waits for the GPU too.
    SyncCopy,
    /// Obtains device or pinned memory.
    Alloc,
    /// Gives memory back.
    Free,
    /// Queues an NCCL collective or point-to-point transfer: GPU work that completes only when the
    /// other ranks get there too.
    Collective,
    /// Everything else (async copies and memsets, event polls, flags, mapping).
    Other,
}

/// The role of an op; non-GPU ops and unknown codes are `Other`.
pub fn gpu_role(code: OpCode) -> GpuRole {
    use op::*;
    match code {
        CUDA_LAUNCH_KERNEL
        | CUDA_LAUNCH_KERNEL_EX
        | CU_LAUNCH_KERNEL
        | CU_LAUNCH_KERNEL_EX
        | GRAPH_LAUNCH
        | CU_GRAPH_LAUNCH => GpuRole::Launch,
        CUDA_STREAM_SYNC | CUDA_DEVICE_SYNC | CUDA_EVENT_SYNC | CU_CTX_SYNCHRONIZE | CU_STREAM_SYNCHRONIZE => {
            GpuRole::Sync
        }
        CUDA_MEMCPY | CUDA_MEMCPY_2D | CUDA_MEMCPY_PEER | CU_MEMCPY => GpuRole::SyncCopy,
        CUDA_MALLOC | CUDA_MALLOC_MANAGED | CUDA_MALLOC_ASYNC | CUDA_HOST_ALLOC | CU_MEM_ALLOC
        | CU_MEM_ALLOC_MANAGED | CU_MEM_ALLOC_ASYNC | CU_MEM_CREATE => GpuRole::Alloc,
        CUDA_FREE | CUDA_FREE_ASYNC | CU_MEM_FREE | CU_MEM_FREE_ASYNC | CU_MEM_RELEASE => GpuRole::Free,
        NCCL_ALL_REDUCE | NCCL_ALL_GATHER | NCCL_REDUCE_SCATTER | NCCL_BROADCAST | NCCL_REDUCE | NCCL_SEND
        | NCCL_RECV => GpuRole::Collective,
        _ => GpuRole::Other,
    }
}

/// Whether this op launches kernels (their `arg0` names the kernel: see `kernel_names`).
pub fn is_kernel_launch(code: OpCode) -> bool {
    use op::*;
    matches!(code, CUDA_LAUNCH_KERNEL | CUDA_LAUNCH_KERNEL_EX | CU_LAUNCH_KERNEL | CU_LAUNCH_KERNEL_EX)
}

/// Ops that set a context's host scheduling policy while the GPU works (spin / yield / blocking
/// sync); their `arg0` holds the flags.
pub fn sets_sched_flags(code: OpCode) -> bool {
    use op::*;
    matches!(code, CUDA_SET_DEVICE_FLAGS | CU_CTX_CREATE | CU_PRIMARY_CTX_SET_FLAGS | CU_CTX_SET_FLAGS)
}

/// The host scheduling policy of a context while it waits for the GPU (`cudaDeviceSchedule*` /
/// `CU_CTX_SCHED_*`, the low three bits of the flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SchedPolicy {
    /// 0: spin when there are no more active contexts than logical CPUs, else yield.
    Auto,
    /// 1: spin on the CPU while waiting.
    Spin,
    /// 2: yield the CPU while waiting.
    Yield,
    /// 4: sleep on an interrupt while waiting.
    BlockingSync,
}

impl SchedPolicy {
    /// The policy the low three bits of `cudaSetDeviceFlags` / `cuCtxCreate` flags ask for.
    pub fn from_flags(flags: i64) -> SchedPolicy {
        match flags & 0x7 {
            1 => SchedPolicy::Spin,
            2 => SchedPolicy::Yield,
            4 => SchedPolicy::BlockingSync,
            _ => SchedPolicy::Auto,
        }
    }
    /// Its name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedPolicy::Auto => "auto",
            SchedPolicy::Spin => "spin",
            SchedPolicy::Yield => "yield",
            SchedPolicy::BlockingSync => "blocking_sync",
        }
    }
    /// Whether a waiting thread stays on the CPU (spins) under this policy on a host with
    /// `cpus` logical CPUs and `contexts` active contexts (`Auto` spins while contexts <= cpus).
    pub fn spins(self, cpus: usize, contexts: usize) -> bool {
        match self {
            SchedPolicy::Spin => true,
            SchedPolicy::Auto => contexts <= cpus,
            SchedPolicy::Yield | SchedPolicy::BlockingSync => false,
        }
    }
}

/// Whether a stored (source, op) is a GPU API call: decided by its source alone
/// ([`Source::is_gpu_api`]); the op is taken so that callers need not know that.
pub fn is_gpu_call(source: u8, _op: u16) -> bool {
    is_gpu_call_source(source)
}

/// Why a thread left the CPU, normalized from the kernel's task state at `sched_switch`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PrevState {
    /// Still runnable: preempted by another task (`R`, or `preempt` set).
    #[default]
    Preempted = 0,
    /// Interruptible sleep (`S`): futex, poll, nanosleep, a pipe ...
    Sleeping = 1,
    /// Uninterruptible wait (`D`): usually block I/O or page faults.
    Uninterruptible = 2,
    /// Stopped, traced, parked, dead or zombie.
    Other = 3,
    /// Not recorded (Ingero DBs).
    Unknown = 255,
}

/// (code, name, meaning) of every [`PrevState`], written into the `prev_states` lookup table.
pub const PREV_STATES: &[(u8, &str, &str)] = &[
    (0, "preempted", "still runnable when it left the CPU: another task took the CPU"),
    (1, "sleeping", "interruptible sleep (S): futex, poll, nanosleep, pipe, ..."),
    (2, "uninterruptible", "uninterruptible wait (D): block I/O, page fault, ..."),
    (3, "other", "stopped, traced, parked, dead or zombie"),
    (255, "unknown", "not recorded by the tool that wrote this trace"),
];

impl PrevState {
    /// The stored `events.prev_state` value.
    pub fn code(self) -> u8 {
        self as u8
    }
    /// The state a stored value stands for ([`PrevState::Unknown`] for others).
    pub fn from_code(code: i64) -> PrevState {
        match code {
            0 => PrevState::Preempted,
            1 => PrevState::Sleeping,
            2 => PrevState::Uninterruptible,
            3 => PrevState::Other,
            _ => PrevState::Unknown,
        }
    }
    /// Its name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            PrevState::Preempted => "preempted",
            PrevState::Sleeping => "sleeping",
            PrevState::Uninterruptible => "uninterruptible",
            PrevState::Other => "other",
            PrevState::Unknown => "unknown",
        }
    }
}

/// `cudaMemcpyKind` values as stored in `arg1` of copies.
pub const MEMCPY_KINDS: &[(i64, &str)] = &[
    (0, "cudaMemcpyHostToHost"),
    (1, "cudaMemcpyHostToDevice"),
    (2, "cudaMemcpyDeviceToHost"),
    (3, "cudaMemcpyDeviceToDevice"),
    (4, "cudaMemcpyDefault"),
];

/// The `ret_code` of a call that had not returned when the trace ended: its event was written from
/// the call's entry, read where the probes keep the calls in flight, and its duration runs to the
/// end of the trace (the call took at least that long). No CUDA, driver or NCCL code is negative.
pub const RET_IN_FLIGHT: i32 = -1;

/// How long a call must have been in flight to be worth a reader's attention as a possible hang:
/// the tracer writes such calls out every few seconds (`under_way`) and names them when the trace
/// ends; `explain` calls one a hang past this and a hundred times its op's median.
pub const LONG_IN_FLIGHT_NS: i64 = 1_000_000_000;

/// The CUDA runtime error codes that traces meet most often (`ret_code`).
pub const CUDA_ERRORS: &[(i64, &str)] = &[
    (RET_IN_FLIGHT as i64, "inFlight: the call had not returned when the trace ended"),
    (0, "cudaSuccess"),
    (1, "cudaErrorInvalidValue"),
    (2, "cudaErrorMemoryAllocation"),
    (3, "cudaErrorInitializationError"),
    (4, "cudaErrorCudartUnloading"),
    (35, "cudaErrorInsufficientDriver"),
    (98, "cudaErrorInvalidDeviceFunction"),
    (100, "cudaErrorNoDevice"),
    (101, "cudaErrorInvalidDevice"),
    (200, "cudaErrorInvalidKernelImage"),
    (201, "cudaErrorDeviceUninitialized"),
    (209, "cudaErrorNoKernelImageForDevice"),
    (214, "cudaErrorECCUncorrectable"),
    (222, "cudaErrorUnsupportedPtxVersion"),
    (400, "cudaErrorInvalidResourceHandle"),
    (600, "cudaErrorNotReady"),
    (700, "cudaErrorIllegalAddress"),
    (701, "cudaErrorLaunchOutOfResources"),
    (702, "cudaErrorLaunchTimeout"),
    (710, "cudaErrorAssert"),
    (714, "cudaErrorHardwareStackError"),
    (715, "cudaErrorIllegalInstruction"),
    (716, "cudaErrorMisalignedAddress"),
    (717, "cudaErrorInvalidAddressSpace"),
    (718, "cudaErrorInvalidPc"),
    (719, "cudaErrorLaunchFailure"),
    (999, "cudaErrorUnknown"),
];

/// NCCL's results (`ncclResult_t`, an NCCL call's `ret_code`).
pub const NCCL_RESULTS: &[(i64, &str)] = &[
    (0, "ncclSuccess"),
    (1, "ncclUnhandledCudaError"),
    (2, "ncclSystemError"),
    (3, "ncclInternalError"),
    (4, "ncclInvalidArgument"),
    (5, "ncclInvalidUsage"),
    (6, "ncclRemoteError"),
    (7, "ncclInProgress"),
];

/// The name of a call's `ret_code` (the runtime's spelling for the runtime's and the driver's
/// codes, which share their numbers where it matters: 2 out of memory, 700 an illegal address, ...).
pub fn error_name(source: u8, code: i64) -> Cow<'static, str> {
    let table = if source == Source::Nccl.code() { NCCL_RESULTS } else { CUDA_ERRORS };
    match table.iter().find(|e| e.0 == code) {
        Some(e) => Cow::Borrowed(e.1),
        None => Cow::Owned(format!("error {code}")),
    }
}

/// Whether a call's `ret_code` is a failure: not success, not a call still in flight, not "not
/// ready" (600: an event or stream query's normal answer) and not NCCL's "in progress" (7: a
/// non-blocking communicator's normal answer). The SQL of the same rule is [`FAILURE_SQL`].
pub fn is_call_failure(source: u8, code: i32) -> bool {
    code > 0 && code != 600 && !(source == Source::Nccl.code() && code == 7)
}

/// [`is_call_failure`] as a SQL condition over `events`.
pub const FAILURE_SQL: &str = "ret_code > 0 AND ret_code <> 600 AND NOT (source = 9 AND ret_code = 7)";

/// What the Xid errors a job meets most often mean (NVIDIA's Xid catalog), and whether the GPU or
/// its context is lost with them (the job's calls fail from then on).
pub const XIDS: &[(i64, &str, bool)] = &[
    (13, "graphics engine exception (often an illegal access by a kernel)", false),
    (31, "GPU memory page fault (a kernel read or wrote an address it does not own)", false),
    (43, "GPU stopped processing (a kernel was killed by the driver)", false),
    (45, "preemptive cleanup after an earlier error", false),
    (48, "double-bit ECC error (uncorrectable memory error)", true),
    (61, "internal micro-controller breakpoint/warning", false),
    (62, "internal micro-controller halt", true),
    (63, "ECC page retirement or row remapping recorded", false),
    (64, "ECC page retirement or row remapping failed", true),
    (74, "NVLink error", true),
    (79, "GPU has fallen off the bus", true),
    (92, "high single-bit ECC error rate", false),
    (94, "contained ECC error (the affected context is lost)", true),
    (95, "uncontained ECC error (every context on the GPU is lost)", true),
    (119, "GSP RPC timeout", true),
    (120, "GSP error", true),
];

/// The meaning of Xid `code`, and whether it loses the GPU or its contexts.
pub fn xid_meaning(code: i64) -> (Cow<'static, str>, bool) {
    match XIDS.iter().find(|x| x.0 == code) {
        Some(x) => (Cow::Borrowed(x.1), x.2),
        None => (Cow::Owned(format!("Xid {code} (see NVIDIA's Xid catalog)")), false),
    }
}

/// Errors that a kernel raises on the device and a later call reports (the context is broken
/// from then on): an illegal address, a device-side assert, a bad instruction, a launch failure.
pub fn is_device_fault(code: i64) -> bool {
    matches!(code, 700 | 710 | 714..=719)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingero_codes_keep_their_numbers_and_names() {
        assert_eq!(op_name(1, 3), "cudaLaunchKernel");
        assert_eq!(op_name(1, 5), "cudaStreamSync");
        assert_eq!(op_name(3, 1), "sched_switch");
        assert_eq!(op_name(4, 5), "cuMemAlloc");
        assert_eq!(op_name(5, 2), "block_write");
        assert_eq!(op_name(3, 21), "sched_switch_summary");
    }

    #[test]
    fn every_code_is_unique_and_named() {
        let mut seen = std::collections::HashSet::new();
        for e in OPS {
            assert!(seen.insert((e.0, e.1)), "duplicate code {}:{}", e.0, e.1);
            assert!(!e.2.is_empty() && !e.4.is_empty());
            assert!(SOURCES.iter().any(|s| s.0 == e.0), "op {} has no source", e.2);
        }
    }

    #[test]
    fn gpu_calls_are_exactly_the_ops_of_the_gpu_api_sources() {
        for e in OPS {
            assert_eq!(e.3 == OpKind::GpuCall, is_gpu_call_source(e.0), "{} ({}:{})", e.2, e.0, e.1);
        }
        assert!(is_gpu_call(8, 999) && is_gpu_call(1, 999) && !is_gpu_call(3, 1));
        for (code, ..) in SOURCES {
            assert_eq!(Source::from_code(*code).map(Source::code), Some(*code), "source {code}");
        }
        assert_eq!(Source::from_code(0), None);
        assert_eq!(op::SCHED_SWITCH.sql("e"), "e.source = 3 AND e.op = 1");
        assert_eq!(op::SCHED_SWITCH.sql(""), "source = 3 AND op = 1");
    }

    #[test]
    fn unknown_codes_get_a_round_trippable_name() {
        assert_eq!(op_name(9, 77), "op_9_77");
        assert_eq!(op_by_name("op_9_77"), Some(OpCode::new(9, 77)));
    }

    #[test]
    fn every_role_names_a_gpu_call() {
        for e in OPS {
            let code = OpCode::new(e.0, e.1);
            if gpu_role(code) != GpuRole::Other || is_kernel_launch(code) || sets_sched_flags(code) {
                assert_eq!(e.3, OpKind::GpuCall, "{} has a GPU role but is not a GPU call", e.2);
            }
        }
        assert_eq!(gpu_role(op::CU_LAUNCH_KERNEL_EX), GpuRole::Launch);
        assert_eq!(gpu_role(op::CUDA_EVENT_QUERY), GpuRole::Other, "a poll is not a wait");
        assert_eq!(SchedPolicy::from_flags(0x4 | 0x8), SchedPolicy::BlockingSync);
        assert!(SchedPolicy::Auto.spins(2, 1) && !SchedPolicy::Auto.spins(2, 3));
    }

    #[test]
    fn full_cuda_names_are_aliases() {
        assert_eq!(op_by_name("cudaStreamSynchronize"), Some(op::CUDA_STREAM_SYNC));
        assert_eq!(op_by_name("CUDALAUNCHKERNEL"), Some(op::CUDA_LAUNCH_KERNEL));
        assert_eq!(op_by_name("nope"), None);
    }
}
