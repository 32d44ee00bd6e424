#!/bin/bash
# Session 20: the quarter two_variant fleet under length_threshold, 60 s at capacity, without and with the serving
# processes' garbage-collector tuning (results/streaming/session20/cpu-gc-ab/change.diff), interleaved, each from
# its own worktree; the digest splits each request's TTFT into the ingress's part and the path outside it.
#   bash results/routing-fleet/cpu/gc-ab-s20/ab.sh /tmp/wt-r-before /tmp/wt-r-after OUT
set -u
before=$1 after=$2 here=$3
for run in before-1 after-1 before-2 after-2; do
  tree=$before; [[ $run == after* ]] && tree=$after
  (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench routing \
    --scenario two_variant --fleet-scale 0.25 --duration-s 60 --rate-fractions 1.0 --policies length_threshold \
    --out "/tmp/gcab-$run" > "$here/$run.log" 2>&1)
  grep "req/s:" "$here/$run.log"
  (cd "$tree" && PYTHONPATH=$tree python bench/device/fleet_digest.py "/tmp/gcab-$run" > "$here/$run-digest.txt" 2>&1)
  head -2 "$here/$run-digest.txt"
  echo "$run $(uptime)" >> "$here/uptime.txt"
done
