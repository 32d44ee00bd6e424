"""Variant views from replica reports: what the policy reads of each variant, built one way for the app and the
simulator.

The serve app's routing table (``serve_app.routing.RoutingTable.views``) and the simulator
(``sim.simulator.Simulation``) each hold, per variant, the last report of each ready replica and when each starting
replica expects to serve; :func:`variant_view` turns them into the :class:`~router.VariantView` the policy reads,
before the ingress adds its own in-flight requests (``router.inflight.InflightBook.annotate``). The reports come at
the stack's cadence: each engine replica posts to the stats board every :data:`STATS_PERIOD_S`, and each ingress
reads the board every :data:`REFRESH_PERIOD_S`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from router.latency import LatencyModel
from router.load import decode_pace
from router.types import VariantView

STATS_PERIOD_S = 0.25  # how often each engine replica posts its stats to the board (serve_app/engine_deployment.py)
REFRESH_PERIOD_S = 0.1  # how often each ingress reads the board (serve_app/routing.py)
# A starting replica later than it said by this much is no longer counted on: its start is slow or failed.
STARTING_OVERDUE_S = 2.0


class ReplicaFigures(Protocol):
    """One ready replica's load as it last reported it: ``engines.protocol.EngineStats`` in the app,
    ``sim.replica.LoadReport`` in the simulator."""

    @property
    def context_length(self) -> int: ...
    @property
    def max_running_requests(self) -> int: ...
    @property
    def queued_requests(self) -> int: ...
    @property
    def running_requests(self) -> int: ...
    @property
    def queued_prompt_tokens(self) -> int: ...
    @property
    def kv_used_fraction(self) -> float: ...
    @property
    def recent_tpot_ms(self) -> float: ...
    @property
    def recent_decode_batch(self) -> float: ...
    @property
    def context_tokens(self) -> int: ...


def starting_ready_in_ms(serves_at: Iterable[float], now: float) -> tuple[int, float]:
    """``(replicas, ms until the last of them serves)`` of a variant's starting replicas, from when each expects to
    serve, leaving out any overdue by :data:`STARTING_OVERDUE_S`; one due now counts from the next refresh (the
    earliest its report can arrive)."""
    due = [at for at in serves_at if now - at < STARTING_OVERDUE_S]
    if not due:
        return 0, 0.0
    return len(due), max(max(due) - now, REFRESH_PERIOD_S) * 1000.0


def variant_view(
    name: str,
    *,
    quality: float,
    cost_per_1k_tokens: float,
    latency: LatencyModel,
    sampling_fields: frozenset[str] | None,
    replicas: Sequence[ReplicaFigures],
    starting_serves_at: Iterable[float],
    known_context_length: int,
    now: float,
) -> VariantView:
    """One variant as its ready ``replicas`` last reported it (sums of their load, the smallest context length and
    batch size), with its starting replicas from when each expects to serve (``starting_serves_at``, on the clock
    of ``now``).

    With no ready replica, one is (or will be) starting: Serve restarts a dead replica, and a variant scaled to zero
    starts one as soon as a request waits at its handle. The view then has one starting replica of one batch slot and
    ``known_context_length`` (the last one reported); the policy may send there only where
    ``RouterConfig.wait_for_starting_replicas`` allows it, with the startup time in its TTFT prediction.
    """
    if not replicas:
        return VariantView(
            name=name,
            context_length=known_context_length,
            quality=quality,
            cost_per_1k_tokens=cost_per_1k_tokens,
            ready_replicas=0,
            starting_replicas=1,
            max_running_requests=1,
            latency=latency,
            sampling_fields=sampling_fields,
        )
    pace_ms, pace_batch = decode_pace((r.recent_tpot_ms, r.recent_decode_batch) for r in replicas)
    starting, ready_in_ms = starting_ready_in_ms(starting_serves_at, now)
    return VariantView(
        name=name,
        context_length=min(r.context_length for r in replicas),
        quality=quality,
        cost_per_1k_tokens=cost_per_1k_tokens,
        ready_replicas=len(replicas),
        starting_replicas=starting,
        starting_ready_in_ms=ready_in_ms,
        max_running_requests=max(1, min(r.max_running_requests for r in replicas)),
        latency=latency,
        sampling_fields=sampling_fields,
        queued_requests=sum(r.queued_requests for r in replicas),
        running_requests=sum(r.running_requests for r in replicas),
        queued_prompt_tokens=sum(r.queued_prompt_tokens for r in replicas),
        kv_used_fraction=max(r.kv_used_fraction for r in replicas),
        recent_tpot_ms=pace_ms,
        recent_decode_batch=pace_batch,
        context_tokens=sum(r.context_tokens for r in replicas),
    )
