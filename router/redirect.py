"""Demand a variant's autoscaler cannot see: requests that preferred it but were spilled elsewhere or shed.

While a variant scales, the router sends what it cannot serve within the SLO to another variant that can
(spill-over) and answers 429 to what no variant can (admission control). Both hide demand from that
variant's autoscaler, which counts only the sequences its own engines hold: under a 10x step the cheap
variant sees one replica's worth of queue, asks for a few replicas, sees a few replicas' worth, and so on,
one cold start per round. The ingress therefore books every request that did not go where it would have gone
on an idle fleet (:func:`preferred_variant`: the same policy on idle views) as in flight at that preferred
variant for as long as it would have run there (its predicted time there), and the variant's autoscaler adds
that level to its own demand (``router.autoscaling``: the ``slots`` signal).

Pure: no clock of its own, no Ray. ``serve_app.routing`` keeps one :class:`RedirectedDemand` per ingress and
sends its levels to the stats board; the simulator keeps one the same way.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from router.config import RouterConfig
from router.policy import route_idle
from router.rejections import CAPACITY_REASONS
from router.types import Decision, RequestFeatures, VariantView


def idle(view: VariantView) -> VariantView:
    """``view`` with no load: what the router would see if the variant had a free replica and nothing queued."""
    return VariantView(
        name=view.name,
        context_length=view.context_length,
        quality=view.quality,
        cost_per_1k_tokens=view.cost_per_1k_tokens,
        ready_replicas=max(1, view.ready_replicas),
        max_running_requests=view.max_running_requests,
        latency=view.latency,
        sampling_fields=view.sampling_fields,
    )


def preferred_variant(
    features: RequestFeatures, views: Sequence[VariantView], config: RouterConfig
) -> tuple[str, float] | None:
    """Where the request would go on an idle fleet, and how long it would take there (s); None: nowhere."""
    decision = route_idle(features, views, config)  # = route() on [idle(v) for v in views], without building them
    if decision.variant is None:
        return None
    prediction = decision.predictions.get(decision.variant)
    if prediction is None:
        return decision.variant, 0.0
    return decision.variant, (prediction.ttft_ms + features.max_tokens * prediction.tpot_ms) / 1e3


def redirected_from(
    decision: Decision, features: RequestFeatures, views: Sequence[VariantView], config: RouterConfig
) -> tuple[str, float] | None:
    """``(preferred variant, seconds)`` when ``decision`` did not send the request where it preferred to go
    (spilled to another variant or shed); None when it went there, or when it is refused for what it asks
    (a pinned variant, an unknown model, too long a prompt: no variant's scaling would change that)."""
    if decision.rejected and decision.reason not in CAPACITY_REASONS:
        return None
    if features.pinned is not None:
        return None
    preferred = preferred_variant(features, views, config)
    if preferred is None or preferred[0] == decision.variant:
        return None
    return preferred


class RedirectedDemand:
    """Per preferred variant, the requests redirected away from it that would be running there now.

    The level is the larger of two counts: the bookings still within their time (what is in flight now), and
    the rate of the last ``rate_window_s`` times their mean time (Little's law: what will be in flight once the
    rate holds for one request's time). Under a step the first lags the load by a whole request; the second
    reaches it within the window. In the simulator on ``bench spike``'s fleet the rate count raised the
    attainment of the step and of the burst train at the same replica-seconds (docs/measurements.md).
    """

    def __init__(self, rate_window_s: float = 1.0) -> None:
        self.rate_window_s = rate_window_s
        self._ends: dict[str, list[float]] = {}  # min-heaps of the times each booking stops counting
        self._recent: dict[str, deque[tuple[float, float]]] = {}  # (booked at, seconds) within the rate window
        self._recent_s: dict[str, float] = {}  # running sums of those seconds

    def add(self, variant: str, now: float, duration_s: float) -> None:
        duration_s = max(duration_s, 0.0)
        heapq.heappush(self._ends.setdefault(variant, []), now + duration_s)
        self._recent.setdefault(variant, deque()).append((now, duration_s))
        self._recent_s[variant] = self._recent_s.get(variant, 0.0) + duration_s

    def levels(self, now: float) -> dict[str, float]:
        """Redirected requests per variant that would be in flight there (variants with none omitted)."""
        out = {}
        for variant, ends in self._ends.items():
            while ends and ends[0] <= now:
                heapq.heappop(ends)
            recent = self._recent[variant]
            while recent and recent[0][0] <= now - self.rate_window_s:
                self._recent_s[variant] -= recent.popleft()[1]
            # Requests per second x seconds each: the in-flight count this rate leads to.
            steady = self._recent_s[variant] / self.rate_window_s if recent else 0.0
            level = max(float(len(ends)), steady)
            if level > 0:
                out[variant] = level
        return out
