#!/usr/bin/env bash
# Installs what holdfast's tests and demo need on a fresh machine: the Rust toolchain
# components (rustfmt, clippy) and the real kubectl. Safe to run again.
set -euo pipefail

need_root() {
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo "$@"; else "$@"; fi
}

if ! command -v cargo >/dev/null 2>&1; then
  echo "prereqs: cargo is missing; install a stable Rust toolchain (rustup) first" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^${component}"; then
    rustup component add "${component}" || echo "prereqs: could not add ${component}" >&2
  fi
done

if ! command -v kubectl >/dev/null 2>&1; then
  echo "prereqs: installing kubectl from the Debian package registry" >&2
  need_root apt-get update -qq
  need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "prereqs: kubectl is required (apt-get install kubectl) and could not be installed" >&2
  exit 1
fi
