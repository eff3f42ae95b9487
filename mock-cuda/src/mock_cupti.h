/* The mock libcupti's activity records: the layouts (sizes and offsets) of the records the real
 * CUPTI writes, written from the measured offsets, not from NVIDIA's headers. The CUDA 12 library
 * (libcupti.so.12, CUPTI API version 28, CUDA 12.9) writes CUpti_ActivityKernel9 (208 bytes),
 * Memcpy6 (96), Memset4 (88), Device5 (184); built with -DMOCK_CUPTI13 (libcupti.so.13, API version
 * 130500, CUDA 13.5) Kernel13 (248), Memcpy7 (112), Memset5 (104), Device6 (192). Both write
 * CUpti_ActivityAPI (40) and CUpti_ActivitySynchronization2 (56). Only the fields the mock fills are
 * named; the rest is padding (zeros). scripts/cupti-headers-check.sh compiles src/layout_probe.c
 * against these and against NVIDIA's headers and compares. Every record is 8-byte aligned. */
#ifndef MOCK_CUPTI_H
#define MOCK_CUPTI_H
#include <stddef.h>
#include <stdint.h>

typedef int CUptiResult;
enum {
    CUPTI_SUCCESS = 0, CUPTI_ERROR_INVALID_PARAMETER = 1, CUPTI_ERROR_INVALID_OPERATION = 7,
    CUPTI_ERROR_OUT_OF_MEMORY = 8, CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT = 10, CUPTI_ERROR_MAX_LIMIT_REACHED = 12, CUPTI_ERROR_NOT_COMPATIBLE = 14, CUPTI_ERROR_NOT_INITIALIZED = 15,
    CUPTI_ERROR_INVALID_KIND = 21, CUPTI_ERROR_NOT_SUPPORTED = 27,
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39, CUPTI_ERROR_UNKNOWN = 999,
};
/* CUpti_ActivityKind values the mock knows */
enum {
    CUPTI_ACTIVITY_KIND_MEMCPY = 1, CUPTI_ACTIVITY_KIND_MEMSET = 2, CUPTI_ACTIVITY_KIND_KERNEL = 3,
    CUPTI_ACTIVITY_KIND_DRIVER = 4, CUPTI_ACTIVITY_KIND_RUNTIME = 5, CUPTI_ACTIVITY_KIND_DEVICE = 8,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION = 38,
};
enum { CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 };
enum { CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT = 0, CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM = 1 };
enum { CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE = 0, CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT = 2 };
#define CUPTI_SYNCHRONIZATION_INVALID_VALUE 0xffffffffu

#ifdef MOCK_CUPTI13
#define MOCK_CUPTI_API_VERSION 130500u
#define MOCK_KERNEL_SIZE 248
#define MOCK_MEMCPY_SIZE 112
#define MOCK_MEMSET_SIZE 104
#define MOCK_DEVICE_SIZE 192
#else
#define MOCK_CUPTI_API_VERSION 28u
#define MOCK_KERNEL_SIZE 208
#define MOCK_MEMCPY_SIZE 96
#define MOCK_MEMSET_SIZE 88
#define MOCK_DEVICE_SIZE 184
#endif

/* every record starts with its kind */
typedef struct { uint32_t kind; } mock_cupti_record;

/* CONCURRENT_KERNEL (10) and KERNEL (3): Kernel9 / Kernel13 */
typedef struct __attribute__((aligned(8))) {
    uint32_t kind;
    uint8_t cacheConfig, sharedMemoryConfig;
    uint16_t registersPerThread;
    uint32_t partitionedGlobalCacheRequested, partitionedGlobalCacheExecuted;
    uint64_t start, end, completed;
    uint32_t deviceId, contextId, streamId;
    int32_t gridX, gridY, gridZ, blockX, blockY, blockZ;
    int32_t staticSharedMemory, dynamicSharedMemory;
    uint32_t localMemoryPerThread, localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
    uint8_t rest_[MOCK_KERNEL_SIZE - 112];
} mock_cupti_kernel;

