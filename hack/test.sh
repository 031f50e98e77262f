#!/usr/bin/env bash
# Runs every test: unit, integration and end-to-end (real binaries with the real
# kubectl) on every backend, then the demo, which checks its own story and exits
# non-zero when any step does not hold. Installs missing prerequisites first and
# builds the real control planes the backends run (hack/substrates.sh: the first
# run builds them from their Go modules, later runs reuse the cache).
#
#   backends: sim   every test, on the API-server simulator (holdfast-sim), and the
#                   tests that start a real kube, Karmada or kcp of their own
#             kube  the end-to-end suite on a real etcd + kube-apiserver +
#                   kube-controller-manager v1.36 (hack/e2e-on-cluster.sh --backend kube)
#             kcp   the kcp end-to-end files that run on the two-shard topology
#                   (kcp_sharded) again on a real kcp: two shards, front-proxy,
#                   cache server (HOLDFAST_E2E_KCP=real; one kcp at a time)
#
# HOLDFAST_BACKENDS (default "sim kube kcp") picks the backends.
# Benchmarks and scale checks (ignored tests) have their own runners: see
# docs/testing.md (hack/bench-*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
backends="${HOLDFAST_BACKENDS:-sim kube kcp}"
# The end-to-end files whose tests drive the cluster they are given (the others run
# locally or start a backend of their own, and ran in the sim pass already).
kube_files=(alerts backstop blast_radius cascading controller_kubernetes deferred
  dependency_kubernetes dry_run failover faults hardening karmada_overlay label_protection
  least_privilege plugin protections refused_configuration security seeds
  seeds_remote self_protection settings shipped_rbac helm_lifecycle)
# The kcp end-to-end files whose topology (kcp_sharded) also runs on a real kcp,
# each test on a kcp of its own (started from the saved state of a fresh kcp,
# about 10 s); HOLDFAST_KCP_FILES replaces the list. docs/testing.md says why each
# other kcp file stays on the simulator.
read -r -a kcp_files <<< "${HOLDFAST_KCP_FILES:-kcp_shards kcp_webhook kcp_identity kcp_lifecycle dependency_kcp controller_kcp_kinds controller_kcp}"
step() { printf '\n== test.sh %s: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
hack/prereqs.sh
# Every backend's control planes: the kube pass runs on kube-apiserver, and the sim
# pass holds the tests that start a real backend of their own (parity_kube,
# karmada_backend, kcp_real, kcp_real_workspaces). A cold build takes about 30 minutes on 2 cores.
step "real control planes (hack/substrates.sh)"
hack/substrates.sh
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
      hack/e2e-on-cluster.sh --backend kube --locked --no-fail-fast \
        $(printf -- '--test %s ' "${kube_files[@]}") "$@"
      step "backend kube: the demo's Kubernetes stories on a real kube-apiserver"
      hack/demo.sh --backend kube
      ;;
    kcp)
      step "backend kcp: the two-shard kcp files on a real kcp"
      HOLDFAST_E2E_KCP=real cargo test -p holdfast-e2e --locked --no-fail-fast \
        $(printf -- '--test %s ' "${kcp_files[@]}") "$@" -- --test-threads=1
      ;;
    *) echo "test.sh: unknown backend $b (sim, kube, kcp)" >&2; exit 2 ;;
  esac
done
step "demo"
"${CARGO_TARGET_DIR:-target}/debug/holdfast-demo"
