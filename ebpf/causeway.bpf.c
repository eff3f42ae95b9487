/* The one BPF object the loader opens: every probe family compiled together so they share the
 * traced-process map, the ring buffers and the counters (see common.bpf.h). */
#include "cuda_probes.bpf.c"
#include "dl.bpf.c"
#include "sched.bpf.c"
#include "block.bpf.c"
#include "mm.bpf.c"
#include "net.bpf.c"
#include "footprint.bpf.c"
