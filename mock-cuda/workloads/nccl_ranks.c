/* Data-parallel training as torchrun runs it: one process per rank, each on its own "GPU", an
 * all-reduce of the gradients every step (mock NCCL, build/libnccl.so.2).
 *
 * The parent (no RANK in the environment) makes the ncclUniqueId (its only CUDA/NCCL call; it never
 * initialises CUDA) and fork+execs itself once per rank with RANK, LOCAL_RANK, WORLD_SIZE and
 * MOCK_NCCL_ID (the id's 128 bytes in hex), waits for them (a rank that fails has the others
 * stopped) and exits non-zero if any failed. Each rank: pinned to CPU rank % nCPUs (`--pin 1`), then
 * cudaSetDevice(LOCAL_RANK), cudaStreamCreate, 2 cudaMalloc, ncclCommInitRank, the communicator's
 * ncclGetVersion/ncclCommCount/ncclCommUserRank/ncclCommCuDevice checked once; per step host compute
 * (`--host-us` of CPU time on the main thread: the input pipeline), 4 kernel launches of
 * `--kernel-us`/4 each, ncclAllReduce of `--bytes` float32 on the rank's stream, cudaStreamSynchronize;
 * after the loop (`--extras 1`) a grouped ncclSend to the next rank + ncclRecv from the previous one,
 * ncclBroadcast and ncclReduce (root 0), ncclAllGather, ncclReduceScatter, ncclCommSplit (color rank %
 * 2, key rank) with one ncclAllReduce on the new communicator, cudaStreamSynchronize, ncclCommDestroy
 * of it; then ncclCommDestroy, cudaFree x2, cudaStreamDestroy.
 *
 * A straggler (`--straggler R`) is late to the all-reduce in steps `--late-from`..`--late-to`:
 * - `--late-mode input`: its main thread computes `--late-us` more per step (a slow input pipeline);
 * - `--late-mode hog` (default): it does nothing differently; the parent starts a CPU hog (this
 *   program re-executed with `--hog-child 1`, argv[0] and comm "nccl-hog") pinned to the straggler's
 *   CPU (the straggler is pinned there even with `--pin 0`), which spins only while the straggler has
 *   set a flag in a shared memfd (the late steps; it sleeps 1 ms between looks otherwise): sharing the
 *   CPU, the straggler's host compute takes about twice as long. The parent stops it with SIGTERM.
 * Either way every other rank's stream waits in the all-reduce, which its cudaStreamSynchronize shows.
 *
 * A rank that never arrives (`--stuck R --stuck-at S`): rank R, at step S, before the step's
 * all-reduce, sleeps for good in its host code (pause(), like an input pipeline that never
 * delivers); the other ranks enter all-reduce #S (sequence S, counting from 0) and wait in their
 * cudaStreamSynchronize until the job is killed (run with MOCK_NCCL_TIMEOUT_S unset: NCCL waits
 * forever).
 *
 * `--all-in-one N`: one process, ncclCommInitAll of N communicators, one thread issuing per step the
 * host compute, the launches on each communicator's stream (cudaSetDevice(i) before each device's),
 * ncclGroupStart, one ncclAllReduce per communicator on its own stream, ncclGroupEnd, then a
 * cudaStreamSynchronize of every stream; ncclCommDestroy of each at the end.
 *
 * Output: one block per rank, written at once so that ranks never interleave: `RANK <r> PID <pid>`,
 * `RANK <r> CALLS <symbol> <n>` for every call, `RANK <r> ERRORS <n>`, `RANK <r> KERNEL <hex stub>
 * <mangled>`, `RANK <r> CPU <cpu>` when pinned, `RANK <r> SPLIT <color> <new rank> <new ranks>` with
 * --extras, `RANK <r> SYNC_WAIT_US <us>` (total time in cudaStreamSynchronize) when MOCK_NCCL_REPORT=1,
 * and from the straggler `LATE <r> <first> <last>`. The parent prints `PARENT PID <pid>`, `PARENT
 * CALLS ncclGetUniqueId 1`, `PARENT ERRORS <n>` and, when it started one, `HOG <pid> <cpu>`. The
 * all-in-one process prints one block as rank 0. */
#define WL_NAMED_ONLY
#include "kernels.h"
#include "../src/mock_nccl.h"
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

