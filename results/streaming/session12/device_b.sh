#!/bin/bash
# Session 12, H200 call B: the hf engine's child profiled alone (the probe) and inside the stack, then #21's hf bar
# command as the docs recommend it (two ingress replicas). Carry the two tarballs and .device/py-spy.xz.
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz && tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
mkdir -p /tmp/pyspy/bin && xz -dc .device/py-spy.xz > /tmp/pyspy/bin/py-spy && chmod +x /tmp/pyspy/bin/py-spy
export PATH=/tmp/pyspy/bin:$PATH PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
R=$OUT/r; mkdir -p $R/prof
echo "unpacked $(( $(date +%s) - t0 )) s"; which py-spy
PYSPY_OUT=$R/prof/probe timeout 120 python3 results/streaming/session12/probe_ray_child.py random:llama-1b plain 64 256 > $R/probe.log 2>&1
grep "^PROBE" $R/probe.log | cut -c1-250
echo "probe done $(( $(date +%s) - t0 )) s"
timeout 170 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 --num-requests 320 --paths stack --profile $R/prof --json $R/stack-prof.json > $R/stack-prof.log 2>&1
echo "stack-prof rc $? $(( $(date +%s) - t0 )) s"; grep -E "stack +c=" $R/stack-prof.log | tail -2
timeout 280 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 256 --num-requests 384 --paths direct stack --json $R/h200-hf-1b.json > $R/h200-hf.log 2>&1
echo "bar rc $? $(( $(date +%s) - t0 )) s"; grep -E "^(direct|stack) +[0-9]" $R/h200-hf.log
tar -C $OUT -czf $OUT/b.tgz r && rm -rf $R
