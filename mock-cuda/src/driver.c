/* Mock CUDA driver (soname libcuda.so.1). The "GPU" is one worker thread per stream: launches and
 * async copies enqueue work with a simulated duration, synchronize calls block until the stream's
 * queue has drained up to the point they were called at. The device allocator is a first-fit free
 * list; with MOCK_CUDA_FRAG=1 freed blocks never coalesce and every block visited costs
 * MOCK_CUDA_FRAG_NS, so allocation latency grows as the heap fragments.
 *
 * Environment: MOCK_CUDA_KERNEL_US (default kernel duration, default 50), MOCK_CUDA_BW_MBPS (copy
 * bandwidth in MB/s, default 10000), MOCK_CUDA_FRAG, MOCK_CUDA_FRAG_NS (default 200),
 * MOCK_CUDA_SYNC=spin (synchronize calls busy-poll on the CPU like cudaDeviceScheduleSpin, the real
 * runtime's choice when it has fewer contexts than cores; default: block on a condition variable
 * like cudaDeviceScheduleBlockingSync). */
#define _GNU_SOURCE
#include "mock_cuda.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))
#define QCAP 1024 /* like the real launch queue: launches block when 1024 are pending */

struct CUstream_st {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t dur[QCAP];
    uint64_t submitted, completed; /* sequence numbers */
    uint64_t busy_until;           /* ns, CLOCK_MONOTONIC: when the last queued item ends */
    pthread_t worker;
    struct CUstream_st *next;
};
struct CUevent_st { CUstream stream; uint64_t seq; };

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *g_streams;
static struct CUstream_st *g_default;
static uint64_t g_kernel_ns = 50000, g_bw_mbps = 10000, g_frag_ns = 200;
static int g_frag, g_spin_sync;
static __thread CUstream t_ptsz;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
static void sleep_until(uint64_t t) {
    struct timespec ts = {.tv_sec = t / 1000000000ull, .tv_nsec = t % 1000000000ull};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
}
static void spin_ns(uint64_t ns) {
    uint64_t end = now_ns() + ns;
    while (now_ns() < end) {}
}
static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static void *stream_worker(void *arg) {
    CUstream s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->completed == s->submitted) pthread_cond_wait(&s->cv, &s->mu);
        uint64_t d = s->dur[s->completed % QCAP];
        pthread_mutex_unlock(&s->mu);
        if (d) sleep_until(now_ns() + d); /* the GPU runs the kernel */
        pthread_mutex_lock(&s->mu);
        __atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&s->cv);
    }
    return NULL;
}

static CUstream stream_new(void) {
    CUstream s = calloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_create(&s->worker, NULL, stream_worker, s);
    pthread_setname_np(s->worker, "mockgpu-stream");
    pthread_mutex_lock(&g_mu);
    s->next = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_mu);
    return s;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_once(void) {
    g_kernel_ns = env_u64("MOCK_CUDA_KERNEL_US", 50) * 1000;
    g_bw_mbps = env_u64("MOCK_CUDA_BW_MBPS", 10000);
    if (!g_bw_mbps) g_bw_mbps = 1;
    g_frag = (int)env_u64("MOCK_CUDA_FRAG", 0);
    g_frag_ns = env_u64("MOCK_CUDA_FRAG_NS", 200);
    const char *sync = getenv("MOCK_CUDA_SYNC");
    g_spin_sync = sync && !strcmp(sync, "spin");
    g_default = stream_new();
}
static CUstream resolve(CUstream s) {
    pthread_once(&g_once, init_once);
    return s ? s : g_default;
}

/* Enqueue `d` ns of GPU work; returns the sequence number it completes at. */
static uint64_t enqueue(CUstream s, uint64_t d) {
    pthread_mutex_lock(&s->mu);
    while (s->submitted - s->completed >= QCAP) pthread_cond_wait(&s->cv, &s->mu);
    s->dur[s->submitted % QCAP] = d;
    uint64_t seq = ++s->submitted;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return seq;
}
/* cudaDeviceScheduleSpin: poll the completion counter on the CPU until the GPU catches up. */
static void spin_until_completed(CUstream s, uint64_t seq) {
    while (__atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) < seq) __builtin_ia32_pause();
}
static void wait_seq(CUstream s, uint64_t seq) {
    if (g_spin_sync) { spin_until_completed(s, seq); return; }
    pthread_mutex_lock(&s->mu);
    while (s->completed < seq) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
static void sync_stream(CUstream s) {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->submitted;
    if (g_spin_sync) { pthread_mutex_unlock(&s->mu); spin_until_completed(s, seq); return; }
    while (s->completed < seq) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
static uint64_t copy_ns(size_t bytes) { return (uint64_t)bytes * 1000ull / g_bw_mbps; }
static CUresult copy_sync(size_t bytes) {
    CUstream s = resolve(NULL);
    wait_seq(s, enqueue(s, copy_ns(bytes)));
    return 0;
}
static CUresult copy_async(size_t bytes, CUstream s) {
    enqueue(resolve(s), copy_ns(bytes));
    return 0;
}

/* ---- kernel registry: simulated duration per function pointer ---- */
#define KCAP 256
static struct { const void *f; uint64_t ns; } g_kernels[KCAP];
static int g_nkernels;
API void mockcuSetKernelNs(const void *func, uint64_t ns) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_nkernels; i++)
        if (g_kernels[i].f == func) { g_kernels[i].ns = ns; pthread_mutex_unlock(&g_mu); return; }
    if (g_nkernels < KCAP) { g_kernels[g_nkernels].f = func; g_kernels[g_nkernels++].ns = ns; }
    pthread_mutex_unlock(&g_mu);
}
static uint64_t kernel_ns(const void *f) {
    for (int i = 0; i < g_nkernels; i++)
        if (g_kernels[i].f == f) return g_kernels[i].ns;
    return g_kernel_ns;
}
API CUstream mockcuPerThreadStream(void) {
    pthread_once(&g_once, init_once);
    if (!t_ptsz) t_ptsz = stream_new();
    return t_ptsz;
}

