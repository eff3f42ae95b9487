/* The planted GPU slowdown that the mock driver (libcuda.so.1, the workload's process) and the mock
 * NVML (libnvidia-ml.so.1, the tracer's process) both read from the environment they inherit, so
 * that the GPU work gets slower exactly while NVML says why:
 *
 *   MOCK_GPU_THROTTLE="<start_unix_ms>:<end_unix_ms>:<reasons>:<factor>[:<gpu>],..."
 *
 * A window is in force while start <= CLOCK_REALTIME < end. reasons is a bitmask of NVML's clock
 * event reasons (decimal or 0x hex; only the bits nvml.h defines, 0x1 .. 0x100), factor how many
 * times slower the GPU's work runs (>= 1, may be fractional), gpu the device index (0 .. 7; -1, the
 * default, every GPU). Windows that overlap on a GPU combine: their reasons OR'ed, the largest
 * factor. A malformed window is ignored with one line on stderr; the others still apply.
 *
 * The PCIe link, which NVML reports and the driver's host<->device copies feel alike:
 *
 *   MOCK_NVML_PCIE="<gen>:<width>[:<max_gen>:<max_width>][:<gpu>],..."
 *
 * the link's current generation (1 .. 6) and width (lanes: 1, 2, 4, 8, 12, 16, 32) and their maximum
 * (default gen 5 x16, an H100 SXM5's; a maximum below the current value is an error), of GPU gpu (-1,
 * the default, every GPU). Without it every link runs at gen 5 x16 of gen 5 x16. A copy between host
 * and device on a GPU takes as many times longer as the link carries less than at its maximum
 * (per-lane rates 250, 500, 985, 1969, 3938, 7563 MB/s for gen 1 .. 6, times the width).
 *
 * The processes that hold device memory, which the driver writes and NVML lists:
 *
 *   MOCK_GPU_PROCS_DIR=<dir>
 *
 * each process of the mock driver keeps a file <dir>/<pid> holding "<gpu> <bytes>": the device it
 * allocated on first and the memory its context holds (MOCK_CTX_BYTES for the context, plus its live
 * allocations), rewritten at every allocation and free. The mock NVML lists each file's pid as a
 * compute process of that GPU. The driver removes its file when the process exits, unless
 * MOCK_CUDA_KEEP_CONTEXT=1 (the context outlives the process, as a context the driver could not tear
 * down does) or the process was killed (no exit handler ran). Unset: no files, nothing listed.
 *
 * Also here: the helpers both libraries parse their other list knobs with, and MOCK_GPU_COUNT (how
 * many GPUs the mock NVML reports; 1 .. 8, default 1). Header-only: every function is static inline. */
#ifndef MOCK_GPU_H
#define MOCK_GPU_H
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MOCK_GPU_MAX 8            /* devices the mocks know of */
#define MOCK_THROTTLE_MAX 64      /* windows */
#define MOCK_REASONS_KNOWN 0x1ffull /* GpuIdle 0x1 .. DisplayClockSetting 0x100 */
#define MOCK_ENTRY_MAX 256        /* characters of one list entry */

struct mock_throttle {
    uint64_t start_ms, end_ms; /* unix ms, [start, end) */
    uint64_t reasons;          /* nvmlClocksEventReason* bits */
    double factor;             /* >= 1 */
    int gpu;                   /* -1: every GPU */
};

static inline uint64_t mock_unix_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Trim spaces in place; returns the trimmed start. */
static inline char *mock_trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) s[--n] = 0;
    return s;
}
/* Split `s` in place at `sep` into at most `max` trimmed fields; returns how many there were (more
 * than `max` when there were too many). */
static inline int mock_split(char *s, char sep, char **f, int max) {
    int n = 0;
    for (;;) {
        char *e = strchr(s, sep);
        if (e) *e = 0;
        if (n < max) f[n] = mock_trim(s);
        n++;
        if (!e) return n;
        s = e + 1;
    }
}
/* An unsigned decimal number (or, with `hex_ok`, 0x-prefixed hex) filling the whole field. */
static inline int mock_u64(const char *s, uint64_t *out, int hex_ok) {
    int base = 10;
    if (hex_ok && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) { base = 16; s += 2; }
    if (!*s || *s == '-' || *s == '+' || *s == ' ' || (base == 16 && (s[1] == 'x' || s[1] == 'X'))) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}
