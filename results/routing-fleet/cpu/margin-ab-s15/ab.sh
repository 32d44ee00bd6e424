#!/bin/bash
# Session 15: the half two_variant fleet on this 2-core CPU, slo only, two trees interleaved (A, B, A, B), each from
# its own worktree. The TPOT margin's change, before (34b4722~1) and after (34b4722):
#   git worktree add /tmp/wt-before 34b4722~1; bash results/routing-fleet/cpu/margin-ab-s15/ab.sh /tmp/wt-before .
# Other pairs name their labels and folder: ab.sh TREE_A TREE_B LABEL_A LABEL_B OUT_DIR.
# The records stay in /tmp/margin-ab (12 MB a run); the reports, sweeps and fleet digests go to OUT_DIR.
set -u
tree_a=$1 tree_b=$2 label_a=${3:-before} label_b=${4:-after}
here=${5:-$(pwd)/results/routing-fleet/cpu/margin-ab-s15}
mkdir -p "$here" /tmp/margin-ab
for run in "$label_a-1" "$label_b-1" "$label_a-2" "$label_b-2"; do
  tree=$tree_a; [[ $run == "$label_b"-* ]] && tree=$tree_b
  out=/tmp/margin-ab/$run
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench routing \
    --scenario two_variant --fleet-scale 0.5 --duration-s 120 --rate-fractions 1.0 --policies slo \
    --request-timeout-s 150 --out "$out" --json "$here/$run.json" > "$out.log" 2>&1)
  grep "req/s:" "$out.log"
  cp "$out/report.md" "$here/$run.md"
  python bench/device/fleet_digest.py "$out" > "$here/$run-digest.txt"
  uptime >> "$here/uptime.txt"
done
