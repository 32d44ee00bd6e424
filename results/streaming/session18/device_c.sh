#!/bin/bash
# Session 18, one device call for what the budget left after four refused starts: #21's hf bar command (two
# ingress replicas, as docs/streaming.md recommends), then #24's full two_variant fleet (two ingress replicas per
# fleet, 150 s), then #21's emulated bar command with one ingress replica if time is left.
# The tree has a0946e2 (a message with no readable text starts no interval; the direct path times text).
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep -E "Model name" | head -1
R=$OUT/r; mkdir -p $R
timeout 225 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 256 --num-requests 384 --paths direct stack --json $R/hf-1b.json > $R/hf-1b.log 2>&1
echo "hf rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/hf-1b.log | cut -c1-260
ray stop --force > /dev/null 2>&1
left=$(( ${WALL:-470} - ($(date +%s) - t0) ))
[ $left -gt 230 ] && bash bench/device/run_fleet.sh two_variant $left 1.0 150 2 "slo length_threshold" '{}' 2>&1 | grep -E "req/s:|Bar|Agreement|rc "
echo "fleet $(( $(date +%s) - t0 )) s"
ray stop --force > /dev/null 2>&1
left=$(( ${WALL:-470} + 20 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && timeout $left python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 \
  --paths direct stack --json $R/emulated-i1.json > $R/emulated-i1.log 2>&1
echo "i1 rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/emulated-i1.log 2>/dev/null | cut -c1-260
