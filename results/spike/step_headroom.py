"""What the 10x step's 90% would cost: ``python results/spike/step_headroom.py`` (simulator, about a minute).

Our policy (engine_load, scale_ahead_s 20, as ``results/spike/step`` ran) on the step with the cheap variant
held at more replicas all day (min_replicas: headroom paid for at the base), under two kinds of replica start:
this 2-core machine's (the worker-process start queue fitted to the step's measured starts, ``spike.json``'s
``start_queue``) and the presets' cold starts alone (every replica on a node of its own, as on a GPU cluster).
Each cell: SLO attainment during the step / replica-seconds against the fixed fleet sized for the peak.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES, SpikeFleet
from bench.spike_report import mode_report
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

HERE = Path(__file__).parent


def cell(fleet: SpikeFleet, shape: str, queue: dict | None) -> str:
    starts = None if queue is None else ProcessStarts(queue["concurrency"], queue["process_s"], queue["after_s"])
    records, samples = simulate_spike(fleet, SHAPES[shape], DURATIONS_S[shape], "engine_load", process_starts=starts)
    r = mode_report("engine_load", "sim", records, samples, fleet, SHAPES[shape].peak_windows(), DURATIONS_S[shape])
    return f"{r.during.slo_attainment or 0:.1%} / {r.replica_ratio:.2f}"


def main() -> None:
    queue = json.loads((HERE / "step" / "spike.json").read_text())["start_queue"]
    base = FLEET.model_copy(update={"scale_ahead_s": 20.0})
    small, big = base.variants
    print(
        f"Start queue fitted to the step's real run: {queue['concurrency']} processes at a time, "
        f"{queue['process_s']} s each, then {queue['after_s']} s (rms error {queue['rms_error_s']} s).\n"
    )
    print("| cheap variant's min_replicas | this machine's starts | the presets' starts |")
    print("|---:|---|---|")
    for low in range(small.min_replicas, 6):
        fleet = base.model_copy(update={"variants": [small.model_copy(update={"min_replicas": low}), big]})
        cells = [cell(fleet, "step", queue), cell(fleet, "step", None)]
        print(f"| {low} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
