#!/bin/bash
# Session 16: the half two_variant fleet on this 2-core CPU after 8208694 (a long loose request goes around the
# tighter requests it would leave short of room), slo and length_threshold one after the other, the simulator beside.
#   bash results/routing-fleet/cpu/half-s16/run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench routing --scenario two_variant --fleet-scale 0.5 \
  --duration-s 120 --rate-fractions 1.0 --policies slo length_threshold --request-timeout-s 150 \
  --out /tmp/half-s16 --json "$here/sweep.json" > /tmp/half-s16.log 2>&1
grep -E "req/s:|Bar|Agreement" /tmp/half-s16.log
cp /tmp/half-s16/report.md "$here/report.md"
python bench/device/fleet_digest.py /tmp/half-s16 > "$here/digest.txt"
uptime >> "$here/uptime.txt"
