// Exact CUDA runtime call counts for Causeway's GPU acceptance run (scripts/gpu-check.sh).
//
// Every runtime call that Causeway may probe goes through COUNTED(), which counts it here, so the
// `CALLS <api> <n>` lines printed at the end are what the program really called, by construction.
// The script compares them with the events Causeway recorded. Calls Causeway has no op code for
// (cudaGetDeviceCount, cudaStreamCreate, cudaEventRecord, cudaGetLastError, ...) are
// not counted and not expected in the trace.
//
// What it does (sm_90 for the cluster launch):
//   1000 <<<>>> launches of cw_step, and 10 more of cw_graph_node inside a stream capture (a launch
//        during capture is a real cudaLaunchKernel call, so cudaLaunchKernel = 1010),
//   100  cudaLaunchKernelExC of cw_cluster with a cluster dimension attribute (2,1,1),
//   100  each of host-to-device, device-to-host and device-to-device cudaMemcpyAsync,
//   100  cudaStreamSynchronize, 50 cudaEventSynchronize,
//   20   cudaMalloc / 20 cudaFree (3 long-lived buffers + 17 malloc/free pairs),
//   10   cudaMallocAsync / cudaFreeAsync, 10 cudaMemsetAsync,
//   1    cudaHostAlloc / cudaFreeHost (the pinned buffer of the copies),
//   1    capture (cudaStreamBeginCapture, cudaStreamEndCapture, cudaGraphInstantiate) of a
//        10-kernel graph, replayed 50 times with cudaGraphLaunch,
//   10   cudaDeviceSynchronize,
//   1    cudaSetDevice (Causeway records it: the device NCCL communicators created next use).
//
// Before the first counted call it loads the driver (cudaGetDeviceCount) and sleeps --delay-ms
// (default 500), so a tracer that attaches to libraries as the process maps them has attached: this
// program checks counts, not attach timing (the script checks that with a late-attach run).
//
// Build: nvcc -O2 -arch=sm_90 -cudart=shared -o counts_shared counts.cu   (and without -cudart=shared)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "FAILED %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

enum Api {
    LAUNCH, LAUNCH_EX, MEMCPY_ASYNC_H2D, MEMCPY_ASYNC_D2H, MEMCPY_ASYNC_D2D, STREAM_SYNC, EVENT_SYNC,
    MALLOC, FREE, MALLOC_ASYNC, FREE_ASYNC, MEMSET_ASYNC, HOST_ALLOC, BEGIN_CAPTURE, END_CAPTURE,
    GRAPH_INSTANTIATE, GRAPH_LAUNCH, DEVICE_SYNC, SET_DEVICE, N_API
};

// The names the script maps to Causeway's op codes; `cudaMemcpyAsync:<kind>` is split by arg1.
static const char *API_NAMES[N_API] = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync:HostToDevice",
    "cudaMemcpyAsync:DeviceToHost", "cudaMemcpyAsync:DeviceToDevice", "cudaStreamSynchronize",
    "cudaEventSynchronize", "cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
    "cudaMemsetAsync", "cudaHostAlloc", "cudaStreamBeginCapture", "cudaStreamEndCapture",
    "cudaGraphInstantiate", "cudaGraphLaunch", "cudaDeviceSynchronize", "cudaSetDevice",
};

static long calls[N_API];

#define COUNTED(api, x)   \
    do {                  \
        ++calls[api];     \
        CHECK(x);         \
    } while (0)

// A <<<>>> launch is one cudaLaunchKernel call; its error is read with cudaGetLastError (not counted).
#define LAUNCHED(api)                   \
    do {                                \
        ++calls[api];                   \
        CHECK(cudaGetLastError());      \
    } while (0)

