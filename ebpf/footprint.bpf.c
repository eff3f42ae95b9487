/* What a traced process touched (`trace --footprint`; attached only then: the raw syscall
 * tracepoints put every syscall of the host on the kernel's slower path, see the uprobe bench's
 * part `footprint`). Every syscall of a traced process is counted in the kernel per (pid, request,
 * syscall number): calls, errors, time from entry to return, the longest, bytes (cw_fp_sys, read
 * by user space at each look and at the end; no ring record per syscall). Per open descriptor the
 * bytes read and written are counted (cw_fp_fds) and sent once, at its close (or read at the end).
 * Ring records (cw_fp) only for what names things: an open and its path, a connect, accept or bind
 * and its address, a dup (the copy keeps its original's flags, user space its name), an exec with
 * its file and arguments, and a request's first and last I/O.
 *
 * `trace --pid`: user space puts what the process holds at the attach in cw_fp_fds (named from
 * /proc; an accepted connection flagged CW_FPF_REQUEST); a call in flight at the attach (a server
 * blocked in accept, or in a read of stdin or of such a connection) is read from its registers at
 * its return and begins what it would have begun, uncounted (its time is unknown).
 *
 * A request: a read that returns bytes from stdin (fd 0) or from an accepted socket, while the
 * process serves none, begins one (a number unique in the trace); the next write that returns
 * bytes to stdout (fd 1) or to that socket answers it. The read that began it counts outside it
 * (a server blocks there between requests), the write that answered it inside. A child forked
 * while its parent serves a request counts its work under it.
 *
 * Syscall numbers are x86_64's (build.rs targets __TARGET_ARCH_x86). */
#include "common.bpf.h"
#include "footprint.bpf.h"

#define CW_PROT_EXEC 4
#define CW_EINPROGRESS 115

/* a syscall in flight on one thread; ts == 0: none */
struct cw_fp_stash {
    __u64 ts;
    __u64 a0; /* di */
    __u64 a1; /* si */
    __u64 a2; /* dx */
    __u64 a4; /* r8 */
    __u32 nr;
    __u32 pad;
};

struct {
    __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct cw_fp_stash);
} cw_fp_inflight SEC(".maps");

struct cw_fp_fdkey {
    __u32 pid;
    __s32 fd;
};

struct cw_fp_fd {
    __u64 opened; /* ktime of its open (0: before the trace, or not seen) */
    __u64 bytes_read;
    __u64 bytes_written;
    __u64 reads;
    __u64 writes;
    __u32 request; /* the request it was opened in */
    __u32 flags;   /* CW_FPF_* */
};

/* per (pid, fd) of a traced process: what went through it since its open */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, 65536);
    __type(key, struct cw_fp_fdkey);
    __type(value, struct cw_fp_fd);
} cw_fp_fds SEC(".maps");

/* the last request number given (index 0) */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} cw_fp_next SEC(".maps");

/* `v` capped at `max` (< CW_FP_TEXT), bounded for the verifier: clang may otherwise pass the
 * unclamped register to a helper's size argument */
static __always_inline __u64 cw_fp_bound(__u64 v, __u64 max) {
    __u64 n = v < max ? v : max;
    asm volatile("%0 &= 255" : "+r"(n));
    return n;
}

/* 1: reads from fd (a0), 2: writes to it, 0: neither */
static __always_inline int cw_fp_io(__u32 nr) {
    switch (nr) {
    case 0:   /* read */
    case 17:  /* pread64 */
    case 19:  /* readv */
    case 45:  /* recvfrom */
    case 47:  /* recvmsg */
    case 295: /* preadv */
    case 327: /* preadv2 */
        return 1;
    case 1:   /* write */
    case 18:  /* pwrite64 */
    case 20:  /* writev */
    case 40:  /* sendfile (out_fd) */
    case 44:  /* sendto */
    case 46:  /* sendmsg */
    case 296: /* pwritev */
    case 328: /* pwritev2 */
        return 2;
    }
    return 0;
}

