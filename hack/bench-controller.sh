#!/usr/bin/env bash
# Benchmark of holdfast-controller on the sim's kcp model: 10,000 DependencyRules
# across 1,000 provider workspaces (10 per workspace, each protecting a resource
# of the next workspace). Prints the time until every configuration is installed
# and every rule is Ready, and p50/p99 of single-change propagation (100 changes).
# Figures are recorded in docs/performance.md.
#
#   hack/bench-controller.sh            # release build (what docs/performance.md reports)
#   PROFILE=dev hack/bench-controller.sh
#   HOLDFAST_BENCH_WORKSPACES=100 hack/bench-controller.sh   # smaller
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
profile="${PROFILE:-release}"
flag=()
if [ "$profile" = "release" ]; then flag=(--release); fi
cargo build "${flag[@]}" -p holdfast-controller --bin holdfast-controller
cargo test "${flag[@]}" -p holdfast-e2e --test controller_bench -- --ignored --nocapture
