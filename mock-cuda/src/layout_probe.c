/* The CUPTI record layout probe of scripts/cupti-headers-check.sh: prints, one per line, the
 * offset of each field the mock libcupti writes (`kernel.start=16`) and each record's size
 * (`kernel.size=208`, and again as `sizeof kernel=208`), under generic names, plus the enum values the mock uses (`const.<NAME>=N`).
 * Built two ways, with the same keys:
 *   -DLAYOUT_REAL against NVIDIA's headers (cupti_activity.h of the CUDA 12 or, with -DMOCK_CUPTI13,
 *   the CUDA 13 wheels: CUpti_ActivityKernel9 / 13, Memcpy6 / 7, Memset4 / 5, Device5 / 6, API,
 *   Synchronization2), or
 *   without it against the mock's own src/mock_cupti.h (with or without -DMOCK_CUPTI13).
 * The script compares the two outputs of each major; a Rust test of the injection library reads the
 * same files to check its own offsets. */
#include <stddef.h>
#include <stdio.h>

#ifdef LAYOUT_REAL
#include <cupti_activity.h>
#include <cupti_version.h>
#ifdef MOCK_CUPTI13
typedef CUpti_ActivityKernel13 kernel;
typedef CUpti_ActivityMemcpy7 memcpy_;
typedef CUpti_ActivityMemset5 memset_;
typedef CUpti_ActivityDevice6 device;
#else
typedef CUpti_ActivityKernel9 kernel;
typedef CUpti_ActivityMemcpy6 memcpy_;
typedef CUpti_ActivityMemset4 memset_;
typedef CUpti_ActivityDevice5 device;
#endif
typedef CUpti_ActivityAPI api;
typedef CUpti_ActivitySynchronization2 sync_;
#define API_VERSION CUPTI_API_VERSION
#else
#include "mock_cupti.h"
typedef mock_cupti_kernel kernel;
typedef mock_cupti_memcpy memcpy_;
typedef mock_cupti_memset memset_;
typedef mock_cupti_device device;
typedef mock_cupti_api api;
typedef mock_cupti_sync sync_;
#define API_VERSION MOCK_CUPTI_API_VERSION
#endif

#define F(name, T, f) printf("%s.%s=%zu\n", name, #f, offsetof(T, f))
#define SIZE(name, T) printf("%s.size=%zu\nsizeof %s=%zu\n", name, sizeof(T), name, sizeof(T))
#define K(c) printf("const.%s=%lld\n", #c, (long long)(c))

int main(void) {
    SIZE("kernel", kernel);
    F("kernel", kernel, kind); F("kernel", kernel, registersPerThread); F("kernel", kernel, start);
    F("kernel", kernel, end); F("kernel", kernel, completed); F("kernel", kernel, deviceId);
    F("kernel", kernel, contextId); F("kernel", kernel, streamId); F("kernel", kernel, gridX);
    F("kernel", kernel, gridY); F("kernel", kernel, gridZ); F("kernel", kernel, blockX);
    F("kernel", kernel, blockY); F("kernel", kernel, blockZ); F("kernel", kernel, dynamicSharedMemory);
    F("kernel", kernel, correlationId); F("kernel", kernel, gridId); F("kernel", kernel, name);
    SIZE("memcpy", memcpy_);
    F("memcpy", memcpy_, kind); F("memcpy", memcpy_, copyKind); F("memcpy", memcpy_, srcKind);
    F("memcpy", memcpy_, dstKind); F("memcpy", memcpy_, bytes); F("memcpy", memcpy_, start);
    F("memcpy", memcpy_, end); F("memcpy", memcpy_, deviceId); F("memcpy", memcpy_, contextId);
    F("memcpy", memcpy_, streamId); F("memcpy", memcpy_, correlationId); F("memcpy", memcpy_, runtimeCorrelationId);
    SIZE("memset", memset_);
    F("memset", memset_, kind); F("memset", memset_, value); F("memset", memset_, bytes);
    F("memset", memset_, start); F("memset", memset_, end); F("memset", memset_, deviceId);
    F("memset", memset_, contextId); F("memset", memset_, streamId); F("memset", memset_, correlationId);
    F("memset", memset_, memoryKind);
    SIZE("sync", sync_);
    F("sync", sync_, kind); F("sync", sync_, type); F("sync", sync_, start); F("sync", sync_, end);
    F("sync", sync_, correlationId); F("sync", sync_, contextId); F("sync", sync_, streamId);
    F("sync", sync_, cudaEventId); F("sync", sync_, cudaEventSyncId); F("sync", sync_, returnValue);
    SIZE("api", api);
    F("api", api, kind); F("api", api, cbid); F("api", api, start); F("api", api, end);
    F("api", api, processId); F("api", api, threadId); F("api", api, correlationId); F("api", api, returnValue);
    SIZE("device", device);
    F("device", device, kind); F("device", device, globalMemorySize); F("device", device, numThreadsPerWarp);
    F("device", device, coreClockRate); F("device", device, numMultiprocessors);
    F("device", device, maxThreadsPerBlock); F("device", device, computeCapabilityMajor);
    F("device", device, computeCapabilityMinor); F("device", device, id); F("device", device, uuid);
    F("device", device, name);
    printf("const.CUPTI_API_VERSION=%lld\n", (long long)API_VERSION);
    K(CUPTI_ACTIVITY_KIND_MEMCPY); K(CUPTI_ACTIVITY_KIND_MEMSET); K(CUPTI_ACTIVITY_KIND_KERNEL);
    K(CUPTI_ACTIVITY_KIND_DRIVER); K(CUPTI_ACTIVITY_KIND_RUNTIME); K(CUPTI_ACTIVITY_KIND_DEVICE);
    K(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); K(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    K(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); K(CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT);
    K(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM); K(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE);
    K(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT); K(CUPTI_SYNCHRONIZATION_INVALID_VALUE);
    K(CUPTI_SUCCESS); K(CUPTI_ERROR_INVALID_PARAMETER); K(CUPTI_ERROR_INVALID_OPERATION);
    K(CUPTI_ERROR_MAX_LIMIT_REACHED); K(CUPTI_ERROR_NOT_COMPATIBLE); K(CUPTI_ERROR_NOT_INITIALIZED);
    K(CUPTI_ERROR_INVALID_KIND); K(CUPTI_ERROR_NOT_SUPPORTED); K(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    return 0;
}
