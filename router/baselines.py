"""Baseline policies, for comparison with the SLO policy: each picks one of the candidate variants.

Candidates are the variants that fit the request and have a replica to serve it (never empty); the
caller applies admission control to the pick, so a baseline stays exactly what its name says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from router.config import RouterConfig
from router.latency import Load
from router.types import Reason, RequestFeatures, RouterState, VariantView

Baseline = Callable[
    [RequestFeatures, Sequence[VariantView], Mapping[str, Load], RouterConfig, RouterState], VariantView
]


def round_robin(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    config: RouterConfig,
    state: RouterState,
) -> VariantView:
    """Each candidate in turn, whatever its load."""
    chosen = candidates[state.round_robin_next % len(candidates)]
    state.round_robin_next += 1
    return chosen


def least_loaded(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    config: RouterConfig,
    state: RouterState,
) -> VariantView:
    """Fewest running + queued requests per serving replica; the first such candidate on a tie."""
    return min(candidates, key=lambda v: loads[v.name].running + loads[v.name].queued)


def length_threshold(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    config: RouterConfig,
    state: RouterState,
) -> VariantView:
    """Short prompts to the smallest-context variant (the lowest quality, i.e. the smallest model, on a
    tie), long ones to the largest-context variant (the highest quality on a tie)."""
    if request.prompt_tokens <= config.length_threshold_tokens:
        return min(candidates, key=lambda v: (v.context_length, v.quality))
    return max(candidates, key=lambda v: (v.context_length, v.quality))


def largest(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    config: RouterConfig,
    state: RouterState,
) -> VariantView:
    """Always the highest quality (the largest model) among the candidates."""
    return max(candidates, key=lambda v: v.quality)


BASELINES: dict[str, tuple[Baseline, Reason]] = {
    "round_robin": (round_robin, Reason.ROUND_ROBIN),
    "least_loaded": (least_loaded, Reason.LEAST_LOADED),
    "length_threshold": (length_threshold, Reason.LENGTH_THRESHOLD),
    "largest": (largest, Reason.LARGEST),
}