/* A device index 0 .. MOCK_GPU_MAX-1, or -1 for every GPU. */
static inline int mock_gpu_index(const char *s, int *out) {
    if (!strcmp(s, "-1")) { *out = -1; return 1; }
    uint64_t v;
    if (!mock_u64(s, &v, 0) || v >= MOCK_GPU_MAX) return 0;
    *out = (int)v;
    return 1;
}
static inline void mock_bad_entry(const char *who, const char *knob, const char *entry, const char *why) {
    fprintf(stderr, "%s: %s: ignoring \"%s\": %s\n", who, knob, entry, why);
}

/* Parse MOCK_GPU_THROTTLE into `w` (at most MOCK_THROTTLE_MAX); returns how many windows are valid.
 * `who` prefixes the warning lines ("mockcuda", "mocknvml"). */
static inline int mock_throttle_parse(const char *who, struct mock_throttle *w) {
    const char *env = getenv("MOCK_GPU_THROTTLE");
    if (!env || !*env) return 0;
    char *copy = strdup(env);
    if (!copy) return 0;
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char entry[MOCK_ENTRY_MAX], shown[MOCK_ENTRY_MAX];
        char *t = mock_trim(tok);
        if (!*t) continue; /* an empty entry (a trailing comma) */
        if (strlen(t) >= sizeof entry) { mock_bad_entry(who, "MOCK_GPU_THROTTLE", "...", "too long"); continue; }
        strcpy(entry, t);
        strcpy(shown, t);
        char *f[5];
        int nf = mock_split(entry, ':', f, 5);
        struct mock_throttle x = {0, 0, 0, 1.0, -1};
        const char *why = NULL;
        char *end = NULL;
        if (nf < 4 || nf > 5) why = "want <start_unix_ms>:<end_unix_ms>:<reasons>:<factor>[:<gpu>]";
        else if (!mock_u64(f[0], &x.start_ms, 0) || !mock_u64(f[1], &x.end_ms, 0)) why = "bad start or end (unix ms)";
        else if (x.start_ms >= x.end_ms) why = "end is not after start";
        else if (x.end_ms > 18000000000000ull) why = "end out of range (unix ms)";
        else if (!mock_u64(f[2], &x.reasons, 1)) why = "bad reasons (decimal or 0x hex)";
        else if (x.reasons & ~MOCK_REASONS_KNOWN) why = "reasons has bits nvml.h does not define (known: 0x1ff)";
        else if (!*f[3] || (errno = 0, x.factor = strtod(f[3], &end), errno || *end || !isfinite(x.factor)))
            why = "bad factor";
        else if (x.factor < 1.0 || x.factor > 1000.0) why = "factor must be 1 .. 1000";
        else if (nf == 5 && !mock_gpu_index(f[4], &x.gpu)) why = "bad gpu (-1 or 0 .. 7)";
        else if (n >= MOCK_THROTTLE_MAX) why = "too many windows (64)";
        if (why) { mock_bad_entry(who, "MOCK_GPU_THROTTLE", shown, why); continue; }
        w[n++] = x;
    }
    free(copy);
    return n;
}

/* The slowdown in force on `gpu` at `now_ns` (unix ns): returns the factor (1 outside every window),
 * stores the OR of the reasons in *reasons (if not NULL) and in *next_edge_ns (if not NULL) the next
 * start or end of one of this GPU's windows after now (UINT64_MAX when there is none). */
static inline double mock_throttle_at(const struct mock_throttle *w, int n, int gpu, uint64_t now_ns,
                                      uint64_t *reasons, uint64_t *next_edge_ns) {
    double f = 1.0;
    uint64_t r = 0, edge = UINT64_MAX;
    for (int i = 0; i < n; i++) {
        if (w[i].gpu != -1 && w[i].gpu != gpu) continue;
        uint64_t s = w[i].start_ms * 1000000ull, e = w[i].end_ms * 1000000ull;
        if (now_ns >= s && now_ns < e) {
            r |= w[i].reasons;
            if (w[i].factor > f) f = w[i].factor;
        }
        if (s > now_ns && s < edge) edge = s;
        if (e > now_ns && e < edge) edge = e;
    }
    if (reasons) *reasons = r;
    if (next_edge_ns) *next_edge_ns = edge;
    return f;
}

