"""The discrete-event loop: requests arrive, the project's router picks a variant, simulated replicas serve
them, and the project's autoscaling policy resizes each variant on Serve's cadence.

What runs is production code wherever production has code for it: ``router.route`` decides every
request from :class:`~router.VariantView` s built by ``router.views.variant_view``, as
``serve_app.routing.RoutingTable.views`` builds them (the replicas' load as each last posted it, every
``STATS_PERIOD_S``, read every ``REFRESH_PERIOD_S``, plus the ingress's exact in-flight counts), per ingress
replica (:mod:`sim.ingress`: each its own router state, book, latency models and snapshot), each variant's
:class:`~router.LatencyModel` learns from finished requests as ``RoutingTable.close`` teaches it, and scaling
goes through :mod:`sim.autoscaler`. Only the engines are models (:mod:`sim.replica`).

One heap of ``(time, order, kind, target, version)`` events; a replica's iteration end is rescheduled by
pushing a new event with a new version (stale ones are skipped), so nothing is ever removed from the heap.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from core.error_table import TABLE
from engines.profile import EngineProfile
from router import LatencyProfile, RouterConfig, VariantView, route
from router.config import ReplicaChoice
from router.explain import candidates_header
from router.redirect import RedirectedDemand, redirected_from
from router.rejections import rejection_class
from router.replica_backlog import best_cached
from router.serve_autoscaling import AutoscalingSpec
from router.views import REFRESH_PERIOD_S, STATS_PERIOD_S, variant_view
from sim.autoscaler import Policy, SimAutoscaler
from sim.deployment import SimDeployment
from sim.ingress import IngressChoice, SimIngress
from sim.prefix import SimPrefixView
from sim.replica import ReplicaState, SimReplica
from sim.request import SimRequest
from traffic.records import RequestRecord, slo_met, time_per_output_token
from traffic.replicas import ReplicaSample
from traffic.segments import segment_block_hashes

_STEP, _READY, _ARRIVAL, _RECORD, _TICK, _REPORT = range(6)


@dataclass(frozen=True)
class SimVariant:
    """One variant as the simulation runs it: the router's facts, its engine model and its replicas."""

    name: str
    profile: EngineProfile
    quality: float = 1.0
    cost_per_1k_tokens: float = 0.0
    max_ongoing_requests: int = 64
    num_replicas: int = 1  # fixed size; with autoscaling, the replicas ready at the start
    autoscaling: AutoscalingSpec | None = None
    latency_profile: LatencyProfile | None = None  # the router's seed (None: the router's defaults)
    policy: Policy | None = None  # overrides the scaling policy named in ``autoscaling``

    @property
    def router_prefill_tokens_per_s(self) -> float:
        """The rate the serve app's request router drains its prefill estimate at (VariantConfig's options)."""
        return (self.latency_profile or LatencyProfile()).prefill_tokens_per_s


@dataclass
class SimResult:
    records: list[RequestRecord]
    replica_samples: list[ReplicaSample]
    gpu_seconds: dict[str, float]
    end_s: float

    @property
    def gpu_hours(self) -> float:
        return sum(self.gpu_seconds.values()) / 3600.0


