#!/usr/bin/env bash
# Replicas and failover under load (issue 34): tests/failover.rs in release with a
# bigger load. Two webhook replicas behind a round-robin front and two controllers
# electing a leader, as the manifests ship them, while a load generator deletes
# protected and unprotected ConfigMaps in rounds; one replica is killed and started
# again, then the leading controller is killed. Prints the figures (DELETEs,
# refusals by holdfast, refusals because a replica was unreachable, p50/p99 DELETE
# latency, failover time, wall time); fails if a protected object is deleted or an
# unprotected deletion never succeeds. Figures are recorded in docs/performance.md.
#
#   hack/bench-failover.sh                       # on the simulator
#   hack/bench-failover.sh --backend kube        # on a real kube-apiserver (hack/e2e-on-cluster.sh)
#   HOLDFAST_FAILOVER_OBJECTS=1000 HOLDFAST_FAILOVER_WORKERS=32 hack/bench-failover.sh
#
# Knobs: HOLDFAST_FAILOVER_OBJECTS (objects a round, half of them protected; 400),
# HOLDFAST_FAILOVER_WORKERS (DELETEs in flight; 16), HOLDFAST_FAILOVER_ROUNDS (full
# rounds after the new leader is ready; 2). The suite runs the same test with 40, 8
# and 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HOLDFAST_FAILOVER_OBJECTS="${HOLDFAST_FAILOVER_OBJECTS:-400}"
export HOLDFAST_FAILOVER_WORKERS="${HOLDFAST_FAILOVER_WORKERS:-16}"
export HOLDFAST_FAILOVER_ROUNDS="${HOLDFAST_FAILOVER_ROUNDS:-2}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "bench-failover: objects ${HOLDFAST_FAILOVER_OBJECTS} a round, ${HOLDFAST_FAILOVER_WORKERS} workers, ${HOLDFAST_FAILOVER_ROUNDS} rounds after the failover; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cargo build -q --release --locked --workspace --bins
status=0
if [ "${1:-}" = "--backend" ]; then
  hack/e2e-on-cluster.sh --backend "${2:?--backend needs sim or kube}" --release --locked \
    --test failover -- --nocapture >"$log" 2>&1 || status=$?
else
  cargo test -q --release --locked -p holdfast-e2e --test failover -- --nocapture \
    >"$log" 2>&1 || status=$?
fi
grep -E '^failover|test result|panicked' "$log" || true
if [ "$status" -ne 0 ]; then
  tail -50 "$log" >&2
fi
echo "bench-failover: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$status"
