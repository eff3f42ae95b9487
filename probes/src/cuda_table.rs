//! The one table of the CUDA and NCCL functions Causeway probes. Each row names the BPF entry program, the
//! library it attaches to, the op code its calls are stored under, the symbols (the primary one
//! first, then the `_v2` / `_ptsz` / `_ptds` twins that only some builds export) and how the entry
//! program reads the arguments. This file is compiled twice: into the crate (the loader's symbol
//! lists and uprobe_multi cookies) and into `build.rs` (`include!`), which generates the C entry
//! programs and the cookie dispatch of `cw_entry` (`cuda_probes.gen.h`). Adding a CUDA function is
//! one row here (and, when it is a new kind of call, its op code in `model/src/codes.rs`).
//!
//! Argument expressions are C over the entry registers `P1`..`P6` and stack slots `S(n)` (x86-64
//! SysV: the n-th argument passed on the stack; see `ebpf/cuda_common.bpf.h`). `out` is the user
//! address of an out-parameter (a returned pointer or handle) read at return into `arg2`.

use causeway_model::codes::{op, OpCode};

/// The library a probe attaches to. It also picks the in-flight slot of the call: a runtime call
/// and the driver call it makes run nested on one thread, and an NCCL call makes both inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeLib {
    Runtime,
    Driver,
    Nccl,
    /// libcupti: only the calls that take, start or stop the activity records (who holds the
    /// device timeline: `gpu_timeline::coexist`).
    Cupti,
}

/// The argument layouts of kernel launches; each is a C helper in `ebpf/cuda_common.bpf.h` that
/// fills the launch configuration (grid, block, dynamic shared memory, cluster) and the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchAbi {
    /// `cudaLaunchKernel(func, dim3 grid, dim3 block, args, size_t shmem, stream)`: dim3 travels in
    /// two registers each, shmem and stream on the stack.
    RuntimeClassic,
    /// `cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)`.
    DriverClassic,
    /// `cudaLaunchKernelExC(const cudaLaunchConfig_t *, func, args)` and `cuLaunchKernelEx(const
    /// CUlaunchConfig *, f, params, extra)`: the same offsets (grid at 0, block at 12, shared memory
    /// at 24, stream at 32, attributes at 40, their count at 48); the cluster dimension comes from
    /// the attribute list.
    Ex,
}

/// Calls that tell what a kernel handle is called; they record a name fact, not a call event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameAbi {
    /// `__cudaRegisterFunction(fatbin, hostFun, deviceFun, deviceName, ...)`: host stub -> name,
    /// read at entry (every nvcc-built module registers its kernels at load time).
    RegisterFunction,
    /// `__cudaGetKernel(cudaKernel_t *out, const void *hostFun)` (CUDA 13): handle -> host stub.
    GetKernel,
    /// `cuModuleGetFunction(CUfunction *out, CUmodule, const char *name)`: function -> name.
    ModuleGetFunction,
    /// `cuLibraryGetKernel(CUkernel *out, CUlibrary, const char *name)`: kernel -> name.
    LibraryGetKernel,
    /// `cuKernelGetFunction(CUfunction *out, CUkernel)`: function -> kernel.
    KernelGetFunction,
}

/// What the entry program reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// A call event: three arguments and an out-parameter, as C expressions ("0": none).
    Call { op: OpCode, arg0: &'static str, arg1: &'static str, arg2: &'static str, out: &'static str },
    /// A kernel launch event with its configuration.
    Launch { op: OpCode, abi: LaunchAbi },
    /// A name fact (no event).
    Name(NameAbi),
    /// An NCCL call event (`ebpf/cuda_common.bpf.h` `CW_NCCL`): C expressions for the element count,
    /// the communicator, the stream, the out-parameter (the communicator an init returns), the
    /// datatype, the reduction, the peer (root, color), the ranks and the rank (key); `hash_id`
    /// when the call takes an `ncclUniqueId` by value (on the stack, above the return address).
    Nccl { op: OpCode, args: NcclArgs },
}

