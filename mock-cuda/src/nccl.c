/* Mock NCCL (soname libnccl.so.2, NCCL 2.27.3's API): communicators whose ranks are separate
 * processes (ncclCommInitRank, as torchrun starts them) or one process's (ncclCommInitAll), and
 * collectives and point-to-point transfers that make the streams of the ranks wait for each other.
 *
 * Like the real library, an NCCL call only enqueues work on the stream and returns; the work is a
 * host function (cuLaunchHostFunc) that the mock driver's stream worker, "the GPU", runs when the
 * stream gets to it: it posts this rank's arrival in the communicator's shared state, waits (polling
 * every 20 us) until the peers it needs have arrived too, then takes the transfer time (bytes moved /
 * MOCK_NCCL_BW_MBPS + MOCK_NCCL_LAT_US). So a rank that reaches a collective late holds every other
 * rank's stream, and the host threads see that wait in cudaStreamSynchronize, as with real NCCL.
 *
 * Shared state: a file /dev/shm/mocknccl-<hex of the id's first 16 bytes>, created by whichever rank
 * comes first, sized to `struct shared` (zero-filled) and mapped MAP_SHARED; only C11 atomics touch
 * it. The last rank to destroy (or abort) its communicator unlinks it. ncclCommInitAll's ranks share
 * anonymous shared memory instead. Init is collective: it returns when all ranks have joined.
 * Collective n of a communicator (numbered per communicator from 1) waits until every rank's
 * arrived_seq >= n; send n from a to b until b's stream reached its n-th receive from a (recvd[b][a]
 * >= n), and that receive until sent[a][b] >= n. Inside ncclGroupStart/End collectives are enqueued
 * at the call as always (an enqueue never blocks), while the sends and receives of the group are
 * fused into one host function per stream at the outermost ncclGroupEnd, as NCCL fuses them into one
 * kernel: a send and a receive of one group on one stream cannot deadlock each other.
 *
 * A wait gives up (with a warning on stderr; later waits on that communicator return at once) when
 * a peer it needs has exited or destroyed/aborted its communicator, or after MOCK_NCCL_TIMEOUT_S.
 *
 * Exports follow NCCL's own (PROFAPI) build: every `ncclX` is a weak symbol beside a global alias
 * `pncclX` for profilers to interpose on.
 *
 * Environment: MOCK_NCCL_BW_MBPS (default 20000), MOCK_NCCL_LAT_US (default 20), MOCK_NCCL_DEBUG=1
 * (init, split and destroy lines on stderr), MOCK_NCCL_TIMEOUT_S (default 0: wait forever, as NCCL),
 * MOCK_NCCL_SLOW="<start_unix_ms>:<end_unix_ms>:<factor>,..." (a transfer whose peers are all there
 * while CLOCK_REALTIME is in [start, end) takes `factor` times longer, 1 .. 1000: a fabric that
 * replays, as the links MOCK_NVML_NVLINK_CRC plants errors on do; the largest factor of the windows
 * in force). */
