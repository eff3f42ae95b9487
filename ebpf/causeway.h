/* Wire structs shared by the BPF programs and the user-space decoder (probes/src/wire.rs mirrors
 * them field for field; change both together). Every record starts with a u8 `kind`. All times are
 * CLOCK_MONOTONIC ns (bpf_ktime_get_ns); user space converts them to the unix epoch. */
#ifndef CAUSEWAY_H
#define CAUSEWAY_H

#define CW_REC_CALL 1   /* a CUDA runtime or driver call, emitted at return */
#define CW_REC_SWITCH 2 /* one off-CPU interval of a traced thread, emitted at switch-in */
#define CW_REC_WAKEUP 3 /* a traced thread was woken */
#define CW_REC_PROC 4   /* fork / exec / exit / OOM kill */
#define CW_REC_BLOCK 5  /* a block request of a traced process, emitted at completion */
#define CW_REC_LAUNCH 6 /* a kernel launch: a cw_call followed by its launch configuration */
#define CW_REC_NAME 7   /* a fact about a kernel's name (cw_name) */
#define CW_REC_DL 8     /* a traced process finished a dlopen/dlclose (the loader's debugger hook) */
#define CW_REC_PY_CODE 9 /* a CPython code object first seen in a Python stack (cw_py_code) */
#define CW_REC_NCCL 10   /* an NCCL call: a cw_call followed by its NCCL arguments (cw_nccl) */
#define CW_REC_NET 11    /* a socket call of a traced thread, emitted at return (cw_net) */
#define CW_REC_TCP 12    /* a retransmit or state change of a traced process's TCP socket (cw_net) */
#define CW_REC_FP 13     /* what a traced process touched (trace --footprint): cw_fp */

/* cw_net.op of a CW_REC_NET (as causeway_model::codes source 7) */
#define CW_NET_SEND 1
#define CW_NET_RECV 2
#define CW_NET_CONNECT 3
#define CW_NET_ACCEPT 4
/* cw_net.op of a CW_REC_TCP (source 6) */
#define CW_TCP_RETRANSMIT 1
#define CW_TCP_STATE 2

/* what a cw_name says (probes/src/cuda_table.rs NameAbi) */
#define CW_NAME_REGISTER 1   /* handle = host stub, name = device function (__cudaRegisterFunction) */
#define CW_NAME_GET_KERNEL 2 /* handle = cudaKernel_t, other = host stub (__cudaGetKernel) */
#define CW_NAME_MODULE_FN 3  /* handle = CUfunction, name (cuModuleGetFunction) */
#define CW_NAME_LIB_KERNEL 4 /* handle = CUkernel, name (cuLibraryGetKernel) */
#define CW_NAME_KERNEL_FN 5  /* handle = CUfunction, other = CUkernel (cuKernelGetFunction) */
#define CW_NAME_MAX 1024

#define CW_PROC_FORK 1
#define CW_PROC_EXEC 2
#define CW_PROC_EXIT 3
#define CW_PROC_OOM 4

/* event sources, as causeway_model::Source */
#define CW_SRC_CUDA 1
#define CW_SRC_HOST 3
#define CW_SRC_DRIVER 4
#define CW_SRC_IO 5
#define CW_SRC_TCP 6
#define CW_SRC_NET 7
#define CW_SRC_NCCL 9
#define CW_SRC_CUPTI 11

/* indexes into the per-CPU counter array `cw_counters` */
#define CW_CNT_LOST_BASE 0         /* + source: ring reserve failures of that source */
#define CW_CNT_STASH_FAIL 16       /* entry stash map full: the call is lost (counted per source below) */
#define CW_CNT_STASH_FAIL_BASE 16  /* + source - 0: never overlaps LOST_BASE (sources < 16) */
#define CW_CNT_SWITCH_OTHER 32     /* sched_switch of untraced tasks */
#define CW_CNT_WAKEUP_OTHER 33     /* sched_wakeup of untraced tasks */
#define CW_CNT_BLOCK_OTHER 34      /* block requests issued by untraced processes */
#define CW_CNT_BLOCK_OTHER_BYTES 35
#define CW_CNT_PAGE_OTHER 36       /* page allocations outside traced processes */
#define CW_CNT_PAGE_OTHER_BYTES 37
#define CW_CNT_SWITCH_OTHER_NS 38  /* on-CPU ns of untraced (non-idle) tasks, summed at their switch-out */
#define CW_CNT_NAME_LOST 39        /* kernel-name facts lost (ring full) */
#define CW_CNT_PY_NO_THREAD 40     /* Python process, but no thread state for the calling thread */
#define CW_CNT_PY_TRUNCATED 41     /* Python stack deeper than CW_PY_DEPTH: the outer frames are cut */
#define CW_CNT_PY_FAULT 42         /* a frame could not be read (chain changed under the walk): cut there */
#define CW_CNT_PY_TABLE_FULL 43    /* cw_py_stacks full: the call has no Python stack */
#define CW_CNT_PY_COLLISION 44     /* two Python stacks with one key: the later has none */
#define CW_CNT_PY_CODE_LOST 45     /* a code object record lost (ring full): its frames are unnamed */
#define CW_CNT_NET_SEND_OTHER 46       /* socket sends of untraced processes (sock_send_length) */
#define CW_CNT_NET_SEND_OTHER_BYTES 47
#define CW_CNT_NET_RECV_OTHER 48       /* socket receives of untraced processes (sock_recv_length) */
#define CW_CNT_NET_RECV_OTHER_BYTES 49
#define CW_CNT_TCP_RETRANS_OTHER 50    /* retransmits of sockets no traced thread used */
#define CW_CNT_NET_AGAIN 51            /* traced socket calls that returned EAGAIN (non-blocking, nothing ready): not recorded */
#define CW_CNT_FP_SYS_FULL 52         /* footprint: a syscall aggregate not kept (cw_fp_sys full) */
#define CW_CNT_FP_FD_FULL 53          /* footprint: a descriptor's bytes not kept (cw_fp_fds full) */
#define CW_CNT_FP_LOST 54             /* footprint: a cw_fp record lost (ring full) */
#define CW_CNT_N 55

