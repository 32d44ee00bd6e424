#!/bin/bash
# Not run in session 16 (the device refused the start); device_c.sh holds its first half and the fleet.
# Session 16, device call B (#21): the bar's emulated command as the README gives it (one ingress replica, the
# default) at 64 and 128 streams, then the stack alone with two ingress replicas, on this session's tree (the stats
# board off Serve's thread pool). Carry .device (bench/device/pack.sh).
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
R=$OUT/b; mkdir -p $R
M="--model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128"
timeout 150 python3 -m bench overhead $M --paths direct stack --json $R/emulated-i1.json > $R/emulated-i1.log 2>&1
echo "i1 rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/emulated-i1.log | cut -c1-260
timeout 110 python3 -m bench overhead $M --ingress-replicas 2 --paths stack --json $R/emulated-i2.json > $R/emulated-i2.log 2>&1
echo "i2 rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/emulated-i2.log | cut -c1-260
