#!/bin/bash
# Session 22's device call (run as `bash s22_device.sh` from the root: results/ is out of the index for the call): #21's
# emulated bar command at 64 and 128 streams, then the hf command, on the tree with
# plain pickle over Serve's gRPC and the one tail write (d737c74). Results in $OUT/r.
set -u
. bench/device/call_start.sh  # unpacks; R=$OUT/r; the load every 10 s until `kill $TOP`
timeout 200 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 \
  --paths direct stack --json $R/emulated.json > $R/emulated.log 2>&1
echo "emulated rc $?"; grep -E "^  (direct|stack) |host:" $R/emulated.log | cut -c1-260
timeout 300 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
  --concurrency 64 256 --num-requests 384 --paths direct stack --json $R/hf.json > $R/hf.log 2>&1
echo "hf rc $?"; grep -E "^  (direct|stack) |host:" $R/hf.log | cut -c1-260
kill $TOP
