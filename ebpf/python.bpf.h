/* Python frames: the CPython stack of the thread making a CUDA call, walked at the call's return
 * (the frames are the ones of that call), stored once per distinct stack in cw_py_stacks and named
 * once per code object by a cw_py_code record. User space (probes/src/python) fills cw_py_procs
 * with the layout of each traced Python process, reads the stacks by key, turns instruction offsets
 * into lines with the code object's line table and merges the frames with the native ones.
 *
 * The thread state of the calling thread is found by its pthread_t (the fs base) in the
 * interpreter's thread list, not through the GIL holder: a C call made from Python (ctypes,
 * PyTorch) usually releases the GIL. It is cached in the thread's task storage and checked on use.
 *
 * Nothing here trusts the target: every read may fail (the stack is cut there and counted), every
 * loop is bounded, a code object is checked against PyCode_Type before it is named. */
#ifndef CAUSEWAY_PYTHON_BPF_H
#define CAUSEWAY_PYTHON_BPF_H
#include "common.bpf.h"

#define CW_PY_THREADS 64 /* thread states looked at per interpreter */
#define CW_PY_INTERPS 4  /* interpreters looked at */

_Static_assert(sizeof(struct cw_py_layout) == 72, "cw_py_layout is mirrored in probes/src/python/layout.rs");
_Static_assert(sizeof(struct cw_py_stack) == 1040, "cw_py_stack is mirrored in probes/src/python/mod.rs");
_Static_assert(sizeof(struct cw_py_code) == 4512, "cw_py_code is mirrored in probes/src/wire.rs");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct cw_py_layout);
} cw_py_procs SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct cw_py_stack);
} cw_py_stacks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct cw_py_stack);
} cw_py_scratch SEC(".maps");

/* Frames of 3.11+ live one after the other in the thread's data stack, the caller below its
 * callee: one read from the start of a frame's page to its end holds that frame and the callers
 * below it on the page (a read per frame cost ~140 ns each here; a read that fails, reaching into an
 * unmapped page, costs more: starting at the frame's own page never does). A frame outside the
 * window (a generator's, another page or data stack chunk, every frame of 3.10) moves it there. */
#define CW_PY_FRAME_READ 128 /* bytes of a frame the walk reads, from frame_span */
#define CW_PY_WINDOW_READ (4096 + CW_PY_FRAME_READ) /* the most a window read takes */
#define CW_PY_WINDOW 8192 /* the buffer: a power of two above CW_PY_WINDOW_READ, for the masks */
struct cw_py_window {
    __u64 lo, hi; /* it holds the target's [lo, hi); kept here, not in registers: see the walk */
    __u8 b[CW_PY_WINDOW];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct cw_py_window);
} cw_py_windows SEC(".maps");

struct cw_py_code_key {
    __u32 pid;
    __s32 firstlineno;
    __u64 code;
};

/* code objects already sent, per process; an address reused by another code object with another
 * first line is sent again */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct cw_py_code_key);
    __type(value, __u8);
} cw_py_codes_seen SEC(".maps");

