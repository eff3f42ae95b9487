/* A planted CPU hog: spins on the CPU it is pinned to (taskset), under a chosen name, until killed
 * or for --secs seconds. `hog --name backup-rsync [--secs 30] [--threads 1]`. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static double secs = 30;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    double end = now() + secs;
    while (now() < end)
        for (int i = 0; i < 100000; i++) x += i;
    return NULL;
}

int main(int argc, char **argv) {
    const char *name = "cpu-hog";
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else if (!strcmp(argv[i], "--secs")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    }
    prctl(PR_SET_NAME, name, 0, 0, 0);
    printf("HOG %d %s\n", getpid(), name);
    fflush(stdout);
    pthread_t t[64];
    if (threads > 64) threads = 64;
    for (int i = 1; i < threads; i++) pthread_create(&t[i], NULL, spin, NULL);
    spin(NULL);
    for (int i = 1; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}
