/* Mock CUDA driver (soname libcuda.so.1), its GPU: streams, the work queued on them, and the calls
 * that wait for it (the rest: driver_mem.c, device memory; driver_obj.c, cuInit and the injection
 * library, contexts, devices, capture, modules and kernel names; driver_act.c, the activity hook;
 * driver_int.h, what they share). The "GPU" is one worker thread per stream: launches and async
 * copies and memsets enqueue work with a simulated duration, synchronize calls block until the
 * stream's queue has drained up to the point they were called at, cuStreamWaitEvent enqueues a wait
 * for another stream, cuLaunchHostFunc a host function the worker calls in stream order (mock NCCL's
 * collectives are such functions, waiting for the other ranks). Stream capture
 * (cuStreamBeginCapture_v2 .. cuStreamEndCapture) diverts what a stream is given into a graph, whose
 * instantiation cuGraphLaunch replays as one item of their summed duration.
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
 * Activity (src/mock_activity.h): the calls wrapped in REPORTED report to an attached hook; the
 * work they queue carries their correlation id, and the stream's worker reports it when it has run
 * (a zero-length kernel is queued then, so that it is reported); host waits report their span.
 * Stream ids are CUPTI's: the legacy default stream 7, every other stream (created or per-thread)
 * the next of 13, 14, ...; event ids count from 1.
 *
 * Environment: MOCK_CUDA_KERNEL_US (default kernel duration, default 50), MOCK_CUDA_BW_MBPS (copy
 * bandwidth in MB/s, default 10000), MOCK_CUDA_HEAP_MB (device memory, default 81920), MOCK_CUDA_FRAG,
 * MOCK_CUDA_FRAG_NS (default 200), MOCK_CUDA_SYNC=spin (what auto means: busy-poll like
 * cudaDeviceScheduleSpin, the real runtime's choice when it has fewer contexts than cores; default:
 * block on a condition variable like cudaDeviceScheduleBlockingSync), MOCK_GPU_THROTTLE (above),
 * MOCK_CUDA_HANG_AT=N (the process's Nth kernel launch, from 1, never ends: a hung kernel, so the
 * synchronize behind it never returns, as on a GPU whose kernel deadlocked), MOCK_CUDA_FAULT_AT=N
 * (the Nth launch's kernel reads an illegal address: once it has run, the context is broken, as on
 * a real GPU: the error surfaces at the next synchronize, and that and every later launch and
 * synchronize return CUDA_ERROR_ILLEGAL_ADDRESS, 700). */
#include "driver_int.h"
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

/* the layouts the tracer reads from memory, as in cuda.h */
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(CUlaunchAttribute, value) == 8, "CUlaunchAttribute.value at 8");
_Static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == 24, "CUlaunchConfig.sharedMemBytes at 24");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig.hStream at 32");
_Static_assert(offsetof(CUlaunchConfig, attrs) == 40, "CUlaunchConfig.attrs at 40");
_Static_assert(offsetof(CUlaunchConfig, numAttrs) == 48, "CUlaunchConfig.numAttrs at 48");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig is 56 bytes");

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *g_streams;
static struct CUstream_st *g_default;
struct CUgraphExec_st *g_execs;
uint64_t g_kernel_ns = 50000, g_frag_ns = 200, g_heap = 81920ull << 20;
static uint64_t g_hang_at, g_launches; /* MOCK_CUDA_HANG_AT: that launch's kernel never ends */
static uint64_t g_fault_at;             /* MOCK_CUDA_FAULT_AT: that launch's kernel faults */
static int g_faulted;                   /* a kernel faulted: the context is broken (sticky) */
enum { ILLEGAL_ADDRESS = 700 };
static uint64_t g_bw_mbps = 10000;
int g_frag, g_auto_spins;
unsigned int g_primary_flags; /* cuDevicePrimaryCtxSetFlags_v2 */
static __thread CUstream t_ptsz;
__thread CUcontext t_ctx;     /* cuCtxCreate_v2 makes its context current */
__thread int t_dev;           /* the thread's current device (mockcuSetDevice) */
static struct mock_throttle g_throttle[MOCK_THROTTLE_MAX]; /* MOCK_GPU_THROTTLE */
static struct mock_pcie g_pcie[MOCK_GPU_MAX];                /* MOCK_NVML_PCIE */
static int g_nthrottle;
static uint32_t g_stream_ids = 12; /* the last stream id given */
static uint32_t g_event_ids;       /* the last event id given */

