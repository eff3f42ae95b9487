#!/usr/bin/env bash
# Installs what a fresh machine of this kind lacks (Debian packages: clang/llvm/libbpf for the BPF
# programs, bpftool, bpftrace for the baseline benchmark, sqlite3 for the reference benchmark, gdb
# for the test that reads the CPython tables back from the interpreters' DWARF), builds
# `causeway` with the one release profile into a target directory outside the clone
# (~/.cache/causeway/target, reused by CI), and puts the binary on PATH (~/.cargo/bin).
# DuckDB is linked, not compiled: scripts/duckdb-lib.sh fetches the official libduckdb.so (pinned by
# hash). Where it cannot be had, or with CAUSEWAY_DUCKDB=bundled, DuckDB's C++ is compiled instead.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

packages=(clang llvm libbpf-dev bpftool bpftrace sqlite3 make gcc python3-venv gdb)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install.sh: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${CAUSEWAY_DUCKDB:-prebuilt}" != bundled ] && ! bash scripts/duckdb-lib.sh; then
  echo "install.sh: no prebuilt libduckdb.so: compiling DuckDB's C++ instead (about 35 more minutes on 2 cores)" >&2
fi
. scripts/env.sh
if [ -n "$CAUSEWAY_DUCKDB_FEATURES" ]; then
  echo "install.sh: building causeway (release, bundled DuckDB: about 45 minutes cold on 2 cores)" >&2
else
  echo "install.sh: building causeway (release, linked to $DUCKDB_LIB_DIR/libduckdb.so: about 7 minutes cold on 2 cores)" >&2
fi
# the binary, and beside it the injection library `trace --gpu-timeline` has the CUDA driver load
# shellcheck disable=SC2086 # the features are words
cargo build --release --locked -p causeway -p causeway-inject $CAUSEWAY_DUCKDB_FEATURES
mkdir -p "$HOME/.cargo/bin"
ln -sf "$CARGO_TARGET_DIR/release/causeway" "$HOME/.cargo/bin/causeway"
echo "install.sh: causeway is at $HOME/.cargo/bin/causeway" >&2
