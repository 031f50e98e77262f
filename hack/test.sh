#!/usr/bin/env bash
# Runs every test: unit, integration and end-to-end (real binaries against the
# simulator with the real kubectl), then the demo, which checks its own story and
# exits non-zero when any step does not hold. Installs missing prerequisites first.
# Benchmarks and scale checks (ignored tests) have their own runners: see
# docs/testing.md (hack/bench-*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/prereqs.sh
cargo build --workspace --bins --locked
cargo test --workspace --locked "$@"
"${CARGO_TARGET_DIR:-target}/debug/holdfast-demo"
