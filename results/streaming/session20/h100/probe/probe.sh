#!/bin/bash
# Session 20, #21: the emulated bar command at 64 then 128 streams, one ingress replica, twice on a fresh host with
# the host's load sampled: is the 64-stream TTFT overhead (+12 in session 19, +69 today after a fleet run) the host's?
set -u
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
(while true; do uptime >> $R/uptime.txt; top -b -n 1 -w 200 | head -16 >> $R/top.txt; sleep 10; done) &
TOP=$!
for i in 1 2; do
  timeout 135 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 --paths direct stack \
    --out /tmp/em$i --json $R/em$i.json > $R/em$i.log 2>&1
  echo "em$i rc $?"; grep -E "^  (direct|stack) " $R/em$i.log | cut -c1-200
done
kill $TOP
tar czf $R/records.tgz -C /tmp em1/records em2/records 2>/dev/null