static __always_inline __u64 cw_py_u64(__u64 addr) {
    __u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline __s32 cw_py_s32(__u64 addr) {
    __s32 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

/* The thread state whose pthread_t is `self`, in the first CW_PY_INTERPS interpreters; 0: none. */
static __noinline __u64 cw_py_find_tstate(struct cw_py_layout *l, __u64 self) {
    __u64 interp = cw_py_u64(l->runtime + l->runtime_interps);
    for (int i = 0; i < CW_PY_INTERPS && interp; i++) {
        __u64 ts = cw_py_u64(interp + l->interp_threads);
        for (int j = 0; j < CW_PY_THREADS && ts; j++) {
            if (cw_py_u64(ts + l->tstate_thread_id) == self) return ts;
            ts = cw_py_u64(ts + l->tstate_next);
        }
        interp = cw_py_u64(interp + l->interp_next);
    }
    return 0;
}

/* A str object's characters, raw, into `out` (at most `max` bytes); its kind (1, 2, 4) in `kind`. */
static __always_inline __u16 cw_py_str(struct cw_py_layout *l, __u64 str, char *out, __u32 max, __u8 *kind) {
    *kind = 0;
    if (!str) return 0;
    __u32 state = (__u32)cw_py_s32(str + l->unicode_state);
    __u64 len = cw_py_u64(str + l->unicode_length);
    __u32 k = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || (k != 1 && k != 2 && k != 4)) return 0; /* legacy strings: not in code objects */
    __u64 data = str + (ascii ? l->ascii_data : l->compact_data);
    __u64 n = len * k;
    if (n > max) n = max;
    n &= 0xfff;
    if (n > max) return 0;
    if (bpf_probe_read_user(out, n, (void *)data)) return 0;
    *kind = k;
    return n;
}

/* Send the code object at `code` unless this process sent it already. */
static __noinline void cw_py_send_code(struct cw_py_layout *l, __u32 pid, __u64 code) {
    struct cw_py_code_key k = {.pid = pid, .firstlineno = cw_py_s32(code + l->code_firstlineno), .code = code};
    if (bpf_map_lookup_elem(&cw_py_codes_seen, &k)) return;
    struct cw_py_code *r = bpf_ringbuf_reserve(&cw_rb_cuda, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_PY_CODE_LOST, 1);
        return;
    }
    r->kind = CW_REC_PY_CODE;
    r->pid = pid;
    r->code = code;
    r->firstlineno = k.firstlineno;
    r->not_code = cw_py_u64(code + l->object_type) != l->code_type;
    r->file_len = 0;
    r->name_len = 0;
    r->file_kind = 0;
    r->name_kind = 0;
    r->linetable_len = 0;
    r->linetable_size = 0;
    r->minor = l->minor;
    r->pad = 0;
    if (!r->not_code) {
        r->file_len = cw_py_str(l, cw_py_u64(code + l->code_filename), r->file, CW_PY_FILE_MAX, &r->file_kind);
        r->name_len = cw_py_str(l, cw_py_u64(code + l->code_name), r->name, CW_PY_NAME_MAX, &r->name_kind);
        __u64 table = cw_py_u64(code + l->code_linetable);
        __u64 size = table ? cw_py_u64(table + l->bytes_size) : 0;
        __u64 n = size > CW_PY_LINETABLE_MAX ? CW_PY_LINETABLE_MAX : size;
        n &= 0x1fff;
        if (n <= CW_PY_LINETABLE_MAX && n > 0 && !bpf_probe_read_user(r->linetable, n, (void *)(table + l->bytes_data))) {
            r->linetable_len = n;
            r->linetable_size = size > 0xffffffff ? 0xffffffff : size;
        }
    }
    bpf_ringbuf_submit(r, 0);
    __u8 one = 1;
    bpf_map_update_elem(&cw_py_codes_seen, &k, &one, BPF_ANY);
}

/* A load the compiler may not replace by a value it kept in a register. */
static __always_inline __u64 cw_py_reread(__u64 *p) {
    return *(volatile __u64 *)p;
}

/* Fill the window with the target's bytes from the start of the page of `at` (from `at` itself
 * unless `big`) to `at` + CW_PY_FRAME_READ; -1 when they cannot be read. */
static __always_inline int cw_py_fill(struct cw_py_window *w, __u64 at, int big) {
    __u64 end = at + CW_PY_FRAME_READ;
    __u64 base = big ? at & ~4095ULL : at;
    __u64 n = end - base;
    if (n < CW_PY_FRAME_READ || n > CW_PY_WINDOW_READ) return -1; /* cannot be: for the verifier */
    if (bpf_probe_read_user(w->b, n, (void *)base)) return -1;
    w->lo = base;
    w->hi = end;
    return 0;
}

/* The Python stack of the calling thread, stored in cw_py_stacks: its key, or 0 (not a Python
 * process, no Python frames on this thread, or the stack could not be kept: counted). Call before
 * reserving the call's own record, so that the code records it sends come first in the ring.
 *
 * Slot i holds the i-th frame of the chain, shim frames of the eval loop (3.12+) included (flagged,
 * user space drops them): with no separate count the loop's branches end in states the verifier
 * can merge, where a count of its own made them diverge past its budget. */
