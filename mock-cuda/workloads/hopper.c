/* A Hopper-era training step on the mock runtime and driver: what PyTorch 2.x with Triton, CUTLASS
 * sm90 kernels, the cudaMallocAsync allocator, expandable segments and CUDA graphs calls. Built for
 * CUDA 12 (build/hopper: kernels launched by host stub) and CUDA 13 (build/cu13/hopper, with
 * -DMOCK_CUDA13: launches name the kernel by its __cudaGetKernel handle; cudaDeviceSynchronize
 * reaches the driver as cuCtxSynchronize_v2). One thread ("gpu"); `--iters N` (default 50),
 * `--sched F` (the scheduling flags of cudaSetDeviceFlags and the driver's context calls, default 4
 * = blocking sync; 1 = spin), `--kernel-us K` (simulated kernel duration, default 20).
 *
 * Once: cudaSetDeviceFlags, cuInit, cuCtxCreate_v2, cuDevicePrimaryCtxSetFlags_v2, cuCtxSetFlags;
 * two streams and an event; a Triton kernel from cuModuleLoadData + cuModuleGetFunction and a
 * CUTLASS kernel from cuLibraryLoadData + cuLibraryGetKernel + cuKernelGetFunction; cudaMalloc x2,
 * cudaHostAlloc; the VMM path (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemUnmap, cuMemRelease,
 * cuMemAddressFree); one failing cudaMallocAsync of 1 PiB; a graph captured from three `<<<>>>`
 * launches (cudaStreamBeginCapture, cudaStreamEndCapture, cudaGraphInstantiate).
 * Per iteration: two `<<<>>>` launches; cudaLaunchKernelExC (grid 4x2x1, block 128, 48 KiB dynamic
 * shared memory, cluster 2x1x1); cudaLaunchKernelExC_ptsz (grid 8, block 256, no attributes);
 * cuLaunchKernelEx of the Triton function (grid 16, block 64, 1 KiB shared); cuLaunchKernelEx_ptsz of
 * the CUTLASS function (grid 132, block 384, 227 KiB shared, cluster 2x1x1); cudaMemsetAsync,
 * cuMemsetD32Async, cudaMallocAsync + cudaFreeAsync, cuMemcpyDtoDAsync_v2, cudaGraphLaunch,
 * cudaEventRecord, cudaStreamWaitEvent, cudaEventQuery x2, cudaEventSynchronize.
 * At the end: cuGraphLaunch x5, cuCtxSynchronize_v2, cudaDeviceSynchronize, cudaFree x2.
 * Prints KERNEL/FUNCTION lines (handle -> name), FAIL for the one call that fails on purpose, and
 * `CALLS <symbol> <n>` for every call it made (launches made while capturing included). */
#define WL_NAMED_ONLY
#include "kernels.h"

__attribute__((noinline, used)) void vector_add_stub(void) { __asm__ volatile("nop"); }
__attribute__((noinline, used)) void layernorm_fwd_stub(void) { __asm__ volatile("nop; nop"); }
__attribute__((noinline, used)) void flash_fwd_sm90_stub(void) { __asm__ volatile("nop; nop; nop"); }
__attribute__((noinline, used)) void reduce_sum_stub(void) { __asm__ volatile("nop; nop; nop; nop"); }

enum { K_VECTOR_ADD, K_LAYERNORM, K_FLASH, K_REDUCE, K_N };
static struct wl_kernel K[K_N] = {
    [K_VECTOR_ADD] = {vector_add_stub, "_Z10vector_addPfS_S_i", NULL},
    [K_LAYERNORM] = {layernorm_fwd_stub, "_Z13layernorm_fwdPKfPfii", NULL},
    [K_FLASH] = {flash_fwd_sm90_stub, "_Z14flash_fwd_sm90PKfS0_S0_Pfi", NULL},
    [K_REDUCE] = {reduce_sum_stub, "_Z10reduce_sumPKfPfi", NULL},
};
__attribute__((constructor)) static void register_kernels(void) { wl_register(K, K_N); }

#define TRITON_NAME "triton_poi_fused_add_0"
#define CUTLASS_NAME "_ZN7cutlass6KernelINS_4gemm6kernel9GemmSm90EEEvNT_6ParamsE"
static const char triton_ptx[] = "//\n.version 8.5\n.target sm_90a\n.address_size 64\n"
                                 ".visible .entry " TRITON_NAME "(.param .u64 p0, .param .u64 p1, .param .u32 p2)\n{ ret; }\n";
static const unsigned long long cutlass_fatbin[] = {0x00100001ba55ed50ull, 0x5a5a5a5a5a5a5a5aull};

