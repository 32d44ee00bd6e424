"""Session 20: how many requests were sent in the same 10 ms as each one (p50/p90), and the TTFT p50, in six equal
parts of a level: python results/streaming/session20/clumptime.py RECORDS.jsonl... (bench overhead --out DIR records)."""
import json, sys, collections
for f in sys.argv[1:]:
    rows = sorted((json.loads(l) for l in open(f)), key=lambda r: r["start_s"])
    n = int(f.split('-c')[-1].split('.')[0])
    T = max(r["start_s"] for r in rows)
    b = collections.Counter(int(r["start_s"] / 0.01) for r in rows)
    out = []
    for k in range(6):
        part = [r for r in rows if k * T / 6 <= r["start_s"] < (k + 1) * T / 6]
        s = sorted(b[int(r["start_s"] / 0.01)] for r in part)
        tt = sorted(r["ttft_s"] * 1e3 for r in part)
        out.append(f"{s[len(s)//2]}/{s[int(len(s)*.9)]} ttft {tt[len(tt)//2]:.0f}" if s else "-")
    print(f.split('/')[-1], " | ".join(out))