/* Device i's PCI bus number (domain 0, device 0, function 0): as in a DGX H100. */
static inline unsigned int mock_gpu_bus(int i) {
    static const unsigned char bus[MOCK_GPU_MAX] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
    return i >= 0 && i < MOCK_GPU_MAX ? bus[i] : 0;
}
/* Device i's UUID, GPU-5e1c0ffe-a10<i>-4c2a-9b1d-000000c0de0<i> (the NVML's string; the driver's
 * cuDeviceGetUuid and CUPTI's DEVICE records give these 16 bytes). */
static inline void mock_gpu_uuid(int i, unsigned char out[16]) {
    static const unsigned char base[16] = {0x5e, 0x1c, 0x0f, 0xfe, 0xa1, 0x00, 0x4c, 0x2a,
                                           0x9b, 0x1d, 0x00, 0x00, 0x00, 0xc0, 0xde, 0x00};
    memcpy(out, base, 16);
    out[5] = (unsigned char)i;
    out[15] = (unsigned char)i;
}
static inline void mock_gpu_uuid_str(int i, char *s, size_t n) {
    snprintf(s, n, "GPU-5e1c0ffe-%04x-4c2a-9b1d-%012x", 0xa100 + i, 0xc0de00 + i);
}

/* MOCK_GPU_COUNT: 1 .. MOCK_GPU_MAX, default 1 (out of range: a warning, then clamped). */
static inline int mock_gpu_count(const char *who) {
    const char *v = getenv("MOCK_GPU_COUNT");
    if (!v || !*v) return 1;
    uint64_t n;
    if (!mock_u64(v, &n, 0) || n < 1 || n > MOCK_GPU_MAX) {
        fprintf(stderr, "%s: MOCK_GPU_COUNT: \"%s\" is not 1 .. %d, using %d\n", who, v, MOCK_GPU_MAX,
                mock_u64(v, &n, 0) && n > MOCK_GPU_MAX ? MOCK_GPU_MAX : 1);
        return mock_u64(v, &n, 0) && n > MOCK_GPU_MAX ? MOCK_GPU_MAX : 1;
    }
    return (int)n;
}

/* ---- the PCIe link (MOCK_NVML_PCIE) ---- */
struct mock_pcie { unsigned gen, width, max_gen, max_width; };
#define MOCK_PCIE_DEFAULT ((struct mock_pcie){5, 16, 5, 16})

/* MB/s per lane of PCIe generation 1 .. 6 (0 for anything else). */
static inline double mock_pcie_lane_mbps(unsigned gen) {
    static const double rate[7] = {0, 250, 500, 985, 1969, 3938, 7563};
    return gen >= 1 && gen <= 6 ? rate[gen] : 0;
}
static inline int mock_pcie_width_ok(uint64_t w) {
    return w == 1 || w == 2 || w == 4 || w == 8 || w == 12 || w == 16 || w == 32;
}
/* Parse MOCK_NVML_PCIE into every GPU's link (`out`, MOCK_GPU_MAX of them; defaults where unset). */
static inline void mock_pcie_parse(const char *who, struct mock_pcie *out) {
    for (int i = 0; i < MOCK_GPU_MAX; i++) out[i] = MOCK_PCIE_DEFAULT;
    const char *env = getenv("MOCK_NVML_PCIE");
    if (!env || !*env) return;
    char *copy = strdup(env), *save = NULL;
    if (!copy) return;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char entry[MOCK_ENTRY_MAX], shown[MOCK_ENTRY_MAX], *f[5];
        char *t = mock_trim(tok);
        if (!*t) continue;
        snprintf(entry, sizeof entry, "%s", t);
        snprintf(shown, sizeof shown, "%s", t);
        int nf = mock_split(entry, ':', f, 5), gpu = -1;
        uint64_t v[4] = {0, 0, 5, 16};
        const char *why = NULL;
        if (nf < 2 || nf > 5) why = "want <gen>:<width>[:<max_gen>:<max_width>][:<gpu>]";
        for (int k = 0; !why && k < (nf >= 4 ? 4 : 2); k++)
            if (!mock_u64(f[k], &v[k], 0)) why = "bad number";
        if (!why && (nf == 3 || nf == 5) && !mock_gpu_index(f[nf - 1], &gpu)) why = "bad gpu (-1 or 0 .. 7)";
        if (!why && (!mock_pcie_lane_mbps((unsigned)v[0]) || !mock_pcie_lane_mbps((unsigned)v[2])))
            why = "a generation is 1 .. 6";
        if (!why && (!mock_pcie_width_ok(v[1]) || !mock_pcie_width_ok(v[3]))) why = "a width is 1, 2, 4, 8, 12, 16 or 32";
        if (!why && (v[0] > v[2] || v[1] > v[3])) why = "the link runs above its maximum";
        if (why) { mock_bad_entry(who, "MOCK_NVML_PCIE", shown, why); continue; }
        for (int i = 0; i < MOCK_GPU_MAX; i++)
            if (gpu == -1 || gpu == i)
                out[i] = (struct mock_pcie){(unsigned)v[0], (unsigned)v[1], (unsigned)v[2], (unsigned)v[3]};
    }
    free(copy);
}
/* How many times longer a host<->device copy takes on this link than on the link at its maximum. */
static inline double mock_pcie_slowdown(const struct mock_pcie *p) {
    double now = mock_pcie_lane_mbps(p->gen) * p->width, max = mock_pcie_lane_mbps(p->max_gen) * p->max_width;
    return now > 0 && max > now ? max / now : 1.0;
}

