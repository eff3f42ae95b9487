# Sourced by every script: one target directory outside the clone, reused by CI and by later builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/causeway/target}"
export PATH="$HOME/.cargo/bin:$PATH"
