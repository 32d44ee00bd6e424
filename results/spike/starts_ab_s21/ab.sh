#!/bin/bash
# Session 21: the 10x step through the real stack before and after the replica start changes (the warm pool's heap
# frozen at prestart, the routing tasks woken when a replica is added), interleaved (A B A B A B), our policy only:
#   git worktree add /tmp/wt-s21-a 9703fba; git worktree add /tmp/wt-s21-b <the change>
#   bash results/spike/starts_ab_s21/ab.sh /tmp/wt-s21-a /tmp/wt-s21-b
set -u
a=$1 b=$2 here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
for run in before-1 after-1 before-2 after-2 before-3 after-3; do
  tree=$a; [[ $run == after-* ]] && tree=$b
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench spike --shape step \
    --mode engine_load --out "/tmp/starts-ab/$run" --no-progress > "/tmp/starts-ab-$run.log" 2>&1)
  echo "$run $(uptime)" >> "$here/uptime.txt"
  grep -E "attainment during" "/tmp/starts-ab-$run.log" | head -2 | sed "s/^/$run /" | tee -a "$here/summary.txt"
  cp "/tmp/starts-ab/$run/step/report.md" "$here/$run.md" 2>/dev/null
  cp "/tmp/starts-ab/$run/step/engine_load/starts.jsonl" "$here/$run-starts.jsonl" 2>/dev/null
done
