#!/usr/bin/env bash
# Re-makes docs/demo-chain.png, the README's picture of the demo's chain: the report's own SVG
# (`causeway explain --svg` on the bundled cpu-contention investigation) as headless chromium
# draws it. Needs `causeway` on PATH (scripts/install.sh) and chromium (scripts/install-test-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
causeway explain --db investigations/cpu-contention/trace.db --svg "$work/chain.svg" >/dev/null
# the picture's own size, from its root element
width=$(grep -o '<svg[^>]*' "$work/chain.svg" | grep -o ' width="[0-9.]*"' | head -1 | tr -dc '0-9.')
height=$(grep -o '<svg[^>]*' "$work/chain.svg" | grep -o ' height="[0-9.]*"' | head -1 | tr -dc '0-9.')
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$work/profile" --window-size="${width%.*},${height%.*}" \
  --screenshot="$PWD/docs/demo-chain.png" "file://$work/chain.svg" 2>/dev/null
echo "wrote docs/demo-chain.png (${width%.*}x${height%.*})"
