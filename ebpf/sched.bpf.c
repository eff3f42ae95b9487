/* Scheduler and process lifecycle (tp_btf: no tracefs needed). For every off-CPU interval of a
 * traced thread: switch-out time, why it left (prev_state), the task that took the CPU, the CPU,
 * and, for a sleep, when it was woken and by whom; emitted at switch-in. Switches and wake-ups of
 * other tasks are only counted. Fork following: children of traced processes become traced.
 *
 * The waker is taken at `sched_waking`, which runs in the context that issues the wake-up, never at
 * `sched_wakeup`: when the kernel queues a wake-up to the wakee's CPU (TTWU_QUEUE: that CPU is idle,
 * or the two CPUs share no cache, as across the sockets of a GPU server), `sched_wakeup` runs there
 * in interrupt context, where the current task is the idle task or an unrelated process. A wake-up
 * issued from an interrupt (a timer expiring, an I/O completion, a softirq) has no waking task
 * either: the interrupted task did not wake anyone, so the waker is left unknown (0), and the
 * interrupt depth of each CPU is followed for that (cw_irq_depth). The wake time stays the one of
 * `sched_wakeup`, when the thread was put back on a run queue.
 *
 * "The task that took the CPU" of a preempted interval is the task that held that CPU the longest
 * single stretch while the traced thread waited runnable, not merely the first one to run: a
 * freshly woken thread often runs for microseconds before a CPU hog takes the rest of the wait. Each
 * CPU remembers when its current task started and which preempted traced thread waits on it. */
#include "common.bpf.h"
#include "footprint.bpf.h"

struct cw_offcpu {
    __u64 ts_out;
    __u64 wake_ts;
    __u32 next_pid;
    __u32 next_tid;
    __u32 waker_pid;
    __u32 waker_tid;
    __u32 cpu;
    __u8 state;
    char next_comm[16];
    __u64 best_ns; /* longest stretch another task held `cpu` while this thread waited runnable */
};
/* read from user space at the end of a trace (probes/src/in_flight.rs keeps these offsets) */
_Static_assert(sizeof(struct cw_offcpu) == 64, "cw_offcpu: 64 bytes");
_Static_assert(__builtin_offsetof(struct cw_offcpu, next_comm) == 37, "cw_offcpu.next_comm at 37");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, struct cw_offcpu);
} cw_offcpu SEC(".maps");

/* Per CPU: when its current task got the CPU, and the preempted traced thread waiting for it. */
struct cw_cpu_run {
    __u64 since;
    __u32 waiter_tid;
    __u32 pad;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct cw_cpu_run);
} cw_cpu_run SEC(".maps");

/* Per CPU: how many interrupt contexts (hard IRQ handlers, softirqs, hrtimer callbacks) are open
 * on it. Reset at every context switch, which never happens inside one, so a handler that was
 * entered before tracing began (its exit seen, not its entry) cannot leave it wrong for long. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} cw_irq_depth SEC(".maps");

/* `prev` held this CPU from run->since to now: if a preempted traced thread waits here and this is
 * the longest stretch so far, `prev` is the one that took its CPU. */
static __always_inline void cw_account_runner(struct cw_cpu_run *run, struct task_struct *prev, __u32 prev_tid,
                                              __u64 now) {
    if (run->waiter_tid == 0 || run->waiter_tid == prev_tid) return;
    __u32 w = run->waiter_tid;
    struct cw_offcpu *o = bpf_map_lookup_elem(&cw_offcpu, &w);
    if (!o || o->state != 0) {
        run->waiter_tid = 0;
        return;
    }
    __u64 start = run->since > o->ts_out ? run->since : o->ts_out;
    __u64 ran = now > start ? now - start : 0;
    if (ran > o->best_ns) {
        o->best_ns = ran;
        o->next_pid = prev->tgid;
        o->next_tid = prev_tid;
        bpf_probe_read_kernel(o->next_comm, sizeof(o->next_comm), prev->comm);
    }
}

