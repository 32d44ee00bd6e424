"""A fake engine handle and a pipeline around it, for the ingress's tests without Ray.

``FakeEngine`` has the shape of Serve's streaming handle that the pipeline uses (``handle.generate.remote(request)``
returns an async iterator of deltas with ``cancel()``); its streams play a script of deltas and errors, can wait at
a gate (a stream the client abandons midway) and say whether they were cancelled. Everything else the pipeline
gets is real: the default serve_config.yaml's config, its tokenizer, the routing table and its in-flight book, the
key store and its limits. Metrics are recorded in a dict instead of Ray's metrics agent, so that tests can read
them. What this cannot show: Serve's handles, its proxies, and engines' own timing (the end-to-end tests do).
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from engines.protocol import Delta, EngineStats, GenerationRequest
from serve_app.auth import KeyStore
from serve_app.config import AppConfig, load_app_config
from serve_app.limiter import SharedLimits
from serve_app.pipeline import Pipeline
from serve_app.prompting import PromptBuilder
from serve_app.routing import RoutingTable
from serve_app.stats_board import ReplicaReport
from tests.conftest import REPO

Item = Delta | BaseException


def answer(tokens: int, *, per_delta: int = 1, text: str = "ab", finish: str = "length") -> list[Item]:
    """Deltas of ``tokens`` tokens, ``per_delta`` in each, the last with ``finish``."""
    out: list[Item] = []
    done = 0
    while done < tokens:
        n = min(per_delta, tokens - done)
        done += n
        out.append(
            Delta(
                text=text * n,
                token_ids=[7] * n,
                finish_reason=finish if done == tokens else None,
                prompt_tokens=3,
                completion_tokens=done,
            )
        )
    return out


@dataclass
class FakeStream:
    request: GenerationRequest
    items: list[Item]
    gate: asyncio.Event | None = None  # when set: waits for it before the second item
    gate_at: int = 1
    cancelled: bool = False
    sent: int = 0

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Delta:
        if self.gate is not None and self.sent == self.gate_at:
            await self.gate.wait()
        if self.cancelled or self.sent >= len(self.items):
            raise StopAsyncIteration
        item = self.items[self.sent]
        self.sent += 1
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeEngine:
    """One variant's handle: ``script(request)`` is what each request's stream plays."""

    script: Callable[[GenerationRequest], list[Item]]
    gate: asyncio.Event | None = None
    streams: list[FakeStream] = field(default_factory=list)

    @property
    def generate(self) -> FakeEngine:
        return self

    def remote(self, request: GenerationRequest) -> FakeStream:
        stream = FakeStream(request, list(self.script(request)), self.gate)
        self.streams.append(stream)
        return stream


class _Metric:
    def __init__(self, name: str, counts: Counter) -> None:
        self._name, self._counts = name, counts

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        self._counts[(self._name, tuple(sorted((tags or {}).items())))] += value

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.inc(1, tags)


class RecordedMetrics:
    """``IngressMetrics``' names, counted in ``counts[(name, sorted tags)]``."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def __getattr__(self, name: str) -> _Metric:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Metric(name, self.counts)

    def requests_by_status(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (name, tags), value in self.counts.items():
            if name == "requests":
                status = dict(tags)["status"]
                out[status] = out.get(status, 0) + value
        return out


def _replica(name: str, context_length: int) -> ReplicaReport:
    stats = EngineStats(kv_blocks_used=0, kv_blocks_total=100, context_length=context_length, max_running_requests=16)
    return ReplicaReport(name, 0.0, stats)


def default_args() -> dict:
    return copy.deepcopy(yaml.safe_load((REPO / "serve_config.yaml").read_text())["applications"][0]["args"])


@dataclass
class Harness:
    """A pipeline over fake engines, and what tests read back: streams, metrics, the in-flight book, the keys."""

    config: AppConfig
    pipeline: Pipeline
    engines: dict[str, FakeEngine]
    metrics: RecordedMetrics
    routing: RoutingTable
    keys: KeyStore

    def streams(self) -> list[FakeStream]:
        return [s for e in self.engines.values() for s in e.streams]

    def inflight(self) -> int:
        """Requests the routing table's book holds open, over all variants."""
        return sum(v.inflight for v in self.routing.views())

    def streams_held(self) -> dict[str, int]:
        """Stream slots each key holds (local limits)."""
        return {p.name: p.streams for p in self.keys._by_digest.values()}


_PROMPTS: dict[str, PromptBuilder] = {}  # the tokenizer loads once per test session


def harness(
    script: Callable[[GenerationRequest], list[Item]] | None = None,
    *,
    gate: asyncio.Event | None = None,
    **overrides: Any,
) -> Harness:
    """A pipeline on the default config (``overrides`` replace its top-level args), both variants reporting."""
    args = default_args()
    args.update(overrides)
    config = load_app_config(args)
    metrics = RecordedMetrics()

    async def snapshot() -> dict[str, list[ReplicaReport]]:
        return {v.name: [_replica(f"{v.name}-1", 4096)] for v in config.variants}

    routing = RoutingTable(config, snapshot)
    keys = KeyStore(config.auth)
    engines = {v.name: FakeEngine(script or (lambda r: answer(8)), gate) for v in config.variants}
    prompts = _PROMPTS.get(config.tokenizer_ref) or _PROMPTS.setdefault(
        config.tokenizer_ref, PromptBuilder(config.tokenizer_ref)
    )
    pipeline = Pipeline(
        config,
        engines=engines,
        routing=routing,
        keys=keys,
        limits=SharedLimits(keys, None),
        prompts=prompts,
        metrics=metrics,  # type: ignore[arg-type]
    )
    return Harness(config, pipeline, engines, metrics, routing, keys)


__all__ = ["FakeEngine", "FakeStream", "Harness", "RecordedMetrics", "answer", "harness"]
