/* A stand-in for autograd's engine, as a library that Python loads through ctypes
 * (tests/borrowed/train.py). The calling thread, a Python thread, launches a seed kernel (as
 * `loss.backward()` launches the ones_like of its gradient), then a native worker thread that runs
 * no Python launches the "backward" kernels on the mock runtime while the caller waits for it (as
 * autograd's device thread launches while the Python thread waits in the engine):
 *   engine_backward(n): the caller starts the worker and joins it;
 *   engine_backward_shared(n): two callers meet, the second starts the worker, and both wait on a
 *       condition the worker signals at its end: either could have asked for its launches.
 * The worker waits `settle_ms` (engine_settle_ms) before its first launch, so its callers are
 * asleep by then; then n rounds of a launch and a stream synchronize, and last a slow kernel (50 ms)
 * and its synchronize: the one slow call of the trace. Each worker prints `THREAD engine-worker <tid>`. */
#define WL_NAMED_ONLY
#include "kernels.h"

static void seed_fill(void) {}
static void grad_gemm(void) {}
static void grad_reduce(void) {}
static struct wl_kernel g_k[] = {
    {seed_fill, "_Z9seed_fillv", NULL},
    {grad_gemm, "_Z9grad_gemmv", NULL},
    {grad_reduce, "_Z11grad_reducev", NULL},
};

__attribute__((constructor)) static void engine_init(void) {
    wl_register(g_k, 3);
    mockcuSetKernelNs((const void *)seed_fill, 5000);
    mockcuSetKernelNs((const void *)grad_gemm, 20000);
    mockcuSetKernelNs((const void *)grad_reduce, 50000000);
}

static long g_settle_ms = 30;

void engine_settle_ms(long ms) { g_settle_ms = ms; }

static void launch(struct wl_kernel *k) {
    dim3 g = {1, 1, 1}, b = {128, 1, 1};
    CALLN("cudaLaunchKernel", wl_launch(k, g, b, NULL, 0, NULL));
}

struct job {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, done;
};

static void *worker(void *arg) {
    struct job *j = arg;
    wl_thread("engine-worker");
    wl_sleep_us(g_settle_ms * 1000);
    for (int i = 0; i < j->n; i++) {
        launch(&g_k[1]);
        CALLN("cudaStreamSynchronize", cudaStreamSynchronize(NULL));
        wl_sleep_us(500);
    }
    launch(&g_k[2]);
    CALLN("cudaStreamSynchronize", cudaStreamSynchronize(NULL));
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* One caller: seed, start the worker, join it. 0 on success. */
int engine_backward(int n) {
    launch(&g_k[0]);
    struct job j = {.n = n, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &j) != 0) return -1;
    pthread_join(t, NULL);
    return (int)g_errors;
}

static struct job g_shared = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static pthread_t g_shared_thread;

/* Two callers: each seeds; the second to arrive starts the worker; both wait for its end. */
int engine_backward_shared(int n) {
    launch(&g_k[0]);
    pthread_mutex_lock(&g_shared.mu);
    if (++g_shared.arrived == 2) {
        g_shared.n = n;
        if (pthread_create(&g_shared_thread, NULL, worker, &g_shared) != 0) {
            pthread_mutex_unlock(&g_shared.mu);
            return -1;
        }
    }
    while (!g_shared.done) pthread_cond_wait(&g_shared.cv, &g_shared.mu);
    int last = --g_shared.arrived == 0;
    pthread_mutex_unlock(&g_shared.mu);
    if (last) pthread_join(g_shared_thread, NULL);
    return (int)g_errors;
}
