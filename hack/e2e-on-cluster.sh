#!/usr/bin/env bash
# The end-to-end suite against a cluster: a real backend the harness starts, or a
# cluster given by kubeconfig, the way it runs on yours:
#
#   hack/e2e-on-cluster.sh --backend kube [CARGO TEST ARGS...]
#       a real etcd + kube-apiserver + kube-controller-manager v1.36, built by
#       hack/substrates.sh (built first if missing), on 127.0.0.1
#   hack/e2e-on-cluster.sh --backend sim [CARGO TEST ARGS...]
#       a separately started holdfast-sim (the default)
#   HOLDFAST_E2E_KUBECONFIG=FILE [HOLDFAST_E2E_WEBHOOK_HOST=ADDR] hack/e2e-on-cluster.sh
#       the cluster of FILE
#
# Kubernetes-topology tests run against that server (namespaces of their own,
# removed afterwards); tests that need the simulator itself print "skipped TEST:
# WHY" and pass. Ends with the tests that drove the cluster and those skipped, with
# why (recorded in docs/testing.md); every other test of the suite runs locally
# (rendering, flags, logs) or on a sim of its own (kcp).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
backend=sim
if [ "${1:-}" = "--backend" ]; then
  backend="${2:?--backend needs sim or kube}"
  shift 2
fi
target="${CARGO_TARGET_DIR:-target}"
cargo build --workspace --bins -q
dir="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
wait_line() { # FILE PATTERN WHAT
  for _ in $(seq 1 1800); do
    if grep -q "$2" "$1" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$3 exited: $(tail -30 "$dir/backend.err")" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$3 did not start" >&2
  exit 1
}
if [ -z "${HOLDFAST_E2E_KUBECONFIG:-}" ]; then
  case "$backend" in
    sim)
      "$target/debug/holdfast-sim" --listen 127.0.0.1:0 --kubeconfig-out "$dir/kubeconfig" \
        >"$dir/backend.out" 2>"$dir/backend.err" &
      pid=$!
      wait_line "$dir/backend.out" "listening on" holdfast-sim
      export HOLDFAST_E2E_KUBECONFIG="$dir/kubeconfig"
      ;;
    kube)
      hack/substrates.sh kube etcd
      # The kubectl of the same version as the API server.
      PATH="$(hack/substrates.sh --print-dir kube):$PATH"
      export PATH
      "$target/debug/holdfast-backend" kube "$dir/kube" \
        >"$dir/backend.out" 2>"$dir/backend.err" &
      pid=$!
      wait_line "$dir/backend.out" "^kubeconfig " "the kube backend"
      HOLDFAST_E2E_KUBECONFIG="$(sed -n 's/^kubeconfig //p' "$dir/backend.out")"
      export HOLDFAST_E2E_KUBECONFIG
      ;;
    *) echo "unknown backend $backend (sim, kube)" >&2; exit 2 ;;
  esac
  echo "backend $backend: HOLDFAST_E2E_KUBECONFIG=$HOLDFAST_E2E_KUBECONFIG" >&2
fi
status=0
export HOLDFAST_E2E_RECORD="$dir/record"
: >"$HOLDFAST_E2E_RECORD"
cargo test -p holdfast-e2e "$@" || status=$?
echo
echo "== ran against the cluster ($backend)"
sed -n 's/^on-cluster //p' "$HOLDFAST_E2E_RECORD" | sort -u
echo "== skipped: they need the simulator"
sed -n 's/^skipped \([^:]*\): \(.*\); it runs on the simulator only.*/\1: \2/p' "$HOLDFAST_E2E_RECORD" | sort
exit "$status"
