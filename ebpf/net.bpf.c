/* Network (tp_btf: no tracefs needed). For every socket call of a traced thread (send, receive,
 * connect, accept, and read/write family calls on a socket fd), its latency from syscall entry to
 * return, its result and the socket's peer; for the TCP sockets those threads used, retransmits and
 * state changes. What untraced processes do is only counted: their socket sends and receives
 * (calls and bytes) and the retransmits of sockets no traced thread touched.
 *
 * The syscall tracepoints fire for every syscall of every task, so the first test is the traced
 * bitmap (one array read); the syscall number comes next, the fd table walk only for a traced
 * thread's candidate call. A call that returns EAGAIN (a non-blocking socket with nothing ready) is
 * counted, not recorded: event loops make thousands of them, and they never wait.
 *
 * An off-CPU interval of a thread lies entirely inside one syscall or entirely outside any (a
 * thread enters and leaves a syscall on a CPU): the analysis names a sleep inside a socket call a
 * network wait on the call's peer.
 *
 * Syscall numbers are x86_64's (build.rs targets __TARGET_ARCH_x86). */
#include "common.bpf.h"

#define CW_S_IFMT 00170000
#define CW_S_IFSOCK 0140000
#define CW_AF_UNIX 1
#define CW_AF_INET 2
#define CW_AF_INET6 10
#define CW_EAGAIN 11
#define CW_TCP_CLOSE 7

/* a socket call in flight on one thread; ts == 0: none */
struct cw_net_stash {
    __u64 ts;
    __u64 sock; /* struct socket * of the fd at entry */
    __s32 fd;
    __u8 op;
    __u8 pad[3];
};

struct {
    __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct cw_net_stash);
} cw_net_inflight SEC(".maps");

/* The last traced thread that used a socket (by struct sock *): a retransmit or a state change runs
 * in softirq or timer context, where the current task is nobody's. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u64);
    __type(value, struct cw_task_ref);
} cw_net_owner SEC(".maps");

/* The CW_NET_* op of syscall `nr`, 0 for other syscalls; *any_fd: the call also takes files that
 * are not sockets (read, write, readv, writev), so the fd must be checked. */
static __always_inline __u8 cw_net_op(long nr, int *any_fd) {
    *any_fd = 0;
    switch (nr) {
    case 44: /* sendto */
    case 46: /* sendmsg */
    case 307: /* sendmmsg */
        return CW_NET_SEND;
    case 45: /* recvfrom */
    case 47: /* recvmsg */
    case 299: /* recvmmsg */
        return CW_NET_RECV;
    case 42: /* connect */
        return CW_NET_CONNECT;
    case 43: /* accept */
    case 288: /* accept4 */
        return CW_NET_ACCEPT;
    case 1: /* write */
    case 20: /* writev */
        *any_fd = 1;
        return CW_NET_SEND;
    case 0: /* read */
    case 19: /* readv */
        *any_fd = 1;
        return CW_NET_RECV;
    }
    return 0;
}

/* The file behind the current task's `fd` (NULL: none). */
static __always_inline struct file *cw_fd_file(int fd) {
    if (fd < 0) return NULL;
    struct task_struct *task = bpf_get_current_task_btf();
    struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
    if (!fdt || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds)) return NULL;
    struct file **fds = BPF_CORE_READ(fdt, fd);
    struct file *f = NULL;
    if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd])) return NULL;
    return f;
}

/* The socket behind the current task's `fd`, or NULL when the fd is not a socket. */
static __always_inline struct socket *cw_fd_socket(int fd) {
    struct file *f = cw_fd_file(fd);
    if (!f) return NULL;
    umode_t mode = BPF_CORE_READ(f, f_inode, i_mode);
    if ((mode & CW_S_IFMT) != CW_S_IFSOCK) return NULL;
    return (struct socket *)BPF_CORE_READ(f, private_data);
}

