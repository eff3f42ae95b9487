/* A steady GPU loop, for the planted slowdown (MOCK_GPU_THROTTLE): for `--ms` ms (default 2000) of
 * wall time, steps of `--launches` (default 4) cudaLaunchKernel of `--kernel-us` (default 2000) each
 * on the legacy default stream, then cudaStreamSynchronize; no host work, so each sync waits for
 * about the step's GPU time, `factor` times longer inside a window. `--device N` first calls
 * cudaSetDevice(N) (the driver slows the work of the windows for that device, or for every GPU).
 * `--print-syncs 1` prints one line per step, `SYNC <step> <unix_ms at the sync's start> <us in the
 * sync>`. Then STEPS, SYNC_WAIT_US (total), ELAPSED_NS, KERNEL_NS and the report (CALLS lines).
 * Registers its kernel at startup as nvcc's constructor does. */
#include "kernels.h"

__attribute__((noinline, used)) void steady_kernel(void) { __asm__ volatile("nop"); }
static struct wl_kernel K[1] = {{steady_kernel, "_Z13steady_kernelPfi", NULL}};
__attribute__((constructor)) static void register_kernels(void) { wl_register(K, 1); }

static uint64_t unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

int main(int argc, char **argv) {
    long ms = opt(argc, argv, "--ms", 2000);
    long kernel_us = opt(argc, argv, "--kernel-us", 2000);
    long launches = opt(argc, argv, "--launches", 4);
    long device = opt(argc, argv, "--device", -1);
    long print_syncs = opt(argc, argv, "--print-syncs", 0);
    if (launches < 1) launches = 1;
    wl_print_kernels(K, 1);
    wl_thread("steady");
    if (device >= 0) CALLN("cudaSetDevice", cudaSetDevice((int)device));
    mockcuSetKernelNs((const void *)steady_kernel, (uint64_t)kernel_us * 1000);
    dim3 grid = {132, 1, 1}, block = {256, 1, 1};
    uint64_t t0 = wl_now_ns(), waited = 0;
    long steps = 0;
    while (wl_now_ns() - t0 < (uint64_t)ms * 1000000ull) {
        for (long k = 0; k < launches; k++) CALL(C_LAUNCH, wl_launch(&K[0], grid, block, NULL, 0, 0));
        uint64_t at = unix_ms(), s0 = wl_now_ns();
        CALL(C_STREAM_SYNC, cudaStreamSynchronize(0));
        uint64_t w = wl_now_ns() - s0;
        waited += w;
        if (print_syncs) printf("SYNC %ld %llu %llu\n", steps, (unsigned long long)at, (unsigned long long)(w / 1000));
        steps++;
    }
    printf("STEPS %ld\n", steps);
    printf("SYNC_WAIT_US %llu\n", (unsigned long long)(waited / 1000));
    printf("ELAPSED_NS %llu\n", (unsigned long long)(wl_now_ns() - t0));
    printf("KERNEL_NS %ld\n", kernel_us * 1000);
    wl_report();
    return 0;
}
