/* gpuloop: a training loop on the runtime API, for the GPU timeline (build/gpuloop; against the
 * CUDA 13 runtime build/cu13/gpuloop). One launch thread (the main thread, comm "gpuloop") runs
 * `--steps` steps on one created stream (CUPTI stream id 13); each step: `--host-us` of on-CPU host
 * work (spinning on the thread's CPU clock, so a preempted step takes longer), then `--kernels`
 * cudaLaunchKernel of the registered kernels in turn (their duration: MOCK_CUDA_KERNEL_US, default
 * 50), then, with `--depth 0`, cudaStreamSynchronize (like `loss.item()`), or with `--depth D` > 0 a
 * cudaEventRecord, the host running ahead: before launching step s it cudaEventSynchronize's step
 * s-D's event.
 *
 * Options (`--name value`, or WL_name in the environment; a step number < 0 means never):
 *   --steps N (1000)  --kernels K (4)  --host-us H (200)  --depth D (0)
 *   --device G (-1)   cudaSetDevice(G) first (-1: the default device, 0)
 *   --cpu C (1)       the launch thread is pinned to CPU C (modulo the CPUs online), after the CUDA
 *                     setup (cuInit, stream, events), so the threads that started keep every CPU;
 *                     the mock GPU's stream workers avoid CPU C (MOCK_GPU_CPUS, unless already set)
 *   --hog-at S --hog-ms M (100)   a stall planted at step S: a child process named `backup-rsync`
 *                     (forked at start, prctl PR_SET_NAME), pinned to the launch thread's CPU, with
 *                     SCHED_FIFO priority 1, spins M ms from the moment the launch thread reaches
 *                     step S (a pipe write at the start of the step's host work), so the launch
 *                     thread is runnable and not running; without the privilege for SCHED_FIFO it
 *                     spins at normal priority (sharing the CPU) and a line on stderr says so
 *   --sleep-at S --sleep-ms M (100)   nanosleep M ms before step S's launches
 *   --drain-at S      cudaStreamSynchronize before step S's host work (with D > 0 the queue empties
 *                     and the step's host work becomes GPU idle time)
 *   --foreign-at S --foreign-steps F (10)   steps S .. S+F-1: the program itself is a second CUPTI
 *                     client, like torch.profiler: at step S (after a cudaStreamSynchronize, so its
 *                     window holds exactly its own kernels) it loads the libcupti of its runtime's
 *                     major (RTLD_NOLOAD first, else beside the runtime: no LD_LIBRARY_PATH needed),
 *                     registers its own buffer callbacks (taking the one registration from whoever
 *                     had it) and enables CONCURRENT_KERNEL; at step S+F (or the end), after a
 *                     cudaStreamSynchronize, cuptiActivityFlushAll(1) and disables CONCURRENT_KERNEL
 *                     (for everyone), and prints `foreign client received N kernels`: the kernel
 *                     records it got that started in its window, F x K when nobody takes the
 *                     registration back meanwhile. Buffers it did not allocate are not freed.
 *   --spin-ms M (0)   after the CUDA setup, M ms on the CPU making no system call (the clock read
 *                     through the vDSO): a thread a ptrace attach cannot take until it ends
 *   --seccomp 1       install an allow-everything seccomp filter first (Seccomp: 2 in its status)
 * Traced with a label socket ($CAUSEWAY_LABELS), each step is labeled with its number and span (a
 * socket not there yet, as for a tracer that attaches later, is tried again every 250 ms).
 * Output: that line, and at the end `gpuloop: N steps, K kernels each, done`; the same whether or not
 * an injection library (CUDA_INJECTION64_PATH) is loaded. Exit 0 (2 on bad use or a CUDA error). */
#include "kernels.h"
#include "cupti_client.h"
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

__attribute__((noinline, used)) void gpuloop_forward_gemm(void) { __asm__ volatile("nop"); }
__attribute__((noinline, used)) void gpuloop_backward_gemm(void) { __asm__ volatile("nop; nop"); }
__attribute__((noinline, used)) void gpuloop_layernorm(void) { __asm__ volatile("nop; nop; nop"); }
__attribute__((noinline, used)) void gpuloop_adam_step(void) { __asm__ volatile("nop; nop; nop; nop"); }
static struct wl_kernel K[4] = {{gpuloop_forward_gemm, "_Z20gpuloop_forward_gemmPKfS0_Pfi", NULL},
                                {gpuloop_backward_gemm, "_Z21gpuloop_backward_gemmPKfS0_Pfi", NULL},
                                {gpuloop_layernorm, "_Z17gpuloop_layernormPfPKfi", NULL},
                                {gpuloop_adam_step, "_Z17gpuloop_adam_stepPfPKffi", NULL}};
__attribute__((constructor)) static void register_kernels(void) { wl_register(K, 4); }

#ifdef MOCK_CUDA13
#define RUNTIME_MAJOR 13
#else
#define RUNTIME_MAJOR 12
#endif

