#!/usr/bin/env bash
# Runs every test: unit, integration and end-to-end (real binaries against the
# simulator with the real kubectl). Installs missing prerequisites first.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/prereqs.sh
cargo build --workspace --bins --locked
cargo test --workspace --locked "$@"
