/* What the mock libcupti's two source files share: cupti.c (the API, the fault switches, finding
 * the driver's hook) and cupti_rec.c (the records the hook's reports become, the buffers they go
 * into, the delivery thread, flushing). Hidden visibility (built with -fvisibility=hidden). */
#ifndef MOCK_CUPTI_INT_H
#define MOCK_CUPTI_INT_H
#define _GNU_SOURCE
#include "mock_activity.h"
#include "mock_cupti.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define API __attribute__((visibility("default")))
#define KIND_BIT(k) (1ull << (k))
#define RECORDED_KINDS (KIND_BIT(CUPTI_ACTIVITY_KIND_MEMCPY) | KIND_BIT(CUPTI_ACTIVITY_KIND_MEMSET) | \
                        KIND_BIT(CUPTI_ACTIVITY_KIND_KERNEL) | KIND_BIT(CUPTI_ACTIVITY_KIND_DRIVER) | \
                        KIND_BIT(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) | \
                        KIND_BIT(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) /* the kinds the hook feeds */

/* MOCK_CUPTI_FAULT and the other knobs, read once (cupti.c) */
struct cupti_faults {
    int busy, v2only, old_driver, debug;
    uint64_t drop_n, zero_ts_n;     /* every Nth record dropped; every Nth kernel's timestamps zero */
    uint64_t clock_step_ms, step_ns; /* the clock jumps step_ns, clock_step_ms after the first enable */
    uint64_t slow_flush_ms;         /* cuptiActivityFlushAll sleeps this long before returning */
    uint64_t delivery_ms;           /* the delivery thread's period (0: only full buffers) */
};
extern struct cupti_faults g_fault;
extern uint64_t g_enabled;          /* KIND_BIT of the enabled kinds (atomic) */
extern uint64_t g_first_enable_ns;  /* CLOCK_REALTIME of the first successful enable (atomic) */
extern int g_thread_id_type;        /* CUPTI_ACTIVITY_THREAD_ID_TYPE_* (atomic) */
extern mockcuDeviceUuid_fn g_uuid_fn;

#define DEBUG(...) do { if (g_fault.debug) fprintf(stderr, "mockcupti: " __VA_ARGS__); } while (0)

static inline uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* A timestamp as CUPTI writes or returns it: CLOCK_REALTIME, plus the planted step (clock_step). */
static inline uint64_t cupti_ts(uint64_t t) {
    if (!g_fault.clock_step_ms || !t) return t;
    uint64_t first = __atomic_load_n(&g_first_enable_ns, __ATOMIC_RELAXED);
    return first && t >= first + g_fault.clock_step_ms * 1000000ull ? t + g_fault.step_ns : t;
}
static inline int kind_on(int kind) {
    return (__atomic_load_n(&g_enabled, __ATOMIC_RELAXED) & KIND_BIT(kind)) != 0;
}

/* cupti_rec.c */
extern const struct mock_activity_ops g_ops; /* what cupti.c attaches to the driver */
/* the one registration of buffer callbacks: v1 or (CUDA 13, v2only) v2 shapes */
typedef void (*cupti_request_v2_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords, void *info);
typedef void (*cupti_complete_v2_fn)(uint8_t *buffer, size_t size, size_t validSize, void *info);
void rec_register(mock_cupti_request_fn req, mock_cupti_complete_fn comp, cupti_request_v2_fn req2,
                  cupti_complete_v2_fn comp2);
int rec_registered(void);
void rec_device(int dev);           /* write device dev's DEVICE record unless written already */
void rec_devices_seen(void);        /* DEVICE enabled: write the records of device 0 and those seen */
CUptiResult rec_flush(int forced);  /* hand every non-empty buffer to the completion callback */
size_t rec_take_dropped(void);      /* the dropped count since the last call; resets it */
void rec_finalize(void);            /* flush and forget the registration */
void rec_set_period(uint64_t ms);
int rec_in_callback(void);          /* whether this thread is inside a buffer callback */
#endif
