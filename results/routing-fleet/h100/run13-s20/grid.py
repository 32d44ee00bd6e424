"""Session 20. 2x2: replica assignment (real / sim) x arrival times (real client sends / scheduled) through SimReplica."""
import gzip, json, sys, heapq
from collections import defaultdict
from bench.fleet import fleet_scenario
from sim.scenario import SCENARIOS, simulate
from sim.capacity import estimate_capacity
from sim.replica import SimReplica, ReplicaState
from sim.workload import sim_requests
import sim.deployment as dep
from router.config import RouterConfig

policy = sys.argv[2]
rows = {r["index"]: r for r in (json.loads(l) for l in gzip.open(sys.argv[1]))}
make = SCENARIOS["two_variant"]
base = fleet_scenario(make, 150, 1.0, 1.0)
est = estimate_capacity(base)
sc = fleet_scenario(make, 150, est.rate_scale, 1.0)
sc = sc.model_copy(update={"seed": 0, "router": RouterConfig.model_validate(sc.router.model_dump()), "ingress_replicas": 2})
assigned = {}
orig = dep.SimDeployment._submit
def rec(self, replica, request, now):
    assigned[request.index] = (self.name, replica.replica_id)
    return orig(self, replica, request, now)
dep.SimDeployment._submit = rec
res, run = simulate(sc, policy, "static")
simrec = {r.index: r for r in res.records}
profiles = {p.name: p.engine_profile() if hasattr(p, "engine_profile") else p.profile for p in sc.pools}

def replay(assign, times):
    reqs = {r.index: r for r in sim_requests(sc.streams, sc.duration_s, sc.router)}
    byrep = defaultdict(list)
    for i, key in assign.items():
        byrep[key].append(i)
    out = {}
    for (variant, rep), idxs in byrep.items():
        replica = SimReplica(rep, profiles[variant], 0.0); replica.state = ReplicaState.READY
        ev = [(times[i], 0, i) for i in idxs]; heapq.heapify(ev)
        while ev:
            t, kind, i = heapq.heappop(ev)
            if kind == 0:
                nxt = replica.submit(reqs[i], t)
            else:
                if i != replica.version: continue
                _, nxt = replica.step_end(t)
            if nxt is not None: heapq.heappush(ev, (nxt, 1, replica.version))
        for i in idxs:
            r = reqs[i]
            out[i] = (variant, 1e3*(r.first_token_s - r.dispatched_s), 1e3*(r.end_s-r.first_token_s)/max(1,r.max_tokens-1))
    return out

reqs0 = {r.index: r for r in sim_requests(sc.streams, sc.duration_s, sc.router)}
real_assign = {i: (r["variant"], r["replica"]) for i, r in rows.items() if r["replica"]}
real_times = {i: r["start_s"] + (r["ingress_ms"] or 0)/1e3 for i, r in rows.items()}
sim_times = {i: reqs0[i].arrival_s for i in rows}
slo = {i: reqs0[i].slo for i in rows}
def summary(name, out):
    met = 0; by = defaultdict(list)
    for i, (v, ttft, tpot) in out.items():
        s = slo[i]; met += ttft <= s.ttft_ms and tpot <= s.tpot_ms
        by[(v, s.tier)].append(ttft)
    q = lambda v, p: sorted(v)[min(len(v)-1, int(len(v)*p))]
    print(f"{name:34s} engine-side met {100*met/len(out):.1f}%  " + "  ".join(f"{v[:9]}/{t[:5]} {q(x,.5):.0f}/{q(x,.9):.0f}" for (v,t),x in sorted(by.items())))
print(f"sim attainment {run.summary.slo_attainment:.1%}")
summary("real assignment, real times", replay(real_assign, real_times))
summary("real assignment, scheduled times", replay(real_assign, sim_times))
sim_assign = {i: assigned[i] for i in rows if i in assigned}
summary("sim assignment, scheduled times", replay(sim_assign, sim_times))
summary("sim assignment, real times", replay(sim_assign, real_times))
# same variant, sim replica choice: per-replica prompt token spread

def behind(name, assign, times):
    out = replay(assign, times)
    byrep = defaultdict(list)
    for i, key in assign.items():
        byrep[key].append(i)
    stats = defaultdict(lambda: [0, 0, 0])
    for (variant, rep), idxs in byrep.items():
        longs = [(times[i], times[i] + out[i][1] / 1e3) for i in idxs if reqs0[i].prompt_tokens >= 1024]
        for i in idxs:
            if reqs0[i].prompt_tokens >= 1024:
                continue
            t = times[i]
            b = any(s < t < f for s, f in longs)
            st = stats[(variant, b)]
            st[0] += 1; st[1] += out[i][1] <= slo[i].ttft_ms
    print(name, {f"{v[:9]} {'behind' if b else 'clear'}": f"{s[1]}/{s[0]}" for (v, b), s in sorted(stats.items())})
behind("real assignment", real_assign, real_times)
behind("sim assignment ", sim_assign, sim_times)
import collections
for nm, a in (("real", real_assign), ("sim", sim_assign)):
    c = collections.Counter(a.values())
    tok = collections.Counter()
    for i, k in a.items(): tok[k] += reqs0[i].prompt_tokens
    print(nm, sorted(c.values()), sorted(v//1000 for v in tok.values()))
