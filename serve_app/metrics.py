"""Prometheus metrics, exported through Ray's metrics agent (``ray.serve.metrics``).

Ray prefixes application metrics with ``ray_`` on export, so ``vs_ttft_seconds`` is scraped as
``ray_vs_ttft_seconds_bucket`` etc.; Serve adds ``deployment``, ``replica`` and ``application`` tags.
``METRIC_NAMES`` is the list the Grafana dashboard (``docs/grafana-dashboard.json``) is checked against.

Histograms use explicit buckets sized for LLM serving: TTFT from 10 ms to a minute, inter-token latency
from 1 ms to 2 s.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ray.serve import metrics

from core.error_table import row_for
from engines.protocol import EngineStats
from router import Prediction
from router.prefix_index import IndexSize

logger = logging.getLogger("ray.serve")

TTFT_BUCKETS_S = [0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60]
ITL_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2]
E2E_BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600]
# Measured / predicted: 1 is a perfect prediction; the router's margin covers what lies above it.
PREDICTION_RATIO_BUCKETS = [0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 5, 10]

METRIC_NAMES = (
    "vs_requests_total",
    "vs_grpc_requests_total",
    "vs_route_decisions_total",
    "vs_ttft_seconds",
    "vs_itl_seconds",
    "vs_e2e_seconds",
    "vs_prompt_tokens_total",
    "vs_completion_tokens_total",
    "vs_slo_total",
    "vs_cancelled_total",
    "vs_retries_total",
    "vs_route_prediction_ratio",
    "vs_engine_queued_requests",
    "vs_engine_running_requests",
    "vs_engine_kv_used_fraction",
    "vs_engine_tokens_per_s",
    "vs_engine_recent_tpot_ms",
    "vs_engine_prefix_cached_tokens_total",
    "vs_engine_prefix_prompt_tokens_total",
    "vs_engine_prefix_cached_blocks",
    "vs_router_prefix_index_blocks",
)


OK = 200  # how the pipeline says a request succeeded (an HTTP status, whichever protocol carried it)


def grpc_code(status: int, error: BaseException | None) -> str:
    """The gRPC status a gRPC request ended with, by name: its error's (``core/error_table.py``, as
    ``serve_app/grpc_errors.py`` answers it), else OK for a success and CANCELLED for a client that went away."""
    if error is not None:
        return row_for(error).grpc_code
    return "OK" if status == OK else "CANCELLED"


def count_request(
    m: IngressMetrics, tags: dict[str, str], status: int, error: BaseException | None, *, grpc: bool
) -> None:
    """One finished request in its protocol's counter: ``status`` is the pipeline's (HTTP) status, ``error`` what
    ended it (None: a success, or the client went away); a gRPC request is counted by its gRPC code."""
    if grpc:
        m.grpc_requests.inc(1, {**tags, "code": grpc_code(status, error)})
    else:
        m.requests.inc(1, {**tags, "status": str(status)})


def _keys(*names: str) -> Any:
    """Tag keys; Ray annotates them as a 1-tuple, but any tuple of names is what it accepts."""
    return names


class IngressMetrics:
    """What the ingress sees per request: outcome, route, latency, tokens, SLO. Every record is made off the event
    loop (:class:`OffLoopRecorder`)."""

    def __init__(self) -> None:
        recorder = OffLoopRecorder()  # one thread for all of them

        def counter(name: str, description: str, tag_keys: tuple[str, ...]) -> OffLoop:
            return OffLoop(metrics.Counter(name, description, tag_keys=_keys(*tag_keys)), recorder)

        def histogram(name: str, description: str, buckets: list[float], tag_keys: tuple[str, ...]) -> OffLoop:
            return OffLoop(metrics.Histogram(name, description, buckets, tag_keys=_keys(*tag_keys)), recorder)

        self.requests = counter(
            "vs_requests_total", "HTTP requests by variant and HTTP status.", _keys("variant", "status")
        )
        self.grpc_requests = counter(
            "vs_grpc_requests_total",
            "gRPC requests by variant and gRPC status code (its name: OK, INVALID_ARGUMENT, ...).",
            _keys("variant", "code"),
        )
        self.route_decisions = counter(
            "vs_route_decisions_total", "Routing decisions by variant and reason.", _keys("variant", "reason")
        )
        self.ttft = histogram("vs_ttft_seconds", "Time to first token at the ingress.", TTFT_BUCKETS_S, ("variant",))
        self.itl = histogram(
            "vs_itl_seconds", "Inter-token latency (chunk gap / tokens in it).", ITL_BUCKETS_S, ("variant",)
        )
        self.e2e = histogram(
            "vs_e2e_seconds", "Request latency, first byte in to last token out.", E2E_BUCKETS_S, ("variant",)
        )
        self.prompt_tokens = counter("vs_prompt_tokens_total", "Prompt tokens.", ("variant",))
        self.completion_tokens = counter("vs_completion_tokens_total", "Generated tokens.", ("variant",))
        self.slo = counter(
            "vs_slo_total", "Finished requests by whether they met their SLO.", _keys("variant", "outcome")
        )
        self.cancelled = counter(
            "vs_cancelled_total", "Streams the client abandoned (engine request aborted).", ("variant",)
        )
        self.retries = counter(
            "vs_retries_total",
            "Requests sent again because their engine replica stopped before the first token.",
            ("variant",),
        )
        # What the router predicted when it chose the variant against what the request then measured, per
        # variant and measure ('ttft', 'tpot'): a median drifting from 1 is a latency model gone stale (an engine
        # upgraded, a neighbour on the GPU), visible before attainment drops.
        self.prediction_ratio = histogram(
            "vs_route_prediction_ratio",
            "Measured / predicted latency of served requests (the router's mean prediction at its decision).",
            PREDICTION_RATIO_BUCKETS,
            _keys("variant", "measure"),
        )
        # The ingress's own prefix index (router/prefix_index.py): its memory grows with what it holds (about 70 MB
        # per million blocks), so an operator sees it beside the engines' caches it mirrors.
        self._index_blocks = metrics.Gauge(
            "vs_router_prefix_index_blocks",
            "Prompt blocks this ingress's prefix index holds over the variant's replicas, by source "
            "(precise: the engines' reports; approximate: the router's own sends).",
            tag_keys=_keys("variant", "source"),
        )
        self._index_seen: dict[str, IndexSize] = {}

    def prefix_index(self, variant: str, size: IndexSize) -> None:
        """Sets the index gauge of ``variant`` where its size changed (called at every refresh of the table)."""
        if self._index_seen.get(variant) == size:
            return
        self._index_seen[variant] = size
        self._index_blocks.set(size.precise_blocks, {"variant": variant, "source": "precise"})
        self._index_blocks.set(size.approximate_blocks, {"variant": variant, "source": "approximate"})


class EngineMetrics:
    """The engine's live load, set by each engine replica whenever it posts its stats."""

    def __init__(self, variant: str) -> None:
        self._tags = {"variant": variant}
        self.queued = metrics.Gauge("vs_engine_queued_requests", "Requests waiting.", tag_keys=("variant",))
        self.running = metrics.Gauge("vs_engine_running_requests", "Sequences decoding.", tag_keys=("variant",))
        self.kv_used = metrics.Gauge("vs_engine_kv_used_fraction", "KV cache in use, 0..1.", tag_keys=("variant",))
        self.tokens_per_s = metrics.Gauge("vs_engine_tokens_per_s", "Recent output tokens/s.", tag_keys=("variant",))
        self.recent_tpot = metrics.Gauge(
            "vs_engine_recent_tpot_ms",
            "Recent mean ms between a running sequence's tokens (the router's TPOT floor; 0: idle).",
            tag_keys=("variant",),
        )
        # The prefix cache, where the engine reports one: counters, so that replicas add up and the hit rate is
        # rate(vs_engine_prefix_cached_tokens_total) / rate(vs_engine_prefix_prompt_tokens_total).
        self.cached_tokens = metrics.Counter(
            "vs_engine_prefix_cached_tokens_total",
            "Prompt tokens the engine took from its prefix cache instead of prefilling them.",
            tag_keys=("variant",),
        )
        self.prompt_tokens = metrics.Counter(
            "vs_engine_prefix_prompt_tokens_total",
            "Prompt tokens the engine admitted, where it reports a prefix cache (the hit rate's denominator).",
            tag_keys=("variant",),
        )
        self.cached_blocks = metrics.Gauge(
            "vs_engine_prefix_cached_blocks", "KV blocks the prefix cache holds.", tag_keys=("variant",)
        )
        self._cache_seen = (0, 0)  # the cumulative (cached, prompt) tokens already counted

    def set(self, stats: EngineStats) -> None:
        self.queued.set(stats.queued_requests, self._tags)
        self.running.set(stats.running_requests, self._tags)
        self.kv_used.set(stats.kv_used_fraction, self._tags)
        self.tokens_per_s.set(stats.tokens_per_s, self._tags)
        self.recent_tpot.set(stats.recent_tpot_ms, self._tags)
        if stats.kv_block_tokens:
            self.cached_blocks.set(stats.cached_blocks, self._tags)
            cached, prompt = self._cache_seen
            if stats.cache_hit_tokens > cached:
                self.cached_tokens.inc(stats.cache_hit_tokens - cached, self._tags)
            if stats.cache_prompt_tokens > prompt:
                self.prompt_tokens.inc(stats.cache_prompt_tokens - prompt, self._tags)
            self._cache_seen = (stats.cache_hit_tokens, stats.cache_prompt_tokens)