static __always_inline struct cw_fp *cw_fp_reserve(__u8 what, __u64 id, __u64 now) {
    struct cw_fp *r = bpf_ringbuf_reserve(&cw_rb_host, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_FP_LOST, 1);
        return NULL;
    }
    /* the header and counters only: text and text2 are sent with their lengths */
    __builtin_memset(r, 0, 128);
    r->kind = CW_REC_FP;
    r->what = what;
    r->pid = id >> 32;
    r->tid = (__u32)id;
    r->ts = now;
    bpf_get_current_comm(r->comm, sizeof(r->comm));
    return r;
}

/* the counters of (pid, fd), created empty when absent (NULL: the map is full) */
static __always_inline struct cw_fp_fd *cw_fp_fd_get(struct cw_fp_fdkey *k, __u32 request) {
    struct cw_fp_fd *f = bpf_map_lookup_elem(&cw_fp_fds, k);
    if (f) return f;
    struct cw_fp_fd z = {.request = request};
    bpf_map_update_elem(&cw_fp_fds, k, &z, BPF_NOEXIST);
    f = bpf_map_lookup_elem(&cw_fp_fds, k);
    if (!f) cw_count(CW_CNT_FP_FD_FULL, 1);
    return f;
}

/* the type and inode of the current task's `fd` into `r` (/proc names a pipe or socket by them) */
static __always_inline void cw_fp_file_id(struct cw_fp *r, __s32 fd) {
    struct file *file = cw_fd_file(fd);
    if (!file) return;
    struct inode *ino = BPF_CORE_READ(file, f_inode);
    r->family = BPF_CORE_READ(ino, i_mode) >> 12;
    __u64 n = BPF_CORE_READ(ino, i_ino);
    __builtin_memcpy(r->addr, &n, 8);
}

