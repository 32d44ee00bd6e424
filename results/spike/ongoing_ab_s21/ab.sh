#!/bin/bash
# Session 21: the 10x step through the real stack with the 8B's max_ongoing_requests 4 (30e793c) and 2 (its batch
# slots: 30e793c with sim/spike_fleet.py edited), interleaved (A B A B), our policy only:
#   git worktree add /tmp/wt-s21-c 30e793c; git worktree add /tmp/wt-s21-d 30e793c (then the edit)
#   bash results/spike/ongoing_ab_s21/ab.sh /tmp/wt-s21-c /tmp/wt-s21-d
set -u
a=$1 b=$2 here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
for run in before-1 after-1 before-2 after-2; do
  tree=$a; [[ $run == after-* ]] && tree=$b
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench spike --shape step \
    --mode engine_load --out "/tmp/ongoing-ab/$run" --no-progress > "/tmp/ongoing-ab-$run.log" 2>&1)
  echo "$run $(uptime)" >> "$here/uptime.txt"
  grep -E "attainment during" "/tmp/ongoing-ab-$run.log" | head -2 | sed "s/^/$run /" | tee -a "$here/summary.txt"
  cp "/tmp/ongoing-ab/$run/step/report.md" "$here/$run.md" 2>/dev/null
  cp "/tmp/ongoing-ab/$run/step/engine_load/starts.jsonl" "$here/$run-starts.jsonl" 2>/dev/null
done
