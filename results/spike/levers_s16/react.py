"""Can the step be met sooner instead of on noise? (session 16) The window gate (b1b135c) kept, Serve's scaling
delays and the look-back shortened, in the simulator over N seeds (``S16_SEEDS``, default 10):
``python results/spike/levers_s16/react.py``. Rows: attainment during the peak / replica-seconds against the fixed
fleet / the 8B's scale-ups outside the peak, mean over seeds (min attainment, max ratio)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import candidates as c

import bench.spike_fleet as fleet_module

VARIANTS = {
    "as is": {},
    "upscale 0.5": {"upscale_delay_s": 0.5},
    "upscale 0": {"upscale_delay_s": 0.0},
    "look-back 0.5": {"look_back_period_s": 0.5},
    "look-back 0.5, metrics 0.25": {"look_back_period_s": 0.5, "metrics_interval_s": 0.25},
    "upscale 0.5, look-back 0.5, metrics 0.25": {
        "upscale_delay_s": 0.5,
        "look_back_period_s": 0.5,
        "metrics_interval_s": 0.25,
    },
}
SEEDS = range(int(__import__("os").environ.get("S16_SEEDS", "10")))


def fleet_with(change: dict) -> object:
    per_variant = {k: v for k, v in change.items() if k == "upscale_delay_s"}
    top = {k: v for k, v in change.items() if k != "upscale_delay_s"}
    base = fleet_module.FLEET
    variants = [v.model_copy(update=per_variant) for v in base.variants]
    return base.model_copy(update={**top, "variants": variants})


for name, change in VARIANTS.items():
    c.FLEET = fleet_with(change)
    for shape in ("step", "diurnal"):
        rows = [c.run(shape, seed) for seed in SEEDS]
        attained = [a for a, _, _ in rows]
        print(
            f"| {name} | {shape} | {statistics.mean(attained):.1%} (min {min(attained):.1%}) | "
            f"{statistics.mean(r for _, r, _ in rows):.3f} (max {max(r for _, r, _ in rows):.3f}) | "
            f"{statistics.mean(u for _, _, u in rows):.1f} |",
            flush=True,
        )
