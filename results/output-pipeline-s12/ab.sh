#!/bin/bash
# Interleaved A/B of the direct path: before = a9abdbe (the commit before eca1b2d), after = 9909f04 (main's HEAD
# when this session began). Each run from inside its own git worktree (/tmp/wt26-before, /tmp/wt26-after):
# `python -m` puts the current directory first on sys.path, so PYTHONPATH alone would import the checkout's code
# on both sides. One flock per set: a set is a few ~10 s runs back to back, alternating sides.
# usage: ab.sh OUTDIR "before after before after ..." [--profile]
out=$1; order=$2; prof=$3
mkdir -p "$out"
flock /tmp/variant-bench.lock bash -c '
out=$0; order=$1; prof=$2; n=0
for side in $order; do
  n=$((n+1)); tag="$n-$side"
  extra=()
  [ "$prof" = "--profile" ] && extra=(--profile "$out/prof-$tag")
  (
    cd /tmp/wt26-$side || exit 1
    echo "start $(date -u +%H:%M:%S) $(uptime)"
    echo "code: $(git rev-parse --short HEAD) $(/work/main/.venv/bin/python -c "import engines.hf; print(engines.hf.__file__)")"
    nice -n 0 /work/main/.venv/bin/python -m bench overhead --quick --concurrency 16 --num-requests 128 \
      --paths direct --json "$out/$tag.json" "${extra[@]}"
    echo "end $(date -u +%H:%M:%S) $(uptime)"
  ) > "$out/$tag.log" 2>&1
  echo "$tag $(grep -h "direct  " "$out/$tag.log" | head -1)"
done' "$out" "$order" "$prof"
