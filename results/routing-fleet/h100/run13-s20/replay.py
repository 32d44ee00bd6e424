"""Replays each real replica's arrivals (from compact.jsonl.gz) through one SimReplica: is the emulated engine in
Serve slower than the shared batch model on the same arrivals, or did it get different arrivals?"""
import gzip, json, sys, heapq
from collections import defaultdict
from bench.fleet import fleet_scenario, scenario_requests
from sim.scenario import SCENARIOS
from sim.capacity import estimate_capacity
from sim.replica import SimReplica
from sim.request import SimRequest
from sim.workload import sim_requests

path = sys.argv[1]
rows = [json.loads(l) for l in gzip.open(path)]
make = SCENARIOS["two_variant"]
base = fleet_scenario(make, 150, 1.0, 1.0)
est = estimate_capacity(base)
sc = fleet_scenario(make, 150, est.rate_scale, 1.0)
reqs = {r.index: r for r in sim_requests(sc.streams, sc.duration_s, sc.router)}
profiles = {p.name: p.engine_profile() if hasattr(p, "engine_profile") else p.profile for p in sc.pools}
print({k: type(v).__name__ for k, v in profiles.items()})
byrep = defaultdict(list)
for r in rows:
    byrep[(r["variant"], r["replica"])].append(r)
def q(v, p):
    v = sorted(v); return v[min(len(v)-1, int(len(v)*p))] if v else float('nan')
for (variant, rep), rs in sorted(byrep.items()):
    rs.sort(key=lambda r: r["start_s"])
    replica = SimReplica(rep, profiles[variant], 0.0)
    replica.state = __import__("sim.replica", fromlist=["x"]).ReplicaState.READY
    events = []  # (time, kind, seq, payload)
    sims = {}
    for r in rs:
        s = reqs[r["index"]]
        sr = SimRequest(index=s.index, arrival_s=s.arrival_s, prompt_tokens=s.prompt_tokens, max_tokens=s.max_tokens, slo=s.slo) if False else s
        arrive = r["start_s"] + (r["ingress_ms"] or 0) / 1e3
        heapq.heappush(events, (arrive, 0, r["index"], s))
    version_end = None
    n = 0
    while events:
        t, kind, idx, payload = heapq.heappop(events)
        if kind == 0:
            payload.first_token_s = None
            nxt = replica.submit(payload, t)
            if nxt is not None:
                heapq.heappush(events, (nxt, 1, replica.version, None))
        else:
            if idx != replica.version:
                continue
            _, nxt = replica.step_end(t)
            if nxt is not None:
                heapq.heappush(events, (nxt, 1, replica.version, None))
    real = [r["engine_ms"] for r in rs if r["engine_ms"] is not None]
    simt = [1e3 * (reqs[r["index"]].first_token_s - reqs[r["index"]].dispatched_s) for r in rs]
    rt = [r["tpot"] for r in rs if r["tpot"]]; st = [1e3*(reqs[r["index"]].end_s - reqs[r["index"]].first_token_s)/(reqs[r["index"]].max_tokens-1) for r in rs if reqs[r["index"]].max_tokens>1]
    print(f"{variant[:10]} {rep} n={len(rs)} engine TTFT p50/p90/p99 real {q(real,.5):.0f}/{q(real,.9):.0f}/{q(real,.99):.0f} replay {q(simt,.5):.0f}/{q(simt,.9):.0f}/{q(simt,.99):.0f}  TPOT p50/p90 real {q(rt,.5):.1f}/{q(rt,.9):.1f} replay {q(st,.5):.1f}/{q(st,.9):.1f}")
