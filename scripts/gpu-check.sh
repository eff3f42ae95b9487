#!/usr/bin/env bash
# Causeway's acceptance run on a machine with a real NVIDIA GPU (root, eBPF, nvcc, PyTorch).
#
#   scripts/gpu-check.sh [CAUSEWAY_BINARY [OUTPUT_DIR]]
#
# CAUSEWAY_BINARY: argument, else $CAUSEWAY, else `causeway` on PATH (bring a stripped SQLite-only
# build: `cargo build --release --no-default-features -p causeway`, then strip).
# OUTPUT_DIR: argument, else $OUT, else a new temp dir. Everything lands there: summary.txt (the
# table), summary.tsv (check, expected, got, PASS|FAIL|INFO), logs/ (every step's output, the nesting
# map, the profiler's JSON), traces/ (the trace databases).
#
# Steps (REAL-GPU.md sections 7 and 8), each independent: a failure is a FAIL row and the run goes on.
#   1  environment: kernel, BTF, GPU, torch/CUDA, the CUDA libraries torch maps, libcuda's exports,
#      `causeway check`
#   2  counts.cu built with -cudart=shared and static, traced: exact runtime counts, driver events,
#      kernel names, cluster launch configuration, the nesting map, loss counters, attachments
#   3  train.py (eager, torch.compile, CUDA graphs) traced: launch counts per API in the profiled
#      windows vs torch.profiler (CUPTI), the kernel gap by name family
#   3b overhead: steps/s of eager and torch.compile training, traced and untraced runs alternating
#      (ABBA), medians and every run's figure
#   4  a CPU hog (backup-rsync) pinned to the training thread's CPU: `causeway explain` must rank it
#      first; again under cudaSetDeviceFlags(blocking sync); late attach
#   4c one rank of torch.distributed over NCCL traced: every ncclAllReduce with its nccl_calls row
#      (communicator hash, rank 0 of 1, sequence 1..N), libnccl attached; the GPU's own state
#      sampled through NVML while tracing (gpu_samples: clocks, reasons, temperature, power)
#   4d train.py traced with --stacks: the Python line of train.py behind PyTorch's launches
#      (CPython's own frames walked in BPF, merged with the native ones)
#   4e timeline: the device's own timeline (trace --gpu-timeline, CUPTI through the injection
#      library) on timeline.cu, a loop of 1 ms kernels that time themselves with %globaltimer: every
#      kernel stored once and tied to its launch call; CUPTI's durations and starts against the
#      kernels' own clock; two planted GPU idle gaps (step 300: a 38 ms nanosleep; step 600: a
#      SCHED_FIFO backup-rsync on the launch thread's CPU for 38 ms) sized, placed in their steps and
#      explained by `explain --json`, every idle chain's SQL recomputing its figure; launches/s of
#      empty kernels and train.py's steps/s untraced, traced, traced with --gpu-timeline (ABBA);
#      torch.profiler inside such a trace still gets its kernels, and the notes say where the device
#      view stepped aside. Needs libcauseway_inject.so beside the binary or at $CAUSEWAY_INJECT_LIB.
#   4f attach: train.py started untraced, then `trace --pid P --gpu-timeline --gpu-window 5s` loads
#      the library into it mid-run (ptrace): its kernels from the attach on stored and tied to their
#      launches, train.py's exit status unchanged, the pause of its main thread (the `attached` note)
#   5  one summary table; exit 1 when any row is FAIL
#
# Environment knobs: GPU_CHECK_BUDGET (seconds for the whole run, default 480), GPU_CHECK_DIAG_SECS
# (length of each diagnosis run, default 40), GPU_CHECK_HOG_CPU (default 2), PYTHON (default
# python3), NVCC, GPU_CHECK_TRAIN_ARGS (extra train.py arguments), GPU_CHECK_PACK=1 (at the end,
# pack logs/ and traces/ into logs.tar.gz and traces.tar so that only a few files remain: for
# machines that hand back a limited number of files), GPU_CHECK_STEPS (a comma-separated subset of
# counts, train, diag-spin, late, nccl, stacks, diag-blocking, timeline, attach, overhead; default all: a
# rerun of the steps a first run had no time for; the environment step always runs),
# GPU_CHECK_OVERHEAD_RUNS (traced and untraced runs of each kind for the overhead, default 2),
# GPU_CHECK_OVERHEAD_STEPS (timed steps per phase in those runs, default 1000),
# GPU_CHECK_TIMELINE_RUNS (rounds of the timeline step's three-mode overhead runs, default 2: 6 runs
# of empty-kernel launches), GPU_CHECK_TIMELINE_EMPTY (launches per such run, default 100000),
# GPU_CHECK_TIMELINE_TRAIN_RUNS (rounds of its train.py runs, default 2; 0: none),
# GPU_CHECK_TIMELINE_TRAIN_STEPS (timed steps per train.py run, default 500). Alone
# (GPU_CHECK_STEPS=timeline) the timeline step takes about 4 minutes.
set -u
set -o pipefail

case "${1:-}" in
-h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
    ;;
esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$HERE/gpu-check
REPO=$(cd "$HERE/.." && pwd)
PY=${PYTHON:-python3}

