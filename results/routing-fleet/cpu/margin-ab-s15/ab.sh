#!/bin/bash
# Session 15: the half two_variant fleet on this 2-core CPU, slo only, before (34b4722~1) and after (34b4722) the TPOT
# margin's change, interleaved (before, after, before, after). Each tree from its own worktree:
#   git worktree add /tmp/wt-before 34b4722~1; bash results/routing-fleet/cpu/margin-ab-s15/ab.sh /tmp/wt-before .
# The records stay in /tmp/margin-ab (12 MB a run); the reports, sweeps and fleet digests come here.
set -u
before=$1 after=$2 here=$(pwd)/results/routing-fleet/cpu/margin-ab-s15
for run in before-1 after-1 before-2 after-2; do
  tree=$before; [[ $run == after* ]] && tree=$after
  out=/tmp/margin-ab/$run
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench routing \
    --scenario two_variant --fleet-scale 0.5 --duration-s 120 --rate-fractions 1.0 --policies slo \
    --request-timeout-s 150 --out "$out" --json "$here/$run.json" > "$out.log" 2>&1)
  grep "req/s:" "$out.log"
  cp "$out/report.md" "$here/$run.md"
  python bench/device/fleet_digest.py "$out" > "$here/$run-digest.txt"
  uptime >> "$here/uptime.txt"
done
