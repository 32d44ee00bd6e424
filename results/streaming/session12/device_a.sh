#!/bin/bash
# Session 12, H200 call A: why the hf engine's process is ~2x slower inside Serve than alone.
# The probe (plain / spawned by a Ray actor at nice 0 / alone beside 8 busy processes), then the stack path with a
# top sampler. Carry .device/ray-site-stripped.tar.xz and .device/transformers-trim.tar.xz.
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
R=$OUT/r; mkdir -p $R
(lscpu; nproc; uptime; nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv) > $R/machine.txt 2>&1
grep -E "^(Thread|Core|Socket|Model name|CPU\(s\))" $R/machine.txt
echo "unpacked $(( $(date +%s) - t0 )) s"
LOAD=8 timeout 230 python3 results/streaming/session12/probe_ray_child.py random:llama-1b plain,actor_nice0,loaded 64 256 > $R/probe.log 2>&1
grep "^PROBE" $R/probe.log | cut -c1-330
echo "probe done $(( $(date +%s) - t0 )) s"
(while true; do echo "=== $(date +%T)"; top -b -n1 -w 220 | head -28; nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader; sleep 3; done) > $R/top-stack.txt 2>&1 &
TOP=$!
timeout 200 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 --num-requests 320 --paths stack --json $R/stack.json > $R/stack.log 2>&1
echo "stack rc $? $(( $(date +%s) - t0 )) s"; kill $TOP
grep -E "stack +c=|^stack" $R/stack.log | tail -4
tar -C $OUT -czf $OUT/a.tgz r && rm -rf $R
