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
#define CW_CNT_N 40

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
    __u32 pad;
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
