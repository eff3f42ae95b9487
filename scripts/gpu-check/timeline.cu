// The device's own timeline on a real GPU, for Causeway's acceptance run (scripts/gpu-check.sh, step
// `timeline`): a training-like loop whose kernels time themselves with the GPU's %globaltimer, so
// what CUPTI reported (stored by `causeway trace --gpu-timeline` in gpu_ops) can be checked against
// what the kernels saw, with two idle gaps of the GPU planted on the host.
//
//   timeline CSV [--steps N (800)] [--kernel-us U (1000)] [--host-us H (100)] [--cpu C (-1: no pin)]
//            [--sleep-at S (300)] [--hog-at S (600)] [--stall-ms M (38)]
//   timeline --empty N
//
// Loop mode: one stream, one launch thread (the main thread, pinned to CPU C after the CUDA setup, so
// CUDA's own threads and an injection library's keep every CPU). Step s: `--host-us` of on-CPU host
// work (spinning on the thread's CPU clock), one launch of tl_step<<<1, 1>>> (it busy-waits U us on
// %globaltimer and stores its own %globaltimer at start and end at index s), cudaStreamSynchronize.
// Planted: at step --sleep-at, nanosleep M ms before the launch; at step --hog-at, a child process
// named `backup-rsync` (forked before any CUDA call, pinned to C, SCHED_FIFO priority 1) spins M ms
// from the start of the step (a pipe write), so the launch thread is runnable and not running. Both
// leave the GPU idle about M ms ending at that step's kernel. Traced with a label socket
// ($CAUSEWAY_LABELS), each step is labeled with its number and CLOCK_MONOTONIC span, so the gaps are
// placed in steps. At the end the globaltimer pairs are copied back and written to CSV as
// `step,start_ns,end_ns`.
//
// Output: `PID p`, `LABELS on|off`, `STEPS n`, `LOOP_S seconds`, `CSV path`, `DONE`; a hog without
// the privilege for SCHED_FIFO says so on stderr (it then shares the CPU: the check will see it).
//
// Empty mode: N launches of an empty kernel, no synchronization between them (after 1000 warm-up
// launches and a sync): `EMPTY_LAUNCHES_PER_S x` (N / the launch loop's time) and
// `EMPTY_TOTAL_PER_S x` (N / the loop and the final sync): the cost per launch, traced or not.
//
// Build: nvcc -O2 -arch=sm_90 -cudart=shared -o timeline timeline.cu
#include <cuda_runtime.h>

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "FAILED %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One step's device work: busy-wait `spin_ns` on the GPU's own clock, record both ends.
__global__ void tl_step(unsigned long long *ts, int step, unsigned long long spin_ns) {
    unsigned long long t0 = globaltimer(), t = t0;
    while (t - t0 < spin_ns) t = globaltimer();
    ts[2 * step] = t0;
    ts[2 * step + 1] = t;
}

__global__ void tl_empty() {}

static long opt(int argc, char **argv, const char *name, long dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return strtol(argv[i + 1], NULL, 10);
    return dflt;
}

static uint64_t now_ns(clockid_t c = CLOCK_MONOTONIC) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// On-CPU host work: `us` of this thread's CPU time.
static void host_work(long us) {
    uint64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + (uint64_t)us * 1000;
    while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
    }
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) perror("timeline: sched_setaffinity");
}

// ---- the planted CPU hog: a forked child, woken through a pipe (as mock-cuda's gpuloop does) ----
static int g_hog_fd = -1;
static pid_t g_hog_pid;

static void hog_start(int cpu, long ms) {
    int fds[2];
    if (pipe(fds) != 0) {
        perror("timeline: pipe");
        exit(2);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p < 0) {
        perror("timeline: fork");
        exit(2);
    }
    if (p == 0) {  // backup-rsync: nothing of CUDA here (the parent has not touched it yet)
        close(fds[1]);
        prctl(PR_SET_NAME, "backup-rsync");
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (cpu >= 0) pin(cpu);
        struct sched_param sp;
        memset(&sp, 0, sizeof sp);
        sp.sched_priority = 1;
        int fifo = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
        char b;
        if (read(fds[0], &b, 1) != 1) _exit(0);  // never triggered
        uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
        while (now_ns() < end) {
        }
        _exit(fifo ? 0 : 3);
    }
    close(fds[0]);
    g_hog_fd = fds[1];
    g_hog_pid = p;
}

static void hog_trigger() {
    if (g_hog_fd >= 0 && write(g_hog_fd, "x", 1) != 1) perror("timeline: hog pipe");
}

