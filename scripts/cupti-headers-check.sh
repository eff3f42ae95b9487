#!/usr/bin/env bash
# Checks the mock libcupti's record layouts (mock-cuda/src/mock_cupti.h) against NVIDIA's real
# CUPTI headers, without committing those (NVIDIA's licence): the headers come from NVIDIA's pip
# wheels into a cache outside the repository, the probe mock-cuda/src/layout_probe.c is compiled
# against each CUDA major's headers and against the mock's own, and the outputs must be equal.
#
#   scripts/cupti-headers-check.sh
#
# CACHE (default ${CARGO_TARGET_DIR:-$HOME/.cache/causeway/target}/cupti-wheels) holds:
#   wheels-12/  nvidia-cuda-cupti-cu12 and nvidia-cuda-runtime-cu12 (CUDA 12.9; pip install --target)
#   wheels-13/  nvidia-cuda-cupti and nvidia-cuda-runtime (CUDA 13.5)
#   shim/crt/host_defines.h  what cuda_runtime_api.h includes and the runtime wheel lacks (written here)
#   layout-12.txt, layout-13.txt  the real layouts, `kernel.start=16`, `kernel.size=208`, ... and
#                 `const.<NAME>=N` lines (the same keys for both majors; a Rust test of the injection
#                 library reads these files to check its own offsets)
#   layout-mock-12.txt, layout-mock-13.txt  the mock's
# A wheel already unpacked is not fetched again (pip goes through whatever index pip is configured
# with). Needs python3 with pip, and a C compiler (CC, default cc). Exits non-zero on a difference,
# printing the lines that differ.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CACHE:-${CARGO_TARGET_DIR:-$HOME/.cache/causeway/target}/cupti-wheels}
CC=${CC:-cc}
PYTHON=${PYTHON:-python3}
# the versions pinned (installable from the configured index when this was written)
WHEELS_12=(nvidia-cuda-cupti-cu12==12.9.79 nvidia-cuda-runtime-cu12==12.9.79)
WHEELS_13=(nvidia-cuda-cupti==13.5.25 nvidia-cuda-runtime==13.5.37)
PROBE=$ROOT/mock-cuda/src/layout_probe.c

mkdir -p "$CACHE"

# fetch MAJOR HEADER WHEEL...: install the wheels into wheels-MAJOR unless HEADER is there already
fetch() {
    local major=$1 header=$2
    shift 2
    local dir=$CACHE/wheels-$major
    if [[ -f $dir/$header ]]; then
        echo "cupti-headers-check: CUDA $major headers already in $dir"
        return
    fi
    echo "cupti-headers-check: installing $* into $dir"
    rm -rf "$dir"
    PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --no-deps --disable-pip-version-check --target "$dir" "$@"
    [[ -f $dir/$header ]] || { echo "cupti-headers-check: $dir/$header missing after pip install" >&2; exit 1; }
}
fetch 12 nvidia/cuda_cupti/include/cupti_activity.h "${WHEELS_12[@]}"
fetch 13 nvidia/cu13/include/cupti_activity.h "${WHEELS_13[@]}"

# the runtime wheels' cuda_runtime_api.h includes crt/host_defines.h, which only the toolkit has:
# the few macros the C headers need, defined away
SHIM=$CACHE/shim
mkdir -p "$SHIM/crt"
cat > "$SHIM/crt/host_defines.h" <<'EOF'
/* written by scripts/cupti-headers-check.sh: enough of the toolkit's crt/host_defines.h for C */
#pragma once
#define __host__
#define __device__
#define __device_builtin__
#define __builtin_align__(a) __attribute__((aligned(a)))
#define __align__(a) __attribute__((aligned(a)))
#define __cudart_builtin__
#define CUDARTAPI
#define __location__(a)
#define __CUDA_ALIGN__(n) __attribute__((aligned(n)))
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
EOF

W12=$CACHE/wheels-12/nvidia
W13=$CACHE/wheels-13/nvidia
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# probe OUT FLAGS...: compile the probe with FLAGS, run it into OUT
probe() {
    local out=$1
    shift
    "$CC" -std=gnu11 -Wall -o "$TMP/probe" "$PROBE" "$@"
    "$TMP/probe" > "$out"
}
probe "$CACHE/layout-12.txt" -DLAYOUT_REAL -I"$SHIM" -I"$W12/cuda_cupti/include" -I"$W12/cuda_runtime/include"
probe "$CACHE/layout-13.txt" -DLAYOUT_REAL -DMOCK_CUPTI13 -I"$SHIM" -I"$W13/cu13/include"
probe "$CACHE/layout-mock-12.txt" -I"$ROOT/mock-cuda/src"
probe "$CACHE/layout-mock-13.txt" -DMOCK_CUPTI13 -I"$ROOT/mock-cuda/src"

status=0
if ! cmp -s <(cut -d= -f1 "$CACHE/layout-12.txt") <(cut -d= -f1 "$CACHE/layout-13.txt"); then
    echo "cupti-headers-check: layout-12.txt and layout-13.txt have different keys" >&2
    status=1
fi
for major in 12 13; do
    if diff -u --label "NVIDIA CUDA $major" --label "mock_cupti.h ($major)" \
        "$CACHE/layout-$major.txt" "$CACHE/layout-mock-$major.txt" > "$TMP/diff"; then
        echo "cupti-headers-check: CUDA $major: the mock's layouts match NVIDIA's ($(wc -l < "$CACHE/layout-$major.txt") lines)"
    else
        echo "cupti-headers-check: CUDA $major: the mock's layouts differ from NVIDIA's:" >&2
        grep '^[-+][^-+]' "$TMP/diff" >&2 || true
        status=1
    fi
done
echo "$CACHE/layout-12.txt"
echo "$CACHE/layout-13.txt"
exit $status
