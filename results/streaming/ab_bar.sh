#!/bin/bash
# #21's bar command through two trees interleaved (before, after, ... PAIRS times), each from its own worktree (the
# sessions' cpu-ab scripts call this; it needs the venv active):
#   bash results/streaming/ab_bar.sh TREE_BEFORE TREE_AFTER OUT PAIRS SCRATCH
# OUT gets per run: NAME.json (the bench's summary) and uptime.txt; SCRATCH (a /tmp prefix) each run's log.
set -u
before=$1 after=$2 here=$3 pairs=$4 scratch=$5
for i in $(seq 1 "$pairs"); do
  for side in before after; do
    run=$side-$i tree=$before; [[ $side == after ]] && tree=$after
    (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead \
      --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 16 64 --paths direct stack --json "$here/$run.json" \
      > "$scratch-$run.log" 2>&1)
    echo "$run"; grep -E "^(direct|stack) +[0-9]|^  stack .*c=64|profile:" "$scratch-$run.log" | cut -c1-260
    echo "$run $(uptime)" >> "$here/uptime.txt"
  done
done