/* send (pid, fd)'s counters and forget them: it was closed (or is being reused by an open) */
static __always_inline void cw_fp_close(struct cw_fp_fdkey *k, __u64 id, __u64 now, __u64 closed) {
    struct cw_fp_fd *f = bpf_map_lookup_elem(&cw_fp_fds, k);
    if (!f) return;
    struct cw_fp *r = cw_fp_reserve(CW_FP_CLOSE, id, now);
    if (r) {
        r->fd = k->fd;
        r->request = f->request;
        r->flags = f->flags;
        r->opened = f->opened;
        r->bytes_read = f->bytes_read;
        r->bytes_written = f->bytes_written;
        r->reads = f->reads;
        r->writes = f->writes;
        r->ret = closed; /* 1: closed by the process; 0: replaced (closed unseen) */
        if (closed && !f->opened) cw_fp_file_id(r, k->fd); /* still open: named by what it is */
        cw_submit(r, &cw_rb_host, cfg_wake_host);
    }
    bpf_map_delete_elem(&cw_fp_fds, k);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(cw_fp_sys_enter, struct pt_regs *regs, long nr) {
    __u64 id = bpf_get_current_pid_tgid();
    if (!cw_is_traced(id >> 32)) return 0;
    struct cw_fp_stash *s =
        bpf_task_storage_get(&cw_fp_inflight, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!s) {
        cw_count(CW_CNT_FP_SYS_FULL, 1);
        return 0;
    }
    s->nr = (__u32)nr;
    s->a0 = BPF_CORE_READ(regs, di);
    s->a1 = BPF_CORE_READ(regs, si);
    s->a2 = BPF_CORE_READ(regs, dx);
    s->a4 = BPF_CORE_READ(regs, r8);
    s->ts = bpf_ktime_get_ns();
    if (nr == 3) { /* close: send the descriptor's counters while it is still the same file */
        struct cw_fp_fdkey k = {.pid = id >> 32, .fd = (__s32)s->a0};
        cw_fp_close(&k, id, s->ts, 1);
    }
    return 0;
}

/* a read or write of `bytes` on fd `fd` returned: its counters, and the request it begins or answers */
static __always_inline void cw_fp_on_io(__u64 id, int dir, __s32 fd, __s64 bytes, __u64 buf, __u64 now,
                                        struct cw_fp_state *st) {
    __u32 tgid = id >> 32;
    struct cw_fp_fdkey k = {.pid = tgid, .fd = fd};
    struct cw_fp_fd *f = cw_fp_fd_get(&k, st && (st->open || st->inherited) ? st->request : 0);
    __u32 flags = 0;
    if (f) {
        if (dir == 1) {
            __sync_fetch_and_add(&f->bytes_read, bytes);
            __sync_fetch_and_add(&f->reads, 1);
        } else {
            __sync_fetch_and_add(&f->bytes_written, bytes);
            __sync_fetch_and_add(&f->writes, 1);
        }
        flags = f->flags;
    }
    __u8 what = 0;
    if (dir == 1 && (fd == 0 || (flags & CW_FPF_REQUEST)) && !(st && st->open)) {
        what = CW_FP_REQ_BEGIN;
    } else if (dir == 2 && st && st->open && fd == (st->fd == 0 ? 1 : st->fd)) {
        what = CW_FP_REQ_END;
    }
    if (!what) return;
    __u32 request;
    if (what == CW_FP_REQ_BEGIN) {
        __u32 zero = 0;
        __u64 *next = bpf_map_lookup_elem(&cw_fp_next, &zero);
        if (!next) return;
        request = (__u32)__sync_fetch_and_add(next, 1) + 1;
        struct cw_fp_state ns = {.request = request, .fd = fd, .open = 1};
        bpf_map_update_elem(&cw_fp_state, &tgid, &ns, BPF_ANY);
    } else {
        request = st->request;
        st->open = 0;
        st->inherited = 0;
    }
    struct cw_fp *r = cw_fp_reserve(what, id, now);
    if (!r) return;
    r->fd = fd;
    r->request = request;
    r->ret = bytes;
    __u64 n = cw_fp_bound((__u64)bytes, CW_FP_REQ_HEAD);
    /* readv/writev/recvmsg/sendmsg pass no flat buffer: their text stays empty */
    if (buf && n && bpf_probe_read_user(r->text, n, (void *)buf) == 0) r->len = (__u16)n;
    cw_submit(r, &cw_rb_host, cfg_wake_host);
}

/* dup, dup2, dup3 or fcntl(F_DUPFD) made `to` a copy of `from`: `to` keeps `from`'s flags (an
 * accepted socket's requests go on coming on its copy) and user space its name */
static __always_inline void cw_fp_dup(__u64 id, __s32 from, __s32 to, __u64 now, __u32 request) {
    __u32 tgid = id >> 32;
    struct cw_fp_fdkey k = {.pid = tgid, .fd = to};
    cw_fp_close(&k, id, now, 0); /* dup2/dup3 closed what was there */
    struct cw_fp_fdkey fk = {.pid = tgid, .fd = from};
    struct cw_fp_fd *f = bpf_map_lookup_elem(&cw_fp_fds, &fk);
    struct cw_fp_fd z = {.opened = now, .request = request, .flags = f ? f->flags : 0};
    if (bpf_map_update_elem(&cw_fp_fds, &k, &z, BPF_ANY)) cw_count(CW_CNT_FP_FD_FULL, 1);
    struct cw_fp *r = cw_fp_reserve(CW_FP_DUP, id, now);
    if (!r) return;
    r->fd = to;
    r->ret = from;
    r->request = request;
    r->flags = z.flags;
    cw_fp_file_id(r, to);
    cw_submit(r, &cw_rb_host, cfg_wake_host);
}

/* Whether a call whose entry was not seen still matters: one in flight when the probes went in
 * (`trace --pid` on a server blocked in accept, or in a read of stdin or of a connection it
 * accepted before the attach) begins what it would have begun. Its time is unknown, so it is not
 * counted; a new task's first return (from the fork that made it) is not a call of its own. */
static __always_inline int cw_fp_unseen_matters(__u32 tgid, __u32 nr, long ret, __s32 fd) {
    if (nr == 43 || nr == 288) return 1; /* accept, accept4 */
    if (cw_fp_io(nr) != 1 || ret <= 0) return 0;
    /* a read on stdin or an accepted socket the trace knows (an attach names them first) */
    struct cw_fp_fdkey k = {.pid = tgid, .fd = fd};
    struct cw_fp_fd *f = bpf_map_lookup_elem(&cw_fp_fds, &k);
    return f && (fd == 0 || (f->flags & CW_FPF_REQUEST));
}

SEC("tp_btf/sys_exit")
int BPF_PROG(cw_fp_sys_exit, struct pt_regs *regs, long ret) {
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32;
    if (!cw_is_traced(tgid)) return 0;
    struct cw_fp_stash *s = bpf_task_storage_get(&cw_fp_inflight, bpf_get_current_task_btf(), 0, 0);
    __u64 now = bpf_ktime_get_ns();
    struct cw_fp_state *st = bpf_map_lookup_elem(&cw_fp_state, &tgid);
    __u32 request = st && (st->open || st->inherited) ? st->request : 0;
    __u32 nr;
    __u64 a0, a1, a2, a4;
    if (s && s->ts) {
        __u64 dur = now - s->ts;
        s->ts = 0;
        nr = s->nr;
        a0 = s->a0;
        a1 = s->a1;
        a2 = s->a2;
        a4 = s->a4;
        cw_fp_add(tgid, request, nr, 1, ret < 0 && ret > -4096 ? 1 : 0, dur, cw_fp_io(nr) && ret > 0 ? ret : 0);
    } else {
        /* the arguments are still in the registers the call entered with */
        nr = (__u32)BPF_CORE_READ(regs, orig_ax);
        a0 = BPF_CORE_READ(regs, di);
        if (!cw_fp_unseen_matters(tgid, nr, ret, (__s32)a0)) return 0;
        a1 = BPF_CORE_READ(regs, si);
        a2 = BPF_CORE_READ(regs, dx);
        a4 = BPF_CORE_READ(regs, r8);
    }
    int dir = cw_fp_io(nr);
    __s32 fd = (__s32)a0;
    if (ret < 0 && !(nr == 42 && ret == -CW_EINPROGRESS)) return 0;
    if (dir) {
        if (ret > 0) {
            /* a flat buffer: read, write, pread64, pwrite64, recvfrom, sendto */
            __u64 buf = (nr == 0 || nr == 1 || nr == 17 || nr == 18 || nr == 44 || nr == 45) ? a1 : 0;
            cw_fp_on_io(id, dir, fd, ret, buf, now, st);
        }
        return 0;
    }
    switch (nr) {
    case 32:  /* dup */
    case 33:  /* dup2 */
    case 292: /* dup3 */
        if ((__s32)ret != fd) cw_fp_dup(id, fd, (__s32)ret, now, request);
        return 0;
    case 72: /* fcntl: F_DUPFD (0), F_DUPFD_CLOEXEC (1030) */
        if (a1 == 0 || a1 == 1030) cw_fp_dup(id, fd, (__s32)ret, now, request);
        return 0;
    case 2:     /* open */
    case 257:   /* openat */
    case 437: { /* openat2 */
        struct cw_fp_fdkey k = {.pid = tgid, .fd = (__s32)ret};
        cw_fp_close(&k, id, now, 0); /* a descriptor closed unseen (exec, dup2) now reused */
        struct cw_fp_fd z = {.opened = now, .request = request};
        if (bpf_map_update_elem(&cw_fp_fds, &k, &z, BPF_ANY)) cw_count(CW_CNT_FP_FD_FULL, 1);
        struct cw_fp *r = cw_fp_reserve(CW_FP_OPEN, id, now);
        if (!r) return 0;
        r->fd = (__s32)ret;
        r->request = request;
        r->ret = ret;
        r->flags = nr == 2 ? a1 : nr == 257 ? a2 : 0; /* openat2: flags behind a pointer */
        __u64 path = nr == 2 ? a0 : a1;
        long n = bpf_probe_read_user_str(r->text, sizeof(r->text), (void *)path);
        r->len = n > 0 ? (__u16)n : 0;
        cw_submit(r, &cw_rb_host, cfg_wake_host);
        return 0;
    }
    case 42:   /* connect */
    case 49: { /* bind */
        struct cw_fp_fdkey k = {.pid = tgid, .fd = fd};
        struct cw_fp_fd *f = cw_fp_fd_get(&k, request);
        if (f) {
            f->flags |= CW_FPF_SOCKET;
            if (!f->opened) f->opened = now;
        }
        struct cw_fp *r = cw_fp_reserve(nr == 42 ? CW_FP_CONNECT : CW_FP_BIND, id, now);
        if (!r) return 0;
        r->fd = fd;
        r->request = request;
        r->ret = ret;
        __u64 len = cw_fp_bound(a2, CW_FP_HEAD);
        if (len && bpf_probe_read_user(r->text, len, (void *)a1) == 0) r->len = (__u16)len;
        cw_submit(r, &cw_rb_host, cfg_wake_host);
        return 0;
    }
    case 43:    /* accept */
    case 288: { /* accept4 */
        struct cw_fp_fdkey k = {.pid = tgid, .fd = (__s32)ret};
        cw_fp_close(&k, id, now, 0);
        struct cw_fp_fd z = {.opened = now, .request = request, .flags = CW_FPF_SOCKET | CW_FPF_REQUEST};
        if (bpf_map_update_elem(&cw_fp_fds, &k, &z, BPF_ANY)) cw_count(CW_CNT_FP_FD_FULL, 1);
        struct cw_fp *r = cw_fp_reserve(CW_FP_ACCEPT, id, now);
        if (!r) return 0;
        r->fd = (__s32)ret;
        r->request = request;
        r->ret = ret;
        struct socket *sock = cw_fd_socket((int)ret);
        if (sock) {
            struct sock *sk = BPF_CORE_READ(sock, sk);
            r->family = BPF_CORE_READ(sk, __sk_common.skc_family);
            r->port = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
            if (r->family == 2) {
                __u32 a = BPF_CORE_READ(sk, __sk_common.skc_daddr);
                __builtin_memcpy(r->addr, &a, 4);
            } else if (r->family == 10) {
                BPF_CORE_READ_INTO(&r->addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
            }
        }
        cw_submit(r, &cw_rb_host, cfg_wake_host);
        return 0;
    }
    case 9: { /* mmap: a file mapped executable is a library (or the program) */
        __s32 mfd = (__s32)a4;
        if (mfd < 0 || !(a2 & CW_PROT_EXEC)) return 0;
        struct cw_fp_fdkey k = {.pid = tgid, .fd = mfd};
        struct cw_fp_fd *f = cw_fp_fd_get(&k, request);
        if (f) f->flags |= CW_FPF_EXEC;
        return 0;
    }
    }
    return 0;
}

/* A child forked while its parent serves a request counts its work under it. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(cw_fp_fork, struct task_struct *parent, struct task_struct *child) {
    __u32 ptgid = parent->tgid, ctgid = child->tgid;
    if (ptgid == ctgid || !cw_is_traced(ptgid)) return 0;
    __u32 request = cw_fp_request_of(ptgid);
    if (!request) return 0;
    struct cw_fp_state cs = {.request = request, .fd = -1, .inherited = 1};
    bpf_map_update_elem(&cw_fp_state, &ctgid, &cs, BPF_ANY);
    return 0;
}

/* A traced process ran a program: its file and arguments (read from the new image's stack). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(cw_fp_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) {
    __u32 tgid = p->tgid;
    if (!cw_is_traced(tgid)) return 0;
    __u64 id = bpf_get_current_pid_tgid();
    struct cw_fp *r = cw_fp_reserve(CW_FP_EXEC, id, bpf_ktime_get_ns());
    if (!r) return 0;
    r->ppid = BPF_CORE_READ(p, real_parent, tgid);
    r->request = cw_fp_request_of(tgid);
    long n = bpf_probe_read_kernel_str(r->text, sizeof(r->text), BPF_CORE_READ(bprm, filename));
    r->len = n > 0 ? (__u16)n : 0;
    __u64 start = BPF_CORE_READ(p, mm, arg_start), end = BPF_CORE_READ(p, mm, arg_end);
    __u64 len = cw_fp_bound(end > start ? end - start : 0, CW_FP_TEXT - 1);
    if (len && bpf_probe_read_user(r->text2, len, (void *)start) == 0) r->len2 = (__u16)len;
    cw_submit(r, &cw_rb_host, cfg_wake_host);
    return 0;
}
_Static_assert(sizeof(struct cw_fp) == 640, "cw_fp: probes/src/wire.rs FP_SIZE");
