#!/bin/bash
# Session 23: #21's --quick command (the hf engine sharing the 2-core CPU) on the delta channel and on Serve's
# per-request gRPC streams, interleaved, PAIRS times, from one tree:
#   bash results/streaming/session23/quick/ab.sh [PAIRS]
set -u
here=$(cd "$(dirname "$0")" && pwd)
for i in $(seq 1 "${1:-1}"); do
  for transport in grpc channel; do
    HF_HUB_OFFLINE=1 flock /tmp/variant-bench.lock python -m bench overhead --quick --concurrency 1 16 64 \
      --paths direct stack --engine-transport $transport --json "$here/$transport-$i.json" > "/tmp/s23q-$transport-$i.log" 2>&1
    echo "$transport-$i"; grep -E "^(direct|stack) +[0-9]" "/tmp/s23q-$transport-$i.log"
    echo "$transport-$i $(uptime)" >> "$here/uptime.txt"
  done
done
