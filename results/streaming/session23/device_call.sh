#!/bin/bash
# Session 23's device calls (copied to the root and run as `bash s23_device.sh emulated|hf`: results/ is out of the
# index for the call). emulated: #21's emulated command at 64 and 128 streams on the delta channel (the default),
# then the same with Serve's per-request gRPC streams (--engine-transport grpc), on one host; hf: the hf command.
# Results in $OUT/r.
set -u
. bench/device/call_start.sh  # unpacks; R=$OUT/r; the load every 10 s until `kill $TOP`
if [[ $1 == emulated ]]; then
  for transport in channel grpc; do
    timeout 280 python3 -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 128 \
      --paths direct stack --engine-transport $transport --json $R/emulated-$transport.json \
      > $R/emulated-$transport.log 2>&1
    echo "emulated $transport rc $?"; grep -E "^  (direct|stack) |host:" $R/emulated-$transport.log | cut -c1-260
  done
else
  timeout 500 python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --ingress-replicas 2 \
    --concurrency 64 256 --num-requests 384 --paths direct stack --json $R/hf.json > $R/hf.log 2>&1
  echo "hf rc $?"; grep -E "^  (direct|stack) |host:" $R/hf.log | cut -c1-260
fi
kill $TOP
