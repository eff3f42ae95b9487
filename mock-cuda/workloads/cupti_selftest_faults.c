/* cupti_selftest, the second half: one mode per MOCK_CUPTI_FAULT switch (each sets its switch before
 * loading libcupti, so `cupti_selftest drop` runs alone too), `app` (what the injection checks run as
 * the application: cuInit three times, then kernels through the runtime) and `inject`:
 * CUDA_INJECTION64_PATH loads build/inject_probe.so once (its marker file gets one line however many
 * cuInit calls), a missing file, a library without InitializeInjection (inject_nosym.so), one that
 * returns 0 and an empty path leave the application unharmed (exit 0), the probe as a CUPTI client
 * sees the application's kernels, and gpuloop prints the same with and without it (its foreign
 * client counting exactly its window's kernels, the probe's registration taken meanwhile). */
#include "selftest.h"
#include <fcntl.h>
#include <sys/wait.h>

static void load_with(const char *fault) {
    setenv("MOCK_CUPTI_FAULT", fault, 1);
    if (cupti_load(&C, ST_MAJOR, "cudaLaunchKernel") != 0) { fprintf(stderr, "cupti_selftest: no libcupti\n"); exit(1); }
}
static void kernels_then_flush(int n) {
    for (int i = 0; i < n; i++) st_launch(i % 3, NULL);
    CUDA(cudaDeviceSynchronize());
    CHECK(C.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == 0, "flush");
}
static int setup(void) {
    return C.RegisterCallbacks(st_request, st_complete) == 0 && C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0;
}

int mode_busy(void) {
    load_with("busy");
    CHECK(C.RegisterCallbacks(st_request, st_complete) == 0, "register");
    CHECK(C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "enable");
    kernels_then_flush(2);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0, "records while busy");
    return g_fail;
}

#ifdef MOCK_CUDA13
static size_t g_v2_kernels;
static void req2(uint8_t **buffer, size_t *size, size_t *max, void *info) {
    CHECK(info && *(size_t *)info >= sizeof(size_t), "request info");
    *buffer = aligned_alloc(8, 1 << 16);
    *size = 1 << 16;
    *max = 0;
}
static void *g_sub;
static void comp2(uint8_t *buffer, size_t size, size_t valid, void *info) {
    (void)size;
    CHECK(info != NULL, "complete info");
    mock_cupti_record *r = NULL;
    while (C.GetNextRecord_v2(g_sub, buffer, valid, &r) == CUPTI_SUCCESS)
        g_v2_kernels += r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    free(buffer);
}
#endif
int mode_v2only(void) {
    load_with("v2only");
    uint64_t ts = 0;
    void *sub = NULL;
    size_t dropped = 0, vs = sizeof(size_t), val = 1;
    mock_cupti_record *r = NULL;
    uint8_t buf[64] = {0};
    CHECK(C.RegisterCallbacks(st_request, st_complete) == CUPTI_ERROR_NOT_COMPATIBLE, "register");
    CHECK(C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_ERROR_NOT_COMPATIBLE, "enable");
    CHECK(C.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_ERROR_NOT_COMPATIBLE, "disable");
    CHECK(C.GetTimestamp(&ts) == CUPTI_ERROR_NOT_COMPATIBLE, "timestamp");
    CHECK(C.GetNextRecord(buf, sizeof buf, &r) == CUPTI_ERROR_NOT_COMPATIBLE, "next record");
    CHECK(C.GetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_ERROR_NOT_COMPATIBLE, "dropped");
    CHECK(C.SetAttribute(0, &vs, &val) == CUPTI_ERROR_NOT_COMPATIBLE, "attribute");
    CHECK(C.Subscribe(&sub, NULL, NULL) == CUPTI_ERROR_NOT_COMPATIBLE, "subscribe");
    CHECK(C.FlushAll(1) == CUPTI_ERROR_INVALID_OPERATION, "flush with nobody registered");
    st_launch(0, NULL); /* the application is unharmed */
    CUDA(cudaDeviceSynchronize());
#ifdef MOCK_CUDA13
    CHECK(C.Subscribe_v2(&g_sub, NULL, NULL, NULL) == 0, "subscribe_v2");
    CHECK(C.GetTimestamp_v2(g_sub, &ts) == 0 && ts > 0, "timestamp_v2");
    CHECK(C.RegisterCallbacks_v2(g_sub, req2, comp2) == 0, "register_v2");
    CHECK(C.Enable_v2(g_sub, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, NULL) == 0, "enable_v2");
    kernels_then_flush(3);
    CHECK(g_v2_kernels == 3, "v2 client got %zu kernels, want 3", g_v2_kernels);
    CHECK(C.Disable_v2(g_sub, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, NULL) == 0, "disable_v2");
#endif
    return g_fail;
}

int mode_drop(void) {
    load_with("drop=3");
    CHECK(setup(), "setup");
    kernels_then_flush(9);
    size_t dropped = 0;
    CHECK(C.GetNumDroppedRecords(NULL, 0, &dropped) == 0 && dropped == 3, "dropped %zu, want 3", dropped);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 6, "%zu kernels, want 6",
          st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    return g_fail;
}