/* The peer of `sk` into `r` (family, ports, address, protocol). */
static __always_inline void cw_fill_peer(struct cw_net *r, const struct sock *sk) {
    if (!sk) return;
    r->family = BPF_CORE_READ(sk, __sk_common.skc_family);
    r->proto = (__u8)BPF_CORE_READ(sk, sk_protocol);
    r->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
    r->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
    if (r->family == CW_AF_INET) {
        __u32 a = BPF_CORE_READ(sk, __sk_common.skc_daddr);
        __builtin_memcpy(r->addr, &a, 4);
    } else if (r->family == CW_AF_INET6) {
        BPF_CORE_READ_INTO(&r->addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
    }
}

static __always_inline void cw_remember_owner(const struct sock *sk) {
    if (!sk) return;
    __u64 key = (__u64)sk;
    struct cw_task_ref o = {};
    cw_task_ref_current(&o);
    bpf_map_update_elem(&cw_net_owner, &key, &o, BPF_ANY);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(cw_sys_enter, struct pt_regs *regs, long nr) {
    __u64 id = bpf_get_current_pid_tgid();
    if (!cw_is_traced(id >> 32)) return 0;
    int any_fd;
    __u8 op = cw_net_op(nr, &any_fd);
    if (!op) return 0;
    int fd = (int)BPF_CORE_READ(regs, di);
    struct socket *sock = cw_fd_socket(fd);
    if (!sock) return 0;
    struct cw_net_stash *s =
        bpf_task_storage_get(&cw_net_inflight, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!s) {
        cw_count(CW_CNT_STASH_FAIL_BASE + CW_SRC_NET, 1);
        return 0;
    }
    s->ts = bpf_ktime_get_ns();
    s->sock = (__u64)sock;
    s->fd = fd;
    s->op = op;
    /* before the call: a connect's state changes happen inside it */
    cw_remember_owner(BPF_CORE_READ(sock, sk));
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(cw_sys_exit, struct pt_regs *regs, long ret) {
    __u64 id = bpf_get_current_pid_tgid();
    if (!cw_is_traced(id >> 32)) return 0;
    struct cw_net_stash *s = bpf_task_storage_get(&cw_net_inflight, bpf_get_current_task_btf(), 0, 0);
    if (!s || !s->ts) return 0;
    __u64 ts = s->ts;
    s->ts = 0;
    if (ret == -CW_EAGAIN) {
        cw_count(CW_CNT_NET_AGAIN, 1);
        return 0;
    }
    struct socket *sock = (struct socket *)s->sock;
    int fd = s->fd;
    if (s->op == CW_NET_ACCEPT) {
        /* the peer is the new connection's */
        fd = (int)ret;
        sock = ret >= 0 ? cw_fd_socket(fd) : NULL;
    }
    struct cw_net *r = bpf_ringbuf_reserve(&cw_rb_host, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + CW_SRC_NET, 1);
        return 0;
    }
    __builtin_memset(r, 0, sizeof(*r));
    r->kind = CW_REC_NET;
    r->op = s->op;
    r->cpu = bpf_get_smp_processor_id();
    r->pid = id >> 32;
    r->tid = (__u32)id;
    r->ts = ts;
    r->dur = bpf_ktime_get_ns() - ts;
    r->ret = ret;
    r->fd = fd;
    bpf_get_current_comm(r->comm, sizeof(r->comm));
    if (sock) {
        struct sock *sk = BPF_CORE_READ(sock, sk);
        cw_fill_peer(r, sk);
        if (s->op == CW_NET_ACCEPT) cw_remember_owner(sk);
    }
    cw_submit(r, &cw_rb_host, cfg_wake_host);
    return 0;
}

/* A TCP event of a socket a traced thread used, as a cw_net record. */
static __always_inline void cw_tcp_event(const struct sock *sk, struct cw_task_ref *o, __u8 op, __s64 ret,
                                         __s32 state) {
    struct cw_net *r = bpf_ringbuf_reserve(&cw_rb_host, sizeof(*r), 0);
    if (!r) {
        cw_count(CW_CNT_LOST_BASE + CW_SRC_TCP, 1);
        return;
    }
    __builtin_memset(r, 0, sizeof(*r));
    r->kind = CW_REC_TCP;
    r->op = op;
    r->cpu = bpf_get_smp_processor_id();
    r->pid = o->pid;
    r->tid = o->tid;
    r->ts = bpf_ktime_get_ns();
    r->ret = ret;
    r->fd = state;
    __builtin_memcpy(r->comm, o->comm, sizeof(r->comm));
    cw_fill_peer(r, sk);
    cw_submit(r, &cw_rb_host, cfg_wake_host);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(cw_tcp_retransmit, const struct sock *sk) {
    __u64 key = (__u64)sk;
    struct cw_task_ref *o = bpf_map_lookup_elem(&cw_net_owner, &key);
    if (!o) {
        cw_count(CW_CNT_TCP_RETRANS_OTHER, 1);
        return 0;
    }
    cw_tcp_event(sk, o, CW_TCP_RETRANSMIT, 0, BPF_CORE_READ(sk, __sk_common.skc_state));
    return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(cw_sock_state, const struct sock *sk, const int oldstate, const int newstate) {
    if (BPF_CORE_READ(sk, sk_protocol) != 6) return 0; /* IPPROTO_TCP */
    __u64 key = (__u64)sk;
    struct cw_task_ref *o = bpf_map_lookup_elem(&cw_net_owner, &key);
    if (!o) return 0;
    cw_tcp_event(sk, o, CW_TCP_STATE, newstate, oldstate);
    if (newstate == CW_TCP_CLOSE) bpf_map_delete_elem(&cw_net_owner, &key);
    return 0;
}

/* Socket sends and receives of untraced processes, counted (the traced ones are recorded whole). */
SEC("tp_btf/sock_send_length")
int BPF_PROG(cw_sock_send_length, struct sock *sk, int ret, int flags) {
    if (cw_is_traced(bpf_get_current_pid_tgid() >> 32)) return 0;
    cw_count(CW_CNT_NET_SEND_OTHER, 1);
    if (ret > 0) cw_count(CW_CNT_NET_SEND_OTHER_BYTES, ret);
    return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(cw_sock_recv_length, struct sock *sk, int ret, int flags) {
    if (cw_is_traced(bpf_get_current_pid_tgid() >> 32)) return 0;
    cw_count(CW_CNT_NET_RECV_OTHER, 1);
    if (ret > 0) cw_count(CW_CNT_NET_RECV_OTHER_BYTES, ret);
    return 0;
}
_Static_assert(sizeof(struct cw_net) == 88, "cw_net: probes/src/wire.rs NET_SIZE");
