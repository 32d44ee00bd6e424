# Sourced first by the script a device call runs (written for that call), from the repository root:
# unpacks what bench/device/pack.sh carried, sets R=$OUT/r for the results, and logs the host's load every 10 s
# to $R/uptime.txt until the script runs `kill $TOP`.
. bench/device/unpack.sh
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"
(while true; do uptime >> "$R/uptime.txt"; sleep 10; done) &
TOP=$!
# part NAME SECONDS ARGS...: one `$HF ARGS --json $R/NAME.json` run (HF: the script's bench command), its log in
# $R/NAME.log and its level lines echoed; skipped when it could not end by CAP seconds into the call (default 590).
part() {
  local name=$1 limit=$2; shift 2
  if (( SECONDS + limit > ${CAP:-590} )); then echo "$name skipped at ${SECONDS}s"; return; fi
  timeout "$limit" $HF "$@" --json "$R/$name.json" > "$R/$name.log" 2>&1
  echo "$name rc $? at ${SECONDS}s"; grep -E "^  (direct|stack) |host:" "$R/$name.log" | cut -c1-300
}