class Simulation:
    def __init__(
        self,
        variants: Iterable[SimVariant],
        router: RouterConfig,
        *,
        seed: int = 0,
        tick_s: float = 1.0,
        record_interval_s: float = 1.0,
        snapshot_period_s: float = REFRESH_PERIOD_S,
        report_period_s: float = STATS_PERIOD_S,
        replica_choice: ReplicaChoice = "power_of_two",
        ingress_replicas: int = 1,
        prefix_view: Literal["reported", "oracle"] = "reported",
    ) -> None:
        """``prefix_view``: what the router knows of the replicas' prefix caches (with ``router.prefix_routing``):
        their changes as the replicas posted them (as the serve app knows them), or every cache as it is at each
        decision (the oracle)."""
        self.variants = {v.name: v for v in variants}
        self.ingress_replicas = ingress_replicas
        self.router = router
        self.tick_s = tick_s
        self.record_interval_s = record_interval_s
        self.snapshot_period_s = snapshot_period_s
        self.report_period_s = report_period_s
        self._report_phases = random.Random(f"{seed}:reports")  # each replica posts on its own phase
        self.deployments = {
            v.name: SimDeployment(
                v.name,
                v.profile,
                v.max_ongoing_requests,
                seed,
                replica_choice,
                ingress_replicas=ingress_replicas,
                prefill_tokens_per_s=v.router_prefill_tokens_per_s,
            )
            for v in self.variants.values()
        }
        self.autoscalers = {
            v.name: SimAutoscaler(v.autoscaling, v.policy) for v in self.variants.values() if v.autoscaling
        }
        # Each ingress replica routes from its own state, book, latency models and snapshot (sim/ingress.py).
        profiles = [(v.name, v.latency_profile) for v in self.variants.values()]
        self.ingresses = [SimIngress.fresh(profiles, router) for _ in range(ingress_replicas)]
        self._ingress_choice = IngressChoice(ingress_replicas, seed)
        # The block size of each variant whose engines reuse prompt blocks, and each ingress's view of the caches.
        self._block_tokens = {
            v.name: v.profile.kv_block_tokens for v in self.variants.values() if v.profile.block_reuse
        }
        routed = self._block_tokens if router.prefix_routing else {}
        self._prefix = [SimPrefixView(routed, oracle=prefix_view == "oracle") for _ in range(ingress_replicas)]
        self.redirected = RedirectedDemand()  # demand spilled or shed away from its preferred variant (ditto)
        self._waking: set[str] = set()  # variants at zero replicas with the ingress's wake-up call at their handle
        self._heap: list[tuple[float, int, int, Any, int]] = []
        self._order = itertools.count()
        self._samples: list[ReplicaSample] = []

    # ------------------------------------------------------------------ the loop

    def run(self, requests: Iterable[SimRequest], horizon_s: float | None = None) -> SimResult:
        """Runs until every request has finished (or been rejected); ``horizon_s`` bounds GPU time at
        least to that long (a run's GPU-hours cover the whole traffic window even when it ends idle)."""
        arrivals = iter(requests)
        handled: list[SimRequest] = []
        for variant in self.variants.values():
            for _ in range(variant.num_replicas):
                replica = self.deployments[variant.name].add_replica(0.0)
                self._mark_ready(replica, 0.0)  # deployed before the traffic starts
            self._sample_replicas(0.0)
        self._push_next_arrival(arrivals)
        if self.autoscalers:
            self._push(0.0, _RECORD, None)
            self._push(self.tick_s, _TICK, None)
        open_requests = 0
        more_arrivals = bool(self._heap)
        now = 0.0
        heap = self._heap
        while heap:
            now, _, kind, target, version = heapq.heappop(heap)
            if kind == _STEP:
                if version == target.version:
                    open_requests -= self._step_end(target, now)
            elif kind == _ARRIVAL:
                handled.append(target)
                if self._arrive(target, now):
                    open_requests += 1
                more_arrivals = self._push_next_arrival(arrivals)
            elif kind == _READY:
                self._ready(target, now)
            elif not more_arrivals and open_requests == 0:
                continue  # traffic over and served: let the control loop stop
            elif kind == _REPORT:
                self._post_report(target, now)
            elif kind == _RECORD:
                levels = self.redirected.levels(now)
                for name, scaler in self.autoscalers.items():
                    scaler.record(self.deployments[name], now, levels.get(name, 0.0))
                self._push(now + self.record_interval_s, _RECORD, None)
            else:
                self._tick(now)
                self._push(now + self.tick_s, _TICK, None)
        end_s = max(now, horizon_s or 0.0)
        return SimResult(
            records=[_record(r, self.variants) for r in handled],
            replica_samples=self._samples,
            gpu_seconds={name: d.gpu_seconds(end_s) for name, d in self.deployments.items()},
            end_s=end_s,
        )

    def _push(self, t: float, kind: int, target: Any, version: int = 0) -> None:
        heapq.heappush(self._heap, (t, next(self._order), kind, target, version))

    def _push_next_arrival(self, arrivals: Iterator[SimRequest]) -> bool:
        request = next(arrivals, None)
        if request is None:
            return False
        self._push(request.arrival_s, _ARRIVAL, request)
        return True

    def _schedule(self, replica: SimReplica, end: float | None) -> None:
        if end is not None:
            self._push(end, _STEP, replica, replica.version)

    # ------------------------------------------------------------------ requests

    def _arrive(self, request: SimRequest, now: float) -> bool:
        """Routes and dispatches one request; False when the router rejected it."""
        request.ingress = self._ingress_choice.pick()
        ingress = self.ingresses[request.ingress]
        views = self._views(ingress, now)
        hashes: dict[int, list[int]] = {}
        if request.segments:  # the engines cache it whatever the router knows
            for size in set(self._block_tokens.values()):
                hashes[size] = segment_block_hashes(request.segments, size)
        cached_by = self._cached_by_replica(request, views, hashes, now)
        decision = route(request.features, views, self.router, ingress.state)
        request.route_reason = str(decision.reason)
        redirected = redirected_from(decision, request.features, views, self.router)
        if redirected is not None:
            self.redirected.add(redirected[0], now, redirected[1])
            if not self.deployments[redirected[0]].ready:
                self._waking.add(redirected[0])  # the ingress's wake-up call waits at its handle
        if decision.variant is None:
            request.rejection = rejection_class(decision.reason)
            request.end_s = now
            return False
        name = decision.variant
        request.variant = name
        request.prediction = decision.predictions.get(name)
        request.candidates = candidates_header(decision.predictions)
        replicas = len(self.deployments[name].ready) or 1
        request.ticket = ingress.book.open(
            name,
            request.prompt_tokens,
            request.prediction,
            now,
            max_tokens=request.max_tokens,
            replicas=replicas,
            cached_tokens=0 if request.prediction is None else request.prediction.cached_tokens,
        )
        if name in self._block_tokens:
            request.block_hashes = hashes.get(self._block_tokens[name], [])
        request.cached_by_replica = cached_by.get(name, {})
        sent = self.deployments[name].dispatch(request, now)
        if sent is not None:
            self._schedule(*sent)
        return True

    def _cached_by_replica(
        self, request: SimRequest, views: list[VariantView], hashes: dict[int, list[int]], now: float
    ) -> dict[str, dict[str, int]]:
        """Per variant, the cached tokens of the request's prompt on each replica as its ingress sees them; each
        view's ``cached_prompt_tokens`` set to its best replica's (``RoutingTable.prefix_lookup``)."""
        prefix = self._prefix[request.ingress]
        out: dict[str, dict[str, int]] = {}
        if not hashes or not prefix.indexes:
            return out
        for view in views:
            size = self._block_tokens.get(view.name)
            deployment = self.deployments[view.name]
            if size is None:
                continue
            cached = prefix.cached(view.name, deployment.ready, hashes[size], request.prompt_tokens, now)
            if not cached:
                continue
            out[view.name] = cached
            rate = self.variants[view.name].router_prefill_tokens_per_s
            backlogs = {
                replica: max(0.0, tokens - (now - at_s) * rate)
                for replica, (tokens, at_s) in deployment.reported[request.ingress].items()
            }
            view.cached_prompt_tokens = best_cached(backlogs, cached, request.prompt_tokens)
            view.max_cached_tokens = max(cached.values())
        return out

    def _step_end(self, replica: SimReplica, now: float) -> int:
        finished, end = replica.step_end(now)
        self._schedule(replica, end)
        if replica.started:
            # The first token reaches the ingress after the serving overhead, as the client sees it.
            overhead_s = replica.profile.overhead_ms / 1e3
            for request in replica.started:
                if request.ticket is not None:
                    self.ingresses[request.ingress].book.first_token(request.ticket, now + overhead_s)
            replica.started.clear()
        if not finished:
            return 0
        deployment = self.deployments[replica.replica_id.rpartition("#")[0]]
        for request in finished:
            self._close(request)
            deployment.completed(replica, request)
        for target, new_end in deployment.drain_handle_queue(now):
            self._schedule(target, new_end)
        deployment.release_if_drained(replica, now)
        return len(finished)

    def _close(self, request: SimRequest) -> None:
        """The ingress's ``RoutingTable.close``: in-flight counts down, the latency model learns."""
        name = request.variant
        assert name is not None and request.ticket is not None and request.end_s is not None
        overhead_s = self.variants[name].profile.overhead_ms / 1e3
        book = self.ingresses[request.ingress].book
        book.close(request.ticket, request.max_tokens, request.end_s + overhead_s, ok=True)

    def _views(self, ingress: SimIngress, now: float) -> list[VariantView]:
        """An ingress's views: its periodic stats snapshot with its own live in-flight counts."""
        if now - ingress.snapshot_s >= self.snapshot_period_s:
            ingress.snapshot_s = now
            ingress.snapshot = {name: self._snapshot_view(name, ingress, now) for name in self.variants}
            # The oldest report dates the sum: requests sent since may be in none of them (RoutingTable.refresh).
            ingress.report_at = {
                name: min((r.report.at_s for r in d.ready if r.report is not None), default=now)
                for name, d in self.deployments.items()
            }
            index = next(i for i, each in enumerate(self.ingresses) if each is ingress)
            self._prefix[index].refresh(self.deployments)
            for deployment in self.deployments.values():  # what this ingress's handles see of each replica
                deployment.reported[index] = {
                    r.replica_id: (r.report.queued_prompt_tokens, r.report.at_s)
                    for r in deployment.ready
                    if r.report is not None
                }
        # As the app: only a variant with ready replicas gets the ingress's in-flight requests added.
        return [
            ingress.book.annotate(v, now, ingress.report_at[v.name]) if v.ready_replicas else v
            for v in ingress.snapshot.values()
        ]

    def _snapshot_view(self, name: str, ingress: SimIngress, now: float) -> VariantView:
        """A variant as the stats board shows it: its ready replicas' last reports, and when its starting ones will
        serve (which the real ones post as they start: RoutingTable.refresh)."""
        variant = self.variants[name]
        deployment = self.deployments[name]
        return variant_view(
            name,
            quality=variant.quality,
            cost_per_1k_tokens=variant.cost_per_1k_tokens,
            latency=ingress.models[name],
            sampling_fields=None,
            replicas=[r.report for r in deployment.ready if r.report is not None],
            starting_serves_at=(r.ready_s for r in deployment.replicas if r.state is ReplicaState.STARTING),
            known_context_length=variant.profile.context_length,
            now=now,
        )

    # ------------------------------------------------------------------ replicas

    def _ready(self, replica: SimReplica, now: float) -> None:
        if self._mark_ready(replica, now):
            deployment = self.deployments[replica.replica_id.rpartition("#")[0]]
            for target, end in deployment.drain_handle_queue(now):
                self._schedule(target, end)
            self._sample_replicas(now)

    def _mark_ready(self, replica: SimReplica, now: float) -> bool:
        """The replica serves; its stats loop posts at once, then every ``report_period_s`` on its own phase."""
        if not self.deployments[replica.replica_id.rpartition("#")[0]].mark_ready(replica):
            return False
        replica.post_report(now)
        self._push(now + self._report_phases.uniform(0.0, self.report_period_s), _REPORT, replica)
        return True

    def _post_report(self, replica: SimReplica, now: float) -> None:
        if replica.state is ReplicaState.READY:  # a draining or stopped replica is off the board
            replica.post_report(now)
            self._push(now + self.report_period_s, _REPORT, replica)

    def _tick(self, now: float) -> None:
        for name, scaler in self.autoscalers.items():
            deployment = self.deployments[name]
            if deployment.ready:
                self._waking.discard(name)  # the wake-up call is answered
            target = scaler.decide(deployment, now, waking=name in self._waking)
            current = deployment.target
            if target > current:
                for _ in range(target - current):
                    replica = deployment.add_replica(now)
                    self._push(replica.ready_s, _READY, replica)
            elif target < current:
                deployment.remove_replicas(current - target, now)
                self._sample_replicas(now)

    def _sample_replicas(self, now: float) -> None:
        for name, deployment in self.deployments.items():
            self._samples.append(ReplicaSample(t_s=now, variant=name, replicas=len(deployment.ready)))


