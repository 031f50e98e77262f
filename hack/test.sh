#!/usr/bin/env bash
# Runs every test: unit, integration and end-to-end (real binaries with the real
# kubectl) on every backend, then the demo, which checks its own story and exits
# non-zero when any step does not hold. Installs missing prerequisites first and
# builds the real control planes the backends run (hack/substrates.sh: the first
# run builds them from their Go modules, later runs reuse the cache).
#
#   backends: sim   every test, on the API-server simulator (holdfast-sim)
#             kube  the end-to-end suite on a real etcd + kube-apiserver +
#                   kube-controller-manager v1.36 (hack/e2e-on-cluster.sh --backend kube)
#
# HOLDFAST_BACKENDS (default "sim kube") picks the backends.
# Benchmarks and scale checks (ignored tests) have their own runners: see
# docs/testing.md (hack/bench-*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
backends="${HOLDFAST_BACKENDS:-sim kube}"
step() { printf '\n== test.sh %s: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
hack/prereqs.sh
case " $backends " in
  *" kube "*) step "real control planes (hack/substrates.sh kube etcd)"; hack/substrates.sh kube etcd ;;
esac
# One kubectl for every backend: the built v1.36 when there is one.
if kube_bin="$(hack/substrates.sh --print-dir kube)" && [ -x "$kube_bin/kubectl" ]; then
  PATH="$kube_bin:$PATH"
  export PATH
fi
step "build"
cargo build --workspace --bins --locked
for b in $backends; do
  case "$b" in
    sim)
      step "backend sim: every test"
      cargo test --workspace --locked "$@"
      ;;
    kube)
      step "backend kube: the end-to-end suite on a real kube-apiserver"
      hack/e2e-on-cluster.sh --backend kube --locked "$@"
      ;;
    *) echo "test.sh: unknown backend $b (sim, kube)" >&2; exit 2 ;;
  esac
done
step "demo"
"${CARGO_TARGET_DIR:-target}/debug/holdfast-demo"
