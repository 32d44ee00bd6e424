#!/bin/bash
# Session 17: the 10x step through the real stack before (d62efb0) and after the slot wait's spread (70025a8),
# interleaved (A B A B), each tree from its own worktree, our policy only:
#   git worktree add /tmp/wt-s17-gb d62efb0; git worktree add /tmp/wt-s17-ga 70025a8
#   bash results/spike/spread_ab_s17/ab.sh /tmp/wt-s17-gb /tmp/wt-s17-ga
set -u
a=$1 b=$2 here=$(cd "$(dirname "$0")" && pwd)
for run in before-1 after-1 before-2 after-2; do
  tree=$a; [[ $run == after-* ]] && tree=$b
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench spike --shape step \
    --mode engine_load --out "/tmp/spread-ab/$run" --no-progress > "/tmp/spread-ab-$run.log" 2>&1)
  echo "$run $(uptime)" >> "$here/uptime.txt"
  grep -E "attainment during" "/tmp/spread-ab-$run.log" | head -2 | sed "s/^/$run /" | tee -a "$here/summary.txt"
  cp "/tmp/spread-ab/$run/step/report.md" "$here/$run.md" 2>/dev/null
done
