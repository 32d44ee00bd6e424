#!/bin/bash
# Session 16's whole change on the streaming path, before (7f29ef3) and after (the session's last tree), the bar
# command interleaved (before, after, before, after), each from its own worktree:
#   git worktree add /tmp/wt-s16-before 7f29ef3; git worktree add /tmp/wt-s16-after HEAD
#   bash results/streaming/session16/cpu-ab/ab.sh /tmp/wt-s16-before /tmp/wt-s16-after
set -u
before=$1 after=$2 here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
for run in before-1 after-1 before-2 after-2; do
  tree=$before; [[ $run == after* ]] && tree=$after
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead \
    --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 16 64 --paths direct stack --json "$here/$run.json" \
    > "/tmp/s16ab-$run.log" 2>&1)
  echo "$run"; grep -E "^(direct|stack) +[0-9]|^  stack .*c=64|profile:" "/tmp/s16ab-$run.log" | cut -c1-260
  echo "$run $(uptime)" >> "$here/uptime.txt"
done
