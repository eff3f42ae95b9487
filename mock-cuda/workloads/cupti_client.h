/* For the mock's own CUPTI clients (gpuloop's foreign client, cupti_selftest, inject_probe): load a
 * libcupti the way a profiler beside the application does, without LD_LIBRARY_PATH: the one already
 * loaded (dlopen of the soname with RTLD_NOLOAD), else the one beside the library that holds
 * `anchor` (a symbol of the runtime or the driver: the mock builds put libcupti.so.12 beside
 * build/libcudart.so.12 and libcupti.so.13 beside build/cu13/), and look up its calls. The record
 * layouts are the mock's own (src/mock_cupti.h), the same as the real ones. Header-only. */
#ifndef WORKLOAD_CUPTI_CLIENT_H
#define WORKLOAD_CUPTI_CLIENT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../src/mock_cupti.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void (*cupti_req2_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords, void *info);
typedef void (*cupti_comp2_fn)(uint8_t *buffer, size_t size, size_t validSize, void *info);
struct cupti_api {
    void *lib;
    char path[4096];
    CUptiResult (*GetVersion)(uint32_t *);
    CUptiResult (*GetResultString)(CUptiResult, const char **);
    CUptiResult (*RegisterCallbacks)(mock_cupti_request_fn, mock_cupti_complete_fn);
    CUptiResult (*Enable)(int);
    CUptiResult (*Disable)(int);
    CUptiResult (*FlushAll)(uint32_t);
    CUptiResult (*GetNextRecord)(uint8_t *, size_t, mock_cupti_record **);
    CUptiResult (*GetNumDroppedRecords)(void *, uint32_t, size_t *);
    CUptiResult (*GetTimestamp)(uint64_t *);
    CUptiResult (*SetThreadIdType)(int);
    CUptiResult (*GetThreadIdType)(int *);
    CUptiResult (*SetAttribute)(int, size_t *, void *);
    CUptiResult (*Finalize)(void);
    CUptiResult (*Subscribe)(void **, void *, void *);
    CUptiResult (*Unsubscribe)(void *);
    /* CUDA 13 only (NULL in libcupti.so.12) */
    CUptiResult (*Subscribe_v2)(void **, void *, void *, void *);
    CUptiResult (*GetTimestamp_v2)(void *, uint64_t *);
    CUptiResult (*RegisterCallbacks_v2)(void *, cupti_req2_fn, cupti_comp2_fn);
    CUptiResult (*Enable_v2)(void *, int, void *);
    CUptiResult (*Disable_v2)(void *, int, void *);
    CUptiResult (*GetNextRecord_v2)(void *, uint8_t *, size_t, mock_cupti_record **);
};

/* Load libcupti.so.<major>; returns 0, or -1 with a message on stderr. */
static inline int cupti_load(struct cupti_api *c, int major, const char *anchor_symbol) {
    memset(c, 0, sizeof *c);
    char soname[32];
    snprintf(soname, sizeof soname, "libcupti.so.%d", major);
    c->lib = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    snprintf(c->path, sizeof c->path, "%s", soname);
    if (!c->lib) {
        Dl_info info;
        void *anchor = dlsym(RTLD_DEFAULT, anchor_symbol);
        if (!anchor || !dladdr(anchor, &info) || !info.dli_fname) {
            fprintf(stderr, "cupti client: cannot find %s to look beside\n", anchor_symbol);
            return -1;
        }
        const char *slash = strrchr(info.dli_fname, '/');
        int dir = slash ? (int)(slash - info.dli_fname) : 1;
        snprintf(c->path, sizeof c->path, "%.*s/%s", dir, slash ? info.dli_fname : ".", soname);
        c->lib = dlopen(c->path, RTLD_NOW | RTLD_LOCAL);
        if (!c->lib) { fprintf(stderr, "cupti client: %s\n", dlerror()); return -1; }
    }
#define CUPTI_SYM(f, name) (*(void **)&c->f = dlsym(c->lib, name))
    CUPTI_SYM(GetVersion, "cuptiGetVersion"); CUPTI_SYM(GetResultString, "cuptiGetResultString");
    CUPTI_SYM(RegisterCallbacks, "cuptiActivityRegisterCallbacks"); CUPTI_SYM(Enable, "cuptiActivityEnable");
    CUPTI_SYM(Disable, "cuptiActivityDisable"); CUPTI_SYM(FlushAll, "cuptiActivityFlushAll");
    CUPTI_SYM(GetNextRecord, "cuptiActivityGetNextRecord");
    CUPTI_SYM(GetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
    CUPTI_SYM(GetTimestamp, "cuptiGetTimestamp"); CUPTI_SYM(SetThreadIdType, "cuptiSetThreadIdType");
    CUPTI_SYM(GetThreadIdType, "cuptiGetThreadIdType"); CUPTI_SYM(SetAttribute, "cuptiActivitySetAttribute");
    CUPTI_SYM(Finalize, "cuptiFinalize"); CUPTI_SYM(Subscribe, "cuptiSubscribe");
    CUPTI_SYM(Unsubscribe, "cuptiUnsubscribe");
    CUPTI_SYM(Subscribe_v2, "cuptiSubscribe_v2"); CUPTI_SYM(GetTimestamp_v2, "cuptiGetTimestamp_v2");
    CUPTI_SYM(RegisterCallbacks_v2, "cuptiActivityRegisterCallbacks_v2");
    CUPTI_SYM(Enable_v2, "cuptiActivityEnable_v2"); CUPTI_SYM(Disable_v2, "cuptiActivityDisable_v2");
    CUPTI_SYM(GetNextRecord_v2, "cuptiActivityGetNextRecord_v2");
#undef CUPTI_SYM
    if (!c->GetVersion || !c->RegisterCallbacks || !c->Enable || !c->Disable || !c->FlushAll ||
        !c->GetNextRecord || !c->GetTimestamp) {
        fprintf(stderr, "cupti client: %s lacks the activity API\n", c->path);
        return -1;
    }
    return 0;
}
#endif
