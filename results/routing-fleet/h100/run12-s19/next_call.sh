#!/bin/bash
# For the next session with device time (about 9 minutes, one call): #24's round_robin and least_loaded on the full
# two_variant fleet, one fleet on the host at a time (session 19 drove three at once and the host ran short of CPU:
# docs/routing.md). Carry .device (bench/device/pack.sh) and the gRPC generated files; drop results/ from the index
# for the call and restore it before any commit. run_fleet.sh packs its small outputs into bundle.tar.gz, so both
# fleets' files come back (the device returns at most eight).
set -u
for policy in round_robin least_loaded; do
  bash bench/device/run_fleet.sh two_variant 250 1.0 150 2 "$policy" '{}' 2>&1 | grep -E "req/s:|rc "
  mv "$OUT/two_variant" "$OUT/$policy"
done
