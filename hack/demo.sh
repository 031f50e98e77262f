#!/usr/bin/env bash
# The holdfast demo (see README):
#   hack/demo.sh                          on the embedded API-server simulator
#   hack/demo.sh --kubeconfig FILE [--webhook-host ADDR]
#                                         the Kubernetes stories on your cluster:
#                                         holdfast runs here, the cluster's API server
#                                         calls the webhook at https://ADDR:PORT
#                                         (default ADDR 127.0.0.1); everything the
#                                         demo creates is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/prereqs.sh
cargo build --workspace --bins --locked -q
exec target/debug/holdfast-demo "$@"
