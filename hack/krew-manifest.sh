#!/usr/bin/env bash
# Packages the kubectl plugin for krew: the archive of this machine's platform and the
# plugin manifest naming where the archives are published, with each archive's
# sha256. Run once per platform on a release (each run adds its platform's entry to
# the manifest in OUT_DIR).
#
#   hack/krew-manifest.sh OUT_DIR BASE_URL [BINARY]
#
# BINARY defaults to a release build of the plugin's crate by itself (cargo build
# --release -p holdfast-plugin), which links none of the webhook's server.
# The version is the workspace's (Cargo.toml), as v<version>.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: hack/krew-manifest.sh OUT_DIR BASE_URL [BINARY]}"
base="${2:?usage: hack/krew-manifest.sh OUT_DIR BASE_URL [BINARY]}"
bin="${3:-}"
version="v$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
[ "$version" != "v" ] || { echo "krew-manifest: no version in Cargo.toml" >&2; exit 2; }
if [ -z "$bin" ]; then
  cargo build --release --locked -p holdfast-plugin --bin kubectl-holdfast
  bin="${CARGO_TARGET_DIR:-target}/release/kubectl-holdfast"
fi
[ -x "$bin" ] || { echo "krew-manifest: $bin is not an executable" >&2; exit 2; }
case "$(uname -s)" in
  Linux) os=linux ;; Darwin) os=darwin ;;
  *) echo "krew-manifest: unsupported OS $(uname -s)" >&2; exit 2 ;;
esac
case "$(uname -m)" in
  x86_64|amd64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;;
  *) echo "krew-manifest: unsupported architecture $(uname -m)" >&2; exit 2 ;;
esac
mkdir -p "$out"
archive="kubectl-holdfast_${version}_${os}_${arch}.tar.gz"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/kubectl-holdfast"
# Reproducible: fixed owner, mode and time.
tar --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=0755 -C "$stage" \
  -cf - kubectl-holdfast | gzip -n > "$out/$archive"
sum="$(sha256sum "$out/$archive" | cut -d' ' -f1)"
entry="$out/.platform-$os-$arch.yaml"
cat > "$entry" <<ENTRY
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: ${base%/}/$archive
    sha256: $sum
    files:
    - from: kubectl-holdfast
      to: .
    bin: kubectl-holdfast
ENTRY
{
  cat <<HEAD
apiVersion: krew.googlecontainertools.github.io/v1alpha2
kind: Plugin
metadata:
  name: holdfast
spec:
  version: $version
  homepage: ${base%/}
  shortDescription: Why a DELETE would be refused, and the posture of holdfast
  description: |
    kubectl holdfast why KIND NAME judges a DELETE as holdfast's admission webhook
    would, with your credentials: every protection that concerns the object, every
    blocker, break-glass and the ways out. kubectl holdfast check reads the
    installation: the webhook configuration, the webhook, policies not Ready, what
    nothing protects, the backstop; on kcp, whether the workspace binds holdfast and
    accepted its claims.
  platforms:
HEAD
  cat "$out"/.platform-*.yaml
} > "$out/holdfast.yaml"
echo "$out/holdfast.yaml ($os/$arch: $archive)"