int mode_zero_ts(void) {
    load_with("zero_ts=2");
    CHECK(setup(), "setup");
    kernels_then_flush(6);
    size_t n = st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), zero = 0;
    for (size_t i = 0; i < n; i++) {
        const mock_cupti_kernel *k = st_get(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, i);
        if (k->start == 0 && k->end == 0) zero++;
        else CHECK(k->start < k->end, "kernel %zu times", i);
    }
    CHECK(n == 6 && zero == 3, "%zu kernels, %zu with zero timestamps (want 6, 3)", n, zero);
    return g_fail;
}

int mode_old_driver(void) {
    load_with("old_driver");
    uint32_t v = 0;
    uint64_t ts;
    int type;
    void *sub = NULL;
    size_t d, vs = sizeof(size_t), val = 1;
    mock_cupti_record *r = NULL;
    uint8_t buf[64] = {0};
    const char *s = NULL;
    CHECK(C.GetVersion(&v) == 0 && v == ST_VERSION, "version");
    CHECK(C.GetResultString(15, &s) == 0 && !strcmp(s, "CUPTI_ERROR_NOT_INITIALIZED"), "result string");
    const int E = CUPTI_ERROR_NOT_INITIALIZED;
    CHECK(C.RegisterCallbacks(st_request, st_complete) == E, "register");
    CHECK(C.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == E, "enable");
    CHECK(C.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == E, "disable");
    CHECK(C.FlushAll(1) == E, "flush");
    CHECK(C.GetTimestamp(&ts) == E, "timestamp");
    CHECK(C.GetNextRecord(buf, sizeof buf, &r) == E, "next record");
    CHECK(C.GetNumDroppedRecords(NULL, 0, &d) == E, "dropped");
    CHECK(C.SetThreadIdType(1) == E && C.GetThreadIdType(&type) == E, "thread id type");
    CHECK(C.SetAttribute(0, &vs, &val) == E, "attribute");
    CHECK(C.Subscribe(&sub, NULL, NULL) == E && C.Unsubscribe(sub) == E, "subscribe");
    CHECK(C.Finalize() == E, "finalize");
    for (int i = 0; i < 3; i++) st_launch(i, NULL); /* the application is unharmed */
    CUDA(cudaDeviceSynchronize());
    return g_fail;
}

int mode_clock_step(void) {
    load_with("clock_step=100");
    CHECK(setup(), "setup");
    uint64_t t0 = 0, t1 = 0;
    const uint64_t step = 2000000000ull, slack = 50000000ull;
    CHECK(C.GetTimestamp(&t0) == 0, "timestamp");
    uint64_t r0 = st_real_ns();
    CHECK(t0 <= r0 && r0 - t0 < slack, "before the step: %llu vs clock %llu", (unsigned long long)t0,
          (unsigned long long)r0);
    st_sleep_ms(150);
    CHECK(C.GetTimestamp(&t1) == 0, "timestamp");
    uint64_t r1 = st_real_ns();
    CHECK(t1 > r1 && t1 - r1 > step - slack && t1 - r1 < step + slack, "after the step: %lld ns ahead",
          (long long)(t1 - r1));
    kernels_then_flush(1);
    const mock_cupti_kernel *k = st_get(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0);
    uint64_t r2 = st_real_ns();
    CHECK(k && k->start > r2 && k->start - r2 < step + slack, "kernel not stepped");
    return g_fail;
}

int mode_slow_flush(void) {
    load_with("slow_flush=300");
    CHECK(setup(), "setup");
    for (int i = 0; i < 2; i++) st_launch(i, NULL);
    CUDA(cudaDeviceSynchronize());
    uint64_t t = st_real_ns();
    CHECK(C.FlushAll(1) == 0, "flush");
    t = st_real_ns() - t;
    CHECK(t >= 300000000ull, "FlushAll took %llu ns, want >= 300 ms", (unsigned long long)t);
    CHECK(st_count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 2, "records");
    return g_fail;
}

/* the application the injection checks run */
int mode_app(void) {
    for (int i = 0; i < 3; i++) CHECK(cuInit(0) == 0, "cuInit");
    void *p = NULL;
    CUDA(cudaMalloc(&p, 4096));
    for (int i = 0; i < 6; i++) st_launch(i % 3, NULL);
    CUDA(cudaDeviceSynchronize());
    CUDA(cudaFree(p));
    return g_fail;
}

/* Run argv with the environment changes `env` ("NAME=value", "NAME=" empties, NULL-terminated);
 * returns the exit status (-1 when it did not exit), its stdout in out. */
