/* A program with the CUDA runtime linked in statically (build/libcudart_static.a, like nvcc's
 * default -cudart static), the driver still libcuda.so.1: the runtime's symbols (cudaLaunchKernel,
 * ...) are in the executable's .symtab and not in its .dynsym; build/static_counts_stripped is the
 * same program stripped, with no symbols at all. Registers two kernels, then makes exact counts:
 * `--launches` `<<<>>>` launches (default 30), `--copies` cudaMemcpy (default 10), `--syncs`
 * cudaStreamSynchronize (default 5), around one cudaStreamCreate, cudaMalloc, cudaFree and
 * cudaDeviceSynchronize. */
#define WL_NAMED_ONLY
#include "kernels.h"

__attribute__((noinline, used)) void static_scale_stub(void) { __asm__ volatile("nop"); }
__attribute__((noinline, used)) void static_bias_stub(void) { __asm__ volatile("nop; nop"); }
static struct wl_kernel K[2] = {{static_scale_stub, "_Z12static_scalePff", NULL},
                                {static_bias_stub, "_Z11static_biasPfPKf", NULL}};
__attribute__((constructor)) static void register_kernels(void) { wl_register(K, 2); }

int main(int argc, char **argv) {
    long launches = opt(argc, argv, "--launches", 30);
    long copies = opt(argc, argv, "--copies", 10);
    long syncs = opt(argc, argv, "--syncs", 5);
    wl_thread("main");
    wl_print_kernels(K, 2);
    cudaStream_t s = NULL;
    void *d = NULL;
    static char host[64 << 10];
    CALLN("cudaStreamCreate", cudaStreamCreate(&s));
    CALLN("cudaMalloc", cudaMalloc(&d, sizeof host));
    dim3 g = {32, 1, 1}, b = {128, 1, 1};
    for (long i = 0; i < launches; i++) CALLN("cudaLaunchKernel", wl_launch(&K[i % 2], g, b, NULL, 0, s));
    for (long i = 0; i < copies; i++) CALLN("cudaMemcpy", cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice));
    for (long i = 0; i < syncs; i++) CALLN("cudaStreamSynchronize", cudaStreamSynchronize(s));
    CALLN("cudaFree", cudaFree(d));
    CALLN("cudaDeviceSynchronize", cudaDeviceSynchronize());
    wl_report();
    return 0;
}
