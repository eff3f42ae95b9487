/* Mock CUDA driver (soname libcuda.so.1). The "GPU" is one worker thread per stream: launches and
 * async copies and memsets enqueue work with a simulated duration, synchronize calls block until the
 * stream's queue has drained up to the point they were called at, cuStreamWaitEvent enqueues a wait
 * for another stream, cuLaunchHostFunc a host function the worker calls in stream order (mock NCCL's
 * collectives are such functions, waiting for the other ranks). Stream capture
 * (cuStreamBeginCapture_v2 .. cuStreamEndCapture) diverts what a stream is given into a graph, whose
 * instantiation cuGraphLaunch replays as one item of their summed duration. The device allocator is
 * a first-fit free list over a heap of MOCK_CUDA_HEAP_MB (beyond it allocations fail with
 * CUDA_ERROR_OUT_OF_MEMORY); with MOCK_CUDA_FRAG=1 freed blocks never coalesce and every block
 * visited costs MOCK_CUDA_FRAG_NS, so allocation latency grows as the heap fragments. Modules,
 * libraries, kernels and functions are distinct heap objects; the same name asked twice of one module
 * (library) gives the same CUfunction (CUkernel).
 *
 * How a synchronize call waits is the scheduling policy (the low 3 bits of the flags) of the calling
 * thread's context: the one cuCtxCreate_v2 made current, else the primary context
 * (cuDevicePrimaryCtxSetFlags_v2, which cudaSetDeviceFlags forwards to); cuCtxSetFlags changes the
 * current one. 1 = spin (busy-poll the GPU's completion counter), 2 = yield (poll with sched_yield),
 * 4 = blocking sync (sleep on a condition variable), 0 = auto: MOCK_CUDA_SYNC decides.
 *
 * A planted slowdown (MOCK_GPU_THROTTLE, parsed by mock_gpu.h, which the mock NVML reads too): while
 * the wall clock (CLOCK_REALTIME) is inside a window for an item's device, the item's work runs
 * `factor` times slower, pro rata for an item that straddles a window's edge (it makes 1/factor of
 * the progress per ns inside). That is kernels, copies, memsets and graph replays; host functions
 * (mock NCCL's transfers) and stream waits are not slowed. An item's device is the current device of
 * the thread that enqueued it: the runtime's cudaSetDevice tells the driver (mockcuSetDevice, a
 * per-thread value, default 0; cuCtxCreate_v2 sets it to the context's device).
 *
 * Environment: MOCK_CUDA_KERNEL_US (default kernel duration, default 50), MOCK_CUDA_BW_MBPS (copy
 * bandwidth in MB/s, default 10000), MOCK_CUDA_HEAP_MB (device memory, default 81920), MOCK_CUDA_FRAG,
 * MOCK_CUDA_FRAG_NS (default 200), MOCK_CUDA_SYNC=spin (what auto means: busy-poll like
 * cudaDeviceScheduleSpin, the real runtime's choice when it has fewer contexts than cores; default:
 * block on a condition variable like cudaDeviceScheduleBlockingSync), MOCK_GPU_THROTTLE (above). */
#define _GNU_SOURCE
#include "mock_cuda.h"
#include "mock_gpu.h"
#include "mock_clock.h"
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))
#define QCAP 1024 /* like the real launch queue: launches block when 1024 are pending */

/* the layouts the tracer reads from memory, as in cuda.h */
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(CUlaunchAttribute, value) == 8, "CUlaunchAttribute.value at 8");
_Static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == 24, "CUlaunchConfig.sharedMemBytes at 24");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig.hStream at 32");
_Static_assert(offsetof(CUlaunchConfig, attrs) == 40, "CUlaunchConfig.attrs at 40");
_Static_assert(offsetof(CUlaunchConfig, numAttrs) == 48, "CUlaunchConfig.numAttrs at 48");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig is 56 bytes");

/* CUresult values */
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_HANDLE = 400, ILLEGAL_STATE = 401,
       NOT_READY = 600, STREAM_CAPTURE_UNSUPPORTED = 900 };

