#!/usr/bin/env bash
# Dependents benchmark: p50/p99 of the webhook's decision over HTTPS for
# `--dependents watch` and `--dependents live` with 10, 1,000 and 10,000 dependents
# in the namespace, then the index memory per reference with 1,000,000 references
# across 1,000 logical clusters. Figures are recorded in docs/performance.md.
#
#   hack/bench-dependents.sh                      # release build
#   PROFILE=dev hack/bench-dependents.sh
#   HOLDFAST_BENCH_SIZES=10,100 HOLDFAST_BENCH_SAMPLES=50 hack/bench-dependents.sh
source "$(dirname "$0")/lib.sh"
run_driver holdfast-bench-dependents
run_driver holdfast-bench-index-memory
# A real webhook's resident memory with HOLDFAST_BENCH_REFERENCES (1,000,000) indexed
# references; skip with HOLDFAST_BENCH_SKIP_RSS=1 (it creates that many objects).
if [ -z "${HOLDFAST_BENCH_SKIP_RSS:-}" ]; then
  run_driver holdfast-bench-webhook-rss
fi
