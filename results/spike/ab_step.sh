#!/bin/bash
# The 10x step through the real stack with our policy, two trees interleaved (A B A B ...), each from its own
# worktree (session 21's A/Bs call this; it needs the venv active):
#   bash results/spike/ab_step.sh TREE_A TREE_B OUT PAIRS SCRATCH
# OUT gets per run: NAME.md (the report), NAME-starts.jsonl (the replica starts), records/NAME.jsonl.gz (every
# request), summary.txt and uptime.txt;
# SCRATCH (a /tmp prefix) the runs' folders and logs. Then: python results/spike/starts_ab_s21/persec.py OUT.
set -u
a=$1 b=$2 here=$3 pairs=$4 scratch=$5
for i in $(seq 1 "$pairs"); do
  for run in before-$i after-$i; do
    tree=$a; [[ $run == after-* ]] && tree=$b
    (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench spike --shape step \
      --mode engine_load --out "$scratch/$run" --no-progress > "$scratch-$run.log" 2>&1)
    echo "$run $(uptime)" >> "$here/uptime.txt"
    grep -E "attainment during" "$scratch-$run.log" | head -2 | sed "s/^/$run /" | tee -a "$here/summary.txt"
    cp "$scratch/$run/step/report.md" "$here/$run.md" 2>/dev/null
    cp "$scratch/$run/step/engine_load/starts.jsonl" "$here/$run-starts.jsonl" 2>/dev/null
    mkdir -p "$here/records" && gzip -c "$scratch/$run/step/engine_load/records.jsonl" > "$here/records/$run.jsonl.gz"
  done
done
