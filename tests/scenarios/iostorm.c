/* A planted I/O storm: --threads writers (default 2) doing direct-I/O writes (O_DIRECT | O_DSYNC,
 * bypassing the page cache) of --block bytes to a file, in a loop, under a chosen name, until
 * killed or for --secs seconds.
 * `iostorm --name nightly-backup --file /var/tmp/storm.bin [--block 1048576] [--threads 2] [--secs 30]`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static const char *file = "/var/tmp/causeway-iostorm.bin";
static long block = 1 << 20;
static const long span = 64L << 20;
static double secs = 30;

static void *writer(void *arg) {
    long slot = (long)(intptr_t)arg, n = 0;
    int fd = open(file, O_WRONLY | O_CREAT | O_DIRECT | O_DSYNC, 0600);
    void *buf;
    if (fd < 0 || posix_memalign(&buf, 4096, (size_t)block)) { perror(file); return NULL; }
    memset(buf, 0xab, (size_t)block);
    double end = now() + secs;
    long off = (slot * (span / 4)) % span;
    while (now() < end) {
        if (pwrite(fd, buf, (size_t)block, off) != block) { perror("pwrite"); break; }
        off = (off + block) % span;
        n++;
    }
    close(fd);
    free(buf);
    return (void *)(intptr_t)n;
}

int main(int argc, char **argv) {
    const char *name = "io-storm";
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else if (!strcmp(argv[i], "--file")) file = argv[i + 1];
        else if (!strcmp(argv[i], "--block")) block = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--secs")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    }
    if (threads < 1) threads = 1;
    if (threads > 16) threads = 16;
    prctl(PR_SET_NAME, name, 0, 0, 0);
    printf("IOSTORM %d %s\n", getpid(), name);
    fflush(stdout);
    pthread_t t[16];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        void *n;
        pthread_join(t[i], &n);
        total += (long)(intptr_t)n;
    }
    unlink(file);
    printf("WROTE %ld\n", total);
    return 0;
}
