"""Session 20: a level's TTFT split by the records' Server-Timing (engine span, handler, the rest outside the ingress), for
the first wave and the rest: python results/streaming/session20/split21.py RECORDS.jsonl..."""
import json, sys
def q(v, p):
    v = sorted(v); return v[min(len(v)-1, int(len(v)*p))] if v else float('nan')
for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    rows.sort(key=lambda r: r["start_s"])
    for name, part in (("all", rows), ("first wave", rows[:int(f.split('-c')[-1].split('.')[0])] if 'stack' in f else rows[:0]), ("rest", rows[int(f.split('-c')[-1].split('.')[0]):])):
        if not part: continue
        ttft = [r["ttft_s"]*1e3 for r in part if r["ttft_s"]]
        eng = [r["server_engine_ms"] for r in part if r.get("server_engine_ms") is not None]
        ing = [r["server_ingress_ms"] for r in part if r.get("server_ingress_ms") is not None]
        out = [r["ttft_s"]*1e3 - r["server_engine_ms"] - r["server_ingress_ms"] for r in part if r.get("server_engine_ms") is not None and r["ttft_s"]]
        print(f"{f.split('/')[-1]:20s} {name:10s} n={len(part):4d} TTFT p50/p90 {q(ttft,.5):6.1f}/{q(ttft,.9):6.1f}  engine {q(eng,.5):6.1f}/{q(eng,.9):6.1f}  handler {q(ing,.5):5.1f}/{q(ing,.9):5.1f}  outside {q(out,.5):6.1f}/{q(out,.9):6.1f}")
