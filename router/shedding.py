"""Shedding hopeless requests: admission control by predicted TTFT, for the ``slo`` policy's degrade mode.

When no variant is predicted to meet a request's SLO the policy degrades it to the smallest predicted
violation. That is right when the miss is small or comes from the variant's own speed. It is wrong when
the miss comes from a queue: a request that will wait several times its TTFT target before its first token
misses anyway, and the prefill work it adds delays every request behind it, which could still have met
theirs. Under overload each such admission makes the next one more likely, and the queue (so TTFT) grows
without bound while every policy that admits everything serves a growing share of requests late. Shedding
the hopeless ones keeps the queue at the length the targets allow: the requests that are served meet their
SLO, and the shed ones get a 429 with a Retry-After saying when the queue should have room, at once,
instead of a late answer.

A request is hopeless on a variant when the *mean* prediction (not the conservative one the SLO is judged
on: shedding a request that might still make it is worse than degrading it) puts its TTFT beyond
``shed_ttft_ratio`` x its target, and the same variant with nothing queued would meet the target: the miss
is the queue's, which shedding shortens. A request is shed only when it is hopeless on every variant that
could take it, and only on predictions of a model that has learned from ``MIN_OBSERVATIONS`` requests: a
variant without a measured profile starts from pessimistic defaults (so that it is not flooded), and those
must not turn work away (on an H200 a burst on an unprofiled variant lost requests, most likely to shedding on
those defaults, while its TTFT was well within its target: docs/measurements.md). Only TTFT counts: queues grow
without bound under overload while the running batch (so TPOT) is capped by the engine's batch slots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from router.latency import Load
from router.types import Prediction, RequestFeatures, VariantView

# Finished requests a variant's latency model must have learned from before its predictions may shed.
MIN_OBSERVATIONS = 32


def idle_ttft_ms(request: RequestFeatures, view: VariantView, load: Load) -> float:
    """TTFT ``view`` is predicted to give ``request`` with nothing ahead of it (a starting replica still
    counts its startup: waiting for it is not a queue that shedding shortens)."""
    return view.latency.predict_idle_ttft_ms(request.prompt_tokens, load.startup_ms)


def is_hopeless(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    predictions: Mapping[str, Prediction],
    ratio: float,
) -> bool:
    """Whether ``request`` is predicted to miss its TTFT target by more than ``ratio`` x on every candidate,
    each time because of the work queued there (see the module docstring)."""
    target = request.slo.ttft_ms
    if target is None or not candidates:
        return False
    for view in candidates:
        if view.latency.observations < MIN_OBSERVATIONS:
            return False  # still at its seed: not trusted to turn requests away
        if predictions[view.name].ttft_ms <= ratio * target:
            return False
        if idle_ttft_ms(request, view, loads[view.name]) > target:
            return False  # too slow even when idle: shedding would not help it or others like it
    return True


def retry_after_s(
    request: RequestFeatures, candidates: Sequence[VariantView], predictions: Mapping[str, Prediction], floor_s: float
) -> float:
    """Seconds until the shortest queue should have drained enough for ``request`` to meet its TTFT target
    (at least ``floor_s``): the predicted overshoot on the best candidate."""
    target = request.slo.ttft_ms or 0.0
    overshoot_ms = min(predictions[v.name].ttft_ms - target for v in candidates)
    return max(floor_s, overshoot_ms / 1000.0)
