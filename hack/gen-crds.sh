#!/usr/bin/env bash
# Regenerates manifests/crds/ from the Rust API types (holdfast_shared::api).
# The test controller/tests/crds_drift.rs fails when the files are stale.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo run --quiet -p holdfast-controller --bin holdfast-controller -- crds --output-dir manifests/crds
echo "manifests/crds regenerated:" >&2
ls -1 manifests/crds >&2
