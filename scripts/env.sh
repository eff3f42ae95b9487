# Sourced by every script: one target directory outside the clone, reused by CI and by later builds,
# and which DuckDB the build links.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/causeway/target}"
export PATH="$HOME/.cargo/bin:$PATH"
# CAUSEWAY_DUCKDB=prebuilt (the default) links the official libduckdb.so that scripts/duckdb-lib.sh
# put in $CARGO_TARGET_DIR/libduckdb (found at run time through the rpath in .cargo/config.toml);
# CAUSEWAY_DUCKDB=bundled, or a machine without that library, compiles DuckDB's C++ instead.
# CAUSEWAY_DUCKDB_FEATURES is what a cargo command of the DuckDB build adds for that choice.
if [ "${CAUSEWAY_DUCKDB:-prebuilt}" != bundled ] && [ -f "$CARGO_TARGET_DIR/libduckdb/libduckdb.so" ]; then
  export DUCKDB_LIB_DIR="$CARGO_TARGET_DIR/libduckdb"
  CAUSEWAY_DUCKDB_FEATURES=""
else
  unset DUCKDB_LIB_DIR
  CAUSEWAY_DUCKDB_FEATURES="--features causeway-backends/duckdb-bundled"
fi
