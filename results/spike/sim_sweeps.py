"""The simulator sweeps of results/spike/sim_sweeps.md: ``python results/spike/sim_sweeps.py 0 8``.

Each cell: SLO attainment during the spike / replica-seconds against the fixed fleet, for ``bench spike``'s fleet
and shapes in the simulator (``sim/spike.py``). The arguments: seconds added to the presets' cold starts (0: the
presets' own; 8: what this 2-core machine measured through real Serve, results/spike/step/report.md).
"""

from __future__ import annotations

import sys

import sim.simulator as simulator
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES, SpikeFleet, fleet_for
from bench.spike_report import mode_report
from sim.spike import simulate_spike

SHAPE_NAMES = ["step", "diurnal", "ramp", "bursts", "trace"]


def cell(fleet: SpikeFleet, shape: str, extra: float, mode: str = "engine_load") -> str:
    records, samples = simulate_spike(fleet, SHAPES[shape], DURATIONS_S[shape], mode, extra_startup_s=extra)  # type: ignore[arg-type]
    r = mode_report(mode, "sim", records, samples, fleet, SHAPES[shape].peak_windows(), DURATIONS_S[shape])
    return f"{r.during.slo_attainment or 0:.1%} / {r.replica_ratio:.2f}"


def main(extras: list[float]) -> None:
    head = " | ".join(SHAPE_NAMES)
    print("### Headroom: target_batch_utilization (engine_load, scale_ahead_s 0)\n")
    print(f"| start-up beyond the preset | target_batch_utilization | {head} |")
    print("|---:|---:|" + "---|" * len(SHAPE_NAMES))
    for extra in extras:
        for u in (0.5, 0.75, 1.0):
            fleet = FLEET.model_copy(update={"target_batch_utilization": u})
            print(f"| {extra:g} s | {u} | " + " | ".join(cell(fleet, s, extra) for s in SHAPE_NAMES) + " |")
    print("\n### Predictive term: scale_ahead_s (engine_load, target_batch_utilization 0.75)\n")
    print(f"| start-up beyond the preset | scale_ahead_s | {head} |")
    print("|---:|---:|" + "---|" * len(SHAPE_NAMES))
    for extra in extras:
        for ahead in (0, 6, 20, 30):
            fleet = FLEET.model_copy(update={"scale_ahead_s": ahead})
            print(f"| {extra:g} s | {ahead} | " + " | ".join(cell(fleet, s, extra) for s in SHAPE_NAMES) + " |")
    print("\n### Serve's default policy (ongoing_requests) on the same runs\n")
    print(f"| start-up beyond the preset | {head} |")
    print("|---:|" + "---|" * len(SHAPE_NAMES))
    for extra in extras:
        print(f"| {extra:g} s | " + " | ".join(cell(FLEET, s, extra, "ongoing_requests") for s in SHAPE_NAMES) + " |")
    print("\n### Without the router's redirected demand (engine_load; the simulator's ingress books nothing)\n")
    print(f"| start-up beyond the preset | redirected demand | {head} | zero |")
    print("|---:|---|" + "---|" * (len(SHAPE_NAMES) + 1))
    real_redirect = simulator.redirected_from
    try:
        for extra in extras:
            for on in (True, False):
                simulator.redirected_from = real_redirect if on else (lambda *_args, **_kwargs: None)
                cells = [cell(FLEET, s, extra) for s in SHAPE_NAMES]
                zero = fleet_for("zero")
                records, samples = simulate_spike(
                    zero, SHAPES["zero"], DURATIONS_S["zero"], "engine_load", extra_startup_s=extra
                )
                r = mode_report(
                    "engine_load", "sim", records, samples, zero, SHAPES["zero"].peak_windows(), DURATIONS_S["zero"]
                )
                cells.append(f"{r.during.slo_attainment or 0:.1%} / {r.replica_ratio:.2f}")
                print(f"| {extra:g} s | {'on' if on else 'off'} | " + " | ".join(cells) + " |")
    finally:
        simulator.redirected_from = real_redirect


if __name__ == "__main__":
    main([float(x) for x in sys.argv[1:]] or [0.0])
