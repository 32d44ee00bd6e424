#!/bin/bash
# Interleaved A/B on the device host's CPU: before (647adb9) / after (this session), three rounds each.
here=$(cd "$(dirname "$0")" && pwd)
PY=$(command -v python3.12 || command -v python3)
echo "python: $PY $($PY --version 2>&1)"; nproc; uptime; lscpu | grep -E "Model name|MHz" | head -3
deps=$here/deps

for i in 1 2 3; do
  for side in before after; do
    (cd $here/$side && PYTHONPATH=$here/$side${deps:+:$deps} $PY $here/rc.py --json $OUT/$side-$i.json > $OUT/$side-$i.md 2>&1; echo "$side $i rc=$?"; cat $OUT/$side-$i.md)
  done
done
uptime
