#!/bin/bash
for run in A1 B1 A2 B2; do
  t=/tmp/wt-obs${run:0:1}
  (cd $t && PYTHONPATH=$t HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock /work/main/.venv/bin/python -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 --num-requests 1024 --paths stack --json /tmp/obs-$run.json > /tmp/obs-$run.log 2>&1)
  echo "$run $(grep -E '^  stack ' /tmp/obs-$run.log | cut -c1-200) | $(uptime | sed 's/.*load/load/')"
done