CW=${1:-${CAUSEWAY:-causeway}}
if [[ $CW != */* ]]; then
    CW=$(command -v "$CW" 2>/dev/null || echo "$CW")
fi
if [[ -e $CW && $CW != /* ]]; then
    CW=$(cd "$(dirname "$CW")" && pwd)/$(basename "$CW")
fi

OUTDIR=${2:-${OUT:-}}
if [[ -z $OUTDIR ]]; then
    OUTDIR=$(mktemp -d /tmp/causeway-gpu-check.XXXXXX)
fi
mkdir -p "$OUTDIR/logs" "$OUTDIR/traces" || {
    echo "gpu-check: cannot create $OUTDIR" >&2
    exit 2
}
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGS=$OUTDIR/logs
TRACES=$OUTDIR/traces
ROWS=$OUTDIR/summary.tsv
: >"$ROWS"
WORK=$(mktemp -d /tmp/causeway-gpu-check-work.XXXXXX)

BUDGET=${GPU_CHECK_BUDGET:-480}
RESERVE=15 # seconds kept for the summary and packing
START=$(date +%s)
DEADLINE=$((START + BUDGET))
DIAG_SECS=${GPU_CHECK_DIAG_SECS:-40}
HOG_CPU=${GPU_CHECK_HOG_CPU:-2}
HOG_NAME=backup-rsync
if ((HOG_CPU >= $(nproc))); then
    HOG_CPU=$(($(nproc) - 1)) # a smaller machine than the one this run was written for
fi
read -r -a TRAIN_EXTRA <<<"${GPU_CHECK_TRAIN_ARGS:-}"
OVERHEAD_RUNS=${GPU_CHECK_OVERHEAD_RUNS:-2}
OVERHEAD_STEPS=${GPU_CHECK_OVERHEAD_STEPS:-1000}

BG_PIDS=()
CW_TRACE_OPTS=() # options of `causeway trace` for cw_trace (a step sets its own with `local`)
HAVE_CW=0
HAVE_GPU=0
HAVE_TORCH=0
NVCC=${NVCC:-} # the environment may name it; find_nvcc settles it
ARCH=sm_90

# ------------------------------------------------------------------------------------------ helpers

say() { printf '\n=== %s (t+%ss)\n' "$*" "$(($(date +%s) - START))"; }

clean() { printf '%s' "$1" | tr '\t\r\n' '   '; }

# row CHECK EXPECTED GOT STATUS: one line of the summary (STATUS: PASS, FAIL or INFO).
row() {
    printf '%s\t%s\t%s\t%s\n' "$(clean "$1")" "$(clean "$2")" "$(clean "$3")" "$4" >>"$ROWS"
    printf '  [%s] %s: expected %s, got %s\n' "$4" "$1" "$2" "$3"
}

left() { echo $((DEADLINE - $(date +%s))); }

# budget WANT [MIN]: print the seconds a step may take (WANT, or less when the deadline is near);
# fail when less than MIN (default 10) would be left.
budget() {
    local want=$1 min=${2:-10} l
    l=$(($(left) - RESERVE))
    ((l < want)) && want=$l
    ((want >= min)) || return 1
    echo "$want"
}

# jget FILE PYTHON_EXPR: evaluate an expression over the JSON object `d` in FILE; empty on any error.
jget() {
    "$PY" - "$1" "$2" 2>/dev/null <<'EOF' || true
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    v = eval(sys.argv[2])
    print("" if v is None else v)
except Exception:
    pass
EOF
}

# ready CHECK WANT MIN: print the seconds a traced-PyTorch step may take (see budget); else a FAIL
# row for CHECK (no causeway, no torch with CUDA, or no time left) and status 1.
ready() {
    local t
    if ! ((HAVE_CW && HAVE_TORCH)); then
        row "$1" "run" "skipped: no causeway or no torch with CUDA" FAIL >&2
        return 1
    fi
    if ! t=$(budget "$2" "$3"); then
        row "$1" "run" "skipped: no time left" FAIL >&2
        return 1
    fi
    echo "$t"
}

# analyze ARGS...: scripts/gpu-check/analyze.py, which appends its rows to the summary (and a FAIL
# row of its own when a check breaks); killed by its time limit, it gets a FAIL row here.
analyze() {
    local t rc
    t=$(budget 120 5) || t=5
    timeout -k 5 "$t" "$PY" "$SRC/analyze.py" --rows "$ROWS" --causeway "$CW" "$@"
    rc=$?
    if ((rc == 124 || rc == 137)); then
        row "analyze $1" "done within ${t}s" "stopped by its time limit" FAIL
    fi
}

# cw_trace NAME SECONDS CMD...: trace CMD into traces/NAME.db, with the trace options in
# CW_TRACE_OPTS (none unless a step sets them); the command's stdout goes to logs/NAME.out, the
# tracer's report and live table to logs/NAME.err. Returns the tracer's status (124: the time limit
# stopped it, which stops the command too and leaves a flushed trace).
cw_trace() {
    local name=$1 secs=$2 rc
    shift 2
    rm -f "$TRACES/$name.db" "$TRACES/$name.db-wal" "$TRACES/$name.db-shm"
    echo "+ $CW trace ${CW_TRACE_OPTS[*]-} --db $TRACES/$name.db -- $* (limit ${secs}s)" >"$LOGS/$name.err"
    timeout -k 30 "$secs" "$CW" trace ${CW_TRACE_OPTS[@]+"${CW_TRACE_OPTS[@]}"} --db "$TRACES/$name.db" -- "$@" \
        >"$LOGS/$name.out" 2>>"$LOGS/$name.err"
    rc=$?
    ((rc == 124)) && echo "gpu-check: stopped after ${secs}s" >>"$LOGS/$name.err"
    return $rc
}

# The tracer's closing lines (events written, libraries probed, notes) for the log.
trace_report() { grep -E '^causeway: ' "$LOGS/$1.err" | tail -n 20; }

cleanup() {
    local p
    for p in ${BG_PIDS[@]+"${BG_PIDS[@]}"}; do
        kill "$p" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# --------------------------------------------------------------------------------- builds (background)

find_nvcc() {
    local c
    for c in "${NVCC:-}" "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-13.0/bin/nvcc; do
        if [[ -n $c && -x $c ]]; then
            NVCC=$c
            return 0
        fi
    done
    NVCC=""
    return 1
}

# build_cu OUT SRC FLAGS...: nvcc SRC into OUT. The toolkit's library directory is named to the
# linker and as rpath (the loader may not know it); a toolkit laid out as pip wheels (nvidia/cu13/lib,
# libcudart.so.13 without libcudart.so) gets the link name in $WORK/lib.
build_cu() {
    local out=$1 src=$2 real d so libflags=()
    shift 2
    real=$(readlink -f "$NVCC")
    for d in "$(dirname "$real")/../lib64" "$(dirname "$real")/../targets/x86_64-linux/lib" "$(dirname "$real")/../lib"; do
        compgen -G "$d/libcudart*" >/dev/null || continue
        d=$(cd "$d" && pwd)
        libflags+=(-L"$d" -Xlinker "-rpath=$d")
        if [[ ! -e $d/libcudart.so ]]; then
            so=$(compgen -G "$d/libcudart.so.*" | head -n1)
            if [[ -n $so ]]; then
                mkdir -p "$WORK/lib"
                ln -sf "$so" "$WORK/lib/libcudart.so"
                libflags+=(-L"$WORK/lib")
            fi
        fi
        break
    done
    echo "+ $NVCC -O2 -arch=$ARCH $* ${libflags[*]} -o $out $src"
    timeout -k 5 240 "$NVCC" -O2 -arch="$ARCH" "$@" ${libflags[@]+"${libflags[@]}"} -o "$out" "$src" || return
    ldd "$out" | grep -Ei 'cuda|not found' || true
}

# build_counts VARIANT FLAGS...: counts.cu into $WORK/counts_VARIANT.
build_counts() {
    local variant=$1
    shift
    build_cu "$WORK/counts_$variant" "$SRC/counts.cu" "$@"
}

# Builds run in the background while the environment step runs.
start_builds() {
    local cap
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
    [[ $cap =~ ^[0-9]+$ ]] && ARCH=sm_$cap
    if find_nvcc; then
        if wants counts; then
            (build_counts shared -cudart=shared) >"$LOGS/build-counts_shared.log" 2>&1 &
            BUILD_SHARED=$!
            (build_counts static) >"$LOGS/build-counts_static.log" 2>&1 &
            BUILD_STATIC=$!
            BG_PIDS+=("$BUILD_SHARED" "$BUILD_STATIC")
        fi
        if wants timeline; then
            # the shared runtime: the injection library finds CUPTI from the runtime's directory
            (build_cu "$WORK/timeline" "$SRC/timeline.cu" -cudart=shared) >"$LOGS/build-timeline.log" 2>&1 &
            BUILD_TIMELINE=$!
            BG_PIDS+=("$BUILD_TIMELINE")
        fi
    fi
    (timeout -k 5 120 cc -O2 -Wall -o "$WORK/hog" "$REPO/tests/scenarios/hog.c" -lpthread) >"$LOGS/build-hog.log" 2>&1 &
    BUILD_HOG=$!
    BG_PIDS+=("$BUILD_HOG")
}
BUILD_SHARED=""
BUILD_STATIC=""
BUILD_TIMELINE=""
BUILD_HOG=""

# ------------------------------------------------------------------------------------ 1. environment

step_env() {
    say "1. environment"
    local k t f sym present=() missing=() libcuda libcudart
    k=$(uname -r)
    row "kernel" "Linux with eBPF (6.x)" "$k" INFO
    if [[ -e /sys/kernel/btf/vmlinux ]]; then
        row "BTF" "/sys/kernel/btf/vmlinux" "present" PASS
    else
        row "BTF" "/sys/kernel/btf/vmlinux" "missing" FAIL
    fi
    if ((EUID == 0)); then row "root" "uid 0" "uid 0" PASS; else row "root" "uid 0" "uid $EUID" FAIL; fi
    if ! command -v nvidia-smi >/dev/null; then
        echo "nvidia-smi: not on PATH" >"$LOGS/1-nvidia-smi.log"
        row "GPU (nvidia-smi -L)" "a GPU" "no nvidia-smi on PATH" FAIL
    elif nvidia-smi -L >"$LOGS/1-nvidia-smi.log" 2>&1 && grep -q '^GPU' "$LOGS/1-nvidia-smi.log"; then
        HAVE_GPU=1
        nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader >>"$LOGS/1-nvidia-smi.log" 2>&1
        row "GPU (nvidia-smi -L)" "a GPU" "$(head -n1 "$LOGS/1-nvidia-smi.log"); $(tail -n1 "$LOGS/1-nvidia-smi.log")" PASS
    else
        row "GPU (nvidia-smi -L)" "a GPU" "$(head -c 200 "$LOGS/1-nvidia-smi.log")" FAIL
    fi
    cat "$LOGS/1-nvidia-smi.log"
    row "CPUs" "16 (the hog is pinned to CPU $HOG_CPU)" "$(nproc)" INFO

    if t=$(budget 90 20); then
        timeout -k 5 "$t" "$PY" "$SRC/env_probe.py" >"$LOGS/1-env.json" 2>"$LOGS/1-env.err"
        f=$LOGS/1-env.json
        cat "$f"
        if [[ $(jget "$f" 'd.get("cuda_available")') == True ]]; then
            HAVE_TORCH=1
            row "python / torch / CUDA" "torch with CUDA" "$(jget "$f" '"python %s, torch %s, CUDA %s, triton %s, cudnn %s, nccl %s, pynvml %s" % (d["python"], d["torch"], d["torch_cuda"], d.get("triton"), d.get("cudnn"), d.get("nccl"), d.get("pynvml"))')" PASS
        else
            row "python / torch / CUDA" "torch with CUDA" "$(jget "$f" 'd.get("error") or d.get("torch")') $(tail -n1 "$LOGS/1-env.err")" FAIL
        fi
        row "CUDA libraries torch maps" "libcudart, libcuda, ..." "$(jget "$f" '"; ".join(l["path"] for l in d.get("libs", []))')" INFO
        libcuda=$(jget "$f" 'd.get("libcuda")')
        libcudart=$(jget "$f" 'd.get("libcudart")')
        row "driver CUDA version" "13000 or later" "$(jget "$f" 'd.get("driver_cuda_version")')" INFO
    else
        row "python / torch / CUDA" "torch with CUDA" "skipped: no time left" FAIL
        libcuda=""
        libcudart=""
    fi
    if [[ -n $libcuda && -r $libcuda ]]; then
        if command -v readelf >/dev/null; then
            readelf --dyn-syms -W "$libcuda" >"$LOGS/1-libcuda-dynsyms.txt" 2>&1
            for sym in cuLaunchKernelEx cuLaunchKernelEx_ptsz cuCtxSynchronize_v2 cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz cuLaunchKernel_ptsz cuGraphLaunch cuGraphLaunch_ptsz; do
                if awk '{print $8}' "$LOGS/1-libcuda-dynsyms.txt" | sed 's/@.*//' | grep -qx "$sym"; then present+=("$sym"); else missing+=("$sym"); fi
            done
            row "libcuda exports (readelf --dyn-syms)" "the Hopper/CUDA 13 entry points" "present: ${present[*]:-none}; missing: ${missing[*]:-none} ($libcuda)" INFO
        else
            row "libcuda exports" "readelf" "no readelf; dlsym: $(jget "$LOGS/1-env.json" 'd.get("libcuda_symbols")')" INFO
        fi
    elif [[ -n $libcuda ]]; then
        row "libcuda exports" "the mapped libcuda" "cannot read $libcuda" INFO
    else
        row "libcuda exports" "the mapped libcuda" "no libcuda mapped" INFO
    fi
    [[ -n $libcudart ]] && readelf --dyn-syms -W "$libcudart" 2>/dev/null | grep -E ' (cudaLaunchKernel|cudaLaunchKernelExC|__cudaGetKernel|__cudaRegisterFunction|cudaGraphLaunch)(@|$| )' >"$LOGS/1-libcudart-dynsyms.txt"

    if [[ -x $CW ]]; then
        HAVE_CW=1
        row "causeway binary" "executable" "$CW ($("$CW" --version 2>&1 | head -n1); $(du -h "$CW" | cut -f1))" PASS
        if t=$(budget 60 10); then
            timeout -k 5 "$t" "$CW" check >"$LOGS/1-causeway-check.txt" 2>&1
            local rc=$?
            timeout -k 5 30 "$CW" check --json >"$LOGS/1-causeway-check.json" 2>&1
            cat "$LOGS/1-causeway-check.txt"
            if ((rc == 0)); then
                row "causeway check" "can trace (exit 0)" "$(head -n1 "$LOGS/1-causeway-check.txt")" PASS
            else
                row "causeway check" "can trace (exit 0)" "exit $rc: $(grep -E ' NO ' "$LOGS/1-causeway-check.txt" | head -n3 | tr -s ' ')" FAIL
            fi
            # the uprobe_multi path, CO-RE-relocated against this kernel (before: refused on the H100's kernel)
            local multi
            multi=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); i=[x for x in d["items"] if x["name"]=="uprobe_multi"]; print(("ok: " if i[0]["ok"] else "NO: ")+i[0]["detail"] if i else "missing")' "$LOGS/1-causeway-check.json" 2>/dev/null)
            if [[ $multi == ok:* ]]; then
                row "uprobe_multi" "used (CO-RE relocated)" "${multi#ok: }" PASS
            else
                row "uprobe_multi" "used (CO-RE relocated)" "${multi:-unreadable check --json}" FAIL
            fi
        fi
    else
        row "causeway binary" "executable" "not found: '$CW' (give its path as the first argument or CAUSEWAY=)" FAIL
    fi
}

