#!/usr/bin/env bash
# Admission throughput and p99: holdfast-webhook against a bare hyper + rustls server
# (built here for the purpose) in one run, HTTP/1.1 and HTTP/2, allowed and denied
# reviews recorded from kube-apiserver, with an empty and a loaded registry (1,000
# ResourceProtections + 10,000 DependencyRules). Figures go to docs/performance.md.
#
#   hack/bench-admission.sh                         # release build
#   HOLDFAST_BENCH_REQUESTS=40000 HOLDFAST_BENCH_CONNECTIONS=16 hack/bench-admission.sh
#   HOLDFAST_BENCH_LOADED=0 hack/bench-admission.sh  # empty registry only
#   HOLDFAST_BENCH_BASELINE=/path/to/older/holdfast-webhook hack/bench-admission.sh  # A/B, same rounds
#   HOLDFAST_BENCH_PIN=0 hack/bench-admission.sh     # unpinned (by default, on 2+ cores, the
#                                                    # load generator runs on CPU 0 and every
#                                                    # server on CPU 1; needs taskset)
#
# Instructions per review instead of time (independent of the machine's load; needs
# valgrind): both servers under callgrind, see docs/performance.md.
#
#   cargo build --release -p holdfast-webhook -p holdfast-e2e --bins
#   (cd test/e2e && ../../target/release/holdfast-bench-admission instructions)
source "$(dirname "$0")/lib.sh"
run_driver holdfast-bench-admission
