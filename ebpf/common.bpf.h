/* Maps and helpers shared by every probe family. The families are compiled as one object
 * (causeway.bpf.c includes them) so that they share the traced-process map, the rings and the
 * counters. vmlinux.h is generated at build time from the running kernel's BTF (CO-RE). */
#ifndef CAUSEWAY_COMMON_BPF_H
#define CAUSEWAY_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "causeway.h"

/* set by the loader before load */
const volatile __u32 cfg_stacks = 0; /* record a user stack id with every call */
/* `trace --all`: a process that calls into a probed CUDA library is traced from that call on (its
 * threads' scheduling too), and the loader hook reports every process's dlopens, traced or not. */
const volatile __u32 cfg_adopt_callers = 0;
/* bytes waiting in each ring above which a submit wakes the reader: a quarter of the ring */
const volatile __u64 cfg_wake_cuda = 4 << 20;
const volatile __u64 cfg_wake_sched = 2 << 20;
const volatile __u64 cfg_wake_host = 512 << 10;

/* tgids being traced, as a bitmap (bit tgid of word tgid/64; covers PID_MAX_LIMIT = 4M): the hot
 * path's filter is one inlined array access instead of a hash lookup. cw_traced (below) holds the
 * same set as a hash, for user space to list. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u64);
} cw_traced_bits SEC(".maps");

/* tgids being traced: filled by user space, extended by fork following */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __u8);
} cw_traced SEC(".maps");

/* One ring per family group; sizes are set by the loader. */
struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 << 20);
} cw_rb_cuda SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 8 << 20);
} cw_rb_sched SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 2 << 20);
} cw_rb_host SEC(".maps");

/* loss counters and in-kernel aggregates, CW_CNT_* */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, CW_CNT_N);
    __type(key, __u32);
    __type(value, __u64);
} cw_counters SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_STACK_TRACE);
    __uint(max_entries, 16384);
    __uint(key_size, sizeof(__u32));
    __uint(value_size, 127 * sizeof(__u64));
} cw_stacks SEC(".maps");

/* a CUDA call in flight on one thread; ts == 0: slot idle */
struct cw_stash {
    __u64 ts;
    __u64 arg0;
    __u64 arg1;
    __u64 arg2;
    __u64 outptr; /* user address of an out-parameter (device pointer) read at return */
    __u16 op;
    __u8 source;
    __u8 comm_sent; /* [0] only: the thread's comm went out with an earlier record */
    __u8 submits;   /* [0] only: records this thread sent, modulo 256 (the ring's fill level is asked at 0) */
    __u8 pad[3];
    union {
        struct cw_launch_cfg cfg;  /* launches */
        struct cw_nccl_args nccl;  /* NCCL calls */
    };
};

/* read from user space at the end of a trace (probes/src/in_flight.rs keeps these offsets) */
_Static_assert(sizeof(struct cw_stash) == 88, "cw_stash: 88 bytes");
_Static_assert(__builtin_offsetof(struct cw_stash, op) == 40, "cw_stash.op at 40");

#define CW_SLOT_RUNTIME 0
#define CW_SLOT_DRIVER 1
#define CW_SLOT_NAME 2
#define CW_SLOT_NCCL 3
#define CW_SLOT_CUPTI 4

/* per-thread slots for the calls in flight: runtime, driver, a name-giving call, an NCCL call (an
 * NCCL call makes runtime and driver calls inside it) and a CUPTI call (a profiler may make one from
 * a callback inside any CUDA call) */
struct cw_slots {
    struct cw_stash s[5];
    __u64 py_tstate; /* the thread's CPython thread state, when found once (python.bpf.h) */
};
_Static_assert(sizeof(struct cw_slots) == 448, "cw_slots: 5 stashes and the thread state");

struct {
    __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct cw_slots);
} cw_inflight SEC(".maps");

/* A task as a map remembers it for a record written later in another context: who queued a block
 * request (issued from a kworker), who last used a socket (retransmitted from a timer). */
struct cw_task_ref {
    __u32 pid;
    __u32 tid;
    char comm[16];
};

static __always_inline void cw_task_ref_current(struct cw_task_ref *r) {
    __u64 id = bpf_get_current_pid_tgid();
    r->pid = id >> 32;
    r->tid = (__u32)id;
    bpf_get_current_comm(r->comm, sizeof(r->comm));
}

static __always_inline void cw_count(__u32 idx, __u64 n) {
    __u64 *v = bpf_map_lookup_elem(&cw_counters, &idx);
    if (v) *v += n; /* per-CPU: no atomics needed */
}

static __always_inline int cw_is_traced(__u32 tgid) {
    __u32 idx = tgid >> 6;
    __u64 *w = bpf_map_lookup_elem(&cw_traced_bits, &idx);
    return tgid != 0 && w && (*w >> (tgid & 63)) & 1;
}

static __always_inline void cw_set_traced(__u32 tgid, int on) {
    __u32 idx = tgid >> 6;
    __u64 *w = bpf_map_lookup_elem(&cw_traced_bits, &idx);
    if (!w) return;
    if (on) __sync_fetch_and_or(w, 1ull << (tgid & 63));
    else __sync_fetch_and_and(w, ~(1ull << (tgid & 63)));
}

/* With cfg_adopt_callers: trace `tgid` from now on (it called into a probed CUDA library). The hash
 * is filled first (user space lists it); a full hash adopts nothing, and the process is only
 * found by user space's rescan, which counts what it cannot follow. */
static __always_inline int cw_adopt(__u32 tgid) {
    if (!cfg_adopt_callers || tgid == 0) return 0;
    __u8 one = 1;
    if (bpf_map_update_elem(&cw_traced, &tgid, &one, BPF_ANY)) return 0;
    cw_set_traced(tgid, 1);
    return 1;
}

static __always_inline __u8 cw_prev_state(bool preempt, unsigned int state) {
    if (preempt || state == 0) return 0; /* TASK_RUNNING: preempted while runnable */
    if (state & 0x1) return 1;           /* TASK_INTERRUPTIBLE */
    if (state & 0x2) return 2;           /* TASK_UNINTERRUPTIBLE (incl. TASK_IDLE, TASK_KILLABLE) */
    return 3;
}

/* Submit without waking the reader unless the ring is a quarter full (`wake_at`, one of the cfg_wake_*
 * thresholds, so the ring's size need not be asked for): the reader polls on a short timer, so
 * traced threads are not preempted by a reader woken for every record (on a small host that
 * feedback loop multiplies the scheduler events and slows the target). */
static __always_inline void cw_submit(void *rec, void *ring, __u64 wake_at) {
    bpf_ringbuf_submit(rec, bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) > wake_at ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#endif
