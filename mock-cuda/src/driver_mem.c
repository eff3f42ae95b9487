/* Mock CUDA driver, device memory: the allocator (a first-fit free list over a heap of
 * MOCK_CUDA_HEAP_MB; beyond it allocations fail with CUDA_ERROR_OUT_OF_MEMORY; with MOCK_CUDA_FRAG=1
 * freed blocks never coalesce and every block visited costs MOCK_CUDA_FRAG_NS, so allocation latency
 * grows as the heap fragments), stream-ordered allocation, pinned host memory, and the virtual memory
 * management calls (physical handles mapped into reserved ranges). Also dev_ptr_known, which tells
 * copies reported to the activity hook whether an address is device memory, and this process's line
 * in MOCK_GPU_PROCS_DIR (mock_gpu.h): the memory its context holds, as the mock NVML lists it. */
#include "driver_int.h"

/* ---- device allocator ---- */
struct block { CUdeviceptr addr; size_t size; struct block *next; };
static struct block *g_free, *g_used;
static CUdeviceptr g_brk = 0x7f0000000000ull;
static size_t g_in_use; /* bytes allocated (blocks and cuMemCreate handles), against g_heap */
static pthread_mutex_t g_amu = PTHREAD_MUTEX_INITIALIZER;

/* ---- MOCK_GPU_PROCS_DIR: the context's memory, rewritten at every change (g_amu held) ---- */
static int g_proc_pid, g_proc_gpu = -1; /* the process that wrote the line; the GPU of its first allocation */
static void proc_note(void) {
    static const char *dir;
    static int read_env;
    if (!read_env) { dir = getenv("MOCK_GPU_PROCS_DIR"); read_env = 1; }
    if (!dir || !*dir) return;
    if (g_proc_gpu < 0) { g_proc_gpu = t_dev; g_proc_pid = getpid(); }
    if (g_proc_pid != getpid()) return; /* a forked child: the line is its parent's */
    mock_proc_write(dir, g_proc_pid, g_proc_gpu, MOCK_CTX_BYTES + g_in_use);
}
/* At exit the context goes, and its line with it, unless MOCK_CUDA_KEEP_CONTEXT=1. */
__attribute__((destructor)) static void proc_exit(void) {
    const char *dir = getenv("MOCK_GPU_PROCS_DIR"), *keep = getenv("MOCK_CUDA_KEEP_CONTEXT");
    if (!dir || !*dir || g_proc_gpu < 0 || g_proc_pid != getpid() || (keep && !strcmp(keep, "1"))) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%d", dir, g_proc_pid);
    unlink(path);
}

static CUresult dev_alloc(CUdeviceptr *out, size_t bytes) {
    pthread_once(&g_once, init_once);
    if (!out) return INVALID_VALUE;
    if (bytes == 0) { *out = 0; return OK; }
    if (bytes > g_heap) return OUT_OF_MEMORY;
    size_t sz = (bytes + 255) & ~(size_t)255;
    pthread_mutex_lock(&g_amu);
    struct block **pp = &g_free, *b = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if (g_frag) spin_ns(g_frag_ns);
        if ((*pp)->size >= sz) { b = *pp; break; }
    }
    if (g_in_use + (b ? (g_frag ? sz : b->size) : sz) > g_heap) {
        pthread_mutex_unlock(&g_amu);
        return OUT_OF_MEMORY;
    }
    if (b) {
        if (g_frag && b->size > sz) { /* split: the remainder stays on the free list as a sliver */
            struct block *rest = malloc(sizeof(*rest));
            rest->addr = b->addr + sz; rest->size = b->size - sz; rest->next = b->next;
            b->size = sz;
            *pp = rest;
        } else {
            *pp = b->next;
        }
    } else {
        b = malloc(sizeof(*b));
        b->addr = g_brk; b->size = sz;
        g_brk += sz;
    }
    g_in_use += b->size;
    proc_note();
    b->next = g_used;
    g_used = b;
    *out = b->addr;
    pthread_mutex_unlock(&g_amu);
    return OK;
}
static CUresult dev_free(CUdeviceptr p) {
    if (!p) return OK;
    pthread_mutex_lock(&g_amu);
    for (struct block **pp = &g_used; *pp; pp = &(*pp)->next) {
        if ((*pp)->addr == p) {
            struct block *b = *pp;
            *pp = b->next;
            g_in_use -= b->size;
            proc_note();
            b->next = g_free; /* never coalesced: fragmentation when sizes vary */
            g_free = b;
            pthread_mutex_unlock(&g_amu);
            return OK;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return INVALID_VALUE;
}


API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) { return dev_alloc(dptr, bytes); }
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    (void)flags;
    return dev_alloc(dptr, bytes);
}
API CUresult cuMemFree_v2(CUdeviceptr dptr) { return dev_free(dptr); }
/* Stream-ordered allocation: the mock allocates and frees at once (the pool is the heap). */
API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream st) { resolve(st); return dev_alloc(dptr, bytes); }
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream st) {
    return cuMemAllocAsync(dptr, bytes, ptsz(st));
}
API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream st) { resolve(st); return dev_free(dptr); }
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream st) { return cuMemFreeAsync(dptr, ptsz(st)); }
API CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
    (void)flags;
    if (!pp) return INVALID_VALUE;
    if (posix_memalign(pp, 4096, bytes ? bytes : 1)) return OUT_OF_MEMORY;
    return OK;
}

