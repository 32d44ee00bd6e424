#!/bin/bash
# Session 16: the stats board's methods async (no thread-pool hop per call), before and after, interleaved
# (A B A B), each tree from its own worktree, on this 2-core CPU:
#   git worktree add /tmp/wt-s16a caa6841; git worktree add /tmp/wt-s16b <the change>
#   bash results/streaming/session16/cpu-board-ab/ab.sh /tmp/wt-s16a /tmp/wt-s16b
set -u
a=$1 b=$2 here=$(cd "$(dirname "$0")" && pwd)
for run in before-1 after-1 before-2 after-2; do
  tree=$a; [[ $run == after-* ]] && tree=$b
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead \
    --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 16 64 --paths stack --json "$here/$run.json" \
    > "/tmp/board-ab-$run.log" 2>&1)
  echo "$run $(uptime)" >> "$here/uptime.txt"
  grep -E "^  stack " "/tmp/board-ab-$run.log" | cut -c1-250
done
