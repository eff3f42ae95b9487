#!/usr/bin/env bash
# What the fleet needs beyond `install.sh`: PostgreSQL (the lake's catalog server; Debian package)
# and DuckDB 1.5.5's ducklake, postgres_scanner and sqlite_scanner extensions, taken from their
# PyPI wheels pinned by hash (scripts/fleet-extensions.txt) and checked again file by file below.
# They go to ~/.local/share/causeway/duckdb-extensions/v1.5.5/linux_amd64/ (or
# $CAUSEWAY_DUCKDB_EXTENSIONS), DuckDB's own layout; causeway loads them from there with DuckDB's
# signature check on and never downloads an extension itself.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "install-fleet.sh: installing postgresql" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi

dest=${CAUSEWAY_DUCKDB_EXTENSIONS:-$HOME/.local/share/causeway/duckdb-extensions}/v1.5.5/linux_amd64
# name in the wheel -> name DuckDB loads it by (its entry point), sha256 of the extension file
files=(
  "ducklake ducklake e51bf9e8d933d0e83780ae096455501b542cf962569a2ce5613532d702c08302"
  "postgres postgres_scanner b1ced4cfc6311313e117c2afb3eac76508718778dde0716421503c7dbfb5605c"
  "sqlite sqlite_scanner 693d2bf90779df23ca5ebe0688639b9adfc11c2d55ae3466b33e28be16afaa5e"
)
ok=1
for f in "${files[@]}"; do
  set -- $f
  [ "$(sha256sum "$dest/$2.duckdb_extension" 2>/dev/null | cut -d' ' -f1)" = "$3" ] || ok=0
done
if [ $ok = 1 ]; then
  echo "install-fleet.sh: DuckDB extensions present in $dest" >&2
  exit 0
fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --require-hashes -r scripts/fleet-extensions.txt -d "$tmp" >&2
mkdir -p "$dest"
for f in "${files[@]}"; do
  set -- $f
  whl=$(ls "$tmp"/duckdb_extension_"$1"-1.5.5-*.whl)
  python3 - "$whl" "$1" "$tmp/$2.duckdb_extension" <<'PY'
import sys, zipfile
whl, name, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = f"duckdb_extension_{name}/extensions/v1.5.5/{name}.duckdb_extension"
    with z.open(member) as src, open(out, "wb") as dst:
        dst.write(src.read())
PY
  got=$(sha256sum "$tmp/$2.duckdb_extension" | cut -d' ' -f1)
  if [ "$got" != "$3" ]; then
    echo "install-fleet.sh: $2.duckdb_extension has sha256 $got, expected $3: refusing it" >&2
    exit 1
  fi
  install -m 0644 "$tmp/$2.duckdb_extension" "$dest/$2.duckdb_extension"
done
echo "install-fleet.sh: DuckDB extensions installed in $dest" >&2
