#!/usr/bin/env bash
# Benchmark of holdfast-webhook at fleet size on the sim's kcp model: the fleet of
# hack/bench-controller.sh (10,000 workspaces over 4 shards, each binding holdfast.dev
# with 10 DependencyRules, a ResourceProtection, an AnchorRule and a CriticalService:
# 130,000 policies) plus 1,000,000 VirtualMachines (dependents of the compute
# provider's export, 100 per workspace) referencing VPCs of the network provider.
# Starts the release holdfast-webhook (--topology kcp --dependents watch, as the
# shipped holdfast-webhook identity) and prints the fleet's setup time, the webhook's
# time to ready with its index full, its VmRSS/VmHWM, the simulator's RSS, and the
# p50/p99/max of DELETE reviews posted to it (refused from the index when a
# VirtualMachine references the VPC, allowed otherwise). See docs/performance.md.
#
#   hack/bench-fleet-webhook.sh        # full size, release build
#   HOLDFAST_BENCH_WORKSPACES=100 HOLDFAST_BENCH_SHARDS=2 HOLDFAST_BENCH_DEPENDENTS=10000 \
#     hack/bench-fleet-webhook.sh      # small
#   HOLDFAST_BENCH_WORKSPACES=2000 HOLDFAST_BENCH_DEPENDENTS=200000 hack/bench-fleet-webhook.sh
#   HOLDFAST_BENCH_REVIEWS=10000 ...   # more reviews (default 4,000)
#   PROFILE=dev hack/bench-fleet-webhook.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
profile="${PROFILE:-release}"
flag=()
if [ "$profile" = "release" ]; then flag=(--release); fi
cargo build "${flag[@]}" -p holdfast-webhook --bin holdfast-webhook
cargo test "${flag[@]}" -p holdfast-e2e --test webhook_fleet_bench --no-run
cargo test "${flag[@]}" -p holdfast-e2e --test webhook_fleet_bench -- --ignored --nocapture
