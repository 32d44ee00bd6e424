#!/bin/bash
# Session 15, device call A: #21's GPU bars on the tree of this session: the emulated 8B at 1 / 64 / 128 streams and
# the hf engine (random:llama-1b on the GPU, in its own process) at 64 / 256, both with two ingress replicas (what
# docs/streaming.md recommends on a 16-core host). Carry .device (bench/device/pack.sh).
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
R=$OUT/r; mkdir -p $R
timeout 220 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 64 128 --ingress-replicas 2 \
  --paths direct stack --json $R/emulated-8b.json > $R/emulated.log 2>&1
echo "emulated rc $? $(( $(date +%s) - t0 )) s"; grep -E "^(direct|stack) +[0-9]|serving CPU" $R/emulated.log | cut -c1-240
timeout 300 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 256 --num-requests 384 --paths direct stack --json $R/hf-1b.json > $R/hf.log 2>&1
echo "hf rc $? $(( $(date +%s) - t0 )) s"; grep -E "^(direct|stack) +[0-9]|serving CPU" $R/hf.log | cut -c1-240
