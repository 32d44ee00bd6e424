"""The path outside the ingress (client TTFT less the ingress's Server-Timing spans) of the 8B's requests, per 10 ms,
for each run of the A/B (records in /tmp/margin-ab, left there by ab.sh). The 50-60 ms bucket is the first token
that was half a character, held an interval (50 ms) before a0946e2."""

import collections
import glob
import json
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/margin-ab"
print("run      requests  " + " ".join(f"{k:>4}" for k in range(0, 100, 10)) + "  100+ ms")
for run in ("before-1", "after-1", "before-2", "after-2"):
    (path,) = glob.glob(f"{root}/{run}/slo/rate-*/records.jsonl")
    rows = [json.loads(line) for line in open(path)]
    outside = [
        r["ttft_s"] * 1e3 - (r["server_ingress_ms"] or 0) - r["server_engine_ms"]
        for r in rows
        if r.get("ttft_s") and r.get("server_engine_ms") is not None and r.get("variant") == "llama-8b-int4"
    ]
    buckets = collections.Counter(min(int(o // 10) * 10, 100) for o in outside)
    print(f"{run:8} {len(outside):8}  " + " ".join(f"{buckets[k]:4}" for k in range(0, 110, 10)))