# ---------------------------------------------------------------------------------------- 2. counts

wait_build() {
    local pid=$1 what=$2
    [[ -n $pid ]] || return 1
    wait "$pid"
    local rc=$?
    ((rc == 0)) || echo "gpu-check: build of $what failed (exit $rc)"
    return $rc
}

step_counts() {
    say "2. counts.cu: exact runtime counts, shared and static cudart"
    if [[ -z $NVCC ]]; then
        row "nvcc" "nvcc on PATH or /usr/local/cuda/bin" "not found" FAIL
        return
    fi
    ((HAVE_GPU)) || echo "gpu-check: nvidia-smi saw no GPU; running the counts anyway"
    "$NVCC" --version | tail -n2 >"$LOGS/2-nvcc-version.txt" 2>&1
    local variant pid bin t rc
    for variant in shared static; do
        bin=$WORK/counts_$variant
        if [[ $variant == shared ]]; then pid=$BUILD_SHARED; else pid=$BUILD_STATIC; fi
        wait_build "$pid" "counts_$variant"
        cat "$LOGS/build-counts_$variant.log"
        if [[ ! -x $bin ]]; then
            row "counts_$variant: build (nvcc $ARCH)" "built" "failed: $(grep -m1 -iE 'error' "$LOGS/build-counts_$variant.log")" FAIL
            continue
        fi
        row "counts_$variant: build (nvcc $ARCH)" "built" "$(tail -n1 "$LOGS/2-nvcc-version.txt")" PASS
        if [[ $variant == static ]] && command -v readelf >/dev/null; then
            # Whether the runtime linked into the executable can be found by symbol (.symtab).
            row "counts_static: runtime symbols in the executable" "cudaLaunchKernel, cudaMalloc in .symtab" \
                "$(readelf -sW "$bin" 2>/dev/null | awk '$8 ~ /^(cudaLaunchKernel|cudaLaunchKernelExC|cudaMalloc|cudaMemcpyAsync)$/ { print $8 " (" $5 ")" }' | sort -u | paste -sd ' ' -)" INFO
        fi
        # Untraced first: the program's own reference output, and proof it runs without the tracer.
        timeout -k 5 60 "$bin" --delay-ms 0 >"$LOGS/counts_$variant.untraced.out" 2>&1
        rc=$?
        if ((rc == 0)) && grep -q '^DONE' "$LOGS/counts_$variant.untraced.out"; then
            row "counts_$variant: runs untraced" "exit 0" "exit 0" PASS
        else
            row "counts_$variant: runs untraced" "exit 0" "exit $rc: $(grep -m1 FAILED "$LOGS/counts_$variant.untraced.out")" FAIL
        fi
        ((HAVE_CW)) || continue
        if ! t=$(budget 90 20); then
            row "counts_$variant: traced" "run" "skipped: no time left" FAIL
            continue
        fi
        cw_trace "counts_$variant" "$t" "$bin" --delay-ms 500
        rc=$?
        trace_report "counts_$variant"
        row "counts_$variant: libraries probed (tracer's report)" "libcudart and libcuda" \
            "$(grep -E '^causeway: (probed|note)' "$LOGS/counts_$variant.err" | sed 's/^causeway: //' | paste -sd ';' -)" INFO
        if ((rc != 0)); then
            row "counts_$variant: causeway trace" "exit 0" "exit $rc: $(grep -m1 -E 'error' "$LOGS/counts_$variant.err")" FAIL
        fi
        [[ -s $TRACES/counts_$variant.db ]] || {
            row "counts_$variant: trace written" "a trace" "none" FAIL
            continue
        }
        timeout 60 "$CW" stats --db "$TRACES/counts_$variant.db" >"$LOGS/counts_$variant.stats.txt" 2>&1
        timeout 60 "$CW" stats --db "$TRACES/counts_$variant.db" --json >"$LOGS/counts_$variant.stats.json" 2>&1
        timeout 60 "$CW" query --db "$TRACES/counts_$variant.db" \
            "SELECT e.source, e.op, o.name, count(*) AS n FROM events e LEFT JOIN ops o ON o.source_id = e.source AND o.op_id = e.op WHERE e.source IN (1, 4, 8) GROUP BY e.source, e.op ORDER BY e.source, e.op" \
            >"$LOGS/counts_$variant.query.txt" 2>&1
        cat "$LOGS/counts_$variant.query.txt"
        local args=(counts --db "$TRACES/counts_$variant.db" --program-log "$LOGS/counts_$variant.out" --label "counts_$variant"
            --stats-json "$LOGS/counts_$variant.stats.json" --nesting-out "$LOGS/nesting-$variant.txt")
        [[ $variant == static ]] && args+=(--static)
        analyze "${args[@]}" 2>&1 | tee "$LOGS/counts_$variant.analyze.log"
    done
}

