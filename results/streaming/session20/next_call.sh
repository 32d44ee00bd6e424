#!/bin/bash
# For the next session with device time (about 8 minutes, one call on a fresh 16-core GPU host): #21's emulated bar
# command at 64 and 128 streams with one ingress replica, twice with the default output spread (0.25) and once with
# --output-spread 0 (the load before session 20), interleaved, records kept: do the clumps that took the 64-stream
# TTFT overhead from +11 to +115 ms (docs/streaming.md, session 20) stay away with the spread?
# Carry .device (bench/device/pack.sh) and the gRPC generated files; copy this script to the tree's root first
# (results/ is out of the index for the call), and restore the index before any commit. The records come back in
# runs.tgz: python results/streaming/session20/clumptime.py r/spread-1/records/stack-c64.jsonl ... here.
set -u
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
(while true; do uptime >> /tmp/uptime.txt; sleep 10; done) &
TOP=$!
for run in spread-1 fixed-1 spread-2; do
  spread=0.25; [[ $run == fixed* ]] && spread=0
  timeout 150 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 \
    --paths direct stack --output-spread $spread --out /tmp/$run --json /tmp/$run.json > /tmp/$run.log 2>&1
  echo "$run rc $?"; grep -E "^  (direct|stack) " /tmp/$run.log | cut -c1-200
done
kill $TOP
cp /tmp/uptime.txt $R/
tar czf $R/runs.tgz -C /tmp spread-1.json fixed-1.json spread-2.json spread-1.log fixed-1.log spread-2.log \
  spread-1/records fixed-1/records spread-2/records 2>/dev/null
