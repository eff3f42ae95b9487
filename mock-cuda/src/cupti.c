/* Mock libcupti (CUPTI's Activity API, v1, plus a little of CUDA 13's v2): built as
 * build/libcupti.so.12 (soname and single version node libcupti.so.12, API version 28, CUDA 12.9's
 * record layouts) and, with -DMOCK_CUPTI13, build/cu13/libcupti.so.13 (libcupti.so.13, API version
 * 130500, CUDA 13.5's layouts). It does not link the driver: it finds the mock driver's activity hook
 * (src/mock_activity.h) with dlsym(RTLD_DEFAULT) or in an already loaded libcuda.so.1 (RTLD_NOLOAD),
 * and attaches while a kind the hook feeds is enabled. Records, buffers and delivery: cupti_rec.c.
 *
 * As real CUPTI v1: one global registration of buffer callbacks (a later one replaces the earlier);
 * enabled kinds are global (anyone's disable turns a kind off for everyone). Kinds: MEMCPY 1,
 * MEMSET 2, KERNEL 3 (written like CONCURRENT_KERNEL, with kind 3, when 10 is not enabled), DRIVER 4,
 * RUNTIME 5 (accepted; the mock sees driver calls only, so it writes DRIVER records and no RUNTIME
 * ones), DEVICE 8 (one record per device seen: device 0 at the enable, others at their first work),
 * CONCURRENT_KERNEL 10, SYNCHRONIZATION 38; any other kind 1 .. 63 is accepted and writes nothing.
 * Timestamps are CLOCK_REALTIME ns, as real CUPTI's default on Linux.
 *
 * Fault switches, MOCK_CUPTI_FAULT (comma-separated, read at the first call):
 *   busy          cuptiActivityEnable returns 39 (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
 *   v2only        the v1 calls that have a _v2 twin return 14 (NOT_COMPATIBLE): RegisterCallbacks,
 *                 Enable, Disable, GetNextRecord, GetNumDroppedRecords, SetAttribute, GetTimestamp,
 *                 Subscribe; the CUDA 13 library's _v2 calls then work (otherwise they return 27)
 *   drop=N        every Nth record (of any kind) is dropped and counted as dropped
 *   zero_ts=N     every Nth kernel record has start = end = completed = 0
 *   old_driver    every call but cuptiGetVersion and cuptiGetResultString returns 15 (NOT_INITIALIZED)
 *   clock_step=MS from MS ms after the first enable, every timestamp written or returned is
 *                 MOCK_CUPTI_CLOCK_STEP_NS (default 2000000000) later than the clock
 *   slow_flush=MS cuptiActivityFlushAll sleeps MS ms before returning
 * MOCK_CUPTI_DELIVERY_MS (default 0: only full buffers) makes the delivery thread also hand over the
 * current buffer that often; MOCK_CUPTI_DEBUG=1 prints what the library does on stderr (it prints
 * nothing otherwise). */
#include "cupti_int.h"
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

struct cupti_faults g_fault;
uint64_t g_enabled;
uint64_t g_first_enable_ns;
int g_thread_id_type;
mockcuDeviceUuid_fn g_uuid_fn;
static pthread_mutex_t g_api_mu = PTHREAD_MUTEX_INITIALIZER; /* enable, disable, attach, subscribe */
static mockcuActivityAttach_fn g_attach;
static int g_attached;
static void *g_subscriber; /* the one subscriber (cuptiSubscribe / cuptiSubscribe_v2) */
static int g_period_set;   /* cuptiActivityFlushPeriod was called */

