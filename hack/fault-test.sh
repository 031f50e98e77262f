#!/usr/bin/env bash
# Fault test: continuous deletion attempts of protected and unprotected objects while
# the webhook restarts, the controller restarts, the API server (simulator) restarts
# and the serving certificate rotates, HOLDFAST_FAULT_ROUNDS times (default 5). Prints
# the counts; fails if a protected object is lost or an unprotected deletion never
# succeeds. The test suite runs the same test with one round.
#
#   hack/fault-test.sh
#   HOLDFAST_FAULT_ROUNDS=20 hack/fault-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HOLDFAST_FAULT_ROUNDS="${HOLDFAST_FAULT_ROUNDS:-5}"
cargo build -q --workspace --bins --locked
cargo test -q -p holdfast-e2e --test faults --locked -- --nocapture 2>&1 | grep -E 'fault test|test result|panicked|assert'
