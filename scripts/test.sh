#!/usr/bin/env bash
# The test command: every Rust test of the workspace (unit, integration, live eBPF tests as root,
# the FACTS.json figures on testdata/ingero-dbs), then the tests driven by real external clients.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
bash scripts/install-test-deps.sh
# One style (rustfmt.toml): a formatting drift fails before anything is built.
cargo fmt --all -- --check
# The GPU acceptance run's own checks (its SQL and verdicts on synthetic traces of this schema):
# no GPU needed, and a schema change that breaks them shows here, not on a lent GPU machine.
python3 scripts/gpu-check/selftest.py
# Lints: every target of the workspace, warnings are errors (the DuckDB engine included).
# shellcheck disable=SC2086 # CAUSEWAY_DUCKDB_FEATURES (scripts/env.sh): the DuckDB install.sh chose
cargo clippy --release --locked --workspace --all-targets $CAUSEWAY_DUCKDB_FEATURES -- -D warnings
# The SQLite-only build (no DuckDB) must keep working: the engine conformance suite and the convert
# round-trips on it. The fleet crate is DuckDB (DuckLake) by nature and stays out of it. It shares
# the one target directory (the dependencies are built once; the workspace crates of each feature
# set are kept side by side) and runs first: the binary cargo leaves at target/release/causeway is
# the last one built, and the DuckDB one built next is the one install.sh put on PATH.
cargo test --release --locked --workspace --exclude causeway-fleet --no-default-features --test conformance --test convert
# shellcheck disable=SC2086
cargo test --release --locked --workspace $CAUSEWAY_DUCKDB_FEATURES