struct cw_call {
    __u8 kind;
    __u8 source;
    __u16 op;
    __u32 cpu;
    __u32 pid;
    __u32 tid;
    __u64 ts;
    __u64 dur;
    __u64 arg0;
    __u64 arg1;
    __u64 arg2;
    __s64 ret;
    __s32 stack_id; /* -1: none */
    __u32 py_stack; /* key into cw_py_stacks; 0: none */
    char comm[16];   /* empty after the thread's first call: user space keeps it by tid */
}; /* 88 bytes */

/* grid, block, dynamic shared memory and cluster of a launch (cluster 0: none set) */
struct cw_launch_cfg {
    __u32 grid[3];
    __u32 block[3];
    __u32 shmem;
    __u32 cluster[3];
}; /* 40 bytes */

struct cw_launch {
    struct cw_call call; /* call.kind == CW_REC_LAUNCH */
    struct cw_launch_cfg cfg;
}; /* 128 bytes */

/* what an NCCL call says beside its cw_call (arg0 = count, arg1 = communicator, arg2 = stream, or
 * the communicator an init call returned) */
struct cw_nccl_args {
    __u64 id_hash;  /* ncclCommInitRank*: FNV-1a over the ncclUniqueId's 16 words; 0 otherwise */
    __s32 datatype; /* -1: none */
    __s32 redop;    /* -1: none */
    __s32 peer;     /* send/recv peer, broadcast/reduce root, split color; -1 otherwise */
    __s32 nranks;   /* init: ranks (InitAll: devices); -1 otherwise */
    __s32 rank;     /* init: this rank; split: the key; -1 otherwise */
    __u32 pad;
}; /* 32 bytes */

struct cw_nccl {
    struct cw_call call; /* call.kind == CW_REC_NCCL, call.source == CW_SRC_NCCL */
    struct cw_nccl_args a;
}; /* 120 bytes */

struct cw_name {
    __u8 kind;
    __u8 what;       /* CW_NAME_* */
    __u16 pad;
    __u32 pid;
    __u64 handle;
    __u64 other;
    __s32 len;       /* bytes of name incl. the NUL (bpf_probe_read_user_str); <= 0: none */
    __u32 pad2;
    char name[CW_NAME_MAX];
}; /* 1056 bytes */

struct cw_dl {
    __u8 kind;
    __u8 stopped;    /* the process was sent SIGSTOP: user space attaches, then continues it */
    __u16 pad;
    __u32 pid;
    __u32 tid;
    __u32 pad2;
    __u64 ts;
}; /* 24 bytes */

/* Python frames (ebpf/python.bpf.h; user space: probes/src/python). */
#define CW_PY_DEPTH 64        /* frames kept per stack (shim frames included), innermost first */
#define CW_PY_NONE 0xffff     /* a layout field the version does not have */
#define CW_PY_FILE_MAX 256
#define CW_PY_NAME_MAX 128
#define CW_PY_LINETABLE_MAX 4096
#define CW_PYF_ENTRY 1        /* the outermost frame of one eval-loop invocation */
#define CW_PYF_NO_INSTR 2     /* the instruction offset could not be computed */
#define CW_PYF_SHIM 4         /* a shim frame of the eval loop (3.12+): not a frame of Python code;
                               * it ends the group of the frame before it */
#define CW_PYS_TRUNCATED 1    /* cw_py_stack.flags: more frames than CW_PY_DEPTH */
#define CW_PYS_FAULT 2        /* a frame could not be read: the walk stopped there */