#define _GNU_SOURCE
#include "mock_nccl.h"
#include "mock_clock.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
/* NCCL's export macro as its PROFAPI build defines it: the weak ncclX and a global alias pncclX */
#define NCCL_API(ret, func, ...)                                    \
    API __attribute__((alias(#func))) ret p##func(__VA_ARGS__);     \
    API __attribute__((weak)) ret func(__VA_ARGS__)

#define MAXR 64              /* ranks per communicator */
#define POLL_US 20           /* between polls of the shared counters */
#define CHECK_NS 100000000ull /* how often a wait looks for peers that went away */

_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
_Static_assert(offsetof(ncclConfig_t, blocking) == 16, "ncclConfig_t.blocking at 16");
_Static_assert(offsetof(ncclConfig_t, netName) == 32, "ncclConfig_t.netName at 32");
_Static_assert(offsetof(ncclConfig_t, splitShare) == 40, "ncclConfig_t.splitShare at 40");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "lock-free atomics in shared memory");

/* What the ranks of one communicator share (zero-filled when created). */
struct split_slot { _Atomic uint64_t seq; _Atomic int color, key; };
struct shared {
    _Atomic int nranks;                    /* set by the first rank to join; the others must agree */
    _Atomic int njoined, nleft;
    _Atomic int joined[MAXR];
    _Atomic int pid[MAXR];
    _Atomic int gone[MAXR];                /* destroyed or aborted its communicator */
    _Atomic uint64_t arrived_seq[MAXR];    /* the last collective each rank's stream reached */
    _Atomic uint64_t sent[MAXR][MAXR];     /* [from][to]: sends the sender's stream reached */
    _Atomic uint64_t recvd[MAXR][MAXR];    /* [at][from]: receives the receiver's stream reached */
    struct split_slot split[2][MAXR];      /* ncclCommSplit's exchange, by the split's parity */
};

struct ncclComm {
    struct shared *sh;
    int rank, nranks, dev;
    int anon;                              /* ncclCommInitAll: anonymous shared memory */
    unsigned char id[NCCL_UNIQUE_ID_BYTES];
    char path[64];
    uint64_t coll_seq, split_idx;          /* the host's numbering */
    uint64_t nsend[MAXR], nrecv[MAXR];
    int finalized;
    _Atomic uint64_t issued, done;         /* operations enqueued / completed by the streams */
    _Atomic int broken;                    /* a wait gave up: later ones return at once */
    _Atomic uint64_t wait_ns;              /* time the streams waited for peers */
};

enum kind { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCESCATTER, K_SEND, K_RECV };
static const char *const KIND_NAMES[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                         "Send", "Recv"};
/* One operation as the stream runs it: collective `n` of the comm, or transfer `n` with `peer`. */
struct op { struct ncclComm *c; int kind, peer; uint64_t n, bytes; };
/* What a host function runs: one collective, or a group's sends and receives on one stream. */
struct batch { int nops; struct op ops[]; };

static uint64_t g_bw_mbps = 20000, g_lat_ns = 20000, g_timeout_ns;
static int g_debug;
#define SLOW_MAX 16
static struct { uint64_t start_ms, end_ms; double factor; } g_slow[SLOW_MAX]; /* MOCK_NCCL_SLOW */
static int g_nslow;
static void parse_slow(const char *v) {
    char *copy = strdup(v), *save = NULL;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned long long a, b;
        double f;
        char extra;
        if (sscanf(tok, " %llu:%llu:%lf %c", &a, &b, &f, &extra) != 3 || a >= b || f < 1 || f > 1000 ||
            g_nslow >= SLOW_MAX) {
            fprintf(stderr, "mocknccl: MOCK_NCCL_SLOW: ignoring \"%s\": want <start_ms>:<end_ms>:<factor 1..1000>\n", tok);
            continue;
        }
        g_slow[g_nslow].start_ms = a, g_slow[g_nslow].end_ms = b, g_slow[g_nslow].factor = f;
        g_nslow++;
    }
    free(copy);
}
static double slow_factor_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ms = (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
    double f = 1.0;
    for (int i = 0; i < g_nslow; i++)
        if (ms >= g_slow[i].start_ms && ms < g_slow[i].end_ms && g_slow[i].factor > f) f = g_slow[i].factor;
    return f;
}
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_once(void) {
    const char *v;
    if ((v = getenv("MOCK_NCCL_BW_MBPS")) && *v) g_bw_mbps = strtoull(v, NULL, 10);
    if (!g_bw_mbps) g_bw_mbps = 1;
    if ((v = getenv("MOCK_NCCL_LAT_US")) && *v) g_lat_ns = strtoull(v, NULL, 10) * 1000;
    if ((v = getenv("MOCK_NCCL_TIMEOUT_S")) && *v) g_timeout_ns = strtoull(v, NULL, 10) * 1000000000ull;
    g_debug = (v = getenv("MOCK_NCCL_DEBUG")) && *v && strcmp(v, "0") != 0;
    if ((v = getenv("MOCK_NCCL_SLOW")) && *v) parse_slow(v);
}

static void pause_us(long us) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = us * 1000};
    nanosleep(&ts, NULL);
}
static void store_max(_Atomic uint64_t *p, uint64_t v) {
    uint64_t cur = atomic_load(p);
    while (cur < v && !atomic_compare_exchange_weak(p, &cur, v)) {}
}
static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
static uint64_t transfer_ns(uint64_t bytes) { return bytes * 1000ull / g_bw_mbps + g_lat_ns; }

