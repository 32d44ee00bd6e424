"""How late the load generator sent each request against its scheduled time (compact.jsonl.gz of a fleet run)."""
import gzip, json, sys
from bench.fleet import fleet_scenario
from sim.scenario import SCENARIOS
from sim.capacity import estimate_capacity
from sim.workload import sim_requests
rows = [json.loads(l) for l in gzip.open(sys.argv[1])]
make = SCENARIOS["two_variant"]
base = fleet_scenario(make, 150, 1.0, 1.0)
est = estimate_capacity(base)
sc = fleet_scenario(make, 150, est.rate_scale, 1.0)
reqs = {r.index: r for r in sim_requests(sc.streams, sc.duration_s, sc.router)}
lag = sorted(r["start_s"] - reqs[r["index"]].arrival_s for r in rows)
q = lambda p: lag[min(len(lag)-1, int(len(lag)*p))]*1e3
print("send lag ms p0 p50 p90 p99 max", q(0), q(.5), q(.9), q(.99), lag[-1]*1e3)
mism = sum(1 for r in rows if reqs[r["index"]].prompt_tokens != r["prompt"])
print("prompt mismatches", mism, len(rows))
