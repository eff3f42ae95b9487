#!/usr/bin/env bash
# The official DuckDB 1.5.5 C library (libduckdb.so: the C API with parquet and json built in), so
# that no build compiles DuckDB's C++ (about 35 minutes cold on two cores). It is taken from the npm
# registry's @duckdb/node-bindings-linux-x64 package, pinned by the hash of the package and of the
# library, into $CARGO_TARGET_DIR/libduckdb/ (scripts/env.sh then points DUCKDB_LIB_DIR at it, and
# every binary finds it through the rpath in .cargo/config.toml). Exits non-zero, saying why, when
# the library cannot be had: install.sh then builds the bundled DuckDB instead.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

package="@duckdb/node-bindings-linux-x64@1.5.5-r.5"
package_sha256=86d2bda909785550e8a14a57a8a4584827aff0e268d8f1a58c3fd48559f7020e
lib_sha256=fc23f12e376c47be520f75221288281906e7942e8fd6f6ce4849198ba60d0405
dest="$CARGO_TARGET_DIR/libduckdb"

if [ "$(uname -sm)" != "Linux x86_64" ]; then
  echo "duckdb-lib.sh: the prebuilt library is for Linux x86_64, this is $(uname -sm)" >&2
  exit 1
fi
if [ "$(sha256sum "$dest/libduckdb.so" 2>/dev/null | cut -d' ' -f1)" = "$lib_sha256" ]; then
  echo "duckdb-lib.sh: libduckdb.so (DuckDB 1.5.5) present in $dest" >&2
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "duckdb-lib.sh: npm is not installed, so $package cannot be fetched" >&2
  exit 1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && npm pack --silent --loglevel=error "$package" >/dev/null); then
  echo "duckdb-lib.sh: npm could not fetch $package" >&2
  exit 1
fi
tgz=$(ls "$tmp"/*.tgz)
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ "$got" != "$package_sha256" ]; then
  echo "duckdb-lib.sh: $package has sha256 $got, expected $package_sha256: refusing it" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$tmp" package/libduckdb.so
got=$(sha256sum "$tmp/package/libduckdb.so" | cut -d' ' -f1)
if [ "$got" != "$lib_sha256" ]; then
  echo "duckdb-lib.sh: libduckdb.so has sha256 $got, expected $lib_sha256: refusing it" >&2
  exit 1
fi
mkdir -p "$dest"
install -m 0755 "$tmp/package/libduckdb.so" "$dest/libduckdb.so.tmp"
mv -f "$dest/libduckdb.so.tmp" "$dest/libduckdb.so"
echo "duckdb-lib.sh: libduckdb.so (DuckDB 1.5.5, $package) installed in $dest" >&2
