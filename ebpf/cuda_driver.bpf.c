/* CUDA driver (libcuda) uprobes, op codes as causeway_model::codes source 4. cuMemcpy covers the
 * synchronous copies (arg1 = direction as cudaMemcpyKind), cuMemcpyAsync the asynchronous ones. */
#include "cuda_common.bpf.h"

/* cuLaunchKernel(f, gx, gy, gz, bx, by, bz [sp+8], shmem [sp+16], stream [sp+24], params, extra) */
CW_ENTRY(drv_launch, CW_SRC_DRIVER, 1, P1, P2 * P3 * P4, S(3), 0)
/* cuMemcpy(dst, src, bytes) and cuMemcpy{HtoD,DtoH,DtoD}_v2(dst, src, bytes) */
CW_ENTRY(drv_memcpy, CW_SRC_DRIVER, 2, P3, 4, 0, 0)
CW_ENTRY(drv_htod, CW_SRC_DRIVER, 2, P3, 1, 0, 0)
CW_ENTRY(drv_dtoh, CW_SRC_DRIVER, 2, P3, 2, 0, 0)
CW_ENTRY(drv_dtod, CW_SRC_DRIVER, 2, P3, 3, 0, 0)
/* async: (dst, src, bytes, stream) */
CW_ENTRY(drv_memcpy_as, CW_SRC_DRIVER, 3, P3, 4, P4, 0)
CW_ENTRY(drv_htod_as, CW_SRC_DRIVER, 3, P3, 1, P4, 0)
CW_ENTRY(drv_dtoh_as, CW_SRC_DRIVER, 3, P3, 2, P4, 0)

/* cuMemcpy2D_v2(const CUDA_MEMCPY2D *p): bytes = WidthInBytes (offset 112) * Height (120) */
static __always_inline __u64 cw_2d_bytes(__u64 p) {
    __u64 wh[2] = {0, 0};
    bpf_probe_read_user(wh, sizeof(wh), (void *)(p + 112));
    return wh[0] * wh[1];
}
CW_ENTRY(drv_memcpy2d, CW_SRC_DRIVER, 2, cw_2d_bytes(P1), 4, 0, 0)
CW_ENTRY(drv_memcpy2d_as, CW_SRC_DRIVER, 3, cw_2d_bytes(P1), 4, P2, 0)
/* cuMemcpyPeer(dst, dctx, src, sctx, bytes) / Async(..., stream) */
CW_ENTRY(drv_peer, CW_SRC_DRIVER, 2, P5, 3, 0, 0)
CW_ENTRY(drv_peer_as, CW_SRC_DRIVER, 3, P5, 3, P6, 0)
/* cuMemAlloc_v2(CUdeviceptr *out, bytes): arg2 = returned pointer */
CW_ENTRY(drv_alloc, CW_SRC_DRIVER, 5, P2, 0, 0, P1)
CW_ENTRY(drv_alloc_mgd, CW_SRC_DRIVER, 6, P2, P3, 0, P1)
CW_ENTRY(drv_free, CW_SRC_DRIVER, 7, 0, 0, P1, 0)
CW_ENTRY(drv_ctx_sync, CW_SRC_DRIVER, 4, 0, 0, 0, 0)
CW_ENTRY(drv_stream_sync, CW_SRC_DRIVER, 8, 0, 0, P1, 0)

SEC("uretprobe") int drv_ret(struct pt_regs *ctx) { return cw_leave(ctx, CW_SRC_DRIVER, &cw_rb_cuda); }
