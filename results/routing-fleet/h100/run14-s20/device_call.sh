#!/bin/bash
# Session 20's second device call: #24's slo and length_threshold on the full two_variant fleet on this session's
# tree (two fleets at once, as session 18's run11), then #21's emulated bar command at 64 then 128 streams with one
# ingress replica, every request's record kept (the 128-stream level's TTFT after a 64-stream level).
set -u
t0=$(date +%s)
bash bench/device/run_fleet.sh two_variant 285 1.0 150 2 "slo length_threshold" '{}' 2>&1 | grep -E "req/s:|Bar|Agreement|rc "
echo "fleet $(( $(date +%s) - t0 )) s"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 --paths direct stack \
  --out /tmp/em64 --json $R/em-64-128.json > $R/em-64-128.log 2>&1
echo "em rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/em-64-128.log | cut -c1-260
tar czf $R/em-64-128-records.tgz -C /tmp/em64 records report.md 2>/dev/null
ls -la $OUT/* | head -20
