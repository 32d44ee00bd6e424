"""The predictive term's gate and the base load's hysteresis levers, in the simulator (session 12):
``python results/spike/step_s12/levers.py > results/spike/step_s12/levers.md`` (a few minutes; behind the bench lock).

Our policy (engine_load) on every shape, three trace seeds each (0, 1, 2), under this machine's replica starts with
the warm worker pool (the start queue fitted to session 11's run3: 24 processes at a time, 0 s each, 0.9 s more before
the engine's cold start). Each cell: mean SLO attainment during the shape's peak windows / replica-seconds against
the fixed fleet sized for the peak / scale-ups of the 8B outside the peak windows (and 10 s after them): the base
load's flapping.

* Table 1: the 8B's and the 70B's ``scale_ahead_s`` (the fleet's one value), before session 12's gate (the trend
  projected whenever the demand rose, the old ``scaled_ahead``, copied below) and with it (only while the variant's
  ask is above the replicas that run).
* Table 2: with the gate and 20 s ahead, what else was tried for the base load's flapping or for headroom: Serve's
  downscale delay (8 s as run), its upscale delay (1 s), one spare replica above the ask at all times.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import serve_app.autoscaling as glue
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES, SpikeFleet
from bench.spike_report import mode_report
from router import autoscaling as policy
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike
from traffic.replicas import ReplicaSample

SEEDS = (0, 1, 2)
QUEUE = (24, 0.0, 0.9)  # results/spike/step_s11/run3/spike.json: start_queue
GATED = policy.scaled_ahead
ORIGINAL = policy.desired_replicas


def ungated(
    decision: policy.ScalingDecision,
    history: Sequence[tuple[float, float]],
    ctx: policy.ScalingContext,
    targets: policy.ScalingTargets,
) -> policy.ScalingDecision:
    """``scaled_ahead`` as it was before session 12 (no gate on the variant being short)."""
    if targets.scale_ahead_s <= 0 or ctx.current_replicas == 0 or not history:
        return decision
    if history[-1][0] - history[0][0] < 0.9 * targets.trend_window_s:
        return decision
    ahead = history[-1][1] + policy.rising_trend(history) * targets.scale_ahead_s
    wanted = min(max(math.ceil(ahead - 1e-6), decision.replicas), ctx.max_replicas)
    if wanted <= decision.replicas:
        return decision
    return policy.ScalingDecision(replicas=wanted, signal="trend", by_signal={**decision.by_signal, "trend": ahead})


def spare(n: int) -> Callable[[policy.ScalingContext, policy.ScalingTargets], policy.ScalingDecision]:
    def decide(ctx: policy.ScalingContext, targets: policy.ScalingTargets) -> policy.ScalingDecision:
        d = ORIGINAL(ctx, targets)
        ask = max(d.by_signal.values(), default=0.0)
        wanted = min(max(d.replicas, math.ceil(ask - 1e-6) + n), ctx.max_replicas)
        return policy.ScalingDecision(wanted, d.signal, d.by_signal)  # by_signal: the trend's demand

    return decide


def scale_ups_outside(samples: Sequence[ReplicaSample], variant: str, windows: Any) -> int:
    ups, prev = 0, None
    for s in samples:
        if s.variant != variant:
            continue
        if prev is not None and s.replicas > prev and not any(a <= s.t_s <= b + 10.0 for a, b in windows):
            ups += 1
        prev = s.replicas
    return ups


def cell(fleet: SpikeFleet, shape: str) -> str:
    attained, ratios, ups = [], [], []
    for seed in SEEDS:
        records, samples = simulate_spike(
            fleet, SHAPES[shape], DURATIONS_S[shape], "engine_load", seed=seed, process_starts=ProcessStarts(*QUEUE)
        )
        windows = SHAPES[shape].peak_windows()
        r = mode_report("engine_load", "sim", records, samples, fleet, windows, DURATIONS_S[shape])
        attained.append(r.during.slo_attainment or 0.0)
        ratios.append(r.replica_ratio)
        ups.append(scale_ups_outside(samples, fleet.variants[0].name, windows))
    return f"{statistics.mean(attained):.1%} / {statistics.mean(ratios):.2f} / {statistics.mean(ups):.0f}"


def small(**update: Any) -> SpikeFleet:
    cheap, big = FLEET.variants
    return FLEET.model_copy(update={"variants": [cheap.model_copy(update=update), big]})


def row(name: str, fleet: SpikeFleet, shapes: Sequence[str]) -> str:
    return f"| {name} | " + " | ".join(cell(fleet, s) for s in shapes) + " |"


def main() -> None:
    shapes = ("step", "ramp", "diurnal", "bursts", "trace")
    print(__doc__)
    print(
        "Table 1: the predictive term (attainment during / replica-s against the fixed fleet / 8B scale-ups outside)\n"
    )
    print("| scale_ahead_s | " + " | ".join(shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    for name, ahead, gate in [
        ("0 (off)", 0.0, GATED),
        ("8, before the gate", 8.0, ungated),
        ("20, before the gate (session 11's runs)", 20.0, ungated),
        ("10, gated", 10.0, GATED),
        ("20, gated (session 12's default)", 20.0, GATED),
    ]:
        glue.scaled_ahead = gate  # type: ignore[assignment]
        print(row(name, FLEET.model_copy(update={"scale_ahead_s": ahead}), shapes), flush=True)
    glue.scaled_ahead = GATED  # type: ignore[assignment]
    shapes = ("step", "diurnal", "bursts")
    print("\nTable 2: with the gate, 20 s ahead; other levers for the base load (the same three figures)\n")
    print("| lever | " + " | ".join(shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    for name, fleet, decide in [
        ("as the defaults (downscale delay 8 s, upscale delay 1 s)", FLEET, ORIGINAL),
        ("downscale delay 15 s", small(downscale_delay_s=15.0), ORIGINAL),
        ("upscale delay 3 s", small(upscale_delay_s=3.0), ORIGINAL),
        ("one spare replica above the ask", FLEET, spare(1)),
    ]:
        glue.desired_replicas = decide  # type: ignore[assignment]
        print(row(name, fleet, shapes), flush=True)
    glue.desired_replicas = ORIGINAL  # type: ignore[assignment]


if __name__ == "__main__":
    main()
