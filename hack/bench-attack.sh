#!/usr/bin/env bash
# Attacks on the admission port of a real holdfast-webhook (127.0.0.1 only, bounded):
# many HTTP/2 streams of 3 MB, many HTTP/1.1 bodies, 1,000 idle connections, 2,000
# forged Event-writing reviews, 20,000 forged kcp logical clusters. Prints peak memory
# and whether legitimate reviews were still answered; figures go to docs/performance.md.
#
#   hack/bench-attack.sh                              # release build, every attack
#   HOLDFAST_BENCH_ATTACKS=idle,events hack/bench-attack.sh
source "$(dirname "$0")/lib.sh"
ulimit -n 8192 2>/dev/null || true
run_driver holdfast-bench-attack
