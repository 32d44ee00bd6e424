"""What the three experiments here share: a simulator fleet at its scenario's capacity, and the line each prints.

``run`` builds the named scenario at the rate the simulator's capacity estimate gives, with the router's policy
set, and runs it in ``kind`` (the plain :class:`~sim.simulator.Simulation` or an experiment's subclass, with its
own keyword arguments). ``summary`` is SLO attainment, the interactive tier's, and how many standard (long-prompt)
requests went to the 8B, then ``more``.
"""

from __future__ import annotations

from collections import Counter

from bench.fleet import fleet_scenario
from sim.capacity import estimate_capacity
from sim.scenario import SCENARIOS
from sim.simulator import Simulation
from sim.workload import sim_requests


def run(
    kind: type[Simulation], policy: str, duration_s: float, scenario_name: str = "two_variant", seed: int = 0, **extra
):
    """The records of one run, and the simulation (its latency models)."""
    make = SCENARIOS[scenario_name]
    estimate = estimate_capacity(fleet_scenario(make, duration_s, 1.0, 1.0))
    scenario = fleet_scenario(make, duration_s, estimate.rate_scale, 1.0)
    router = scenario.router.model_copy(update={"policy": policy})
    variants = [p.sim_variant("static") for p in scenario.pools]
    sim = kind(variants, router, seed=scenario.seed + seed, replica_choice=scenario.replica_choice, **extra)
    records = sim.run(sim_requests(scenario.streams, scenario.duration_s, router), horizon_s=duration_s).records
    return records, sim


def summary(records, more: str = "") -> str:
    met = sum(1 for r in records if r.slo_met) / len(records)
    inter = [r for r in records if r.slo_tier == "interactive"]
    inter_met = sum(1 for r in inter if r.slo_met) / max(1, len(inter))
    on_small = Counter(r.slo_tier for r in records if r.variant and "8b" in r.variant)
    return f"{100 * met:.1f}% (interactive {100 * inter_met:.1f}%, standard on the 8B {on_small['standard']}{more})"