_Record = Callable[[float, "dict[str, str] | None"], None]  # a Ray metric's inc or observe


class OffLoopRecorder:
    """Ray metric records made by a background thread instead of the caller.

    Ray's metric record releases the GIL (Cython ``with nogil``); on a busy ingress the event loop then waits for
    it to come back, many times its CPU cost (docs/measurements.md has the figures). A request made ~9 of them on
    the loop, two before its first token went out (the route decision, the TTFT), and a streamed chunk one more.
    Callers only append (record, value, tags) here; a daemon thread makes the records every ``period_s``, in order.
    Same records, same tags (none of ours comes from the request context: Serve adds a route tag only to metrics
    that declare one). At most ``max_pending`` wait, the oldest dropped beyond that.
    """

    def __init__(self, period_s: float = 0.25, max_pending: int = 1 << 16) -> None:
        self._period_s = period_s
        self._pending: collections.deque[tuple[_Record, float, dict[str, str] | None]] = collections.deque(
            maxlen=max_pending
        )
        self._thread: threading.Thread | None = None

    def submit(self, record: _Record, value: float, tags: dict[str, str] | None) -> None:
        self._pending.append((record, value, tags))  # atomic under the GIL; never blocks
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vs-metrics-recorder", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        pending = self._pending
        while True:
            time.sleep(self._period_s)
            while pending:
                record, value, tags = pending.popleft()
                try:
                    record(value, tags)
                except Exception:  # one bad record must not stop the others for the replica's life
                    logger.warning("could not record an ingress metric", exc_info=True)


