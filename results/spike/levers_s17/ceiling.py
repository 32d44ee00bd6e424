"""The most requests of the step any admission and routing could have served in time, given when the replicas served
(session 17): ``python results/spike/levers_s17/ceiling.py [SEED ...] [--queue 0.8]`` (behind the bench lock).

For each seed: the simulator's run of the tree (its arrivals, and when each variant's replicas were ready), then an
oracle on the same arrivals and replica timeline: each request, in arrival order, takes the batch slot (of any ready
replica, the 8B first) that frees soonest if its answer can start within the TTFT target there, else it is refused.
A slot is held for a whole answer (512 tokens at the batch-full step time of its variant). With identical requests
per variant this greedy order serves as many on time as any order can, to within the choice of variant, so its
attainment during the step is a ceiling for the router's admission. Also: the same with every replica added after the
step's start ready 1 or 2 s sooner (what a faster scale-up could buy).
"""

from __future__ import annotations

import heapq
import sys
from pathlib import Path

from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES
from bench.spike_report import mode_report
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

sys.path.insert(0, str(Path(__file__).resolve().parent))
from levers import pop_queue

SLO_S = FLEET.slo_ttft_ms / 1000.0
START_S, END_S = 15.0, 75.0


def service_s(name: str) -> float:
    v = next(v for v in FLEET.variants if v.name == name)
    p = v.profile(FLEET.startup_time_scale)
    step = p.step_ms_at_batch_1 + p.step_ms_per_extra_seq * (v.max_running_requests - 1)
    return FLEET.output_tokens * step / 1000.0 + FLEET.input_tokens / p.prefill_tokens_per_s


def ready_times(samples: list, name: str, sooner_s: float) -> list[float]:
    """One entry per replica: when it was ready (replicas present at 0 s: 0.0)."""
    out: list[float] = []
    current = 0
    for s in sorted((s for s in samples if s.variant == name), key=lambda s: s.t_s):
        while s.replicas > current:
            t = s.t_s
            out.append(max(START_S, t - sooner_s) if t > START_S else t)
            current += 1
        current = min(current, s.replicas)  # scale-downs: ignored for the ceiling (they come after the step)
    return out


def oracle(arrivals: list[float], samples: list, sooner_s: float, foresight: bool = True) -> float:
    """``foresight`` False: a request may wait only for replicas already ready when it arrives (the router does
    not know when a starting replica will serve)."""
    slots: list[tuple[float, str]] = []  # (free at, variant)
    for v in FLEET.variants:
        for t in ready_times(samples, v.name, sooner_s):
            for _ in range(v.max_running_requests):
                slots.append((t, v.name))
    by_variant = {v.name: sorted(t for t, n in slots if n == v.name) for v in FLEET.variants}
    heaps = {name: list(ts) for name, ts in by_variant.items()}
    for h in heaps.values():
        heapq.heapify(h)
    # the ready time of each replica not yet used (a slot's first free time is its replica's ready time)
    pending = {name: {t: t for t in ts} for name, ts in by_variant.items()}
    met = 0
    for a in arrivals:
        for v in FLEET.variants:  # the cheap one first
            h = heaps[v.name]
            # the soonest-free slot of this variant (a slot free before a is free at a)
            pool = h if foresight else [t for t in h if t not in pending[v.name] or pending[v.name][t] <= a]
            if pool and max(min(pool), a) - a <= SLO_S:
                first = min(pool)
                h.remove(first)
                heapq.heapify(h)
                start = max(first, a)
                heapq.heappush(h, start + service_s(v.name))
                if START_S <= a < END_S:
                    met += 1
                break
    during = [a for a in arrivals if START_S <= a < END_S]
    return met / len(during)


def main(argv: list[str]) -> None:
    args = list(argv)
    queue = pop_queue(args)
    seeds = [int(a) for a in args] or [0]
    print(
        f"start queue {queue}; service 8B {service_s(FLEET.variants[0].name):.2f} s, "
        f"70B {service_s(FLEET.variants[1].name):.2f} s\n"
    )
    print(
        "| seed | tree (simulated) | ceiling, same replicas | without foresight of starting replicas | "
        "replicas 1 s sooner | 2 s sooner |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    totals = [0.0] * 5
    for seed in seeds:
        records, samples = simulate_spike(
            FLEET, SHAPES["step"], DURATIONS_S["step"], "engine_load", seed=seed, process_starts=ProcessStarts(*queue)
        )
        r = mode_report(
            "engine_load", "sim", records, samples, FLEET, SHAPES["step"].peak_windows(), DURATIONS_S["step"]
        )
        arrivals = sorted(x.arrival_s for x in records if x.arrival_s is not None)
        row = [r.during.slo_attainment or 0.0, oracle(arrivals, samples, 0.0), oracle(arrivals, samples, 0.0, False)]
        row += [oracle(arrivals, samples, s) for s in (1.0, 2.0)]
        totals = [t + x for t, x in zip(totals, row, strict=True)]
        print(f"| {seed} | " + " | ".join(f"{x:.1%}" for x in row) + " |")
    print("| mean | " + " | ".join(f"{t / len(seeds):.1%}" for t in totals) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
