/* Mock NVML (soname libnvidia-ml.so.1): an H100-like GPU ("NVIDIA H100 80GB HBM3") per device, whose
 * clocks, temperature and power report the slowdown planted with MOCK_GPU_THROTTLE (mock_gpu.h) while
 * the mock driver, in the workload's process, runs that GPU's work `factor` times slower. The two
 * never talk: both read the same environment and the wall clock (CLOCK_REALTIME), so a tracer that
 * samples this NVML sees the throttle exactly while the GPU work it traces is slow.
 *
 * Normally a device reports: SM and graphics clocks at their maximum (1980 MHz), memory 2619 MHz,
 * video 1755 MHz; no clock event reasons (0); 55 C; 450 W of a 700 W limit; utilization 97 % GPU,
 * 60 % memory (MOCK_NVML_UTIL=g:m, a steady value; MOCK_NVML_UTIL=busy: the GPU percent is the
 * share of the time since the previous call that the mock driver's processes of MOCK_GPU_PROCS_DIR
 * kept the device busy, from their <pid>.busy counters (mock_gpu.h), 0 at the first call); 80 GiB of memory, 512 MiB of it reserved; PCIe TX 850,000 and RX
 * 2,400,000 KB/s at the default 97 % (scaled by MOCK_NVML_UTIL's GPU percent: an idle GPU moves
 * nothing); the PCIe link and NVLink error counters of nvml_link.c; NVLink data counters (fields 138 and 139, KiB) growing at 20 GiB/s each since boot
 * (CLOCK_BOOTTIME, so every process reads the same counter; the GPU-wide total whatever the scopeId,
 * as real NVML reports); ECC counts 0 (MOCK_NVML_ECC=corrected:uncorrected, volatile and aggregate
 * alike); the processes of nvml_procs.c (MOCK_NVML_PIDS, MOCK_GPU_PROCS_DIR). Inside a throttle window for the device: the reasons are the
 * window's mask (windows that overlap: OR'ed, the largest factor), SM and graphics clocks max/factor
 * rounded (495 MHz for 4), 91 C when the mask has a thermal bit (SwThermalSlowdown 0x20,
 * HwThermalSlowdown 0x40), 700 W (the limit) when it has SwPowerCap 0x4; the total energy counter
 * integrates that power since boot.
 *
 * Xid events: MOCK_NVML_XID="<unix_ms>:<xid>[:<gpu>],..." (gpu -1, the default, every GPU): an event
 * set that registered nvmlEventTypeXidCriticalError for the device gets each planted Xid from
 * nvmlEventSetWait_v2 once its time has come (once per set and device, oldest first, planted times
 * already past included); the wait otherwise sleeps up to its timeout and returns NVML_ERROR_TIMEOUT.
 *
 * Devices: MOCK_GPU_COUNT (1 .. 8, default 1). Init is reference-counted like NVML's (every init needs
 * a shutdown); the environment is read when the count goes from 0 to 1. Every call but the inits and
 * nvmlErrorString returns NVML_ERROR_UNINITIALIZED before init; a handle that is not one of this
 * library's devices, an index beyond the count, a NULL output or an unknown enum value: 2
 * (NVML_ERROR_INVALID_ARGUMENT); a string buffer too small: 7 (NVML_ERROR_INSUFFICIENT_SIZE). */
