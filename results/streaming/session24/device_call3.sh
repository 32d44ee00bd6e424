#!/bin/bash
# Session 24's last device call (what was left of its device time): #21's hf command once, as the docs now recommend
# it (2 ingress replicas; the load generator's processes by default; the GPU replica's engine at 16 torch threads).
set -u
. bench/device/call_start.sh
timeout 185 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --num-requests 384 \
  --paths direct stack --ingress-replicas 2 --concurrency 64 256 --json "$R/g-command.json" > "$R/g-command.log" 2>&1
echo "rc $? at ${SECONDS}s"; grep -E "^  (direct|stack) |host:" "$R/g-command.log" | cut -c1-300
kill $TOP