/// The arguments of an NCCL call, as C expressions ("0" / "-1" where the call has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclArgs {
    pub count: &'static str,
    pub comm: &'static str,
    pub stream: &'static str,
    pub out: &'static str,
    pub datatype: &'static str,
    pub redop: &'static str,
    pub peer: &'static str,
    pub nranks: &'static str,
    pub rank: &'static str,
    pub hash_id: bool,
}

/// No NCCL argument: what each row's [`NcclArgs`] starts from.
const NO_NCCL_ARGS: NcclArgs = NcclArgs {
    count: "0",
    comm: "0",
    stream: "0",
    out: "0",
    datatype: "-1",
    redop: "-1",
    peer: "-1",
    nranks: "-1",
    rank: "-1",
    hash_id: false,
};

/// One probed CUDA function (or family of twins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaProbe {
    /// The BPF entry program (also a standalone uprobe program for the perf-event attach path).
    pub program: &'static str,
    pub lib: ProbeLib,
    pub symbols: &'static [&'static str],
    pub reads: Reads,
    /// Attached on a uprobe_multi link of its own instead of through `cw_entry`'s cookie dispatch:
    /// the launches, which a workload calls most often, skip that helper call and switch.
    pub own_link: bool,
}

impl CudaProbe {
    /// The op code its calls are stored under (None for name facts).
    pub const fn op(&self) -> Option<OpCode> {
        match self.reads {
            Reads::Call { op, .. } | Reads::Launch { op, .. } | Reads::Nccl { op, .. } => Some(op),
            Reads::Name(_) => None,
        }
    }

    /// The uprobe_multi cookie `cw_entry` dispatches on: the row's position, from 1.
    pub fn cookie(&self) -> u64 {
        CUDA_PROBES.iter().position(|p| p.program == self.program).map_or(0, |i| i as u64 + 1)
    }

    /// The return program paired with this entry (see `ebpf/cuda_probes.bpf.c`).
    pub const fn return_program(&self) -> &'static str {
        match (self.reads, self.lib) {
            (Reads::Name(_), _) => "nm_ret",
            (Reads::Launch { .. }, ProbeLib::Runtime) => "rt_launch_ret",
            (Reads::Launch { .. }, ProbeLib::Driver) => "drv_launch_ret",
            (Reads::Call { .. }, ProbeLib::Runtime) => "rt_ret",
            (Reads::Call { .. }, ProbeLib::Driver) => "drv_ret",
            (_, ProbeLib::Cupti) => "cupti_ret",
            (Reads::Nccl { .. }, _) | (_, ProbeLib::Nccl) => "nccl_ret",
        }
    }
}

const fn call(
    program: &'static str,
    lib: ProbeLib,
    op: OpCode,
    symbols: &'static [&'static str],
    args: [&'static str; 4],
) -> CudaProbe {
    CudaProbe {
        program,
        lib,
        symbols,
        reads: Reads::Call { op, arg0: args[0], arg1: args[1], arg2: args[2], out: args[3] },
        own_link: false,
    }
}

const fn launch(
    program: &'static str,
    lib: ProbeLib,
    op: OpCode,
    symbols: &'static [&'static str],
    abi: LaunchAbi,
) -> CudaProbe {
    CudaProbe { program, lib, symbols, reads: Reads::Launch { op, abi }, own_link: true }
}