#define _GNU_SOURCE
#include "nvml_int.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* the layouts of nvml.h (see mock_nvml.h) */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t is 68 bytes");
_Static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain at 16");
_Static_assert(offsetof(nvmlPciInfo_t, pciDeviceId) == 28, "nvmlPciInfo_t.pciDeviceId at 28");
_Static_assert(offsetof(nvmlPciInfo_t, pciSubSystemId) == 32, "nvmlPciInfo_t.pciSubSystemId at 32");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId at 36");
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t is 8 bytes");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t is 24 bytes");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes");
_Static_assert(offsetof(nvmlMemory_v2_t, total) == 8, "nvmlMemory_v2_t.total at 8");
_Static_assert(offsetof(nvmlMemory_v2_t, used) == 32, "nvmlMemory_v2_t.used at 32");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2 is NVML_STRUCT_VERSION(Memory, 2)");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t is 24 bytes");
_Static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8, "nvmlProcessInfo_t.usedGpuMemory at 8");
_Static_assert(offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16, "nvmlProcessInfo_t.gpuInstanceId at 16");
_Static_assert(offsetof(nvmlProcessInfo_t, computeInstanceId) == 20, "nvmlProcessInfo_t.computeInstanceId at 20");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t is 32 bytes");
_Static_assert(offsetof(nvmlEventData_t, eventType) == 8, "nvmlEventData_t.eventType at 8");
_Static_assert(offsetof(nvmlEventData_t, eventData) == 16, "nvmlEventData_t.eventData at 16");
_Static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24, "nvmlEventData_t.gpuInstanceId at 24");
_Static_assert(offsetof(nvmlEventData_t, computeInstanceId) == 28, "nvmlEventData_t.computeInstanceId at 28");
_Static_assert(sizeof(nvmlValue_t) == 8, "nvmlValue_t is 8 bytes");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t is 40 bytes");
_Static_assert(offsetof(nvmlFieldValue_t, scopeId) == 4, "nvmlFieldValue_t.scopeId at 4");
_Static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8, "nvmlFieldValue_t.timestamp at 8");
_Static_assert(offsetof(nvmlFieldValue_t, latencyUsec) == 16, "nvmlFieldValue_t.latencyUsec at 16");
_Static_assert(offsetof(nvmlFieldValue_t, valueType) == 24, "nvmlFieldValue_t.valueType at 24");
_Static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28, "nvmlFieldValue_t.nvmlReturn at 28");
_Static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t.value at 32");
_Static_assert(sizeof(nvmlClockType_t) == 4 && sizeof(nvmlReturn_t) == 4, "enums are ints");

/* ---- the device ---- */
#define NAME "NVIDIA H100 80GB HBM3"
#define DRIVER_VERSION "550.54.15"
#define NVML_VERSION "12.550.54.15"
#define CUDA_DRIVER_VERSION 12040 /* as the mock driver's cuDriverGetVersion */
#define MAX_SM_MHZ 1980
#define MAX_MEM_MHZ 2619
#define MAX_VIDEO_MHZ 1755
#define TEMP_C 55
#define TEMP_THERMAL_C 91
#define POWER_MW 450000
#define POWER_LIMIT_MW 700000
#define MEM_TOTAL (80ull << 30)
#define MEM_RESERVED (512ull << 20)
#define PCIE_TX_KBPS 850000
#define PCIE_RX_KBPS 2400000
#define NVLINK_KIBPS (20ull << 20) /* 20 GiB/s in KiB/s, each direction */
#define NVLINK_LINKS 18
#define THERMAL_BITS (nvmlClocksEventReasonSwThermalSlowdown | nvmlClocksThrottleReasonHwThermalSlowdown)
#define SUPPORTED_EVENTS \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | nvmlEventTypeXidCriticalError)
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId / computeInstanceId without MIG */

struct nvmlDevice_st { unsigned int index; };
static struct nvmlDevice_st g_dev[MOCK_GPU_MAX] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

/* ---- configuration, read from the environment when init's count goes from 0 to 1 ---- */
struct xid { uint64_t ms, xid; int gpu; };
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_refs; /* nvmlInit minus nvmlShutdown */
int g_count = 1;
static struct mock_throttle g_thr[MOCK_THROTTLE_MAX];
static int g_nthr;
static struct xid g_xid[LIST_MAX];
static int g_nxid;
static unsigned int g_util_gpu = 97, g_util_mem = 60;
static int g_util_busy; /* MOCK_NVML_UTIL=busy */
static unsigned long long g_ecc[2]; /* corrected, uncorrected */

