#!/bin/bash
# Does a direct run right after a stack run (Ray just shut down) measure slower? The same code (after) throughout:
# 1: --paths direct stack; 2: --paths direct at once after it; 3: --paths direct 30 s later. One flock for the set.
out=$1; mkdir -p "$out"
flock /tmp/variant-bench.lock bash -c '
out=$0; cd /tmp/wt26-after || exit 1
run() {
  echo "start $(date -u +%H:%M:%S) $(uptime)"
  nice -n 0 /work/main/.venv/bin/python -m bench overhead --quick --concurrency 16 --num-requests 128 --paths "$@"
  echo "end $(date -u +%H:%M:%S) $(uptime)"
}
run direct stack --json "$out/1-after.json" > "$out/1-after.log" 2>&1
ps -eo pid,etime,pcpu,args | grep -E "ray|raylet|gcs_server|dashboard" | grep -v grep | cut -c1-160 > "$out/ray-processes-after-1.txt"
run direct --json "$out/2-after.json" > "$out/2-after.log" 2>&1
sleep 30
ps -eo pid,etime,pcpu,args | grep -E "ray|raylet|gcs_server|dashboard" | grep -v grep | cut -c1-160 > "$out/ray-processes-before-3.txt"
run direct --json "$out/3-after.json" > "$out/3-after.log" 2>&1
for f in 1 2 3; do echo "$f $(grep -h "direct  " "$out/$f-after.log" | head -1)"; done' "$out"