int main(int argc, char **argv) {
    long iters = opt(argc, argv, "--iters", 50);
    unsigned int sched = (unsigned int)opt(argc, argv, "--sched", cudaDeviceScheduleBlockingSync);
    long kernel_us = opt(argc, argv, "--kernel-us", 20);
    wl_thread("gpu");
    wl_print_kernels(K, K_N);
    for (int i = 0; i < K_N; i++) mockcuSetKernelNs((const void *)K[i].stub, (uint64_t)kernel_us * 1000);

    CALLN("cudaSetDeviceFlags", cudaSetDeviceFlags(sched));
    printf("SCHED_FLAGS %u\n", sched);
    CALLN("cuInit", cuInit(0));
    CUcontext ctx = NULL;
    CALLN("cuCtxCreate_v2", cuCtxCreate_v2(&ctx, CU_CTX_MAP_HOST | sched, 0));
    CALLN("cuDevicePrimaryCtxSetFlags_v2", cuDevicePrimaryCtxSetFlags_v2(0, sched));
    CALLN("cuCtxSetFlags", cuCtxSetFlags(CU_CTX_LMEM_RESIZE_TO_MAX | sched));

    cudaStream_t s = NULL, s2 = NULL;
    cudaEvent_t ev = NULL;
    CALLN("cudaStreamCreate", cudaStreamCreate(&s));
    CALLN("cudaStreamCreate", cudaStreamCreate(&s2));
    CALLN("cudaEventCreate", cudaEventCreate(&ev));

    CUmodule mod = NULL;
    CUfunction triton = NULL, gemm = NULL;
    CUlibrary lib = NULL;
    CUkernel gemm_kernel = NULL;
    CALLN("cuModuleLoadData", cuModuleLoadData(&mod, triton_ptx));
    CALLN("cuModuleGetFunction", cuModuleGetFunction(&triton, mod, TRITON_NAME));
    CALLN("cuLibraryLoadData", cuLibraryLoadData(&lib, cutlass_fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CALLN("cuLibraryGetKernel", cuLibraryGetKernel(&gemm_kernel, lib, CUTLASS_NAME));
    CALLN("cuKernelGetFunction", cuKernelGetFunction(&gemm, gemm_kernel));
    printf("FUNCTION 0x%lx %s\n", (unsigned long)(uintptr_t)triton, TRITON_NAME);
    printf("CUKERNEL 0x%lx %s\n", (unsigned long)(uintptr_t)gemm_kernel, CUTLASS_NAME);
    printf("FUNCTION 0x%lx %s\n", (unsigned long)(uintptr_t)gemm, CUTLASS_NAME);
    mockcuSetKernelNs((const void *)triton, (uint64_t)kernel_us * 1000);
    mockcuSetKernelNs((const void *)gemm, (uint64_t)kernel_us * 1000);

    const size_t buf = 1 << 20;
    void *a = NULL, *b = NULL, *host = NULL;
    CALLN("cudaMalloc", cudaMalloc(&a, buf));
    CALLN("cudaMalloc", cudaMalloc(&b, buf));
    CALLN("cudaHostAlloc", cudaHostAlloc(&host, 4 << 20, cudaHostAllocPortable));

    /* an expandable segment: reserve, back, map, then give it all back */
    const size_t seg = 2 << 20;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle mh = 0;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CALLN("cuMemAddressReserve", cuMemAddressReserve(&va, seg, 0, 0, 0));
    CALLN("cuMemCreate", cuMemCreate(&mh, seg, &prop, 0));
    CALLN("cuMemMap", cuMemMap(va, seg, 0, mh, 0));
    CALLN("cuMemUnmap", cuMemUnmap(va, seg));
    CALLN("cuMemRelease", cuMemRelease(mh));
    CALLN("cuMemAddressFree", cuMemAddressFree(va, seg));

    /* the one call that fails on purpose: 1 PiB from the stream-ordered allocator */
    void *huge = NULL;
    cudaError_t r;
    CALLR("cudaMallocAsync", r, cudaMallocAsync(&huge, 1ull << 50, s));
    printf("FAIL cudaMallocAsync %d\n", r);
    if (r != cudaErrorMemoryAllocation) atomic_fetch_add(&g_errors, 1);

    dim3 g64 = {64, 1, 1}, b256 = {256, 1, 1};
    int n = (int)(buf / sizeof(float));
    void *args[] = {&a, &b, &n};

    /* capture a graph of three launches on s, instantiate it once */
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CALLN("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CALLN("cudaLaunchKernel", wl_launch(&K[K_VECTOR_ADD], g64, b256, args, 0, s));
    CALLN("cudaLaunchKernel", wl_launch(&K[K_LAYERNORM], g64, b256, args, 0, s));
    CALLN("cudaLaunchKernel", wl_launch(&K[K_VECTOR_ADD], g64, b256, args, 0, s));
    CALLN("cudaStreamEndCapture", cudaStreamEndCapture(s, &graph));
    CALLN("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
    printf("GRAPH_EXEC 0x%lx\n", (unsigned long)(uintptr_t)exec);

    cudaLaunchAttribute cluster_rt = {.id = cudaLaunchAttributeClusterDimension};
    cluster_rt.val.clusterDim.x = 2; cluster_rt.val.clusterDim.y = 1; cluster_rt.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg_cluster = {.gridDim = {4, 2, 1}, .blockDim = {128, 1, 1}, .dynamicSmemBytes = 49152,
                                      .stream = s, .attrs = &cluster_rt, .numAttrs = 1};
    cudaLaunchConfig_t cfg_plain = {.gridDim = {8, 1, 1}, .blockDim = {256, 1, 1}, .dynamicSmemBytes = 0,
                                    .stream = 0, .attrs = NULL, .numAttrs = 0};
    CUlaunchAttribute cluster_drv = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    cluster_drv.value.clusterDim.x = 2; cluster_drv.value.clusterDim.y = 1; cluster_drv.value.clusterDim.z = 1;
    CUlaunchConfig cfg_triton = {.gridDimX = 16, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 64, .blockDimY = 1,
                                 .blockDimZ = 1, .sharedMemBytes = 1024, .hStream = s, .attrs = NULL, .numAttrs = 0};
    CUlaunchConfig cfg_gemm = {.gridDimX = 132, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 384, .blockDimY = 1,
                               .blockDimZ = 1, .sharedMemBytes = 232448, .hStream = NULL, .attrs = &cluster_drv,
                               .numAttrs = 1};
    long not_ready = 0;
    for (long it = 0; it < iters; it++) {
        CALLN("cudaLaunchKernel", wl_launch(&K[K_VECTOR_ADD], g64, b256, args, 0, s));
        CALLN("cudaLaunchKernel", wl_launch(&K[K_LAYERNORM], g64, b256, args, 0, s));
        CALLN("cudaLaunchKernelExC", cudaLaunchKernelExC(&cfg_cluster, wl_kernel_arg(&K[K_FLASH]), args));
        CALLN("cudaLaunchKernelExC_ptsz", cudaLaunchKernelExC_ptsz(&cfg_plain, wl_kernel_arg(&K[K_REDUCE]), args));
        CALLN("cuLaunchKernelEx", cuLaunchKernelEx(&cfg_triton, triton, args, NULL));
        CALLN("cuLaunchKernelEx_ptsz", cuLaunchKernelEx_ptsz(&cfg_gemm, gemm, args, NULL));
        CALLN("cudaMemsetAsync", cudaMemsetAsync(a, 0, buf, s));
        CALLN("cuMemsetD32Async", cuMemsetD32Async((CUdeviceptr)b, 0x3f800000u, buf / 4, s));
        void *tmp = NULL;
        CALLN("cudaMallocAsync", cudaMallocAsync(&tmp, 64 << 10, s));
        CALLN("cudaFreeAsync", cudaFreeAsync(tmp, s));
        CALLN("cuMemcpyDtoDAsync_v2", cuMemcpyDtoDAsync_v2((CUdeviceptr)b, (CUdeviceptr)a, buf, s));
        CALLN("cudaGraphLaunch", cudaGraphLaunch(exec, s));
        CALLN("cudaEventRecord", cudaEventRecord(ev, s));
        CALLN("cudaStreamWaitEvent", cudaStreamWaitEvent(s2, ev, 0));
        for (int q = 0; q < 2; q++) { /* poll: 600 (not ready) while s still has work before the event */
            CALLR("cudaEventQuery", r, cudaEventQuery(ev));
            if (r == cudaErrorNotReady) not_ready++;
            else if (r != cudaSuccess) atomic_fetch_add(&g_errors, 1);
        }
        CALLN("cudaEventSynchronize", cudaEventSynchronize(ev));
    }
    for (int i = 0; i < 5; i++) CALLN("cuGraphLaunch", cuGraphLaunch(exec, s));
    CALLN("cuCtxSynchronize_v2", cuCtxSynchronize_v2(ctx));
    CALLN("cudaDeviceSynchronize", cudaDeviceSynchronize());
    CALLN("cudaFree", cudaFree(a));
    CALLN("cudaFree", cudaFree(b));
    printf("NOT_READY %ld\n", not_ready);
    wl_print_handles(K, K_N);
    wl_report();
    return 0;
}