static int run(const char *const *env, char *const argv[], char *out, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        unsetenv("MOCK_CUPTI_FAULT");
        for (int i = 0; env[i]; i++) putenv((char *)env[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static void slurp(const char *path, char *buf, size_t cap) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}
static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

int mode_inject(const char *self) {
    char dir[4096], probe[4200], nosym[4200], gpuloop[4200], marker[] = "/tmp/cupti_selftest_XXXXXX";
    snprintf(dir, sizeof dir, "%s", self);
    *strrchr(dir, '/') = 0;
    snprintf(probe, sizeof probe, "CUDA_INJECTION64_PATH=%s/inject_probe.so", dir);
    snprintf(nosym, sizeof nosym, "CUDA_INJECTION64_PATH=%s/inject_nosym.so", dir);
    snprintf(gpuloop, sizeof gpuloop, "%s/gpuloop", dir);
    int fd = mkstemp(marker);
    if (fd < 0) { perror("mkstemp"); return 1; }
    close(fd);
    char mark_env[64 + sizeof marker], major_env[32], out[8192], out2[8192], m[4096], want[64];
    snprintf(mark_env, sizeof mark_env, "MOCK_INJECT_MARKER=%s", marker);
    snprintf(major_env, sizeof major_env, "MOCK_INJECT_MAJOR=%d", ST_MAJOR);
    char *app[] = {(char *)self, "app", NULL};

    const char *e1[] = {probe, mark_env, NULL};
    CHECK(run(e1, app, out, sizeof out) == 0, "app with the probe");
    slurp(marker, m, sizeof m);
    CHECK(lines(m) == 1 && !strncmp(m, "InitializeInjection ", 20), "marker after one run: \"%s\"", m);
    const char *e2[] = {"CUDA_INJECTION64_PATH=/nonexistent/libinject.so", mark_env, NULL};
    CHECK(run(e2, app, out, sizeof out) == 0, "app with a missing injection library");
    const char *e3[] = {nosym, mark_env, NULL};
    CHECK(run(e3, app, out, sizeof out) == 0, "app with a library lacking InitializeInjection");
    const char *e4[] = {"CUDA_INJECTION64_PATH=", mark_env, NULL};
    CHECK(run(e4, app, out, sizeof out) == 0, "app with an empty path");
    slurp(marker, m, sizeof m);
    CHECK(lines(m) == 1, "marker written without the probe: \"%s\"", m);
    const char *e5[] = {probe, mark_env, "MOCK_INJECT_RET=0", NULL};
    CHECK(run(e5, app, out, sizeof out) == 0, "app with InitializeInjection returning 0");
    slurp(marker, m, sizeof m);
    CHECK(lines(m) == 2, "marker: \"%s\"", m);

    /* the probe as a CUPTI client sees the application's 6 kernels */
    truncate(marker, 0);
    const char *e6[] = {probe, mark_env, "MOCK_INJECT_CUPTI=1", major_env, NULL};
    CHECK(run(e6, app, out, sizeof out) == 0, "app with the probe as a CUPTI client");
    slurp(marker, m, sizeof m);
    CHECK(lines(m) == 2 && strstr(m, "\nkernels 6\n"), "probe: \"%s\"", m);

    /* gpuloop: the same output with and without the injection library */
    char *loop[] = {gpuloop, "--steps", "20", "--kernels", "2", "--host-us", "100", NULL};
    const char *none[] = {NULL};
    CHECK(run(none, loop, out, sizeof out) == 0, "gpuloop");
    truncate(marker, 0);
    CHECK(run(e6, loop, out2, sizeof out2) == 0, "gpuloop with the probe");
    CHECK(!strcmp(out, out2) && !strcmp(out, "gpuloop: 20 steps, 2 kernels each, done\n"), "gpuloop said \"%s\" / \"%s\"",
          out, out2);
    slurp(marker, m, sizeof m);
    CHECK(strstr(m, "\nkernels 40\n"), "probe in gpuloop: \"%s\"", m);
    /* with the foreign client (steps 5 .. 8): it counts exactly its 8 kernels either way; the probe's
     * registration is taken at step 5 with the records in the probe's buffer, and the foreign
     * client's disable at step 9 stops kernel records for everyone: the probe ends with none */
    char *foreign[] = {gpuloop, "--steps", "20", "--kernels", "2", "--host-us", "100", "--depth", "2",
                       "--foreign-at", "5", "--foreign-steps", "4", NULL};
    CHECK(run(none, foreign, out, sizeof out) == 0, "gpuloop --foreign-at");
    truncate(marker, 0);
    CHECK(run(e6, foreign, out2, sizeof out2) == 0, "gpuloop --foreign-at with the probe");
    snprintf(want, sizeof want, "foreign client received 8 kernels\n");
    CHECK(!strcmp(out, out2) && !strncmp(out, want, strlen(want)), "gpuloop said \"%s\" / \"%s\"", out, out2);
    slurp(marker, m, sizeof m);
    CHECK(strstr(m, "\nkernels 0\n"), "probe beside the foreign client: \"%s\"", m);
    /* the planted stalls run through */
    char *stalls[] = {gpuloop, "--steps", "10", "--kernels", "2", "--host-us", "100", "--depth", "2", "--hog-at", "3",
                      "--hog-ms", "20", "--sleep-at", "4", "--sleep-ms", "10", "--drain-at", "6", NULL};
    CHECK(run(none, stalls, out, sizeof out) == 0 && !strcmp(out, "gpuloop: 10 steps, 2 kernels each, done\n"),
          "gpuloop with stalls said \"%s\"", out);
    unlink(marker);
    return g_fail;
}