__attribute__((noinline, used)) void ddp_forward_stub(void) { __asm__ volatile("nop"); }
__attribute__((noinline, used)) void ddp_backward_stub(void) { __asm__ volatile("nop; nop"); }
__attribute__((noinline, used)) void ddp_grad_norm_stub(void) { __asm__ volatile("nop; nop; nop"); }
__attribute__((noinline, used)) void ddp_adam_step_stub(void) { __asm__ volatile("nop; nop; nop; nop"); }
#define NK 4
static struct wl_kernel K[NK] = {{ddp_forward_stub, "_Z11ddp_forwardPKfPfi", NULL},
                                 {ddp_backward_stub, "_Z12ddp_backwardPKfS0_Pfi", NULL},
                                 {ddp_grad_norm_stub, "_Z13ddp_grad_normPKfPfi", NULL},
                                 {ddp_adam_step_stub, "_Z13ddp_adam_stepPfPKffi", NULL}};

static long ranks, steps, kernel_us, host_us, nbytes, pin, straggler, late_from, late_to, late_us, extras;
static long stuck = -1, stuck_at = -1;
static int late_input; /* --late-mode input (else hog) */
static uint64_t sync_ns;
#define HOG_FD_ENV "NCCL_RANKS_HOG_FD"

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
/* `us` of this thread's CPU time: work, not wall time, so a CPU shared with a hog makes it slower */
static void cpu_work_us(long us) {
    if (us <= 0) return;
    uint64_t end = thread_cpu_ns() + (uint64_t)us * 1000;
    volatile uint64_t x = 0;
    while (thread_cpu_ns() < end)
        for (int i = 0; i < 1000; i++) x += (uint64_t)i * i;
}
/* the n-th CPU (mod their number) this process may run on */
static int nth_cpu(long n) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) == 0) return 0;
    n %= CPU_COUNT(&set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && n-- == 0) return c;
    return 0;
}
/* before any thread starts: the threads CUDA starts later (stream workers) inherit it */
static void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) perror("sched_setaffinity");
}
static _Atomic int *map_flag(int fd) {
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap hog flag"); exit(2); }
    return p;
}
static int report_on(void) {
    const char *v = getenv("MOCK_NCCL_REPORT");
    return v && *v && strcmp(v, "0") != 0;
}
static void set_kernel_durations(void) {
    for (int k = 0; k < NK; k++) mockcuSetKernelNs((const void *)K[k].stub, (uint64_t)kernel_us * 1000 / NK);
}
static void launch_step_kernels(cudaStream_t s) {
    dim3 grid = {256, 1, 1}, block = {256, 1, 1};
    for (int k = 0; k < NK; k++) CALLN("cudaLaunchKernel", wl_launch(&K[k], grid, block, NULL, 0, s));
}
static void timed_sync(cudaStream_t s) {
    uint64_t t = wl_now_ns();
    CALLN("cudaStreamSynchronize", cudaStreamSynchronize(s));
    sync_ns += wl_now_ns() - t;
}
/* one block of lines, written at once: ranks share the parent's stdout */
static void write_all(const char *buf, size_t len) {
    while (len) {
        ssize_t w = write(1, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        buf += w;
        len -= (size_t)w;
    }
}

/* ---- the hog: spins on the straggler's CPU while the flag is set ---- */
static int run_hog(int argc, char **argv) {
    prctl(PR_SET_NAME, "nccl-hog");
    pin_to((int)opt(argc, argv, "--hog-cpu", 0));
    _Atomic int *flag = map_flag((int)opt(argc, argv, "--hog-fd", -1));
    volatile uint64_t x = 0;
    for (;;) {
        if (atomic_load(flag)) {
            uint64_t end = wl_now_ns() + 200000;
            while (wl_now_ns() < end) x++;
        } else {
            wl_sleep_us(1000);
        }
    }
    return 0;
}

/* ---- one rank ---- */
static int parse_id(const char *hex, ncclUniqueId *id) {
    if (!hex || strlen(hex) != 2 * NCCL_UNIQUE_ID_BYTES) return -1;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        id->internal[i] = (char)v;
    }
    return 0;
}
static int run_rank(void) {
    int r = atoi(getenv("RANK"));
    const char *lr_env = getenv("LOCAL_RANK"), *ws_env = getenv("WORLD_SIZE");
    int lr = lr_env ? atoi(lr_env) : r, n = ws_env ? atoi(ws_env) : (int)ranks;
    int is_straggler = r == straggler;
    int hog_mode = is_straggler && !late_input && getenv(HOG_FD_ENV);
    int cpu = -1;
    if (pin || hog_mode) pin_to(cpu = nth_cpu(r));
    char prefix[32];
    snprintf(prefix, sizeof prefix, "RANK %d ", r);
    wl_prefix = prefix;
    ncclUniqueId id;
    if (parse_id(getenv("MOCK_NCCL_ID"), &id) != 0) { fprintf(stderr, "rank %d: bad MOCK_NCCL_ID\n", r); return 2; }
    _Atomic int *flag = hog_mode ? map_flag(atoi(getenv(HOG_FD_ENV))) : NULL;

    wl_register(K, NK);
    set_kernel_durations();
    cudaStream_t s = NULL;
    void *sendb = NULL, *recvb = NULL;
    CALLN("cudaSetDevice", cudaSetDevice(lr));
    CALLN("cudaStreamCreate", cudaStreamCreate(&s));
    CALLN("cudaMalloc", cudaMalloc(&sendb, (size_t)nbytes));
    CALLN("cudaMalloc", cudaMalloc(&recvb, (size_t)nbytes));
    ncclComm_t comm = NULL;
    CALLN("ncclCommInitRank", ncclCommInitRank(&comm, n, id, r));
    if (!comm) { fprintf(stderr, "rank %d: ncclCommInitRank failed\n", r); return 1; }
    int v = 0, cnt = 0, ur = -1, dev = -1;
    CALLN("ncclGetVersion", ncclGetVersion(&v));
    CALLN("ncclCommCount", ncclCommCount(comm, &cnt));
    CALLN("ncclCommUserRank", ncclCommUserRank(comm, &ur));
    CALLN("ncclCommCuDevice", ncclCommCuDevice(comm, &dev));
    if (v != NCCL_VERSION_CODE || cnt != n || ur != r || dev != lr) {
        fprintf(stderr, "rank %d: communicator says version %d, %d ranks, rank %d, device %d\n", r, v, cnt, ur, dev);
        atomic_fetch_add(&g_errors, 1);
    }

    size_t count = (size_t)nbytes / sizeof(float);
    for (long step = 0; step < steps; step++) {
        int late = is_straggler && step >= late_from && step <= late_to;
        if (flag && late) atomic_store(flag, 1); /* the hog wakes up */
        cpu_work_us(host_us + (late && late_input ? late_us : 0)); /* the input pipeline */
        if (r == stuck && step == stuck_at)
            for (;;) pause(); /* the rank that never arrives */
        launch_step_kernels(s);
        CALLN("ncclAllReduce", ncclAllReduce(sendb, recvb, count, ncclFloat32, ncclSum, comm, s));
        timed_sync(s);
        if (flag && step == late_to) atomic_store(flag, 0);
    }
    int split_color = -1, split_rank = -1, split_n = 0;
    if (extras) {
        size_t part = count / (size_t)n;
        CALLN("ncclGroupStart", ncclGroupStart());
        CALLN("ncclSend", ncclSend(sendb, count, ncclFloat32, (r + 1) % n, comm, s));
        CALLN("ncclRecv", ncclRecv(recvb, count, ncclFloat32, (r - 1 + n) % n, comm, s));
        CALLN("ncclGroupEnd", ncclGroupEnd());
        CALLN("ncclBroadcast", ncclBroadcast(sendb, recvb, count, ncclFloat32, 0, comm, s));
        CALLN("ncclReduce", ncclReduce(sendb, recvb, count, ncclFloat32, ncclSum, 0, comm, s));
        CALLN("ncclAllGather", ncclAllGather(sendb, recvb, part, ncclFloat32, comm, s));
        CALLN("ncclReduceScatter", ncclReduceScatter(sendb, recvb, part, ncclFloat32, ncclSum, comm, s));
        ncclComm_t sub = NULL;
        split_color = r % 2;
        CALLN("ncclCommSplit", ncclCommSplit(comm, split_color, r, &sub, NULL));
        CALLN("ncclCommUserRank", ncclCommUserRank(sub, &split_rank));
        CALLN("ncclCommCount", ncclCommCount(sub, &split_n));
        CALLN("ncclAllReduce", ncclAllReduce(sendb, recvb, count, ncclFloat32, ncclSum, sub, s));
        timed_sync(s);
        CALLN("ncclCommDestroy", ncclCommDestroy(sub));
    }
    CALLN("ncclCommDestroy", ncclCommDestroy(comm));
    CALLN("cudaFree", cudaFree(sendb));
    CALLN("cudaFree", cudaFree(recvb));
    CALLN("cudaStreamDestroy", cudaStreamDestroy(s));

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    wl_report_to(f);
    for (int k = 0; k < NK; k++)
        fprintf(f, "%sKERNEL 0x%lx %s\n", prefix, (unsigned long)(uintptr_t)K[k].stub, K[k].mangled);
    if (cpu >= 0) fprintf(f, "%sCPU %d\n", prefix, cpu);
    if (extras) fprintf(f, "%sSPLIT %d %d %d\n", prefix, split_color, split_rank, split_n);
    if (report_on()) fprintf(f, "%sSYNC_WAIT_US %llu\n", prefix, (unsigned long long)(sync_ns / 1000));
    if (is_straggler) fprintf(f, "LATE %d %ld %ld\n", r, late_from, late_to);
    fclose(f);
    write_all(buf, len);
    free(buf);
    return g_errors ? 1 : 0;
}

