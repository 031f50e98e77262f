#!/usr/bin/env bash
# The end-to-end suite against a cluster given by kubeconfig, the way it runs on
# yours, exercised here against a separately started holdfast-sim:
#
#   hack/e2e-on-cluster.sh [CARGO TEST ARGS...]     # e.g. --test label_protection
#   HOLDFAST_E2E_KUBECONFIG=FILE [HOLDFAST_E2E_WEBHOOK_HOST=ADDR] hack/e2e-on-cluster.sh
#
# Without HOLDFAST_E2E_KUBECONFIG it starts target/debug/holdfast-sim on a free
# port, points HOLDFAST_E2E_KUBECONFIG at its admin kubeconfig and stops it at
# the end. Kubernetes-topology tests then run against that server (namespaces of
# their own, removed afterwards); tests that need the simulator itself print
# "skipped TEST: WHY" and pass. Ends with the tests that drove the cluster and
# those skipped, with why (recorded in docs/testing.md); every other test of the
# suite runs locally (rendering, flags, logs) or on a sim of its own (kcp).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --workspace --bins -q
dir="$(mktemp -d)"
sim_pid=""
cleanup() {
  if [ -n "$sim_pid" ]; then
    kill "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
if [ -z "${HOLDFAST_E2E_KUBECONFIG:-}" ]; then
  "$target/debug/holdfast-sim" --listen 127.0.0.1:0 --kubeconfig-out "$dir/kubeconfig" \
    >"$dir/sim.out" 2>"$dir/sim.err" &
  sim_pid=$!
  for _ in $(seq 1 300); do
    if grep -q "listening on" "$dir/sim.out" 2>/dev/null; then break; fi
    if ! kill -0 "$sim_pid" 2>/dev/null; then
      echo "holdfast-sim exited: $(cat "$dir/sim.err")" >&2
      exit 1
    fi
    sleep 0.1
  done
  grep -q "listening on" "$dir/sim.out" || { echo "holdfast-sim did not start" >&2; exit 1; }
  echo "$(cat "$dir/sim.out"); HOLDFAST_E2E_KUBECONFIG=$dir/kubeconfig" >&2
  export HOLDFAST_E2E_KUBECONFIG="$dir/kubeconfig"
fi
status=0
export HOLDFAST_E2E_RECORD="$dir/record"
: >"$HOLDFAST_E2E_RECORD"
cargo test -p holdfast-e2e "$@" || status=$?
echo
echo "== ran against the cluster ($HOLDFAST_E2E_KUBECONFIG)"
sed -n 's/^on-cluster //p' "$HOLDFAST_E2E_RECORD" | sort -u
echo "== skipped: they need the simulator"
sed -n 's/^skipped \([^:]*\): \(.*\); it runs on the simulator only.*/\1: \2/p' "$HOLDFAST_E2E_RECORD" | sort
exit "$status"
