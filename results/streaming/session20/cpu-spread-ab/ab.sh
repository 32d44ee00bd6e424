#!/bin/bash
# Session 20: the bar command with every later request max_tokens long (--output-spread 0, the bench before 07:50 UTC)
# and with the default spread (0.25), interleaved (fixed, spread, fixed, spread), on this tree, records kept:
#   bash results/streaming/session20/cpu-spread-ab/ab.sh [OUT]
set -u
here=${1:-$(cd "$(dirname "$0")" && pwd)}
for run in fixed-1 spread-1 fixed-2 spread-2; do
  spread=0.25; [[ $run == fixed* ]] && spread=0
  HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead --model emulated:h200-llama-3.1-8b-int4 \
    --concurrency 1 16 64 --paths direct stack --output-spread $spread --json "$here/$run.json" \
    --out "/tmp/s20ab-$run" > "/tmp/s20ab-$run.log" 2>&1
  echo "$run"; grep -E "^  (direct|stack) +c=|profile:" "/tmp/s20ab-$run.log" | cut -c1-230
  echo "$run $(uptime)" >> "$here/uptime.txt"
  tar czf "$here/$run-records.tgz" -C "/tmp/s20ab-$run" records
done