void spin_ns(uint64_t ns) {
    uint64_t end = now_ns() + ns;
    while (now_ns() < end) {}
}
uint64_t env_u64(const char *name, uint64_t dflt) {
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

/* MOCK_GPU_PROCS_DIR's <pid>.busy (mock_gpu.h): this process's busy ns per GPU, mapped once by the
 * first stream worker that runs work; removed with the process's line at exit (driver_mem.c). */
static uint64_t *g_busy;
static int g_busy_pid; /* the process that mapped them (a forked child does not remove them) */
static pthread_once_t g_busy_once = PTHREAD_ONCE_INIT;
static void busy_map(void) {
    const char *dir = getenv("MOCK_GPU_PROCS_DIR");
    if (!dir || !*dir) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%d.busy", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (ftruncate(fd, (off_t)MOCK_BUSY_BYTES) == 0) {
        void *m = mmap(NULL, MOCK_BUSY_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) { g_busy = m; g_busy_pid = (int)getpid(); }
    }
    close(fd);
}
/* The counters go at exit with the process (killed: they stay, like its line). */
__attribute__((destructor)) static void busy_exit(void) {
    const char *dir = getenv("MOCK_GPU_PROCS_DIR");
    if (!g_busy || g_busy_pid != (int)getpid() || !dir) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%d.busy", dir, g_busy_pid);
    unlink(path);
}
static void busy_add(int dev, uint64_t ns) {
    pthread_once(&g_busy_once, busy_map);
    if (g_busy && dev >= 0 && dev < MOCK_GPU_MAX) __atomic_add_fetch(&g_busy[dev], ns, __ATOMIC_RELAXED);
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
        uint64_t start = it.act.corr ? mock_unix_ns() : 0;
        uint64_t dur = it.pcie && it.dev >= 0 && it.dev < MOCK_GPU_MAX
                           ? (uint64_t)((double)it.dur * mock_pcie_slowdown(&g_pcie[it.dev]) + 0.5)
                           : it.dur;
        if (dur) {
            uint64_t began = now_ns();
            run_work(dur, it.dev); /* the GPU runs the kernel */
            busy_add(it.dev, now_ns() - began);
        }
        if (it.fault) __atomic_store_n(&g_faulted, 1, __ATOMIC_RELEASE);
        if (it.act.corr) act_work(s, &it, start, mock_unix_ns()); /* reported before it completes */
        pthread_mutex_lock(&s->mu);
        __atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&s->cv);
    }
    return NULL;
}

/* MOCK_GPU_CPUS (a list like "0" or "0,2-3"): the CPUs the mock GPU's stream workers may run on. A
 * real GPU does not run on the host's CPUs; a workload that plants a CPU hog on its launch thread's
 * CPU keeps the mock GPU off that CPU with it, so the hog stalls the host, not the "GPU". */
static void pin_worker(pthread_t t) {
    const char *list = getenv("MOCK_GPU_CPUS");
    if (!list || !*list) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const char *p = list; *p;) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < CPU_SETSIZE; c++) if (c >= 0) CPU_SET((int)c, &set);
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
    }
    if (CPU_COUNT(&set) > 0) pthread_setaffinity_np(t, sizeof(set), &set);
}

static CUstream stream_new(uint32_t id) {
    CUstream s = calloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->id = id ? id : __atomic_add_fetch(&g_stream_ids, 1, __ATOMIC_RELAXED);
    pthread_create(&s->worker, NULL, stream_worker, s);
    pthread_setname_np(s->worker, "mockgpu-stream");
    pin_worker(s->worker);
    pthread_mutex_lock(&g_mu);
    s->next = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_mu);
    return s;
}

