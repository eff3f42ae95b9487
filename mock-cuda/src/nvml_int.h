/* What the mock NVML's files share (nvml.c: init, devices, clocks, power, memory, events; nvml_link.c:
 * the PCIe link and NVLink error counters; nvml_procs.c: the processes and the memory they use). */
#ifndef MOCK_NVML_INT_H
#define MOCK_NVML_INT_H
#include "mock_nvml.h"
#include "mock_gpu.h"

#define API __attribute__((visibility("default")))
#define ALIAS(name) __attribute__((alias(#name)))
#define LIST_MAX 64 /* entries of a list knob */

/* nvml.c */
extern int g_count; /* devices */
int nvml_inited(void);
int nvml_dev_index(nvmlDevice_t d); /* -1: not one of ours */
/* Each entry of a comma-separated list knob, split at ':' into at most `max` fields (<= 5), to `fn`. */
void nvml_env_list(const char *knob, int max, int (*fn)(char **f, int nf, const char **why));

/* the start of every device query: initialized, a device of ours (its index in `i`) */
#define DEVICE(d, i)                                     \
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED; \
    int i = nvml_dev_index(d);                           \
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT

/* nvml_link.c */
void link_load_config(void);               /* at init (g_mu held) */
unsigned long long nvlink_crc_errors(int i); /* CRC flit errors planted on device i until now */

/* nvml_procs.c */
void procs_load_config(void);            /* at init (g_mu held) */
unsigned long long proc_bytes(int i);
unsigned int procs_busy_pct(int dev); /* MOCK_NVML_UTIL=busy: device dev's busy share since the last call */    /* the memory the listed processes use on device i */
#endif