/* One item of GPU work: `dur` ns of running (at full speed) on device `dev`, after waiting
 * (cuStreamWaitEvent) until `wait_s` has completed `wait_seq` items when `wait_s` is set; a host
 * function (cuLaunchHostFunc) is `fn(arg)`, run by the stream's worker when the stream gets to it,
 * the stream held until it returns. */
struct qitem { uint64_t dur; struct CUstream_st *wait_s; uint64_t wait_seq; CUhostFn fn; void *arg; int dev; };
struct CUgraph_st { uint64_t ns; unsigned nodes; };
struct CUgraphExec_st { uint64_t ns; unsigned nodes; struct CUgraphExec_st *next; };
struct CUstream_st {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct qitem q[QCAP];
    uint64_t submitted, completed; /* sequence numbers */
    struct CUgraph_st *capture;    /* while capturing: where work goes instead of the queue */
    pthread_t worker;
    struct CUstream_st *next;
};
struct CUevent_st { CUstream stream; uint64_t seq; };
struct CUctx_st { unsigned int flags; CUdevice dev; };

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *g_streams;
static struct CUstream_st *g_default;
static struct CUgraphExec_st *g_execs;
static uint64_t g_kernel_ns = 50000, g_bw_mbps = 10000, g_frag_ns = 200, g_heap = 81920ull << 20;
static int g_frag, g_auto_spins;
static unsigned int g_primary_flags; /* cuDevicePrimaryCtxSetFlags_v2 */
static __thread CUstream t_ptsz;
static __thread CUcontext t_ctx;     /* cuCtxCreate_v2 makes its context current */
static __thread int t_dev;           /* the thread's current device (mockcuSetDevice) */
static struct mock_throttle g_throttle[MOCK_THROTTLE_MAX]; /* MOCK_GPU_THROTTLE */
static int g_nthrottle;

static void spin_ns(uint64_t ns) {
    uint64_t end = now_ns() + ns;
    while (now_ns() < end) {}
}
static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

/* The GPU runs `dur` ns of work on device `dev`: slower while a MOCK_GPU_THROTTLE window for it is in
 * force, pro rata across a window's edges. */
static void run_work(uint64_t dur, int dev) {
    if (!g_nthrottle) { sleep_until(now_ns() + dur); return; }
    double left = (double)dur; /* ns of work at full speed still to do */
    for (;;) {
        uint64_t mono = now_ns(), real = mock_unix_ns(), edge;
        double f = mock_throttle_at(g_throttle, g_nthrottle, dev, real, NULL, &edge);
        double need = left * f; /* wall ns it takes at the current speed */
        if (edge == UINT64_MAX || need <= (double)(edge - real)) {
            sleep_until(mono + (uint64_t)(need + 0.5));
            return;
        }
        sleep_until(mono + (edge - real)); /* up to the edge, then on at the new speed */
        left -= (double)(edge - real) / f;
        if (left < 1.0) return;
    }
}

static void *stream_worker(void *arg) {
    CUstream s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->completed == s->submitted) pthread_cond_wait(&s->cv, &s->mu);
        struct qitem it = s->q[s->completed % QCAP];
        pthread_mutex_unlock(&s->mu);
        if (it.wait_s) { /* cuStreamWaitEvent: the GPU holds this stream until the other one gets there */
            pthread_mutex_lock(&it.wait_s->mu);
            while (it.wait_s->completed < it.wait_seq) pthread_cond_wait(&it.wait_s->cv, &it.wait_s->mu);
            pthread_mutex_unlock(&it.wait_s->mu);
        }
        if (it.fn) it.fn(it.arg); /* cuLaunchHostFunc: the stream waits for the host function */
        if (it.dur) run_work(it.dur, it.dev); /* the GPU runs the kernel */
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
    g_heap = env_u64("MOCK_CUDA_HEAP_MB", 81920) << 20;
    g_frag = (int)env_u64("MOCK_CUDA_FRAG", 0);
    g_frag_ns = env_u64("MOCK_CUDA_FRAG_NS", 200);
    const char *sync = getenv("MOCK_CUDA_SYNC");
    g_auto_spins = sync && !strcmp(sync, "spin");
    g_nthrottle = mock_throttle_parse("mockcuda", g_throttle);
    g_default = stream_new();
}
/* The calling thread's current device, which the runtime's cudaSetDevice sets (the driver keys the
 * planted slowdown by it). */
