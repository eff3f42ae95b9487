/* Mock CUDA driver, the activity hook (src/mock_activity.h): the mock libcupti attaches its
 * operations with mockcuActivityAttach; each reported call (REPORTED in driver_int.h) then gets a
 * correlation id and an API report when it returns, the work it queued a work report when the
 * stream's worker has run it, and host waits a synchronization report. Detached (the default),
 * a reported call costs one relaxed atomic load. */
#include "driver_int.h"
#include <sys/syscall.h>
#include <unistd.h>

const struct mock_activity_ops *g_act_ops;
static __thread struct act_scope t_act; /* the reported call in progress on this thread, if any */
static uint32_t g_corr; /* the last correlation id given */

API void mockcuActivityAttach(const struct mock_activity_ops *ops) {
    __atomic_store_n(&g_act_ops, ops, __ATOMIC_RELEASE);
}

void act_begin_slow(struct act_scope *sc, const struct mock_activity_ops *ops) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the ops were published with release */
    if (t_act.ops) return; /* inside another reported call on this thread: only the outer one reports */
    uint32_t c;
    do c = __atomic_add_fetch(&g_corr, 1, __ATOMIC_RELAXED); while (!c); /* 0 means none */
    sc->ops = ops;
    sc->corr = c;
    sc->start = mock_unix_ns();
    t_act = *sc;
}

CUresult act_end_slow(struct act_scope *sc, uint32_t cbid, CUresult r) {
    uint64_t end = mock_unix_ns();
    t_act = (struct act_scope){0};
    if (sc->ops->api) {
        struct mock_activity_api a = {
            .cbid = cbid, .correlation_id = sc->corr, .start_ns = sc->start, .end_ns = end,
            .tid = (int32_t)syscall(SYS_gettid), .pthread = (uint64_t)pthread_self(), .result = r,
        };
        sc->ops->api(&a);
    }
    return r;
}

void act_work(CUstream s, const struct qitem *it, uint64_t start, uint64_t end) {
    const struct mock_activity_ops *ops = __atomic_load_n(&g_act_ops, __ATOMIC_ACQUIRE);
    if (!ops || !ops->work) return; /* detached since the call */
    const struct qact *a = &it->act;
    struct mock_activity_work w = {
        .kind = a->kind, .device = it->dev, .context_id = MOCK_CONTEXT_ID, .stream_id = s->id,
        .correlation_id = a->corr, .start_ns = start, .end_ns = end, .bytes = a->bytes,
        .copy_kind = a->copy_kind, .src_kind = a->src_kind, .dst_kind = a->dst_kind, .value = a->value,
        .name = a->name, .shared_mem = a->shmem,
    };
    memcpy(w.grid, a->grid, sizeof w.grid);
    memcpy(w.block, a->block, sizeof w.block);
    ops->work(&w);
}

void act_sync(uint32_t corr, int type, uint32_t stream_id, uint32_t event_id, uint64_t start, CUresult r) {
    const struct mock_activity_ops *ops = __atomic_load_n(&g_act_ops, __ATOMIC_ACQUIRE);
    if (!ops || !ops->sync) return; /* detached since the call began */
    struct mock_activity_sync y = {
        .type = type, .context_id = MOCK_CONTEXT_ID, .stream_id = stream_id, .event_id = event_id,
        .correlation_id = corr, .start_ns = start, .end_ns = mock_unix_ns(), .result = r,
    };
    ops->sync(&y);
}