static __noinline __u32 cw_py_stack_of(struct task_struct *task, struct cw_slots *slots) {
    __u32 pid = task->tgid;
    struct cw_py_layout *l = bpf_map_lookup_elem(&cw_py_procs, &pid);
    if (!l) return 0;
    __u64 self = BPF_CORE_READ(task, thread.fsbase);
    __u64 ts = slots->py_tstate;
    if (!ts || cw_py_u64(ts + l->tstate_thread_id) != self) {
        ts = cw_py_find_tstate(l, self);
        slots->py_tstate = ts;
        if (!ts) {
            cw_count(CW_CNT_PY_NO_THREAD, 1);
            return 0;
        }
    }
    __u64 frame = cw_py_u64(ts + l->tstate_frame);
    if (frame && l->cframe_frame != CW_PY_NONE) frame = cw_py_u64(frame + l->cframe_frame);
    if (!frame) return 0; /* no Python code running on this thread */
    __u32 zero = 0;
    struct cw_py_stack *st = bpf_map_lookup_elem(&cw_py_scratch, &zero);
    if (!st) return 0;
    struct cw_py_window *w = bpf_map_lookup_elem(&cw_py_windows, &zero);
    if (!w) return 0;
    int big = l->minor >= 11;
    w->lo = w->hi = 0;
    __u64 h = (0xcbf29ce484222325ULL ^ pid) * 0x100000001b3ULL;
    __u16 flags = 0;
    __u32 n = 0;
    for (__u32 i = 0; i < CW_PY_DEPTH; i++) {
        if (!frame) break;
        __u64 at = frame + l->frame_span;
        /* the window's bounds are read back from the map, so that no register carries them from
         * one frame to the next: their values would keep the verifier from merging its states */
        if (at < cw_py_reread(&w->lo) || at + CW_PY_FRAME_READ > cw_py_reread(&w->hi)) {
            if (cw_py_fill(w, at, big)) {
                flags |= CW_PYS_FAULT;
                break;
            }
        }
        __u64 pos = (at - cw_py_reread(&w->lo)) & (CW_PY_WINDOW - 1);
        if (pos > CW_PY_WINDOW_READ - CW_PY_FRAME_READ) break; /* cannot be: [at, at + 128) is in */
        __u64 *buf = (__u64 *)&w->b[pos];
        __u64 code = buf[(l->frame_code >> 3) & 15];
        __u64 instr = buf[(l->frame_instr >> 3) & 15];
        __u8 owner = ((__u8 *)buf)[l->frame_owner & 127];
        __u8 is_entry = ((__u8 *)buf)[l->frame_is_entry & 127];
        __u32 fl = l->every_frame_entry;
        if (l->frame_is_entry != CW_PY_NONE && is_entry) fl |= CW_PYF_ENTRY;
        if (l->frame_owner != CW_PY_NONE && owner == l->owner_cstack) fl |= CW_PYF_SHIM;
        __u32 off = (__u32)instr;
        if (!l->instr_is_index) {
            __u64 first = code + l->code_code;
            off = (__u32)((instr - first) >> 1);
            if (instr < first || instr - first >= (1ULL << 32)) fl |= CW_PYF_NO_INSTR;
        }
        struct cw_py_frame *f = &st->f[i & (CW_PY_DEPTH - 1)];
        f->code = code;
        f->instr = off;
        f->flags = fl;
        h = (h ^ code) * 0x100000001b3ULL;
        h = (h ^ off) * 0x100000001b3ULL;
        n = i + 1;
        frame = buf[(l->frame_previous >> 3) & 15];
    }
    if (frame && !(flags & CW_PYS_FAULT)) flags |= CW_PYS_TRUNCATED;
    if (n == 0 || n > CW_PY_DEPTH) return 0;
    if (flags & CW_PYS_TRUNCATED) cw_count(CW_CNT_PY_TRUNCATED, 1);
    if (flags & CW_PYS_FAULT) cw_count(CW_CNT_PY_FAULT, 1);
    st->hash = h;
    st->pid = pid;
    st->depth = n;
    st->flags = flags;
    __u32 key = (__u32)(h ^ (h >> 32));
    if (!key) key = 1;
    struct cw_py_stack *old = bpf_map_lookup_elem(&cw_py_stacks, &key);
    if (old) {
        if (old->hash == h) return key;
        cw_count(CW_CNT_PY_COLLISION, 1);
        return 0;
    }
    /* a new stack: name its code objects first (their records precede the call's). The depth is
     * read back from the map, not kept: the walk's exits (one per depth) then reach this loop in
     * states the verifier merges, instead of each walking it again. */
    for (__u32 i = 0; i < CW_PY_DEPTH; i++) {
        if (i >= st->depth) break;
        struct cw_py_frame *f = &st->f[i & (CW_PY_DEPTH - 1)];
        if (!(f->flags & CW_PYF_SHIM)) cw_py_send_code(l, pid, f->code);
    }
    long err = bpf_map_update_elem(&cw_py_stacks, &key, st, BPF_NOEXIST);
    if (err && err != -17 /* EEXIST: another CPU stored it first */) {
        cw_count(CW_CNT_PY_TABLE_FULL, 1);
        return 0;
    }
    return key;
}
#endif