/* ---- unique ids: 8 random bytes, the rest derived from them ---- */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static void fill_id(unsigned char *id, uint64_t magic) {
    if (!magic) magic = 1; /* never all-zero */
    memcpy(id, &magic, 8);
    uint64_t x = magic;
    for (int i = 8; i < NCCL_UNIQUE_ID_BYTES; i += 8) {
        uint64_t v = splitmix64(&x);
        memcpy(id + i, &v, 8);
    }
}
/* a split's child: from the parent's id, the color and the split's number on the parent */
static void derive_id(unsigned char *out, const unsigned char *parent, int color, uint64_t idx) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the parent's id */
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) h = (h ^ parent[i]) * 0x100000001b3ull;
    uint64_t x = h ^ ((uint64_t)(unsigned)color << 32) ^ idx;
    fill_id(out, splitmix64(&x));
}
static void hex16(char *out, const unsigned char *id) {
    for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", id[i]);
}

/* ---- waiting for peers ---- */
/* a rank that will not come: its communicator is gone or its process exited */
static int rank_lost(struct ncclComm *c, int q) {
    if (atomic_load(&c->sh->gone[q])) return 1;
    int pid = atomic_load(&c->sh->pid[q]);
    return pid > 0 && pid != getpid() && kill(pid, 0) == -1 && errno == ESRCH;
}
static int op_ready(const struct op *o) {
    struct ncclComm *c = o->c;
    if (atomic_load_explicit(&c->broken, memory_order_relaxed)) return 1;
    switch (o->kind) {
    case K_SEND: return atomic_load(&c->sh->recvd[o->peer][c->rank]) >= o->n;
    case K_RECV: return atomic_load(&c->sh->sent[o->peer][c->rank]) >= o->n;
    default:
        for (int q = 0; q < c->nranks; q++)
            if (atomic_load(&c->sh->arrived_seq[q]) < o->n) return 0;
        return 1;
    }
}
/* the rank an unready operation waits for, if that rank went away */
static int op_lost_peer(const struct op *o) {
    struct ncclComm *c = o->c;
    if (o->kind == K_SEND || o->kind == K_RECV) return rank_lost(c, o->peer) ? o->peer : -1;
    for (int q = 0; q < c->nranks; q++)
        if (atomic_load(&c->sh->arrived_seq[q]) < o->n && rank_lost(c, q)) return q;
    return -1;
}
static void give_up(const struct op *o, const char *why, int peer) {
    if (atomic_exchange(&o->c->broken, 1)) return;
    fprintf(stderr, "mocknccl: rank %d/%d: %s %llu gave up waiting: %s %d\n", o->c->rank, o->c->nranks,
            KIND_NAMES[o->kind], (unsigned long long)o->n, why, peer);
}