pthread_once_t g_once = PTHREAD_ONCE_INIT;
void init_once(void) {
    g_kernel_ns = env_u64("MOCK_CUDA_KERNEL_US", 50) * 1000;
    g_hang_at = env_u64("MOCK_CUDA_HANG_AT", 0);
    g_fault_at = env_u64("MOCK_CUDA_FAULT_AT", 0);
    g_bw_mbps = env_u64("MOCK_CUDA_BW_MBPS", 10000);
    if (!g_bw_mbps) g_bw_mbps = 1;
    g_heap = env_u64("MOCK_CUDA_HEAP_MB", 81920) << 20;
    g_frag = (int)env_u64("MOCK_CUDA_FRAG", 0);
    g_frag_ns = env_u64("MOCK_CUDA_FRAG_NS", 200);
    const char *sync = getenv("MOCK_CUDA_SYNC");
    g_auto_spins = sync && !strcmp(sync, "spin");
    g_nthrottle = mock_throttle_parse("mockcuda", g_throttle);
    mock_pcie_parse("mockcuda", g_pcie);
    g_default = stream_new(MOCK_STREAM_ID_LEGACY);
}
/* The calling thread's current device, which the runtime's cudaSetDevice sets (the driver keys the
 * planted slowdown by it). */
API void mockcuSetDevice(int dev) { t_dev = dev; }
API CUstream mockcuPerThreadStream(void) {
    pthread_once(&g_once, init_once);
    if (!t_ptsz) t_ptsz = stream_new(0);
    return t_ptsz;
}
/* The stream a handle means: the null stream and CU_STREAM_LEGACY are the legacy default stream,
 * CU_STREAM_PER_THREAD the calling thread's own. */
CUstream resolve(CUstream s) {
    pthread_once(&g_once, init_once);
    if (s == CU_STREAM_PER_THREAD) return mockcuPerThreadStream();
    return s && s != CU_STREAM_LEGACY ? s : g_default;
}

/* Enqueue an item of GPU work (or, while the stream is being captured, add it to the graph);
 * returns the sequence number it completes at. */
uint64_t enqueue_item(CUstream s, struct qitem it) {
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
    return __atomic_load_n(&g_faulted, __ATOMIC_ACQUIRE) ? ILLEGAL_ADDRESS : OK;
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

/* ---- launches ---- */
static CUresult launch(uint32_t corr, CUfunction f, CUstream stream, unsigned int gx, unsigned int gy, unsigned int gz,
                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem) {
    CUstream s = resolve(stream);
    if (!f) return INVALID_HANDLE;
    if (__atomic_load_n(&g_faulted, __ATOMIC_ACQUIRE)) return ILLEGAL_ADDRESS; /* a broken context */
    uint64_t ns = kernel_ns(f);
    uint64_t nth = g_hang_at || g_fault_at ? __atomic_add_fetch(&g_launches, 1, __ATOMIC_RELAXED) : 0;
    if (g_hang_at && nth == g_hang_at) ns = 1ull << 62; /* about 146 years */
    if (!ns && !corr && !(g_fault_at && nth == g_fault_at)) return OK; /* zero-length: done at once */
    struct qitem it = {.dur = ns, .fault = g_fault_at && nth == g_fault_at};
    if (corr) {
        const char *name = names_get(f);
        it.act = (struct qact){.corr = corr, .kind = MOCK_WORK_KERNEL, .name = name ? name : "mock_kernel",
                               .grid = {gx, gy, gz}, .block = {bx, by, bz}, .shmem = shmem};
    }
    enqueue_item(s, it); /* reported, even a zero-length kernel runs, to be reported */
    return OK;
}
API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                            unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream,
                            void **params, void **extra) {
    (void)params; (void)extra;
    REPORTED(CBID_cuLaunchKernel, launch(CORR, f, stream, gx, gy, gz, bx, by, bz, shmem));
}
/* cuLaunchKernelEx: the same simulated work as cuLaunchKernel, the launch described by a
 * CUlaunchConfig (grid, block, shared memory, stream, attributes such as the cluster dimension). */
