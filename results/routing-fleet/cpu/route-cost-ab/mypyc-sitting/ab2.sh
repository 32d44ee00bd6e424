#!/bin/bash
# Second sitting: before (647adb9) / after (pure Python, /work/main) / the same after-tree compiled with mypyc (not kept).
. /work/main/.venv/bin/activate
out=/tmp/s9/w24/ab2
uptime > $out/uptime-start
for i in 1 2; do
  (cd /tmp/s9/w24/old && python -m bench route-cost --json $out/before-$i.json > $out/before-$i.md 2>&1)
  (cd /work/main && python -m bench route-cost --json $out/after-$i.json > $out/after-$i.md 2>&1)
  (cd /tmp/s9/w24/mypyc && PYTHONPATH=/tmp/s9/w24/mypyc python /work/main/build/s24-route-cost/rc.py --json $out/mypyc-$i.json > $out/mypyc-$i.md 2>&1)
done
uptime > $out/uptime-end