__global__ void cw_step(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

__global__ void cw_cluster(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 2.0f;
}

__global__ void cw_graph_node(float *x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.25f + (float)k;
}

int main(int argc, char **argv) {
    int delay_ms = 500;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--delay-ms")) delay_ms = atoi(argv[i + 1]);

    const int n = 1 << 16;  // 64 Ki floats = 256 KiB per buffer
    const size_t bytes = n * sizeof(float);
    const int threads = 256, blocks = n / threads;

    printf("PID %d\n", (int)getpid());
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));  // loads libcuda; not counted
    if (devices < 1) {
        fprintf(stderr, "FAILED no CUDA device\n");
        return 2;
    }
    fflush(stdout);
    usleep(delay_ms * 1000);
    COUNTED(SET_DEVICE, cudaSetDevice(0));
    int cluster_ok = 0;
    CHECK(cudaDeviceGetAttribute(&cluster_ok, cudaDevAttrClusterLaunch, 0));

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

    // 3 of the 20 cudaMalloc: the buffers the rest of the program works on.
    float *d_a = nullptr, *d_b = nullptr, *d_c = nullptr;
    COUNTED(MALLOC, cudaMalloc(&d_a, bytes));
    COUNTED(MALLOC, cudaMalloc(&d_b, bytes));
    COUNTED(MALLOC, cudaMalloc(&d_c, bytes));
    float *h = nullptr;
    COUNTED(HOST_ALLOC, cudaHostAlloc(&h, bytes, cudaHostAllocDefault));
    for (int i = 0; i < n; i++) h[i] = (float)i;

    // 10 cudaMemsetAsync.
    for (int i = 0; i < 10; i++) COUNTED(MEMSET_ASYNC, cudaMemsetAsync(d_b, 0, bytes, s));

    // 100 x (H2D, 10 launches, D2D, D2H, stream sync): 100 copies of each kind, 1000 launches.
    for (int r = 0; r < 100; r++) {
        COUNTED(MEMCPY_ASYNC_H2D, cudaMemcpyAsync(d_a, h, bytes, cudaMemcpyHostToDevice, s));
        for (int k = 0; k < 10; k++) {
            cw_step<<<blocks, threads, 0, s>>>(d_a, n);
            LAUNCHED(LAUNCH);
        }
        COUNTED(MEMCPY_ASYNC_D2D, cudaMemcpyAsync(d_c, d_a, bytes, cudaMemcpyDeviceToDevice, s));
        COUNTED(MEMCPY_ASYNC_D2H, cudaMemcpyAsync(h, d_c, bytes, cudaMemcpyDeviceToHost, s));
        COUNTED(STREAM_SYNC, cudaStreamSynchronize(s));
    }

    // 100 cudaLaunchKernelExC with a thread-block cluster of (2,1,1); grid.x is a multiple of 2.
    {
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = dim3(blocks, 1, 1);
        cfg.blockDim = dim3(threads, 1, 1);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = s;
        cudaLaunchAttribute attr[1];
        memset(attr, 0, sizeof attr);
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 2;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = cluster_ok ? 1 : 0;
        if (!cluster_ok) printf("NOTE the device has no cluster launch: cudaLaunchKernelExC without a cluster attribute\n");
        float *arg_x = d_b;
        int arg_n = n;
        void *args[] = {&arg_x, &arg_n};
        for (int i = 0; i < 100; i++) COUNTED(LAUNCH_EX, cudaLaunchKernelExC(&cfg, (const void *)cw_cluster, args));
    }

    // 50 cudaEventSynchronize, each after a recorded launch.
    for (int i = 0; i < 50; i++) {
        CHECK(cudaEventRecord(ev, s));
        COUNTED(EVENT_SYNC, cudaEventSynchronize(ev));
    }

    // 17 malloc/free pairs (with the 3 buffers above: 20 cudaMalloc, 20 cudaFree).
    for (int i = 0; i < 17; i++) {
        void *p = nullptr;
        COUNTED(MALLOC, cudaMalloc(&p, (size_t)(i + 1) << 20));
        COUNTED(FREE, cudaFree(p));
    }

    // 10 stream-ordered allocations.
    for (int i = 0; i < 10; i++) {
        void *p = nullptr;
        COUNTED(MALLOC_ASYNC, cudaMallocAsync(&p, (size_t)(i + 1) << 20, s));
        COUNTED(FREE_ASYNC, cudaFreeAsync(p, s));
    }

    // A captured 10-kernel graph, replayed 50 times.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    COUNTED(BEGIN_CAPTURE, cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 10; k++) {
        cw_graph_node<<<blocks, threads, 0, s>>>(d_c, n, k);
        LAUNCHED(LAUNCH);
    }
    COUNTED(END_CAPTURE, cudaStreamEndCapture(s, &graph));
    COUNTED(GRAPH_INSTANTIATE, cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 50; i++) COUNTED(GRAPH_LAUNCH, cudaGraphLaunch(exec, s));

    // 10 cudaDeviceSynchronize.
    for (int i = 0; i < 10; i++) COUNTED(DEVICE_SYNC, cudaDeviceSynchronize());

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    COUNTED(FREE, cudaFree(d_a));
    COUNTED(FREE, cudaFree(d_b));
    COUNTED(FREE, cudaFree(d_c));
    CHECK(cudaFreeHost(h));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));

    for (int a = 0; a < N_API; a++) printf("CALLS %s %ld\n", API_NAMES[a], calls[a]);
    printf("KERNELS cw_step cw_cluster cw_graph_node\n");
    printf("DONE\n");
    return 0;
}
