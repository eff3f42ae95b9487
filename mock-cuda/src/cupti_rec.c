/* Mock libcupti, the records and their buffers. The driver's hook reports (src/mock_activity.h)
 * become activity records of the enabled kinds (src/mock_cupti.h), written 8-byte aligned one after
 * another into the current buffer. As real CUPTI v1: one global registration of buffer callbacks;
 * when a record needs space the request callback is asked for a buffer, from whatever thread
 * produced the record (a NULL buffer or size 0 declines: the record is dropped and counted); a full
 * buffer goes to the delivery thread (a pthread of this library, "mockcupti-dlv"), which hands it to
 * the completion callback outside every lock of the driver and of this library's buffers;
 * cuptiActivityFlushAll hands every non-empty buffer over in the calling thread. Buffers are handed
 * over one at a time, in the order they were filled, to whichever completion callback is registered
 * when they are handed over (a later cuptiActivityRegisterCallbacks silently takes the records,
 * including those in buffers the earlier client's request callback gave). A buffer that arrives while
 * another thread already installed one, or that is too small for the record, is handed back empty
 * (validSize 0). With a delivery period (MOCK_CUPTI_DELIVERY_MS, cuptiActivityFlushPeriod), the
 * delivery thread also hands over the current buffer when it has records and the period passed. */
#include "cupti_int.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct full { uint8_t *buf; size_t size, valid; struct full *next; };
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;         /* the buffers and the registration */
static pthread_mutex_t g_deliver_mu = PTHREAD_MUTEX_INITIALIZER; /* one delivery at a time, in order */
static pthread_cond_t g_cv;                                       /* wakes the delivery thread */
static pthread_once_t g_thread_once = PTHREAD_ONCE_INIT;
static mock_cupti_request_fn g_req;
static mock_cupti_complete_fn g_comp;
static cupti_request_v2_fn g_req2;
static cupti_complete_v2_fn g_comp2;
static uint8_t *g_cur;                                 /* the buffer records go into */
static size_t g_cur_size, g_cur_used, g_cur_max, g_cur_n; /* its size, bytes used, record limit, records */
static struct full *g_head, *g_tail;                  /* filled, waiting for delivery */
static size_t g_dropped;                              /* since the last cuptiActivityGetNumDroppedRecords */
static uint64_t g_nrec, g_nkernel;                    /* records and kernel records made (faults) */
static uint64_t g_period_ms;
static uint32_t g_devices_written, g_devices_seen;    /* bit per device ordinal */
static __thread int t_in_cb;                          /* inside a buffer callback */

int rec_in_callback(void) { return t_in_cb; }
int rec_registered(void) {
    pthread_mutex_lock(&g_mu);
    int r = g_req || g_req2;
    pthread_mutex_unlock(&g_mu);
    return r;
}

static void push_locked(uint8_t *buf, size_t size, size_t valid) {
    struct full *f = malloc(sizeof(*f));
    if (!f) return; /* out of memory: the buffer is lost */
    *f = (struct full){buf, size, valid, NULL};
    if (g_tail) g_tail->next = f; else g_head = f;
    g_tail = f;
}
static void push_cur_locked(void) {
    push_locked(g_cur, g_cur_size, g_cur_used);
    g_cur = NULL;
}

/* Hand the queued buffers (and, with take_cur, the current one: if it has records, or any if
 * take_cur is 2) to the completion callback, in this thread. */
static void deliver(int take_cur) {
    pthread_mutex_lock(&g_deliver_mu);
    pthread_mutex_lock(&g_mu);
    if (take_cur && g_cur && (g_cur_n || take_cur == 2)) push_cur_locked();
    struct full *l = g_head;
    g_head = g_tail = NULL;
    mock_cupti_complete_fn comp = g_comp;
    cupti_complete_v2_fn comp2 = g_comp2;
    pthread_mutex_unlock(&g_mu);
    int was = t_in_cb;
    t_in_cb = 1;
    while (l) {
        struct full *next = l->next;
        if (comp) {
            comp(NULL, 0, l->buf, l->size, l->valid);
        } else if (comp2) {
            struct { size_t structSize; uint64_t threadId; void **layouts; size_t nlayouts; } info = {
                sizeof info, (uint64_t)syscall(SYS_gettid), NULL, 0};
            comp2(l->buf, l->size, l->valid, &info);
        }
        free(l);
        l = next;
    }
    t_in_cb = was;
    pthread_mutex_unlock(&g_deliver_mu);
}

