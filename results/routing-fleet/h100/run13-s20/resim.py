"""Session 20: the two_variant full fleet at its top rate, simulated with 1 and 2 ingress replicas (each simulated
ingress with its own router state, in-flight book, latency models and snapshot; requests to ingresses at random),
beside the real runs: round_robin and least_loaded from run13 (one fleet on the host), slo and length_threshold from
session 18's run11, largest from session 19's run12. Run: python results/routing-fleet/h100/run13-s20/resim.py"""

from bench.routing_fleet import estimate_capacity, fleet_scenario
from router import RouterConfig
from sim.scenario import SCENARIOS, simulate

make = SCENARIOS["two_variant"]
base = fleet_scenario(make, 150.0, 1.0, 1.0)
est = estimate_capacity(base)
sc = fleet_scenario(make, 150.0, 1.0 * est.rate_scale, 1.0)
sc = sc.model_copy(update={"seed": 0, "router": RouterConfig.model_validate({**sc.router.model_dump()})})
real = {"slo": 96.5, "length_threshold": 80.0, "round_robin": 59.4, "least_loaded": 60.8, "largest": 0.0}
print("capacity", est.capacity, "replica_choice", sc.replica_choice)
for pol in real:
    row = []
    for n in (1, 2):
        _, run = simulate(sc.model_copy(update={"ingress_replicas": n}), pol, "static")
        row.append(100 * run.summary.slo_attainment)
    print(
        f"{pol:17s} real {real[pol]:5.1f}  sim 1 ingress {row[0]:5.1f} ({row[0] - real[pol]:+.1f})  "
        f"2 ingresses {row[1]:5.1f} ({row[1] - real[pol]:+.1f})"
    )
