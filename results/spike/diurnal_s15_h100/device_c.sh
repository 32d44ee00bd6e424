#!/bin/bash
# Session 15, device call C: #25's diurnal wave through the real stack on the 16-core host (no GPU used): our policy
# and Serve's default, each with the simulator beside it. The fixed fleet's replica-seconds are its size x the trace.
set -u
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nproc
R=/tmp/spike; mkdir -p $R
timeout -s INT 540 python3 -m bench spike --shape diurnal --mode engine_load --mode ongoing_requests --out $R --json $R/diurnal.json --no-progress > $R/log.txt 2>&1
echo "rc $?"
grep -v "^\s*$" $R/log.txt | grep -v WARN | tail -30 | cut -c1-260
sed -n '/## Real stack and simulator/,/## Simulated less/p' $R/diurnal/report.md
tar -C /tmp -czf $OUT/spike.tgz spike; ls -la $OUT
