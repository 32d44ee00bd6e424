#!/bin/bash
# Session 16, device call A (#21): the hf engine on the GPU, this tree against session 12's (4f49f69, which gave
# 1.04 / 1.02 of the engine alone on an H200 where session 15's tree gave 0.86 / 0.83 on an H100 host), on one
# host in one call; then the emulated 8B at 64 streams with every request's record (server-timing splits the TTFT
# into the ingress's part, the engine's part and the rest), with 2 and 4 ingress replicas.
# Carry .device (bench/device/pack.sh, plus .device/tree-4f49f69.tar.gz: `git archive 4f49f69` with the gRPC
# generated files).
set -u
t0=$(date +%s)
mkdir -p /tmp/site /tmp/old && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
tar -C /tmp/old -xzf .device/tree-4f49f69.tar.gz
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep -E "Model name|MHz" | head -3
R=$OUT/r; mkdir -p $R
HF="--model random:llama-1b --device cuda --engine-process --ingress-replicas 2 --concurrency 64 256 --num-requests 384"
PYTHONPATH=/tmp/site:$PWD timeout 250 python3 -m bench overhead $HF --paths direct stack --json $R/hf-new.json > $R/hf-new.log 2>&1
echo "hf new rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/hf-new.log | cut -c1-260
(cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 160 python3 -m bench overhead $HF --paths stack --json $R/hf-old.json > $R/hf-old.log 2>&1)
echo "hf old rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/hf-old.log | cut -c1-260
for n in 2 4; do
  PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 \
    --ingress-replicas $n --paths direct stack --out $R/emu64-i$n --json $R/emu64-i$n.json > $R/emu64-i$n.log 2>&1
  echo "emulated i$n rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/emu64-i$n.log | cut -c1-260
done
rm -f $R/*/tokens_per_s.png
