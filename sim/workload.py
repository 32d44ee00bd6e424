"""Simulated traffic from the bench's own workload descriptions: arrival processes, length distributions,
SLO tiers and traces.

A request here draws its lengths and tier from the same seeded streams as ``traffic.workload.build_requests``
(``"{seed}:lengths"``, ``"{seed}:tiers"``), so a simulated run and a bench run of one config see the same
requests; only the prompt text, which an engine model does not need, is never built (an hour of traffic
holds hundreds of millions of prompt tokens). A workload with shared prefixes (``WorkloadConfig.prefix``) draws
the same segments as the bench (``traffic.prefix``) and carries them on each request, without their tokens.
Mixed traffic is several streams merged in time.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from router import RequestFeatures, RouterConfig, features_from_headers
from sim.request import SimRequest
from traffic.arrivals import ArrivalSpec, arrival_times, replay
from traffic.mooncake import MooncakeTrace
from traffic.prefix import composer
from traffic.records import RequestRecord
from traffic.segments import Segments
from traffic.workload import Slo, WorkloadConfig


class Stream(BaseModel):
    """One kind of traffic: when requests come (the bench's arrival specs) and what they ask for."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="For humans: what this traffic is (chat, RAG, batch...).")
    arrivals: ArrivalSpec
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)


def _pick_tier(workload: WorkloadConfig, rng: random.Random) -> str | None:
    # The same draw as traffic.workload's tier pick, so both see the same tiers for a seed.
    if not workload.tiers:
        return None
    return rng.choices([t.name for t in workload.tiers], weights=[t.weight for t in workload.tiers])[0]


class SimItem(NamedTuple):
    """One request before it is numbered: what every source of simulated requests yields."""

    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    slo: Slo
    segments: Segments = ()  # the prompt's content, where the workload shares prefixes
    turn: int = 0  # its conversation's turn (traffic.prefix.Conversations)


def stream_items(stream: Stream, duration_s: float) -> Iterator[SimItem]:
    """The stream's requests sent before ``duration_s``, with their prompt segments: the requests of
    ``traffic.workload.build_requests``, less the token ids."""
    cfg = stream.workload
    lengths = random.Random(f"{cfg.seed}:lengths")
    tiers = random.Random(f"{cfg.seed}:tiers")
    contents = composer(cfg.prefix, cfg.seed) if cfg.prefix is not None else None
    for t in arrival_times(stream.arrivals, cfg.seed):
        if t >= duration_s:
            return
        n_in = cfg.input_len.sample(lengths)
        n_out = cfg.output_len.sample(lengths)
        slo = cfg.slo_for_tier(_pick_tier(cfg, tiers))
        if contents is None:
            yield SimItem(t, n_in, n_out, slo)
        else:
            content = contents.next(n_in, n_out)
            output = content.output_tokens or n_out
            yield SimItem(t, content.tokens, output, slo, content.segments, content.turn)


def stream_requests(stream: Stream, duration_s: float) -> Iterator[tuple[float, int, int, Slo]]:
    """``(send time, prompt tokens, max_tokens, SLO)`` of the stream's requests sent before ``duration_s``
    (:func:`stream_items` without the segments)."""
    for item in stream_items(stream, duration_s):
        yield item.arrival_s, item.prompt_tokens, item.max_tokens, item.slo


class FeatureMaker:
    """The router's features of a request from its SLO, as the ingress reads them from the bench's headers."""

    def __init__(self, router: RouterConfig) -> None:
        self.router = router
        self._by_slo: dict[Slo, RequestFeatures] = {}

    def __call__(self, slo: Slo, prompt_tokens: int, max_tokens: int) -> RequestFeatures:
        template = self._by_slo.get(slo)
        if template is None:
            headers = slo.headers()
            if slo.tier is not None and slo.tier not in self.router.tiers:
                # A replayed run's tier the simulated router does not define: route by its targets.
                headers = Slo(ttft_ms=slo.ttft_ms, tpot_ms=slo.tpot_ms).headers()
            template = features_from_headers(headers, 1, 1, None, None, self.router)
            self._by_slo[slo] = template
        return RequestFeatures(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            slo=template.slo,
            priority=template.priority,
            sheddable=template.sheddable,
        )


def _numbered(items: Iterable[SimItem], router: RouterConfig) -> Iterator[SimRequest]:
    features = FeatureMaker(router)
    for index, (t, n_in, n_out, slo, segments, turn) in enumerate(items):
        yield SimRequest(
            index=index,
            arrival_s=t,
            prompt_tokens=n_in,
            max_tokens=n_out,
            slo=slo,
            features=features(slo, n_in, n_out),
            segments=segments,
            turn=turn,
        )


def sim_requests(streams: Sequence[Stream], duration_s: float, router: RouterConfig) -> Iterator[SimRequest]:
    """The streams' requests merged in send-time order (ties: the earlier stream first)."""
    merged = heapq.merge(*(stream_items(s, duration_s) for s in streams), key=lambda item: item.arrival_s)
    return _numbered(merged, router)


def mooncake_sim_requests(trace: MooncakeTrace, workload: WorkloadConfig, router: RouterConfig) -> Iterator[SimRequest]:
    """A Mooncake trace's requests (``MooncakeTrace.requests``' times, lengths and segments; ``workload``'s SLO)."""
    rows = trace.rows()
    times = replay((r.timestamp for r in rows), trace.speedup)
    items = (
        SimItem(t, row.input_tokens, row.output_tokens, workload.slo_for_tier(row.tier), row.segments)
        for row, t in zip(rows, times, strict=True)
    )
    return _numbered(items, router)


def record_requests(records: Sequence[RequestRecord], router: RouterConfig) -> Iterator[SimRequest]:
    """A measured run's requests, replayed: its send offsets, prompt lengths, output lengths and SLOs.

    The output length is what the run generated (``max_tokens`` when it failed before any token).
    """
    ordered = sorted(records, key=lambda r: r.start_s)
    first = ordered[0].start_s if ordered else 0.0
    items = (
        SimItem(
            r.start_s - first,
            r.prompt_tokens,
            r.output_tokens or r.max_tokens,
            Slo(tier=r.slo_tier, ttft_ms=r.slo_ttft_ms, tpot_ms=r.slo_tpot_ms),
        )
        for r in ordered
    )
    return _numbered(items, router)