static uint64_t fault_num(const char *tok, const char *name) {
    size_t n = strlen(name);
    return strncmp(tok, name, n) == 0 && tok[n] == '=' ? strtoull(tok + n + 1, NULL, 10) : 0;
}
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_once(void) {
    g_fault.debug = getenv("MOCK_CUPTI_DEBUG") != NULL;
    const char *d = getenv("MOCK_CUPTI_DELIVERY_MS");
    g_fault.delivery_ms = d && *d ? strtoull(d, NULL, 10) : 0;
    const char *st = getenv("MOCK_CUPTI_CLOCK_STEP_NS");
    g_fault.step_ns = st && *st ? strtoull(st, NULL, 10) : 2000000000ull;
    const char *env = getenv("MOCK_CUPTI_FAULT");
    if (env && *env) {
        char *copy = strdup(env), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ') t++;
            if (!strcmp(t, "busy")) g_fault.busy = 1;
            else if (!strcmp(t, "v2only")) g_fault.v2only = 1;
            else if (!strcmp(t, "old_driver")) g_fault.old_driver = 1;
            else if (!strncmp(t, "drop=", 5)) g_fault.drop_n = fault_num(t, "drop");
            else if (!strncmp(t, "zero_ts=", 8)) g_fault.zero_ts_n = fault_num(t, "zero_ts");
            else if (!strncmp(t, "clock_step=", 11)) g_fault.clock_step_ms = fault_num(t, "clock_step");
            else if (!strncmp(t, "slow_flush=", 11)) g_fault.slow_flush_ms = fault_num(t, "slow_flush");
            else DEBUG("MOCK_CUPTI_FAULT: ignoring \"%s\"\n", t);
        }
        free(copy);
    }
    DEBUG("loaded, API version %u, faults: busy %d v2only %d old_driver %d drop %llu zero_ts %llu "
          "clock_step %llu slow_flush %llu\n", MOCK_CUPTI_API_VERSION, g_fault.busy, g_fault.v2only,
          g_fault.old_driver, (unsigned long long)g_fault.drop_n, (unsigned long long)g_fault.zero_ts_n,
          (unsigned long long)g_fault.clock_step_ms, (unsigned long long)g_fault.slow_flush_ms);
}
/* every call starts with this: the knobs, and old_driver's answer */
#define ENTER() do { pthread_once(&g_once, init_once); if (g_fault.old_driver) return CUPTI_ERROR_NOT_INITIALIZED; } while (0)
/* a v1 call with a _v2 twin */
#define ENTER_V1() do { ENTER(); if (g_fault.v2only) return CUPTI_ERROR_NOT_COMPATIBLE; } while (0)
/* a v2 call: only in v2only mode */
#define ENTER_V2() do { ENTER(); if (!g_fault.v2only) return CUPTI_ERROR_NOT_SUPPORTED; } while (0)

/* The driver's hook (the driver is loaded first in a real process). */
static int find_driver(void) {
    if (g_attach) return 1;
    mockcuActivityAttach_fn f = (mockcuActivityAttach_fn)dlsym(RTLD_DEFAULT, "mockcuActivityAttach");
    mockcuDeviceUuid_fn u = (mockcuDeviceUuid_fn)dlsym(RTLD_DEFAULT, "mockcuDeviceUuid");
    if (!f) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            f = (mockcuActivityAttach_fn)dlsym(h, "mockcuActivityAttach");
            u = (mockcuDeviceUuid_fn)dlsym(h, "mockcuDeviceUuid");
        }
    }
    if (!f) { DEBUG("no mock driver loaded (mockcuActivityAttach not found)\n"); return 0; }
    g_uuid_fn = u;
    g_attach = f;
    return 1;
}
/* attach while a kind the hook feeds is enabled (under g_api_mu) */
static void update_attach(void) {
    int want = (__atomic_load_n(&g_enabled, __ATOMIC_RELAXED) & RECORDED_KINDS) != 0;
    if (want == g_attached || !g_attach) return;
    g_attach(want ? &g_ops : NULL);
    g_attached = want;
    DEBUG("%s the driver\n", want ? "attached to" : "detached from");
}

static CUptiResult enable(int kind) {
    if (kind <= 0 || kind >= 64) return CUPTI_ERROR_INVALID_KIND;
    if (g_fault.busy) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    pthread_mutex_lock(&g_api_mu);
    if (!find_driver()) { pthread_mutex_unlock(&g_api_mu); return CUPTI_ERROR_NOT_INITIALIZED; }
    uint64_t none = 0;
    __atomic_compare_exchange_n(&g_first_enable_ns, &none, real_ns(), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    uint64_t before = __atomic_fetch_or(&g_enabled, KIND_BIT(kind), __ATOMIC_RELAXED);
    update_attach();
    pthread_mutex_unlock(&g_api_mu);
    if (kind == CUPTI_ACTIVITY_KIND_DEVICE && !(before & KIND_BIT(kind))) rec_devices_seen();
    DEBUG("enabled kind %d\n", kind);
    return CUPTI_SUCCESS;
}
static CUptiResult disable(int kind) {
    if (kind <= 0 || kind >= 64) return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&g_api_mu);
    __atomic_fetch_and(&g_enabled, ~KIND_BIT(kind), __ATOMIC_RELAXED);
    update_attach();
    pthread_mutex_unlock(&g_api_mu);
    DEBUG("disabled kind %d\n", kind);
    return CUPTI_SUCCESS;
}
static size_t record_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(mock_cupti_memcpy);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(mock_cupti_memset);
    case CUPTI_ACTIVITY_KIND_KERNEL: case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(mock_cupti_kernel);
    case CUPTI_ACTIVITY_KIND_DRIVER: case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(mock_cupti_api);
    case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(mock_cupti_device);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(mock_cupti_sync);
    default: return 0;
    }
}
/* record NULL on entry: the first; CUPTI_ERROR_MAX_LIMIT_REACHED past the last */
static CUptiResult next_record(uint8_t *buffer, size_t validSize, mock_cupti_record **record) {
    if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
    uint8_t *end = buffer + validSize, *p;
    if (!*record) {
        p = buffer + ((8 - ((uintptr_t)buffer & 7)) & 7);
    } else {
        uint8_t *cur = (uint8_t *)*record;
        size_t size = record_size((*record)->kind);
        if (cur < buffer || cur >= end || !size) return CUPTI_ERROR_INVALID_KIND;
        p = cur + size;
    }
    if (p + sizeof(uint32_t) > end) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    size_t size = record_size(((mock_cupti_record *)p)->kind);
    if (!size || p + size > end) return CUPTI_ERROR_INVALID_KIND; /* not a record the mock writes */
    *record = (mock_cupti_record *)p;
    return CUPTI_SUCCESS;
}
static CUptiResult set_attribute(int attr, size_t *valueSize, void *value) {
    if (!valueSize || !value) return CUPTI_ERROR_INVALID_PARAMETER;
    if (attr != CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE && attr != CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT)
        return CUPTI_ERROR_NOT_SUPPORTED; /* the mock has no device buffers: the value is accepted, unused */
    if (*valueSize != sizeof(size_t)) return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
    return CUPTI_SUCCESS;
}
static CUptiResult subscribe(void **subscriber, void *callback, void *userdata) {
    (void)callback; (void)userdata; /* the mock issues no API callbacks */
    if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_api_mu);
    CUptiResult r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    if (!g_subscriber) {
        g_subscriber = malloc(1);
        *subscriber = g_subscriber;
        r = g_subscriber ? CUPTI_SUCCESS : CUPTI_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_api_mu);
    return r;
}

