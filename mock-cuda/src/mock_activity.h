/* The mock driver's activity hook: how the mock libcupti (src/cupti.c) learns what the mock driver
 * (libcuda.so.1) did, to write CUPTI activity records of it. Not a CUDA API: the driver exports
 * `mockcuActivityAttach` (found by the mock libcupti with dlsym, as the real libcupti finds the real
 * driver's internal interfaces), and calls the attached operations:
 *   api:  when a reported driver API call returns (launches, copies, memsets, graph launches, host
 *         functions, event records and waits, synchronizations; see the README for the list);
 *   work: when an item of GPU work (kernel, copy, memset, graph replay) finishes on its stream's
 *         worker, with the start and end the worker took around its run;
 *   sync: when a host wait (cuStreamSynchronize, cuCtxSynchronize(_v2), cuEventSynchronize) returns.
 * Each is called outside every driver lock, from the thread that made the call (api, sync) or from
 * the stream's worker (work), before the work's completion is published (so a synchronize that
 * returns has had its work reported). All timestamps are CLOCK_REALTIME ns. Correlation ids come
 * from one counter per process, one per reported call; the work a call queued carries its call's id.
 * While nothing is attached, a driver call pays one relaxed atomic load for the hook. */
#ifndef MOCK_ACTIVITY_H
#define MOCK_ACTIVITY_H
#include <stdint.h>
#include <sys/types.h>

/* what a work item is (not CUPTI's numbering: CUPTI writes kinds 10, 1, 2) */
enum mock_work_kind { MOCK_WORK_KERNEL = 1, MOCK_WORK_MEMCPY = 2, MOCK_WORK_MEMSET = 3 };
/* CUPTI's CUpti_ActivitySynchronizationType numbering */
enum mock_sync_type { MOCK_SYNC_EVENT = 1, MOCK_SYNC_STREAM = 3, MOCK_SYNC_CONTEXT = 4 };
#define MOCK_ACTIVITY_NONE 0xffffffffu /* a stream or event id that does not apply */
#define MOCK_CONTEXT_ID 1u             /* the one context's id */
#define MOCK_STREAM_ID_LEGACY 7u       /* the legacy default stream; created streams 13, 14, ... */

struct mock_activity_api {
    uint32_t cbid;           /* CUPTI_DRIVER_TRACE_CBID_* of the call */
    uint32_t correlation_id;
    uint64_t start_ns, end_ns;
    int32_t tid;             /* gettid() of the calling thread */
    uint64_t pthread;        /* pthread_self() of the calling thread */
    int32_t result;          /* the CUresult it returned */
};
struct mock_activity_work {
    int32_t kind;            /* enum mock_work_kind */
    int32_t device;          /* the device current on the thread that queued it */
    uint32_t context_id, stream_id, correlation_id;
    uint64_t start_ns, end_ns; /* taken by the stream's worker around the item's run */
    uint64_t bytes;          /* copies and memsets */
    uint8_t copy_kind;       /* copies: CUPTI numbering, HtoD 1, DtoH 2, DtoD 8, HtoH 9, PtoP 10 */
    uint8_t src_kind, dst_kind; /* copies: CUPTI memory kinds, pageable 1, device 3 */
    uint32_t value;          /* memsets: the value */
    const char *name;        /* kernels: the function's name (lives as long as the process) */
    uint32_t grid[3], block[3]; /* kernels (a graph replay: zeros) */
    uint32_t shared_mem;     /* kernels: dynamic shared memory bytes */
};
struct mock_activity_sync {
    int32_t type;            /* enum mock_sync_type */
    uint32_t context_id;
    uint32_t stream_id;      /* MOCK_ACTIVITY_NONE for a context synchronize */
    uint32_t event_id;       /* the event's id for an event synchronize, else MOCK_ACTIVITY_NONE */
    uint32_t correlation_id;
    uint64_t start_ns, end_ns; /* the wait */
    int32_t result;
};
struct mock_activity_ops {
    void (*api)(const struct mock_activity_api *a);
    void (*work)(const struct mock_activity_work *w);
    void (*sync)(const struct mock_activity_sync *s);
};

/* exported by the mock driver (default visibility) */
void mockcuActivityAttach(const struct mock_activity_ops *ops); /* NULL detaches */
int mockcuDeviceUuid(int dev, unsigned char out[16]);            /* 0, or 1 for a bad ordinal */
typedef void (*mockcuActivityAttach_fn)(const struct mock_activity_ops *ops);
typedef int (*mockcuDeviceUuid_fn)(int dev, unsigned char out[16]);
#endif
