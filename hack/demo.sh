#!/usr/bin/env bash
# The holdfast demo (see README):
#   hack/demo.sh                          on the embedded API-server simulator
#   hack/demo.sh --backend kube           the Kubernetes stories on a real etcd +
#                                         kube-apiserver + kube-controller-manager v1.36
#                                         started here (built first by hack/substrates.sh)
#   hack/demo.sh --kubeconfig FILE [--webhook-host ADDR]
#                                         the Kubernetes stories on your cluster:
#                                         holdfast runs here, the cluster's API server
#                                         calls the webhook at https://ADDR:PORT
#                                         (default ADDR 127.0.0.1); everything the
#                                         demo creates is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/prereqs.sh
target="${CARGO_TARGET_DIR:-target}"
cargo build --workspace --bins --locked -q
if [ "${1:-}" != "--backend" ]; then
  exec "$target/debug/holdfast-demo" "$@"
fi
backend="${2:?--backend needs kube}"
shift 2
[ "$backend" = kube ] || { echo "demo: unknown backend $backend (kube)" >&2; exit 2; }
hack/substrates.sh kube etcd
PATH="$(hack/substrates.sh --print-dir kube):$PATH"
export PATH
dir="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$target/debug/holdfast-backend" kube "$dir/kube" >"$dir/out" 2>"$dir/err" &
pid=$!
for _ in $(seq 1 1800); do
  grep -q '^kubeconfig ' "$dir/out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "the kube backend exited: $(tail -20 "$dir/err")" >&2; exit 1; }
  sleep 0.1
done
kubeconfig="$(sed -n 's/^kubeconfig //p' "$dir/out")"
[ -n "$kubeconfig" ] || { echo "the kube backend did not start" >&2; exit 1; }
"$target/debug/holdfast-demo" --kubeconfig "$kubeconfig" "$@"
