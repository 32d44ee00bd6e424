#!/usr/bin/env bash
# Session 13: the hf engine on this 2-core CPU (bench overhead --quick at 16 streams, 8 rounds), interleaved:
# the engine in the replica's process vs in its own process (engine_process), both with one torch thread
# (what a default CPU replica with num_cpus <= 1 gets), against the engine alone with one and with two threads.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
out=results/streaming/session13/cpu-quick
common=(--quick --concurrency 16 --num-requests 128)
for i in 1 2 3; do
  python -m bench overhead "${common[@]}" --paths direct stack --threads 1 --json "$out/$i-inproc-t1.json" >"$out/$i-inproc-t1.log" 2>&1
  python -m bench overhead "${common[@]}" --paths direct stack --threads 1 --engine-process --json "$out/$i-process-t1.json" >"$out/$i-process-t1.log" 2>&1
  python -m bench overhead "${common[@]}" --paths direct --threads 2 --json "$out/$i-direct-t2.json" >"$out/$i-direct-t2.log" 2>&1
done
grep -h "c=16" "$out"/*.log