/* "a:b" of two unsigned numbers from `knob`; returns 1 when set and valid */
static int env_pair(const char *knob, uint64_t *a, uint64_t *b, uint64_t max) {
    const char *v = getenv(knob);
    if (!v || !*v) return 0;
    char buf[MOCK_ENTRY_MAX], *f[2];
    snprintf(buf, sizeof buf, "%s", v);
    if (mock_split(buf, ':', f, 2) != 2 || !mock_u64(f[0], a, 0) || !mock_u64(f[1], b, 0) || *a > max || *b > max) {
        mock_bad_entry("mocknvml", knob, v, "want <n>:<n>");
        return 0;
    }
    return 1;
}
void nvml_env_list(const char *knob, int max, int (*fn)(char **f, int nf, const char **why)) {
    const char *v = getenv(knob);
    if (!v || !*v) return;
    char *copy = strdup(v), *save = NULL;
    if (!copy) return;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char entry[MOCK_ENTRY_MAX], *f[5];
        char *t = mock_trim(tok);
        if (!*t) continue;
        snprintf(entry, sizeof entry, "%s", t);
        int nf = mock_split(entry, ':', f, max < 5 ? max : 5);
        const char *why = "too many fields";
        if (nf > max || !fn(f, nf, &why)) mock_bad_entry("mocknvml", knob, t, why);
    }
    free(copy);
}
static int parse_xid(char **f, int nf, const char **why) {
    struct xid x = {0, 0, -1};
    if (nf < 2) { *why = "want <unix_ms>:<xid>[:<gpu>]"; return 0; }
    if (!mock_u64(f[0], &x.ms, 0) || x.ms > 18000000000000ull) { *why = "bad time (unix ms)"; return 0; }
    if (!mock_u64(f[1], &x.xid, 0)) { *why = "bad xid"; return 0; }
    if (nf == 3 && !mock_gpu_index(f[2], &x.gpu)) { *why = "bad gpu (-1 or 0 .. 7)"; return 0; }
    if (g_nxid >= LIST_MAX) { *why = "too many (64)"; return 0; }
    g_xid[g_nxid++] = x;
    return 1;
}
static void load_config(void) {
    g_count = mock_gpu_count("mocknvml");
    g_nthr = mock_throttle_parse("mocknvml", g_thr);
    g_nxid = 0;
    nvml_env_list("MOCK_NVML_XID", 3, parse_xid);
    link_load_config();
    procs_load_config();
    uint64_t a, b;
    g_util_gpu = 97, g_util_mem = 60;
    const char *util = getenv("MOCK_NVML_UTIL");
    g_util_busy = util && !strcmp(util, "busy");
    if (!g_util_busy && env_pair("MOCK_NVML_UTIL", &a, &b, 100)) { g_util_gpu = (unsigned)a; g_util_mem = (unsigned)b; }
    g_ecc[0] = g_ecc[1] = 0;
    if (env_pair("MOCK_NVML_ECC", &a, &b, UINT64_MAX)) { g_ecc[0] = a; g_ecc[1] = b; }
}

/* ---- helpers ---- */
int nvml_inited(void) { return __atomic_load_n(&g_refs, __ATOMIC_ACQUIRE) > 0; }
int nvml_dev_index(nvmlDevice_t d) {
    for (int i = 0; i < g_count; i++)
        if (d == &g_dev[i]) return i;
    return -1;
}
static nvmlReturn_t put_str(char *buf, unsigned int length, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}
/* the throttle on device i now: the factor (1 outside every window), the reasons */
static double throttle_now(int i, unsigned long long *reasons) {
    uint64_t r;
    double f = mock_throttle_at(g_thr, g_nthr, i, mock_unix_ns(), &r, NULL);
    if (reasons) *reasons = r;
    return f;
}
static unsigned long long clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
/* ---- init, system ---- */
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&g_mu);
    if (g_refs == 0) load_config();
    __atomic_store_n(&g_refs, g_refs + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_mu);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlInit(void) ALIAS(nvmlInit_v2);
API nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_mu);
    nvmlReturn_t r = g_refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (g_refs > 0) __atomic_store_n(&g_refs, g_refs - 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_mu);
    return r;
}
API const char *nvmlErrorString(nvmlReturn_t result) {
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    default: return "Unknown Error";
    }
}
API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    return put_str(version, length, DRIVER_VERSION);
}
API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    return put_str(version, length, NVML_VERSION);
}
API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = CUDA_DRIVER_VERSION;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) ALIAS(nvmlSystemGetCudaDriverVersion);

/* ---- devices ---- */
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)g_count;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) ALIAS(nvmlDeviceGetCount_v2);
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)g_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_dev[index];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) ALIAS(nvmlDeviceGetHandleByIndex_v2);
API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEVICE(device, i);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)i;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE(device, i);
    (void)i;
    return put_str(name, length, NAME);
}
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(device, i);
    char s[NVML_DEVICE_UUID_BUFFER_SIZE];
    mock_gpu_uuid_str(i, s, sizeof s);
    return put_str(uuid, length, s);
}
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE(device, i);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->domain = 0;
    pci->bus = mock_gpu_bus(i);
    pci->device = 0;
    pci->pciDeviceId = 0x233010de;    /* H100 SXM5 80GB (0x2330), NVIDIA (0x10de) */
    pci->pciSubSystemId = 0x16c110de;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0", pci->domain, pci->bus, pci->device);
    snprintf(pci->busId, sizeof pci->busId, "%08x:%02x:%02x.0", pci->domain, pci->bus, pci->device);
    return NVML_SUCCESS;
}
static unsigned int max_clock(nvmlClockType_t type) {
    switch (type) {
    case NVML_CLOCK_GRAPHICS: case NVML_CLOCK_SM: return MAX_SM_MHZ;
    case NVML_CLOCK_MEM: return MAX_MEM_MHZ;
    case NVML_CLOCK_VIDEO: return MAX_VIDEO_MHZ;
    default: return 0;
    }
}
API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    DEVICE(device, i);
    (void)i;
    if (!clock || !max_clock(type)) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = max_clock(type);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    DEVICE(device, i);
    if (!clock || !max_clock(type)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int mhz = max_clock(type);
    if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM) mhz = (unsigned int)((double)mhz / throttle_now(i, NULL) + 0.5);
    *clock = mhz;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons) {
    DEVICE(device, i);
    if (!clocksEventReasons) return NVML_ERROR_INVALID_ARGUMENT;
    throttle_now(i, clocksEventReasons);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons)
    ALIAS(nvmlDeviceGetCurrentClocksEventReasons);
