"""Capacity reservation: keep a variant's room for the requests that have nowhere else to go.

The ``slo`` policy's quality objective sends a request to the best variant predicted to meet its SLO.
Judged one request at a time that is right, and in aggregate it is wrong when some requests can only
be served by one variant: a long prompt that only the large-context variant holds, or a tight-SLO
request that only one variant still meets. Flexible requests (a short chat, a batch job with no SLO)
then fill that variant because it is the best quality, and the requests with no alternative queue
behind them and miss. In the simulator's heterogeneous fleet this made ``slo`` lose to the SLO-blind
``least_loaded`` (90.5% vs 94.7% at the top rate, the long-prompt class at 33% vs 69%).

So the router remembers, per variant, the *exclusive* demand it has seen recently (requests for which
that variant was the only candidate by context, or the only one meeting the SLO): a running mean of
their prompt length and of their TTFT and TPOT targets. Before a flexible request takes such a
variant, the policy asks how much room a typical exclusive request arriving just after it would find
(its conservative predicted TTFT and TPOT against its targets, :func:`reserve_room`). Variants that
would keep at least ``reserve_slack`` of room are free to take the request; when none would, the
request goes where the least harm is done (the most room left). Only variants that meet the request's
own SLO are considered: a reservation never turns a met SLO into a miss.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from router.latency import Load
from router.types import RequestFeatures, VariantView

# Weight of the newest exclusive request in the running means: about the last twenty count.
_MEAN_WEIGHT = 0.05


@dataclass(slots=True)
class ExclusiveDemand:
    """What recent requests that only one variant could take looked like."""

    prompt_tokens: float
    ttft_ms: float | None  # mean target of those that had one
    tpot_ms: float | None
    last_decision: int  # RouterState.decisions when the latest one was seen

    def add(self, request: RequestFeatures, decision: int) -> None:
        self.prompt_tokens += _MEAN_WEIGHT * (request.prompt_tokens - self.prompt_tokens)
        self.ttft_ms = _mean(self.ttft_ms, request.slo.ttft_ms)
        self.tpot_ms = _mean(self.tpot_ms, request.slo.tpot_ms)
        self.last_decision = decision


def _mean(mean: float | None, value: float | None) -> float | None:
    if value is None:
        return mean
    return value if mean is None else mean + _MEAN_WEIGHT * (value - mean)


def record_exclusive(demand: dict[str, ExclusiveDemand], variant: str, request: RequestFeatures, decision: int) -> None:
    """Notes that ``request`` had only ``variant`` to go to. Requests without targets reserve nothing: they
    cannot miss."""
    if request.slo.ttft_ms is None and request.slo.tpot_ms is None:
        return
    known = demand.get(variant)
    if known is None:
        demand[variant] = ExclusiveDemand(
            float(request.prompt_tokens), request.slo.ttft_ms, request.slo.tpot_ms, decision
        )
    else:
        known.add(request, decision)


def reserve_room(
    view: VariantView,
    load: Load,
    request: RequestFeatures,
    demand: ExclusiveDemand | None,
    *,
    now: int,
    window: int,
    error_margin_scale: float,
) -> float:
    """The room (as a fraction of its targets, 1 = all of it) that a typical exclusive request of ``view``
    would find left if ``request`` took ``view`` now; 1 when the variant has no recent exclusive demand."""
    if demand is None or now - demand.last_decision > window:
        return 1.0
    replicas = max(view.ready_replicas, view.starting_replicas, 1)
    # The request lands on one replica; averaged over the variant it adds its share of the prefill queue
    # and of the batch, as a request routed now would find them.
    after = replace(
        load,
        queued_prompt_tokens=load.queued_prompt_tokens + request.prompt_tokens / replicas,
        running=min(float(load.max_running), load.running + 1.0 / replicas),
    )
    model = view.latency
    room = 1.0
    if demand.ttft_ms is not None:
        ttft = model.predict_ttft_ms(round(demand.prompt_tokens), after)
        room = min(room, 1.0 - ttft * (1.0 + error_margin_scale * model.ttft_margin) / demand.ttft_ms)
    if demand.tpot_ms is not None:
        tpot = model.predict_tpot_ms(after.batch_when_running, after.prefill_tokens_per_s)
        room = min(room, 1.0 - tpot * (1.0 + error_margin_scale * model.tpot_margin) / demand.tpot_ms)
    return room
