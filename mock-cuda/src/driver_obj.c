/* Mock CUDA driver, the objects around the work: cuInit (which loads CUDA_INJECTION64_PATH, as the
 * real driver does), contexts and their scheduling flags, devices (UUIDs and PCI bus ids, the same
 * as the mock NVML's), stream capture and graph instantiation, modules, libraries, kernels and
 * functions (distinct heap objects; the same name asked twice of one module (library) gives the
 * same CUfunction (CUkernel)), and the kernel names the activity hook reports: a CUfunction's or
 * CUkernel's own, or the device name the runtime registered for a host stub (mockcuRegisterFunction).
 *
 * Injection: the first cuInit of the process, if CUDA_INJECTION64_PATH is set and not empty,
 * dlopens it (RTLD_NOW | RTLD_LOCAL) and calls its `int InitializeInjection(void)`. A library that
 * does not load, has no such symbol or returns 0 changes nothing for the application (a line on
 * stderr with MOCK_CUPTI_DEBUG set). cuInit called from inside InitializeInjection returns at once. */
#include "driver_int.h"
#include <dlfcn.h>
#include <stdio.h>

/* ---- cuInit and the injection library ---- */
static pthread_once_t g_inject_once = PTHREAD_ONCE_INIT;
static __thread int t_injecting;
static void inject_once(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path) return;
    int debug = getenv("MOCK_CUPTI_DEBUG") != NULL;
    t_injecting = 1;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        if (debug) fprintf(stderr, "mockcuda: CUDA_INJECTION64_PATH: %s\n", dlerror());
    } else {
        int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
        if (!init) {
            if (debug) fprintf(stderr, "mockcuda: %s has no InitializeInjection\n", path);
            dlclose(h);
        } else {
            int r = init();
            if (debug) fprintf(stderr, "mockcuda: %s: InitializeInjection returned %d\n", path, r);
        }
    }
    t_injecting = 0;
}
API CUresult cuInit(unsigned int flags) {
    (void)flags;
    pthread_once(&g_once, init_once);
    if (!t_injecting) pthread_once(&g_inject_once, inject_once);
    return OK;
}
API CUresult cuDriverGetVersion(int *v) { if (v) *v = 12040; return OK; }

/* ---- devices: the mock NVML's UUIDs and PCI bus ids (src/mock_gpu.h) ---- */
API int mockcuDeviceUuid(int dev, unsigned char out[16]) {
    if (!out || dev < 0 || dev >= MOCK_GPU_MAX) return 1;
    mock_gpu_uuid(dev, out);
    return 0;
}
API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    if (!uuid) return INVALID_VALUE;
    return mockcuDeviceUuid(dev, (unsigned char *)uuid->bytes) ? INVALID_DEVICE : OK;
}
API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }
API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    if (!pciBusId || len <= 0) return INVALID_VALUE;
    if (dev < 0 || dev >= MOCK_GPU_MAX) return INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", 0u, mock_gpu_bus(dev), 0u);
    return OK;
}

/* ---- contexts: flags decide how synchronize calls wait (see driver.c) ---- */
API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    pthread_once(&g_once, init_once);
    if (!pctx) return INVALID_VALUE;
    if (dev != 0) return INVALID_DEVICE; /* the mock has one GPU */
    CUcontext c = calloc(1, sizeof(*c));
    c->flags = flags;
    c->dev = dev;
    t_ctx = c; /* a new context is current on the calling thread */
    t_dev = dev;
    *pctx = c;
    return OK;
}
API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    if (dev != 0) return INVALID_DEVICE;
    __atomic_store_n(&g_primary_flags, flags, __ATOMIC_RELAXED);
    return OK;
}
API CUresult cuCtxSetFlags(unsigned int flags) {
    if (t_ctx) __atomic_store_n(&t_ctx->flags, flags, __ATOMIC_RELAXED);
    else __atomic_store_n(&g_primary_flags, flags, __ATOMIC_RELAXED);
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

/* ---- kernel names: CUfunctions, CUkernels and registered host stubs, by address ---- */
#define NCAP 4096 /* open addressing; full: later names are unknown ("mock_kernel") */
static struct { const void *key; const char *name; } g_names[NCAP];
static pthread_mutex_t g_names_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t name_slot(const void *key) { return ((uintptr_t)key >> 4) * 0x9e3779b97f4a7c15ull >> 52; }
void names_add(const void *key, const char *name) {
    if (!key || !name) return;
    pthread_mutex_lock(&g_names_mu);
    for (size_t i = name_slot(key), n = 0; n < NCAP; i = (i + 1) % NCAP, n++) {
        if (g_names[i].key && g_names[i].key != key) continue;
        g_names[i].key = key;
        g_names[i].name = name;
        break;
    }
    pthread_mutex_unlock(&g_names_mu);
}
const char *names_get(const void *key) {
    const char *name = NULL;
    pthread_mutex_lock(&g_names_mu);
    for (size_t i = name_slot(key), n = 0; n < NCAP && g_names[i].key; i = (i + 1) % NCAP, n++)
        if (g_names[i].key == key) { name = g_names[i].name; break; }
    pthread_mutex_unlock(&g_names_mu);
    return name;
}
/* Mock-only (not a CUDA call): the runtime's __cudaRegisterFunction tells the driver a host stub's
 * device name, which the activity hook reports for launches of that stub. The name must live as
 * long as the process (nvcc's are string literals). */
API void mockcuRegisterFunction(const void *hostFun, const char *deviceName) { names_add(hostFun, deviceName); }

/* ---- modules, libraries, kernels, functions: distinct heap objects, one per name ---- */
struct CUfunc_st { char *name; struct CUfunc_st *next; };
struct CUmod_st { const void *image; struct CUfunc_st *funcs; };
struct CUkern_st { char *name; CUfunction func; struct CUkern_st *next; };
struct CUlib_st { const void *code; struct CUkern_st *kernels; };
static CUfunction func_new(const char *name) {
    CUfunction f = calloc(1, sizeof(*f));
    f->name = strdup(name);
    names_add(f, f->name);
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
        names_add(k, k->name); /* a CUkernel may be launched as a CUfunction */
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
