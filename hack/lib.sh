# Sourced by the hack/ benchmark scripts: builds the webhook and the e2e drivers with
# $PROFILE (release by default) and runs one driver binary.
#
#   run_driver holdfast-bench-admission
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile="${PROFILE:-release}"
build_flags=()
profile_dir=debug
if [ "$profile" = "release" ]; then build_flags=(--release); profile_dir=release; fi

run_driver() {
  cargo build "${build_flags[@]}" -q -p holdfast-webhook -p holdfast-e2e --bins
  "${CARGO_TARGET_DIR:-target}/$profile_dir/$1"
}