static void *delivery_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        if (!g_head) {
            uint64_t period = __atomic_load_n(&g_period_ms, __ATOMIC_RELAXED);
            if (period) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t ns = (uint64_t)ts.tv_nsec + period * 1000000ull;
                ts.tv_sec += (time_t)(ns / 1000000000ull);
                ts.tv_nsec = (long)(ns % 1000000000ull);
                if (pthread_cond_timedwait(&g_cv, &g_mu, &ts) == ETIMEDOUT && g_cur && g_cur_n) push_cur_locked();
            } else {
                pthread_cond_wait(&g_cv, &g_mu);
            }
        }
        if (!g_head) continue;
        pthread_mutex_unlock(&g_mu);
        deliver(0);
        pthread_mutex_lock(&g_mu);
    }
    return NULL;
}
static void start_thread(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_cv, &a);
    pthread_condattr_destroy(&a);
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the application's signals are not for this thread */
    if (pthread_create(&t, NULL, delivery_main, NULL) == 0) {
        pthread_setname_np(t, "mockcupti-dlv");
        pthread_detach(t);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
void rec_set_period(uint64_t ms) {
    __atomic_store_n(&g_period_ms, ms, __ATOMIC_RELAXED);
    pthread_once(&g_thread_once, start_thread);
    pthread_mutex_lock(&g_mu);
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

void rec_register(mock_cupti_request_fn req, mock_cupti_complete_fn comp, cupti_request_v2_fn req2,
                  cupti_complete_v2_fn comp2) {
    pthread_once(&g_thread_once, start_thread);
    pthread_mutex_lock(&g_mu);
    g_req = req; g_comp = comp; g_req2 = req2; g_comp2 = comp2;
    pthread_mutex_unlock(&g_mu);
}

/* Write one record into the current buffer (asking for one when needed). */
static void emit(const void *rec, size_t size) {
    uint64_t n = __atomic_add_fetch(&g_nrec, 1, __ATOMIC_RELAXED);
    if (g_fault.drop_n && n % g_fault.drop_n == 0) { __atomic_add_fetch(&g_dropped, 1, __ATOMIC_RELAXED); return; }
    int pushed = 0;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        if (g_cur && g_cur_size - g_cur_used >= size && (!g_cur_max || g_cur_n < g_cur_max)) {
            memcpy(g_cur + g_cur_used, rec, size);
            g_cur_used += size;
            g_cur_n++;
            break;
        }
        if (g_cur) { push_cur_locked(); pushed = 1; }
        mock_cupti_request_fn req = g_req;
        cupti_request_v2_fn req2 = g_req2;
        if (!req && !req2) { __atomic_add_fetch(&g_dropped, 1, __ATOMIC_RELAXED); break; }
        uint8_t *b = NULL;
        size_t sz = 0, maxr = 0;
        pthread_mutex_unlock(&g_mu); /* the client's callback runs outside this library's locks */
        int was = t_in_cb;
        t_in_cb = 1;
        if (req) {
            req(&b, &sz, &maxr);
        } else {
            struct { size_t structSize; } info = {sizeof info};
            req2(&b, &sz, &maxr, &info);
        }
        t_in_cb = was;
        pthread_mutex_lock(&g_mu);
        if (!b || !sz) { __atomic_add_fetch(&g_dropped, 1, __ATOMIC_RELAXED); break; } /* declined */
        size_t off = (8 - ((uintptr_t)b & 7)) & 7; /* records are 8-byte aligned */
        if (g_cur || sz < off + size) { /* another thread got one meanwhile, or too small: back, empty */
            push_locked(b, sz, 0);
            pushed = 1;
            if (!g_cur) { __atomic_add_fetch(&g_dropped, 1, __ATOMIC_RELAXED); break; }
            continue;
        }
        g_cur = b; g_cur_size = sz; g_cur_used = off; g_cur_max = maxr; g_cur_n = 0;
    }
    if (pushed) pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* ---- the hook's reports, as records ---- */
static void on_api(const struct mock_activity_api *a) {
    if (!kind_on(CUPTI_ACTIVITY_KIND_DRIVER)) return;
    int system = __atomic_load_n(&g_thread_id_type, __ATOMIC_RELAXED) == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM;
    mock_cupti_api r = {
        .kind = CUPTI_ACTIVITY_KIND_DRIVER, .cbid = a->cbid, .start = cupti_ts(a->start_ns),
        .end = cupti_ts(a->end_ns), .processId = (uint32_t)getpid(),
        .threadId = system ? (uint32_t)a->tid : (uint32_t)a->pthread, .correlationId = a->correlation_id,
        .returnValue = (uint32_t)a->result,
    };
    emit(&r, sizeof r);
}
static void seen(int dev) {
    if (dev < 0 || dev >= 32) return;
    uint32_t bit = 1u << dev;
    if (__atomic_load_n(&g_devices_seen, __ATOMIC_RELAXED) & bit) return;
    __atomic_fetch_or(&g_devices_seen, bit, __ATOMIC_RELAXED);
    if (kind_on(CUPTI_ACTIVITY_KIND_DEVICE)) rec_device(dev);
}
static void on_work(const struct mock_activity_work *w) {
    seen(w->device);
    uint64_t start = cupti_ts(w->start_ns), end = cupti_ts(w->end_ns);
    if (w->kind == MOCK_WORK_KERNEL) {
        int kind = kind_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                 : kind_on(CUPTI_ACTIVITY_KIND_KERNEL) ? CUPTI_ACTIVITY_KIND_KERNEL : 0;
        if (!kind) return;
        uint64_t n = __atomic_add_fetch(&g_nkernel, 1, __ATOMIC_RELAXED);
        if (g_fault.zero_ts_n && n % g_fault.zero_ts_n == 0) start = end = 0;
        mock_cupti_kernel r;
        memset(&r, 0, sizeof r);
        r.kind = (uint32_t)kind;
        r.registersPerThread = 32;
        r.start = start; r.end = end; r.completed = end;
        r.deviceId = (uint32_t)w->device; r.contextId = w->context_id; r.streamId = w->stream_id;
        r.gridX = (int32_t)w->grid[0]; r.gridY = (int32_t)w->grid[1]; r.gridZ = (int32_t)w->grid[2];
        r.blockX = (int32_t)w->block[0]; r.blockY = (int32_t)w->block[1]; r.blockZ = (int32_t)w->block[2];
        r.dynamicSharedMemory = (int32_t)w->shared_mem;
        r.correlationId = w->correlation_id;
        r.gridId = (int64_t)w->correlation_id;
        r.name = w->name;
        emit(&r, sizeof r);
    } else if (w->kind == MOCK_WORK_MEMCPY) {
        if (!kind_on(CUPTI_ACTIVITY_KIND_MEMCPY)) return;
        mock_cupti_memcpy r;
        memset(&r, 0, sizeof r);
        r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        r.copyKind = w->copy_kind; r.srcKind = w->src_kind; r.dstKind = w->dst_kind;
        r.bytes = w->bytes; r.start = start; r.end = end;
        r.deviceId = (uint32_t)w->device; r.contextId = w->context_id; r.streamId = w->stream_id;
        r.correlationId = w->correlation_id;
        emit(&r, sizeof r);
    } else if (w->kind == MOCK_WORK_MEMSET) {
        if (!kind_on(CUPTI_ACTIVITY_KIND_MEMSET)) return;
        mock_cupti_memset r;
        memset(&r, 0, sizeof r);
        r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
        r.value = w->value; r.bytes = w->bytes; r.start = start; r.end = end;
        r.deviceId = (uint32_t)w->device; r.contextId = w->context_id; r.streamId = w->stream_id;
        r.correlationId = w->correlation_id;
        r.memoryKind = 3; /* device */
        emit(&r, sizeof r);
    }
}
static void on_sync(const struct mock_activity_sync *y) {
    if (!kind_on(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) return;
    mock_cupti_sync r = {
        .kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, .type = (uint32_t)y->type, .start = cupti_ts(y->start_ns),
        .end = cupti_ts(y->end_ns), .correlationId = y->correlation_id, .contextId = y->context_id,
        .streamId = y->stream_id, .cudaEventId = y->event_id,
        .cudaEventSyncId = y->event_id == MOCK_ACTIVITY_NONE ? CUPTI_SYNCHRONIZATION_INVALID_VALUE : y->event_id,
        .returnValue = (uint32_t)y->result,
    };
    emit(&r, sizeof r);
}
const struct mock_activity_ops g_ops = {on_api, on_work, on_sync};

/* ---- DEVICE records: an H100 SXM5 with the driver's UUID ---- */
void rec_device(int dev) {
    if (dev < 0 || dev >= 32) return;
    uint32_t bit = 1u << dev;
    if (__atomic_fetch_or(&g_devices_written, bit, __ATOMIC_RELAXED) & bit) return;
    mock_cupti_device r;
    memset(&r, 0, sizeof r);
    r.kind = CUPTI_ACTIVITY_KIND_DEVICE;
    const char *heap = getenv("MOCK_CUDA_HEAP_MB"); /* the driver's device memory */
    r.globalMemorySize = (heap && *heap ? strtoull(heap, NULL, 10) : 81920ull) << 20;
    r.globalMemoryBandwidth = 3352000000ull; /* KB/s */
    r.constantMemorySize = 65536; r.l2CacheSize = 50u << 20; r.numThreadsPerWarp = 32;
    r.coreClockRate = 1980000; /* kHz */
    r.numMemcpyEngines = 5; r.numMultiprocessors = 132; r.maxIPC = 4; r.maxWarpsPerMultiprocessor = 64;
    r.maxBlocksPerMultiprocessor = 32; r.maxSharedMemoryPerMultiprocessor = 233472;
    r.maxRegistersPerMultiprocessor = 65536; r.maxRegistersPerBlock = 65536; r.maxSharedMemoryPerBlock = 49152;
    r.maxThreadsPerBlock = 1024; r.maxBlockDimX = 1024; r.maxBlockDimY = 1024; r.maxBlockDimZ = 64;
    r.maxGridDimX = 2147483647u; r.maxGridDimY = 65535; r.maxGridDimZ = 65535;
    r.computeCapabilityMajor = 9; r.computeCapabilityMinor = 0;
    r.id = (uint32_t)dev; r.eccEnabled = 1;
    if (g_uuid_fn) g_uuid_fn(dev, r.uuid);
    r.name = "Mock H100";
    emit(&r, sizeof r);
}
void rec_devices_seen(void) {
    rec_device(0);
    uint32_t s = __atomic_load_n(&g_devices_seen, __ATOMIC_RELAXED);
    for (int i = 1; i < 32; i++)
        if (s & (1u << i)) rec_device(i);
}

CUptiResult rec_flush(int forced) {
    (void)forced; /* the mock's records are complete when written: both flushes hand over the same */
    if (t_in_cb) return CUPTI_ERROR_INVALID_OPERATION; /* not from a buffer callback */
    if (!rec_registered()) return CUPTI_ERROR_INVALID_OPERATION;
    deliver(1);
    return CUPTI_SUCCESS;
}
size_t rec_take_dropped(void) { return __atomic_exchange_n(&g_dropped, 0, __ATOMIC_RELAXED); }
void rec_finalize(void) {
    if (!t_in_cb) deliver(2); /* every buffer goes back, the current one even if empty */
    pthread_mutex_lock(&g_mu);
    g_req = NULL; g_comp = NULL; g_req2 = NULL; g_comp2 = NULL;
    pthread_mutex_unlock(&g_mu);
    __atomic_store_n(&g_devices_written, 0, __ATOMIC_RELAXED);
}
