"""How much of the step's gap is the router's wait-for-a-slot estimate? (session 17, exploration only)

``python results/spike/levers_s17/slot_oracle.py`` (behind the bench lock): the tree against the same router
whose slot wait comes from the running sequences' *true* remaining decode steps (read from the simulated replicas:
no ingress knows them), through the ``decode_tokens_left`` it already takes: the figure is set so that the model's
k-th completion (``2 k left / (running + 1)``) lands on the true k-th one. 20 seeds, step and wave.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import levers

import router.policy as rp
import sim.simulator as simulator
from router.latency import Load

CURRENT: list[simulator.Simulation] = []
_init = simulator.Simulation.__init__
_original_load = rp.replica_load


def _init_hook(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    _init(self, *args, **kwargs)
    CURRENT[:] = [self]


def _remaining(replica, now: float) -> list[int]:  # type: ignore[no-untyped-def]
    step = replica.steps
    if replica._seg_k > 0 and replica._seg_dt > 0:
        step += min(replica._seg_k, max(0, math.floor((now - replica._seg_start) / replica._seg_dt)))
    return [max(1, finish - step) for finish, _, _ in replica.decoding]


def oracle_load(view, config):  # type: ignore[no-untyped-def]
    load: Load = _original_load(view, config)
    if not CURRENT or load.waiting_for_slot <= 0 or load.decode_tokens_left is None:
        return load
    sim = CURRENT[0]
    now = sim._snapshot_s
    left = sorted(x for r in sim.deployments[view.name].ready for x in _remaining(r, now))
    if not left:
        return load
    running = max(load.running, 1.0)
    first = min(load.waiting_for_slot, running)
    replicas = max(view.ready_replicas, 1)
    k = min(len(left), max(1, math.ceil(first * replicas)))
    true_kth = float(left[k - 1])
    return dataclasses.replace(load, decode_tokens_left=true_kth * (running + 1.0) / (2.0 * first))


if __name__ == "__main__" and "--spread" not in sys.argv:
    simulator.Simulation.__init__ = _init_hook  # type: ignore[method-assign]
    for name, patch in (("tree", _original_load), ("true slot wait", oracle_load)):
        rp.replica_load = patch
        for shape in ("step", "diurnal"):
            att, rat = levers.sweep(shape, (24, 0.0, 2.7))
            print(
                f"| {name} | {shape} | {statistics.mean(att):.1%} ({min(att):.1%}) | "
                f"{statistics.mean(rat):.3f} | {att[0]:.1%} |",
                flush=True,
            )
    rp.replica_load = _original_load


def spread_load(view, config):  # type: ignore[no-untyped-def]
    """As ``oracle_load``, from the remaining work's mean and spread only (uniform over mean +- sqrt(3) sd): what
    an ingress could track in O(1) from its own requests."""
    load: Load = _original_load(view, config)
    if not CURRENT or load.waiting_for_slot <= 0 or load.decode_tokens_left is None:
        return load
    sim = CURRENT[0]
    left = [x for r in sim.deployments[view.name].ready for x in _remaining(r, sim._snapshot_s)]
    if len(left) < 2:
        return load
    mean, sd = statistics.mean(left), statistics.pstdev(left)
    running = max(load.running, 1.0)
    first = min(load.waiting_for_slot, running)
    low = max(1.0, mean - 3**0.5 * sd)
    high = mean + 3**0.5 * sd
    kth = low + (high - low) * first / (running + 1.0)
    return dataclasses.replace(load, decode_tokens_left=kth * (running + 1.0) / (2.0 * first))


if __name__ == "__main__" and "--spread" in sys.argv:
    simulator.Simulation.__init__ = _init_hook  # type: ignore[method-assign]
    rp.replica_load = spread_load
    for shape in ("step", "diurnal", "ramp", "bursts", "trace"):
        att, rat = levers.sweep(shape, (24, 0.0, 2.7))
        print(
            f"| spread | {shape} | {statistics.mean(att):.1%} ({min(att):.1%}) | "
            f"{statistics.mean(rat):.3f} | {att[0]:.1%} |",
            flush=True,
        )
    rp.replica_load = _original_load
