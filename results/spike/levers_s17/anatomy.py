"""Where the 10x step's misses come from, in the simulator (session 17): one seed's run, the tree's policy.

``python results/spike/levers_s17/anatomy.py [SEED] [--relax]`` (behind the bench lock). Prints, per second of
the step's first 15 s: arrivals, rejections, late accepted requests (by variant), the 8B's and the 70B's requests
in flight, the 8B's ready replicas and its policy's ask (largest signal) and answer; then the totals of the
missed requests during the step by cause. ``--relax``: the router degrades instead of rejecting
(``on_violation: degrade``): would the rejected requests have met their SLO had they been admitted?

The start queue is the one session 16's harness used (``levers_s16/candidates.py``: 24 at a time, 0 s, 2.7 s).
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import serve_app.autoscaling as glue
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES
from bench.spike_report import mode_report
from sim import autoscaler as sim_autoscaler
from sim import spike as sim_spike
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

QUEUE = (24, 0.0, 2.7)
CHEAP, BIG = (v.name for v in FLEET.variants)


def run(seed: int, relax: bool = False) -> tuple[list[Any], list[Any], list[tuple[float, int, float, int, str]]]:
    """The step's records, replica samples and the 8B's policy log: (t, running replicas, ask, asked, signal)."""
    log: list[tuple[float, int, float, int, str]] = []
    original_call = glue.EngineLoadPolicy.__call__

    def logged(self: glue.EngineLoadPolicy, ctx: Any) -> tuple[int, dict[str, Any]]:
        replicas, extra = original_call(self, ctx)
        if ctx.capacity_adjusted_max_replicas == 8:  # the 8B
            scaling = glue.scaling_context(ctx)
            d = glue.desired_replicas(scaling, self.targets)
            ask = max(d.by_signal.values(), default=0.0)
            log.append((ctx.current_time, ctx.current_num_replicas, ask, replicas, d.signal))
        return replicas, extra

    glue.EngineLoadPolicy.__call__ = logged  # type: ignore[method-assign]
    fleet_router = FLEET.router
    try:
        if relax:
            sim_spike.SpikeFleet.router = lambda self: {**fleet_router(), "on_violation": "degrade"}  # type: ignore
        records, samples = simulate_spike(
            FLEET, SHAPES["step"], DURATIONS_S["step"], "engine_load", seed=seed, process_starts=ProcessStarts(*QUEUE)
        )
    finally:
        glue.EngineLoadPolicy.__call__ = original_call  # type: ignore[method-assign]
        sim_spike.SpikeFleet.router = type(FLEET).router  # type: ignore[method-assign]
    return records, samples, log


def main(argv: list[str]) -> None:
    relax = "--relax" in argv
    seeds = [int(a) for a in argv if a.isdigit()] or [0]
    _ = sim_autoscaler
    for seed in seeds:
        records, samples, log = run(seed, relax)
        windows = SHAPES["step"].peak_windows()
        r = mode_report("engine_load", "sim", records, samples, FLEET, windows, DURATIONS_S["step"])
        print(
            f"## seed {seed}{' (admission relaxed: degrade)' if relax else ''}: attainment during "
            f"{r.during.slo_attainment:.1%}, replica ratio {r.replica_ratio:.3f}\n"
        )
        during = [x for x in records if 15.0 <= x.arrival_s < 75.0]
        print(
            "| second | arrivals | rejected | late on 8B | late on 70B | in flight 8B / 70B | ready 8B | "
            "8B ask (max over the s) | 8B asked |"
        )
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
        ok = [x for x in records if x.status == 200]

        def ready_at(t: float, name: str, samples: list[Any] = samples) -> int:
            last = 0
            for s in samples:
                if s.variant == name and s.t_s <= t:
                    last = s.replicas
            return last

        for sec in range(13, 31):
            arr = [x for x in records if sec <= x.arrival_s < sec + 1]
            rej = sum(1 for x in arr if x.status != 200)
            late8 = sum(1 for x in arr if x.status == 200 and not x.slo_met and x.variant == CHEAP)
            late70 = sum(1 for x in arr if x.status == 200 and not x.slo_met and x.variant == BIG)
            t = sec + 0.5
            fl8 = sum(1 for x in ok if x.variant == CHEAP and x.start_s <= t < x.start_s + (x.e2e_s or 0))
            fl70 = sum(1 for x in ok if x.variant == BIG and x.start_s <= t < x.start_s + (x.e2e_s or 0))
            entries = [e for e in log if sec <= e[0] < sec + 1]
            ask = max((e[2] for e in entries), default=0.0)
            asked = max((e[3] for e in entries), default=0)
            print(
                f"| {sec} | {len(arr)} | {rej} | {late8} | {late70} | {fl8} / {fl70} | {ready_at(t, CHEAP)} | "
                f"{ask:.2f} | {asked} |"
            )
        causes = collections.Counter(
            "rejected" if x.status != 200 else f"late on {x.variant}" for x in during if not x.slo_met
        )
        served = collections.Counter(x.variant for x in during if x.status == 200)
        print(
            f"\nduring the step: {len(during)} requests, missed {sum(causes.values())}: {dict(causes)}; "
            f"served by variant {dict(served)}"
        )
        first = [x for x in during if x.arrival_s < 25.0]
        print(f"of them in the step's first 10 s: {sum(1 for x in first if not x.slo_met)} missed of {len(first)}")
        late = [x for x in during if x.status == 200 and not x.slo_met]
        print("late accepted: TTFT s " + ", ".join(f"{x.arrival_s:.1f}:{x.ttft_s:.2f}" for x in late[:30]))
        ups = [(round(e[0], 1), e[1], round(e[2], 2), e[3], e[4]) for e in log if 14.0 <= e[0] < 19.0]
        print("8B policy log 14-19 s (t, running, ask, asked, signal):")
        prev = None
        for e in ups:
            if (e[1], e[3], e[4]) != prev:
                print("  ", e)
                prev = (e[1], e[3], e[4])
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
