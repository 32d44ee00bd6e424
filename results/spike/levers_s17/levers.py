"""The step's misses: router admission levers against the tree, in the simulator (session 17).

``S17_SEEDS=20 python results/spike/levers_s17/levers.py [candidate ...] [shape ...] [--queue 0.8]`` (behind the
bench lock; ~1.5 s a run). Rows: SLO attainment during the peak windows / replica-seconds against the fixed fleet,
mean over the seeds (min attainment, max ratio), and seed 0's own figures. The start queue is session 16's harness'
(``levers_s16/candidates.py``: 24 processes at a time, 0 s each, 2.7 s more before the engine's cold start);
``--queue S`` replaces its 2.7 s (0.8 s: the start queue the bench fitted to session 16's real runs after-1/after-2).

Candidates (each a patch of ``router.policy`` for the run, ``tree`` the code as committed):

* ``tree``: the committed router and policy;
* ``likely_headroom``: with ``on_violation: reject``, a variant is *likely* to meet a request only when its mean
  prediction is within the targets less ``slo_headroom`` (the bar the sure check applies to the inflated one), not
  within the targets themselves;
* ``no_likely``: with ``on_violation: reject``, no likely tier at all: only requests sure to be met are admitted.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import router.policy as rp
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES
from bench.spike_report import mode_report
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

SEEDS = tuple(range(int(os.environ.get("S17_SEEDS", "20"))))
SHAPE_NAMES = ("step", "diurnal", "ramp", "bursts", "trace")
TREE = rp._route_slo


def _likely_filter(keep: Callable[[float, Any], bool]) -> Callable[..., Any]:
    def route_slo(
        request, candidates, loads, predictions, admissible, sure, likely, expected, config, state, *, idle=False
    ):  # type: ignore[no-untyped-def]
        if config.on_violation == "reject":
            likely = [v for v in likely if keep(expected[v.name], config)]
        return TREE(
            request, candidates, loads, predictions, admissible, sure, likely, expected, config, state, idle=idle
        )

    return route_slo


CANDIDATES: dict[str, Callable[..., Any]] = {
    "tree": TREE,
    "likely_headroom": _likely_filter(lambda ratio, config: ratio <= 1.0 - config.slo_headroom),
    "no_likely": _likely_filter(lambda ratio, config: False),
}


def run(shape: str, seed: int, queue: tuple[int, float, float]) -> tuple[float, float]:
    records, samples = simulate_spike(
        FLEET, SHAPES[shape], DURATIONS_S[shape], "engine_load", seed=seed, process_starts=ProcessStarts(*queue)
    )
    r = mode_report("engine_load", "sim", records, samples, FLEET, SHAPES[shape].peak_windows(), DURATIONS_S[shape])
    return r.during.slo_attainment or 0.0, r.replica_ratio


def sweep(shape: str, queue: tuple[int, float, float]) -> tuple[list[float], list[float]]:
    """Attainment during the peak and replica ratio of ``shape`` on every seed."""
    rows = [run(shape, seed, queue) for seed in SEEDS]
    return [a for a, _ in rows], [r for _, r in rows]


def pop_queue(args: list[str]) -> tuple[int, float, float]:
    """The start queue ``--queue S`` names (removed from ``args``), else the session 16 harness's 2.7 s."""
    if "--queue" not in args:
        return (24, 0.0, 2.7)
    i = args.index("--queue")
    queue = (24, 0.0, float(args[i + 1]))
    del args[i : i + 2]
    return queue


def main(argv: Sequence[str]) -> None:
    args = list(argv)
    queue = pop_queue(args)
    shapes = [s for s in SHAPE_NAMES if s in args] or list(SHAPE_NAMES)
    names = [n for n in args if n in CANDIDATES] or list(CANDIDATES)
    print(f"start queue {queue}, seeds {SEEDS[0]}-{SEEDS[-1]}\n")
    print("| candidate | shape | mean attainment during (min) | mean replica ratio (max) | seed 0 |")
    print("|---|---|---:|---:|---:|")
    for name in names:
        rp._route_slo = CANDIDATES[name]  # type: ignore[assignment]
        try:
            for shape in shapes:
                t0 = time.time()
                att, rat = sweep(shape, queue)
                print(
                    f"| {name} | {shape} | {statistics.mean(att):.1%} ({min(att):.1%}) | {statistics.mean(rat):.3f} "
                    f"({max(rat):.3f}) | {att[0]:.1%} / {rat[0]:.3f} |  <!-- {time.time() - t0:.0f} s -->",
                    flush=True,
                )
        finally:
            rp._route_slo = TREE  # type: ignore[assignment]


if __name__ == "__main__":
    main(sys.argv[1:])