/* ---- one process, all ranks (ncclCommInitAll) ---- */
static int run_all_in_one(long nd) {
    if (nd < 1 || nd > 64) { fprintf(stderr, "--all-in-one: 1..64 communicators\n"); return 2; }
    wl_prefix = "RANK 0 ";
    wl_register(K, NK);
    set_kernel_durations();
    cudaStream_t s[64];
    void *sendb[64], *recvb[64];
    ncclComm_t comms[64];
    for (int i = 0; i < nd; i++) {
        CALLN("cudaSetDevice", cudaSetDevice(i));
        CALLN("cudaStreamCreate", cudaStreamCreate(&s[i]));
        CALLN("cudaMalloc", cudaMalloc(&sendb[i], (size_t)nbytes));
        CALLN("cudaMalloc", cudaMalloc(&recvb[i], (size_t)nbytes));
    }
    CALLN("ncclCommInitAll", ncclCommInitAll(comms, (int)nd, NULL));
    for (int i = 0; i < nd; i++) {
        int cnt = 0, ur = -1, dev = -1;
        CALLN("ncclCommCount", ncclCommCount(comms[i], &cnt));
        CALLN("ncclCommUserRank", ncclCommUserRank(comms[i], &ur));
        CALLN("ncclCommCuDevice", ncclCommCuDevice(comms[i], &dev));
        if (cnt != nd || ur != i || dev != i) atomic_fetch_add(&g_errors, 1);
    }
    size_t count = (size_t)nbytes / sizeof(float);
    for (long step = 0; step < steps; step++) {
        cpu_work_us(host_us);
        for (int i = 0; i < nd; i++) {
            CALLN("cudaSetDevice", cudaSetDevice(i));
            launch_step_kernels(s[i]);
        }
        CALLN("ncclGroupStart", ncclGroupStart());
        for (int i = 0; i < nd; i++)
            CALLN("ncclAllReduce", ncclAllReduce(sendb[i], recvb[i], count, ncclFloat32, ncclSum, comms[i], s[i]));
        CALLN("ncclGroupEnd", ncclGroupEnd());
        for (int i = 0; i < nd; i++) timed_sync(s[i]);
    }
    for (int i = 0; i < nd; i++) CALLN("ncclCommDestroy", ncclCommDestroy(comms[i]));
    wl_report_to(stdout);
    for (int k = 0; k < NK; k++)
        printf("%sKERNEL 0x%lx %s\n", wl_prefix, (unsigned long)(uintptr_t)K[k].stub, K[k].mangled);
    if (report_on()) printf("%sSYNC_WAIT_US %llu\n", wl_prefix, (unsigned long long)(sync_ns / 1000));
    fflush(stdout);
    return g_errors ? 1 : 0;
}

