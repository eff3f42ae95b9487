/* What nvcc generates around kernels, for the workloads linked against the runtime (include
 * common.h's counters with it):
 * - registration from a constructor: __cudaRegisterFatBinary, one __cudaRegisterFunction per kernel
 *   (host stub, mangled device name), __cudaRegisterFatBinaryEnd (wl_register);
 * - the `kernel<<<grid, block, shmem, stream>>>(args)` launch (wl_launch): the host stub's address
 *   goes to cudaLaunchKernel in CUDA 12; built with -DMOCK_CUDA13, the launch first asks
 *   __cudaGetKernel for the kernel's opaque handle and passes that instead, as nvcc 13's stubs do.
 * Each kernel is a real, distinct host function of the workload (its "stub"). */
#ifndef WORKLOAD_KERNELS_H
#define WORKLOAD_KERNELS_H
#include "common.h"

struct wl_kernel {
    void (*stub)(void);
    const char *mangled;
    cudaKernel_t handle; /* CUDA 13: the last handle __cudaGetKernel gave for it */
};

/* nvcc's __fatBinC_Wrapper_t around an (here empty) fat binary */
typedef struct { int magic; int version; const unsigned long long *data; void *filename_or_fatbins; } wl_fatbin_t;
static const unsigned long long wl_fatbin_data[] = {0x00100001ba55ed50ull, 0};
static const wl_fatbin_t wl_fatbin = {0x466243b1, 1, wl_fatbin_data, NULL};

/* Register the kernels as nvcc's generated constructor does (call it from a constructor). */
static inline void wl_register(const struct wl_kernel *ks, int n) {
    void **h = __cudaRegisterFatBinary((void *)&wl_fatbin);
    wl_count("__cudaRegisterFatBinary");
    for (int i = 0; i < n; i++) {
        __cudaRegisterFunction(h, (const char *)ks[i].stub, (char *)ks[i].mangled, ks[i].mangled, -1, NULL, NULL,
                               NULL, NULL, NULL);
        wl_count("__cudaRegisterFunction");
    }
    __cudaRegisterFatBinaryEnd(h);
    wl_count("__cudaRegisterFatBinaryEnd");
}
static inline void wl_print_kernels(const struct wl_kernel *ks, int n) {
    for (int i = 0; i < n; i++)
        printf("KERNEL 0x%lx %s\n", (unsigned long)(uintptr_t)ks[i].stub, ks[i].mangled);
    fflush(stdout);
}
/* What a launch names the kernel by: the host stub (CUDA 12) or its __cudaGetKernel handle (CUDA 13). */
static inline const void *wl_kernel_arg(struct wl_kernel *k) {
#ifdef MOCK_CUDA13
    cudaKernel_t h = NULL;
    CALLN("__cudaGetKernel", __cudaGetKernel(&h, (const void *)k->stub));
    k->handle = h;
    return (const void *)h;
#else
    return (const void *)k->stub;
#endif
}
/* kernel<<<g, b, shmem, s>>>(args): returns cudaLaunchKernel's result (the caller counts it) */
static inline cudaError_t wl_launch(struct wl_kernel *k, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s) {
    return cudaLaunchKernel(wl_kernel_arg(k), g, b, args, shmem, s);
}
/* CUDA 13: the handles the launches used, `KHANDLE <hex handle> <mangled>` */
static inline void wl_print_handles(const struct wl_kernel *ks, int n) {
    for (int i = 0; i < n; i++)
        if (ks[i].handle) printf("KHANDLE 0x%lx %s\n", (unsigned long)(uintptr_t)ks[i].handle, ks[i].mangled);
}
#endif