/* The host function on the stream ("the GPU" reached the operation): post, wait, transfer. */
static void run_batch(void *arg) {
    struct batch *b = arg;
    uint64_t coll_bytes = 0, send_bytes = 0, recv_bytes = 0;
    for (int i = 0; i < b->nops; i++) { /* post this rank's arrival */
        struct op *o = &b->ops[i];
        struct shared *sh = o->c->sh;
        switch (o->kind) {
        case K_SEND: store_max(&sh->sent[o->c->rank][o->peer], o->n); send_bytes += o->bytes; break;
        case K_RECV: store_max(&sh->recvd[o->c->rank][o->peer], o->n); recv_bytes += o->bytes; break;
        default: store_max(&sh->arrived_seq[o->c->rank], o->n); coll_bytes += o->bytes;
        }
    }
    uint64_t t0 = now_ns(), next_check = t0 + CHECK_NS;
    for (int i = 0; i < b->nops;) { /* wait for the peers */
        if (op_ready(&b->ops[i])) { i++; continue; }
        uint64_t t = now_ns();
        if (t >= next_check) {
            next_check = t + CHECK_NS;
            int q = op_lost_peer(&b->ops[i]);
            if (q >= 0) { give_up(&b->ops[i], "rank went away:", q); continue; }
            if (g_timeout_ns && t - t0 >= g_timeout_ns) { give_up(&b->ops[i], "timeout, rank", -1); continue; }
        }
        pause_us(POLL_US);
    }
    uint64_t t1 = now_ns();
    atomic_fetch_add(&b->ops[0].c->wait_ns, t1 - t0);
    uint64_t ns = transfer_ns(coll_bytes + (send_bytes > recv_bytes ? send_bytes : recv_bytes));
    sleep_until(t1 + (g_nslow ? (uint64_t)((double)ns * slow_factor_now() + 0.5) : ns));
    for (int i = 0; i < b->nops; i++) atomic_fetch_add(&b->ops[i].c->done, 1);
    free(b);
}
static ncclResult_t launch_batch(cudaStream_t stream, struct batch *b) {
    for (int i = 0; i < b->nops; i++) atomic_fetch_add(&b->ops[i].c->issued, 1);
    if (cuLaunchHostFunc(stream, run_batch, b) == 0) return ncclSuccess;
    for (int i = 0; i < b->nops; i++) atomic_fetch_sub(&b->ops[i].c->issued, 1);
    free(b);
    return ncclUnhandledCudaError;
}

/* ---- groups: a per-thread depth; the group's sends and receives wait for its end ---- */
struct pending { cudaStream_t stream; struct op op; };
static __thread int t_depth;
static __thread struct pending *t_pend;
static __thread int t_npend, t_cap;

static ncclResult_t p2p(int kind, const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t c,
                        cudaStream_t stream) {
    if (!c || (unsigned)dt >= ncclNumTypes || peer < 0 || peer >= c->nranks || (!buf && count))
        return ncclInvalidArgument;
    uint64_t n = kind == K_SEND ? ++c->nsend[peer] : ++c->nrecv[peer];
    struct op o = {c, kind, peer, n, (uint64_t)count * type_size(dt)};
    if (t_depth == 0) { /* alone: its own group */
        struct batch *b = malloc(sizeof(*b) + sizeof(struct op));
        b->nops = 1;
        b->ops[0] = o;
        return launch_batch(stream, b);
    }
    if (t_npend == t_cap) {
        t_cap = t_cap ? 2 * t_cap : 16;
        t_pend = realloc(t_pend, (size_t)t_cap * sizeof(*t_pend));
    }
    t_pend[t_npend++] = (struct pending){stream, o};
    return ncclSuccess;
}
/* the outermost ncclGroupEnd: one batch per stream, streams in the order the group first used them */
static ncclResult_t flush_group(void) {
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < t_npend; i++) {
        if (!t_pend[i].op.c) continue; /* taken by an earlier stream's batch */
        cudaStream_t s = t_pend[i].stream;
        int n = 0;
        for (int j = i; j < t_npend; j++) n += t_pend[j].op.c && t_pend[j].stream == s;
        struct batch *b = malloc(sizeof(*b) + (size_t)n * sizeof(struct op));
        b->nops = 0;
        for (int j = i; j < t_npend; j++)
            if (t_pend[j].op.c && t_pend[j].stream == s) {
                b->ops[b->nops++] = t_pend[j].op;
                t_pend[j].op.c = NULL;
            }
        ncclResult_t e = launch_batch(s, b);
        if (e && !r) r = e;
    }
    t_npend = 0;
    return r;
}

