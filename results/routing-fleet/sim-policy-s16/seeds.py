"""One policy on a simulator scenario at a fraction of its capacity (the sweep's estimate), on chosen reseeded draws
of its traffic (``sim.sweep.reseeded``): SLO attainment overall and per tier, one line per seed. Run from the
checkout whose router/ is to be measured (the cwd goes first on the path):

    python results/routing-fleet/sim-policy-s16/seeds.py SCENARIO FRACTION SEEDS [DURATION_S|-] [POLICY]
    python results/routing-fleet/sim-policy-s16/seeds.py two_variant 1.0 0,1,2,3,4,5,6,7,8,9 150 slo
"""

import os
import sys
from typing import cast

sys.path.insert(0, os.getcwd())

from router.config import Policy
from sim.capacity import estimate_capacity
from sim.scenario import SCENARIOS, simulate
from sim.sweep import make_scenario, reseeded

sc = sys.argv[1]
fraction = float(sys.argv[2])
seeds = [int(x) for x in sys.argv[3].split(",")]
dur = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] != "-" else None
policy = cast(Policy, sys.argv[5] if len(sys.argv) > 5 else "slo")
make = SCENARIOS[sc]
scale = estimate_capacity(make_scenario(make, dur, 1.0)).rate_scale
for seed in seeds:
    _, run = simulate(reseeded(make_scenario(make, dur, fraction * scale), seed), policy, "static")
    s = run.summary
    tiers = {t: round(v.slo_attainment, 3) for t, v in s.by_tier.items()}
    print(sc, fraction, seed, policy, f"{s.slo_attainment:.4f}", tiers, flush=True)
