#!/bin/bash
# On the H200 host: the streaming path's overhead bench on the emulated engine, with one and with two ingress replicas.
# Run it with the device tool from the repository root, carrying only .device (the Ray pack from
# ../shared/tools/pack-ray-for-device.sh, and its wheels; the emulated engine needs no transformers):
#   bash bench/device/run_overhead.sh "1 64 128" 512
# args: concurrency levels, requests per level (default max(8, 2 x concurrency)).
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site.tar.xz
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .device/whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
nproc; python3 -c "import ray; print('ray', ray.__version__)"
for replicas in 1 2; do
  python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency $1 ${2:+--num-requests $2} \
    --paths direct stack --ingress-replicas $replicas --json $OUT/h200-emulated-8b-ingress$replicas.json \
    > $OUT/h200-emulated-ingress$replicas.log 2>&1
  echo "ingress replicas $replicas: rc $?"
  grep -E "^\s+(direct|stack) +c=|^(direct|stack) " $OUT/h200-emulated-ingress$replicas.log
done
