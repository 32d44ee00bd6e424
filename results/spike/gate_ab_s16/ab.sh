#!/bin/bash
# Session 16: the 10x step through the real stack before and after the predictive term's window gate (b1b135c),
# interleaved (A B A B), each tree from its own worktree, our policy only:
#   git worktree add /tmp/wt-gate-a b1b135c~1; git worktree add /tmp/wt-gate-b b1b135c
#   bash results/spike/gate_ab_s16/ab.sh /tmp/wt-gate-a /tmp/wt-gate-b
set -u
a=$1 b=$2 here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
for run in before-1 after-1 before-2 after-2; do
  tree=$a; [[ $run == after-* ]] && tree=$b
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench spike --shape step \
    --mode engine_load --out "/tmp/gate-ab/$run" --no-progress > "/tmp/gate-ab-$run.log" 2>&1)
  echo "$run $(uptime)" >> "$here/uptime.txt"
  grep -E "attainment during" "/tmp/gate-ab-$run.log" | head -2 | sed "s/^/$run /" | tee -a "$here/summary.txt"
  cp "/tmp/gate-ab/$run/step/report.md" "$here/$run.md" 2>/dev/null
done
