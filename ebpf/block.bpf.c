/* Block I/O: every read, write and discard request is remembered by request pointer at issue (the
 * issuing pid and comm, since completion runs in irq context) and emitted at completion with its
 * latency, whoever issued it: naming the process that saturated the device during a traced thread's
 * I/O wait needs the other processes' requests too, and block request rates are orders of magnitude
 * below scheduler rates (overload still shows as counted ring-buffer losses). Flushes and other
 * request kinds are only counted.
 *
 * The issuing process is the one that submitted the I/O: block_bio_queue runs in its context when
 * a bio enters the block layer (remembered for each 1 MiB chunk of the sectors it covers, since the
 * block layer splits large bios into requests that start mid-bio), block_rq_insert when a request
 * is queued (remembered by request). A request is often dispatched later from a kblockd worker
 * (kworker/N:xH), whose context block_rq_issue would otherwise report. */
#include "common.bpf.h"

struct cw_blk_start {
    __u64 ts;
    __u64 sector;
    __u32 pid;
    __u32 tid;
    __u32 bytes;
    __u32 dev;
    __u8 op;
    char comm[16];
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u64);
    __type(value, struct cw_blk_start);
} cw_blk SEC(".maps");

/* Who queued a request, until it is issued. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u64);
    __type(value, struct cw_task_ref);
} cw_blk_owner SEC(".maps");

/* Who submitted the bio covering a 1 MiB chunk of sectors (sector >> 11), until a request starting
 * in that chunk is issued. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, __u64);
    __type(value, struct cw_task_ref);
} cw_bio_owner SEC(".maps");

SEC("tp_btf/block_bio_queue")
int BPF_PROG(cw_bio_queue, struct bio *bio) {
    struct cw_task_ref o = {};
    cw_task_ref_current(&o);
    __u64 first = BPF_CORE_READ(bio, bi_iter.bi_sector);
    __u32 size = BPF_CORE_READ(bio, bi_iter.bi_size);
    __u64 last = (first + (size ? (size - 1) / 512 : 0)) >> 11;
    __u64 key = first >> 11;
    for (int i = 0; i < 64 && key <= last; i++, key++) bpf_map_update_elem(&cw_bio_owner, &key, &o, BPF_ANY);
    return 0;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(cw_block_insert, struct request *rq) {
    struct cw_task_ref o = {};
    cw_task_ref_current(&o);
    __u64 key = (__u64)rq;
    bpf_map_update_elem(&cw_blk_owner, &key, &o, BPF_ANY);
    return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(cw_block_issue, struct request *rq) {
    __u64 id = bpf_get_current_pid_tgid();
    __u64 rq_key = (__u64)rq;
    struct cw_task_ref *owner = bpf_map_lookup_elem(&cw_blk_owner, &rq_key);
    __u64 sector_key = BPF_CORE_READ(rq, __sector) >> 11;
    if (!owner) owner = bpf_map_lookup_elem(&cw_bio_owner, &sector_key);
    __u32 bytes = BPF_CORE_READ(rq, __data_len);
    __u32 op = BPF_CORE_READ(rq, cmd_flags) & 0xff; /* REQ_OP_MASK: 0 read, 1 write, 3 discard */
    if (op != 0 && op != 1 && op != 3) { /* flushes etc.: counted only */
        if (owner) bpf_map_delete_elem(&cw_blk_owner, &rq_key);
        cw_count(CW_CNT_BLOCK_OTHER, 1);
        cw_count(CW_CNT_BLOCK_OTHER_BYTES, bytes);
        return 0;
    }
    struct cw_blk_start s = {};
    s.ts = bpf_ktime_get_ns();
    s.sector = BPF_CORE_READ(rq, __sector);
    s.pid = id >> 32;
    s.tid = (__u32)id;
    s.bytes = bytes;
    if (owner) {
        s.pid = owner->pid;
        s.tid = owner->tid;
        __builtin_memcpy(s.comm, owner->comm, sizeof(s.comm));
        bpf_map_delete_elem(&cw_blk_owner, &rq_key);
    } else {
        bpf_get_current_comm(s.comm, sizeof(s.comm));
    }
    struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
    if (disk) s.dev = ((__u32)BPF_CORE_READ(disk, major) << 20) | (__u32)BPF_CORE_READ(disk, first_minor);
    s.op = op == 0 ? 1 : op == 1 ? 2 : 3;
    __u64 key = (__u64)rq;
    bpf_map_update_elem(&cw_blk, &key, &s, BPF_ANY);
    return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(cw_block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes) {
    __u64 key = (__u64)rq;
    struct cw_blk_start *s = bpf_map_lookup_elem(&cw_blk, &key);
    if (!s) return 0;
    struct cw_block *r = bpf_ringbuf_reserve(&cw_rb_host, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + CW_SRC_IO, 1);
        bpf_map_delete_elem(&cw_blk, &key);
        return 0;
    }
    r->kind = CW_REC_BLOCK;
    r->op = s->op;
    r->pad = 0;
    r->cpu = bpf_get_smp_processor_id();
    r->pid = s->pid;
    r->tid = s->tid;
    r->ts = s->ts;
    r->dur = bpf_ktime_get_ns() - s->ts;
    r->sector = s->sector;
    r->bytes = s->bytes;
    r->dev = s->dev;
    __builtin_memcpy(r->comm, s->comm, sizeof(r->comm));
    cw_submit(r, &cw_rb_host, cfg_wake_host);
    bpf_map_delete_elem(&cw_blk, &key);
    return 0;
}
