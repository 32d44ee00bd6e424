#!/bin/bash
# Session 24's second device call. (1) Is the engine child's slower step (TPOT p50 +5-8% against the engine alone at
# 256 streams in every run since session 21) its torch thread count? The stack's GPU replica gives its engine 8
# threads (HFEngineConfig.for_replica), the engine alone torch's default; --threads N gives every path N.
# (2) The load generator split over processes against one process, on one host.
#   d: 256 streams, both paths at torch's default thread count; e: 256 streams, one client process;
#   f: #21's command as the docs recommend it (2 ingress replicas, the load generator's processes by default).
# Results in $OUT/r.
set -u
. bench/device/call_start.sh  # unpacks; R=$OUT/r; the load every 10 s until `kill $TOP`; part()
TD=$(python3 -c "import torch; print(torch.get_num_threads())" 2>/dev/null)
{ nproc; lscpu | grep -E "^(Model name|Thread|Core|Socket|NUMA node\(s\))"; echo "torch default threads $TD"; } > "$R/host.txt" 2>&1
cat "$R/host.txt"
HF="python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --num-requests 384 --paths direct stack --ingress-replicas 2"
part d-threads-default 140 --concurrency 256 --threads "$TD"
part e-one-client 140 --concurrency 256 --client-processes 1
part f-command 250 --concurrency 64 256
kill $TOP
