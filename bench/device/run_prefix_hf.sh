#!/bin/bash
# On the GPU host: prefix-aware routing against the same router blind to the prefix caches (slo vs slo_blind),
# through the real stack on the transformers engine (configs/gpu-hf-prefix.yaml: two replicas of a 1B shape on one
# GPU), the long class sharing 32 prefixes of 3,072 tokens (each policy its own prefixes: they share the engines).
# Carry .device (bench/device/pack.sh) and run from the repository root:
#   bash bench/device/run_prefix_hf.sh [seconds per point] [rate fractions]
# What comes back under $OUT/prefix-hf: log.txt, report.md, sweep.json.
set -u
DURATION=${1:-90} FRACTIONS=${2:-0.8}
. bench/device/unpack.sh
export PYTHONUNBUFFERED=1
R=$OUT/prefix-hf
mkdir -p "$R"
python3 -c "import ray, transformers, torch; print('ray', ray.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())"
# shellcheck disable=SC2086  # FRACTIONS is a list of words
timeout 560 python3 -m bench routing --config configs/gpu-hf-prefix.yaml --shared-prefix 32:3072 \
  --interactive-share 0.5 --policies slo slo_blind --rate-fractions $FRACTIONS --duration-s "$DURATION" \
  --out "$R/run" --json "$R/sweep.json" > "$R/log.txt" 2>&1
echo "rc $?" >> "$R/log.txt"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
rm -rf "$R/run"
grep -E "req/s:|capacity|rc " "$R/log.txt"
sed -n '/## Prefix caches/,$p' "$R/report.md" | head -12