/* ---- communicators ---- */
static int current_device(void) {
    /* the caller's current CUDA device, when the process has the runtime (libnccl does not link it) */
    cudaError_t (*get)(int *) = (cudaError_t(*)(int *))dlsym(RTLD_DEFAULT, "cudaGetDevice");
    int dev = 0;
    if (get && get(&dev) != 0) dev = 0;
    return dev;
}
static ncclResult_t check_config(const ncclConfig_t *config) {
    if (config && config->magic != NCCL_CONFIG_MAGIC) {
        fprintf(stderr, "mocknccl: ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER\n");
        return ncclInvalidArgument;
    }
    return ncclSuccess; /* a non-blocking config too: the mock's init completes before it returns */
}
static void debug_init(struct ncclComm *c, const char *how) {
    if (!g_debug) return;
    char hex[33];
    hex16(hex, c->id);
    fprintf(stderr, "mocknccl: pid %d %s rank %d/%d dev %d comm %p id %s%s%s\n", (int)getpid(), how, c->rank,
            c->nranks, c->dev, (void *)c, hex, c->anon ? "" : " shm ", c->anon ? "" : c->path);
}
/* Join rank `rank` of the `nranks` ranks of the communicator `id` names; returns when all have. */
static ncclResult_t comm_join(ncclComm_t *out, int nranks, const unsigned char *id, int rank, int dev,
                              const char *how) {
    pthread_once(&g_once, init_once);
    if (!out || nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    static const unsigned char zero[NCCL_UNIQUE_ID_BYTES];
    if (!memcmp(id, zero, sizeof zero)) return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof(*c));
    memcpy(c->id, id, NCCL_UNIQUE_ID_BYTES);
    char hex[33];
    hex16(hex, id);
    snprintf(c->path, sizeof c->path, "/dev/shm/mocknccl-%s", hex);
    int fd = open(c->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 ||
        ((size_t)st.st_size < sizeof(struct shared) && ftruncate(fd, sizeof(struct shared)) != 0)) {
        fprintf(stderr, "mocknccl: %s: %s\n", c->path, strerror(errno));
        if (fd >= 0) close(fd);
        free(c);
        return ncclSystemError;
    }
    struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED) { free(c); return ncclSystemError; }
    int expect = 0;
    if (!atomic_compare_exchange_strong(&sh->nranks, &expect, nranks) && expect != nranks) {
        fprintf(stderr, "mocknccl: rank %d says %d ranks, an earlier one %d\n", rank, nranks, expect);
        munmap(sh, sizeof(*sh));
        free(c);
        return ncclInvalidArgument;
    }
    expect = 0;
    if (!atomic_compare_exchange_strong(&sh->joined[rank], &expect, 1)) {
        fprintf(stderr, "mocknccl: rank %d joined twice\n", rank);
        munmap(sh, sizeof(*sh));
        free(c);
        return ncclInvalidUsage;
    }
    atomic_store(&sh->pid[rank], (int)getpid());
    atomic_fetch_add(&sh->njoined, 1);
    c->sh = sh;
    c->rank = rank;
    c->nranks = nranks;
    c->dev = dev;
    uint64_t t0 = now_ns();
    while (atomic_load(&sh->njoined) < nranks) { /* init is collective */
        if (g_timeout_ns && now_ns() - t0 >= g_timeout_ns) {
            fprintf(stderr, "mocknccl: rank %d/%d: timeout waiting for the other ranks to join\n", rank, nranks);
            atomic_store(&sh->gone[rank], 1);
            munmap(sh, sizeof(*sh));
            free(c);
            return ncclRemoteError;
        }
        pause_us(100);
    }
    debug_init(c, how);
    *out = c;
    return ncclSuccess;
}
/* Leave the shared state; the last rank out unlinks (or, for ncclCommInitAll's, unmaps) it, as does
 * a rank that finds all the others gone or exited. */
