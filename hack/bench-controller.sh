#!/usr/bin/env bash
# Benchmark of holdfast-controller on the sim's kcp model of two shards: all four
# kinds across 1,000 workspaces (10 DependencyRules per workspace, each protecting
# a resource of the next workspace's export, and a ResourceProtection, an
# AnchorRule and a CriticalService on each workspace's own types). Prints the time
# until every configuration is installed and every policy is Ready, and p50/p99 of
# single-change propagation (100 changes). Figures are recorded in
# docs/performance.md.
#
#   hack/bench-controller.sh            # release build (what docs/performance.md reports)
#   PROFILE=dev hack/bench-controller.sh
#   HOLDFAST_BENCH_WORKSPACES=100 hack/bench-controller.sh   # smaller
#   HOLDFAST_BENCH_WORKSPACES=2000 HOLDFAST_BENCH_SHARDS=4 hack/bench-controller.sh   # larger, 4 shards
#   HOLDFAST_BENCH_OTHER_KINDS=0 hack/bench-controller.sh    # DependencyRules only
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
profile="${PROFILE:-release}"
flag=()
if [ "$profile" = "release" ]; then flag=(--release); fi
cargo build "${flag[@]}" -p holdfast-controller --bin holdfast-controller
cargo test "${flag[@]}" -p holdfast-e2e --test controller_bench -- --ignored --nocapture
