/* inject_probe: a minimal CUDA injection library (build/inject_probe.so; build/cu13/inject_probe.so)
 * for the mock's self-test, loaded by the mock driver's first cuInit through CUDA_INJECTION64_PATH.
 * InitializeInjection appends `InitializeInjection <pid>` to the file MOCK_INJECT_MARKER names (if
 * set) and returns MOCK_INJECT_RET (default 1). With MOCK_INJECT_CUPTI=1 it is also a CUPTI client,
 * as the real injection library is: it loads the libcupti beside the driver (libcupti.so.13 when
 * MOCK_INJECT_MAJOR=13, else .12), registers buffer callbacks, enables CONCURRENT_KERNEL and, at
 * exit, flushes and appends `kernels <n>` (the kernel records its completion callback got); with
 * MOCK_INJECT_DUMP=<file> it also enables DRIVER and SYNCHRONIZATION and writes every record it gets
 * to that file, one line each: `K <start> <end> <stream> <correlation> <name>`, `S <start> <end>
 * <stream> <type> <correlation>`, `A <start> <end> <cbid> <correlation> <thread>` (for looking at a
 * workload's timeline by hand).
 * Built with -DINJECT_NO_ENTRY it is build/inject_nosym.so: the same library without
 * InitializeInjection, which the driver must skip without harm. */
#define _GNU_SOURCE
#include "cupti_client.h"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef INJECT_NO_ENTRY
static struct cupti_api g_c;
static long g_kernels;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_dump;

static void marker(const char *fmt, long v) {
    const char *path = getenv("MOCK_INJECT_MARKER");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, fmt, v);
    fclose(f);
}
static void request(uint8_t **buffer, size_t *size, size_t *max) {
    *buffer = aligned_alloc(8, 1 << 20);
    *size = *buffer ? 1 << 20 : 0;
    *max = 0;
}
static void complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    mock_cupti_record *r = NULL;
    pthread_mutex_lock(&g_mu);
    while (g_c.GetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) g_kernels++;
        if (!g_dump) continue;
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const mock_cupti_kernel *k = (const void *)r;
            fprintf(g_dump, "K %llu %llu %u %u %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                    k->streamId, k->correlationId, k->name);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) {
            const mock_cupti_sync *y = (const void *)r;
            fprintf(g_dump, "S %llu %llu %u %u %u\n", (unsigned long long)y->start, (unsigned long long)y->end,
                    y->streamId, y->type, y->correlationId);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            const mock_cupti_api *a = (const void *)r;
            fprintf(g_dump, "A %llu %llu %u %u %u\n", (unsigned long long)a->start, (unsigned long long)a->end,
                    a->cbid, a->correlationId, a->threadId);
        }
    }
    pthread_mutex_unlock(&g_mu);
    free(buffer); /* every buffer here is malloc'd, whoever asked for it */
}
static void at_exit(void) {
    g_c.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&g_mu);
    long n = g_kernels;
    pthread_mutex_unlock(&g_mu);
    marker("kernels %ld\n", n);
    if (g_dump) fclose(g_dump);
}

__attribute__((visibility("default"))) int InitializeInjection(void) {
    marker("InitializeInjection %ld\n", (long)getpid());
    const char *cupti = getenv("MOCK_INJECT_CUPTI");
    if (cupti && !strcmp(cupti, "1")) {
        const char *major = getenv("MOCK_INJECT_MAJOR");
        if (cupti_load(&g_c, major && !strcmp(major, "13") ? 13 : 12, "cuInit") == 0 &&
            g_c.RegisterCallbacks(request, complete) == CUPTI_SUCCESS &&
            g_c.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS) {
            const char *dump = getenv("MOCK_INJECT_DUMP");
            if (dump && *dump && (g_dump = fopen(dump, "w"))) {
                g_c.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
                g_c.Enable(CUPTI_ACTIVITY_KIND_DRIVER);
                g_c.Enable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
            }
            atexit(at_exit);
        }
        else
            marker("cupti failed %ld\n", 0);
    }
    const char *ret = getenv("MOCK_INJECT_RET");
    return ret && *ret ? atoi(ret) : 1;
}
#else
__attribute__((visibility("default"))) int inject_probe_without_entry(void) { return 0; }
#endif
