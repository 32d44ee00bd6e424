#!/bin/bash
# Session 17: the 10x step through the real stack on other traces than the bench's default (seed 0), our policy
# only, the simulator beside each (the bench's own): how much of the step's figure is the trace.
#   bash results/spike/seeds_s17/run.sh 1 2 3
set -u
here=$(cd "$(dirname "$0")" && pwd)
for seed in "$@"; do
  HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench spike --shape step --mode engine_load --seed "$seed" \
    --out "/tmp/seeds-s17/seed$seed" --no-progress > "/tmp/seeds-s17-$seed.log" 2>&1
  echo "seed $seed $(uptime)" >> "$here/uptime.txt"
  grep -E "attainment during" "/tmp/seeds-s17-$seed.log" | head -2 | sed "s/^/seed $seed /" | tee -a "$here/summary.txt"
  cp "/tmp/seeds-s17/seed$seed/step/report.md" "$here/seed$seed.md" 2>/dev/null
done
