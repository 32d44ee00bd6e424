"""One Serve deployment per variant: each replica owns one started engine and streams its deltas."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator

import ray
from ray import serve

from core.errors import EngineDeadError
from engines.factory import make_engine
from engines.kv_blocks import KvEvents
from engines.protocol import Delta, EngineStats, GenerationRequest
from router.serve_autoscaling import engine_metrics
from router.views import STATS_PERIOD_S
from serve_app.autoscaling import RecentLatency
from serve_app.config import VariantConfig
from serve_app.delta_channel import ON_CHANNEL, ChannelOffer, ChannelServer, OnChannel
from serve_app.metrics import EngineMetrics
from serve_app.stop_notice import StopWatch

logger = logging.getLogger("ray.serve")

# From the engine's start returning to the replica's first request, on a busy 2-core machine during a step: Serve's
# start-up collection, first health check and control-loop tick, the long poll to the ingresses and their routing
# tasks (measured: 0.3 s at the median, 0.45 s at most).
SERVING_AFTER_ENGINE_START_S = 0.5


class EngineDeployment:
    """Bound once per variant by ``serve_app.app.build_app`` with that variant's deployment options."""

    async def __init__(self, variant: dict, board) -> None:  # type: ignore[misc]  # Serve awaits async constructors
        self.variant = VariantConfig.model_validate(variant)
        engine_config = self.variant.engine
        if engine_config.backend == "hf":
            # Ray gives replicas with fractional CPUs one OpenMP thread; use what the replica reserved.
            resources = self.variant.resources
            engine_config = engine_config.for_replica(resources.num_cpus, resources.num_gpus)
        self.engine = make_engine(engine_config)
        self._latency = RecentLatency()  # recent TTFT/TPOT, for the autoscaling policy
        self._redirected = 0.0  # requests spilled or shed away from this variant (router.redirect), via the board
        self._board = board
        self._kv_pending: KvEvents | None = None  # prefix cache changes not yet on the board
        self._replica = serve.get_replica_context().replica_id.unique_id
        # Beside the engine's start, not before it: at a first deploy the board may not serve yet.
        self._starting_post = asyncio.create_task(self._post_starting())
        # The ingresses' delta channels (serve_app/delta_channel): on the node's address, which every node reaches.
        self._channels = ChannelServer()
        await self._channels.start(ray.util.get_node_ip_address())
        await self.engine.start()
        self._metrics = EngineMetrics(self.variant.name)
        self._poster = asyncio.create_task(self._post_stats_forever())
        # Under `variant-serve run`: the engine stops at the server's stop notice, before Serve's shutdown cuts the
        # proxy, so that open streams end with an error event their clients still receive (serve_app/stop_notice).
        self._open_streams = 0
        self._streams_ended = asyncio.Event()
        self._engine_stopping: asyncio.Task[None] | None = None
        self._stop_watch = StopWatch.start(self._replica, self._stop_for_good)

    async def _stop_for_good(self) -> None:
        """The server is stopping: shuts the engine down, which ends every open stream with ``EngineDeadError``;
        returns once those have ended (the engine's own process may take longer to exit: ``__del__`` waits)."""
        self._streams_ended.clear()
        self._engine_stopping = asyncio.create_task(self.engine.shutdown())
        if self._open_streams:
            ended = asyncio.create_task(self._streams_ended.wait())
            await asyncio.wait([ended, self._engine_stopping], return_when=asyncio.FIRST_COMPLETED)
            ended.cancel()

    async def generate(
        self, request: GenerationRequest, reply_to: tuple[str, int] | None = None
    ) -> AsyncIterator[Delta | ChannelOffer | OnChannel]:
        """The request's deltas, over Serve's stream; or, with ``reply_to`` (the caller's channel id and this
        request's key on it) from an ingress connected to this replica, on its channel, Serve's stream carrying
        only :data:`ON_CHANNEL` and then its end or the engine's error. A caller with a channel this replica has no
        connection from gets the replica's :class:`ChannelOffer` first."""
        # aclosing: a cancelled or abandoned stream closes the engine's iterator, which aborts the request.
        self._latency.started(request.request_id)  # queue wait, for the autoscaling policy, until a first token
        link, key = None, 0
        self._open_streams += 1
        try:
            if reply_to is not None:
                channel_id, key = reply_to
                link = self._channels.sender(channel_id)
                yield ON_CHANNEL if link is not None else self._channels.offer
            async with contextlib.aclosing(self.engine.generate(request)) as stream:
                async for delta in stream:
                    if delta.token_ids:
                        self._latency.first_token(request.request_id)
                    self._latency.observe(delta)
                    if link is None:
                        yield delta
                    elif not link.send(key, delta):
                        raise EngineDeadError("The ingress's channel to this engine replica closed mid-stream.")
        finally:
            self._latency.first_token(request.request_id)
            self._open_streams -= 1
            if not self._open_streams:
                self._streams_ended.set()

    def info(self) -> dict:
        return {
            "name": self.variant.name,
            "context_length": self.engine.context_length,
            "pid": os.getpid(),
            "replica": self._replica,  # the id its stats are posted under (GET /variants replica_stats)
            "node": ray.get_runtime_context().get_node_id(),
            "delta_channels": self._channels.connected(),  # the ingress channels connected to it, by id
            "delta_channel_deltas": self._channels.deltas_sent,
        }

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's autoscaling hook (Ray 2.60): the engine's load for the engine_load policy, every few seconds."""
        return engine_metrics(self.engine.stats(), self._latency, self._redirected)

    async def check_health(self) -> None:
        if self._stop_watch is not None and self._stop_watch.stopping:
            return  # stopped on purpose, about to be deleted: not a failure for Serve to replace
        await self.engine.check_health()

    async def _post_starting(self) -> None:
        """Tells the ingresses, through the board, when this replica expects to serve, where its engine knows how long
        its start takes: their routers count its batch slots from then (``router.load``), so that during a
        scale-up they admit what it can serve in time instead of refusing it. Best effort, bounded: a start never
        waits on the board."""
        expected_s = self.engine.expected_startup_s
        if not expected_s:
            return
        stats = EngineStats(starting_ready_in_s=expected_s + SERVING_AFTER_ENGINE_START_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._board.post.remote(self.variant.name, self._replica, stats), timeout=1.0)

    async def _post_stats_forever(self) -> None:
        await self._starting_post  # bounded; so that the starting post never lands after the first stats
        while True:
            try:
                stats = self.stats()
                stats.kv_block_tokens = self.engine.kv_block_tokens or 0  # what the routers hash prompts by
                self._metrics.set(stats)
                # The answer: the demand the ingresses redirected away from this variant, for the autoscaler.
                kv = self._unposted_kv()  # None: the engine tells nothing of its prefix cache
                answer = await self._board.post.remote(self.variant.name, self._replica, stats, kv)
                self._kv_pending = None
                self._redirected = float(answer or 0.0)
            except Exception:  # the board restarting must not take the engine down
                logger.warning("could not post stats to the board", exc_info=True)
            await asyncio.sleep(STATS_PERIOD_S)

    def _unposted_kv(self) -> KvEvents | None:
        """The cache's changes since the last post that reached the board: a failed post's are sent with the next
        one, so that the board's copy of the cache never misses a change."""
        events = self.engine.kv_events()
        if events is None:
            return self._kv_pending
        if self._kv_pending is None:
            self._kv_pending = events
        else:
            self._kv_pending.extend(events)
        return self._kv_pending

    async def __del__(self) -> None:
        self._poster.cancel()
        stopped = self._stop_watch is not None and self._stop_watch.stopping  # the whole server is stopping
        if self._stop_watch is not None:
            await self._stop_watch.close()
        await self._channels.close()
        if stopped:
            if self._engine_stopping is not None:
                await self._engine_stopping  # its process exiting
            return  # and the board goes with the app
        # Bounded: when the whole app is deleted the board may be gone already, and a call to a deployment
        # without replicas waits forever, which would hold this replica for its whole drain timeout.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._board.remove.remote(self.variant.name, self._replica), timeout=2.0)
        await self.engine.shutdown()