API void mockcuSetDevice(int dev) { t_dev = dev; }
API CUstream mockcuPerThreadStream(void) {
    pthread_once(&g_once, init_once);
    if (!t_ptsz) t_ptsz = stream_new();
    return t_ptsz;
}
/* The stream a handle means: the null stream and CU_STREAM_LEGACY are the legacy default stream,
 * CU_STREAM_PER_THREAD the calling thread's own. */
static CUstream resolve(CUstream s) {
    pthread_once(&g_once, init_once);
    if (s == CU_STREAM_PER_THREAD) return mockcuPerThreadStream();
    return s && s != CU_STREAM_LEGACY ? s : g_default;
}
/* What a _ptsz entry point means by the null stream: the per-thread default stream. */
static CUstream ptsz(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

/* Enqueue an item of GPU work (or, while the stream is being captured, add it to the graph);
 * returns the sequence number it completes at. */
static uint64_t enqueue_item(CUstream s, struct qitem it) {
    pthread_mutex_lock(&s->mu);
    if (s->capture) {
        s->capture->ns += it.dur;
        s->capture->nodes++;
        uint64_t seq = s->submitted;
        pthread_mutex_unlock(&s->mu);
        return seq;
    }
    while (s->submitted - s->completed >= QCAP) pthread_cond_wait(&s->cv, &s->mu);
    it.dev = t_dev; /* the device the enqueuing thread has current */
    s->q[s->submitted % QCAP] = it;
    uint64_t seq = ++s->submitted;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return seq;
}
static uint64_t enqueue(CUstream s, uint64_t d) { return enqueue_item(s, (struct qitem){.dur = d}); }

/* The scheduling policy of the calling thread's context (CU_CTX_SCHED_*). */
static unsigned int sched_policy(void) {
    unsigned int f = t_ctx ? __atomic_load_n(&t_ctx->flags, __ATOMIC_RELAXED)
                           : __atomic_load_n(&g_primary_flags, __ATOMIC_RELAXED);
    f &= CU_CTX_SCHED_MASK;
    if (f == CU_CTX_SCHED_AUTO) return g_auto_spins ? CU_CTX_SCHED_SPIN : CU_CTX_SCHED_BLOCKING_SYNC;
    return f;
}
static void wait_seq(CUstream s, uint64_t seq) {
    switch (sched_policy()) {
    case CU_CTX_SCHED_SPIN: /* poll the completion counter on the CPU until the GPU catches up */
        while (__atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) < seq) __builtin_ia32_pause();
        return;
    case CU_CTX_SCHED_YIELD: /* poll, giving the CPU away between polls */
        while (__atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) < seq) sched_yield();
        return;
    default: /* blocking sync: sleep until the GPU signals */
        pthread_mutex_lock(&s->mu);
        while (s->completed < seq) pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
}
static CUresult sync_stream(CUstream s) {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->submitted;
    int capturing = s->capture != NULL;
    pthread_mutex_unlock(&s->mu);
    if (capturing) return STREAM_CAPTURE_UNSUPPORTED;
    wait_seq(s, seq);
    return OK;
}
static uint64_t copy_ns(size_t bytes) { return (uint64_t)bytes * 1000ull / g_bw_mbps; }
static CUresult copy_sync(size_t bytes) {
    CUstream s = resolve(NULL);
    wait_seq(s, enqueue(s, copy_ns(bytes)));
    return OK;
}
static CUresult copy_async(size_t bytes, CUstream s) {
    enqueue(resolve(s), copy_ns(bytes));
    return OK;
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

/* ---- device allocator ---- */
struct block { CUdeviceptr addr; size_t size; struct block *next; };
static struct block *g_free, *g_used;
static CUdeviceptr g_brk = 0x7f0000000000ull;
static size_t g_in_use; /* bytes allocated (blocks and cuMemCreate handles), against g_heap */
static pthread_mutex_t g_amu = PTHREAD_MUTEX_INITIALIZER;

static CUresult dev_alloc(CUdeviceptr *out, size_t bytes) {
    pthread_once(&g_once, init_once);
    if (!out) return INVALID_VALUE;
    if (bytes == 0) { *out = 0; return OK; }
    if (bytes > g_heap) return OUT_OF_MEMORY;
    size_t sz = (bytes + 255) & ~(size_t)255;
    pthread_mutex_lock(&g_amu);
    struct block **pp = &g_free, *b = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if (g_frag) spin_ns(g_frag_ns);
        if ((*pp)->size >= sz) { b = *pp; break; }
    }
    if (g_in_use + (b ? (g_frag ? sz : b->size) : sz) > g_heap) {
        pthread_mutex_unlock(&g_amu);
        return OUT_OF_MEMORY;
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
    g_in_use += b->size;
    b->next = g_used;
    g_used = b;
    *out = b->addr;
    pthread_mutex_unlock(&g_amu);
    return OK;
}
static CUresult dev_free(CUdeviceptr p) {
    if (!p) return OK;
    pthread_mutex_lock(&g_amu);
    for (struct block **pp = &g_used; *pp; pp = &(*pp)->next) {
        if ((*pp)->addr == p) {
            struct block *b = *pp;
            *pp = b->next;
            g_in_use -= b->size;
            b->next = g_free; /* never coalesced: fragmentation when sizes vary */
            g_free = b;
            pthread_mutex_unlock(&g_amu);
            return OK;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return INVALID_VALUE;
}

/* ---- exported driver API ---- */
API CUresult cuInit(unsigned int flags) { (void)flags; pthread_once(&g_once, init_once); return OK; }
API CUresult cuDriverGetVersion(int *v) { if (v) *v = 12040; return OK; }

static CUresult launch(CUfunction f, CUstream stream) {
    CUstream s = resolve(stream);
    if (!f) return INVALID_HANDLE;
    uint64_t ns = kernel_ns(f);
    if (ns) enqueue(s, ns); /* a zero-length kernel completes at once (benchmarks) */
    return OK;
}
API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                            unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream,
                            void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params; (void)extra;
    return launch(f, stream);
}
/* cuLaunchKernelEx: the same simulated work as cuLaunchKernel, the launch described by a
 * CUlaunchConfig (grid, block, shared memory, stream, attributes such as the cluster dimension). */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, int per_thread) {
    if (!c || (c->numAttrs && !c->attrs)) return INVALID_VALUE;
    if (!c->gridDimX || !c->gridDimY || !c->gridDimZ || !c->blockDimX || !c->blockDimY || !c->blockDimZ)
        return INVALID_VALUE;
    return launch(f, per_thread ? ptsz(c->hStream) : c->hStream);
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    (void)kernelParams; (void)extra;
    return launch_ex(config, f, 0);
}
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                   void **extra) {
    (void)kernelParams; (void)extra;
    return launch_ex(config, f, 1);
}
API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) { return dev_alloc(dptr, bytes); }
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    (void)flags;
    return dev_alloc(dptr, bytes);
}
API CUresult cuMemFree_v2(CUdeviceptr dptr) { return dev_free(dptr); }
/* Stream-ordered allocation: the mock allocates and frees at once (the pool is the heap). */
API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream st) { resolve(st); return dev_alloc(dptr, bytes); }
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream st) {
    return cuMemAllocAsync(dptr, bytes, ptsz(st));
}
API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream st) { resolve(st); return dev_free(dptr); }
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream st) { return cuMemFreeAsync(dptr, ptsz(st)); }
API CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
    (void)flags;
    if (!pp) return INVALID_VALUE;
    if (posix_memalign(pp, 4096, bytes ? bytes : 1)) return OUT_OF_MEMORY;
    return OK;
}
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
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)d; (void)s; return copy_async(n, st);
}
API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    return cuMemcpyDtoDAsync_v2(d, s, n, ptsz(st));
}
API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) {
    return p ? copy_sync(p->WidthInBytes * p->Height) : INVALID_VALUE;
}
API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream st) {
    return p ? copy_async(p->WidthInBytes * p->Height, st) : INVALID_VALUE;
}
API CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) {
    (void)d; (void)dc; (void)s; (void)sc; return copy_sync(n);
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) {
    (void)d; (void)dc; (void)s; (void)sc; return copy_async(n, st);
}
/* memsets run on the GPU at copy bandwidth: N elements of 1, 2 or 4 bytes */
static CUresult memset_async(CUdeviceptr d, size_t bytes, CUstream st) {
    if (!d) return INVALID_VALUE;
    return copy_async(bytes, st);
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
    (void)v; return memset_async(d, n, st);
}
API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
    return cuMemsetD8Async(d, v, n, ptsz(st));
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream st) {
    (void)v; return memset_async(d, n * 2, st);
}
API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream st) {
    return cuMemsetD16Async(d, v, n, ptsz(st));
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {
    (void)v; return memset_async(d, n * 4, st);
}
API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {
    return cuMemsetD32Async(d, v, n, ptsz(st));
}

/* ---- contexts: flags decide how synchronize calls wait (see the top of this file) ---- */
static CUresult ctx_sync(void) {
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_mu);
    struct CUstream_st *list = g_streams;
    pthread_mutex_unlock(&g_mu);
    for (struct CUstream_st *s = list; s; s = s->next) sync_stream(s);
    return OK;
}
API CUresult cuCtxSynchronize(void) { return ctx_sync(); }
API CUresult cuCtxSynchronize_v2(CUcontext ctx) { (void)ctx; return ctx_sync(); } /* NULL: the current one */
API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    pthread_once(&g_once, init_once);
    if (!pctx) return INVALID_VALUE;
    if (dev != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE: the mock has one GPU */
    CUcontext c = calloc(1, sizeof(*c));
    c->flags = flags;
    c->dev = dev;
    t_ctx = c; /* a new context is current on the calling thread */
    t_dev = dev;
    *pctx = c;
    return OK;
}
API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    if (dev != 0) return 101;
    __atomic_store_n(&g_primary_flags, flags, __ATOMIC_RELAXED);
    return OK;
}
API CUresult cuCtxSetFlags(unsigned int flags) {
    if (t_ctx) __atomic_store_n(&t_ctx->flags, flags, __ATOMIC_RELAXED);
    else __atomic_store_n(&g_primary_flags, flags, __ATOMIC_RELAXED);
    return OK;
}

