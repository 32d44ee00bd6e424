#!/bin/bash
# For the next session with device time (not run in session 18): what #21 and #24 still need from a 16-core GPU host,
# in one call of about 9 minutes. Carry .device (bench/device/pack.sh) and the gRPC generated files; drop results/
# from the index for the call (bench/device/pack.sh's header).
#   1. #24: round_robin, least_loaded and largest on the full two_variant fleet (slo and length_threshold ran in
#      session 18: results/routing-fleet/h100/run11-s18/), three fleets at once, two ingress replicas each.
#   2. #21: the emulated bar command with the default single ingress replica at 64 and 128 streams.
#   3. #21: the hf command at 256 streams with every request's record (--out), whose Server-Timing splits the
#      first token's +0.57 s into the ingress's part and the engine's.
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
bash bench/device/run_fleet.sh two_variant 280 1.0 150 2 "round_robin least_loaded largest" '{}' 2>&1 | grep -E "req/s:|Bar|Agreement|rc "
echo "fleet $(( $(date +%s) - t0 )) s"
R=$OUT/r; mkdir -p $R
timeout 120 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 --paths direct stack \
  --json $R/emulated-i1.json > $R/emulated-i1.log 2>&1
echo "i1 rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/emulated-i1.log | cut -c1-260
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 256 --num-requests 384 --paths direct stack --out /tmp/hf256 --json $R/hf-256.json > $R/hf-256.log 2>&1
echo "hf rc $? $(( $(date +%s) - t0 )) s"; grep -E "^  (direct|stack) " $R/hf-256.log | cut -c1-260
gzip -c /tmp/hf256/records/stack-c256.jsonl > $R/hf-256-stack-records.jsonl.gz 2>/dev/null