/* How to walk one CPython process's frames, per traced process (cw_py_procs), filled by user space
 * from the interpreter's own debug offsets (3.13+) or per-version tables. Frame fields are relative
 * to `frame_span`: one 128-byte read per frame covers them all. */
struct cw_py_layout {
    __u64 runtime;           /* address of _PyRuntime */
    __u64 code_type;         /* address of PyCode_Type: a frame's code object must have it */
    __u16 runtime_interps;   /* _PyRuntime.interpreters.head */
    __u16 interp_next;
    __u16 interp_threads;    /* PyInterpreterState.threads.head */
    __u16 tstate_next;
    __u16 tstate_thread_id;  /* pthread_t: the thread's fs base */
    __u16 tstate_frame;      /* .frame (3.10), .cframe (3.11, 3.12), .current_frame (3.13+) */
    __u16 cframe_frame;      /* CW_PY_NONE, or where the frame pointer is in the cframe */
    __u16 frame_span;        /* where the 128-byte read of a frame starts */
    __u16 frame_previous;    /* 8-aligned, relative to frame_span, as the next three */
    __u16 frame_code;
    __u16 frame_instr;       /* f_lasti (an int index, 3.10) or prev_instr / instr_ptr */
    __u16 frame_owner;       /* byte; CW_PY_NONE before 3.12 */
    __u16 frame_is_entry;    /* byte; 3.11 only */
    __u16 code_code;         /* co_code_adaptive (3.11+) */
    __u16 code_filename;
    __u16 code_name;         /* co_qualname where it exists, else co_name */
    __u16 code_firstlineno;
    __u16 code_linetable;
    __u16 object_type;       /* ob_type */
    __u16 bytes_size;        /* ob_size of a bytes object */
    __u16 bytes_data;        /* ob_sval */
    __u16 unicode_state;
    __u16 unicode_length;
    __u16 ascii_data;        /* sizeof(PyASCIIObject) */
    __u16 compact_data;      /* sizeof(PyCompactUnicodeObject) */
    __u8 instr_is_index;     /* 1: frame_instr is an int instruction index; 0: a pointer into the code */
    __u8 every_frame_entry;  /* 1: one eval-loop invocation per frame (3.10) */
    __u8 owner_cstack;       /* the `owner` of the eval loop's shim frames (3.12+) */
    __u8 minor;              /* CPython 3.minor */
    __u8 pad[2];
}; /* 72 bytes */

struct cw_py_frame {
    __u64 code;   /* PyCodeObject address */
    __u32 instr;  /* instruction offset in code units */
    __u32 flags;  /* CW_PYF_* */
};

/* One distinct Python stack (cw_py_stacks value; key: a 32-bit fold of `hash`, never 0). */
struct cw_py_stack {
    __u64 hash;   /* over the pid and every frame's code and offset */
    __u32 pid;
    __u16 depth;
    __u16 flags;  /* CW_PYS_* */
    struct cw_py_frame f[CW_PY_DEPTH];
}; /* 1040 bytes */

/* A code object, sent once per process and (address, first line) when a new stack names it. The
 * strings are raw: ASCII / Latin-1, UCS-2 or UCS-4 after `kind` (1, 2, 4), cut at their max. */
struct cw_py_code {
    __u8 kind;
    __u8 file_kind;
    __u8 name_kind;
    __u8 not_code;        /* its type is not PyCode_Type: the frame is garbage */
    __u32 pid;
    __u64 code;
    __s32 firstlineno;
    __u16 file_len;       /* bytes */
    __u16 name_len;
    __u16 linetable_len;  /* bytes read */
    __u8 minor;           /* CPython 3.minor: which line-table format */
    __u8 pad;
    __u32 linetable_size; /* bytes the table has (more than read: lines past the cut are unknown) */
    char file[CW_PY_FILE_MAX];
    char name[CW_PY_NAME_MAX];
    __u8 linetable[CW_PY_LINETABLE_MAX];
}; /* 4512 bytes */

/* A socket call (CW_REC_NET) or a TCP event (CW_REC_TCP) with the socket's peer. */
struct cw_net {
    __u8 kind;
    __u8 op;         /* CW_NET_* or CW_TCP_* */
    __u16 family;    /* AF_INET 2, AF_INET6 10, AF_UNIX 1 */
    __u32 cpu;
    __u32 pid;
    __u32 tid;
    __u64 ts;        /* entry (a TCP event: when it happened) */
    __u64 dur;       /* entry to return; 0 for TCP events */
    __s64 ret;       /* bytes, the new fd (accept) or -errno; TCP: the new state (state change) */
    __s32 fd;        /* TCP: the old state (state change) or the socket's state (retransmit) */
    __u16 sport;     /* local port, host order */
    __u16 dport;     /* peer port, host order */
    __u8 proto;      /* IPPROTO_TCP 6, IPPROTO_UDP 17, 0 otherwise */
    __u8 pad[7];
    __u8 addr[16];   /* peer address, network order: IPv4 in the first 4 bytes */
    char comm[16];
}; /* 88 bytes */

