/* Libraries loaded late: a uprobe on the dynamic loader's debugger hook `_dl_debug_state`, which
 * ld.so calls after every change to the list of loaded objects (dlopen, dlclose, program start).
 * The attach cookie is the distance from `_dl_debug_state` to `_r_debug` in that ld.so (computed
 * from its symbols by user space; 0 when unknown), so the program reads `_r_debug.r_state` and acts
 * only when the list is consistent again (RT_CONSISTENT), i.e. once the new library is mapped.
 * It tells user space at once (a forced wake-up) and, when the loader set cfg_stop_on_load (a
 * command Causeway launched), stops the process with SIGSTOP so that user space attaches the new
 * library's probes before the process makes its first call through it, then continues it.
 * Processes in cw_dl_quiet (all their CUDA libraries attached) are only told about; so are
 * untraced processes with cfg_adopt_callers (`trace --all`: the load may be of a CUDA library). */
#include "common.bpf.h"

const volatile __u32 cfg_stop_on_load = 0;

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __u8);
} cw_dl_quiet SEC(".maps");

#define CW_R_STATE_OFFSET 24 /* struct r_debug { int r_version; link_map *r_map; r_brk; r_state; ... } */
#define CW_RT_CONSISTENT 0
#define CW_SIGSTOP 19

SEC("uprobe")
int cw_dl_state(struct pt_regs *ctx) {
    struct task_struct *task = bpf_get_current_task_btf();
    __u32 tgid = task->tgid;
    int traced = cw_is_traced(tgid);
    if (!traced && !cfg_adopt_callers) return 0;
    __s64 delta = (__s64)bpf_get_attach_cookie(ctx);
    if (delta) {
        __s32 state = -1;
        /* a uprobe handler sees the probed address as its instruction pointer */
        bpf_probe_read_user(&state, sizeof(state), (void *)(PT_REGS_IP(ctx) + delta + CW_R_STATE_OFFSET));
        if (state != CW_RT_CONSISTENT) return 0;
    }
    /* only a traced process is ever stopped (`trace --all` hears of the others' loads) */
    int stop = traced && cfg_stop_on_load && !bpf_map_lookup_elem(&cw_dl_quiet, &tgid);
    struct cw_dl *r = bpf_ringbuf_reserve(&cw_rb_host, sizeof(*r), 0);
    if (!r) {
        /* never stop a process user space will not hear about */
        cw_count(CW_CNT_LOST_BASE + CW_SRC_HOST, 1);
        return 0;
    }
    r->kind = CW_REC_DL;
    r->stopped = stop;
    r->pad = 0;
    r->pid = tgid;
    r->tid = task->pid;
    r->pad2 = 0;
    r->ts = bpf_ktime_get_ns();
    /* The stop is made pending before user space can read the notice: this task may be preempted
     * between the two, and a SIGCONT sent for the notice before the SIGSTOP was generated would
     * leave the process stopped for good. A SIGCONT after it continues the process or discards the
     * stop still pending, whichever comes first. */
    if (stop) bpf_send_signal(CW_SIGSTOP);
    bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
    return 0;
}
