#!/bin/bash
# On the H200 host: the routing bench's emulated fleets through real Serve (its CPUs; the emulated engine uses no
# GPU), every policy given at once (--parallel), the simulator on the same requests beside each, then the digest
# (bench/device/fleet_digest.py: real against simulated per policy, the replica and ingress each request went
# through, short requests behind a long prefill on their replica).
# Run it with the device tool from the repository root, carrying .device (bench/device/pack.sh: Ray for the image's
# Python; the emulated engine needs no transformers), e.g.
#   bash bench/device/run_fleet.sh two_variant 540 1.0 150 2 "slo length_threshold"
# args: scenario, timeout (s), fleet scale, seconds per point, ingress replicas, policies (default: all five),
# router JSON (default: {"ttft_path_ms": 60}).
# What comes back under $OUT/$1: log.txt, digest.txt, compact.jsonl.gz (one row per request, real and simulated) and
# bundle.tar.gz (commit.txt, report.md, sweep.json, uptime.txt, top.txt); the run's folder is deleted.
set -u
SCENARIO=$1 LIMIT=$2 SCALE=$3 DURATION=$4 INGRESS=$5
POLICIES=${6:-slo round_robin least_loaded length_threshold largest}
ROUTER=${7:-'{"ttft_path_ms": 60}'}
mkdir -p /tmp/site
if [ -f .device/ray-site-stripped.tar.xz ]; then
  tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
else
  tar -C /tmp/site -xJf .device/ray-site.tar.xz
  python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .device/whl/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
R=$OUT/$SCENARIO
mkdir -p "$R"
{ git log --oneline -1 2>/dev/null; git status --short 2>/dev/null | head -20; nproc; } > "$R/commit.txt"
(while true; do uptime >> "$R/uptime.txt"; top -b -n 1 -w 200 | head -14 >> "$R/top.txt"; sleep 20; done) &
TOP=$!
# shellcheck disable=SC2086  # POLICIES is a list of words
timeout -s INT "$LIMIT" python3 -m bench routing --scenario "$SCENARIO" --fleet-scale "$SCALE" --duration-s "$DURATION" \
  --rate-fractions 1.0 --parallel --ingress-replicas "$INGRESS" --policies $POLICIES --request-timeout-s 150 \
  --router "$ROUTER" --out "$R/run" --json "$R/sweep.json" > "$R/log.txt" 2>&1
echo "rc $?" >> "$R/log.txt"
kill $TOP
grep -E "req/s:|Target|Agreement|rc " "$R/log.txt"
cp "$R/run/report.md" "$R/report.md" 2>/dev/null
python3 bench/device/fleet_digest.py "$R/run" "$R/compact.jsonl.gz" | tee "$R/digest.txt"
find "$R/run" -name "*records.jsonl" -delete
# The device returns at most eight files a call (with more, report.md, sweep.json, top.txt and uptime.txt were
# among those left out): the small ones travel as one archive.
(cd "$R" && tar czf bundle.tar.gz --ignore-failed-read commit.txt report.md sweep.json top.txt uptime.txt 2>/dev/null \
  && rm -f commit.txt report.md sweep.json top.txt uptime.txt)
rm -rf "$R/run"
ls -la "$R"