/* ---- the exported API ---- */
API CUptiResult cuptiGetVersion(uint32_t *version) {
    if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
    *version = MOCK_CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    static const struct { int code; const char *s; } k[] = {
        {CUPTI_SUCCESS, "CUPTI_SUCCESS"}, {CUPTI_ERROR_INVALID_PARAMETER, "CUPTI_ERROR_INVALID_PARAMETER"},
        {CUPTI_ERROR_INVALID_OPERATION, "CUPTI_ERROR_INVALID_OPERATION"},
        {CUPTI_ERROR_OUT_OF_MEMORY, "CUPTI_ERROR_OUT_OF_MEMORY"},
        {CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT, "CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT"},
        {CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED"},
        {CUPTI_ERROR_NOT_COMPATIBLE, "CUPTI_ERROR_NOT_COMPATIBLE"},
        {CUPTI_ERROR_NOT_INITIALIZED, "CUPTI_ERROR_NOT_INITIALIZED"},
        {CUPTI_ERROR_INVALID_KIND, "CUPTI_ERROR_INVALID_KIND"}, {CUPTI_ERROR_NOT_SUPPORTED, "CUPTI_ERROR_NOT_SUPPORTED"},
        {CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"},
        {CUPTI_ERROR_UNKNOWN, "CUPTI_ERROR_UNKNOWN"},
    };
    if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].code == result) { *str = k[i].s; return CUPTI_SUCCESS; }
    *str = "CUPTI_ERROR_UNKNOWN";
    return CUPTI_ERROR_INVALID_PARAMETER;
}
API CUptiResult cuptiActivityRegisterCallbacks(mock_cupti_request_fn req, mock_cupti_complete_fn comp) {
    ENTER_V1();
    if (!req || !comp) return CUPTI_ERROR_INVALID_PARAMETER;
    rec_register(req, comp, NULL, NULL);
    if (g_fault.delivery_ms && !__atomic_load_n(&g_period_set, __ATOMIC_RELAXED)) rec_set_period(g_fault.delivery_ms);
    DEBUG("buffer callbacks registered\n");
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivityEnable(int kind) { ENTER_V1(); return enable(kind); }
API CUptiResult cuptiActivityDisable(int kind) { ENTER_V1(); return disable(kind); }
API CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    ENTER();
    CUptiResult r = rec_flush(flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (g_fault.slow_flush_ms && r == CUPTI_SUCCESS) {
        struct timespec ts = {(time_t)(g_fault.slow_flush_ms / 1000), (long)(g_fault.slow_flush_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {}
    }
    return r;
}
API CUptiResult cuptiActivityFlushPeriod(uint32_t time) {
    ENTER();
    __atomic_store_n(&g_period_set, 1, __ATOMIC_RELAXED);
    rec_set_period(time ? time : g_fault.delivery_ms);
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validSize, mock_cupti_record **record) {
    ENTER_V1();
    return next_record(buffer, validSize, record);
}
API CUptiResult cuptiActivityGetNumDroppedRecords(void *context, uint32_t streamId, size_t *dropped) {
    (void)context; (void)streamId; /* one global queue */
    ENTER_V1();
    if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
    *dropped = rec_take_dropped();
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    ENTER_V1();
    if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = cupti_ts(real_ns());
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiSetThreadIdType(int type) {
    ENTER();
    if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT && type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return CUPTI_ERROR_INVALID_PARAMETER;
    __atomic_store_n(&g_thread_id_type, type, __ATOMIC_RELAXED);
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiGetThreadIdType(int *type) {
    ENTER();
    if (!type) return CUPTI_ERROR_INVALID_PARAMETER;
    *type = __atomic_load_n(&g_thread_id_type, __ATOMIC_RELAXED);
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivitySetAttribute(int attr, size_t *valueSize, void *value) {
    ENTER_V1();
    return set_attribute(attr, valueSize, value);
}
/* Detach from the process: every buffer back to the client, kinds off, registration forgotten. */
API CUptiResult cuptiFinalize(void) {
    ENTER();
    pthread_mutex_lock(&g_api_mu);
    __atomic_store_n(&g_enabled, 0, __ATOMIC_RELAXED);
    update_attach();
    pthread_mutex_unlock(&g_api_mu);
    rec_finalize();
    DEBUG("finalized\n");
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiSubscribe(void **subscriber, void *callback, void *userdata) {
    ENTER_V1();
    return subscribe(subscriber, callback, userdata);
}
API CUptiResult cuptiUnsubscribe(void *subscriber) {
    ENTER();
    pthread_mutex_lock(&g_api_mu);
    CUptiResult r = CUPTI_ERROR_INVALID_PARAMETER;
    if (subscriber && subscriber == g_subscriber) {
        free(g_subscriber);
        g_subscriber = NULL;
        r = CUPTI_SUCCESS;
    }
    pthread_mutex_unlock(&g_api_mu);
    return r;
}

#ifdef MOCK_CUPTI13
/* ---- CUDA 13's per-subscriber (v2) calls: NOT_SUPPORTED unless v2only; then the same engine (one
 * subscriber, the same global kinds and registration) with the v2 shapes ---- */
static CUptiResult check_sub(void *subscriber) {
    pthread_mutex_lock(&g_api_mu);
    int ok = subscriber && subscriber == g_subscriber;
    pthread_mutex_unlock(&g_api_mu);
    return ok ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}
API CUptiResult cuptiSubscribe_v2(void **subscriber, void *callback, void *userdata, void *params) {
    (void)params;
    ENTER_V2();
    return subscribe(subscriber, callback, userdata);
}
API CUptiResult cuptiGetTimestamp_v2(void *subscriber, uint64_t *timestamp) {
    ENTER_V2();
    if (check_sub(subscriber) || !timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = cupti_ts(real_ns());
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivityRegisterCallbacks_v2(void *subscriber, cupti_request_v2_fn req, cupti_complete_v2_fn comp) {
    ENTER_V2();
    if (check_sub(subscriber) || !req || !comp) return CUPTI_ERROR_INVALID_PARAMETER;
    rec_register(NULL, NULL, req, comp);
    if (g_fault.delivery_ms && !__atomic_load_n(&g_period_set, __ATOMIC_RELAXED)) rec_set_period(g_fault.delivery_ms);
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivityEnable_v2(void *subscriber, int kind, void *config) {
    (void)config;
    ENTER_V2();
    return check_sub(subscriber) ? CUPTI_ERROR_INVALID_PARAMETER : enable(kind);
}
API CUptiResult cuptiActivityDisable_v2(void *subscriber, int kind, void *config) {
    (void)config;
    ENTER_V2();
    return check_sub(subscriber) ? CUPTI_ERROR_INVALID_PARAMETER : disable(kind);
}
API CUptiResult cuptiActivityGetNextRecord_v2(void *subscriber, uint8_t *buffer, size_t validSize,
                                              mock_cupti_record **record) {
    ENTER_V2();
    return check_sub(subscriber) ? CUPTI_ERROR_INVALID_PARAMETER : next_record(buffer, validSize, record);
}
API CUptiResult cuptiActivityGetNumDroppedRecords_v2(void *subscriber, void *context, uint32_t streamId,
                                                     size_t *dropped) {
    (void)context; (void)streamId;
    ENTER_V2();
    if (check_sub(subscriber) || !dropped) return CUPTI_ERROR_INVALID_PARAMETER;
    *dropped = rec_take_dropped();
    return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivitySetAttribute_v2(void *subscriber, int attr, size_t *valueSize, void *value) {
    ENTER_V2();
    return check_sub(subscriber) ? CUPTI_ERROR_INVALID_PARAMETER : set_attribute(attr, valueSize, value);
}
#endif
