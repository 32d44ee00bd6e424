"""The admission levers together, at two start queues (session 17): ``python results/spike/levers_s17/combos.py``
(behind the bench lock). ``likely_headroom`` from ``levers.py``; ``true slot wait`` / ``spread slot wait`` from
``slot_oracle.py`` (simulator-only: they read the simulated replicas' remaining decode steps). Rows: mean attainment
during the peak over seeds 0-19 (min) / mean replica ratio / seed 0's attainment; queue 2.7 s (session 16's harness)
and 0.8 s (the start queue the bench fitted to session 16's real runs)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import levers
import slot_oracle as so

import router.policy as rp
import sim.simulator as simulator

simulator.Simulation.__init__ = so._init_hook  # type: ignore[method-assign]
ROWS = {
    "tree": (levers.TREE, so._original_load),
    "likely_headroom": (levers.CANDIDATES["likely_headroom"], so._original_load),
    "spread slot wait": (levers.TREE, so.spread_load),
    "spread slot wait + likely_headroom": (levers.CANDIDATES["likely_headroom"], so.spread_load),
    "true slot wait": (levers.TREE, so.oracle_load),
    "true slot wait + likely_headroom": (levers.CANDIDATES["likely_headroom"], so.oracle_load),
}
shapes = sys.argv[1:] or ["step", "diurnal", "ramp", "bursts", "trace"]
print("| candidate | queue | shape | mean during (min) | replica ratio (max) | seed 0 |")
print("|---|---:|---|---:|---:|---:|")
for q in (2.7, 0.8):
    for name, (route_slo, load) in ROWS.items():
        rp._route_slo, rp.replica_load = route_slo, load  # type: ignore[assignment]
        for shape in shapes:
            att, rat = levers.sweep(shape, (24, 0.0, q))
            print(
                f"| {name} | {q} | {shape} | {statistics.mean(att):.1%} ({min(att):.1%}) | "
                f"{statistics.mean(rat):.3f} ({max(rat):.3f}) | {att[0]:.1%} / {rat[0]:.3f} |",
                flush=True,
            )
rp._route_slo, rp.replica_load = levers.TREE, so._original_load  # type: ignore[assignment]