API CUresult cuStreamSynchronize(CUstream stream) { return sync_stream(resolve(stream)); }
API CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    (void)flags;
    pthread_once(&g_once, init_once);
    if (!stream) return INVALID_VALUE;
    *stream = stream_new();
    return OK;
}
API CUresult cuStreamDestroy_v2(CUstream stream) { (void)stream; return OK; /* workers live until exit */ }
API CUresult cuEventCreate(CUevent *ev, unsigned int flags) {
    (void)flags;
    if (!ev) return INVALID_VALUE;
    *ev = calloc(1, sizeof(**ev));
    return OK;
}
API CUresult cuEventRecord(CUevent ev, CUstream stream) {
    if (!ev) return INVALID_HANDLE;
    CUstream s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    ev->stream = s;
    ev->seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return OK;
}
API CUresult cuEventSynchronize(CUevent ev) {
    if (!ev) return INVALID_HANDLE;
    if (ev->stream) wait_seq(ev->stream, ev->seq);
    return OK;
}
API CUresult cuEventQuery(CUevent ev) {
    if (!ev) return INVALID_HANDLE;
    if (ev->stream && __atomic_load_n(&ev->stream->completed, __ATOMIC_ACQUIRE) < ev->seq) return NOT_READY;
    return OK;
}
/* A host function runs on the stream's worker after the work before it, and the work after it waits
 * for it to return (what NCCL's kernels look like to the mock: they block the stream until the peers
 * get there). The mock's graphs replay durations only, so capturing one is unsupported. */