SEC("tp_btf/sched_switch")
int BPF_PROG(cw_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
             unsigned int prev_state) {
    __u64 now = bpf_ktime_get_ns();
    __u32 prev_tid = prev->pid, next_tid = next->pid;
    __u32 zero = 0;
    __u32 *irq_depth = bpf_map_lookup_elem(&cw_irq_depth, &zero);
    if (irq_depth) *irq_depth = 0; /* a context switch is never inside an interrupt */
    struct cw_cpu_run *run = bpf_map_lookup_elem(&cw_cpu_run, &zero);
    __u64 ran_ns = 0; /* how long `prev` held this CPU (0 for the first switch seen here) */
    if (run) {
        cw_account_runner(run, prev, prev_tid, now);
        if (run->since && now > run->since) ran_ns = now - run->since;
        run->since = now;
    }
    if (prev_tid != 0 && cw_is_traced(prev->tgid)) {
        cw_fp_on_cpu(prev->tgid, ran_ns); /* trace --footprint only */
        struct cw_offcpu o = {};
        o.ts_out = now;
        o.next_pid = next->tgid;
        o.next_tid = next_tid;
        o.cpu = bpf_get_smp_processor_id();
        o.state = cw_prev_state(preempt, prev_state);
        bpf_probe_read_kernel(o.next_comm, sizeof(o.next_comm), next->comm);
        bpf_map_update_elem(&cw_offcpu, &prev_tid, &o, BPF_ANY);
        if (run && o.state == 0) run->waiter_tid = prev_tid;
    } else {
        cw_count(CW_CNT_SWITCH_OTHER, 1);
        if (prev_tid != 0) cw_count(CW_CNT_SWITCH_OTHER_NS, ran_ns);
    }
    if (next_tid == 0 || !cw_is_traced(next->tgid)) return 0;
    if (run && run->waiter_tid == next_tid) run->waiter_tid = 0;
    struct cw_offcpu *o = bpf_map_lookup_elem(&cw_offcpu, &next_tid);
    if (!o) return 0; /* went off-CPU before tracing started */
    struct cw_switch *r = bpf_ringbuf_reserve(&cw_rb_sched, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + CW_SRC_HOST, 1);
        bpf_map_delete_elem(&cw_offcpu, &next_tid);
        return 0;
    }
    r->kind = CW_REC_SWITCH;
    r->prev_state = o->state;
    r->pad = 0;
    r->cpu = o->cpu;
    r->pid = next->tgid;
    r->tid = next_tid;
    r->ts_out = o->ts_out;
    r->ts_in = now;
    r->wake_ts = o->wake_ts;
    r->next_pid = o->next_pid;
    r->next_tid = o->next_tid;
    r->waker_pid = o->waker_pid;
    r->waker_tid = o->waker_tid;
    bpf_probe_read_kernel(r->comm, sizeof(r->comm), next->comm);
    __builtin_memcpy(r->next_comm, o->next_comm, sizeof(r->next_comm));
    cw_submit(r, &cw_rb_sched, cfg_wake_sched);
    bpf_map_delete_elem(&cw_offcpu, &next_tid);
    return 0;
}

static __always_inline void cw_irq_step(int up) {
    __u32 zero = 0;
    __u32 *d = bpf_map_lookup_elem(&cw_irq_depth, &zero);
    if (!d) return;
    if (up)
        *d += 1;
    else if (*d > 0)
        *d -= 1;
}

static __always_inline int cw_in_interrupt(void) {
    __u32 zero = 0;
    __u32 *d = bpf_map_lookup_elem(&cw_irq_depth, &zero);
    return d && *d > 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(cw_irq_enter) { cw_irq_step(1); return 0; }
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(cw_irq_exit) { cw_irq_step(0); return 0; }
SEC("tp_btf/softirq_entry")
int BPF_PROG(cw_softirq_enter) { cw_irq_step(1); return 0; }
SEC("tp_btf/softirq_exit")
int BPF_PROG(cw_softirq_exit) { cw_irq_step(0); return 0; }
SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(cw_hrtimer_enter) { cw_irq_step(1); return 0; }
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(cw_hrtimer_exit) { cw_irq_step(0); return 0; }

/* Who issued the pending wake-up of a traced thread, from `sched_waking` to its `sched_wakeup`
 * (pid and tid 0: an interrupt, or the idle task, woke it). */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct cw_task_ref);
} cw_waking SEC(".maps");

