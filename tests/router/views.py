"""Constructed variant views for the router tests: two variants whose speeds make predictions easy to follow.

``big``: quality 0.9, 8k context, 1 ms per prompt token, 50 ms base, 40 ms/token (+1 per extra sequence).
``small``: quality 0.4, 2k context, 0.1 ms per prompt token, 10 ms base, 10 ms/token (+0.1 per extra).
"""

from __future__ import annotations

from typing import Any

from router import LatencyModel, LatencyProfile, VariantView

BIG_PROFILE = LatencyProfile(
    prefill_tokens_per_s=1000.0, base_ttft_ms=50.0, tpot_ms_at_batch_1=40.0, tpot_ms_per_extra_seq=1.0
)
SMALL_PROFILE = LatencyProfile(
    prefill_tokens_per_s=10_000.0, base_ttft_ms=10.0, tpot_ms_at_batch_1=10.0, tpot_ms_per_extra_seq=0.1
)


def big(**overrides: Any) -> VariantView:
    fields: dict[str, Any] = {
        "name": "big",
        "context_length": 8192,
        "quality": 0.9,
        "cost_per_1k_tokens": 0.5,
        "ready_replicas": 1,
        "max_running_requests": 16,
        "latency": LatencyModel(BIG_PROFILE),
    }
    return VariantView(**(fields | overrides))


def small(**overrides: Any) -> VariantView:
    fields: dict[str, Any] = {
        "name": "small",
        "context_length": 2048,
        "quality": 0.4,
        "cost_per_1k_tokens": 0.05,
        "ready_replicas": 1,
        "max_running_requests": 16,
        "latency": LatencyModel(SMALL_PROFILE),
    }
    return VariantView(**(fields | overrides))


def saturated(**overrides: Any) -> dict[str, Any]:
    """Overrides that fill every slot of one replica and queue `queued` requests of 500 tokens each."""
    queued = overrides.pop("queued", 4)
    return {
        "running_requests": 16,
        "queued_requests": queued,
        "queued_prompt_tokens": 500 * queued,
        **overrides,
    }


def with_error_margins(view: VariantView, *, ttft: float = 0.0, tpot: float = 0.0) -> VariantView:
    """``view`` whose latency model has learned these error margins (as if outcomes had run that far above
    its predictions), so its conservative predictions differ from its mean ones by a known factor."""
    for error in view.latency._ttft_errors:  # every class of prompt length
        error.value = ttft
    for error in view.latency._tpot_errors:
        error.value = tpot
    return view