static CUresult launch_host_func(CUstream stream, CUhostFn fn, void *userData) {
    if (!fn) return INVALID_VALUE;
    CUstream s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    int capturing = s->capture != NULL;
    pthread_mutex_unlock(&s->mu);
    if (capturing) return STREAM_CAPTURE_UNSUPPORTED;
    enqueue_item(s, (struct qitem){.fn = fn, .arg = userData});
    return OK;
}
API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
    return launch_host_func(hStream, fn, userData);
}
API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) {
    return launch_host_func(ptsz(hStream), fn, userData);
}
API CUresult cuStreamWaitEvent(CUstream stream, CUevent ev, unsigned int flags) {
    (void)flags;
    if (!ev) return INVALID_HANDLE;
    CUstream s = resolve(stream);
    if (ev->stream && ev->stream != s) enqueue_item(s, (struct qitem){.wait_s = ev->stream, .wait_seq = ev->seq});
    return OK;
}

/* ---- stream capture and graphs ---- */
API CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
    (void)mode;
    if (!stream || stream == CU_STREAM_LEGACY) return STREAM_CAPTURE_UNSUPPORTED;
    CUstream s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    CUresult r = s->capture ? ILLEGAL_STATE : OK;
    if (!r) s->capture = calloc(1, sizeof(*s->capture));
    pthread_mutex_unlock(&s->mu);
    return r;
}
API CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
    if (!graph) return INVALID_VALUE;
    if (!stream || stream == CU_STREAM_LEGACY) return ILLEGAL_STATE;
    CUstream s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    CUgraph g = s->capture;
    s->capture = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!g) return ILLEGAL_STATE; /* not capturing */
    *graph = g;
    return OK;
}
API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    (void)flags;
    if (!exec) return INVALID_VALUE;
    if (!graph) return INVALID_HANDLE;
    CUgraphExec e = calloc(1, sizeof(*e));
    e->ns = graph->ns;
    e->nodes = graph->nodes;
    pthread_mutex_lock(&g_mu);
    e->next = g_execs;
    g_execs = e;
    pthread_mutex_unlock(&g_mu);
    *exec = e;
    return OK;
}
API CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    CUstream s = resolve(stream);
    if (!exec) return INVALID_HANDLE;
    /* an instantiated capture runs for what was captured; any other handle is a batch of kernels
     * whose count is the handle's low 16 bits (workloads that fake a graph: infer's 0x10002) */
    uint64_t ns = ((uintptr_t)exec & 0xffff) * g_kernel_ns;
    pthread_mutex_lock(&g_mu);
    for (CUgraphExec e = g_execs; e; e = e->next)
        if (e == exec) { ns = e->ns; break; }
    pthread_mutex_unlock(&g_mu);
    enqueue(s, ns);
    return OK;
}
API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) { return cuGraphLaunch(exec, ptsz(stream)); }