# ----------------------------------------------------------------------------------------- 3. train

step_train() {
    say "3. train.py traced: launch counts per API vs torch.profiler (CUPTI)"
    local t rc
    t=$(ready "train: traced" 240 90) || return
    cw_trace train "$t" "$PY" "$SRC/train.py" --json "$LOGS/train-traced.json" --trace-dir "$LOGS/profiles" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"}
    rc=$?
    trace_report train
    grep -E '^(PHASE|STEPS_PER_S|PROFILE|PHASE_ERROR)' "$LOGS/train.out"
    if ((rc != 0)); then
        row "train: causeway trace" "exit 0" "exit $rc (see logs/train.err)" FAIL
    fi
    if [[ ! -s $LOGS/train-traced.json ]]; then
        row "train: results" "train-traced.json" "none: $(tail -n1 "$LOGS/train.out")" FAIL
        return
    fi
    analyze train --db "$TRACES/train.db" --json "$LOGS/train-traced.json" --label train 2>&1 | tee "$LOGS/train.analyze.log"
}

step_overhead() {
    say "3b. overhead: the same training traced and untraced, runs alternating"
    if ! ((HAVE_TORCH && HAVE_CW)); then
        row "overhead" "traced and untraced runs" "skipped: no causeway or no torch with CUDA" INFO
        return
    fi
    # Runs in the order untraced, traced, traced, untraced, ... (ABBA): a drift of the machine
    # (clocks, temperature, page cache) weighs on both kinds alike. No profiler windows: the train
    # step's traced run pays for its own profiler, which is not the tracer's cost.
    local i kind t order=() traced=() untraced=()
    for ((i = 0; i < OVERHEAD_RUNS; i++)); do
        if ((i % 2 == 0)); then order+=(untraced traced); else order+=(traced untraced); fi
    done
    local args=(--phases eager,compile --no-profile --steps "$OVERHEAD_STEPS" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"})
    i=0
    for kind in "${order[@]}"; do
        i=$((i + 1))
        if ! t=$(budget 120 60); then
            row "overhead" "run $i of ${#order[@]} ($kind)" "skipped: no time left" INFO
            break
        fi
        if [[ $kind == untraced ]]; then
            timeout -k 10 "$t" "$PY" "$SRC/train.py" "${args[@]}" --json "$LOGS/overhead-$i.json" >"$LOGS/overhead-$i.out" 2>&1
        else
            cw_trace "overhead-$i" "$t" "$PY" "$SRC/train.py" "${args[@]}" --json "$LOGS/overhead-$i.json"
            rm -f "$TRACES/overhead-$i.db" # only its steps/s matter; keep the packed traces small
        fi
        echo "run $i ($kind): $(grep -E '^(STEPS_PER_S|PHASE_ERROR)' "$LOGS/overhead-$i.out" | paste -sd ' ' -)"
        if [[ -s $LOGS/overhead-$i.json ]]; then
            if [[ $kind == traced ]]; then traced+=("$LOGS/overhead-$i.json"); else untraced+=("$LOGS/overhead-$i.json"); fi
        fi
    done
    if ((${#traced[@]} && ${#untraced[@]})); then
        analyze overhead --traced "${traced[@]}" --untraced "${untraced[@]}" 2>&1 | tee "$LOGS/overhead.analyze.log"
    else
        row "overhead" "traced and untraced runs" "no pair of results (see logs/overhead-*.out)" INFO
    fi
}

# ------------------------------------------------------------------------------------- 4. diagnosis

# diag LABEL REQUIRED [train.py args...]: eager training pinned to HOG_CPU for DIAG_SECS, traced;
# the hog runs on the same CPU from DIAG_SECS/4 to 3*DIAG_SECS/4 after the loop is warm.
diag() {
    local label=$1 required=$2
    shift 2
    local name=diag-$label t tp hp i started=0 hog_at=$((DIAG_SECS / 4)) hog_secs=$((DIAG_SECS / 2)) h0=0 h1=0 rc
    say "4. diagnosis ($label): $HOG_NAME pinned to CPU $HOG_CPU from +${hog_at}s for ${hog_secs}s"
    local sev=INFO
    ((required)) && sev=FAIL
    ((HAVE_CW && HAVE_TORCH)) || {
        row "$name: run" "traced training with a hog" "skipped: no causeway or no torch with CUDA" $sev
        return
    }
    wait_build "$BUILD_HOG" hog >/dev/null
    BUILD_HOG=""
    [[ -x $WORK/hog ]] || {
        row "$name: hog built (cc tests/scenarios/hog.c)" "built" "failed: $(head -c 200 "$LOGS/build-hog.log")" $sev
        return
    }
    if ! t=$(budget $((DIAG_SECS + 60)) $((DIAG_SECS + 25))); then
        row "$name: run" "traced training with a hog" "skipped: no time left" $sev
        return
    fi
    cw_trace "$name" "$t" taskset -c "$HOG_CPU" "$PY" "$SRC/train.py" --secs "$DIAG_SECS" --json "$LOGS/$name.json" "$@" &
    tp=$!
    BG_PIDS+=("$tp")
    for ((i = 0; i < 600; i++)); do
        grep -q '^TRAIN_START' "$LOGS/$name.out" 2>/dev/null && {
            started=1
            break
        }
        kill -0 "$tp" 2>/dev/null || break
        sleep 0.2
    done
    if ((started)); then
        sleep "$hog_at"
        h0=$(date +%s%N)
        taskset -c "$HOG_CPU" "$WORK/hog" --name "$HOG_NAME" --secs "$hog_secs" >"$LOGS/$name.hog.log" 2>&1 &
        hp=$!
        BG_PIDS+=("$hp")
        wait "$hp"
        h1=$(date +%s%N)
    else
        echo "gpu-check: training never reported TRAIN_START" >>"$LOGS/$name.err"
    fi
    wait "$tp"
    rc=$?
    trace_report "$name"
    grep -E '^(SETFLAGS|FLAGS|TRAIN_START|TRAIN_END)' "$LOGS/$name.out"
    cat "$LOGS/$name.hog.log" 2>/dev/null
    ((rc == 0)) || row "$name: causeway trace" "exit 0" "exit $rc (see logs/$name.err)" $sev
    if ((!started)); then
        row "$name: training started" "TRAIN_START" "no: $(tail -n1 "$LOGS/$name.out") $(grep -v '^[-+ |]' "$LOGS/$name.err" | tail -n2)" $sev
        return
    fi
    if ! t=$(budget 150 20); then
        row "$name: causeway explain" "ran" "skipped: no time left" $sev
        return
    fi
    timeout -k 5 "$t" "$CW" explain --db "$TRACES/$name.db" --json >"$LOGS/$name.explain.json" 2>"$LOGS/$name.explain.err"
    rc=$?
    if (($(left) > 200)); then # the report as people read it, when time allows a second explain
        timeout -k 5 60 "$CW" explain --db "$TRACES/$name.db" >"$LOGS/$name.explain.txt" 2>&1
    fi
    if ((rc != 0)); then
        row "$name: causeway explain --json" "exit 0" "exit $rc: $(tail -n1 "$LOGS/$name.explain.err")" $sev
        return
    fi
    local args=(diag --db "$TRACES/$name.db" --explain "$LOGS/$name.explain.json" --hog-log "$LOGS/$name.hog.log"
        --hog-start-ns "$h0" --hog-end-ns "$h1" --train-json "$LOGS/$name.json" --label "$name" --cpu "$HOG_CPU")
    ((required)) && args+=(--required)
    analyze "${args[@]}" 2>&1 | tee "$LOGS/$name.analyze.log"
}

step_late() {
    say "4b. late attach: CUDA libraries mapped 3 s after the process started"
    local t rc
    t=$(ready "late attach" 90 30) || return
    cw_trace late "$t" "$PY" "$SRC/late.py" 3
    rc=$?
    trace_report late
    cat "$LOGS/late.out"
    ((rc == 0)) || row "late attach: causeway trace" "exit 0" "exit $rc (see logs/late.err)" FAIL
    analyze late --db "$TRACES/late.db" --program-log "$LOGS/late.out" 2>&1 | tee "$LOGS/late.analyze.log"
}

step_compare() {
    local f
    for f in diag-spin.explain.json diag-blocking.explain.json diag-spin.json diag-blocking.json; do
        [[ -s $LOGS/$f ]] || return 0
    done
    analyze compare --spin-db "$TRACES/diag-spin.db" --spin-explain "$LOGS/diag-spin.explain.json" --spin-json "$LOGS/diag-spin.json" \
        --blocking-db "$TRACES/diag-blocking.db" --blocking-explain "$LOGS/diag-blocking.explain.json" \
        --blocking-json "$LOGS/diag-blocking.json" 2>&1 | tee "$LOGS/diag-compare.log"
}

# --------------------------------------------------------------------------- 4c. NCCL and NVML

step_nccl() {
    say "4c. one NCCL rank (torch.distributed) traced, with NVML samples"
    local t rc n=50
    t=$(ready "nccl: traced" 120 40) || return
    cw_trace nccl "$t" "$PY" "$SRC/nccl_one_rank.py" "$n" 16
    rc=$?
    trace_report nccl
    cat "$LOGS/nccl.out"
    if ((rc != 0)) || ! grep -q "^ALLREDUCES $n" "$LOGS/nccl.out"; then
        row "nccl: torch.distributed all-reduces" "exit 0, $n all-reduces" "exit $rc: $(tail -n 1 "$LOGS/nccl.out")" FAIL
        return
    fi
    timeout 60 "$CW" stats --db "$TRACES/nccl.db" >"$LOGS/nccl.stats.txt" 2>&1
    "$PY" - "$TRACES/nccl.db" "$n" "$ROWS" <<'PYEOF' 2>&1 | tee "$LOGS/nccl.check.log"
import sqlite3, sys
db, n, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
out = open(rows, "a")
def row(check, want, got, ok):
    status = ok if isinstance(ok, str) else ("PASS" if ok else "FAIL")
    out.write("\t".join(str(x).replace("\t", " ").replace("\n", " ") for x in (check, want, got, status)) + "\n")
    print(check, want, got, status)
def one(sql):
    try:
        return c.execute(sql).fetchone()
    except sqlite3.Error as e:
        return (f"error: {e}",)
libs = c.execute("SELECT DISTINCT path, '' FROM attachments WHERE kind = 'nccl'").fetchall()
row("nccl: libnccl attached", "a libnccl.so.2", "; ".join(p for p, _ in libs) or "none", bool(libs))
ar = one("SELECT count(*), count(DISTINCT comm_hash), min(seq), max(seq), min(rank), max(nranks), min(comm_hash <> 0) FROM nccl_calls WHERE op = 1")
row("nccl: ncclAllReduce rows", f">= {n}, one communicator, rank 0 of 1, hashed", ar, bool(ar and isinstance(ar[0], int) and ar[0] >= n and ar[1] == 1 and ar[4] == 0 and ar[5] == 1 and ar[6] == 1))
ev = one("SELECT count(*) FROM events WHERE source = 9 AND op = 1")
row("nccl: ncclAllReduce events = rows", ar[0] if ar else "?", ev[0] if ev else "?", bool(ev and ar and ev[0] == ar[0]))
init = one("SELECT count(*), group_concat(DISTINCT op) FROM nccl_calls WHERE op IN (10, 11, 12)")
row("nccl: communicator creation seen", ">= 1 init", init, bool(init and isinstance(init[0], int) and init[0] >= 1))
kinds = c.execute("SELECT o.name, count(*) FROM events e JOIN ops o ON o.source_id = e.source AND o.op_id = e.op WHERE e.source = 9 GROUP BY 1 ORDER BY 2 DESC").fetchall()
row("nccl: NCCL ops recorded", "info", ", ".join(f"{k} {v}" for k, v in kinds), "INFO")
nv = c.execute("SELECT note FROM attachments WHERE kind = 'nvml'").fetchall()
row("nvml: NVML found", "NVML (driver ...)", nv[0][0] if nv else "no row", bool(nv and nv[0][0].startswith("NVML")))
s = one("SELECT count(*), count(DISTINCT gpu), min(sm_clock_mhz), max(sm_clock_mhz), max(sm_clock_max_mhz), max(temperature_c), max(power_mw), max(power_limit_mw), max(util_gpu_pct), group_concat(DISTINCT throttle_reasons) FROM gpu_samples")
row("nvml: GPU samples", ">= 1 per GPU, SM clock > 0", s, bool(s and isinstance(s[0], int) and s[0] > 0 and (s[3] or 0) > 0))
PYEOF
}

# ------------------------------------------------------------------------------------ 4d. stacks

step_stacks() {
    say "4d. Python frames: train.py traced with --stacks"
    local t rc name=stacks
    t=$(ready "stacks: traced" 90 45) || return
    rm -f "$TRACES/$name.db"*
    echo "+ $CW trace --stacks --db $TRACES/$name.db -- $PY $SRC/train.py --secs 15 (limit ${t}s)" >"$LOGS/$name.err"
    timeout -k 30 "$t" "$CW" trace --stacks --db "$TRACES/$name.db" -- "$PY" "$SRC/train.py" --secs 15 --json "$LOGS/$name.json" \
        >"$LOGS/$name.out" 2>>"$LOGS/$name.err"
    rc=$?
    trace_report "$name"
    ((rc == 0)) || row "stacks: causeway trace --stacks" "exit 0" "exit $rc (see logs/$name.err)" FAIL
    # one GPU per call (issue 46): every CUDA call carries the NVML index of the device it used
    local gpus
    gpus=$(timeout 60 "$CW" query --db "$TRACES/$name.db" --json \
        "SELECT count(*) FILTER (WHERE gpu_id >= 0), count(*), count(DISTINCT gpu_id) FILTER (WHERE gpu_id >= 0) FROM events WHERE source IN (1, 4, 9)" 2>&1 |
        "$PY" -c 'import json,sys; r=json.load(sys.stdin)["rows"][0]; print(r[0], r[1], r[2])' 2>/dev/null)
    if [[ -n $gpus ]] && read -r known all distinct <<<"$gpus" && ((all > 0 && known == all)); then
        row "stacks: each call's GPU" "every CUDA call with its NVML GPU" "$known of $all calls, $distinct GPU(s)" PASS
    else
        row "stacks: each call's GPU" "every CUDA call with its NVML GPU" "${gpus:-query failed}" FAIL
    fi
    timeout 120 "$CW" stacks --db "$TRACES/$name.db" --top 3 >"$LOGS/$name.stacks.txt" 2>&1
    head -n 60 "$LOGS/$name.stacks.txt"
    local op
    for op in cudaLaunchKernel cuLaunchKernelEx; do
        timeout 120 "$CW" stacks --db "$TRACES/$name.db" --op "$op" --top 20 --json >"$LOGS/$name.$op.json" 2>"$LOGS/$name.$op.err"
        "$PY" - "$LOGS/$name.$op.json" "$op" "$ROWS" <<'PYEOF' 2>&1 | tee -a "$LOGS/$name.check.log"
import json, sys
path, op, rows = sys.argv[1:4]
def row(check, want, got, st):
    with open(rows, "a") as out:
        out.write("\t".join(str(x).replace("\t", " ").replace("\n", " ") for x in (check, want, got, st)) + "\n")
    print(check, want, got, st)
try:
    d = json.load(open(path))
except Exception as e:
    row(f"stacks: {op} stacks", "a JSON report", f"unreadable: {e}", "FAIL")
    sys.exit(0)
row(f"stacks: {op} calls with a stack", "> 0", f"{d.get('calls_with_stack')} of {d.get('calls')}", "PASS" if d.get("calls_with_stack") else "FAIL")
top = d.get("by_count") or []
py = [f["text"] for s in top for f in s["frames"] if f["kind"] == "python"]
mine = [t for t in py if "train.py:" in t]
row(f"stacks: {op}: a train.py line behind the top stacks", "train.py:N in ...", (mine[:2] or py[:2] or ["no Python frame"]), "PASS" if mine else "FAIL")
# The backward pass launches from autograd's own C++ threads (pt_autograd_N), which run no Python:
# their stacks rightly have no Python frame. Reported, not judged.
bare = [s for s in top if not any(f["kind"] == "python" for f in s["frames"])]
row(f"stacks: {op}: top stacks without a Python frame", "info (autograd threads run no Python)",
    f"{len(bare)} of {len(top)} stacks, {sum(s['calls'] for s in bare)} of {sum(s['calls'] for s in top)} calls", "INFO")
# ... and their launches borrow the line the Python thread waited at: loss.backward() in train.py
# (issue 46: every borrowed stack is marked, with the thread it came from)
def lends(x):
    if isinstance(x, dict):
        if "from_tid" in x and "user_frame" in x:
            yield x
        for v in x.values():
            yield from lends(v)
    elif isinstance(x, list):
        for v in x:
            yield from lends(v)
borrowed = [b for b in lends(d) if "train.py" in (b.get("user_frame") or "")]
if op == "cudaLaunchKernel":
    words = sorted({b.get("words") or b.get("user_frame") for b in borrowed})
    row(f"stacks: {op}: backward launches borrow train.py's line", "train.py:N (loss.backward())",
        f"{d.get('calls_borrowed', 0)} calls borrowed, {d.get('calls_ambiguous', 0)} ambiguous; {words[:2] or 'none'}",
        "PASS" if borrowed else "FAIL")
PYEOF
    done
}

# ----------------------------------------------------------------------------- 4e. device timeline

# inject_lib: the injection library `trace --gpu-timeline` loads into the traced program:
# $CAUSEWAY_INJECT_LIB, else libcauseway_inject.so beside the binary given (or beside the file it
# links to), else in ../lib/causeway/ of it; printed, status 1 when there is none.
inject_lib() {
    local c real
    real=$(readlink -f "$CW" 2>/dev/null || echo "$CW")
    for c in "${CAUSEWAY_INJECT_LIB:-}" "$(dirname "$CW")/libcauseway_inject.so" "$(dirname "$real")/libcauseway_inject.so" \
        "$(dirname "$CW")/../lib/causeway/libcauseway_inject.so"; do
        if [[ -n $c && -f $c ]]; then
            readlink -f "$c"
            return 0
        fi
    done
    return 1
}

# cupti_hint BIN: nothing when the injection library will find a libcupti of BIN's CUDA runtime by
# itself (beside the runtime, in the toolkit's extras/CUPTI/lib64, known to the loader, or named by
# $CAUSEWAY_CUPTI_PATH already); else the first libcupti.so.MAJOR in the toolkit nvcc came from or in
# torch's CUDA wheels, printed, to name in CAUSEWAY_CUPTI_PATH.
cupti_hint() {
    local rt major d c torch_rt
    [[ -n ${CAUSEWAY_CUPTI_PATH:-} ]] && return 0
    rt=$(ldd "$1" 2>/dev/null | awk '$1 ~ /^libcudart\.so/ { print $3; exit }')
    major=$(basename "${rt:-libcudart.so.13}" | sed -n 's/^libcudart\.so\.\([0-9][0-9]*\).*/\1/p')
    [[ -n $major ]] || major=13
    if [[ -n $rt && -e $rt ]]; then
        d=$(dirname "$rt")
        for c in "$d/libcupti.so.$major" "$d/../extras/CUPTI/lib64/libcupti.so.$major"; do
            [[ -e $c ]] && return 0
        done
    fi
    ldconfig -p 2>/dev/null | grep -q "libcupti\.so\.$major " && return 0
    d=$(dirname "$(readlink -f "$NVCC")")/..
    torch_rt=$(jget "$LOGS/1-env.json" 'd.get("libcudart")')
    for c in "$d/extras/CUPTI/lib64" "$d/targets/x86_64-linux/lib" "$d/lib64" "$d/lib" /usr/local/cuda/extras/CUPTI/lib64 \
        ${torch_rt:+"$(dirname "$torch_rt")" "$(dirname "$torch_rt")/../../cuda_cupti/lib"}; do
        if [[ -e $c/libcupti.so.$major ]]; then
            readlink -f "$c/libcupti.so.$major"
            return 0
        fi
    done
}

# tl_check ARGS...: scripts/gpu-check/timeline_check.py, which appends its rows to the summary; killed
# by its time limit, it gets a FAIL row here.
tl_check() {
    local t rc a what=""
    t=$(budget 120 5) || t=5
    timeout -k 5 "$t" "$PY" "$SRC/timeline_check.py" --rows "$ROWS" --causeway "$CW" "$@"
    rc=$?
    for a in "$@"; do
        [[ $a == check || $a == overhead || $a == profiler ]] && what=$a
    done
    if ((rc == 124 || rc == 137)); then
        row "timeline: timeline_check.py $what" "done within ${t}s" "stopped by its time limit" FAIL
    fi
}

# tl_explain NAME: `causeway explain --json` of traces/NAME.db into logs/NAME.explain.json (and the
# text report beside it); a FAIL row when it fails.
tl_explain() {
    local name=$1 t rc
    t=$(budget 120 10) || t=10
    timeout -k 5 "$t" "$CW" explain --db "$TRACES/$name.db" --json >"$LOGS/$name.explain.json" 2>"$LOGS/$name.explain.err"
    rc=$?
    ((rc == 0)) || row "$name: causeway explain --json" "exit 0" "exit $rc: $(tail -n1 "$LOGS/$name.explain.err")" FAIL
    timeout -k 5 60 "$CW" explain --db "$TRACES/$name.db" >"$LOGS/$name.explain.txt" 2>&1
    head -n 25 "$LOGS/$name.explain.txt"
    return $rc
}

# tl_modes ROUNDS: the three modes of the overhead runs in ABBA order (untraced traced timeline,
# then timeline traced untraced, ...): a drift of the machine weighs on every mode alike.
tl_modes() {
    local r
    for ((r = 0; r < $1; r++)); do
        if ((r % 2 == 0)); then echo untraced traced timeline; else echo timeline traced untraced; fi
    done
}

# tl_overhead_empty LIB: launches/s of N empty kernels (no sync between) in the three modes.
tl_overhead_empty() {
    local lib=$1 bin=$WORK/timeline n=${GPU_CHECK_TIMELINE_EMPTY:-100000} i=0 mode t v name kept=() un=() tr=() tl=()
    local order
    read -r -a order <<<"$(tl_modes "${GPU_CHECK_TIMELINE_RUNS:-2}" | paste -sd ' ' -)"
    for mode in ${order[@]+"${order[@]}"}; do
        i=$((i + 1))
        name=tl-empty-$i
        if ! t=$(budget 60 25); then
            row "timeline: empty launches/s" "run $i of ${#order[@]} ($mode)" "skipped: no time left" INFO
            break
        fi
        case $mode in
        untraced) timeout -k 5 "$t" "$bin" --empty "$n" >"$LOGS/$name.out" 2>&1 ;;
        traced)
            CW_TRACE_OPTS=(--nvml-hz 0)
            cw_trace "$name" "$t" "$bin" --empty "$n"
            ;;
        timeline)
            CW_TRACE_OPTS=(--gpu-timeline --nvml-hz 0 --gpu-library "$lib")
            cw_trace "$name" "$t" "$bin" --empty "$n"
            kept+=("run $i: $("$PY" "$SRC/timeline_check.py" count --db "$TRACES/$name.db" 2>&1 | tail -n1)")
            ;;
        esac
        rm -f "$TRACES/$name.db" "$TRACES/$name.db-wal" "$TRACES/$name.db-shm" # only the figure matters
        v=$(awk '$1 == "EMPTY_LAUNCHES_PER_S" { print $2 }' "$LOGS/$name.out")
        echo "run $i ($mode): ${v:-no figure} launches/s; $(grep -m1 '^EMPTY ' "$LOGS/$name.out")"
        [[ -n $v ]] || continue
        case $mode in
        untraced) un+=("$v") ;;
        traced) tr+=("$v") ;;
        timeline) tl+=("$v") ;;
        esac
    done
    tl_check --label "timeline: empty launches/s" overhead --unit "launches/s of $n empty kernels, no sync between" \
        --untraced ${un[@]+"${un[@]}"} --traced ${tr[@]+"${tr[@]}"} --timeline ${tl[@]+"${tl[@]}"}
    if ((${#kept[@]})); then
        row "timeline: empty kernels in the device view" "$((n + 1000)) a run (info)" "$(printf '%s; ' "${kept[@]}")" INFO
    fi
}

# tl_overhead_train LIB: train.py's eager steps/s in the three modes (no profiler).
tl_overhead_train() {
    local lib=$1 i=0 mode t v name un=() tr=() tl=() order
    local args=(--phases eager --no-profile --warmup 20 --steps "${GPU_CHECK_TIMELINE_TRAIN_STEPS:-500}" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"})
    if ! ((HAVE_TORCH)); then
        row "timeline: train steps/s" "three modes" "skipped: no torch with CUDA" INFO
        return
    fi
    read -r -a order <<<"$(tl_modes "${GPU_CHECK_TIMELINE_TRAIN_RUNS:-2}" | paste -sd ' ' -)"
    for mode in ${order[@]+"${order[@]}"}; do
        i=$((i + 1))
        name=tl-train-$i
        if ! t=$(budget 120 50); then
            row "timeline: train steps/s" "run $i of ${#order[@]} ($mode)" "skipped: no time left" INFO
            break
        fi
        rm -f "$LOGS/$name.json"
        case $mode in
        untraced) timeout -k 10 "$t" "$PY" "$SRC/train.py" "${args[@]}" --json "$LOGS/$name.json" >"$LOGS/$name.out" 2>&1 ;;
        traced)
            CW_TRACE_OPTS=(--nvml-hz 0)
            cw_trace "$name" "$t" "$PY" "$SRC/train.py" "${args[@]}" --json "$LOGS/$name.json"
            ;;
        timeline)
            CW_TRACE_OPTS=(--gpu-timeline --nvml-hz 0 --gpu-library "$lib")
            cw_trace "$name" "$t" "$PY" "$SRC/train.py" "${args[@]}" --json "$LOGS/$name.json"
            ;;
        esac
        rm -f "$TRACES/$name.db" "$TRACES/$name.db-wal" "$TRACES/$name.db-shm"
        v=$(jget "$LOGS/$name.json" 'd["phases"][0]["steps_per_s"]')
        echo "run $i ($mode): ${v:-no figure} steps/s $(grep -E '^PHASE_ERROR' "$LOGS/$name.out")"
        [[ -n $v ]] || continue
        case $mode in
        untraced) un+=("$v") ;;
        traced) tr+=("$v") ;;
        timeline) tl+=("$v") ;;
        esac
    done
    ((i)) || return 0
    tl_check --label "timeline: train steps/s" overhead --unit "train.py eager steps/s, no profiler" \
        --untraced ${un[@]+"${un[@]}"} --traced ${tr[@]+"${tr[@]}"} --timeline ${tl[@]+"${tl[@]}"}
}

