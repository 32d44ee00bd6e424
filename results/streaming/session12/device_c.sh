#!/bin/bash
# Session 12, H200 call C: #21's bars on the H200 host: the emulated 8B at 1 / 64 / 128 streams (arrivals staggered,
# two ingress replicas), then the hf engine (random:llama-1b) at 64 / 256 with the requests' records kept.
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
R=$OUT/r; mkdir -p $R/records
timeout 200 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 1 64 128 --ingress-replicas 2 \
  --paths direct stack --json $R/h200-emulated-8b.json > $R/h200-emulated.log 2>&1
echo "emulated rc $? $(( $(date +%s) - t0 )) s"; grep -E "^(direct|stack) +[0-9]" $R/h200-emulated.log
timeout 300 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 256 --num-requests 384 --paths direct stack --out $R/records --json $R/h200-hf-1b.json > $R/h200-hf.log 2>&1
echo "hf rc $? $(( $(date +%s) - t0 )) s"; grep -E "^(direct|stack) +[0-9]|serving CPU" $R/h200-hf.log | cut -c1-260
tar -C $OUT -czf $OUT/c.tgz r && rm -rf $R
