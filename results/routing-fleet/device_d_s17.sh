#!/bin/bash
# Session 17: #24's full two_variant fleet with 8208694's policy (slo, length_threshold), 100 s per policy (the
# session's device budget was 349 s).
set -u
t0=$(date +%s)
bash bench/device/run_fleet.sh two_variant 230 1.0 100 1 "slo length_threshold" '{}' 2>&1 | grep -E "req/s:|Bar|Agreement|rc "
echo "fleet $(( $(date +%s) - t0 )) s"