/* MEMCPY (1): Memcpy6 / Memcpy7 */
typedef struct __attribute__((aligned(8))) {
    uint32_t kind;
    uint8_t copyKind, srcKind, dstKind, flags;
    uint64_t bytes, start, end;
    uint32_t deviceId, contextId, streamId, correlationId;
    uint32_t runtimeCorrelationId;
    uint8_t rest_[MOCK_MEMCPY_SIZE - 52];
} mock_cupti_memcpy;

/* MEMSET (2): Memset4 / Memset5 */
typedef struct __attribute__((aligned(8))) {
    uint32_t kind;
    uint32_t value;
    uint64_t bytes, start, end;
    uint32_t deviceId, contextId, streamId, correlationId;
    uint16_t flags, memoryKind;
    uint8_t rest_[MOCK_MEMSET_SIZE - 52];
} mock_cupti_memset;

/* DEVICE (8): Device5 / Device6 */
typedef struct __attribute__((aligned(8))) {
    uint32_t kind;
    uint32_t flags;
    uint64_t globalMemoryBandwidth, globalMemorySize;
    uint32_t constantMemorySize, l2CacheSize, numThreadsPerWarp, coreClockRate, numMemcpyEngines;
    uint32_t numMultiprocessors, maxIPC, maxWarpsPerMultiprocessor, maxBlocksPerMultiprocessor;
    uint32_t maxSharedMemoryPerMultiprocessor, maxRegistersPerMultiprocessor, maxRegistersPerBlock;
    uint32_t maxSharedMemoryPerBlock, maxThreadsPerBlock;
    uint32_t maxBlockDimX, maxBlockDimY, maxBlockDimZ, maxGridDimX, maxGridDimY, maxGridDimZ;
    uint32_t computeCapabilityMajor, computeCapabilityMinor;
    uint32_t id, eccEnabled;
    uint8_t uuid[16];
    const char *name;
    uint8_t rest_[MOCK_DEVICE_SIZE - 144];
} mock_cupti_device;

/* DRIVER (4) and RUNTIME (5): CUpti_ActivityAPI */
typedef struct __attribute__((aligned(8))) {
    uint32_t kind, cbid;
    uint64_t start, end;
    uint32_t processId, threadId, correlationId, returnValue;
} mock_cupti_api;

/* SYNCHRONIZATION (38): CUpti_ActivitySynchronization2 */
typedef struct __attribute__((aligned(8))) {
    uint32_t kind, type;
    uint64_t start, end;
    uint32_t correlationId, contextId, streamId, cudaEventId;
    uint64_t cudaEventSyncId;
    uint32_t returnValue, pad_;
} mock_cupti_sync;