API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                          unsigned long long *supportedClocksEventReasons) {
    DEVICE(device, i);
    (void)i;
    if (!supportedClocksEventReasons) return NVML_ERROR_INVALID_ARGUMENT;
    *supportedClocksEventReasons = MOCK_REASONS_KNOWN;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                             unsigned long long *supportedClocksThrottleReasons)
    ALIAS(nvmlDeviceGetSupportedClocksEventReasons);
API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState) {
    DEVICE(device, i);
    (void)i;
    if (!pState) return NVML_ERROR_INVALID_ARGUMENT;
    *pState = NVML_PSTATE_0;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp) {
    DEVICE(device, i);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long r;
    throttle_now(i, &r);
    *temp = r & THERMAL_BITS ? TEMP_THERMAL_C : TEMP_C;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                                   unsigned int *temp) {
    DEVICE(device, i);
    (void)i;
    if (!temp || (unsigned)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    switch (thresholdType) { /* an H100 SXM5's */
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: *temp = 92; return NVML_SUCCESS;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: *temp = 89; return NVML_SUCCESS;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX: *temp = 95; return NVML_SUCCESS;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: *temp = 87; return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}
static unsigned int power_mw(unsigned long long reasons) {
    return reasons & nvmlClocksEventReasonSwPowerCap ? POWER_LIMIT_MW : POWER_MW;
}
API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    DEVICE(device, i);
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long r;
    throttle_now(i, &r);
    *power = power_mw(r);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE(device, i);
    (void)i;
    if (!limit) return NVML_ERROR_INVALID_ARGUMENT;
    *limit = POWER_LIMIT_MW;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
    ALIAS(nvmlDeviceGetEnforcedPowerLimit);
/* mJ since boot: the power above integrated over time, window by window */
API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    DEVICE(device, i);
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now = mock_unix_ns(), t = now - clock_ns(CLOCK_BOOTTIME);
    unsigned __int128 uj_x1e3 = 0; /* mW x ns = 1e-12 J */
    while (t < now) {
        uint64_t r, edge;
        mock_throttle_at(g_thr, g_nthr, i, t, &r, &edge);
        if (edge > now) edge = now;
        uj_x1e3 += (unsigned __int128)power_mw(r) * (edge - t);
        t = edge;
    }
    *energy = (unsigned long long)(uj_x1e3 / 1000000000u);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE(device, i);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = g_util_busy ? procs_busy_pct(i) : g_util_gpu;
    utilization->memory = g_util_mem;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE(device, i);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = MEM_RESERVED + proc_bytes(i); /* v1: used counts the reserved memory */
    if (used > MEM_TOTAL) used = MEM_TOTAL;
    memory->total = MEM_TOTAL;
    memory->used = used;
    memory->free = MEM_TOTAL - used;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE(device, i);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long used = proc_bytes(i);
    if (used > MEM_TOTAL - MEM_RESERVED) used = MEM_TOTAL - MEM_RESERVED;
    memory->total = MEM_TOTAL;
    memory->reserved = MEM_RESERVED;
    memory->used = used;
    memory->free = MEM_TOTAL - MEM_RESERVED - used;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value) {
    DEVICE(device, i);
    (void)i;
    if (!value) return NVML_ERROR_INVALID_ARGUMENT;
    switch (counter) { /* what the default 97 % moves, scaled by the utilization planted */
    case NVML_PCIE_UTIL_TX_BYTES: *value = (unsigned)((unsigned long long)PCIE_TX_KBPS * g_util_gpu / 97); return NVML_SUCCESS;
    case NVML_PCIE_UTIL_RX_BYTES: *value = (unsigned)((unsigned long long)PCIE_RX_KBPS * g_util_gpu / 97); return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}
API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                             nvmlEccCounterType_t counterType, unsigned long long *eccCounts) {
    DEVICE(device, i);
    (void)i;
    if (!eccCounts || (unsigned)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned)counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eccCounts = g_ecc[errorType];
    return NVML_SUCCESS;
}
/* NVLink data counters: KiB since boot at NVLINK_KIBPS (every process reads the same) */
static unsigned long long nvlink_kib(void) {
    return (unsigned long long)((unsigned __int128)clock_ns(CLOCK_BOOTTIME) * NVLINK_KIBPS / 1000000000u);
}
API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEVICE(device, i);
    (void)i;
    if (valuesCount < 0 || (valuesCount && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    long long ts = (long long)(mock_unix_ns() / 1000);
    for (int k = 0; k < valuesCount; k++) {
        nvmlFieldValue_t *v = &values[k];
        v->timestamp = ts;
        v->latencyUsec = 0;
        v->value.ullVal = 0;
        v->nvmlReturn = NVML_SUCCESS;
        switch (v->fieldId) {
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: /* the GPU-wide total, whatever the scopeId */
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = nvlink_kib();
            break;
        case NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: /* nvml_link.c: MOCK_NVML_NVLINK_CRC */
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = nvlink_crc_errors(i);
            break;
        case NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
        case NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL:
        case NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            break;
        case NVML_FI_DEV_NVLINK_LINK_COUNT:
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = NVLINK_LINKS;
            break;
        default:
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- events: the planted Xids (MOCK_NVML_XID) ---- */
struct nvmlEventSet_st {
    pthread_mutex_t mu;
    unsigned long long types[MOCK_GPU_MAX];    /* registered, per device */
    unsigned char done[LIST_MAX][MOCK_GPU_MAX]; /* delivered: planted Xid x device */
};
API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlEventSet_t s = calloc(1, sizeof(*s));
    if (!s) return NVML_ERROR_MEMORY;
    pthread_mutex_init(&s->mu, NULL);
    *set = s;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_destroy(&set->mu);
    free(set);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    DEVICE(device, i);
    (void)i;
    if (!eventTypes) return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    DEVICE(device, i);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&set->mu);
    set->types[i] |= eventTypes;
    pthread_mutex_unlock(&set->mu);
    return NVML_SUCCESS;
}
/* Deliver the oldest planted Xid that is due for a registered device, else sleep until the next one
 * is due or the timeout; `v2` fills the instance ids too (nvmlEventSetWait writes the first 24 bytes). */
static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms, int v2) {
    if (!nvml_inited()) return NVML_ERROR_UNINITIALIZED;
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + (uint64_t)timeoutms * 1000000ull;
    for (;;) {
        uint64_t now = mock_unix_ns(), next = UINT64_MAX;
        int bx = -1, bd = -1;
        pthread_mutex_lock(&set->mu);
        for (int x = 0; x < g_nxid; x++) {
            uint64_t t = g_xid[x].ms * 1000000ull;
            for (int d = 0; d < g_count; d++) {
                if (!(set->types[d] & nvmlEventTypeXidCriticalError) || set->done[x][d]) continue;
                if (g_xid[x].gpu != -1 && g_xid[x].gpu != d) continue;
                if (t > now) { if (t < next) next = t; continue; }
                if (bx < 0 || t < g_xid[bx].ms * 1000000ull) { bx = x; bd = d; }
            }
        }
        if (bx >= 0) set->done[bx][bd] = 1;
        pthread_mutex_unlock(&set->mu);
        if (bx >= 0) {
            data->device = &g_dev[bd];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = g_xid[bx].xid;
            if (v2) data->gpuInstanceId = data->computeInstanceId = NO_INSTANCE;
            return NVML_SUCCESS;
        }
        uint64_t mono = clock_ns(CLOCK_MONOTONIC);
        if (mono >= deadline) return NVML_ERROR_TIMEOUT;
        uint64_t nap = deadline - mono;
        if (next != UINT64_MAX && next - now < nap) nap = next - now;
        if (nap > 50000000ull) nap = 50000000ull; /* look again at least every 50 ms */
        struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}
API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(set, data, timeoutms, 1);
}
API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(set, data, timeoutms, 0);
}
