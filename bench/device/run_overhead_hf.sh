#!/bin/bash
# On the H200 host: the streaming path's overhead bench on the transformers engine on the GPU (docs/streaming.md).
# Carry the Ray pack and the transformers wheel (.device/ray-site*.tar.xz, .device/whl/; bench/device/pack.sh):
# when the pack and the tree pass the device's 64 MiB, a pack with its binaries' debug symbols stripped fits.
#   bash bench/device/run_overhead_hf.sh .device/ray-site-stripped.tar.xz
mkdir -p /tmp/site && tar -C /tmp/site -xJf ${1:-.device/ray-site.tar.xz}
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .device/whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
python3 -c "import ray, transformers, torch; print('ray', ray.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__, torch.cuda.is_available())"
python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 256 --num-requests 384 --paths direct stack --json $OUT/h200-hf-1b.json > $OUT/h200-hf.log 2>&1
echo "rc $?"
grep -E "^\s+(direct|stack) +c=|^(direct|stack) " $OUT/h200-hf.log
