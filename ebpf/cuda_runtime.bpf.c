/* CUDA runtime (libcudart) uprobes: the arguments that matter per call, op codes as
 * causeway_model::codes (source 1; cudaGraphLaunch is source 8). Signatures: x86-64 SysV; dim3 is
 * 12 bytes and travels in two registers, so cudaLaunchKernel's sharedMem and stream are on the stack. */
#include "cuda_common.bpf.h"

/* cudaLaunchKernel(func, grid{rsi,rdx}, block{rcx,r8}, args r9, shmem [sp+8], stream [sp+16]);
 * arg1 = grid.x * grid.y * grid.z (blocks) */
CW_ENTRY(rt_launch, CW_SRC_CUDA, 3, P1, (P2 & 0xffffffff) * (P2 >> 32) * (P3 & 0xffffffff), S(2), 0)
/* cudaMemcpy(dst, src, bytes, kind) / cudaMemcpyAsync(..., stream) */
CW_ENTRY(rt_memcpy, CW_SRC_CUDA, 4, P3, P4, 0, 0)
CW_ENTRY(rt_memcpy_async, CW_SRC_CUDA, 7, P3, P4, P5, 0)
/* cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind [sp+8]) / Async(..., stream [sp+16]) */
CW_ENTRY(rt_memcpy2d, CW_SRC_CUDA, 9, P5 * P6, S(1), 0, 0)
CW_ENTRY(rt_memcpy2d_as, CW_SRC_CUDA, 10, P5 * P6, S(1), S(2), 0)
/* cudaMemcpyPeer(dst, dstDev, src, srcDev, bytes) / Async(..., stream); arg1 = DeviceToDevice */
CW_ENTRY(rt_peer, CW_SRC_CUDA, 11, P5, 3, 0, 0)
CW_ENTRY(rt_peer_async, CW_SRC_CUDA, 12, P5, 3, P6, 0)
/* cudaMalloc(void **ptr, bytes): arg2 = the returned device pointer, read at return */
CW_ENTRY(rt_malloc, CW_SRC_CUDA, 1, P2, 0, 0, P1)
CW_ENTRY(rt_malloc_mgd, CW_SRC_CUDA, 8, P2, P3, 0, P1)
CW_ENTRY(rt_free, CW_SRC_CUDA, 2, 0, 0, P1, 0)
CW_ENTRY(rt_stream_sync, CW_SRC_CUDA, 5, 0, 0, P1, 0)
CW_ENTRY(rt_device_sync, CW_SRC_CUDA, 6, 0, 0, 0, 0)
CW_ENTRY(rt_event_sync, CW_SRC_CUDA, 13, 0, 0, P1, 0)
/* cudaGraphLaunch(exec, stream): source 8 shares the runtime's in-flight slot (it never nests in
 * another runtime call) */
CW_ENTRY(rt_graph_launch, CW_SRC_CUDA, 0x8004, P1, 0, P2, 0)

SEC("uretprobe") int rt_ret(struct pt_regs *ctx) { return cw_leave(ctx, CW_SRC_CUDA, &cw_rb_cuda); }
