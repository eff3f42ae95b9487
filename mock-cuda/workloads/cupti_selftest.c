/* cupti_selftest: the self-test of the mock libcupti and the mock driver's activity hook and
 * injection (build/cupti_selftest against CUDA 12's libcupti.so.12, build/cu13/cupti_selftest
 * against CUDA 13's; `make -C mock-cuda check` runs both). Without arguments it runs every mode in
 * a child process of its own (CUPTI's state is per process) and exits non-zero if one failed;
 * `cupti_selftest <mode>` runs one (each mode sets the MOCK_CUPTI_* switches it needs before loading
 * libcupti). It loads libcupti as a client would (beside the runtime, cupti_client.h), registers a
 * collecting client (which copies every record of every buffer delivered) and runs kernels, copies,
 * memsets and synchronizations through the runtime. Modes here:
 *   basic       versions, subscribe, attributes, GetNextRecord's ends; two streams: every kernel's
 *               record exactly once, start < end, names, stream ids distinct per stream (legacy 7),
 *               kernels of a stream never overlapping, a launch 20 ms after the previous kernel
 *               leaving a gap >= 19 ms, each record's correlation id that of a DRIVER record of the
 *               right cbid (thread id gettid, process id getpid), copy kinds and bytes, memset
 *               values, synchronization records (stream 3, context 4, event 1), one DEVICE record with
 *               the driver's UUID, nothing dropped
 *   full        small buffers: full ones are delivered by CUPTI's own thread, nothing lost
 *   decline     a request callback that declines: the records are counted as dropped
 *   reregister  a second client's registration takes the records (those in the first client's
 *               buffer too); its disable turns the kind off for both
 *   delivery    MOCK_CUPTI_DELIVERY_MS: buffers arrive without a flush
 * and, in cupti_selftest_faults.c, one per MOCK_CUPTI_FAULT switch and `inject` (the injection
 * library, and gpuloop's output with and without it). Prints `ok <mode>` per mode passed; a failure
 * prints `cupti_selftest <mode>: FAIL line <n>: <condition>: <why>` on stderr. */
#include "selftest.h"
#include <sys/wait.h>

__attribute__((noinline, used)) void st_kernel_a(void) { __asm__ volatile("nop"); }
__attribute__((noinline, used)) void st_kernel_b(void) { __asm__ volatile("nop; nop"); }
__attribute__((noinline, used)) void st_kernel_c(void) { __asm__ volatile("nop; nop; nop"); }
static struct wl_kernel K[3] = {{st_kernel_a, "_Z11st_kernel_aPf", NULL},
                                {st_kernel_b, "_Z11st_kernel_bPf", NULL},
                                {st_kernel_c, "_Z11st_kernel_cPf", NULL}};
__attribute__((constructor)) static void register_kernels(void) { wl_register(K, 3); }

struct cupti_api C;
const char *g_mode = "all";
int g_fail;
struct wl_kernel *g_k = K;
size_t g_bufsize = 1 << 20;
int g_decline;

/* ---- the collecting client ---- */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct st_rec *g_recs;
static size_t g_nrecs, g_cap;
static int g_other_deliveries;
static pid_t g_main_tid;

