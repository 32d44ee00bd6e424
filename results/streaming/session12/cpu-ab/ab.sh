#!/bin/bash
# Interleaved A/B of the streaming path: before = 9819b77, after = HEAD; each run from its own worktree.
. /work/main/.venv/bin/activate
for i in 1 2 3 4; do
  if [ $((i % 2)) -eq 1 ]; then side=before; else side=after; fi
  cd /tmp/s12/wt-$side
  echo "== $i $side $(git log --oneline -1 | cut -c1-9) $(uptime | sed 's/.*average: //')" >> /tmp/s12/ab/runs.txt
  PYTHONPATH=/tmp/s12/wt-$side timeout 900 python -c "import bench,sys; print(bench.__file__, file=sys.stderr)" 2>> /tmp/s12/ab/runs.txt
  PYTHONPATH=/tmp/s12/wt-$side timeout 900 python -m bench overhead --model emulated:h200-llama-3.1-8b-int4 \
    --concurrency 1 16 64 --paths direct stack --json /tmp/s12/ab/$i-$side.json > /tmp/s12/ab/$i-$side.log 2>&1
  echo "rc $?" >> /tmp/s12/ab/runs.txt
done
echo done >> /tmp/s12/ab/runs.txt
