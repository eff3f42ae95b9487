/* A process that loads the CUDA runtime late, like a Python program importing torch minutes in:
 * it starts without libcudart, sleeps `--delay-us`, dlopens libcudart.so.12 from its own directory
 * and makes its first call (the first cudaMalloc, of 4096 bytes) the moment dlopen returns, so a
 * tracer sees it only if it attached to the library by then; it then waits `--settle-us` and makes
 * the rest of `--iters` cudaMalloc/cudaFree pairs and one cudaDeviceSynchronize.
 * Not linked against the mock libraries. Prints its exact call counts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include "common.h"

int main(int argc, char **argv) {
    long delay_us = opt(argc, argv, "--delay-us", 300000);
    long settle_us = opt(argc, argv, "--settle-us", 500000);
    long iters = opt(argc, argv, "--iters", 10);
    wl_sleep_us(delay_us);
    char exe[PATH_MAX] = {0}, lib[PATH_MAX + 32];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return 2;
    snprintf(lib, sizeof lib, "%s/libcudart.so.12", dirname(exe));
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", lib, dlerror()); return 3; }
    cudaError_t (*m)(void **, size_t) = (cudaError_t (*)(void **, size_t))dlsym(h, "cudaMalloc");
    if (!m) return 4;
    void *first = NULL;
    if (iters > 0) CALL(C_MALLOC, m(&first, 4096)); /* the first call, right after dlopen */
    cudaError_t (*f)(void *) = (cudaError_t (*)(void *))dlsym(h, "cudaFree");
    cudaError_t (*ds)(void) = (cudaError_t (*)(void))dlsym(h, "cudaDeviceSynchronize");
    if (!f || !ds) return 4;
    printf("LOADED 1\n");
    if (iters > 0) printf("FIRST cudaMalloc 4096\n");
    fflush(stdout);
    wl_sleep_us(settle_us);
    for (long i = 0; i < iters; i++) {
        void *p = first;
        if (i > 0) CALL(C_MALLOC, m(&p, 4096 * (size_t)(i + 1)));
        CALL(C_FREE, f(p));
    }
    CALL(C_DEVICE_SYNC, ds());
    wl_report();
    return 0;
}
