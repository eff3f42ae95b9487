/* The uprobe/uretprobe pair shared by the CUDA runtime and driver families. The entry program
 * stashes the arguments that matter and the entry time in the thread's task storage (one slot for
 * the runtime, one for the driver: their calls nest on one thread); the return program emits one
 * cw_call with the duration and the return code. Entry filters on the traced-process bitmap, so the
 * hot path for other processes is one array access.
 *
 * Every helper call costs ten ns or more on hosts with return-thunk mitigations, and these two programs
 * run on every CUDA call: pid and tid are read from the task (already needed for task storage)
 * rather than with bpf_get_current_pid_tgid, the comm goes out once per thread, and only one submit
 * in 256 per thread asks the ring its fill level (see cw_submit). Measured here (bpf_stats): the
 * two bpf_ktime_get_ns calls cost ~45 ns each and the stack read of cudaLaunchKernel's stream ~85 ns;
 * task storage and ring reserve/submit are cheaper than the alternatives tried (an array slot per
 * tid, bpf_ringbuf_output of a stack record). */
#ifndef CAUSEWAY_CUDA_COMMON_BPF_H
#define CAUSEWAY_CUDA_COMMON_BPF_H
#include "common.bpf.h"

/* the n-th stack-passed argument (n >= 1) at function entry: [sp] is the return address */
static __always_inline __u64 cw_stack_arg(struct pt_regs *ctx, int n) {
    __u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * n));
    return v;
}

static __always_inline int cw_enter(__u8 source, __u16 op, __u64 a0, __u64 a1, __u64 a2, __u64 outptr) {
    struct task_struct *task = bpf_get_current_task_btf();
    if (!cw_is_traced(task->tgid)) return 0;
    struct cw_slots *slots = bpf_task_storage_get(&cw_inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!slots) {
        cw_count(CW_CNT_STASH_FAIL_BASE + source, 1);
        return 0;
    }
    struct cw_stash *slot = &slots->s[source == CW_SRC_DRIVER];
    slot->arg0 = a0;
    slot->arg1 = a1;
    slot->arg2 = a2;
    slot->outptr = outptr;
    slot->op = op;
    slot->ts = bpf_ktime_get_ns();
    return 0;
}

static __always_inline int cw_leave(struct pt_regs *ctx, __u8 source, void *ring) {
    struct task_struct *task = bpf_get_current_task_btf();
    struct cw_slots *slots = bpf_task_storage_get(&cw_inflight, task, 0, 0);
    if (!slots) return 0;
    struct cw_stash *s = &slots->s[source == CW_SRC_DRIVER];
    if (s->ts == 0) return 0; /* no entry seen (attached mid-call) */
    __u64 now = bpf_ktime_get_ns();
    struct cw_call *r = bpf_ringbuf_reserve(ring, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + source, 1);
        s->ts = 0;
        return 0;
    }
    r->kind = CW_REC_CALL;
    r->source = source;
    r->op = s->op;
    r->cpu = bpf_get_smp_processor_id();
    r->pid = task->tgid;
    r->tid = task->pid;
    r->ts = s->ts;
    r->dur = now - s->ts;
    r->arg0 = s->arg0;
    r->arg1 = s->arg1;
    r->arg2 = s->arg2;
    r->ret = (__s32)PT_REGS_RC(ctx);
    r->pad = 0;
    /* comm once per thread (user space caches it by tid; sched records refresh it): saves a
     * helper call on every later return */
    if (!slots->s[0].comm_sent) {
        bpf_get_current_comm(r->comm, sizeof(r->comm));
        slots->s[0].comm_sent = 1;
    } else {
        *(__u64 *)&r->comm[0] = 0;
        *(__u64 *)&r->comm[8] = 0;
    }
    if (s->outptr) {
        __u64 v = 0;
        bpf_probe_read_user(&v, sizeof(v), (void *)s->outptr);
        r->arg2 = v;
    }
    r->stack_id = cfg_stacks ? bpf_get_stackid(ctx, &cw_stacks, BPF_F_USER_STACK) : -1;
    /* the fill level is asked on every 256th record of a thread (one helper call fewer on the
     * others); the reader's 10 ms poll timeout bounds the latency in between */
    if (++slots->s[0].submits == 0)
        cw_submit(r, ring, cfg_wake_cuda);
    else
        bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
    s->ts = 0;
    return 0;
}

#define P1 PT_REGS_PARM1(ctx)
#define P2 PT_REGS_PARM2(ctx)
#define P3 PT_REGS_PARM3(ctx)
#define P4 PT_REGS_PARM4(ctx)
#define P5 PT_REGS_PARM5(ctx)
#define P6 ((__u64)ctx->r9) /* PT_REGS_PARM6 is missing from older libbpf headers */
#define S(n) cw_stack_arg(ctx, n)

/* One entry point per API function: NAME##_do extracts its arguments; NAME is a standalone uprobe
 * program (every symbol on the perf-event fallback attach path; only the launches on the
 * uprobe_multi path), and cw_entry (cuda_multi.bpf.c) dispatches to NAME##_do by the uprobe_multi
 * cookie. See probes/src/loader.rs for the symbol tables. */
#define CW_ENTRY(name, source, op, a0, a1, a2, outptr) \
    static __always_inline int name##_do(struct pt_regs *ctx) { return cw_enter(source, op, a0, a1, a2, outptr); } \
    SEC("uprobe") int name(struct pt_regs *ctx) { return name##_do(ctx); }
#endif