static size_t rec_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(mock_cupti_memcpy);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(mock_cupti_memset);
    case CUPTI_ACTIVITY_KIND_KERNEL: case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(mock_cupti_kernel);
    case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(mock_cupti_api);
    case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(mock_cupti_device);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(mock_cupti_sync);
    default: return 0;
    }
}
void st_request(uint8_t **buffer, size_t *size, size_t *max) {
    *max = 0;
    *buffer = g_decline ? NULL : aligned_alloc(8, g_bufsize);
    *size = *buffer ? g_bufsize : 0;
}
void st_complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    pthread_mutex_lock(&g_mu);
    if ((pid_t)syscall(SYS_gettid) != g_main_tid) g_other_deliveries++;
    mock_cupti_record *r = NULL;
    CUptiResult res;
    while ((res = C.GetNextRecord(buffer, valid, &r)) == CUPTI_SUCCESS) {
        size_t n = rec_size(r->kind);
        CHECK(n && n <= sizeof(struct st_rec) && ((uintptr_t)r & 7) == 0, "record kind %u at %p", r->kind, (void *)r);
        if (!n || n > sizeof(struct st_rec)) break;
        if (g_nrecs == g_cap) {
            g_cap = g_cap ? 2 * g_cap : 256;
            g_recs = realloc(g_recs, g_cap * sizeof *g_recs);
        }
        memcpy(g_recs[g_nrecs++].b, r, n);
    }
    CHECK(res == CUPTI_ERROR_MAX_LIMIT_REACHED, "GetNextRecord ended with %d", res);
    pthread_mutex_unlock(&g_mu);
    free(buffer);
}
size_t st_count(int kind) {
    pthread_mutex_lock(&g_mu);
    size_t n = 0;
    for (size_t i = 0; i < g_nrecs; i++) n += ((mock_cupti_record *)g_recs[i].b)->kind == (uint32_t)kind;
    pthread_mutex_unlock(&g_mu);
    return n;
}
const void *st_get(int kind, size_t i) {
    const void *p = NULL;
    pthread_mutex_lock(&g_mu);
    for (size_t j = 0; j < g_nrecs && !p; j++)
        if (((mock_cupti_record *)g_recs[j].b)->kind == (uint32_t)kind && i-- == 0) p = g_recs[j].b;
    pthread_mutex_unlock(&g_mu);
    return p;
}
void st_reset(void) {
    pthread_mutex_lock(&g_mu);
    g_nrecs = 0;
    g_other_deliveries = 0;
    pthread_mutex_unlock(&g_mu);
}
int st_other_thread_deliveries(void) {
    pthread_mutex_lock(&g_mu);
    int n = g_other_deliveries;
    pthread_mutex_unlock(&g_mu);
    return n;
}
void st_launch(int k, cudaStream_t s) {
    dim3 g = {8, 1, 1}, b = {128, 1, 1};
    CUDA(wl_launch(&K[k], g, b, NULL, 0, s));
}
void st_sleep_ms(long ms) { wl_sleep_us(ms * 1000); }
uint64_t st_real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static void load(void) {
    if (cupti_load(&C, ST_MAJOR, "cudaLaunchKernel") != 0) { fprintf(stderr, "cupti_selftest: no libcupti\n"); exit(1); }
}
static const mock_cupti_api *driver_record(uint32_t corr) {
    for (size_t i = 0; i < st_count(CUPTI_ACTIVITY_KIND_DRIVER); i++) {
        const mock_cupti_api *a = st_get(CUPTI_ACTIVITY_KIND_DRIVER, i);
        if (a->correlationId == corr) return a;
    }
    return NULL;
}

