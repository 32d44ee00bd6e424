#!/bin/bash
# Session 17: the last-step-before-due send rule (a05c3aa), before (bcfe17c) and after, the bar
# command interleaved (before, after, before, after), each from its own worktree:
#   git worktree add /tmp/wt-s17-before bcfe17c; git worktree add /tmp/wt-s17-after a05c3aa
#   bash results/streaming/session17/cpu-ab/ab.sh /tmp/wt-s17-before /tmp/wt-s17-after
set -u
before=$1 after=$2 here=$(cd "$(dirname "$0")" && pwd)
for run in before-1 after-1 before-2 after-2; do
  tree=$before; [[ $run == after* ]] && tree=$after
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead \
    --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 16 64 --paths direct stack --json "$here/$run.json" \
    > "/tmp/s17ab-$run.log" 2>&1)
  echo "$run"; grep -E "^(direct|stack) +[0-9]|^  stack .*c=64|profile:" "/tmp/s17ab-$run.log" | cut -c1-260
  echo "$run $(uptime)" >> "$here/uptime.txt"
done