/* ---- the launcher ---- */
static pid_t spawn(const char *self, char **argv, const char *const *env) {
    pid_t parent = getpid(), pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* torchrun's children do not outlive it either */
    if (getppid() != parent) _exit(1);
    for (int i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    execv(self, argv);
    perror(self);
    _exit(127);
}
static int run_parent(char **argv) {
    if (ranks < 1 || ranks > 64) { fprintf(stderr, "--ranks: 1..64\n"); return 2; }
    ncclUniqueId id;
    CALLN("ncclGetUniqueId", ncclGetUniqueId(&id));
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) { perror("/proc/self/exe"); return 2; }
    self[sl] = 0;

    pid_t hog = 0;
    int hog_cpu = -1;
    if (straggler >= 0 && straggler < ranks && !late_input) {
        int fd = memfd_create("nccl-hog-flag", 0); /* inherited across exec by the hog and the ranks */
        if (fd < 0 || ftruncate(fd, 4096) != 0) { perror("memfd_create"); return 2; }
        char fds[16], cpus[16];
        snprintf(fds, sizeof fds, "%d", fd);
        hog_cpu = nth_cpu(straggler);
        snprintf(cpus, sizeof cpus, "%d", hog_cpu);
        setenv(HOG_FD_ENV, fds, 1);
        char *hog_argv[] = {"nccl-hog", "--hog-child", "1", "--hog-cpu", cpus, "--hog-fd", fds, NULL};
        hog = spawn(self, hog_argv, NULL);
    }
    pid_t pids[64];
    char rs[16], ws[16];
    snprintf(ws, sizeof ws, "%ld", ranks);
    for (int r = 0; r < ranks; r++) {
        snprintf(rs, sizeof rs, "%d", r);
        const char *env[] = {"RANK", rs, "LOCAL_RANK", rs, "WORLD_SIZE", ws, "MOCK_NCCL_ID", hex, NULL};
        pids[r] = spawn(self, argv, env);
    }
    int failed = 0, left = (int)ranks;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) { if (errno == EINTR) continue; break; }
        if (p == hog) { hog = 0; continue; }
        left--;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
        for (int r = 0; r < ranks; r++)
            if (pids[r] == p) fprintf(stderr, "nccl_ranks: rank %d (pid %d) failed (status 0x%x)\n", r, (int)p, st);
        if (!failed) /* the others would wait for it forever */
            for (int r = 0; r < ranks; r++)
                if (pids[r] != p) kill(pids[r], SIGTERM);
        failed = 1;
    }
    if (failed) { /* ranks killed before ncclCommDestroy leave mock NCCL's shared state behind */
        char path[64];
        snprintf(path, sizeof path, "/dev/shm/mocknccl-%.32s", hex);
        unlink(path);
    }
    int hog_pid = (int)hog;
    if (hog) {
        kill(hog, SIGTERM);
        waitpid(hog, NULL, 0);
    }
    wl_prefix = "PARENT ";
    wl_report_to(stdout);
    if (hog_pid) printf("HOG %d %d\n", hog_pid, hog_cpu);
    fflush(stdout);
    return failed || g_errors ? 1 : 0;
}

