/* The CUDA probes: the entry programs and cw_entry's cookie dispatch are generated from the one
 * probe table (probes/src/cuda_table.rs, by probes/build.rs, into cuda_probes.gen.h); the return
 * programs are here, one per record kind and slot, so none asks for a cookie:
 *   rt_ret / drv_ret               calls of the runtime / driver      -> cw_call
 *   rt_launch_ret / drv_launch_ret launches of the runtime / driver   -> cw_launch
 *   nm_ret                         calls that name kernels            -> cw_name
 *   nccl_ret                       NCCL calls                         -> cw_nccl
 *   cupti_ret                      CUPTI's activity controls          -> cw_call
 * On the uprobe_multi path (kernel >= 6.6) a library gets a few links: cw_entry for most symbols,
 * one link per own-link program (the launches: no cookie to ask, no dispatch) and one per return
 * program; a few links instead of one perf event per symbol make detaching fast. */
#include "cuda_common.bpf.h"
#include "cuda_probes.gen.h"

SEC("uretprobe") int rt_ret(struct pt_regs *ctx) { return cw_leave(ctx, CW_SLOT_RUNTIME); }
SEC("uretprobe") int drv_ret(struct pt_regs *ctx) { return cw_leave(ctx, CW_SLOT_DRIVER); }
SEC("uretprobe") int rt_launch_ret(struct pt_regs *ctx) { return cw_leave_launch(ctx, CW_SLOT_RUNTIME); }
SEC("uretprobe") int drv_launch_ret(struct pt_regs *ctx) { return cw_leave_launch(ctx, CW_SLOT_DRIVER); }
SEC("uretprobe") int nm_ret(struct pt_regs *ctx) { return cw_leave_name(ctx); }
SEC("uretprobe") int nccl_ret(struct pt_regs *ctx) { return cw_leave_nccl(ctx); }
SEC("uretprobe") int cupti_ret(struct pt_regs *ctx) { return cw_leave(ctx, CW_SLOT_CUPTI); }
