"""Session 17: what ``likely_headroom`` (levers.py) does to the routing bench's simulated sweeps, tree against it.

flock /tmp/variant-bench.lock python results/spike/levers_s17/routing_likely.py two_variant tiers

Run on the tree before 6b127e8 (which made likely_headroom the rule under 'reject'); the sweeps degrade, so
either way both rows come out the same.
"""

from __future__ import annotations

import sys

import router.policy as rp
from sim.__main__ import main as sim_main

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from levers import CANDIDATES

for scenario in sys.argv[1:] or ["two_variant", "tiers"]:
    for name in ("tree", "likely_headroom"):
        print(f"\n## {scenario}, {name}\n", flush=True)
        rp._route_slo = CANDIDATES[name]  # type: ignore[assignment]
        sim_main(["sweep", "--scenario", scenario, "--seeds", "4"])
