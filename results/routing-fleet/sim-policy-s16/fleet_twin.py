"""The simulator's twin of the quick bench on a simulator fleet (``python -m bench routing --scenario NAME --quick
--fleet-scale F``): the scenario with its fleet and traffic scaled by F (``bench.fleet.fleet_scenario``), every
policy at 0.5 and 1.0 of the capacity, on N reseeded draws; prints SLO attainment per policy and the margin of slo
over the best baseline at 1.0. Run from the checkout whose router/ is to be measured (the cwd goes first on the path).

    python results/routing-fleet/sim-policy-s16/fleet_twin.py [--scenario two_variant] [--fleet-scale 0.5]
        [--duration-s 150] [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.getcwd())

from bench.fleet import fleet_scenario
from sim.capacity import estimate_capacity
from sim.scenario import ALL_POLICIES, SCENARIOS, simulate
from sim.sweep import reseeded


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", default="two_variant")
    p.add_argument("--fleet-scale", type=float, default=0.5)
    p.add_argument("--duration-s", type=float, default=150.0)
    p.add_argument("--seeds", type=int, default=3)
    a = p.parse_args()
    make = SCENARIOS[a.scenario]
    scale = estimate_capacity(fleet_scenario(make, a.duration_s, 1.0, 1.0)).rate_scale
    for seed in range(a.seeds):
        for fraction in (0.5, 1.0):
            sc = reseeded(fleet_scenario(make, a.duration_s, fraction * scale, a.fleet_scale), seed)
            got = {}
            for policy in ALL_POLICIES:
                _, run = simulate(sc, policy, "static")
                got[policy] = run.summary.slo_attainment
            best = max((v, k) for k, v in got.items() if k != "slo")
            cells = " ".join(f"{k} {v:.1%}" for k, v in got.items())
            print(f"seed {seed} x{fraction}: {cells} | slo - {best[1]} {100 * (got['slo'] - best[0]):+.1f}", flush=True)


if __name__ == "__main__":
    main()
