/* Mock CUDA runtime (soname libcudart.so.12, symbols versioned `@@libcudart.so.12` like the real
 * one). Each runtime call forwards to its driver call the way the real runtime does
 * (cudaLaunchKernel -> cuLaunchKernel, cudaMalloc -> cuMemAlloc_v2, cudaDeviceSynchronize ->
 * cuCtxSynchronize, ...), so a tracer sees realistic nesting. The `_ptsz` twins use the per-thread
 * default stream when given the null stream. */
#define _GNU_SOURCE
#include "mock_cuda.h"

#define API __attribute__((visibility("default")))

static __thread cudaError_t t_last;
static cudaError_t ret(CUresult r) { if (r) t_last = r; return r; }
static CUstream ptsz(cudaStream_t s) { return s ? s : mockcuPerThreadStream(); }

static cudaError_t launch(const void *func, dim3 g, dim3 b, void **args, size_t shmem, CUstream s) {
    return ret(cuLaunchKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned int)shmem, s, args, 0));
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
    case cudaMemcpyHostToDevice: return ret(cuMemcpyHtoD_v2((CUdeviceptr)dst, src, n));
    case cudaMemcpyDeviceToHost: return ret(cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, n));
    case cudaMemcpyDeviceToDevice: return ret(cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, n));
    default: return ret(cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n));
    }
}
static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, CUstream s) {
    switch (kind) {
    case cudaMemcpyHostToDevice: return ret(cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, n, s));
    case cudaMemcpyDeviceToHost: return ret(cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)src, n, s));
    default: return ret(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, s));
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
    return ret(cuMemcpy2D_v2(&p));
}
API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
                                  enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    CUDA_MEMCPY2D p;
    fill2d(&p, dst, dpitch, src, spitch, w, h);
    return ret(cuMemcpy2DAsync_v2(&p, s));
}
API cudaError_t cudaMemcpyPeer(void *dst, int ddev, const void *src, int sdev, size_t n) {
    (void)ddev; (void)sdev;
    return ret(cuMemcpyPeer((CUdeviceptr)dst, 0, (CUdeviceptr)src, 0, n));
}
API cudaError_t cudaMemcpyPeerAsync(void *dst, int ddev, const void *src, int sdev, size_t n, cudaStream_t s) {
    (void)ddev; (void)sdev;
    return ret(cuMemcpyPeerAsync((CUdeviceptr)dst, 0, (CUdeviceptr)src, 0, n, s));
}
API cudaError_t cudaMalloc(void **ptr, size_t n) { return ret(cuMemAlloc_v2((CUdeviceptr *)ptr, n)); }
API cudaError_t cudaMallocManaged(void **ptr, size_t n, unsigned int flags) {
    return ret(cuMemAllocManaged((CUdeviceptr *)ptr, n, flags));
}
API cudaError_t cudaFree(void *ptr) { return ret(cuMemFree_v2((CUdeviceptr)ptr)); }
API cudaError_t cudaStreamCreate(cudaStream_t *s) { return ret(cuStreamCreate(s, 0)); }
API cudaError_t cudaStreamDestroy(cudaStream_t s) { return ret(cuStreamDestroy_v2(s)); }
API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return ret(cuStreamSynchronize(s)); }
API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return ret(cuStreamSynchronize(ptsz(s))); }
API cudaError_t cudaDeviceSynchronize(void) { return ret(cuCtxSynchronize()); }
API cudaError_t cudaEventCreate(cudaEvent_t *e) { return ret(cuEventCreate(e, 0)); }
API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return ret(cuEventRecord(e, s)); }
API cudaError_t cudaEventSynchronize(cudaEvent_t e) { return ret(cuEventSynchronize(e)); }
API cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) { return ret(cuGraphLaunch(g, s)); }
API cudaError_t cudaGetLastError(void) { cudaError_t e = t_last; t_last = 0; return e; }
