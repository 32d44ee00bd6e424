"""Per-replica start timeline from a Ray session's logs + the s21 instrumentation events.

usage: python timeline.py SESSION_DIR EVENTS_DIR [--variant variant-llama-8b-int4] [--json out.json]
"""
import glob, json, os, re, sys
from datetime import datetime

sess, evdir = sys.argv[1], sys.argv[2]
variant = "variant-llama-8b-int4"
if "--variant" in sys.argv:
    variant = sys.argv[sys.argv.index("--variant") + 1]
out_json = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None

def ts(date):  # "2026-12-06 05:34:36,153" local time (same clock as time.time())
    return datetime.strptime(date, "%Y-%m-%d %H:%M:%S,%f").timestamp()

LINE = re.compile(r"^\w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (.*)$")
reps = {}
upscales = []  # (t, from, to)
asks = []  # policy asks (t, text)
ctl = sorted(glob.glob(f"{sess}/logs/serve/controller_*.log"))
for path in ctl:
    for line in open(path, errors="replace"):
        m = LINE.match(line.strip())
        if not m or variant not in line:
            continue
        t, rest = ts(m[1]), m[2]
        if (u := re.search(r"Upscaling .* from (\d+) to (\d+) replicas", rest)):
            upscales.append((t, int(u[1]), int(u[2])))
        elif (s := re.search(r"Starting Replica\(id='(\w+)'", rest)):
            reps.setdefault(s[1], {})["starting"] = t
        elif (s := re.search(r"Replica\(id='(\w+)'.*started successfully .* after ([\d.]+)s \(PID: (\d+)\).*took ([\d.]+)s", rest)):
            r = reps.setdefault(s[1], {})
            r.update(running=t, after_s=float(s[2]), pid=int(s[3]), took_s=float(s[4]))
        elif re.search(r"-> \d+ replicas \(", rest):
            asks.append((t, rest.split(" -- ", 1)[-1]))

# the replica process's core-worker log: actor creation
for rid, r in reps.items():
    if "pid" not in r:
        continue
    for path in glob.glob(f"{sess}/logs/python-core-worker-*_{r['pid']}.log"):
        for line in open(path, errors="replace"):
            m = re.match(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
            if not m:
                continue
            if "Creating actor" in line and "actor_create" not in r:
                r["actor_create"] = ts(m[1])
            elif "Actor creation task finished" in line and "actor_created" not in r:
                r["actor_created"] = ts(m[1])

# ingress log: long-poll updates
ingress_updates = []
for path in glob.glob(f"{sess}/logs/serve/replica_*Ingress*.log"):
    for line in open(path, errors="replace"):
        m = LINE.match(line.strip())
        if m and "Got updated replicas" in line and variant in line:
            ingress_updates.append(ts(m[1]))

# instrumentation events
events = []
for path in glob.glob(f"{evdir}/events-*.jsonl"):
    for line in open(path):
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
pid2rid = {e["pid"]: e["replica"] for e in events if e["ev"] == "ctor_start"}
for e in sorted(events, key=lambda e: e["t"]):
    rid = e.get("replica") or pid2rid.get(e["pid"])
    if e["ev"] == "gc_collect" and rid in reps and "ctor_start" in reps[rid] and e["t0"] > reps[rid]["ctor_start"]:
        reps[rid].setdefault("gc_collect_dur", e["dur_s"]); reps[rid].setdefault("gc_collect_begin", e["t0"])
    if rid not in reps:
        continue
    key = e["ev"] if e["ev"] != "table_seen" else ("table_ready" if e.get("ready") else "table_seen_unready")
    reps[rid].setdefault(key, e["t"])
    if e["ev"] == "ctor_start":
        reps[rid]["proc_start"] = e.get("proc_start")
        reps[rid]["ctor_pid"] = e["pid"]

for rid, r in reps.items():
    if "starting" in r:
        prev = [u for u in upscales if u[0] <= r["starting"] + 1e-6]
        if prev:
            r["upscale"] = prev[-1][0]
        nxt = [t for t in ingress_updates if t >= r.get("running", 1e18) - 0.05]
        if nxt:
            r["ingress_longpoll"] = nxt[0]

cols = [
    ("upscale", "starting"), ("starting", "actor_create"), ("actor_create", "actor_created"),
    ("actor_created", "ctor_start"), ("ctor_start", "engine_start_begin"), ("engine_start_begin", "engine_started"),
    ("engine_started", "ctor_end"), ("ctor_end", "first_check_health"), ("first_check_health", "running"),
    ("running", "ingress_longpoll"), ("running", "router_update_replicas_new"),
    ("ctor_end", "first_post_done"), ("ctor_end", "table_ready"), ("running", "router_first_candidate"),
    ("running", "router_first_routed"), ("router_first_routed", "first_generate"),
]
def d(r, a, b):
    return None if a not in r or b not in r or r[a] is None or r[b] is None else r[b] - r[a]
rows = []
for rid, r in sorted(reps.items(), key=lambda kv: kv[1].get("starting", 0)):
    row = {"replica": rid, "starting": r.get("starting"), "after_s": r.get("after_s"), "took_s": r.get("took_s"),
           "proc_age_at_create_s": None if not r.get("proc_start") or "actor_create" not in r else r["actor_create"] - r["proc_start"]}
    for a, b in cols:
        row[f"{a}->{b}"] = d(r, a, b)
    row["upscale->first_generate"] = d(r, "upscale", "first_generate")
    row["starting->running"] = d(r, "starting", "running")
    row["raw"] = r
    rows.append(row)
print("upscales:", [(round(t, 3), a, b) for t, a, b in upscales])
hdr = ["replica"] + [f"{a}->{b}" for a, b in cols] + ["starting->running", "upscale->first_generate"]
short = lambda s: s.replace("first_", "f_").replace("router_", "r_").replace("actor_", "a_").replace("engine_", "e_")
print("\t".join(short(h) for h in hdr))
for row in rows:
    print("\t".join([row["replica"]] + ["" if row[h] is None else f"{row[h]:.3f}" for h in hdr[1:]]))
if out_json:
    json.dump({"upscales": upscales, "asks": asks, "ingress_updates": ingress_updates, "rows": rows}, open(out_json, "w"), indent=1)