/* ---- virtual memory management: physical handles mapped into reserved ranges ---- */
struct vmm { CUmemGenericAllocationHandle h; size_t size; CUdeviceptr va; struct vmm *next; };
static struct vmm *g_vmm_allocs, *g_vmm_maps;
static CUdeviceptr g_va = 0x7e0000000000ull;
API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags) {
    (void)addr; (void)flags;
    if (!ptr || !size) return INVALID_VALUE;
    size_t align = alignment ? alignment : (size_t)2 << 20;
    pthread_mutex_lock(&g_amu);
    g_va = (g_va + align - 1) & ~(CUdeviceptr)(align - 1);
    *ptr = g_va;
    g_va += size;
    pthread_mutex_unlock(&g_amu);
    return OK;
}
API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return ptr && size ? OK : INVALID_VALUE; }
API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags) {
    (void)flags;
    pthread_once(&g_once, init_once);
    if (!handle || !size || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return INVALID_VALUE;
    pthread_mutex_lock(&g_amu);
    if (size > g_heap || g_in_use + size > g_heap) { pthread_mutex_unlock(&g_amu); return OUT_OF_MEMORY; }
    struct vmm *a = calloc(1, sizeof(*a));
    a->h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    a->size = size;
    a->next = g_vmm_allocs;
    g_vmm_allocs = a;
    g_in_use += size;
    proc_note();
    pthread_mutex_unlock(&g_amu);
    *handle = a->h;
    return OK;
}
API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags) {
    if (!ptr || !size || flags) return INVALID_VALUE;
    pthread_mutex_lock(&g_amu);
    struct vmm *a = g_vmm_allocs;
    while (a && a->h != handle) a = a->next;
    if (!a || offset + size > a->size) { pthread_mutex_unlock(&g_amu); return INVALID_VALUE; }
    struct vmm *m = calloc(1, sizeof(*m));
    m->h = handle; m->size = size; m->va = ptr;
    m->next = g_vmm_maps;
    g_vmm_maps = m;
    pthread_mutex_unlock(&g_amu);
    return OK;
}
API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&g_amu);
    for (struct vmm **pp = &g_vmm_maps; *pp; pp = &(*pp)->next) {
        if ((*pp)->va == ptr && (*pp)->size == size) {
            struct vmm *m = *pp;
            *pp = m->next;
            pthread_mutex_unlock(&g_amu);
            free(m);
            return OK;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return INVALID_VALUE;
}
API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    pthread_mutex_lock(&g_amu);
    for (struct vmm **pp = &g_vmm_allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->h == handle) {
            struct vmm *a = *pp;
            *pp = a->next;
            g_in_use -= a->size;
            proc_note();
            pthread_mutex_unlock(&g_amu);
            free(a);
            return OK;
        }
    }
    pthread_mutex_unlock(&g_amu);
    return INVALID_VALUE;
}


/* Whether `p` is device memory: inside a live allocation or a mapped VMM range. */
int dev_ptr_known(CUdeviceptr p) {
    if (!p) return 0;
    int found = 0;
    pthread_mutex_lock(&g_amu);
    for (struct block *b = g_used; b && !found; b = b->next) found = p >= b->addr && p - b->addr < b->size;
    for (struct vmm *m = g_vmm_maps; m && !found; m = m->next) found = p >= m->va && p - m->va < m->size;
    pthread_mutex_unlock(&g_amu);
    return found;
}
