#!/bin/bash
# On the H200 host: the routing bench's emulated fleets through real Serve, every policy at once (--parallel).
# Run it with the device tool from the repository root, carrying only the Ray pack (.device/ray-site.tar.xz, from
# ../shared/tools/pack-ray-for-device.sh; the emulated engine needs no transformers):
#   bash bench/device/run_fleet.sh two_variant 520 1.0 180 2 "slo length_threshold"
# args: scenario, timeout (s), fleet scale, seconds per point, ingress replicas, policies (default: all five).
# Records sit deeper than the device returns: bench/device/fleet_digest.py summarises them there.
mkdir -p /tmp/site && tar -C /tmp/site -xJf .device/ray-site.tar.xz
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .device/whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
(while sleep 20; do top -b -n 1 -w 200 | head -12; done) > $OUT/top.txt 2>&1 &
TOP=$!
timeout $2 python3 -m bench routing --scenario $1 --fleet-scale $3 --duration-s $4 --rate-fractions 1.0 --parallel \
  --ingress-replicas $5 --policies ${6:-slo round_robin least_loaded length_threshold largest} --request-timeout-s 150 --out $OUT/$1 > $OUT/$1.log 2>&1
echo "rc $?"; kill $TOP
grep -E "req/s:|Bar|Agreement" $OUT/$1.log
python3 bench/device/fleet_digest.py $OUT/$1 | tee $OUT/digest.txt
find $OUT/$1 -name "*records.jsonl" -delete
ls -la $OUT