/* ---- basic ---- */
static int mode_basic(void) {
    load();
    uint32_t v = 0;
    CHECK(C.GetVersion(&v) == CUPTI_SUCCESS && v == ST_VERSION, "version %u", v);
    int type = -1;
    CHECK(C.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == 0 && C.GetThreadIdType(&type) == 0 && type == 1,
          "thread id type %d", type);
    size_t vs = sizeof(size_t), val = 8 << 20;
    CHECK(C.SetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &vs, &val) == 0, "DEVICE_BUFFER_SIZE");
    CHECK(C.SetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, &vs, &val) == 0, "POOL_LIMIT");
    const char *str = NULL;
    CHECK(C.GetResultString(39, &str) == 0 && !strcmp(str, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"), "%s", str);
    void *sub = NULL, *sub2 = NULL;
    CHECK(C.Subscribe(&sub, NULL, NULL) == 0, "first subscribe");
    CHECK(C.Subscribe(&sub2, NULL, NULL) == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "second subscribe");
    CHECK(C.Unsubscribe(sub) == 0, "unsubscribe");
#ifdef MOCK_CUDA13
    CHECK(C.Subscribe_v2(&sub2, NULL, NULL, NULL) == CUPTI_ERROR_NOT_SUPPORTED, "v2 calls outside v2only");
#endif
    CHECK(C.FlushAll(0) == CUPTI_ERROR_INVALID_OPERATION, "flush before registering");
    uint64_t garbage[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    mock_cupti_record *r = NULL;
    CHECK(C.GetNextRecord((uint8_t *)garbage, sizeof garbage, &r) == CUPTI_ERROR_INVALID_KIND, "garbage");
    r = NULL;
    CHECK(C.GetNextRecord((uint8_t *)garbage, 0, &r) == CUPTI_ERROR_MAX_LIMIT_REACHED, "empty");

    CHECK(C.RegisterCallbacks(st_request, st_complete) == 0, "register");
    const int kinds[] = {CUPTI_ACTIVITY_KIND_DEVICE, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME,
                         CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) CHECK(C.Enable(kinds[i]) == 0, "enable %d", kinds[i]);

    cudaStream_t s[2];
    CUDA(cudaStreamCreate(&s[0]));
    CUDA(cudaStreamCreate(&s[1]));
    void *dev = NULL;
    static char host[1 << 16];
    CUDA(cudaMalloc(&dev, 1 << 16));
    for (int i = 0; i < 2; i++) {
        CUDA(cudaMemcpyAsync(dev, host, 4096, cudaMemcpyHostToDevice, s[i]));
        for (int k = 0; k < 3; k++) st_launch(k, s[i]);
        CUDA(cudaMemsetAsync(dev, 0x5a, 1024, s[i]));
    }
    CUDA(cudaMemcpyAsync(host, dev, 2048, cudaMemcpyDeviceToHost, s[0]));
    CUDA(cudaStreamSynchronize(s[0]));
    CUDA(cudaStreamSynchronize(s[1]));
    st_launch(0, s[0]); /* the late launch: 20 ms after the first has run */
    st_sleep_ms(20);
    st_launch(1, s[0]);
    CUDA(cudaStreamSynchronize(s[0]));
    st_launch(2, NULL); /* the legacy stream */
    CUDA(cudaDeviceSynchronize());
    cudaEvent_t ev;
    CUDA(cudaEventCreate(&ev));
    st_launch(0, s[1]);
    CUDA(cudaEventRecord(ev, s[1]));
    CUDA(cudaEventSynchronize(ev));
    CUDA(cudaMemcpy(dev, host, 512, cudaMemcpyHostToDevice));
    CHECK(C.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == 0, "flush");

    /* kernels: 10, each once, on three streams (5 on s[0], 4 on s[1], 1 on the legacy one) */
    size_t nk = st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    CHECK(nk == 10, "%zu kernel records, want 10", nk);
    uint32_t sid[2] = {0, 0};
    uint64_t now = st_real_ns();
    for (size_t i = 0; i < nk; i++) {
        const mock_cupti_kernel *k = st_get(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, i);
        CHECK(k->start < k->end && k->completed == k->end, "kernel %zu: start %llu end %llu", i,
              (unsigned long long)k->start, (unsigned long long)k->end);
        CHECK(k->start + 60000000000ull > now && k->start < now, "kernel %zu: not a CLOCK_REALTIME time", i);
        CHECK(k->deviceId == 0 && k->contextId == 1 && k->gridX == 8 && k->blockX == 128, "kernel %zu fields", i);
        CHECK(k->name && (!strcmp(k->name, K[0].mangled) || !strcmp(k->name, K[1].mangled) ||
                          !strcmp(k->name, K[2].mangled)), "kernel %zu name %s", i, k->name ? k->name : "(null)");
        for (size_t j = 0; j < i; j++)
            CHECK(((const mock_cupti_kernel *)st_get(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, j))->correlationId !=
                  k->correlationId, "kernels %zu and %zu share correlation id %u", j, i, k->correlationId);
        const mock_cupti_api *a = driver_record(k->correlationId);
        CHECK(a && a->cbid == 307, "kernel %zu: no cuLaunchKernel (307) DRIVER record for correlation %u", i,
              k->correlationId);
        if (a) CHECK(a->threadId == (uint32_t)g_main_tid && a->processId == (uint32_t)getpid() && a->start <= a->end,
                     "DRIVER record: thread %u process %u", a->threadId, a->processId);
        if (k->streamId != 7 && !sid[0]) sid[0] = k->streamId;
    }
    /* the stream of 5 is s[0] */
    size_t per[2] = {0, 0}, legacy = 0;
    uint32_t other = 0;
    for (size_t i = 0; i < nk; i++) {
        uint32_t id = ((const mock_cupti_kernel *)st_get(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, i))->streamId;
        if (id == 7) legacy++;
        else if (id == sid[0]) per[0]++;
        else { per[1]++; other = id; }
    }
    if (per[0] == 4) { sid[1] = sid[0]; sid[0] = other; } else sid[1] = other;
    CHECK(legacy == 1 && per[0] + per[1] == 9 && sid[0] >= 13 && sid[1] >= 13 && sid[0] != sid[1],
          "stream ids %u %u (legacy kernels %zu)", sid[0], sid[1], legacy);
    /* one stream's kernels never overlap; the late launch leaves its gap */
    const mock_cupti_kernel *prev = NULL;
    for (size_t i = 0, n = 0; i < nk; i++) {
        const mock_cupti_kernel *k = st_get(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, i);
        if (k->streamId != sid[0]) continue;
        if (prev) CHECK(k->start >= prev->end, "kernels overlap on stream %u", sid[0]);
        if (++n == 5 && prev) CHECK(k->start - prev->end >= 19000000ull, "late launch gap %llu ns, want >= 19 ms",
                                    (unsigned long long)(k->start - prev->end));
        prev = k;
    }
    /* copies: 4096 HtoD on both streams, 2048 DtoH on s[0], 512 HtoD (synchronous) on the legacy one */
    size_t nc = st_count(CUPTI_ACTIVITY_KIND_MEMCPY), got = 0;
    CHECK(nc == 4, "%zu memcpy records, want 4", nc);
    for (size_t i = 0; i < nc; i++) {
        const mock_cupti_memcpy *m = st_get(CUPTI_ACTIVITY_KIND_MEMCPY, i);
        const mock_cupti_api *a = driver_record(m->correlationId);
        uint32_t cbid = a ? a->cbid : 0;
        if (m->copyKind == 1 && m->bytes == 4096 && cbid == 277 && (m->streamId == sid[0] || m->streamId == sid[1])) got++;
        if (m->copyKind == 2 && m->bytes == 2048 && cbid == 279 && m->streamId == sid[0]) got++;
        if (m->copyKind == 1 && m->bytes == 512 && cbid == 276 && m->streamId == 7) got++;
        CHECK(m->start <= m->end, "memcpy times");
    }
    CHECK(got == 4, "memcpy records as expected: %zu of 4", got);
    size_t ns = st_count(CUPTI_ACTIVITY_KIND_MEMSET);
    CHECK(ns == 2, "%zu memset records, want 2", ns);
    for (size_t i = 0; i < ns; i++) {
        const mock_cupti_memset *m = st_get(CUPTI_ACTIVITY_KIND_MEMSET, i);
        const mock_cupti_api *a = driver_record(m->correlationId);
        CHECK(m->value == 0x5a && m->bytes == 1024 && a && a->cbid == 216, "memset %zu", i);
    }
    /* synchronizations: s[0] twice ... */
    size_t ny = st_count(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION), s0 = 0, s1 = 0, ctx = 0, evs = 0;
    for (size_t i = 0; i < ny; i++) {
        const mock_cupti_sync *y = st_get(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, i);
        const mock_cupti_api *a = driver_record(y->correlationId);
        CHECK(y->start <= y->end && y->contextId == 1, "sync %zu", i);
        if (y->type == 3 && y->streamId == sid[0] && a && a->cbid == 126) s0++;
        if (y->type == 3 && y->streamId == sid[1] && a && a->cbid == 126) s1++;
        if (y->type == 4 && y->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE && a && (a->cbid == 17 || a->cbid == 800)) ctx++;
        if (y->type == 1 && y->streamId == sid[1] && y->cudaEventId > 0 && a && a->cbid == 121) evs++;
    }
    CHECK(ny == 5 && s0 == 2 && s1 == 1 && ctx == 1 && evs == 1, "sync records: %zu (s0 %zu s1 %zu ctx %zu event %zu)",
          ny, s0, s1, ctx, evs);
    /* the device */
    CHECK(st_count(CUPTI_ACTIVITY_KIND_DEVICE) == 1, "%zu device records", st_count(CUPTI_ACTIVITY_KIND_DEVICE));
    const mock_cupti_device *d = st_get(CUPTI_ACTIVITY_KIND_DEVICE, 0);
    unsigned char uuid[16] = {0};
    mockcuDeviceUuid_fn u = (mockcuDeviceUuid_fn)dlsym(RTLD_DEFAULT, "mockcuDeviceUuid");
    CHECK(u && u(0, uuid) == 0, "mockcuDeviceUuid");
    CUuuid cu;
    CHECK(cuDeviceGetUuid(&cu, 0) == 0 && !memcmp(cu.bytes, uuid, 16), "cuDeviceGetUuid");
    char bus[32];
    CHECK(cuDeviceGetPCIBusId(bus, sizeof bus, 0) == 0 && !strcmp(bus, "0000:18:00.0"), "bus id %s", bus);
    if (d) CHECK(d->id == 0 && !memcmp(d->uuid, uuid, 16) && d->name && !strcmp(d->name, "Mock H100") &&
                 d->computeCapabilityMajor == 9 && d->globalMemorySize > 0, "device record");
    size_t dropped = 99;
    CHECK(C.GetNumDroppedRecords(NULL, 0, &dropped) == 0 && dropped == 0, "dropped %zu", dropped);
    return g_fail;
}

/* ---- full buffers go through the delivery thread ---- */
static int mode_full(void) {
    load();
    g_bufsize = 2048; /* 9 or 8 kernel records */
    CHECK(C.RegisterCallbacks(st_request, st_complete) == 0 && C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "setup");
    for (int i = 0; i < 40; i++) st_launch(i % 3, NULL);
    CUDA(cudaDeviceSynchronize());
    for (int i = 0; i < 100 && !st_other_thread_deliveries(); i++) st_sleep_ms(10);
    CHECK(st_other_thread_deliveries() > 0, "no buffer delivered by CUPTI's thread");
    CHECK(C.FlushAll(1) == 0, "flush");
    size_t dropped = 99;
    C.GetNumDroppedRecords(NULL, 0, &dropped);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 40 && dropped == 0, "%zu kernels, %zu dropped",
          st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), dropped);
    return g_fail;
}