/* cw_fp.what */
#define CW_FP_OPEN 1      /* open/openat/openat2 returned fd: text = the path */
#define CW_FP_CLOSE 2     /* close(fd) of a descriptor with counters: its bytes, opened = its open's ts */
#define CW_FP_CONNECT 3   /* connect returned 0 or EINPROGRESS: text = the sockaddr (len bytes) */
#define CW_FP_ACCEPT 4    /* accept/accept4 returned fd: the peer in family/port/addr */
#define CW_FP_BIND 5      /* bind returned 0: text = the sockaddr (len bytes) */
#define CW_FP_EXEC 6      /* exec: text = the file, text2 = the arguments (NUL-separated, len2 bytes) */
#define CW_FP_REQ_BEGIN 7 /* a read on stdin or an accepted socket began request `request`: text = its first bytes */
#define CW_FP_REQ_END 8   /* the write that answered it: text = its first bytes */
#define CW_FP_DUP 9       /* dup/dup2/dup3/fcntl(F_DUPFD) returned fd: ret = the descriptor it copies */
#define CW_FP_TEXT 256
#define CW_FP_HEAD 128
#define CW_FP_REQ_HEAD 255 /* a request's first bytes: an HTTP request's headers and its body's start */
/* cw_fp.flags of a close (the descriptor's cw_fp_fd.flags) */
#define CW_FPF_REQUEST 1  /* an accepted socket: requests come on it */
#define CW_FPF_EXEC 2     /* mapped with PROT_EXEC */
#define CW_FPF_SOCKET 4

/* A footprint record (CW_REC_FP). */
struct cw_fp {
    __u8 kind;
    __u8 what;       /* CW_FP_* */
    __u16 family;    /* ACCEPT: the peer's address family; CLOSE (open unseen), DUP: the file's type (i_mode >> 12) */
    __u32 pid;
    __u32 tid;
    __u32 ppid;      /* EXEC: the parent */
    __u64 ts;        /* the syscall's return (exec: when it happened) */
    __s64 ret;
    __s32 fd;
    __u32 request;   /* the request the process served (0: none) */
    __u64 flags;     /* OPEN: the O_* flags; CLOSE: CW_FPF_* */
    __u64 opened;    /* CLOSE: its open's ts (0: before the trace) */
    __u64 bytes_read;
    __u64 bytes_written;
    __u64 reads;
    __u64 writes;
    __u16 port;      /* ACCEPT: the peer's port, host order */
    __u16 len;       /* bytes of text */
    __u16 len2;      /* bytes of text2 */
    __u16 pad;
    __u8 addr[16];   /* ACCEPT: the peer's address, network order; CLOSE (open unseen), DUP: the inode (8 bytes) */
    char comm[16];
    char text[CW_FP_TEXT];
    char text2[CW_FP_TEXT];
}; /* 640 bytes */

struct cw_switch {
    __u8 kind;
    __u8 prev_state; /* causeway_model::PrevState code */
    __u16 pad;
    __u32 cpu;       /* the CPU it was switched out of */
    __u32 pid;
    __u32 tid;
    __u64 ts_out;
    __u64 ts_in;
    __u64 wake_ts;   /* 0: not woken (preempted) */
    __u32 next_pid;
    __u32 next_tid;
    __u32 waker_pid;
    __u32 waker_tid;
    char comm[16];
    char next_comm[16];
}; /* 88 bytes */

struct cw_wakeup {
    __u8 kind;
    __u8 pad[3];
    __u32 cpu;       /* target CPU */
    __u32 pid;       /* waker */
    __u32 tid;
    __u64 ts;
    __u32 wakee_pid;
    __u32 wakee_tid;
    char comm[16];   /* waker's comm */
}; /* 48 bytes */

struct cw_proc {
    __u8 kind;
    __u8 what;       /* CW_PROC_* */
    __u16 pad;
    __u32 cpu;
    __u32 pid;
    __u32 tid;
    __u64 ts;
    __u32 child_pid;
    __u32 child_tid;
    __s32 exit_code;
    __u32 pad2;
    char comm[16];
}; /* 56 bytes */

struct cw_block {
    __u8 kind;
    __u8 op;         /* 1 read, 2 write, 3 discard, 0 other */
    __u16 pad;
    __u32 cpu;
    __u32 pid;       /* the issuing process */
    __u32 tid;
    __u64 ts;        /* issue */
    __u64 dur;       /* issue to completion */
    __u64 sector;
    __u32 bytes;
    __u32 dev;       /* major << 20 | minor */
    char comm[16];
}; /* 64 bytes */

#endif
