/* What the mock driver's source files (driver.c: streams, work, synchronization; driver_mem.c: the
 * allocator and VMM; driver_obj.c: init and injection, contexts, devices, modules, graphs, kernel
 * names; driver_act.c: the activity hook) share. Everything here has hidden visibility (the library
 * is built with -fvisibility=hidden); only API-marked functions are exported. */
#ifndef MOCK_DRIVER_INT_H
#define MOCK_DRIVER_INT_H
#define _GNU_SOURCE
#include "mock_cuda.h"
#include "mock_activity.h"
#include "mock_clock.h"
#include "mock_gpu.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define QCAP 1024 /* like the real launch queue: launches block when 1024 are pending */

/* CUresult values */
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, INVALID_HANDLE = 400,
       ILLEGAL_STATE = 401, NOT_READY = 600, STREAM_CAPTURE_UNSUPPORTED = 900 };

/* CUPTI's driver callback ids (cupti_driver_cbid.h; the same in CUDA 12.9 and 13) of the calls the
 * mock reports to an attached activity hook */
enum {
    CBID_cuCtxSynchronize = 17, CBID_cuEventRecord = 119, CBID_cuEventSynchronize = 121,
    CBID_cuStreamSynchronize = 126, CBID_cuMemsetD8Async = 216, CBID_cuMemsetD16Async = 218,
    CBID_cuMemsetD32Async = 220, CBID_cuMemcpyHtoD_v2 = 276, CBID_cuMemcpyHtoDAsync_v2 = 277,
    CBID_cuMemcpyDtoH_v2 = 278, CBID_cuMemcpyDtoHAsync_v2 = 279, CBID_cuMemcpyDtoD_v2 = 280,
    CBID_cuMemcpyDtoDAsync_v2 = 281, CBID_cuMemcpy2D_v2 = 287, CBID_cuMemcpy2DAsync_v2 = 289,
    CBID_cuStreamWaitEvent = 295, CBID_cuMemcpy = 305, CBID_cuMemcpyAsync = 306, CBID_cuLaunchKernel = 307,
    CBID_cuMemcpyPeer = 318, CBID_cuMemcpyPeerAsync = 319, CBID_cuMemcpyDtoDAsync_v2_ptsz = 423,
    CBID_cuMemsetD8Async_ptsz = 428, CBID_cuMemsetD16Async_ptsz = 429, CBID_cuMemsetD32Async_ptsz = 430,
    CBID_cuGraphLaunch = 514, CBID_cuGraphLaunch_ptsz = 515,
    CBID_cuLaunchHostFunc = 527, CBID_cuLaunchHostFunc_ptsz = 528, CBID_cuLaunchKernelEx = 652,
    CBID_cuLaunchKernelEx_ptsz = 653, CBID_cuCtxSynchronize_v2 = 800,
};

/* What an item of GPU work reports when it finishes (only filled while a hook is attached: an item
 * with corr 0 reports nothing). */
struct qact {
    uint32_t corr;
    uint8_t kind, copy_kind, src_kind, dst_kind; /* enum mock_work_kind; CUPTI numbering */
    uint32_t value, shmem;
    uint64_t bytes;
    const char *name;
    uint32_t grid[3], block[3];
};
/* One item of GPU work: `dur` ns of running (at full speed) on device `dev`, after waiting
 * (cuStreamWaitEvent) until `wait_s` has completed `wait_seq` items when `wait_s` is set; a host
 * function (cuLaunchHostFunc) is `fn(arg)`, run by the stream's worker when the stream gets to it,
 * the stream held until it returns. */
struct qitem {
    uint64_t dur;
    struct CUstream_st *wait_s;
    uint64_t wait_seq;
    CUhostFn fn;
    void *arg;
    int dev;
    int fault; /* MOCK_CUDA_FAULT_AT: running it breaks the context (illegal address) */
    int pcie;  /* a copy between host and device: slower on a link below its maximum (MOCK_NVML_PCIE) */
    struct qact act;
};
struct CUgraph_st { uint64_t ns; unsigned nodes; };
struct CUgraphExec_st { uint64_t ns; unsigned nodes; struct CUgraphExec_st *next; };
struct CUstream_st {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct qitem q[QCAP];
    uint64_t submitted, completed; /* sequence numbers */
    struct CUgraph_st *capture;    /* while capturing: where work goes instead of the queue */
    pthread_t worker;
    uint32_t id;                   /* CUPTI's stream id: 7 legacy, 13, 14, ... the others */
    struct CUstream_st *next;
};
struct CUevent_st { CUstream stream; uint64_t seq; uint32_t id; };
struct CUctx_st { unsigned int flags; CUdevice dev; };

/* driver.c */
extern pthread_mutex_t g_mu;
extern pthread_once_t g_once;
void init_once(void);
extern uint64_t g_kernel_ns, g_heap, g_frag_ns;
extern int g_frag, g_auto_spins;
extern unsigned int g_primary_flags;
extern struct CUgraphExec_st *g_execs;
extern __thread CUcontext t_ctx;
extern __thread int t_dev;
CUstream resolve(CUstream s);
/* What a _ptsz entry point means by the null stream: the per-thread default stream. */
static inline CUstream ptsz(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }
uint64_t enqueue_item(CUstream s, struct qitem it);
uint64_t env_u64(const char *name, uint64_t dflt);
void spin_ns(uint64_t ns);

/* driver_mem.c */
int dev_ptr_known(CUdeviceptr p); /* whether p is inside a device allocation or mapping */

/* driver_obj.c: kernel names by CUfunction or host stub */
void names_add(const void *key, const char *name);
const char *names_get(const void *key); /* NULL when unknown */

/* driver_act.c: the activity hook */
extern const struct mock_activity_ops *g_act_ops;
struct act_scope { const struct mock_activity_ops *ops; uint32_t corr; uint64_t start; };
void act_begin_slow(struct act_scope *sc, const struct mock_activity_ops *ops);
CUresult act_end_slow(struct act_scope *sc, uint32_t cbid, CUresult r);
void act_work(CUstream s, const struct qitem *it, uint64_t start, uint64_t end);
void act_sync(uint32_t corr, int type, uint32_t stream_id, uint32_t event_id, uint64_t start, CUresult r);

/* A reported call: `body` (which may use CORR, the call's correlation id, 0 when nothing is
 * attached: then the work it queues reports nothing) runs between the call's start and end;
 * unattached, the cost is one relaxed load. */
#define REPORTED(cbid, body) do { \
        struct act_scope sc_ = {0}; \
        const struct mock_activity_ops *ops_ = __atomic_load_n(&g_act_ops, __ATOMIC_RELAXED); \
        if (__builtin_expect(ops_ != NULL, 0)) act_begin_slow(&sc_, ops_); \
        __attribute__((unused)) const uint32_t CORR = sc_.corr; \
        CUresult r_ = (body); \
        if (__builtin_expect(sc_.ops != NULL, 0)) r_ = act_end_slow(&sc_, (cbid), r_); \
        return r_; \
    } while (0)
#endif
