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
 * Also here: the helpers both libraries parse their other list knobs with, and MOCK_GPU_COUNT (how
 * many GPUs the mock NVML reports; 1 .. 8, default 1). Header-only: every function is static inline. */
#ifndef MOCK_GPU_H
#define MOCK_GPU_H
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
#endif