# tl_profiler LIB: train.py with its torch.profiler window, traced with --gpu-timeline.
tl_profiler() {
    local lib=$1 t rc name=tl-profiler
    t=$(ready "timeline profiler: traced" 150 60) || return
    CW_TRACE_OPTS=(--gpu-timeline --nvml-hz 0 --gpu-library "$lib")
    cw_trace "$name" "$t" "$PY" "$SRC/train.py" --phases eager --warmup 10 --steps 50 --profile-steps 10 \
        --json "$LOGS/$name.json" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"}
    rc=$?
    trace_report "$name"
    grep -E '^(PHASE|STEPS_PER_S|PROFILE|PHASE_ERROR)' "$LOGS/$name.out"
    ((rc == 0)) || row "timeline profiler: causeway trace --gpu-timeline" "exit 0" "exit $rc (see logs/$name.err)" FAIL
    tl_explain "$name" >/dev/null
    tl_check --label "timeline profiler" profiler --db "$TRACES/$name.db" --json "$LOGS/$name.json" \
        --explain "$LOGS/$name.explain.json" 2>&1 | tee "$LOGS/$name.check.log"
}

step_timeline() {
    say "4e. device timeline: trace --gpu-timeline against the kernels' own %globaltimer"
    local bin=$WORK/timeline lib cupti t rc lu lt name=timeline sleep_at=300 hog_at=600 stall=38
    local steps=${GPU_CHECK_TIMELINE_STEPS:-800}
    ((steps >= hog_at + 50)) || steps=$((hog_at + 50))
    # the launch thread pinned to the hog's CPU (after its CUDA setup), the hog forked onto it
    local args=(--steps "$steps" --kernel-us 1000 --host-us 100 --cpu "$HOG_CPU" --sleep-at "$sleep_at" --hog-at "$hog_at"
        --stall-ms "$stall")
    local CW_TRACE_OPTS=()
    if [[ -z $NVCC ]]; then
        row "timeline: nvcc" "nvcc on PATH or /usr/local/cuda/bin" "not found" FAIL
        return
    fi
    wait_build "$BUILD_TIMELINE" timeline
    BUILD_TIMELINE=""
    cat "$LOGS/build-timeline.log" 2>/dev/null
    if [[ ! -x $bin ]]; then
        row "timeline: build (nvcc $ARCH)" "built" "failed: $(grep -m1 -iE 'error' "$LOGS/build-timeline.log" 2>/dev/null)" FAIL
        return
    fi
    row "timeline: build (nvcc $ARCH)" "built" "$("$NVCC" --version | tail -n1)" PASS
    if ! t=$(budget 150 40); then
        row "timeline: runs" "untraced and traced" "skipped: no time left" FAIL
        return
    fi
    # Untraced first: proof it runs without the tracer, and its loop time.
    timeout -k 5 60 "$bin" "$LOGS/timeline.untraced.csv" "${args[@]}" >"$LOGS/timeline.untraced.out" 2>&1
    rc=$?
    cat "$LOGS/timeline.untraced.out"
    if ((rc != 0)) || ! grep -q '^DONE' "$LOGS/timeline.untraced.out"; then
        row "timeline: runs untraced" "exit 0, DONE" "exit $rc: $(grep -m1 -E 'FAILED|error' "$LOGS/timeline.untraced.out")" FAIL
        return
    fi
    lu=$(awk '$1 == "LOOP_S" { print $2 }' "$LOGS/timeline.untraced.out")
    row "timeline: runs untraced" "exit 0, DONE" "exit 0; $steps steps in $lu s" PASS
    if ! ((HAVE_CW)); then
        row "timeline: traced" "run" "skipped: no causeway binary" FAIL
        return
    fi
    if ! lib=$(inject_lib); then
        row "timeline: injection library" "libcauseway_inject.so beside $CW or at \$CAUSEWAY_INJECT_LIB" \
            "not found: carry target/release/libcauseway_inject.so (built with the binary) beside the causeway binary, or set CAUSEWAY_INJECT_LIB" FAIL
        return
    fi
    row "timeline: injection library" "libcauseway_inject.so" "$lib ($(du -h "$lib" | cut -f1))" INFO
    cupti=$(cupti_hint "$bin")
    if [[ -n $cupti ]]; then
        local -x CAUSEWAY_CUPTI_PATH=$cupti
        row "timeline: libcupti of timeline.cu's runtime" "beside the runtime or in the toolkit" "elsewhere: CAUSEWAY_CUPTI_PATH=$cupti" INFO
    fi

    CW_TRACE_OPTS=(--gpu-timeline --nvml-hz 0 --gpu-library "$lib")
    cw_trace "$name" "$t" "$bin" "$LOGS/timeline.csv" "${args[@]}"
    rc=$?
    trace_report "$name"
    cat "$LOGS/$name.out"
    if ((rc != 0)) || ! grep -q '^DONE' "$LOGS/$name.out"; then
        row "timeline: causeway trace --gpu-timeline" "exit 0, DONE" \
            "exit $rc: $(tail -n1 "$LOGS/$name.out") $(grep -m1 -iE 'error' "$LOGS/$name.err")" FAIL
    fi
    if grep -qs 'without SCHED_FIFO' "$LOGS/$name.out" "$LOGS/$name.err" "$LOGS/timeline.untraced.out"; then
        row "timeline: $HOG_NAME with SCHED_FIFO" "priority 1 (it preempts the launch thread)" \
            "refused: it shared the CPU, the gap at step $hog_at is smaller" FAIL
    fi
    lt=$(awk '$1 == "LOOP_S" { print $2 }' "$LOGS/$name.out")
    row "timeline: loop time untraced / traced" "info" "$lu s / ${lt:-?} s; step labels $(awk '$1 == "LABELS" { print $2 }' "$LOGS/$name.out"); $(grep -E '^causeway: device timeline' "$LOGS/$name.err" | tail -n1)" INFO
    if [[ ! -s $TRACES/$name.db ]]; then
        row "timeline: trace written" "a trace" "none" FAIL
        return
    fi
    tl_explain "$name"
    tl_check check --db "$TRACES/$name.db" --explain "$LOGS/$name.explain.json" --csv "$LOGS/timeline.csv" --steps "$steps" \
        --sleep-at "$sleep_at" --hog-at "$hog_at" --stall-ms "$stall" --hog-name "$HOG_NAME" 2>&1 | tee "$LOGS/$name.check.log"

    tl_profiler "$lib"
    tl_overhead_empty "$lib"
    tl_overhead_train "$lib"
}

