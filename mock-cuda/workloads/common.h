/* Shared by the mock workloads: option parsing, exact per-call counters, and the report every
 * workload prints at exit (`CALLS <op> <n>` lines that tests compare against the trace).
 * Counters: the fixed table (CALL(C_LAUNCH, ...)) of the first workloads, and counters by symbol
 * name (CALLN("cudaLaunchKernelExC", ...)) for everything else; a workload defined with
 * WL_NAMED_ONLY prints only the named ones (the calls it made, in the order it first made them). */
#ifndef WORKLOAD_COMMON_H
#define WORKLOAD_COMMON_H
#define _GNU_SOURCE
#include "../src/mock_cuda.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { C_LAUNCH, C_LAUNCH_PTSZ, C_MEMCPY, C_MEMCPY_ASYNC, C_MEMCPY_ASYNC_PTSZ, C_MEMCPY2D, C_MEMCPY2D_ASYNC,
       C_PEER, C_PEER_ASYNC, C_MALLOC, C_MALLOC_MANAGED, C_FREE, C_STREAM_SYNC, C_STREAM_SYNC_PTSZ,
       C_DEVICE_SYNC, C_EVENT_SYNC, C_GRAPH_LAUNCH, C_N };
#ifndef WL_NAMED_ONLY
static const char *C_NAMES[C_N] = {
    "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz",
    "cudaMemcpy2D", "cudaMemcpy2DAsync", "cudaMemcpyPeer", "cudaMemcpyPeerAsync", "cudaMalloc",
    "cudaMallocManaged", "cudaFree", "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz",
    "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaGraphLaunch"};
static atomic_ulong g_calls[C_N];
#define CALL(idx, expr) do { if ((expr) != 0) atomic_fetch_add(&g_errors, 1); atomic_fetch_add(&g_calls[idx], 1); } while (0)
#endif
static atomic_ulong g_errors;

/* counters by the name of the symbol called */
#define WL_NAMED_CAP 96
static struct { const char *name; atomic_ulong n; } g_named[WL_NAMED_CAP];
static int g_nnamed;
static pthread_mutex_t g_named_mu = PTHREAD_MUTEX_INITIALIZER;
static inline void wl_count(const char *name) {
    int n = __atomic_load_n(&g_nnamed, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (strcmp(g_named[i].name, name) == 0) { atomic_fetch_add(&g_named[i].n, 1); return; }
    pthread_mutex_lock(&g_named_mu);
    n = g_nnamed;
    int i = 0;
    while (i < n && strcmp(g_named[i].name, name) != 0) i++;
    if (i == n && n < WL_NAMED_CAP) {
        g_named[n].name = name;
        __atomic_store_n(&g_nnamed, n + 1, __ATOMIC_RELEASE);
    }
    if (i < WL_NAMED_CAP) atomic_fetch_add(&g_named[i].n, 1);
    pthread_mutex_unlock(&g_named_mu);
}
/* one call of `name`; a nonzero result counts as an error */
#define CALLN(name, expr) do { if ((expr) != 0) atomic_fetch_add(&g_errors, 1); wl_count(name); } while (0)
/* one call of `name` whose result the caller judges (expected failures, polls): stored in `var` */
#define CALLR(name, var, expr) do { (var) = (expr); wl_count(name); } while (0)

static inline long opt(int argc, char **argv, const char *name, long dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return strtol(argv[i + 1], NULL, 10);
    char env[64];
    snprintf(env, sizeof env, "WL_%s", name + 2); /* --kernel-us -> WL_kernel-us */
    const char *v = getenv(env);
    return v ? strtol(v, NULL, 10) : dflt;
}
static inline uint64_t wl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
static inline void wl_sleep_us(long us) {
    if (us <= 0) return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}
static inline void wl_spin_ns(uint64_t ns) {
    uint64_t end = wl_now_ns() + ns;
    while (wl_now_ns() < end) {}
}
static inline void wl_thread(const char *name) {
    pthread_setname_np(pthread_self(), name);
    printf("THREAD %s %ld\n", name, (long)syscall(SYS_gettid));
    fflush(stdout);
}
/* `--name value` or WL_name, as a string */
static inline const char *opt_str(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    char env[64];
    snprintf(env, sizeof env, "WL_%s", name + 2);
    const char *v = getenv(env);
    return v ? v : dflt;
}
/* What every line of the report starts with: nothing, except where processes share one stdout
 * (nccl_ranks: "RANK <r> "). */
static const char *wl_prefix = "";
static void wl_report_to(FILE *f) {
    fprintf(f, "%sPID %d\n", wl_prefix, getpid());
#ifndef WL_NAMED_ONLY
    for (int i = 0; i < C_N; i++) fprintf(f, "%sCALLS %s %lu\n", wl_prefix, C_NAMES[i], (unsigned long)g_calls[i]);
#endif
    for (int i = 0; i < g_nnamed; i++)
        fprintf(f, "%sCALLS %s %lu\n", wl_prefix, g_named[i].name, (unsigned long)g_named[i].n);
    fprintf(f, "%sERRORS %lu\n", wl_prefix, (unsigned long)g_errors);
    fflush(f);
}
static inline void wl_report(void) { wl_report_to(stdout); }
#endif
