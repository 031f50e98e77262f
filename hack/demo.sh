#!/usr/bin/env bash
# The holdfast demo on the embedded API-server simulator (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/prereqs.sh
cargo build --workspace --bins --locked -q
exec target/debug/holdfast-demo "$@"
