/* Who woke a thread, in the three cases where the current task at `sched_wakeup` is not the waker:
 *   idle:  `wakee-idle` (pinned to CPU 1, which is otherwise idle) blocks in read() on a pipe that
 *          `waker` (pinned to CPU 0) writes: the kernel queues the wake-up to CPU 1 and
 *          `sched_wakeup` runs there in the idle task.
 *   busy:  the same with `wakee-busy`, while `hog` spins on CPU 1: where the wake-up is queued,
 *          `sched_wakeup` runs in the hog's context.
 *   timer: `wakee-timer` (on CPU 1 beside the hog) sleeps in nanosleep: a timer interrupt wakes it,
 *          in whatever task ran on CPU 1 (the hog, mostly), and no task woke it.
 * Prints `THREAD <name> <tid>` for each thread and `PID <pid>`; needs two CPUs. */
#include "common.h"
#include <sched.h>

static int g_rounds;
static long g_gap_us;
static atomic_int g_stop_hog;

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(2);
    }
}

struct pair {
    const char *wakee_name;
    int fds[2];
};

static void *wakee(void *arg) {
    struct pair *p = arg;
    pin(1);
    wl_thread(p->wakee_name);
    char b;
    for (int i = 0; i < g_rounds; i++)
        if (read(p->fds[0], &b, 1) != 1) exit(3);
    return NULL;
}

static void *hog(void *arg) {
    (void)arg;
    pin(1);
    wl_thread("hog");
    while (!atomic_load(&g_stop_hog)) wl_spin_ns(100000);
    return NULL;
}

static void *timer_sleeper(void *arg) {
    (void)arg;
    pin(1);
    wl_thread("wakee-timer");
    for (int i = 0; i < g_rounds; i++) wl_sleep_us(g_gap_us);
    return NULL;
}

/* `waker` (this thread, on CPU 0) wakes the wakee `g_rounds` times, `g_gap_us` apart */
static void wake_through_pipe(const char *wakee_name) {
    struct pair p = {.wakee_name = wakee_name};
    if (pipe(p.fds) != 0) exit(3);
    pthread_t t;
    pthread_create(&t, NULL, wakee, &p);
    wl_sleep_us(20000); /* the wakee is pinned and blocked before the first write */
    for (int i = 0; i < g_rounds; i++) {
        wl_sleep_us(g_gap_us);
        if (write(p.fds[1], "x", 1) != 1) exit(3);
    }
    pthread_join(t, NULL);
    close(p.fds[0]);
    close(p.fds[1]);
}

int main(int argc, char **argv) {
    g_rounds = (int)opt(argc, argv, "--rounds", 100);
    g_gap_us = opt(argc, argv, "--gap-us", 2000);
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        fprintf(stderr, "wakers: needs two CPUs\n");
        return 2;
    }
    pin(0);
    wl_thread("waker");
    wake_through_pipe("wakee-idle");
    pthread_t h, s;
    pthread_create(&h, NULL, hog, NULL);
    wl_sleep_us(20000);
    wake_through_pipe("wakee-busy");
    pthread_create(&s, NULL, timer_sleeper, NULL);
    pthread_join(s, NULL);
    atomic_store(&g_stop_hog, 1);
    pthread_join(h, NULL);
    wl_report();
    return 0;
}
