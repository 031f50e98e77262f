#!/usr/bin/env bash
# Benchmark of holdfast-controller on the sim's kcp model of two shards (or on a
# real kcp, below): all four kinds across 1,000 workspaces (10 DependencyRules per
# workspace, each protecting a resource of the next workspace's export, and a
# ResourceProtection, an AnchorRule and a CriticalService on each workspace's own
# types). Prints the time until every configuration is installed and every policy
# is Ready, p50/p99 of single-change propagation (100 changes) and the
# controller's peak RSS. Figures are recorded in docs/performance.md.
#
#   hack/bench-controller.sh            # release build (what docs/performance.md reports)
#   PROFILE=dev hack/bench-controller.sh
#   HOLDFAST_BENCH_WORKSPACES=100 hack/bench-controller.sh   # smaller
#   HOLDFAST_BENCH_WORKSPACES=2000 HOLDFAST_BENCH_SHARDS=4 hack/bench-controller.sh   # larger, 4 shards
#   HOLDFAST_BENCH_OTHER_KINDS=0 hack/bench-controller.sh    # DependencyRules only
#   HOLDFAST_BENCH_CONTROLLER_HEAPTRACK=/tmp/ctl hack/bench-controller.sh   # heaptrack attached
#     to the controller: /tmp/ctl.zst, read with heaptrack_print (timings do not compare)
#     (heaptrack sees the system allocator only: build with the #[global_allocator] line of
#     controller/src/main.rs commented out)
#   HOLDFAST_BENCH_CONTROLLER_LOG=/tmp/ctl.log hack/bench-controller.sh   # the controller's log kept
#
# On a real kcp (two shards, front-proxy, cache server; built by hack/substrates.sh,
# about 11 minutes cold on 2 cores, then only checked): the same fleet, installed as
# docs/kcp.md says, the controller running as the shipped identity
# holdfast-controller; workspaces alternate between the two shards, 300 by default
# (setting them up takes about 9 minutes on 2 cores; the run about 12).
# kcp's ports are fixed: one real kcp runs on a machine at a time (the harness waits
# for another).
#
#   HOLDFAST_E2E_KCP=real hack/bench-controller.sh
#   HOLDFAST_E2E_KCP=real HOLDFAST_BENCH_WORKSPACES=20 hack/bench-controller.sh   # smaller (2 minutes)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
profile="${PROFILE:-release}"
flag=()
if [ "$profile" = "release" ]; then flag=(--release); fi
if [ "${HOLDFAST_E2E_KCP:-}" = "real" ]; then
  # kcp, and the kubectl of the kube substrate (the harness's kubectl runs).
  hack/substrates.sh kcp kube
  PATH="$(hack/substrates.sh --print-dir kube):$PATH"
  export PATH
fi
cargo build "${flag[@]}" -p holdfast-controller --bin holdfast-controller
cargo test "${flag[@]}" -p holdfast-e2e --test controller_bench -- --ignored --nocapture
