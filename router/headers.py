"""Reads a request's SLO from its HTTP headers: a tier by name, single targets overriding it.

x-slo-tier: interactive      one of RouterConfig.tiers (else the config's default tier)
x-slo-ttft-ms: 250           overrides the tier's TTFT target
x-slo-tpot-ms: 40            overrides the tier's TPOT target
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from core.errors import InvalidRequestError
from router.config import RouterConfig
from router.types import SLO, RequestFeatures

TIER_HEADER = "x-slo-tier"
TTFT_HEADER = "x-slo-ttft-ms"
TPOT_HEADER = "x-slo-tpot-ms"


def features_from_headers(
    headers: Mapping[str, str],
    prompt_tokens: int,
    max_tokens: int,
    priority: int | None,
    pinned: str | None,
    config: RouterConfig,
    sampling_fields: frozenset[str] = frozenset(),
) -> RequestFeatures:
    """The router's view of one request; ``priority`` None takes the tier's; ``sampling_fields``: the optional
    sampling fields it asks for (``SamplingParams.requested_fields()``).

    Raises :class:`~core.errors.InvalidRequestError` (``param`` = the header) for an unknown tier or
    a target that is not a positive number of milliseconds.
    """
    # HTTP header names are case-insensitive; a plain dict (tests, the bench) need not be lower-cased.
    lowered = {name.lower(): value for name, value in headers.items()}
    raw_tier = lowered.get(TIER_HEADER)
    tier_name = config.default_tier if raw_tier is None else raw_tier.strip()
    tier = config.tiers.get(tier_name)
    if tier is None:
        raise InvalidRequestError(
            f"Header {TIER_HEADER} names an unknown tier {tier_name!r}; known tiers: "
            f"{', '.join(sorted(config.tiers))}.",
            param=TIER_HEADER,
        )
    ttft_ms = _milliseconds(lowered, TTFT_HEADER, tier.ttft_ms)
    tpot_ms = _milliseconds(lowered, TPOT_HEADER, tier.tpot_ms)
    return RequestFeatures(
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        slo=SLO(ttft_ms=ttft_ms, tpot_ms=tpot_ms),
        priority=tier.priority if priority is None else priority,
        sheddable=tier.sheddable,
        pinned=pinned,
        sampling_fields=sampling_fields,
    )


def _milliseconds(headers: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # float() also accepts 'nan' and 'inf'; neither is a target a router can aim at.
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequestError(f"Header {name} must be a positive number of milliseconds, got {raw!r}.", param=name)
    return value