SEC("tp_btf/sched_waking")
int BPF_PROG(cw_sched_waking, struct task_struct *p) {
    if (!cw_is_traced(p->tgid)) return 0;
    __u32 tid = p->pid;
    struct cw_task_ref w = {};
    if ((__u32)bpf_get_current_pid_tgid() != 0 && !cw_in_interrupt())
        cw_task_ref_current(&w);
    else
        __builtin_memcpy(w.comm, "[interrupt]", 12);
    bpf_map_update_elem(&cw_waking, &tid, &w, BPF_ANY);
    return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(cw_sched_wakeup, struct task_struct *p) {
    __u32 tgid = p->tgid, tid = p->pid;
    if (!cw_is_traced(tgid)) {
        cw_count(CW_CNT_WAKEUP_OTHER, 1);
        return 0;
    }
    __u64 now = bpf_ktime_get_ns();
    struct cw_task_ref waker = {};
    struct cw_task_ref *w = bpf_map_lookup_elem(&cw_waking, &tid);
    if (w) {
        waker = *w;
        bpf_map_delete_elem(&cw_waking, &tid);
    }
    struct cw_offcpu *o = bpf_map_lookup_elem(&cw_offcpu, &tid);
    if (o && o->wake_ts == 0) {
        o->wake_ts = now;
        o->waker_pid = waker.pid;
        o->waker_tid = waker.tid;
    }
    struct cw_wakeup *r = bpf_ringbuf_reserve(&cw_rb_sched, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + CW_SRC_HOST, 1);
        return 0;
    }
    r->kind = CW_REC_WAKEUP;
    r->pad[0] = r->pad[1] = r->pad[2] = 0;
    r->cpu = p->wake_cpu;
    r->pid = waker.pid;
    r->tid = waker.tid;
    r->ts = now;
    r->wakee_pid = tgid;
    r->wakee_tid = tid;
    __builtin_memcpy(r->comm, waker.comm, sizeof(r->comm));
    cw_submit(r, &cw_rb_sched, cfg_wake_sched);
    return 0;
}

static __always_inline void cw_emit_proc(__u8 what, struct task_struct *t, __u32 child_pid, __u32 child_tid,
                                         __s32 code) {
    struct cw_proc *r = bpf_ringbuf_reserve(&cw_rb_host, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + CW_SRC_HOST, 1);
        return;
    }
    r->kind = CW_REC_PROC;
    r->what = what;
    r->pad = 0;
    r->pad2 = 0;
    r->cpu = bpf_get_smp_processor_id();
    r->pid = t->tgid;
    r->tid = t->pid;
    r->ts = bpf_ktime_get_ns();
    r->child_pid = child_pid;
    r->child_tid = child_tid;
    r->exit_code = code;
    bpf_probe_read_kernel(r->comm, sizeof(r->comm), t->comm);
    cw_submit(r, &cw_rb_host, cfg_wake_host);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(cw_proc_fork, struct task_struct *parent, struct task_struct *child) {
    __u32 ptgid = parent->tgid, ctgid = child->tgid;
    if (!cw_is_traced(ptgid)) return 0;
    if (ctgid != ptgid) {
        __u8 one = 1;
        bpf_map_update_elem(&cw_traced, &ctgid, &one, BPF_ANY);
        cw_set_traced(ctgid, 1);
    }
    cw_emit_proc(CW_PROC_FORK, parent, ctgid, child->pid, 0);
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(cw_proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) {
    if (!cw_is_traced(p->tgid)) return 0;
    cw_emit_proc(CW_PROC_EXEC, p, 0, 0, 0);
    return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(cw_proc_exit, struct task_struct *p, bool group_dead) {
    __u32 tgid = p->tgid, tid = p->pid;
    if (!cw_is_traced(tgid)) return 0;
    bpf_map_delete_elem(&cw_offcpu, &tid);
    cw_emit_proc(CW_PROC_EXIT, p, 0, 0, p->exit_code);
    if (group_dead) {
        bpf_map_delete_elem(&cw_traced, &tgid);
        cw_set_traced(tgid, 0);
    }
    return 0;
}

/* OOM kills are rare and always recorded, traced or not */
SEC("tp_btf/mark_victim")
int BPF_PROG(cw_oom_victim, struct task_struct *task, uid_t uid) {
    cw_emit_proc(CW_PROC_OOM, task, 0, 0, 0);
    return 0;
}