static void check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "gpuloop: %s failed: %d\n", what, e);
    exit(2);
}
static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) perror("gpuloop: sched_setaffinity");
}
/* on-CPU host work: `us` of this thread's CPU time */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static void host_work(long us) {
    uint64_t end = thread_cpu_ns() + (uint64_t)us * 1000;
    while (thread_cpu_ns() < end) {}
}

/* ---- the planted CPU hog: a forked child, woken through a pipe ---- */
static int g_hog_fd = -1;
static pid_t g_hog_pid;
static void hog_start(int cpu, long ms) {
    int fds[2];
    if (pipe(fds) != 0) { perror("gpuloop: pipe"); exit(2); }
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p < 0) { perror("gpuloop: fork"); exit(2); }
    if (p == 0) { /* backup-rsync: nothing of CUDA here (the parent has not touched it yet) */
        close(fds[1]);
        prctl(PR_SET_NAME, "backup-rsync");
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        pin(cpu);
        struct sched_param sp = {.sched_priority = 1};
        int fifo = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
        char b;
        if (read(fds[0], &b, 1) != 1) _exit(0); /* never triggered */
        wl_spin_ns((uint64_t)ms * 1000000ull);
        _exit(fifo ? 0 : 3);
    }
    close(fds[0]);
    g_hog_fd = fds[1];
    g_hog_pid = p;
}
static void hog_trigger(void) {
    if (g_hog_fd >= 0 && write(g_hog_fd, "x", 1) != 1) perror("gpuloop: hog pipe");
}
static void hog_reap(void) {
    if (g_hog_pid <= 0) return;
    close(g_hog_fd); /* an untriggered hog reads EOF and exits */
    int st = 0;
    waitpid(g_hog_pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
        fprintf(stderr, "gpuloop: backup-rsync ran without SCHED_FIFO (no permission): it shared the CPU\n");
}

/* ---- the foreign CUPTI client ---- */
#define F_BUF (1 << 20)
#define F_MAXBUF 256
static struct cupti_api g_f;
static pthread_mutex_t g_f_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *g_f_bufs[F_MAXBUF]; /* the buffers it allocated (others' it leaves alone) */
static int g_f_counting, g_f_active;
static uint64_t g_f_from;
static long g_f_kernels;
static void f_request(uint8_t **buffer, size_t *size, size_t *max) {
    *buffer = NULL; *size = 0; *max = 0;
    uint8_t *b = aligned_alloc(8, F_BUF);
    pthread_mutex_lock(&g_f_mu);
    int i = 0;
    while (i < F_MAXBUF && g_f_bufs[i]) i++;
    if (b && i < F_MAXBUF) { g_f_bufs[i] = b; *buffer = b; *size = F_BUF; } else { free(b); }
    pthread_mutex_unlock(&g_f_mu);
}
static void f_complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    mock_cupti_record *r = NULL;
    pthread_mutex_lock(&g_f_mu);
    while (g_f.GetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        if (g_f_counting && ((mock_cupti_kernel *)r)->start >= g_f_from) g_f_kernels++;
    }
    for (int i = 0; i < F_MAXBUF; i++)
        if (g_f_bufs[i] == buffer) { g_f_bufs[i] = NULL; free(buffer); break; }
    pthread_mutex_unlock(&g_f_mu);
}
static void foreign_begin(cudaStream_t st) {
    check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    if (!g_f.lib && cupti_load(&g_f, RUNTIME_MAJOR, "cudaLaunchKernel") != 0) exit(2);
    CUptiResult r = g_f.RegisterCallbacks(f_request, f_complete);
    if (r == CUPTI_SUCCESS) r = g_f.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    uint64_t from = 0;
    if (r == CUPTI_SUCCESS) r = g_f.GetTimestamp(&from);
    if (r != CUPTI_SUCCESS) fprintf(stderr, "gpuloop: foreign client: CUPTI error %d\n", r);
    pthread_mutex_lock(&g_f_mu);
    g_f_from = from;
    g_f_kernels = 0;
    g_f_counting = r == CUPTI_SUCCESS;
    pthread_mutex_unlock(&g_f_mu);
    g_f_active = 1;
}
static void foreign_end(cudaStream_t st) {
    check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    g_f.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    g_f.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    pthread_mutex_lock(&g_f_mu);
    g_f_counting = 0;
    long n = g_f_kernels;
    pthread_mutex_unlock(&g_f_mu);
    g_f_active = 0;
    printf("foreign client received %ld kernels\n", n);
    fflush(stdout);
}

/* Step labels, when traced with a label socket ($CAUSEWAY_LABELS): one JSON line per step with its
 * CLOCK_MONOTONIC span, as Python's `with causeway.step(i):` sends them. No socket: nothing. */