# ------------------------------------------------------------------------------ 4f. attach mid-run

step_attach() {
    say "4f. attach: the device timeline of a PyTorch loop already running (trace --pid P --gpu-timeline)"
    local lib t pid rc name=attach steps=${GPU_CHECK_ATTACH_STEPS:-3000} i
    if ! ((HAVE_TORCH && HAVE_CW)); then
        row "attach: train.py mid-run" "run" "skipped: no torch with CUDA or no causeway binary" INFO
        return
    fi
    if ! lib=$(inject_lib); then
        row "attach: injection library" "libcauseway_inject.so" "not found (see the timeline step)" FAIL
        return
    fi
    t=$(ready "attach: train.py" 150 60) || return
    "$PY" "$SRC/train.py" --phases eager --no-profile --warmup 20 --steps "$steps" --json "$LOGS/$name.json" \
        ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"} >"$LOGS/$name.out" 2>&1 &
    pid=$!
    for ((i = 0; i < 300; i++)); do
        grep -qs '/libcuda.so' "/proc/$pid/maps" && break
        sleep 0.1
    done
    sleep 3 # past CUDA's start and the warm-up: a loop well under way
    timeout -k 5 "$t" "$CW" trace --pid "$pid" --gpu-timeline --gpu-library "$lib" --gpu-window 5s --duration 8s \
        --nvml-hz 0 --db "$TRACES/$name.db" >"$LOGS/$name.trace.out" 2>"$LOGS/$name.err"
    rc=$?
    trace_report "$name"
    wait "$pid"
    local train_rc=$?
    grep -E '^(PHASE|STEPS_PER_S|PHASE_ERROR)' "$LOGS/$name.out"
    ((rc == 0)) || row "attach: causeway trace --pid --gpu-timeline" "exit 0" "exit $rc (see logs/$name.err)" FAIL
    if ((train_rc == 0)); then
        row "attach: train.py after the attach" "exit 0" "exit 0: $(grep -m1 '^STEPS_PER_S' "$LOGS/$name.out")" PASS
    else
        row "attach: train.py after the attach" "exit 0" "exit $train_rc: $(tail -n1 "$LOGS/$name.out")" FAIL
    fi
    "$PY" - "$TRACES/$name.db" "$ROWS" <<'PYEOF'
import sqlite3, sys
db, rows = sys.argv[1], sys.argv[2]
out = []
def row(check, expected, got, result):
    out.append("\t".join([check, expected, str(got), result]))
try:
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    att = c.execute("SELECT count, detail FROM gpu_timeline_notes WHERE kind = 'attached'").fetchall()
    if att:
        row("attach: main thread held", "measured (the attached note)", f"{att[0][0] / 1000:.0f} us: {att[0][1][:60]}", "PASS")
    else:
        why = c.execute("SELECT detail FROM gpu_timeline_notes ORDER BY ts_ns LIMIT 1").fetchall()
        row("attach: attached", "an attached note", f"none {why}", "FAIL")
    k = c.execute("SELECT COUNT(*), SUM(launch_tid <> 0 AND launch_start_ns > 0) FROM gpu_ops WHERE kind = 1").fetchone()
    n, tied = k[0] or 0, k[1] or 0
    row("attach: kernels in the 5 s window", "> 0, >= 95% tied to launches", f"{n} kernels, {tied} tied",
        "PASS" if n > 0 and tied * 100 >= n * 95 else "FAIL")
    w = c.execute("SELECT kind, detail FROM gpu_timeline_notes WHERE kind LIKE 'window_%' ORDER BY ts_ns").fetchall()
    row("attach: window opened and closed", "window_opened, window_closed", ", ".join(x[0] for x in w),
        "PASS" if [x[0] for x in w] == ["window_opened", "window_closed"] else "FAIL")
except Exception as e:
    row("attach: trace readable", "a trace", f"{e}", "FAIL")
with open(rows, "a") as f:
    for line in out:
        print(line)
        f.write(line + "\n")
PYEOF
}

