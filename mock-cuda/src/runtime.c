/* Mock CUDA runtime (soname libcudart.so.12, symbols versioned `@@libcudart.so.12` like the real
 * one; built with -DMOCK_CUDA13 it is the CUDA 13 runtime, libcudart.so.13). Each runtime call
 * forwards to its driver call the way the real runtime does (cudaLaunchKernel -> cuLaunchKernel,
 * cudaLaunchKernelExC -> cuLaunchKernelEx, cudaMalloc -> cuMemAlloc_v2, cudaMallocAsync ->
 * cuMemAllocAsync, cudaDeviceSynchronize -> cuCtxSynchronize, or cuCtxSynchronize_v2 in CUDA 13,
 * ...), so a tracer sees realistic nesting. The `_ptsz` twins use the per-thread default stream
 * when given the null stream (and forward to the plain driver call with that stream).
 *
 * Kernels: nvcc's generated constructor registers each kernel's host stub with its device name
 * (__cudaRegisterFatBinary, __cudaRegisterFunction); __cudaGetKernel gives a registered stub's
 * opaque cudaKernel_t handle (a heap object, never the stub's address), which nvcc 13's launch
 * stubs pass to cudaLaunchKernel instead of the stub. The launch calls accept either and hand the
 * driver the host stub, as this mock's driver keys simulated kernel durations by it (and the
 * kernel names it reports to CUPTI: __cudaRegisterFunction tells it, mockcuRegisterFunction).
 * Like the real libcudart, the first call that needs the device calls cuInit(0) first. */
#define _GNU_SOURCE
#include "mock_cuda.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

_Static_assert(sizeof(cudaLaunchAttribute) == 72, "cudaLaunchAttribute is 72 bytes");
_Static_assert(offsetof(cudaLaunchAttribute, val) == 8, "cudaLaunchAttribute.val at 8");
_Static_assert(offsetof(cudaLaunchConfig_t, blockDim) == 12, "cudaLaunchConfig_t.blockDim at 12");
_Static_assert(offsetof(cudaLaunchConfig_t, dynamicSmemBytes) == 24, "dynamicSmemBytes at 24");
_Static_assert(offsetof(cudaLaunchConfig_t, stream) == 32, "cudaLaunchConfig_t.stream at 32");
_Static_assert(offsetof(cudaLaunchConfig_t, attrs) == 40, "cudaLaunchConfig_t.attrs at 40");
_Static_assert(offsetof(cudaLaunchConfig_t, numAttrs) == 48, "cudaLaunchConfig_t.numAttrs at 48");
_Static_assert(sizeof(cudaLaunchConfig_t) == 56, "cudaLaunchConfig_t is 56 bytes");
_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute), "runtime and driver attributes agree");

static __thread cudaError_t t_last;
static cudaError_t ret(CUresult r) { if (r) t_last = r; return r; }
/* The runtime initializes lazily, at the first call that needs the device, with cuInit(0) (which
 * loads CUDA_INJECTION64_PATH): RT(driver call) makes sure of it before the driver call. */
static pthread_once_t g_rt_once = PTHREAD_ONCE_INIT;
static int g_rt_ready;
static void rt_init_once(void) { cuInit(0); __atomic_store_n(&g_rt_ready, 1, __ATOMIC_RELEASE); }
static inline void rt_init(void) {
    if (__builtin_expect(!__atomic_load_n(&g_rt_ready, __ATOMIC_ACQUIRE), 0)) pthread_once(&g_rt_once, rt_init_once);
}
#define RT(call) (rt_init(), ret(call))
static CUstream ptsz(cudaStream_t s) { return s ? s : mockcuPerThreadStream(); }

/* ---- registered kernels: host stub, device name, the handle __cudaGetKernel gives ---- */
#define RCAP 1024
struct rt_kernel { const void *stub; const char *name; };
static struct { const void *stub; const char *name; struct rt_kernel *handle; } g_reg[RCAP];
static int g_nreg; /* published with release: entries below it are complete */
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;