static CUresult launch_ex(uint32_t corr, const CUlaunchConfig *c, CUfunction f, int per_thread) {
    if (!c || (c->numAttrs && !c->attrs)) return INVALID_VALUE;
    if (!c->gridDimX || !c->gridDimY || !c->gridDimZ || !c->blockDimX || !c->blockDimY || !c->blockDimZ)
        return INVALID_VALUE;
    return launch(corr, f, per_thread ? ptsz(c->hStream) : c->hStream, c->gridDimX, c->gridDimY, c->gridDimZ,
                  c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes);
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    (void)kernelParams; (void)extra;
    REPORTED(CBID_cuLaunchKernelEx, launch_ex(CORR, config, f, 0));
}
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                   void **extra) {
    (void)kernelParams; (void)extra;
    REPORTED(CBID_cuLaunchKernelEx_ptsz, launch_ex(CORR, config, f, 1));
}

/* ---- copies and memsets: GPU work at MOCK_CUDA_BW_MBPS ---- */
enum { CK_HTOD = 1, CK_DTOH = 2, CK_DTOD = 8, CK_HTOH = 9, CK_PTOP = 10 }; /* CUPTI's copy kinds */
enum { MK_PAGEABLE = 1, MK_DEVICE = 3 };                                    /* CUPTI's memory kinds */
static uint8_t copy_kind(int src_dev, int dst_dev) {
    return src_dev ? (dst_dev ? CK_DTOD : CK_DTOH) : (dst_dev ? CK_HTOD : CK_HTOH);
}
/* cuMemcpy and cuMemcpyAsync (unified addressing): the kind from what the addresses are (only asked
 * for a reported call) */
