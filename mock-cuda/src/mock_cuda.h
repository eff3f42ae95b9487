/* Mock CUDA: the subset of the CUDA runtime and driver APIs that Causeway traces, with the real
 * symbol names and signatures (x86-64 SysV ABI), plus a few mock-only controls (mockcu*). */
#ifndef MOCK_CUDA_H
#define MOCK_CUDA_H
#include <stddef.h>
#include <stdint.h>

/* ---- driver API (libcuda.so.1) ---- */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUctx_st *CUcontext;
typedef struct CUevent_st *CUevent;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice;
    void *srcArray; size_t srcPitch;
    size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice;
    void *dstArray; size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *v);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
                        void **extra);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p);
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream stream);
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t bytes);
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t bytes,
                           CUstream stream);
CUresult cuCtxSynchronize(void);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuStreamCreate(CUstream *stream, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuEventCreate(CUevent *ev, unsigned int flags);
CUresult cuEventRecord(CUevent ev, CUstream stream);
CUresult cuEventSynchronize(CUevent ev);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream);

/* mock-only controls */
void mockcuSetKernelNs(const void *func, uint64_t ns); /* simulated duration of one kernel */
CUstream mockcuPerThreadStream(void);                  /* the per-thread default stream (ptsz) */

/* ---- runtime API (libcudart.so.12) ---- */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct { unsigned int x, y, z; } dim3;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                  cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                                 cudaStream_t s);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyPeer(void *dst, int ddev, const void *src, int sdev, size_t bytes);
cudaError_t cudaMemcpyPeerAsync(void *dst, int ddev, const void *src, int sdev, size_t bytes, cudaStream_t s);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaMallocManaged(void **ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s);
cudaError_t cudaGetLastError(void);
#endif