static void hog_reap() {
    if (g_hog_pid <= 0) return;
    close(g_hog_fd);  // an untriggered hog reads EOF and exits
    int st = 0;
    waitpid(g_hog_pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
        fprintf(stderr, "timeline: backup-rsync ran without SCHED_FIFO (no permission): it shared the CPU\n");
}

// ---- step labels over $CAUSEWAY_LABELS (one JSON line per step, CLOCK_MONOTONIC) ----
static int g_labels = -1;

static void labels_open() {
    const char *path = getenv("CAUSEWAY_LABELS");
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    if (!path || !*path || strlen(path) >= sizeof(a.sun_path)) return;
    a.sun_family = AF_UNIX;
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        g_labels = fd;
    else if (fd >= 0)
        close(fd);
}

static void label_step(long s, uint64_t begin, uint64_t end) {
    if (g_labels < 0) return;
    char line[160];
    int n = snprintf(line, sizeof(line), "{\"kind\":\"step\",\"index\":%ld,\"begin_ns\":%llu,\"end_ns\":%llu}\n", s,
                     (unsigned long long)begin, (unsigned long long)end);
    if (write(g_labels, line, (size_t)n) != n) {
        close(g_labels);
        g_labels = -1;
    }
}

static int empty_mode(long n) {
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    for (int i = 0; i < 1000; i++) tl_empty<<<1, 1, 0, st>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(st));
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) tl_empty<<<1, 1, 0, st>>>();
    uint64_t t1 = now_ns();
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(st));
    uint64_t t2 = now_ns();
    double loop = (double)(t1 - t0) / 1e9, total = (double)(t2 - t0) / 1e9;
    printf("EMPTY %ld launches: launch loop %.4f s, with the final sync %.4f s\n", n, loop, total);
    printf("EMPTY_LAUNCHES_PER_S %.1f\n", loop > 0 ? n / loop : 0.0);
    printf("EMPTY_TOTAL_PER_S %.1f\n", total > 0 ? n / total : 0.0);
    CHECK(cudaStreamDestroy(st));
    printf("DONE\n");
    return 0;
}

int main(int argc, char **argv) {
    printf("PID %d\n", (int)getpid());
    long empty = opt(argc, argv, "--empty", -1);
    if (empty >= 0) return empty_mode(empty);
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: timeline CSV [--steps N] [--kernel-us U] [--host-us H] [--cpu C] [--sleep-at S] "
                        "[--hog-at S] [--stall-ms M] | timeline --empty N\n");
        return 2;
    }
    const char *csv = argv[1];
    long steps = opt(argc, argv, "--steps", 800), kernel_us = opt(argc, argv, "--kernel-us", 1000);
    long host_us = opt(argc, argv, "--host-us", 100), cpu = opt(argc, argv, "--cpu", -1);
    long sleep_at = opt(argc, argv, "--sleep-at", 300), hog_at = opt(argc, argv, "--hog-at", 600);
    long stall_ms = opt(argc, argv, "--stall-ms", 38);
    if (steps <= 0 || kernel_us < 0 || host_us < 0 || stall_ms < 0) {
        fprintf(stderr, "timeline: bad option\n");
        return 2;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int pin_cpu = cpu < 0 ? -1 : (int)(cpu % (ncpu > 0 ? ncpu : 1));
    if (hog_at >= 0 && hog_at < steps) hog_start(pin_cpu, stall_ms);  // before any CUDA call

    CHECK(cudaSetDevice(0));
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    unsigned long long *d_ts = nullptr;
    size_t bytes = (size_t)steps * 2 * sizeof(unsigned long long);
    CHECK(cudaMalloc(&d_ts, bytes));
    CHECK(cudaMemsetAsync(d_ts, 0, bytes, st));
    CHECK(cudaStreamSynchronize(st));
    if (pin_cpu >= 0) pin(pin_cpu);
    labels_open();
    printf("LABELS %s\n", g_labels >= 0 ? "on" : "off");
    fflush(stdout);

    uint64_t loop0 = now_ns();
    for (long s = 0; s < steps; s++) {
        uint64_t begin = now_ns();
        if (s == hog_at) hog_trigger();
        host_work(host_us);
        if (s == sleep_at) {
            struct timespec ts = {(time_t)(stall_ms / 1000), (long)(stall_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        tl_step<<<1, 1, 0, st>>>(d_ts, (int)s, (unsigned long long)kernel_us * 1000ull);
        CHECK(cudaGetLastError());
        CHECK(cudaStreamSynchronize(st));
        label_step(s, begin, now_ns());
    }
    double loop_s = (double)(now_ns() - loop0) / 1e9;

    std::vector<unsigned long long> h((size_t)steps * 2);
    CHECK(cudaMemcpy(h.data(), d_ts, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d_ts));
    CHECK(cudaStreamDestroy(st));
    hog_reap();
    FILE *f = fopen(csv, "w");
    if (!f) {
        perror(csv);
        return 2;
    }
    fprintf(f, "step,start_ns,end_ns\n");
    for (long s = 0; s < steps; s++) fprintf(f, "%ld,%llu,%llu\n", s, h[2 * s], h[2 * s + 1]);
    if (fclose(f) != 0) {
        perror(csv);
        return 2;
    }
    printf("STEPS %ld\nLOOP_S %.4f\nCSV %s\nDONE\n", steps, loop_s, csv);
    return 0;
}
