#!/bin/bash
# Session 25: replica choice from the replicas' reports, on the real stack. The half two_variant fleet on this 2-core
# CPU with two ingress replicas (where each ingress's handle used to see only its own sends), slo only, at the
# fleet's capacity, two trees interleaved (A, B, A, B), each from its own worktree:
#   git worktree add /tmp/wt-s25-before 56a4e6f; bash results/streaming/session25/routing-ab/ab.sh /tmp/wt-s25-before .
# The records stay in /tmp/s25-routing-ab; the reports, JSON and fleet digests go beside this script.
set -u
tree_a=$1 tree_b=$2 label_a=${3:-before} label_b=${4:-after}
here=$(pwd)/results/streaming/session25/routing-ab
mkdir -p /tmp/s25-routing-ab
for run in "$label_a-1" "$label_b-1" "$label_a-2" "$label_b-2"; do
  tree=$tree_a; [[ $run == "$label_b"-* ]] && tree=$tree_b
  out=/tmp/s25-routing-ab/$run
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench routing \
    --scenario two_variant --fleet-scale 0.5 --duration-s 120 --rate-fractions 1.0 --policies slo \
    --ingress-replicas 2 --request-timeout-s 150 --out "$out" --json "$here/$run.json" > "$out.log" 2>&1)
  echo "$run: $(grep "req/s:" "$out.log")"
  cp "$out/report.md" "$here/$run.md"
  PYTHONPATH=. python bench/device/fleet_digest.py "$out" > "$here/$run-digest.txt"
  uptime >> "$here/uptime.txt"
done