static void comm_leave(ncclComm_t c) {
    while (atomic_load(&c->done) < atomic_load(&c->issued)) pause_us(POLL_US); /* its streams let go of it */
    atomic_store(&c->sh->gone[c->rank], 1);
    int last = atomic_fetch_add(&c->sh->nleft, 1) + 1 == c->nranks;
    if (!last && !c->anon) { /* the others exited without destroying theirs: nobody else will unlink */
        last = 1;
        for (int q = 0; q < c->nranks; q++) last &= q == c->rank || rank_lost(c, q);
    }
    if (g_debug)
        fprintf(stderr, "mocknccl: pid %d destroy rank %d/%d comm %p: %llu ops, streams waited %llu us for peers\n",
                (int)getpid(), c->rank, c->nranks, (void *)c, (unsigned long long)atomic_load(&c->issued),
                (unsigned long long)(atomic_load(&c->wait_ns) / 1000));
    if (c->anon) {
        if (last) munmap(c->sh, sizeof(*c->sh));
    } else {
        munmap(c->sh, sizeof(*c->sh));
        if (last) unlink(c->path);
    }
    free(c);
}

NCCL_API(ncclResult_t, ncclGetVersion, int *version);
ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!uniqueId) return ncclInvalidArgument;
    uint64_t magic = 0;
    while (!magic)
        if (getrandom(&magic, sizeof magic, 0) != (ssize_t)sizeof magic) return ncclSystemError;
    fill_id((unsigned char *)uniqueId->internal, magic);
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    return comm_join(comm, nranks, (const unsigned char *)commId.internal, rank, current_device(), "init");
}
NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t *config);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
    ncclResult_t r = check_config(config);
    if (r) return r;
    return comm_join(comm, nranks, (const unsigned char *)commId.internal, rank, current_device(), "init");
}
NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    pthread_once(&g_once, init_once);
    if (!comms || ndev < 1 || ndev > MAXR) return ncclInvalidArgument;
    if (devlist)
        for (int i = 0; i < ndev; i++)
            if (devlist[i] < 0) return ncclInvalidArgument;
    struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return ncclSystemError;
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id); /* names the communicator (and the children of its splits) */
    if (r) { munmap(sh, sizeof(*sh)); return r; }
    atomic_store(&sh->nranks, ndev);
    atomic_store(&sh->njoined, ndev);
    for (int i = 0; i < ndev; i++) {
        struct ncclComm *c = calloc(1, sizeof(*c));
        c->sh = sh;
        c->rank = i;
        c->nranks = ndev;
        c->dev = devlist ? devlist[i] : i;
        c->anon = 1;
        memcpy(c->id, id.internal, NCCL_UNIQUE_ID_BYTES);
        atomic_store(&sh->joined[i], 1);
        atomic_store(&sh->pid[i], (int)getpid());
        comms[i] = c;
        debug_init(c, "initall");
    }
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    if (!comm || !newcomm || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) return ncclInvalidArgument;
    ncclResult_t r = check_config(config);
    if (r) return r;
    struct shared *sh = comm->sh;
    uint64_t idx = ++comm->split_idx;
    struct split_slot *slots = sh->split[idx & 1]; /* a rank reuses a parity only once all have read it */
    atomic_store(&slots[comm->rank].color, color);
    atomic_store(&slots[comm->rank].key, key);
    atomic_store(&slots[comm->rank].seq, idx);
    int colors[MAXR], keys[MAXR];
    uint64_t next_check = now_ns() + CHECK_NS;
    for (int q = 0; q < comm->nranks;) { /* collective over comm: every rank's color and key */
        if (atomic_load(&slots[q].seq) >= idx) {
            colors[q] = atomic_load(&slots[q].color);
            keys[q] = atomic_load(&slots[q].key);
            q++;
            continue;
        }
        if (now_ns() >= next_check) {
            next_check = now_ns() + CHECK_NS;
            if (rank_lost(comm, q)) {
                fprintf(stderr, "mocknccl: rank %d/%d: split gave up: rank went away: %d\n", comm->rank,
                        comm->nranks, q);
                return ncclRemoteError;
            }
        }
        pause_us(POLL_US);
    }
    if (color == NCCL_SPLIT_NOCOLOR) { *newcomm = NULL; return ncclSuccess; }
    int n = 0, newrank = 0; /* ranks of my color, ordered by (key, old rank) */
    for (int q = 0; q < comm->nranks; q++) {
        if (colors[q] != color) continue;
        n++;
        if (keys[q] < key || (keys[q] == key && q < comm->rank)) newrank++;
    }
    unsigned char id[NCCL_UNIQUE_ID_BYTES];
    derive_id(id, comm->id, color, idx);
    return comm_join(newcomm, n, id, newrank, comm->dev, "split");
}
NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    if (comm->finalized) return ncclInvalidUsage;
    while (atomic_load(&comm->done) < atomic_load(&comm->issued)) pause_us(POLL_US); /* flush */
    comm->finalized = 1;
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess; /* NCCL: destroying NULL is a no-op */
    comm_leave(comm);
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    atomic_store(&comm->broken, 1); /* its operations still queued stop waiting */
    atomic_store(&comm->sh->gone[comm->rank], 1); /* and the peers stop waiting for it */
    comm_leave(comm);
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    if (!comm || !count) return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    if (!comm || !device) return ncclInvalidArgument;
    *device = comm->dev;
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}
NCCL_API(const char *, ncclGetErrorString, ncclResult_t result);
const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* ---- collectives ---- */
static ncclResult_t collective(int kind, ncclComm_t c, uint64_t bytes, cudaStream_t stream) {
    struct batch *b = malloc(sizeof(*b) + sizeof(struct op));
    b->nops = 1;
    b->ops[0] = (struct op){c, kind, -1, ++c->coll_seq, bytes};
    ncclResult_t r = launch_batch(stream, b);
    if (r) c->coll_seq--;
    return r;
}
static int bad_args(ncclComm_t c, ncclDataType_t dt, ncclRedOp_t op) {
    return !c || (unsigned)dt >= ncclNumTypes || (unsigned)op >= ncclNumOps;
}
NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (bad_args(comm, datatype, op) || (count && (!sendbuff || !recvbuff))) return ncclInvalidArgument;
    return collective(K_ALLREDUCE, comm, count * type_size(datatype), stream);
}
NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    if (bad_args(comm, datatype, ncclSum) || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    if (count && (!recvbuff || (comm->rank == root && !sendbuff))) return ncclInvalidArgument;
    return collective(K_BROADCAST, comm, count * type_size(datatype), stream);
}
NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    if (bad_args(comm, datatype, op) || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    if (count && (!sendbuff || (comm->rank == root && !recvbuff))) return ncclInvalidArgument;
    return collective(K_REDUCE, comm, count * type_size(datatype), stream);
}
NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    if (bad_args(comm, datatype, ncclSum) || (sendcount && (!sendbuff || !recvbuff))) return ncclInvalidArgument;
    return collective(K_ALLGATHER, comm, sendcount * type_size(datatype) * (uint64_t)comm->nranks, stream);
}
NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (bad_args(comm, datatype, op) || (recvcount && (!sendbuff || !recvbuff))) return ncclInvalidArgument;
    return collective(K_REDUCESCATTER, comm, recvcount * type_size(datatype) * (uint64_t)comm->nranks, stream);
}
NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return p2p(K_SEND, sendbuff, count, datatype, peer, comm, stream);
}
NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return p2p(K_RECV, recvbuff, count, datatype, peer, comm, stream);
}
NCCL_API(ncclResult_t, ncclGroupStart, void);
ncclResult_t ncclGroupStart(void) {
    t_depth++;
    return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclGroupEnd, void);
ncclResult_t ncclGroupEnd(void) {
    if (t_depth == 0) return ncclInvalidUsage;
    if (--t_depth > 0) return ncclSuccess;
    return flush_group();
}
