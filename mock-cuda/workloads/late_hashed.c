/* A process that loads a CUDA 13 runtime vendored under an auditwheel-style hashed name
 * (libcudart-5e1c0ffe.so.13, soname the same, like the copies pip wheels carry) with dlopen by
 * absolute path: `--lib PATH` (or WL_lib), default the one beside this executable. It sleeps
 * `--delay-us` (default 300000) first, and makes its FIRST call, cudaMalloc of 1 MiB, the moment
 * dlopen returns: a tracer must be attached to the library by then to see it. Then it registers a
 * kernel, launches it `--launches` times (default 20) by its __cudaGetKernel handle as nvcc 13 does,
 * and calls cudaDeviceSynchronize and cudaFree. Not linked against the mock libraries. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#define WL_NAMED_ONLY
#include "common.h"

__attribute__((noinline, used)) void late_kernel_stub(void) { __asm__ volatile("nop"); }
#define LATE_KERNEL "_Z11late_kernelPfi"

int main(int argc, char **argv) {
    long delay_us = opt(argc, argv, "--delay-us", 300000);
    long launches = opt(argc, argv, "--launches", 20);
    char exe[PATH_MAX] = {0}, dflt[PATH_MAX + 32];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return 2;
    snprintf(dflt, sizeof dflt, "%s/libcudart-5e1c0ffe.so.13", dirname(exe));
    const char *lib = opt_str(argc, argv, "--lib", dflt);
    wl_thread("main");
    wl_sleep_us(delay_us);
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", lib, dlerror()); return 3; }
    cudaError_t (*m)(void **, size_t) = (cudaError_t (*)(void **, size_t))dlsym(h, "cudaMalloc");
    if (!m) return 4;
    void *d = NULL;
    CALLN("cudaMalloc", m(&d, 1 << 20)); /* the first call, right after dlopen */
    printf("LOADED %s\n", lib);
    printf("FIRST cudaMalloc %d\n", 1 << 20);
    void **(*reg_fatbin)(void *) = (void **(*)(void *))dlsym(h, "__cudaRegisterFatBinary");
    void (*reg_fn)(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *, dim3 *, int *) =
        (void (*)(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *, dim3 *, int *))dlsym(
            h, "__cudaRegisterFunction");
    void (*reg_end)(void **) = (void (*)(void **))dlsym(h, "__cudaRegisterFatBinaryEnd");
    cudaError_t (*get_kernel)(cudaKernel_t *, const void *) =
        (cudaError_t (*)(cudaKernel_t *, const void *))dlsym(h, "__cudaGetKernel");
    cudaError_t (*launch)(const void *, dim3, dim3, void **, size_t, cudaStream_t) =
        (cudaError_t (*)(const void *, dim3, dim3, void **, size_t, cudaStream_t))dlsym(h, "cudaLaunchKernel");
    cudaError_t (*ds)(void) = (cudaError_t (*)(void))dlsym(h, "cudaDeviceSynchronize");
    cudaError_t (*f)(void *) = (cudaError_t (*)(void *))dlsym(h, "cudaFree");
    if (!reg_fatbin || !reg_fn || !reg_end || !get_kernel || !launch || !ds || !f) return 4;
    /* what the constructor of a dlopened extension module does */
    static const unsigned long long fatbin_data[] = {0x00100001ba55ed50ull, 0};
    static const struct { int magic, version; const unsigned long long *data; void *f; } fatbin = {
        0x466243b1, 1, fatbin_data, NULL};
    void **fh = reg_fatbin((void *)&fatbin);
    wl_count("__cudaRegisterFatBinary");
    reg_fn(fh, (const char *)late_kernel_stub, (char *)LATE_KERNEL, LATE_KERNEL, -1, NULL, NULL, NULL, NULL, NULL);
    wl_count("__cudaRegisterFunction");
    reg_end(fh);
    wl_count("__cudaRegisterFatBinaryEnd");
    printf("KERNEL 0x%lx %s\n", (unsigned long)(uintptr_t)late_kernel_stub, LATE_KERNEL);
    dim3 g = {16, 1, 1}, b = {128, 1, 1};
    cudaKernel_t k = NULL;
    for (long i = 0; i < launches; i++) {
        CALLN("__cudaGetKernel", get_kernel(&k, (const void *)late_kernel_stub));
        CALLN("cudaLaunchKernel", launch((const void *)k, g, b, NULL, 0, 0));
    }
    if (k) printf("KHANDLE 0x%lx %s\n", (unsigned long)(uintptr_t)k, LATE_KERNEL);
    CALLN("cudaDeviceSynchronize", ds());
    CALLN("cudaFree", f(d));
    wl_report();
    return 0;
}
