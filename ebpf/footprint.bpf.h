/* What a traced process touched (`trace --footprint`): the maps shared with the scheduler's
 * program (which adds each traced thread's stretch on the CPU) and the request each process is
 * serving. The programs are in footprint.bpf.c. */
#ifndef CAUSEWAY_FOOTPRINT_BPF_H
#define CAUSEWAY_FOOTPRINT_BPF_H

#include "common.bpf.h"

/* set by the loader: the footprint programs are attached (sched_switch adds the CPU time) */
const volatile __u32 cfg_footprint = 0;

/* the pseudo syscall number under which a process's time on the CPU is kept in cw_fp_sys
 * (calls = switches out, ns = time on the CPU) */
#define CW_FP_NR_CPU 0xffff

struct cw_fp_key {
    __u32 pid;
    __u32 request;
    __u32 nr;
    __u32 pad;
};

struct cw_fp_val {
    __u64 calls;
    __u64 errors;
    __u64 ns;
    __u64 max_ns;
    __u64 bytes;
};

/* per (pid, request, syscall): read by user space at each look and at the end; per CPU, so the
 * hot path takes no lock (user space sums the CPUs, and takes the largest max) */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
    __uint(max_entries, 32768);
    __type(key, struct cw_fp_key);
    __type(value, struct cw_fp_val);
} cw_fp_sys SEC(".maps");

/* The request a process is serving: `open` while its own read began one and no answer was written
 * yet (`fd`: where it came); `inherited`: a child started during its parent's request counts its
 * work under it. */
struct cw_fp_state {
    __u32 request;
    __s32 fd;
    __u8 open;
    __u8 inherited;
    __u8 pad[6];
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct cw_fp_state);
} cw_fp_state SEC(".maps");

/* the request `tgid`'s work counts under (0: none) */
static __always_inline __u32 cw_fp_request_of(__u32 tgid) {
    struct cw_fp_state *st = bpf_map_lookup_elem(&cw_fp_state, &tgid);
    return st && (st->open || st->inherited) ? st->request : 0;
}

/* add `v` to (tgid, request, nr) */
static __always_inline void cw_fp_add(__u32 tgid, __u32 request, __u32 nr, __u64 calls, __u64 errors, __u64 ns,
                                      __u64 bytes) {
    struct cw_fp_key k = {.pid = tgid, .request = request, .nr = nr};
    struct cw_fp_val *v = bpf_map_lookup_elem(&cw_fp_sys, &k);
    if (!v) {
        struct cw_fp_val z = {};
        if (bpf_map_update_elem(&cw_fp_sys, &k, &z, BPF_NOEXIST) && bpf_map_lookup_elem(&cw_fp_sys, &k) == NULL) {
            cw_count(CW_CNT_FP_SYS_FULL, 1);
            return;
        }
        v = bpf_map_lookup_elem(&cw_fp_sys, &k);
        if (!v) {
            cw_count(CW_CNT_FP_SYS_FULL, 1);
            return;
        }
    }
    v->calls += calls;
    v->errors += errors;
    v->ns += ns;
    v->bytes += bytes;
    if (ns > v->max_ns) v->max_ns = ns;
}

/* sched_switch: a traced thread of `tgid` leaves the CPU after `ran_ns` on it */
static __always_inline void cw_fp_on_cpu(__u32 tgid, __u64 ran_ns) {
    if (!cfg_footprint) return;
    cw_fp_add(tgid, cw_fp_request_of(tgid), CW_FP_NR_CPU, 1, 0, ran_ns, 0);
}

#endif
