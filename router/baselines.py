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


# Ray Serve LLM's PrefixCacheAffinityRouter takes the best prefix match while the replicas' loads are within a
# threshold of each other and the match covers at least 10% of the prompt (``match_rate_threshold``), else the
# least loaded. Across variants of different batch sizes the load is compared as a share of each one's slots.
AFFINITY_MIN_MATCH = 0.1
AFFINITY_IMBALANCE = 0.5  # most minus least loaded candidate, in running + queued per batch slot


def _utilization(view: VariantView, load: Load) -> float:
    return (load.running + load.queued) / max(load.max_running, 1)


def _match(request: RequestFeatures, view: VariantView) -> float:
    return view.max_cached_tokens / request.prompt_tokens if request.prompt_tokens else 0.0


def prefix_affinity(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    config: RouterConfig,
    state: RouterState,
) -> VariantView:
    """Ray Serve LLM's prefix affinity over the variants' replicas as one pool: the variant holding the longest
    match of the prompt while loads are balanced and the match is worth it, else the least loaded."""
    used = [_utilization(v, loads[v.name]) for v in candidates]
    if max(used) - min(used) <= AFFINITY_IMBALANCE:
        best = max(candidates, key=lambda v: _match(request, v))
        if _match(request, best) >= AFFINITY_MIN_MATCH:
            return best
    return min(candidates, key=lambda v: _utilization(v, loads[v.name]))


# llm-d's default scheduling profile: prefix-cache-scorer 3, queue-scorer 2, kv-cache-utilization-scorer 2, each
# score in [0, 1] and their weighted sum maximised (llm-d inference scheduler's EndpointPickerConfig).
PREFIX_WEIGHT, QUEUE_WEIGHT, KV_WEIGHT = 3.0, 2.0, 2.0


def weighted_prefix(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    config: RouterConfig,
    state: RouterState,
) -> VariantView:
    """llm-d's weighted scorer over the variants: the prefix match ratio, the queue (min-max scaled over the
    candidates: the shortest scores 1) and the free KV cache, weighted 3 : 2 : 2."""
    queues = {v.name: loads[v.name].queued + loads[v.name].waiting_for_slot for v in candidates}
    low, high = min(queues.values()), max(queues.values())

    def score(view: VariantView) -> float:
        queue = 1.0 if high == low else (high - queues[view.name]) / (high - low)
        return (
            PREFIX_WEIGHT * _match(request, view)
            + QUEUE_WEIGHT * queue
            + KV_WEIGHT * (1.0 - min(view.kv_used_fraction, 1.0))
        )

    return max(candidates, key=score)


BASELINES: dict[str, tuple[Baseline, Reason]] = {
    "round_robin": (round_robin, Reason.ROUND_ROBIN),
    "least_loaded": (least_loaded, Reason.LEAST_LOADED),
    "length_threshold": (length_threshold, Reason.LENGTH_THRESHOLD),
    "largest": (largest, Reason.LARGEST),
    "prefix_affinity": (prefix_affinity, Reason.PREFIX_AFFINITY),
    "weighted_prefix": (weighted_prefix, Reason.WEIGHTED_PREFIX),
}
