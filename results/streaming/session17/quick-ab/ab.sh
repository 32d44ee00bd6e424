#!/bin/bash
# Session 17: the send rule (a05c3aa) on the hf engine's path (the engine_process relay predicts the next step from
# the stream's last gap), `bench overhead --quick` interleaved (before, after, before, after), each from its own
# worktree (see ../cpu-ab/ab.sh for the worktrees):
#   bash results/streaming/session17/quick-ab/ab.sh /tmp/wt-s17-before /tmp/wt-s17-after
set -u
before=$1 after=$2 here=$(cd "$(dirname "$0")" && pwd)
for run in before-1 after-1 before-2 after-2; do
  tree=$before; [[ $run == after* ]] && tree=$after
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead --quick \
    --paths direct stack --json "$here/$run.json" > "/tmp/s17q-$run.log" 2>&1)
  echo "$run"; grep -E "^(direct|stack) +[0-9]|^  stack .*c=|profile:" "/tmp/s17q-$run.log" | cut -c1-260
  echo "$run $(uptime)" >> "$here/uptime.txt"
done
