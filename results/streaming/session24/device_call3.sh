#!/bin/bash
# Session 24's third device call: #21's hf command as the docs now recommend it (2 ingress replicas; the load
# generator's processes by default; the GPU replica's engine at 16 torch threads, HFEngineConfig.for_replica), twice.
# Results in $OUT/r.
set -u
. bench/device/call_start.sh  # unpacks; R=$OUT/r; the load every 10 s until `kill $TOP`
HF="python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --num-requests 384 --paths direct stack --ingress-replicas 2"
part() {  # name, seconds it may take, arguments
  local name=$1 limit=$2; shift 2
  if (( SECONDS + limit > 590 )); then echo "$name skipped at ${SECONDS}s"; return; fi
  timeout "$limit" $HF "$@" --json "$R/$name.json" > "$R/$name.log" 2>&1
  echo "$name rc $? at ${SECONDS}s"; grep -E "^  (direct|stack) |host:" "$R/$name.log" | cut -c1-300
}
part g-command 250 --concurrency 64 256
part h-command 250 --concurrency 64 256
kill $TOP