# ------------------------------------------------------------------------------------------ summary

summary() {
    local pass fail info
    pass=$(awk -F'\t' '$4 == "PASS"' "$ROWS" | wc -l)
    fail=$(awk -F'\t' '$4 == "FAIL"' "$ROWS" | wc -l)
    info=$(awk -F'\t' '$4 == "INFO"' "$ROWS" | wc -l)
    {
        echo "Causeway GPU acceptance run: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -r), $(head -n1 "$LOGS/1-nvidia-smi.log" 2>/dev/null)"
        echo "causeway: $CW; output: $OUTDIR; took $(($(date +%s) - START)) s of a ${BUDGET} s budget"
        echo
        awk -F'\t' '
            function cut(s, n) { return length(s) > n ? substr(s, 1, n - 1) "~" : s }
            BEGIN { printf "%-48s %-34s %-86s %s\n", "CHECK", "EXPECTED", "GOT", "RESULT"
                    printf "%-48s %-34s %-86s %s\n", "-----", "--------", "---", "------" }
            { printf "%-48s %-34s %-86s %s\n", cut($1, 48), cut($2, 34), cut($3, 86), $4 }' "$ROWS"
        echo
        echo "$pass PASS, $fail FAIL, $info INFO (full rows: summary.tsv; logs: logs/; traces: traces/)"
    } | tee "$OUTDIR/summary.txt"
    [[ $fail -eq 0 ]]
}

