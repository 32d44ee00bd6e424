"""Fitting an engine profile to a real run: the figures with which the simulator best replays its records.

The run's own arrivals, prompt and output lengths go through :func:`sim.calibrate.calibrate` with candidate
profiles; a coordinate search (each figure scaled up and down in turn, the steps shrinking each round) keeps the
profile whose TTFT and TPOT percentiles (p50, p90) are nearest the measured ones in log terms. The limits (batch
slots, KV cache, token budget, context) are the variant's config and stay as given. Deterministic and quick:
a few hundred simulated replays of one run.

The fitted profile describes the engine under the conditions of that run; whether it holds at other rates is
what a held-out run says (docs/emulated.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from engines.profile import EngineProfile
from sim.calibrate import Calibration, calibrate
from traffic.records import RequestRecord

# The figures of the step model that a run's latencies pin down.
FITTED = ("step_ms_at_batch_1", "step_ms_per_extra_seq", "prefill_tokens_per_s", "overhead_ms")
SCORED = (("ttft_ms", "p50"), ("ttft_ms", "p90"), ("tpot_ms", "p50"), ("tpot_ms", "p90"))
STEPS = (2.0, 1.4, 1.15, 1.05)  # a round's factors up and down, coarse to fine


class Fit(BaseModel):
    profile: EngineProfile
    error: float = Field(description="Root mean square of log(simulated / measured) over the scored percentiles.")
    calibration: Calibration
    replays: int = Field(description="Simulated replays the search ran.")


def score(calibration: Calibration) -> float:
    """RMS of the log errors of the scored percentiles (inf when one is missing)."""
    logs = []
    for metric, percentile in SCORED:
        row = calibration.row(metric, percentile)
        if not row.measured or not row.simulated:
            return math.inf
        logs.append(math.log(row.simulated / row.measured))
    return math.sqrt(sum(x * x for x in logs) / len(logs))


def _scaled(profile: EngineProfile, field: str, factor: float) -> EngineProfile:
    value = getattr(profile, field) * factor
    if field == "step_ms_per_extra_seq" and value == 0:
        value = 0.1 * factor  # let a zero slope grow
    return profile.model_copy(update={field: value})


def fit(records: Sequence[RequestRecord], start: EngineProfile, *, replicas: int = 1, keep: Sequence[str] = ()) -> Fit:
    """The profile nearest ``records``, searched from ``start``; the figures named in ``keep`` stay as given.

    Keep ``overhead_ms`` at what the stack itself adds at that load (measured with an emulated variant through
    the same stack) to fit an emulated engine: it spends the stack's time for real, and the rest is the engine's.
    """
    unknown = set(keep) - set(FITTED)
    if unknown:
        raise ValueError(f"cannot keep {sorted(unknown)}: the fitted figures are {', '.join(FITTED)}")
    fitted = [name for name in FITTED if name not in keep]
    replays = 0

    def evaluate(profile: EngineProfile) -> tuple[float, Calibration]:
        nonlocal replays
        replays += 1
        calibration = calibrate(records, profile, replicas=replicas)
        return score(calibration), calibration

    best = start
    best_error, best_calibration = evaluate(best)
    for step in STEPS:
        improved = True
        while improved:
            improved = False
            for field in fitted:
                for factor in (step, 1 / step):
                    candidate = _scaled(best, field, factor)
                    error, calibration = evaluate(candidate)
                    if error < best_error - 1e-9:
                        best, best_error, best_calibration, improved = candidate, error, calibration, True
    source = f"fitted by python -m sim fit to {len(records)} requests (RMS log error {best_error:.3f})"
    best = best.model_copy(update={"source": source})
    return Fit(
        profile=best,
        error=best_error,
        calibration=best_calibration.model_copy(update={"profile": best}),
        replays=replays,
    )