/* ---- device allocator ---- */
struct block { CUdeviceptr addr; size_t size; struct block *next; };
static struct block *g_free, *g_used;
static CUdeviceptr g_brk = 0x7f0000000000ull;
static pthread_mutex_t g_amu = PTHREAD_MUTEX_INITIALIZER;

static CUresult dev_alloc(CUdeviceptr *out, size_t bytes) {
    pthread_once(&g_once, init_once);
    if (!out) return 1;
    if (bytes == 0) { *out = 0; return 0; }
    size_t sz = (bytes + 255) & ~(size_t)255;
    pthread_mutex_lock(&g_amu);
    struct block **pp = &g_free, *b = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if (g_frag) spin_ns(g_frag_ns);
        if ((*pp)->size >= sz) { b = *pp; break; }
    }
    if (b) {
        if (g_frag && b->size > sz) { /* split: the remainder stays on the free list as a sliver */
            struct block *rest = malloc(sizeof(*rest));
            rest->addr = b->addr + sz; rest->size = b->size - sz; rest->next = b->next;
            b->size = sz;
            *pp = rest;
        } else {
            *pp = b->next;
        }
    } else {
        b = malloc(sizeof(*b));
        b->addr = g_brk; b->size = sz;
        g_brk += sz;
    }
    b->next = g_used;
    g_used = b;
    *out = b->addr;
    pthread_mutex_unlock(&g_amu);
    return 0;
}
static CUresult dev_free(CUdeviceptr p) {
    if (!p) return 0;
    pthread_mutex_lock(&g_amu);
    for (struct block **pp = &g_used; *pp; pp = &(*pp)->next) {
        if ((*pp)->addr == p) {
            struct block *b = *pp;
            *pp = b->next;
            b->next = g_free; /* never coalesced: fragmentation when sizes vary */
            g_free = b;
            pthread_mutex_unlock(&g_amu);
            return 0;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}

/* ---- exported driver API ---- */
API CUresult cuInit(unsigned int flags) { (void)flags; pthread_once(&g_once, init_once); return 0; }
API CUresult cuDriverGetVersion(int *v) { if (v) *v = 12040; return 0; }
API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                            unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream,
                            void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params; (void)extra;
    CUstream s = resolve(stream);
    if (!f) return 400; /* CUDA_ERROR_INVALID_HANDLE */
    uint64_t ns = kernel_ns(f);
    if (ns) enqueue(s, ns); /* a zero-length kernel completes at once (benchmarks) */
    return 0;
}
API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) { return dev_alloc(dptr, bytes); }
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    (void)flags;
    return dev_alloc(dptr, bytes);
}
API CUresult cuMemFree_v2(CUdeviceptr dptr) { return dev_free(dptr); }
API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { (void)d; (void)s; return copy_sync(n); }
API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)d; (void)s; return copy_async(n, st);
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { (void)d; (void)s; return copy_sync(n); }
API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { (void)d; (void)s; return copy_sync(n); }
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { (void)d; (void)s; return copy_sync(n); }
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    (void)d; (void)s; return copy_async(n, st);
}
API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
    (void)d; (void)s; return copy_async(n, st);
}
API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) {
    return p ? copy_sync(p->WidthInBytes * p->Height) : 1;
}
API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream st) {
    return p ? copy_async(p->WidthInBytes * p->Height, st) : 1;
}
API CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) {
    (void)d; (void)dc; (void)s; (void)sc; return copy_sync(n);
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) {
    (void)d; (void)dc; (void)s; (void)sc; return copy_async(n, st);
}
API CUresult cuCtxSynchronize(void) {
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_mu);
    struct CUstream_st *list = g_streams;
    pthread_mutex_unlock(&g_mu);
    for (struct CUstream_st *s = list; s; s = s->next) sync_stream(s);
    return 0;
}
API CUresult cuStreamSynchronize(CUstream stream) { sync_stream(resolve(stream)); return 0; }
API CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    (void)flags;
    pthread_once(&g_once, init_once);
    if (!stream) return 1;
    *stream = stream_new();
    return 0;
}
API CUresult cuStreamDestroy_v2(CUstream stream) { (void)stream; return 0; /* workers live until exit */ }
API CUresult cuEventCreate(CUevent *ev, unsigned int flags) {
    (void)flags;
    if (!ev) return 1;
    *ev = calloc(1, sizeof(**ev));
    return 0;
}
API CUresult cuEventRecord(CUevent ev, CUstream stream) {
    if (!ev) return 400;
    CUstream s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    ev->stream = s;
    ev->seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return 0;
}
API CUresult cuEventSynchronize(CUevent ev) {
    if (!ev) return 400;
    if (ev->stream) wait_seq(ev->stream, ev->seq);
    return 0;
}
API CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    /* a graph is a batch of kernels: its handle's low 16 bits are the kernel count in this mock */
    uintptr_t n = (uintptr_t)exec & 0xffff;
    CUstream s = resolve(stream);
    if (!exec) return 400;
    enqueue(s, n * g_kernel_ns);
    return 0;
}
