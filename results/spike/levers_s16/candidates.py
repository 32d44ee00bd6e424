"""The predictive term's gate and slope, in the simulator (session 16): per seed, per shape.

``S16_SEEDS=3 python results/spike/levers_s16/candidates.py [candidate ...] [shape ...]`` (seconds per cell; no
names: every candidate on the step and the wave). Each row: SLO attainment during the peak windows / replica-seconds
against the fixed fleet / the 8B's scale-ups outside the peak windows (and 10 s after them), per seed with three
seeds, else the mean (min attainment, max replica ratio, mean scale-ups). This machine's replica starts with the
warm pool (the start queue of results/spike/levers_s14: 24 at a time, 0 s each, 2.7 s more before the engine's
cold start). ``current`` is the tree's ``scaled_ahead``; ``before`` is session 15's (short at the last reading
only). The tables: ``README.md`` beside this file; the story: docs/autoscaling.md, "Session 16".
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "step_s12"))

import itertools

from levers import scale_ups_outside

import serve_app.autoscaling as glue
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES
from bench.spike_report import mode_report
from router import autoscaling as policy
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

SEEDS = tuple(range(int(os.environ.get("S16_SEEDS", "3"))))
QUEUE = (24, 0.0, 2.7)
CURRENT = policy.scaled_ahead
SHAPE_NAMES = ("step", "diurnal", "ramp", "trace", "bursts")

Ahead = Callable[..., policy.ScalingDecision]


def _ahead(
    decision: policy.ScalingDecision,
    history: Sequence[tuple[float, float]],
    ctx: policy.ScalingContext,
    targets: policy.ScalingTargets,
    *,
    short: Callable[[float, policy.ScalingContext, policy.ScalingTargets], bool],
    slope: Callable[[Sequence[tuple[float, float]]], float],
) -> policy.ScalingDecision:
    """``scaled_ahead`` with its gate (``short``) and its slope swapped."""
    if targets.scale_ahead_s <= 0 or ctx.current_replicas == 0 or not history:
        return decision
    if history[-1][0] - history[0][0] < 0.9 * targets.trend_window_s:
        return decision
    if not short(history[-1][1], ctx, targets):
        return decision
    ahead = history[-1][1] + slope(history) * targets.scale_ahead_s
    wanted = min(max(math.ceil(ahead - 1e-6), decision.replicas), ctx.max_replicas)
    if wanted <= decision.replicas:
        return decision
    return policy.ScalingDecision(replicas=wanted, signal="trend", by_signal={**decision.by_signal, "trend": ahead})


def short_ask(ask: float, ctx: policy.ScalingContext, targets: policy.ScalingTargets) -> bool:
    return ask > ctx.current_replicas + 1e-6


def short_slots(ask: float, ctx: policy.ScalingContext, targets: policy.ScalingTargets) -> bool:
    """Short of batch slots: the ask without the headroom above the replicas that run."""
    return ask * targets.target_batch_utilization > ctx.current_replicas + 1e-6


def short_waiting(ask: float, ctx: policy.ScalingContext, targets: policy.ScalingTargets) -> bool:
    """Some demand waits or went elsewhere: queued in an engine or at a handle, or redirected."""
    waiting = sum(r.queued_requests for r in ctx.replicas) + ctx.handle_queued_requests + ctx.redirected_requests
    return ask > ctx.current_replicas + 1e-6 and waiting > 0.5


def _line(history: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """The least-squares slope of the demand over time and its variance (residuals about the line over the
    times' spread); None for fewer than three points or no spread."""
    n = len(history)
    if n < 3:
        return None
    mt = sum(t for t, _ in history) / n
    md = sum(d for _, d in history) / n
    sxx = sum((t - mt) ** 2 for t, _ in history)
    if sxx <= 0:
        return None
    b = sum((t - mt) * (d - md) for t, d in history) / sxx
    res = sum((d - md - b * (t - mt)) ** 2 for t, d in history) / (n - 2)
    return b, res / sxx


def _slope_bound(
    k: float, inflation: Callable[[Sequence[tuple[float, float]]], float]
) -> Callable[[Sequence[tuple[float, float]]], float]:
    """The fitted slope less k standard errors, its variance multiplied by ``inflation(history)``."""

    def fit(history: Sequence[tuple[float, float]]) -> float:
        line = _line(history)
        if line is None:
            return 0.0
        b, variance = line
        return max(0.0, b - k * math.sqrt(variance * inflation(history)))

    return fit


def slope_lcb(k: float) -> Callable[[Sequence[tuple[float, float]]], float]:
    """The slope less k standard errors (from the residuals about the fitted line): the part noise cannot explain."""
    return _slope_bound(k, lambda history: 1.0)


def _mean_gate(
    decision: policy.ScalingDecision,
    history: Sequence[tuple[float, float]],
    ctx: policy.ScalingContext,
    targets: policy.ScalingTargets,
    inner: Ahead,
) -> policy.ScalingDecision:
    """Project only while the window's mean demand is above the replicas that run (short on average)."""
    if history and sum(d for _, d in history) / len(history) <= ctx.current_replicas + 1e-6:
        return decision
    return inner(decision, history, ctx, targets)


def slope_lcb_reports(k: float) -> Callable[[Sequence[tuple[float, float]]], float]:
    """As slope_lcb, with the standard error counted over the distinct reports (a run of equal values is one)."""

    def per_report(history: Sequence[tuple[float, float]]) -> float:
        reports = 1 + sum(1 for (_, a), (_, c) in itertools.pairwise(history) if a != c)
        return len(history) / max(reports, 3)

    return _slope_bound(k, per_report)


def cand(short, slope) -> Ahead:  # type: ignore[no-untyped-def]
    return lambda d, h, c, t: _ahead(d, h, c, t, short=short, slope=slope)


BEFORE = cand(short_ask, policy.rising_trend)  # session 15's scaled_ahead: short at the last reading only

CANDIDATES: dict[str, Ahead] = {
    "current": CURRENT,
    "before": BEFORE,
    "short_slots": cand(short_slots, policy.rising_trend),
    "short_waiting": cand(short_waiting, policy.rising_trend),
    "lcb1": cand(short_ask, slope_lcb(1.0)),
    "lcb2": cand(short_ask, slope_lcb(2.0)),
    "lcb2_slots": cand(short_slots, slope_lcb(2.0)),
    "lcb3": cand(short_ask, slope_lcb(3.0)),
    "lcb4": cand(short_ask, slope_lcb(4.0)),
    "lcb6": cand(short_ask, slope_lcb(6.0)),
    "lcb10": cand(short_ask, slope_lcb(10.0)),
    "off": lambda d, h, c, t: d,
    "mean_gate": lambda d, h, c, t: _mean_gate(d, h, c, t, cand(short_ask, slope_lcb(0.0))),
    "mean_gate_lcb2": lambda d, h, c, t: _mean_gate(d, h, c, t, cand(short_ask, slope_lcb(2.0))),
    "lcbr1": cand(short_ask, slope_lcb_reports(1.0)),
    "lcbr2": cand(short_ask, slope_lcb_reports(2.0)),
    # Session 15's gate, its trend off before the step (15 s) or only before it: where its step's margin comes from.
    "before_off_before_step": lambda d, h, c, t: d if (h and h[-1][0] < 15.0) else BEFORE(d, h, c, t),
    "before_only_before_step": lambda d, h, c, t: d if (h and h[-1][0] >= 15.0) else BEFORE(d, h, c, t),
}


def run(shape: str, seed: int, mode: str = "engine_load") -> tuple[float, float, int]:
    records, samples = simulate_spike(
        FLEET, SHAPES[shape], DURATIONS_S[shape], mode, seed=seed, process_starts=ProcessStarts(*QUEUE)
    )
    windows = SHAPES[shape].peak_windows()
    r = mode_report(mode, "sim", records, samples, FLEET, windows, DURATIONS_S[shape])
    return r.during.slo_attainment or 0.0, r.replica_ratio, scale_ups_outside(samples, FLEET.variants[0].name, windows)


def main(names: Sequence[str]) -> None:
    cands = CANDIDATES  # "current": the tree's scaled_ahead
    shapes = [s for s in SHAPE_NAMES if s in names] or list(SHAPE_NAMES[:2])
    chosen = [n for n in names if n in cands] or list(cands)
    for name in chosen:
        glue.scaled_ahead = cands[name]  # type: ignore[assignment]
        for shape in shapes:
            t0 = time.time()
            rows = [run(shape, seed) for seed in SEEDS]
            cells = [f"{a:.1%} / {r:.3f} / {u}" for a, r, u in rows] if len(rows) <= 3 else []
            mean = (
                f"{statistics.mean(a for a, _, _ in rows):.1%} (min {min(a for a, _, _ in rows):.1%}) / "
                f"{statistics.mean(r for _, r, _ in rows):.3f} (max {max(r for _, r, _ in rows):.3f}) / "
                f"{statistics.mean(u for _, _, u in rows):.1f}"
            )
            print(f"| {name} | {shape} | " + " | ".join(cells) + f" | {mean} |  ({time.time() - t0:.0f}s)", flush=True)
    glue.scaled_ahead = CURRENT  # type: ignore[assignment]


if __name__ == "__main__":
    main(sys.argv[1:])
