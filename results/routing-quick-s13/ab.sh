#!/bin/bash
# Interleaved before/after runs of the quick routing bench, each from its own worktree (before: 9556c25, after: c654fd4).
. /work/main/.venv/bin/activate
export HF_HUB_OFFLINE=1
OUT=/work/main/results/routing-quick-s13
for run in before-1 after-1 before-2 after-2; do
  while [ ! -f /tmp/cpu-free ]; do sleep 30; done
  tree=/tmp/wt-${run%-*}
  cd $tree
  echo "$run start $(date -u +%H:%M:%S) $(uptime)" >> $OUT/uptime.txt
  flock /tmp/variant-bench.lock python -m bench routing --quick --out $OUT/$run > /tmp/s13/$run.log 2>&1
  echo "$run end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> $OUT/uptime.txt
done