# pack: logs/ into logs.tar.gz and the traces that fit into traces.tar (each trace gzipped, smallest
# first, 15 MiB in all), leaving summary.txt, summary.tsv, logs.tar.gz and traces.tar.
pack() {
    local f size total=0 limit=$((15 * 1024 * 1024)) keep=()
    tar -czf "$OUTDIR/logs.tar.gz" -C "$OUTDIR" logs 2>/dev/null
    if (($(stat -c %s "$OUTDIR/logs.tar.gz") > limit)); then
        tar -czf "$OUTDIR/logs.tar.gz" -C "$OUTDIR" --exclude=logs/profiles logs 2>/dev/null
    fi
    mkdir -p "$WORK/packed"
    for f in "$TRACES"/*.db; do
        [[ -e $f ]] && gzip -c "$f" >"$WORK/packed/$(basename "$f").gz"
    done
    while read -r size f; do
        ((total + size <= limit)) || continue
        total=$((total + size))
        keep+=("$f")
    done < <(find "$WORK/packed" -name '*.gz' -printf '%s %f\n' 2>/dev/null | sort -n)
    if ((${#keep[@]})); then
        tar -cf "$OUTDIR/traces.tar" -C "$WORK/packed" "${keep[@]}"
    fi
    echo "packed: logs.tar.gz, traces.tar (${keep[*]:-no trace fits})" >>"$OUTDIR/summary.txt"
    rm -rf "$LOGS" "$TRACES"
}

# wants STEP: whether GPU_CHECK_STEPS (default: every step) names STEP.
wants() { [[ -z ${GPU_CHECK_STEPS:-} || ,$GPU_CHECK_STEPS, == *,$1,* ]]; }

main() {
    echo "gpu-check: causeway=$CW output=$OUTDIR budget=${BUDGET}s work=$WORK steps=${GPU_CHECK_STEPS:-all}"
    start_builds
    step_env
    wants counts && step_counts
    wants train && step_train
    wants diag-spin && diag spin 1
    wants late && step_late
    wants nccl && step_nccl
    wants stacks && step_stacks
    wants diag-blocking && diag blocking 0 --blocking-sync
    wants diag-spin && wants diag-blocking && step_compare
    wants timeline && step_timeline
    wants attach && step_attach
    wants overhead && step_overhead
    say "5. summary"
    local ok=0
    summary || ok=1
    cleanup
    if [[ ${GPU_CHECK_PACK:-0} == 1 ]]; then
        pack
    fi
    rm -rf "$WORK"
    return $ok
}

main
exit $?
