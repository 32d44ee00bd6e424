# Sourced first by a device call's script (results/streaming/session2*/device_call.sh), from the repository root:
# unpacks what bench/device/pack.sh carried, sets R=$OUT/r for the results, and logs the host's load every 10 s
# to $R/uptime.txt until the script runs `kill $TOP`.
. bench/device/unpack.sh
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
(while true; do uptime >> "$R/uptime.txt"; sleep 10; done) &
TOP=$!