/* ---- a declining request callback ---- */
static int mode_decline(void) {
    load();
    g_decline = 1;
    CHECK(C.RegisterCallbacks(st_request, st_complete) == 0 && C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "setup");
    for (int i = 0; i < 5; i++) st_launch(0, NULL);
    CUDA(cudaDeviceSynchronize());
    C.FlushAll(1);
    size_t dropped = 0;
    CHECK(C.GetNumDroppedRecords(NULL, 0, &dropped) == 0 && dropped == 5, "dropped %zu, want 5", dropped);
    CHECK(C.GetNumDroppedRecords(NULL, 0, &dropped) == 0 && dropped == 0, "dropped not reset: %zu", dropped);
    g_decline = 0;
    for (int i = 0; i < 2; i++) st_launch(1, NULL);
    CUDA(cudaDeviceSynchronize());
    C.FlushAll(1);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 2, "%zu kernels after accepting",
          st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    return g_fail;
}

/* ---- a second registration takes everything ---- */
static int g_a_buffers;
static void a_request(uint8_t **buffer, size_t *size, size_t *max) {
    *buffer = aligned_alloc(8, 1 << 16);
    *size = 1 << 16;
    *max = 0;
}
static void a_complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size; (void)valid;
    __atomic_add_fetch(&g_a_buffers, 1, __ATOMIC_RELAXED);
    free(buffer);
}
static int mode_reregister(void) {
    load();
    CHECK(C.RegisterCallbacks(a_request, a_complete) == 0 && C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "A");
    st_launch(0, NULL);
    st_launch(1, NULL);
    CUDA(cudaDeviceSynchronize());
    CHECK(C.RegisterCallbacks(st_request, st_complete) == 0 && C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "B");
    for (int i = 0; i < 3; i++) st_launch(2, NULL);
    CUDA(cudaDeviceSynchronize());
    C.FlushAll(1);
    CHECK(g_a_buffers == 0 && st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 5,
          "A got %d buffers, B %zu kernels (want 0 and 5)", g_a_buffers, st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CHECK(C.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "disable");
    st_reset();
    st_launch(0, NULL);
    CUDA(cudaDeviceSynchronize());
    C.FlushAll(1);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0 && g_a_buffers == 0, "kernels recorded after the disable");
    return g_fail;
}

