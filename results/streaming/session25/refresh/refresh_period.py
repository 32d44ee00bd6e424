"""What a slower routing-table refresh would cost the router (session 25).

The two_variant fleet at its capacity under slo, in the simulator (which posts each replica's figures every
``STATS_PERIOD_S`` on its own phase and has each ingress read them every ``snapshot_period_s``, as the real stack
does): today's ``REFRESH_PERIOD_S`` (0.1 s) against 0.25 s (the engine replicas' own posting period), with one, two
and four ingress replicas, over several seeds.

    PYTHONPATH=.:results/routing-fleet/sim-drift-s15 python results/streaming/session25/refresh/refresh_period.py \
        [duration_s] [seeds]
"""

from __future__ import annotations

import sys

import capacity  # session 15's shared fleet run (results/routing-fleet/sim-drift-s15 on the path)

from sim.simulator import Simulation


def main() -> None:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for ingress_replicas in (1, 2, 4):
        for seed in range(seeds):
            row = []
            for period_s in (0.1, 0.25):
                records, _ = capacity.run(
                    Simulation,
                    "slo",
                    duration_s,
                    seed=seed,
                    snapshot_period_s=period_s,
                    ingress_replicas=ingress_replicas,
                )
                row.append(f"refresh {period_s} s: {capacity.summary(records)}")
            print(f"ingress {ingress_replicas}, seed {seed}: " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
