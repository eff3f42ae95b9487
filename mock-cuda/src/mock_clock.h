/* The monotonic clock the mock libraries time their planted work with (the driver's kernels and
 * synchronizations, NCCL's collectives). Header-only: every function is static inline. */
#ifndef MOCK_CLOCK_H
#define MOCK_CLOCK_H
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC now, in ns. */
static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Sleep until CLOCK_MONOTONIC reaches t (ns), through signals. */
static inline void sleep_until(uint64_t t) {
    struct timespec ts = {.tv_sec = t / 1000000000ull, .tv_nsec = t % 1000000000ull};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
}
#endif
