"""The step's scale-up relative to the step (trace start + 15 s): policy ask, Serve's upscale, replicas serving."""
import json, re, sys, glob, statistics
from datetime import datetime
tl, began = json.load(open(sys.argv[1])), float(sys.argv[2])
sess = sys.argv[3]
step = began + 15.0
asks = []
for p in glob.glob(f"{sess}/logs/serve/controller_*.log"):
    for line in open(p, errors="replace"):
        m = re.match(r"^\w+ (\S+ \S+) .*variant-llama-8b-int4: (\d+) -> (\d+) replicas \((\w+)", line)
        if m:
            t = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if step - 2 < t < step + 5 and int(m[3]) > int(m[2]):
                asks.append((round(t - step, 2), f"{m[2]}->{m[3]} {m[4]}"))
print("policy asks above current (s after the step):", asks)
ups = [(round(t - step, 2), a, b) for t, a, b in tl["upscales"] if step - 5 < t < step + 5]
print("Serve upscales:", ups)
big = [u for u in tl["upscales"] if step < u[0] < step + 5][0][0]
rows = [r["raw"] for r in tl["rows"] if abs(r["raw"].get("upscale", 0) - big) < 0.01]
for k in ("running", "router_first_routed"):
    v = sorted(r[k] - step for r in rows if k in r)
    print(f"{k}: s after the step: min {v[0]:.2f} median {statistics.median(v):.2f} max {v[-1]:.2f} (n={len(v)})")
