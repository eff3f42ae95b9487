/* The uprobe_multi attach path (kernel >= 6.6): one entry program for the CUDA symbols of a library,
 * attached with a single BPF link, picks the argument layout by the attach cookie (ids below,
 * mirrored by the tables in probes/src/loader.rs). The launches, the calls a workload makes most
 * often, are attached to their own programs (rt_launch, drv_launch) on a second link, and the
 * returns to rt_ret or drv_ret: neither asks for the cookie (a helper call) nor dispatches. A few
 * links per library instead of one perf event per symbol make detaching fast (each perf-event
 * uprobe waits for its own RCU grace period). */
#include "cuda_common.bpf.h"

SEC("uprobe")
int cw_entry(struct pt_regs *ctx) {
    switch (bpf_get_attach_cookie(ctx)) {
    case 1: return rt_launch_do(ctx);
    case 2: return rt_memcpy_do(ctx);
    case 3: return rt_memcpy_async_do(ctx);
    case 4: return rt_memcpy2d_do(ctx);
    case 5: return rt_memcpy2d_as_do(ctx);
    case 6: return rt_peer_do(ctx);
    case 7: return rt_peer_async_do(ctx);
    case 8: return rt_malloc_do(ctx);
    case 9: return rt_malloc_mgd_do(ctx);
    case 10: return rt_free_do(ctx);
    case 11: return rt_stream_sync_do(ctx);
    case 12: return rt_device_sync_do(ctx);
    case 13: return rt_event_sync_do(ctx);
    case 14: return rt_graph_launch_do(ctx);
    case 101: return drv_launch_do(ctx);
    case 102: return drv_memcpy_do(ctx);
    case 103: return drv_htod_do(ctx);
    case 104: return drv_dtoh_do(ctx);
    case 105: return drv_dtod_do(ctx);
    case 106: return drv_memcpy_as_do(ctx);
    case 107: return drv_htod_as_do(ctx);
    case 108: return drv_dtoh_as_do(ctx);
    case 109: return drv_memcpy2d_do(ctx);
    case 110: return drv_memcpy2d_as_do(ctx);
    case 111: return drv_peer_do(ctx);
    case 112: return drv_peer_as_do(ctx);
    case 113: return drv_alloc_do(ctx);
    case 114: return drv_alloc_mgd_do(ctx);
    case 115: return drv_free_do(ctx);
    case 116: return drv_ctx_sync_do(ctx);
    case 117: return drv_stream_sync_do(ctx);
    }
    return 0;
}
