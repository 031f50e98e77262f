#!/usr/bin/env bash
# Scale check of holdfast-sim (the ignored test in test/sim/tests/perf.rs): 20,000
# objects created, listed by selector and in full. Prints the times; fails if an
# operation errs. Run in release mode by default.
#
#   hack/bench-sim.sh              # release build
#   PROFILE=dev hack/bench-sim.sh
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
flag=()
if [ "$profile" = "release" ]; then flag=(--release); fi
cargo test "${flag[@]}" -p holdfast-sim --test perf -- --ignored --nocapture