static int g_labels = -1;
static void labels_open(void) {
    const char *path = getenv("CAUSEWAY_LABELS");
    if (!path || !*path || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) return;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) g_labels = fd;
    else if (fd >= 0) close(fd);
}
static void label_step(long s, uint64_t begin, uint64_t end) {
    static uint64_t tried_ns;
    if (g_labels < 0 && end - tried_ns >= 250000000ull) { /* a tracer that came later: again every 250 ms */
        tried_ns = end;
        labels_open();
    }
    if (g_labels < 0) return;
    char line[160];
    int n = snprintf(line, sizeof(line), "{\"kind\":\"step\",\"index\":%ld,\"begin_ns\":%llu,\"end_ns\":%llu}\n", s,
                     (unsigned long long)begin, (unsigned long long)end);
    /* MSG_NOSIGNAL: a tracer that ended before the loop is no SIGPIPE */
    if (send(g_labels, line, (size_t)n, MSG_NOSIGNAL) != n) { close(g_labels); g_labels = -1; }
}

int main(int argc, char **argv) {
    long steps = opt(argc, argv, "--steps", 1000), kernels = opt(argc, argv, "--kernels", 4);
    long host_us = opt(argc, argv, "--host-us", 200), depth = opt(argc, argv, "--depth", 0);
    long cpu = opt(argc, argv, "--cpu", 1);
    long hog_at = opt(argc, argv, "--hog-at", -1), hog_ms = opt(argc, argv, "--hog-ms", 100);
    long sleep_at = opt(argc, argv, "--sleep-at", -1), sleep_ms = opt(argc, argv, "--sleep-ms", 100);
    long drain_at = opt(argc, argv, "--drain-at", -1);
    long foreign_at = opt(argc, argv, "--foreign-at", -1), foreign_steps = opt(argc, argv, "--foreign-steps", 10);
    long device = opt(argc, argv, "--device", -1);
    long spin_ms = opt(argc, argv, "--spin-ms", 0), with_seccomp = opt(argc, argv, "--seccomp", 0);
    if (with_seccomp) {
        struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
        struct sock_fprog prog = {1, allow};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
            perror("gpuloop: seccomp");
            return 2;
        }
    }
    if (steps < 0 || kernels < 0 || host_us < 0 || depth < 0 || hog_ms < 0 || sleep_ms < 0 || foreign_steps < 0) {
        fprintf(stderr, "gpuloop: negative option\n");
        return 2;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int pin_cpu = (int)((cpu < 0 ? 0 : cpu) % (ncpu > 0 ? ncpu : 1));
    if (hog_at >= 0) hog_start(pin_cpu, hog_ms); /* before any CUDA call: the child is a plain process */
    /* the mock GPU stays off the launch thread's CPU (unless told otherwise): the hog planted there
     * stalls the host, as it would beside a real GPU, not the "GPU" itself */
    if (ncpu > 1 && !getenv("MOCK_GPU_CPUS")) {
        char cpus[4096] = "";
        size_t at = 0;
        for (long c = 0; c < ncpu && at + 16 < sizeof(cpus); c++)
            if (c != pin_cpu) at += (size_t)snprintf(cpus + at, sizeof(cpus) - at, "%s%ld", at ? "," : "", c);
        setenv("MOCK_GPU_CPUS", cpus, 1);
    }

    if (device >= 0) check(cudaSetDevice((int)device), "cudaSetDevice");
    cudaStream_t st;
    check(cudaStreamCreate(&st), "cudaStreamCreate");
    cudaEvent_t *ev = calloc((size_t)depth + 1, sizeof(*ev));
    for (long i = 0; depth > 0 && i <= depth; i++) check(cudaEventCreate(&ev[i]), "cudaEventCreate");
    /* pinned after the setup: the threads CUDA started (the mock GPU's stream workers, an injection
     * library's) keep every CPU, as a real GPU does not run on the launch thread's CPU */
    pin(pin_cpu);
    if (spin_ms > 0) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0); /* the vDSO: no system call */
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < spin_ms);
    }
    labels_open();
    dim3 grid = {264, 1, 1}, block = {256, 1, 1};
    for (long s = 0; s < steps; s++) {
        uint64_t step_begin = wl_now_ns();
        if (s == foreign_at) foreign_begin(st);
        if (g_f_active && s == foreign_at + foreign_steps) foreign_end(st);
        if (s == drain_at) check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        if (s == hog_at) hog_trigger();
        host_work(host_us);
        if (s == sleep_at) wl_sleep_us(sleep_ms * 1000);
        if (depth > 0 && s >= depth) check(cudaEventSynchronize(ev[(s - depth) % (depth + 1)]), "cudaEventSynchronize");
        for (long k = 0; k < kernels; k++) check(wl_launch(&K[k % 4], grid, block, NULL, 0, st), "cudaLaunchKernel");
        if (depth == 0) check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        else check(cudaEventRecord(ev[s % (depth + 1)], st), "cudaEventRecord");
        label_step(s, step_begin, wl_now_ns());
    }
    if (g_f_active) foreign_end(st);
    check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    hog_reap();
    printf("gpuloop: %ld steps, %ld kernels each, done\n", steps, kernels);
    return 0;
}