/* ---- periodic delivery ---- */
static int mode_delivery(void) {
    setenv("MOCK_CUPTI_DELIVERY_MS", "50", 1);
    load();
    CHECK(C.RegisterCallbacks(st_request, st_complete) == 0 && C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "setup");
    for (int i = 0; i < 3; i++) st_launch(i, NULL);
    CUDA(cudaDeviceSynchronize());
    for (int i = 0; i < 100 && st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) < 3; i++) st_sleep_ms(10);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 3 && st_other_thread_deliveries() > 0,
          "%zu kernels delivered without a flush", st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    return g_fail;
}

static const struct { const char *name; int (*fn)(void); } k_modes[] = {
    {"basic", mode_basic}, {"full", mode_full}, {"decline", mode_decline}, {"reregister", mode_reregister},
    {"delivery", mode_delivery}, {"busy", mode_busy}, {"v2only", mode_v2only}, {"drop", mode_drop},
    {"zero_ts", mode_zero_ts}, {"old_driver", mode_old_driver}, {"clock_step", mode_clock_step},
    {"slow_flush", mode_slow_flush}, {"app", mode_app}, {"inject", NULL},
};

int main(int argc, char **argv) {
    g_main_tid = (pid_t)syscall(SYS_gettid);
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) { perror("readlink"); return 1; }
    self[n] = 0;
    if (argc > 1) {
        g_mode = argv[1];
        if (!strcmp(g_mode, "inject")) return mode_inject(self) ? 1 : 0;
        for (size_t i = 0; i < sizeof k_modes / sizeof k_modes[0]; i++)
            if (k_modes[i].fn && !strcmp(k_modes[i].name, g_mode)) return k_modes[i].fn() ? 1 : 0;
        fprintf(stderr, "cupti_selftest: no mode %s\n", g_mode);
        return 2;
    }
    int failed = 0;
    for (size_t i = 0; i < sizeof k_modes / sizeof k_modes[0]; i++) {
        if (!strcmp(k_modes[i].name, "app")) continue; /* the injection mode's application */
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            unsetenv("MOCK_CUPTI_FAULT");
            unsetenv("MOCK_CUPTI_DELIVERY_MS");
            unsetenv("CUDA_INJECTION64_PATH");
            execl(self, self, k_modes[i].name, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        waitpid(p, &st, 0);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        printf("%s %s (libcupti.so.%d)\n", ok ? "ok" : "FAIL", k_modes[i].name, ST_MAJOR);
        failed |= !ok;
    }
    fflush(stdout);
    return failed;
}
