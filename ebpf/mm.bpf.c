/* Memory: page allocations aggregated in the kernel, per traced process (per-CPU hash keyed by
 * tgid) and for everything else (counters); user space turns the deltas into one summary event per
 * process per second. OOM kills are in sched.bpf.c (mark_victim). */
#include "common.bpf.h"

struct cw_pages {
    __u64 count;
    __u64 bytes;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct cw_pages);
} cw_pages SEC(".maps");

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(cw_page_alloc, struct page *page, unsigned int order, gfp_t gfp, int migratetype) {
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u64 bytes = 4096ull << order;
    if (!cw_is_traced(tgid)) {
        cw_count(CW_CNT_PAGE_OTHER, 1);
        cw_count(CW_CNT_PAGE_OTHER_BYTES, bytes);
        return 0;
    }
    struct cw_pages *v = bpf_map_lookup_elem(&cw_pages, &tgid);
    if (!v) {
        struct cw_pages z = {};
        bpf_map_update_elem(&cw_pages, &tgid, &z, BPF_NOEXIST);
        v = bpf_map_lookup_elem(&cw_pages, &tgid);
        if (!v) return 0;
    }
    v->count += 1;
    v->bytes += bytes;
    return 0;
}