const fn name(program: &'static str, lib: ProbeLib, symbols: &'static [&'static str], abi: NameAbi) -> CudaProbe {
    CudaProbe { program, lib, symbols, reads: Reads::Name(abi), own_link: false }
}

const fn nccl(program: &'static str, op: OpCode, symbols: &'static [&'static str], args: NcclArgs) -> CudaProbe {
    CudaProbe { program, lib: ProbeLib::Nccl, symbols, reads: Reads::Nccl { op, args }, own_link: false }
}

use ProbeLib::{Cupti as C, Driver as D, Runtime as R};

/// Every probed CUDA function. Op codes are never renumbered (`codes.rs`); rows may be reordered
/// (cookies are positions, assigned at build time on both sides).
pub const CUDA_PROBES: &[CudaProbe] = &[
    // ---- runtime (libcudart) ----
    launch(
        "rt_launch",
        R,
        op::CUDA_LAUNCH_KERNEL,
        &["cudaLaunchKernel", "cudaLaunchKernel_ptsz"],
        LaunchAbi::RuntimeClassic,
    ),
    launch(
        "rt_launch_ex",
        R,
        op::CUDA_LAUNCH_KERNEL_EX,
        &["cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"],
        LaunchAbi::Ex,
    ),
    // cudaMemcpy(dst, src, bytes, kind) / cudaMemcpyAsync(..., stream)
    call("rt_memcpy", R, op::CUDA_MEMCPY, &["cudaMemcpy", "cudaMemcpy_ptds"], ["P3", "P4", "0", "0"]),
    call(
        "rt_memcpy_async",
        R,
        op::CUDA_MEMCPY_ASYNC,
        &["cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"],
        ["P3", "P4", "P5", "0"],
    ),
    // cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind [sp+8]) / Async(..., stream [sp+16])
    call("rt_memcpy2d", R, op::CUDA_MEMCPY_2D, &["cudaMemcpy2D", "cudaMemcpy2D_ptds"], ["P5 * P6", "S(1)", "0", "0"]),
    call(
        "rt_memcpy2d_as",
        R,
        op::CUDA_MEMCPY_2D_ASYNC,
        &["cudaMemcpy2DAsync", "cudaMemcpy2DAsync_ptsz"],
        ["P5 * P6", "S(1)", "S(2)", "0"],
    ),
    // cudaMemcpyPeer(dst, dstDev, src, srcDev, bytes) / Async(..., stream); arg1 = DeviceToDevice
    call("rt_peer", R, op::CUDA_MEMCPY_PEER, &["cudaMemcpyPeer"], ["P5", "3", "0", "0"]),
    call("rt_peer_async", R, op::CUDA_MEMCPY_PEER_ASYNC, &["cudaMemcpyPeerAsync"], ["P5", "3", "P6", "0"]),
    // cudaMalloc(void **ptr, bytes): arg2 = the returned device pointer
    call("rt_malloc", R, op::CUDA_MALLOC, &["cudaMalloc"], ["P2", "0", "0", "P1"]),
    call("rt_malloc_mgd", R, op::CUDA_MALLOC_MANAGED, &["cudaMallocManaged"], ["P2", "P3", "0", "P1"]),
    call("rt_free", R, op::CUDA_FREE, &["cudaFree"], ["0", "0", "P1", "0"]),
    // cudaMallocAsync(void **ptr, bytes, stream) / cudaFreeAsync(ptr, stream)
    call(
        "rt_malloc_async",
        R,
        op::CUDA_MALLOC_ASYNC,
        &["cudaMallocAsync", "cudaMallocAsync_ptsz"],
        ["P2", "P3", "0", "P1"],
    ),
    call("rt_free_async", R, op::CUDA_FREE_ASYNC, &["cudaFreeAsync", "cudaFreeAsync_ptsz"], ["0", "P2", "P1", "0"]),
    // cudaHostAlloc(void **host, bytes, flags)
    call("rt_host_alloc", R, op::CUDA_HOST_ALLOC, &["cudaHostAlloc"], ["P2", "P3", "0", "P1"]),
    // cudaMemsetAsync(ptr, value, bytes, stream)
    call(
        "rt_memset_async",
        R,
        op::CUDA_MEMSET_ASYNC,
        &["cudaMemsetAsync", "cudaMemsetAsync_ptsz"],
        ["P3", "P2", "P4", "0"],
    ),
    call(
        "rt_stream_sync",
        R,
        op::CUDA_STREAM_SYNC,
        &["cudaStreamSynchronize", "cudaStreamSynchronize_ptsz"],
        ["0", "0", "P1", "0"],
    ),
    call("rt_device_sync", R, op::CUDA_DEVICE_SYNC, &["cudaDeviceSynchronize"], ["0", "0", "0", "0"]),
    call("rt_event_sync", R, op::CUDA_EVENT_SYNC, &["cudaEventSynchronize"], ["0", "0", "P1", "0"]),
    call("rt_event_query", R, op::CUDA_EVENT_QUERY, &["cudaEventQuery"], ["0", "0", "P1", "0"]),
    // cudaStreamWaitEvent(stream, event, flags)
    call(
        "rt_stream_wait_event",
        R,
        op::CUDA_STREAM_WAIT_EVENT,
        &["cudaStreamWaitEvent", "cudaStreamWaitEvent_ptsz"],
        ["P2", "P3", "P1", "0"],
    ),
    call("rt_set_device", R, op::CUDA_SET_DEVICE, &["cudaSetDevice"], ["P1", "0", "0", "0"]),
    call("rt_set_device_flags", R, op::CUDA_SET_DEVICE_FLAGS, &["cudaSetDeviceFlags"], ["P1", "0", "0", "0"]),
    // graphs: cudaStreamBeginCapture(stream, mode), cudaStreamEndCapture(stream, cudaGraph_t *out),
    // cudaGraphInstantiate(cudaGraphExec_t *out, graph, flags), cudaGraphLaunch(exec, stream)
    call(
        "rt_begin_capture",
        R,
        op::GRAPH_BEGIN_CAPTURE,
        &["cudaStreamBeginCapture", "cudaStreamBeginCapture_ptsz"],
        ["0", "P2", "P1", "0"],
    ),
    call(
        "rt_end_capture",
        R,
        op::GRAPH_END_CAPTURE,
        &["cudaStreamEndCapture", "cudaStreamEndCapture_ptsz"],
        ["0", "P1", "0", "P2"],
    ),
    call("rt_graph_instantiate", R, op::GRAPH_INSTANTIATE, &["cudaGraphInstantiate"], ["P2", "P3", "0", "P1"]),
    call("rt_graph_launch", R, op::GRAPH_LAUNCH, &["cudaGraphLaunch", "cudaGraphLaunch_ptsz"], ["P1", "0", "P2", "0"]),
    name("nm_register", R, &["__cudaRegisterFunction"], NameAbi::RegisterFunction),
    name("nm_get_kernel", R, &["__cudaGetKernel"], NameAbi::GetKernel),
    // ---- driver (libcuda) ----
    launch("drv_launch", D, op::CU_LAUNCH_KERNEL, &["cuLaunchKernel", "cuLaunchKernel_ptsz"], LaunchAbi::DriverClassic),
    launch("drv_launch_ex", D, op::CU_LAUNCH_KERNEL_EX, &["cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"], LaunchAbi::Ex),
    // cuMemcpy(dst, src, bytes) and cuMemcpy{HtoD,DtoH,DtoD}_v2(dst, src, bytes): arg1 = direction
    call("drv_memcpy", D, op::CU_MEMCPY, &["cuMemcpy", "cuMemcpy_ptds"], ["P3", "4", "0", "0"]),
    call("drv_htod", D, op::CU_MEMCPY, &["cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"], ["P3", "1", "0", "0"]),
    call("drv_dtoh", D, op::CU_MEMCPY, &["cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"], ["P3", "2", "0", "0"]),
    call("drv_dtod", D, op::CU_MEMCPY, &["cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"], ["P3", "3", "0", "0"]),
    // async: (dst, src, bytes, stream)
    call("drv_memcpy_as", D, op::CU_MEMCPY_ASYNC, &["cuMemcpyAsync", "cuMemcpyAsync_ptsz"], ["P3", "4", "P4", "0"]),
    call(
        "drv_htod_as",
        D,
        op::CU_MEMCPY_ASYNC,
        &["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"],
        ["P3", "1", "P4", "0"],
    ),
    call(
        "drv_dtoh_as",
        D,
        op::CU_MEMCPY_ASYNC,
        &["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"],
        ["P3", "2", "P4", "0"],
    ),
    call(
        "drv_dtod_as",
        D,
        op::CU_MEMCPY_ASYNC,
        &["cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz"],
        ["P3", "3", "P4", "0"],
    ),
    // cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) / Async(p, stream): bytes = WidthInBytes * Height
    call(
        "drv_memcpy2d",
        D,
        op::CU_MEMCPY,
        &["cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds"],
        ["cw_2d_bytes(P1)", "4", "0", "0"],
    ),
    call(
        "drv_memcpy2d_as",
        D,
        op::CU_MEMCPY_ASYNC,
        &["cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz"],
        ["cw_2d_bytes(P1)", "4", "P2", "0"],
    ),
    // cuMemcpyPeer(dst, dctx, src, sctx, bytes) / Async(..., stream)
    call("drv_peer", D, op::CU_MEMCPY, &["cuMemcpyPeer", "cuMemcpyPeer_ptds"], ["P5", "3", "0", "0"]),
    call(
        "drv_peer_as",
        D,
        op::CU_MEMCPY_ASYNC,
        &["cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz"],
        ["P5", "3", "P6", "0"],
    ),
    // cuMemsetD{8,16,32}Async(ptr, value, count of elements, stream): arg0 = bytes
    call(
        "drv_memset8_as",
        D,
        op::CU_MEMSET_ASYNC,
        &["cuMemsetD8Async", "cuMemsetD8Async_ptsz"],
        ["P3", "P2 & 0xff", "P4", "0"],
    ),
    call(
        "drv_memset16_as",
        D,
        op::CU_MEMSET_ASYNC,
        &["cuMemsetD16Async", "cuMemsetD16Async_ptsz"],
        ["P3 * 2", "P2 & 0xffff", "P4", "0"],
    ),
    call(
        "drv_memset32_as",
        D,
        op::CU_MEMSET_ASYNC,
        &["cuMemsetD32Async", "cuMemsetD32Async_ptsz"],
        ["P3 * 4", "P2 & 0xffffffff", "P4", "0"],
    ),
    // cuMemAlloc_v2(CUdeviceptr *out, bytes)
    call("drv_alloc", D, op::CU_MEM_ALLOC, &["cuMemAlloc_v2"], ["P2", "0", "0", "P1"]),
    call("drv_alloc_mgd", D, op::CU_MEM_ALLOC_MANAGED, &["cuMemAllocManaged"], ["P2", "P3", "0", "P1"]),
    call("drv_free", D, op::CU_MEM_FREE, &["cuMemFree_v2"], ["0", "0", "P1", "0"]),
    // cuMemAllocAsync(CUdeviceptr *out, bytes, stream) / cuMemFreeAsync(ptr, stream)
    call(
        "drv_alloc_async",
        D,
        op::CU_MEM_ALLOC_ASYNC,
        &["cuMemAllocAsync", "cuMemAllocAsync_ptsz"],
        ["P2", "P3", "0", "P1"],
    ),
    call(
        "drv_free_async",
        D,
        op::CU_MEM_FREE_ASYNC,
        &["cuMemFreeAsync", "cuMemFreeAsync_ptsz"],
        ["0", "P2", "P1", "0"],
    ),
    // virtual memory (PyTorch expandable segments): cuMemCreate(handle *out, bytes, prop, flags),
    // cuMemMap(ptr, bytes, offset, handle, flags), cuMemUnmap(ptr, bytes), cuMemRelease(handle)
    call("drv_mem_create", D, op::CU_MEM_CREATE, &["cuMemCreate"], ["P2", "0", "0", "P1"]),
    call("drv_mem_map", D, op::CU_MEM_MAP, &["cuMemMap"], ["P2", "P4", "P1", "0"]),
    call("drv_mem_unmap", D, op::CU_MEM_UNMAP, &["cuMemUnmap"], ["P2", "0", "P1", "0"]),
    call("drv_mem_release", D, op::CU_MEM_RELEASE, &["cuMemRelease"], ["0", "0", "P1", "0"]),
    call("drv_ctx_sync", D, op::CU_CTX_SYNCHRONIZE, &["cuCtxSynchronize", "cuCtxSynchronize_v2"], ["0", "0", "0", "0"]),
    call(
        "drv_stream_sync",
        D,
        op::CU_STREAM_SYNCHRONIZE,
        &["cuStreamSynchronize", "cuStreamSynchronize_ptsz"],
        ["0", "0", "P1", "0"],
    ),
    // context scheduling flags (spin / yield / blocking sync): cuCtxCreate_v2(ctx *out, flags, dev),
    // _v3(ctx *out, affinity params, n, flags, dev), _v4(ctx *out, params, flags, dev)
    call("drv_ctx_create", D, op::CU_CTX_CREATE, &["cuCtxCreate_v2"], ["P2", "P3", "0", "P1"]),
    call("drv_ctx_create_v3", D, op::CU_CTX_CREATE, &["cuCtxCreate_v3"], ["P4", "P5", "0", "P1"]),
    call("drv_ctx_create_v4", D, op::CU_CTX_CREATE, &["cuCtxCreate_v4"], ["P3", "P4", "0", "P1"]),
    // cuDevicePrimaryCtxSetFlags(dev, flags), cuCtxSetFlags(flags)
    call(
        "drv_primary_flags",
        D,
        op::CU_PRIMARY_CTX_SET_FLAGS,
        &["cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxSetFlags"],
        ["P2", "P1", "0", "0"],
    ),
    call("drv_ctx_set_flags", D, op::CU_CTX_SET_FLAGS, &["cuCtxSetFlags"], ["P1", "0", "0", "0"]),
    call("drv_graph_launch", D, op::CU_GRAPH_LAUNCH, &["cuGraphLaunch", "cuGraphLaunch_ptsz"], ["P1", "0", "P2", "0"]),
    name("nm_module_fn", D, &["cuModuleGetFunction"], NameAbi::ModuleGetFunction),
    name("nm_library_kernel", D, &["cuLibraryGetKernel"], NameAbi::LibraryGetKernel),
    name("nm_kernel_fn", D, &["cuKernelGetFunction"], NameAbi::KernelGetFunction),
    // ---- NCCL (libnccl.so.2) ----
    // ncclAllReduce(send, recv, count, datatype, op, comm, stream [sp+8])
    nccl(
        "nccl_all_reduce",
        op::NCCL_ALL_REDUCE,
        &["ncclAllReduce"],
        NcclArgs { count: "P3", datatype: "P4", redop: "P5", comm: "P6", stream: "S(1)", ..NO_NCCL_ARGS },
    ),
    // ncclAllGather(send, recv, sendcount, datatype, comm, stream)
    nccl(
        "nccl_all_gather",
        op::NCCL_ALL_GATHER,
        &["ncclAllGather"],
        NcclArgs { count: "P3", datatype: "P4", comm: "P5", stream: "P6", ..NO_NCCL_ARGS },
    ),
    // ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream [sp+8])
    nccl(
        "nccl_reduce_scatter",
        op::NCCL_REDUCE_SCATTER,
        &["ncclReduceScatter"],
        NcclArgs { count: "P3", datatype: "P4", redop: "P5", comm: "P6", stream: "S(1)", ..NO_NCCL_ARGS },
    ),
    // ncclBroadcast(send, recv, count, datatype, root, comm, stream [sp+8])
    nccl(
        "nccl_broadcast",
        op::NCCL_BROADCAST,
        &["ncclBroadcast"],
        NcclArgs { count: "P3", datatype: "P4", peer: "P5", comm: "P6", stream: "S(1)", ..NO_NCCL_ARGS },
    ),
    // ncclReduce(send, recv, count, datatype, op, root, comm [sp+8], stream [sp+16])
    nccl(
        "nccl_reduce",
        op::NCCL_REDUCE,
        &["ncclReduce"],
        NcclArgs { count: "P3", datatype: "P4", redop: "P5", peer: "P6", comm: "S(1)", stream: "S(2)", ..NO_NCCL_ARGS },
    ),
    // ncclSend(send, count, datatype, peer, comm, stream) / ncclRecv(recv, count, datatype, peer, comm, stream)
    nccl(
        "nccl_send",
        op::NCCL_SEND,
        &["ncclSend"],
        NcclArgs { count: "P2", datatype: "P3", peer: "P4", comm: "P5", stream: "P6", ..NO_NCCL_ARGS },
    ),
    nccl(
        "nccl_recv",
        op::NCCL_RECV,
        &["ncclRecv"],
        NcclArgs { count: "P2", datatype: "P3", peer: "P4", comm: "P5", stream: "P6", ..NO_NCCL_ARGS },
    ),
    nccl("nccl_group_start", op::NCCL_GROUP_START, &["ncclGroupStart"], NO_NCCL_ARGS),
    nccl("nccl_group_end", op::NCCL_GROUP_END, &["ncclGroupEnd"], NO_NCCL_ARGS),
    // ncclCommInitRank(comm *out, nranks, ncclUniqueId id [by value, on the stack], rank) and
    // ncclCommInitRankConfig(..., rank, config): the same registers
    nccl(
        "nccl_init_rank",
        op::NCCL_COMM_INIT_RANK,
        &["ncclCommInitRank", "ncclCommInitRankConfig"],
        NcclArgs { out: "P1", nranks: "P2", rank: "P3", hash_id: true, ..NO_NCCL_ARGS },
    ),
    // ncclCommInitAll(comm *comms, ndev, const int *devlist): arg2 = the array (read in user space)
    nccl(
        "nccl_init_all",
        op::NCCL_COMM_INIT_ALL,
        &["ncclCommInitAll"],
        NcclArgs { stream: "P1", nranks: "P2", count: "P3", ..NO_NCCL_ARGS },
    ),
    // ncclCommSplit(comm, color, key, comm *newcomm, config)
    nccl(
        "nccl_comm_split",
        op::NCCL_COMM_SPLIT,
        &["ncclCommSplit"],
        NcclArgs { comm: "P1", peer: "P2", rank: "P3", out: "P4", ..NO_NCCL_ARGS },
    ),
    nccl("nccl_comm_destroy", op::NCCL_COMM_DESTROY, &["ncclCommDestroy"], NcclArgs { comm: "P1", ..NO_NCCL_ARGS }),
    nccl("nccl_comm_abort", op::NCCL_COMM_ABORT, &["ncclCommAbort"], NcclArgs { comm: "P1", ..NO_NCCL_ARGS }),
    nccl("nccl_comm_finalize", op::NCCL_COMM_FINALIZE, &["ncclCommFinalize"], NcclArgs { comm: "P1", ..NO_NCCL_ARGS }),
    // ---- CUPTI (libcupti): who takes, starts and stops the activity records. arg0 is the caller's
    // return address ([sp] at entry): the library that called, told apart from the injection
    // library's own calls by the process's maps.
    // cuptiActivityRegisterCallbacks(request, complete)
    call(
        "cupti_register",
        C,
        op::CUPTI_REGISTER_CALLBACKS,
        &["cuptiActivityRegisterCallbacks"],
        ["S(0)", "P2", "0", "0"],
    ),
    // cuptiActivityEnable(kind) / cuptiActivityDisable(kind)
    call("cupti_enable", C, op::CUPTI_ACTIVITY_ENABLE, &["cuptiActivityEnable"], ["S(0)", "P1", "0", "0"]),
    call("cupti_disable", C, op::CUPTI_ACTIVITY_DISABLE, &["cuptiActivityDisable"], ["S(0)", "P1", "0", "0"]),
    // cuptiFinalize(void)
    call("cupti_finalize", C, op::CUPTI_FINALIZE, &["cuptiFinalize"], ["S(0)", "0", "0", "0"]),
];
