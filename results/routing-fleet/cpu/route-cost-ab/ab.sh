#!/bin/bash
# Interleaved A/B of `python -m bench route-cost`: before = the tree at 647adb9 (git archive), after = /work/main.
set -e
. /work/main/.venv/bin/activate
out=/tmp/s9/w24/ab
date -u +%FT%TZ > $out/started
uptime > $out/uptime-start
for i in 1 2 3; do
  (cd /tmp/s9/w24/old && python -m bench route-cost --json $out/before-$i.json > $out/before-$i.md)
  (cd /work/main && python -m bench route-cost --json $out/after-$i.json > $out/after-$i.md)
done
uptime > $out/uptime-end
date -u +%FT%TZ > $out/ended
