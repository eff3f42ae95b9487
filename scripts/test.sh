#!/usr/bin/env bash
# The test command: every Rust test of the workspace (unit, integration, live eBPF tests as root,
# the FACTS.json figures on ../shared/ingero-dbs), then the tests driven by real external clients.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
bash scripts/install-test-deps.sh
cargo test --release --locked --workspace
