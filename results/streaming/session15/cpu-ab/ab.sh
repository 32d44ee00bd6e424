#!/bin/bash
# Session 15: the emulated bar command before (f4027fe, no x-route-candidates header) and after (this session's
# tree), interleaved (before, after, before, after), each from its own worktree:
#   git worktree add /tmp/wt-s15a f4027fe; bash results/streaming/session15/cpu-ab/ab.sh /tmp/wt-s15a .
set -u
before=$1 after=$2 here=$(pwd)/results/streaming/session15/cpu-ab
for run in before-1 after-1 before-2 after-2; do
  tree=$before; [[ $run == after* ]] && tree=$after
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead \
    --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 16 64 --paths direct stack --json "$here/$run.json" \
    > "/tmp/$run-overhead.log" 2>&1)
  echo "$run"; grep -E "^(direct|stack) +[0-9]" "/tmp/$run-overhead.log"
  uptime >> "$here/uptime.txt"
done