static uint8_t uva_kind(uint32_t corr, CUdeviceptr dst, CUdeviceptr src) {
    return corr ? copy_kind(dev_ptr_known(src), dev_ptr_known(dst)) : 0;
}
static uint8_t kind2d(uint32_t corr, const CUDA_MEMCPY2D *p) { /* memory types: 1 host, 2 device, 4 unified */
    if (!corr) return 0;
    int s = p->srcMemoryType == 2 || (p->srcMemoryType != 1 && dev_ptr_known(p->srcDevice));
    int d = p->dstMemoryType == 2 || (p->dstMemoryType != 1 && dev_ptr_known(p->dstDevice));
    return copy_kind(s, d);
}
static uint64_t copy_ns(size_t bytes) { return (uint64_t)bytes * 1000ull / g_bw_mbps; }
static struct qitem copy_item(uint32_t corr, size_t bytes, uint8_t ck, int memset_kind, uint32_t value) {
    struct qitem it = {.dur = copy_ns(bytes), .pcie = ck == CK_HTOD || ck == CK_DTOH};
    if (corr) {
        it.act = (struct qact){.corr = corr, .kind = memset_kind ? MOCK_WORK_MEMSET : MOCK_WORK_MEMCPY,
                               .bytes = bytes, .copy_kind = ck, .value = value};
        it.act.src_kind = ck == CK_HTOD || ck == CK_HTOH ? MK_PAGEABLE : MK_DEVICE;
        it.act.dst_kind = ck == CK_DTOH || ck == CK_HTOH ? MK_PAGEABLE : MK_DEVICE;
    }
    return it;
}
static CUresult copy_sync(uint32_t corr, size_t bytes, uint8_t ck) {
    CUstream s = resolve(NULL);
    wait_seq(s, enqueue_item(s, copy_item(corr, bytes, ck, 0, 0)));
    return OK;
}
static CUresult copy_async(uint32_t corr, size_t bytes, uint8_t ck, CUstream s) {
    enqueue_item(resolve(s), copy_item(corr, bytes, ck, 0, 0));
    return OK;
}
API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
    REPORTED(CBID_cuMemcpy, copy_sync(CORR, n, uva_kind(CORR, d, s)));
}
API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    REPORTED(CBID_cuMemcpyAsync, copy_async(CORR, n, uva_kind(CORR, d, s), st));
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyHtoD_v2, copy_sync(CORR, n, CK_HTOD));
}
API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyDtoH_v2, copy_sync(CORR, n, CK_DTOH));
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyDtoD_v2, copy_sync(CORR, n, CK_DTOD));
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyHtoDAsync_v2, copy_async(CORR, n, CK_HTOD, st));
}
API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyDtoHAsync_v2, copy_async(CORR, n, CK_DTOH, st));
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyDtoDAsync_v2, copy_async(CORR, n, CK_DTOD, st));
}
API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)d; (void)s; REPORTED(CBID_cuMemcpyDtoDAsync_v2_ptsz, copy_async(CORR, n, CK_DTOD, ptsz(st)));
}
API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) {
    REPORTED(CBID_cuMemcpy2D_v2, p ? copy_sync(CORR, p->WidthInBytes * p->Height, kind2d(CORR, p)) : INVALID_VALUE);
}
API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream st) {
    REPORTED(CBID_cuMemcpy2DAsync_v2, p ? copy_async(CORR, p->WidthInBytes * p->Height, kind2d(CORR, p), st) : INVALID_VALUE);
}
API CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) {
    (void)d; (void)dc; (void)s; (void)sc; REPORTED(CBID_cuMemcpyPeer, copy_sync(CORR, n, CK_PTOP));
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) {
    (void)d; (void)dc; (void)s; (void)sc; REPORTED(CBID_cuMemcpyPeerAsync, copy_async(CORR, n, CK_PTOP, st));
}
/* memsets run on the GPU at copy bandwidth: N elements of 1, 2 or 4 bytes */
static CUresult memset_async(uint32_t corr, CUdeviceptr d, size_t bytes, uint32_t value, CUstream st) {
    if (!d) return INVALID_VALUE;
    enqueue_item(resolve(st), copy_item(corr, bytes, 0, 1, value));
    return OK;
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
    REPORTED(CBID_cuMemsetD8Async, memset_async(CORR, d, n, v, st));
}
API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
    REPORTED(CBID_cuMemsetD8Async_ptsz, memset_async(CORR, d, n, v, ptsz(st)));
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream st) {
    REPORTED(CBID_cuMemsetD16Async, memset_async(CORR, d, n * 2, v, st));
}
API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream st) {
    REPORTED(CBID_cuMemsetD16Async_ptsz, memset_async(CORR, d, n * 2, v, ptsz(st)));
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {
    REPORTED(CBID_cuMemsetD32Async, memset_async(CORR, d, n * 4, v, st));
}
API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {
    REPORTED(CBID_cuMemsetD32Async_ptsz, memset_async(CORR, d, n * 4, v, ptsz(st)));
}

/* ---- synchronization: how the host waits is the context's policy (see the top of this file) ---- */
static CUresult ctx_sync(uint32_t corr) {
    pthread_once(&g_once, init_once);
    uint64_t start = corr ? mock_unix_ns() : 0;
    pthread_mutex_lock(&g_mu);
    struct CUstream_st *list = g_streams;
    pthread_mutex_unlock(&g_mu);
    for (struct CUstream_st *s = list; s; s = s->next) sync_stream(s);
    if (corr) act_sync(corr, MOCK_SYNC_CONTEXT, MOCK_ACTIVITY_NONE, MOCK_ACTIVITY_NONE, start, OK);
    return OK;
}
API CUresult cuCtxSynchronize(void) { REPORTED(CBID_cuCtxSynchronize, ctx_sync(CORR)); }
API CUresult cuCtxSynchronize_v2(CUcontext ctx) { (void)ctx; REPORTED(CBID_cuCtxSynchronize_v2, ctx_sync(CORR)); }
static CUresult stream_sync(uint32_t corr, CUstream stream) {
    CUstream s = resolve(stream);
    uint64_t start = corr ? mock_unix_ns() : 0;
    CUresult r = sync_stream(s);
    if (corr) act_sync(corr, MOCK_SYNC_STREAM, s->id, MOCK_ACTIVITY_NONE, start, r);
    return r;
}
API CUresult cuStreamSynchronize(CUstream stream) { REPORTED(CBID_cuStreamSynchronize, stream_sync(CORR, stream)); }
API CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    (void)flags;
    pthread_once(&g_once, init_once);
    if (!stream) return INVALID_VALUE;
    *stream = stream_new(0);
    return OK;
}
API CUresult cuStreamDestroy_v2(CUstream stream) { (void)stream; return OK; /* workers live until exit */ }
API CUresult cuEventCreate(CUevent *ev, unsigned int flags) {
    (void)flags;
    if (!ev) return INVALID_VALUE;
    *ev = calloc(1, sizeof(**ev));
    (*ev)->id = __atomic_add_fetch(&g_event_ids, 1, __ATOMIC_RELAXED);
    return OK;
}
static CUresult event_record(CUevent ev, CUstream stream) {
    if (!ev) return INVALID_HANDLE;
    CUstream s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    ev->stream = s;
    ev->seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return OK;
}
API CUresult cuEventRecord(CUevent ev, CUstream stream) { REPORTED(CBID_cuEventRecord, event_record(ev, stream)); }
static CUresult event_sync(uint32_t corr, CUevent ev) {
    if (!ev) return INVALID_HANDLE;
    uint64_t start = corr ? mock_unix_ns() : 0;
    if (ev->stream) wait_seq(ev->stream, ev->seq);
    if (corr) act_sync(corr, MOCK_SYNC_EVENT, ev->stream ? ev->stream->id : MOCK_ACTIVITY_NONE, ev->id, start, OK);
    return OK;
}
API CUresult cuEventSynchronize(CUevent ev) { REPORTED(CBID_cuEventSynchronize, event_sync(CORR, ev)); }
API CUresult cuEventQuery(CUevent ev) {
    if (!ev) return INVALID_HANDLE;
    if (ev->stream && __atomic_load_n(&ev->stream->completed, __ATOMIC_ACQUIRE) < ev->seq) return NOT_READY;
    return OK;
}
/* A host function runs on the stream's worker after the work before it, and the work after it waits
 * for it to return (what NCCL's kernels look like to the mock: they block the stream until the peers
 * get there). The mock's graphs replay durations only, so capturing one is unsupported. Not device
 * work: the call is reported, the function's run is not. */
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
    REPORTED(CBID_cuLaunchHostFunc, launch_host_func(hStream, fn, userData));
}
API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) {
    REPORTED(CBID_cuLaunchHostFunc_ptsz, launch_host_func(ptsz(hStream), fn, userData));
}
static CUresult wait_event(CUstream stream, CUevent ev) {
    if (!ev) return INVALID_HANDLE;
    CUstream s = resolve(stream);
    if (ev->stream && ev->stream != s) enqueue_item(s, (struct qitem){.wait_s = ev->stream, .wait_seq = ev->seq});
    return OK;
}
API CUresult cuStreamWaitEvent(CUstream stream, CUevent ev, unsigned int flags) {
    (void)flags;
    REPORTED(CBID_cuStreamWaitEvent, wait_event(stream, ev));
}

/* ---- graph launches: one item of the captured duration, reported as one kernel named "graph" ---- */
static CUresult graph_launch(uint32_t corr, CUgraphExec exec, CUstream stream) {
    CUstream s = resolve(stream);
    if (!exec) return INVALID_HANDLE;
    /* an instantiated capture runs for what was captured; any other handle is a batch of kernels
     * whose count is the handle's low 16 bits (workloads that fake a graph: infer's 0x10002) */
    uint64_t ns = ((uintptr_t)exec & 0xffff) * g_kernel_ns;
    pthread_mutex_lock(&g_mu);
    for (CUgraphExec e = g_execs; e; e = e->next)
        if (e == exec) { ns = e->ns; break; }
    pthread_mutex_unlock(&g_mu);
    struct qitem it = {.dur = ns};
    if (corr) it.act = (struct qact){.corr = corr, .kind = MOCK_WORK_KERNEL, .name = "graph"};
    enqueue_item(s, it);
    return OK;
}
API CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) { REPORTED(CBID_cuGraphLaunch, graph_launch(CORR, exec, stream)); }
API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
    REPORTED(CBID_cuGraphLaunch_ptsz, graph_launch(CORR, exec, ptsz(stream)));
}
