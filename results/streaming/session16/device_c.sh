#!/bin/bash
# Not run in session 16: the device refused three starts and then paused its loans. The next GPU session runs it first.
# Session 16, device call C: #24's full two_variant fleet with 8208694's policy (slo, length_threshold), then #21's
# emulated bar command with the default single ingress replica (device_b.sh's first half).
set -u
t0=$(date +%s)
bash bench/device/run_fleet.sh two_variant 330 1.0 150 1 "slo length_threshold" '{}' 2>&1 | grep -E "req/s:|Bar|Agreement|rc "
echo "fleet $(( $(date +%s) - t0 )) s"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
R=$OUT/b; mkdir -p $R
left=$(( 400 - ($(date +%s) - t0) ))
timeout $left python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 --paths direct stack \
  --json $R/emulated-i1.json > $R/emulated-i1.log 2>&1
echo "i1 rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/emulated-i1.log | cut -c1-260
