#!/bin/bash
# Session 24's device call (copied to the root and run as `bash s24_device.sh`: results/ is out of the index for the
# call): #21's hf command on the GPU host with the load generator split over processes (bench/load_processes.py,
# four at 256 streams on 16 cores), and what each of the two changes does at 256 streams:
#   a: the full command, 4 ingress replicas, client processes by default (1 at 64 streams, 4 at 256), records kept;
#   b: 256 streams, 2 ingress replicas (session 23's setting), client processes by default;
#   c: 256 streams, 4 ingress replicas, one client process (the load generator as session 23 ran it).
# Results in $OUT/r; a part that could not finish in the call's 600 s is skipped (bench/device/call_start.sh's part).
set -u
. bench/device/call_start.sh  # unpacks; R=$OUT/r; the load every 10 s until `kill $TOP`; part()
HF="python3 -m bench overhead --model random:llama-1b --device cuda --engine-process --num-requests 384 --paths direct stack"
part a-ingress4 250 --ingress-replicas 4 --concurrency 64 256 --out "$R/a-records"
part b-ingress2 140 --ingress-replicas 2 --concurrency 256
part c-ingress4-one-client 140 --ingress-replicas 4 --concurrency 256 --client-processes 1
kill $TOP
