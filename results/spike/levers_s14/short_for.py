"""The predictive term only once the variant has been short for at least 0 / 1 / 2 / 3 s without a break, in the
simulator (session 14): ``python results/spike/levers_s14/short_for.py`` (a few minutes). The cells are those of
``levers.py`` beside it (three seeds, the start queue of ``results/spike/diurnal_s14``), replica-seconds to three
places. Its output: ``short_for.md`` beside it (docs/autoscaling.md, "Session 14").
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

import serve_app.autoscaling as glue
from bench.spike_fleet import FLEET
from router import autoscaling as policy

GATED = policy.scaled_ahead
SHAPES = ("step", "ramp", "diurnal", "bursts", "trace")


def _levers():  # this folder's levers.py (a name that step_s12's script has too)
    spec = importlib.util.spec_from_file_location("levers_s14", Path(__file__).with_name("levers.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def short_for(min_short_s: float) -> Callable[..., policy.ScalingDecision]:
    """``scaled_ahead`` that projects only once the demand has been above the running replicas for ``min_short_s``."""

    def gated(
        decision: policy.ScalingDecision,
        history: Sequence[tuple[float, float]],
        ctx: policy.ScalingContext,
        targets: policy.ScalingTargets,
    ) -> policy.ScalingDecision:
        since = None
        for t, demand in reversed(history):
            if demand <= ctx.current_replicas + 1e-6:
                break
            since = t
        if since is None or history[-1][0] - since < min_short_s:
            return decision
        return GATED(decision, history, ctx, targets)

    return gated


def main() -> None:
    levers = _levers()
    print("| short for at least (s) | " + " | ".join(SHAPES) + " |")
    print("|---|" + "---|" * len(SHAPES))
    for min_short_s in (0.0, 1.0, 2.0, 3.0):
        glue.scaled_ahead = short_for(min_short_s)  # type: ignore[assignment]
        print(f"| {min_short_s:g} | " + " | ".join(levers.cell(FLEET, s, digits=3) for s in SHAPES) + " |", flush=True)
    glue.scaled_ahead = GATED  # type: ignore[assignment]


if __name__ == "__main__":
    main()
