#!/usr/bin/env bash
# Test dependencies of the probes crate: the real libcudart.so.12 (PyPI wheel nvidia-cuda-runtime-cu12)
# in a virtualenv at $HOME/.cache/causeway/venv, used by probes/tests/real_libcudart.rs through ctypes.
# System packages (installed by the CI's system setup): clang llvm libbpf-dev bpftool bpftrace make gcc.
set -euo pipefail
VENV="${CAUSEWAY_VENV:-$HOME/.cache/causeway/venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet "nvidia-cuda-runtime-cu12>=12,<13"
"$VENV/bin/python" - <<'PY'
import glob, os, sys
libs = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cuda_runtime", "lib", "libcudart.so.12"))
assert libs, "libcudart.so.12 not found in the venv"
print("libcudart:", libs[0])
PY