API void **__cudaRegisterFatBinary(void *fatCubin) {
    void **h = calloc(1, sizeof(void *));
    *h = fatCubin;
    return h;
}
API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }
API void __cudaUnregisterFatBinary(void **fatCubinHandle) { (void)fatCubinHandle; }
API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                                int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
    (void)fatCubinHandle; (void)deviceFun; (void)thread_limit; (void)tid; (void)bid; (void)bDim; (void)gDim;
    (void)wSize;
    if (!hostFun) return;
    pthread_mutex_lock(&g_reg_mu);
    int n = g_nreg;
    for (int i = 0; i < n; i++)
        if (g_reg[i].stub == hostFun) { pthread_mutex_unlock(&g_reg_mu); return; }
    if (n < RCAP) {
        struct rt_kernel *k = malloc(sizeof(*k));
        k->stub = hostFun;
        k->name = deviceName;
        g_reg[n].stub = hostFun;
        g_reg[n].name = deviceName;
        g_reg[n].handle = k;
        __atomic_store_n(&g_nreg, n + 1, __ATOMIC_RELEASE);
        mockcuRegisterFunction(hostFun, deviceName); /* the name the driver reports its launches by */
    }
    pthread_mutex_unlock(&g_reg_mu);
}
API cudaError_t __cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr) {
    if (!kernelPtr) return ret(cudaErrorInvalidValue);
    int n = __atomic_load_n(&g_nreg, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_reg[i].stub == entryFuncAddr) { *kernelPtr = (cudaKernel_t)g_reg[i].handle; return cudaSuccess; }
    return ret(cudaErrorInvalidDeviceFunction);
}
/* The host stub a launch means: `func` is a cudaKernel_t from __cudaGetKernel or a host stub. */
static const void *stub_of(const void *func) {
    int n = __atomic_load_n(&g_nreg, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if ((const void *)g_reg[i].handle == func) return g_reg[i].stub;
    return func; /* a stub (registered or not: the mock launches unregistered stubs too) */
}

static cudaError_t launch(const void *func, dim3 g, dim3 b, void **args, size_t shmem, CUstream s) {
    return RT(cuLaunchKernel((CUfunction)stub_of(func), g.x, g.y, g.z, b.x, b.y, b.z, (unsigned int)shmem, s,
                             args, 0));
}
/* cudaLaunchKernelExC -> cuLaunchKernelEx with the same configuration (the attribute layouts agree) */
static cudaError_t launch_ex(const cudaLaunchConfig_t *c, const void *func, void **args, int per_thread) {
    if (!c) return ret(cudaErrorInvalidValue);
    CUlaunchConfig d = {
        .gridDimX = c->gridDim.x, .gridDimY = c->gridDim.y, .gridDimZ = c->gridDim.z,
        .blockDimX = c->blockDim.x, .blockDimY = c->blockDim.y, .blockDimZ = c->blockDim.z,
        .sharedMemBytes = (unsigned int)c->dynamicSmemBytes,
        .hStream = per_thread ? ptsz(c->stream) : c->stream,
        .attrs = (CUlaunchAttribute *)c->attrs,
        .numAttrs = c->numAttrs,
    };
    return RT(cuLaunchKernelEx(&d, (CUfunction)stub_of(func), args, NULL));
}
API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
    return launch_ex(config, func, args, 0);
}
API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args) {
    return launch_ex(config, func, args, 1);
}
API cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s) {
    return launch(func, g, b, args, shmem, s);
}
API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t shmem,
                                      cudaStream_t s) {
    return launch(func, g, b, args, shmem, ptsz(s));
}
API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    switch (kind) {
    case cudaMemcpyHostToDevice: return RT(cuMemcpyHtoD_v2((CUdeviceptr)dst, src, n));
    case cudaMemcpyDeviceToHost: return RT(cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, n));
    case cudaMemcpyDeviceToDevice: return RT(cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, n));
    default: return RT(cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n));
    }
}
static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, CUstream s) {
    switch (kind) {
    case cudaMemcpyHostToDevice: return RT(cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, n, s));
    case cudaMemcpyDeviceToHost: return RT(cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)src, n, s));
    default: return RT(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, s));
    }
}
API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    return memcpy_async(dst, src, n, kind, s);
}
API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                     cudaStream_t s) {
    return memcpy_async(dst, src, n, kind, ptsz(s));
}
static void fill2d(CUDA_MEMCPY2D *p, void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h) {
    *p = (CUDA_MEMCPY2D){0};
    p->dstHost = dst; p->dstDevice = (CUdeviceptr)dst; p->dstPitch = dpitch;
    p->srcHost = src; p->srcDevice = (CUdeviceptr)src; p->srcPitch = spitch;
    p->WidthInBytes = w; p->Height = h;
}
API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
                             enum cudaMemcpyKind kind) {
    (void)kind;
    CUDA_MEMCPY2D p;
    fill2d(&p, dst, dpitch, src, spitch, w, h);
    return RT(cuMemcpy2D_v2(&p));
}
API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
                                  enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    CUDA_MEMCPY2D p;
    fill2d(&p, dst, dpitch, src, spitch, w, h);
    return RT(cuMemcpy2DAsync_v2(&p, s));
}
API cudaError_t cudaMemcpyPeer(void *dst, int ddev, const void *src, int sdev, size_t n) {
    (void)ddev; (void)sdev;
    return RT(cuMemcpyPeer((CUdeviceptr)dst, 0, (CUdeviceptr)src, 0, n));
}
API cudaError_t cudaMemcpyPeerAsync(void *dst, int ddev, const void *src, int sdev, size_t n, cudaStream_t s) {
    (void)ddev; (void)sdev;
    return RT(cuMemcpyPeerAsync((CUdeviceptr)dst, 0, (CUdeviceptr)src, 0, n, s));
}
API cudaError_t cudaMalloc(void **ptr, size_t n) { return RT(cuMemAlloc_v2((CUdeviceptr *)ptr, n)); }
API cudaError_t cudaMallocManaged(void **ptr, size_t n, unsigned int flags) {
    return RT(cuMemAllocManaged((CUdeviceptr *)ptr, n, flags));
}
API cudaError_t cudaFree(void *ptr) { return RT(cuMemFree_v2((CUdeviceptr)ptr)); }
API cudaError_t cudaStreamCreate(cudaStream_t *s) { return RT(cuStreamCreate(s, 0)); }
API cudaError_t cudaStreamDestroy(cudaStream_t s) { return RT(cuStreamDestroy_v2(s)); }
API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return RT(cuStreamSynchronize(s)); }
API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return RT(cuStreamSynchronize(ptsz(s))); }
#ifdef MOCK_CUDA13
API cudaError_t cudaDeviceSynchronize(void) { return RT(cuCtxSynchronize_v2(NULL)); }
#else
API cudaError_t cudaDeviceSynchronize(void) { return RT(cuCtxSynchronize()); }
#endif
API cudaError_t cudaEventCreate(cudaEvent_t *e) { return RT(cuEventCreate(e, 0)); }
API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return RT(cuEventRecord(e, s)); }
API cudaError_t cudaEventSynchronize(cudaEvent_t e) { return RT(cuEventSynchronize(e)); }
API cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) { return RT(cuGraphLaunch(g, s)); }
API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s) { return RT(cuGraphLaunch(g, ptsz(s))); }
API cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    return RT(cuMemsetD8Async((CUdeviceptr)p, (unsigned char)v, n, s));
}
API cudaError_t cudaMemsetAsync_ptsz(void *p, int v, size_t n, cudaStream_t s) {
    return RT(cuMemsetD8Async((CUdeviceptr)p, (unsigned char)v, n, ptsz(s)));
}
API cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    return RT(cuMemAllocAsync((CUdeviceptr *)p, n, s));
}
API cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) {
    return RT(cuMemAllocAsync((CUdeviceptr *)p, n, ptsz(s)));
}
API cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return RT(cuMemFreeAsync((CUdeviceptr)p, s)); }
API cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return RT(cuMemFreeAsync((CUdeviceptr)p, ptsz(s))); }
API cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) { return RT(cuMemHostAlloc(p, n, flags)); }
/* not ready is an answer, not an error: it does not become the last error */
API cudaError_t cudaEventQuery(cudaEvent_t e) {
    rt_init();
    CUresult r = cuEventQuery(e);
    return r == cudaErrorNotReady ? r : ret(r);
}
API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    return RT(cuStreamWaitEvent(s, e, flags));
}
API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    return RT(cuStreamWaitEvent(ptsz(s), e, flags));
}
/* the scheduling flags belong to the device's primary context */
API cudaError_t cudaSetDeviceFlags(unsigned int flags) { return RT(cuDevicePrimaryCtxSetFlags_v2(0, flags)); }
API cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    return RT(cuStreamBeginCapture_v2(s, (CUstreamCaptureMode)mode));
}
API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) { return RT(cuStreamEndCapture(s, g)); }
API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    return RT(cuGraphInstantiateWithFlags(e, g, flags));
}
API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *userData) {
    return RT(cuLaunchHostFunc(s, fn, userData));
}
API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void *userData) {
    return RT(cuLaunchHostFunc(ptsz(s), fn, userData));
}
/* The current device is the calling thread's, as in the real runtime (NCCL reads it at init); the
 * mock accepts any device number >= 0 and runs every device's work on its one set of streams. The
 * driver is told too (mockcuSetDevice, no CUDA call): it slows the work of a device while a planted
 * MOCK_GPU_THROTTLE window for that device is in force. */
static __thread int t_device;
API cudaError_t cudaSetDevice(int device) {
    if (device < 0) return ret(cudaErrorInvalidDevice);
    t_device = device;
    mockcuSetDevice(device);
    return cudaSuccess;
}
API cudaError_t cudaGetDevice(int *device) {
    if (!device) return ret(cudaErrorInvalidValue);
    *device = t_device;
    return cudaSuccess;
}
API cudaError_t cudaGetLastError(void) { cudaError_t e = t_last; t_last = 0; return e; }
