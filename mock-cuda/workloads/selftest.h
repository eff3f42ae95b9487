/* What cupti_selftest's two files share (cupti_selftest.c: the runner, the collecting client, the
 * record checks; cupti_selftest_faults.c: the fault switches and the injection checks). */
#ifndef WORKLOAD_SELFTEST_H
#define WORKLOAD_SELFTEST_H
#include "kernels.h"
#include "cupti_client.h"
#include "../src/mock_activity.h"

#ifdef MOCK_CUDA13
#define ST_MAJOR 13
#define ST_VERSION 130500u
#else
#define ST_MAJOR 12
#define ST_VERSION 28u
#endif

extern struct cupti_api C;          /* the libcupti under test */
extern const char *g_mode;          /* the mode running */
extern int g_fail;
extern struct wl_kernel *g_k;       /* three registered kernels */
extern size_t g_bufsize;            /* what the request callback hands out */
extern int g_decline;               /* the request callback declines */

#define CHECK(cond, ...) do { if (!(cond)) { \
        fprintf(stderr, "cupti_selftest %s: FAIL line %d: %s: ", g_mode, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); g_fail = 1; } } while (0)
#define CUDA(expr) do { cudaError_t e_ = (expr); CHECK(e_ == cudaSuccess, "%s returned %d", #expr, e_); } while (0)

/* the records the collecting client received, copied */
struct st_rec { uint8_t b[256]; };
size_t st_count(int kind);                          /* records of a kind */
const void *st_get(int kind, size_t i);             /* the i-th record of a kind */
void st_reset(void);                                /* forget them (and the delivery counts) */
int st_other_thread_deliveries(void);               /* buffers delivered off the main thread */
void st_request(uint8_t **buffer, size_t *size, size_t *max);
void st_complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);
void st_launch(int k, cudaStream_t s);              /* kernel k (0..2) <<<>>> on s */
void st_sleep_ms(long ms);
uint64_t st_real_ns(void);

static inline void st_uses_opt(void) { (void)opt; } /* common.h's option parser: unused here */

/* cupti_selftest_faults.c */
int mode_busy(void);
int mode_v2only(void);
int mode_drop(void);
int mode_zero_ts(void);
int mode_old_driver(void);
int mode_clock_step(void);
int mode_slow_flush(void);
int mode_app(void);
int mode_inject(const char *self);
#endif