int main(int argc, char **argv) {
    ranks = opt(argc, argv, "--ranks", 2);
    steps = opt(argc, argv, "--steps", 40);
    kernel_us = opt(argc, argv, "--kernel-us", 2000);
    host_us = opt(argc, argv, "--host-us", 3000);
    nbytes = opt(argc, argv, "--bytes", 64L << 20);
    pin = opt(argc, argv, "--pin", 1);
    straggler = opt(argc, argv, "--straggler", -1);
    late_from = opt(argc, argv, "--late-from", 10);
    late_to = opt(argc, argv, "--late-to", 29);
    late_us = opt(argc, argv, "--late-us", 8000);
    extras = opt(argc, argv, "--extras", 0);
    stuck = opt(argc, argv, "--stuck", -1);
    stuck_at = opt(argc, argv, "--stuck-at", -1);
    const char *mode = opt_str(argc, argv, "--late-mode", "hog");
    if (strcmp(mode, "hog") != 0 && strcmp(mode, "input") != 0) {
        fprintf(stderr, "--late-mode: hog or input\n");
        return 2;
    }
    late_input = strcmp(mode, "input") == 0;
    if (nbytes < (long)sizeof(float)) nbytes = sizeof(float);
    if (opt(argc, argv, "--hog-child", 0)) return run_hog(argc, argv);
    long all = opt(argc, argv, "--all-in-one", 0);
    if (all) return run_all_in_one(all);
    if (getenv("RANK")) return run_rank();
    return run_parent(argv);
}
