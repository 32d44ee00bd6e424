"""What each lever buys on the 10x step, in the simulator: ``python results/spike/step_levers.py`` (about a minute).

Our policy (engine_load, scale_ahead_s 20, as ``results/spike/step`` ran) and Serve's default on the step, three
trace seeds each (0, 1, 2: the run-to-run spread of one Poisson trace is several points), under this machine's
replica starts (the worker-process start queue fitted to the step's real run, ``step/spike.json``'s
``start_queue``) and under the presets' cold starts alone (a node of its own per replica, as on a GPU cluster).
Levers: the upscale delay (1 s -> 0), replicas standing by at the base (the cheap variant's min_replicas) and the
router's TTFT headroom (``router.slo_headroom``). Each cell: mean SLO attainment during the step / replica-seconds
against the fixed fleet sized for the peak.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import bench.spike_fleet as spike_fleet
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES, SpikeFleet
from bench.spike_report import mode_report
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

HERE = Path(__file__).parent
SEEDS = (0, 1, 2)


def cell(fleet: SpikeFleet, mode: Any, queue: dict | None) -> str:
    attained, ratios = [], []
    for seed in SEEDS:
        starts = None if queue is None else ProcessStarts(queue["concurrency"], queue["process_s"], queue["after_s"])
        records, samples = simulate_spike(
            fleet, SHAPES["step"], DURATIONS_S["step"], mode, seed=seed, process_starts=starts
        )
        r = mode_report(mode, "sim", records, samples, fleet, SHAPES["step"].peak_windows(), DURATIONS_S["step"])
        attained.append(r.during.slo_attainment or 0.0)
        ratios.append(r.replica_ratio)
    return f"{statistics.mean(attained):.1%} / {statistics.mean(ratios):.2f}"


def variant_fleet(upscale_delay_s: float, min_replicas: int) -> SpikeFleet:
    small, big = FLEET.variants
    small = small.model_copy(update={"upscale_delay_s": upscale_delay_s, "min_replicas": min_replicas})
    big = big.model_copy(update={"upscale_delay_s": upscale_delay_s})
    return FLEET.model_copy(update={"variants": [small, big], "scale_ahead_s": 20.0})


def main() -> None:
    queue = json.loads((HERE / "step" / "spike.json").read_text())["start_queue"]
    print(
        f"Start queue fitted to the step's real run: {queue['concurrency']} processes at a time, "
        f"{queue['process_s']} s each, then {queue['after_s']} s (rms error {queue['rms_error_s']} s).\n"
    )
    print("| lever | ours, this machine | Serve's default, this machine | ours, presets' starts |")
    print("|---|---|---|---|")
    levers: list[tuple[str, float, int, dict]] = [
        ("as run (upscale delay 1 s, min 1)", 1.0, 1, {}),
        ("upscale delay 0", 0.0, 1, {}),
        ("min_replicas 2", 1.0, 2, {}),
        ("upscale delay 0, min_replicas 2", 0.0, 2, {}),
        ("upscale delay 0, min_replicas 3", 0.0, 3, {}),
        ("router slo_headroom 0.2", 1.0, 1, {"slo_headroom": 0.2}),
    ]
    router = spike_fleet.SpikeFleet.router
    for name, delay, low, extra in levers:
        spike_fleet.SpikeFleet.router = lambda self, extra=extra: {**router(self), **extra}  # type: ignore[method-assign]
        fleet = variant_fleet(delay, low)
        cells = [
            cell(fleet, "engine_load", queue),
            cell(fleet, "ongoing_requests", queue),
            cell(fleet, "engine_load", None),
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    spike_fleet.SpikeFleet.router = router  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
