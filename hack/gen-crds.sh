#!/usr/bin/env bash
# Regenerates manifests/crds/ from the Rust API types (holdfast_shared::api), and
# the Helm chart's copy in charts/holdfast/files/crds/.
# The test controller/tests/crds_drift.rs fails when the files are stale;
# test/e2e/tests/helm_chart.rs when the chart's copy differs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo run --quiet -p holdfast-controller --bin holdfast-controller -- crds --output-dir manifests/crds
rm -f charts/holdfast/files/crds/*.yaml
cp manifests/crds/holdfast.dev_*.yaml charts/holdfast/files/crds/
echo "manifests/crds and charts/holdfast/files/crds regenerated:" >&2
ls -1 manifests/crds >&2