#define MOCK_CHECK(T, f, off) _Static_assert(offsetof(T, f) == (off), #T "." #f " at " #off)
MOCK_CHECK(mock_cupti_kernel, kind, 0); MOCK_CHECK(mock_cupti_kernel, registersPerThread, 6);
MOCK_CHECK(mock_cupti_kernel, start, 16); MOCK_CHECK(mock_cupti_kernel, end, 24);
MOCK_CHECK(mock_cupti_kernel, completed, 32); MOCK_CHECK(mock_cupti_kernel, deviceId, 40);
MOCK_CHECK(mock_cupti_kernel, contextId, 44); MOCK_CHECK(mock_cupti_kernel, streamId, 48);
MOCK_CHECK(mock_cupti_kernel, gridX, 52); MOCK_CHECK(mock_cupti_kernel, gridY, 56);
MOCK_CHECK(mock_cupti_kernel, gridZ, 60); MOCK_CHECK(mock_cupti_kernel, blockX, 64);
MOCK_CHECK(mock_cupti_kernel, blockY, 68); MOCK_CHECK(mock_cupti_kernel, blockZ, 72);
MOCK_CHECK(mock_cupti_kernel, dynamicSharedMemory, 80); MOCK_CHECK(mock_cupti_kernel, correlationId, 92);
MOCK_CHECK(mock_cupti_kernel, gridId, 96); MOCK_CHECK(mock_cupti_kernel, name, 104);
_Static_assert(sizeof(mock_cupti_kernel) == MOCK_KERNEL_SIZE, "kernel record size");
MOCK_CHECK(mock_cupti_memcpy, kind, 0); MOCK_CHECK(mock_cupti_memcpy, copyKind, 4);
MOCK_CHECK(mock_cupti_memcpy, srcKind, 5); MOCK_CHECK(mock_cupti_memcpy, dstKind, 6);
MOCK_CHECK(mock_cupti_memcpy, bytes, 8); MOCK_CHECK(mock_cupti_memcpy, start, 16);
MOCK_CHECK(mock_cupti_memcpy, end, 24); MOCK_CHECK(mock_cupti_memcpy, deviceId, 32);
MOCK_CHECK(mock_cupti_memcpy, contextId, 36); MOCK_CHECK(mock_cupti_memcpy, streamId, 40);
MOCK_CHECK(mock_cupti_memcpy, correlationId, 44); MOCK_CHECK(mock_cupti_memcpy, runtimeCorrelationId, 48);
_Static_assert(sizeof(mock_cupti_memcpy) == MOCK_MEMCPY_SIZE, "memcpy record size");
MOCK_CHECK(mock_cupti_memset, kind, 0); MOCK_CHECK(mock_cupti_memset, value, 4);
MOCK_CHECK(mock_cupti_memset, bytes, 8); MOCK_CHECK(mock_cupti_memset, start, 16);
MOCK_CHECK(mock_cupti_memset, end, 24); MOCK_CHECK(mock_cupti_memset, deviceId, 32);
MOCK_CHECK(mock_cupti_memset, contextId, 36); MOCK_CHECK(mock_cupti_memset, streamId, 40);
MOCK_CHECK(mock_cupti_memset, correlationId, 44); MOCK_CHECK(mock_cupti_memset, memoryKind, 50);
_Static_assert(sizeof(mock_cupti_memset) == MOCK_MEMSET_SIZE, "memset record size");
MOCK_CHECK(mock_cupti_device, kind, 0); MOCK_CHECK(mock_cupti_device, globalMemorySize, 16);
MOCK_CHECK(mock_cupti_device, numThreadsPerWarp, 32); MOCK_CHECK(mock_cupti_device, coreClockRate, 36);
MOCK_CHECK(mock_cupti_device, numMultiprocessors, 44); MOCK_CHECK(mock_cupti_device, maxThreadsPerBlock, 76);
MOCK_CHECK(mock_cupti_device, computeCapabilityMajor, 104);
MOCK_CHECK(mock_cupti_device, computeCapabilityMinor, 108); MOCK_CHECK(mock_cupti_device, id, 112);
MOCK_CHECK(mock_cupti_device, uuid, 120); MOCK_CHECK(mock_cupti_device, name, 136);
_Static_assert(sizeof(mock_cupti_device) == MOCK_DEVICE_SIZE, "device record size");
MOCK_CHECK(mock_cupti_api, kind, 0); MOCK_CHECK(mock_cupti_api, cbid, 4); MOCK_CHECK(mock_cupti_api, start, 8);
MOCK_CHECK(mock_cupti_api, end, 16); MOCK_CHECK(mock_cupti_api, processId, 24);
MOCK_CHECK(mock_cupti_api, threadId, 28); MOCK_CHECK(mock_cupti_api, correlationId, 32);
MOCK_CHECK(mock_cupti_api, returnValue, 36);
_Static_assert(sizeof(mock_cupti_api) == 40, "api record size");
MOCK_CHECK(mock_cupti_sync, kind, 0); MOCK_CHECK(mock_cupti_sync, type, 4); MOCK_CHECK(mock_cupti_sync, start, 8);
MOCK_CHECK(mock_cupti_sync, end, 16); MOCK_CHECK(mock_cupti_sync, correlationId, 24);
MOCK_CHECK(mock_cupti_sync, contextId, 28); MOCK_CHECK(mock_cupti_sync, streamId, 32);
MOCK_CHECK(mock_cupti_sync, cudaEventId, 36); MOCK_CHECK(mock_cupti_sync, cudaEventSyncId, 40);
MOCK_CHECK(mock_cupti_sync, returnValue, 48);
_Static_assert(sizeof(mock_cupti_sync) == 56, "sync record size");
#undef MOCK_CHECK

/* The client side (the function types a CUPTI client registers), for the mock's own workloads. */
typedef void (*mock_cupti_request_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*mock_cupti_complete_fn)(void *ctx, uint32_t streamId, uint8_t *buffer, size_t size,
                                       size_t validSize);
#endif
