"""The ingress side of routing: live variant views for the pure policy in ``router/``, and its feedback.

The policy itself is a pure function (``router.route``); this module owns what it needs from the running
system: the stats board's latest snapshot (refreshed in the background, a few times a second), the
requests this ingress has in flight per variant (fresher than any report: ``router.inflight``), one
latency model per variant, and the timings that train those models (TTFT at the first token, TPOT at
the close, a lower bound from failures and timeouts).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.kv_blocks import KvEvents, block_hashes
from router import Decision, Prediction, Reason, RequestFeatures, RouterState, VariantView, route
from router.inflight import InflightBook, RouteTicket
from router.latency import new_latency_model
from router.policy import missing_fields, reject_unsupported
from router.prefix_index import IndexSize, PrefixIndex, PrefixMatch, match_prompt
from router.redirect import RedirectedDemand, redirected_from
from router.replica_backlog import best_cached
from router.views import REFRESH_PERIOD_S, variant_view
from serve_app.config import AppConfig
from serve_app.replica_router import CHOICE_STATE
from serve_app.stats_board import ReplicaReport

logger = logging.getLogger("ray.serve")

AFFINITY_KEYS = 1 << 16  # prompt_cache_key / x-session-id values remembered, least recent forgotten first
_UNKNOWN_CONTEXT = 1 << 30  # never reported: assume it could hold the request, so the answer is "unavailable"


__all__ = [
    "PrefixLookup",
    "RouteTicket",
    "RoutingTable",
    "starting_serves_at",
]


@dataclass(slots=True)
class PrefixLookup(PrefixMatch):
    """A prompt's :class:`router.prefix_index.PrefixMatch`, with its block hashes per block size (what the index
    notes, where it guesses, once the request's replica is known)."""

    hashes: dict[int, list[int]] = field(default_factory=dict)


NO_PREFIX = PrefixLookup()  # a prompt routed without looking at any cache


def starting_serves_at(snapshot: dict[str, list[ReplicaReport]], now: float) -> dict[str, list[float]]:
    """Per variant, when each of its starting replicas that posted an estimate expects to serve (monotonic s)."""
    out: dict[str, list[float]] = {}
    for name, replicas in snapshot.items():
        for r in replicas:
            if not r.stats.context_length and r.stats.starting_ready_in_s > 0.0:
                out.setdefault(name, []).append(now - r.age_s + r.stats.starting_ready_in_s)
    return out


