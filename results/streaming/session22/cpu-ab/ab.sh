#!/bin/bash
# Session 22's streaming change, before and after, the bar command interleaved (before, after, ... PAIRS times),
# each from its own worktree:
#   git worktree add /tmp/wt-s22-before 25b7d42; git worktree add /tmp/wt-s22-after HEAD
#   bash results/streaming/session22/cpu-ab/ab.sh /tmp/wt-s22-before /tmp/wt-s22-after [OUT] [PAIRS]
set -u
before=$1 after=$2 here=${3:-$(cd "$(dirname "$0")" && pwd)} pairs=${4:-3}
for i in $(seq 1 "$pairs"); do
  for side in before after; do
    run=$side-$i tree=$before; [[ $side == after ]] && tree=$after
    (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead \
      --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 16 64 --paths direct stack --json "$here/$run.json" \
      > "/tmp/s22ab-$run.log" 2>&1)
    echo "$run"; grep -E "^  stack .*c=64" "/tmp/s22ab-$run.log" | cut -c1-260
    echo "$run $(uptime)" >> "$here/uptime.txt"
  done
done