class OffLoop:
    """A Ray counter or histogram whose ``inc`` / ``observe`` an :class:`OffLoopRecorder` makes."""

    __slots__ = ("_metric", "_recorder")

    def __init__(self, metric: Any, recorder: OffLoopRecorder) -> None:
        self._metric, self._recorder = metric, recorder

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        self._recorder.submit(self._metric.inc, value, tags)

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        self._recorder.submit(self._metric.observe, value, tags)


class RequestRecorder:
    """Per-request bookkeeping for the ingress metrics: chunk gaps, then one summary at the end."""

    __slots__ = ("_last_at", "_last_tokens", "_m", "_predicted", "_slo", "_start", "_tags", "first_at")

    def __init__(
        self,
        m: IngressMetrics,
        variant: str,
        slo_ttft_ms: float | None,
        slo_tpot_ms: float | None,
        prediction: Prediction | None = None,
    ) -> None:
        self._m = m
        self._tags = {"variant": variant}
        self._slo = (slo_ttft_ms, slo_tpot_ms)
        self._predicted = None if prediction is None else (prediction.ttft_ms, prediction.tpot_ms)
        self._start = time.monotonic()
        self.first_at: float | None = None
        self._last_at = self._start
        self._last_tokens = 0

    def chunk(self, completion_tokens: int) -> None:
        now = time.monotonic()
        new = completion_tokens - self._last_tokens
        if self.first_at is None:
            self.first_at = now
            self._m.ttft.observe(now - self._start, self._tags)
        elif new > 0:
            self._m.itl.observe((now - self._last_at) / new, self._tags)
        self._last_at, self._last_tokens = now, completion_tokens

    def finish(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        status: int,
        *,
        cancelled: bool = False,
        error: BaseException | None = None,
        grpc: bool = False,
    ) -> None:
        m, tags = self._m, self._tags
        count_request(m, tags, status, error, grpc=grpc)
        if cancelled:
            m.cancelled.inc(1, tags)
        if prompt_tokens:  # Ray's counters refuse increments of 0
            m.prompt_tokens.inc(prompt_tokens, tags)
        if completion_tokens:
            m.completion_tokens.inc(completion_tokens, tags)
        if status != OK or cancelled or self.first_at is None:
            return
        now = time.monotonic()
        m.e2e.observe(now - self._start, tags)
        ttft_ms = 1000 * (self.first_at - self._start)
        tpot_ms = 1000 * (now - self.first_at) / (completion_tokens - 1) if completion_tokens > 1 else 0.0
        slo_ttft, slo_tpot = self._slo
        met = (slo_ttft is None or ttft_ms <= slo_ttft) and (slo_tpot is None or tpot_ms <= slo_tpot)
        m.slo.inc(1, {**tags, "outcome": "met" if met else "missed"})
        if self._predicted is not None:
            predicted_ttft, predicted_tpot = self._predicted
            if predicted_ttft > 0:
                m.prediction_ratio.observe(ttft_ms / predicted_ttft, {**tags, "measure": "ttft"})
            if predicted_tpot > 0 and completion_tokens > 1:
                m.prediction_ratio.observe(tpot_ms / predicted_tpot, {**tags, "measure": "tpot"})
