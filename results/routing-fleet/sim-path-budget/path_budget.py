"""The simulator's two_variant fleet at capacity, 180 s, with the SLO policy judging every TTFT target less
``router.ttft_path_ms`` (issue #24): attainment as the simulator scores it, and again with a client-side path
added to every TTFT (log-normal, p50 13 / p90 59 ms: what the H200 host's run5 measured outside the ingress),
at the simulator's stats period (0.1 s) and at 0.3 s (as old as the real stack's stats get).

    PYTHONPATH=. python results/routing-fleet/sim-path-budget/path_budget.py 180 0,30,50,70
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys

from bench.fleet import fleet_scenario
from sim.capacity import estimate_capacity
from sim.scenario import SCENARIOS
from sim.simulator import Simulation
from sim.workload import sim_requests
from traffic.records import RequestRecord, slo_met

OUTSIDE_P50_MS, OUTSIDE_P90_MS = 13.0, 59.0


def run(duration_s: float, path_ms: float, period_s: float, policy: str = "slo") -> list[RequestRecord]:
    make = SCENARIOS["two_variant"]
    estimate = estimate_capacity(fleet_scenario(make, duration_s, 1.0, 1.0))
    scenario = fleet_scenario(make, duration_s, estimate.rate_scale, 1.0)
    router = scenario.router.model_copy(update={"policy": policy, "ttft_path_ms": path_ms})
    sim = Simulation(
        [p.sim_variant("static") for p in scenario.pools],
        router,
        seed=scenario.seed,
        replica_choice=scenario.replica_choice,
        snapshot_period_s=period_s,
    )
    return sim.run(sim_requests(scenario.streams, scenario.duration_s, router), horizon_s=duration_s).records


def attainment(records: list[RequestRecord], outside: bool, seed: int = 0) -> str:
    rng = random.Random(seed)
    sigma = math.log(OUTSIDE_P90_MS / OUTSIDE_P50_MS) / 1.2816
    met = interactive = interactive_met = 0
    for r in records:
        if outside and r.ttft_s is not None:
            r = dataclasses.replace(r, ttft_s=r.ttft_s + OUTSIDE_P50_MS * math.exp(sigma * rng.gauss(0, 1)) / 1e3)
        ok = slo_met(r)
        met += ok
        if r.slo_tier == "interactive":
            interactive += 1
            interactive_met += ok
    return f"{met / len(records):.1%} (interactive {interactive_met / max(interactive, 1):.1%})"


if __name__ == "__main__":
    duration = float(sys.argv[1])
    for path in (float(x) for x in sys.argv[2].split(",")):
        for period in (0.1, 0.3):
            records = run(duration, path, period)
            print(
                f"slo ttft_path_ms {path:g} stats period {period} s: {attainment(records, False)}"
                f" | with the path added at the client: {attainment(records, True)}",
                flush=True,
            )
