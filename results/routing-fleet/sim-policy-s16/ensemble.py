"""The SLO policy on a scenario at a fraction of its capacity, on seeds x four router configs that differ from the
default by a hair (``reserve_slack`` 0.199 / 0.201, ``error_margin_scale`` 1.49): a fleet whose outcome at a seed
hangs on chance (the tiers fleet at capacity, where a reservation loop sets in or not) shows it as a spread within
a seed. Prints the mean and the lowest over all runs, then each seed's four. Run from the checkout to measure:

    python results/routing-fleet/sim-policy-s16/ensemble.py tiers 1.0 0,1,2,3,4,5
"""

import os
import statistics
import sys

sys.path.insert(0, os.getcwd())

from sim.capacity import estimate_capacity
from sim.scenario import SCENARIOS, simulate
from sim.sweep import make_scenario, reseeded

sc = sys.argv[1]
fraction = float(sys.argv[2])
seeds = [int(x) for x in sys.argv[3].split(",")]
dur = 150.0 if sc == "two_variant" else None
make = SCENARIOS[sc]
scale = estimate_capacity(make_scenario(make, dur, 1.0)).rate_scale
configs: list[dict[str, float]] = [{}, {"reserve_slack": 0.199}, {"reserve_slack": 0.201}, {"error_margin_scale": 1.49}]
res = {}
for seed in seeds:
    for i, update in enumerate(configs):
        s = reseeded(make_scenario(make, dur, fraction * scale), seed)
        s = s.model_copy(update={"router": s.router.model_copy(update=update)})
        _, run = simulate(s, "slo", "static")
        res[(seed, i)] = run.summary.slo_attainment
vals = list(res.values())
per_seed = " | ".join(f"s{seed}: " + " ".join(f"{res[(seed, i)]:.1%}" for i in range(len(configs))) for seed in seeds)
print(os.getcwd(), sc, fraction, f"mean {statistics.mean(vals):.2%} min {min(vals):.2%}", per_seed, flush=True)
