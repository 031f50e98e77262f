#!/usr/bin/env bash
# Builds the real control planes the e2e backends run, and promtool (which checks and
# unit-tests the alerting rules), from their Go modules, pinned, into a version-keyed
# cache outside the work tree. Idempotent: a component whose
# stamp matches its wrapper module (go.mod + go.sum) is not rebuilt.
#
#   hack/substrates.sh [kube|etcd|kcp|karmada|prometheus|helm|all]...   (default: all)
#   hack/substrates.sh --print-dir                       where the binaries are
#
# Each wrapper module lives in hack/substrates/<name>/ (go.mod, go.sum, tools.go);
# binaries land in $HOLDFAST_SUBSTRATES/<name>-<pin>/bin. One Go build cache is shared
# by every component (GOCACHE, default ~/.cache/go-build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${HOLDFAST_SUBSTRATES:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast/substrates}"

# The pins. Changing one rebuilds that component (its wrapper's go.mod changes too).
KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
KCP_VERSION=v0.31.2
KARMADA_VERSION=v1.18.2
# Prometheus v3.16.0: its Go module's tags are v0.<major*100+minor>.<patch>.
PROMETHEUS_VERSION=v0.316.0
HELM_VERSION=v4.3.1

log() { printf '[substrates %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

dir_of() {
  case "$1" in
    kube) echo "$root/kube-$KUBE_VERSION" ;;
    etcd) echo "$root/etcd-$ETCD_VERSION" ;;
    kcp) echo "$root/kcp-$KCP_VERSION" ;;
    karmada) echo "$root/karmada-$KARMADA_VERSION" ;;
    prometheus) echo "$root/prometheus-$PROMETHEUS_VERSION" ;;
    helm) echo "$root/helm-$HELM_VERSION" ;;
    *) echo "unknown component $1" >&2; return 2 ;;
  esac
}

# Packages each component builds (only what the e2e backends start).
pkgs_of() {
  case "$1" in
    kube) echo "k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl" ;;
    etcd) echo "go.etcd.io/etcd/server/v3" ;;
    kcp) echo "github.com/kcp-dev/kcp/cmd/kcp github.com/kcp-dev/kcp/cmd/kcp-front-proxy github.com/kcp-dev/kcp/cmd/cache-server github.com/kcp-dev/kcp/cmd/sharded-test-server" ;;
    karmada) echo "github.com/karmada-io/karmada/cmd/webhook github.com/karmada-io/karmada/cmd/controller-manager github.com/karmada-io/karmada/cmd/aggregated-apiserver github.com/karmada-io/karmada/cmd/scheduler" ;;
    # promtool only: the module is large, the server is not needed.
    prometheus) echo "github.com/prometheus/prometheus/cmd/promtool" ;;
    helm) echo "helm.sh/helm/v4/cmd/helm" ;;
  esac
}

ldflags_of() {
  case "$1" in
    kube)
      local v=$KUBE_VERSION minor
      minor="${v#v1.}"; minor="${minor%%.*}"
      local f="-s -w"
      for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        f="$f -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
      done
      echo "$f" ;;
    kcp)
      # As kcp's own build stamps it: the Kubernetes version of its fork, then its tag.
      local f="-s -w"
      for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        f="$f -X $p.gitVersion=v1.35.1+kcp-$KCP_VERSION -X $p.gitMajor=1 -X $p.gitMinor=35 -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
      done
      echo "$f" ;;
    karmada)
      local p=github.com/karmada-io/karmada/pkg/version
      echo "-s -w -X $p.gitVersion=$KARMADA_VERSION -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z" ;;
    prometheus)
      local v="${PROMETHEUS_VERSION#v0.}" p=github.com/prometheus/common/version
      # v0.316.0 is release 3.16.0.
      v="$(( ${v%%.*} / 100 )).$(( ${v%%.*} % 100 )).${v#*.}"
      echo "-s -w -X $p.Version=$v -X $p.Branch=HEAD -X $p.BuildDate=19700101-00:00:00" ;;
    helm)
      # As Helm's own Makefile stamps it (`helm version`).
      local p=helm.sh/helm/v4/internal/version
      echo "-s -w -X $p.version=$HELM_VERSION -X $p.gitTreeState=clean" ;;
    *) echo "-s -w" ;;
  esac
}

# The stamp covers what decides the binaries: the wrapper module, the packages, the link flags.
stamp_of() {
  { cat "$here/substrates/$1/go.mod" "$here/substrates/$1/go.sum"; pkgs_of "$1"; ldflags_of "$1"; } |
    sha256sum | cut -c1-16
}

build() {
  local name="$1" out stamp start
  out="$(dir_of "$name")"
  stamp="$(stamp_of "$name")"
  if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
    log "$name: up to date in $out/bin"
    return 0
  fi
  start=$(date +%s)
  log "$name: building $(pkgs_of "$name" | wc -w) binaries into $out/bin (a cold build takes minutes)"
  mkdir -p "$out/bin"
  # -mod=readonly: the committed go.sum is the pin; GOFLAGS from the caller are ignored.
  (cd "$here/substrates/$name" && GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -ldflags "$(ldflags_of "$name")" -o "$out/bin/" $(pkgs_of "$name"))
  # `go build` names a major-version module path after its parent (`server`).
  if [ "$name" = etcd ] && [ -f "$out/bin/server" ]; then mv "$out/bin/server" "$out/bin/etcd"; fi
  # Karmada's commands are cmd/<name>; name them karmada-<name> as Karmada does.
  if [ "$name" = karmada ]; then
    for b in controller-manager webhook aggregated-apiserver scheduler; do
      if [ -f "$out/bin/$b" ]; then mv "$out/bin/$b" "$out/bin/karmada-$b"; fi
    done
  fi
  echo "$stamp" > "$out/.stamp"
  log "$name: built in $(( $(date +%s) - start )) s: $(ls "$out/bin" | tr '\n' ' ')"
}

if [ "${1:-}" = "--print-dir" ]; then
  shift
  for c in "${@:-kube}"; do echo "$(dir_of "$c")/bin"; done
  exit 0
fi
command -v go >/dev/null || { echo "substrates: Go is required (go version)" >&2; exit 1; }
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(all)
for c in "${want[@]}"; do
  case "$c" in
    all) for x in etcd kube karmada kcp prometheus helm; do build "$x"; done ;;
    *) build "$c" ;;
  esac
done
log "disk: $(df -h "$root" | awk 'NR==2{print $4" free"}'), go build cache $(du -sh "$(go env GOCACHE)" 2>/dev/null | cut -f1)"
