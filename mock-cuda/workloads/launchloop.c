/* Benchmark driver: `launchloop --iters N [--work-ns W] [--kernel-us K]` calls cudaLaunchKernel N
 * times in a tight loop (zero-length kernels unless --kernel-us), spinning W ns of host work between
 * launches (W = 50000 paces it at 20,000 launches/s), and prints the time per iteration. */
#include "common.h"

__attribute__((noinline)) void bench_kernel(void) { __asm__ volatile("nop"); }

int main(int argc, char **argv) {
    long iters = opt(argc, argv, "--iters", 100000);
    long work_ns = opt(argc, argv, "--work-ns", 0);
    long kernel_us = opt(argc, argv, "--kernel-us", 0);
    mockcuSetKernelNs((const void *)bench_kernel, (uint64_t)kernel_us * 1000);
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    CALL(C_LAUNCH, cudaLaunchKernel((const void *)bench_kernel, g, b, NULL, 0, 0)); /* warm-up */
    uint64_t t0 = wl_now_ns();
    for (long i = 0; i < iters; i++) {
        if (work_ns) wl_spin_ns((uint64_t)work_ns);
        CALL(C_LAUNCH, cudaLaunchKernel((const void *)bench_kernel, g, b, NULL, 0, 0));
    }
    uint64_t el = wl_now_ns() - t0;
    printf("ELAPSED_NS %llu\n", (unsigned long long)el);
    printf("NS_PER_ITER %.1f\n", (double)el / (double)(iters ? iters : 1));
    wl_report();
    return 0;
}
