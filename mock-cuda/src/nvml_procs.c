/* Mock NVML, the processes: the compute processes of a device and the memory they use, which the
 * device's memory info counts as used.
 *
 * Two sources, listed in this order:
 * - MOCK_NVML_PIDS="<pid>[:<used_MiB>[:<gpu>[:<grow_MiB_per_s>]]],..." (default 1024 MiB, every GPU,
 *   no growth): planted processes, listed whether or not they exist (a pid that is gone stands for a
 *   context its process left behind); with a growth rate, the memory rises by that many MiB every
 *   second from when the environment was read (init) on, up to the device's 80 GiB;
 * - MOCK_GPU_PROCS_DIR (mock_gpu.h): the processes of the mock driver, each with the memory its
 *   context holds, as long as its file is there (the driver removes it at exit, unless told to keep it).
 * Graphics processes: none. */
#include "nvml_int.h"
#include <pthread.h>
#include <stdint.h>

#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId / computeInstanceId without MIG */
#define MEM_CAP (80ull << 30)

struct proc { unsigned int pid; unsigned long long bytes, grow_per_s; int gpu; };
static struct proc g_proc[LIST_MAX];
static int g_nproc;
static uint64_t g_read_ns; /* when the environment was read: growth counts from here */
static const char *g_dir;  /* MOCK_GPU_PROCS_DIR */

static int parse_pid(char **f, int nf, const char **why) {
    uint64_t pid, mib = 1024, grow = 0;
    struct proc p = {0, 0, 0, -1};
    if (!mock_u64(f[0], &pid, 0) || pid == 0 || pid > 0x7fffffff) { *why = "bad pid"; return 0; }
    if (nf >= 2 && (!mock_u64(f[1], &mib, 0) || mib > (80u << 10))) { *why = "bad used MiB"; return 0; }
    if (nf >= 3 && !mock_gpu_index(f[2], &p.gpu)) { *why = "bad gpu (-1 or 0 .. 7)"; return 0; }
    if (nf == 4 && (!mock_u64(f[3], &grow, 0) || grow > (80u << 10))) { *why = "bad growth (MiB/s)"; return 0; }
    if (nf > 4) { *why = "want <pid>[:<used_MiB>[:<gpu>[:<grow_MiB_per_s>]]]"; return 0; }
    if (g_nproc >= LIST_MAX) { *why = "too many (64)"; return 0; }
    p.pid = (unsigned int)pid;
    p.bytes = mib << 20;
    p.grow_per_s = grow << 20;
    g_proc[g_nproc++] = p;
    return 1;
}
void procs_load_config(void) {
    g_nproc = 0;
    g_read_ns = mock_unix_ns();
    nvml_env_list("MOCK_NVML_PIDS", 4, parse_pid);
    g_dir = getenv("MOCK_GPU_PROCS_DIR");
    if (g_dir && !*g_dir) g_dir = NULL;
}
static unsigned long long planted_bytes(const struct proc *p) {
    unsigned long long b = p->bytes + (unsigned long long)((double)p->grow_per_s * (double)(mock_unix_ns() - g_read_ns) / 1e9);
    return b > MEM_CAP ? MEM_CAP : b;
}

/* Every process of device `dev`, to `fn`. */
struct lister {
    int dev;
    void (*fn)(struct lister *l, unsigned pid, unsigned long long bytes);
    unsigned long long total;
    unsigned int n, cap;
    char *out;
    size_t size;
};
static void from_dir(void *ctx, unsigned pid, int gpu, uint64_t bytes) {
    struct lister *l = ctx;
    if (gpu == l->dev) l->fn(l, pid, bytes);
}
static void list(struct lister *l) {
    for (int k = 0; k < g_nproc; k++)
        if (g_proc[k].gpu == -1 || g_proc[k].gpu == l->dev) l->fn(l, g_proc[k].pid, planted_bytes(&g_proc[k]));
    if (g_dir) mock_proc_list(g_dir, from_dir, l);
}
static void add_bytes(struct lister *l, unsigned pid, unsigned long long bytes) {
    (void)pid;
    l->total += bytes;
}
static void put_info(struct lister *l, unsigned pid, unsigned long long bytes) {
    if (l->n < l->cap) {
        nvmlProcessInfo_t p = {pid, bytes, NO_INSTANCE, NO_INSTANCE};
        memcpy(l->out + (size_t)l->n * l->size, &p, l->size);
    }
    l->n++;
}
unsigned long long proc_bytes(int i) {
    struct lister l = {.dev = i, .fn = add_bytes};
    list(&l);
    return l.total;
}

/* `size` is the caller's element: v1 16 bytes, v2/v3 24 */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, size_t size, int graphics) {
    DEVICE(device, i);
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    if (graphics) { *infoCount = 0; return NVML_SUCCESS; }
    struct lister l = {.dev = i, .fn = put_info, .cap = infos ? *infoCount : 0, .out = infos, .size = size};
    list(&l);
    if (*infoCount < l.n) { *infoCount = l.n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    if (l.n && !infos) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = l.n;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                         nvmlProcessInfo_t *infos) {
    return processes(device, infoCount, infos, sizeof(nvmlProcessInfo_t), 0);
}
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                         nvmlProcessInfo_v2_t *infos)
    ALIAS(nvmlDeviceGetComputeRunningProcesses_v3);
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v1_t *infos) {
    return processes(device, infoCount, infos, sizeof(nvmlProcessInfo_v1_t), 0);
}
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                          nvmlProcessInfo_t *infos) {
    return processes(device, infoCount, infos, sizeof(nvmlProcessInfo_t), 1);
}

/* ---- MOCK_NVML_UTIL=busy: a device's utilization from the busy time its processes ran ---- */
/* The busy ns per device of every process of the driver's directory (its <pid>.busy file, there
 * whether or not the process holds memory) into acc[MOCK_GPU_MAX]. */
static void busy_total(uint64_t *acc) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char *dot = strchr(e->d_name, '.');
        uint64_t pid, b[MOCK_GPU_MAX];
        if (!dot || strcmp(dot, ".busy")) continue;
        *dot = 0;
        int named = mock_u64(e->d_name, &pid, 0) && pid && pid <= 0x7fffffff;
        *dot = '.';
        if (named && mock_busy_read(g_dir, (unsigned)pid, b))
            for (int i = 0; i < MOCK_GPU_MAX; i++) acc[i] += b[i];
    }
    closedir(d);
}
unsigned int procs_busy_pct(int dev) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t last_wall[MOCK_GPU_MAX], last_busy[MOCK_GPU_MAX];
    if (!g_dir || dev < 0 || dev >= MOCK_GPU_MAX) return 0;
    uint64_t acc[MOCK_GPU_MAX] = {0};
    busy_total(acc);
    uint64_t now = mock_unix_ns();
    pthread_mutex_lock(&mu);
    /* the share of the time since the last call that the work kept the device busy (0 the first
     * time, and when a process left and took its counters with it) */
    uint64_t dw = last_wall[dev] ? now - last_wall[dev] : 0;
    uint64_t db = acc[dev] >= last_busy[dev] ? acc[dev] - last_busy[dev] : 0;
    last_wall[dev] = now;
    last_busy[dev] = acc[dev];
    pthread_mutex_unlock(&mu);
    if (!dw) return 0;
    uint64_t pct = db * 100 / dw;
    return pct > 100 ? 100 : (unsigned int)pct;
}