/* ---- the processes holding device memory (MOCK_GPU_PROCS_DIR) ---- */
#define MOCK_CTX_BYTES (300ull << 20) /* what a context holds before any allocation */
#define MOCK_PROC_LINE 48             /* a file's fixed length: "<gpu> <bytes>" padded with spaces */

/* The time each GPU of a process has been busy running its work: <dir>/<pid>.busy, MOCK_GPU_MAX
 * unsigned 64-bit counters of ns (one per device), mapped shared by the process's driver and added to
 * as each piece of work ends; the mock NVML reads them (MOCK_NVML_UTIL=busy) for a utilization that
 * follows the work the workload really ran. */
#define MOCK_BUSY_BYTES (MOCK_GPU_MAX * sizeof(uint64_t))
/* Read the busy counters of process `pid` in `dir` into out[MOCK_GPU_MAX]; 0 when there are none. */
static inline int mock_busy_read(const char *dir, unsigned pid, uint64_t *out) {
    char path[512];
    snprintf(path, sizeof path, "%s/%u.busy", dir, pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = pread(fd, out, MOCK_BUSY_BYTES, 0);
    close(fd);
    return got == (ssize_t)MOCK_BUSY_BYTES;
}

/* Write this process's line ("<gpu> <bytes>") to <dir>/<pid>, creating it; 0 when not kept. */
static inline int mock_proc_write(const char *dir, int pid, int gpu, uint64_t bytes) {
    char path[512], line[MOCK_PROC_LINE + 1];
    snprintf(path, sizeof path, "%s/%d", dir, pid);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    int n = snprintf(line, sizeof line, "%d %llu", gpu, (unsigned long long)bytes);
    memset(line + n, ' ', (size_t)(MOCK_PROC_LINE - n - 1));
    line[MOCK_PROC_LINE - 1] = '\n';
    int ok = pwrite(fd, line, MOCK_PROC_LINE, 0) == MOCK_PROC_LINE; /* one write: a reader sees old or new */
    close(fd);
    return ok;
}
/* Every process line of `dir`, to `fn` (pid, gpu, bytes); returns how many. */
static inline int mock_proc_list(const char *dir, void (*fn)(void *ctx, unsigned pid, int gpu, uint64_t bytes),
                                 void *ctx) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        uint64_t pid;
        if (!mock_u64(e->d_name, &pid, 0) || !pid || pid > 0x7fffffff) continue;
        char path[512], line[MOCK_PROC_LINE + 1] = {0};
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t got = pread(fd, line, MOCK_PROC_LINE, 0);
        close(fd);
        int gpu;
        unsigned long long bytes;
        if (got <= 0 || sscanf(line, "%d %llu", &gpu, &bytes) != 2) continue;
        fn(ctx, (unsigned)pid, gpu, bytes);
        n++;
    }
    closedir(d);
    return n;
}
#endif