def _record(request: SimRequest, variants: dict[str, SimVariant]) -> RequestRecord:
    """The request as the bench's client would have recorded it."""
    slo = request.slo
    record = RequestRecord(
        request_id=f"sim-{request.index}",
        index=request.index,
        start_time=request.arrival_s,
        start_s=request.arrival_s,
        arrival_s=request.arrival_s,
        prompt_tokens=request.prompt_tokens,
        max_tokens=request.max_tokens,
        slo_tier=slo.tier,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        variant=request.variant,
        route_reason=request.route_reason,
        predicted_ttft_ms=None if request.prediction is None else request.prediction.ttft_ms,
        predicted_tpot_ms=None if request.prediction is None else request.prediction.tpot_ms,
        route_candidates=request.candidates,
        replica=request.replica,
        ingress=str(request.ingress),  # as x-route-ingress names the real ingress replica
        turn=request.turn,
    )
    if request.rejection is not None:
        # What the ingress answers the same rejection with (core.error_table).
        row = TABLE[request.rejection]
        record.status = row.http_status
        record.error_type = row.openai_type
        record.error_message = request.route_reason
        record.e2e_s = 0.0
        return record
    if request.first_token_s is None or request.end_s is None or request.variant is None:
        # Never served: it waited at a variant that never got a replica. The client would time out.
        record.error_type = "timeout"
        record.error_message = "no replica served the request before the simulation ended"
        return record
    overhead_s = variants[request.variant].profile.overhead_ms / 1e3
    record.status = 200
    if request.block_hashes:
        record.cached_tokens = request.cached_tokens
    record.output_tokens = request.max_tokens
    record.chunks = request.max_tokens
    record.ttft_s = request.first_token_s - request.arrival_s + overhead_s
    record.e2e_s = request.end_s - request.arrival_s + overhead_s
    record.tpot_s = time_per_output_token(record.e2e_s, record.ttft_s, record.output_tokens)
    record.slo_met = slo_met(record)
    return record