/* ---- virtual memory management: physical handles mapped into reserved ranges ---- */
struct vmm { CUmemGenericAllocationHandle h; size_t size; CUdeviceptr va; struct vmm *next; };
static struct vmm *g_vmm_allocs, *g_vmm_maps;
static CUdeviceptr g_va = 0x7e0000000000ull;
API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags) {
    (void)addr; (void)flags;
    if (!ptr || !size) return INVALID_VALUE;
    size_t align = alignment ? alignment : (size_t)2 << 20;
    pthread_mutex_lock(&g_amu);
    g_va = (g_va + align - 1) & ~(CUdeviceptr)(align - 1);
    *ptr = g_va;
    g_va += size;
    pthread_mutex_unlock(&g_amu);
    return OK;
}
API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return ptr && size ? OK : INVALID_VALUE; }
API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags) {
    (void)flags;
    pthread_once(&g_once, init_once);
    if (!handle || !size || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return INVALID_VALUE;
    pthread_mutex_lock(&g_amu);
    if (size > g_heap || g_in_use + size > g_heap) { pthread_mutex_unlock(&g_amu); return OUT_OF_MEMORY; }
    struct vmm *a = calloc(1, sizeof(*a));
    a->h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    a->size = size;
    a->next = g_vmm_allocs;
    g_vmm_allocs = a;
    g_in_use += size;
    pthread_mutex_unlock(&g_amu);
    *handle = a->h;
    return OK;
}
API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags) {
    if (!ptr || !size || flags) return INVALID_VALUE;
    pthread_mutex_lock(&g_amu);
    struct vmm *a = g_vmm_allocs;
    while (a && a->h != handle) a = a->next;
    if (!a || offset + size > a->size) { pthread_mutex_unlock(&g_amu); return INVALID_VALUE; }
    struct vmm *m = calloc(1, sizeof(*m));
    m->h = handle; m->size = size; m->va = ptr;
    m->next = g_vmm_maps;
    g_vmm_maps = m;
    pthread_mutex_unlock(&g_amu);
    return OK;
}
API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&g_amu);
    for (struct vmm **pp = &g_vmm_maps; *pp; pp = &(*pp)->next) {
        if ((*pp)->va == ptr && (*pp)->size == size) {
            struct vmm *m = *pp;
            *pp = m->next;
            pthread_mutex_unlock(&g_amu);
            free(m);
            return OK;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return INVALID_VALUE;
}
API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    pthread_mutex_lock(&g_amu);
    for (struct vmm **pp = &g_vmm_allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->h == handle) {
            struct vmm *a = *pp;
            *pp = a->next;
            g_in_use -= a->size;
            pthread_mutex_unlock(&g_amu);
            free(a);
            return OK;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return INVALID_VALUE;
}

/* ---- modules, libraries, kernels, functions: distinct heap objects, one per name ---- */
struct CUfunc_st { char *name; struct CUfunc_st *next; };
struct CUmod_st { const void *image; struct CUfunc_st *funcs; };
struct CUkern_st { char *name; CUfunction func; struct CUkern_st *next; };
struct CUlib_st { const void *code; struct CUkern_st *kernels; };
static CUfunction func_new(const char *name) {
    CUfunction f = calloc(1, sizeof(*f));
    f->name = strdup(name);
    return f;
}
API CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    pthread_once(&g_once, init_once);
    if (!module || !image) return INVALID_VALUE;
    CUmodule m = calloc(1, sizeof(*m));
    m->image = image;
    *module = m;
    return OK;
}
API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    if (!hfunc || !name) return INVALID_VALUE;
    if (!hmod) return INVALID_HANDLE;
    pthread_mutex_lock(&g_mu);
    CUfunction f = hmod->funcs;
    while (f && strcmp(f->name, name)) f = f->next;
    if (!f) {
        f = func_new(name);
        f->next = hmod->funcs;
        hmod->funcs = f;
    }
    pthread_mutex_unlock(&g_mu);
    *hfunc = f;
    return OK;
}
API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                               void **libraryOptionValues, unsigned int numLibraryOptions) {
    pthread_once(&g_once, init_once);
    if (!library || !code) return INVALID_VALUE;
    if ((numJitOptions && (!jitOptions || !jitOptionsValues)) ||
        (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))
        return INVALID_VALUE;
    CUlibrary l = calloc(1, sizeof(*l));
    l->code = code;
    *library = l;
    return OK;
}
API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    if (!pKernel || !name) return INVALID_VALUE;
    if (!library) return INVALID_HANDLE;
    pthread_mutex_lock(&g_mu);
    CUkernel k = library->kernels;
    while (k && strcmp(k->name, name)) k = k->next;
    if (!k) {
        k = calloc(1, sizeof(*k));
        k->name = strdup(name);
        k->next = library->kernels;
        library->kernels = k;
    }
    pthread_mutex_unlock(&g_mu);
    *pKernel = k;
    return OK;
}
API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    if (!pFunc) return INVALID_VALUE;
    if (!kernel) return INVALID_HANDLE;
    pthread_mutex_lock(&g_mu);
    if (!kernel->func) kernel->func = func_new(kernel->name);
    pthread_mutex_unlock(&g_mu);
    *pFunc = kernel->func;
    return OK;
}