class RoutingTable:
    def __init__(
        self,
        config: AppConfig,
        snapshot: Callable[[], Awaitable[dict[str, list[ReplicaReport]]]],
        publish: Callable[[str, dict[str, float]], Awaitable[None]] | None = None,
        wake: Callable[[str], Awaitable[Any]] | None = None,
        kv_changes: Callable[[dict[str, int]], Awaitable[dict[str, tuple[int, KvEvents]]]] | None = None,
        index_size: Callable[[str, IndexSize], None] | None = None,
    ) -> None:
        """``snapshot``: the stats board's replicas per variant; ``publish(source, levels)``: where this table
        sends the demand its decisions redirected away from each variant (the board, for the autoscalers);
        ``wake(variant)``: a call to one of the variant's replicas that waits at its handle until one runs;
        ``kv_changes(cursors)``: the board's prefix cache changes since ``cursors`` (``StatsBoard.kv_changes``);
        ``index_size(variant, size)``: told each variant's prefix index size after each refresh (the metrics)."""
        self.config = config
        self._snapshot_fn = snapshot
        self._publish_fn = publish
        self._wake_fn = wake
        self._waking: dict[str, asyncio.Task] = {}
        self._source = uuid.uuid4().hex[:12]
        self._redirected = RedirectedDemand()
        self._published: dict[str, float] = {}
        self._snapshot: dict[str, list[ReplicaReport]] = {}
        # When each variant's starting replicas expect to serve (monotonic s), those that said (starting_serves_at).
        self._starting: dict[str, list[float]] = {}
        self._variants = {v.name: v for v in config.variants}
        self._models = {v.name: new_latency_model(v.latency_profile, config.router) for v in config.variants}
        # The requests this table routed, in flight: the pipeline reports their first token, progress and close to
        # it directly (``InflightBook``), with its own clock.
        self.book = InflightBook(self._models)
        self._report_at: dict[str, float] = {}  # when each variant's figures were measured (monotonic)
        self._state = RouterState()
        # Last context length each variant reported: a variant with no ready replica right now keeps it, so a
        # request that only it could hold is "unavailable, retry" (503) rather than "too long" (400).
        self._known_context: dict[str, int] = {}
        self._task: asyncio.Task | None = None
        # Per variant whose engines reuse prompt blocks, which replica holds which (router/prefix_index.py).
        self._kv_changes_fn = kv_changes
        self._index_size_fn = index_size
        self._kv_cursors: dict[str, int] = {}
        self.prefix: dict[str, PrefixIndex] = {}
        # affinity key -> (variant, replica, whole blocks of its last prompt, the last one's hash), least recent first
        self._affinity: collections.OrderedDict[str, tuple[str, str, int, int]] = collections.OrderedDict()
        if config.router.prefix_routing:
            for v in config.variants:
                spec = v.prefix_cache()
                if spec is not None:
                    self.prefix[v.name] = PrefixIndex(spec[0])

    # ------------------------------------------------------------------ live state

    async def refresh(self) -> None:
        snapshot = await self._snapshot_fn()
        now = time.monotonic()
        # The request routers' view of each replica's prefill backlog (serve_app/replica_router.py), on this clock.
        CHOICE_STATE.note_reports(
            {r.replica: (r.stats.queued_prompt_tokens, now - r.age_s) for rs in snapshot.values() for r in rs}
        )
        # A replica that reports no context length yet is still starting: not ready to route to.
        ready = {name: [r for r in replicas if r.stats.context_length] for name, replicas in snapshot.items()}
        self._snapshot = {name: replicas for name, replicas in ready.items() if replicas}
        self._starting = starting_serves_at(snapshot, now)
        for name, replicas in self._snapshot.items():
            self._known_context[name] = min(r.stats.context_length for r in replicas)
            # The oldest replica's figures date the sum: requests sent since may be in none of them.
            self._report_at[name] = now - max(r.age_s for r in replicas)
        if self.prefix:
            await self._refresh_prefix(snapshot)
        await self._publish_redirected(now)

    async def _refresh_prefix(self, snapshot: dict[str, list[ReplicaReport]]) -> None:
        """Applies the engines' prefix cache changes since the last read; forgets replicas gone from the board."""
        variant_of = {r.replica: name for name, replicas in snapshot.items() for r in replicas}
        for name, replicas in snapshot.items():
            self._follow_block_size(name, replicas)
        if self._kv_changes_fn is not None:
            changes = await self._kv_changes_fn(self._kv_cursors)
            for replica, (seq, events) in changes.items():
                index = self.prefix.get(variant_of.get(replica, ""))
                if index is None:
                    continue
                index.apply(replica, events.stored, events.removed, cleared=events.cleared)
                self._kv_cursors[replica] = seq
        for name, index in self.prefix.items():
            index.retain({r.replica for r in snapshot.get(name, ())})
            if self._index_size_fn is not None:
                self._index_size_fn(name, index.size())
        for gone in [r for r in self._kv_cursors if r not in variant_of]:
            del self._kv_cursors[gone]

    # ------------------------------------------------------------------ prefix caches

    def _follow_block_size(self, variant: str, replicas: list[ReplicaReport]) -> None:
        """Where the engines report another block size than the config implies (a prebuilt TensorRT-LLM engine's
        is its build's), index by theirs from now on: what was indexed is rebuilt from their whole caches."""
        index = self.prefix.get(variant)
        reported = {r.stats.kv_block_tokens for r in replicas if r.stats.kv_block_tokens}
        if index is None or len(reported) != 1 or index.block_tokens in reported:
            return
        self.prefix[variant] = PrefixIndex(reported.pop())
        for r in replicas:
            self._kv_cursors.pop(r.replica, None)

    def prefix_lookup(self, prompt_ids: Sequence[int], affinity_key: str | None = None) -> PrefixLookup:
        """What each variant's replicas hold of this prompt (``NO_PREFIX`` where no variant reuses blocks).

        ``affinity_key`` (OpenAI's ``prompt_cache_key``, or the ``x-session-id`` header): where the key's previous
        request went to a replica that is still up and this prompt starts with that request's whole prompt, the
        replica is taken to hold it, even before its engine's report says so (the report lags the request by up
        to a stats period and a refresh: an agent's next turn often comes sooner)."""
        if not self.prefix:
            return NO_PREFIX
        now = time.monotonic()
        hashes = {size: block_hashes(prompt_ids, size) for size in {i.block_tokens for i in self.prefix.values()}}
        backlogs = lambda name: self._backlogs(name, now)  # noqa: E731  (asked of the variants holding some)
        match = match_prompt(self.prefix, hashes, len(prompt_ids), backlogs, now)
        lookup = PrefixLookup(cached=match.cached, best=match.best, hashes=hashes)
        if affinity_key is not None:
            self._apply_affinity(lookup, affinity_key, len(prompt_ids), backlogs)
        return lookup

    def _apply_affinity(
        self, lookup: PrefixLookup, key: str, prompt_tokens: int, backlogs: Callable[[str], dict[str, float]]
    ) -> None:
        seen = self._affinity.get(key)
        if seen is None:
            return
        variant, replica, blocks, last = seen
        index = self.prefix.get(variant)
        hashes = lookup.hashes.get(index.block_tokens, []) if index is not None else []
        if index is None or not 0 < blocks <= len(hashes) or hashes[blocks - 1] != last:
            return  # not a continuation of that prompt
        if replica not in {r.replica for r in self._snapshot.get(variant, ())}:
            return
        credit = min(blocks * index.block_tokens, max(prompt_tokens - 1, 0))
        cached = lookup.cached.setdefault(variant, {})
        if credit > cached.get(replica, 0):
            cached[replica] = credit
            lookup.best[variant] = best_cached(backlogs(variant), cached, prompt_tokens)

    def _backlogs(self, variant: str, now: float) -> dict[str, float]:
        """Each ready replica's unprefilled prompt tokens as last reported, less what it prefilled since."""
        tokens_per_ms = 1.0 / max(self._models[variant].prefill_ms_per_token, 1e-9)
        return {
            r.replica: max(0.0, r.stats.queued_prompt_tokens - 1000.0 * r.age_s * tokens_per_ms)
            for r in self._snapshot.get(variant, ())
        }

    def note_routed(self, variant: str, replica: str, lookup: PrefixLookup, affinity_key: str | None = None) -> None:
        """The request went to ``replica``: where its engine reports nothing, the index assumes it holds the prompt;
        the affinity key, if any, remembers where its prompt went (``prefix_lookup``)."""
        index = self.prefix.get(variant)
        if index is None:
            return
        hashes = lookup.hashes.get(index.block_tokens, [])
        if not index.is_precise(replica):
            index.note_routed(replica, hashes, time.monotonic())
        if affinity_key is not None and hashes:
            self._affinity[affinity_key] = (variant, replica, len(hashes), hashes[-1])
            self._affinity.move_to_end(affinity_key)
            while len(self._affinity) > AFFINITY_KEYS:
                self._affinity.popitem(last=False)

    async def _publish_redirected(self, now: float) -> None:
        # Only changes are sent (nothing at all while nothing is redirected); the board forgets a silent
        # ingress after its stale period, so a level that fell to zero is sent once as an empty dict.
        levels = self._redirected.levels(now)
        if self._publish_fn is not None and levels != self._published:
            await self._publish_fn(self._source, levels)
            self._published = levels

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def _refresh_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a board restart must not stop routing: keep the last snapshot
                logger.warning("could not refresh variant stats", exc_info=True)
            await asyncio.sleep(REFRESH_PERIOD_S)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def views(self) -> list[VariantView]:
        """Each variant as its ready replicas last reported it (``router.views.variant_view``), with this ingress's
        own requests in flight."""
        now = time.monotonic()
        views = []
        for name, variant in self._variants.items():
            replicas = self._snapshot.get(name)
            view = variant_view(
                name,
                quality=variant.quality,
                cost_per_1k_tokens=variant.cost_per_1k_tokens,
                latency=self._models[name],
                sampling_fields=variant.engine.sampling_fields(),
                replicas=[r.stats for r in replicas] if replicas else [],
                starting_serves_at=self._starting.get(name, ()),
                known_context_length=self._known_context.get(name, _UNKNOWN_CONTEXT),
                now=now,
            )
            # Only a variant with live reports gets this ingress's in-flight requests added (InflightBook.annotate).
            views.append(self.book.annotate(view, now, self._report_at.get(name)) if replicas else view)
        return views

    def has_live_stats(self) -> bool:
        return any(self._snapshot.get(name) for name in self._variants)

    def context_lengths(self) -> dict[str, int]:
        return {
            name: min(r.stats.context_length for r in replicas)
            for name, replicas in self._snapshot.items()
            if replicas and name in self._variants
        }

    # ------------------------------------------------------------------ decisions and feedback

    def decide(self, features: RequestFeatures, prefix: PrefixLookup = NO_PREFIX) -> Decision:
        views = self.views()
        if prefix.cached:
            for view in views:
                view.cached_prompt_tokens = prefix.best.get(view.name, 0)
                view.max_cached_tokens = max(prefix.cached.get(view.name, {}).values(), default=0)
        decision = route(features, views, self.config.router, self._state)
        redirected = redirected_from(decision, features, views, self.config.router)
        if redirected is not None:  # spilled or shed while its variant was full: demand for that one's autoscaler
            self._redirected.add(redirected[0], time.monotonic(), redirected[1])
            if not self._snapshot.get(redirected[0]):
                self._wake(redirected[0])
        return decision

    def _wake(self, variant: str) -> None:
        """Starts a variant scaled to zero that requests would prefer, without making any of them wait for it.

        At zero replicas nothing reports, so no autoscaler sees the redirected demand; Serve's cold-start path
        starts a replica as soon as a request waits at the variant's handle. The requests themselves go where
        they meet their SLO (or are refused); this one call waits at the handle instead, bounded by the request
        timeout, one at a time per variant. Once the replica runs, its reports carry the rest of the demand.
        """
        if self._wake_fn is None or variant in self._waking:
            return
        timeout_s = self.config.limits.request_timeout_s
        wake_fn = self._wake_fn

        async def wake() -> None:
            try:
                await asyncio.wait_for(wake_fn(variant), timeout=timeout_s)
            except Exception:  # a failed wake-up is retried by the next redirected request
                logger.warning("could not wake variant %s", variant, exc_info=True)
            finally:
                self._waking.pop(variant, None)

        self._waking[variant] = asyncio.get_running_loop().create_task(wake())

    def fallback(self, features: RequestFeatures) -> Decision:
        """Where a request goes while no variant has reported yet (right after a deploy): the pinned or default
        variant rather than a refusal, or else the first whose backend implements every sampling field the request
        asks for; a 400 naming a field when none (or not the pinned one) does."""
        views = {v.name: v for v in self.views()}
        default = self.config.default_variant_name
        names = [features.pinned] if features.pinned else [default, *(n for n in views if n != default)]
        candidates = [views[name] for name in names if name in views]
        capable = next((v for v in candidates if not missing_fields(features, v)), None)
        if capable is None:
            return reject_unsupported(features, candidates)
        return Decision(capable.name, Reason.NO_LIVE_STATS, {})

    def open(
        self,
        variant: str,
        prompt_tokens: int,
        prediction: Prediction | None,
        *,
        max_tokens: int = 0,
        arrived_at: float | None = None,
        cached_tokens: int = 0,
    ) -> RouteTicket:
        """Books a request sent to ``variant`` (``arrived_at``: when the ingress took it, the start of the TTFT
        its model learns); ``ticket.headers()`` are its predicted-latency headers."""
        replicas = len(self._snapshot.get(variant, ())) or 1
        return self.book.open(
            variant,
            prompt_tokens,
            prediction,
            time.monotonic(),
            max_tokens=max_tokens,
            replicas=replicas,
            arrived_at=arrived_at,
            cached_tokens=cached_tokens,
        )
